package controlplane

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/kept"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/reconciler"
)

// ticker elects the replica that ticks and runs the ticks
// (rfcs/0006 §Tick loop):
//
//   - every replica tries to take the tick lease every LeaseTTL/3, on a
//     goroutine of its own, and the holder renews it; a holder that dies
//     loses it when it expires, and another replica takes over with a
//     higher epoch;
//   - the leader ticks every TickInterval, at the WakeAt the last tick
//     named, and when kicked (a status change, a release, an intent): at
//     once, or at the end of the Debounce window when a tick started
//     within it; ticks that run on triggers and deadlines take about half
//     the replica's time beyond a burst (tickShare), so that a stream of
//     them leaves the rest to the check-ins they wait for;
//   - each tick is store.Tick: one transaction that fences on the lease, so
//     a replica that lost the lease cannot write, and that extends the
//     lease by LeaseTTL as it commits, so a tick longer than LeaseTTL does
//     not cost it (on PostgreSQL the renewals do not wait for a tick
//     either: store/lease.go); it is skipped (quiet) when nothing changed
//     and nothing is due, and followed at once by the next when it left
//     changed statuses unread or the reconciler stopped at its bound
//     (reconciler.Tunables.MaxHostMoves).
type ticker struct {
	st      store.Store
	cfg     *Config
	replica string
	log     *slog.Logger
	m       *metrics
	kickCh  chan struct{}
	board   *board // wakeTicked after a committed tick
	// measure gets each committed tick's canary measurements due (the
	// analyzer's schedule).
	measure func([]reconciler.MeasureRequest)
	// leader is whether this replica holds the tick lease; lead sets it.
	leader leadership
	mu     sync.Mutex
	// beforeRelease, when set, runs before a leader shutting down gives
	// its lease up (the notifier finishing its POSTs in flight).
	beforeRelease func()
	// What the last ticks said: the QuietUntil and WakeAt of the last one
	// that decided, when it decided, and when a tick last compared the
	// kept input with a cold load (or loaded one).
	quiet, wake, lastDecide, lastVerify time.Time
	// retryAt: the last tick failed; the deadline it leaves (wakeAt) is
	// not before this.
	retryAt time.Time
	// rewinds counts the times the hub saw the store go back in time
	// (rewound), the last at rewoundAt; rewindsDone is the count the last
	// committed tick had seen. A tick that sees more starts a new watch,
	// unless the last was longer ago than maxGap (a follower's, say, that
	// leads much later).
	rewinds, rewindsDone int
	rewoundAt            time.Time
	// verifying: a comparison with a cold load runs (verifyKept);
	// verifies waits for it when the loop stops.
	verifying bool
	verifies  sync.WaitGroup
	// releasing counts the releases being read and verified (a poll of
	// the source, from a moved ref to its store): the reaction to a push
	// has the cores. No comparison starts meanwhile, and a running one
	// gives way (verifyCancel) and is due again verifyRetry later.
	releasing    int
	verifyCancel context.CancelFunc
	// deltas are the assignments committed ticks changed, for the hub.
	deltas assignmentDeltas
	// kept is the input this replica keeps between the ticks of its
	// lease, and the host rows it still owes (package kept).
	kept kept.Keeper
	// forecasts are made beside the ticks, from what they leave.
	forecasts *forecaster
}

func newTicker(st store.Store, cfg *Config, replica string, log *slog.Logger, m *metrics, b *board) *ticker {
	t := &ticker{st: st, cfg: cfg, replica: replica, log: log, m: m, kickCh: make(chan struct{}, 1), board: b}
	t.leader.subscribe(func(l store.Lease, leading bool) {
		if leading {
			t.m.leader.Set(1)
			t.log.Info("leading the tick", "replica", t.replica, "epoch", l.Epoch)
			t.kick()
		} else {
			t.m.leader.Set(0)
		}
	})
	return t
}

// rewound says the store went back in time (hub.rewound): it lost writes
// it had acknowledged, last-seen times among them, so the next tick starts
// a new watch (store.TickParams.Rewound), and comes soon.
func (t *ticker) rewound() {
	t.mu.Lock()
	t.rewinds++
	t.rewoundAt = t.cfg.Clock.Now()
	t.mu.Unlock()
	t.kick()
}

// kick asks for a tick soon.
func (t *ticker) kick() {
	select {
	case t.kickCh <- struct{}{}:
	default:
	}
}

func (t *ticker) isLeader() (store.Lease, bool) { return t.leader.current() }

func (t *ticker) setLeader(l store.Lease, ok bool) { t.setLeaderWhy(l, ok, "lost the tick lease") }

// setLeaderWhy records the lease held, or that none is, saying why when it
// was held.
func (t *ticker) setLeaderWhy(l store.Lease, ok bool, why string) {
	if t.leader.set(l, ok) && !ok {
		t.log.Warn(why, "replica", t.replica)
		t.m.forgetTicks() // another replica shows them now
	}
}

// lead keeps or takes the lease.
func (t *ticker) lead(ctx context.Context) {
	now := t.cfg.Clock.Now()
	l, ok := t.isLeader()
	if ok {
		nl, err := t.st.RenewLease(ctx, l, t.cfg.LeaseTTL, now)
		if err == nil {
			t.setLeader(nl, true)
			return
		}
		if !errors.Is(err, store.ErrNotLeader) {
			t.log.Error("renewing the tick lease", "err", err)
			if now.Before(l.Expires) {
				return // still ours until it expires; try again
			}
		}
		t.setLeader(store.Lease{}, false)
	}
	nl, err := t.st.AcquireLease(ctx, store.TickLease, t.replica, t.cfg.LeaseTTL, now)
	switch {
	case err == nil:
		t.setLeader(nl, true)
	case !errors.Is(err, store.ErrLeaseHeld):
		t.log.Error("taking the tick lease", "err", err)
	}
}

// run leads and ticks until ctx ends; then it gives the lease up so
// another replica takes over at once. The lease is taken and renewed on
// its own goroutine (leadLoop), so that a long tick never lets it lapse.
// A trigger ticks at once when no tick started within the last Debounce
// (leading edge); triggers within that window, or during a tick, become
// one tick at its end. A trigger or a deadline also waits while the ticks
// have taken more than their share of the replica's time (tickShare).
// Besides the periodic tick, the loop ticks when the
// last tick's QuietUntil comes (rfcs/0003 §Quiet ticks): a confirm window
// closing or a soak ending is decided then, not at the next period.
func (t *ticker) run(ctx context.Context) {
	leadCtx, stopLead := context.WithCancel(ctx)
	leadDone := make(chan struct{})
	t.lead(ctx)
	go func() { defer close(leadDone); t.leadLoop(leadCtx) }()
	tickT := t.cfg.Clock.NewTicker(t.cfg.TickInterval)
	defer tickT.Stop()
	var (
		lastStart  time.Time
		share      = tickShare{credit: tickBurst}
		delayed    clock.Timer // the end of a debounce window
		delayedC   <-chan time.Time
		quietT     clock.Timer // the last tick's QuietUntil
		quietC     <-chan time.Time
		quietArmed time.Time
	)
	stop := func(tm clock.Timer) {
		if tm != nil {
			tm.Stop()
		}
	}
	defer func() { stop(delayed); stop(quietT) }()
	tickNow := func() {
		lastStart = t.cfg.Clock.Now()
		began := time.Now() // tick time is the process's, whatever cfg.Clock says
		// A tick that left changed statuses unread, or host moves past
		// its bound (store.TickReport.More), is followed at once by the
		// next: each goes on from the last.
		for t.tick(ctx) && ctx.Err() == nil {
		}
		share.spend(began, time.Now())
		// Wake at the next deadline the last tick named.
		if at := t.wakeAt(); !at.Equal(quietArmed) {
			stop(quietT)
			quietT, quietC, quietArmed = nil, nil, at
			if !at.IsZero() {
				quietT = t.cfg.Clock.NewTimer(max(at.Sub(t.cfg.Clock.Now()), 0))
				quietC = quietT.C()
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			stopLead()
			<-leadDone
			t.verifies.Wait() // its context ended too
			if t.forecasts != nil {
				t.forecasts.wait() // stopped at its next tick
			}
			if _, ok := t.isLeader(); ok && t.beforeRelease != nil {
				t.beforeRelease()
			}
			if l, ok := t.isLeader(); ok {
				rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = t.st.ReleaseLease(rctx, l) // best effort; it expires anyway
				cancel()
				t.setLeaderWhy(store.Lease{}, false, "gave up the tick lease (shutting down)")
			}
			return
		case <-tickT.C():
			tickNow()
		case <-quietC:
			quietT, quietC, quietArmed = nil, nil, time.Time{}
			if delayed != nil {
				continue // a tick is due at the end of the window already
			}
			if wait := share.wait(time.Now()); wait > 0 {
				delayed = clock.Real{}.NewTimer(wait)
				delayedC = delayed.C()
				continue
			}
			tickNow()
		case <-delayedC:
			delayed, delayedC = nil, nil
			tickNow()
		case <-t.kickCh:
			if delayed != nil {
				continue // a tick is due at the end of the window already
			}
			// The debounce runs on the replica's clock, the tick budget on
			// the process's time.
			var debounce time.Duration
			if !lastStart.IsZero() {
				debounce = t.cfg.Debounce - t.cfg.Clock.Since(lastStart)
			}
			if rest := share.wait(time.Now()); rest > 0 && rest >= debounce {
				delayed = clock.Real{}.NewTimer(rest)
				delayedC = delayed.C()
				continue
			} else if debounce > 0 {
				delayed = t.cfg.Clock.NewTimer(debounce)
				delayedC = delayed.C()
				continue
			}
			tickNow()
		}
	}
}

// tickShare keeps the ticks that run on triggers and deadlines to about
// half the replica's time. Its credit is the tick time left: ticks spend
// what they take, time refills half of what passes (ticks included), up
// to tickBurst, so a stream of ticks runs back to back for about twice
// tickBurst. Below zero, a trigger or a deadline waits until the credit
// is back, at most maxRest: ticks of up to maxRest then take about half
// the time, longer ones get maxRest of rest each. The debt is floored at
// maxRest, so a calm spell of 2 × (tickBurst + maxRest) gives the whole
// burst back. Under a stream of triggers (a fleet onboarding, a
// reconnect storm) the check-ins the ticks wait for get the other half; a
// push or a status change in a calm fleet finds credit and ticks at once.
// It counts the process's time (time.Now), not the replica's clock, which
// tests move by hand.
type tickShare struct {
	credit time.Duration
	at     time.Time // when credit was counted
}

// tickBurst is the tick time ticks may take back to back before their
// share applies; maxRest bounds a wait for credit.
const (
	tickBurst = 5 * time.Second
	maxRest   = time.Second
)

func (s *tickShare) refill(now time.Time) {
	if !s.at.IsZero() && now.After(s.at) {
		s.credit = min(s.credit+now.Sub(s.at)/2, tickBurst)
	}
	if now.After(s.at) {
		s.at = now
	}
}

// spend counts ticks that ran from start to end; the debt stops at
// maxRest.
func (s *tickShare) spend(start, end time.Time) {
	s.refill(end)
	s.credit = max(s.credit-max(end.Sub(start), 0), -maxRest)
}

// wait is how long work at now waits for credit: until the refill brings
// it back to zero, at most maxRest.
func (s *tickShare) wait(now time.Time) time.Duration {
	s.refill(now)
	if s.credit >= 0 {
		return 0
	}
	return min(-2*s.credit, maxRest)
}

// leadLoop keeps or takes the lease every LeaseTTL/3 until ctx ends.
func (t *ticker) leadLoop(ctx context.Context) {
	leadT := t.cfg.Clock.NewTicker(max(t.cfg.LeaseTTL/3, 10*time.Millisecond))
	defer leadT.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-leadT.C():
			t.lead(ctx)
		}
	}
}

// maxGap is the longest time between two committed ticks that keeps the
// control plane's watch over its hosts (store.TickParams): the time ticks
// can be apart when all is well (a tick interval, and a lease passing to
// another replica), and never less than half the offline threshold, which
// a host that checks in at least that often cannot be silent for without
// a check-in recorded.
func (t *ticker) maxGap() time.Duration {
	return max(t.cfg.Tunables.OfflineThreshold()/2, t.cfg.TickInterval+2*t.cfg.LeaseTTL)
}

// Quiet ticks (rfcs/0006 §Tick loop 4).
const (
	// tickRetry is how soon a deadline is tried again after a tick failed.
	tickRetry = time.Second
	// maxQuiet bounds how long ticks are skipped as quiet: at least this
	// often the reconciler decides, whatever the last tick said.
	maxQuiet = 5 * time.Minute
	// verifyEvery is how often the input the store keeps is compared with
	// a cold load, beside the ticks (store.VerifyKept).
	verifyEvery = 10 * time.Minute
	// verifyRetry is when a comparison that gave way to a release is due
	// again.
	verifyRetry = time.Minute
)

// tick runs one tick if this replica leads: from the input the store
// keeps, skipped when nothing changed and the last tick's QuietUntil has
// not come (within maxQuiet); every verifyEvery a committed tick starts
// a comparison of the kept input with a cold load beside the ticks.
// It reports whether the tick committed and left changed statuses for the
// next one.
func (t *ticker) tick(ctx context.Context) (more bool) {
	l, ok := t.isLeader()
	if !ok {
		return
	}
	start := time.Now()
	now := t.cfg.Clock.Now()
	t.mu.Lock()
	skip := t.quiet
	if t.lastDecide.IsZero() || now.Sub(t.lastDecide) >= maxQuiet {
		skip = time.Time{}
	} else if skip.IsZero() || skip.After(t.lastDecide.Add(maxQuiet)) {
		skip = t.lastDecide.Add(maxQuiet)
	}
	verify := !t.lastVerify.IsZero() && now.Sub(t.lastVerify) >= verifyEvery && !t.verifying
	rewinds := t.rewinds
	rewound := rewinds > t.rewindsDone && now.Sub(t.rewoundAt) <= t.maxGap()
	t.mu.Unlock()
	var watching time.Time
	var channels []string
	var rollouts map[reconciler.RolloutState]int
	var rep store.TickReport
	var committed time.Duration // until the tick committed
	decided := false
	out, err := t.st.Tick(ctx, store.TickParams{Kept: &t.kept, Lease: l, LeaseTTL: t.cfg.LeaseTTL, Clock: t.cfg.Clock.Now, Tunables: t.cfg.Tunables, MaxGap: t.maxGap(),
		Rewound: rewound, SkipBefore: skip, Report: func(r store.TickReport) {
			// The tick committed: the hub hands out what it changed
			// while the store may still write rows it deferred.
			if committed == 0 {
				committed = time.Since(start)
			}
			rep = r
			if !r.Skipped {
				t.deltas.add(r)
				t.board.post(wakeTicked)
			}
		}},
		func(in reconciler.Input) (reconciler.Output, error) {
			watching, decided = in.WatchingSince, true
			out := reconciler.Reconcile(in)
			// Taken here: the store applies the output to the input it
			// keeps once this returns.
			channels = make([]string, len(in.Channels))
			for i, c := range in.Channels {
				channels[i] = c.Name
			}
			rollouts = countRollouts(in.Rollouts, out.Rollouts)
			if t.forecasts != nil {
				t.forecasts.decided(in, out)
			}
			return out, nil
		})
	t.m.tickDuration.Observe(time.Since(start).Seconds())
	switch {
	case errors.Is(err, store.ErrNotLeader):
		t.m.ticks.WithLabelValues("not_leader").Inc()
		t.log.Warn("tick refused: this replica no longer holds the lease", "err", err)
		t.setLeader(store.Lease{}, false)
		return
	case err != nil:
		t.m.ticks.WithLabelValues("error").Inc()
		if ctx.Err() == nil {
			t.log.Error("tick", "err", err)
		}
		t.mu.Lock()
		t.retryAt = now.Add(tickRetry)
		t.mu.Unlock()
		return
	}
	t.mu.Lock()
	t.retryAt = time.Time{}
	t.rewindsDone = max(t.rewindsDone, rewinds)
	if t.releasing > 0 {
		verify = false // a release is being verified: not now
	}
	if verify || rep.Full {
		t.lastVerify = now
	}
	if verify && !rep.Full {
		t.verifying = true
		vctx, cancel := context.WithCancel(ctx)
		t.verifyCancel = cancel
		t.verifies.Go(func() { t.verifyKept(ctx, vctx) })
	}
	if decided {
		t.lastDecide, t.quiet, t.wake = now, out.QuietUntil, out.WakeAt
	}
	t.mu.Unlock()
	if rep.Full {
		t.m.fullLoads.Inc()
	}
	if rep.Skipped {
		t.m.ticks.WithLabelValues("quiet").Inc()
		t.board.post(wakeQuiet)
		return
	}
	if rep.More {
		t.m.ticks.WithLabelValues("partial").Inc()
	} else {
		t.m.ticks.WithLabelValues("ok").Inc()
	}
	if t.measure != nil {
		t.measure(out.Measure)
	}
	if t.forecasts != nil {
		t.forecasts.ended(ctx, now, out)
		t.forecasts.kick(ctx)
	}
	t.m.observeTick(out)
	t.m.observeSight(watching, channels, out.Visibility)
	if decided {
		t.m.observeRollouts(rollouts)
	}
	if len(out.Events) > 0 || rep.Full {
		t.log.Info("tick", "actions", len(out.Actions), "events", len(out.Events),
			"rollouts", len(out.Rollouts), "hosts", len(out.Hosts), "committed", committed, "duration", time.Since(start), "full", rep.Full)
	} else {
		t.log.Debug("tick", "hosts", len(out.Hosts), "changed", rep.Changed, "more", rep.More,
			"committed", committed, "duration", time.Since(start))
	}
	return rep.More
}

// verifyingNow reports whether a comparison with a cold load runs.
func (t *ticker) verifyingNow() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.verifying
}

// releaseBegins says that a release is being read and verified, until
// end is called: a comparison with a cold load running gives way to it
// (its 2 s of CPU at 100,000 hosts would lengthen push→dispatch by as
// much on two cores) and is due again verifyRetry later; none starts
// until end.
func (t *ticker) releaseBegins() (end func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.releasing++
	if t.verifyCancel != nil {
		t.verifyCancel()
		t.verifyCancel = nil
		t.lastVerify = t.cfg.Clock.Now().Add(verifyRetry - verifyEvery)
	}
	return sync.OnceFunc(func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.releasing--
	})
}

// verifyKept compares the input the store keeps with a cold load, beside
// the ticks (store.VerifyKept): a difference is a bug, logged and counted,
// and the next tick loads in full. vctx, of ctx, ends when the comparison
// gives way to a release (releaseBegins).
func (t *ticker) verifyKept(ctx, vctx context.Context) {
	start := time.Now()
	rep, err := t.st.VerifyKept(vctx, &t.kept)
	t.mu.Lock()
	t.verifying = false
	if t.verifyCancel != nil {
		t.verifyCancel()
		t.verifyCancel = nil
	}
	t.mu.Unlock()
	switch {
	case ctx.Err() != nil: // shutting down: whatever it found is moot
	case err != nil && vctx.Err() != nil:
		t.log.Info("the comparison of the kept input with a cold load gave way to a release", "again", verifyRetry)
	case err != nil:
		t.log.Error("comparing the kept tick input with a cold load", "err", err)
	case rep.Diverged:
		t.m.divergences.Inc()
		t.log.Error("the kept input differed from a cold load; the next tick loads in full", "where", rep.Divergence)
		t.kick()
	case rep.Skipped != "":
		t.log.Debug("kept input not compared", "why", rep.Skipped)
	default:
		t.log.Info("kept input equals a cold load", "duration", time.Since(start))
	}
}

// wakeAt is when the loop must tick next for a deadline: the last
// deciding tick's WakeAt, or the end of maxQuiet; zero when it does not
// lead.
func (t *ticker) wakeAt() time.Time {
	if _, ok := t.isLeader(); !ok {
		return time.Time{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lastDecide.IsZero() {
		return time.Time{}
	}
	end := t.lastDecide.Add(maxQuiet)
	wake := t.wake
	if wake.IsZero() || wake.After(end) {
		wake = end
	}
	// A deadline passed while the store fails is tried again a while
	// later, not at once: a store that is down is not asked in a loop.
	if wake.Before(t.retryAt) {
		wake = t.retryAt
	}
	return wake
}

// assignmentDeltas collects the assignments the committed ticks changed
// until the loop hands them to the hub (wakeTicked).
type assignmentDeltas struct {
	mu     sync.Mutex
	full   bool
	assign map[string]*reconciler.Assignment
}

// add collects a tick's changes; a full load replaces what was collected.
func (d *assignmentDeltas) add(rep store.TickReport) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if rep.Full || d.assign == nil {
		d.assign, d.full = map[string]*reconciler.Assignment{}, rep.Full || d.full
	}
	maps.Copy(d.assign, rep.Assignments)
}

// assignmentDelta is what assignmentDeltas collected: Assign nil when
// nothing was (reload everything).
type assignmentDelta struct {
	Full   bool
	Assign map[string]*reconciler.Assignment
}

// take returns what was collected since the last take.
func (d *assignmentDeltas) take() assignmentDelta {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := assignmentDelta{Full: d.full, Assign: d.assign}
	d.full, d.assign = false, nil
	return out
}
