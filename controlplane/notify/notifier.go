package notify

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/proto"
)

// Store is what a Notifier needs of the control plane's store
// (store.Store has it).
type Store interface {
	Events(ctx context.Context, q proto.EventQuery) ([]proto.Event, error)
	Watermark(ctx context.Context) (store.Watermark, error)
	StartNotificationCursor(ctx context.Context, sink string, at int64, now time.Time) (int64, error)
	AdvanceNotificationCursor(ctx context.Context, sink string, from, to int64, now time.Time) error
}

// Metrics are a notifier's Prometheus series, each labelled by sink; a
// nil one is not kept.
type Metrics struct {
	// Sent counts events delivered (a 2xx answer); Failures, failed
	// POSTs (every attempt).
	Sent, Failures *prometheus.CounterVec
	// Pruned counts the journal's event ids retention deleted before the
	// sink was sent or passed them (an upper bound of the events it
	// missed: ids have gaps, and its filter might have passed some).
	Pruned *prometheus.CounterVec
	// Cursor is the sink's cursor and Backlog the events after it (the
	// journal's newest id minus the cursor, events its filter passes
	// included), while this replica sends; LastSuccess is the Unix time
	// of its last delivery.
	Cursor, Backlog, LastSuccess *prometheus.GaugeVec
}

// Options configure a Notifier.
type Options struct {
	Sinks []Sink
	Store Store
	// Leader reports whether this replica may send — it holds the tick
	// lease, unexpired — and the lease's epoch: a new epoch means another
	// replica may have sent meanwhile, so the cursor is read again.
	Leader func() (epoch int64, ok bool)
	// Signal returns a channel closed when the journal may have grown
	// (taken before the journal is read). Nil: Poll alone.
	Signal func() <-chan struct{}
	// Poll is how often a sink looks at the journal without a signal
	// (default 5s).
	Poll time.Duration
	// Clock makes the backoff timers and the poll ticker and stamps the
	// cursors (clock.Real when nil).
	Clock clock.Clock
	Log   *slog.Logger
	// Metrics are kept when set.
	Metrics *Metrics
	// UserAgent is every POST's (default "nixfleet-cp/dev").
	UserAgent string
}

// Bounds of a sink's loop.
const (
	// DefaultPoll is Options.Poll's default.
	DefaultPoll = 5 * time.Second
	// batch is how many events a sink reads at once.
	batch = 100
	// writeTimeout bounds a cursor's write, also after Run's context
	// ended.
	writeTimeout = 10 * time.Second
	// logEvery spaces the log lines of a sink that keeps failing, and of
	// a store that keeps failing it.
	logEvery = time.Minute
)

// Notifier sends the journal to its sinks (the package documentation).
type Notifier struct {
	o     Options
	loops []*sinkLoop
	done  chan struct{}
}

// New makes a notifier for sinks that pass CheckSinks.
func New(o Options) (*Notifier, error) {
	if err := CheckSinks(o.Sinks); err != nil {
		return nil, err
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.UserAgent == "" {
		o.UserAgent = "nixfleet-cp/dev"
	}
	if o.Signal == nil {
		never := make(chan struct{})
		o.Signal = func() <-chan struct{} { return never }
	}
	n := &Notifier{o: o, done: make(chan struct{})}
	for _, s := range o.Sinks {
		s = s.withDefaults()
		n.loops = append(n.loops, &sinkLoop{n: n, s: s, hc: client(s), log: o.Log.With("sink", s.Name)})
		if m := o.Metrics; m != nil {
			for _, c := range []*prometheus.CounterVec{m.Sent, m.Failures, m.Pruned} {
				if c != nil {
					c.WithLabelValues(s.Name)
				}
			}
		}
	}
	return n, nil
}

// Run sends until ctx ends, then returns once every sink has stopped: a
// POST in flight finished (within its sink's timeout) and its cursor
// written. Done is closed then.
func (n *Notifier) Run(ctx context.Context) {
	defer close(n.done)
	var wg sync.WaitGroup
	for _, l := range n.loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.run(ctx)
		}()
	}
	wg.Wait()
}

// Done is closed when Run has returned.
func (n *Notifier) Done() <-chan struct{} { return n.done }

// sinkLoop sends one sink its events.
type sinkLoop struct {
	n   *Notifier
	s   Sink
	hc  *http.Client
	log *slog.Logger

	// epoch is the lease epoch the cursor was read in (0: read it again).
	epoch, cursor int64
	// newest is the journal's newest event id at the last look; pruned,
	// the newest pruned id already reported.
	newest, pruned int64
	// attempts counts the failed POSTs of the event being sent, since
	// failingSince; logged is the time of the last line about them.
	attempts     int
	failingSince time.Time
	logged       time.Time
	storeLogged  time.Time
}

func (l *sinkLoop) run(ctx context.Context) {
	poll := l.n.o.Clock.NewTicker(l.n.o.Poll)
	defer poll.Stop()
	for ctx.Err() == nil {
		signal := l.n.o.Signal()
		if l.step(ctx) {
			continue
		}
		select {
		case <-ctx.Done():
		case <-signal:
		case <-poll.C():
		}
	}
}

// step sends what the journal holds after the cursor, a batch at most,
// while this replica leads. It reports whether the cursor moved (look
// again at once).
func (l *sinkLoop) step(ctx context.Context) bool {
	o := l.n.o
	epoch, ok := o.Leader()
	if !ok {
		if l.epoch != 0 {
			l.epoch = 0
			l.forget()
		}
		return false
	}
	wm, err := o.Store.Watermark(ctx)
	if err != nil {
		l.storeError(ctx, "reading the journal's watermark", err)
		return false
	}
	l.newest = wm.Events
	if l.epoch != epoch {
		cur, err := o.Store.StartNotificationCursor(ctx, l.s.Name, wm.Events, o.Clock.Now())
		if err != nil {
			l.storeError(ctx, "reading the notification cursor", err)
			return false
		}
		l.cursor, l.epoch = cur, epoch
		l.log.Info("sending notifications", "afterEvent", cur, "newestEvent", wm.Events, "format", l.s.Format, "epoch", epoch)
	}
	l.checkPruned(wm.PrunedEvents)
	l.observe()
	if l.cursor >= wm.Events {
		return false
	}
	evs, err := o.Store.Events(ctx, proto.EventQuery{AfterID: l.cursor, Limit: batch})
	if err != nil {
		l.storeError(ctx, "reading the journal", err)
		return false
	}
	passed := l.cursor
	for _, e := range evs {
		c, ok := CategoryOf(e)
		if !ok || !l.s.Accepts(c, e) {
			passed = e.ID
			continue
		}
		if !l.deliver(ctx, epoch, c, e) {
			l.advance(ctx, passed) // what it passed before the event it gave up
			return false
		}
		if !l.advance(ctx, e.ID) {
			return false
		}
		passed = e.ID
	}
	return l.advance(ctx, passed) && len(evs) > 0
}

// deliver POSTs an event until it is delivered, and reports whether it
// was: it gives up when ctx ends (between attempts: a POST in flight is
// finished) or this replica stops leading in epoch.
func (l *sinkLoop) deliver(ctx context.Context, epoch int64, c Category, e proto.Event) bool {
	o := l.n.o
	body, err := Body(l.s, c, e)
	if err != nil { // a bug: passing the event beats holding the sink forever
		l.log.Error("writing a notification", "event", e.ID, "err", err)
		return true
	}
	for {
		if ctx.Err() != nil {
			return false
		}
		if ep, ok := o.Leader(); !ok || ep != epoch {
			return false
		}
		out := post(ctx, l.hc, l.s, o.UserAgent, e.ID, body, o.Clock.Now())
		if out.err == nil {
			l.delivered(e, c)
			return true
		}
		wait := l.failed(e, out)
		t := o.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C():
		}
	}
}

func (l *sinkLoop) delivered(e proto.Event, c Category) {
	now := l.n.o.Clock.Now()
	if m := l.n.o.Metrics; m != nil {
		if m.Sent != nil {
			m.Sent.WithLabelValues(l.s.Name).Inc()
		}
		if m.LastSuccess != nil {
			m.LastSuccess.WithLabelValues(l.s.Name).Set(float64(now.UnixMilli()) / 1000)
		}
	}
	if l.attempts > 0 {
		l.log.Info("notification delivered after failures", "event", e.ID, "category", c, "failedAttempts", l.attempts,
			"failingFor", now.Sub(l.failingSince).Round(time.Millisecond))
	} else {
		l.log.Debug("notification delivered", "event", e.ID, "category", c)
	}
	l.attempts, l.failingSince, l.logged = 0, time.Time{}, time.Time{}
}

// failed counts and logs a failed POST, and returns how long to wait
// before the next: the first failure of an event is logged, then one line
// a minute while it keeps failing.
func (l *sinkLoop) failed(e proto.Event, out outcome) time.Duration {
	now := l.n.o.Clock.Now()
	l.attempts++
	if l.attempts == 1 {
		l.failingSince = now
	}
	if m := l.n.o.Metrics; m != nil && m.Failures != nil {
		m.Failures.WithLabelValues(l.s.Name).Inc()
	}
	wait := l.s.Backoff(l.attempts, out.retryAfter)
	attrs := []any{"event", e.ID, "delivery", DeliveryID(l.s.Name, e.ID), "status", out.status, "err", out.err,
		"attempts", l.attempts, "retryIn", wait}
	switch {
	case l.attempts == 1:
		l.log.Warn("notification failed; retrying", attrs...)
		l.logged = now
	case now.Sub(l.logged) >= logEvery:
		l.log.Error("notification still failing; the sink's later events wait behind it", append(attrs, "failingFor", now.Sub(l.failingSince).Round(time.Second))...)
		l.logged = now
	default:
		l.log.Debug("notification failed", attrs...)
	}
	return wait
}

// advance moves the cursor to to (from where it is). A failed write is
// tried again while this replica leads and runs, since the events up to
// to were sent: a cursor left behind sends them again. It reports whether
// the cursor is at to; when another replica moved it, the cursor is read
// again at the next step.
func (l *sinkLoop) advance(ctx context.Context, to int64) bool {
	o := l.n.o
	for attempt := 1; to > l.cursor; attempt++ {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
		err := o.Store.AdvanceNotificationCursor(wctx, l.s.Name, l.cursor, to, o.Clock.Now())
		cancel()
		switch {
		case err == nil:
			l.cursor = to
			l.observe()
			return true
		case errors.Is(err, store.ErrCursorMoved) || errors.Is(err, store.ErrNotFound):
			l.log.Warn("the notification cursor moved: another replica sends", "err", err)
			l.epoch = 0
			return false
		}
		l.storeError(ctx, "writing the notification cursor", err)
		if _, leads := o.Leader(); ctx.Err() != nil || !leads {
			return false
		}
		t := o.Clock.NewTimer(l.s.Backoff(attempt, 0))
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C():
		}
	}
	return true
}

// checkPruned reports, once, events retention deleted before the sink
// was sent or passed them.
func (l *sinkLoop) checkPruned(pruned int64) {
	from := max(l.cursor, l.pruned)
	if pruned <= from {
		return
	}
	l.pruned = pruned
	if m := l.n.o.Metrics; m != nil && m.Pruned != nil {
		m.Pruned.WithLabelValues(l.s.Name).Add(float64(pruned - from))
	}
	l.log.Error("journal events were pruned before they were notified (--retention is shorter than the sink's outage)",
		"afterEvent", from, "throughEvent", pruned)
}

// observe shows the cursor and the backlog.
func (l *sinkLoop) observe() {
	if m := l.n.o.Metrics; m != nil {
		if m.Cursor != nil {
			m.Cursor.WithLabelValues(l.s.Name).Set(float64(l.cursor))
		}
		if m.Backlog != nil {
			m.Backlog.WithLabelValues(l.s.Name).Set(float64(max(0, l.newest-l.cursor)))
		}
	}
}

// forget drops the series only the replica that sends keeps.
func (l *sinkLoop) forget() {
	if m := l.n.o.Metrics; m != nil {
		if m.Cursor != nil {
			m.Cursor.DeleteLabelValues(l.s.Name)
		}
		if m.Backlog != nil {
			m.Backlog.DeleteLabelValues(l.s.Name)
		}
	}
}

// storeError logs a store failure, once a minute at most (in between at
// debug level); none when ctx ended.
func (l *sinkLoop) storeError(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	now := l.n.o.Clock.Now()
	if now.Sub(l.storeLogged) < logEvery {
		l.log.Debug(what, "err", err)
		return
	}
	l.storeLogged = now
	l.log.Error(what, "err", err)
}
