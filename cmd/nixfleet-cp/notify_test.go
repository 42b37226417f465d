package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/controlplane/notify"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/sinktest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestNotificationsAcrossAKill: a webhook sink, configured in the --config
// file, answers 500 while a rollout goes on; nixfleet-cp is killed with
// SIGKILL in the middle of it and started again on the same store; then
// the sink recovers. It receives every event it is sent — the first
// rollout's, and the second's from before and after the kill — exactly
// once, in the journal's order, each signed with its secret.
func TestNotificationsAcrossAKill(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			var up atomic.Bool
			sink := sinktest.New(t, "a-notification-secret", func(int, sinktest.Delivery) int {
				if up.Load() {
					return http.StatusOK
				}
				return http.StatusInternalServerError
			})
			dir := t.TempDir()
			secret := filepath.Join(dir, "notify-secret")
			if err := os.WriteFile(secret, []byte("a-notification-secret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			config := filepath.Join(dir, "cp.toml")
			toml := fmt.Sprintf("[[notifications.webhook]]\nname = \"ops\"\nurl = %q\nsecret-file = %q\nmin-backoff = \"20ms\"\nmax-backoff = \"200ms\"\n",
				sink.URL, secret)
			if err := os.WriteFile(config, []byte(toml), 0o600); err != nil {
				t.Fatal(err)
			}
			// The sink starts at the beginning of this new journal (a sink
			// new to a store starts at its end): every event counts.
			db := dbURL(t, backend)
			st, err := store.Open(context.Background(), db)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.StartNotificationCursor(context.Background(), "ops", 0, time.Now()); err != nil {
				t.Fatal(err)
			}
			st.Close()

			f := newGitFleet(t, threeWaveSpec())
			v0 := f.Release("v0")
			cp := startCP(t, newSite(t), f, db, "cp-1", "--config", config)
			hosts := fleetHosts(f, cp)
			onboard(t, cp, hosts, v0)
			v1 := f.Release("v1")
			cp.Hook()
			eventually(t, 20*time.Second, "wave 0 of v1 converges", func() bool {
				stepAll(t, hosts, "canary")
				ro, ok := getRollout(cp, v1)
				return ok && ro.Wave == 1
			})
			failed := len(sink.Posts())
			if failed == 0 {
				t.Fatal("the sink was sent nothing before the kill")
			}

			cp.Kill()
			cp = cp.Restart()
			up.Store(true)
			converge(t, cp, hosts, v1, 30*time.Second)

			var journal proto.EventList
			if err := cp.Operator().Get(ctx, "/v1/events?limit=10000", &journal); err != nil {
				t.Fatal(err)
			}
			var want []int64
			for _, e := range journal.Events {
				if _, ok := notify.CategoryOf(e); ok {
					want = append(want, e.ID)
				}
			}
			if !containsKind(journal.Events, v1, reconciler.EventWavePromoted) || !containsKind(journal.Events, v1, reconciler.EventRolloutTransition) {
				t.Fatalf("the journal lacks v1's promotion or convergence: %+v", journal.Events)
			}
			t.Logf("%d events to notify; %d POSTs failed before the kill", len(want), failed)
			got := sink.Receive(len(want), 30*time.Second)
			if d := cmp.Diff(want, sinktest.Ids(got)); d != "" {
				t.Errorf("delivered (-journal +sink):\n%s", d)
			}
			for _, d := range got {
				if !d.Signed || d.ID != fmt.Sprintf("ops/%d", d.EventID) || d.Message.Event.ID != d.EventID {
					t.Errorf("delivery %s: signed %v, body %s", d.ID, d.Signed, d.Body)
				}
			}

			// Once the replica has stopped, nothing was delivered twice.
			cp.cleanup()
			delivered := map[string]int{}
			for _, p := range sink.Posts() {
				if p.Status/100 == 2 {
					delivered[p.ID]++
				}
			}
			for id, n := range delivered {
				if n != 1 {
					t.Errorf("%s delivered %d times", id, n)
				}
			}
			if len(delivered) != len(want) {
				t.Errorf("%d events delivered, want %d", len(delivered), len(want))
			}
		})
	}
}

// containsKind reports whether a rollout's events include one of a kind.
func containsKind(evs []proto.Event, rollout, kind string) bool {
	for _, e := range evs {
		if e.RolloutID == rollout && e.Kind == kind {
			return true
		}
	}
	return false
}
