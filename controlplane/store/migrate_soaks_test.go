package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nixfleet/nixfleet/controlplane/store"
)

// TestMigrateWaveSoaks: a rollout kept before 0016_wave_soaks gets its
// waves' soaks from its frozen plan, in wave order; one without waves gets
// none.
func TestMigrateWaveSoaks(t *testing.T) {
	const before = 15 // the migrations of a database kept before 0016
	insert := `INSERT INTO rollouts (id, channel, ref, state, wave, wave_phase, opened_at, wave_started_at, updated_at,
		progress_at, reason, manifest_hash, failures_forgiven, frozen) VALUES ('%s', 'stable', 'r', 'Active', 0, 'dispatching',
		1, 1, 1, 1, '{}', 'mh', 0, '%s')`
	rollouts := map[string]string{
		"three": `{"waves":[{"soakMinutes":10},{"name":"rest","soakMinutes":0,"windows":[]},{"soakMinutes":45}],"edges":[]}`,
		"none":  `{"waves":null}`,
		"empty": `{"waves":[]}`,
	}
	want := map[string]string{"three": "10,0,45", "none": "", "empty": ""}
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			url, run := oldDatabase(t, backend, before)
			for id, fz := range rollouts {
				run(fmt.Sprintf(insert, id, fz))
			}
			s, err := store.Open(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for id, w := range want {
				got, err := s.(interface {
					WaveSoaksRaw(context.Context, string) (string, error)
				}).WaveSoaksRaw(t.Context(), id)
				if err != nil || got != w {
					t.Errorf("%s: wave_soaks %q (%v), want %q", id, got, err, w)
				}
			}
		})
	}
}
