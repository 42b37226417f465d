package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// testLeases: acquisition, renewal, expiry, takeover with a new epoch,
// release.
func testLeases(t *testing.T, s store.Store) {
	ctx := t.Context()
	const ttl = 10 * time.Second
	a, err := s.AcquireLease(ctx, store.TickLease, "a", ttl, t0)
	must(t, err)
	if a.Name != store.TickLease || a.Holder != "a" || a.Epoch < 1 || !a.Expires.Equal(t0.Add(ttl)) {
		t.Fatalf("acquired %+v", a)
	}
	// Held: another holder is refused; the holder re-acquires (extends)
	// with the same epoch.
	_, err = s.AcquireLease(ctx, store.TickLease, "b", ttl, t0.Add(5*time.Second))
	wantErr(t, err, store.ErrLeaseHeld, "acquire a held lease")
	again, err := s.AcquireLease(ctx, store.TickLease, "a", ttl, t0.Add(5*time.Second))
	must(t, err)
	if again.Epoch != a.Epoch || !again.Expires.Equal(t0.Add(15*time.Second)) {
		t.Fatalf("re-acquired %+v, want epoch %d until +15s", again, a.Epoch)
	}
	r, err := s.RenewLease(ctx, again, ttl, t0.Add(10*time.Second))
	must(t, err)
	if r.Epoch != a.Epoch || !r.Expires.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("renewed %+v", r)
	}
	// Expired at exactly its expiry: renewing fails, another takes it
	// with a higher epoch, the old holder can neither renew nor tick.
	_, err = s.RenewLease(ctx, r, ttl, r.Expires)
	wantErr(t, err, store.ErrNotLeader, "renew an expired lease")
	b, err := s.AcquireLease(ctx, store.TickLease, "b", ttl, r.Expires)
	must(t, err)
	if b.Epoch <= a.Epoch {
		t.Fatalf("takeover epoch %d, want > %d", b.Epoch, a.Epoch)
	}
	_, err = s.RenewLease(ctx, r, ttl, r.Expires.Add(-time.Second))
	wantErr(t, err, store.ErrNotLeader, "renew a lease taken over")
	_, err = s.Tick(ctx, store.TickParams{Lease: r, Clock: store.At(r.Expires.Add(-time.Second)), Tunables: rc.Tunables{}}, func(rc.Input) (rc.Output, error) {
		t.Error("decide called for a lease taken over")
		return rc.Output{}, nil
	})
	wantErr(t, err, store.ErrNotLeader, "tick with a lease taken over")
	if _, err := s.Tick(ctx, store.TickParams{Lease: b, Clock: store.At(r.Expires), Tunables: rc.Tunables{}}, func(rc.Input) (rc.Output, error) { return rc.Output{}, nil }); err != nil {
		t.Fatalf("the new holder cannot tick: %v", err)
	}
	// Releasing a lease one lost does nothing; releasing a held one frees
	// it at once, and the next holder gets a new epoch.
	must(t, s.ReleaseLease(ctx, r))
	_, err = s.AcquireLease(ctx, store.TickLease, "a", ttl, r.Expires)
	wantErr(t, err, store.ErrLeaseHeld, "acquire after a stale release")
	must(t, s.ReleaseLease(ctx, b))
	_, err = s.RenewLease(ctx, b, ttl, r.Expires)
	wantErr(t, err, store.ErrNotLeader, "renew a released lease")
	c, err := s.AcquireLease(ctx, store.TickLease, "a", ttl, r.Expires)
	must(t, err)
	if c.Epoch <= b.Epoch {
		t.Fatalf("epoch after release %d, want > %d", c.Epoch, b.Epoch)
	}
	// A holder whose own lease expired gets a new epoch too: a tick with
	// the old lease value must not pass.
	d, err := s.AcquireLease(ctx, store.TickLease, "a", ttl, c.Expires.Add(time.Minute))
	must(t, err)
	if d.Epoch <= c.Epoch {
		t.Fatalf("epoch after re-acquiring an expired lease %d, want > %d", d.Epoch, c.Epoch)
	}
	// Leases are independent of each other.
	o, err := s.AcquireLease(ctx, "other", "b", ttl, t0)
	must(t, err)
	if o.Epoch != 1 {
		t.Fatalf("a new lease has epoch %d, want 1", o.Epoch)
	}
	for _, bad := range []struct {
		name, holder string
		ttl          time.Duration
	}{{"", "a", ttl}, {"x", "", ttl}, {"x", "a", 0}} {
		if _, err := s.AcquireLease(ctx, bad.name, bad.holder, bad.ttl, t0); err == nil {
			t.Errorf("AcquireLease(%q, %q, %s) succeeded", bad.name, bad.holder, bad.ttl)
		}
	}
}

// testLeaseAcquireRace: replicas racing for a free lease: exactly one
// wins.
func testLeaseAcquireRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	for round := range 3 {
		now := t0.Add(time.Duration(round) * time.Hour)
		const replicas = 8
		var wg sync.WaitGroup
		won := make(chan store.Lease, replicas)
		errs := make(chan error, replicas)
		for i := range replicas {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := s.AcquireLease(ctx, store.TickLease, fmt.Sprintf("replica-%d", i), time.Minute, now)
				if err != nil {
					errs <- err
					return
				}
				won <- l
			}()
		}
		wg.Wait()
		close(won)
		close(errs)
		if len(won) != 1 {
			t.Fatalf("round %d: %d replicas acquired the lease, want 1", round, len(won))
		}
		for err := range errs {
			wantErr(t, err, store.ErrLeaseHeld, "a losing replica")
		}
		if l := <-won; l.Epoch != int64(round+1) {
			t.Fatalf("round %d: epoch %d, want %d", round, l.Epoch, round+1)
		}
	}
}

// heldTick runs a tick of l on s that commits nothing but the watch, and
// whose decide waits until release is called; held is closed once it
// waits, and done receives the tick's error.
type heldTick struct {
	held    chan struct{}
	done    chan error
	release func()
	// released is set just before decide returns: whatever saw it unset
	// happened while the tick was held.
	released atomic.Bool
}

func holdTick(t *testing.T, s store.Store, l store.Lease, ttl time.Duration, clock func() time.Time) *heldTick {
	h := &heldTick{held: make(chan struct{}), done: make(chan error, 1)}
	let := make(chan struct{})
	h.release = sync.OnceFunc(func() { h.released.Store(true); close(let) })
	// A test that fails while the tick is held lets it go, so that the
	// store can close.
	t.Cleanup(h.release)
	go func() {
		_, err := s.Tick(t.Context(), store.TickParams{Lease: l, LeaseTTL: ttl, Clock: clock, Tunables: rc.Tunables{}},
			func(rc.Input) (rc.Output, error) {
				close(h.held)
				<-let
				return rc.Output{}, nil
			})
		h.done <- err
	}()
	select {
	case <-h.held:
	case err := <-h.done:
		t.Fatalf("the tick ended before decide: %v", err)
	}
	return h
}

// leaseClock is the time the test says it is: the clock of the ticks and
// of the renewals.
type leaseClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *leaseClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *leaseClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// renewWait bounds how long the test waits for a renewal on PostgreSQL,
// which must not wait for a tick.
const renewWait = 10 * time.Second

// testLeaseOutlivesLongTick: a tick held for three lease TTLs does not
// cost its holder the lease. The holder renews every TTL/3 meanwhile, as
// the control plane's lease loop does, one renewal at a time, dropping
// the turns that come while one runs: on PostgreSQL each renewal
// completes while the tick is held; on SQLite (one writer) they wait for
// the tick, whose own extension at its commit keeps the lease. After the
// commit the holder renews at the current time with the same epoch, and
// another replica is refused.
func testLeaseOutlivesLongTick(t *testing.T, s store.Store) {
	ctx := t.Context()
	const ttl = time.Minute
	clock := &leaseClock{now: t0}
	a, err := s.AcquireLease(ctx, store.TickLease, "a", ttl, t0)
	must(t, err)
	type renewal struct {
		at  time.Time
		err error
	}
	turns, renewed := make(chan time.Time, 1), make(chan renewal, 16)
	renewerDone := make(chan struct{})
	go func() {
		defer close(renewerDone)
		cur := a
		for at := range turns {
			l, err := s.RenewLease(ctx, cur, ttl, at)
			if err == nil {
				cur = l
			}
			renewed <- renewal{at, err}
		}
	}()
	stopRenewer := sync.OnceFunc(func() { close(turns); <-renewerDone })
	t.Cleanup(stopRenewer) // after holdTick's cleanup lets the tick go
	h := holdTick(t, s, a, ttl, clock.Now)
	pg := s.Backend() == "postgres"
	var duringTick int
	for range 9 {
		at := clock.Advance(ttl / 3)
		select {
		case turns <- at:
		default: // a renewal waits for the tick (SQLite)
		}
		if !pg {
			continue
		}
		select {
		case r := <-renewed:
			if r.err != nil || !r.at.Equal(at) {
				t.Fatalf("renewing at %s while a tick was held: renewal at %s: %v", at, r.at, r.err)
			}
			duringTick++
		case <-time.After(renewWait):
			t.Fatalf("PostgreSQL: a renewal at %s did not complete while a tick was held: renewing waits for the tick", at)
		}
	}
	if pg && (duringTick == 0 || h.released.Load()) {
		t.Fatalf("PostgreSQL: %d renewals completed while the tick was held", duringTick)
	}
	h.release()
	must(t, <-h.done)
	stopRenewer()
	close(renewed)
	for r := range renewed {
		if r.err != nil {
			t.Fatalf("a renewal at %s that waited for the tick: %v", r.at, r.err)
		}
	}
	now := clock.Now()
	l, err := s.RenewLease(ctx, a, ttl, now)
	if err != nil {
		t.Fatalf("after a tick held for %s with a lease of %s, renewing at %s: %v", 3*ttl, ttl, now, err)
	}
	if l.Epoch != a.Epoch || l.Expires.Before(now.Add(ttl)) {
		t.Fatalf("renewed %+v after the tick, want epoch %d until at least %s", l, a.Epoch, now.Add(ttl))
	}
	_, err = s.AcquireLease(ctx, store.TickLease, "b", ttl, now)
	wantErr(t, err, store.ErrLeaseHeld, "another replica takes the lease after the long tick")
}

// testTakeoverWaitsForTick: a replica whose renewals stopped while its
// tick runs cannot be taken over before the tick ends, even once its
// lease expired by the clock: another replica's AcquireLease waits for
// the tick, then finds the lease the tick extended at its commit, and is
// refused; the tick commits. Two replicas never hold the lease at once.
// On PostgreSQL the holder renews once during the tick first: the row the
// takeover meets is the renewal's version of it, still held by the tick.
func testTakeoverWaitsForTick(t *testing.T, s store.Store) {
	ctx := t.Context()
	const ttl = time.Minute
	clock := &leaseClock{now: t0}
	a, err := s.AcquireLease(ctx, store.TickLease, "a", ttl, t0)
	must(t, err)
	h := holdTick(t, s, a, ttl, clock.Now)
	if s.Backend() == "postgres" {
		renewed := make(chan error, 1)
		go func() {
			_, err := s.RenewLease(ctx, a, ttl, clock.Advance(ttl/3))
			renewed <- err
		}()
		select {
		case err := <-renewed:
			must(t, err)
		case <-time.After(renewWait):
			t.Fatal("PostgreSQL: a renewal did not complete while a tick was held: renewing waits for the tick")
		}
	}
	at := clock.Advance(2 * ttl) // the lease expired
	type takeover struct {
		l          store.Lease
		err        error
		duringTick bool
	}
	took := make(chan takeover, 1)
	go func() {
		l, err := s.AcquireLease(ctx, store.TickLease, "b", ttl, at)
		took <- takeover{l, err, !h.released.Load()}
	}()
	// A takeover that does not wait for the tick would end by now.
	select {
	case tk := <-took:
		t.Fatalf("another replica's AcquireLease ended while the tick was held: %+v, %v", tk.l, tk.err)
	case <-time.After(300 * time.Millisecond):
	}
	h.release()
	tickErr := <-h.done
	tk := <-took
	switch {
	case tk.duringTick:
		t.Fatalf("another replica's AcquireLease ended while the tick was held: %+v, %v", tk.l, tk.err)
	case tickErr != nil:
		t.Fatalf("the tick whose lease was not taken over: %v", tickErr)
	}
	wantErr(t, tk.err, store.ErrLeaseHeld, "a takeover that waited for a committed tick")
	l, err := s.RenewLease(ctx, a, ttl, at)
	if err != nil || l.Epoch != a.Epoch {
		t.Fatalf("the holder renews after its tick: %+v, %v (want epoch %d)", l, err, a.Epoch)
	}
}
