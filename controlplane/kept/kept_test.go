package kept_test

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/nixfleet/nixfleet/controlplane/kept"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

// TestPropertyKeptEqualsApplied: the kept input, applied tick after tick,
// is what a store holding every rollout (reconciler.Apply) would load cold:
// its live rollouts (reconciler.LiveRollouts), and for each host the
// assignment reconciler.Drives picks among them. Rollouts open, change
// state, move hosts in and out of flight, and operator intents name
// rollouts that are no longer live, which the store then loads (Add), as
// catchUp does. No SQL: the store's part is conformance-tested in
// package storetest (testKeptEqualsColdLoad).
func TestPropertyKeptEqualsApplied(t *testing.T) {
	hosts := []string{"a", "b", "c", "d"}
	channels := []string{"edge", "stable"}
	rapid.Check(t, func(t *rapid.T) {
		var all rc.Input // every rollout the store holds
		k := kept.New(kept.Lease{Holder: "r", Epoch: 1}, kept.Marks{}, nil, &rc.Input{})
		now := t0
		intents := 0
		for step := range rapid.IntRange(1, 40).Draw(t, "steps") {
			now = now.Add(time.Second)
			in := k.Copy()
			var out rc.Output
			switch what := rapid.IntRange(0, 9).Draw(t, "what"); {
			case what < 3: // a rollout opens
				ro := rc.Rollout{ID: fmt.Sprintf("ro-%d", step), Channel: rapid.SampledFrom(channels).Draw(t, "channel"),
					State: rc.RolloutActive, OpenedAt: now, UpdatedAt: now}
				for _, h := range hosts {
					if rapid.Bool().Draw(t, "lists "+h) {
						ro.Hosts = append(ro.Hosts, rc.RolloutHost{Hostname: h, Target: ro.ID + "-" + h,
							State: rapid.SampledFrom([]rc.HostState{rc.HostPending, rc.HostActivating}).Draw(t, "state"), Since: now})
					}
				}
				out.Rollouts = append(out.Rollouts, rc.RolloutUpdate{New: true, Rollout: ro})
			case what < 5 && len(in.Rollouts) > 0: // a live rollout changes state
				ro := in.Rollouts[rapid.IntRange(0, len(in.Rollouts)-1).Draw(t, "rollout")]
				ro.State = rapid.SampledFrom(rc.RolloutStates).Draw(t, "rollout state")
				ro.UpdatedAt, ro.Hosts = now, nil
				out.Rollouts = append(out.Rollouts, rc.RolloutUpdate{Rollout: ro})
			case what < 8 && len(in.Rollouts) > 0: // a host of a live rollout moves
				ro := in.Rollouts[rapid.IntRange(0, len(in.Rollouts)-1).Draw(t, "rollout")]
				if len(ro.Hosts) == 0 {
					continue
				}
				h := ro.Hosts[rapid.IntRange(0, len(ro.Hosts)-1).Draw(t, "host")]
				h.State, h.Since = rapid.SampledFrom(rc.HostStates).Draw(t, "host state"), now
				out.Hosts = append(out.Hosts, rc.HostUpdate{RolloutID: ro.ID, Host: h})
			case len(all.Rollouts) > 0: // an intent names any rollout; maybe the tick consumes one
				id := all.Rollouts[rapid.IntRange(0, len(all.Rollouts)-1).Draw(t, "named")].ID
				intents++
				all.Intents = append(all.Intents, rc.Intent{ID: fmt.Sprintf("i-%d", intents), RolloutID: id, At: now})
				if !k.Holds(id) && k.Knows(id) {
					ro := *findRollout(all.Rollouts, id)
					ro.Hosts = slices.Clone(ro.Hosts)
					k.Add(&ro) // what catchUp does
				}
				in = k.Copy()
				if rapid.Bool().Draw(t, "consume") {
					out.IntentResults = append(out.IntentResults, rc.IntentResult{IntentID: all.Intents[0].ID})
				}
			}
			in.Intents = slices.Clone(all.Intents)
			k.Apply(&in, &out)
			all = rc.Apply(all, out)
			check(t, k, all)
		}
	})
}

// check compares the kept input with a cold load of all.
func check(t *rapid.T, k *kept.Input, all rc.Input) {
	live := rc.LiveRollouts(all)
	slices.SortFunc(live, func(a, b rc.Rollout) int {
		return cmp.Or(a.OpenedAt.Compare(b.OpenedAt), strings.Compare(a.ID, b.ID))
	})
	got := k.Copy().Rollouts
	if d := gocmp.Diff(live, got, cmpopts.EquateEmpty()); d != "" {
		t.Fatalf("kept rollouts differ from the live rollouts of a cold load (-cold +kept):\n%s", d)
	}
	for _, h := range []string{"a", "b", "c", "d"} {
		want := coldAssignment(live, h)
		got := k.Assignment(h)
		switch {
		case want == nil && got == nil:
		case want == nil || got == nil:
			t.Fatalf("host %s: kept assignment %+v, cold %+v", h, got, want)
		case got.RolloutID != want.RolloutID || got.Host.State != want.Host.State || got.RolloutState != want.RolloutState:
			t.Fatalf("host %s: kept assignment %s/%s/%s, cold %s/%s/%s", h, got.RolloutID, got.RolloutState, got.Host.State,
				want.RolloutID, want.RolloutState, want.Host.State)
		}
	}
	if len(k.Assignments()) != countAssigned(live) {
		t.Fatalf("kept assigns %d hosts, a cold load %d", len(k.Assignments()), countAssigned(live))
	}
}

// coldAssignment picks a host's assignment among live rollouts as a cold
// read does.
func coldAssignment(live []rc.Rollout, host string) *rc.Assignment {
	var best *rc.Assignment
	var bestOpened time.Time
	for _, ro := range live {
		for _, h := range ro.Hosts {
			if h.Hostname != host {
				continue
			}
			a := rc.Assignment{RolloutID: ro.ID, Channel: ro.Channel, RolloutState: ro.State, Host: h}
			if best == nil || rc.Drives(a, ro.OpenedAt, *best, bestOpened) {
				best, bestOpened = &a, ro.OpenedAt
			}
		}
	}
	return best
}

func countAssigned(live []rc.Rollout) int {
	seen := map[string]bool{}
	for _, ro := range live {
		for _, h := range ro.Hosts {
			seen[h.Hostname] = true
		}
	}
	return len(seen)
}

func findRollout(rs []rc.Rollout, id string) *rc.Rollout {
	for i := range rs {
		if rs[i].ID == id {
			return &rs[i]
		}
	}
	return nil
}

// TestMarksBelow: counters only grow; a store below what was read lost
// writes.
func TestMarksBelow(t *testing.T) {
	hi := kept.Marks{Changes: 5, Seen: 7, Epoch: 2}
	for _, c := range []struct {
		m    kept.Marks
		want bool
	}{
		{hi, false},
		{kept.Marks{Changes: 6, Seen: 8, Epoch: 2}, false},
		{kept.Marks{Changes: 4, Seen: 9, Epoch: 2}, true},
		{kept.Marks{Changes: 5, Seen: 6, Epoch: 2}, true},
		{kept.Marks{Changes: 9, Seen: 9, Epoch: 1}, true},
	} {
		if got := c.m.Below(hi); got != c.want {
			t.Errorf("%+v below %+v: %v, want %v", c.m, hi, got, c.want)
		}
	}
}

// TestCompareIgnoresWhatCameLate: a host whose status or last-seen time
// was stamped after the kept input's marks is no difference; any other is.
func TestCompareIgnoresWhatCameLate(t *testing.T) {
	keptIn := rc.Input{Hosts: map[string]rc.ObservedHost{"a": {LastSeen: t0, Current: "x"}}}
	cold := rc.Input{Hosts: map[string]rc.ObservedHost{"a": {LastSeen: t0.Add(time.Second), Current: "y"}, "b": {LastSeen: t0}}}
	late := func(l map[string]kept.Late) func([]string) (map[string]kept.Late, error) {
		return func([]string) (map[string]kept.Late, error) { return l, nil }
	}
	d, err := kept.Compare(&keptIn, &cold, nil, late(map[string]kept.Late{"a": {Status: true, Seen: true}, "b": {Seen: true}}))
	if err != nil || d != "" {
		t.Fatalf("late rows: %q, %v; want no difference", d, err)
	}
	d, err = kept.Compare(&keptIn, &cold, nil, late(map[string]kept.Late{"a": {Seen: true}, "b": {Seen: true}}))
	if err != nil || !strings.Contains(d, "host a") {
		t.Fatalf("a status not stamped late: %q, %v; want host a named", d, err)
	}
}
