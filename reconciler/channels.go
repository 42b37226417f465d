package reconciler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/schedule"
)

// channelOrder returns the channel names with channel-edge predecessors
// first (ties by name), so a predecessor that opens a rollout in this tick
// defers its successors in the same tick. A cycle (never valid) falls back
// to name order for the channels on it.
func (t *tick) channelOrder() []string {
	names := make([]string, 0, len(t.channels))
	for n := range t.channels {
		names = append(names, n)
	}
	slices.Sort(names)
	preds := map[string][]string{}
	for _, n := range names {
		preds[n] = t.predecessors(n)
	}
	var order []string
	done := map[string]bool{}
	for len(order) < len(names) {
		progressed := false
		for _, n := range names {
			if done[n] {
				continue
			}
			ready := true
			for _, p := range preds[n] {
				if _, known := t.channels[p]; known && !done[p] {
					ready = false
				}
			}
			if ready {
				order, done[n], progressed = append(order, n), true, true
			}
		}
		if !progressed {
			for _, n := range names {
				if !done[n] {
					order, done[n] = append(order, n), true
				}
			}
		}
	}
	return order
}

// predecessors lists the channels that gate channel name, from its own
// latest verified fleet.
func (t *tick) predecessors(name string) []string {
	c := t.channels[name]
	if c == nil || c.Fleet == nil {
		return nil
	}
	var out []string
	for _, e := range c.Fleet.ChannelEdges {
		if e.Gated == name && e.Gates != name && !slices.Contains(out, e.Gates) {
			out = append(out, e.Gates)
		}
	}
	slices.Sort(out)
	return out
}

// nonTerminal returns the channel's rollout that is not over, if any.
func (t *tick) nonTerminal(channel string) *work {
	for _, w := range t.rollouts {
		if w.r.Channel == channel && !w.r.State.Terminal() {
			return w
		}
	}
	return nil
}

func (t *tick) latestOf(channel string) *work {
	var out *work
	for _, w := range t.rollouts {
		if w.r.Channel == channel {
			out = w
		}
	}
	return out
}

// deferRef records a deferral and reports it once per (channel, ref,
// blocker): not again in a later pass or tick while it holds.
func (t *tick) deferRef(c *Channel, blockedBy string, e Event) {
	d := Deferral{Channel: c.Name, Ref: c.Ref, BlockedBy: blockedBy}
	t.deferrals = append(t.deferrals, d)
	if !t.prevDeferOK[d] && !t.deferSeen[d] {
		t.deferSeen[d] = true
		t.emit(e)
	}
}

// pendingRef reports whether a channel's ref moved and has not opened a
// rollout yet.
func (t *tick) pendingRef(name string) bool {
	c := t.channels[name]
	if c == nil || c.Ref == "" || c.Manifest == nil || c.Fleet == nil {
		return false
	}
	latest := t.latestOf(name)
	rolled := c.LastRolledRef
	if rolled == "" && latest != nil {
		rolled = latest.r.Ref
	}
	return c.Ref != rolled && (latest == nil || latest.r.Ref != c.Ref)
}

// ---- 4c. channels ----

// openChannel handles a channel whose ref moved (rules 1 and 3) and
// returns the rollout it opened, if any.
func (t *tick) openChannel(name string) *work {
	c := t.channels[name]
	if c.Ref == "" || c.Manifest == nil || c.Fleet == nil {
		return nil
	}
	latest := t.latestOf(name)
	rolled := c.LastRolledRef
	if rolled == "" && latest != nil {
		rolled = latest.r.Ref
	}
	if c.Ref == rolled || (latest != nil && latest.r.Ref == c.Ref) {
		return nil
	}
	id := proto.RolloutID(name, c.Ref)
	if c.Manifest.Channel != name || c.Manifest.ChannelRef != c.Ref {
		t.deferRef(c, "manifest", Event{Kind: EventRolloutDeferred, RolloutID: id, Channel: name, Wave: -1,
			Reason: Reason{Code: codes.ManifestMismatch, Message: fmt.Sprintf("the channel's manifest is for %s, not %s",
				c.Manifest.RolloutID(), id)}})
		return nil
	}
	// Rule 1: one active rollout per channel; a newer ref waits, and
	// replaces a waiting one (only the latest verified ref is known). A
	// superseded rollout's hosts in flight stay in flight there, counted
	// against the budgets, until they land.
	if active := t.nonTerminal(name); active != nil {
		if active.r.State == RolloutHalted && !active.has(HostActivating) && !active.has(HostRebooting) {
			t.setRollout(active, EvSupersede, Reason{Code: codes.Superseded, Message: fmt.Sprintf("%s replaces it", id)})
		} else {
			t.deferRef(c, active.r.ID, Event{Kind: EventRefWaiting, RolloutID: id, Channel: name, Wave: -1,
				Reason: Reason{Code: codes.RefWaiting, Message: fmt.Sprintf("waits for %s (%s) to finish", active.r.ID, active.r.State)}})
			return nil
		}
	}
	// Rule 3: channel edges.
	if blocker := t.channelBlocker(name); blocker != nil {
		t.deferRef(c, blocker.channel, Event{Kind: EventRolloutDeferred, RolloutID: id, Channel: name, Wave: -1,
			Reason: Reason{Code: codes.ChannelEdge, Gate: codes.ChannelEdge, Message: fmt.Sprintf("channel %s waits for channel %s: %s",
				name, blocker.channel, blocker.what)}})
		return nil
	}
	// Rule 14: a freeze holds the opening.
	if fs := t.freezesOf(name); len(fs) > 0 && t.openBreaks[name] == nil {
		why := freezeReason(name, fs)
		t.deferRef(c, codes.Freeze, Event{Kind: EventRolloutDeferred, RolloutID: id, Channel: name, Wave: -1, Reason: why})
		return nil
	}
	return t.open(c)
}

// channelBlocker returns what holds a channel back: a channel that gates
// it and has a non-terminal rollout (a Halted one too), or has a new ref
// waiting to open (so gating is transitive when several channels move at
// once). A predecessor without history does not block.
func (t *tick) channelBlocker(name string) *blocker {
	for _, p := range t.predecessors(name) {
		if w := t.nonTerminal(p); w != nil {
			return &blocker{channel: p, what: fmt.Sprintf("%s is %s", w.r.ID, w.r.State), stable: w.r.ID + " is not over"}
		}
		if t.pendingRef(p) {
			what := fmt.Sprintf("its release %s has not rolled out yet", t.channels[p].Ref)
			return &blocker{channel: p, what: what, stable: what}
		}
	}
	return nil
}

// blocker is a predecessor channel that holds another one. what says
// why right now; stable says it without the predecessor's current state,
// for host reasons that must not change while the hold lasts.
type blocker struct {
	channel string
	what    string
	stable  string
}

func (w *work) has(s HostState) bool {
	for _, h := range w.r.Hosts {
		if h.State == s {
			return true
		}
	}
	return false
}

// open creates the rollout for a channel's ref, freezing what it needs
// from the release, and runs the static compliance gate (rule 2).
func (t *tick) open(c *Channel) *work {
	f, m := c.Fleet, c.Manifest
	ch := f.Channels[c.Name]
	r := Rollout{
		ID: m.RolloutID(), Channel: c.Name, Ref: c.Ref, State: RolloutOpening, WavePhase: PhaseDispatching,
		OpenedAt: t.now, WaveStartedAt: t.now, UpdatedAt: t.now, ProgressAt: t.now,
		Reason:         Reason{Code: codes.RefMoved, Message: fmt.Sprintf("channel %s moved to %s", c.Name, c.Ref)},
		ManifestHash:   c.ManifestHash,
		HealthGate:     m.HealthGate,
		ComplianceMode: cmp.Or(ch.Compliance.Mode, proto.ComplianceEnforce),
		Frameworks:     slices.Clone(m.ComplianceFrameworks),
		Budgets:        slices.Clone(m.DisruptionBudgets),
		FreezeBreak:    t.openBreaks[c.Name],
	}
	p, hasPolicy := f.RolloutPolicies[ch.RolloutPolicy]
	if hasPolicy {
		r.OnHealthFailure = p.OnHealthFailure
		if p.Reboot != nil {
			rb := *p.Reboot
			r.Reboot = &rb
		}
		r.Windows = schedule.Canonical(p.Windows)
		// Host selectors' windows, resolved to the channel's hosts of the
		// manifest (rule 13): a host takes the first that lists it.
		for _, hw := range p.HostWindows {
			var hosts []string
			for _, h := range m.HostSet {
				if hw.Selector.Matches(h.Hostname, f.Hosts[h.Hostname]) {
					hosts = append(hosts, h.Hostname)
				}
			}
			if len(hosts) > 0 {
				slices.Sort(hosts)
				r.HostWindows = append(r.HostWindows, HostWindowSpec{Hosts: hosts, Windows: schedule.Canonical(hw.Windows)})
			}
		}
	}
	// The waves: those of waves.<channel> with their soaks, as many as the
	// manifest's wave indexes need, and at least one. A channel rolled out
	// all at once has an empty waves.<channel> (0001 §4.1): one wave,
	// holding all its hosts (waveIndex 0), with no soak, since no wave
	// waits for it; each host's health is still judged once after its
	// confirm (rule 8), and the budgets pace the wave (rule 5). A wave
	// is named as waves.<channel> names it, or else as the policy's wave
	// of the same index names it, when the two lists match.
	waves := f.Waves[c.Name]
	n := len(waves)
	for _, hw := range m.HostSet {
		n = max(n, hw.WaveIndex+1)
	}
	var policyWaves []proto.PolicyWave
	if p, ok := f.RolloutPolicies[ch.RolloutPolicy]; ok && len(p.Waves) == len(waves) {
		policyWaves = p.Waves
	}
	for i := range max(n, 1) {
		var spec WaveSpec
		if i < len(waves) {
			spec = WaveSpec{Name: waves[i].Name, SoakMinutes: waves[i].SoakMinutes, Windows: schedule.Canonical(waves[i].Windows),
				Approval: waves[i].Approval}
			if spec.Name == "" && policyWaves != nil {
				spec.Name = policyWaves[i].Name // a resolver that did not copy it
			}
			if len(spec.Windows) == 0 && policyWaves != nil {
				spec.Windows = schedule.Canonical(policyWaves[i].Windows)
			}
			if spec.Approval == nil && policyWaves != nil {
				spec.Approval = policyWaves[i].Approval
			}
		}
		// Rule 17: the wave's own reboot setting, else the policy's.
		switch {
		case r.Reboot == nil:
		case i < len(waves) && waves[i].Reboot != nil:
			spec.Reboot = *waves[i].Reboot
		case i < len(policyWaves) && policyWaves[i].Reboot != nil:
			spec.Reboot = *policyWaves[i].Reboot
		default:
			spec.Reboot = p.Reboot.Allowed
		}
		r.Waves = append(r.Waves, spec)
	}
	r.Hosts = PendingHosts(m.HostSet, r.Budgets, t.now)
	if len(f.Edges) > 0 {
		members := make(map[string]bool, len(r.Hosts))
		for _, h := range r.Hosts {
			members[h.Hostname] = true
		}
		for _, e := range f.Edges {
			if members[e.Gates] && members[e.Gated] {
				r.Edges = append(r.Edges, Edge{Gates: e.Gates, Gated: e.Gated})
			}
		}
	}
	sortEdges(r.Edges)
	r.Edges = slices.Compact(r.Edges)
	w := newWork(r, true)
	w.changed = true
	t.rollouts = append(t.rollouts, w)
	t.byID[r.ID] = w
	t.sortRollouts()
	t.chUpdates = append(t.chUpdates, ChannelUpdate{Name: c.Name, LastRolledRef: c.Ref})
	t.emit(Event{Kind: EventRolloutOpened, RolloutID: r.ID, Channel: c.Name, Wave: -1, To: string(RolloutOpening), Reason: r.Reason})

	// Rule 2: the static compliance gate.
	var failing []string
	if r.ComplianceMode != proto.ComplianceDisabled {
		for _, h := range w.r.Hosts {
			for _, ctl := range failingControls(t.obs[h.Hostname].Compliance, h.Target, ControlStatic, r.Frameworks) {
				failing = append(failing, h.Hostname+": "+ctl)
			}
		}
	}
	switch {
	case len(failing) > 0 && r.ComplianceMode == proto.ComplianceEnforce:
		t.setRollout(w, EvGateFailed, Reason{Code: codes.ComplianceBlocked,
			Message: fmt.Sprintf("%d static control(s) fail in enforce mode: %s", len(failing), strings.Join(failing, "; "))})
	case len(failing) > 0:
		for _, f := range failing {
			t.emit(Event{Kind: EventComplianceWarning, RolloutID: r.ID, Channel: c.Name, Wave: -1,
				Host: f[:strings.IndexByte(f, ':')], Reason: Reason{Code: codes.ComplianceWarning, Message: "static control fails (permissive mode): " + f}})
		}
		t.setRollout(w, EvGatePassed, Reason{Code: codes.CompliancePassed, Message: fmt.Sprintf("%d static control(s) fail; permissive mode lets the rollout start", len(failing))})
		t.waveStarts(w)
	default:
		t.setRollout(w, EvGatePassed, Reason{Code: codes.CompliancePassed, Message: "static compliance gate passed (mode " + r.ComplianceMode + ")"})
		t.waveStarts(w)
	}
	return w
}

// sortEdges orders edges by (gates, gated), so that a rollout's frozen
// edges, and everything made from them, do not depend on the order of the
// fleet's list.
func sortEdges(es []Edge) {
	slices.SortFunc(es, compareEdges)
}

func compareEdges(a, b Edge) int {
	return cmp.Or(strings.Compare(a.Gates, b.Gates), strings.Compare(a.Gated, b.Gated))
}

// PendingHost is a host of a manifest's host set as a rollout opened at
// since holds it before any tick dispatched it: Pending since the open,
// with the indexes of the frozen budgets whose host lists include it.
func PendingHost(hw proto.HostWave, budgets []proto.RolloutBudget, since time.Time) RolloutHost {
	h := RolloutHost{Hostname: hw.Hostname, Wave: hw.WaveIndex, Target: hw.TargetClosure, State: HostPending, Since: since}
	for bi, b := range budgets {
		if _, found := slices.BinarySearch(b.Hosts, hw.Hostname); found {
			h.Budgets = append(h.Budgets, bi)
		}
	}
	return h
}

// PendingHosts is PendingHost for every host of a host set. A set sorted
// by hostname is matched against each budget's host list in one pass when
// those are sorted too (as a manifest's are), and the hosts' budget
// indexes share one array (each host's slice is capped: appending to one
// copies it); otherwise each host is looked up as PendingHost does. The
// result is PendingHost's either way.
func PendingHosts(set []proto.HostWave, budgets []proto.RolloutBudget, since time.Time) []RolloutHost {
	hosts := make([]RolloutHost, len(set))
	sorted := slices.IsSortedFunc(set, func(a, b proto.HostWave) int { return strings.Compare(a.Hostname, b.Hostname) })
	for _, b := range budgets {
		sorted = sorted && slices.IsSorted(b.Hosts)
	}
	for i, hw := range set {
		if !sorted {
			hosts[i] = PendingHost(hw, budgets, since)
			continue
		}
		hosts[i] = RolloutHost{Hostname: hw.Hostname, Wave: hw.WaveIndex, Target: hw.TargetClosure, State: HostPending, Since: since}
	}
	if !sorted || len(budgets) == 0 {
		return hosts
	}
	// in[bi] marks the hosts budget bi lists, found by merging.
	in := make([][]bool, len(budgets))
	count := make([]int, len(set))
	total := 0
	for bi, b := range budgets {
		in[bi] = make([]bool, len(set))
		j := 0
		for i := range set {
			for j < len(b.Hosts) && b.Hosts[j] < set[i].Hostname {
				j++
			}
			if j < len(b.Hosts) && b.Hosts[j] == set[i].Hostname {
				in[bi][i] = true
				count[i]++
				total++
			}
		}
	}
	backing := make([]int, 0, total)
	for i := range hosts {
		if count[i] == 0 {
			continue
		}
		from := len(backing)
		for bi := range budgets {
			if in[bi][i] {
				backing = append(backing, bi)
			}
		}
		hosts[i].Budgets = backing[from:len(backing):len(backing)]
	}
	return hosts
}
