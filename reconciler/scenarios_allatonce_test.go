package reconciler_test

import (
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// The golden cases of a channel rolled out all at once: its waves.<channel>
// is an empty list, as the reference Nix library writes for a policy of
// strategy "all-at-once" (rfcs/0001 §4.1), so the rollout has one wave
// holding every host, paced by budgets and host edges only (rfcs/0003
// rules 4, 5, 8 and 11).
func init() { scenarios = append(scenarios, allAtOnceScenarios...) }

// lab is two channels side by side: lab, rolled out all at once (five
// hosts, l2 waits for l1, at most two in flight), and stable, a canary (a,
// wave 0) before b and c (wave 1), no soak.
func lab(s *scenario) *fleetkit.Builder {
	return fleetkit.New(s.t).AllAtOnce("lab").
		Member("l1", "lab").Member("l2", "lab").Member("l3", "lab").Member("l4", "lab").Member("l5", "lab").
		Edge("l1", "l2").Budget(proto.Selector{Channel: str("lab")}, 2, 0).
		Channel("stable", 0, 0).Host("a", "stable", 0, "canary").Host("b", "stable", 1).Host("c", "stable", 1)
}

var labHosts = []string{"a", "b", "c", "l1", "l2", "l3", "l4", "l5"}

// wantOneWave checks that a rollout opened in the tick has exactly one
// wave, with no soak, and every host in it.
func wantOneWave(id string) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		for _, u := range out.Rollouts {
			if u.Rollout.ID != id {
				continue
			}
			if len(u.Rollout.Waves) != 1 || u.Rollout.Waves[0].SoakMinutes != 0 {
				t.Fatalf("%s has waves %+v, want one without soak", id, u.Rollout.Waves)
			}
			for _, h := range u.Rollout.Hosts {
				if h.Wave != 0 {
					t.Fatalf("%s: host %s is in wave %d, want 0", id, h.Hostname, h.Wave)
				}
			}
			return
		}
		t.Fatalf("no rollout %s opened:\n%s", id, mustJSON(t, out.Rollouts))
	}
}

var allAtOnceScenarios = []goldenCase{
	{
		name: "rule04-all-at-once-channel-one-wave-under-budget",
		desc: "rule 4: a channel whose wave list is empty (strategy all-at-once) opens with one wave holding all five hosts; they go out together, two at a time by the budget, and l2 waits for l1 by a host edge within the wave; the canary channel next to it dispatches its canary only",
		build: func(s *scenario) {
			s.release(lab(s).Build(), fleetkit.Commit(1)).online(labHosts...)
		},
		check: all(wantOneWave(rid("lab", 1)), wantIntents("l1", "l3", "a"),
			wantBlocked("l2", codes.HostEdge), wantBlocked("l4", codes.Budget), wantBlocked("l5", codes.Budget),
			noEvent(rc.EventWavePromoted)),
	},
	{
		name: "rule05-all-at-once-channel-refills-its-budget",
		desc: "rule 5: l1 and l3 of the all-at-once channel confirm and, without soak, converge in the same tick; the two slots they free go to l2 (its predecessor l1 converged) and l4, still in the one wave; l5 still waits for the budget",
		build: func(s *scenario) {
			s.release(lab(s).Build(), fleetkit.Commit(1)).online(labHosts...).tick().advance(time.Minute)
			s.confirm(rid("lab", 1), "l1", "l3")
		},
		check: all(wantIntents("l2", "l4"), wantEvent(rc.EventHostTransition, "l1", string(rc.HostConverged), ""),
			wantEvent(rc.EventHostTransition, "l3", string(rc.HostConverged), ""), noEvent(rc.EventWavePromoted)),
	},
	{
		name: "rule11-all-at-once-channel-converges-in-its-one-wave",
		desc: "rule 11: the last host of the all-at-once channel converges; its one wave is done and its rollout is Converged, while the canary channel beside it, which promoted its canary's wave, still has b and c of its second wave activating",
		build: func(s *scenario) {
			s.release(lab(s).Build(), fleetkit.Commit(1)).online(labHosts...).tick().advance(time.Minute)
			s.confirm(rid("lab", 1), "l1", "l3").confirm(rid("stable", 1), "a").tick().advance(time.Minute)
			s.confirm(rid("lab", 1), "l2", "l4").tick().advance(time.Minute)
			s.confirm(rid("lab", 1), "l5")
		},
		check: all(wantRolloutMove(rc.RolloutActive, rc.RolloutConverged, codes.Converged), wantIntents(),
			noTransitionTo(rc.HostFailed, rc.HostSkipped), noEvent(rc.EventWavePromoted)),
	},
}
