package reconciler_test

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/nixfleet/nixfleet/reconciler"
)

// TestPropertyReboots: rule 17 under chaos (policies that reboot some
// waves and not others, agents whose boots come up, fall back, stay away
// or never happen, partitions, outages, lost writes, releases pushed at
// any time). After every tick:
//
//  15. a reboot is ordered only for a staged (Deferred) host of a wave
//     whose policy lets the control plane reboot, that is heard, in a
//     channel not in partial visibility; the host is Rebooting after the
//     tick, and so in flight (budgets count it: TestPropertyBudgetsNeverExceeded),
//     and windows and freezes hold it like a dispatch
//     (TestPropertyChangeControl);
//  16. a failed boot is a failure: a Rebooting host whose agent reported
//     that its boot came up on the previous closure is Failed by the
//     tick, where onHealthFailure counts it (TestPropertyHealthPolicyAlwaysApplies);
//  17. only a rollout with a reboot step has hosts Rebooting.
func TestPropertyReboots(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		runChaosWith(t, fleetGenOpts{maxHosts: 200, changeControl: rapid.Bool().Draw(t, "changeControl")}, checkReboots)
	})
}

func checkReboots(_ *rapid.T, c tickCase) []string {
	var problems []string
	s := sightOf(c.in)
	rollouts := map[string]*reconciler.Rollout{}
	for i := range c.next.Rollouts {
		rollouts[c.next.Rollouts[i].ID] = &c.next.Rollouts[i]
	}
	staged := map[[2]string]bool{} // staged in this very tick
	for _, e := range c.out.Events {
		if e.Kind == reconciler.EventHostTransition && e.To == string(reconciler.HostDeferred) {
			staged[[2]string{e.RolloutID, e.Host}] = true
		}
	}
	for _, a := range c.out.Actions {
		if a.Kind != reconciler.ActionReboot {
			continue
		}
		r := rollouts[a.RolloutID]
		before, ok := hostBefore(c.in, a.RolloutID, a.Host)
		switch {
		case r == nil || !ok:
			problems = append(problems, fmt.Sprintf("reboot of %s in unknown rollout %s", a.Host, a.RolloutID))
			continue
		case before.State != reconciler.HostDeferred && !staged[[2]string{r.ID, a.Host}]:
			problems = append(problems, fmt.Sprintf("reboot of %s in %s, which was %s and did not stage its target", a.Host, r.ID, before.State))
		case !r.RebootOf(before.Wave).Managed:
			problems = append(problems, fmt.Sprintf("reboot of %s in %s, whose wave %d the policy does not let the control plane reboot", a.Host, r.ID, before.Wave))
		case !c.in.Tunables.Heard(c.in.Hosts[a.Host].LastSeen, c.in.Now):
			problems = append(problems, fmt.Sprintf("reboot of %s in %s, which is not heard (last seen %s)", a.Host, r.ID, c.in.Hosts[a.Host].LastSeen))
		case s.partial(r.Channel, c.in.Rollouts) || s.partial(r.Channel, c.next.Rollouts):
			problems = append(problems, fmt.Sprintf("reboot of %s in %s while channel %s is in partial visibility", a.Host, r.ID, r.Channel))
		}
		for _, h := range r.Hosts {
			if h.Hostname == a.Host && h.State != reconciler.HostRebooting {
				problems = append(problems, fmt.Sprintf("%s was ordered to reboot in %s but is %s after the tick", a.Host, r.ID, h.State))
			}
		}
	}
	failed := map[[2]string]bool{}
	for _, e := range c.out.Events {
		if e.Kind == reconciler.EventHostTransition && e.From == string(reconciler.HostRebooting) && e.To == string(reconciler.HostFailed) {
			failed[[2]string{e.RolloutID, e.Host}] = true
		}
	}
	for _, r := range c.in.Rollouts {
		for _, h := range r.Hosts {
			if h.State != reconciler.HostRebooting {
				continue
			}
			if r.Reboot == nil {
				problems = append(problems, fmt.Sprintf("%s is Rebooting in %s, which has no reboot step", h.Hostname, r.ID))
			}
			act := c.in.Hosts[h.Hostname].Activation
			if act != nil && act.Outcome == reconciler.OutcomeBootFailed && act.RolloutID == r.ID && act.Closure == h.Target &&
				!act.At.Before(h.Since) && !act.At.After(c.in.Now) && h.Since.Before(c.in.Now) && !failed[[2]string{r.ID, h.Hostname}] {
				problems = append(problems, fmt.Sprintf("%s in %s reported a failed boot at %s, and is not Failed", h.Hostname, r.ID, act.At))
			}
		}
	}
	return problems
}
