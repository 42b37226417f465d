package controlplane

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nixfleet/nixfleet/controlplane/store"
)

// statusBatcher records the writes a tick must see at once (a changed
// status, a host back online, a confirm, a report) by group commit: the
// writes that arrive while a batch commits form the next batch, one
// transaction and one commit for all of them (store.RecordStatuses). An
// idle control plane writes a lone check-in at once, as before; a busy
// one does not wait for one commit per check-in, each holding the
// watermark row until its commit (the onboarding ceiling of rfcs/0006
// §Check-ins at scale). A write is answered once its batch committed.
//
// No goroutine runs while nothing is queued: the first write queued
// starts one, which writes batches until the queue is empty.
type statusBatcher struct {
	st      store.HostStore
	max     int           // writes in one batch at most
	timeout time.Duration // how long one batch may take
	sizes   prometheus.Histogram

	mu      sync.Mutex
	queue   []*statusReq
	writing bool
}

// statusReq is a queued write and, once done is closed, its result.
type statusReq struct {
	w    store.StatusWrite
	res  store.StatusResult
	err  error
	done chan struct{}
}

// newStatusBatcher batches writes to st, up to 500 a transaction, each
// batch's size observed in sizes.
func newStatusBatcher(st store.HostStore, sizes prometheus.Histogram) *statusBatcher {
	return &statusBatcher{st: st, max: 500, timeout: 30 * time.Second, sizes: sizes}
}

// record queues w and returns its result when its batch committed, or
// ctx's error if ctx ends first (the write may still be made: every
// write here may be made again).
func (b *statusBatcher) record(ctx context.Context, w store.StatusWrite) (store.StatusResult, error) {
	r := &statusReq{w: w, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, r)
	if !b.writing {
		b.writing = true
		go b.drain()
	}
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.res, r.err
	case <-ctx.Done():
		return store.StatusResult{}, ctx.Err()
	}
}

// drain writes batches until the queue is empty.
func (b *statusBatcher) drain() {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.writing = false
			b.mu.Unlock()
			return
		}
		n := min(len(b.queue), b.max)
		batch := b.queue[:n:n]
		b.queue = b.queue[n:]
		if len(b.queue) == 0 {
			b.queue = nil // let the backing array go
		}
		b.mu.Unlock()
		b.write(batch)
	}
}

// write records one batch and answers its writes. When the batch fails as
// a whole, each write is tried alone, so that one host's error (a stored
// status that no longer decodes, say) is that host's only.
func (b *statusBatcher) write(batch []*statusReq) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	ws := make([]store.StatusWrite, len(batch))
	for i, r := range batch {
		ws[i] = r.w
	}
	b.sizes.Observe(float64(len(batch)))
	res, err := b.st.RecordStatuses(ctx, ws)
	if err != nil && len(batch) > 1 {
		for _, r := range batch {
			b.write([]*statusReq{r})
		}
		return
	}
	for i, r := range batch {
		if err != nil {
			r.err = err
		} else {
			r.res = res[i]
		}
		close(r.done)
	}
}
