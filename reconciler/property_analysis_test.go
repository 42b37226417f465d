package reconciler_test

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/nixfleet/nixfleet/analysis"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestPropertyAnalysis: rule 16 under chaos (measurements that succeed,
// fail, come back empty or not a number, queries that fail, measurements
// taken late; hosts that fail, vanish and return; operators who pause,
// resume and roll back; releases pushed mid-analysis):
//
//  1. a wave is promoted (or its rollout converges) only when every
//     analysis of it succeeded, unless the release moved none of its hosts;
//  2. a rollout is never left Active with a failed or inconclusive run of
//     its current wave: onHealthFailure, or a halt, applies in that tick;
//  3. the tick asks for exactly the next measurement of every running run
//     of an Active rollout's current wave, and for nothing else;
//  4. every measurement a run counts is journalled once, in order: a run's
//     Measured grows by the number of analysis_measured events about it;
//  5. a comparison never compares a host with itself nor with a host that
//     runs the release: its canary is hosts of the measured wave that run
//     the release, its baseline hosts of the rollout's later waves still
//     Pending, heard and not on their target, no larger than the canary,
//     each at most MaxComparisonHosts; and its baseline is empty only when
//     no such host is left.
func TestPropertyAnalysis(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		runChaosWith(t, fleetGenOpts{maxHosts: 300, analysis: true, changeControl: rapid.Bool().Draw(t, "changeControl")}, checkAnalysis)
	})
}

func runOf(r *reconciler.Rollout, wave int, name string) *reconciler.AnalysisRun {
	for i := range r.Analyses {
		if r.Analyses[i].Wave == wave && r.Analyses[i].Name == name {
			return &r.Analyses[i]
		}
	}
	return nil
}

func checkAnalysis(_ *rapid.T, c tickCase) []string {
	var problems []string
	prev, next := map[string]*reconciler.Rollout{}, map[string]*reconciler.Rollout{}
	for i := range c.in.Rollouts {
		prev[c.in.Rollouts[i].ID] = &c.in.Rollouts[i]
	}
	for i := range c.next.Rollouts {
		next[c.next.Rollouts[i].ID] = &c.next.Rollouts[i]
	}

	// 1. Promotions.
	for _, e := range c.out.Events {
		promoted := e.Kind == reconciler.EventWavePromoted ||
			(e.Kind == reconciler.EventRolloutTransition && e.From == string(reconciler.RolloutActive) && e.To == string(reconciler.RolloutConverged))
		r := next[e.RolloutID]
		if !promoted || r == nil || len(r.HealthGate.Analysis) == 0 {
			continue
		}
		moved := slices.ContainsFunc(r.Hosts, func(h reconciler.RolloutHost) bool {
			return h.Wave == e.Wave && h.State == reconciler.HostConverged && h.Previous != h.Target
		})
		for _, spec := range r.HealthGate.Analysis {
			run := runOf(r, e.Wave, spec.Name)
			if run == nil && !moved {
				continue
			}
			if run == nil || run.Outcome != analysis.Successful {
				problems = append(problems, fmt.Sprintf("%s: %s of wave %d while its analysis %s is %+v", r.ID, e.Kind, e.Wave, spec.Name, run))
			}
		}
	}

	// 2. Failed and inconclusive runs stop the rollout.
	for _, r := range next {
		if r.State != reconciler.RolloutActive {
			continue
		}
		for _, run := range r.Analyses {
			if run.Wave == r.Wave && (run.Outcome == analysis.Failed || run.Outcome == analysis.Inconclusive) {
				problems = append(problems, fmt.Sprintf("%s is Active with analysis %s of wave %d %s", r.ID, run.Name, run.Wave, run.Outcome))
			}
		}
	}

	// 3. Measure requests.
	want := map[string]bool{}
	for _, r := range next {
		if r.State != reconciler.RolloutActive {
			continue
		}
		for _, run := range r.Analyses {
			if run.Wave == r.Wave && run.Outcome == analysis.Running {
				want[fmt.Sprintf("%s/%d/%s#%d", r.ID, run.Wave, run.Name, run.Measured+1)] = true
			}
		}
	}
	for _, m := range c.out.Measure {
		key := fmt.Sprintf("%s/%d/%s#%d", m.RolloutID, m.Wave, m.Analysis, m.Seq)
		if !want[key] {
			problems = append(problems, "a measurement nothing runs for, or not the next one: "+key)
		}
		delete(want, key)
	}
	for key := range want {
		problems = append(problems, "no measurement asked for the running analysis "+key)
	}

	// 5. A comparison's groups.
	for _, m := range c.out.Measure {
		r := next[m.RolloutID]
		if r == nil || (len(m.Canary) == 0 && len(m.Baseline) == 0) {
			continue
		}
		problems = append(problems, checkGroups(c, r, m)...)
	}

	// 4. Every counted measurement journalled once.
	events := map[string]int{}
	for _, e := range c.out.Events {
		if e.Kind == reconciler.EventAnalysisMeasured {
			events[fmt.Sprintf("%s/%d", e.RolloutID, e.Wave)]++
		}
	}
	counted := map[string]int{}
	for id, r := range next {
		for _, run := range r.Analyses {
			before := 0
			if p := prev[id]; p != nil {
				if pr := runOf(p, run.Wave, run.Name); pr != nil {
					before = pr.Measured
				}
			}
			if run.Measured < before {
				problems = append(problems, fmt.Sprintf("%s: analysis %s of wave %d counted %d, then %d", id, run.Name, run.Wave, before, run.Measured))
			}
			counted[fmt.Sprintf("%s/%d", id, run.Wave)] += run.Measured - before
		}
	}
	for key, n := range counted {
		if events[key] != n {
			problems = append(problems, fmt.Sprintf("%s: %d measurement(s) counted, %d journalled", key, n, events[key]))
		}
		delete(events, key)
	}
	for key, n := range events {
		problems = append(problems, fmt.Sprintf("%s: %d measurement(s) journalled, none counted", key, n))
	}
	return problems
}

// checkGroups checks a comparison's groups (invariant 5) against the
// rollout as the tick left it.
func checkGroups(c tickCase, r *reconciler.Rollout, m reconciler.MeasureRequest) []string {
	var problems []string
	hosts := map[string]reconciler.RolloutHost{}
	for _, h := range r.Hosts {
		hosts[h.Hostname] = h
	}
	key := fmt.Sprintf("%s/%d/%s#%d", m.RolloutID, m.Wave, m.Analysis, m.Seq)
	if len(m.Canary) > reconciler.MaxComparisonHosts || len(m.Baseline) > len(m.Canary) {
		problems = append(problems, fmt.Sprintf("%s: %d canary and %d baseline hosts", key, len(m.Canary), len(m.Baseline)))
	}
	for _, n := range m.Canary {
		h, ok := hosts[n]
		live := h.State == reconciler.HostSoaking || h.State == reconciler.HostFailed || (h.State == reconciler.HostConverged && h.Previous != h.Target)
		if !ok || h.Wave != m.Wave || !live || slices.Contains(m.Baseline, n) {
			problems = append(problems, fmt.Sprintf("%s: canary host %s is not a host of the wave that runs the release: %+v", key, n, h))
		}
	}
	var tags []string
	for _, a := range r.HealthGate.Analysis {
		if a.Name == m.Analysis && a.Compare != nil {
			tags = a.Compare.BaselineTags
		}
	}
	var fleet *proto.FleetResolved
	for _, ch := range c.in.Channels {
		if ch.Name == r.Channel {
			fleet = ch.Fleet
		}
	}
	eligible := func(h reconciler.RolloutHost) bool {
		o := c.in.Hosts[h.Hostname]
		if len(tags) > 0 && (fleet == nil || !everyTag(fleet.Hosts[h.Hostname].Tags, tags)) {
			return false
		}
		return h.Wave > m.Wave && h.State == reconciler.HostPending && o.Current != h.Target && !c.in.Tunables.Late(o.LastSeen, c.in.Now)
	}
	for _, n := range m.Baseline {
		if h, ok := hosts[n]; !ok || !eligible(h) {
			problems = append(problems, fmt.Sprintf("%s: baseline host %s does not serve the previous release in a later wave: %+v", key, n, h))
		}
	}
	if len(m.Baseline) == 0 && len(m.Canary) > 0 && slices.ContainsFunc(r.Hosts, eligible) {
		problems = append(problems, fmt.Sprintf("%s: no baseline though hosts of later waves serve the previous release", key))
	}
	return problems
}

// everyTag reports whether have holds every tag of want.
func everyTag(have, want []string) bool {
	for _, tag := range want {
		if !slices.Contains(have, tag) {
			return false
		}
	}
	return true
}
