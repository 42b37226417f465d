package reconciler_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// The golden cases of partial visibility, evidence, catch-up, supersession
// and the tick's clock (rfcs/0003 rules 1, 5–12).
func init() { scenarios = append(scenarios, silenceScenarios...) }

// five is one channel: a canary (wave 0, no soak) and four hosts in wave
// 1 (no soak).
func five(s *scenario) *fleetkit.Builder {
	return fleetkit.New(s.t).Channel("stable", 0, 0).Host("a", "stable", 0, "canary").
		Host("b", "stable", 1).Host("c", "stable", 1).Host("d", "stable", 1).Host("e", "stable", 1)
}

// oneWave is one channel of four hosts in one wave, one in flight at a
// time.
func oneWave(s *scenario, soak int) *fleetkit.Builder {
	return fleetkit.New(s.t).Channel("stable", soak).Host("a", "stable", 0).Host("b", "stable", 0).
		Host("c", "stable", 0).Host("d", "stable", 0).Budget(proto.Selector{All: true}, 1, 0)
}

func noTransitionTo(states ...rc.HostState) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		for _, e := range out.Events {
			if e.Kind == rc.EventHostTransition && slices.Contains(states, rc.HostState(e.To)) {
				t.Fatalf("unexpected %s→%s of %s (%s)", e.From, e.To, e.Host, e.Reason.Code)
			}
		}
	}
}

func noRolloutTo(state rc.RolloutState) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		for _, e := range out.Events {
			if e.Kind == rc.EventRolloutTransition && e.To == string(state) {
				t.Fatalf("unexpected %s→%s of %s (%s)", e.From, e.To, e.RolloutID, e.Reason.Code)
			}
		}
	}
}

// wantHold checks that a host is held with a gate and a code in blocked.
func wantHold(host, gate, code string) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		for _, u := range out.Hosts {
			if u.Host.Hostname == host && u.Host.Blocked.Gate == gate && u.Host.Blocked.Code == code {
				return
			}
		}
		t.Fatalf("host %s is not held by %s with code %s:\n%s", host, gate, code, mustJSON(t, out.Hosts))
	}
}

// wantMessage checks that exactly one event of a kind and code says
// something.
func wantMessage(kind, code string, parts ...string) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		n := 0
		for _, e := range out.Events {
			if e.Kind != kind || e.Reason.Code != code {
				continue
			}
			n++
			for _, p := range parts {
				if !strings.Contains(e.Reason.Message, p) {
					t.Fatalf("%s %s says %q, which lacks %q", kind, code, e.Reason.Message, p)
				}
			}
		}
		if n != 1 {
			t.Fatalf("%d %s events with code %s, want one", n, kind, code)
		}
	}
}

// wantRolloutMove checks for a rollout transition from one state to
// another, with a code.
func wantRolloutMove(from, to rc.RolloutState, code string) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		if !slices.ContainsFunc(out.Events, func(e rc.Event) bool {
			return e.Kind == rc.EventRolloutTransition && e.From == string(from) && e.To == string(to) && e.Reason.Code == code
		}) {
			t.Fatalf("no rollout %s→%s (%s) in:\n%s", from, to, code, mustJSON(t, out.Events))
		}
	}
}

func noRolloutTransition(t *testing.T, out rc.Output) {
	t.Helper()
	noEvent(rc.EventRolloutTransition)(t, out)
}

var silenceScenarios = []goldenCase{
	// ---- rule 6: silence is not failure ----
	{
		name: "rule06-first-deployment-holds-unheard-hosts",
		desc: "rule 6: a control plane that just started opens a rollout no agent has checked in for: the channel is in partial visibility from the start and says since when the control plane watches; nothing is skipped, dispatched or promoted",
		build: func(s *scenario) {
			s.watching(t0).release(three(s).Build(), fleetkit.Commit(1))
		},
		check: all(wantBlocked("a", codes.PartialVisibility), noTransitionTo(rc.HostSkipped), noEvent(rc.EventWavePromoted),
			wantMessage(rc.EventPartialVisibility, codes.PartialVisibility, "3 of 3 hosts", "watched its hosts only since 2026-03-01T12:00:00Z"),
			wantEvent(rc.EventRolloutTransition, "", "Active", ""), wantIntents()),
	},
	{
		name: "rule06-warming-up-dispatches-heard-canary",
		desc: "rule 6: a minute after the control plane started, the canary and b have checked in: the canary is dispatched; z, not heard from, is neither skipped nor dispatched",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0, 0).Host("a", "stable", 0).Host("z", "stable", 0).Host("b", "stable", 1)
			s.watching(t0).release(b.Build(), fleetkit.Commit(1)).tick()
			s.in.Now = t0.Add(time.Minute)
			s.online("a", "b")
		},
		check: all(wantIntents("a"), noTransitionTo(rc.HostSkipped), wantHold("z", codes.Unheard, codes.Unheard)),
	},
	{
		name: "rule06-warm-up-holds-a-mostly-unheard-channel",
		desc: "rule 6, rfcs/0013 rule 4: a minute after the control plane started only the canary has checked in; 2 of 3 hosts unheard is partial visibility, warm-up or not: nothing is dispatched, and the event says since when the control plane watches",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0, 0).Host("a", "stable", 0).Host("z", "stable", 0).Host("b", "stable", 1)
			s.watching(t0).release(b.Build(), fleetkit.Commit(1)).tick()
			s.in.Now = t0.Add(time.Minute)
			s.online("a")
		},
		check: all(wantIntents(), noTransitionTo(rc.HostSkipped), noEvent(rc.EventVisibilityRestored), func(t *testing.T, out rc.Output) {
			if len(out.Visibility) != 1 || !out.Visibility[0].Ended.IsZero() || out.Visibility[0].Silent != 2 {
				t.Fatalf("visibility %+v, want the channel in partial visibility with 2 hosts unheard", out.Visibility)
			}
		}),
	},
	{
		name: "rule06-unheard-host-skipped-once-warm",
		desc: "rule 6: once the control plane watched for the offline threshold, a host of the active wave it never heard from is Skipped",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0, 0).Host("a", "stable", 0).Host("z", "stable", 0).Host("b", "stable", 1)
			s.watching(t0).release(b.Build(), fleetkit.Commit(1)).tick()
			s.in.Now = t0.Add(time.Minute)
			s.online("a", "b").tick().advance(5 * time.Minute)
		},
		check: wantEvent(rc.EventHostTransition, "z", "Skipped", codes.Offline),
	},
	{
		name: "rule06-silence-not-judged-after-an-outage",
		desc: "rule 6: the control plane was down for 20 minutes while a soaked and b waited; back, it hears c and d: it has not watched for the offline threshold, so a is not failed and b not skipped",
		build: func(s *scenario) {
			s.release(oneWave(s, 10).Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			s.confirm(id1, "a").tick().advance(time.Minute)
			s.outage(20*time.Minute).online("c", "d")
		},
		check: all(noTransitionTo(rc.HostFailed, rc.HostSkipped), wantBlocked("a", codes.Unheard), wantBlocked("b", codes.Unheard), noRolloutTransition),
	},
	{
		name: "rule06-partial-visibility-skips-nothing",
		desc: "rule 6: three of four hosts go silent at once: the channel is in partial visibility (one event with the counts); the silent Pending hosts are not skipped and nothing is dispatched",
		build: func(s *scenario) {
			s.release(oneWave(s, 0).Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			s.offline("b", "c", "d").confirm(id1, "a")
		},
		check: all(wantMessage(rc.EventPartialVisibility, codes.PartialVisibility, "3 of 4 hosts not heard from for more than 2m30s"), wantEvent(rc.EventHostTransition, "a", "Converged", ""),
			noTransitionTo(rc.HostSkipped), wantBlocked("b", codes.PartialVisibility), wantIntents()),
	},
	{
		name: "rule06-partial-visibility-ends-by-itself",
		desc: "rule 6: the silent hosts are heard again: visibility_restored, and the channel moves on",
		build: func(s *scenario) {
			s.release(oneWave(s, 0).Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			s.offline("b", "c", "d").confirm(id1, "a").tick().advance(time.Minute).tick().advance(time.Minute)
			s.online("b", "c", "d")
		},
		check: all(wantEvent(rc.EventVisibilityRestored, "", "", codes.VisibilityRestored), wantIntents("b")),
	},
	{
		name: "rule06-partial-visibility-promotes-nothing",
		desc: "rule 6: the canary converged, but three of five hosts are silent: wave 0 is not promoted while the channel is in partial visibility",
		build: func(s *scenario) {
			s.release(five(s).Build(), fleetkit.Commit(1)).online("a", "b", "c", "d", "e").tick().advance(time.Minute)
			s.offline("b", "c", "d").confirm(id1, "a")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Converged", ""), noEvent(rc.EventWavePromoted), wantIntents()),
	},
	{
		name: "rule06-partial-visibility-does-not-fail-soaking-host",
		desc: "rule 6: a soaking host goes silent with most of its channel: it stays Soaking (no offline_while_soaking, no health policy)",
		build: func(s *scenario) {
			s.release(oneWave(s, 30).Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			s.confirm(id1, "a").tick().advance(time.Minute)
			s.offline("a", "b", "c")
		},
		check: all(noTransitionTo(rc.HostFailed, rc.HostSkipped), wantBlocked("a", codes.PartialVisibility), noRolloutTransition),
	},
	{
		name: "rule06-tiny-channel-skips-its-away-host",
		desc: "rule 6: one silent host is below the partial-visibility floor: judged alone, it is Skipped",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("solo", 0).Host("z", "solo", 0)
			s.release(b.Build(), fleetkit.Commit(1)).offline("z")
		},
		check: all(wantEvent(rc.EventHostTransition, "z", "Skipped", codes.Offline), noEvent(rc.EventPartialVisibility), noRolloutTo(rc.RolloutConverged)),
	},
	{
		name: "rule06-catch-up-obeys-budgets",
		desc: "rule 6: a skipped canary returns while wave 1 has a host in flight under a budget of one: it waits for the budget like any member of the rollout",
		build: func(s *scenario) {
			b := four(s).Budget(proto.Selector{All: true}, 1, 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("b", "c", "d").offline("a").tick().advance(time.Minute)
			s.confirm(id1, "d").tick().advance(time.Minute)
			s.online("a")
		},
		check: all(wantBlocked("a", codes.Budget), wantIntents()),
	},

	// ---- rule 8: evidence ----
	{
		name: "rule08-wave-without-converged-host-not-promoted",
		desc: "rule 8: the only canary is away and Skipped: wave 0 proved nothing and is not promoted; the rollout waits for it",
		build: func(s *scenario) {
			s.release(three(s).Build(), fleetkit.Commit(1)).online("b", "c").offline("a")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Skipped", codes.Offline), noEvent(rc.EventWavePromoted), wantIntents()),
	},
	{
		name: "rule08-min-converged-holds-wave",
		desc: "rules 8, 11: healthGate.minConverged 2: one canary converged and one failed (within maxFailures) is not enough evidence; no other host of the wave can bring more, so the rollout halts at once (wave_stalled)",
		build: func(s *scenario) {
			b := four(s).Policy("stable", func(p *proto.RolloutPolicy) {
				one, two := 1, 2
				p.HealthGate.MaxFailures, p.HealthGate.MinConverged = &one, &two
			})
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			s.report(id1, "a", rc.OutcomeFailed).confirm(id1, "d")
		},
		check: all(wantEvent(rc.EventHostTransition, "d", "Converged", ""), noEvent(rc.EventWavePromoted),
			wantEvent(rc.EventRolloutTransition, "", "Halted", codes.WaveUnprovable), wantIntents()),
	},
	{
		name: "rule08-min-converged-pct-promotes",
		desc: "rule 8: healthGate.minConvergedPct 50 of a two-host wave: one converged canary is enough, and the wave is promoted",
		build: func(s *scenario) {
			b := four(s).Policy("stable", func(p *proto.RolloutPolicy) {
				one, half := 1, 50
				p.HealthGate.MaxFailures, p.HealthGate.MinConvergedPct = &one, &half
			})
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			s.report(id1, "a", rc.OutcomeFailed).confirm(id1, "d")
		},
		check: all(wantEvent(rc.EventWavePromoted, "", "", ""), wantIntents("b", "c")),
	},

	// ---- rule 7: confirm windows the control plane could not hear ----
	{
		name: "rule07-confirm-window-during-outage-not-a-failure",
		desc: "rule 7: a was dispatched, then the control plane was down past the confirm window; back, it hears a again without a confirm: Skipped (confirm_unheard), no failure, no health policy, and a catches up at once",
		build: func(s *scenario) {
			started(s)
			s.outage(20*time.Minute).online("a", "b", "c")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Skipped", codes.ConfirmUnheard),
			wantEvent(rc.EventHostTransition, "a", "Activating", codes.CatchUp), noRolloutTransition, wantIntents("a")),
	},
	{
		name: "rule07-confirm-lost-in-outage-inferred",
		desc: "rule 7, rfcs/0013 rule 8: a switched and confirmed, but the store lost the confirm in an outage longer than the window; back, a says it still runs the target: its confirm is inferred and it soaks, not skipped",
		build: func(s *scenario) {
			started(s)
			target := s.hostIn(id1, "a").Target
			s.outage(20*time.Minute).observe("a", func(o *rc.ObservedHost) { o.Current, o.Booted = target, target }).online("a", "b", "c")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Soaking", codes.ConfirmInferred), noTransitionTo(rc.HostSkipped),
			noTransitionTo(rc.HostFailed)),
	},
	{
		name: "rule07-heard-in-the-grace-then-silent-is-judged",
		desc: "rule 7: a is heard once just after its confirm window closed, on its target (within the grace: what it says next decides), then falls silent through a control plane outage; once silence is judged again, its silence decides (confirm_timeout), it does not stay Activating",
		build: func(s *scenario) {
			started(s)
			target := s.hostIn(id1, "a").Target
			s.observe("a", func(o *rc.ObservedHost) { o.Current, o.Booted = target, target })
			s.advance(4*time.Minute + 30*time.Second).tick() // t0+5m30s: past the window, within the grace
			s.outage(38*time.Minute).online("b", "c").tick().advance(6 * time.Minute)
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Failed", codes.ConfirmTimeout),
			wantMessage(rc.EventHostTransition, codes.ConfirmTimeout, "not heard since")),
	},
	{
		name: "rule07-heard-in-the-grace-then-silent-is-held",
		desc: "rule 7: a is heard once just after its confirm window closed, on its target, then falls silent with most of its channel: silence is not judged, so a stays Activating, held and saying since when it is silent",
		build: func(s *scenario) {
			started(s)
			target := s.hostIn(id1, "a").Target
			s.observe("a", func(o *rc.ObservedHost) { o.Current, o.Booted = target, target })
			s.advance(4*time.Minute + 30*time.Second).tick()
			heard := s.in.Now
			s.offline("b", "c").advance(6*time.Minute).observe("a", func(o *rc.ObservedHost) { o.LastSeen = heard })
		},
		check: all(noTransitionTo(rc.HostFailed), wantHold("a", codes.PartialVisibility, codes.PartialVisibility), noRolloutTransition),
	},
	{
		name: "rule07-confirm-window-closed-in-silence-is-held",
		desc: "rule 7: the confirm window closes while a and most of its channel are silent: a stays Activating, held (confirm_unheard), and is not failed",
		build: func(s *scenario) {
			started(s)
			s.advance(6*time.Minute).offline("a", "b", "c")
		},
		check: all(noTransitionTo(rc.HostFailed), wantHold("a", codes.PartialVisibility, codes.ConfirmUnheard), noRolloutTransition),
	},
	{
		name: "rule07-agent-rollback-after-unheard-window-not-a-failure",
		desc: "rule 7: the held host comes back and reports it rolled back when its confirm window closed: Skipped (confirm_unheard), not a health failure, and it catches up",
		build: func(s *scenario) {
			started(s)
			s.advance(6*time.Minute).offline("a", "b", "c").tick().advance(time.Minute)
			s.online("a", "b", "c").report(id1, "a", rc.OutcomeRolledBack)
			s.observe("a", func(o *rc.ObservedHost) { o.Activation.Code = codes.ConfirmTimeout })
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Skipped", codes.ConfirmUnheard), noRolloutTransition, wantIntents("a")),
	},
	{
		name: "rule07-confirm-newer-than-now-waits",
		desc: "rule 7: a confirm stamped after the tick's now (recorded while the tick loaded its input) is left for the next tick",
		build: func(s *scenario) {
			started(s)
			s.confirm(id1, "a")
			s.observe("a", func(o *rc.ObservedHost) { o.Activation.At = s.in.Now.Add(time.Millisecond) })
		},
		check: all(noEvent(rc.EventHostTransition), wantIntents()),
	},

	// ---- rule 9: health failures after convergence ----
	{
		name: "rule09-catch-up-failure-halts-converged-rollout",
		desc: "rule 9: c was skipped and the rollout converged; c returns, catches up and fails: its failure counts and the converged rollout is Halted (onHealthFailure halt)",
		build: func(s *scenario) {
			s.release(four(s).Build(), fleetkit.Commit(1)).online("a", "b", "d").offline("c").converge(11 * time.Minute)
			s.online("c").tick().advance(time.Minute)
			s.report(id1, "c", rc.OutcomeFailed)
		},
		check: all(wantRolloutMove(rc.RolloutConverged, rc.RolloutHalted, codes.HealthFailure), wantEvent(rc.EventHostTransition, "c", "Failed", "")),
	},
	{
		name: "rule09-catch-up-failure-reverts-converged-rollout",
		desc: "rule 9: the same with onHealthFailure rollback-and-halt: the converged rollout is Reverting; c is already back, the others are sent back, latest wave first",
		build: func(s *scenario) {
			b := four(s).Policy("stable", func(p *proto.RolloutPolicy) { p.OnHealthFailure = proto.OnHealthFailureRollbackAndHalt })
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "d").offline("c").converge(11 * time.Minute)
			s.online("c").tick().advance(time.Minute)
			s.report(id1, "c", rc.OutcomeFailed)
		},
		check: all(wantRolloutMove(rc.RolloutConverged, rc.RolloutReverting, codes.HealthFailure),
			wantEvent(rc.EventHostTransition, "c", "Reverted", codes.RolledBack), wantIntents("b", "a", "d")),
	},
	{
		name: "rule09-halted-rollout-stops-catching-up",
		desc: "rule 9: a skipped host returns to a halted rollout: it is not dispatched",
		build: func(s *scenario) {
			s.release(four(s).Build(), fleetkit.Commit(1)).online("b", "c", "d").offline("a").tick().advance(time.Minute)
			s.intent("i1", id1, rc.IntentPause, "alice").tick().advance(time.Minute)
			s.online("a")
		},
		check: all(wantIntents(), noTransitionTo(rc.HostActivating)),
	},
	{
		name: "rule09-reverted-rollout-lets-unchanged-host-land",
		desc: "rule 9: a's closure did not change in the release, so the revert has nothing to send it; the rollout is Reverted and a, still soaking there, lands: Converged",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 10, 0).Host("a", "stable", 0).Host("b", "stable", 1)
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b").converge(11 * time.Minute)
			s.release(b.BumpHost("b", "v2").Build(), fleetkit.Commit(2)).tick().advance(time.Minute)
			s.confirm(rid("stable", 2), "a").tick().advance(time.Minute)
			s.intent("i1", rid("stable", 2), rc.IntentRollback, "alice").tick().advance(11 * time.Minute)
		},
		check: wantEvent(rc.EventHostTransition, "a", "Converged", codes.Soaked),
	},

	// ---- rules 1 and 5: a superseded rollout's hosts in flight ----
	{
		name: "rule05-superseded-soaking-host-still-counts",
		desc: "rule 5: a halted rollout with a soaking is superseded: a stays in flight there and counts against the budget of one, so the new rollout dispatches nobody",
		build: func(s *scenario) {
			b := oneWave(s, 10)
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			s.confirm(id1, "a").tick().advance(time.Minute)
			s.intent("i1", id1, rc.IntentPause, "alice").tick().advance(time.Minute)
			s.release(b.Bump("v2").Build(), fleetkit.Commit(2))
		},
		check: all(wantEvent(rc.EventRolloutTransition, "", "Superseded", codes.Superseded), wantBlocked("a", codes.Busy),
			wantBlocked("b", codes.Budget), wantIntents()),
	},
	{
		name: "rule01-superseded-rollout-lets-soaking-host-land",
		desc: "rule 1: the superseded rollout's soaking host converges there when its soak ends, and the new rollout takes it in the same tick",
		build: func(s *scenario) {
			b := oneWave(s, 10)
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			s.confirm(id1, "a").tick().advance(time.Minute)
			s.intent("i1", id1, rc.IntentPause, "alice").tick().advance(time.Minute)
			s.release(b.Bump("v2").Build(), fleetkit.Commit(2)).tick().advance(9 * time.Minute)
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Converged", codes.Soaked), wantIntents("a")),
	},

	// ---- rule 10: intents newer than the tick ----
	{
		name: "rule10-intent-newer-than-now-waits",
		desc: "rule 10: an intent filed after the tick's now is left for the next tick: no result yet",
		build: func(s *scenario) {
			started(s)
			s.intent("i1", id1, rc.IntentPause, "alice")
			s.in.Intents[0].At = s.in.Now.Add(time.Millisecond)
		},
		check: all(noEvent(rc.EventIntentAccepted), noRolloutTransition, func(t *testing.T, out rc.Output) {
			if len(out.IntentResults) != 0 {
				t.Fatalf("intent consumed: %+v", out.IntentResults)
			}
		}),
	},

	// ---- rule 11: deadlines that name what is missing ----
	{
		name: "rule11-wave-of-away-hosts-stalls",
		desc: "rule 11: the only canary was skipped and never returns: after the readiness deadline the rollout halts, naming the wave and the evidence it lacks",
		build: func(s *scenario) {
			s.release(three(s).Build(), fleetkit.Commit(1)).online("b", "c").offline("a").tick().advance(66 * time.Minute)
		},
		check: wantMessage(rc.EventRolloutTransition, codes.WaveStalled, "wave 0 made no progress", "1 skipped", "0 of the 1 host(s)"),
	},
	{
		name: "rule11-edge-against-wave-order-stalls",
		desc: "rule 11: a (wave 0) waits for b (wave 1), which cannot start before wave 0 is promoted: the deadline halts the rollout instead of waiting for ever",
		build: func(s *scenario) {
			// ValidateFleet refuses such an edge; an artifact from before
			// that rule, or a hand-made input, can still carry one.
			f := fleetkit.New(s.t).Channel("stable", 0, 0).Host("a", "stable", 0).Host("z", "stable", 0).Host("b", "stable", 1).Build()
			f.Edges = append(f.Edges, proto.Edge{Gates: "b", Gated: "a"})
			s.release(f, fleetkit.Commit(1)).online("a", "z", "b").tick().advance(time.Minute)
			s.confirm(id1, "z").tick().advance(61 * time.Minute)
		},
		check: wantMessage(rc.EventRolloutTransition, codes.WaveStalled, "wave 0", "1 held by host_edge"),
	},
	{
		name: "rule11-partial-visibility-past-the-deadline-halts",
		desc: "rule 11: partial visibility that outlasts the readiness deadline halts the rollout, saying so",
		build: func(s *scenario) {
			s.release(oneWave(s, 0).Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			s.offline("b", "c", "d").confirm(id1, "a").tick().advance(61 * time.Minute)
			s.offline("b", "c", "d")
		},
		check: wantMessage(rc.EventRolloutTransition, codes.WaveStalled, "3 held by partial_visibility", "channel stable is in partial visibility"),
	},

	// ---- what a first review found ----
	{
		name: "rule07-silent-host-after-outage-fails",
		desc: "rule 7: a's switch cut its network; the control plane was down for a while during a's confirm window. Back, it holds a (not heard since the window closed) while it warms up; warm, with a still silent and the rest of the channel heard, the missing confirm is confirm_timeout, a failure, and the rollout halts",
		build: func(s *scenario) {
			startedFour(s) // a and d dispatched at t0; now t0+1m
			s.confirm(id1, "d").tick()
			s.outage(3*time.Minute).online("b", "c", "d").tick() // watch restarts at t0+4m
			s.in.Now = t0.Add(6 * time.Minute)
			s.online("b", "c", "d").tick() // the window closed at t0+5m: held
			s.in.Now = t0.Add(10 * time.Minute)
			s.online("b", "c", "d")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Failed", codes.ConfirmTimeout),
			wantEvent(rc.EventRolloutTransition, "", "Halted", codes.HealthFailure)),
	},
	{
		name: "rule05-superseded-host-counts-against-a-new-budget",
		desc: "rule 5: a soaks in a halted rollout whose release had no budget; the new release adds one of one host in flight and supersedes it: a, still in flight there, fills the new budget, and b waits",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 10).Host("a", "stable", 0).Host("b", "stable", 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("a").offline("b").tick().advance(time.Minute)
			s.confirm(id1, "a").tick().advance(time.Minute)
			s.intent("i1", id1, rc.IntentPause, "alice").tick().advance(time.Minute)
			s.release(b.Budget(proto.Selector{All: true}, 1, 0).Bump("v2").Build(), fleetkit.Commit(2)).online("b")
		},
		check: all(wantEvent(rc.EventRolloutTransition, "", "Superseded", codes.Superseded), wantBlocked("a", codes.Busy),
			wantBlocked("b", codes.Budget), wantIntents()),
	},
	{
		name: "rule11-silent-soaking-hosts-stall",
		desc: "rule 11: two of three soaking hosts fall silent for good, with the next wave's host: the channel is in partial visibility, nothing is failed, and the readiness deadline halts the rollout instead of waiting for ever",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 30, 0).Host("a", "stable", 0).Host("b", "stable", 0).Host("c", "stable", 0).Host("d", "stable", 1)
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			s.confirm(id1, "a", "b", "c").tick().advance(time.Minute)
			s.offline("b", "c", "d").advance(30 * time.Minute).tick().advance(91 * time.Minute)
		},
		check: all(wantMessage(rc.EventRolloutTransition, codes.WaveStalled, "2 soaking and silent"), noTransitionTo(rc.HostFailed)),
	},
	{
		name: "rule08-unchanged-host-is-no-evidence",
		desc: "rule 8: the release changes a's closure but not z's: z converges at once, which proves nothing; with a away, wave 0 is not promoted",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0, 0).Host("a", "stable", 0).Host("z", "stable", 0).Host("b", "stable", 1).Host("c", "stable", 1)
			s.online("z", "b", "c").offline("a")
			s.observe("z", func(o *rc.ObservedHost) {
				o.Current, o.Booted = fleetkit.Closure("z", "v1"), fleetkit.Closure("z", "v1")
			})
			s.release(b.Build(), fleetkit.Commit(1)).tick().advance(time.Minute)
			s.confirm(id1, "z")
		},
		check: all(wantEvent(rc.EventHostTransition, "z", "Converged", ""), noEvent(rc.EventWavePromoted), wantIntents()),
	},
	{
		name: "rule06-tail-of-a-partition-not-judged-at-once",
		desc: "rule 6: most of the channel is heard again, but d, soaking, is still silent: partial visibility is over, and for an offline threshold d is held, not failed",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 30).Host("a", "stable", 0).Host("b", "stable", 0).Host("c", "stable", 0).Host("d", "stable", 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			s.confirm(id1, "a", "b", "c", "d").tick().advance(time.Minute)
			s.offline("b", "c", "d").tick().advance(time.Minute)
			s.online("b", "c")
		},
		check: all(wantEvent(rc.EventVisibilityRestored, "", "", codes.VisibilityRestored), noTransitionTo(rc.HostFailed), noRolloutTransition),
	},
	{
		name: "rule09-old-failure-does-not-halt-converged-rollout",
		desc: "rule 9: a converged rollout holds a host that failed before (a store from before this rule): no new failure, so its health policy does not fire on it",
		build: func(s *scenario) {
			s.release(four(s).Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").converge(11 * time.Minute)
			s.rollout(id1, func(r *rc.Rollout) {
				for i := range r.Hosts {
					if r.Hosts[i].Hostname == "c" {
						r.Hosts[i].State, r.Hosts[i].Reason = rc.HostFailed, rc.Reason{Code: codes.ActivationFailed}
					}
				}
			})
		},
		check: all(noRolloutTransition, wantIntents()),
	},

	{
		name: "rule06-partial-visibility-off-at-100-pct",
		desc: "rule 6: partialVisibilityPct 100 turns partial visibility off: three of four hosts silent are judged one by one and skipped",
		build: func(s *scenario) {
			s.in.Tunables.PartialVisibilityPct = 100
			s.release(oneWave(s, 0).Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			s.offline("b", "c", "d").confirm(id1, "a")
		},
		check: all(noEvent(rc.EventPartialVisibility), wantEvent(rc.EventHostTransition, "b", "Skipped", codes.Offline)),
	},
	{
		name: "rule06-partial-visibility-floor",
		desc: "rule 6: partialVisibilityMinHosts 4: three silent hosts of four are under the floor, and judged one by one",
		build: func(s *scenario) {
			s.in.Tunables.PartialVisibilityMinHosts = 4
			s.release(oneWave(s, 0).Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			s.offline("b", "c", "d").confirm(id1, "a")
		},
		check: all(noEvent(rc.EventPartialVisibility), wantEvent(rc.EventHostTransition, "c", "Skipped", codes.Offline)),
	},
	{
		name: "rule06-warm-up-judges-visibility-afresh",
		desc: "rule 6: the control plane restarts while a channel is in partial visibility, and every host has checked in again: warming up, it judges the channel afresh (visibility restored, b dispatched), and judges no silence for an offline threshold",
		build: func(s *scenario) {
			s.release(oneWave(s, 0).Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			s.offline("b", "c", "d").confirm(id1, "a").tick()
			s.outage(10*time.Minute).online("a", "b", "c", "d")
		},
		check: all(wantEvent(rc.EventVisibilityRestored, "", "", codes.VisibilityRestored), wantIntents("b"), func(t *testing.T, out rc.Output) {
			if len(out.Visibility) != 1 || out.Visibility[0].Ended.IsZero() {
				t.Fatalf("visibility %+v, want the channel recovering", out.Visibility)
			}
		}),
	},
	{
		name: "rule06-skipped-host-held-in-partial-visibility",
		desc: "rule 6: a skipped host returns while its channel is in partial visibility: it does not catch up until the channel is heard again",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 30, 0).Host("a", "stable", 0).Host("z", "stable", 0).
				Host("b", "stable", 1).Host("c", "stable", 1).Host("d", "stable", 1)
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").offline("z").tick().advance(time.Minute)
			s.offline("b", "c", "d").online("z")
		},
		check: all(wantEvent(rc.EventPartialVisibility, "", "", codes.PartialVisibility), wantBlocked("z", codes.PartialVisibility), wantIntents()),
	},

	// ---- rule 12: output independent of the order of edges ----
	{
		name: "rule12-frozen-edges-sorted",
		desc: "rule 12: a rollout freezes its host edges sorted, whatever their order in the fleet",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0).Host("b", "stable", 0).Host("c", "stable", 0).
				Edge("c", "b").Edge("a", "c").Edge("a", "b")
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c")
		},
		check: func(t *testing.T, out rc.Output) {
			t.Helper()
			want := []rc.Edge{{Gates: "a", Gated: "b"}, {Gates: "a", Gated: "c"}, {Gates: "c", Gated: "b"}}
			if len(out.Rollouts) != 1 || !slices.Equal(out.Rollouts[0].Rollout.Edges, want) {
				t.Fatalf("frozen edges %+v, want %+v", out.Rollouts, want)
			}
		},
	},
	// ---- rule 6: silence judged as a cohort ----
	{
		name: "rule06-first-hosts-of-a-partition-are-late-not-judged",
		desc: "rule 6: four of six soaking hosts were cut off at once, their last check-ins spread over two minutes; b's silence has passed the offline threshold, the others' only the late threshold: 4 of 6 late is partial visibility, so b is not failed alone",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 30)
			for _, h := range []string{"a", "b", "c", "d", "e", "f"} {
				b.Host(h, "stable", 0)
			}
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c", "d", "e", "f").tick().advance(time.Minute)
			s.confirm(id1, "a", "b", "c", "d", "e", "f").tick().advance(2 * time.Minute)
			cut := s.in.Now // b's last check-in
			s.in.Now = cut.Add(5*time.Minute + time.Second)
			s.online("a", "f")
			for h, ago := range map[string]time.Duration{"c": 4*time.Minute + 40*time.Second, "d": 4 * time.Minute, "e": 3 * time.Minute} {
				s.observe(h, func(o *rc.ObservedHost) { o.LastSeen = s.in.Now.Add(-ago) })
			}
		},
		check: all(noTransitionTo(rc.HostFailed), wantBlocked("b", codes.PartialVisibility),
			wantMessage(rc.EventPartialVisibility, codes.PartialVisibility, "4 of 6 hosts not heard from for more than 2m30s")),
	},
	// ---- rules 7 and 8: verdicts rest on what the host said ----
	{
		name: "rule07-lost-confirm-inferred-from-the-host",
		desc: "rule 7, rfcs/0013 rule 8: the canary switched and its confirm was accepted, but the store lost it; more than a minute after its confirm window closed the host still says it runs the target, which an agent without an accepted confirm does not: it soaks (confirm_inferred), no failure",
		build: func(s *scenario) {
			started(s)
			target := s.hostIn(id1, "a").Target
			s.observe("a", func(o *rc.ObservedHost) { o.Current, o.Booted = target, target })
			s.advance(4*time.Minute + 30*time.Second).tick() // t0+5m30s: past the window, within the grace
			if len(s.last.Events) != 0 {
				s.t.Fatalf("a host on its target within the grace is judged: %s", mustJSON(s.t, s.last.Events))
			}
			s.advance(31 * time.Second)
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Soaking", codes.ConfirmInferred), noTransitionTo(rc.HostFailed)),
	},
	{
		name: "rule08-health-judged-from-what-the-host-said",
		desc: "rule 8, rfcs/0013 rule 8: a soaks; the store lost the status it sent after its confirm and holds one from before (it runs v0), while its later check-ins, which echoed their status tag, are recorded: what the host said last is not known, so nothing is judged",
		build: func(s *scenario) {
			soakingA(s)
			said := s.hostIn(id1, "a").Since.Add(-30 * time.Second)
			s.observe("a", func(o *rc.ObservedHost) {
				o.Current, o.Booted, o.StatusAt = fleetkit.Closure("a", "v0"), fleetkit.Closure("a", "v0"), said
			})
			s.advance(5 * time.Minute)
		},
		check: all(noTransitionTo(rc.HostFailed, rc.HostConverged), noRolloutTransition),
	},
	{
		name: "rule08-host-whose-status-was-lost-is-not-dispatched",
		desc: "rule 8: wave 1 starts; b's last check-in carried a status the store does not hold (its write was lost): what b runs, its rollback target, is not known, so b waits for its status to be written again; c is dispatched",
		build: func(s *scenario) {
			soakingA(s)
			s.advance(5 * time.Minute)
			s.observe("b", func(o *rc.ObservedHost) { o.StatusAt = o.LastSeen.Add(-time.Minute) })
		},
		check: all(wantIntents("c"), wantHold("b", codes.Unheard, codes.Unheard), wantEvent(rc.EventWavePromoted, "", "", "")),
	},
}
