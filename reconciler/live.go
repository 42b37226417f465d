package reconciler

import (
	"strings"
	"time"
)

// Which rollouts a tick must see, and which rollout drives a host: rules
// the control plane applies outside a tick (to load an Input, to answer a
// check-in), decided here so that they are decided once (rfcs/0003
// §Input).

// Newer reports whether a rollout opened at (opened, id) is newer than one
// opened at (otherOpened, otherID): by opening time, then by id, the order
// a tick sees rollouts in. A channel's latest rollout is its newest.
func Newer(opened time.Time, id string, otherOpened time.Time, otherID string) bool {
	if c := opened.Compare(otherOpened); c != 0 {
		return c > 0
	}
	return strings.Compare(id, otherID) > 0
}

// LiveFacts is what liveness needs to know of a rollout beyond its state.
type LiveFacts struct {
	// Latest: it is its channel's newest rollout.
	Latest bool
	// HostInFlight: one of its hosts is in flight (HostState.InFlight).
	HostInFlight bool
	// Intended: an unconsumed intent names it.
	Intended bool
}

// Live reports whether a tick must see a rollout: one that can still move
// a host or take part in a decision. That is every rollout that is not
// terminal; every Cancelled one (its hosts in flight land, and it counts
// toward budgets); its channel's latest (skipped hosts catch up, a new
// release is compared with it, only it can be rolled back); one with a
// host in flight (it holds the host and budget slots); and one an
// unconsumed intent names (the intent is judged, not found unknown).
// Reconcile decides the same from the live rollouts as from every rollout
// (the property TestPropertyLiveRolloutsSuffice).
func Live(state RolloutState, f LiveFacts) bool {
	return !state.Terminal() || state == RolloutCancelled || f.Latest || f.HostInFlight || f.Intended
}

// LiveRollouts returns the rollouts of in that Live keeps, in their order.
func LiveRollouts(in Input) []Rollout {
	latest := map[string]*Rollout{}
	for i := range in.Rollouts {
		r := &in.Rollouts[i]
		if cur, ok := latest[r.Channel]; !ok || Newer(r.OpenedAt, r.ID, cur.OpenedAt, cur.ID) {
			latest[r.Channel] = r
		}
	}
	intended := map[string]bool{}
	for _, it := range in.Intents {
		intended[it.RolloutID] = true
	}
	var out []Rollout
	for i := range in.Rollouts {
		r := &in.Rollouts[i]
		f := LiveFacts{Latest: latest[r.Channel] == r, Intended: intended[r.ID]}
		for _, h := range r.Hosts {
			if h.State.InFlight() {
				f.HostInFlight = true
				break
			}
		}
		if Live(r.State, f) {
			out = append(out, *r)
		}
	}
	return out
}

// Drives reports whether a host's record a, in a rollout opened at
// aOpened, drives the host rather than its record b in another rollout
// opened at bOpened: the rollout where the host is in flight drives it
// (one rollout at a time, rule 5), else the newest that lists it. The
// record a host's check-in is answered from (its Assignment) is the one
// that drives it among the live rollouts.
func Drives(a Assignment, aOpened time.Time, b Assignment, bOpened time.Time) bool {
	if af, bf := a.Host.State.InFlight(), b.Host.State.InFlight(); af != bf {
		return af
	}
	return Newer(aOpened, a.RolloutID, bOpened, b.RolloutID)
}
