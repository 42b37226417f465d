package reconciler

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/nixfleet/nixfleet/proto"
)

// budgetGroup is one disruption budget across every rollout that carries
// it: budgets are the same budget when their selectors are equal (rule 5).
type budgetGroup struct {
	label    string
	limit    int
	inflight int
	why      Reason // the block reason, made once
}

// budgetLimit is one frozen budget's cap: maxInFlight and
// maxInFlightPct of its hosts (rounded down, at least 1) both apply.
func budgetLimit(b proto.RolloutBudget) int {
	limit := math.MaxInt
	if b.MaxInFlight != nil {
		limit = min(limit, max(*b.MaxInFlight, 0))
	}
	if b.MaxInFlightPct != nil {
		limit = min(limit, max(len(b.Hosts)*(*b.MaxInFlightPct)/100, 1))
	}
	return limit
}

func selectorKey(s proto.Selector) string {
	b, _ := json.Marshal(s.Normalized())
	return string(b)
}

// counted reports whether a rollout's hosts count against budgets and may
// move: the rollouts that observe (see observing).
func (w *work) counted() bool { return w.observing() }

// buildBudgets groups the budgets of every counted rollout and counts the
// hosts in flight in each group, each host judged by its own rollout's
// frozen lists — and, in a rollout that is no longer its channel's
// current one, by the current ones' lists too (groupsOf).
func (t *tick) buildBudgets() {
	t.groups = map[string]*budgetGroup{}
	t.pendingLists = t.pendingLists[:0]
	for _, w := range t.rollouts {
		w.groupOf, w.counting, w.held = nil, false, nil
		w.stale = !w.latest || t.pendingRef(w.r.Channel)
		if w.counted() {
			t.addBudgets(w)
		}
	}
	// The budgets of releases that may open in this tick take part from
	// the start: a rollout opening later in the tick must not find its
	// budget already over a limit it brings.
	for _, name := range t.order {
		if t.pendingRef(name) {
			for _, b := range t.channels[name].Manifest.DisruptionBudgets {
				t.pendingLists = append(t.pendingLists, groupList{t.group(b), b.Hosts})
			}
		}
	}
	t.inFlight = map[string]*work{}
	for _, w := range t.rollouts {
		if !w.counted() {
			continue
		}
		for i, h := range w.r.Hosts {
			if h.State.InFlight() {
				t.take(w, i)
			}
		}
	}
}

// addBudgets joins a rollout's frozen budgets to the tick's groups.
func (t *tick) addBudgets(w *work) {
	w.groupOf, w.counting = make([]*budgetGroup, len(w.r.Budgets)), true
	for bi, b := range w.r.Budgets {
		w.groupOf[bi] = t.group(b)
	}
}

// group returns the group of a budget, created or tightened by it.
func (t *tick) group(b proto.RolloutBudget) *budgetGroup {
	key := selectorKey(b.Selector)
	g := t.groups[key]
	if g == nil {
		g = &budgetGroup{label: key, limit: math.MaxInt}
		t.groups[key] = g
	}
	if l := budgetLimit(b); l < g.limit {
		g.limit, g.why = l, Reason{}
	}
	return g
}

// groupList is a budget group with one member's frozen host list.
type groupList struct {
	g     *budgetGroup
	hosts []string
}

// groupsOf returns the distinct budget groups a host of the rollout counts
// against: those whose frozen lists in its own rollout name it, and, when
// the rollout is no longer its channel's current one (superseded, an
// older converged one, one a new ref is about to replace), also those
// whose lists in the current rollouts and in the releases about to open
// name it. A host still in flight in a rollout that is over counts against
// the budgets of the releases now current: a budget a new release adds
// holds it too (SPEC §4 invariant 1).
func (t *tick) groupsOf(w *work, i int) []*budgetGroup {
	var out []*budgetGroup
	for _, bi := range w.r.Hosts[i].Budgets {
		if bi >= 0 && bi < len(w.groupOf) && w.groupOf[bi] != nil && !slices.Contains(out, w.groupOf[bi]) {
			out = append(out, w.groupOf[bi])
		}
	}
	if !w.stale {
		return out
	}
	name := w.r.Hosts[i].Hostname
	for _, o := range t.rollouts {
		if o != w && o.latest && o.counting {
			for bi, b := range o.r.Budgets {
				out = addListed(out, o.groupOf[bi], b.Hosts, name)
			}
		}
	}
	for _, l := range t.pendingLists {
		out = addListed(out, l.g, l.hosts, name)
	}
	return out
}

// addListed adds g to gs when hosts (sorted) lists name.
func addListed(gs []*budgetGroup, g *budgetGroup, hosts []string, name string) []*budgetGroup {
	if g == nil || slices.Contains(gs, g) {
		return gs
	}
	if _, ok := slices.BinarySearch(hosts, name); ok {
		gs = append(gs, g)
	}
	return gs
}

// take puts a host in flight: it takes a slot in each of its budget
// groups, and is busy for every other rollout.
func (t *tick) take(w *work, i int) {
	gs := t.groupsOf(w, i)
	for _, g := range gs {
		g.inflight++
	}
	if w.held == nil {
		w.held = map[int][]*budgetGroup{}
	}
	w.held[i] = gs
	t.inFlight[w.r.Hosts[i].Hostname] = w
}

// untake gives back a host's slots when it left flight in this pass.
func (t *tick) untake(w *work, i int) {
	for _, g := range w.held[i] {
		g.inflight--
	}
	delete(w.held, i)
	if t.inFlight[w.r.Hosts[i].Hostname] == w {
		delete(t.inFlight, w.r.Hosts[i].Hostname)
	}
}

// full returns a budget group that has no room for one more host of the
// rollout, or nil.
func (t *tick) full(w *work, i int) *budgetGroup {
	if w.stale {
		for _, g := range t.groupsOf(w, i) {
			if g.inflight+1 > g.limit {
				return g
			}
		}
		return nil
	}
	// The common case, without building the list: the host's own groups.
	for _, bi := range w.r.Hosts[i].Budgets {
		if bi >= 0 && bi < len(w.groupOf) {
			if g := w.groupOf[bi]; g != nil && g.inflight+1 > g.limit {
				return g
			}
		}
	}
	return nil
}

func budgetBlock(g *budgetGroup) Reason {
	if g.why.Gate == "" {
		g.why = Reason{Gate: GateBudget, Code: GateBudget,
			Message: fmt.Sprintf("disruption budget %s allows %d host(s) in flight and is full", g.label, g.limit)}
	}
	return g.why
}

// busy returns the other rollout a host is in flight in, if any.
func (t *tick) busy(w *work, name string) *work {
	if o := t.inFlight[name]; o != nil && o != w {
		return o
	}
	return nil
}

// ---- 5. dispatch ----

func (t *tick) dispatch(w *work) {
	switch w.r.State {
	case RolloutActive:
		t.advance(w)
		t.finishDeferred(w)
		t.updatePhase(w)
	case RolloutConverged:
		// Skipped hosts catch up with the channel's current target: this
		// rollout's, unless a newer ref is about to replace it.
		if w.latest && !t.pendingRef(w.r.Channel) {
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
				t.setRollout(w, EvLastWaveDone, Reason{Code: CodeConverged, Message: fmt.Sprintf("all %d wave(s) promoted", len(w.waves))})
				if !t.pendingRef(w.r.Channel) {
					t.dispatchHosts(w) // skipped hosts that are back catch up at once
				}
				return
			}
			t.emit(Event{Kind: EventWavePromoted, RolloutID: w.r.ID, Channel: w.r.Channel, Wave: w.r.Wave,
				Reason: Reason{Code: CodeWavePromoted, Message: fmt.Sprintf("wave %d done; wave %d starts", w.r.Wave, w.r.Wave+1)}})
			w.r.Wave++
			w.r.WaveStartedAt, w.r.ProgressAt, w.changed = t.now, t.now, true
		}
		t.dispatchHosts(w)
		if !t.promotable(w, w.r.Wave) {
			return
		}
	}
}

// promotable reports whether a wave may be promoted (rule 8): no host of
// it is still to be dispatched or watched (Skipped and Deferred hosts do
// not hold it back), enough of its hosts converged on the target to prove
// the release (evidence), and its channel is not in partial visibility.
func (t *tick) promotable(w *work, wave int) bool {
	if wave < 0 || wave >= len(w.waves) {
		return true
	}
	for _, i := range w.waves[wave] {
		switch w.r.Hosts[i].State {
		case HostPending, HostActivating, HostSoaking, HostRollingBack:
			return false
		}
	}
	proven, need := w.evidence(wave)
	return proven >= need && !t.partial[w.r.Channel]
}

// evidence counts a wave's proof, and how much it needs before the next
// wave starts. Proof is a host that converged on a target different from
// the closure it ran (a host the release did not change proves nothing).
// The need is one host, or healthGate.minConverged, or minConvergedPct of
// the wave (rounded up), whichever is most — and never more than the
// wave's hosts that are not converged and unchanged: a wave the release
// changes nowhere needs no proof.
func (w *work) evidence(wave int) (proven, need int) {
	n, unchanged := len(w.waves[wave]), 0
	for _, i := range w.waves[wave] {
		if h := w.r.Hosts[i]; h.State == HostConverged {
			if h.Previous == h.Target {
				unchanged++
			} else {
				proven++
			}
		}
	}
	need = 1
	if m := w.r.HealthGate.MinConverged; m != nil {
		need = max(need, *m)
	}
	if p := w.r.HealthGate.MinConvergedPct; p != nil {
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
					t.setHost(w, i, EvSkip, Reason{Code: CodeOffline, Message: "offline when its wave was active; it catches up when it returns"})
				} else {
					t.block(w, i, t.unheardBlock(w, o))
				}
				continue
			}
			if why := t.lateGate(w, i, failWave); why.Gate != "" {
				t.block(w, i, why)
				continue
			}
			code, msg := CodeDispatched, "dispatched to "+h.Target
			if h.State == HostSkipped {
				code, msg = CodeCatchUp, "back online; dispatched to the channel's current target "+h.Target
			}
			h.Previous = o.Current
			t.setHost(w, i, EvDispatch, Reason{Code: code, Message: msg})
			t.take(w, i)
			t.hostIntents = append(t.hostIntents, HostIntent{Host: h.Hostname, RolloutID: w.r.ID, Kind: IntentDispatch,
				Target: h.Target, Wave: h.Wave, Reason: h.Reason})
		}
	}
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
			why = Reason{Gate: GateWave, Code: GateWave, Message: fmt.Sprintf("wave %d is not active yet", h.Wave)}
			w.waveMsg[h.Wave] = why
		}
		return why
	}
	if t.partial[w.r.Channel] {
		return t.visibilityBlock(w.r.Channel)
	}
	return t.lateGate(w, i, failWave)
}

// earlyGate returns the first of gates 0–2 (busy, quarantined,
// channel_edge) that holds a host, or a zero Reason.
func (t *tick) earlyGate(w *work, i int, edge *blocker) Reason {
	h := &w.r.Hosts[i]
	if other := t.busy(w, h.Hostname); other != nil {
		return Reason{Gate: GateBusy, Code: GateBusy, Message: "in flight in " + other.r.ID}
	}
	for _, q := range t.quarantine[h.Hostname] {
		if q.Closure == h.Target && q.Until.After(t.now) {
			return Reason{Gate: GateQuarantine, Code: GateQuarantine,
				Message: fmt.Sprintf("%s failed on this host; quarantined until %s", h.Target, q.Until.UTC().Format("2006-01-02T15:04:05Z"))}
		}
	}
	if edge != nil {
		return Reason{Gate: GateChannelEdge, Code: GateChannelEdge,
			Message: fmt.Sprintf("channel %s waits for channel %s: %s", w.r.Channel, edge.channel, edge.stable)}
	}
	return Reason{}
}

// lateGate returns the first of gates 5–7 (host_edge, budget,
// compliance_earlier_wave) that holds a host, or a zero Reason.
func (t *tick) lateGate(w *work, i int, failWave int) Reason {
	h := &w.r.Hosts[i]
	for _, p := range w.preds[i] {
		if w.r.Hosts[p].State != HostConverged {
			return Reason{Gate: GateHostEdge, Code: GateHostEdge,
				Message: fmt.Sprintf("waits for %s to converge", w.r.Hosts[p].Hostname)}
		}
	}
	if g := t.full(w, i); g != nil {
		return budgetBlock(g)
	}
	if failWave >= 0 && failWave < h.Wave {
		return Reason{Gate: GateCompliance, Code: GateCompliance,
			Message: fmt.Sprintf("a converged host of wave %d fails runtime compliance", failWave)}
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
			if h.State == HostConverged && len(failingControls(t.obs[h.Hostname], h.Target, ControlRuntime, nil)) > 0 {
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
		o := t.obs[h.Hostname]
		if o.Current != h.Target || o.Booted != h.Target || o.LastSeen.Before(h.Since) {
			continue
		}
		if other := t.busy(w, h.Hostname); other != nil {
			continue // another rollout drives the host now
		}
		if g := t.full(w, i); g != nil {
			t.block(w, i, budgetBlock(g))
			continue
		}
		t.setHost(w, i, EvBootedIntoTarget, Reason{Code: CodeBootedIntoTarget, Message: "rebooted into the target; soaking"})
		t.take(w, i)
		if t.observeHost(w, i); !h.State.InFlight() {
			t.untake(w, i) // soaked at once (no soak time)
		}
	}
}

// revert sends the hosts that moved back to their previous closure, in
// reverse edge order and under the budgets, and ends the revert when all
// are back (rule 9).
func (t *tick) revert(w *work) {
	order := make([]int, len(w.r.Hosts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(w.r.Hosts[b].Wave, w.r.Hosts[a].Wave) })
	remaining := 0
	for _, i := range order {
		h := &w.r.Hosts[i]
		o := t.obs[h.Hostname]
		if !w.needsRollback(i) {
			continue
		}
		remaining++
		if h.State == HostActivating || h.State == HostRollingBack {
			continue // let the switch finish first
		}
		if h.State == HostFailed && o.Current == h.Previous && !o.LastSeen.Before(h.Since) {
			t.setHost(w, i, EvRolledBack, Reason{Code: CodeRolledBack, Message: "already back on the previous closure " + h.Previous})
			remaining--
			continue
		}
		if h.State == HostFailed && h.Reason.Code == CodeRollbackTimeout && !h.Since.Before(w.r.UpdatedAt) {
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
			t.block(w, i, Reason{Gate: GateNoPrevious, Code: GateNoPrevious, Message: "the host reported no closure before it was dispatched; nothing to roll back to"})
			continue
		}
		if s := w.pendingSuccessor(i); s >= 0 {
			t.block(w, i, Reason{Gate: GateRollbackOrder, Code: GateRollbackOrder,
				Message: fmt.Sprintf("%s, which it gates, is rolled back first", w.r.Hosts[s].Hostname)})
			continue
		}
		if other := t.busy(w, h.Hostname); other != nil {
			t.block(w, i, Reason{Gate: GateBusy, Code: GateBusy, Message: "in flight in " + other.r.ID})
			continue
		}
		wasInFlight := h.State.InFlight()
		if g := t.full(w, i); g != nil && !wasInFlight {
			t.block(w, i, budgetBlock(g))
			continue
		}
		t.setHost(w, i, EvRollbackDispatch, Reason{Code: CodeRollbackStarted, Message: "rolling back to " + h.Previous})
		if !wasInFlight {
			t.take(w, i) // a soaking host already holds its slots
		}
		t.hostIntents = append(t.hostIntents, HostIntent{Host: h.Hostname, RolloutID: w.r.ID, Kind: IntentRevert,
			Target: h.Previous, Wave: h.Wave, Reason: h.Reason})
	}
	if remaining == 0 {
		t.setRollout(w, EvRevertDone, Reason{Code: CodeRevertDone, Message: "every host that moved is back on its previous closure"})
	}
}

// needsRollback reports whether a host of a reverting rollout still has to
// go back: it was dispatched, is not back, and had a different closure
// before.
func (w *work) needsRollback(i int) bool {
	h := w.r.Hosts[i]
	switch h.State {
	case HostActivating, HostSoaking, HostConverged, HostDeferred, HostRollingBack, HostFailed:
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

// ---- 6. readiness deadlines ----

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
		if w.r.WaveStartedAt.After(start) {
			start = w.r.WaveStartedAt
		}
		limit += w.soak(w.r.Wave)
		if t.now.Sub(start) <= limit {
			return
		}
		wave := min(max(w.r.Wave, 0), len(w.waves)-1)
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
			case h.State.InFlight() && h.Blocked.Gate == GateVisibility:
				// Silent in flight, held by partial visibility: it moves
				// only when the channel is heard again.
				counts[strings.ToLower(string(h.State))+" and silent"]++
				stuck = true
			case h.State.InFlight():
				counts[strings.ToLower(string(h.State))]++
				busy = true
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
		msg := fmt.Sprintf("wave %d made no progress for %s: %s; %d of the %d host(s) it needs converged on a new closure to be promoted",
			w.r.Wave, limit, summarize(counts), converged, need)
		if t.partial[w.r.Channel] {
			msg += fmt.Sprintf("; channel %s is in partial visibility", w.r.Channel)
		}
		t.setRollout(w, EvStalled, Reason{Code: CodeWaveStalled, Message: msg})
	case RolloutReverting:
		if t.now.Sub(start) > limit {
			t.setRollout(w, EvStalled, Reason{Code: CodeRevertStalled,
				Message: fmt.Sprintf("the revert made no progress for %s", limit)})
		}
	}
}

// stuck reports whether a Pending host is held by something that will not
// clear by itself: a quarantine, failing compliance of an earlier wave,
// partial visibility that outlasted the deadline, a predecessor host that
// cannot converge any more (Failed, Reverted, Skipped, or Deferred until a
// reboot nobody schedules) or cannot be dispatched before this host's wave
// (an edge against wave order), or nothing at all. seen holds the hosts
// already looked at in this walk, so shared predecessors are walked once.
func (w *work) stuck(i int, seen map[int]bool) bool {
	if seen[i] {
		return false // walked already: if it were stuck, the walk would have ended
	}
	seen[i] = true
	switch w.r.Hosts[i].Blocked.Gate {
	case GateQuarantine, GateCompliance, GateVisibility, "":
		return true
	case GateHostEdge:
		for _, p := range w.preds[i] {
			switch pred := w.r.Hosts[p]; pred.State {
			case HostFailed, HostReverted, HostSkipped, HostDeferred:
				return true
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

// ---- output ----

func (t *tick) output() Output {
	out := Output{Rollouts: []RolloutUpdate{}, Hosts: []HostUpdate{}, Intents: t.hostIntents, Events: t.events,
		IntentResults: t.results, Deferrals: t.deferrals, Channels: t.chUpdates, Visibility: t.visibility}
	for _, w := range t.rollouts {
		if w.isNew {
			out.Rollouts = append(out.Rollouts, RolloutUpdate{New: true, Rollout: w.r})
			continue
		}
		if w.changed {
			head := w.r
			head.Hosts = nil
			out.Rollouts = append(out.Rollouts, RolloutUpdate{From: w.from, Rollout: head})
		}
		touched := make([]int, 0, len(w.orig))
		for i := range w.orig {
			touched = append(touched, i)
		}
		slices.Sort(touched)
		for _, i := range touched {
			if !sameHost(w.orig[i], w.r.Hosts[i]) {
				out.Hosts = append(out.Hosts, HostUpdate{RolloutID: w.r.ID, From: w.orig[i].State, Host: w.r.Hosts[i]})
			}
		}
	}
	slices.SortFunc(out.Deferrals, func(a, b Deferral) int {
		return cmp.Or(strings.Compare(a.Channel, b.Channel), strings.Compare(a.Ref, b.Ref), strings.Compare(a.BlockedBy, b.BlockedBy))
	})
	if out.Intents == nil {
		out.Intents = []HostIntent{}
	}
	if out.Events == nil {
		out.Events = []Event{}
	}
	if out.IntentResults == nil {
		out.IntentResults = []IntentResult{}
	}
	if out.Deferrals == nil {
		out.Deferrals = []Deferral{}
	}
	if out.Channels == nil {
		out.Channels = []ChannelUpdate{}
	}
	if out.Visibility == nil {
		out.Visibility = []Visibility{}
	}
	return out
}

func sameHost(a, b RolloutHost) bool {
	return a.Hostname == b.Hostname && a.Wave == b.Wave && a.Target == b.Target && a.State == b.State &&
		a.Since.Equal(b.Since) && a.Previous == b.Previous && a.Reason == b.Reason && a.Blocked == b.Blocked &&
		slices.Equal(a.Budgets, b.Budgets)
}
