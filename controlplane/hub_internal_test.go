package controlplane

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestHubUpdateInChunks: a tick's delta larger than updateChunk is applied
// whole, however often the lock is let go: every host ends with its new
// assignment, the counts add up, the long-poll of every host whose
// activation changed is woken (and no other), and check-ins reading
// assignments meanwhile go on.
func TestHubUpdateInChunks(t *testing.T) {
	h := newHub(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(), clock.Real{}, newBoard())
	const n = 3*updateChunk + 17
	name := func(i int) string { return fmt.Sprintf("h%05d", i) }
	since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	changed := map[string]*reconciler.Assignment{}
	for i := range n {
		a := &reconciler.Assignment{RolloutID: "stable@2", RolloutState: reconciler.RolloutActive,
			Host: reconciler.RolloutHost{Hostname: name(i), State: reconciler.HostPending}}
		if i%100 == 0 { // dispatched: its long-poll must wake
			a.Host.State, a.Host.Target, a.Host.Since = reconciler.HostActivating, "t-"+name(i), since
		}
		changed[name(i)] = a
	}
	woken := make([]chan struct{}, n)
	for i := range n {
		woken[i] = make(chan struct{})
		if !h.addWaiter(name(i), "", &waiter{ch: woken[i]}) {
			t.Fatalf("%s: no waiter added", name(i))
		}
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				h.get(name(i % n))
			}
		}
	})
	h.update(changed)
	close(stop)
	readers.Wait()
	for i := range n {
		a, ok := h.get(name(i))
		if !ok || a.Host.State != changed[name(i)].Host.State {
			t.Fatalf("%s after the update: %+v, %v", name(i), a, ok)
		}
		select {
		case <-woken[i]:
			if i%100 != 0 {
				t.Errorf("%s was woken: still pending, nothing to act on", name(i))
			}
		default:
			if i%100 == 0 {
				t.Errorf("%s was not woken: dispatched", name(i))
			}
		}
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.counts[reconciler.HostActivating] != (n+99)/100 || h.counts[reconciler.HostPending] != n-(n+99)/100 {
		t.Errorf("counts %v", h.counts)
	}
}

// touchStore records the last-seen batches a hub writes; while block is
// set, TouchHosts waits for it to close (or for a bound) before it
// returns, and notes when the write ended.
type touchStore struct {
	store.Store
	mu      sync.Mutex
	batches []map[string]store.Seen
	entered chan struct{}
	block   chan struct{}
	events  []string
}

func (s *touchStore) TouchHosts(_ context.Context, seen map[string]store.Seen) ([]string, error) {
	s.mu.Lock()
	s.batches = append(s.batches, maps.Clone(seen))
	block := s.block
	s.mu.Unlock()
	if block != nil {
		close(s.entered)
		select {
		case <-block:
		case <-time.After(200 * time.Millisecond):
		}
	}
	s.note("written")
	return nil, nil
}

func (s *touchStore) note(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
}

// TestHubForgetsWhatLeftTheFleet: a host forgotten by the leader is not
// brought back by a last-seen time noted before: a flush writes only the
// hosts of the newest verified fleet, and the deletion of forgotten rows
// never runs while a flush holds a batch (were it to, the batch would
// write the row again after the deletion: a host list naming a host
// GET /v1/hosts/{name} says is gone).
func TestHubForgetsWhatLeftTheFleet(t *testing.T) {
	st := &touchStore{}
	h := newHub(st, slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(), clock.Real{}, newBoard())
	fleet := map[string]bool{"web-1": true, "web-3": true}
	var fleetMu sync.Mutex
	h.inFleet = func() (func(string) bool, bool) {
		fleetMu.Lock()
		defer fleetMu.Unlock()
		f := maps.Clone(fleet)
		return func(host string) bool { return f[host] }, true
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()

	// web-3 checked in, then left the fleet before the flush: its time
	// is dropped, web-1's written.
	h.touch("web-1", at, "")
	h.touch("web-3", at, "")
	fleetMu.Lock()
	delete(fleet, "web-3")
	fleetMu.Unlock()
	if err := h.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if want := []map[string]store.Seen{{"web-1": {At: at}}}; len(st.batches) != 1 || !maps.Equal(st.batches[0], want[0]) {
		t.Fatalf("flushed %v, want %v", st.batches, want)
	}

	// A flush holding web-1's time while web-1 is forgotten: the
	// deletion waits for the write.
	h.touch("web-1", at.Add(time.Minute), "")
	st.mu.Lock()
	st.entered, st.block = make(chan struct{}), make(chan struct{})
	st.mu.Unlock()
	flushed := make(chan error, 1)
	go func() { flushed <- h.flush(ctx) }()
	<-st.entered
	pruned := make(chan []string, 1)
	go func() {
		gone, _ := h.forgetPruned(func() ([]string, error) {
			st.note("deleted")
			close(st.block) // a flush not waited for writes now, after the deletion
			return []string{"web-1"}, nil
		})
		pruned <- gone
	}()
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	<-pruned
	st.mu.Lock()
	events := slices.Clone(st.events)
	st.mu.Unlock()
	if want := []string{"written", "written", "deleted"}; !slices.Equal(events, want) {
		t.Errorf("store saw %v, want %v (the deletion after the write it raced)", events, want)
	}
	h.seenMu.Lock()
	_, seen := h.seen["web-1"]
	_, last := h.last["web-1"]
	h.seenMu.Unlock()
	if seen || last {
		t.Errorf("the hub still keeps the forgotten web-1 (seen %v, last %v)", seen, last)
	}
}

// TestEndRetry: the check-in that ends a host's wait is written at once,
// and again after endRetry while the same wait lasts (a tick may not have
// been able to end it), not in between; a new wait starts afresh.
func TestEndRetry(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 1, 0, 0, time.UTC))
	h := newHub(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(), clk, newBoard())
	since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if h.soakSeen("web-1", since) {
		t.Fatal("a wait nobody ended is seen")
	}
	h.noteSoak("web-1", since)
	if !h.soakSeen("web-1", since) {
		t.Error("the wait just ended is not seen")
	}
	if h.soakSeen("web-1", since.Add(time.Second)) {
		t.Error("another wait is seen")
	}
	if h.soakSeen("web-2", since) {
		t.Error("another host's wait is seen")
	}
	clk.Advance(endRetry - time.Nanosecond)
	if !h.soakSeen("web-1", since) {
		t.Error("the wait is forgotten before endRetry")
	}
	clk.Advance(time.Nanosecond) // the forgetting runs on its own goroutine
	for i := 0; h.soakSeen("web-1", since); i++ {
		if i == 1000 {
			t.Fatal("the wait is still seen endRetry after it ended")
		}
		time.Sleep(time.Millisecond)
	}
	// A newer end replaces the older: the older's timer does not forget it.
	h.noteSoak("web-1", since)
	clk.Advance(endRetry / 2)
	h.noteSoak("web-1", since.Add(time.Second))
	clk.Advance(endRetry / 2)
	time.Sleep(10 * time.Millisecond)
	if !h.soakSeen("web-1", since.Add(time.Second)) {
		t.Error("the older end's timer forgot the newer")
	}
}
