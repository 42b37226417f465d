package reconciler_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
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
//  17. only a rollout with a reboot step has hosts Rebooting;
//  18. a revert waits for a boot under way: it is not revert_stalled
//     while a host of it is Rebooting before its boot deadline.
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
	stalled := map[string]bool{}
	for _, e := range c.out.Events {
		if e.Kind == reconciler.EventRolloutTransition && e.Reason.Code == codes.RevertStalled {
			stalled[e.RolloutID] = true
		}
	}
	for _, r := range c.in.Rollouts {
		if !stalled[r.ID] {
			continue
		}
		for _, h := range r.Hosts {
			if by := r.RebootOf(h.Wave).BootBy(h.Since, c.in.Tunables); h.State == reconciler.HostRebooting && !c.in.Now.After(by) {
				problems = append(problems, fmt.Sprintf("the revert of %s stalled while %s was Rebooting before its boot deadline %s", r.ID, h.Hostname, by))
			}
		}
	}
	return problems
}

// TestPropertyRevertWaitsForABoot: a revert asked while a host reboots
// (a boot timeout from a minute to a day, beyond the readiness deadline
// or within it, the rollback at any time of the boot, ticks at any pace)
// is never revert_stalled before the boot's deadline, and a host that
// boots into the release being reverted is sent back by the next tick
// (rules 9, 11 and 17).
func TestPropertyRevertWaitsForABoot(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		s, b, timeout := drawnBootTimeout(t, rt)
		stagedA(s, b).tick()
		ordered := s.hostIn(id1, "a")
		if ordered.State != reconciler.HostRebooting {
			rt.Fatalf("a is %s, want Rebooting", ordered.State)
		}
		by := ordered.Since.Add(timeout)
		s.advance(time.Duration(rapid.Int64Range(0, int64(timeout-time.Second)).Draw(rt, "rollbackAfter"))).
			intent("i1", id1, reconciler.IntentRollback, "ops").tick()
		bootAt := by.Add(time.Hour) // never, within its deadline
		if rapid.Bool().Draw(rt, "boots") {
			bootAt = s.in.Now.Add(time.Duration(rapid.Int64Range(0, int64(by.Sub(s.in.Now))).Draw(rt, "bootAfter")))
		}
		booted := false
		for s.in.Now.Before(by) {
			s.advance(time.Duration(rapid.IntRange(1, 30).Draw(rt, "stepMinutes")) * time.Minute)
			if !booted && !s.in.Now.Before(bootAt) && s.in.Now.Before(by) {
				s.reboot(id1, "a")
				booted = true
			} else if !booted {
				s.observe("a", func(o *reconciler.ObservedHost) { o.LastSeen, o.StatusAt = s.in.Now, s.in.Now }) // heard, still staged
			}
			s.tick()
			for _, e := range s.last.Events {
				if e.Kind == reconciler.EventRolloutTransition && e.Reason.Code == codes.RevertStalled && !s.in.Now.After(by) {
					rt.Fatalf("the revert stalled at %s, within a's boot deadline %s", s.in.Now, by)
				}
			}
			if booted {
				if h := s.hostIn(id1, "a"); h.State == reconciler.HostSoaking || h.State == reconciler.HostConverged {
					rt.Fatalf("a booted into the release being reverted and is %s, not sent back", h.State)
				}
				return
			}
		}
	})
}

// TestPropertySilentStagedHostDoesNotStall: a staged host that is not
// heard does not hold its wave, so it does not make it stalled either:
// with a silent and staged and b rebooting (a boot timeout from a minute
// to a day), the wave is not wave_stalled while b's boot is under way
// (rules 11 and 17).
func TestPropertySilentStagedHostDoesNotStall(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		s, b, timeout := drawnBootTimeout(t, rt)
		stagedA(s, b).observe("a", func(o *reconciler.ObservedHost) { o.LastSeen = s.in.Now.Add(-10 * time.Minute) })
		s.tick().advance(time.Minute).report(id1, "b", reconciler.OutcomeDeferred).tick()
		rb := s.hostIn(id1, "b")
		if rb.State != reconciler.HostRebooting {
			rt.Fatalf("b is %s, want Rebooting", rb.State)
		}
		by := rb.Since.Add(timeout)
		for s.in.Now.Before(by) {
			s.advance(time.Duration(rapid.IntRange(1, 30).Draw(rt, "stepMinutes")) * time.Minute)
			for _, h := range []string{"b", "c", "d"} {
				s.observe(h, func(o *reconciler.ObservedHost) { o.LastSeen = s.in.Now })
			}
			s.tick()
			for _, e := range s.last.Events {
				if e.Kind == reconciler.EventRolloutTransition && e.Reason.Code == codes.WaveStalled && !s.in.Now.After(by) {
					rt.Fatalf("the wave stalled at %s while b's boot is under way until %s: %s", s.in.Now, by, e.Reason.Message)
				}
			}
		}
	})
}

// drawnBootTimeout is a one-wave fleet whose policy reboots, with a boot
// timeout drawn from a minute to a day.
func drawnBootTimeout(t *testing.T, rt *rapid.T) (*scenario, *fleetkit.Builder, time.Duration) {
	timeout := time.Duration(rapid.IntRange(1, 1440).Draw(rt, "bootTimeoutMinutes")) * time.Minute
	s := newScenario(t)
	b := oneWave(s, 0).Policy("stable", func(p *proto.RolloutPolicy) {
		p.Reboot = &proto.Reboot{Allowed: true, BootTimeoutMinutes: int(timeout / time.Minute)}
	})
	return s, b, timeout
}
