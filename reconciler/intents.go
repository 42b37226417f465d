package reconciler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

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
			t.wake(in.At)
			continue
		}
		res := IntentResult{IntentID: in.ID}
		w := t.byID[in.RolloutID]
		if in.Kind == IntentApprove || in.Kind == IntentBreakFreeze {
			t.finishIntent(in, t.changeIntent(in, w))
			continue
		}
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
		case alreadyIn(ev, w.r.State):
			// A repeat (pause of a halted rollout, …): accepted, and
			// nothing moves. Decided here, in filing order like every
			// intent, so that a repeat never overtakes an intent filed
			// before it (rfcs/0007 §Intents).
			res.Accepted = true
			res.Reason = Reason{Code: codes.AlreadyInState, Actor: in.Actor,
				Message: fmt.Sprintf("rollout %s is already %s (%s); nothing to do", w.r.ID, ShownState(string(w.r.State), w.r.Reason.Code), stateSince(&w.r))}
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
				if names := w.forgiveAnalyses(); len(names) > 0 {
					reason.Message += fmt.Sprintf("; analysis %s measures again", strings.Join(names, ", "))
				}
			}
			t.setRollout(w, ev, reason)
			res.Accepted, res.Reason = true, reason
		}
		t.finishIntent(in, res)
	}
}

// finishIntent journals an intent's verdict and records its result.
func (t *tick) finishIntent(in Intent, res IntentResult) {
	kind := EventIntentRefused
	if res.Accepted {
		kind = EventIntentAccepted
	} else if in.Comment != "" {
		res.Reason.Message += fmt.Sprintf(" (comment: %s)", in.Comment)
	}
	t.emit(Event{Kind: kind, RolloutID: in.RolloutID, Wave: -1, Reason: res.Reason})
	t.results = append(t.results, res)
}

// alreadyIn reports whether the outcome of an operator intent ev already
// holds in state s: pause of a Halted rollout (whatever halted it), resume
// of an Active one, cancel of a Cancelled one, rollback of a Reverting or
// Reverted one.
func alreadyIn(ev RolloutEvent, s RolloutState) bool {
	switch ev {
	case EvPause:
		return s == RolloutHalted
	case EvResume:
		return s == RolloutActive
	case EvCancel:
		return s == RolloutCancelled
	case EvRollback:
		return s == RolloutReverting || s == RolloutReverted
	}
	return false
}

// stateSince says why and since when a rollout is in its state, like
// "pause by alice at 2026-11-21T10:00:00Z".
func stateSince(r *Rollout) string {
	why := r.Reason.Message
	if why == "" {
		why = cmp.Or(r.Reason.Code, "no reason recorded")
	}
	if r.UpdatedAt.IsZero() {
		return why
	}
	return why + " at " + r.UpdatedAt.UTC().Format(time.RFC3339)
}

// newerOnChannel returns the channel's latest rollout when it is not w:
// only a channel's latest rollout may be rolled back, so that two
// rollouts never drive the channel's hosts at once, and the refusal names
// the one that may. (Not the next newer one: that one may be finished and
// not even in the input, which holds only the live rollouts.)
func (t *tick) newerOnChannel(w *work) *work {
	if l := t.latestOf(w.r.Channel); l != w {
		return l
	}
	return nil
}

func actorName(a string) string {
	if a == "" {
		return "an unnamed operator"
	}
	return a
}
