package reconciler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/analysis"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
)

// Rule 16 (rfcs/0003): canary analysis. The health gate's analyses judge
// a wave by its services while it soaks. A run of each analysis starts at
// the tick that sees one of the wave's hosts run the release; the control
// plane takes the measurements the tick asks for (Output.Measure), and
// each tick counts those it has not counted, in order. A run that
// counts more failed measurements than its failureLimit fails, and
// onHealthFailure applies; one with more inconclusive measurements than
// its inconclusiveLimit halts the rollout for an operator; one that counts
// count measurements first succeeds. A wave is promoted only when every
// analysis of it succeeded. Only an Active rollout's current wave is
// measured and judged.

// analyze starts, counts and ends the analysis runs of an Active
// rollout's current wave, and applies what a run that ended asks.
func (t *tick) analyze(w *work) {
	specs := w.r.HealthGate.Analysis
	wave := w.r.Wave
	if w.r.State != RolloutActive || len(specs) == 0 || wave < 0 || wave >= len(w.waves) {
		return
	}
	if !w.hasRuns(wave) && !w.waveLive(wave) {
		return
	}
	for _, spec := range specs {
		i := w.run(wave, spec.Name, t.now)
		t.count(w, i, spec)
	}
	var failed, inconclusive []string
	for _, spec := range specs {
		run := w.r.Analyses[w.runIndex(wave, spec.Name)]
		switch run.Outcome {
		case analysis.Failed:
			failed = append(failed, fmt.Sprintf("%s (%s)", spec.Name, run.Last.Message))
		case analysis.Inconclusive:
			inconclusive = append(inconclusive, fmt.Sprintf("%s (%s)", spec.Name, run.Last.Message))
		}
	}
	switch {
	case len(failed) > 0:
		reason := Reason{Code: codes.AnalysisFailed, Message: fmt.Sprintf("%s failed analysis %s; onHealthFailure is %s",
			w.waveLabel(wave), strings.Join(failed, "; "), cmp.Or(w.r.OnHealthFailure, proto.OnHealthFailureHalt))}
		if w.r.OnHealthFailure == proto.OnHealthFailureRollbackAndHalt {
			t.setRollout(w, EvRollback, reason)
		} else {
			t.setRollout(w, EvHealthHalt, reason)
		}
	case len(inconclusive) > 0:
		t.setRollout(w, EvHealthHalt, Reason{Code: codes.AnalysisInconclusive,
			Message: fmt.Sprintf("%s's analysis %s was inconclusive; an operator decides: resume (measures again) or roll back",
				w.waveLabel(wave), strings.Join(inconclusive, "; "))})
	}
}

// waveLive reports whether a host of the wave runs, or ran, the release:
// it confirmed its switch (Soaking), converged on a new closure, or failed
// or was rolled back by its agent after it confirmed.
func (w *work) waveLive(wave int) bool {
	return slices.ContainsFunc(w.waves[wave], w.hostLive)
}

// hostLive reports whether a host runs, or ran, the release (waveLive).
func (w *work) hostLive(i int) bool {
	h := w.r.Hosts[i]
	switch {
	case h.State == HostSoaking:
		return true
	case h.State == HostConverged && h.Previous != h.Target:
		return true
	case h.State == HostFailed && (h.Reason.Code == codes.Unhealthy || h.Reason.Code == codes.OfflineWhileSoaking):
		return true
	}
	return false
}

func (w *work) hasRuns(wave int) bool {
	return slices.ContainsFunc(w.r.Analyses, func(r AnalysisRun) bool { return r.Wave == wave })
}

func (w *work) runIndex(wave int, name string) int {
	return slices.IndexFunc(w.r.Analyses, func(r AnalysisRun) bool { return r.Wave == wave && r.Name == name })
}

// run returns the index of the wave's run of an analysis, starting it at
// now when there is none. The rollout's runs are copied before the first
// change: the input's are shared with the caller.
func (w *work) run(wave int, name string, now time.Time) int {
	if i := w.runIndex(wave, name); i >= 0 {
		return i
	}
	w.ownRuns()
	w.r.Analyses = append(w.r.Analyses, AnalysisRun{Wave: wave, Name: name, Outcome: analysis.Running, StartedAt: now})
	w.changed = true
	return len(w.r.Analyses) - 1
}

// ownRuns copies the rollout's runs once per tick, before they change.
func (w *work) ownRuns() {
	if !w.runsOwned {
		w.r.Analyses = slices.Clone(w.r.Analyses)
		w.runsOwned = true
	}
}

// count counts the measurements of a running run that follow the last
// one it counted, in order, up to now, and ends the run when its limits
// or its count are reached. Each measurement counted is journalled with
// its value and query.
func (t *tick) count(w *work, i int, spec proto.Analysis) {
	if w.r.Analyses[i].Outcome != analysis.Running {
		return
	}
	ms := t.measurements[runKey{w.r.ID, w.r.Analyses[i].Wave, spec.Name}]
	for _, m := range ms {
		run := w.r.Analyses[i]
		if m.Seq <= run.Measured {
			continue
		}
		if m.Seq != run.Measured+1 || m.At.After(t.now) {
			if m.Seq == run.Measured+1 {
				t.wake(m.At)
			}
			return // taken after the tick read its clock, or a gap: the next tick
		}
		outcome, msg := JudgeMeasurement(spec, m)
		w.ownRuns()
		run.Measured, run.LastAt = m.Seq, m.At
		switch outcome {
		case analysis.Successful:
			run.Successful++
		case analysis.Failed:
			run.Failed++
		default:
			run.Inconclusive++
		}
		n := run.Successful + run.Failed + run.Inconclusive
		code := map[analysis.Outcome]string{analysis.Successful: codes.MeasurementSuccessful,
			analysis.Failed: codes.MeasurementFailed, analysis.Inconclusive: codes.MeasurementInconclusive}[outcome]
		if why, ok := sourceUnknown(m.Error); ok {
			code, msg = codes.AnalysisSourceUnknown, "no result: "+why
		}
		run.Last = Reason{Code: code, Message: msg}
		t.emit(Event{Kind: EventAnalysisMeasured, RolloutID: w.r.ID, Channel: w.r.Channel, Wave: run.Wave,
			Reason: Reason{Code: code, Message: fmt.Sprintf("analysis %s of %s, measurement %d of %d: %s: %s; query: %s",
				spec.Name, w.waveLabel(run.Wave), n, spec.Count, outcome, msg, shownQuery(m.Query))}})
		var end analysis.Outcome
		switch {
		case run.Failed > spec.FailureLimit:
			end = analysis.Failed
		case run.Inconclusive > spec.InconclusiveLimit:
			end = analysis.Inconclusive
		case n >= spec.Count:
			end = analysis.Successful
		}
		if end != "" {
			run.Outcome, run.EndedAt = end, t.now
			code := map[analysis.Outcome]string{analysis.Successful: codes.AnalysisSuccessful,
				analysis.Failed: codes.AnalysisFailed, analysis.Inconclusive: codes.AnalysisInconclusive}[end]
			t.emit(Event{Kind: EventAnalysisCompleted, RolloutID: w.r.ID, Channel: w.r.Channel, Wave: run.Wave,
				Reason: Reason{Code: code, Message: fmt.Sprintf("analysis %s of %s ended %s: %s", spec.Name, w.waveLabel(run.Wave), end, runCounts(run, spec))}})
		}
		w.r.Analyses[i] = run
		w.changed, t.moved = true, true
		if end != "" {
			return
		}
	}
}

// JudgeMeasurement says what one measurement of an analysis means: a
// comparison's by the test of its two groups, any other by the analysis's
// conditions — also a comparison's taken when no baseline was left.
func JudgeMeasurement(spec proto.Analysis, m Measurement) (analysis.Outcome, string) {
	if spec.Compare != nil && m.Compared != nil {
		v := analysis.Compare(*spec.Compare, m.Compared.Canary, m.Compared.Baseline)
		return v.Outcome, v.Message
	}
	outcome, msg := analysis.Judge(spec, m.Samples, m.Error)
	if spec.Compare != nil && m.Error == "" {
		msg = "no baseline left (every other host of the rollout runs the release or cannot be heard), so its conditions judge the wave: " + msg
	}
	return outcome, msg
}

// SourceUnknownError is the Error of a measurement the control plane did
// not take because its analysis names a Prometheus source it does not
// have: the code analysis_source_unknown, ": " and why. The tick journals
// such a measurement as inconclusive with that code (rule 16).
func SourceUnknownError(why string) string { return codes.AnalysisSourceUnknown + ": " + why }

// sourceUnknown returns why of a SourceUnknownError.
func sourceUnknown(err string) (why string, ok bool) {
	return strings.CutPrefix(err, codes.AnalysisSourceUnknown+": ")
}

// runCounts says how a run's measurements came out, against its limits.
func runCounts(run AnalysisRun, spec proto.Analysis) string {
	return fmt.Sprintf("%d successful, %d failed (limit %d), %d inconclusive (limit %d) of %d measurement(s)",
		run.Successful, run.Failed, spec.FailureLimit, run.Inconclusive, spec.InconclusiveLimit, spec.Count)
}

// shownQuery cuts a long query for a message.
func shownQuery(q string) string {
	const shown = 300
	if len(q) <= shown {
		return q
	}
	return q[:shown] + fmt.Sprintf("… (%d bytes)", len(q))
}

// analysisHolds reports whether a wave's analyses keep it from being
// promoted: every analysis must have succeeded once the wave ran the
// release (a wave the release moved nowhere has nothing to analyse).
func (w *work) analysisHolds(wave int) bool {
	specs := w.r.HealthGate.Analysis
	if len(specs) == 0 || (!w.hasRuns(wave) && !w.waveLive(wave)) {
		return false
	}
	for _, spec := range specs {
		if i := w.runIndex(wave, spec.Name); i < 0 || w.r.Analyses[i].Outcome != analysis.Successful {
			return true
		}
	}
	return false
}

// runSince is when a run's last measurement was taken, or when it began.
func runSince(run AnalysisRun) time.Time {
	if run.LastAt.After(run.StartedAt) {
		return run.LastAt
	}
	return run.StartedAt
}

// forgiveAnalyses restarts the current wave's runs that failed or were
// inconclusive (an operator's resume): the measurements they counted
// count no more, and measuring goes on. It returns their names.
func (w *work) forgiveAnalyses() []string {
	var names []string
	for i, run := range w.r.Analyses {
		if run.Wave != w.r.Wave || (run.Outcome != analysis.Failed && run.Outcome != analysis.Inconclusive) {
			continue
		}
		w.ownRuns()
		w.r.Analyses[i] = AnalysisRun{Wave: run.Wave, Name: run.Name, Outcome: analysis.Running, StartedAt: run.StartedAt,
			Measured: run.Measured, Forgiven: run.Measured, LastAt: run.LastAt, Last: run.Last}
		names = append(names, run.Name)
	}
	return names
}

// measureRequests lists the measurements due: the next one of every
// running analysis of an Active rollout's current wave, one interval
// after the last (or after the run began).
func (t *tick) measureRequests() []MeasureRequest {
	var out []MeasureRequest
	for _, w := range t.rollouts {
		if w.r.State != RolloutActive {
			continue
		}
		for _, spec := range w.r.HealthGate.Analysis {
			i := w.runIndex(w.r.Wave, spec.Name)
			if i < 0 || w.r.Analyses[i].Outcome != analysis.Running {
				continue
			}
			run := w.r.Analyses[i]
			every, err := analysis.ParseInterval(spec.Interval)
			if err != nil {
				every = time.Minute // validation refuses such a policy; an old artifact still measures
			}
			req := MeasureRequest{RolloutID: w.r.ID, Wave: run.Wave, Analysis: run.Name, Seq: run.Measured + 1,
				At: runSince(run).Add(every)}
			if spec.Compare != nil {
				req.Canary, req.Baseline = t.comparisonGroups(w, run.Wave, spec.Compare.BaselineTags)
				// A comparison's window holds only the release's values:
				// its first measurement waits for a window to pass.
				if window, err := analysis.ParseInterval(spec.Compare.Window); err == nil && req.At.Before(run.StartedAt.Add(window)) {
					req.At = run.StartedAt.Add(window)
				}
			}
			out = append(out, req)
		}
	}
	return out
}

// comparisonGroups chooses the groups a comparison of a wave measures
// (rule 16). The canary is the wave's hosts that run the release (as
// waveLive counts them). The baseline is as many of the rollout's hosts
// of later waves, where possible: Pending, not late, and not already
// running their target, and carrying every tag of tags (by the
// channel's fleet) — hosts of the same channel serving on the previous
// release at the same moment. Each group is picked from its
// candidates by a stride, so that the choice is deterministic, spread
// over the names rather than the first of them, and costs the wave's
// hosts plus about twice the baseline's size; at most MaxComparisonHosts
// each.
func (t *tick) comparisonGroups(w *work, wave int, tags []string) (canary, baseline []string) {
	var live []int
	for _, i := range w.waves[wave] {
		if w.hostLive(i) {
			live = append(live, i)
		}
	}
	// The later waves' hosts, numbered across the waves without copying
	// them (a big rollout's run to 100,000).
	later := 0
	for j := wave + 1; j < len(w.waves); j++ {
		later += len(w.waves[j])
	}
	laterHost := func(k int) *RolloutHost {
		j := wave + 1
		for ; k >= len(w.waves[j]); j++ {
			k -= len(w.waves[j])
		}
		return &w.r.Hosts[w.waves[j][k]]
	}
	fleet := t.channels[w.r.Channel]
	eligible := func(k int) bool {
		h := laterHost(k)
		o := t.obs[h.Hostname]
		return h.State == HostPending && o.Current != h.Target && (o.AlwaysHeard || !t.in.Tunables.Late(o.LastSeen, t.now)) &&
			(len(tags) == 0 || fleet != nil && HasTags(fleet.Fleet, h.Hostname, tags))
	}
	return pickGroups(len(live), func(k int) string { return w.r.Hosts[live[k]].Hostname },
		later, func(k int) string { return laterHost(k).Hostname }, eligible)
}

// pickGroups picks a comparison's groups by a stride (spread): up to
// MaxComparisonHosts of the canary's candidates, then as many of the
// baseline's as eligible accepts; each sorted by name.
func pickGroups(canaries int, canaryName func(k int) string, candidates int, candidateName func(k int) string,
	eligible func(k int) bool) (canary, baseline []string) {
	for _, k := range spread(canaries, MaxComparisonHosts, func(int) bool { return true }) {
		canary = append(canary, canaryName(k))
	}
	for _, k := range spread(candidates, len(canary), eligible) {
		baseline = append(baseline, candidateName(k))
	}
	slices.Sort(canary)
	slices.Sort(baseline)
	return canary, baseline
}

// HasTags reports whether a host of a fleet carries every one of tags (a
// host the fleet lacks carries none).
func HasTags(f *proto.FleetResolved, host string, tags []string) bool {
	if f == nil {
		return false
	}
	h, ok := f.Hosts[host]
	if !ok {
		return false
	}
	for _, tag := range tags {
		if !slices.Contains(h.Tags, tag) {
			return false
		}
	}
	return true
}

// TrialGroups are the groups an ad hoc measurement of a comparison takes
// for a wave of a rollout (nixfleet analysis run), before any of its
// hosts runs a release: the wave's hosts as the canary, and as many of
// the later waves' hosts that eligible accepts as the baseline, each picked
// by a stride as a tick picks them; at most MaxComparisonHosts each.
func TrialGroups(r *Rollout, wave int, eligible func(host string) bool) (canary, baseline []string) {
	var in, later []string
	for _, h := range r.Hosts {
		switch {
		case h.Wave == wave:
			in = append(in, h.Hostname)
		case h.Wave > wave:
			later = append(later, h.Hostname)
		}
	}
	at := func(names []string) func(int) string { return func(k int) string { return names[k] } }
	return pickGroups(len(in), at(in), len(later), at(later), func(k int) bool { return eligible(later[k]) })
}

// spread picks up to n of the positions 0..total-1 that ok accepts: every
// stride-th first (a stride that visits about twice n), then the
// positions between, in order, until it has n.
func spread(total, n int, ok func(int) bool) []int {
	if n <= 0 || total == 0 {
		return nil
	}
	stride := max(1, total/(2*n))
	var out []int
	for off := 0; off < stride && len(out) < n; off++ {
		for k := off; k < total && len(out) < n; k += stride {
			if ok(k) {
				out = append(out, k)
			}
		}
	}
	return out
}

// runKey names a run's measurements.
type runKey struct {
	rollout string
	wave    int
	name    string
}

// indexMeasurements groups the input's measurements by run, in Seq
// order (the earliest taken first among duplicates).
func indexMeasurements(ms []Measurement) map[runKey][]Measurement {
	out := map[runKey][]Measurement{}
	for _, m := range ms {
		k := runKey{m.RolloutID, m.Wave, m.Analysis}
		out[k] = append(out[k], m)
	}
	for _, l := range out {
		slices.SortFunc(l, func(a, b Measurement) int { return cmp.Or(cmp.Compare(a.Seq, b.Seq), a.At.Compare(b.At)) })
	}
	return out
}

// AnalysisQuery is the query a measurement of a rollout's wave sends: the
// analysis's with its placeholders filled in for the wave's hosts.
func AnalysisQuery(r *Rollout, wave int, spec proto.Analysis) string {
	var hosts []string
	for _, h := range r.Hosts {
		if h.Wave == wave {
			hosts = append(hosts, h.Hostname)
		}
	}
	return analysis.Render(spec.Query, analysis.Vars{Hosts: hosts, RolloutID: r.ID, Channel: r.Channel, Wave: wave})
}

// GroupQuery is the query a comparison sends for one of its groups: the
// analysis's with {{ .HostsRegex }} standing for the group's hosts.
func GroupQuery(r *Rollout, wave int, spec proto.Analysis, hosts []string) string {
	return analysis.Render(spec.Query, analysis.Vars{Hosts: hosts, RolloutID: r.ID, Channel: r.Channel, Wave: wave})
}

// analysisPending reports whether a wave has an analysis that has not
// succeeded (yet).
func analysisPending(r *Rollout, wave int) bool {
	for _, spec := range r.HealthGate.Analysis {
		i := slices.IndexFunc(r.Analyses, func(a AnalysisRun) bool { return a.Wave == wave && a.Name == spec.Name })
		if i < 0 || r.Analyses[i].Outcome != analysis.Successful {
			return true
		}
	}
	return false
}

// Stopped is how people read a run recorded as running on a rollout that
// is not Active: nothing measures it (only an Active rollout's current
// wave is analysed, and a wave is promoted only when its runs succeeded).
const Stopped = "stopped"

// ShownOutcome is an analysis run's outcome as people read it: Stopped
// for a run still recorded as running on a rollout that is not Active;
// the API keeps the record.
func ShownOutcome(outcome, rolloutState string) string {
	if outcome == string(analysis.Running) && rolloutState != string(RolloutActive) {
		return Stopped
	}
	return outcome
}

// AnalysisSummary says where the analyses of a rollout's wave stand, for
// people ("error-rate running, 2 of 5 measurements (last: 0.01 meets
// result < 0.05)"); empty when the wave has none.
func AnalysisSummary(r *Rollout, wave int) string {
	var parts []string
	for _, spec := range r.HealthGate.Analysis {
		i := slices.IndexFunc(r.Analyses, func(a AnalysisRun) bool { return a.Wave == wave && a.Name == spec.Name })
		if i < 0 {
			parts = append(parts, spec.Name+" not started (it starts when a host of the wave runs the release)")
			continue
		}
		run := r.Analyses[i]
		s := fmt.Sprintf("%s %s, %d of %d measurement(s)", spec.Name, ShownOutcome(string(run.Outcome), string(r.State)), run.Successful+run.Failed+run.Inconclusive, spec.Count)
		if run.Last.Message != "" {
			s += " (last: " + run.Last.Message + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
