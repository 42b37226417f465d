package reconciler_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/analysis"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// The golden cases of canary analysis (rfcs/0003 rule 16). The canary a
// of three soaks for 5 minutes; its wave's analysis error-rate measures
// every minute, three times, and succeeds below 5%.
func init() { scenarios = append(scenarios, analysisScenarios...) }

// errorRate is the analysis of the cases; edit changes it.
func errorRate(edit ...func(*proto.Analysis)) proto.Analysis {
	a := proto.Analysis{Name: "error-rate", Query: `sum(rate(http_errors_total{host=~"{{ .HostsRegex }}"}[1m])) / sum(rate(http_requests_total{host=~"{{ .HostsRegex }}"}[1m]))`,
		SuccessCondition: "result < 0.05", Interval: "1m", Count: 3}
	for _, e := range edit {
		e(&a)
	}
	return a
}

// analyzed is three with the analyses on its policy, and onHealthFailure.
func analyzed(s *scenario, onFailure string, as ...proto.Analysis) *fleetkit.Builder {
	return three(s).Policy("stable", func(p *proto.RolloutPolicy) {
		p.HealthGate.Analysis, p.OnHealthFailure = as, onFailure
	})
}

// canarySoaking: the canary a of analyzed confirmed a minute ago; the run
// of wave 0 started then.
func canarySoaking(s *scenario, onFailure string, as ...proto.Analysis) {
	s.release(analyzed(s, onFailure, as...).Build(), fleetkit.Commit(1)).online("a", "b", "c").tick().advance(time.Minute)
	s.confirm(id1, "a").tick().advance(time.Minute)
}

// measure records a measurement of a run at the current time: a value,
// or no result ("" value) with an error.
func (s *scenario) measure(rollout string, wave int, name string, seq int, value, queryErr string) *scenario {
	m := rc.Measurement{RolloutID: rollout, Wave: wave, Analysis: name, Seq: seq, At: s.in.Now, Error: queryErr,
		Query: `sum(rate(http_errors_total{host=~"a"}[1m])) / sum(rate(http_requests_total{host=~"a"}[1m]))`}
	if value != "" {
		m.Samples = []proto.MetricSample{{Value: value}}
	}
	s.in.Measurements = append(s.in.Measurements, m)
	return s
}

// measureEach records successive values of the wave-0 run of error-rate,
// a minute apart, ticking after each.
func (s *scenario) measureEach(from int, values ...string) *scenario {
	for i, v := range values {
		s.measure(id1, 0, "error-rate", from+i, v, "").tick().advance(time.Minute)
	}
	return s
}

// wantRun wants the run of a wave's analysis in the tick's rollout
// updates with an outcome.
func wantRun(wave int, name string, outcome analysis.Outcome) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		for _, u := range out.Rollouts {
			for _, r := range u.Rollout.Analyses {
				if r.Wave == wave && r.Name == name {
					if r.Outcome != outcome {
						t.Fatalf("run %s of wave %d is %s, want %s: %+v", name, wave, r.Outcome, outcome, r)
					}
					return
				}
			}
		}
		t.Fatalf("no run %s of wave %d in the rollout updates:\n%s", name, wave, mustJSON(t, out.Rollouts))
	}
}

// wantMeasure wants exactly these measure requests, as "rollout/wave/name#seq@time".
func wantMeasure(want ...string) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		var got []string
		for _, m := range out.Measure {
			got = append(got, fmt.Sprintf("%s/%d/%s#%d@%s", m.RolloutID, m.Wave, m.Analysis, m.Seq, m.At.UTC().Format("15:04:05")))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("measure requests %q, want %q", got, want)
		}
	}
}

// wantEventSaying wants an event of a kind whose message holds words.
func wantEventSaying(kind, code, words string) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		if !slices.ContainsFunc(out.Events, func(e rc.Event) bool {
			return e.Kind == kind && e.Reason.Code == code && strings.Contains(e.Reason.Message, words)
		}) {
			t.Fatalf("no %s event with code %s saying %q in:\n%s", kind, code, words, mustJSON(t, out.Events))
		}
	}
}

var analysisScenarios = []goldenCase{
	{
		name: "rule16-analysis-starts-when-the-canary-runs-the-release",
		desc: "rule 16: the canary confirmed its switch: the wave's analysis starts, and its first measurement is due an interval later",
		build: func(s *scenario) {
			s.release(analyzed(s, proto.OnHealthFailureHalt, errorRate()).Build(), fleetkit.Commit(1)).online("a", "b", "c").tick().advance(time.Minute)
			s.confirm(id1, "a")
		},
		check: all(wantRun(0, "error-rate", analysis.Running), wantMeasure(id1+"/0/error-rate#1@12:02:00")),
	},
	{
		name: "rule16-no-analysis-before-a-host-runs-the-release",
		desc: "rule 16: the canary is dispatched but has not confirmed: nothing is measured yet",
		build: func(s *scenario) {
			s.release(analyzed(s, proto.OnHealthFailureHalt, errorRate()).Build(), fleetkit.Commit(1)).online("a", "b", "c")
		},
		check: all(wantIntents("a"), wantMeasure()),
	},
	{
		name: "rule16-measurement-counted-and-journalled",
		desc: "rule 16: the first measurement, 1.2%, meets result < 0.05: it is journalled with its value and query, and the next is due a minute later",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorRate())
			s.measure(id1, 0, "error-rate", 1, "0.012", "")
		},
		check: all(wantEventSaying(rc.EventAnalysisMeasured, codes.MeasurementSuccessful, "measurement 1 of 3: successful: 0.012 meets result < 0.05; query: sum(rate(http_errors_total"),
			wantMeasure(id1+"/0/error-rate#2@12:03:00")),
	},
	{
		name: "rule16-wave-waits-for-its-analysis",
		desc: "rule 16: the canary soaked and converged, but its wave's analysis has 2 of 3 measurements: wave 1 does not start",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorRate())
			s.measureEach(1, "0.01", "0.02").advance(3 * time.Minute)
		},
		check: all(wantIntents(), noEvent(rc.EventWavePromoted), wantEvent(rc.EventHostTransition, "a", string(rc.HostConverged), codes.Soaked),
			wantMeasure(id1+"/0/error-rate#3@12:04:00")),
	},
	{
		name: "rule16-successful-analysis-promotes-the-wave",
		desc: "rule 16: the third measurement meets the condition: the analysis is successful, wave 0 is promoted and wave 1 dispatched",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorRate())
			s.measureEach(1, "0.01", "0.02").advance(3 * time.Minute).tick()
			s.measure(id1, 0, "error-rate", 3, "0.03", "")
		},
		check: all(wantEvent(rc.EventAnalysisCompleted, "", "", codes.AnalysisSuccessful), wantEvent(rc.EventWavePromoted, "", "", codes.WavePromoted),
			wantIntents("b", "c"), wantMeasure()),
	},
	{
		name: "rule16-failed-analysis-rolls-back",
		desc: "rule 16: a measurement of 20% fails the analysis (failureLimit 0): onHealthFailure rollback-and-halt reverts the rollout and rolls the canary back",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureRollbackAndHalt, errorRate())
			s.measureEach(1, "0.01")
			s.measure(id1, 0, "error-rate", 2, "0.2", "")
		},
		check: all(wantEvent(rc.EventAnalysisCompleted, "", "", codes.AnalysisFailed),
			wantEvent(rc.EventRolloutTransition, "", string(rc.RolloutReverting), codes.AnalysisFailed), wantIntents("a")),
	},
	{
		name: "rule16-failed-analysis-halts",
		desc: "rule 16: with onHealthFailure halt, a failed analysis halts the rollout; the canary stays",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorRate())
			s.measure(id1, 0, "error-rate", 1, "0.5", "")
		},
		check: all(wantEvent(rc.EventRolloutTransition, "", string(rc.RolloutHalted), codes.AnalysisFailed), wantIntents(), wantMeasure()),
	},
	{
		name: "rule16-failure-limit-tolerates-a-failure",
		desc: "rule 16: failureLimit 1 tolerates one failed measurement: the run goes on",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorRate(func(a *proto.Analysis) { a.FailureLimit = 1 }))
			s.measure(id1, 0, "error-rate", 1, "0.5", "")
		},
		check: all(wantEvent(rc.EventAnalysisMeasured, "", "", codes.MeasurementFailed), noEvent(rc.EventAnalysisCompleted),
			noEvent(rc.EventRolloutTransition), wantMeasure(id1+"/0/error-rate#2@12:03:00")),
	},
	{
		name: "rule16-unreachable-prometheus-is-inconclusive",
		desc: "rule 16: the control plane could not reach Prometheus: the measurement is inconclusive, past inconclusiveLimit 0, and the rollout halts for an operator",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureRollbackAndHalt, errorRate())
			s.measure(id1, 0, "error-rate", 1, "", "Post \"http://127.0.0.1:9090/api/v1/query\": connection refused")
		},
		check: all(wantEvent(rc.EventAnalysisCompleted, "", "", codes.AnalysisInconclusive),
			wantEventSaying(rc.EventRolloutTransition, codes.AnalysisInconclusive, "resume (measures again) or roll back"), wantIntents()),
	},
	{
		name: "rule16-unknown-source-is-inconclusive",
		desc: "rule 16: the analysis names a Prometheus source the control plane does not have: the measurement is inconclusive with analysis_source_unknown, past inconclusiveLimit 0, and the rollout halts for an operator",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureRollbackAndHalt, errorRate(func(a *proto.Analysis) { a.Source = "team-a" }))
			s.measure(id1, 0, "error-rate", 1, "", rc.SourceUnknownError(`the control plane has no Prometheus source "team-a"`))
		},
		check: all(wantEventSaying(rc.EventAnalysisMeasured, codes.AnalysisSourceUnknown, `inconclusive: no result: the control plane has no Prometheus source "team-a"`),
			wantEvent(rc.EventAnalysisCompleted, "", "", codes.AnalysisInconclusive),
			wantEventSaying(rc.EventRolloutTransition, codes.AnalysisInconclusive, "resume (measures again) or roll back"), wantIntents()),
	},
	{
		name: "rule16-no-data-is-inconclusive",
		desc: "rule 16: the query returned no series: inconclusive, within inconclusiveLimit 1; the run goes on",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorRate(func(a *proto.Analysis) { a.InconclusiveLimit = 1 }))
			s.measure(id1, 0, "error-rate", 1, "", "")
		},
		check: all(wantEventSaying(rc.EventAnalysisMeasured, codes.MeasurementInconclusive, "no data"), noEvent(rc.EventRolloutTransition)),
	},
	{
		name: "rule16-neither-condition-is-inconclusive",
		desc: "rule 16: with failureCondition result > 0.1, 7% meets neither condition: inconclusive, and the rollout halts",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorRate(func(a *proto.Analysis) { a.FailureCondition = "result > 0.1" }))
			s.measure(id1, 0, "error-rate", 1, "0.07", "")
		},
		check: all(wantEventSaying(rc.EventAnalysisMeasured, codes.MeasurementInconclusive, "meets neither"),
			wantEvent(rc.EventRolloutTransition, "", string(rc.RolloutHalted), codes.AnalysisInconclusive)),
	},
	{
		name: "rule16-resume-measures-again",
		desc: "rule 16: after an inconclusive halt an operator resumes: the inconclusive measurement is forgiven and the run measures again at once",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorRate())
			s.measure(id1, 0, "error-rate", 1, "", "connection refused").tick().advance(10 * time.Minute)
			s.intent("r1", id1, rc.IntentResume, "alice")
		},
		check: all(wantEventSaying(rc.EventRolloutTransition, codes.OperatorResume, "analysis error-rate measures again"),
			wantRun(0, "error-rate", analysis.Running), wantMeasure(id1+"/0/error-rate#2@12:03:00")),
	},
	{
		name: "rule16-measurement-after-now-waits",
		desc: "rule 16: a measurement taken after the tick read its clock is left for the next tick",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorRate())
			s.measure(id1, 0, "error-rate", 1, "0.9", "")
			s.in.Measurements[0].At = s.in.Now.Add(time.Second)
		},
		check: all(noEvent(rc.EventAnalysisMeasured), noEvent(rc.EventRolloutTransition), wantMeasure(id1+"/0/error-rate#1@12:02:00")),
	},
	{
		name: "rule16-paused-rollout-measures-nothing",
		desc: "rule 16: an operator paused the rollout mid-analysis: nothing is measured while it is halted",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorRate())
			s.measureEach(1, "0.01")
			s.intent("p1", id1, rc.IntentPause, "alice")
		},
		check: all(wantEvent(rc.EventRolloutTransition, "", string(rc.RolloutHalted), codes.OperatorPause), wantMeasure()),
	},
	{
		name: "rule16-last-wave-converges-after-its-analysis",
		desc: "rule 16: every host of the last wave converged; the rollout converges only with the third successful measurement of that wave",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorRate())
			s.measureEach(1, "0.01", "0.01").advance(3*time.Minute).measure(id1, 0, "error-rate", 3, "0.01", "").tick().advance(time.Minute)
			s.confirm(id1, "b", "c").tick().advance(11 * time.Minute).tick()
			for seq := 1; seq <= 2; seq++ {
				s.measure(id1, 1, "error-rate", seq, "0.02", "").tick().advance(time.Minute)
			}
			s.measure(id1, 1, "error-rate", 3, "0.02", "")
		},
		check: all(wantEvent(rc.EventAnalysisCompleted, "", "", codes.AnalysisSuccessful),
			wantEvent(rc.EventRolloutTransition, "", string(rc.RolloutConverged), codes.Converged)),
	},
}

// errorsVsBaseline is error-rate as a comparison with the hosts not yet
// updated: higher is worse, by at least half a point, at 95%, from at
// least 5 values a group.
func errorsVsBaseline(edit ...func(*proto.Analysis)) proto.Analysis {
	return errorRate(append([]func(*proto.Analysis){func(a *proto.Analysis) {
		a.Compare = &proto.Comparison{Worse: proto.WorseHigher, Effect: "0.005", Confidence: "0.95", MinSamples: 5, Window: "5m", Step: "30s"}
	}}, edit...)...)
}

// compared records a comparison's measurement of wave 0's error-rate at
// the current time.
func (s *scenario) compared(seq int, canary, baseline []float64) *scenario {
	s.in.Measurements = append(s.in.Measurements, rc.Measurement{RolloutID: id1, Wave: 0, Analysis: "error-rate", Seq: seq, At: s.in.Now,
		Query: `sum(rate(http_errors_total{host=~"a"}[1m]))`, Compared: &rc.Compared{Canary: canary, Baseline: baseline}})
	return s
}

// wantGroups wants the measure request of a run to name these groups.
func wantGroups(name string, canary, baseline []string) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		for _, m := range out.Measure {
			if m.Analysis == name {
				if !slices.Equal(m.Canary, canary) || !slices.Equal(m.Baseline, baseline) {
					t.Fatalf("groups of %s: canary %q baseline %q, want %q and %q", name, m.Canary, m.Baseline, canary, baseline)
				}
				return
			}
		}
		t.Fatalf("no measure request of %s in %+v", name, out.Measure)
	}
}

var comparisonScenarios = []goldenCase{
	{
		name: "rule16-compare-chooses-the-baseline",
		desc: "rule 16: a comparison measures the canary a against as many hosts of the rollout still on the previous release, heard and Pending: one of b and c; its first measurement is due a window (5 minutes) after the run began, so that the window holds only the release's values",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorsVsBaseline())
		},
		check: wantGroups("error-rate", []string{"a"}, []string{"b"}),
	},
	{
		name: "rule16-compare-baseline-heard-only",
		desc: "rule 16: a baseline host that is not heard (b) is left out of the baseline: c serves in its place",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorsVsBaseline())
			s.offline("b")
		},
		check: wantGroups("error-rate", []string{"a"}, []string{"c"}),
	},
	{
		name: "rule16-compare-baseline-by-tags",
		desc: "rule 16: baselineTags [db] draws the baseline only from hosts tagged db: c, not b",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorsVsBaseline(func(a *proto.Analysis) { a.Compare.BaselineTags = []string{"db"} }))
		},
		check: wantGroups("error-rate", []string{"a"}, []string{"c"}),
	},
	{
		name: "rule16-compare-worse-canary-fails",
		desc: "rule 16: the canary's error ratio is clearly above its baseline's: the measurement fails with the medians, the effect and p in the journal, and onHealthFailure halt halts the rollout",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorsVsBaseline())
			s.compared(1, []float64{0.051, 0.049, 0.055, 0.06, 0.052, 0.058}, []float64{0.011, 0.012, 0.009, 0.01, 0.013, 0.008})
		},
		check: all(wantEventSaying(rc.EventAnalysisMeasured, codes.MeasurementFailed, "canary median"),
			wantEventSaying(rc.EventAnalysisMeasured, codes.MeasurementFailed, "p = "),
			wantEvent(rc.EventRolloutTransition, "", string(rc.RolloutHalted), codes.AnalysisFailed), wantIntents()),
	},
	{
		name: "rule16-compare-equal-canary-passes",
		desc: "rule 16: a canary at its baseline's level passes each measurement, and the third promotes the wave",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorsVsBaseline())
			same := []float64{0.011, 0.012, 0.009, 0.01, 0.013, 0.008}
			s.compared(1, same, same).tick().advance(time.Minute)
			s.compared(2, same, same).tick().advance(time.Minute)
			s.compared(3, same, same).advance(3 * time.Minute)
		},
		check: all(wantEvent(rc.EventAnalysisCompleted, "", "", codes.AnalysisSuccessful), wantEvent(rc.EventWavePromoted, "", "", codes.WavePromoted)),
	},
	{
		name: "rule16-compare-too-few-samples-holds",
		desc: "rule 16: the baseline has 2 values, fewer than minSamples 5: inconclusive, and the rollout halts for an operator, saying why",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureRollbackAndHalt, errorsVsBaseline())
			s.compared(1, []float64{0.05, 0.06, 0.05, 0.07, 0.05}, []float64{0.01, 0.02})
		},
		check: all(wantEventSaying(rc.EventAnalysisMeasured, codes.MeasurementInconclusive, "too few samples"),
			wantEventSaying(rc.EventRolloutTransition, codes.AnalysisInconclusive, "resume (measures again) or roll back"), wantIntents()),
	},
	{
		name: "rule16-compare-last-wave-judged-by-its-conditions",
		desc: "rule 16: in the last wave no host is left for a baseline: the request names none, and the measurement, an instant query, is judged by the analysis's conditions, saying so",
		build: func(s *scenario) {
			canarySoaking(s, proto.OnHealthFailureHalt, errorsVsBaseline(func(a *proto.Analysis) { a.Count = 1 }))
			s.compared(1, []float64{0.01, 0.01, 0.01, 0.01, 0.01}, []float64{0.01, 0.01, 0.01, 0.01, 0.01}).advance(5 * time.Minute).tick()
			s.confirm(id1, "b", "c").tick().advance(time.Minute)
			s.measure(id1, 1, "error-rate", 1, "0.2", "")
		},
		check: all(wantEventSaying(rc.EventAnalysisMeasured, codes.MeasurementFailed, "no baseline left"),
			wantEvent(rc.EventRolloutTransition, "", string(rc.RolloutHalted), codes.AnalysisFailed)),
	},
}

func init() { scenarios = append(scenarios, comparisonScenarios...) }
