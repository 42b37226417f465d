package storetest

import (
	"fmt"
	"sync"
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
