package reconciler_test

import (
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// The golden cases of reboots (rfcs/0003 rule 17).
func init() { scenarios = append(scenarios, rebootScenarios...) }

// rebooting is oneWave (four hosts in one wave, one in flight at a time,
// no soak) whose policy lets the control plane reboot, with a 10-minute
// boot timeout, and halts on the first failure.
func rebooting(s *scenario) *fleetkit.Builder {
	return oneWave(s, 0).Policy("stable", func(p *proto.RolloutPolicy) {
		p.Reboot = &proto.Reboot{Allowed: true, BootTimeoutMinutes: 10}
	})
}

// stage: the hosts' agents report their targets staged for the next
// boot (a report is a check-in: the hosts say so).
func stage(s *scenario, hosts ...string) *scenario {
	for _, h := range hosts {
		s.report(id1, h, rc.OutcomeDeferred)
	}
	return s
}

// stagedA releases b (rebooting by default) and a, dispatched, stages
// its target: the input of the tick that orders a's reboot.
func stagedA(s *scenario, b *fleetkit.Builder) *scenario {
	s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
	return stage(s, "a")
}

// bootFails: the host's agent says its boot did not come up (it runs its
// previous closure again).
func bootFails(s *scenario, host string) *scenario {
	h := s.hostIn(id1, host)
	return s.observe(host, func(o *rc.ObservedHost) {
		o.Current, o.Booted, o.Deferred, o.LastSeen, o.StatusAt = h.Previous, h.Previous, false, s.in.Now, s.in.Now
		o.Activation = &rc.Activation{RolloutID: id1, Closure: h.Target, Outcome: rc.OutcomeBootFailed, At: s.in.Now,
			Code: codes.BootFellBack, Detail: "boot_fell_back: the host came up on its previous default entry"}
	})
}

func wantAction(host, kind string) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		for _, a := range out.Actions {
			if a.Host == host && a.Kind == kind {
				return
			}
		}
		t.Fatalf("no %s action for %s in %v", kind, host, out.Actions)
	}
}

var rebootScenarios = []goldenCase{
	{
		name: "rule17-staged-host-rebooted-in-flight",
		desc: "rule 17: a reports its target staged for the next boot; the policy lets the control plane reboot, so the same tick orders its reboot (Deferred → Rebooting), and a keeps the budget's one slot: b and c wait",
		build: func(s *scenario) {
			stagedA(s, rebooting(s))
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Rebooting", codes.RebootDispatched), wantAction("a", rc.ActionReboot),
			wantIntents("a")),
	},
	{
		name: "rule17-rebooted-host-soaks-then-the-next-moves",
		desc: "rule 17: a checks in on the new boot running its target: it soaks (no soak time: it converges) and frees the slot, and b is dispatched",
		build: func(s *scenario) {
			stagedA(s, rebooting(s)).tick().advance(2*time.Minute).reboot(id1, "a")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Soaking", codes.BootedIntoTarget),
			wantEvent(rc.EventHostTransition, "a", "Converged", codes.Soaked), wantIntents("b")),
	},
	{
		name: "rule17-boot-timeout-fails-the-host",
		desc: "rule 17, rule 9: a was ordered to reboot and is heard again 11 minutes later still on its previous closure: the boot failed (boot_timeout) and the rollout halts",
		build: func(s *scenario) {
			stagedA(s, rebooting(s)).tick().advance(11*time.Minute).observe("a", func(o *rc.ObservedHost) {
				o.Deferred, o.LastSeen, o.StatusAt = false, s.in.Now, s.in.Now
			})
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Failed", codes.BootTimeout),
			wantRolloutMove(rc.RolloutActive, rc.RolloutHalted, codes.HealthFailure), wantIntents()),
	},
	{
		name: "rule17-silent-boot-times-out",
		desc: "rule 17, rule 6: a was ordered to reboot and has not been heard since; 11 minutes on, past its 10-minute boot timeout and silent while the rest of its channel is heard, its boot failed (boot_timeout)",
		build: func(s *scenario) {
			stagedA(s, rebooting(s)).tick().offline("a").advance(11 * time.Minute)
		},
		check: all(wantMessage(rc.EventHostTransition, codes.BootTimeout, "no check-in on the new boot within 10 min"),
			wantRolloutMove(rc.RolloutActive, rc.RolloutHalted, codes.HealthFailure)),
	},
	{
		name: "rule17-staged-target-lost",
		desc: "rule 17: a staged its target after its window closed, and its next check-in says nothing is staged (its agent lost it) and it runs its previous closure: Reverted, no failure",
		build: func(s *scenario) {
			b := windowed(s, proto.Window{Days: []string{"sun"}, Start: "12:00", DurationMinutes: 60, TimeZone: "UTC"}).
				Policy("stable", func(p *proto.RolloutPolicy) { p.Reboot = &proto.Reboot{Allowed: true, BootTimeoutMinutes: 10} })
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c").tick().advance(61 * time.Minute)
			stage(s, "a").tick().advance(time.Minute)
			s.observe("a", func(o *rc.ObservedHost) { o.Deferred, o.LastSeen, o.StatusAt = false, s.in.Now, s.in.Now })
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Reverted", codes.StagedTargetLost), noRolloutTo(rc.RolloutHalted)),
	},
	{
		name: "rule17-failed-boot-reported-reverts",
		desc: "rule 17, rule 9: a's agent reports that the host came up on its previous default entry; with rollback-and-halt the rollout reverts",
		build: func(s *scenario) {
			b := rebooting(s).Policy("stable", func(p *proto.RolloutPolicy) { p.OnHealthFailure = proto.OnHealthFailureRollbackAndHalt })
			stagedA(s, b).tick().advance(3 * time.Minute)
			bootFails(s, "a")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Failed", codes.BootFailed),
			wantRolloutMove(rc.RolloutActive, rc.RolloutReverting, codes.HealthFailure)),
	},
	{
		name: "rule17-silent-at-deadline-not-judged-in-partial-visibility",
		desc: "rule 17, rule 6: a rebooting host and three others go silent; at the boot deadline the channel is in partial visibility, so the silent reboot is held, not failed",
		build: func(s *scenario) {
			stagedA(s, rebooting(s)).tick().offline("a", "b", "c", "d").advance(11 * time.Minute)
		},
		check: all(noTransitionTo(rc.HostFailed), wantBlocked("a", codes.PartialVisibility)),
	},
	{
		name: "rule17-silent-staged-host-not-rebooted",
		desc: "rule 17: a's report that it staged its target is on record, but a has been silent for ten minutes: no reboot is ordered for a host that is not heard, and b takes the slot a left",
		build: func(s *scenario) {
			stagedA(s, rebooting(s)).observe("a", func(o *rc.ObservedHost) { o.LastSeen = s.in.Now.Add(-10 * time.Minute) })
		},
		check: all(wantHold("a", codes.Unheard, codes.Unheard), noTransitionTo(rc.HostRebooting), wantIntents("b")),
	},
	{
		name: "rule17-no-reboot-outside-a-window",
		desc: "rule 13, rule 17: the canary is dispatched inside its Sunday window and stages its target after the window closed: its reboot waits for the next window",
		build: func(s *scenario) {
			b := windowed(s, proto.Window{Days: []string{"sun"}, Start: "12:00", DurationMinutes: 60, TimeZone: "UTC"}).
				Policy("stable", func(p *proto.RolloutPolicy) { p.Reboot = &proto.Reboot{Allowed: true, BootTimeoutMinutes: 10} })
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c").tick().advance(61 * time.Minute)
			stage(s, "a")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Deferred", codes.Deferred), noTransitionTo(rc.HostRebooting),
			wantBlockedSaying("a", codes.Window, "the next opens Sun 12:00 UTC"), wantIntents()),
	},
	{
		name: "rule17-wave-without-reboots-stays-deferred",
		desc: "rule 17: the policy allows reboots but the canary wave says reboot false: a stays Deferred for someone to reboot, and does not hold its wave",
		build: func(s *scenario) {
			b := four(s).Policy("stable", func(p *proto.RolloutPolicy) {
				p.Reboot = &proto.Reboot{Allowed: true, BootTimeoutMinutes: 10}
				off := false
				p.Waves[0].Reboot = &off
			})
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			stage(s, "a").confirm(id1, "d")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Deferred", codes.Deferred), noTransitionTo(rc.HostRebooting),
			wantEvent(rc.EventWavePromoted, "", "", ""), wantIntents("b", "c")),
	},
	{
		name: "rule17-staged-host-holds-its-wave",
		desc: "rule 8, rule 17: where the control plane reboots, a staged canary holds its wave until it booted and soaked, even though d converged",
		build: func(s *scenario) {
			b := four(s).Policy("stable", func(p *proto.RolloutPolicy) {
				p.Reboot = &proto.Reboot{Allowed: true, BootTimeoutMinutes: 10}
			})
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			stage(s, "a").confirm(id1, "d")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Rebooting", codes.RebootDispatched), noEvent(rc.EventWavePromoted),
			wantIntents("a")),
	},
	{
		name: "rule17-rebooting-host-rolled-back-after-its-boot",
		desc: "rule 9, rule 17: an operator rolls back while a reboots; the revert waits for the boot, then a, on its target, is sent back",
		build: func(s *scenario) {
			stagedA(s, rebooting(s)).tick().advance(time.Minute).intent("i1", id1, rc.IntentRollback, "ops").tick().advance(time.Minute).reboot(id1, "a")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "RollingBack", codes.RollbackDispatched), wantAction("a", rc.ActionRollback)),
	},
}

// TestRebootOrderUnheardIsNotAFailure: the control plane orders a's reboot
// and cannot hear the fleet straight after, for longer than the boot
// timeout (it is down, or the channel is partitioned). When it hears a
// again, a says its target is still staged and it runs its previous
// closure: it may never have had the order, and its agent refuses one past
// its deadline. a is staged again without a failure (reboot_unheard) and
// ordered to reboot again; the rollout goes on (rule 17).
func TestRebootOrderUnheardIsNotAFailure(t *testing.T) {
	for _, cut := range []string{"outage", "partition"} {
		t.Run(cut, func(t *testing.T) {
			s := newScenario(t)
			stagedA(s, rebooting(s)).tick()
			if h := s.hostIn(id1, "a"); h.State != rc.HostRebooting {
				t.Fatalf("a is %s, want Rebooting", h.State)
			}
			if cut == "outage" {
				s.outage(20 * time.Minute)
			} else {
				for range 10 {
					s.in.Now = s.in.Now.Add(2 * time.Minute) // nobody checks in
					s.tick()
					noTransitionTo(rc.HostFailed)(t, s.last)
				}
			}
			s.online("a", "b", "c", "d").tick()
			all(wantEvent(rc.EventHostTransition, "a", string(rc.HostDeferred), codes.RebootUnheard),
				wantEvent(rc.EventHostTransition, "a", string(rc.HostRebooting), codes.RebootDispatched), wantAction("a", rc.ActionReboot),
				noTransitionTo(rc.HostFailed), noRolloutTo(rc.RolloutHalted))(t, s.last)
		})
	}
}

// TestRevertWaitsForALongBoot: a boot timeout (up to 24 hours) may be
// longer than the readiness deadline. An operator rolls back while a
// reboots with a 120-minute timeout: the revert is not stalled while the
// boot is within its timeout, and once a boots into the release being
// reverted it is sent back (rules 9, 11 and 17).
func TestRevertWaitsForALongBoot(t *testing.T) {
	s := newScenario(t)
	b := oneWave(s, 0).Policy("stable", func(p *proto.RolloutPolicy) {
		p.Reboot = &proto.Reboot{Allowed: true, BootTimeoutMinutes: 120}
	})
	stagedA(s, b).tick().advance(time.Minute).intent("i1", id1, rc.IntentRollback, "ops").tick()
	for range 11 {
		s.advance(10 * time.Minute).tick()
		noRolloutTo(rc.RolloutHalted)(t, s.last)
	}
	if h := s.hostIn(id1, "a"); h.State != rc.HostRebooting || s.state(id1) != rc.RolloutReverting {
		t.Fatalf("after 111 minutes a is %s in a %s rollout, want Rebooting in a Reverting one", h.State, s.state(id1))
	}
	s.advance(time.Minute).reboot(id1, "a").tick()
	all(wantEvent(rc.EventHostTransition, "a", string(rc.HostRollingBack), codes.RollbackDispatched), wantAction("a", rc.ActionRollback),
		noRolloutTo(rc.RolloutHalted))(t, s.last)
}

// TestSilentStagedHostDoesNotStallItsWave: a staged host that is not heard
// does not hold its wave (rule 17), so the readiness deadline does not
// count it as stuck either (rule 11). With a silent and staged, b rebooting
// with a 120-minute timeout and c and d held by the budget, the wave waits
// for the fleet to move: it is not stalled after an hour.
func TestSilentStagedHostDoesNotStallItsWave(t *testing.T) {
	s := newScenario(t)
	b := oneWave(s, 0).Policy("stable", func(p *proto.RolloutPolicy) {
		p.Reboot = &proto.Reboot{Allowed: true, BootTimeoutMinutes: 120}
	})
	stagedA(s, b).observe("a", func(o *rc.ObservedHost) { o.LastSeen = s.in.Now.Add(-10 * time.Minute) })
	s.tick().advance(time.Minute).report(id1, "b", rc.OutcomeDeferred).tick()
	if h := s.hostIn(id1, "b"); h.State != rc.HostRebooting {
		t.Fatalf("b is %s, want Rebooting", h.State)
	}
	for range 7 {
		s.advance(10 * time.Minute).tick()
		noRolloutTo(rc.RolloutHalted)(t, s.last)
	}
	if h := s.hostIn(id1, "a"); h.State != rc.HostDeferred || h.Blocked.Gate != codes.Unheard {
		t.Fatalf("a is %s held by %q, want Deferred and unheard", h.State, h.Blocked.Gate)
	}
}
