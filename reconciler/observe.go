package reconciler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
)

// Steps 2 and 3 of a tick (rfcs/0003 §The tick): what hosts report moves
// them (rules 7 and 8), and health failures past the limit trigger
// onHealthFailure (rule 9).

// observing reports whether a rollout's hosts still move on observations:
// in-flight hosts of halted and cancelled rollouts finish; a converged
// rollout keeps catching up skipped hosts while it is the latest; and a
// host in flight is watched until it lands in any rollout, whatever
// became of the rollout (superseded, reverted, an older converged one).
func (w *work) observing() bool {
	switch w.r.State {
	case RolloutActive, RolloutHalted, RolloutReverting, RolloutCancelled:
		return true
	case RolloutConverged:
		return w.latest || w.anyInFlight()
	}
	return w.anyInFlight()
}

func (w *work) anyInFlight() bool {
	for _, h := range w.r.Hosts {
		if h.State.InFlight() {
			return true
		}
	}
	return false
}

func (t *tick) observe(w *work) {
	if !w.observing() {
		return
	}
	for i := range w.r.Hosts {
		switch w.r.Hosts[i].State {
		case HostActivating, HostSoaking, HostDeferred, HostRollingBack, HostRebooting: // what observeOnce observes
		default:
			continue
		}
		if t.spent() {
			return
		}
		t.observeHost(w, i)
	}
}

// observeHost applies what a host reports, repeatedly, until its state
// stops moving (a confirmed host with no soak converges in the same tick).
func (t *tick) observeHost(w *work, i int) {
	for range len(HostStates) {
		before := w.r.Hosts[i].State
		t.observeOnce(w, i)
		if w.r.Hosts[i].State == before {
			return
		}
	}
}

func (t *tick) observeOnce(w *work, i int) {
	confirm := t.in.Tunables.confirm()
	h := &w.r.Hosts[i]
	switch h.State {
	case HostActivating, HostSoaking, HostDeferred, HostRollingBack, HostRebooting:
	default:
		return
	}
	o := t.obs[h.Hostname]
	said := o.Said() // verdicts on what the host runs rest on this (rule 8)
	end := h.Since.Add(confirm)
	act := o.Activation
	// An outcome counts for the host's current state only: not older than
	// it, and not about a state entered in this very tick (the agent has
	// not been told yet). One stamped after now was recorded while the tick
	// loaded its input, and waits for the next tick (rfcs/0006 §Tick loop 3).
	matches := act != nil && act.RolloutID == w.r.ID && act.Closure == h.Target && !act.At.Before(h.Since) &&
		!act.At.After(t.now) && h.Since.Before(t.now)
	if act != nil && act.At.After(t.now) {
		t.wake(act.At)
	}
	if act != nil && !h.Since.Before(t.now) {
		t.wake(h.Since.Add(time.Nanosecond)) // an outcome counts once the state is older than the tick
	}
	switch h.State {
	case HostActivating, HostRollingBack:
		t.wake(h.Since.Add(confirm + time.Nanosecond)) // the confirm window closes
	case HostSoaking:
		t.wake(h.Since.Add(w.soak(h.Wave))) // the soak ends
	}
	if (h.State == HostActivating || h.State == HostRollingBack) && h.Blocked.Code != codes.ConfirmUnheard && t.heard(o) &&
		(h.Blocked.Gate == codes.Unheard || h.Blocked.Gate == codes.PartialVisibility) {
		t.block(w, i, Reason{}) // heard again: the silence hold is over
		h = &w.r.Hosts[i]
	}
	switch h.State {
	case HostRebooting:
		t.observeRebooting(w, i, matches)
	case HostActivating:
		switch {
		case matches && act.Outcome == OutcomeConfirmed:
			t.setHost(w, i, EvConfirm, Reason{Code: codes.Confirmed, Message: "the agent confirmed the switch"})
		case matches && act.Outcome == OutcomeFailed:
			t.setHost(w, i, EvActivationFailed, Reason{Code: codes.ActivationFailed, Message: detail("the activation failed", act.Detail)})
		case matches && act.Outcome == OutcomeManifestRejected:
			t.setHost(w, i, EvManifestRejected, Reason{Code: codes.ManifestRejected, Message: detail("the agent refused the rollout manifest", act.Detail)})
		case matches && act.Outcome == OutcomeRolledBack && act.Code == codes.ConfirmTimeout && t.blindWindow(w, h):
			t.setHost(w, i, EvConfirmUnheard, Reason{Code: codes.ConfirmUnheard,
				Message: detail("the agent rolled back when its confirm window closed while the control plane could not hear it; not a failure: it catches up", act.Detail)})
		case matches && act.Outcome == OutcomeRolledBack:
			t.setHost(w, i, EvAgentRolledBack, Reason{Code: codes.AgentRolledBack, Message: detail("the agent rolled back to its previous closure", act.Detail)})
		case matches && act.Outcome == OutcomeDeferred:
			t.setHost(w, i, EvDeferredReported, Reason{Code: codes.Deferred, Message: "the target is staged for the next boot"})
		case t.now.Sub(h.Since) <= confirm:
		case said.After(end) && o.Deferred && o.Current != h.Target:
			// It says it has a target staged for its next boot, which its
			// agent does after it reported it deferred: the store lost the
			// report (rule 7, rfcs/0013 rule 8).
			t.setHost(w, i, EvDeferredReported, Reason{Code: codes.Deferred,
				Message: "the target is staged for the next boot (the host says so; its report is not on record)"})
		case said.After(end) && o.Current != h.Target && t.blindWindow(w, h):
			// It says it left the target after a window the control plane
			// could not hear: its confirm may have been lost, and its agent
			// rolled back (its own safety). Not a failure; it catches up
			// like a skipped host. One that still runs the target is judged
			// below, like any other: what it says decides (rule 8).
			t.setHost(w, i, EvConfirmUnheard, Reason{Code: codes.ConfirmUnheard,
				Message: fmt.Sprintf("no confirmation within the %s confirm window, which ran while the control plane could not hear the host; not a failure: it catches up", confirm)})
		case said.After(end) && o.Current != h.Target:
			t.setHost(w, i, EvConfirmTimeout, Reason{Code: codes.ConfirmTimeout,
				Message: fmt.Sprintf("no confirmation within the %s confirm window", confirm)})
		case said.After(end.Add(t.in.Tunables.ConfirmGrace())):
			// It still runs the target well after its window closed, which
			// an agent without an accepted confirm does not (it rolls back
			// when the window closes): the confirm was accepted, and the
			// store lost it (rule 7, rfcs/0013 rule 8).
			t.setHost(w, i, EvConfirm, Reason{Code: codes.ConfirmInferred,
				Message: fmt.Sprintf("no confirmation on record, but the host still ran the target %s after its confirm window closed, which its agent does only after a confirm was accepted: the store lost the confirm", approx(said.Sub(end)))})
		case o.LastSeen.After(end) && t.heard(o):
			// Heard since the window closed, but what it runs then is not
			// known yet, or it runs the target and may still be rolling
			// back: what it says next decides.
			t.wake(end.Add(t.in.Tunables.ConfirmGrace()).Add(time.Nanosecond))
		case t.heard(o):
			// Not heard since the window closed, but not silent either: a
			// missing confirm of a host not heard from since is a verdict
			// on its silence, judged once it is offline (rule 6).
		case o.LastSeen.After(end) && !t.judges(w.r.Channel):
			// Heard after the window closed, then silent before what it
			// said decided, while silence is not judged: it waits, marked.
			t.block(w, i, t.silenceHold(w.r.Channel, "", "silent since "+stamp(o.LastSeen)+
				", before what it said after its confirm window closed decided"))
		case !t.judges(w.r.Channel):
			// Not heard since the window closed, and silence is not judged:
			// what the host says when it is heard again decides.
			t.block(w, i, t.silenceHold(w.r.Channel, codes.ConfirmUnheard, "the confirm window closed without a word from the host"))
		default:
			// A verdict on its silence (rule 6): whether it confirmed and
			// the store lost it, nobody can tell until it is heard again.
			t.setHost(w, i, EvConfirmTimeout, Reason{Code: codes.ConfirmTimeout,
				Message: fmt.Sprintf("no confirmation within the %s confirm window, and %s", confirm, heardLast(o))})
		}
	case HostSoaking:
		soak := w.soak(h.Wave)
		if (h.Blocked.Gate == codes.Unheard || h.Blocked.Gate == codes.PartialVisibility) && t.heard(o) {
			t.block(w, i, Reason{}) // heard again: the silence hold is over
			h = &w.r.Hosts[i]
		}
		switch {
		case matches && act.Outcome == OutcomeRolledBack:
			t.setHost(w, i, EvAgentRolledBack, Reason{Code: codes.AgentRolledBack, Message: detail("the agent rolled back to its previous closure", act.Detail)})
		case !t.heard(o) && !t.judges(w.r.Channel):
			// Silent, but the control plane cannot tell: the soak waits.
			t.block(w, i, t.silenceHold(w.r.Channel, "", "silent while soaking"))
		case !t.heard(o):
			t.setHost(w, i, EvUnhealthy, Reason{Code: codes.OfflineWhileSoaking, Message: "the host stopped checking in while soaking"})
		case said.Before(h.Since):
			// Health is judged from what the host said since the confirm:
			// a status from before describes the closure it left, and one
			// the host sent later may have been lost by the store.
		case unhealthy(o, w.r.HealthGate, h.Target) != "":
			t.setHost(w, i, EvUnhealthy, Reason{Code: codes.Unhealthy, Message: unhealthy(o, w.r.HealthGate, h.Target)})
		case t.now.Sub(h.Since) >= soak && !said.Before(h.Since.Add(soak)):
			t.setHost(w, i, EvSoaked, Reason{Code: codes.Soaked, Message: fmt.Sprintf("healthy for the %s soak", soak)})
		}
	case HostDeferred:
		switch {
		case matches && act.Outcome == OutcomeRolledBack:
			t.setHost(w, i, EvAgentRolledBack, Reason{Code: codes.AgentRolledBack, Message: detail("the agent rolled back to its previous closure", act.Detail)})
		case matches && act.Outcome == OutcomeFailed:
			t.setHost(w, i, EvActivationFailed, Reason{Code: codes.ActivationFailed, Message: detail("the boot into the target failed", act.Detail)})
		}
	case HostRollingBack:
		switch {
		case o.Current == h.Previous && said.After(h.Since):
			t.setHost(w, i, EvRolledBack, Reason{Code: codes.RolledBack, Message: "back on the previous closure " + h.Previous})
		case t.now.Sub(h.Since) <= confirm:
		case o.LastSeen.After(end) && !said.After(end) && t.heard(o):
			// Heard since the window closed, but what it runs then is not
			// known yet: what it says next decides.
		case !o.LastSeen.After(end) && t.heard(o):
			// Not heard since the window closed, and not silent yet.
		case !said.After(end) && !t.judges(w.r.Channel):
			// Silent, and nothing it said since the window closed decides,
			// while silence is not judged.
			t.block(w, i, t.silenceHold(w.r.Channel, "", "not back on the previous closure within the confirm window; "+heardLast(o)))
		default:
			t.setHost(w, i, EvRollbackTimeout, Reason{Code: codes.RollbackTimeout,
				Message: fmt.Sprintf("not seen on the previous closure within %s", confirm)})
		}
	}
}

// heardLast says when the control plane last heard a host.
func heardLast(o ObservedHost) string {
	if o.LastSeen.IsZero() {
		return "never heard"
	}
	return "not heard since " + stamp(o.LastSeen)
}

func detail(msg, d string) string {
	if d == "" {
		return msg
	}
	return msg + ": " + d
}

// unhealthy returns why o fails the health gate for target, or "".
func unhealthy(o ObservedHost, g proto.HealthGate, target string) string {
	var why []string
	if o.Current != target {
		why = append(why, fmt.Sprintf("runs %s, not the target", orNone(o.Current)))
	}
	if g.SystemdFailedUnits != nil && len(o.FailedUnits) > g.SystemdFailedUnits.Max {
		why = append(why, fmt.Sprintf("%d failed systemd unit(s) (%s), at most %d allowed",
			len(o.FailedUnits), strings.Join(sortedCopy(o.FailedUnits), ", "), g.SystemdFailedUnits.Max))
	}
	if len(o.Probes.Failed) > 0 {
		why = append(why, fmt.Sprintf("health probe(s) failing: %s", strings.Join(sortedCopy(o.Probes.Failed), ", ")))
	}
	if g.ComplianceProbes != nil && g.ComplianceProbes.Required {
		if f := failingControls(o.Compliance, target, ControlRuntime, nil); len(f) > 0 {
			why = append(why, "compliance control(s) failing: "+strings.Join(f, ", "))
		}
	}
	return strings.Join(why, "; ")
}

// failingControls lists the failing compliance controls of a kind
// (static or runtime; "both" counts as either) for a closure, restricted
// to frameworks when given.
func failingControls(results []ComplianceResult, closure, kind string, frameworks []string) []string {
	var out []string
	for _, c := range results {
		if c.Passed || c.Closure != closure || (c.Type != kind && c.Type != ControlBoth) {
			continue
		}
		if len(frameworks) > 0 && c.Framework != "" && !slices.Contains(frameworks, c.Framework) {
			continue
		}
		name := c.Control
		if c.Framework != "" {
			name += " (" + c.Framework + ")"
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func orNone(s string) string {
	if s == "" {
		return "nothing known"
	}
	return s
}

func (w *work) soak(wave int) time.Duration { return w.r.WaveSoak(wave) }

// failures counts the hosts that failed the rollout: Failed (except a
// rollback that timed out during a revert), and Reverted by their own
// agent.
func (w *work) failures() int {
	n := 0
	for _, h := range w.r.Hosts {
		switch {
		case h.State == HostFailed && h.Reason.Code != codes.RollbackTimeout:
			n++
		case h.State == HostReverted && h.Reason.Code == codes.AgentRolledBack:
			n++
		}
	}
	return n
}

func (w *work) maxFailures() int {
	if m := w.r.HealthGate.MaxFailures; m != nil && *m > 0 {
		return *m
	}
	return 0
}

func (t *tick) healthPolicy(w *work) {
	rollback := w.r.OnHealthFailure == proto.OnHealthFailureRollbackAndHalt
	// A rollout paused or stalled still reverts when its hosts fail; one
	// whose revert stalled stays halted for an operator. A converged one
	// still catches up skipped hosts while it is the channel's latest:
	// their failures count too (rule 9), when one happens (a failure
	// recorded before is not judged again).
	haltedMayRevert := w.r.State == RolloutHalted && rollback && w.r.Reason.Code != codes.RevertStalled
	catchingUp := w.r.State == RolloutConverged && w.latest && w.failures() > w.failed0
	if w.r.State != RolloutActive && !haltedMayRevert && !catchingUp {
		return
	}
	failed := w.failures() - w.r.FailuresForgiven
	if failed <= w.maxFailures() {
		return
	}
	reason := Reason{Code: codes.HealthFailure, Message: fmt.Sprintf("%d host(s) failed, healthGate.maxFailures is %d; onHealthFailure is %s",
		failed, w.maxFailures(), cmp.Or(w.r.OnHealthFailure, proto.OnHealthFailureHalt))}
	if rollback {
		t.setRollout(w, EvRollback, reason)
	} else {
		t.setRollout(w, EvHealthHalt, reason)
	}
}
