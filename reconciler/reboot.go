package reconciler

import (
	"fmt"
	"time"

	"github.com/nixfleet/nixfleet/codes"
)

// Rule 17 (rfcs/0003): a host whose target is staged for its next boot
// (Deferred) in a wave whose policy lets the control plane reboot is
// ordered to boot once into it, under the gates of a dispatch: the
// rollout is Active (or Converged and catching up), the host is heard and
// says the target is staged, its channel is not in partial visibility,
// and no freeze, window, host edge or budget holds it. From the order
// until its health is judged on the new boot it is in flight (Rebooting,
// then Soaking). A boot that does not come up — the agent says so, or the
// host is not on its target bootTimeout after the order — is a failure:
// onHealthFailure applies. A host still staged on its previous closure
// after an order the control plane could not hear is staged again, with
// no failure.

// rebootHosts orders the reboots of a rollout's staged hosts that pass
// the gates, in (wave, hostname) order like dispatchHosts.
func (t *tick) rebootHosts(w *work) {
	if w.r.Reboot == nil || !w.counting {
		return
	}
	edge := t.channelBlocker(w.r.Channel)
	failWave := t.complianceFailWave(w)
	// Staged hosts are in the waves up to the current one; only the waves
	// the policy reboots are walked.
	for wave := range min(w.r.Wave+1, len(w.waves)) {
		if !w.r.RebootOf(wave).Managed {
			continue
		}
		for _, i := range w.waves[wave] {
			h := &w.r.Hosts[i]
			if h.State != HostDeferred {
				continue
			}
			if t.spent() {
				return
			}
			o := t.obs[h.Hostname]
			if o.Booted == h.Target && o.Current == h.Target {
				continue // someone booted it into its target: finishDeferred takes it
			}
			if why := t.earlyGate(w, i, edge); why.Gate != "" {
				t.block(w, i, why)
				continue
			}
			if t.partial[w.r.Channel] {
				t.block(w, i, t.visibilityBlock(w.r.Channel))
				continue
			}
			if !t.heard(o) {
				// Never for silence: a host not heard is not rebooted, and
				// its staged target waits for it (rule 6).
				t.block(w, i, Reason{Gate: codes.Unheard, Code: codes.Unheard, Message: "not rebooted while it is not heard: " + heardLast(o)})
				continue
			}
			if said := o.Said(); !said.Before(o.LastSeen) && !said.Before(stagedAt(w, h, o)) && !o.Deferred && o.Current != h.Target {
				// It says, since it staged, that nothing is staged: its
				// agent dropped the target (a restart without its state,
				// a newer target) and runs its previous closure. No
				// failure of the release.
				t.setHost(w, i, EvAgentRolledBack, Reason{Code: codes.StagedTargetLost,
					Message: "its check-in since it staged says nothing is staged any more: it runs " + orNone(o.Current)})
				continue
			}
			if why := t.lateGate(w, i, failWave); why.Gate != "" {
				t.block(w, i, why)
				continue
			}
			if o.Said().Before(o.LastSeen) || !o.Deferred || o.Said().Before(stagedAt(w, h, o)) {
				// What it runs now decides whether a reboot is still what
				// it needs: a check-in since it staged this target says so
				// (one from before may speak of another staged target).
				// A wait for the next check-in, not a gate: not journalled.
				t.block(w, i, Reason{Code: codes.Deferred,
					Message: "rebooted once a check-in since it staged its target says the target is still staged"})
				continue
			}
			spec := w.r.RebootOf(h.Wave)
			how := "a reboot"
			if spec.Kexec {
				how = "a kexec (or a reboot where the host cannot)"
			}
			t.setHost(w, i, EvRebootDispatch, Reason{Code: codes.RebootDispatched,
				Message: fmt.Sprintf("told to boot once into its staged target by %s; it must check in on the new boot within %s", how, approx(spec.Timeout))})
			t.takeNoted(w, i)
			h = &w.r.Hosts[i]
			t.actions = append(t.actions, HostAction{Host: h.Hostname, RolloutID: w.r.ID, Kind: ActionReboot,
				Target: h.Target, Wave: h.Wave, Reason: h.Reason})
		}
	}
}

// observeRebooting moves a Rebooting host on what it says: on its target
// after the order, it soaks (its health is judged from the new boot); the
// agent's word that the boot failed, or bootTimeout passing without the
// host on its target, fails it (rule 9 then applies), unless the control
// plane could not hear it and it says its target is still staged: then it
// is Deferred again; silence while silence is not judged holds it, and
// decides nothing.
func (t *tick) observeRebooting(w *work, i int, matches bool) {
	h := &w.r.Hosts[i]
	o := t.obs[h.Hostname]
	act := o.Activation
	said := o.Said()
	end := w.r.RebootOf(h.Wave).BootBy(h.Since, t.in.Tunables)
	timeout := end.Sub(h.Since)
	t.wake(end.Add(time.Nanosecond))
	if (h.Blocked.Gate == codes.Unheard || h.Blocked.Gate == codes.PartialVisibility) && t.heard(o) {
		t.block(w, i, Reason{}) // heard again: the silence hold is over
		h = &w.r.Hosts[i]
	}
	switch {
	case matches && (act.Outcome == OutcomeBootFailed || act.Outcome == OutcomeFailed || act.Outcome == OutcomeManifestRejected):
		// An agent that does not know reboot targets says failed.
		t.setHost(w, i, EvBootFailed, Reason{Code: codes.BootFailed, Message: detail("the boot into the target failed", act.Detail)})
	case matches && act.Outcome == OutcomeRolledBack:
		t.setHost(w, i, EvAgentRolledBack, Reason{Code: codes.AgentRolledBack, Message: detail("the agent rebooted back into its previous closure", act.Detail)})
	case said.After(h.Since) && o.Current == h.Target && o.Booted == h.Target,
		matches && act.Outcome == OutcomeConfirmed:
		t.setHost(w, i, EvBootedIntoTarget, Reason{Code: codes.BootedIntoTarget, Message: "booted into the target; soaking"})
	case !t.now.After(end):
	case said.After(end) && o.Deferred && o.Current != h.Target && t.blindWindow(w, h):
		// It says, after bootTimeout, that its target is still staged
		// and it runs its previous closure, and the control plane could
		// not hear it meanwhile: it may never have had the order, and its
		// agent refuses one past its deadline. Not a failure: it is
		// staged again, and rebooted under the gates like any staged host.
		t.setHost(w, i, EvDeferredReported, Reason{Code: codes.RebootUnheard,
			Message: fmt.Sprintf("its target is still staged and it runs its previous closure %s after the reboot order, a time the control plane could not hear the host; not a failure: it is ordered to reboot again under the gates", approx(timeout))})
	case said.After(end):
		t.setHost(w, i, EvBootFailed, Reason{Code: codes.BootTimeout,
			Message: fmt.Sprintf("not on its target %s after the reboot order: it runs %s, booted %s", approx(timeout), orNone(o.Current), orNone(o.Booted))})
	case t.heard(o):
		// Not silent: what it says next decides, or, when it goes silent,
		// its silence (rule 6).
	case !t.judges(w.r.Channel):
		t.block(w, i, t.silenceHold(w.r.Channel, "", "no word from the new boot within "+approx(timeout)))
	default:
		t.setHost(w, i, EvBootFailed, Reason{Code: codes.BootTimeout,
			Message: fmt.Sprintf("no check-in on the new boot within %s of the reboot order; %s", approx(timeout), heardLast(o))})
	}
}

// stagedAt is when a Deferred host staged its target, as far as the
// control plane knows: its agent's deferred report, or, when the store
// lost that, when the host became Deferred.
func stagedAt(w *work, h *RolloutHost, o ObservedHost) time.Time {
	if act := o.Activation; act != nil && act.RolloutID == w.r.ID && act.Closure == h.Target && act.Outcome == OutcomeDeferred &&
		act.At.Before(h.Since) {
		return act.At
	}
	return h.Since
}
