package reconciler_test

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// The golden cases of change control (rfcs/0003 rules 13 and 14):
// maintenance windows and freezes. t0 is Sunday 2026-03-01 12:00 UTC,
// 13:00 in Berlin (CET); Berlin moves its clocks from 02:00 CET to
// 03:00 CEST on Sunday 2026-03-29 (01:00 UTC).
func init() { scenarios = append(scenarios, changeControlScenarios...) }

// sundayEvening is a window on Sundays from 20:00 Berlin time for two
// hours: 19:00–21:00 UTC in winter.
var sundayEvening = proto.Window{Days: []string{"sun"}, Start: "20:00", DurationMinutes: 120, TimeZone: "Europe/Berlin"}

// windowed is three (a canary, then b and c) with the channel's hosts in
// the given windows.
func windowed(s *scenario, ws ...proto.Window) *fleetkit.Builder {
	return three(s).Policy("stable", func(p *proto.RolloutPolicy) { p.Windows = ws })
}

// frozen is a freeze of channel stable (or every channel when none is
// named) from t0+from for d.
func frozen(from, d time.Duration, channels ...string) proto.Freeze {
	return proto.Freeze{From: t0.Add(from), Until: t0.Add(from + d), Reason: "quarter-end close", Channels: channels}
}

// withFreezes adds freezes to a built fleet.
func withFreezes(f *proto.FleetResolved, fs ...proto.Freeze) *proto.FleetResolved {
	f.Freezes = fs
	return f
}

// wantBlockedSaying wants a host blocked by a gate with words in the
// message.
func wantBlockedSaying(host, gate, words string) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		for _, u := range out.Rollouts {
			for _, h := range u.Rollout.Hosts {
				if h.Hostname == host && h.Blocked.Gate == gate && strings.Contains(h.Blocked.Message, words) {
					return
				}
			}
		}
		for _, u := range out.Hosts {
			if u.Host.Hostname == host && u.Host.Blocked.Gate == gate && strings.Contains(u.Host.Blocked.Message, words) {
				return
			}
		}
		t.Fatalf("host %s is not blocked by %s saying %q:\n%s", host, gate, words, mustJSON(t, out))
	}
}

// approving is three with wave 1 (b and c) needing approvers approvals.
func approving(s *scenario, approvers int) *fleetkit.Builder {
	return three(s).Policy("stable", func(p *proto.RolloutPolicy) {
		p.Waves[1].Approval = &proto.Approval{Required: true, Approvers: approvers}
	})
}

// approve files an approver's approval of a wave.
func (s *scenario) approve(id, rollout string, wave int, actor string) *scenario {
	s.in.Intents = append(s.in.Intents, rc.Intent{ID: id, RolloutID: rollout, Kind: rc.IntentApprove, Actor: actor, At: s.in.Now, Wave: &wave,
		Comment: "change board said yes"})
	return s
}

// canaryDone: the canary of approving converged, wave 1 is current.
func canaryDone(s *scenario, approvers int) {
	s.release(approving(s, approvers).Build(), fleetkit.Commit(1)).online("a", "b", "c").tick().advance(time.Minute)
	s.confirm(id1, "a").tick().advance(6 * time.Minute)
}

// wantResult wants an intent's verdict with a code.
func wantResult(id string, accepted bool, code string) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		for _, r := range out.IntentResults {
			if r.IntentID == id {
				if r.Accepted != accepted || r.Reason.Code != code {
					t.Fatalf("intent %s: accepted %v, %s (%s); want %v, %s", id, r.Accepted, r.Reason.Code, r.Reason.Message, accepted, code)
				}
				return
			}
		}
		t.Fatalf("no result for intent %s in %s", id, mustJSON(t, out.IntentResults))
	}
}

// noRolloutMove wants no rollout transition in the tick.
func noRolloutMove() func(*testing.T, rc.Output) { return noEvent(rc.EventRolloutTransition) }

var changeControlScenarios = []goldenCase{
	// ---- rule 13: maintenance windows ----
	{
		name: "rule13-window-holds-dispatch",
		desc: "rule 13: the channel's hosts may be dispatched on Sundays 20:00-22:00 Berlin time only; at 13:00 the canary waits (gate window) and explain names the next opening",
		build: func(s *scenario) {
			s.release(windowed(s, sundayEvening).Build(), fleetkit.Commit(1)).online("a", "b", "c")
		},
		check: all(wantBlockedSaying("a", codes.Window, "the next opens Sun 20:00 Europe/Berlin (2026-03-01T19:00:00Z)"), wantIntents()),
	},
	{
		name: "rule13-window-opening-releases-hosts",
		desc: "rule 13: the canary waited seven hours for its window; at 20:00 Berlin time it is dispatched, and the wait was no stall (rule 11)",
		build: func(s *scenario) {
			s.release(windowed(s, sundayEvening).Build(), fleetkit.Commit(1)).online("a", "b", "c").tick()
			s.advance(2 * time.Hour).tick().advance(5 * time.Hour)
		},
		check: all(wantIntents("a"), noRolloutMove()),
	},
	{
		name: "rule13-window-across-a-change-of-clocks",
		desc: "rule 13: a window on Sundays at 01:00 Berlin time for three hours spans the start of summer time on 2026-03-29 (02:00 CET becomes 03:00 CEST): it lasts three real hours, 00:00-03:00 UTC, so at 02:30 UTC (04:30 on the wall clock) it is still open and the canary is dispatched",
		build: func(s *scenario) {
			night := proto.Window{Days: []string{"sun"}, Start: "01:00", DurationMinutes: 180, TimeZone: "Europe/Berlin"}
			s.release(windowed(s, night).Build(), fleetkit.Commit(1)).online("a", "b", "c").tick()
			s.advance(27*24*time.Hour + 14*time.Hour + 30*time.Minute) // 2026-03-29 02:30 UTC
		},
		check: all(wantIntents("a"), noRolloutMove()),
	},
	{
		name: "rule13-window-before-a-change-of-clocks",
		desc: "rule 13: the same window, the day before: the canary waits, and the next opening is Sunday 01:00 CET, 00:00 UTC",
		build: func(s *scenario) {
			night := proto.Window{Days: []string{"sun"}, Start: "01:00", DurationMinutes: 180, TimeZone: "Europe/Berlin"}
			s.release(windowed(s, night).Build(), fleetkit.Commit(1)).online("a", "b", "c").tick()
			s.advance(27 * 24 * time.Hour) // Saturday 2026-03-28 12:00 UTC
		},
		check: all(wantBlockedSaying("a", codes.Window, "the next opens Sun 01:00 Europe/Berlin (2026-03-29T00:00:00Z)"), wantIntents()),
	},
	{
		name: "rule13-in-flight-host-finishes-after-the-window-closes",
		desc: "rule 13: the canary was dispatched at 20:00 and confirms after the window closed at 22:00: it soaks and converges; the next wave waits for next Sunday's window",
		build: func(s *scenario) {
			s.release(windowed(s, sundayEvening).Build(), fleetkit.Commit(1)).online("a", "b", "c").tick()
			s.advance(7 * time.Hour).tick()      // 20:00 Berlin: a dispatched
			s.advance(2*time.Hour + time.Minute) // 22:01 Berlin: closed
			s.confirm(id1, "a").tick().advance(6 * time.Minute)
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Converged", codes.Soaked), wantIntents(),
			wantBlockedSaying("b", codes.Window, "the next opens Sun 20:00 Europe/Berlin (2026-03-08T19:00:00Z)")),
	},
	{
		name: "rule13-wave-and-host-windows-take-precedence",
		desc: "rule 13: the channel's window is closed, but the canary wave has its own, open now (every day from 12:00 UTC for an hour), and hosts tagged db have theirs; the canary is dispatched",
		build: func(s *scenario) {
			noon := proto.Window{Days: []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}, Start: "12:00", DurationMinutes: 60, TimeZone: "UTC"}
			b := windowed(s, sundayEvening).Policy("stable", func(p *proto.RolloutPolicy) {
				p.Waves[0].Windows = []proto.Window{noon}
				p.HostWindows = []proto.HostWindows{{Selector: proto.Selector{Tags: []string{"db"}}, Windows: []proto.Window{sundayEvening}}}
			})
			f := b.Build()
			f.Waves["stable"][0].Windows = []proto.Window{noon}
			s.release(f, fleetkit.Commit(1)).online("a", "b", "c")
		},
		check: wantIntents("a"),
	},
	{
		name: "rule13-rollback-is-not-held-by-a-window",
		desc: "rule 13: the canary, dispatched in its window, turns unhealthy after the window closed; rollback-and-halt sends it back at once: a rollback undoes a change and waits for no window",
		build: func(s *scenario) {
			b := windowed(s, sundayEvening).Policy("stable", func(p *proto.RolloutPolicy) { p.OnHealthFailure = proto.OnHealthFailureRollbackAndHalt })
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c").tick()
			s.advance(7 * time.Hour).tick()
			s.confirm(id1, "a").tick().advance(2*time.Hour + time.Minute)
			s.observe("a", func(o *rc.ObservedHost) { o.Probes = rc.ProbeSummary{Total: 1, Failed: []string{"http"}} })
		},
		check: all(wantEvent(rc.EventRolloutTransition, "", "Reverting", codes.HealthFailure), wantIntents("a")),
	},

	// ---- rule 14: freezes ----
	{
		name: "rule14-freeze-holds-the-opening",
		desc: "rule 14: a freeze of channel stable is in force: its new release does not open (rollout_deferred, freeze)",
		build: func(s *scenario) {
			s.release(withFreezes(three(s).Build(), frozen(-time.Hour, 24*time.Hour, "stable")), fleetkit.Commit(1)).online("a", "b", "c")
		},
		check: all(wantEvent(rc.EventRolloutDeferred, "", "", codes.Freeze), wantIntents()),
	},
	{
		name: "rule14-freeze-of-another-channel-holds-nothing",
		desc: "rule 14: a freeze of channel prod does not hold stable",
		build: func(s *scenario) {
			f := three(s).Channel("prod", 0).Build()
			s.release(withFreezes(f, frozen(-time.Hour, 24*time.Hour, "prod")), fleetkit.Commit(1)).online("a", "b", "c")
		},
		check: wantIntents("a"),
	},
	{
		name: "rule14-freeze-holds-dispatch-of-a-running-rollout",
		desc: "rule 14: the canary converged; then a fleet-wide freeze is pushed (a new release, which waits for the running rollout); the running rollout's next wave is held (gate freeze), and its soaking host lands",
		build: func(s *scenario) {
			b := started(s)
			s.confirm(id1, "a").tick().advance(6 * time.Minute)
			s.release(withFreezes(b.Bump("v2").Build(), frozen(0, 48*time.Hour)), fleetkit.Commit(2))
		},
		check: all(wantBlockedSaying("b", codes.Freeze, "quarter-end close"), wantIntents()),
	},
	{
		name: "rule14-break-freeze-lets-a-running-rollout-through",
		desc: "rule 14: a freeze holds the running rollout's next wave; an approver breaks it for this rollout, with a comment: b and c are dispatched, and the break is journalled",
		build: func(s *scenario) {
			b := started(s)
			s.confirm(id1, "a").tick().advance(6 * time.Minute)
			s.release(withFreezes(b.Bump("v2").Build(), frozen(0, 48*time.Hour)), fleetkit.Commit(2)).tick()
			s.in.Intents = append(s.in.Intents, rc.Intent{ID: "bf1", RolloutID: id1, Kind: rc.IntentBreakFreeze, Actor: "carol", At: s.in.Now, Comment: "security fix"})
		},
		check: all(wantResult("bf1", true, codes.FreezeBroken), wantEvent(rc.EventIntentAccepted, "", "", codes.FreezeBroken), wantIntents("b", "c")),
	},
	{
		name: "rule14-break-freeze-lets-a-ref-open",
		desc: "rule 14: a freeze keeps the channel's release from opening; an approver breaks it for that rollout id: it opens and its canary is dispatched in the same tick",
		build: func(s *scenario) {
			s.release(withFreezes(three(s).Build(), frozen(-time.Hour, 24*time.Hour)), fleetkit.Commit(1)).online("a", "b", "c").tick().advance(time.Minute)
			s.in.Intents = append(s.in.Intents, rc.Intent{ID: "bf1", RolloutID: id1, Kind: rc.IntentBreakFreeze, Actor: "carol", At: s.in.Now, Comment: "hotfix"})
		},
		check: all(wantResult("bf1", true, codes.FreezeBroken), wantEvent(rc.EventRolloutOpened, "", "", codes.RefMoved), wantIntents("a")),
	},
	{
		name: "rule14-break-freeze-without-a-freeze-refused",
		desc: "rule 14: no freeze holds the channel: a break-freeze is refused (not_frozen)",
		build: func(s *scenario) {
			started(s)
			s.in.Intents = append(s.in.Intents, rc.Intent{ID: "bf1", RolloutID: id1, Kind: rc.IntentBreakFreeze, Actor: "carol", At: s.in.Now, Comment: "just in case"})
		},
		check: wantResult("bf1", false, codes.NotFrozen),
	},

	// ---- rule 15: approval gates ----
	{
		name: "rule15-wave-waits-for-approvals",
		desc: "rule 15: wave 1 needs two approvals; the canary converged and wave 1 is current, but b and c wait (gate approval), and no stall is declared",
		build: func(s *scenario) {
			canaryDone(s, 2)
			s.advance(2 * time.Hour)
		},
		check: all(wantBlockedSaying("b", codes.Approval, "needs 2 approval(s) (none yet)"), wantIntents(), noRolloutMove()),
	},
	{
		name: "rule15-an-approver-counts-once",
		desc: "rule 15: alice approves wave 1 twice: the second is accepted as a repeat and counts nothing; b and c still wait for a second approver",
		build: func(s *scenario) {
			canaryDone(s, 2)
			s.approve("ap1", id1, 1, "alice").tick().advance(time.Minute)
			s.approve("ap2", id1, 1, "alice")
		},
		check: all(wantResult("ap2", true, codes.AlreadyInState), wantIntents(), noEvent(rc.EventHostWaiting)),
	},
	{
		name: "rule15-two-approvers-release-the-wave",
		desc: "rule 15: alice then bob approve wave 1: b and c are dispatched",
		build: func(s *scenario) {
			canaryDone(s, 2)
			s.approve("ap1", id1, 1, "alice").tick().advance(time.Minute)
			s.approve("ap2", id1, 1, "bob")
		},
		check: all(wantResult("ap2", true, codes.OperatorApprove), wantIntents("b", "c")),
	},
	{
		name: "rule15-approvals-of-another-wave-or-rollout-do-not-count",
		desc: "rule 15: approvals of wave 0 (which needs none), of a wave that does not exist, and of another rollout are refused, and b and c still wait",
		build: func(s *scenario) {
			canaryDone(s, 1)
			s.approve("ap1", id1, 0, "alice").approve("ap2", id1, 7, "alice").approve("ap3", rid("stable", 9), 1, "alice")
		},
		check: all(wantResult("ap1", false, codes.NotApprovable), wantResult("ap2", false, codes.NotApprovable),
			wantResult("ap3", false, codes.UnknownRollout), wantIntents()),
	},
	{
		name: "rule15-approval-of-the-first-wave-holds-the-canary",
		desc: "rule 15: wave 0 needs an approval: the canary waits from the start; an approval made before for another rollout does not count",
		build: func(s *scenario) {
			b := three(s).Policy("stable", func(p *proto.RolloutPolicy) { p.Waves[0].Approval = &proto.Approval{Required: true} })
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c")
		},
		check: all(wantBlockedSaying("a", codes.Approval, "needs 1 approval(s)"), wantIntents()),
	},
	{
		name: "rule14-freeze-ends",
		desc: "rule 14: the freeze that held the opening is over: the release opens and its canary is dispatched",
		build: func(s *scenario) {
			s.release(withFreezes(three(s).Build(), frozen(-time.Hour, 2*time.Hour)), fleetkit.Commit(1)).online("a", "b", "c").tick()
			s.advance(time.Hour)
		},
		check: all(wantEvent(rc.EventRolloutOpened, "", "", codes.RefMoved), wantIntents("a")),
	},
	// ---- rules 13 and 14: the input's order does not matter ----
	{
		name: "rule13-window-lists-in-any-order",
		desc: "rule 13: two windows open at the same instant (Sun 20:00 Berlin and Sun 19:00 UTC), their days listed in any order: written in either order, the rollout freezes them alike and the held canary's message names the same opening",
		build: func(s *scenario) {
			berlin := proto.Window{Days: []string{"sun", "sat"}, Start: "20:00", DurationMinutes: 120, TimeZone: "Europe/Berlin"}
			utc := proto.Window{Days: []string{"sun"}, Start: "19:00", DurationMinutes: 60, TimeZone: "UTC"}
			s.release(windowed(s, berlin, utc).Build(), fleetkit.Commit(1)).online("a", "b", "c")
			berlin.Days = []string{"sat", "sun"}
			other := newScenario(s.t)
			other.release(windowed(other, utc, berlin).Build(), fleetkit.Commit(1)).online("a", "b", "c")
			sameOutput(s, rc.Reconcile(other.in))
		},
		check: all(wantBlockedSaying("a", codes.Window, "(2026-03-01T19:00:00Z)"), wantIntents()),
	},
	{
		name: "rule14-overlapping-freezes-in-any-order",
		desc: "rule 14: two freezes of the running rollout's channel overlap: written in either order, the held hosts' reason lists them in one order (by start), so reordering the release rewrites no reason",
		build: func(s *scenario) {
			b := started(s)
			s.confirm(id1, "a").tick().advance(6 * time.Minute)
			audit := proto.Freeze{From: t0, Until: t0.Add(72 * time.Hour), Reason: "audit"}
			closing := frozen(-time.Hour, 48*time.Hour)
			other := *s
			other.in.Hosts, other.in.Channels = maps.Clone(s.in.Hosts), slices.Clone(s.in.Channels)
			other.release(withFreezes(b.Bump("v2").Build(), audit, closing), fleetkit.Commit(2))
			s.release(withFreezes(b.Build(), closing, audit), fleetkit.Commit(2))
			sameOutput(s, rc.Reconcile(other.in))
		},
		check: all(wantBlockedSaying("b", codes.Freeze, "quarter-end close; audit"), wantIntents()),
	},
}

// sameOutput fails unless s's input decides what want says: the same
// input written in another order.
func sameOutput(s *scenario, want rc.Output) {
	if got := rc.Reconcile(s.in); !bytes.Equal(mustJSON(s.t, got), mustJSON(s.t, want)) {
		s.t.Fatalf("the order of the input changed the output:\n%s\nagainst:\n%s", mustJSON(s.t, got), mustJSON(s.t, want))
	}
}
