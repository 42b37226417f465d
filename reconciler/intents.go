package reconciler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/nixfleet/nixfleet/codes"
)

// Step 1 of a tick (rfcs/0003 §The tick, rule 10): operator intents.

func (t *tick) intents() {
	ints := slices.Clone(t.in.Intents)
	slices.SortFunc(ints, func(a, b Intent) int {
		return cmp.Or(a.At.Compare(b.At), strings.Compare(a.ID, b.ID))
	})
	for _, in := range ints {
		if in.At.After(t.now) {
			// Filed after the tick's clock was read (while it loaded its
			// input): the next tick takes it, in order.
			continue
		}
		res := IntentResult{IntentID: in.ID}
		w := t.byID[in.RolloutID]
		var ev RolloutEvent
		var code string
		switch in.Kind {
		case IntentPause:
			ev, code = EvPause, codes.OperatorPause
		case IntentResume:
			ev, code = EvResume, codes.OperatorResume
		case IntentCancel:
			ev, code = EvCancel, codes.OperatorCancel
		case IntentRollback:
			ev, code = EvRollback, codes.OperatorRollback
		}
		switch {
		case ev == "":
			res.Reason = Reason{Code: codes.UnknownIntent, Actor: in.Actor, Message: fmt.Sprintf("unknown intent %q", in.Kind)}
		case w == nil:
			res.Reason = Reason{Code: codes.UnknownRollout, Actor: in.Actor, Message: fmt.Sprintf("no rollout %q", in.RolloutID)}
		default:
			if _, err := w.r.State.Next(ev); err != nil {
				res.Reason = Reason{Code: codes.IllegalTransition, Actor: in.Actor,
					Message: fmt.Sprintf("cannot %s a rollout that is %s", in.Kind, w.r.State)}
				break
			}
			if ev == EvResume && w.r.Reason.Code == codes.RevertStalled {
				// Going forward again would roll its hosts out anew without
				// the proof the revert took away (rule 8).
				res.Reason = Reason{Code: codes.IllegalTransition, Actor: in.Actor,
					Message: fmt.Sprintf("cannot resume %s: its revert stalled and hosts were rolled back; roll it back again or cancel it", w.r.ID)}
				break
			}
			if newer := t.newerOnChannel(w); ev == EvRollback && newer != nil {
				res.Reason = Reason{Code: codes.IllegalTransition, Actor: in.Actor,
					Message: fmt.Sprintf("cannot roll back %s: %s is newer on channel %s; roll that one back", w.r.ID, newer.r.ID, w.r.Channel)}
				break
			}
			reason := Reason{Code: code, Actor: in.Actor, Message: fmt.Sprintf("%s by %s", in.Kind, actorName(in.Actor))}
			if in.Comment != "" {
				reason.Message += ": " + in.Comment
			}
			if ev == EvResume {
				// Failures so far are forgiven: onHealthFailure counts anew.
				w.r.FailuresForgiven = w.failures()
				reason.Message += fmt.Sprintf("; %d failed host(s) forgiven", w.r.FailuresForgiven)
			}
			t.setRollout(w, ev, reason)
			res.Accepted, res.Reason = true, reason
		}
		kind := EventIntentRefused
		if res.Accepted {
			kind = EventIntentAccepted
		} else if in.Comment != "" {
			res.Reason.Message += fmt.Sprintf(" (comment: %s)", in.Comment)
		}
		t.emit(Event{Kind: kind, RolloutID: in.RolloutID, Wave: -1, Reason: res.Reason})
		t.results = append(t.results, res)
	}
}

// newerOnChannel returns a rollout of the same channel opened after w, if
// any: only a channel's latest rollout may be rolled back, so that two
// rollouts never drive the channel's hosts at once.
func (t *tick) newerOnChannel(w *work) *work {
	for _, o := range t.rollouts {
		if o != w && o.r.Channel == w.r.Channel && (o.r.OpenedAt.After(w.r.OpenedAt) ||
			(o.r.OpenedAt.Equal(w.r.OpenedAt) && o.r.ID > w.r.ID)) {
			return o
		}
	}
	return nil
}

func actorName(a string) string {
	if a == "" {
		return "an unnamed operator"
	}
	return a
}
