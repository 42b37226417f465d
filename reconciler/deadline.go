package reconciler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"
)

// Step 4b of a tick (rfcs/0003 §The tick, rule 11): readiness deadlines.

// deadline halts a rollout that made no progress for the readiness
// deadline (rule 11). The time runs from the last progress, the start of
// the wave, or the start of the control plane's watch, whichever is
// latest: a control plane that was down did not see the fleet move.
func (t *tick) deadline(w *work) {
	limit := t.in.Tunables.readiness()
	start := w.r.ProgressAt
	if t.in.WatchingSince.After(start) {
		start = t.in.WatchingSince
	}
	switch w.r.State {
	case RolloutActive:
		if msg, ok := t.unprovable(w); ok {
			t.setRollout(w, EvStalled, Reason{Code: codes.WaveUnprovable, Message: msg})
			return
		}
		if w.r.WaveStartedAt.After(start) {
			start = w.r.WaveStartedAt
		}
		limit += w.soak(w.r.Wave)
		if t.now.Sub(start) <= limit {
			t.wake(start.Add(limit + time.Nanosecond))
			return
		}
		wave := min(max(w.r.Wave, 0), len(w.waves)-1)
		// A wave that waits for a window, the end of a freeze or its
		// approvals is not stalled: it moves when the time comes, or the
		// approvers (rules 13–15).
		for _, i := range w.waves[wave] {
			if h := w.r.Hosts[i]; (h.State == HostPending || h.State == HostDeferred) && (h.Blocked.Gate == codes.Window || h.Blocked.Gate == codes.Freeze || h.Blocked.Gate == codes.Approval) {
				return
			}
		}
		counts := map[string]int{}
		stuck, busy := false, false
		seen := map[int]bool{}
		for _, i := range w.waves[wave] {
			h := w.r.Hosts[i]
			switch {
			case h.State == HostPending:
				counts["held by "+cmp.Or(h.Blocked.Gate, "nothing yet")]++
				stuck = stuck || w.stuck(i, seen)
				busy = true
			case h.State.InFlight() && h.Blocked.Gate == codes.PartialVisibility:
				// Silent in flight, held by partial visibility: it moves
				// only when the channel is heard again.
				counts[strings.ToLower(string(h.State))+" and silent"]++
				stuck = true
			case h.State.InFlight():
				counts[strings.ToLower(string(h.State))]++
				busy = true
			case h.State == HostDeferred && w.r.RebootOf(wave).Managed:
				// Staged, waiting for its reboot order (rule 17): for the
				// fleet to move, or its next check-in. A silent one does
				// not hold its wave, like a Skipped host: it is counted,
				// neither busy nor stuck. Anything else (quarantine,
				// compliance) does not clear by itself.
				counts["deferred, held by "+cmp.Or(h.Blocked.Gate, "nothing yet")]++
				switch h.Blocked.Gate {
				case "", codes.Budget, codes.Busy, codes.HostEdge, codes.ChannelEdge:
					busy = true
				case codes.Unheard, codes.PartialVisibility:
				default:
					stuck = true
				}
			case h.State == HostConverged:
			default:
				counts[strings.ToLower(string(h.State))]++
			}
		}
		converged, need := w.evidence(wave)
		// A wave with nothing left to dispatch or watch that still lacks
		// evidence (its hosts are away, deferred or failed), or that
		// partial visibility keeps from promotion, waits for something
		// that may never come.
		stuck = stuck || (!busy && (converged < need || t.partial[w.r.Channel]))
		if !stuck {
			// Hosts held by a predecessor channel, by budget slots that
			// hosts in flight hold, or by a predecessor host that can
			// still converge are waiting for the fleet to move.
			return
		}
		msg := fmt.Sprintf("%s made no progress for %s: %s; %d of the %d host(s) it needs converged on a new closure to be promoted",
			w.waveLabel(w.r.Wave), limit, summarize(counts), converged, need)
		if t.partial[w.r.Channel] {
			msg += fmt.Sprintf("; channel %s is in partial visibility", w.r.Channel)
		}
		t.setRollout(w, EvStalled, Reason{Code: codes.WaveStalled, Message: msg})
	case RolloutReverting:
		// A host Rebooting within its boot timeout is a boot under way,
		// which the revert waits for: the time runs from its boot-by.
		for i, h := range w.r.Hosts {
			if by := w.r.RebootOf(h.Wave).BootBy(h.Since, t.in.Tunables); h.State == HostRebooting && w.needsRollback(i) && by.After(start) {
				start = by
			}
		}
		t.wake(start.Add(limit + time.Nanosecond))
		if t.now.Sub(start) > limit {
			t.setRollout(w, EvStalled, Reason{Code: codes.RevertStalled,
				Message: fmt.Sprintf("the revert made no progress for %s", limit)})
		}
	}
}

// unprovable reports why an Active rollout's current wave can never be
// promoted, with no deadline to wait for (rule 11): it lacks evidence, and
// every one of its hosts that is not converged failed (Failed, or Reverted
// by its agent). Nothing is left to dispatch, watch or catch up, so
// nothing can bring the evidence; a resume that forgave its failures finds
// it so at once. A wave with hosts Pending, in flight, Skipped or
// Deferred, or in a channel in partial visibility, waits for its deadline
// instead: they may still bring it.
func (t *tick) unprovable(w *work) (string, bool) {
	wave := min(max(w.r.Wave, 0), len(w.waves)-1)
	if wave < 0 || t.partial[w.r.Channel] {
		return "", false
	}
	return unprovableWave(&w.r, w.waves[wave])
}

// unprovableWave is unprovable for the hosts of one wave, by index in
// r.Hosts: why it can never be promoted, or false.
func unprovableWave(r *Rollout, wave []int) (string, bool) {
	if len(wave) == 0 {
		return "", false
	}
	failed := 0
	for _, i := range wave {
		switch h := r.Hosts[i]; {
		case h.State == HostConverged:
		case h.State == HostFailed, h.State == HostReverted && h.Reason.Code == codes.AgentRolledBack:
			failed++
		default:
			return "", false
		}
	}
	converged, need := evidenceOf(r, wave)
	if failed == 0 || converged >= need {
		return "", false
	}
	return fmt.Sprintf("%s can no longer be promoted: %d of the %d host(s) it needs converged on a new closure, and no other can: "+
		"%d failed, nothing is left to dispatch or watch", waveLabelOf(r, r.Wave), converged, need, failed), true
}

// stuck reports whether a Pending host is held by something that will not
// clear by itself: a quarantine, failing compliance of an earlier wave,
// partial visibility that outlasted the deadline, a predecessor host that
// cannot converge any more (Failed, Reverted, Skipped, or Deferred in a
// wave where the control plane orders no reboot: rule 17) or cannot be
// dispatched before this host's wave
// (an edge against wave order), or nothing at all. seen holds the hosts
// already looked at in this walk, so shared predecessors are walked once.
func (w *work) stuck(i int, seen map[int]bool) bool {
	if seen[i] {
		return false // walked already: if it were stuck, the walk would have ended
	}
	seen[i] = true
	switch w.r.Hosts[i].Blocked.Gate {
	case codes.Quarantined, codes.ComplianceEarlierWave, codes.PartialVisibility, "":
		return true
	case codes.HostEdge:
		for _, p := range w.preds[i] {
			switch pred := w.r.Hosts[p]; pred.State {
			case HostFailed, HostReverted, HostSkipped:
				return true
			case HostDeferred:
				if !w.r.RebootOf(pred.Wave).Managed {
					return true
				}
			case HostPending:
				if pred.Wave > w.r.Hosts[i].Wave || w.stuck(p, seen) {
					return true
				}
			}
		}
	}
	return false
}

func summarize(counts map[string]int) string {
	if len(counts) == 0 {
		return "no host is waiting or away"
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", counts[k], k)
	}
	return strings.Join(parts, ", ")
}
