package reconciler_test

// Golden cases of a tick's bound on its work (Tunables.MaxHostMoves,
// rfcs/0003 rule 12).

import (
	"fmt"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

func init() { scenarios = append(scenarios, boundScenarios...) }

// fiveBounded is one channel of one wave of five hosts, a to e, all online.
func fiveBounded(s *scenario, bound int) *scenario {
	b := fleetkit.New(s.t).Channel("stable", 5)
	for _, h := range []string{"a", "b", "c", "d", "e"} {
		b.Host(h, "stable", 0)
	}
	s.in.Tunables.MaxHostMoves = bound
	return s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c", "d", "e")
}

// wantMore checks that the tick said More, or did not.
func wantMore(more bool) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		if out.More != more {
			t.Fatalf("More = %v, want %v", out.More, more)
		}
	}
}

var boundScenarios = []goldenCase{
	{
		name: "rule12-bounded-tick-opens-a-rollout-whole",
		desc: "rule 12: a release opens a rollout of a canary and five hosts in wave 1 under a bound of two moves: the canary is dispatched, the hosts waiting for their wave are written with the new rollout and are no moves, and the tick is done",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 5, 5).Host("a", "stable", 0)
			for _, h := range []string{"b", "c", "d", "e", "f"} {
				b.Host(h, "stable", 1)
			}
			s.in.Tunables.MaxHostMoves = 2
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c", "d", "e", "f")
		},
		check: all(wantIntents("a"), wantMore(false), wantBlocked("f", codes.WaveNotActive)),
	},
	{
		name: "rule12-bounded-tick-dispatches-to-its-bound",
		desc: "rule 12: a release opens a rollout of five hosts under a bound of two host moves: two are dispatched and the tick says More",
		build: func(s *scenario) {
			fiveBounded(s, 2)
		},
		check: all(wantIntents("a", "b"), wantMore(true)),
	},
	{
		name: "rule12-bounded-tick-goes-on-where-it-stopped",
		desc: "rule 12: the tick after a bounded one, at the same time, dispatches the next two hosts",
		build: func(s *scenario) {
			fiveBounded(s, 2).tick()
		},
		check: all(wantIntents("c", "d"), wantMore(true)),
	},
	{
		name: "rule12-bounded-tick-ends-as-one-tick",
		desc: "rule 12: the third tick dispatches the last host and says no more: the rollout is where one tick without the bound leaves it",
		build: func(s *scenario) {
			fiveBounded(s, 2).tick().tick()
		},
		check: all(wantIntents("e"), wantMore(false)),
	},
	{
		name: "rule12-bounded-tick-judges-the-failures-it-saw",
		desc: "rule 12: two of three activating hosts failed, and the bound of one move stops the tick after the first: the failure it observed is judged at once (maxFailures 0), and the rest waits for the next tick",
		build: func(s *scenario) {
			fiveBounded(s, 5).tick().advance(time.Minute)
			s.report(id1, "a", rc.OutcomeFailed).report(id1, "b", rc.OutcomeFailed)
			s.in.Tunables.MaxHostMoves = 1
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Failed", "activation_failed"),
			wantRolloutMove(rc.RolloutActive, rc.RolloutHalted, codes.HealthFailure), wantMore(true),
			func(t *testing.T, out rc.Output) {
				t.Helper()
				if len(out.Hosts) != 1 {
					t.Fatalf("%d host records changed under a bound of one: %v", len(out.Hosts), fmt.Sprint(out.Hosts))
				}
			}),
	},
}
