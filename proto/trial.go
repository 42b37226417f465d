package proto

import "time"

// AnalysisTrialRequest is POST /v1/analysis/trials (nixfleet analysis
// run): measure analyses once, now, for a wave of a channel's latest
// rollout, and judge them as a rollout would, so that an operator can
// tune a policy before a release. Nothing is recorded and nothing moves.
type AnalysisTrialRequest struct {
	Channel string `json:"channel"`
	Wave    int    `json:"wave"`
	// Analyses are the analyses to measure, validated as a fleet's are
	// (at most MaxTrialAnalyses); none: those of the channel's latest
	// rollout.
	Analyses []Analysis `json:"analyses,omitempty"`
}

// MaxTrialAnalyses bounds the analyses of one trial.
const MaxTrialAnalyses = 16

// AnalysisTrial is what a trial measured and judged.
type AnalysisTrial struct {
	Channel string `json:"channel"`
	// RolloutID is the rollout whose hosts and waves the trial took.
	RolloutID string    `json:"rolloutId"`
	Wave      int       `json:"wave"`
	At        time.Time `json:"at"`
	// Results, one per analysis, in the order asked.
	Results []TrialResult `json:"results"`
}

// TrialResult is one analysis's measurement in a trial.
type TrialResult struct {
	Analysis string `json:"analysis"`
	// Outcome is successful, failed or inconclusive; Message says why,
	// as the journal would.
	Outcome string `json:"outcome"`
	Message string `json:"message"`
	// Query is the query sent (the canary's, for a comparison).
	Query string `json:"query"`
	// Canary and Baseline are a comparison's groups (absent otherwise;
	// Baseline absent when no host was left for it, and the conditions
	// judged the wave), and CanaryValues and BaselineValues the values
	// it took of each.
	Canary         []string  `json:"canary,omitempty"`
	Baseline       []string  `json:"baseline,omitempty"`
	CanaryValues   []float64 `json:"canaryValues,omitempty"`
	BaselineValues []float64 `json:"baselineValues,omitempty"`
}
