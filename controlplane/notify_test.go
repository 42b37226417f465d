package controlplane_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/controlplane/notify"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/sinktest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestNotifications: a control plane with three webhook sinks runs two
// rollouts, one of them paused and resumed by an operator:
//
//   - a sink that fails (500) for its first POSTs, then recovers,
//     receives every event it is sent (every category) exactly once, in
//     the journal's order, each with a valid HMAC signature;
//   - a sink filtered to halted and converged rollouts of the channel
//     receives exactly those;
//   - a sink that never answers (its handler holds the first POST) slows
//     nothing: hosts are answered, ticks run, the rollouts converge.
func TestNotifications(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			flaky := sinktest.New(t, "flaky-secret", func(n int, _ sinktest.Delivery) int {
				if n <= 4 {
					return http.StatusInternalServerError
				}
				return http.StatusNoContent
			})
			picky := sinktest.New(t, "picky-secret", nil)
			release := make(chan struct{})
			unblock := sync.OnceFunc(func() { close(release) })
			slow := sinktest.New(t, "", func(int, sinktest.Delivery) int {
				<-release
				return http.StatusOK
			})
			sinks := []notify.Sink{
				{Name: "flaky", URL: flaky.URL, Secret: []byte("flaky-secret"), MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
				{Name: "picky", URL: picky.URL, Secret: []byte("picky-secret"), Channels: []string{"stable"},
					Events: []notify.Category{notify.CategoryHalted, notify.CategoryConverged}},
				{Name: "slow", URL: slow.URL, Timeout: notify.MaxTimeout},
			}
			slowPosted := slow.Posted()
			e := newEnv(t, backend, smallSpec(), func(cfg *controlplane.Config) {
				cfg.Notifications = sinks
				// The sinks start at the beginning of this new journal,
				// not at its end as new sinks do: every event counts.
				st, err := store.Open(context.Background(), cfg.DB)
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				for _, s := range sinks {
					if _, err := st.StartNotificationCursor(context.Background(), s.Name, 0, time.Now()); err != nil {
						t.Fatal(err)
					}
				}
			})
			t.Cleanup(unblock) // before the control plane stops: it finishes the slow POST
			ctx := context.Background()
			hosts := e.hosts()
			e.onboard(hosts)
			<-slowPosted // the slow sink holds its first POST from now on

			// v1: paused while its canary is dispatched, resumed, then
			// converged; the hosts are answered throughout.
			e.release("v1", 2)
			id := rolloutID("stable", 2)
			e.await(10*time.Second, "v1 opens", func() bool { return rolloutState(t, e, id) == reconciler.RolloutActive })
			alice := e.client(e.opKey.priv, "alice")
			for _, action := range []string{"pause", "resume"} {
				if _, _, err := alice.Act(ctx, id, action, "notification test"); err != nil {
					t.Fatalf("%s: %v", action, err)
				}
			}
			e.await(20*time.Second, "v1 converges", func() bool {
				for _, h := range hosts {
					if err := h.Step(ctx, 0); err != nil {
						t.Logf("%s: %v", h.Name, err)
					}
				}
				return rolloutState(t, e, id) == reconciler.RolloutConverged
			})
			// The forecaster journals beside the ticks (its forecasts, and
			// how the first fared once the rollout ended): the journal is
			// complete once it stays the same for a second.
			last, still := -1, time.Time{}
			e.await(20*time.Second, "the journal settles", func() bool {
				var j proto.EventList
				if err := e.client(e.viewKey.priv, "victor").Get(ctx, "/v1/events?limit=10000", &j); err != nil {
					return false
				}
				if len(j.Events) != last {
					last, still = len(j.Events), time.Now()
				}
				return time.Since(still) >= time.Second
			})

			var journal proto.EventList
			if err := e.client(e.viewKey.priv, "victor").Get(ctx, "/v1/events?limit=10000", &journal); err != nil {
				t.Fatal(err)
			}
			var all, stable []int64
			for _, ev := range journal.Events {
				c, ok := notify.CategoryOf(ev)
				if !ok {
					continue
				}
				all = append(all, ev.ID)
				if (c == notify.CategoryHalted || c == notify.CategoryConverged) && ev.Channel == "stable" {
					stable = append(stable, ev.ID)
				}
			}
			kinds := map[notify.Category]bool{}
			for _, ev := range journal.Events {
				if c, ok := notify.CategoryOf(ev); ok {
					kinds[c] = true
				}
			}
			for _, c := range []notify.Category{notify.CategoryRolloutOpened, notify.CategoryWavePromoted, notify.CategoryHalted, notify.CategoryConverged} {
				if !kinds[c] {
					t.Errorf("the journal has no %s event: the test does not show what it means to", c)
				}
			}
			t.Logf("the journal: %d events, %d notified, %d of them halted or converged", len(journal.Events), len(all), len(stable))
			if len(stable) != 3 { // v1 halted; v0 and v1 converged
				t.Errorf("%d halted or converged events, want 3", len(stable))
			}

			check := func(name string, s *sinktest.Sink, secret bool, want []int64) {
				t.Helper()
				got := s.Receive(len(want), 20*time.Second)
				if d := cmp.Diff(want, sinktest.Ids(got)); d != "" {
					t.Errorf("%s received (-journal +got):\n%s", name, d)
				}
				for _, d := range got {
					if d.Signed != secret || d.Message.DeliveryID != d.ID || d.ID != fmt.Sprintf("%s/%d", name, d.EventID) ||
						d.Message.Event.ID != d.EventID || d.Message.Summary == "" {
						t.Errorf("%s: delivery %s: signed %v, body %s", name, d.ID, d.Signed, d.Body)
					}
				}
			}
			check("flaky", flaky, true, all)
			check("picky", picky, true, stable)

			// Every POST after the slow one stays queued behind it; the
			// flaky sink was sent nothing twice once it answered.
			unblock()
			check("slow", slow, false, all)
			m := e.metrics()
			e.stop()
			for _, s := range []struct {
				name  string
				sink  *sinktest.Sink
				posts int
			}{{"flaky", flaky, len(all) + 4}, {"picky", picky, len(stable)}, {"slow", slow, len(all)}} {
				posts := s.sink.Posts()
				if len(posts) != s.posts {
					t.Errorf("%s had %d POSTs, want %d", s.name, len(posts), s.posts)
				}
				seen := map[string]bool{}
				for _, p := range posts {
					if p.Status/100 == 2 && seen[p.ID] {
						t.Errorf("%s: %s delivered twice", s.name, p.ID)
					}
					seen[p.ID] = seen[p.ID] || p.Status/100 == 2
				}
			}
			for series, want := range map[string]float64{
				`nixfleet_notifications_sent_total{sink="flaky"}`:    float64(len(all)),
				`nixfleet_notification_failures_total{sink="flaky"}`: 4,
				`nixfleet_notifications_sent_total{sink="picky"}`:    float64(len(stable)),
			} {
				if got, ok := m[series]; !ok || got != want {
					t.Errorf("%s = %v (%v), want %v", series, got, ok, want)
				}
			}
			if got := m[`nixfleet_notification_cursor{sink="picky"}`]; got < float64(stable[len(stable)-1]) {
				t.Errorf("picky's cursor is at %v, before its last delivery %d", got, stable[len(stable)-1])
			}
			if slices.ContainsFunc(slow.Posts(), func(d sinktest.Delivery) bool { return d.Header.Get("X-Nixfleet-Signature") != "" }) {
				t.Error("a sink without a secret got signed POSTs")
			}
		})
	}
}

// TestReleaseRejectedKind: the notifier's name for the kind of a refused
// release's event is the channel source's.
func TestReleaseRejectedKind(t *testing.T) {
	if notify.EventReleaseRejected != controlplane.EventReleaseRejected {
		t.Errorf("notify.EventReleaseRejected %q, controlplane.EventReleaseRejected %q", notify.EventReleaseRejected, controlplane.EventReleaseRejected)
	}
}
