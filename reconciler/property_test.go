package reconciler_test

// Property tests: random valid fleets (generated, checked with
// manifest.ValidateFleet, projected with manifest.Project) are driven tick
// by tick through Reconcile and Apply by a simulated fleet of agents (that
// confirm, fail, roll back, defer, go offline, turn unhealthy), operators
// (pause, resume, cancel, rollback, also of unknown rollouts) and CI (new
// releases), and an invariant is checked after every tick:
//
//  1. no dispatch leaves a disruption budget group over its limit, the
//     groups recomputed here as 0003 rule 5 states them;
//  2. no host is dispatched before its edge predecessors converged, or
//     before its wave;
//  3. at most one non-terminal rollout per channel;
//  4. Reconcile is deterministic, also with the Input's Rollouts, Intents,
//     Channels and hosts shuffled (and, separately, the rollouts' Edges);
//  5. Reconcile is idempotent: after Apply, a tick at the same Now decides
//     nothing more (0003 rule 12);
//  6. every transition is a legal move of the state machines, and the
//     transitions, the intents and the new state agree;
//
// and two more: what a tick moves into flight stays counted (no orphaned
// dispatch), and one rollout drives a host at a time.
//
// Well-behaved fleets (always online, always confirming, healthy, no
// operator, one release) must converge, every rollout and every host,
// within a bound derived from the fleet; and channels chained by channel
// edges must roll out one at a time.
//
// Everything is bounded and deterministic: time is Input.Now, advanced by
// drawn steps; all randomness comes from rapid's draws. Each invariant is
// its own test, so that one that fails does not hide the others.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/nixfleet/nixfleet/analysis"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/schedule"
)

// ---- the properties ----

// TestPropertyBudgetsNeverExceeded: invariant 1.
func TestPropertyBudgetsNeverExceeded(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkBudgets) })
}

// TestPropertyNoOrphanedDispatch: a host is dispatched or rolled back only
// by a rollout that still counts against budgets (and so still observes
// its hosts) after the tick; otherwise the in-flight host is never
// resolved and escapes every budget from the next tick on.
func TestPropertyNoOrphanedDispatch(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkNoOrphanedDispatch) })
}

// TestPropertyOneRolloutDrivesAHost: a host moved into flight (dispatched,
// rolled back, or booted from Deferred into Soaking) is in flight in no
// other rollout that counts: two rollouts never drive one host at once
// (the busy gate of 0003 rule 4).
func TestPropertyOneRolloutDrivesAHost(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkOneDriver) })
}

// TestPropertyEventBudgetsWithinLimits: invariant 1 as the journal shows
// it. A host moved into flight notes every limiting budget it counts
// against, none of them over its limit after the move; a host the budget
// gate holds notes the full budget, as its message says it; no other
// event notes budgets.
func TestPropertyEventBudgetsWithinLimits(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkEventBudgets) })
}

// TestPropertyDispatchRespectsEdgesAndWaves: invariant 2.
func TestPropertyDispatchRespectsEdgesAndWaves(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkEdgesAndWaves) })
}

// TestPropertyOneNonTerminalRolloutPerChannel: invariant 3.
func TestPropertyOneNonTerminalRolloutPerChannel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkOneNonTerminal) })
}

// TestPropertyDeterministic: invariant 4.
func TestPropertyDeterministic(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkDeterminism) })
}

// TestPropertyLiveRolloutsSuffice: Reconcile decides the same from the
// live rollouts (reconciler.LiveRollouts) as from every rollout, so that
// the control plane may load only those (rfcs/0003 §Input).
func TestPropertyLiveRolloutsSuffice(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkLiveSuffice) })
}

func checkLiveSuffice(_ *rapid.T, c tickCase) []string {
	in := c.in
	in.Rollouts = reconciler.LiveRollouts(c.in)
	if got := reconciler.Reconcile(in); !sameOutputs(c.out, got) {
		return []string{fmt.Sprintf("Reconcile on the %d live of %d rollouts differs (-all +live):\n%s",
			len(in.Rollouts), len(c.in.Rollouts), cmp.Diff(c.out, got))}
	}
	return nil
}

// TestPropertyOutputIgnoresEdgeOrder: RFC 0003 promises the same output
// whatever the order of the Input's slices. Beyond the shuffles of
// invariant 4, this shuffles every rollout's frozen Edges, the Deferrals,
// and the releases' freezes, window lists and windows' days. (Changed rollout records in the Output carry their Edges as
// they came in, so those are compared sorted.)
func TestPropertyOutputIgnoresEdgeOrder(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkEdgeOrder) })
}

// TestPropertyIdempotent: invariant 5.
func TestPropertyIdempotent(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkIdempotent) })
}

// TestPropertyLegalTransitions: invariant 6.
func TestPropertyLegalTransitions(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkTransitions) })
}

// TestPropertyNoActiveRolloutOnAnUnprovableWave: after every tick, no
// rollout is Active on a wave that can never be promoted: one that lacks
// evidence while every host of it not converged failed (rfcs/0003 rule
// 11). Such a rollout halts at once, so a newer release can supersede it.
func TestPropertyNoActiveRolloutOnAnUnprovableWave(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkNoUnprovableWave) })
}

// TestPropertyWellBehavedFleetConverges: with hosts that are always online,
// always confirm and stay healthy, no operator and no release after the
// first, every rollout converges, and every host of every rollout with it;
// half of the runs with canary analyses whose measurements succeed.
func TestPropertyWellBehavedFleetConverges(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		runWellBehaved(t, fleetGenOpts{maxHosts: 300, analysis: rapid.Bool().Draw(t, "analysis")}, nil)
	})
}

// TestPropertyWellBehavedFleetWithChannelBudgetsConverges: the same, with
// budgets that never span channels (selected by channel, or by hosts of one
// channel), so that no rollout waits for budget slots held by another.
func TestPropertyWellBehavedFleetWithChannelBudgetsConverges(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		runWellBehaved(t, fleetGenOpts{maxHosts: 300, channelBudgets: true}, nil)
	})
}

// TestPropertyChainedChannelsRollOutOneAtATime: when channel edges chain
// every channel and one release reaches all channels at once, the
// channels roll out one at a time, in chain order: a channel's rollout
// opens only after every channel before it in the chain converged.
func TestPropertyChainedChannelsRollOutOneAtATime(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		runWellBehaved(t, fleetGenOpts{maxHosts: 60, chainChannels: true}, func(s *fleetSim) {
			chain := s.chain
			for _, r := range s.in.Rollouts {
				pos := slices.Index(chain, r.Channel)
				for _, before := range chain[:pos] {
					i := slices.IndexFunc(s.in.Rollouts, func(x reconciler.Rollout) bool { return x.Channel == before })
					if i < 0 || s.in.Rollouts[i].State != reconciler.RolloutConverged {
						state := "no rollout"
						if i >= 0 {
							state = string(s.in.Rollouts[i].State)
						}
						t.Fatalf("tick %d: chain %v: %s is %s while %s, earlier in the chain, has %s\n%s",
							s.tick, chain, r.ID, r.State, before, state, describeRolloutStates(s.in))
					}
				}
			}
		})
	})
}

// runWellBehaved drives a well-behaved fleet until everything converged,
// calling check (when given) after every tick.
func runWellBehaved(t *rapid.T, o fleetGenOpts, check func(*fleetSim)) {
	s := newFleetSim(t, o, true)
	bound := s.convergenceBound()
	for s.tick = 0; ; s.tick++ {
		out := reconciler.Reconcile(s.in)
		s.in = reconciler.Apply(s.in, out)
		for _, r := range s.in.Rollouts {
			switch r.State {
			case reconciler.RolloutOpening, reconciler.RolloutActive, reconciler.RolloutConverged:
			default:
				t.Fatalf("tick %d (now %s): rollout %s of a well-behaved fleet is %s: %s: %s\n%s",
					s.tick, s.in.Now.Format(time.RFC3339), r.ID, r.State, r.Reason.Code, r.Reason.Message, describeRolloutStates(s.in))
			}
		}
		if check != nil {
			check(s)
		}
		if s.allConverged() {
			break
		}
		if s.tick >= bound {
			t.Fatalf("after %d ticks (the bound for this fleet), not everything converged:\n%s", s.tick, describeRolloutStates(s.in))
		}
		s.advance(out)
	}
	for _, r := range s.in.Rollouts {
		for _, h := range r.Hosts {
			if h.State != reconciler.HostConverged {
				t.Fatalf("rollout %s converged with host %s %s (%s)", r.ID, h.Hostname, h.State, h.Reason.Code)
			}
		}
	}
}

// ---- fleet generator ----

const simBase32 = "0123456789abcdfghijklmnpqrsvwxyz"

var (
	simChannelNames = []string{"alpha", "beta", "edge", "lts", "stable"}
	simTags         = []string{"web", "db", "cache", "batch", "eu", "us", "canary"}
	simEpoch        = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

// uniformIntGen draws an integer in [lo, hi] with (nearly) equal chances, from
// fair coin flips. rapid's integer generators favour small values, which
// suits sizes but not the odds of simulated events; this one still shrinks
// towards lo, so draws are arranged to make lo the uneventful outcome.
func uniformIntGen(lo, hi int) *rapid.Generator[int] {
	n := hi - lo + 1
	nbits := bits.Len(uint(n-1)) + 4
	return rapid.Custom(func(t *rapid.T) int {
		v := 0
		for range nbits {
			v <<= 1
			if rapid.Bool().Draw(t, "bit") {
				v |= 1
			}
		}
		return lo + v%n
	})
}

// percentGen draws 0–99 uniformly.
var percentGen = uniformIntGen(0, 99)

// simClosure is the store path basename of a host's system closure of a
// generation: 32 characters of Nix's base32, a dash, a name.
func simClosure(host string, gen int) string {
	sum := sha256.Sum256([]byte(host + "/" + strconv.Itoa(gen)))
	b := make([]byte, 32)
	for i := range b {
		b[i] = simBase32[sum[i]%32]
	}
	return string(b) + "-nixos-system-" + host + "-g" + strconv.Itoa(gen)
}

// fleetModel is what a fleet.resolved is built from; releases mutate a copy.
type fleetModel struct {
	freezes  []proto.Freeze
	channels []string
	hosts    []modelHost // sorted by name
	policies []modelPolicy
	chPolicy map[string]int
	chCfg    map[string]proto.Channel
	edges    []proto.Edge
	chEdges  []proto.ChannelEdge
	budgets  []proto.DisruptionBudget
	chain    []string // the drawn channel order (the chain, with chainChannels)
}

type modelHost struct {
	name    string
	channel string
	tags    []string
	gen     int // closure generation; -1: no closure
}

type modelPolicy struct {
	waves     []proto.PolicyWave
	gate      proto.HealthGate
	onFailure string
	windows   []proto.Window // the channel's maintenance windows
	reboot    *proto.Reboot  // the control plane reboots staged hosts (rule 17)
}

type fleetGenOpts struct {
	maxHosts int
	// chainChannels: channel edges chain every channel, so rollouts run
	// one channel at a time.
	chainChannels bool
	// channelBudgets: budgets select one channel's hosts only.
	channelBudgets bool
	// changeControl: policies and waves may have maintenance windows,
	// and the fleet freezes (rfcs/0003 rules 13, 14).
	changeControl bool
	// analysis: policies may have canary analyses (rule 16), which the
	// simulated control plane measures.
	analysis bool
	// faults makes the faults a property is about more frequent than in
	// the chaotic runs of the other properties.
	faults simFaults
}

// simFaults are the chances, in percent per step between two ticks, of a
// partition and of an outage of the control plane, and whether the store
// always loses writes (else in half the runs); zero values are the
// defaults (2% each).
type simFaults struct {
	partitionPct, outagePct int
	lossy                   bool
}

// simZones are the time zones drawn windows use: with and without
// daylight saving time, and one off the hour.
var simZones = []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"}

// drawWindows draws up to max maintenance windows that recur often
// enough to open and close within a run.
func drawWindows(t *rapid.T, max int) []proto.Window {
	var out []proto.Window
	for range rapid.IntRange(1, max).Draw(t, "windowCount") {
		w := proto.Window{Start: fmt.Sprintf("%02d:%02d", rapid.IntRange(0, 23).Draw(t, "windowHour"), 15*rapid.IntRange(0, 3).Draw(t, "windowQuarter")),
			DurationMinutes: rapid.IntRange(30, 600).Draw(t, "windowMinutes"), TimeZone: rapid.SampledFrom(simZones).Draw(t, "windowZone")}
		if rapid.Bool().Draw(t, "everyDay") {
			w.Days = slices.Clone(schedule.Days)
		} else {
			for _, d := range schedule.Days {
				if rapid.Bool().Draw(t, "windowDay") {
					w.Days = append(w.Days, d)
				}
			}
			if len(w.Days) == 0 {
				w.Days = []string{"sun"}
			}
		}
		out = append(out, w)
	}
	return out
}

// drawAnalyses draws one or two analyses that measure often enough to
// end within a run.
func drawAnalyses(t *rapid.T) []proto.Analysis {
	var out []proto.Analysis
	for i := range rapid.IntRange(1, 2).Draw(t, "analysisCount") {
		a := proto.Analysis{Name: fmt.Sprintf("check-%d", i), Query: `max(errors{host=~"{{ .HostsRegex }}"})`,
			SuccessCondition: "result < 0.05", Count: rapid.IntRange(1, 4).Draw(t, "analysisMeasurements"),
			Interval:          fmt.Sprintf("%ds", rapid.IntRange(30, 300).Draw(t, "analysisIntervalSeconds")),
			FailureLimit:      rapid.IntRange(0, 1).Draw(t, "analysisFailureLimit"),
			InconclusiveLimit: rapid.IntRange(0, 1).Draw(t, "analysisInconclusiveLimit")}
		if rapid.Bool().Draw(t, "analysisFailureCondition") {
			a.FailureCondition = "result > 0.2"
		}
		if rapid.IntRange(0, 3).Draw(t, "analysisCompare") == 0 {
			a.Compare = &proto.Comparison{Worse: proto.WorseHigher, Effect: "0.01", Confidence: "0.95",
				MinSamples: rapid.IntRange(3, 6).Draw(t, "compareMinSamples"), Window: "5m", Step: "30s"}
			if rapid.Bool().Draw(t, "compareBaselineTags") {
				a.Compare.BaselineTags = []string{rapid.SampledFrom(simTags).Draw(t, "compareBaselineTag")}
			}
		}
		out = append(out, a)
	}
	return out
}

func simPolicyName(i int) string { return "policy-" + strconv.Itoa(i) }

// drawSimHostCount favours small fleets (cheap, and shrinking goes there) but
// reaches maxHosts.
func drawSimHostCount(t *rapid.T, maxHosts int) int {
	switch c := percentGen.Draw(t, "sizeClass"); {
	case c < 65 || maxHosts <= 30:
		return rapid.IntRange(1, min(30, maxHosts)).Draw(t, "hostCount")
	case c < 93 || maxHosts <= 100:
		return rapid.IntRange(31, min(100, maxHosts)).Draw(t, "hostCount")
	default:
		return rapid.IntRange(101, maxHosts).Draw(t, "hostCount")
	}
}

// genFleetModel draws a fleet that manifest.ValidateFleet accepts.
func genFleetModel(t *rapid.T, o fleetGenOpts) *fleetModel {
	m := &fleetModel{chPolicy: map[string]int{}, chCfg: map[string]proto.Channel{}}
	nch := rapid.IntRange(2, 5).Draw(t, "channelCount")
	m.channels = slices.Clone(simChannelNames[:nch])
	n := drawSimHostCount(t, o.maxHosts)
	for i := range n {
		h := modelHost{name: fmt.Sprintf("host-%03d", i), gen: 1}
		h.channel = m.channels[rapid.IntRange(0, nch-1).Draw(t, "hostChannel")]
		mask := rapid.IntRange(0, 1<<len(simTags)-1).Draw(t, "hostTags")
		for b, tag := range simTags {
			if mask&(1<<b) != 0 {
				h.tags = append(h.tags, tag)
			}
		}
		if rapid.IntRange(0, 19).Draw(t, "hostWithoutClosure") == 0 {
			h.gen = -1
		}
		m.hosts = append(m.hosts, h)
	}

	npol := rapid.IntRange(1, nch).Draw(t, "policyCount")
	for range npol {
		var p modelPolicy
		nw := rapid.IntRange(1, 4).Draw(t, "waveCount")
		if rapid.IntRange(0, 5).Draw(t, "allAtOnce") == 0 {
			// No waves: the channel is rolled out all at once (0001
			// §4.1), every host in wave 0.
			nw = 0
		}
		for w := range nw {
			// The last wave takes everyone, so every host with a closure
			// is in some wave of its channel.
			sel := proto.Selector{All: true}
			if w < nw-1 {
				sel = m.drawSelector(t)
			}
			pw := proto.PolicyWave{Selector: sel, SoakMinutes: rapid.IntRange(0, 30).Draw(t, "soakMinutes")}
			if o.changeControl && rapid.IntRange(0, 4).Draw(t, "waveWindows") == 0 {
				pw.Windows = drawWindows(t, 2)
			}
			if o.changeControl && rapid.IntRange(0, 3).Draw(t, "waveApproval") == 0 {
				pw.Approval = &proto.Approval{Required: true, Approvers: rapid.IntRange(0, 3).Draw(t, "approvers")}
			}
			if rapid.IntRange(0, 4).Draw(t, "waveReboot") == 0 {
				pw.Reboot = new(rapid.Bool().Draw(t, "waveRebootAllowed"))
			}
			p.waves = append(p.waves, pw)
		}
		if rapid.Bool().Draw(t, "policyReboot") {
			p.reboot = &proto.Reboot{Allowed: rapid.IntRange(0, 3).Draw(t, "rebootAllowed") > 0,
				BootTimeoutMinutes: rapid.IntRange(1, 30).Draw(t, "bootTimeoutMinutes")}
			if rapid.IntRange(0, 4).Draw(t, "longBoot") == 0 {
				// Longer than the readiness deadline: a slow firmware.
				p.reboot.BootTimeoutMinutes = rapid.IntRange(61, 180).Draw(t, "longBootMinutes")
			}
		} else {
			for i := range p.waves {
				p.waves[i].Reboot = nil // a wave's reboot: true needs the policy's
			}
		}
		if o.changeControl && rapid.IntRange(0, 2).Draw(t, "policyWindows") > 0 {
			p.windows = drawWindows(t, 2)
		}
		if mf := rapid.IntRange(0, 4).Draw(t, "maxFailures"); mf < 4 {
			p.gate.MaxFailures = &mf
		}
		switch percentGen.Draw(t, "evidence") {
		case 0, 1, 2, 3, 4, 5, 6, 7, 8, 9:
			mc := rapid.IntRange(1, 3).Draw(t, "minConverged")
			p.gate.MinConverged = &mc
		case 10, 11, 12, 13, 14, 15, 16, 17, 18, 19:
			pct := rapid.IntRange(1, 100).Draw(t, "minConvergedPct")
			p.gate.MinConvergedPct = &pct
		}
		if rapid.Bool().Draw(t, "gateOnFailedUnits") {
			p.gate.SystemdFailedUnits = &proto.SystemdFailedUnits{Max: rapid.IntRange(0, 1).Draw(t, "maxFailedUnits")}
		}
		p.onFailure = rapid.SampledFrom([]string{proto.OnHealthFailureHalt, proto.OnHealthFailureRollbackAndHalt}).Draw(t, "onHealthFailure")
		if o.analysis && rapid.IntRange(0, 2).Draw(t, "policyAnalyses") > 0 {
			p.gate.Analysis = drawAnalyses(t)
		}
		m.policies = append(m.policies, p)
	}
	for _, ch := range m.channels {
		pi := rapid.IntRange(0, npol-1).Draw(t, "channelPolicy")
		m.chPolicy[ch] = pi
		signing := rapid.IntRange(0, 120).Draw(t, "signingIntervalMinutes")
		m.chCfg[ch] = proto.Channel{
			RolloutPolicy:            simPolicyName(pi),
			FreshnessWindow:          2*signing + rapid.IntRange(1, 1440).Draw(t, "freshnessSlack"),
			SigningIntervalMinutes:   signing,
			ReconcileIntervalMinutes: 5,
			Compliance: proto.Compliance{Frameworks: []string{"nis2"},
				Mode: rapid.SampledFrom([]string{"", proto.ComplianceDisabled, proto.CompliancePermissive, proto.ComplianceEnforce}).Draw(t, "complianceMode")},
		}
	}

	// Host edges, inside a channel, oriented along (wave, name) so they
	// form a DAG and never run from a later wave to an earlier one
	// (ValidateFleet refuses those; build drops the ones a release's
	// retagging turns around).
	byChannel := map[string][]int{}
	for i, h := range m.hosts {
		byChannel[h.channel] = append(byChannel[h.channel], i)
	}
	wave := m.firstWaves()
	seen := map[[2]int]bool{}
	for range rapid.IntRange(0, min(n, 40)).Draw(t, "edgeCount") {
		a := rapid.IntRange(0, n-1).Draw(t, "edgeGates")
		peers := byChannel[m.hosts[a].channel]
		b := peers[rapid.IntRange(0, len(peers)-1).Draw(t, "edgeGated")]
		if a == b {
			continue
		}
		if wave[a] > wave[b] || (wave[a] == wave[b] && a > b) {
			a, b = b, a
		}
		if seen[[2]int{a, b}] {
			continue
		}
		seen[[2]int{a, b}] = true
		m.edges = append(m.edges, proto.Edge{Gates: m.hosts[a].name, Gated: m.hosts[b].name, Reason: "drawn"})
	}

	if o.changeControl {
		for range rapid.IntRange(0, 2).Draw(t, "freezeCount") {
			from := simEpoch.Add(time.Duration(rapid.IntRange(0, 20*60).Draw(t, "freezeFromMinutes")) * time.Minute)
			f := proto.Freeze{From: from, Until: from.Add(time.Duration(rapid.IntRange(30, 6*60).Draw(t, "freezeMinutes")) * time.Minute),
				Reason: "drawn freeze"}
			if !rapid.Bool().Draw(t, "freezeEveryChannel") {
				for _, ch := range m.channels {
					if rapid.Bool().Draw(t, "freezeChannel") {
						f.Channels = append(f.Channels, ch)
					}
				}
			}
			m.freezes = append(m.freezes, f)
		}
	}

	// Channel edges along a drawn order: a DAG.
	order := rapid.Permutation(m.channels).Draw(t, "channelOrder")
	m.chain = order
	for i := range order {
		if o.chainChannels {
			if i > 0 {
				m.chEdges = append(m.chEdges, proto.ChannelEdge{Gates: order[i-1], Gated: order[i]})
			}
			continue
		}
		for j := i + 1; j < len(order); j++ {
			if rapid.IntRange(0, 2).Draw(t, "channelEdge") == 0 {
				m.chEdges = append(m.chEdges, proto.ChannelEdge{Gates: order[i], Gated: order[j]})
			}
		}
	}

	for range rapid.IntRange(0, 6).Draw(t, "budgetCount") {
		b := m.drawBudget(t)
		if o.channelBudgets {
			b.Selector = m.drawChannelSelector(t)
		}
		m.budgets = append(m.budgets, b)
	}
	m.fixBudgets()
	return m
}

// drawSelector draws a selector with one rule: tags, tagsAny, hosts,
// channel or all.
func (m *fleetModel) drawSelector(t *rapid.T) proto.Selector {
	switch rapid.IntRange(0, 4).Draw(t, "selectorKind") {
	case 0:
		return proto.Selector{Tags: rapid.SliceOfNDistinct(rapid.SampledFrom(simTags), 1, 2, rapid.ID[string]).Draw(t, "selectorTags")}
	case 1:
		return proto.Selector{TagsAny: rapid.SliceOfNDistinct(rapid.SampledFrom(simTags), 1, 3, rapid.ID[string]).Draw(t, "selectorTagsAny")}
	case 2:
		var names []string
		for range rapid.IntRange(1, 5).Draw(t, "selectorHostCount") {
			names = append(names, m.hosts[rapid.IntRange(0, len(m.hosts)-1).Draw(t, "selectorHost")].name)
		}
		return proto.Selector{Hosts: names}
	case 3:
		ch := m.channels[rapid.IntRange(0, len(m.channels)-1).Draw(t, "selectorChannel")]
		return proto.Selector{Channel: &ch}
	default:
		return proto.Selector{All: true}
	}
}

// drawChannelSelector selects a channel, or some hosts of one channel.
func (m *fleetModel) drawChannelSelector(t *rapid.T) proto.Selector {
	ch := m.channels[rapid.IntRange(0, len(m.channels)-1).Draw(t, "budgetChannel")]
	var names []string
	for _, h := range m.hosts {
		if h.channel == ch {
			names = append(names, h.name)
		}
	}
	if len(names) == 0 || rapid.Bool().Draw(t, "wholeChannel") {
		return proto.Selector{Channel: &ch}
	}
	return proto.Selector{Hosts: rapid.SliceOfNDistinct(rapid.SampledFrom(names), 1, min(5, len(names)), rapid.ID[string]).Draw(t, "budgetHosts")}
}

// drawBudget draws a budget; sometimes its selector is an earlier budget's,
// spelled differently (reversed, with a duplicate), which must still be the
// same budget.
func (m *fleetModel) drawBudget(t *rapid.T) proto.DisruptionBudget {
	var b proto.DisruptionBudget
	if len(m.budgets) > 0 && rapid.IntRange(0, 3).Draw(t, "budgetReusesSelector") == 0 {
		s := m.budgets[rapid.IntRange(0, len(m.budgets)-1).Draw(t, "budgetSelectorOf")].Selector
		respell := func(l []string) []string {
			if len(l) == 0 {
				return nil
			}
			l = slices.Clone(l)
			slices.Reverse(l)
			return append(l, l[0])
		}
		b.Selector = proto.Selector{All: s.All, Channel: s.Channel, Tags: respell(s.Tags), TagsAny: respell(s.TagsAny), Hosts: respell(s.Hosts)}
	} else {
		b.Selector = m.drawSelector(t)
	}
	if n := rapid.IntRange(-1, 3).Draw(t, "budgetName"); n >= 0 {
		b.Name = "b" + strconv.Itoa(n) // fixBudgets keeps names unique
	}
	kind := rapid.IntRange(0, 2).Draw(t, "budgetLimitKind")
	if kind != 1 {
		mi := rapid.IntRange(1, 5).Draw(t, "maxInFlight")
		b.MaxInFlight = &mi
	}
	if kind != 0 {
		p := rapid.IntRange(1, 100).Draw(t, "maxInFlightPct")
		b.MaxInFlightPct = &p
	}
	return b
}

// fixBudgets raises every maxInFlightPct to the smallest value that does
// not round down to 0 on the budget's hosts, and drops a name an earlier
// budget has (ValidateFleet refuses both).
func (m *fleetModel) fixBudgets() {
	hosts := m.protoHosts()
	named := map[string]bool{}
	for i, b := range m.budgets {
		if named[b.Name] {
			m.budgets[i].Name = ""
		} else if b.Name != "" {
			named[b.Name] = true
		}
		if b.MaxInFlightPct == nil {
			continue
		}
		if n := b.Selector.Count(hosts); n > 0 && n**b.MaxInFlightPct/100 == 0 {
			p := (100 + n - 1) / n
			m.budgets[i].MaxInFlightPct = &p
		}
	}
}

func (m *fleetModel) protoHost(h modelHost) proto.Host {
	ph := proto.Host{System: "x86_64-linux", Tags: slices.Clone(h.tags), Channel: h.channel}
	if ph.Tags == nil {
		ph.Tags = []string{}
	}
	if h.gen >= 0 {
		c := simClosure(h.name, h.gen)
		ph.ClosureHash = &c
	}
	return ph
}

func (m *fleetModel) protoHosts() map[string]proto.Host {
	out := make(map[string]proto.Host, len(m.hosts))
	for _, h := range m.hosts {
		out[h.name] = m.protoHost(h)
	}
	return out
}

// firstWaves returns each host's wave in its channel: the first wave of
// its channel's policy whose selector matches it.
func (m *fleetModel) firstWaves() []int {
	out := make([]int, len(m.hosts))
	for i, h := range m.hosts {
		p := m.policies[m.chPolicy[h.channel]]
		out[i] = max(len(p.waves)-1, 0)
		for w, pw := range p.waves {
			if pw.Selector.Matches(h.name, m.protoHost(h)) {
				out[i] = w
				break
			}
		}
	}
	return out
}

// build returns the fleet.resolved of the model at a commit; waves are
// resolved fleet-wide, as the Nix library does, so a channel's wave lists
// also name other channels' hosts.
func (m *fleetModel) build(commit string) *proto.FleetResolved {
	hosts := m.protoHosts()
	v := proto.SchemaVersion
	// A retagged host can change waves: an edge that now runs from a
	// later wave to an earlier one is left out of this release.
	wave := m.firstWaves()
	index := map[string]int{}
	for i, h := range m.hosts {
		index[h.name] = i
	}
	edges := slices.DeleteFunc(slices.Clone(m.edges), func(e proto.Edge) bool {
		return wave[index[e.Gates]] > wave[index[e.Gated]]
	})
	f := &proto.FleetResolved{
		SchemaVersion:   proto.SchemaVersion,
		Hosts:           hosts,
		Channels:        map[string]proto.Channel{},
		RolloutPolicies: map[string]proto.RolloutPolicy{},
		Waves:           map[string][]proto.Wave{},
		Edges:           edges,
		ChannelEdges:    slices.Clone(m.chEdges),
		Meta:            proto.Meta{SchemaVersion: &v, CICommit: &commit},
		Freezes:         slices.Clone(m.freezes),
	}
	for _, b := range m.budgets {
		f.DisruptionBudgets = append(f.DisruptionBudgets, cloneDisruptionBudget(b))
	}
	for i, p := range m.policies {
		strategy := "staged"
		if len(p.waves) == 0 {
			strategy = "all-at-once"
		}
		f.RolloutPolicies[simPolicyName(i)] = proto.RolloutPolicy{Strategy: strategy, Waves: append([]proto.PolicyWave{}, p.waves...),
			HealthGate: p.gate, OnHealthFailure: p.onFailure, Windows: p.windows, Reboot: p.reboot}
	}
	for _, ch := range m.channels {
		f.Channels[ch] = m.chCfg[ch]
		f.Waves[ch] = []proto.Wave{} // an empty list when the policy has no waves: all at once
		for _, pw := range m.policies[m.chPolicy[ch]].waves {
			f.Waves[ch] = append(f.Waves[ch], proto.Wave{Hosts: pw.Selector.Resolve(hosts), SoakMinutes: pw.SoakMinutes, Windows: pw.Windows,
				Approval: pw.Approval, Reboot: pw.Reboot})
		}
	}
	return f
}

func cloneDisruptionBudget(b proto.DisruptionBudget) proto.DisruptionBudget {
	c := b
	if b.MaxInFlight != nil {
		v := *b.MaxInFlight
		c.MaxInFlight = &v
	}
	if b.MaxInFlightPct != nil {
		v := *b.MaxInFlightPct
		c.MaxInFlightPct = &v
	}
	return c
}

func (m *fleetModel) clone() *fleetModel {
	c := *m
	c.hosts = slices.Clone(m.hosts)
	for i := range c.hosts {
		c.hosts[i].tags = slices.Clone(c.hosts[i].tags)
	}
	c.edges = slices.Clone(m.edges)
	c.budgets = nil
	for _, b := range m.budgets {
		c.budgets = append(c.budgets, cloneDisruptionBudget(b))
	}
	return &c
}

// mutate draws the next release of a model: new closures for some hosts
// (or none: hosts then already run their target), sometimes hosts moving
// channel, tags changing (budgets' frozen host lists differ between
// releases) and budget limits changing (groups take the minimum).
func (m *fleetModel) mutate(t *rapid.T) *fleetModel {
	c := m.clone()
	n := len(c.hosts)
	switch rapid.IntRange(0, 3).Draw(t, "releaseClosures") {
	case 1:
		for i := range c.hosts {
			c.hosts[i].gen++
		}
	case 2:
		step := rapid.IntRange(2, 4).Draw(t, "releaseEvery")
		for i := 0; i < n; i += step {
			c.hosts[i].gen++
		}
	case 3:
		c.hosts[rapid.IntRange(0, n-1).Draw(t, "releaseHost")].gen++
	}
	for i := range c.hosts {
		if c.hosts[i].gen == 0 {
			c.hosts[i].gen = 1 // generation 0 is what hosts boot with
		}
	}
	if percentGen.Draw(t, "releaseMovesHosts") >= 60 {
		for range rapid.IntRange(1, 3).Draw(t, "movedHosts") {
			i := rapid.IntRange(0, n-1).Draw(t, "movedHost")
			c.hosts[i].channel = c.channels[rapid.IntRange(0, len(c.channels)-1).Draw(t, "movedTo")]
		}
		channelOf := map[string]string{}
		for _, h := range c.hosts {
			channelOf[h.name] = h.channel
		}
		c.edges = slices.DeleteFunc(c.edges, func(e proto.Edge) bool { return channelOf[e.Gates] != channelOf[e.Gated] })
	}
	if rapid.IntRange(0, 3).Draw(t, "releaseRetags") == 0 {
		for range rapid.IntRange(1, 5).Draw(t, "retaggedHosts") {
			i := rapid.IntRange(0, n-1).Draw(t, "retaggedHost")
			tag := rapid.SampledFrom(simTags).Draw(t, "toggledTag")
			if j := slices.Index(c.hosts[i].tags, tag); j >= 0 {
				c.hosts[i].tags = slices.Delete(c.hosts[i].tags, j, j+1)
			} else {
				c.hosts[i].tags = append(c.hosts[i].tags, tag)
			}
		}
	}
	if percentGen.Draw(t, "releaseAddsBudget") >= 85 {
		// A release adds a budget: hosts still in flight in rollouts of
		// older releases count against it too.
		c.budgets = append(c.budgets, c.drawBudget(t))
	}
	if len(c.budgets) > 0 && percentGen.Draw(t, "releaseChangesBudget") >= 50 {
		i := rapid.IntRange(0, len(c.budgets)-1).Draw(t, "changedBudget")
		mi := rapid.IntRange(1, 5).Draw(t, "newMaxInFlight")
		c.budgets[i].MaxInFlight = &mi
	}
	c.fixBudgets()
	return c
}

// ---- the simulated fleet ----

// Time in the simulation is continuous, as a control plane lives it
// (rfcs/0013: the invariants hold in real time, not tick by tick). Agents check in
// on periods of their own, so that their last check-ins before a tick lie
// anywhere in the period before it; an agent acts on what a tick told it
// at an instant of its own before the next tick; hosts go away, a
// partition cuts a share of a channel off, and the control plane goes
// down at any instant between two ticks; and the store loses status
// writes, confirms and reports it acknowledged (rfcs/0003 rule 8). Ticks
// come at drawn times and, often, at the WakeAt the last tick asked for,
// where a comparison with the clock comes out otherwise. The instants
// within a step come from a generator seeded by rapid (drawing every
// agent's through rapid would make a run slow); the events, from rapid's
// draws.

// simAgent is one host's agent, and what the control plane's store holds
// of it.
type simAgent struct {
	name      string
	period    time.Duration // it checks in at least this often while it reaches the control plane
	online    bool          // false while it is cut off (away, or partitioned)
	backAt    int           // a cut-off agent returns during the step after this tick
	cutAt     time.Time     // when its current cut began
	backSince time.Time     // when it returned from its last cut
	sickUntil int           // health probes or units fail until this tick
	sickUnits bool
	staged    string // target staged for the next boot
	bootAt    int
	// bootFails: the boot into the staged target, ordered by bootOrder,
	// comes up on the previous closure, and the agent reports it.
	bootFails bool
	bootOrder *reconciler.HostAction
	queued    *reconciler.HostAction // received while cut off
	queuedBy  time.Time              // its confirm deadline
	// says is what the agent reports of itself now (Activation: the last
	// outcome it reported; LastSeen and StatusAt unused).
	says reconciler.ObservedHost
	// What the store holds: the last check-in it received (contact), the
	// status (held), the last check-in that carried that status (heldAt),
	// and the activation. A write the store acknowledged and then lost
	// leaves them behind what the agent said.
	contact time.Time
	held    reconciler.ObservedHost
	heldAt  time.Time
	heldAct *reconciler.Activation
	// health is what the agent said of its health, one entry per change:
	// the oracle of invariant 8 judges failures by it.
	health []simHealth
	// fine are the activations the agent confirmed, or staged for its next
	// boot, as it reported them (by rollout and closure, with the time),
	// whether the store kept the report or not.
	fine map[[2]string]time.Time
}

// simHealth is what an agent ran, and whether its health probes or units
// failed, from an instant on.
type simHealth struct {
	from    time.Time
	current string
	sick    bool
}

type fleetSim struct {
	t           *rapid.T
	wellBehaved bool
	in          reconciler.Input
	models      map[string]*fleetModel // latest release's model, per channel
	agents      map[string]*simAgent
	names       []string
	channels    []string
	chain       []string
	tick        int
	releases    int
	maxReleases int
	opSeq       int
	commits     map[string]bool
	rng         *rand.Rand
	faults      simFaults
	// lossPct is how often (in percent) the store loses a status write, a
	// confirm or a deferred report it acknowledged; 0 in half the runs.
	lossPct int
}

// simMaxPeriod is the longest an agent goes between two check-ins while it
// reaches the control plane: the offline threshold less the late
// threshold, what rfcs/0003 rule 6 assumes (the control plane holds a
// long-poll for a quarter of the offline threshold at most).
var simMaxPeriod = reconciler.Tunables{}.OfflineThreshold() - reconciler.Tunables{}.LateAfter()

func newFleetSim(t *rapid.T, o fleetGenOpts, wellBehaved bool) *fleetSim {
	m := genFleetModel(t, o)
	s := &fleetSim{t: t, wellBehaved: wellBehaved, models: map[string]*fleetModel{}, agents: map[string]*simAgent{},
		channels: m.channels, chain: m.chain, commits: map[string]bool{}, faults: o.faults,
		rng: rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "instantSeed"), 0x5eed))}
	s.in = reconciler.Input{Now: simEpoch, Hosts: map[string]reconciler.ObservedHost{}}
	offline := 0
	maxPeriod := 30 * time.Second // a well-behaved fleet's agents check in often
	if !wellBehaved {
		maxPeriod = simMaxPeriod
		if o.faults.lossy || rapid.Bool().Draw(t, "lossyStore") {
			s.lossPct = uniformIntGen(5, 30).Draw(t, "lossPct")
		}
		offline = uniformIntGen(0, 5).Draw(t, "offlineAtStart")
		// The control plane has watched for long, has just started
		// (a first deployment), or started a few minutes ago.
		switch percentGen.Draw(t, "watchAtStart") {
		case 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19:
			s.in.WatchingSince = simEpoch
		case 20, 21, 22, 23, 24, 25, 26, 27, 28, 29:
			s.in.WatchingSince = simEpoch.Add(-time.Duration(rapid.IntRange(1, 299).Draw(t, "watchedSeconds")) * time.Second)
		}
		if percentGen.Draw(t, "neverSeenAtStart") < 15 {
			offline = len(m.hosts) // nobody checked in yet
		}
	}
	for i, h := range m.hosts {
		a := &simAgent{name: h.name, online: true, period: time.Second + s.jitter(maxPeriod-time.Second), fine: map[[2]string]time.Time{}}
		a.says = reconciler.ObservedHost{Current: simClosure(h.name, 0), Booted: simClosure(h.name, 0), Probes: reconciler.ProbeSummary{Total: 2}}
		a.held, a.contact = a.says, simEpoch.Add(-s.jitter(a.period))
		a.heldAt = a.contact
		if i < offline {
			a.online, a.backAt, a.cutAt = false, rapid.IntRange(1, 30).Draw(t, "backAt"), simEpoch.Add(-time.Hour)
			a.contact, a.heldAt = a.cutAt, a.cutAt
			if offline == len(m.hosts) {
				a.contact, a.heldAt = time.Time{}, time.Time{} // never seen
			}
		}
		a.health = []simHealth{{current: a.says.Current}}
		s.agents[h.name] = a
		s.names = append(s.names, h.name)
		s.in.Hosts[h.name] = a.observed()
	}
	commit := s.newCommit()
	f, ms, hashes := s.project(m, commit)
	for _, ch := range m.channels {
		s.models[ch] = m
		s.in.Channels = append(s.in.Channels, reconciler.Channel{Name: ch, Ref: commit, Fleet: f, Manifest: ms[ch], ManifestHash: hashes[ch]})
	}
	// Channels often start on different releases: their budgets' limits
	// and host lists, closures and channel memberships then differ.
	if !wellBehaved && percentGen.Draw(t, "channelsStartApart") >= 40 {
		for _, ch := range m.channels[1:] {
			s.releaseOn(ch)
		}
		s.releases = 0
	}
	return s
}

// jitter draws a duration in [0, d).
func (s *fleetSim) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(s.rng.Int64N(int64(d)))
}

// instant draws an instant in (from, to].
func (s *fleetSim) instant(from, to time.Time) time.Time {
	return to.Add(-s.jitter(to.Sub(from)))
}

// observed is what the store holds of the agent, as the reconciler reads
// it: nothing for a host never heard from.
func (a *simAgent) observed() reconciler.ObservedHost {
	if a.contact.IsZero() {
		return reconciler.ObservedHost{}
	}
	o := a.held
	o.LastSeen, o.StatusAt, o.Activation = a.contact, a.heldAt, a.heldAct
	return o
}

// sameStatus reports whether two observations carry the same status (what
// a check-in carries: not the times, not the activation).
func sameStatus(a, b reconciler.ObservedHost) bool {
	a.LastSeen, a.StatusAt, a.Activation = time.Time{}, time.Time{}, nil
	b.LastSeen, b.StatusAt, b.Activation = time.Time{}, time.Time{}, nil
	return reflect.DeepEqual(a, b)
}

// lost draws whether the store loses a write it acknowledged.
func (s *fleetSim) lost(what string) bool {
	return s.lossPct > 0 && percentGen.Draw(s.t, what) < s.lossPct
}

// checkIn is a check-in of the agent at at that reaches the control plane:
// its time is recorded, and its status when it differs from the stored one
// (a write the store may lose; the next check-in writes it again); a
// status equal to the stored one was said again at at.
func (s *fleetSim) checkIn(a *simAgent, at time.Time) {
	if at.After(a.contact) {
		a.contact = at
	}
	switch {
	case sameStatus(a.says, a.held):
		if at.After(a.heldAt) {
			a.heldAt = at
		}
	case !s.lost("statusWriteLost"):
		a.held, a.heldAt = a.says, at
	}
}

// change notes the agent's status after a change at at, for the oracle.
func (a *simAgent) change(at time.Time) {
	h := simHealth{from: at, current: a.says.Current, sick: len(a.says.Probes.Failed)+len(a.says.FailedUnits) > 0}
	if last := a.health[len(a.health)-1]; last.current != h.current || last.sick != h.sick {
		a.health = append(a.health, h)
	}
}

// advance moves time on to the next tick and lets agents, the control
// plane, operators and CI act on what the last tick decided, at instants
// between the two ticks.
func (s *fleetSim) advance(out reconciler.Output) {
	t := s.t
	prev := s.in.Now
	step := time.Duration(uniformIntGen(30, 600).Draw(t, "stepSeconds")) * time.Second
	if w := out.WakeAt; !s.wellBehaved && w.After(prev) && w.Sub(prev) <= maxSimStep && percentGen.Draw(t, "tickAtWake") < 40 {
		step = w.Sub(prev) // the control plane ticks when the last tick asked to
	}
	now := prev.Add(step)

	// What happens at an instant of the step besides what the agents do:
	// a partition cuts a share of a channel off, the control plane is down
	// for a while (its watch starts again when it is back), a host goes
	// away or turns unhealthy.
	var down [2]time.Time // the control plane's outage, [from, to)
	if !s.wellBehaved {
		partition, outage := 2, 2
		if s.faults.partitionPct > 0 {
			partition = s.faults.partitionPct
		}
		if s.faults.outagePct > 0 {
			outage = s.faults.outagePct
		}
		switch r := percentGen.Draw(t, "spontaneous"); {
		case r >= 100-partition:
			s.partition(prev, now)
		case r >= 100-partition-outage:
			from := s.instant(prev, now)
			to := from.Add(time.Duration(uniformIntGen(3, 45).Draw(t, "outageMinutes")) * time.Minute)
			down = [2]time.Time{from, to}
			now = to.Add(s.jitter(time.Minute))
			s.in.WatchingSince = to
		case r >= 96-partition-outage:
			a := s.agents[s.names[uniformIntGen(0, len(s.names)-1).Draw(t, "goesOffline")]]
			if a.online {
				a.online, a.backAt, a.cutAt = false, s.tick+1+rapid.IntRange(1, 20).Draw(t, "offlineTicks"), s.instant(prev, now)
			}
		case r >= 92-partition-outage:
			a := s.agents[s.names[uniformIntGen(0, len(s.names)-1).Draw(t, "turnsUnhealthy")]]
			a.sickUntil, a.sickUnits = s.tick+rapid.IntRange(1, 10).Draw(t, "sickTicks"), rapid.Bool().Draw(t, "sickUnits")
		}
	}
	s.in.Now = now
	s.in.Hosts = maps.Clone(s.in.Hosts) // the previous Input keeps its own
	acts := map[string]*reconciler.HostAction{}
	for i, hi := range out.Actions {
		if s.agents[hi.Host] == nil {
			t.Fatalf("tick %d: action for unknown host %q", s.tick, hi.Host)
		}
		acts[hi.Host] = &out.Actions[i]
	}
	for _, name := range s.names {
		a := s.agents[name]
		s.live(a, prev, now, down, acts[name])
		s.in.Hosts[name] = a.observed()
	}
	s.measure(out.Measure)
	if s.wellBehaved {
		return
	}
	if s.releases < s.maxReleases && percentGen.Draw(t, "releaseRoll") >= 94 {
		ch := rapid.SampledFrom(s.channels).Draw(t, "releaseChannel")
		if percentGen.Draw(t, "pauseBeforeRelease") < 30 {
			// A release pushed while an operator holds the rollout: it
			// supersedes it, often with hosts mid-soak.
			for _, r := range s.in.Rollouts {
				if r.Channel == ch && r.State == reconciler.RolloutActive {
					s.opSeq++
					s.in.Intents = append(s.in.Intents, reconciler.Intent{ID: fmt.Sprintf("op-%04d", s.opSeq),
						RolloutID: r.ID, Kind: reconciler.IntentPause, Actor: "alice", At: now})
				}
			}
		}
		s.releaseOn(ch)
	}
	if percentGen.Draw(t, "operatorRoll") >= 95 {
		s.operator(now)
	}
}

// live is one agent between two ticks: its status changes at the start of
// the step (a reboot into a staged target, health turning), it comes back
// from a cut, it acts on what the last tick told it, and it checks in
// while it reaches the control plane — the last time anywhere in its
// period before the tick, or before its cut or the control plane's outage
// began.
func (s *fleetSim) live(a *simAgent, prev, now time.Time, down [2]time.Time, act *reconciler.HostAction) {
	t := s.t
	if !a.online && s.tick >= a.backAt {
		a.online, a.backSince = true, s.instant(prev, now)
	}
	reaches := func(at time.Time) bool {
		if !down[0].IsZero() && !at.Before(down[0]) && at.Before(down[1]) {
			return false
		}
		if a.online {
			return !at.Before(a.backSince)
		}
		return at.Before(a.cutAt)
	}
	start := prev.Add(time.Nanosecond)
	switch {
	case a.staged != "" && s.tick >= a.bootAt && a.bootFails:
		// The boot into the staged target failed: the previous default
		// booted again, and the agent says so.
		o := a.bootOrder
		a.says.Deferred, a.staged, a.bootFails, a.bootOrder = false, "", false, nil
		a.says.Activation = &reconciler.Activation{RolloutID: o.RolloutID, Closure: o.Target, Outcome: reconciler.OutcomeBootFailed,
			At: start, Code: codes.BootFellBack}
		if !s.lost("reportLost") {
			a.heldAct = a.says.Activation
		}
	case a.staged != "" && s.tick >= a.bootAt:
		a.says.Current, a.says.Booted, a.says.Deferred, a.staged = a.staged, a.staged, false, ""
	}
	a.says.Probes, a.says.FailedUnits = reconciler.ProbeSummary{Total: 2}, nil
	if s.tick < a.sickUntil {
		if a.sickUnits {
			a.says.FailedUnits = []string{"nginx.service"}
		} else {
			a.says.Probes.Failed = []string{"http"}
		}
	}
	a.change(start)
	if reaches(start) && !sameStatus(a.says, a.held) {
		s.checkIn(a, start) // a health report, or the first check-in after a reboot
	}
	if !a.backSince.IsZero() && a.backSince.After(prev) && reaches(a.backSince) {
		s.checkIn(a, a.backSince) // back
		if q := a.queued; q != nil {
			a.queued = nil
			if rapid.Bool().Draw(t, "actsOnReturn") {
				s.react(a, *q, a.queuedBy, a.backSince)
			}
		}
	}
	if act != nil {
		// The deadline the agent is given, as the control plane words it
		// (to the second): it acts on no target past it.
		by := prev.Add(s.in.Tunables.ConfirmWindow()).Truncate(time.Second)
		if act.Kind == reconciler.ActionReboot {
			by = s.bootBy(*act, prev).Truncate(time.Second) // a reboot's own deadline (rule 17)
		}
		at := prev.Add(time.Nanosecond + s.jitter(min(now.Sub(prev), a.period)))
		if !reaches(at) && a.online && !down[0].IsZero() && now.After(down[1]) {
			at = down[1].Add(s.jitter(min(now.Sub(down[1]), a.period))) // asked again once the control plane is back
		}
		if reaches(at) {
			s.react(a, *act, by, at)
		} else {
			q := *act
			a.queued, a.queuedBy = &q, by
		}
	}
	// The last periodic check-in: in the period before the tick, before
	// the cut, or before and after the outage.
	for _, end := range []time.Time{down[0], a.cutAt, now} {
		if end.IsZero() || !end.After(prev) || end.After(now) {
			continue
		}
		if at := end.Add(-s.jitter(a.period) - time.Nanosecond); at.After(prev) && reaches(at) {
			s.checkIn(a, at)
		}
	}
}

// bootBy is the boot deadline of a reboot ordered at since.
func (s *fleetSim) bootBy(act reconciler.HostAction, since time.Time) time.Time {
	for i := range s.in.Rollouts {
		if r := &s.in.Rollouts[i]; r.ID == act.RolloutID {
			return r.RebootOf(act.Wave).BootBy(since, s.in.Tunables)
		}
	}
	return since.Add(s.in.Tunables.ConfirmWindow())
}

// react is an agent that reaches the control plane acting on a dispatch
// or a rollback at an instant: it reports what came of it, and checks in.
// Like the real agent, it leaves alone a target whose confirm deadline (by)
// has passed: the control plane would refuse its confirm.
func (s *fleetSim) react(a *simAgent, hi reconciler.HostAction, by, at time.Time) {
	t := s.t
	if !at.Before(by) {
		return
	}
	report := func(outcome string) {
		a.says.Activation = &reconciler.Activation{RolloutID: hi.RolloutID, Closure: hi.Target, Outcome: outcome, At: at}
		healthy := outcome == reconciler.OutcomeConfirmed || outcome == reconciler.OutcomeDeferred
		if healthy {
			a.fine[[2]string{hi.RolloutID, hi.Target}] = at
		}
		if !healthy || !s.lost("reportLost") {
			a.heldAct = a.says.Activation
		}
	}
	confirm := func() {
		a.says.Current, a.says.Booted, a.says.Deferred, a.staged = hi.Target, hi.Target, false, ""
		report(reconciler.OutcomeConfirmed)
	}
	offline := func() {
		q := hi
		a.online, a.backAt, a.queued, a.queuedBy, a.cutAt = false, s.tick+1+rapid.IntRange(1, 15).Draw(t, "offlineTicks"), &q, by, at
	}
	switch {
	case s.wellBehaved:
		confirm()
	case hi.Kind == reconciler.ActionReboot:
		// The host reboots: it comes up on its target a few ticks later,
		// or on its previous closure (and says so), or stays away, or
		// never reboots at all (its boot times out).
		switch r := percentGen.Draw(t, "rebootReaction"); {
		case r < 70:
			a.staged, a.bootAt = hi.Target, s.tick+rapid.IntRange(0, 3).Draw(t, "bootTicks")
		case r < 82:
			q := hi
			a.staged, a.bootAt, a.bootFails, a.bootOrder = hi.Target, s.tick+rapid.IntRange(0, 3).Draw(t, "bootTicks"), true, &q
		case r < 90:
			offline()
			return
		default:
		}
		switch r := percentGen.Draw(t, "rollbackReaction"); {
		case r < 80:
			confirm()
		case r < 90: // silent: the rollback times out
		default:
			offline()
			return
		}
	case hi.Reason.Code == codes.CatchUp && percentGen.Draw(t, "catchUpFails") < 30:
		// A host that was away fails more often than most: its failure
		// must still count (rule 9), also in a converged rollout.
		report(reconciler.OutcomeFailed)
	default:
		switch r := percentGen.Draw(t, "dispatchReaction"); {
		case r < 78:
			confirm()
		case r < 82:
			report(reconciler.OutcomeFailed)
		case r < 85:
			report(reconciler.OutcomeRolledBack) // Current stays the previous closure
		case r < 91:
			report(reconciler.OutcomeDeferred)
			a.says.Deferred, a.staged, a.bootAt = true, hi.Target, s.tick+rapid.IntRange(1, 6).Draw(t, "rebootTicks")
		case r < 94:
			offline()
			return
		case r < 97:
			confirm()
			a.sickUntil, a.sickUnits = s.tick+rapid.IntRange(1, 10).Draw(t, "sickTicks"), rapid.Bool().Draw(t, "sickUnits")
			if a.sickUnits {
				a.says.FailedUnits = []string{"nginx.service"}
			} else {
				a.says.Probes.Failed = []string{"http"}
			}
		default: // silent: the confirm window runs out
		}
	}
	a.change(at)
	s.checkIn(a, at)
}

// newCommit draws a fresh meta.ciCommit: 7–40 lowercase hex characters.
func (s *fleetSim) newCommit() string {
	n := rapid.IntRange(7, 40).Draw(s.t, "commitLength")
	sum := sha256.Sum256([]byte("commit-" + strconv.Itoa(len(s.commits))))
	full := hex.EncodeToString(sum[:])
	c := full[:n]
	for s.commits[c] && n < len(full) {
		n++
		c = full[:n]
	}
	s.commits[c] = true
	return c
}

// project builds, validates and projects a release.
func (s *fleetSim) project(m *fleetModel, commit string) (*proto.FleetResolved, map[string]*proto.RolloutManifest, map[string]string) {
	f := m.build(commit)
	if _, err := manifest.ValidateFleet(f); err != nil {
		s.t.Fatalf("the generator drew an invalid fleet: %v", err)
	}
	raw, err := json.Marshal(f)
	if err != nil {
		s.t.Fatalf("marshal fleet: %v", err)
	}
	fh := sha256.Sum256(raw)
	list, err := manifest.Project(f, hex.EncodeToString(fh[:]))
	if err != nil {
		s.t.Fatalf("project: %v", err)
	}
	ms, hashes := map[string]*proto.RolloutManifest{}, map[string]string{}
	for _, mf := range list {
		b, err := manifest.Marshal(mf)
		if err != nil {
			s.t.Fatalf("marshal manifest: %v", err)
		}
		h := sha256.Sum256(b)
		ms[mf.Channel], hashes[mf.Channel] = mf, hex.EncodeToString(h[:])
	}
	return f, ms, hashes
}

// release publishes a new release on a drawn channel.
func (s *fleetSim) release() {
	s.releaseOn(rapid.SampledFrom(s.channels).Draw(s.t, "releaseChannel"))
}

// releaseOn publishes a new release on a channel.
func (s *fleetSim) releaseOn(ch string) {
	m := s.models[ch].mutate(s.t)
	commit := s.newCommit()
	f, ms, hashes := s.project(m, commit)
	s.models[ch] = m
	s.releases++
	for i := range s.in.Channels {
		if c := &s.in.Channels[i]; c.Name == ch {
			c.Ref, c.Fleet, c.Manifest, c.ManifestHash = commit, f, ms[ch], hashes[ch]
		}
	}
}

// measure is the control plane taking the analysis measurements that are
// due: a well-behaved fleet's services are healthy and its Prometheus
// answers; otherwise a value may be bad, missing or not a number, the
// query may fail, or the measurement may not be taken yet.
func (s *fleetSim) measure(reqs []reconciler.MeasureRequest) {
	t, now := s.t, s.in.Now
	for _, r := range reqs {
		if r.At.After(now) {
			continue
		}
		m := reconciler.Measurement{RolloutID: r.RolloutID, Wave: r.Wave, Analysis: r.Analysis, Seq: r.Seq, At: now,
			Query: `max(errors{host=~"…"})`, Samples: []proto.MetricSample{{Value: "0.01"}}}
		if len(r.Baseline) > 0 {
			// A comparison: the canary at its baseline's level, or clearly
			// worse, or too few values, or no answer.
			same := []float64{0.01, 0.012, 0.009, 0.011, 0.01, 0.013}
			m.Samples, m.Compared = nil, &reconciler.Compared{Canary: same, Baseline: same}
			if !s.wellBehaved {
				switch k := percentGen.Draw(t, "comparison"); {
				case k < 8:
					continue // not taken yet
				case k < 18:
					m.Compared.Canary = []float64{0.5, 0.4, 0.6, 0.5, 0.45, 0.55}
				case k < 24:
					m.Compared.Baseline = same[:2]
				case k < 28:
					m.Compared, m.Error = nil, "connection refused"
				}
			}
			s.in.Measurements = append(slices.Clip(s.in.Measurements), m)
			continue
		}
		if !s.wellBehaved {
			switch k := percentGen.Draw(t, "measurement"); {
			case k < 8:
				continue // not taken yet
			case k < 16:
				m.Samples[0].Value = "0.5"
			case k < 22:
				m.Samples[0].Value = "0.1" // between the conditions
			case k < 26:
				m.Samples = nil // no data
			case k < 29:
				m.Samples[0].Value = "NaN"
			case k < 33:
				m.Samples, m.Error = nil, "connection refused"
			}
		}
		s.in.Measurements = append(slices.Clip(s.in.Measurements), m)
	}
}

// partition cuts a drawn share (1–100%) of one channel's hosts off at an
// instant of the step, for a few ticks: their check-ins, confirms and
// reports do not reach the control plane. Their last check-ins lie
// anywhere in their periods before it.
func (s *fleetSim) partition(prev, now time.Time) {
	t := s.t
	ch := rapid.SampledFrom(s.channels).Draw(t, "partitionedChannel")
	share := uniformIntGen(1, 100).Draw(t, "partitionShare")
	at := s.instant(prev, now)
	back := s.tick + 1 + rapid.IntRange(1, 12).Draw(t, "partitionTicks")
	for _, name := range s.names {
		a := s.agents[name]
		if s.models[ch].channelOf(name) != ch || !a.online || s.rng.IntN(100) >= share {
			continue
		}
		a.online, a.backAt, a.cutAt = false, back, at
	}
}

// operator files an operator intent, now: pause, resume, cancel or
// rollback of a drawn rollout (also of one that does not exist), an
// approval or a break of the freezes by one of three approvers, or an
// intent of an unknown kind.
func (s *fleetSim) operator(now time.Time) {
	t := s.t
	ids := []string{"nope@0000000"}
	for _, r := range s.in.Rollouts {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	kind := "reboot" // not an intent kind
	var wave *int
	switch k := percentGen.Draw(t, "operatorKind"); {
	case k < 15:
		// Approvals, of any wave (or none), by one of three
		// approvers; and now and then a break of the freezes.
		kind = reconciler.IntentApprove
		if w := rapid.IntRange(-1, 4).Draw(t, "approveWave"); w >= 0 {
			wave = &w
		}
		if rapid.IntRange(0, 4).Draw(t, "breakFreeze") == 0 {
			kind, wave = reconciler.IntentBreakFreeze, nil
		}
	case k < 30:
		kind = reconciler.IntentRollback
	case k < 50:
		kind = reconciler.IntentPause
	case k < 70:
		kind = reconciler.IntentResume
	case k < 90:
		kind = reconciler.IntentCancel
	}
	s.opSeq++
	s.in.Intents = append(s.in.Intents, reconciler.Intent{
		ID:        fmt.Sprintf("op-%04d", s.opSeq),
		RolloutID: ids[uniformIntGen(0, len(ids)-1).Draw(t, "operatorRollout")],
		Kind:      kind,
		Actor:     rapid.SampledFrom([]string{"alice", "bob", "carol", ""}).Draw(t, "operatorActor"),
		At:        now.Add(-time.Duration(rapid.IntRange(0, 120).Draw(t, "operatorAge")) * time.Second),
		Wave:      wave,
	})
}

// channelOf returns a host's channel in the model ("" when unknown).
func (m *fleetModel) channelOf(name string) string {
	i, ok := slices.BinarySearchFunc(m.hosts, name, func(h modelHost, n string) int { return strings.Compare(h.name, n) })
	if !ok {
		return ""
	}
	return m.hosts[i].channel
}

// allConverged: every channel's release has a Converged rollout whose hosts
// all converged.
func (s *fleetSim) allConverged() bool {
	for _, c := range s.in.Channels {
		id := proto.RolloutID(c.Name, c.Ref)
		i := slices.IndexFunc(s.in.Rollouts, func(r reconciler.Rollout) bool { return r.ID == id })
		if i < 0 || s.in.Rollouts[i].State != reconciler.RolloutConverged {
			return false
		}
		for _, h := range s.in.Rollouts[i].Hosts {
			if h.State != reconciler.HostConverged {
				return false
			}
		}
	}
	return true
}

// convergenceBound is a generous number of ticks in which a well-behaved
// fleet converges even if every host of every channel goes one at a time
// (a budget of 1, edge chains, channel edges): per host one tick to
// dispatch, one to confirm, the longest soak at the shortest step (30 s),
// one to converge; per wave and channel a few ticks more; doubled.
func (s *fleetSim) convergenceBound() int {
	bound := 20
	for _, c := range s.in.Channels {
		maxSoak, waves := 0, len(c.Fleet.Waves[c.Name])
		for _, w := range c.Fleet.Waves[c.Name] {
			maxSoak = max(maxSoak, w.SoakMinutes)
		}
		perHost := 3 + maxSoak*2 + 1
		// Analyses measure one after the other, at most one a tick.
		perWave := 3
		for _, a := range c.Manifest.HealthGate.Analysis {
			every, _ := analysis.ParseInterval(a.Interval)
			perWave = max(perWave, 3+a.Count*(int(every/(30*time.Second))+2))
		}
		bound += len(c.Manifest.HostSet)*perHost + perWave*(waves+1)
	}
	return 2 * bound
}

// ---- the chaotic run ----

// tickCase is one tick of a run: the Input, what Reconcile decided, and the
// state after Apply.
type tickCase struct {
	tick int
	in   reconciler.Input
	out  reconciler.Output
	next reconciler.Input
	sim  *fleetSim // what the agents really did, for the oracles that need it
}

// tickCheck returns the ways a tick breaks an invariant.
type tickCheck func(t *rapid.T, c tickCase) []string

// safetyChecks are the checkers of the safety invariants, each also a
// property of its own above (and TestPropertyChangeControl): what no tick
// may ever do, however much work it leaves to the next. A property that
// decides ticks otherwise than runChaos does (under a bound of host moves,
// say) runs them all on each tick it decides, through checkSafety, so
// that a checker added here is held by those ticks too.
var safetyChecks = []tickCheck{
	checkBudgets,            // invariant 1
	checkEventBudgets,       // invariant 1, as the journal shows it
	checkEdgesAndWaves,      // invariant 2
	checkTimeGates,          // invariant 2 for windows, freezes and approvals (rfcs/0013 rule 2)
	checkOneNonTerminal,     // invariant 3
	checkTransitions,        // invariant 6
	checkNoOrphanedDispatch, // no orphaned dispatch
	checkOneDriver,          // one rollout drives a host at a time
}

// checkSafety runs every checker of safetyChecks on a tick and returns all
// their problems, so that one broken invariant does not hide another.
func checkSafety(t *rapid.T, c tickCase) []string {
	var problems []string
	for _, check := range safetyChecks {
		problems = append(problems, check(t, c)...)
	}
	return problems
}

// runChaos drives a random fleet for a drawn number of ticks (at most 150)
// and checks an invariant after every tick.
func runChaos(t *rapid.T, check tickCheck) {
	runChaosWith(t, fleetGenOpts{maxHosts: 300, changeControl: rapid.Bool().Draw(t, "changeControl"),
		analysis: rapid.Bool().Draw(t, "analysis")}, check)
}

// runChaosWith is runChaos with the fleet's options given.
func runChaosWith(t *rapid.T, o fleetGenOpts, check tickCheck) {
	s := newFleetSim(t, o, false)
	s.maxReleases = uniformIntGen(0, 5).Draw(t, "maxReleases")
	ticks := uniformIntGen(10, 150).Draw(t, "ticks")
	for s.tick = 0; s.tick < ticks; s.tick++ {
		in := s.in
		before := hostRecords(in)
		out := reconciler.Reconcile(in)
		if changed := changedRecords(before, in); changed != "" {
			t.Fatalf("tick %d: Reconcile changed its Input (the tick copies host records before it changes them): %s", s.tick, changed)
		}
		next := reconciler.Apply(in, out)
		if problems := check(t, tickCase{s.tick, in, out, next, s}); len(problems) > 0 {
			t.Fatalf("tick %d (now %s):\n- %s\nthis tick decided:\n%s\nstate after the tick:\n%s",
				s.tick, in.Now.Format(time.RFC3339), strings.Join(problems, "\n- "), describeDecisions(out), describeRolloutStates(next))
		}
		s.in = next
		s.advance(out)
	}
}

// hostRecords is a deep copy of the host records of in's rollouts.
func hostRecords(in reconciler.Input) [][]reconciler.RolloutHost {
	recs := make([][]reconciler.RolloutHost, len(in.Rollouts))
	for i, r := range in.Rollouts {
		recs[i] = slices.Clone(r.Hosts)
		for j := range recs[i] {
			recs[i][j].Budgets = slices.Clone(recs[i][j].Budgets)
		}
	}
	return recs
}

// changedRecords names the first host record of in that is not as
// hostRecords copied it, or is "".
func changedRecords(before [][]reconciler.RolloutHost, in reconciler.Input) string {
	for i, r := range in.Rollouts {
		if len(r.Hosts) != len(before[i]) {
			return fmt.Sprintf("rollout %s had %d hosts, has %d", r.ID, len(before[i]), len(r.Hosts))
		}
		for j := range r.Hosts {
			if !reflect.DeepEqual(r.Hosts[j], before[i][j]) {
				return fmt.Sprintf("rollout %s, host %d: %+v became %+v", r.ID, j, before[i][j], r.Hosts[j])
			}
		}
	}
	return ""
}

// ---- invariant 1: disruption budgets ----

// budgetLimitOf is a frozen budget's cap: min(maxInFlight,
// max(1, floor(pct × hosts / 100))); unlimited when neither is set.
func budgetLimitOf(b proto.RolloutBudget) int {
	limit := math.MaxInt
	if b.MaxInFlight != nil {
		limit = min(limit, *b.MaxInFlight)
	}
	if b.MaxInFlightPct != nil {
		limit = min(limit, max(1, *b.MaxInFlightPct*len(b.Hosts)/100))
	}
	return limit
}

func simInFlight(s reconciler.HostState) bool {
	return s == reconciler.HostActivating || s == reconciler.HostSoaking || s == reconciler.HostRollingBack || s == reconciler.HostRebooting
}

// countedRollouts: the rollouts whose budgets are matched and whose hosts
// count: Active, Halted, Reverting, Cancelled, each channel's latest
// rollout (by OpenedAt, then ID) when it is Converged, and every rollout,
// whatever its state, with a host in flight (rfcs/0013 rule 1: in flight
// in any rollout, terminal or not, until the host lands).
func countedRollouts(in reconciler.Input) []bool {
	latest := map[string]int{}
	for i, r := range in.Rollouts {
		j, ok := latest[r.Channel]
		if !ok {
			latest[r.Channel] = i
			continue
		}
		l := in.Rollouts[j]
		if r.OpenedAt.After(l.OpenedAt) || (r.OpenedAt.Equal(l.OpenedAt) && r.ID > l.ID) {
			latest[r.Channel] = i
		}
	}
	out := make([]bool, len(in.Rollouts))
	for i, r := range in.Rollouts {
		switch r.State {
		case reconciler.RolloutActive, reconciler.RolloutHalted, reconciler.RolloutReverting, reconciler.RolloutCancelled:
			out[i] = true
		case reconciler.RolloutConverged:
			out[i] = latest[r.Channel] == i
		}
		out[i] = out[i] || slices.ContainsFunc(r.Hosts, func(h reconciler.RolloutHost) bool { return simInFlight(h.State) })
	}
	return out
}

type checkedBudgetMember struct{ rollout, budget int }

type checkedBudgetGroup struct {
	sel      proto.Selector
	members  []checkedBudgetMember
	limit    int
	inflight []string // "rollout/host(State)"
}

// checkBudgets recomputes the budget groups over the state after the tick
// and checks every group that this tick moved a host into flight in.
func checkBudgets(_ *rapid.T, c tickCase) []string {
	out, next := c.out, c.next
	var problems []string
	counted := countedRollouts(next)
	var groups []*checkedBudgetGroup
	for ri, r := range next.Rollouts {
		if !counted[ri] {
			continue
		}
		for bi, b := range r.Budgets {
			var g *checkedBudgetGroup
			for _, cand := range groups {
				if cand.sel.Equal(b.Selector) {
					g = cand
					break
				}
			}
			if g == nil {
				g = &checkedBudgetGroup{sel: b.Selector, limit: math.MaxInt}
				groups = append(groups, g)
			}
			g.members = append(g.members, checkedBudgetMember{ri, bi})
			g.limit = min(g.limit, budgetLimitOf(b))
		}
	}
	// inGroup: the host is in a frozen host list of one of the rollout's
	// budgets of the group.
	// inGroup: the host is in a frozen host list of one of the rollout's
	// budgets of the group; a host of a rollout that is no longer its
	// channel's latest also when a latest rollout's list names it (it is
	// in flight under the budgets of the releases now current).
	latest := latestRollouts(next)
	inGroup := func(g *checkedBudgetGroup, ri int, host string) bool {
		for _, m := range g.members {
			if m.rollout != ri && (latest[ri] || !latest[m.rollout]) {
				continue
			}
			if _, ok := slices.BinarySearch(next.Rollouts[m.rollout].Budgets[m.budget].Hosts, host); ok {
				return true
			}
		}
		return false
	}
	for ri, r := range next.Rollouts {
		if !counted[ri] {
			continue
		}
		for _, h := range r.Hosts {
			if !simInFlight(h.State) {
				continue
			}
			for _, g := range groups {
				if inGroup(g, ri, h.Hostname) {
					g.inflight = append(g.inflight, fmt.Sprintf("%s/%s(%s)", r.ID, h.Hostname, h.State))
				}
			}
		}
	}
	index := rolloutIndexByID(next)
	reported := map[*checkedBudgetGroup]bool{}
	for _, e := range out.Events {
		if e.Kind != reconciler.EventHostTransition {
			continue
		}
		to, from := reconciler.HostState(e.To), reconciler.HostState(e.From)
		if to != reconciler.HostActivating && to != reconciler.HostRollingBack &&
			(from != reconciler.HostDeferred || to != reconciler.HostSoaking) {
			continue
		}
		if simInFlight(from) {
			// Already in flight (a soaking host sent back): it takes no
			// new slot, so a limit a newer release tightened meanwhile
			// is not exceeded by it.
			continue
		}
		ri, ok := index[e.RolloutID]
		if !ok {
			problems = append(problems, fmt.Sprintf("host %s moved %s→%s in rollout %s, which is not in the state", e.Host, from, to, e.RolloutID))
			continue
		}
		for _, g := range groups {
			if reported[g] || !inGroup(g, ri, e.Host) || len(g.inflight) <= g.limit {
				continue
			}
			reported[g] = true
			sel, _ := json.Marshal(g.sel.Normalized())
			var members []string
			for _, m := range g.members {
				r := next.Rollouts[m.rollout]
				members = append(members, fmt.Sprintf("%s budget #%d (limit %d, %d hosts)", r.ID, m.budget,
					budgetLimitOf(r.Budgets[m.budget]), len(r.Budgets[m.budget].Hosts)))
			}
			problems = append(problems, fmt.Sprintf("budget %s exceeded: %d host(s) in flight, limit %d, after host %s moved %s→%s in %s\n  members: %s\n  in flight: %s",
				sel, len(g.inflight), g.limit, e.Host, from, to, e.RolloutID, strings.Join(members, "; "), strings.Join(g.inflight, ", ")))
		}
	}
	// The frozen indexes must be the budgets whose host lists hold the host.
	for _, u := range out.Rollouts {
		if !u.New {
			continue
		}
		r := u.Rollout
		for bi, b := range r.Budgets {
			if !slices.IsSorted(b.Hosts) {
				problems = append(problems, fmt.Sprintf("rollout %s budget #%d: frozen host list is not sorted", r.ID, bi))
			}
		}
		for _, h := range r.Hosts {
			var want []int
			for bi, b := range r.Budgets {
				if slices.Contains(b.Hosts, h.Hostname) {
					want = append(want, bi)
				}
			}
			if !slices.Equal(want, h.Budgets) {
				problems = append(problems, fmt.Sprintf("rollout %s host %s: Budgets = %v, but its name is in the host lists of budgets %v", r.ID, h.Hostname, h.Budgets, want))
			}
		}
	}
	return problems
}

// checkEventBudgets: see TestPropertyEventBudgetsWithinLimits.
func checkEventBudgets(_ *rapid.T, c tickCase) []string {
	var problems []string
	for _, e := range c.out.Events {
		into := e.Kind == reconciler.EventHostTransition && (e.To == string(reconciler.HostActivating) &&
			(e.Reason.Code == codes.Dispatched || e.Reason.Code == codes.CatchUp) ||
			e.From == string(reconciler.HostDeferred) && e.To == string(reconciler.HostSoaking) ||
			e.To == string(reconciler.HostRebooting))
		held := e.Kind == reconciler.EventHostWaiting && e.Reason.Gate == codes.Budget
		switch {
		case into:
			for _, u := range e.Budgets {
				if u.Name == "" || u.InFlight < 1 || u.InFlight > u.Limit {
					problems = append(problems, fmt.Sprintf("host %s moved %s→%s in %s noting budget %q at %d/%d", e.Host, e.From, e.To, e.RolloutID, u.Name, u.InFlight, u.Limit))
				}
			}
		case held:
			if len(e.Budgets) != 1 {
				problems = append(problems, fmt.Sprintf("host %s held by the budget gate in %s notes %d budgets, want 1", e.Host, e.RolloutID, len(e.Budgets)))
				continue
			}
			u := e.Budgets[0]
			if u.InFlight < u.Limit || !strings.HasPrefix(e.Reason.Message, "disruption budget "+u.Name+" ") ||
				!strings.HasSuffix(e.Reason.Message, fmt.Sprintf("(%d/%d)", u.InFlight, u.Limit)) {
				problems = append(problems, fmt.Sprintf("host %s held in %s notes budget %q at %d/%d, saying %q", e.Host, e.RolloutID, u.Name, u.InFlight, u.Limit, e.Reason.Message))
			}
		case len(e.Budgets) > 0:
			problems = append(problems, fmt.Sprintf("%s event of host %s (%s) notes budgets %v", e.Kind, e.Host, e.Reason.Code, e.Budgets))
		}
	}
	return problems
}

// latestRollouts marks each channel's latest rollout (by OpenedAt, then
// ID).
func latestRollouts(in reconciler.Input) []bool {
	latest := map[string]int{}
	for i, r := range in.Rollouts {
		j, ok := latest[r.Channel]
		if !ok || r.OpenedAt.After(in.Rollouts[j].OpenedAt) || (r.OpenedAt.Equal(in.Rollouts[j].OpenedAt) && r.ID > in.Rollouts[j].ID) {
			latest[r.Channel] = i
		}
	}
	out := make([]bool, len(in.Rollouts))
	for _, i := range latest {
		out[i] = true
	}
	return out
}

// checkNoOrphanedDispatch: every host moved into Activating or RollingBack
// in the tick belongs to a rollout that counts after the tick.
func checkNoOrphanedDispatch(_ *rapid.T, c tickCase) []string {
	var problems []string
	counted := countedRollouts(c.next)
	index := rolloutIndexByID(c.next)
	for _, e := range c.out.Events {
		if e.Kind != reconciler.EventHostTransition ||
			(e.To != string(reconciler.HostActivating) && e.To != string(reconciler.HostRollingBack)) {
			continue
		}
		if ri, ok := index[e.RolloutID]; ok && !counted[ri] {
			r := c.next.Rollouts[ri]
			problems = append(problems, fmt.Sprintf("host %s moved %s→%s (%s) in rollout %s, which after the tick is %s and no longer counts against budgets or observes its hosts",
				e.Host, e.From, e.To, e.Reason.Code, r.ID, r.State))
		}
	}
	return problems
}

// checkOneDriver: a host that this tick moved into flight from outside it
// is in flight in no other rollout that counts.
func checkOneDriver(_ *rapid.T, c tickCase) []string {
	counted := countedRollouts(c.next)
	flying := map[string][]string{}
	for ri, r := range c.next.Rollouts {
		if !counted[ri] {
			continue
		}
		for _, h := range r.Hosts {
			if simInFlight(h.State) {
				flying[h.Hostname] = append(flying[h.Hostname], fmt.Sprintf("%s (%s)", r.ID, h.State))
			}
		}
	}
	var problems []string
	seen := map[string]bool{}
	for _, e := range c.out.Events {
		if e.Kind != reconciler.EventHostTransition || !simInFlight(reconciler.HostState(e.To)) || seen[e.Host] {
			continue
		}
		if e.From == string(reconciler.HostActivating) || e.From == string(reconciler.HostSoaking) {
			continue // already in flight before this move
		}
		if l := flying[e.Host]; len(l) > 1 {
			seen[e.Host] = true
			problems = append(problems, fmt.Sprintf("host %s moved %s→%s in %s (%s) while in flight in %d rollouts: %s",
				e.Host, e.From, e.To, e.RolloutID, e.Reason.Code, len(l), strings.Join(l, ", ")))
		}
	}
	return problems
}

// ---- invariant 2: host edges and waves ----

func checkEdgesAndWaves(_ *rapid.T, c tickCase) []string {
	out, next := c.out, c.next
	var problems []string
	type key struct{ rollout, host string }
	dispatched := map[key]string{}
	for _, hi := range out.Actions {
		if hi.Kind == reconciler.ActionDispatch {
			dispatched[key{hi.RolloutID, hi.Host}] = "a dispatch intent"
		}
	}
	for _, e := range out.Events {
		if e.Kind == reconciler.EventHostTransition && e.To == string(reconciler.HostActivating) {
			dispatched[key{e.RolloutID, e.Host}] = fmt.Sprintf("a %s→%s transition", e.From, e.To)
		}
	}
	index := rolloutIndexByID(next)
	keys := slices.SortedFunc(maps.Keys(dispatched), func(a, b key) int {
		return strings.Compare(a.rollout+"\x00"+a.host, b.rollout+"\x00"+b.host)
	})
	for _, k := range keys {
		ri, ok := index[k.rollout]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s of host %s in rollout %s, which is not in the state", dispatched[k], k.host, k.rollout))
			continue
		}
		r := next.Rollouts[ri]
		state := map[string]reconciler.RolloutHost{}
		for _, h := range r.Hosts {
			state[h.Hostname] = h
		}
		h, ok := state[k.host]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s of host %s, which is not in rollout %s", dispatched[k], k.host, k.rollout))
			continue
		}
		if h.Wave > r.Wave {
			problems = append(problems, fmt.Sprintf("%s of host %s (wave %d) while rollout %s is at wave %d", dispatched[k], k.host, h.Wave, r.ID, r.Wave))
		}
		for _, e := range r.Edges {
			if e.Gated == k.host {
				if p := state[e.Gates]; p.State != reconciler.HostConverged {
					problems = append(problems, fmt.Sprintf("%s of host %s in rollout %s while its edge predecessor %s is %s",
						dispatched[k], k.host, r.ID, e.Gates, p.State))
				}
			}
		}
	}
	return problems
}

// checkNoUnprovableWave is the oracle of rule 11's unprovable wave, with
// rule 8's evidence computed anew: converged hosts whose closure changed,
// against minConverged and minConvergedPct, capped by the hosts the
// release changes.
func checkNoUnprovableWave(_ *rapid.T, c tickCase) []string {
	partial := map[string]bool{}
	for _, v := range c.out.Visibility {
		if v.Ended.IsZero() {
			partial[v.Channel] = true
		}
	}
	var problems []string
	for _, r := range c.next.Rollouts {
		if r.State != reconciler.RolloutActive || partial[r.Channel] {
			continue
		}
		wave := r.Wave
		n, proven, unchanged, failed, other := 0, 0, 0, 0, 0
		for _, h := range r.Hosts {
			if h.Wave != wave {
				continue
			}
			n++
			switch h.State {
			case reconciler.HostConverged:
				if h.Previous == h.Target {
					unchanged++
				} else {
					proven++
				}
			case reconciler.HostFailed:
				failed++
			case reconciler.HostReverted:
				if h.Reason.Code == codes.AgentRolledBack {
					failed++
				} else {
					other++
				}
			default:
				other++
			}
		}
		need := 1
		if m := r.HealthGate.MinConverged; m != nil {
			need = max(need, *m)
		}
		if p := r.HealthGate.MinConvergedPct; p != nil {
			need = max(need, (n**p+99)/100)
		}
		need = min(need, n-unchanged)
		if n > 0 && other == 0 && failed > 0 && proven < need {
			problems = append(problems, fmt.Sprintf("%s is Active on wave %d, which can never be promoted: %d of %d needed converged, %d failed, nothing else left",
				r.ID, wave, proven, need, failed))
		}
	}
	return problems
}

// ---- invariant 3: one non-terminal rollout per channel ----

func checkOneNonTerminal(_ *rapid.T, c tickCase) []string {
	next := c.next
	byChannel := map[string][]string{}
	for _, r := range next.Rollouts {
		switch r.State {
		case reconciler.RolloutOpening, reconciler.RolloutActive, reconciler.RolloutHalted, reconciler.RolloutReverting:
			byChannel[r.Channel] = append(byChannel[r.Channel], fmt.Sprintf("%s (%s: %s)", r.ID, r.State, r.Reason.Message))
		}
	}
	var problems []string
	for _, ch := range slices.Sorted(maps.Keys(byChannel)) {
		if l := byChannel[ch]; len(l) > 1 {
			problems = append(problems, fmt.Sprintf("channel %s has %d non-terminal rollouts: %s", ch, len(l), strings.Join(l, ", ")))
		}
	}
	return problems
}

// ---- invariant 4: determinism ----

func checkDeterminism(t *rapid.T, c tickCase) []string {
	if again := reconciler.Reconcile(c.in); !sameOutputs(c.out, again) {
		return []string{"Reconcile on the same Input twice differs (-first +second):\n" + cmp.Diff(c.out, again)}
	}
	if got := reconciler.Reconcile(shuffledInput(t, c.in)); !sameOutputs(c.out, got) {
		return []string{"Reconcile on the Input with its slices shuffledInput differs (-original +shuffledInput):\n" + cmp.Diff(c.out, got)}
	}
	return nil
}

func sameOutputs(a, b reconciler.Output) bool {
	return reflect.DeepEqual(a, b) || cmp.Diff(a, b) == ""
}

// shuffledInput copies the Input with Rollouts, Intents, Channels and every
// rollout's Hosts in another order: rapid draws the permutations of the
// short slices and the seed of the host shuffles.
func shuffledInput(t *rapid.T, in reconciler.Input) reconciler.Input {
	c := in
	c.Rollouts = rapid.Permutation(in.Rollouts).Draw(t, "shuffledRollouts")
	c.Intents = rapid.Permutation(in.Intents).Draw(t, "shuffledIntents")
	c.Channels = rapid.Permutation(in.Channels).Draw(t, "shuffledChannels")
	seed := rapid.Uint64().Draw(t, "hostShuffleSeed")
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	for i := range c.Rollouts {
		hosts := slices.Clone(c.Rollouts[i].Hosts)
		rng.Shuffle(len(hosts), func(a, b int) { hosts[a], hosts[b] = hosts[b], hosts[a] })
		c.Rollouts[i].Hosts = hosts
	}
	return c
}

func checkEdgeOrder(t *rapid.T, c tickCase) []string {
	in := c.in
	rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "edgeShuffleSeed"), 0x51ed))
	in.Rollouts = slices.Clone(in.Rollouts)
	for i := range in.Rollouts {
		edges := slices.Clone(in.Rollouts[i].Edges)
		rng.Shuffle(len(edges), func(a, b int) { edges[a], edges[b] = edges[b], edges[a] })
		in.Rollouts[i].Edges = edges
	}
	in.Deferrals = slices.Clone(in.Deferrals)
	rng.Shuffle(len(in.Deferrals), func(a, b int) { in.Deferrals[a], in.Deferrals[b] = in.Deferrals[b], in.Deferrals[a] })
	in.Channels = slices.Clone(in.Channels)
	for i := range in.Channels {
		if f := in.Channels[i].Fleet; f != nil {
			in.Channels[i].Fleet = shuffleChangeControl(f, rng)
		}
	}
	want, got := withSortedEdges(c.out), withSortedEdges(reconciler.Reconcile(in))
	if !sameOutputs(want, got) {
		return []string{"Reconcile with the rollouts' edges, the freezes and the windows in another order differs (-original +shuffledInput):\n" + cmp.Diff(want, got)}
	}
	return nil
}

// shuffleChangeControl returns a copy of a fleet with its freezes, its
// lists of maintenance windows and their days in another order (rules 13
// and 14: what is frozen from them and every message is the same).
func shuffleChangeControl(f *proto.FleetResolved, rng *rand.Rand) *proto.FleetResolved {
	windows := func(ws []proto.Window) []proto.Window {
		ws = slices.Clone(ws)
		for i := range ws {
			ws[i].Days = slices.Clone(ws[i].Days)
			rng.Shuffle(len(ws[i].Days), func(a, b int) { ws[i].Days[a], ws[i].Days[b] = ws[i].Days[b], ws[i].Days[a] })
		}
		rng.Shuffle(len(ws), func(a, b int) { ws[a], ws[b] = ws[b], ws[a] })
		return ws
	}
	g := *f
	g.Freezes = slices.Clone(f.Freezes)
	rng.Shuffle(len(g.Freezes), func(a, b int) { g.Freezes[a], g.Freezes[b] = g.Freezes[b], g.Freezes[a] })
	g.RolloutPolicies = maps.Clone(f.RolloutPolicies)
	for name, p := range g.RolloutPolicies {
		p.Windows = windows(p.Windows)
		p.Waves = slices.Clone(p.Waves)
		for i := range p.Waves {
			p.Waves[i].Windows = windows(p.Waves[i].Windows)
		}
		p.HostWindows = slices.Clone(p.HostWindows)
		for i := range p.HostWindows {
			p.HostWindows[i].Windows = windows(p.HostWindows[i].Windows)
		}
		g.RolloutPolicies[name] = p
	}
	g.Waves = maps.Clone(f.Waves)
	for ch, ws := range g.Waves {
		ws = slices.Clone(ws)
		for i := range ws {
			ws[i].Windows = windows(ws[i].Windows)
		}
		g.Waves[ch] = ws
	}
	return &g
}

func withSortedEdges(o reconciler.Output) reconciler.Output {
	o.Rollouts = slices.Clone(o.Rollouts)
	for i := range o.Rollouts {
		edges := slices.Clone(o.Rollouts[i].Rollout.Edges)
		slices.SortFunc(edges, func(a, b reconciler.Edge) int {
			return strings.Compare(a.Gates+"\x00"+a.Gated, b.Gates+"\x00"+b.Gated)
		})
		o.Rollouts[i].Rollout.Edges = edges
	}
	return o
}

// ---- invariant 5: idempotence ----

func checkIdempotent(_ *rapid.T, c tickCase) []string {
	if again := reconciler.Reconcile(c.next); !decidesNothing(again) {
		return []string{"not idempotent: after Apply, a tick at the same Now decides more:\n" + describeDecisions(again)}
	}
	return nil
}

func decidesNothing(o reconciler.Output) bool {
	return len(o.Actions) == 0 && len(o.Events) == 0 && len(o.Rollouts) == 0 && len(o.Hosts) == 0
}

// ---- invariant 6: legal and consistent transitions ----

func legalHostMove(from, to reconciler.HostState) bool {
	for _, ev := range reconciler.HostEvents {
		if got, err := from.Next(ev); err == nil && got == to {
			return true
		}
	}
	return false
}

func legalRolloutMove(from, to reconciler.RolloutState) bool {
	for _, ev := range reconciler.RolloutEvents {
		if got, err := from.Next(ev); err == nil && got == to {
			return true
		}
	}
	return false
}

// checkTransitions: every transition event is a legal move; per host and
// per rollout the events of the tick chain from the state before the tick
// to the state after it; nothing changes state without an event; dispatch
// and rollback intents match the transitions into Activating and
// RollingBack.
func checkTransitions(_ *rapid.T, c tickCase) []string {
	in, out, next := c.in, c.out, c.next
	var problems []string
	type key struct{ rollout, host string }
	prev := rolloutIndexByID(in)
	prevHost := func(k key) (reconciler.HostState, bool) {
		ri, ok := prev[k.rollout]
		if !ok {
			return reconciler.HostPending, true // a rollout opened in this tick starts with Pending hosts
		}
		for _, h := range in.Rollouts[ri].Hosts {
			if h.Hostname == k.host {
				return h.State, true
			}
		}
		return "", false
	}
	hostCur := map[key]reconciler.HostState{}
	rolloutCur := map[string]reconciler.RolloutState{}
	for _, e := range out.Events {
		switch e.Kind {
		case reconciler.EventHostTransition:
			k := key{e.RolloutID, e.Host}
			from, to := reconciler.HostState(e.From), reconciler.HostState(e.To)
			cur, ok := hostCur[k]
			if !ok {
				if cur, ok = prevHost(k); !ok {
					problems = append(problems, fmt.Sprintf("transition of host %s, which is not in rollout %s", e.Host, e.RolloutID))
					continue
				}
			}
			if cur != from {
				problems = append(problems, fmt.Sprintf("host %s in %s: transition from %s while it was %s", e.Host, e.RolloutID, from, cur))
			}
			if !legalHostMove(from, to) {
				problems = append(problems, fmt.Sprintf("host %s in %s: %s→%s is not a move of the host state machine (%s)", e.Host, e.RolloutID, from, to, e.Reason.Code))
			}
			hostCur[k] = to
		case reconciler.EventRolloutOpened:
			if _, ok := prev[e.RolloutID]; ok {
				problems = append(problems, fmt.Sprintf("rollout %s opened again", e.RolloutID))
			}
			if _, ok := rolloutCur[e.RolloutID]; ok {
				problems = append(problems, fmt.Sprintf("rollout %s opened twice in one tick", e.RolloutID))
			}
			rolloutCur[e.RolloutID] = reconciler.RolloutState(e.To)
		case reconciler.EventRolloutTransition:
			from, to := reconciler.RolloutState(e.From), reconciler.RolloutState(e.To)
			cur, ok := rolloutCur[e.RolloutID]
			if !ok {
				ri, known := prev[e.RolloutID]
				if !known {
					problems = append(problems, fmt.Sprintf("transition of rollout %s, which neither existed nor opened", e.RolloutID))
					continue
				}
				cur = in.Rollouts[ri].State
			}
			if cur != from {
				problems = append(problems, fmt.Sprintf("rollout %s: transition from %s while it was %s", e.RolloutID, from, cur))
			}
			if !legalRolloutMove(from, to) {
				problems = append(problems, fmt.Sprintf("rollout %s: %s→%s is not a move of the rollout state machine (%s)", e.RolloutID, from, to, e.Reason.Code))
			}
			rolloutCur[e.RolloutID] = to
		}
	}
	for _, r := range next.Rollouts {
		want, ok := rolloutCur[r.ID]
		if !ok {
			ri, known := prev[r.ID]
			if !known {
				problems = append(problems, fmt.Sprintf("rollout %s appeared without a rollout_opened event", r.ID))
				continue
			}
			want = in.Rollouts[ri].State
		}
		if r.State != want {
			problems = append(problems, fmt.Sprintf("rollout %s is %s after the tick, but its events lead to %s", r.ID, r.State, want))
		}
		_, existed := prev[r.ID]
		for _, h := range r.Hosts {
			k := key{r.ID, h.Hostname}
			want, ok := hostCur[k]
			if !ok {
				if want, ok = prevHost(k); !ok || !existed {
					want = reconciler.HostPending
				}
			}
			if h.State != want {
				problems = append(problems, fmt.Sprintf("host %s in %s is %s after the tick, but its events lead to %s", h.Hostname, r.ID, h.State, want))
			}
		}
	}
	// Intents and transitions agree.
	index := rolloutIndexByID(next)
	pending := map[key]int{}
	for _, e := range out.Events {
		if e.Kind == reconciler.EventHostTransition && (e.To == string(reconciler.HostActivating) || e.To == string(reconciler.HostRollingBack) ||
			e.To == string(reconciler.HostRebooting)) {
			pending[key{e.RolloutID, e.Host + "/" + e.To}]++
		}
	}
	for _, hi := range out.Actions {
		to := reconciler.HostActivating
		switch hi.Kind {
		case reconciler.ActionRollback:
			to = reconciler.HostRollingBack
		case reconciler.ActionReboot:
			to = reconciler.HostRebooting
		}
		pending[key{hi.RolloutID, hi.Host + "/" + string(to)}]--
		if ri, ok := index[hi.RolloutID]; ok {
			for _, h := range next.Rollouts[ri].Hosts {
				if h.Hostname != hi.Host {
					continue
				}
				want := h.Target
				if hi.Kind == reconciler.ActionRollback {
					want = h.Previous
				}
				if hi.Target != want {
					problems = append(problems, fmt.Sprintf("%s intent for %s in %s targets %s, want %s", hi.Kind, hi.Host, hi.RolloutID, hi.Target, want))
				}
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(pending), func(a, b key) int {
		return strings.Compare(a.rollout+a.host, b.rollout+b.host)
	}) {
		if n := pending[k]; n != 0 {
			problems = append(problems, fmt.Sprintf("rollout %s host/state %s: %+d transition(s) without a matching intent (negative: intents without a transition)", k.rollout, k.host, n))
		}
	}
	return problems
}

// ---- helpers ----

func rolloutIndexByID(in reconciler.Input) map[string]int {
	out := make(map[string]int, len(in.Rollouts))
	for i, r := range in.Rollouts {
		out[r.ID] = i
	}
	return out
}

// describeDecisions lists what a tick decided, for failure messages.
func describeDecisions(o reconciler.Output) string {
	var b strings.Builder
	const limit = 60
	n := 0
	line := func(format string, args ...any) {
		if n++; n <= limit {
			fmt.Fprintf(&b, "  "+format+"\n", args...)
		}
	}
	for _, u := range o.Rollouts {
		line("rollout %s: new=%v %s→%s wave %d/%s (%s)", u.Rollout.ID, u.New, u.From, u.Rollout.State, u.Rollout.Wave, u.Rollout.WavePhase, u.Rollout.Reason.Code)
	}
	for _, hi := range o.Actions {
		line("intent %s %s in %s → %s", hi.Kind, hi.Host, hi.RolloutID, hi.Target)
	}
	for _, e := range o.Events {
		switch e.Kind {
		case reconciler.EventHostTransition:
			line("event %s %s/%s %s→%s (%s: %s)", e.Kind, e.RolloutID, e.Host, e.From, e.To, e.Reason.Code, e.Reason.Message)
		case reconciler.EventHostWaiting:
			line("event %s %s/%s %s (%s: %s)", e.Kind, e.RolloutID, e.Host, e.From, e.Reason.Code, e.Reason.Message)
		default:
			line("event %s %s wave %d %s→%s (%s: %s)", e.Kind, e.RolloutID, e.Wave, e.From, e.To, e.Reason.Code, e.Reason.Message)
		}
	}
	for _, h := range o.Hosts {
		line("host %s/%s %s→%s blocked=%q", h.RolloutID, h.Host.Hostname, h.From, h.Host.State, h.Host.Blocked.Code)
	}
	if n > limit {
		fmt.Fprintf(&b, "  … and %d more\n", n-limit)
	}
	if n == 0 {
		b.WriteString("  (nothing)\n")
	}
	return b.String()
}

// describeRolloutStates summarizes every rollout of a state.
func describeRolloutStates(in reconciler.Input) string {
	var b strings.Builder
	for _, r := range in.Rollouts {
		counts := map[reconciler.HostState]int{}
		blocked := map[string]int{}
		for _, h := range r.Hosts {
			counts[h.State]++
			if h.Blocked.Gate != "" {
				blocked[h.Blocked.Gate]++
			}
		}
		var parts []string
		for _, st := range reconciler.HostStates {
			if counts[st] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", counts[st], st))
			}
		}
		var held []string
		for _, g := range slices.Sorted(maps.Keys(blocked)) {
			held = append(held, fmt.Sprintf("%d by %s", blocked[g], g))
		}
		fmt.Fprintf(&b, "  %s: %s wave %d/%d %s (%s: %s); hosts: %s; held: %s\n", r.ID, r.State, r.Wave, len(r.Waves), r.WavePhase,
			r.Reason.Code, r.Reason.Message, strings.Join(parts, ", "), strings.Join(held, ", "))
	}
	if len(in.Rollouts) == 0 {
		b.WriteString("  (no rollout)\n")
	}
	return b.String()
}
