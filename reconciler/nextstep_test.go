package reconciler_test

import (
	"testing"

	"github.com/nixfleet/nixfleet/codes"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// TestNextStepSaid: a halted rollout's next step names its actions as the
// reader takes them: by the CLI's commands (NextStep), or, on a page that
// offers buttons, by the buttons it offers, the CLI's command for any
// other; a second action drops the words it shares with the first. A
// rollout that is not halted has no next step.
func TestNextStepSaid(t *testing.T) {
	t.Parallel()
	halted := func(code string) rc.Rollout {
		return rc.Rollout{ID: "stable@0000002000000000000000000000000000000000", State: rc.RolloutHalted, Reason: rc.Reason{Code: code}}
	}
	// page is a dashboard that offers the buttons named, and shows what
	// nixfleet rollout show prints.
	page := func(r rc.Rollout, buttons ...string) rc.Say {
		cli := rc.Commands(r)
		return func(verb string) string {
			if verb == "show" {
				return ""
			}
			for _, b := range buttons {
				if b == verb {
					return "press " + map[string]string{rc.IntentResume: "Resume", rc.IntentRollback: "Rollback"}[verb]
				}
			}
			return cli(verb)
		}
	}
	for _, c := range []struct {
		name     string
		r        rc.Rollout
		buttons  []string
		cli, web string
	}{
		{"paused", halted(codes.OperatorPause), []string{rc.IntentResume},
			"nixfleet rollout resume stable@0000002", "press Resume"},
		{"health failure", halted(codes.HealthFailure), []string{rc.IntentResume, rc.IntentRollback},
			"look at its failed hosts, then nixfleet rollout resume stable@0000002 (forgives them) or rollback stable@0000002",
			"look at its failed hosts, then press Resume (forgives them) or Rollback"},
		{"health failure, no rollback button", halted(codes.HealthFailure), []string{rc.IntentResume},
			"look at its failed hosts, then nixfleet rollout resume stable@0000002 (forgives them) or rollback stable@0000002",
			"look at its failed hosts, then press Resume (forgives them) or nixfleet rollout rollback stable@0000002"},
		{"analysis inconclusive", halted(codes.AnalysisInconclusive), []string{rc.IntentResume, rc.IntentRollback},
			"check that Prometheus answers the analysis (nixfleet rollout show stable@0000002), then nixfleet rollout resume stable@0000002 (it measures again) or rollback stable@0000002",
			"check that Prometheus answers the analysis, then press Resume (it measures again) or Rollback"},
		{"revert stalled", halted(codes.RevertStalled), []string{rc.IntentRollback},
			"nixfleet rollout rollback stable@0000002 again, or cancel it", "press Rollback again, or cancel it"},
		{"no buttons", halted(codes.HealthFailure), nil,
			"look at its failed hosts, then nixfleet rollout resume stable@0000002 (forgives them) or rollback stable@0000002",
			"look at its failed hosts, then nixfleet rollout resume stable@0000002 (forgives them) or rollback stable@0000002"},
		{"stalled on a wave that can never be promoted", halted(codes.WaveUnprovable), []string{rc.IntentResume, rc.IntentRollback},
			"look at its failed hosts (nixfleet rollout show stable@0000002), then nixfleet rollout rollback stable@0000002, or push a release that fixes the wave: it supersedes this one",
			"look at its failed hosts, then press Rollback, or push a release that fixes the wave: it supersedes this one"},
		{"stalled past the readiness deadline", halted(codes.WaveStalled), []string{rc.IntentResume, rc.IntentRollback},
			"look at its failed hosts, then nixfleet rollout resume stable@0000002 (forgives them) or rollback stable@0000002",
			"look at its failed hosts, then press Resume (forgives them) or Rollback"},
		{"active", rc.Rollout{ID: "stable@1", State: rc.RolloutActive}, []string{rc.IntentResume}, "", ""},
	} {
		if got := rc.NextStep(c.r); got != c.cli {
			t.Errorf("%s: NextStep = %q, want %q", c.name, got, c.cli)
		}
		if got := rc.NextStepSaid(c.r, page(c.r, c.buttons...)); got != c.web {
			t.Errorf("%s: on a page = %q, want %q", c.name, got, c.web)
		}
	}
}
