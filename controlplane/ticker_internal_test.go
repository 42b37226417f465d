package controlplane

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/nixfleet/nixfleet/controlplane/kept"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/internal/testkit/pgtest"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestDebounceOnAFakeClock: the debounce has a leading edge. A trigger
// when no tick ran within the window ticks at once; one that follows
// within the window becomes a tick at its end, on the replica's clock,
// not before, together with any other trigger of the window; each
// committed tick is posted for the hub. The clock moves only when the
// test says so: the test waits for what the loop did, never for time.
func TestDebounceOnAFakeClock(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := sqliteStore(t, filepath.Join(t.TempDir(), "cp.db"))
	fake := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := &Config{Clock: fake, Debounce: 500 * time.Millisecond, TickInterval: time.Hour}
	cfg.setDefaults()
	b := newBoard()
	tk := newTicker(st, cfg, "r1", slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(), b)
	// waitTimers waits until the loop has made n tickers and timers.
	waitTimers := func(n int) {
		t.Helper()
		for {
			made := fake.Made()
			if fake.Pending() == n {
				return
			}
			select {
			case <-made:
			case <-time.After(10 * time.Second):
				t.Fatalf("the ticker made %d timers, want %d", fake.Pending(), n)
			}
		}
	}
	ticked := func() {
		t.Helper()
		select {
		case <-b.ch:
		case <-time.After(10 * time.Second):
			t.Fatal("no tick")
		}
		if w := b.take(); w != wakeTicked {
			t.Fatalf("posted %b, want a committed tick", w)
		}
	}
	done := make(chan struct{})
	go func() { defer close(done); tk.run(ctx) }()
	// Taking the lease kicks a tick, at once: nothing ticked before.
	ticked()
	if _, leader := tk.isLeader(); !leader {
		t.Fatal("the only replica does not lead")
	}
	// The lease's and the period's tickers, and the wake-up at the end of
	// the longest quiet time.
	waitTimers(3)
	// Two triggers within the window: one tick, at its end. (A trigger
	// with nothing new to decide is a quiet tick, which posts nothing: an
	// intent is filed first.)
	if err := st.AddIntent(ctx, reconciler.Intent{ID: "i1", RolloutID: "nope@0", Kind: reconciler.IntentPause, At: fake.Now()}); err != nil {
		t.Fatal(err)
	}
	tk.kick()
	waitTimers(4)
	tk.kick()
	// The loop takes the second trigger before the window ends; one it
	// took only after the window's tick would rightly open a new window.
	for deadline := time.Now().Add(10 * time.Second); len(tk.kickCh) > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the loop did not take the second trigger")
		}
	}
	fake.Advance(cfg.Debounce - time.Millisecond)
	if b.take() != 0 {
		t.Fatal("ticked before the debounce passed")
	}
	fake.Advance(time.Millisecond)
	ticked()
	waitTimers(3)
	select {
	case <-b.ch:
		t.Fatalf("a second tick for the triggers of one window: %b", b.take())
	default:
	}
	cancel()
	<-done
}

// TestVerifyKeptBesideTheTicks: every verifyEvery on the replica's clock,
// a committed tick starts a comparison of the kept input with a cold load
// beside the ticks (store.VerifyKept); a difference (here a last-seen
// time changed behind the store's back, unstamped) is counted, kicks a
// tick, and that tick loads in full.
func TestVerifyKeptBesideTheTicks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := filepath.Join(t.TempDir(), "cp.db")
	st := sqliteStore(t, path)
	fake := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := &Config{Clock: fake, TickInterval: time.Hour, LeaseTTL: time.Hour}
	cfg.setDefaults()
	m := newMetrics()
	tk := newTicker(st, cfg, "r1", slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelDebug})), m, newBoard())
	if _, err := st.TouchHosts(ctx, store.SeenAt(map[string]time.Time{"h1": fake.Now()})); err != nil {
		t.Fatal(err)
	}
	tk.lead(ctx)
	tk.tick(ctx)
	if got := counterValue(t, m.fullLoads); got != 1 {
		t.Fatalf("%v full loads after the first tick, want 1", got)
	}
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.ExecContext(ctx, "UPDATE host_seen SET last_seen = last_seen + 1 WHERE hostname = 'h1'"); err != nil {
		t.Fatal(err)
	}
	<-tk.kickCh // the lease's kick
	fake.Advance(verifyEvery - time.Second)
	tk.lead(ctx)
	tk.tick(ctx)
	if tk.verifyingNow() {
		t.Fatal("a comparison started before verifyEvery passed")
	}
	fake.Advance(time.Second)
	tk.lead(ctx)
	tk.tick(ctx)
	select {
	case <-tk.kickCh:
	case <-time.After(10 * time.Second):
		t.Fatal("the comparison did not kick a tick")
	}
	for tk.verifyingNow() {
		time.Sleep(time.Millisecond)
	}
	if got := counterValue(t, m.divergences); got != 1 {
		t.Fatalf("%v divergences counted, want 1", got)
	}
	tk.tick(ctx)
	if got := counterValue(t, m.fullLoads); got != 2 {
		t.Fatalf("%v full loads after the divergence, want 2", got)
	}
}

// sqliteStore opens a SQLite store at path, closed when the test ends.
func sqliteStore(t *testing.T, path string) store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// counterValue reads a counter.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// tlog writes a replica's log to the test's (shown when it fails).
type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// stallingVerify is a store whose comparison with a cold load runs until
// its context ends; each start is sent on started.
type stallingVerify struct {
	store.Store
	started chan struct{}
}

func (s stallingVerify) VerifyKept(ctx context.Context, _ *kept.Keeper) (store.VerifyReport, error) {
	s.started <- struct{}{}
	<-ctx.Done()
	return store.VerifyReport{}, ctx.Err()
}

// TestVerifyKeptGivesWayToReleases: the comparison of the kept input
// with a cold load does not start while a release is read and verified,
// one running ends when a release begins, and it is due again
// verifyRetry later, not verifyEvery.
func TestVerifyKeptGivesWayToReleases(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := stallingVerify{Store: sqliteStore(t, filepath.Join(t.TempDir(), "cp.db")), started: make(chan struct{}, 4)}
	fake := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := &Config{Clock: fake, TickInterval: time.Hour, LeaseTTL: time.Hour}
	cfg.setDefaults()
	tk := newTicker(st, cfg, "r1", slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelDebug})), newMetrics(), newBoard())
	tickAt := func(d time.Duration) {
		fake.Advance(d)
		tk.lead(ctx)
		tk.tick(ctx)
	}
	tickAt(0) // the full load: the kept input is compared from here on

	// Due, but a release is being verified: not started, until it ends.
	end := tk.releaseBegins()
	tickAt(verifyEvery)
	if tk.verifyingNow() {
		t.Fatal("a comparison started while a release was verified")
	}
	end()
	tickAt(0)
	if !tk.verifyingNow() {
		t.Fatal("no comparison started once the release was stored")
	}
	<-st.started

	// A release begins while it runs: it ends, and is due a minute on.
	end = tk.releaseBegins()
	ended := make(chan struct{})
	go func() { tk.verifies.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the comparison went on beside the release")
	}
	end()
	tickAt(verifyRetry - time.Second)
	if tk.verifyingNow() {
		t.Fatal("the comparison started again before verifyRetry")
	}
	tickAt(time.Second)
	if !tk.verifyingNow() {
		t.Fatal("the comparison did not start again verifyRetry after it gave way")
	}
	<-st.started
	cancel()
	tk.verifies.Wait()
}

// spyTicks is a store whose ticks fail while fail is set, and that
// records each tick's TickParams.Rewound.
type spyTicks struct {
	store.Store
	fail    atomic.Bool
	rewound []bool
}

func (s *spyTicks) Tick(ctx context.Context, p store.TickParams, decide func(reconciler.Input) (reconciler.Output, error)) (reconciler.Output, error) {
	s.rewound = append(s.rewound, p.Rewound)
	if s.fail.Load() {
		return reconciler.Output{}, errors.New("the store is down")
	}
	return s.Store.Tick(ctx, p, decide)
}

// spiedTicker is a ticker on a fake clock over a spyTicks on SQLite.
func spiedTicker(t *testing.T) (*ticker, *spyTicks, *clock.Fake) {
	st := &spyTicks{Store: sqliteStore(t, filepath.Join(t.TempDir(), "cp.db"))}
	fake := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := &Config{Clock: fake, TickInterval: time.Hour, LeaseTTL: time.Hour}
	cfg.setDefaults()
	tk := newTicker(st, cfg, "r1", slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelDebug})), newMetrics(), newBoard())
	return tk, st, fake
}

// TestFailedTickRetriesLater: a deadline the last tick named that passes
// while the store fails is tried again tickRetry later, not at once: a
// store that is down is not asked in a loop (it was, hundreds of times a
// second, while PostgreSQL restarted).
func TestFailedTickRetriesLater(t *testing.T) {
	ctx := t.Context()
	tk, st, fake := spiedTicker(t)
	tk.lead(ctx)
	tk.tick(ctx)
	due := fake.Now()
	tk.mu.Lock()
	tk.wake = due // a deadline due now
	tk.mu.Unlock()
	if at := tk.wakeAt(); !at.Equal(due) {
		t.Fatalf("wake at %s, want the deadline %s", at, due)
	}
	st.fail.Store(true)
	tk.tick(ctx)
	if at := tk.wakeAt(); at.Before(due.Add(tickRetry)) {
		t.Fatalf("after a failed tick: wake at %s, want not before %s", at, due.Add(tickRetry))
	}
	st.fail.Store(false)
	fake.Advance(tickRetry)
	tk.tick(ctx)
	tk.mu.Lock()
	retry := tk.retryAt
	tk.mu.Unlock()
	if !retry.IsZero() {
		t.Fatalf("a tick that committed left retryAt %s", retry)
	}
}

// TestRewoundStartsOneWatch: a store the hub saw go back in time has the
// next committed tick start a new watch (TickParams.Rewound), once; one
// seen longer than maxGap before the tick (by a follower that leads much
// later) does not.
func TestRewoundStartsOneWatch(t *testing.T) {
	ctx := t.Context()
	tk, st, fake := spiedTicker(t)
	tk.rewound() // as a follower
	fake.Advance(tk.maxGap() + time.Second)
	tk.lead(ctx)
	tk.tick(ctx)
	tk.rewound()
	tk.tick(ctx)
	tk.tick(ctx)
	if want := []bool{false, true, false}; !slices.Equal(st.rewound, want) {
		t.Fatalf("Rewound of the ticks: %v, want %v", st.rewound, want)
	}
}

// holdingTicks is a store whose next tick, once hold is set, waits in
// decide until let is closed (held is closed when it does), and that
// sends each RenewLease's time and error on renewed when it returns.
type holdingTicks struct {
	store.Store
	hold      atomic.Bool
	held, let chan struct{}
	renewed   chan renewal
}

type renewal struct {
	at  time.Time
	err error
}

func (s *holdingTicks) Tick(ctx context.Context, p store.TickParams, decide func(reconciler.Input) (reconciler.Output, error)) (reconciler.Output, error) {
	if s.hold.CompareAndSwap(true, false) {
		inner := decide
		decide = func(in reconciler.Input) (reconciler.Output, error) {
			close(s.held)
			<-s.let
			return inner(in)
		}
	}
	return s.Store.Tick(ctx, p, decide)
}

func (s *holdingTicks) RenewLease(ctx context.Context, l store.Lease, ttl time.Duration, now time.Time) (store.Lease, error) {
	nl, err := s.Store.RenewLease(ctx, l, ttl, now)
	s.renewed <- renewal{now, err}
	return nl, err
}

// TestLongTickKeepsTheLease: a replica whose tick takes three lease TTLs
// keeps leading (a tick of 19.8 s under load once cost the only replica
// its 10 s lease). Its lease loop runs meanwhile on the replica's clock:
// on PostgreSQL each renewal completes while the tick is held; on SQLite
// they wait for the tick, whose extension at its commit keeps the lease.
// No change to not leading is seen, and the next tick commits.
func TestLongTickKeepsTheLease(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			url := "sqlite://" + filepath.Join(t.TempDir(), "cp.db")
			if backend == "postgres" {
				url = pgtest.URL(t)
			}
			inner, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(inner.Close)
			st := &holdingTicks{Store: inner, held: make(chan struct{}), let: make(chan struct{}), renewed: make(chan renewal, 64)}
			let := sync.OnceFunc(func() { close(st.let) })
			fake := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			cfg := &Config{Clock: fake, TickInterval: time.Hour, LeaseTTL: 30 * time.Second}
			cfg.setDefaults()
			m := newMetrics()
			tk := newTicker(st, cfg, "r1", slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelDebug})), m, newBoard())
			var lost atomic.Int32
			tk.leader.subscribe(func(_ store.Lease, leading bool) {
				if !leading {
					lost.Add(1)
				}
			})
			tk.lead(ctx)
			first, ok := tk.isLeader()
			if !ok {
				t.Fatal("the only replica does not lead")
			}

			// The lease loop, as run starts it.
			leadCtx, stopLead := context.WithCancel(ctx)
			leadDone := make(chan struct{})
			made := fake.Made()
			go func() { defer close(leadDone); tk.leadLoop(leadCtx) }()
			stopLoop := sync.OnceFunc(func() { stopLead(); <-leadDone })
			// Cleanups run last first: the tick is let go, then the loop
			// (which may wait for it) stops.
			t.Cleanup(stopLoop)
			t.Cleanup(let)
			select {
			case <-made:
			case <-time.After(10 * time.Second):
				t.Fatal("the lease loop made no ticker")
			}

			st.hold.Store(true)
			ticked := make(chan struct{})
			go func() { defer close(ticked); tk.tick(ctx) }()
			<-st.held
			for range 9 {
				fake.Advance(cfg.LeaseTTL / 3)
				if backend != "postgres" {
					continue // the renewal waits for the tick, which holds the writer
				}
				select {
				case r := <-st.renewed:
					if r.err != nil || !r.at.Equal(fake.Now()) {
						t.Fatalf("renewing at %s during the tick: renewal at %s: %v", fake.Now(), r.at, r.err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("PostgreSQL: the lease loop's renewal at %s did not complete while a tick was held", fake.Now())
				}
			}
			let()
			<-ticked
			if backend != "postgres" {
				// The loop's renewal that waited for the tick, with a time
				// read before the tick committed.
				select {
				case r := <-st.renewed:
					if r.err != nil {
						t.Fatalf("the renewal at %s that waited for the tick: %v", r.at, r.err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the lease loop did not renew after the tick")
				}
			}
			// Renew at the time the tick ended, and tick again.
			tk.lead(ctx)
			tk.tick(ctx)

			if n := lost.Load(); n != 0 {
				t.Fatalf("the replica stopped leading %d times over a tick of %s with a lease of %s", n, 3*cfg.LeaseTTL, cfg.LeaseTTL)
			}
			if l, ok := tk.isLeader(); !ok || l.Epoch != first.Epoch {
				t.Fatalf("after the long tick: leading %v at epoch %d, want epoch %d", ok, l.Epoch, first.Epoch)
			}
			var committed float64
			for _, result := range []string{"ok", "quiet", "partial"} {
				committed += counterValue(t, m.ticks.WithLabelValues(result))
			}
			for _, result := range []string{"not_leader", "error"} {
				if n := counterValue(t, m.ticks.WithLabelValues(result)); n != 0 {
					t.Errorf("%v ticks ended %s", n, result)
				}
			}
			if committed != 2 {
				t.Fatalf("%v ticks committed, want the long one and the next", committed)
			}
		})
	}
}

// TestTickShare: ticks on triggers and deadlines run back to back for
// a burst of tickBurst, then take about half the replica's time, never
// waiting more than maxRest at once; after a calm spell the burst is
// back, and the ticks of a push-dispatch trial at 100,000 hosts (an
// opening tick of 1.9 s, then shorter ones) never wait.
func TestTickShare(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := tickShare{credit: tickBurst}
	now := t0
	var busy, waited time.Duration
	for now.Sub(t0) < 2*time.Minute {
		w := s.wait(now)
		if w > maxRest {
			t.Fatalf("at %s: waits %s, more than maxRest", now.Sub(t0), w)
		}
		if now.Sub(t0) < tickBurst && w > 0 {
			t.Fatalf("at %s, within the burst: waits %s", now.Sub(t0), w)
		}
		now = now.Add(max(w, 0))
		waited += max(w, 0)
		const d = 400 * time.Millisecond
		s.spend(now, now.Add(d))
		now, busy = now.Add(d), busy+d
	}
	total := now.Sub(t0)
	if share := float64(busy-2*tickBurst) / float64(total-2*tickBurst); share < 0.45 || share > 0.55 {
		t.Errorf("back to back after the burst, ticks took %.0f%% of the time, want about half", 100*share)
	}
	if waited == 0 {
		t.Error("a stream of ticks never waited")
	}

	// A calm spell refills the burst: it refills at half the time passed.
	now = now.Add(2*tickBurst + 2*maxRest)
	if w := s.wait(now); w > 0 || s.credit != tickBurst {
		t.Errorf("after a calm spell: waits %s with %s of credit, want none and %s", w, s.credit, tickBurst)
	}
	// A trial: the opening tick, a confirm a second later, then the
	// status change and the tick after it, each right after the last.
	for _, step := range []struct{ gap, d time.Duration }{
		{0, 1900 * time.Millisecond}, {time.Second, 160 * time.Millisecond},
		{100 * time.Millisecond, 400 * time.Millisecond}, {0, 70 * time.Millisecond},
	} {
		now = now.Add(step.gap)
		if w := s.wait(now); w > 0 {
			t.Fatalf("a trial's tick waits %s", w)
		}
		s.spend(now, now.Add(step.d))
		now = now.Add(step.d)
	}
}
