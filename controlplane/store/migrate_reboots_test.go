package store_test

import (
	"fmt"
	"testing"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestMigrateReboots: 0021_reboots keeps every host row of a rollout kept
// before it (SQLite rebuilds the table to change its state constraint),
// the rollout orders no reboot, and a host may then be Rebooting.
func TestMigrateReboots(t *testing.T) {
	const before = 20 // the migrations of a database kept before 0021
	rollout := `INSERT INTO rollouts (id, channel, ref, state, wave, wave_phase, opened_at, wave_started_at, updated_at,
		progress_at, reason, manifest_hash, failures_forgiven, frozen, wave_soaks) VALUES ('stable@r', 'stable', 'r', 'Active', 0, 'dispatching',
		1, 1, 1, 1, '{}', 'mh', 0, '{"waves":[{"soakMinutes":10}]}', '10')`
	host := `INSERT INTO rollout_hosts (rollout_id, hostname, wave, target, state, since, previous, reason, blocked, budgets)
		VALUES ('stable@r', '%s', 0, 'aaaa-t', '%s', 1, 'bbbb-p', '{}', '{}', '[]')`
	states := map[string]reconciler.HostState{"a": reconciler.HostPending, "b": reconciler.HostActivating, "c": reconciler.HostDeferred}
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			url, run := oldDatabase(t, backend, before)
			run(rollout)
			for name, st := range states {
				run(fmt.Sprintf(host, name, st))
			}
			s, err := store.Open(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			r, err := s.Rollout(t.Context(), "stable@r")
			if err != nil {
				t.Fatal(err)
			}
			if r.Reboot != nil || len(r.Hosts) != len(states) {
				t.Fatalf("after the migration: reboot %v, %d hosts, want none and %d", r.Reboot, len(r.Hosts), len(states))
			}
			for _, h := range r.Hosts {
				if h.State != states[h.Hostname] || h.Target != "aaaa-t" || h.Previous != "bbbb-p" {
					t.Errorf("host %s after the migration: %+v", h.Hostname, h)
				}
			}
			run(fmt.Sprintf(host, "d", reconciler.HostRebooting))
		})
	}
}
