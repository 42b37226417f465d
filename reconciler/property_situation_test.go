package reconciler_test

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestPropertySituationsAgreeWithTheState: after every tick of the
// chaotic runs (outages, partitions, releases mid-rollout, intents), every
// host's situation (what status and host explain say) has a registered
// code and a message; a host of a rollout that dispatches no more is never
// shown waiting at a gate; a host in flight lands at a known time unless a
// revert sends it back; an answer that does not move names a next step
// unless the host is done.
func TestPropertySituationsAgreeWithTheState(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkSituations) })
}

func checkSituations(_ *rapid.T, c tickCase) []string {
	var problems []string
	next := c.next
	latest := map[string]reconciler.Rollout{} // by (OpenedAt, ID), as the reconciler orders them
	for _, r := range next.Rollouts {
		cur, ok := latest[r.Channel]
		if !ok || r.OpenedAt.After(cur.OpenedAt) || (r.OpenedAt.Equal(cur.OpenedAt) && r.ID > cur.ID) {
			latest[r.Channel] = r
		}
	}
	for _, r := range next.Rollouts {
		dispatching := r.State == reconciler.RolloutActive || r.State == reconciler.RolloutOpening
		for _, h := range r.Hosts {
			online := next.Tunables.Heard(next.Hosts[h.Hostname].LastSeen, next.Now)
			p := reconciler.Place{Rollout: r, Latest: latest[r.Channel].ID == r.ID, Host: h, Online: online}
			s := reconciler.Situate(p, next.Now, next.Tunables)
			what := fmt.Sprintf("%s in %s (%s): %s %+v", h.Hostname, r.ID, r.State, h.State, s)
			catchingUp := r.State == reconciler.RolloutConverged && p.Latest && h.State == reconciler.HostSkipped
			sentBack := r.State == reconciler.RolloutReverting && h.Previous != h.Target &&
				(h.State == reconciler.HostSoaking || h.State == reconciler.HostConverged ||
					h.State == reconciler.HostDeferred || h.State == reconciler.HostFailed)
			switch {
			case s.Message == "" || !codes.Registered(codes.Code(s.Code)):
				problems = append(problems, what+": no message, or an unregistered code")
			case (h.State == reconciler.HostPending || h.State == reconciler.HostSkipped) && !dispatching && !catchingUp &&
				(s.Moves || s.Code != codes.RolloutStopped):
				problems = append(problems, what+": a rollout that dispatches no more shows the host waiting")
			case h.State.InFlight() && !sentBack && (!s.Moves || s.Until.IsZero()):
				problems = append(problems, what+": a host in flight lands by itself, at a known time")
			case !s.Moves && s.Next == "" && h.State != reconciler.HostConverged && h.State != reconciler.HostReverted &&
				r.State != reconciler.RolloutReverting:
				problems = append(problems, what+": nothing moves it and no next step is named")
			}
		}
	}
	return problems
}
