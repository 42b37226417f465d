package controlplane

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/clock"
)

// TestLeaseKeptUntilTheNotifierStops: a leader shutting down runs
// beforeRelease (the notifier finishing a POST in flight and writing its
// cursor) while it still holds the tick lease, and gives the lease up
// only after it returned: no other replica can send meanwhile.
func TestLeaseKeptUntilTheNotifierStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := sqliteStore(t, filepath.Join(t.TempDir(), "cp.db"))
	fake := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	cfg := &Config{Clock: fake, TickInterval: time.Hour}
	cfg.setDefaults()
	tk := newTicker(st, cfg, "r1", slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(), newBoard())
	held := make(chan error, 1)
	tk.beforeRelease = func() {
		_, err := st.AcquireLease(context.Background(), store.TickLease, "r2", cfg.LeaseTTL, fake.Now())
		held <- err
	}
	done := make(chan struct{})
	go func() { defer close(done); tk.run(ctx) }()
	// Taking the lease kicks a tick: once the loop has made its lease and
	// tick tickers and the debounce timer, it leads.
	for {
		made := fake.Made()
		if fake.Pending() == 3 {
			break
		}
		<-made
	}
	if _, leader := tk.isLeader(); !leader {
		t.Fatal("the only replica does not lead")
	}
	cancel()
	<-done
	select {
	case err := <-held:
		if !errors.Is(err, store.ErrLeaseHeld) {
			t.Fatalf("while beforeRelease ran, another replica took the lease (or failed otherwise): %v", err)
		}
	default:
		t.Fatal("beforeRelease did not run")
	}
	if _, err := st.AcquireLease(context.Background(), store.TickLease, "r2", cfg.LeaseTTL, fake.Now()); err != nil {
		t.Fatalf("the lease was not given up after beforeRelease: %v", err)
	}
}
