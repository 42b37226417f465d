package notify

import (
	"fmt"
	"strings"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// Category is what a sink's events filter names: a kind of journal event
// worth telling someone about.
type Category string

// The categories, and the journal events each stands for (CategoryOf).
const (
	// CategoryRolloutOpened: rollout_opened.
	CategoryRolloutOpened Category = "rollout_opened"
	// CategoryWavePromoted: wave_promoted.
	CategoryWavePromoted Category = "wave_promoted"
	// CategoryHalted: a rollout_transition to Halted.
	CategoryHalted Category = "halted"
	// CategoryReverted: a rollout_transition to Reverting or Reverted.
	CategoryReverted Category = "reverted"
	// CategoryConverged: a rollout_transition to Converged.
	CategoryConverged Category = "converged"
	// CategoryFailed: a rollout_transition to Failed.
	CategoryFailed Category = "failed"
	// CategoryApprovalNeeded: approval_needed.
	CategoryApprovalNeeded Category = "approval_needed"
	// CategoryPartialVisibility: partial_visibility and
	// visibility_restored.
	CategoryPartialVisibility Category = "partial_visibility"
	// CategoryReleaseRefused: release_rejected.
	CategoryReleaseRefused Category = "release_refused"
	// CategoryAnalysis: analysis_completed.
	CategoryAnalysis Category = "analysis"
	// CategoryForecast: forecast (rfcs/0014): a rollout's first forecast,
	// one whose end moved, and how it came out.
	CategoryForecast Category = "forecast"
)

// Categories lists every category, in the order a message lists them.
var Categories = []Category{
	CategoryRolloutOpened, CategoryWavePromoted, CategoryHalted, CategoryReverted, CategoryConverged,
	CategoryFailed, CategoryApprovalNeeded, CategoryPartialVisibility, CategoryReleaseRefused, CategoryAnalysis,
	CategoryForecast,
}

// EventReleaseRejected is the kind of the event the control plane's
// channel source writes for a refused release (controlplane's
// EventReleaseRejected, which this package cannot import).
const EventReleaseRejected = "release_rejected"

// EventForecast is the kind of the events the control plane's forecaster
// writes (controlplane's EventForecast).
const EventForecast = "forecast"

// CategoryOf returns the category of a journal event; ok is false for an
// event no sink is sent (a host's transition, a wait, an intent…).
func CategoryOf(e proto.Event) (c Category, ok bool) {
	switch e.Kind {
	case reconciler.EventRolloutOpened:
		return CategoryRolloutOpened, true
	case reconciler.EventWavePromoted:
		return CategoryWavePromoted, true
	case reconciler.EventRolloutTransition:
		switch reconciler.RolloutState(e.To) {
		case reconciler.RolloutHalted:
			return CategoryHalted, true
		case reconciler.RolloutReverting, reconciler.RolloutReverted:
			return CategoryReverted, true
		case reconciler.RolloutConverged:
			return CategoryConverged, true
		case reconciler.RolloutFailed:
			return CategoryFailed, true
		}
	case reconciler.EventApprovalNeeded:
		return CategoryApprovalNeeded, true
	case reconciler.EventPartialVisibility, reconciler.EventVisibilityRestored:
		return CategoryPartialVisibility, true
	case EventReleaseRejected:
		return CategoryReleaseRefused, true
	case reconciler.EventAnalysisCompleted:
		return CategoryAnalysis, true
	case EventForecast:
		return CategoryForecast, true
	}
	return "", false
}

// ParseCategory returns the category named s; an unknown name is an error
// that lists the known ones.
func ParseCategory(s string) (Category, error) {
	for _, c := range Categories {
		if string(c) == s {
			return c, nil
		}
	}
	names := make([]string, len(Categories))
	for i, c := range Categories {
		names[i] = string(c)
	}
	return "", fmt.Errorf("unknown event category %q (known: %s)", s, strings.Join(names, ", "))
}
