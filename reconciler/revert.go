package reconciler

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/nixfleet/nixfleet/codes"
)

// Reverting rollouts (rfcs/0003 rule 9): hosts that moved are sent back to
// their previous closure, latest wave first, in reverse edge order, under
// the budgets.

// revert sends the hosts that moved back to their previous closure, in
// reverse edge order and under the budgets, and ends the revert when all
// are back (rule 9).
func (t *tick) revert(w *work) {
	order := make([]int, len(w.r.Hosts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(w.r.Hosts[b].Wave, w.r.Hosts[a].Wave) })
	// Failed hosts already back need no rollback. They are settled first,
	// so that a host they gate is free to go before the budgets are given
	// out, whether or not the tick is cut short in between: ticks cut at
	// their bound then end where one tick ends (rule 12).
	for _, i := range order {
		h := &w.r.Hosts[i]
		if !w.needsRollback(i) || h.State != HostFailed {
			continue
		}
		if o := t.obs[h.Hostname]; o.Current == h.Previous && !o.Said().Before(h.Since) {
			if t.spent() {
				return
			}
			t.setHost(w, i, EvRolledBack, Reason{Code: codes.RolledBack, Message: "already back on the previous closure " + h.Previous})
		}
	}
	remaining := 0
	for _, i := range order {
		h := &w.r.Hosts[i]
		o := t.obs[h.Hostname]
		if !w.needsRollback(i) {
			continue
		}
		if t.spent() {
			return // the next tick goes on, and ends the revert
		}
		remaining++
		if h.State == HostActivating || h.State == HostRollingBack || h.State == HostRebooting {
			continue // let the switch, or the boot, finish first
		}
		if h.State == HostFailed && h.Reason.Code == codes.RollbackTimeout && !h.Since.Before(w.r.UpdatedAt) {
			continue // tried in this revert already; the deadline will report it
		}
		if !t.heard(o) && !t.judges(w.r.Channel) {
			// A rollback sent into silence would hold its budget slots
			// until the host is heard; it waits instead (a soaking host
			// carries its silence hold already).
			if !h.State.InFlight() {
				t.block(w, i, t.unheardBlock(w, o))
			}
			continue
		}
		if h.Previous == "" {
			t.block(w, i, Reason{Gate: codes.NoPreviousClosure, Code: codes.NoPreviousClosure, Message: "the host reported no closure before it was dispatched; nothing to roll back to"})
			continue
		}
		if s := w.pendingSuccessor(i); s >= 0 {
			t.block(w, i, Reason{Gate: codes.RollbackOrder, Code: codes.RollbackOrder,
				Message: fmt.Sprintf("%s, which it gates, is rolled back first", w.r.Hosts[s].Hostname)})
			continue
		}
		if other := t.busy(w, h.Hostname); other != nil {
			t.block(w, i, Reason{Gate: codes.Busy, Code: codes.Busy, Message: "in flight in " + other.r.ID})
			continue
		}
		wasInFlight := h.State.InFlight()
		if g := t.full(w, i); g != nil && !wasInFlight {
			t.block(w, i, budgetBlock(g))
			continue
		}
		t.setHost(w, i, EvRollbackDispatch, Reason{Code: codes.RollbackDispatched, Message: "rolling back to " + h.Previous})
		h = &w.r.Hosts[i]
		if !wasInFlight {
			t.take(w, i) // a soaking host already holds its slots
		}
		t.actions = append(t.actions, HostAction{Host: h.Hostname, RolloutID: w.r.ID, Kind: ActionRollback,
			Target: h.Previous, Wave: h.Wave, Reason: h.Reason})
	}
	if remaining == 0 {
		// The operator who rolled it back stays credited with the end.
		done := Reason{Code: codes.Reverted, Message: "every host that moved is back on its previous closure", Actor: w.r.Reason.Actor}
		if done.Actor != "" {
			done.Message += " (rolled back by " + done.Actor + ")"
		}
		t.setRollout(w, EvRevertDone, done)
	}
}

// needsRollback reports whether a host of a reverting rollout still has to
// go back: it was dispatched, is not back, and had a different closure
// before.
func (w *work) needsRollback(i int) bool {
	h := w.r.Hosts[i]
	switch h.State {
	case HostActivating, HostSoaking, HostConverged, HostDeferred, HostRollingBack, HostFailed, HostRebooting:
	default:
		return false
	}
	return h.Previous != h.Target
}

// pendingSuccessor returns a host this one gates that still needs its
// rollback, or -1.
func (w *work) pendingSuccessor(i int) int {
	for _, s := range w.succs[i] {
		if w.needsRollback(s) {
			return s
		}
	}
	return -1
}
