package reconciler

import (
	"fmt"

	"github.com/nixfleet/nixfleet/codes"
)

// Step 4a of a tick (rfcs/0003 §The tick): a rollout's waves are promoted
// on evidence, its Pending and Skipped hosts pass the gates (rule 4) and are
// dispatched, and deferred hosts that rebooted into their target soak.

func (t *tick) dispatch(w *work) {
	switch w.r.State {
	case RolloutActive:
		// Staged hosts are rebooted before new hosts are dispatched: what
		// is half done finishes first (rule 17).
		t.rebootHosts(w)
		t.advance(w)
		t.finishDeferred(w)
		if !t.cut && t.promotable(w, w.r.Wave) {
			// A deferred host that finished completed the wave: the next
			// wave starts in this step, as the next tick would start it,
			// before another rollout takes the budgets it frees.
			t.advance(w)
		}
		t.updatePhase(w)
	case RolloutConverged:
		// Skipped hosts catch up with the channel's current target: this
		// rollout's, unless a newer ref is about to replace it.
		if w.latest && !t.pendingRef(w.r.Channel) {
			t.rebootHosts(w)
			t.dispatchHosts(w)
		}
		t.finishDeferred(w)
	case RolloutHalted, RolloutCancelled:
		t.finishDeferred(w)
	case RolloutReverting:
		t.revert(w)
	}
}

// advance promotes finished waves and dispatches, until the current wave
// waits on something (rules 4, 6, 8, 11).
func (t *tick) advance(w *work) {
	for {
		for t.promotable(w, w.r.Wave) {
			if w.r.Wave >= len(w.waves)-1 {
				t.setRollout(w, EvLastWaveDone, Reason{Code: codes.Converged, Message: fmt.Sprintf("all %d wave(s) promoted", len(w.waves))})
				if !t.pendingRef(w.r.Channel) {
					t.dispatchHosts(w) // skipped hosts that are back catch up at once
				}
				return
			}
			t.emit(Event{Kind: EventWavePromoted, RolloutID: w.r.ID, Channel: w.r.Channel, Wave: w.r.Wave,
				Reason: Reason{Code: codes.WavePromoted, Message: fmt.Sprintf("%s done; %s starts", w.waveLabel(w.r.Wave), w.waveLabel(w.r.Wave+1))}})
			w.r.Wave++
			w.r.WaveStartedAt, w.r.ProgressAt, w.changed = t.now, t.now, true
			t.waveStarts(w)
		}
		t.dispatchHosts(w)
		if !t.promotable(w, w.r.Wave) {
			return
		}
	}
}

// promotable reports whether a wave may be promoted (rule 8): no host of
// it is still to be dispatched, rebooted or watched (Skipped hosts do not
// hold it back, nor Deferred ones that nobody reboots: rule 17), enough of its hosts converged on the target to prove
// the release (evidence), its channel is not in partial visibility, and
// every analysis of the wave succeeded (rule 16).
func (t *tick) promotable(w *work, wave int) bool {
	if wave < 0 || wave >= len(w.waves) {
		return true
	}
	managed := w.r.RebootOf(wave).Managed
	for _, i := range w.waves[wave] {
		switch w.r.Hosts[i].State {
		case HostPending, HostActivating, HostSoaking, HostRollingBack, HostRebooting:
			return false
		case HostDeferred:
			// A staged host the control plane reboots holds its wave
			// while it is heard; a silent one does not, like a skipped
			// one, and is rebooted when it is heard again.
			if managed && t.heard(t.obs[w.r.Hosts[i].Hostname]) {
				return false
			}
		}
	}
	proven, need := w.evidence(wave)
	return proven >= need && !t.partial[w.r.Channel] && !w.analysisHolds(wave)
}

// evidence counts a wave's proof, and how much it needs before the next
// wave starts. Proof is a host that converged on a target different from
// the closure it ran (a host the release did not change proves nothing).
// The need is one host, or healthGate.minConverged, or minConvergedPct of
// the wave (rounded up), whichever is most — and never more than the
// wave's hosts that are not converged and unchanged: a wave the release
// changes nowhere needs no proof.
func (w *work) evidence(wave int) (proven, need int) {
	return evidenceOf(&w.r, w.waves[wave])
}

// evidenceOf is evidence for the hosts of one wave, by index in r.Hosts.
func evidenceOf(r *Rollout, wave []int) (proven, need int) {
	n, unchanged := len(wave), 0
	for _, i := range wave {
		if h := r.Hosts[i]; h.State == HostConverged {
			if h.Previous == h.Target {
				unchanged++
			} else {
				proven++
			}
		}
	}
	need = 1
	if m := r.HealthGate.MinConverged; m != nil {
		need = max(need, *m)
	}
	if p := r.HealthGate.MinConvergedPct; p != nil {
		need = max(need, (n**p+99)/100)
	}
	return proven, min(need, n-unchanged)
}

func (t *tick) updatePhase(w *work) {
	if w.r.State != RolloutActive {
		return
	}
	phase := PhaseSoaking
	for _, i := range w.waves[min(max(w.r.Wave, 0), len(w.waves)-1)] {
		if w.r.Hosts[i].State == HostPending {
			phase = PhaseDispatching
			break
		}
	}
	if phase != w.r.WavePhase {
		w.r.WavePhase, w.changed = phase, true
	}
}

// dispatchHosts passes the rollout's Pending hosts, and Skipped hosts that
// are back, through the gates in (wave, hostname) order. A host of a wave
// that is not active is only checked for the gates before the wave gate
// (its observation is not needed otherwise: most hosts of a big rollout
// are in such waves).
func (t *tick) dispatchHosts(w *work) {
	edge := t.channelBlocker(w.r.Channel)
	failWave := t.complianceFailWave(w)
	for _, idxs := range w.waves {
		for _, i := range idxs {
			h := &w.r.Hosts[i]
			if h.State != HostPending && h.State != HostSkipped {
				continue
			}
			if t.spent() {
				return
			}
			if h.Wave > w.r.Wave {
				t.block(w, i, t.gate(w, i, edge, failWave))
				continue
			}
			o := t.obs[h.Hostname]
			heard := t.heard(o)
			if h.State == HostSkipped && !heard {
				t.block(w, i, Reason{}) // away: nothing holds it but its absence
				continue
			}
			// Gates 0–2, then partial visibility (nothing is skipped or
			// dispatched), then silence, then the rest (rules 4 and 6).
			if why := t.earlyGate(w, i, edge); why.Gate != "" {
				t.block(w, i, why)
				continue
			}
			if t.partial[w.r.Channel] {
				t.block(w, i, t.visibilityBlock(w.r.Channel))
				continue
			}
			if !heard {
				if t.judges(w.r.Channel) {
					t.setHost(w, i, EvSkip, Reason{Code: codes.Offline, Message: "offline when its wave was active; it catches up when it returns"})
				} else {
					t.block(w, i, t.unheardBlock(w, o))
				}
				continue
			}
			if o.Said().Before(o.LastSeen) {
				// What it runs is not known: a check-in since carried another
				// status than the one held (a write the store lost). It is
				// dispatched once that is written again, so that its previous
				// closure, its rollback target, is what it runs (rule 8).
				t.block(w, i, Reason{Gate: codes.Unheard, Code: codes.Unheard,
					Message: "what it runs is not known: its last check-in carried a status the control plane does not hold (a write it lost), which its next check-in writes again"})
				continue
			}
			if why := t.lateGate(w, i, failWave); why.Gate != "" {
				t.block(w, i, why)
				continue
			}
			code, msg := codes.Dispatched, "dispatched to "+h.Target
			if h.State == HostSkipped {
				code, msg = codes.CatchUp, "back online; dispatched to the channel's current target "+h.Target
			}
			t.touch(w, i)
			h = &w.r.Hosts[i]
			h.Previous = o.Current
			t.setHost(w, i, EvDispatch, Reason{Code: code, Message: msg})
			t.takeNoted(w, i)
			t.actions = append(t.actions, HostAction{Host: h.Hostname, RolloutID: w.r.ID, Kind: ActionDispatch,
				Target: h.Target, Wave: h.Wave, Reason: h.Reason})
		}
	}
}

// waveLabel is "wave 1", or "wave 1 (canary)" when the policy names it.
func (w *work) waveLabel(i int) string { return waveLabelOf(&w.r, i) }

// waveLabelOf names wave i of r: "wave 1 (canary)", or "wave 1".
func waveLabelOf(r *Rollout, i int) string {
	if i >= 0 && i < len(r.Waves) && r.Waves[i].Name != "" {
		return fmt.Sprintf("wave %d (%s)", i, r.Waves[i].Name)
	}
	return fmt.Sprintf("wave %d", i)
}

// gate returns the first gate that holds a host (rule 4), or a zero Reason.
func (t *tick) gate(w *work, i int, edge *blocker, failWave int) Reason {
	if why := t.earlyGate(w, i, edge); why.Gate != "" {
		return why
	}
	h := &w.r.Hosts[i]
	if h.Wave > w.r.Wave {
		why, ok := w.waveMsg[h.Wave]
		if !ok {
			why = Reason{Gate: codes.WaveNotActive, Code: codes.WaveNotActive, Message: w.waveLabel(h.Wave) + " is not active yet"}
			w.waveMsg[h.Wave] = why
		}
		return why
	}
	if t.partial[w.r.Channel] {
		return t.visibilityBlock(w.r.Channel)
	}
	return t.lateGate(w, i, failWave)
}

// quarantined returns the quarantines a host reports. The hosts that
// report any are found once per tick, when the first host is gated: a
// walk over every observed host costs less than a lookup for each of the
// hosts a tick may gate, and a tick that gates none pays neither.
func (t *tick) quarantined(name string) []Quarantine {
	if t.quarantine == nil {
		t.quarantine = map[string][]Quarantine{}
		for host, o := range t.obs {
			if len(o.Quarantine) > 0 {
				t.quarantine[host] = o.Quarantine
			}
		}
	}
	return t.quarantine[name]
}

// earlyGate returns the first of gates 0–2 (busy, quarantined,
// channel_edge) that holds a host, or a zero Reason.
func (t *tick) earlyGate(w *work, i int, edge *blocker) Reason {
	h := &w.r.Hosts[i]
	if other := t.busy(w, h.Hostname); other != nil {
		return Reason{Gate: codes.Busy, Code: codes.Busy, Message: "in flight in " + other.r.ID}
	}
	for _, q := range t.quarantined(h.Hostname) {
		if q.Closure == h.Target && q.Until.After(t.now) {
			t.wake(q.Until)
			return Reason{Gate: codes.Quarantined, Code: codes.Quarantined,
				Message: fmt.Sprintf("%s failed on this host; quarantined until %s", h.Target, q.Until.UTC().Format("2006-01-02T15:04:05Z"))}
		}
	}
	if edge != nil {
		return Reason{Gate: codes.ChannelEdge, Code: codes.ChannelEdge,
			Message: fmt.Sprintf("channel %s waits for channel %s: %s", w.r.Channel, edge.channel, edge.stable)}
	}
	return Reason{}
}

// lateGate returns the first of the time gates (freeze, window: rules 13
// and 14) and gates 5–7 (host_edge, budget, compliance_earlier_wave) that
// holds a host, or a zero Reason.
func (t *tick) lateGate(w *work, i int, failWave int) Reason {
	if why := t.timeGate(w, i); why.Gate != "" {
		return why
	}
	h := &w.r.Hosts[i]
	for _, p := range w.preds[i] {
		if w.r.Hosts[p].State != HostConverged {
			return Reason{Gate: codes.HostEdge, Code: codes.HostEdge,
				Message: fmt.Sprintf("waits for %s to converge", w.r.Hosts[p].Hostname)}
		}
	}
	if g := t.full(w, i); g != nil {
		return budgetBlock(g)
	}
	if failWave >= 0 && failWave < h.Wave {
		return Reason{Gate: codes.ComplianceEarlierWave, Code: codes.ComplianceEarlierWave,
			Message: fmt.Sprintf("a converged host of %s fails runtime compliance", w.waveLabel(failWave))}
	}
	return Reason{}
}

// complianceFailWave is the earliest wave with a converged host failing
// runtime compliance, or -1; only when the health gate requires
// compliance probes.
func (t *tick) complianceFailWave(w *work) int {
	if g := w.r.HealthGate.ComplianceProbes; g == nil || !g.Required {
		return -1
	}
	for wave, idxs := range w.waves {
		for _, i := range idxs {
			h := w.r.Hosts[i]
			if h.State == HostConverged && len(failingControls(t.obs[h.Hostname].Compliance, h.Target, ControlRuntime, nil)) > 0 {
				return wave
			}
		}
	}
	return -1
}

// finishDeferred moves deferred hosts that rebooted into their target to
// Soaking, when their budgets have room (rule 7). Only a rollout whose
// budgets count in this pass can take a host back into flight: an older
// converged one leaves its deferred hosts to the rollout that replaced it.
func (t *tick) finishDeferred(w *work) {
	if !w.counting {
		return
	}
	for i := range w.r.Hosts {
		h := &w.r.Hosts[i]
		if h.State != HostDeferred {
			continue
		}
		if t.spent() {
			return
		}
		o := t.obs[h.Hostname]
		if o.Current != h.Target || o.Booted != h.Target || o.Said().Before(h.Since) {
			continue
		}
		if other := t.busy(w, h.Hostname); other != nil {
			continue // another rollout drives the host now
		}
		if g := t.full(w, i); g != nil {
			t.block(w, i, budgetBlock(g))
			continue
		}
		t.setHost(w, i, EvBootedIntoTarget, Reason{Code: codes.BootedIntoTarget, Message: "rebooted into the target; soaking"})
		t.takeNoted(w, i)
		if t.observeHost(w, i); !w.r.Hosts[i].State.InFlight() {
			t.untake(w, i) // soaked at once (no soak time)
		}
	}
}
