package controlplane_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/trust"
)

func newOperatorKey(t testing.TB) *keyPair {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &keyPair{priv: priv, pub: trust.SSHEd25519Line(pub)}
}

// smallSpec is one channel, two waves (no soak), four hosts.
func smallSpec() fleetrepo.Spec {
	return fleetrepo.Spec{
		Channels: map[string][]int{"stable": {0, 0}},
		Hosts: []fleetrepo.Host{
			fleetrepo.NewHost("canary", "stable", 0), fleetrepo.NewHost("web-1", "stable", 1),
			fleetrepo.NewHost("web-2", "stable", 1), fleetrepo.NewHost("web-3", "stable", 1),
		},
	}
}

func rolloutState(t *testing.T, e *env, id string) reconciler.RolloutState {
	t.Helper()
	var r proto.Rollout
	if err := e.client(e.viewKey.priv, "victor").Get(context.Background(), "/v1/rollouts/"+id, &r); err != nil {
		return ""
	}
	return reconciler.RolloutState(r.State)
}

// TestRolloutConverges: a release promoted on a channel opens a rollout;
// simulated hosts over HTTPS check in, verify the manifest, confirm; the
// rollout converges wave by wave.
func TestRolloutConverges(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, smallSpec(), nil)
			roots, err := trust.ParseRoots(e.repo.TrustJSON())
			if err != nil {
				t.Fatal(err)
			}
			hosts := e.hosts()
			for _, h := range hosts {
				h.Roots = roots
			}
			e.onboard(hosts)
			e.release("v1", 2)
			ctx := context.Background()
			id := rolloutID("stable", 2)
			defer func() {
				if t.Failed() {
					for name, h := range hosts {
						t.Logf("%s did: %q", name, h.Log)
					}
					var raw json.RawMessage
					_ = e.client(e.viewKey.priv, "victor").Get(ctx, "/v1/rollouts/"+id, &raw)
					t.Logf("rollout: %s", raw)
				}
			}()
			e.await(10*time.Second, "the rollout converges", func() bool {
				for _, h := range hosts {
					if err := h.Step(ctx, 0); err != nil {
						t.Logf("%s: %v", h.Name, err)
					}
				}
				return rolloutState(t, e, id) == reconciler.RolloutConverged
			})
			for name, h := range hosts {
				if t.Failed() {
					t.Logf("%s did: %q", name, h.Log)
				}
				if h.Current() != fleetrepo.Closure(name, "v1") {
					t.Errorf("%s runs %s", name, h.Current())
				}
			}
		})
	}
}

// TestBoundedTicksFollowAtOnce: a tick moves at most
// Tunables.MaxHostMoves hosts and the next follows at once, with nothing
// else to wake it (the ticker's interval is an hour and the clock stands
// still): a push to seven idle hosts under a bound of two dispatches all
// seven in four ticks, three of them partial, and the rollout converges
// as without the bound.
func TestBoundedTicksFollowAtOnce(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			spec := fleetrepo.Spec{Channels: map[string][]int{"stable": {0}}}
			for i := range 7 {
				spec.Hosts = append(spec.Hosts, fleetrepo.NewHost(fmt.Sprintf("web-%d", i), "stable", 0))
			}
			e := newEnv(t, backend, spec, func(c *controlplane.Config) { c.Tunables.MaxHostMoves = 2 })
			hosts := e.hosts()
			e.onboard(hosts)
			partial := `nixfleet_ticks_total{result="partial"}`
			before := e.metrics()[partial]
			e.release("v1", 2)
			ctx := context.Background()
			id := rolloutID("stable", 2)
			var r proto.Rollout
			e.await(10*time.Second, "every host is dispatched, none checking in", func() bool {
				err := e.client(e.viewKey.priv, "victor").Get(ctx, "/v1/rollouts/"+id, &r)
				return err == nil && r.Counts[string(reconciler.HostActivating)] == len(hosts)
			})
			if n := e.metrics()[partial] - before; n < 3 {
				t.Errorf("%v partial ticks dispatched seven hosts under a bound of two, want at least 3", n)
			}
			e.await(10*time.Second, "the rollout converges", func() bool {
				for _, h := range hosts {
					if err := h.Step(ctx, 0); err != nil {
						t.Logf("%s: %v", h.Name, err)
					}
				}
				return rolloutState(t, e, id) == reconciler.RolloutConverged
			})
		})
	}
}

// TestChannelsPushedTogether: refs of two channels moved in one push reach
// the reconciler together (TestPollSignalsOnce), so the channel edge holds
// the gated channel's release even though its name sorts first and it is
// stored first.
func TestChannelsPushedTogether(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			spec := fleetrepo.Spec{Channels: map[string][]int{"prod": {0}, "staging": {0}},
				ChannelEdges: []proto.ChannelEdge{{Gates: "staging", Gated: "prod"}},
				Hosts:        []fleetrepo.Host{fleetrepo.NewHost("prod-1", "prod", 0), fleetrepo.NewHost("stg-1", "staging", 0)}}
			e := newEnv(t, backend, spec, nil)
			hosts := e.hosts()
			ctx := context.Background()
			e.await(20*time.Second, "both hosts converge on the first release", func() bool {
				for _, h := range hosts {
					_ = h.Step(ctx, 0)
				}
				return hostIn(t, e, rolloutID("prod", 1), "prod-1").State == string(reconciler.HostConverged) &&
					hostIn(t, e, rolloutID("staging", 1), "stg-1").State == string(reconciler.HostConverged)
			})
			e.release("v1", 2)
			defer func() {
				if t.Failed() {
					for _, id := range []string{rolloutID("staging", 2), rolloutID("prod", 2)} {
						var raw json.RawMessage
						_ = e.client(e.viewKey.priv, "victor").Get(ctx, "/v1/rollouts/"+id, &raw)
						t.Logf("%s: %s", id, raw)
					}
				}
			}()
			e.await(10*time.Second, "the staging canary is dispatched", func() bool {
				return hostIn(t, e, rolloutID("staging", 2), "stg-1").State == string(reconciler.HostActivating)
			})
			// prod's release waits for staging's rollout: not opened yet,
			// or opened with its canary held by the edge.
			if rolloutState(t, e, rolloutID("prod", 2)) != "" {
				h := hostIn(t, e, rolloutID("prod", 2), "prod-1")
				if h.State != string(reconciler.HostPending) || h.Blocked.Gate != codes.ChannelEdge {
					t.Errorf("prod-1 is %s (blocked by %q) while staging's rollout runs, want Pending behind the channel edge", h.State, h.Blocked.Gate)
				}
			}
		})
	}
}

// TestFollowAcrossARollback: a converged rollout that is its channel's
// latest can be rolled back, so following it does not end at Converged:
// the stream goes on through the rollback and ends when the rollout is
// Reverted, which nothing reopens. With until=terminal it ends at the
// first terminal state.
func TestFollowAcrossARollback(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", smallSpec(), nil)
	hosts := e.hosts()
	e.onboard(hosts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := rolloutID("stable", 1)
	viewer := e.client(e.viewKey.priv, "victor")

	// until=terminal: the converged rollout's stream ends at once.
	if err := viewer.FollowRollout(ctx, id, 0, true, func(proto.Event, json.RawMessage) error { return nil }); err != nil {
		t.Fatalf("following until terminal: %v", err)
	}

	type result struct {
		moves []string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.err = viewer.Follow(ctx, id, 0, func(ev proto.Event, _ json.RawMessage) error {
			if ev.Kind == string(reconciler.EventRolloutTransition) {
				r.moves = append(r.moves, ev.From+"→"+ev.To)
			}
			return nil
		})
		done <- r
	}()
	select {
	case r := <-done:
		t.Fatalf("the stream of a converged latest rollout ended (%v, %v)", r.moves, r.err)
	case <-time.After(1500 * time.Millisecond): // the server ends a stream after a quiet second
	}
	if _, _, err := e.client(e.opKey.priv, "alice").Act(ctx, id, "rollback", "follow test"); err != nil {
		t.Fatal(err)
	}
	e.await(20*time.Second, "the rollback lands", func() bool {
		for _, h := range hosts {
			_ = h.Step(ctx, 0)
		}
		return rolloutState(t, e, id) == reconciler.RolloutReverted
	})
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if !slices.Contains(r.moves, "Converged→Reverting") || !slices.Contains(r.moves, "Reverting→Reverted") {
			t.Fatalf("followed transitions %v, want the rollback through to Reverted", r.moves)
		}
	case <-ctx.Done():
		t.Fatal("the stream did not end when the rollout was Reverted")
	}
}

// TestChangeControl: a maintenance window and a freeze, through the
// store and the API (rfcs/0003 rules 13, 14): hosts outside their window
// wait with the next opening in their explain; a release that declares a
// freeze waits, deferred by it, in the release log.
func TestChangeControl(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			spec := smallSpec()
			e := newEnv(t, backend, spec, func(c *controlplane.Config) {
				// The clock jumps twelve hours below, with no tick in
				// between: hosts heard before the jump are not silent after
				// it, as they would not be with ticks and check-ins all along.
				c.Tunables.OfflineThresholdSeconds = 25 * 3600
			})
			hosts := e.hosts()
			e.onboard(hosts)
			ctx := context.Background()
			viewer := e.client(e.viewKey.priv, "victor")

			// v1 may go out only in a window that is closed now: an hour,
			// starting twelve hours from now, every day.
			opens := e.clock.Now().Add(12 * time.Hour).UTC()
			e.spec.Windows = []proto.Window{{Days: []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"},
				Start: opens.Format("15:04"), DurationMinutes: 60, TimeZone: "UTC"}}
			e.release("v1", 2)
			id := rolloutID("stable", 2)
			e.await(10*time.Second, "the canary waits for its window", func() bool {
				var h proto.HostView
				return viewer.Get(ctx, "/v1/hosts/canary", &h) == nil && h.Rollout == id && h.Explain.Code == codes.Window
			})
			var h proto.HostView
			if err := viewer.Get(ctx, "/v1/hosts/canary", &h); err != nil {
				t.Fatal(err)
			}
			if h.Explain.Until == nil || !strings.Contains(h.Explain.Message, "UTC, in 11 h") || !strings.Contains(h.Explain.Message, "the next opens") {
				t.Errorf("explain: %+v", h.Explain)
			}
			var r proto.Rollout
			if err := viewer.Get(ctx, "/v1/rollouts/"+id, &r); err != nil {
				t.Fatal(err)
			}
			if r.Waiting[codes.Window] != 1 || r.State != string(reconciler.RolloutActive) {
				t.Errorf("rollout %s, waiting %v", r.State, r.Waiting)
			}

			// The window opens: the canary is dispatched.
			e.clock.Advance(12 * time.Hour)
			e.tick()
			e.await(10*time.Second, "the canary is dispatched in its window", func() bool {
				for _, h := range hosts {
					_ = h.Step(ctx, 0)
				}
				return hostState(t, e, id, "canary") != reconciler.HostPending
			})

			// A release declaring a freeze of every channel: it waits for
			// the running rollout, whose next wave the freeze holds once
			// the canary converged; cancelled, the running rollout lets
			// the frozen release come next, and the freeze defers it.
			e.spec.Windows = nil
			e.spec.Freezes = []proto.Freeze{{From: e.clock.Now().Add(-time.Minute), Until: e.clock.Now().Add(24 * time.Hour), Reason: "year-end freeze"}}
			e.release("v2", 3)
			// The hosts act only once the control plane holds the frozen
			// release: else the canary may converge, and its wave promote,
			// before the source has read it.
			e.await(10*time.Second, "the frozen release is verified", func() bool {
				var st proto.Status
				return viewer.Get(ctx, "/v1/status", &st) == nil && len(st.Channels) == 1 && st.Channels[0].Ref == fleetkit.Commit(3)
			})
			e.await(10*time.Second, "the freeze holds the next wave", func() bool {
				for _, h := range hosts {
					_ = h.Step(ctx, 0)
				}
				var r proto.Rollout
				return viewer.Get(ctx, "/v1/rollouts/"+id, &r) == nil && r.Waiting[codes.Freeze] == 3
			})
			if _, _, err := e.client(e.opKey.priv, "alice").Act(ctx, id, reconciler.IntentCancel, "make way"); err != nil {
				t.Fatal(err)
			}
			e.await(10*time.Second, "the frozen release is deferred", func() bool {
				rels, _, err := viewer.Releases(ctx, proto.ReleaseQuery{Channel: "stable"})
				return err == nil && len(rels) > 0 && rels[0].Ref == fleetkit.Commit(3) && rels[0].Reason.Code == codes.Freeze &&
					rels[0].Fate == proto.FateDeferred && strings.Contains(rels[0].Reason.Message, "year-end freeze")
			})
		})
	}
}

// hostState is a host's state in a rollout, read from the API.
func hostState(t *testing.T, e *env, rollout, host string) reconciler.HostState {
	t.Helper()
	var r proto.Rollout
	if err := e.client(e.viewKey.priv, "victor").Get(context.Background(), "/v1/rollouts/"+rollout, &r); err != nil {
		t.Fatal(err)
	}
	for _, h := range r.Hosts {
		if h.Hostname == host {
			return reconciler.HostState(h.State)
		}
	}
	return ""
}
