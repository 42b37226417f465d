package reconciler

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
)

// Disruption budgets (rfcs/0003 rule 5): groups of equal selectors across
// the rollouts that count, their limits, and the hosts in flight in each.

// budgetGroup is one disruption budget across every rollout that carries
// it: budgets are the same budget when their selectors are equal (rule 5).
type budgetGroup struct {
	name     string // the label of the budget that sets the limit
	limit    int
	inflight int
	why      Reason // the block reason, made once per occupancy
	whyAt    int    // the occupancy why was made at
}

// BudgetLimit is one frozen budget's cap: maxInFlight and
// maxInFlightPct of its hosts (rounded down, at least 1) both apply.
func BudgetLimit(b proto.RolloutBudget) int {
	limit := math.MaxInt
	if b.MaxInFlight != nil {
		limit = min(limit, max(*b.MaxInFlight, 0))
	}
	if b.MaxInFlightPct != nil {
		limit = min(limit, max(len(b.Hosts)*(*b.MaxInFlightPct)/100, 1))
	}
	return limit
}

// Occupancy is a rollout's budgets as an operator reads them now: for
// each, its hosts in flight in any rollout (inFlight reports a host), out
// of its limit (BudgetLimit). A tick counts the same hosts, grouped
// across the rollouts that count (rule 5).
func Occupancy(budgets []proto.RolloutBudget, inFlight func(host string) bool) []BudgetUse {
	var out []BudgetUse
	for _, b := range budgets {
		use := BudgetUse{Name: b.Label(), Limit: BudgetLimit(b)}
		for _, h := range b.Hosts {
			if inFlight(h) {
				use.InFlight++
			}
		}
		out = append(out, use)
	}
	return out
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
	// Sized first: while a fleet onboards or a wide wave activates, every
	// tick puts most hosts of the fleet in flight again.
	n := 0
	for _, w := range t.rollouts {
		if w.counted() {
			for i := range w.r.Hosts {
				if w.r.Hosts[i].State.InFlight() {
					n++
				}
			}
		}
	}
	t.inFlight = make(map[string]*work, n)
	for _, w := range t.rollouts {
		if !w.counted() {
			continue
		}
		for i := range w.r.Hosts {
			if w.r.Hosts[i].State.InFlight() {
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
		g = &budgetGroup{name: b.Label(), limit: math.MaxInt}
		t.groups[key] = g
	}
	// The budget that sets the limit names the group; of equal limits,
	// the first met (rollouts go oldest first).
	if l := BudgetLimit(b); l < g.limit {
		g.limit, g.name, g.why = l, b.Label(), Reason{}
	}
	return g
}

// use is the group's occupancy for an event.
func (g *budgetGroup) use() BudgetUse {
	return BudgetUse{Name: g.name, InFlight: g.inflight, Limit: g.limit}
}

// uses is the occupancy of the limiting groups among gs, for an event; nil
// when none limits anything.
func uses(gs []*budgetGroup) []BudgetUse {
	var out []BudgetUse
	for _, g := range gs {
		if g.limit != math.MaxInt {
			out = append(out, g.use())
		}
	}
	return out
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
// holds it too (rfcs/0013 rule 1).
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
		w.held = make([][]*budgetGroup, len(w.r.Hosts)) // a rollout's hosts are fixed
	}
	w.held[i] = gs
	t.inFlight[w.r.Hosts[i].Hostname] = w
}

// takeNoted is take for the host whose move into flight was the event
// just emitted: the event notes the occupancy of the budgets it took a
// slot in.
func (t *tick) takeNoted(w *work, i int) {
	t.take(w, i)
	if n := len(t.events); n > 0 {
		t.events[n-1].Budgets = uses(w.held[i]) // take made held[i]
	}
}

// untake gives back a host's slots when it left flight in this pass.
func (t *tick) untake(w *work, i int) {
	if i < len(w.held) {
		for _, g := range w.held[i] {
			g.inflight--
		}
		w.held[i] = nil
	}
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

// budgetBlock is the reason of a host the full group g holds, made once
// per occupancy (a group over its limit, tightened by a newer release,
// drains one host at a time).
func budgetBlock(g *budgetGroup) Reason {
	if g.why.Gate == "" || g.whyAt != g.inflight {
		g.why = Reason{Gate: codes.Budget, Code: codes.Budget,
			Message: fmt.Sprintf("disruption budget %s allows %d host(s) in flight and is full (%d/%d)", g.name, g.limit, g.inflight, g.limit)}
		g.whyAt = g.inflight
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
