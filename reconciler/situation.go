package reconciler

import (
	"fmt"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
)

// A host's situation, in an operator's terms: what it runs, what it waits
// for now, whether that can still change without anyone, and what an
// operator can do. It is judged from the rollout as it is now, not from
// the gate the last dispatching tick recorded: a paused rollout's host
// waits for the pause, not for the budget that held it before, and a host
// of a finished rollout waits for nothing. The status, the host views and
// the rollout view of the API all show this one answer.

// Place is a host's record in a rollout, with what its situation depends
// on besides the record.
type Place struct {
	// Rollout is the rollout; its hosts are not read.
	Rollout Rollout
	// Latest is set when the rollout is its channel's latest: only the
	// latest converged rollout still catches up skipped hosts.
	Latest bool
	Host   RolloutHost
	// Online: the host was heard within the offline threshold.
	Online bool
	// Prefetched is the closure the host's agent holds realised for an
	// activation to come (ObservedHost.Prefetched): a waiting host whose
	// target it is says so. It changes nothing but the message (no code,
	// no next step), so a view that reads no host status (a rollout's)
	// leaves it empty and tells the same story.
	Prefetched string
}

// Situation is the answer.
type Situation struct {
	// Code is the gate or state that describes the host now (a registered
	// code), and Message says it for people.
	Code    string
	Message string
	// Moves is set when the situation can change without an operator: a
	// gate that clears as the fleet moves, a host in flight, a wave yet to
	// come. When it is not set, nothing in this rollout will change the
	// host unless someone acts (Next says what).
	Moves bool
	// Next is the operator's next step, when one helps.
	Next string
	// Until is when the situation is expected to end (a soak, a confirm
	// window); zero when not known.
	Until time.Time
}

// Situate judges a host's situation at now.
func Situate(p Place, now time.Time, tu Tunables) Situation {
	s := situate(p, now, tu)
	if h := p.Host; (h.State == HostPending || h.State == HostSkipped) && h.Target != "" && p.Prefetched == h.Target {
		s.Message += "; its target is prefetched"
	}
	return s
}

func situate(p Place, now time.Time, tu Tunables) Situation {
	r, h := p.Rollout, p.Host
	stopped := r.State != RolloutActive && r.State != RolloutOpening
	if r.State == RolloutReverting {
		if s, ok := reverting(r, h); ok {
			return s
		}
	}
	switch h.State {
	case HostConverged:
		s := Situation{Code: codes.Converged, Message: fmt.Sprintf("runs its target %s (%s)", h.Target, r.ID)}
		if r.State == RolloutActive && h.Wave == r.Wave && analysisPending(&r, h.Wave) {
			s.Message += fmt.Sprintf("; wave %d is promoted when its analysis succeeds: %s", h.Wave, AnalysisSummary(&r, h.Wave))
		}
		return s
	case HostActivating:
		by := h.Since.Add(tu.confirm())
		return Situation{Code: cmpCode(h.Reason.Code, codes.Dispatched), Moves: true, Until: by,
			Message: fmt.Sprintf("switching to %s; its agent confirms by %s or rolls itself back", h.Target, stamp(by))}
	case HostRollingBack:
		by := h.Since.Add(tu.confirm())
		return Situation{Code: cmpCode(h.Reason.Code, codes.RollbackDispatched), Moves: true, Until: by,
			Message: fmt.Sprintf("rolling back to %s; confirms by %s", h.Previous, stamp(by))}
	case HostSoaking:
		s := Situation{Code: cmpCode(h.Reason.Code, codes.Confirmed), Moves: true,
			Message: fmt.Sprintf("runs %s and soaks", h.Target)}
		if h.Wave >= 0 && h.Wave < len(r.Waves) {
			s.Until = h.Since.Add(r.WaveSoak(h.Wave))
			s.Message += fmt.Sprintf("; converges at %s if it stays healthy and checks in", stamp(s.Until))
		}
		return s
	case HostRebooting:
		by := r.RebootOf(h.Wave).BootBy(h.Since, tu)
		s := Situation{Code: codes.RebootDispatched, Moves: true, Until: by,
			Message: fmt.Sprintf("rebooting once into its staged target %s; it must check in on the new boot by %s, or the boot failed and its previous default entry boots again", h.Target, stamp(by))}
		if h.Blocked.Message != "" {
			s.Message += "; " + h.Blocked.Message
		}
		return s
	case HostDeferred:
		managed := r.RebootOf(h.Wave).Managed
		reboots := managed && (r.State == RolloutActive || (r.State == RolloutConverged && p.Latest)) // rule 17
		switch {
		case reboots && h.Blocked.Code != "":
			s := windowed(gated(h.Blocked), &r, &h, now)
			s.Message = "staged for the next boot; its reboot waits: " + s.Message
			return s
		case reboots:
			return Situation{Code: codes.Deferred, Moves: true,
				Message: fmt.Sprintf("%s is staged for the next boot; the control plane reboots the host at the next tick unless a gate holds it", h.Target)}
		case !managed && h.Blocked.Code != "": // rebooted into its target, waiting for a slot to soak
			return gated(h.Blocked)
		case managed:
			return Situation{Code: codes.Deferred, Next: "resume the rollout, or reboot the host: its target is staged for the next boot",
				Message: fmt.Sprintf("%s is staged for the next boot; rollout %s is %s, so the control plane orders no reboot", h.Target, r.ID, r.State)}
		}
		return Situation{Code: codes.Deferred, Next: "reboot the host: its target is staged for the next boot",
			Message: fmt.Sprintf("%s is staged for the next boot (a switch now would restart what cannot be restarted live); nothing here reboots it (%s)", h.Target, codes.RebootNotAllowed)}
	case HostFailed:
		return Situation{Code: cmpCode(h.Reason.Code, codes.ActivationFailed), Next: failedNext(r),
			Message: fmt.Sprintf("failed on %s: %s", h.Target, h.Reason.Message)}
	case HostReverted:
		return Situation{Code: cmpCode(h.Reason.Code, codes.RolledBack),
			Message: fmt.Sprintf("rolled back to %s", h.Previous)}
	case HostSkipped:
		if stopped && !(r.State == RolloutConverged && p.Latest) {
			return pendingStopped(r, "skipped while it was away, and not caught up")
		}
		if h.Blocked.Code != "" {
			return windowed(gated(h.Blocked), &r, &h, now)
		}
		if p.Online {
			return Situation{Code: codes.CatchUp, Moves: true,
				Message: "skipped while it was away; heard again, it catches up at the next tick"}
		}
		return Situation{Code: codes.Offline, Moves: true,
			Message: "skipped while it was away; it catches up when it checks in again"}
	}
	// Pending.
	if stopped {
		return pendingStopped(r, "never dispatched")
	}
	if r.State == RolloutOpening {
		return Situation{Code: codes.Waiting, Moves: true, Message: fmt.Sprintf("rollout %s is opening", r.ID)}
	}
	if h.Wave > r.Wave {
		msg := fmt.Sprintf("waits for wave %d to start (wave %d is %s)", h.Wave, r.Wave, r.WavePhase)
		if a := AnalysisSummary(&r, r.Wave); a != "" {
			msg += "; wave " + fmt.Sprint(r.Wave) + "'s analysis: " + a
		}
		return Situation{Code: codes.WaveNotActive, Moves: true, Message: msg}
	}
	if h.Blocked.Code == "" && h.Blocked.Gate == "" {
		return Situation{Code: codes.Waiting, Moves: true, Message: "dispatched at the next tick unless a gate holds it"}
	}
	return windowed(gated(h.Blocked), &r, &h, now)
}

// windowed completes the situation of a host change control holds: when
// its next window opens, from now (rule 13); what ends a freeze (rule 14)
// or an approval gate (rule 15).
func windowed(s Situation, r *Rollout, h *RolloutHost, now time.Time) Situation {
	switch s.Code {
	case codes.Freeze:
		s.Next = fmt.Sprintf("wait for the freeze to end, or an approver lets this rollout through: nixfleet rollout break-freeze %s --comment …", proto.ShortRolloutID(r.ID))
		return s
	case codes.Approval:
		s.Next = fmt.Sprintf("approvers approve the wave: nixfleet rollout approve %s --wave %d --comment …", proto.ShortRolloutID(r.ID), h.Wave)
		return s
	case codes.Window:
	default:
		return s
	}
	if until, label := windowUntil(r, h, now); !until.IsZero() {
		s.Until = until
		s.Message = fmt.Sprintf("outside its maintenance window; the next opens %s, in %s (%s)", label, approx(until.Sub(now)), stamp(until))
	}
	return s
}

// gated is the situation of a host a gate holds: most gates clear as the
// fleet moves; a quarantine, failing compliance and a missing previous
// closure do not.
func gated(b Reason) Situation {
	s := Situation{Code: cmpCode(b.Gate, b.Code), Message: b.Message, Moves: true}
	if s.Code == codes.Approval {
		s.Moves = false // approvers must act
	}
	switch s.Code {
	case codes.Quarantined:
		s.Moves, s.Next = false, "push a release with another target for this host: this one failed on it"
	case codes.ComplianceEarlierWave:
		s.Moves, s.Next = false, "fix the failing compliance of the earlier wave and push a release"
	case codes.NoPreviousClosure:
		s.Moves, s.Next = false, "nothing to roll back to; cancel the rollout (its hosts stay where they are) or push a release"
	}
	return s
}

// reverting is the situation of a host of a reverting rollout that has
// still to go back (rfcs/0003 rule 9: it moved, and ran another closure
// before), or that has nothing to go back to; ok is false for the others,
// whose answer does not depend on the revert (in flight, Pending, back).
func reverting(r Rollout, h RolloutHost) (Situation, bool) {
	switch h.State {
	case HostSoaking, HostConverged, HostDeferred, HostFailed:
	default:
		return Situation{}, false
	}
	if h.Previous == h.Target {
		if h.State != HostConverged {
			return Situation{}, false
		}
		return Situation{Code: codes.Converged,
			Message: fmt.Sprintf("runs %s, which it also ran before rollout %s: nothing to roll back", h.Target, r.ID)}, true
	}
	if h.Blocked.Code != "" {
		return gated(h.Blocked), true
	}
	return Situation{Code: cmpCode(r.Reason.Code, codes.RollbackDispatched), Moves: true,
		Message: fmt.Sprintf("rollout %s is reverting: it goes back to %s (after the hosts it gates, under the budgets)", r.ID, h.Previous)}, true
}

// pendingStopped is the situation of a host a rollout will not dispatch
// any more.
func pendingStopped(r Rollout, what string) Situation {
	if ShownState(string(r.State), r.Reason.Code) == Paused {
		return Situation{Code: codes.RolloutStopped, Next: haltedNext(r, Commands(r)),
			Message: fmt.Sprintf("not dispatched while rollout %s is paused (%s); a resume goes on", r.ID, r.Reason.Message)}
	}
	s := Situation{Code: codes.RolloutStopped, Message: fmt.Sprintf("%s: rollout %s is %s", what, r.ID, r.State)}
	if r.Reason.Message != "" {
		s.Message += " (" + r.Reason.Message + ")"
	}
	switch r.State {
	case RolloutHalted:
		s.Next = haltedNext(r, Commands(r))
	case RolloutSuperseded:
		s.Next = "the channel's newer rollout decides it"
	case RolloutCancelled, RolloutReverted, RolloutFailed:
		s.Next = "push a new release to the channel to move it"
	case RolloutReverting:
		s.Message = fmt.Sprintf("%s: rollout %s is reverting; it stays on what it runs", what, r.ID)
	case RolloutConverged:
		s.Next = "the channel's newer rollout decides it"
	}
	return s
}

// NextStep is the operator's next step for a rollout that waits for one:
// a halted rollout is resumed or rolled back. It is empty for the others.
// It names each action by its CLI command (Commands).
func NextStep(r Rollout) string { return NextStepSaid(r, Commands(r)) }

// NextStepSaid is NextStep with its actions said by say: a page that
// offers an action's button names the button instead of the command.
func NextStepSaid(r Rollout, say Say) string {
	if r.State == RolloutHalted {
		return haltedNext(r, say)
	}
	return ""
}

// Say says how the reader of a next step takes an action on the rollout:
// verb is a subcommand of nixfleet rollout, an intent kind or "show". An
// empty answer for show means that the reader sees what it prints
// already.
type Say func(verb string) string

// Commands says each action as the nixfleet command that takes it on r,
// which names r by its short id (the CLI takes it back).
func Commands(r Rollout) Say {
	id := proto.ShortRolloutID(r.ID)
	return func(verb string) string { return fmt.Sprintf("nixfleet rollout %s %s", verb, id) }
}

// haltedNext is what an operator can do with a halted rollout.
func haltedNext(r Rollout, say Say) string {
	look := func(what string) string {
		if s := say("show"); s != "" {
			return what + " (" + s + ")"
		}
		return what
	}
	switch r.Reason.Code {
	case codes.OperatorPause:
		return say(IntentResume)
	case codes.RevertStalled:
		return say(IntentRollback) + " again, or cancel it"
	case codes.AnalysisInconclusive:
		return look("check that Prometheus answers the analysis") + ", then " + either(say, IntentResume, "it measures again", IntentRollback)
	case codes.AnalysisFailed:
		return look("look at the wave's services and the analysis") + ", then " + either(say, IntentResume, "it measures again", IntentRollback)
	case codes.WaveUnprovable:
		// A resume would halt it again at once (rule 11): the ways on
		// are back, or a release that fixes the wave.
		return look("look at its failed hosts") + ", then " + say(IntentRollback) + ", or push a release that fixes the wave: it supersedes this one"
	}
	return "look at its failed hosts, then " + either(say, IntentResume, "forgives them", IntentRollback)
}

// either is "<first> (<note>) or <second>", the second without the
// words it begins with in common with the first: "nixfleet rollout
// resume X (…) or rollback X", "press Resume (…) or Rollback".
func either(say Say, first, note, second string) string {
	a, b := say(first), say(second)
	aw, bw := strings.Fields(a), strings.Fields(b)
	n := 0
	for n < len(aw) && n < len(bw)-1 && aw[n] == bw[n] {
		n++
	}
	return fmt.Sprintf("%s (%s) or %s", a, note, strings.Join(bw[n:], " "))
}

// failedNext is what an operator can do about a failed host.
func failedNext(r Rollout) string {
	switch r.State {
	case RolloutHalted:
		return haltedNext(r, Commands(r))
	case RolloutActive, RolloutConverged:
		return "push a release that fixes it; the rollout goes on without it while its health gate allows"
	}
	return "push a release that fixes it"
}

func cmpCode(code, fallback string) string {
	if code != "" {
		return code
	}
	return fallback
}
