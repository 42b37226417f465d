package proto

import "testing"

func TestReportOutcome(t *testing.T) {
	for kind, want := range map[string]string{
		ReportActivationStarted: OutcomeStarted,
		ReportActivationFailed:  OutcomeFailed,
		ReportDeferred:          OutcomeDeferred,
		ReportRolledBack:        OutcomeRolledBack,
		ReportManifestRejected:  OutcomeManifestRejected,
		ReportProbeResults:      "",
		"activation_confirmed":  "",
		"":                      "",
	} {
		if got := ReportOutcome(kind); got != want {
			t.Errorf("ReportOutcome(%q) = %q, want %q", kind, got, want)
		}
	}
}
