package controlplane

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

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
	h.update(changed, map[string][]time.Duration{"stable@2": {0, time.Minute}})
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
	if w := h.waveSoak["stable@2"]; len(w) != 2 {
		t.Errorf("wave soaks %v", w)
	}
}
