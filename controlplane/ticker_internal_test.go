package controlplane

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/clock"
)

// TestDebounceOnAFakeClock: a trigger becomes a tick once the debounce
// has passed on the replica's clock, not before, and the committed tick
// is posted for the hub. The clock moves only when the test says so: the
// test waits for what the loop did, never for time.
func TestDebounceOnAFakeClock(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "cp.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
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
	done := make(chan struct{})
	go func() { defer close(done); tk.run(ctx) }()
	// Taking the lease kicks a tick: the lease and tick tickers, and the
	// debounce timer.
	waitTimers(3)
	fake.Advance(cfg.Debounce - time.Millisecond)
	if fake.Pending() != 3 || b.take() != 0 {
		t.Fatal("ticked before the debounce passed")
	}
	fake.Advance(time.Millisecond)
	select {
	case <-b.ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no tick after the debounce")
	}
	if w := b.take(); w != wakeTicked {
		t.Fatalf("posted %b, want a committed tick", w)
	}
	if _, leader := tk.isLeader(); !leader {
		t.Fatal("the only replica does not lead")
	}
	cancel()
	<-done
}
