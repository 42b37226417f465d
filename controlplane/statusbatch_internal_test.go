package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/pgtest"
	"github.com/nixfleet/nixfleet/reconciler"
)

// gatedStore is a real store whose first RecordStatuses waits for a
// release, so that a test can queue writes behind a batch in flight.
type gatedStore struct {
	store.Store
	once    sync.Once
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	sizes   []int
}

func (g *gatedStore) RecordStatuses(ctx context.Context, ws []store.StatusWrite) ([]store.StatusResult, error) {
	g.once.Do(func() {
		close(g.entered)
		<-g.release
	})
	g.mu.Lock()
	g.sizes = append(g.sizes, len(ws))
	g.mu.Unlock()
	return g.Store.RecordStatuses(ctx, ws)
}

// TestStatusBatcher: writes queued while a batch commits are committed
// together in the next one, each answered with its own result; a write
// that fails fails alone; on both backends.
func TestStatusBatcher(t *testing.T) {
	for _, backend := range []string{"postgres", "sqlite"} {
		t.Run(backend, func(t *testing.T) {
			url := "sqlite://" + filepath.Join(t.TempDir(), "cp.db")
			if backend == "postgres" {
				url = pgtest.URL(t)
			}
			st, err := store.Open(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			g := &gatedStore{Store: st, entered: make(chan struct{}), release: make(chan struct{})}
			sizes := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sizes"})
			b := newStatusBatcher(g, sizes)
			now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			const n = 40
			type answer struct {
				res store.StatusResult
				err error
			}
			answers := make([]answer, n+1)
			var wg sync.WaitGroup
			do := func(i int, w store.StatusWrite) {
				defer wg.Done()
				answers[i].res, answers[i].err = b.record(t.Context(), w)
			}
			wg.Add(1)
			go do(0, store.StatusWrite{Hostname: "h00", Status: &store.HostStatus{Current: "c0"}, Seen: now})
			<-g.entered
			// Behind the batch in flight: a check-in per host, one a
			// confirm of h01's, and one that cannot be recorded.
			for i := 1; i < n; i++ {
				wg.Add(1)
				go do(i, store.StatusWrite{Hostname: fmt.Sprintf("h%02d", i), Status: &store.HostStatus{Current: fmt.Sprint("c", i)}, Seen: now})
			}
			wg.Add(1)
			go do(n, store.StatusWrite{Hostname: ""})
			for {
				b.mu.Lock()
				queued := len(b.queue)
				b.mu.Unlock()
				if queued == n {
					break
				}
				time.Sleep(time.Millisecond)
			}
			close(g.release)
			wg.Wait()
			for i := range n {
				if a := answers[i]; a.err != nil || !a.res.Changed || !a.res.Written {
					t.Errorf("write %d: %+v", i, a)
				}
				h, err := st.Host(t.Context(), fmt.Sprintf("h%02d", i))
				if err != nil {
					t.Fatal(err)
				}
				if h.Observed.Current != fmt.Sprint("c", i) || !h.Observed.LastSeen.Equal(now) {
					t.Errorf("host %d as stored: %+v", i, h.Observed)
				}
			}
			if answers[n].err == nil {
				t.Error("a write without a hostname was recorded")
			}
			// The first batch alone; the next n writes together, which
			// failed for the one without a hostname; then each of them
			// alone.
			want := []int{1, n}
			for range n {
				want = append(want, 1)
			}
			if fmt.Sprint(g.sizes) != fmt.Sprint(want) {
				t.Errorf("batches of %v writes, want %v", g.sizes, want)
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(sizes)
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			if got := mfs[0].GetMetric()[0].GetHistogram().GetSampleCount(); got != uint64(len(want)) {
				t.Errorf("the batch histogram counted %d batches, want %d", got, len(want))
			}
			// A confirm, batched like a check-in.
			act := reconciler.Activation{RolloutID: "r@1", Closure: "c1", Outcome: reconciler.OutcomeConfirmed, At: now}
			if _, err := b.record(t.Context(), store.StatusWrite{Hostname: "h01", Activation: &act}); err != nil {
				t.Fatal(err)
			}
			h, err := st.Host(t.Context(), "h01")
			if err != nil {
				t.Fatal(err)
			}
			if h.Observed.Activation == nil || h.Observed.Activation.Outcome != reconciler.OutcomeConfirmed || h.Observed.Current != "c1" {
				t.Errorf("h01 after its confirm: %+v", h.Observed)
			}
		})
	}
}
