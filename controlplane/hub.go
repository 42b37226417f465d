package controlplane

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// hub is a replica's view of what every host must do, kept in memory so a
// check-in costs no database read, and the place long-polls wait
// (rfcs/0006 §Check-ins):
//
//   - the leader applies the assignments each of its ticks changed
//     (store.TickReport) and wakes those hosts' long-polls; a replica that
//     does not lead reloads every assignment whenever the store's
//     watermark shows new events (another replica ticked), checked every
//     refreshEvery; new changes (by any replica) kick the leader;
//   - a host whose activation changed wakes its long-polls;
//   - check-ins are collected and written in one batch every flushEvery:
//     their last-seen times, and whether each said the stored status; the
//     next check-in of a host that said another status (the store lost a
//     write) compares its status with the store, whatever its tag
//     (rfcs/0003 rule 8).
type hub struct {
	st  store.Store
	log *slog.Logger
	m   *metrics

	mu       sync.RWMutex
	assign   map[string]reconciler.Assignment
	mark     store.Watermark // the store's watermark at the last look
	board    *board          // wakeTick: agents or operators wrote something a tick must see
	clock    clock.Clock
	waiters  map[string][]*waiter
	followCh chan struct{} // closed when new events or a local tick arrive, then replaced
	// leading: this replica leads the tick (a subscription to the
	// ticker's leadership); the leader's assignments come from its ticks,
	// not from reloads.
	leading atomic.Bool
	// inFleet tells the hosts of the newest verified fleet (ok false
	// while none is known); nil reads as no fleet known.
	inFleet func() (in func(hostname string) bool, ok bool)
	// rewound, when set, is called when the store's watermark went back:
	// it lost writes it had acknowledged (an asynchronous commit lost in a
	// crash, a failover, a restore from a backup).
	rewound func()
	// counts are the assignments by host state (the metric).
	counts map[reconciler.HostState]int

	// flushMu is held by a flush from taking its batch to writing it (or
	// putting it back) and by forgetPruned: a last-seen time taken before
	// hosts are forgotten is never written after their rows were deleted.
	flushMu sync.Mutex
	seenMu  sync.Mutex
	seen    map[string]checkin   // not yet written
	recheck map[string]bool      // hosts whose next check-in compares its status
	last    map[string]time.Time // the last check-in this replica saw
	soaks   map[string]*ended    // the soak (by its start) whose ending check-in this replica wrote, for endRetry
}

const (
	refreshEvery = 250 * time.Millisecond
	flushEvery   = time.Second
)

func newHub(st store.Store, log *slog.Logger, m *metrics, clk clock.Clock, b *board) *hub {
	return &hub{st: st, log: log, m: m, clock: clk, board: b, assign: map[string]reconciler.Assignment{},
		waiters:  map[string][]*waiter{},
		followCh: make(chan struct{}), seen: map[string]checkin{}, recheck: map[string]bool{}, last: map[string]time.Time{},
		soaks: map[string]*ended{}}
}

// activationKey identifies what a host's agent must act on: the target of
// its check-in answer (an activation or a rollback: rollout, closure,
// token) and, while it soaks, the soak whose end its check-ins bring
// (reconciler.AgentAnswer). A change wakes its long-poll. Every other
// state answers no target and the idle cadence, so a change among them
// (a new rollout listing the host as Pending, another gate holding it)
// wakes nothing: the agent has nothing to do, and learns the reason at
// its next check-in. A push thus wakes the hosts it dispatches, not the
// fleet.
func activationKey(a reconciler.Assignment, ok bool) string {
	if !ok {
		return ""
	}
	switch a.Host.State {
	case reconciler.HostActivating, reconciler.HostRollingBack, reconciler.HostSoaking, reconciler.HostRebooting:
		return a.RolloutID + "|" + string(a.Host.State) + "|" + a.Host.Target + "|" + a.Host.Previous + "|" + strconv.FormatInt(a.Host.Since.UnixMicro(), 10)
	}
	return ""
}

// refresh reloads the assignments and wakes the hosts whose activation
// changed.
func (h *hub) refresh(ctx context.Context) error {
	next, err := h.st.Assignments(ctx)
	if err != nil {
		return err
	}
	h.replace(next)
	return nil
}

// replace takes next as every host's assignment, and wakes the hosts whose
// activation changed.
func (h *hub) replace(next map[string]reconciler.Assignment) {
	h.mu.Lock()
	prev := h.assign
	h.assign = next
	var wake []*waiter
	for host, ws := range h.waiters {
		a, ok := next[host]
		b, had := prev[host]
		if activationKey(a, ok) != activationKey(b, had) {
			wake = append(wake, ws...)
			delete(h.waiters, host)
		}
	}
	h.counts = map[reconciler.HostState]int{}
	for _, a := range next {
		h.counts[a.Host.State]++
	}
	counts := maps.Clone(h.counts)
	h.mu.Unlock()
	for _, w := range wake {
		w.wake()
	}
	h.setCounts(counts)
}

func (h *hub) setCounts(counts map[reconciler.HostState]int) {
	for _, s := range reconciler.HostStates {
		h.m.hostsByState.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
}

// update applies the assignments a tick of this replica changed (nil: the
// host is in no live rollout any more), and wakes those hosts'
// long-polls: work proportional to what the tick changed, not to the
// fleet.
func (h *hub) update(changed map[string]*reconciler.Assignment) {
	h.mu.Lock()
	if h.counts == nil {
		h.counts = map[reconciler.HostState]int{}
	}
	// A tick that opens a rollout of 100,000 hosts changes them all: the
	// lock is let go every updateChunk hosts, so that check-ins are not
	// held for the whole of it, and each chunk's long-polls are woken as
	// it is done. A host's assignment is its own: a check-in that finds
	// some hosts updated and others not answers each as of its own.
	var wake []*waiter
	n := 0
	for host, a := range changed {
		b, had := h.assign[host]
		if had {
			h.counts[b.Host.State]--
		}
		if a == nil {
			delete(h.assign, host)
		} else {
			h.assign[host] = *a
			h.counts[a.Host.State]++
		}
		if activationKey(h.assign[host], a != nil) != activationKey(b, had) {
			wake = append(wake, h.waiters[host]...)
			delete(h.waiters, host)
		}
		if n++; n%updateChunk == 0 {
			h.mu.Unlock()
			for _, w := range wake {
				w.wake()
			}
			wake = wake[:0]
			h.mu.Lock()
		}
	}
	counts := maps.Clone(h.counts)
	h.mu.Unlock()
	for _, w := range wake {
		w.wake()
	}
	h.setCounts(counts)
}

// updateChunk is how many hosts' assignments update changes under one
// hold of the lock.
const updateChunk = 4096

// occupancy is budgets' occupancy now (reconciler.Occupancy): a host is in
// flight when its assignment is, since a host's assignment is the rollout
// where it is in flight if there is one. It reads memory, not the store:
// a page costs the budgets' hosts, not the fleet.
func (h *hub) occupancy(budgets []proto.RolloutBudget) []proto.BudgetUse {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return reconciler.Occupancy(budgets, func(host string) bool {
		a, ok := h.assign[host]
		return ok && a.Host.State.InFlight()
	})
}

// get returns a host's assignment.
func (h *hub) get(host string) (reconciler.Assignment, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	a, ok := h.assign[host]
	return a, ok
}

// waiter is a long-poll waiting for its host's activation to change: a
// blocking one (ch, closed) or a parked one (fn, called; park.go).
type waiter struct {
	ch chan struct{}
	fn func()
}

func (w *waiter) wake() {
	if w.fn != nil {
		w.fn()
		return
	}
	close(w.ch)
}

// wait blocks until the host's activation is no longer key (rollout,
// closure, token), d passes, or ctx ends.
func (h *hub) wait(ctx context.Context, host, key string, d time.Duration) {
	w := &waiter{ch: make(chan struct{})}
	if !h.addWaiter(host, key, w) {
		return
	}
	t := h.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.ch:
		return
	case <-t.C():
	case <-ctx.Done():
	}
	h.removeWaiter(host, w)
}

// park calls fn when the host's activation is no longer key or d passes,
// whichever comes first, on a goroutine that must not block; it holds no
// goroutine meanwhile. fn may be called more than once (a wake racing the
// timer): its caller answers once. stop ends the wait. It reports false
// when the activation is not key already.
func (h *hub) park(host, key string, d time.Duration, fn func()) (stop func(), ok bool) {
	var mu sync.Mutex
	var t clock.Timer
	w := &waiter{fn: func() {
		mu.Lock()
		t.Stop()
		mu.Unlock()
		fn()
	}}
	mu.Lock()
	t = h.clock.AfterFunc(d, func() {
		h.removeWaiter(host, w)
		fn()
	})
	mu.Unlock()
	stop = func() {
		mu.Lock()
		t.Stop()
		mu.Unlock()
		h.removeWaiter(host, w)
	}
	if !h.addWaiter(host, key, w) {
		stop()
		return nil, false
	}
	return stop, true
}

// addWaiter adds w to the host's waiters, unless its activation is no
// longer key.
func (h *hub) addWaiter(host, key string, w *waiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, ok := h.assign[host]
	if activationKey(a, ok) != key {
		return false
	}
	h.waiters[host] = append(h.waiters[host], w)
	return true
}

// removeWaiter takes w from the host's waiters (a wait that ended without
// a wake), and reports whether it was there.
func (h *hub) removeWaiter(host string, w *waiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.waiters[host]
	i := slices.Index(ws, w)
	if i < 0 {
		return false
	}
	ws = slices.Delete(ws, i, i+1)
	if len(ws) == 0 {
		delete(h.waiters, host)
	} else {
		h.waiters[host] = ws
	}
	return true
}

// followSignal returns a channel closed when new events are seen or this
// replica ticks: a reader takes it before it reads the store, and reads
// again when it closes.
func (h *hub) followSignal() <-chan struct{} {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.followCh
}

// eventMark is the newest event id the hub has seen in the store: a
// stream whose reads are past it has nothing new to read.
func (h *hub) eventMark() int64 {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.mark.Events
}

// signal closes the current follow signal.
func (h *hub) signal() {
	h.mu.Lock()
	close(h.followCh)
	h.followCh = make(chan struct{})
	h.mu.Unlock()
}

// ticked takes in the assignments the ticks of this replica changed
// (Full: every assignment, after a tick that loaded everything; none
// collected: reload them) and wakes whoever waits for a tick.
func (h *hub) ticked(ctx context.Context, d assignmentDelta) {
	full, changed := d.Full, d.Assign
	switch {
	case changed == nil:
		if err := h.refresh(ctx); err != nil {
			h.log.Error("refreshing assignments", "err", err)
		}
	case full:
		next := make(map[string]reconciler.Assignment, len(changed))
		for host, a := range changed {
			if a != nil {
				next[host] = *a
			}
		}
		h.replace(next)
	default:
		h.update(changed)
	}
	if w, err := h.st.Watermark(ctx); err == nil {
		// The journal's growth is this tick's (the signal below wakes its
		// followers): nothing to reload. Its changes counter is left for
		// checkJournal, which kicks the tick for writes made since.
		h.mu.Lock()
		h.mark.Events = w.Events
		h.mu.Unlock()
	}
	h.signal()
}

// lastSeen returns the last check-in this replica saw of a host (zero
// when none).
func (h *hub) lastSeen(host string) time.Time {
	h.seenMu.Lock()
	defer h.seenMu.Unlock()
	return h.last[host]
}

// ended is the check-in that ended a host's wait this replica wrote at
// once, remembered by the state's start (since) until endRetry has
// passed.
type ended struct{ since time.Time }

// endRetry is how long after writing the check-in that ends a host's
// wait (reconciler.EndsWait) this replica writes the next such check-in
// at once again, while the host's assignment still shows the wait: the
// tick that read the first may not have been able to end it (what the
// host said was not yet on record), and nothing else would make a tick
// before the periodic one. A timer of the replica's clock measures it.
const endRetry = time.Second

// soakSeen reports whether this replica has written, less than endRetry
// ago, the check-in that ends the host's soak that began at since (or,
// for a host rolling back since then, one back on its previous closure).
func (h *hub) soakSeen(host string, since time.Time) bool {
	h.seenMu.Lock()
	defer h.seenMu.Unlock()
	e, ok := h.soaks[host]
	return ok && e.since.Equal(since)
}

// noteSoak notes that the check-in that ends the soak that began at since
// (or one back on the previous closure of a rollback) was written now; it
// is forgotten endRetry later, unless a newer one replaced it.
func (h *hub) noteSoak(host string, since time.Time) {
	e := &ended{since}
	h.seenMu.Lock()
	h.soaks[host] = e
	h.seenMu.Unlock()
	h.clock.AfterFunc(endRetry, func() {
		h.seenMu.Lock()
		defer h.seenMu.Unlock()
		if h.soaks[host] == e {
			delete(h.soaks, host)
		}
	})
}

// checkin is a check-in noted for the next batch: when it came, and the
// digest of the status it carried ("" for a probe report, which carries
// part of one).
type checkin struct {
	at   time.Time
	said string
}

// touch notes a check-in, for the next batch.
func (h *hub) touch(host string, at time.Time, said string) {
	h.seenMu.Lock()
	defer h.seenMu.Unlock()
	if at.After(h.seen[host].at) {
		h.seen[host] = checkin{at: at, said: said}
	}
	if at.After(h.last[host]) {
		h.last[host] = at
	}
}

// forgetPruned runs prune, which deletes the rows of hosts that left the
// fleet and returns their names, with no flush in flight, then drops what
// the hub keeps of them (Server.pruneHosts). A flush that took a batch
// naming them either wrote it before prune ran (prune then judges the
// written time) or starts after they were dropped.
func (h *hub) forgetPruned(prune func() ([]string, error)) ([]string, error) {
	h.flushMu.Lock()
	defer h.flushMu.Unlock()
	gone, err := prune()
	if err != nil {
		return nil, err
	}
	h.seenMu.Lock()
	defer h.seenMu.Unlock()
	for _, host := range gone {
		delete(h.seen, host)
		delete(h.recheck, host)
		delete(h.last, host)
		delete(h.soaks, host)
	}
	return gone, nil
}

// flush writes the collected check-ins of the hosts of the fleet. A host
// outside the newest verified fleet is refused at check-in; its time,
// noted before the fleet left it out (on this replica or another), is
// dropped, so that it cannot bring back a host the leader forgot. A
// check-in that carried another status than the stored one — the store
// lost a status write it acknowledged, after which the host's tagged
// check-ins no longer compare (rfcs/0007 §Status tags) — writes that
// status again, as a check-in that compared would.
func (h *hub) flush(ctx context.Context) error {
	h.flushMu.Lock()
	defer h.flushMu.Unlock()
	h.seenMu.Lock()
	batch := h.seen
	h.seen = map[string]checkin{}
	h.seenMu.Unlock()
	if h.inFleet != nil {
		if in, ok := h.inFleet(); ok {
			maps.DeleteFunc(batch, func(host string, _ checkin) bool { return !in(host) })
		}
	}
	if len(batch) == 0 {
		return nil
	}
	seen := make(map[string]store.Seen, len(batch))
	for host, c := range batch {
		seen[host] = store.Seen{At: c.at, Said: c.said}
	}
	unsaid, err := h.st.TouchHosts(ctx, seen)
	if err != nil {
		h.seenMu.Lock() // keep them for the next flush
		for k, v := range batch {
			if v.at.After(h.seen[k].at) {
				h.seen[k] = v
			}
		}
		h.seenMu.Unlock()
		return err
	}
	if len(unsaid) == 0 {
		return nil
	}
	h.m.rechecks.Add(float64(len(unsaid)))
	h.log.Warn("check-ins carried another status than the store holds (a lost write?); their hosts' next check-ins compare it",
		"hosts", len(unsaid), "first", unsaid[0])
	h.seenMu.Lock()
	for _, host := range unsaid {
		h.recheck[host] = true
	}
	h.seenMu.Unlock()
	return nil
}

// takeRecheck reports whether the host's next check-in must compare its
// status with the store whatever its tag, and clears the mark: its status
// is written again if the store lost it.
func (h *hub) takeRecheck(host string) bool {
	h.seenMu.Lock()
	defer h.seenMu.Unlock()
	if !h.recheck[host] {
		return false
	}
	delete(h.recheck, host)
	return true
}

// run refreshes when the journal grows and flushes last-seen times, until
// ctx ends (then it flushes once more).
func (h *hub) run(ctx context.Context) {
	rt := h.clock.NewTicker(refreshEvery)
	ft := h.clock.NewTicker(flushEvery)
	defer rt.Stop()
	defer ft.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = h.flush(fctx)
			cancel()
			return
		case <-rt.C():
			if err := h.checkJournal(ctx); err != nil && ctx.Err() == nil {
				h.log.Error("watching the journal", "err", err)
			}
		case <-ft.C():
			if err := h.flush(ctx); err != nil && ctx.Err() == nil {
				h.log.Error("recording last-seen times", "err", err)
			}
		}
	}
}

// checkJournal looks at the store's watermark: new events (a tick here or
// on another replica) refresh the assignments and wake followers; new
// changes (status, activations, intents, releases written by any replica)
// ask the leader for a tick.
func (h *hub) checkJournal(ctx context.Context) error {
	w, err := h.st.Watermark(ctx)
	if err != nil {
		return err
	}
	h.mu.RLock()
	prev := h.mark
	h.mu.RUnlock()
	if w.Changes < prev.Changes || w.Events < prev.Events || w.Seen < prev.Seen {
		h.log.Warn("the store went back in time: it lost writes it had acknowledged (a crash of an asynchronous commit, a failover, a restore)",
			"changes", w.Changes, "before", prev.Changes, "events", w.Events, "eventsBefore", prev.Events, "seen", w.Seen, "seenBefore", prev.Seen)
		if h.rewound != nil {
			h.rewound()
		}
	}
	if w.Changes != prev.Changes {
		h.board.post(wakeTick)
	}
	if w.Events != prev.Events && !h.leading.Load() {
		if err := h.refresh(ctx); err != nil {
			return err
		}
	}
	h.mu.Lock()
	h.mark = w
	if w.Events != prev.Events {
		close(h.followCh)
		h.followCh = make(chan struct{})
	}
	h.mu.Unlock()
	return nil
}
