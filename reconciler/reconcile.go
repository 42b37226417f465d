package reconciler

import (
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/schedule"
)

// Reconcile runs one tick: from the verified releases, the rollouts, what
// the hosts report and what operators asked, it decides what happens next.
// It is pure: no clock, no I/O, no randomness; the same input gives the
// same output, in the same order. The steps, in order (rfcs/0003):
//
//  0. what the control plane can see: channels entering or leaving
//     partial visibility;
//  1. operator intents, oldest first (those newer than now wait);
//  2. host observations: confirms, failures, timeouts, health, soak;
//  3. canary analysis of each Active rollout's current wave (rule 16),
//     then health policy: too many failures trigger onHealthFailure;
//  4. channel by channel, predecessors first (channel edges), so that a
//     channel sees its predecessors' final state of the tick:
//     a. its rollouts, oldest first, dispatch: promote finished waves,
//     skip offline hosts, pass Pending hosts through the gates under
//     the disruption budgets, send rollbacks in reverse edge order;
//     b. their readiness deadlines;
//     c. a moved ref opens a rollout (dispatched at once), waits for the
//     active one, or is deferred by a channel edge.
//
// Applying the output and reconciling again at the same time decides
// nothing more: the tick is a fixpoint.
func Reconcile(in Input) Output {
	t := newTick(in)
	t.see()
	t.intents()
	// A pass can change what an earlier part of the same pass would have
	// decided (a rollout stops counting and frees budget, a host a rollback
	// waited for is back). Passes repeat until one changes nothing, so the
	// output is a fixpoint; a pass costs one walk over the hosts.
	for range maxPasses {
		t.moved = false
		t.pass()
		if !t.moved || t.cut {
			break
		}
	}
	return t.output()
}

// maxPasses bounds the passes of one tick. Passes after the first only
// finish what the first one's changes made possible; two or three suffice.
const maxPasses = 8

func (t *tick) pass() {
	t.deferrals = t.deferrals[:0]
	clear(t.reached)
	for _, r := range t.rollouts {
		t.observe(r)
	}
	for _, r := range t.rollouts {
		t.analyze(r)
	}
	// The failures a tick observed are judged in that tick, also when it
	// stopped at its bound: a converged rollout judges only the failures
	// that are new to the tick.
	for _, r := range t.rollouts {
		t.healthPolicy(r)
	}
	// A tick stopped at its bound dispatches, reverts and opens nothing
	// more, and judges no deadline: the next tick, at once, goes on.
	if t.cut {
		return
	}
	t.buildBudgets()
	done := map[*work]bool{}
	step := func(channel string) {
		for _, w := range slices.Clone(t.rollouts) {
			if !done[w] && (channel == "" || w.r.Channel == channel) && !t.cut {
				done[w] = true
				if t.dispatch(w); !t.cut {
					t.deadline(w)
				}
			}
		}
	}
	for _, name := range t.order {
		if step(name); t.cut {
			return
		}
		t.reached[name] = true
		if w := t.openChannel(name); w != nil {
			done[w] = true
			// The channel's hosts are now the new rollout's: judge its
			// visibility again, so that this tick decides as the next
			// one at the same time would (rfcs/0003 rule 6).
			if t.rejudge(name) {
				t.moved = true
			}
			t.addBudgets(w)
			t.dispatch(w)
		}
	}
	step("") // rollouts of channels that have no verified release
}

// tick is the working state of one Reconcile call.
type tick struct {
	in       Input
	now      time.Time
	obs      map[string]ObservedHost
	channels map[string]*Channel
	order    []string // channel names, predecessors first
	rollouts []*work  // by (OpenedAt, ID)
	byID     map[string]*work

	partial      map[string]bool         // channels in partial visibility
	recovering   map[string]time.Time    // channels that left it, and when
	verdicts     map[string]verdict      // visibility, per channel
	prevVis      map[string]Visibility   // the previous tick's records
	visMsg       map[string]Reason       // their gate, per channel
	pendingLists []groupList             // budgets of the releases about to open
	moved        bool                    // something changed in the current pass
	deferSeen    map[Deferral]bool       // deferrals reported in this tick
	groups       map[string]*budgetGroup // by selector key
	inFlight     map[string]*work        // hosts in flight, and where
	quarantine   map[string][]Quarantine // the hosts that report quarantines (quarantined builds it)
	deferrals    []Deferral
	prevDeferOK  map[Deferral]bool
	chUpdates    []ChannelUpdate
	events       []Event
	actions      []HostAction
	results      []IntentResult
	openBreaks   map[string]*FreezeBreak           // break-freezes for refs about to open, per channel
	windowStatus map[*proto.Window]schedule.Status // windowsAt's, by list
	frozen       map[string][]proto.Freeze         // freezesOf's, by channel
	measurements map[runKey][]Measurement          // the input's, by run, in Seq order
	// wakeAt is the earliest time after now at which a comparison the tick
	// made with its time would come out otherwise (Output.QuietUntil).
	wakeAt time.Time
	// bound is Tunables.MaxHostMoves (0: none); touched counts the host
	// records the tick changed, and cut says it stopped at the bound with
	// a host left to consider (Output.More).
	bound, touched int
	cut            bool
	// reached: the channels whose refs the current pass judged (step 4c);
	// a tick cut before a channel keeps its deferrals as they came in.
	reached map[string]bool
}

// spent reports whether the tick has changed as many host records as it
// may (Tunables.MaxHostMoves): the loops that move hosts stop there,
// before the next host they would consider, and the tick says More.
func (t *tick) spent() bool {
	if t.bound > 0 && t.touched >= t.bound {
		t.cut = true
		return true
	}
	return false
}

// wake notes that a decision of the tick depends on now being before at:
// at that time a tick on the same input may decide otherwise.
func (t *tick) wake(at time.Time) {
	if at.After(t.now) && (t.wakeAt.IsZero() || at.Before(t.wakeAt)) {
		t.wakeAt = at
	}
}

// work is a rollout being reconciled: a private copy of its record plus
// what changed.
type work struct {
	r        Rollout
	isNew    bool
	from     RolloutState
	changed  bool
	orig     map[int]RolloutHost // hosts as they came in, saved when first changed
	waveMsg  map[int]Reason      // the wave gate's reason, per wave
	waves    [][]int             // host indexes per wave
	preds    map[int][]int       // host index -> predecessor indexes
	succs    map[int][]int       // host index -> successor indexes
	groupOf  []*budgetGroup      // per budget index of the rollout
	counting bool                // its budgets count in this pass
	stale    bool                // no longer its channel's current rollout (groupsOf)
	held     [][]*budgetGroup    // by host index: the groups each host in flight holds a slot in
	failed0  int                 // its failures when the tick began
	latest   bool                // the latest rollout of its channel
	// runsOwned: r.Analyses is this tick's copy, not the input's.
	runsOwned bool
	// hostsOwned: r.Hosts is this tick's copy, not the input's (touch).
	hostsOwned bool
}

func newTick(in Input) *tick {
	t := &tick{in: in, now: in.Now, obs: in.Hosts, channels: map[string]*Channel{}, byID: map[string]*work{},
		groups: map[string]*budgetGroup{}, prevDeferOK: map[Deferral]bool{}, deferSeen: map[Deferral]bool{},
		openBreaks: map[string]*FreezeBreak{}, measurements: indexMeasurements(in.Measurements),
		bound: in.Tunables.maxHostMoves(), reached: map[string]bool{}}
	if t.obs == nil {
		t.obs = map[string]ObservedHost{}
	}
	for i := range in.Channels {
		c := in.Channels[i]
		t.channels[c.Name] = &c
	}
	for _, d := range in.Deferrals {
		t.prevDeferOK[d] = true
	}
	for i := range in.Rollouts {
		w := newWork(in.Rollouts[i], false)
		t.rollouts = append(t.rollouts, w)
		t.byID[w.r.ID] = w
	}
	t.sortRollouts()
	t.order = t.channelOrder()
	return t
}

// newWork is the tick's working copy of rollout r. The host records of a
// rollout this tick opens (isNew) were built for it, and are its own; those
// of a rollout of the Input (the caller's) are read where they are, and
// copied before the first change (touch): most ticks change few or no
// hosts of most rollouts, and at 100,000 hosts a copy per rollout per tick
// was a measurable part of every tick.
func newWork(r Rollout, isNew bool) *work {
	w := &work{r: r, isNew: isNew, from: r.State, hostsOwned: isNew}
	if isNew {
		w.from = ""
	}
	byName := func(a, b RolloutHost) int { return strings.Compare(a.Hostname, b.Hostname) }
	if !slices.IsSortedFunc(w.r.Hosts, byName) {
		w.ownHosts()
		slices.SortFunc(w.r.Hosts, byName)
	}
	w.orig = map[int]RolloutHost{}
	w.waveMsg = map[int]Reason{}
	if r.State == RolloutConverged {
		w.failed0 = w.failures()
	}
	w.waves = make([][]int, max(len(r.Waves), 1))
	for i, h := range w.r.Hosts {
		wv := min(max(h.Wave, 0), len(w.waves)-1)
		w.waves[wv] = append(w.waves[wv], i)
	}
	if !slices.IsSortedFunc(r.Edges, compareEdges) {
		w.r.Edges = slices.Clone(r.Edges)
		sortEdges(w.r.Edges)
	}
	w.preds, w.succs = map[int][]int{}, map[int][]int{}
	for _, e := range r.Edges {
		a, b := w.index(e.Gates), w.index(e.Gated)
		if a < 0 || b < 0 || a == b {
			continue
		}
		w.preds[b] = append(w.preds[b], a)
		w.succs[a] = append(w.succs[a], b)
	}
	// Host indexes follow hostname order: sorted lists make reasons that
	// name "the first" predecessor independent of the order of Edges.
	for _, m := range []map[int][]int{w.preds, w.succs} {
		for k := range m {
			slices.Sort(m[k])
			m[k] = slices.Compact(m[k])
		}
	}
	return w
}

func (t *tick) sortRollouts() {
	slices.SortFunc(t.rollouts, func(a, b *work) int {
		if c := a.r.OpenedAt.Compare(b.r.OpenedAt); c != 0 {
			return c
		}
		return strings.Compare(a.r.ID, b.r.ID)
	})
	latest := map[string]*work{}
	for _, w := range t.rollouts {
		w.latest = false
		latest[w.r.Channel] = w
	}
	for _, w := range latest {
		w.latest = true
	}
}

// touch makes the rollout's host records the tick's own (the first touch
// of a rollout copies them) and saves host i's record before its first
// change in the tick. Every change of a host record comes after a touch;
// a pointer into r.Hosts taken before one is stale after it, and is taken
// again (setHost, block and their callers do).
func (w *work) touch(i int) (first bool) {
	w.ownHosts()
	if _, saved := w.orig[i]; !saved {
		w.orig[i] = w.r.Hosts[i]
		return true
	}
	return false
}

// touch is w.touch, counting the host records the tick changed (spent).
func (t *tick) touch(w *work, i int) {
	if w.touch(i) {
		t.touched++
	}
}

// ownHosts copies the Input's host records of the rollout, once.
func (w *work) ownHosts() {
	if !w.hostsOwned {
		w.r.Hosts = slices.Clone(w.r.Hosts)
		w.hostsOwned = true
	}
}

// index finds a host by name in the sorted host list, or -1.
func (w *work) index(name string) int {
	i := sort.Search(len(w.r.Hosts), func(i int) bool { return w.r.Hosts[i].Hostname >= name })
	if i < len(w.r.Hosts) && w.r.Hosts[i].Hostname == name {
		return i
	}
	return -1
}

// ---- events and changes ----

func (t *tick) emit(e Event) { t.events = append(t.events, e) }

// setRollout moves a rollout to a new state through the state machine.
func (t *tick) setRollout(w *work, ev RolloutEvent, reason Reason) bool {
	to, err := w.r.State.Next(ev)
	if err != nil {
		return false
	}
	t.emit(Event{Kind: EventRolloutTransition, RolloutID: w.r.ID, Channel: w.r.Channel, Wave: w.r.Wave,
		From: string(w.r.State), To: string(to), Reason: reason})
	w.r.State, w.r.Reason, w.r.UpdatedAt, w.r.ProgressAt = to, reason, t.now, t.now
	w.changed, t.moved = true, true
	return true
}

// setHost moves a host through the state machine, records the reason and
// emits the transition.
func (t *tick) setHost(w *work, i int, ev HostEvent, reason Reason) bool {
	h := &w.r.Hosts[i]
	to, err := h.State.Next(ev)
	if err != nil {
		return false
	}
	t.emit(Event{Kind: EventHostTransition, RolloutID: w.r.ID, Channel: w.r.Channel, Wave: h.Wave, Host: h.Hostname,
		From: string(h.State), To: string(to), Reason: reason})
	t.touch(w, i)
	h = &w.r.Hosts[i]
	h.State, h.Since, h.Reason, h.Blocked = to, t.now, reason, Reason{}
	w.r.ProgressAt = t.now
	w.changed, t.moved = true, true
	return true
}

// block records why a host was held; an event is emitted only when the
// reason changes, and not for hosts merely waiting for their wave.
func (t *tick) block(w *work, i int, why Reason) {
	h := &w.r.Hosts[i]
	if h.Blocked == why {
		return
	}
	if w.isNew && (why.Gate == codes.WaveNotActive || why.Gate == "") {
		// A rollout this tick opens writes all its hosts with it; a host
		// merely waiting for its wave there is no move (spent).
		w.touch(i)
	} else {
		t.touch(w, i)
	}
	h = &w.r.Hosts[i]
	h.Blocked = why
	t.moved = true
	if why.Gate != codes.WaveNotActive && why.Gate != "" {
		e := Event{Kind: EventHostWaiting, RolloutID: w.r.ID, Channel: w.r.Channel, Wave: h.Wave, Host: h.Hostname,
			From: string(h.State), Reason: why}
		if why.Gate == codes.Budget {
			if g := t.full(w, i); g != nil {
				e.Budgets = []BudgetUse{g.use()}
			}
		}
		t.emit(e)
	}
}
