package reconciler

import (
	"strings"
	"testing"

	"github.com/nixfleet/nixfleet/analysis"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
)

// TestShownSaysWhatHappens: over every rollout state, reason and analysis
// outcome, what people read claims nothing that is not happening now: a
// run reads "running" only on an Active rollout (nothing measures another:
// rule 16), and a rollout reads Paused only when Halted by an operator's
// pause; every other state and outcome reads as recorded.
func TestShownSaysWhatHappens(t *testing.T) {
	t.Parallel()
	outcomes := []analysis.Outcome{analysis.Running, analysis.Successful, analysis.Failed, analysis.Inconclusive}
	reasons := []string{codes.OperatorPause, codes.HealthFailure, codes.WaveStalled, codes.AnalysisFailed, ""}
	for _, st := range RolloutStates {
		for _, o := range outcomes {
			got := ShownOutcome(string(o), string(st))
			switch {
			case got == string(analysis.Running) && st != RolloutActive:
				t.Errorf("a run of a %s rollout reads running", st)
			case o == analysis.Running && st != RolloutActive && got != Stopped:
				t.Errorf("a running run of a %s rollout reads %q, want %q", st, got, Stopped)
			case o != analysis.Running && got != string(o):
				t.Errorf("a %s run of a %s rollout reads %q", o, st, got)
			}
			r := Rollout{ID: "stable@1", State: st, Wave: 0,
				HealthGate: proto.HealthGate{Analysis: []proto.Analysis{{Name: "error-ratio", Count: 3}}},
				Analyses:   []AnalysisRun{{Wave: 0, Name: "error-ratio", Outcome: o}}}
			if s := AnalysisSummary(&r, 0); st != RolloutActive && strings.Contains(s, " running") {
				t.Errorf("the analysis of a %s rollout reads %q", st, s)
			}
		}
		for _, why := range reasons {
			got := ShownState(string(st), why)
			want := string(st)
			if st == RolloutHalted && why == codes.OperatorPause {
				want = Paused
			}
			if got != want {
				t.Errorf("a %s rollout (%q) reads %q, want %q", st, why, got, want)
			}
		}
	}
}

// TestOffTarget: a Converged rollout says how many of its hosts are not on
// its target and why; one whose hosts all are, or of another state, says
// nothing.
func TestOffTarget(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		state  RolloutState
		counts map[string]int
		want   string
	}{
		{RolloutConverged, map[string]int{"Converged": 3}, ""},
		{RolloutConverged, map[string]int{"Converged": 3, "Skipped": 1}, "1 host not on target: Skipped 1 (away; it catches up when heard again)"},
		{RolloutConverged, map[string]int{"Converged": 1, "Skipped": 2, "Failed": 1},
			"3 hosts not on target: Failed 1 (its activation failed; a release that fixes it moves it), Skipped 2 (away; it catches up when heard again)"},
		{RolloutActive, map[string]int{"Converged": 1, "Pending": 2}, ""},
		{RolloutHalted, map[string]int{"Failed": 1}, ""},
	} {
		if got := OffTarget(string(c.state), c.counts); got != c.want {
			t.Errorf("%s %v: %q, want %q", c.state, c.counts, got, c.want)
		}
	}
}
