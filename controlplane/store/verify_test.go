package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nixfleet/nixfleet/controlplane/kept"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/pgtest"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// TestPostgresVerifyWhileHostsCheckIn: a tick that compares the kept input
// with a cold load (TickParams.Verify) runs while check-ins commit, as
// every tick of a busy fleet does; PostgreSQL lets the cold load's
// statements see those commits, which the kept input reads only at the
// next tick. They are no divergence: the tick keeps its input, and the
// next one holds the new times.
//
// The interleaving is forced with a table lock: the cold load reads the
// rollouts table first, and the kept input never does (there are none),
// so the tick waits there after it caught up, while the check-ins commit.
func TestPostgresVerifyWhileHostsCheckIn(t *testing.T) {
	ctx := t.Context()
	f := openBlocking(t)
	s := f.s

	t0 := time.Now().UTC().Truncate(time.Microsecond)
	seen := map[string]time.Time{}
	for i := range 5 {
		seen[fmt.Sprintf("host-%d", i)] = t0.Add(-time.Minute)
	}
	if _, err := s.TouchHosts(ctx, store.SeenAt(seen)); err != nil {
		t.Fatal(err)
	}
	lease, err := s.AcquireLease(ctx, store.TickLease, "r1", time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	k := &kept.Keeper{}
	tick := func(ctx context.Context, verify bool) (store.TickReport, rc.Input) {
		t.Helper()
		var rep store.TickReport
		var in rc.Input
		_, err := s.Tick(ctx, store.TickParams{Kept: k, Lease: lease, Clock: store.At(t0), Verify: verify,
			Report: func(r store.TickReport) { rep = r }},
			func(i rc.Input) (rc.Output, error) { in = i; return rc.Reconcile(i), nil })
		if err != nil {
			t.Fatal(err)
		}
		return rep, in
	}
	if rep, _ := tick(ctx, false); !rep.Full {
		t.Fatal("the first tick of a lease did not load in full")
	}

	// The check-ins that commit while the tick waits: a newer time for a
	// known host, and a host heard for the first time.
	later := map[string]time.Time{"host-1": t0.Add(-time.Second), "host-new": t0.Add(-time.Second)}
	var rep store.TickReport
	f.whileColdLoadWaits(t, func() {
		_, err := s.Tick(ctx, store.TickParams{Kept: k, Lease: lease, Clock: store.At(t0), Verify: true,
			Report: func(r store.TickReport) { rep = r }},
			func(i rc.Input) (rc.Output, error) { return rc.Reconcile(i), nil })
		if err != nil {
			t.Error(err)
		}
	}, func() {
		if _, err := s.TouchHosts(ctx, store.SeenAt(later)); err != nil {
			t.Fatal(err)
		}
	})
	if rep.Diverged {
		t.Fatalf("check-ins committed during a verifying tick were taken for a divergence: %s", rep.Divergence)
	}
	if rep.Full {
		t.Fatal("the verifying tick dropped its kept input")
	}
	rep, in := tick(ctx, true)
	if rep.Diverged || rep.Full {
		t.Fatalf("the next tick: diverged %v (%s), full %v", rep.Diverged, rep.Divergence, rep.Full)
	}
	for name, at := range later {
		if got := in.Hosts[name].LastSeen; !got.Equal(at) {
			t.Errorf("the next tick has %s last seen at %s, want %s", name, got, at)
		}
	}
}

// TestPostgresVerifyKeptBesideTicks: VerifyKept loads from one snapshot
// without holding up the ticks: while its cold load waits (on a table
// lock, as in the test above), check-ins commit and a whole tick runs;
// what the snapshot holds and the copy of the kept input does not is no
// divergence.
func TestPostgresVerifyKeptBesideTicks(t *testing.T) {
	ctx := t.Context()
	f := openBlocking(t)
	s := f.s

	t0 := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := s.TouchHosts(ctx, store.SeenAt(map[string]time.Time{"host-1": t0.Add(-time.Minute), "host-2": t0.Add(-time.Minute)})); err != nil {
		t.Fatal(err)
	}
	lease, err := s.AcquireLease(ctx, store.TickLease, "r1", time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	k := &kept.Keeper{}
	tick := func(ctx context.Context) store.TickReport {
		var rep store.TickReport
		_, err := s.Tick(ctx, store.TickParams{Kept: k, Lease: lease, Clock: store.At(t0), Report: func(r store.TickReport) { rep = r }},
			func(i rc.Input) (rc.Output, error) { return rc.Reconcile(i), nil })
		if err != nil {
			t.Error(err)
		}
		return rep
	}
	if rep := tick(ctx); !rep.Full {
		t.Fatal("the first tick of a lease did not load in full")
	}
	// Recorded before the comparison starts and not yet read by a tick.
	if _, err := s.TouchHosts(ctx, store.SeenAt(map[string]time.Time{"host-1": t0.Add(-30 * time.Second)})); err != nil {
		t.Fatal(err)
	}

	var res struct {
		rep store.VerifyReport
		err error
	}
	f.whileColdLoadWaits(t, func() { res.rep, res.err = s.VerifyKept(ctx, k) }, func() {
		if _, err := s.TouchHosts(ctx, store.SeenAt(map[string]time.Time{"host-2": t0.Add(-time.Second), "host-3": t0.Add(-time.Second)})); err != nil {
			t.Fatal(err)
		}
		ticked := make(chan store.TickReport, 1)
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		go func() { ticked <- tick(tctx) }()
		select {
		case rep := <-ticked:
			if rep.Full {
				t.Error("the tick beside the comparison loaded in full")
			}
		case <-tctx.Done():
			t.Fatal("a tick waited for the comparison's cold load")
		}
	})
	switch {
	case res.err != nil:
		t.Fatal(res.err)
	case res.rep.Skipped != "":
		t.Fatalf("nothing was compared: %s", res.rep.Skipped)
	case res.rep.Diverged:
		t.Fatalf("writes beside the comparison were taken for a divergence: %s", res.rep.Divergence)
	}
	if rep := tick(ctx); rep.Full {
		t.Error("the tick after an equal comparison loaded in full")
	}
}

// TestUnstampedChangeIsADivergence: on both backends, a last-seen time
// changed behind the store's back (unstamped, what no writer of the store
// does) is what VerifyKept and a verifying tick exist to find: both report
// it; the next tick loads in full, and the verifying one uses its cold
// load.
func TestUnstampedChangeIsADivergence(t *testing.T) {
	for name, open := range map[string]func(testing.TB) store.Store{"postgres": openPostgres, "sqlite": openSQLite} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			s := open(t)
			t0 := time.Now().UTC().Truncate(time.Microsecond)
			if _, err := s.TouchHosts(ctx, store.SeenAt(map[string]time.Time{"host-1": t0, "host-2": t0})); err != nil {
				t.Fatal(err)
			}
			lease, err := s.AcquireLease(ctx, store.TickLease, "r1", time.Hour, t0)
			if err != nil {
				t.Fatal(err)
			}
			k := &kept.Keeper{}
			tick := func() (store.TickReport, rc.Input) {
				var rep store.TickReport
				var in rc.Input
				_, err := s.Tick(ctx, store.TickParams{Kept: k, Lease: lease, Clock: store.At(t0), Verify: true,
					Report: func(r store.TickReport) { rep = r }},
					func(i rc.Input) (rc.Output, error) { in = i; return rc.Reconcile(i), nil })
				if err != nil {
					t.Fatal(err)
				}
				return rep, in
			}
			tick()
			raw := s.(interface {
				ExecRaw(ctx context.Context, query string, args ...any) error
			})
			if err := raw.ExecRaw(ctx, "UPDATE host_seen SET last_seen = ? WHERE hostname = ?", t0.UnixMicro()+1, "host-2"); err != nil {
				t.Fatal(err)
			}
			vr, err := s.VerifyKept(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if !vr.Diverged || !strings.Contains(vr.Divergence, "host-2") {
				t.Fatalf("VerifyKept: an unstamped change of host-2 was not reported: diverged %v (%s), skipped %q", vr.Diverged, vr.Divergence, vr.Skipped)
			}
			rep, in := tick()
			if !rep.Full {
				t.Error("the tick after VerifyKept found a divergence did not load in full")
			}
			tick()
			if err := raw.ExecRaw(ctx, "UPDATE host_seen SET last_seen = ? WHERE hostname = ?", t0.UnixMicro()+2, "host-2"); err != nil {
				t.Fatal(err)
			}
			rep, in = tick()
			if !rep.Diverged || !strings.Contains(rep.Divergence, "host-2") {
				t.Fatalf("an unstamped change of host-2 was not reported: diverged %v (%s)", rep.Diverged, rep.Divergence)
			}
			if got, want := in.Hosts["host-2"].LastSeen, t0.Add(2*time.Microsecond); !got.Equal(want) {
				t.Errorf("the tick decided on host-2 last seen at %s, want the cold load's %s", got, want)
			}
			if rep, _ := tick(); rep.Diverged {
				t.Errorf("the tick after it diverged again: %s", rep.Divergence)
			}

			// A status changed without its stamp is reported even when the
			// host's last-seen time was written, stamped, after the kept
			// input's marks: only the time may be newer in the cold load.
			old := store.HostStatus{Current: "0000000000000000000000000000000a-old-host-1", Booted: "0000000000000000000000000000000a-old-host-1"}
			if _, err := s.RecordStatus(ctx, "host-1", old); err != nil {
				t.Fatal(err)
			}
			tick()
			if err := raw.ExecRaw(ctx, "UPDATE host_status SET status = replace(status, '-old-', '-new-'), digest = 'tampered' WHERE hostname = ?", "host-1"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.TouchHosts(ctx, store.SeenAt(map[string]time.Time{"host-1": t0.Add(time.Second)})); err != nil {
				t.Fatal(err)
			}
			vr, err = s.VerifyKept(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if !vr.Diverged || !strings.Contains(vr.Divergence, "-new-host-1") {
				t.Fatalf("VerifyKept: an unstamped status of host-1 was not reported beside a stamped time: diverged %v (%s), skipped %q",
					vr.Diverged, vr.Divergence, vr.Skipped)
			}
		})
	}
}

// blocking is a PostgreSQL store, with two connections of the test's own
// to hold a cold load up at a chosen moment.
type blocking struct {
	s     store.Store
	conn  *pgx.Conn // holds the lock
	watch *pgx.Conn // reads pg_stat_activity, outside conn's transaction
}

func openBlocking(t *testing.T) blocking {
	t.Helper()
	url := pgtest.URL(t)
	s, err := store.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	b := blocking{s: s}
	for _, c := range []**pgx.Conn{&b.conn, &b.watch} {
		if *c, err = pgx.Connect(t.Context(), url); err != nil {
			t.Fatal(err)
		}
		conn := *c
		t.Cleanup(func() { conn.Close(context.Background()) })
	}
	return b
}

// whileColdLoadWaits runs load on a goroutine with the rollouts table
// locked: a cold load reads it first, and a kept input with no rollouts
// never does, so load stops there after it caught up. It runs during
// meanwhile, then lifts the lock and returns when load has.
func (b blocking) whileColdLoadWaits(t *testing.T, load, during func()) {
	t.Helper()
	ctx := t.Context()
	lock, err := b.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, "LOCK TABLE rollouts IN ACCESS EXCLUSIVE MODE"); err != nil {
		_ = lock.Rollback(ctx)
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); load() }()
	defer func() { _ = lock.Rollback(ctx); <-done }() // also when during fails
	waitForLockWait(t, b.watch, "FROM rollouts")
	during()
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitForLockWait waits until a statement containing query waits for a
// lock on the server (another connection's).
func waitForLockWait(t *testing.T, conn *pgx.Conn, query string) {
	t.Helper()
	for range 1000 {
		var n int
		err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`, query).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no statement with %q waited for a lock within 10 s", query)
}
