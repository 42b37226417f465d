package controlplane

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/reconciler"
)

// ticker elects the replica that ticks and runs the ticks
// (rfcs/0006 §Tick loop):
//
//   - every replica tries to take the tick lease every LeaseTTL/3 and the
//     holder renews it; a holder that dies loses it when it expires, and
//     another replica takes over with a higher epoch;
//   - the leader ticks every TickInterval, and when kicked (a status change,
//     a release, an intent); kicks within Debounce collapse into one tick;
//   - each tick is store.Tick: one transaction that fences on the lease, so
//     a replica that lost the lease cannot write.
type ticker struct {
	st      store.Store
	cfg     *Config
	replica string
	log     *slog.Logger
	m       *metrics
	kickCh  chan struct{}
	board   *board // wakeTicked after a committed tick
	// measure gets each committed tick's canary measurements due, and
	// nil when this replica stops leading (the analyzer's schedule).
	measure func([]reconciler.MeasureRequest)
	mu      sync.Mutex
	lease   store.Lease
	leader  bool
	// beforeRelease, when set, runs before a leader shutting down gives
	// its lease up (the notifier finishing its POSTs in flight).
	beforeRelease func()
}

func newTicker(st store.Store, cfg *Config, replica string, log *slog.Logger, m *metrics, b *board) *ticker {
	return &ticker{st: st, cfg: cfg, replica: replica, log: log, m: m, kickCh: make(chan struct{}, 1), board: b}
}

// kick asks for a tick soon.
func (t *ticker) kick() {
	select {
	case t.kickCh <- struct{}{}:
	default:
	}
}

func (t *ticker) isLeader() (store.Lease, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lease, t.leader
}

func (t *ticker) setLeader(l store.Lease, ok bool) { t.setLeaderWhy(l, ok, "lost the tick lease") }

func (t *ticker) setLeaderWhy(l store.Lease, ok bool, why string) {
	t.mu.Lock()
	was := t.leader
	t.lease, t.leader = l, ok
	t.mu.Unlock()
	if ok {
		t.m.leader.Set(1)
	} else {
		t.m.leader.Set(0)
	}
	if ok && !was {
		t.log.Info("leading the tick", "replica", t.replica, "epoch", l.Epoch)
		t.kick()
	} else if !ok && was {
		t.log.Warn(why, "replica", t.replica)
		if t.measure != nil {
			t.measure(nil)
		}
	}
}

// lead keeps or takes the lease.
func (t *ticker) lead(ctx context.Context) {
	now := t.cfg.Now()
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
// another replica takes over at once.
func (t *ticker) run(ctx context.Context) {
	leadEvery := max(t.cfg.LeaseTTL/3, 10*time.Millisecond)
	leadT := t.cfg.Clock.NewTicker(leadEvery)
	tickT := t.cfg.Clock.NewTicker(t.cfg.TickInterval)
	defer leadT.Stop()
	defer tickT.Stop()
	t.lead(ctx)
	for {
		select {
		case <-ctx.Done():
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
		case <-leadT.C():
			t.lead(ctx)
		case <-tickT.C():
			t.tick(ctx)
		case <-t.kickCh:
			// Collapse the triggers of the next Debounce into this tick.
			debounce := t.cfg.Clock.NewTimer(t.cfg.Debounce)
			select {
			case <-ctx.Done():
				debounce.Stop()
				continue
			case <-debounce.C():
			}
			select {
			case <-t.kickCh:
			default:
			}
			t.tick(ctx)
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

// tick runs one tick if this replica leads.
func (t *ticker) tick(ctx context.Context) {
	l, ok := t.isLeader()
	if !ok {
		return
	}
	start := time.Now()
	var watching time.Time
	out, err := t.st.Tick(ctx, store.TickParams{Lease: l, Clock: t.cfg.Now, Tunables: t.cfg.Tunables, MaxGap: t.maxGap()},
		func(in reconciler.Input) (reconciler.Output, error) {
			watching = in.WatchingSince
			return reconciler.Reconcile(in), nil
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
		return
	}
	t.m.ticks.WithLabelValues("ok").Inc()
	if t.measure != nil {
		t.measure(out.Measure)
	}
	t.m.observeTick(out)
	t.m.observeSight(watching, out.Visibility)
	if len(out.Events) > 0 {
		t.log.Info("tick", "actions", len(out.Actions), "events", len(out.Events),
			"rollouts", len(out.Rollouts), "hosts", len(out.Hosts), "duration", time.Since(start))
	}
	t.board.post(wakeTicked)
}
