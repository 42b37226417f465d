package reconciler_test

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/schedule"
)

// TestPropertyChangeControl: rules 13 to 15 under chaos (windows in
// several time zones, freezes of some or all channels, hosts that fail,
// vanish and return, releases pushed at any time): no host is ever
// dispatched or rebooted outside its maintenance window, while a freeze
// its rollout did not break holds its channel, or before its wave has the approvals it
// needs from distinct approvers, and no rollout opens while a freeze holds
// its channel unless an approver broke it for that rollout. Rollbacks are
// not held, and are not checked here.
func TestPropertyChangeControl(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		runChaosWith(t, fleetGenOpts{maxHosts: 300, changeControl: true}, checkTimeGates)
	})
}

// checkTimeGates checks one tick's dispatches and openings against the
// windows the rollouts froze and the freezes of each channel's latest
// release, at the tick's time.
func checkTimeGates(_ *rapid.T, c tickCase) []string {
	var problems []string
	frozen := func(channel string) bool {
		for _, ch := range c.in.Channels {
			if ch.Name == channel && ch.Fleet != nil {
				return len(schedule.FreezeAt(ch.Fleet.Freezes, channel, c.in.Now)) > 0
			}
		}
		return false
	}
	rollouts := map[string]*reconciler.Rollout{}
	for i := range c.next.Rollouts {
		rollouts[c.next.Rollouts[i].ID] = &c.next.Rollouts[i]
	}
	for _, a := range c.out.Actions {
		if a.Kind != reconciler.ActionDispatch && a.Kind != reconciler.ActionReboot {
			continue // rollbacks are not held
		}
		r := rollouts[a.RolloutID]
		if r == nil {
			problems = append(problems, fmt.Sprintf("dispatch of %s in unknown rollout %s", a.Host, a.RolloutID))
			continue
		}
		if frozen(r.Channel) && r.FreezeBreak == nil {
			problems = append(problems, fmt.Sprintf("%s dispatched in %s while channel %s is frozen", a.Host, r.ID, r.Channel))
		}
		for i := range r.Hosts {
			h := &r.Hosts[i]
			if h.Hostname != a.Host {
				continue
			}
			if ws := reconciler.HostWindows(r, h); !schedule.At(ws, c.in.Now).Open {
				problems = append(problems, fmt.Sprintf("%s dispatched in %s outside its windows %+v", a.Host, r.ID, ws))
			}
			if h.Wave >= 0 && h.Wave < len(r.Waves) {
				approvers := map[string]bool{}
				for _, ap := range r.Approvals {
					if ap.Wave == h.Wave {
						approvers[ap.Actor] = true
					}
				}
				if need := r.Waves[h.Wave].Approval.Need(); len(approvers) < need {
					problems = append(problems, fmt.Sprintf("%s of wave %d dispatched in %s with %d of %d approvals", a.Host, h.Wave, r.ID, len(approvers), need))
				}
			}
		}
	}
	for _, e := range c.out.Events {
		if e.Kind == reconciler.EventRolloutOpened && frozen(e.Channel) && (rollouts[e.RolloutID] == nil || rollouts[e.RolloutID].FreezeBreak == nil) {
			problems = append(problems, fmt.Sprintf("%s opened while channel %s is frozen", e.RolloutID, e.Channel))
		}
	}
	return problems
}
