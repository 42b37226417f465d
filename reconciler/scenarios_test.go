package reconciler_test

import (
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// A golden case: build drives a scenario up to the input of the tick the
// case is about; check asserts what that tick must do, so regenerating
// the files cannot silently change what a case shows.
type goldenCase struct {
	name  string
	desc  string
	build func(s *scenario)
	check func(*testing.T, rc.Output)
}

// three is the usual small fleet: channel stable, wave 0 = a (canary),
// wave 1 = b and c, soak 5 and 10 minutes.
func three(s *scenario) *fleetkit.Builder {
	return fleetkit.New(s.t).Channel("stable", 5, 10).
		Host("a", "stable", 0, "canary", "web").Host("b", "stable", 1, "web").Host("c", "stable", 1, "db")
}

// started releases three at commit 1 with every host online and runs the
// first tick (a is dispatched).
func started(s *scenario) *fleetkit.Builder {
	b := three(s)
	s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c").tick().advance(time.Minute)
	return b
}

// soakingA has a confirmed and soaking (one minute of its five).
func soakingA(s *scenario) *fleetkit.Builder {
	b := started(s)
	s.confirm(rid("stable", 1), "a").tick().advance(time.Minute)
	return b
}

// four is three with a second canary, d, and no soak in wave 0: a wave
// is promoted only when one of its hosts converged, so a case about a
// canary that fails or defers needs another one that converges.
func four(s *scenario) *fleetkit.Builder {
	return fleetkit.New(s.t).Channel("stable", 0, 10).
		Host("a", "stable", 0, "canary", "web").Host("d", "stable", 0, "canary", "db").
		Host("b", "stable", 1, "web").Host("c", "stable", 1, "db")
}

// startedFour releases four with every host online and runs the first
// tick (a and d are dispatched).
func startedFour(s *scenario) *fleetkit.Builder {
	b := four(s)
	s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
	return b
}

var id1 = rid("stable", 1)

func intentAccepted(kind string) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		if len(out.IntentResults) == 0 || !out.IntentResults[0].Accepted {
			t.Fatalf("%s intent not accepted: %+v", kind, out.IntentResults)
		}
	}
}

func str(s string) *string { return &s }

var scenarios = []goldenCase{
	// ---- rule 1: refs open rollouts; one active rollout per channel ----
	{
		name: "rule01-first-release-opens-rollout",
		desc: "rule 1: a channel's first verified ref opens <channel>@<ref>, which passes the static gate and dispatches wave 0",
		build: func(s *scenario) {
			s.release(three(s).Build(), fleetkit.Commit(1)).online("a", "b", "c")
		},
		check: all(wantEvent(rc.EventRolloutOpened, "", "Opening", codes.RefMoved), wantEvent(rc.EventRolloutTransition, "", "Active", codes.CompliancePassed), wantIntents("a")),
	},
	{
		name: "rule01-unchanged-ref-opens-nothing",
		desc: "rule 1: a ref that has been rolled does not open a rollout again",
		build: func(s *scenario) {
			s.release(three(s).Build(), fleetkit.Commit(1)).online("a", "b", "c").converge(11 * time.Minute)
		},
		check: all(noEvent(rc.EventRolloutOpened), wantIntents()),
	},
	{
		name: "rule01-new-ref-waits-for-active-rollout",
		desc: "rule 1: a new ref while a rollout is active waits (ref_waiting, recorded as a deferral) and interrupts nothing",
		build: func(s *scenario) {
			b := started(s)
			s.release(b.Bump("v2").Build(), fleetkit.Commit(2))
		},
		check: all(wantEvent(rc.EventRefWaiting, "", "", codes.RefWaiting), noEvent(rc.EventRolloutOpened)),
	},
	{
		name: "rule01-waiting-ref-reported-once",
		desc: "rule 1: a ref still waiting is not reported again (the previous tick's deferral is in the input)",
		build: func(s *scenario) {
			b := started(s)
			s.release(b.Bump("v2").Build(), fleetkit.Commit(2)).tick().advance(time.Minute)
		},
		check: noEvent(rc.EventRefWaiting),
	},
	{
		name: "rule01-later-ref-replaces-waiting-one",
		desc: "rule 1: queue depth one: a later ref replaces the waiting one and is reported",
		build: func(s *scenario) {
			b := started(s)
			s.release(b.Bump("v2").Build(), fleetkit.Commit(2)).tick().advance(time.Minute)
			s.release(b.Bump("v3").Build(), fleetkit.Commit(3))
		},
		check: wantEvent(rc.EventRefWaiting, "", "", codes.RefWaiting),
	},
	{
		name: "rule01-waiting-ref-opens-when-rollout-converged",
		desc: "rule 1: once the active rollout converged, the waiting ref opens",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("a").tick().advance(time.Minute)
			s.release(b.Bump("v2").Build(), fleetkit.Commit(2)).tick().advance(time.Minute)
			s.confirm(id1, "a")
		},
		check: all(wantEvent(rc.EventRolloutTransition, "", "Converged", ""), wantEvent(rc.EventRolloutOpened, "", "", ""), wantIntents("a")),
	},
	{
		name: "rule01-halted-rollout-superseded",
		desc: "rule 1: a new ref replaces a halted rollout with nothing activating: Halted -> Superseded, and the new ref opens",
		build: func(s *scenario) {
			b := soakingA(s)
			s.intent("i1", id1, rc.IntentPause, "alice").tick().advance(time.Minute)
			s.release(b.Bump("v2").Build(), fleetkit.Commit(2))
		},
		check: all(wantEvent(rc.EventRolloutTransition, "", "Superseded", codes.Superseded), wantEvent(rc.EventRolloutOpened, "", "", "")),
	},
	{
		name: "rule01-halted-rollout-with-activating-host-not-superseded",
		desc: "rule 1: a newer ref never interrupts a host mid-activation: while a is Activating in the halted rollout, the new ref waits",
		build: func(s *scenario) {
			b := started(s)
			s.intent("i1", id1, rc.IntentPause, "alice").tick().advance(time.Minute)
			s.release(b.Bump("v2").Build(), fleetkit.Commit(2))
		},
		check: all(wantEvent(rc.EventRefWaiting, "", "", ""), noEvent(rc.EventRolloutOpened)),
	},
	{
		name: "rule01-manifest-for-another-ref-deferred",
		desc: "rule 1: a channel whose manifest is not for its ref opens nothing (manifest_mismatch)",
		build: func(s *scenario) {
			s.release(three(s).Build(), fleetkit.Commit(1)).online("a", "b", "c")
			s.in.Channels[0].Ref = fleetkit.Commit(9)
		},
		check: all(wantEvent(rc.EventRolloutDeferred, "", "", codes.ManifestMismatch), noEvent(rc.EventRolloutOpened)),
	},

	// ---- rule 2: static compliance gate ----
	{
		name: "rule02-static-compliance-enforce-blocks",
		desc: "rule 2: a failing static control on a target closure, in enforce mode: Opening -> Failed, nothing dispatched",
		build: func(s *scenario) {
			b := three(s).Compliance("stable", proto.ComplianceEnforce, "nis2")
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c")
			s.observe("b", func(o *rc.ObservedHost) {
				o.Compliance = []rc.ComplianceResult{{Control: "ssh-root-login", Framework: "nis2", Type: rc.ControlStatic, Closure: fleetkit.Closure("b", "v1")}}
			})
		},
		check: all(wantEvent(rc.EventRolloutTransition, "", "Failed", codes.ComplianceBlocked), wantIntents()),
	},
	{
		name: "rule02-static-compliance-permissive-warns",
		desc: "rule 2: the same failure in permissive mode: a warning event, and the rollout starts",
		build: func(s *scenario) {
			b := three(s).Compliance("stable", proto.CompliancePermissive, "nis2")
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c")
			s.observe("b", func(o *rc.ObservedHost) {
				o.Compliance = []rc.ComplianceResult{{Control: "ssh-root-login", Framework: "nis2", Type: rc.ControlBoth, Closure: fleetkit.Closure("b", "v1")}}
			})
		},
		check: all(wantEvent(rc.EventComplianceWarning, "b", "", codes.ComplianceWarning), wantEvent(rc.EventRolloutTransition, "", "Active", ""), wantIntents("a")),
	},
	{
		name: "rule02-static-compliance-disabled",
		desc: "rule 2: in disabled mode static results are not consulted",
		build: func(s *scenario) {
			s.release(three(s).Build(), fleetkit.Commit(1)).online("a", "b", "c")
			s.observe("a", func(o *rc.ObservedHost) {
				o.Compliance = []rc.ComplianceResult{{Control: "c1", Type: rc.ControlStatic, Closure: fleetkit.Closure("a", "v1")}}
			})
		},
		check: all(noEvent(rc.EventComplianceWarning), wantIntents("a")),
	},
	{
		name: "rule02-static-result-for-other-closure-ignored",
		desc: "rule 2: only results about the target closure count; a failing result about the running closure does not block",
		build: func(s *scenario) {
			b := three(s).Compliance("stable", proto.ComplianceEnforce)
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c")
			s.observe("a", func(o *rc.ObservedHost) {
				o.Compliance = []rc.ComplianceResult{{Control: "c1", Type: rc.ControlStatic, Closure: fleetkit.Closure("a", "v0")}}
			})
		},
		check: all(wantEvent(rc.EventRolloutTransition, "", "Active", ""), wantIntents("a")),
	},

	// ---- rule 3: channel edges ----
	{
		name: "rule03-both-refs-move-predecessor-first",
		desc: "rule 3: edge gates stable; both move in one tick: edge opens, stable is deferred (rollout_deferred)",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("edge", 0).Channel("stable", 0).Host("e1", "edge", 0).Host("s1", "stable", 0).ChannelEdge("edge", "stable")
			s.release(b.Build(), fleetkit.Commit(1)).online("e1", "s1")
		},
		check: all(wantEvent(rc.EventRolloutOpened, "", "", ""), wantEvent(rc.EventRolloutDeferred, "", "", codes.ChannelEdge), wantIntents("e1")),
	},
	{
		name: "rule03-deferral-reported-once",
		desc: "rule 3: one rollout_deferred per (channel, ref, blocker), not one per tick",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("edge", 0).Channel("stable", 0).Host("e1", "edge", 0).Host("s1", "stable", 0).ChannelEdge("edge", "stable")
			s.release(b.Build(), fleetkit.Commit(1)).online("e1", "s1").tick().advance(time.Minute)
		},
		check: all(noEvent(rc.EventRolloutDeferred), noEvent(rc.EventRolloutOpened)),
	},
	{
		name: "rule03-predecessor-without-history-is-open",
		desc: "rule 3: a predecessor channel that never had a rollout does not block",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("edge", 0).Channel("stable", 0).Host("e1", "edge", 0).Host("s1", "stable", 0).ChannelEdge("edge", "stable")
			s.release(b.Build(), fleetkit.Commit(1), "stable").online("e1", "s1")
		},
		check: all(wantEvent(rc.EventRolloutOpened, "", "", ""), wantIntents("s1")),
	},
	{
		name: "rule03-halted-predecessor-blocks",
		desc: "rule 3: a Halted predecessor rollout blocks the gated channel",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("edge", 10).Channel("stable", 0).Host("e1", "edge", 0).Host("s1", "stable", 0).ChannelEdge("edge", "stable")
			f := b.Build()
			s.release(f, fleetkit.Commit(1), "edge").online("e1", "s1").tick().advance(time.Minute)
			s.confirm(rid("edge", 1), "e1").tick().advance(time.Minute)
			s.intent("i1", rid("edge", 1), rc.IntentPause, "bob").tick().advance(time.Minute)
			s.release(f, fleetkit.Commit(1), "stable")
		},
		check: all(wantEvent(rc.EventRolloutDeferred, "", "", codes.ChannelEdge), noEvent(rc.EventRolloutOpened)),
	},
	{
		name: "rule03-converged-predecessor-lets-gated-open",
		desc: "rule 3: once the predecessor's rollout is terminal, the gated channel opens",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("edge", 0).Channel("stable", 0).Host("e1", "edge", 0).Host("s1", "stable", 0).ChannelEdge("edge", "stable")
			s.release(b.Build(), fleetkit.Commit(1)).online("e1", "s1").tick().advance(time.Minute)
			s.confirm(rid("edge", 1), "e1")
		},
		check: all(wantEvent(rc.EventRolloutTransition, "", "Converged", ""), wantEvent(rc.EventRolloutOpened, "", "", ""), wantIntents("s1")),
	},

	// ---- rule 4: gates for Pending hosts, first block wins ----
	{
		name: "rule04-gate-quarantine",
		desc: "rule 4: a closure quarantined on the host holds it (gate quarantined)",
		build: func(s *scenario) {
			s.release(three(s).Build(), fleetkit.Commit(1)).online("a", "b", "c")
			s.observe("a", func(o *rc.ObservedHost) {
				o.Quarantine = []rc.Quarantine{{Closure: fleetkit.Closure("a", "v1"), Until: t0.Add(time.Hour)}}
			})
		},
		check: all(wantBlocked("a", codes.Quarantined), wantIntents()),
	},
	{
		name: "rule04-gate-expired-quarantine-ignored",
		desc: "rule 4: a quarantine that has expired does not hold the host",
		build: func(s *scenario) {
			s.release(three(s).Build(), fleetkit.Commit(1)).online("a", "b", "c")
			s.observe("a", func(o *rc.ObservedHost) {
				o.Quarantine = []rc.Quarantine{{Closure: fleetkit.Closure("a", "v1"), Until: t0.Add(-time.Second)}}
			})
		},
		check: wantIntents("a"),
	},
	{
		name: "rule04-gate-channel-edge-holds-pending-hosts",
		desc: "rule 4: stable is rolling out; its predecessor edge opens a new rollout; stable's wave-1 host waits (gate channel_edge)",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("edge", 0).Channel("stable", 0, 0).Host("e1", "edge", 0).
				Host("s1", "stable", 0).Host("s2", "stable", 1).ChannelEdge("edge", "stable")
			s.release(b.Build(), fleetkit.Commit(1)).online("e1", "s1", "s2").tick().advance(time.Minute)
			s.confirm(rid("edge", 1), "e1").tick().advance(time.Minute)
			s.confirm(rid("stable", 1), "s1")
			s.release(b.Bump("v2").Build(), fleetkit.Commit(2), "edge")
		},
		check: all(wantEvent(rc.EventRolloutOpened, "", "", ""), wantBlocked("s2", codes.ChannelEdge)),
	},
	{
		name: "rule04-gate-wave-not-active",
		desc: "rule 4: hosts of later waves wait for their wave; their Blocked says so, without an event each",
		build: func(s *scenario) {
			s.release(three(s).Build(), fleetkit.Commit(1)).online("a", "b", "c")
		},
		check: all(wantBlocked("b", codes.WaveNotActive), wantBlocked("c", codes.WaveNotActive), noEvent(rc.EventHostWaiting)),
	},
	{
		name: "rule04-gate-host-edge",
		desc: "rule 4: b waits until a, which gates it, converged (gate host_edge)",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0).Host("b", "stable", 0).Edge("a", "b")
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b")
		},
		check: all(wantBlocked("b", codes.HostEdge), wantEvent(rc.EventHostWaiting, "b", "", codes.HostEdge), wantIntents("a")),
	},
	{
		name: "rule04-gate-host-edge-opens-on-convergence",
		desc: "rule 4: once a converged, b is dispatched in the same tick",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0).Host("b", "stable", 0).Edge("a", "b")
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b").tick().advance(time.Minute)
			s.confirm(id1, "a")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Converged", ""), wantIntents("b")),
	},
	{
		name: "rule04-gate-budget",
		desc: "rule 4: a full disruption budget holds the next host (gate budget)",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0, "web").Host("b", "stable", 0, "web").
				Budget(proto.Selector{Tags: []string{"web"}}, 1, 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b")
		},
		check: all(wantIntents("a"), wantBlocked("b", codes.Budget)),
	},
	{
		name: "rule04-gate-compliance-of-earlier-wave",
		desc: "rule 4: a converged host of wave 0 now fails a runtime control (required): wave 1 hosts wait (gate compliance_earlier_wave)",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0, 0).Host("a", "stable", 0).Host("z", "stable", 0).Host("b", "stable", 1).
				Policy("stable", func(p *proto.RolloutPolicy) {
					p.HealthGate.ComplianceProbes = &proto.ComplianceProbes{Required: true}
				})
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "z", "b").tick().advance(time.Minute)
			s.confirm(id1, "a").tick().advance(time.Minute).tick().advance(time.Minute)
			s.observe("a", func(o *rc.ObservedHost) {
				o.Compliance = []rc.ComplianceResult{{Control: "auditd", Type: rc.ControlRuntime, Closure: fleetkit.Closure("a", "v1")}}
			})
			s.confirm(id1, "z")
		},
		check: all(wantEvent(rc.EventWavePromoted, "", "", ""), wantBlocked("b", codes.ComplianceEarlierWave), wantIntents()),
	},
	{
		name: "rule04-first-gate-wins",
		desc: "rule 4: a host both quarantined and behind an edge is reported quarantined: the first gate wins",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0).Host("b", "stable", 0).Edge("a", "b")
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b")
			s.observe("b", func(o *rc.ObservedHost) {
				o.Quarantine = []rc.Quarantine{{Closure: fleetkit.Closure("b", "v1"), Until: t0.Add(time.Hour)}}
			})
		},
		check: wantBlocked("b", codes.Quarantined),
	},
	{
		name: "rule04-gate-busy-in-other-rollout",
		desc: "rule 4: a host still activating in a cancelled rollout is not dispatched by the new one (gate busy)",
		build: func(s *scenario) {
			b := started(s)
			s.intent("i1", id1, rc.IntentCancel, "carol").tick().advance(time.Minute)
			s.release(b.Bump("v2").Build(), fleetkit.Commit(2))
		},
		check: all(wantEvent(rc.EventRolloutOpened, "", "", ""), wantBlocked("a", codes.Busy), wantIntents()),
	},

	// ---- rule 5: disruption budgets ----
	{
		name: "rule05-budget-shared-across-channels",
		desc: "rule 5: two channels carry the same budget selector: one limit across both rollouts",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("x", 0).Channel("y", 0).Host("x1", "x", 0, "web").Host("y1", "y", 0, "web").
				Budget(proto.Selector{Tags: []string{"web"}}, 1, 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("x1", "y1")
		},
		check: all(wantIntents("x1"), wantBlocked("y1", codes.Budget)),
	},
	{
		name: "rule05-budget-pct",
		desc: "rule 5: maxInFlightPct 40 of 5 hosts admits 2 (rounded down)",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0)
			for _, h := range []string{"h1", "h2", "h3", "h4", "h5"} {
				b.Host(h, "stable", 0)
			}
			b.Budget(proto.Selector{All: true}, 0, 40)
			s.release(b.Build(), fleetkit.Commit(1)).online("h1", "h2", "h3", "h4", "h5")
		},
		check: wantIntents("h1", "h2"),
	},
	{
		name: "rule05-budget-both-limits-apply",
		desc: "rule 5: maxInFlight 3 and maxInFlightPct 20 of 10 hosts: the tighter, 2, applies; dispatches in the same tick count",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0)
			var hosts []string
			for i := range 10 {
				h := string(rune('a'+i)) + "1"
				hosts = append(hosts, h)
				b.Host(h, "stable", 0)
			}
			b.Budget(proto.Selector{All: true}, 3, 20)
			s.release(b.Build(), fleetkit.Commit(1)).online(hosts...)
		},
		check: wantIntents("a1", "b1"),
	},
	{
		name: "rule05-budget-named-occupancy",
		desc: "rule 5: a named budget web (2) and an unnamed one over all hosts (3): each dispatch notes the occupancy of the budgets it counts against after it; w3's wait notes web full, by name",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).
				Host("db1", "stable", 0, "db").Host("w1", "stable", 0, "web").Host("w2", "stable", 0, "web").Host("w3", "stable", 0, "web").
				NamedBudget("web", proto.Selector{Tags: []string{"web"}}, 2, 0).
				Budget(proto.Selector{All: true}, 3, 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("db1", "w1", "w2", "w3")
		},
		check: all(wantIntents("db1", "w1", "w2"),
			wantBudgets(rc.EventHostTransition, "db1", rc.BudgetUse{Name: "all", InFlight: 1, Limit: 3}),
			wantBudgets(rc.EventHostTransition, "w1", rc.BudgetUse{Name: "web", InFlight: 1, Limit: 2}, rc.BudgetUse{Name: "all", InFlight: 2, Limit: 3}),
			wantBudgets(rc.EventHostTransition, "w2", rc.BudgetUse{Name: "web", InFlight: 2, Limit: 2}, rc.BudgetUse{Name: "all", InFlight: 3, Limit: 3}),
			wantBudgets(rc.EventHostWaiting, "w3", rc.BudgetUse{Name: "web", InFlight: 2, Limit: 2}),
		),
	},
	{
		name: "rule05-budget-named-full",
		desc: "rule 5: the named budget web admits 1: the waiting host's event and Blocked name it and show it full (1/1)",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("w1", "stable", 0, "web").Host("w2", "stable", 0, "web").
				NamedBudget("web", proto.Selector{Tags: []string{"web"}}, 1, 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("w1", "w2")
		},
		check: all(wantIntents("w1"), wantBlocked("w2", codes.Budget),
			wantBudgets(rc.EventHostTransition, "w1", rc.BudgetUse{Name: "web", InFlight: 1, Limit: 1}),
			wantBudgets(rc.EventHostWaiting, "w2", rc.BudgetUse{Name: "web", InFlight: 1, Limit: 1}),
			wantMessage(rc.EventHostWaiting, codes.Budget, "disruption budget web allows 1 host(s) in flight and is full (1/1)"),
		),
	},
	{
		name: "rule05-budget-tightened-shows-over-limit",
		desc: "rule 5: channel x fills the unnamed budget all (3 in flight of 3); channel y's release brings the same selector, named one-at-a-time, with limit 1: the tighter limit and its name apply to both, and y1 waits on 3/1",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("x", 0).Channel("y", 0).
				Host("x1", "x", 0).Host("x2", "x", 0).Host("x3", "x", 0).Host("y1", "y", 0).
				Budget(proto.Selector{All: true}, 3, 0)
			s.release(b.Build(), fleetkit.Commit(1), "x").online("x1", "x2", "x3", "y1").tick().advance(time.Minute)
			b = fleetkit.New(s.t).Channel("x", 0).Channel("y", 0).
				Host("x1", "x", 0).Host("x2", "x", 0).Host("x3", "x", 0).Host("y1", "y", 0).
				NamedBudget("one-at-a-time", proto.Selector{All: true}, 1, 0)
			s.release(b.Build(), fleetkit.Commit(2), "y")
		},
		check: all(wantIntents(), wantBlocked("y1", codes.Budget),
			wantBudgets(rc.EventHostWaiting, "y1", rc.BudgetUse{Name: "one-at-a-time", InFlight: 3, Limit: 1}),
			wantMessage(rc.EventHostWaiting, codes.Budget, "disruption budget one-at-a-time allows 1 host(s) in flight and is full (3/1)"),
		),
	},
	{
		name: "rule05-soaking-hosts-count",
		desc: "rule 5: a soaking host is in flight: with maxInFlight 1 the next host waits",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 10).Host("a", "stable", 0).Host("b", "stable", 0).
				Budget(proto.Selector{All: true}, 1, 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b").tick().advance(time.Minute)
			s.confirm(id1, "a")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Soaking", ""), wantIntents()),
	},
	{
		name: "rule05-deferred-hosts-are-not-in-flight",
		desc: "rule 5: a deferred host does not count: with maxInFlight 1 the next host is dispatched",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0).Host("b", "stable", 0).
				Budget(proto.Selector{All: true}, 1, 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b").tick().advance(time.Minute)
			s.report(id1, "a", rc.OutcomeDeferred)
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Deferred", codes.Deferred), wantIntents("b")),
	},

	// ---- rule 6: offline hosts ----
	{
		name: "rule06-offline-host-skipped",
		desc: "rule 6: a host offline when its wave becomes active is Skipped and does not hold the wave",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0).Host("b", "stable", 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("a").offline("b")
		},
		check: all(wantEvent(rc.EventHostTransition, "b", "Skipped", codes.Offline), wantIntents("a")),
	},
	{
		name: "rule06-skipped-host-does-not-block-promotion",
		desc: "rule 6: the last wave has only a skipped host left: the rollout converges",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0).Host("b", "stable", 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("a").offline("b").tick().advance(time.Minute)
			s.confirm(id1, "a")
		},
		check: wantEvent(rc.EventRolloutTransition, "", "Converged", codes.Converged),
	},
	{
		name: "rule06-skipped-host-returns-and-catches-up",
		desc: "rule 6: a skipped host of the latest, converged rollout comes back and is dispatched to the channel's current target",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0).Host("b", "stable", 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("a").offline("b").tick().advance(time.Minute)
			s.confirm(id1, "a").tick().advance(time.Minute).tick().advance(time.Minute)
			s.online("b")
		},
		check: all(wantEvent(rc.EventHostTransition, "b", "Activating", codes.CatchUp), wantIntents("b")),
	},
	{
		name: "rule06-returning-host-gets-newest-target",
		desc: "rule 6: b was skipped in rollout 1; rollout 2 is now current; b returns and gets rollout 2's target, not rollout 1's",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0).Host("b", "stable", 0).Edge("a", "b")
			s.release(b.Build(), fleetkit.Commit(1)).online("a").offline("b").tick().advance(time.Minute)
			s.confirm(id1, "a").tick().advance(time.Minute).tick().advance(time.Minute)
			s.release(b.Bump("v2").Build(), fleetkit.Commit(2)).tick().advance(time.Minute)
			s.confirm(rid("stable", 2), "a").tick().advance(time.Minute)
			s.online("b")
		},
		check: all(wantIntents("b"), func(t *testing.T, out rc.Output) {
			if out.Actions[0].RolloutID != rid("stable", 2) || out.Actions[0].Target != fleetkit.Closure("b", "v2") {
				t.Fatalf("b dispatched to %s in %s", out.Actions[0].Target, out.Actions[0].RolloutID)
			}
		}),
	},

	// ---- rule 7: Activating ----
	{
		name: "rule07-confirm-timeout",
		desc: "rule 7: no confirmation within the confirm window: Failed (confirm_timeout); with maxFailures 0 the rollout halts",
		build: func(s *scenario) {
			started(s)
			s.advance(5 * time.Minute)
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Failed", codes.ConfirmTimeout), wantEvent(rc.EventRolloutTransition, "", "Halted", codes.HealthFailure)),
	},
	{
		name: "rule07-agent-rollback-reverted",
		desc: "rule 7: the agent reports it rolled back: Reverted, counted as a failure",
		build: func(s *scenario) {
			started(s)
			s.report(id1, "a", rc.OutcomeRolledBack)
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Reverted", codes.AgentRolledBack), wantEvent(rc.EventRolloutTransition, "", "Halted", codes.HealthFailure)),
	},
	{
		name: "rule07-deferred-activation",
		desc: "rule 7: the agent staged the target for the next boot: Deferred, not in flight; it does not hold the wave, which the other canary's convergence promotes",
		build: func(s *scenario) {
			startedFour(s)
			s.report(id1, "a", rc.OutcomeDeferred).confirm(id1, "d")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Deferred", codes.Deferred), wantEvent(rc.EventWavePromoted, "", "", ""), wantIntents("b", "c")),
	},
	{
		name: "rule07-deferred-host-boots-into-target",
		desc: "rule 7: a deferred host reports running the target after its reboot: Soaking",
		build: func(s *scenario) {
			started(s)
			s.report(id1, "a", rc.OutcomeDeferred).tick().advance(time.Minute)
			s.reboot(id1, "a")
		},
		check: wantEvent(rc.EventHostTransition, "a", "Soaking", codes.BootedIntoTarget),
	},
	{
		name: "rule07-deferred-host-completes-its-wave-first",
		desc: "rule 7, rule 5: a deferred host that booted into the target completes its wave in the step that finishes it, so the next wave starts before a later channel takes the budget it frees, as the next tick would start it (found by TestPropertyBoundedTicksEndAlike)",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("x", 0, 0).Channel("y", 0).
				Host("x1", "x", 0, "web").Host("x2", "x", 1, "web").Host("y1", "y", 0, "web").Host("y2", "y", 0, "web").
				Budget(proto.Selector{Tags: []string{"web"}}, 1, 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("x1", "x2", "y1", "y2").tick().advance(time.Minute)
			s.report(rid("x", 1), "x1", rc.OutcomeDeferred).tick().advance(time.Minute)
			// y1 took the budget x1 left; it converges as x1 boots into
			// the target.
			s.confirm(rid("y", 1), "y1").reboot(rid("x", 1), "x1")
		},
		check: all(wantEvent(rc.EventHostTransition, "x1", "Soaking", codes.BootedIntoTarget), wantEvent(rc.EventWavePromoted, "", "", ""),
			wantIntents("x2")),
	},
	{
		name: "rule07-activation-failed",
		desc: "rule 7: the agent reports the switch failed: Failed (activation_failed)",
		build: func(s *scenario) {
			started(s)
			s.report(id1, "a", rc.OutcomeFailed)
		},
		check: wantEvent(rc.EventHostTransition, "a", "Failed", codes.ActivationFailed),
	},
	{
		name: "rule07-manifest-rejected",
		desc: "rule 7: the agent refused the rollout manifest: Failed (manifest_rejected)",
		build: func(s *scenario) {
			started(s)
			s.report(id1, "a", rc.OutcomeManifestRejected)
		},
		check: wantEvent(rc.EventHostTransition, "a", "Failed", codes.ManifestRejected),
	},
	{
		name: "rule07-stale-report-ignored",
		desc: "rule 7: an activation report older than the dispatch, or for another rollout, moves nothing",
		build: func(s *scenario) {
			started(s)
			s.observe("a", func(o *rc.ObservedHost) {
				o.Activation = &rc.Activation{RolloutID: "stable@0000000", Closure: fleetkit.Closure("a", "v1"), Outcome: rc.OutcomeFailed, At: s.in.Now}
			})
		},
		check: all(noEvent(rc.EventHostTransition), wantIntents()),
	},

	// ---- rule 8: Soaking ----
	{
		name: "rule08-soak-not-elapsed",
		desc: "rule 8: a healthy host half-way through its 10-minute soak stays Soaking",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 10).Host("a", "stable", 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("a").tick().advance(time.Minute)
			s.confirm(id1, "a").tick().advance(5 * time.Minute)
		},
		check: all(noEvent(rc.EventHostTransition), wantIntents()),
	},
	{
		name: "rule08-soaked-host-converges-and-wave-promotes",
		desc: "rule 8: a soaked for wave 0's soak and is healthy: Converged; the wave is promoted and wave 1 dispatched",
		build: func(s *scenario) {
			soakingA(s)
			s.advance(4 * time.Minute)
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Converged", codes.Soaked), wantEvent(rc.EventWavePromoted, "", "", ""), wantIntents("b", "c")),
	},
	{
		name: "rule08-named-waves",
		desc: "rule 8: the policy names its waves canary and main: the held host, the promotion and the rollout's waves say so",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0, 10).WaveNames("stable", "canary", "main").
				Host("a", "stable", 0).Host("b", "stable", 1)
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b").tick().advance(time.Minute)
			if h := s.hostIn(id1, "b"); h.Blocked.Message != "wave 1 (main) is not active yet" {
				s.t.Fatalf("b is held by %+v", h.Blocked)
			}
			s.confirm(id1, "a")
		},
		check: all(wantIntents("b"), wantMessage(rc.EventWavePromoted, codes.WavePromoted, "wave 0 (canary) done; wave 1 (main) starts")),
	},
	{
		name: "rule08-health-judged-from-checkins-after-the-confirm",
		desc: "rule 8: a confirm read before the host's next check-in: the stored status still names the closure it left, so its health is not judged yet and it stays Soaking",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 10).Host("a", "stable", 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("a").tick().advance(time.Minute)
			before := s.in.Hosts["a"]
			s.confirm(id1, "a")
			s.observe("a", func(o *rc.ObservedHost) {
				o.Current, o.Booted, o.LastSeen = before.Current, before.Booted, s.in.Now.Add(-10*time.Second)
			})
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Soaking", codes.Confirmed), noEvent(rc.EventRolloutTransition), wantIntents(),
			func(t *testing.T, out rc.Output) {
				for _, u := range out.Hosts {
					if u.Host.State != rc.HostSoaking {
						t.Fatalf("a is %s, want Soaking until it checks in on its target", u.Host.State)
					}
				}
			}),
	},
	{
		name: "rule08-failed-units-fail-soak",
		desc: "rule 8: more failed systemd units than the health gate allows: Failed (unhealthy)",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 10).Host("a", "stable", 0).
				Policy("stable", func(p *proto.RolloutPolicy) { p.HealthGate.SystemdFailedUnits = &proto.SystemdFailedUnits{Max: 0} })
			s.release(b.Build(), fleetkit.Commit(1)).online("a").tick().advance(time.Minute)
			s.confirm(id1, "a").tick().advance(time.Minute)
			s.observe("a", func(o *rc.ObservedHost) { o.FailedUnits = []string{"nginx.service"} })
		},
		check: wantEvent(rc.EventHostTransition, "a", "Failed", codes.Unhealthy),
	},
	{
		name: "rule08-failing-probe-fails-soak",
		desc: "rule 8: a failing health probe during the soak: Failed (unhealthy)",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 10).Host("a", "stable", 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("a").tick().advance(time.Minute)
			s.confirm(id1, "a").tick().advance(time.Minute)
			s.observe("a", func(o *rc.ObservedHost) { o.Probes = rc.ProbeSummary{Total: 2, Failed: []string{"http-200"}} })
		},
		check: wantEvent(rc.EventHostTransition, "a", "Failed", codes.Unhealthy),
	},
	{
		name: "rule08-offline-while-soaking",
		desc: "rule 8: a host that stops checking in while soaking cannot prove its health: Failed (offline_while_soaking)",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 30).Host("a", "stable", 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("a").tick().advance(time.Minute)
			s.confirm(id1, "a").tick()
			s.in.Now = s.in.Now.Add(10 * time.Minute)
		},
		check: wantEvent(rc.EventHostTransition, "a", "Failed", codes.OfflineWhileSoaking),
	},
	{
		name: "rule08-required-runtime-compliance-fails-soak",
		desc: "rule 8: compliance probes required: a failing runtime control during the soak is a health failure",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 10).Host("a", "stable", 0).
				Policy("stable", func(p *proto.RolloutPolicy) {
					p.HealthGate.ComplianceProbes = &proto.ComplianceProbes{Required: true}
				})
			s.release(b.Build(), fleetkit.Commit(1)).online("a").tick().advance(time.Minute)
			s.confirm(id1, "a").tick().advance(time.Minute)
			s.observe("a", func(o *rc.ObservedHost) {
				o.Compliance = []rc.ComplianceResult{{Control: "auditd", Framework: "nis2", Type: rc.ControlRuntime, Closure: fleetkit.Closure("a", "v1")}}
			})
		},
		check: wantEvent(rc.EventHostTransition, "a", "Failed", codes.Unhealthy),
	},

	// ---- rule 9: onHealthFailure ----
	{
		name: "rule09-failures-within-max-continue",
		desc: "rule 9: maxFailures 1 tolerates one failed host; the wave is promoted on the other canary's convergence",
		build: func(s *scenario) {
			b := four(s).Policy("stable", func(p *proto.RolloutPolicy) { one := 1; p.HealthGate.MaxFailures = &one })
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			s.report(id1, "a", rc.OutcomeFailed).confirm(id1, "d")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Failed", ""), noEvent(rc.EventRolloutTransition), wantIntents("b", "c")),
	},
	{
		name: "rule09-halt-policy",
		desc: "rule 9: more failures than maxFailures with onHealthFailure halt: Halted, nothing new dispatched",
		build: func(s *scenario) {
			b := four(s).Policy("stable", func(p *proto.RolloutPolicy) { one := 1; p.HealthGate.MaxFailures = &one })
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			s.report(id1, "a", rc.OutcomeFailed).confirm(id1, "d").tick().advance(time.Minute)
			s.report(id1, "b", rc.OutcomeFailed)
		},
		check: all(wantEvent(rc.EventRolloutTransition, "", "Halted", codes.HealthFailure), wantIntents()),
	},
	{
		name: "rule09-rollback-and-halt-starts-revert",
		desc: "rule 9: rollback-and-halt: Reverting; rollback intents under the budget (1 at a time), latest wave first",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0, 10).Host("a", "stable", 0).Host("b", "stable", 1).Host("c", "stable", 1).
				Budget(proto.Selector{All: true}, 1, 0).
				Policy("stable", func(p *proto.RolloutPolicy) { p.OnHealthFailure = proto.OnHealthFailureRollbackAndHalt })
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c").tick().advance(time.Minute)
			s.confirm(id1, "a").tick().advance(time.Minute)
			s.confirm(id1, "b").tick().advance(time.Minute)
			s.observe("b", func(o *rc.ObservedHost) { o.Probes = rc.ProbeSummary{Total: 1, Failed: []string{"http"}} })
		},
		check: all(wantEvent(rc.EventRolloutTransition, "", "Reverting", codes.HealthFailure), wantIntents("b")),
	},
	{
		name: "rule09-revert-in-reverse-edge-order",
		desc: "rule 9: a gates b; both converged; reverting rolls b back before a (a waits: rollback_order)",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0).Host("b", "stable", 0).Edge("a", "b")
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b").converge(time.Minute)
			s.intent("i1", id1, rc.IntentRollback, "dave")
		},
		check: all(wantEvent(rc.EventRolloutTransition, "", "Reverting", codes.OperatorRollback), wantIntents("b"), wantBlocked("a", codes.RollbackOrder)),
	},
	{
		name: "rule09-revert-completes",
		desc: "rule 9: every host that moved is back on its previous closure: Reverted",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("a").converge(time.Minute)
			s.intent("i1", id1, rc.IntentRollback, "dave").tick().advance(time.Minute)
			s.backOnPrevious(id1, "a")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Reverted", codes.RolledBack), wantEvent(rc.EventRolloutTransition, "", "Reverted", codes.Reverted)),
	},
	{
		name: "rule09-failed-host-already-back-needs-no-rollback",
		desc: "rule 9: a host whose agent already rolled back after a failed confirm is marked Reverted without an intent",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0).
				Policy("stable", func(p *proto.RolloutPolicy) { p.OnHealthFailure = proto.OnHealthFailureRollbackAndHalt })
			s.release(b.Build(), fleetkit.Commit(1)).online("a").tick().advance(time.Minute)
			s.advance(5 * time.Minute) // the confirm window passes
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Failed", codes.ConfirmTimeout), wantEvent(rc.EventRolloutTransition, "", "Reverting", codes.HealthFailure),
			wantEvent(rc.EventHostTransition, "a", "Reverted", codes.RolledBack), wantEvent(rc.EventRolloutTransition, "", "Reverted", ""), wantIntents()),
	},

	// ---- rule 10: operator intents ----
	{
		name: "rule10-pause",
		desc: "rule 10: pause: Active -> Halted with the actor; nothing new dispatched",
		build: func(s *scenario) {
			soakingA(s)
			s.intent("i1", id1, rc.IntentPause, "alice")
		},
		check: all(intentAccepted("pause"), wantEvent(rc.EventRolloutTransition, "", "Halted", codes.OperatorPause), wantIntents()),
	},
	{
		name: "rule10-repeated-pause-is-a-no-op",
		desc: "rule 10: pausing a rollout an operator already paused is accepted as already_in_state, naming who paused it and when; nothing moves",
		build: func(s *scenario) {
			soakingA(s)
			s.intent("i1", id1, rc.IntentPause, "alice").tick().advance(time.Minute)
			s.intent("i2", id1, rc.IntentPause, "bob")
		},
		check: all(intentAccepted("pause"), wantEvent(rc.EventIntentAccepted, "", "", codes.AlreadyInState),
			noEvent(rc.EventRolloutTransition), wantIntents()),
	},
	{
		name: "rule10-resume-forgives-failures",
		desc: "rule 10: resume after a health halt: Active, the failed host stays Failed, its failure is forgiven and the rollout goes on (the other canary converged while it was halted)",
		build: func(s *scenario) {
			startedFour(s)
			s.report(id1, "a", rc.OutcomeFailed).confirm(id1, "d").tick().advance(time.Minute)
			s.intent("i1", id1, rc.IntentResume, "alice")
		},
		check: all(intentAccepted("resume"), wantEvent(rc.EventRolloutTransition, "", "Active", codes.OperatorResume), wantIntents("b", "c")),
	},
	{
		name: "rule11-resume-forgiving-the-only-canary-halts-at-once",
		desc: "rules 10, 11: resume after the only canary failed: accepted, its failure forgiven, but wave 0 has no host left that can converge, so the rollout halts again at once (wave_stalled, saying why) instead of waiting for its readiness deadline, and a newer release can supersede it",
		build: func(s *scenario) {
			started(s)
			s.report(id1, "a", rc.OutcomeFailed).tick().advance(time.Minute)
			s.intent("i1", id1, rc.IntentResume, "alice")
		},
		check: all(intentAccepted("resume"), wantEvent(rc.EventRolloutTransition, "", "Active", codes.OperatorResume),
			wantEventSaying(rc.EventRolloutTransition, codes.WaveUnprovable, "can no longer be promoted"), wantIntents()),
	},
	{
		name: "rule10-cancel-lets-in-flight-finish",
		desc: "rule 10: cancel: Cancelled, nothing new dispatched; a host in flight still finishes",
		build: func(s *scenario) {
			started(s)
			s.intent("i1", id1, rc.IntentCancel, "carol").tick().advance(time.Minute)
			s.confirm(id1, "a")
		},
		check: all(wantEvent(rc.EventHostTransition, "a", "Soaking", codes.Confirmed), wantIntents()),
	},
	{
		name: "rule10-rollback-converged-rollout",
		desc: "rule 10: rollback of a converged rollout: Reverting, rollback intents",
		build: func(s *scenario) {
			s.release(fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0).Build(), fleetkit.Commit(1)).online("a").converge(time.Minute)
			s.intent("i1", id1, rc.IntentRollback, "dave")
		},
		check: all(intentAccepted("rollback"), wantIntents("a")),
	},
	{
		name: "rule10-illegal-intent-refused",
		desc: "rule 10: resume of a converged rollout is refused with a reason, not applied",
		build: func(s *scenario) {
			s.release(fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0).Build(), fleetkit.Commit(1)).online("a").converge(time.Minute)
			s.intent("i1", id1, rc.IntentResume, "erin")
		},
		check: all(wantEvent(rc.EventIntentRefused, "", "", codes.IllegalTransition), noEvent(rc.EventRolloutTransition)),
	},
	{
		name: "rule10-unknown-rollout-and-kind-refused",
		desc: "rule 10: an intent for a rollout that does not exist, and an intent kind that does not exist, are refused",
		build: func(s *scenario) {
			started(s)
			s.intent("i1", "stable@ffffff0", rc.IntentPause, "erin")
			s.intent("i2", id1, "reboot", "erin")
		},
		check: all(wantEvent(rc.EventIntentRefused, "", "", codes.UnknownRollout), wantEvent(rc.EventIntentRefused, "", "", codes.UnknownIntent)),
	},

	// ---- rule 11: convergence and readiness deadlines ----
	{
		name: "rule11-last-wave-converges",
		desc: "rule 11: the last wave is promoted: Converged",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("a").tick().advance(time.Minute)
			s.confirm(id1, "a")
		},
		check: wantEvent(rc.EventRolloutTransition, "", "Converged", codes.Converged),
	},
	{
		name: "rule11-readiness-deadline-halts-stalled-wave",
		desc: "rule 11: b waits for a, which failed (tolerated); nothing moves for the deadline: Halted (wave_stalled) with the waiting hosts counted",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0).Host("b", "stable", 0).Edge("a", "b").
				Policy("stable", func(p *proto.RolloutPolicy) { one := 1; p.HealthGate.MaxFailures = &one })
			s.release(b.Build(), fleetkit.Commit(1)).online("a", "b").tick().advance(time.Minute)
			s.report(id1, "a", rc.OutcomeFailed).tick().advance(61 * time.Minute)
		},
		check: wantEvent(rc.EventRolloutTransition, "", "Halted", codes.WaveStalled),
	},
	{
		name: "rule11-waiting-for-predecessor-channel-is-not-a-stall",
		desc: "rule 11: hosts held only by a channel edge past the deadline do not halt the rollout",
		build: func(s *scenario) {
			b := fleetkit.New(s.t).Channel("edge", 0).Channel("stable", 0, 0).Host("e1", "edge", 0).
				Host("s1", "stable", 0).Host("s2", "stable", 1).ChannelEdge("edge", "stable")
			s.release(b.Build(), fleetkit.Commit(1)).online("e1", "s1", "s2").tick().advance(time.Minute)
			s.confirm(rid("edge", 1), "e1").tick().advance(time.Minute)
			s.confirm(rid("stable", 1), "s1")
			s.release(b.Bump("v2").Build(), fleetkit.Commit(2), "edge").tick().advance(2 * time.Hour)
			s.offline("e1")
		},
		check: func(t *testing.T, out rc.Output) {
			for _, e := range out.Events {
				if e.Kind == rc.EventRolloutTransition && e.RolloutID == rid("stable", 1) {
					t.Fatalf("stable halted although only the channel edge holds it: %+v", e)
				}
			}
		},
	},
	{
		name: "rule11-revert-stalled",
		desc: "rule 11: a rollback never completes (rollback_timeout), nothing else moves: Reverting -> Halted (revert_stalled)",
		build: func(s *scenario) {
			s.release(fleetkit.New(s.t).Channel("stable", 0).Host("a", "stable", 0).Build(), fleetkit.Commit(1)).online("a").converge(time.Minute)
			s.intent("i1", id1, rc.IntentRollback, "dave").tick().advance(6 * time.Minute).tick().advance(61 * time.Minute)
		},
		check: wantEvent(rc.EventRolloutTransition, "", "Halted", codes.RevertStalled),
	},

	// ---- rule 12: steady state ----
	{
		name: "rule12-steady-state-decides-nothing",
		desc: "rule 12: everything converged and unchanged: the tick decides nothing",
		build: func(s *scenario) {
			s.release(three(s).Build(), fleetkit.Commit(1)).online("a", "b", "c").converge(11 * time.Minute)
		},
		check: func(t *testing.T, out rc.Output) {
			if len(out.Events)+len(out.Actions)+len(out.Rollouts)+len(out.Hosts) != 0 {
				t.Fatalf("steady state decided something:\n%s", mustJSON(t, out))
			}
		},
	},
}
