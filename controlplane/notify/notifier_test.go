package notify_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/notify"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/internal/testkit/pgtest"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// The notifier's tests run it against real stores (SQLite and
// PostgreSQL) and real HTTP servers on loopback, with a fake clock for
// its backoff timers: they wait for what happened, never sleep.

var backends = []string{"sqlite", "postgres"}

func openStore(t *testing.T, backend string) store.Store {
	t.Helper()
	url := "sqlite://" + filepath.Join(t.TempDir(), "cp.db")
	if backend == "postgres" {
		url = pgtest.URL(t)
	}
	st, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// world is a store, a fake clock and the leadership a notifier sees.
type world struct {
	t      *testing.T
	st     store.Store
	clk    *clock.Fake
	epoch  atomic.Int64 // the leader's epoch; 0: not leading
	mu     sync.Mutex
	signal chan struct{}
	// looked receives once each time a sink's loop takes the signal: it
	// finished a step.
	looked chan string
}

func newWorld(t *testing.T, backend string) *world {
	w := &world{t: t, st: openStore(t, backend), clk: clock.NewFake(at), signal: make(chan struct{}), looked: make(chan string, 64)}
	w.epoch.Store(1)
	return w
}

// wake closes the signal: the journal grew.
func (w *world) wake() {
	w.mu.Lock()
	close(w.signal)
	w.signal = make(chan struct{})
	w.mu.Unlock()
}

// append writes events to the journal and wakes the sinks.
func (w *world) append(evs ...rc.Event) {
	w.t.Helper()
	if err := w.st.AppendEvents(context.Background(), w.clk.Now(), evs); err != nil {
		w.t.Fatal(err)
	}
	w.wake()
}

// options are a notifier's, on the world.
func (w *world) options(sinks ...notify.Sink) notify.Options {
	return notify.Options{Sinks: sinks, Store: w.st, Clock: w.clk, Poll: time.Hour,
		Leader: func() (int64, bool) { e := w.epoch.Load(); return e, e != 0 },
		Signal: func() <-chan struct{} {
			w.mu.Lock()
			defer w.mu.Unlock()
			select {
			case w.looked <- "":
			default:
			}
			return w.signal
		}}
}

// start runs a notifier until the test ends (or its stop is called).
func (w *world) start(o notify.Options) (n *notify.Notifier, stop func()) {
	w.t.Helper()
	n, err := notify.New(o)
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go n.Run(ctx)
	stop = func() {
		cancel()
		select {
		case <-n.Done():
		case <-time.After(20 * time.Second):
			w.t.Error("the notifier does not stop")
		}
	}
	w.t.Cleanup(stop)
	return n, stop
}

// cursor is a sink's stored cursor.
func (w *world) cursor(sink string) int64 {
	w.t.Helper()
	cs, err := w.st.NotificationCursors(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	for _, c := range cs {
		if c.Sink == sink {
			return c.LastEvent
		}
	}
	w.t.Fatalf("%s has no cursor: %v", sink, cs)
	return 0
}

// driveBackoff fires every backoff timer as soon as it is made (the fake
// clock jumps an hour), until the test ends; tickers is how many poll
// tickers the notifiers have.
func (w *world) driveBackoff(tickers int) {
	ctx, cancel := context.WithCancel(context.Background())
	w.t.Cleanup(cancel)
	go func() {
		for {
			made := w.clk.Made()
			if w.clk.Pending() > tickers {
				w.clk.Advance(time.Hour)
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-made:
			}
		}
	}()
}

// delivery is one POST a test sink received.
type delivery struct {
	msg       notify.Message
	raw       []byte
	header    http.Header
	signedOK  bool
	attempted int // how many POSTs of this delivery id the sink had seen, this one included
}

// testSink is a webhook on loopback that checks each POST's signature
// with its own HMAC code, and answers as answer says (nil: 200).
type testSink struct {
	t      *testing.T
	srv    *httptest.Server
	secret []byte
	answer func(n int, d delivery) (status int, header map[string]string)
	mu     sync.Mutex
	posts  []delivery // every POST
	got    chan delivery
}

func newTestSink(t *testing.T, secret string, answer func(n int, d delivery) (int, map[string]string)) *testSink {
	s := &testSink{t: t, secret: []byte(secret), answer: answer, got: make(chan delivery, 1000)}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *testSink) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.t.Errorf("reading a POST: %v", err)
	}
	d := delivery{raw: body, header: r.Header.Clone()}
	mac := hmac.New(sha256.New, s.secret)
	mac.Write(body)
	d.signedOK = hmac.Equal([]byte(r.Header.Get("X-Nixfleet-Signature")), []byte("sha256="+hex.EncodeToString(mac.Sum(nil))))
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
		s.t.Errorf("%s with Content-Type %q", r.Method, r.Header.Get("Content-Type"))
	}
	_ = json.Unmarshal(body, &d.msg)
	s.mu.Lock()
	for _, p := range s.posts {
		if p.header.Get("X-Nixfleet-Delivery") == d.header.Get("X-Nixfleet-Delivery") {
			d.attempted++
		}
	}
	d.attempted++
	s.posts = append(s.posts, d)
	n := len(s.posts)
	s.mu.Unlock()
	status, header := http.StatusOK, map[string]string(nil)
	if s.answer != nil {
		status, header = s.answer(n, d)
	}
	for k, v := range header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(status)
	if status/100 == 2 {
		s.got <- d
	}
}

// receive waits for n deliveries (2xx answers) and returns them.
func (s *testSink) receive(n int) []delivery {
	s.t.Helper()
	var out []delivery
	timeout := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case d := <-s.got:
			out = append(out, d)
		case <-timeout:
			s.t.Fatalf("%d deliveries of %d within 30s", len(out), n)
		}
	}
	return out
}

func (s *testSink) attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.posts)
}

func ev(kind, channel, from, to string) rc.Event {
	return rc.Event{Kind: kind, RolloutID: channel + "@0123456789abcdef0123456789abcdef01234567", Channel: channel, Wave: 1,
		From: from, To: to, Reason: rc.Reason{Code: codes.Converged, Message: kind + " " + to}}
}

// TestEveryEventOnceInOrder: a sink that fails (500) for its first
// POSTs, then recovers, receives every event it accepts exactly once, in
// the journal's order, signed; a filtered sink only its categories and
// channels; both move their cursors past every event, those they were
// not sent included; the metrics count it all.
func TestEveryEventOnceInOrder(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, backend)
			flaky := newTestSink(t, "flaky-secret", func(n int, _ delivery) (int, map[string]string) {
				if n <= 5 {
					return http.StatusInternalServerError, nil
				}
				return http.StatusOK, nil
			})
			picky := newTestSink(t, "picky-secret", nil)
			for _, s := range []string{"flaky", "picky"} {
				if _, err := w.st.StartNotificationCursor(context.Background(), s, 0, at); err != nil {
					t.Fatal(err)
				}
			}
			m := metrics()
			o := w.options(
				notify.Sink{Name: "flaky", URL: flaky.srv.URL, Secret: []byte("flaky-secret")},
				notify.Sink{Name: "picky", URL: picky.srv.URL + "/hook", Secret: []byte("picky-secret"),
					Events: []notify.Category{notify.CategoryHalted, notify.CategoryConverged}, Channels: []string{"prod"}})
			o.Metrics, o.UserAgent = m, "nixfleet-cp/test"
			w.driveBackoff(2)
			_, stop := w.start(o)

			batches := [][]rc.Event{
				{ev(rc.EventRolloutOpened, "prod", "", "Opening"), ev(rc.EventHostTransition, "prod", "Pending", "Activating"),
					ev(rc.EventRolloutTransition, "prod", "Active", "Halted")},
				{ev(rc.EventRolloutTransition, "staging", "Active", "Halted"), ev(rc.EventHostWaiting, "prod", "", "")},
				{ev(rc.EventWavePromoted, "prod", "", ""), ev(rc.EventRolloutTransition, "prod", "Active", "Converged"),
					ev(rc.EventRolloutTransition, "prod", "Active", "Cancelled"), ev(rc.EventIntentAccepted, "prod", "", "")},
			}
			for _, b := range batches {
				w.append(b...)
			}
			all, err := w.st.Events(context.Background(), proto.EventQuery{})
			if err != nil {
				t.Fatal(err)
			}
			var wantFlaky, wantPicky []int64
			for _, e := range all {
				c, ok := notify.CategoryOf(e)
				if ok {
					wantFlaky = append(wantFlaky, e.ID)
				}
				if ok && (c == notify.CategoryHalted || c == notify.CategoryConverged) && e.Channel == "prod" {
					wantPicky = append(wantPicky, e.ID)
				}
			}
			if len(wantFlaky) != 5 || len(wantPicky) != 2 {
				t.Fatalf("the test's events: %d and %d notifiable, want 5 and 2", len(wantFlaky), len(wantPicky))
			}
			check := func(name string, s *testSink, want []int64) {
				t.Helper()
				got := s.receive(len(want))
				var ids []int64
				for _, d := range got {
					ids = append(ids, d.msg.Event.ID)
					id := strconv.FormatInt(d.msg.Event.ID, 10)
					if !d.signedOK || d.header.Get("X-Nixfleet-Event-Id") != id || d.header.Get("X-Nixfleet-Delivery") != name+"/"+id ||
						d.msg.DeliveryID != name+"/"+id || d.msg.Sink != name || d.header.Get("User-Agent") != "nixfleet-cp/test" {
						t.Errorf("%s: delivery of event %s: signature ok %v, headers %v, body %s", name, id, d.signedOK, d.header, d.raw)
					}
				}
				if d := cmp.Diff(want, ids); d != "" {
					t.Errorf("%s received (-want +got):\n%s", name, d)
				}
			}
			check("flaky", flaky, wantFlaky)
			check("picky", picky, wantPicky)

			// A restart (a new epoch) on the stored cursors sends nothing
			// again: the next delivery of each sink is the next event.
			stop()
			w.epoch.Store(2)
			_, stop = w.start(o)
			w.append(ev(rc.EventRolloutTransition, "prod", "Active", "Failed"), ev(rc.EventRolloutTransition, "prod", "Active", "Halted"))
			all, err = w.st.Events(context.Background(), proto.EventQuery{})
			if err != nil {
				t.Fatal(err)
			}
			last := all[len(all)-1].ID
			check("flaky", flaky, []int64{last - 1, last})
			check("picky", picky, []int64{last})
			stop()
			for _, s := range []struct {
				name  string
				sink  *testSink
				posts int
			}{{"flaky", flaky, 5 + 5 + 2}, {"picky", picky, 2 + 1}} {
				if got := w.cursor(s.name); got != last {
					t.Errorf("%s's cursor is at %d, want %d (the last event)", s.name, got, last)
				}
				if got := s.sink.attempts(); got != s.posts {
					t.Errorf("%s had %d POSTs, want %d", s.name, got, s.posts)
				}
			}
			for name, want := range map[string]float64{"sent/flaky": 7, "failures/flaky": 5, "sent/picky": 3, "failures/picky": 0} {
				metric, sink, _ := strings.Cut(name, "/")
				if got := value(t, m, metric, sink); got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
		})
	}
}

// value reads a series of the test's metrics (named as metrics names
// them) for a sink; 0 when it has none.
func value(t *testing.T, m *notify.Metrics, name, sink string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Sent, m.Failures, m.Pruned, m.Cursor, m.Backlog, m.LastSuccess)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "sink" && l.GetValue() == sink {
					return s.GetCounter().GetValue() + s.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

func metrics() *notify.Metrics {
	c := func(n string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: n, Help: n}, []string{"sink"})
	}
	g := func(n string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: n, Help: n}, []string{"sink"})
	}
	return &notify.Metrics{Sent: c("sent"), Failures: c("failures"), Pruned: c("pruned"),
		Cursor: g("cursor"), Backlog: g("backlog"), LastSuccess: g("last")}
}

// reply is what a test tells a held POST to answer.
type reply struct {
	status int
	header map[string]string
}

// heldSink is a test sink whose every POST waits for the test's reply.
func heldSink(t *testing.T) (*testSink, chan delivery, chan reply) {
	posts, replies := make(chan delivery), make(chan reply)
	s := newTestSink(t, "", func(_ int, d delivery) (int, map[string]string) {
		posts <- d
		r := <-replies
		return r.status, r.header
	})
	return s, posts, replies
}

// TestBackoffSchedule: an event is tried again after 1s, 2s, 4s… (at
// most max-backoff), or after a longer Retry-After of a 429 or 503; the
// fake clock shows each wait to the millisecond.
func TestBackoffSchedule(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "sqlite")
	sink, posts, replies := heldSink(t)
	if _, err := w.st.StartNotificationCursor(context.Background(), "ops", 0, at); err != nil {
		t.Fatal(err)
	}
	ticker := w.clk.Made()
	w.start(w.options(notify.Sink{Name: "ops", URL: sink.srv.URL, MaxBackoff: 6 * time.Second}))
	<-ticker // the poll ticker: Pending counts it from now on
	w.append(ev(rc.EventRolloutTransition, "prod", "Active", "Halted"))

	for i, step := range []struct {
		answer reply
		wait   time.Duration
	}{
		{reply{status: 500}, time.Second},
		{reply{status: 503}, 2 * time.Second},
		{reply{status: 429, header: map[string]string{"Retry-After": "10"}}, 10 * time.Second},
		{reply{status: 502}, 6 * time.Second}, // 8s, capped
		{reply{status: 302, header: map[string]string{"Location": "/elsewhere"}}, 6 * time.Second},
		{reply{status: 404}, 6 * time.Second},
	} {
		d := <-posts
		if d.attempted != i+1 || d.header.Get("X-Nixfleet-Signature") != "" {
			t.Fatalf("POST %d is attempt %d of its delivery, signed %q", i+1, d.attempted, d.header.Get("X-Nixfleet-Signature"))
		}
		made := w.clk.Made()
		replies <- step.answer
		<-made
		if w.clk.Pending() != 2 {
			t.Fatalf("after failure %d: %d timers and tickers, want the poll ticker and a backoff timer", i+1, w.clk.Pending())
		}
		w.clk.Advance(step.wait - time.Millisecond)
		if w.clk.Pending() != 2 {
			t.Fatalf("after failure %d the backoff fired before %s", i+1, step.wait)
		}
		w.clk.Advance(time.Millisecond)
		if w.clk.Pending() != 1 {
			t.Fatalf("after failure %d the backoff did not fire at %s", i+1, step.wait)
		}
	}
	d := <-posts
	replies <- reply{status: 204}
	if d.attempted != 7 || d.msg.Event.Kind != rc.EventRolloutTransition {
		t.Errorf("the last POST: attempt %d, %s", d.attempted, d.raw)
	}
}

// TestShutdownFinishesThePostInFlight: Run does not return while a POST
// is in flight, however its context ended; once the sink answers, the
// cursor is written before it returns.
func TestShutdownFinishesThePostInFlight(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "sqlite")
	sink, posts, replies := heldSink(t)
	if _, err := w.st.StartNotificationCursor(context.Background(), "ops", 0, at); err != nil {
		t.Fatal(err)
	}
	n, stop := w.start(w.options(notify.Sink{Name: "ops", URL: sink.srv.URL}))
	w.append(ev(rc.EventRolloutTransition, "prod", "Active", "Halted"), ev(rc.EventRolloutTransition, "prod", "Active", "Failed"))
	d := <-posts
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-n.Done():
		t.Fatal("Run returned with a POST in flight")
	default:
	}
	replies <- reply{status: 200}
	<-stopped
	if got := w.cursor("ops"); got != d.msg.Event.ID {
		t.Errorf("the cursor is at %d after shutdown, want %d (the event delivered in flight)", got, d.msg.Event.ID)
	}
	if sink.attempts() != 1 {
		t.Errorf("%d POSTs: the next event was sent after shutdown began", sink.attempts())
	}
}

// TestTakeover: a replica that loses the lease while it waits to retry
// an event never POSTs it again; the next leader starts from the stored
// cursor and sends it, and nothing is sent twice.
func TestTakeover(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, backend)
			sink, posts, replies := heldSink(t)
			if _, err := w.st.StartNotificationCursor(context.Background(), "ops", 0, at); err != nil {
				t.Fatal(err)
			}
			// Replica a leads in epoch 1, b in epoch 2.
			var leaderA, leaderB atomic.Bool
			leaderA.Store(true)
			oa := w.options(notify.Sink{Name: "ops", URL: sink.srv.URL})
			oa.UserAgent, oa.Leader = "replica-a", func() (int64, bool) { return 1, leaderA.Load() }
			ob := oa
			ob.UserAgent, ob.Leader = "replica-b", func() (int64, bool) { return 2, leaderB.Load() }
			w.start(oa)
			w.start(ob)
			w.append(ev(rc.EventRolloutOpened, "prod", "", "Opening"), ev(rc.EventRolloutTransition, "prod", "Active", "Halted"))

			d := <-posts
			if d.header.Get("User-Agent") != "replica-a" {
				t.Fatalf("the first POST came from %s", d.header.Get("User-Agent"))
			}
			replies <- reply{status: 200}
			d = <-posts
			made := w.clk.Made()
			replies <- reply{status: 500}
			<-made // a waits to retry
			leaderA.Store(false)
			leaderB.Store(true)
			w.clk.Advance(time.Hour) // a's retry is due; b polls
			d2 := <-posts
			if d2.header.Get("User-Agent") != "replica-b" || d2.msg.Event.ID != d.msg.Event.ID || d2.attempted != 2 {
				t.Fatalf("after the takeover: %s sent event %d (attempt %d), want b retrying %d",
					d2.header.Get("User-Agent"), d2.msg.Event.ID, d2.attempted, d.msg.Event.ID)
			}
			replies <- reply{status: 200}
			w.append(ev(rc.EventRolloutTransition, "prod", "Halted", "Reverting"))
			d3 := <-posts
			replies <- reply{status: 200}
			if d3.header.Get("User-Agent") != "replica-b" || d3.msg.Event.ID != d.msg.Event.ID+1 || d3.attempted != 1 {
				t.Fatalf("then: %s sent event %d (attempt %d)", d3.header.Get("User-Agent"), d3.msg.Event.ID, d3.attempted)
			}
		})
	}
}

// TestNewSinkStartsAtTheEnd: a sink without a cursor is not sent the
// journal's history, only what comes after it started.
func TestNewSinkStartsAtTheEnd(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "sqlite")
	w.append(ev(rc.EventRolloutTransition, "prod", "Active", "Halted"))
	sink := newTestSink(t, "", nil)
	w.start(w.options(notify.Sink{Name: "new", URL: sink.srv.URL}))
	<-w.looked // the loop took the signal and steps (makes the cursor)
	w.wake()
	<-w.looked // it took the next: the step is done
	w.append(ev(rc.EventRolloutTransition, "prod", "Active", "Converged"))
	got := sink.receive(1)
	if got[0].msg.Category != notify.CategoryConverged {
		t.Errorf("a new sink was sent %s first", got[0].raw)
	}
}

// TestPrunedBeforeSent: events retention deleted before a sink (down for
// long) got them are counted and logged; the sink goes on with the rest.
func TestPrunedBeforeSent(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "sqlite")
	if _, err := w.st.StartNotificationCursor(context.Background(), "ops", 0, at); err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{"Halted", "Failed", "Converged"} {
		w.append(ev(rc.EventRolloutTransition, "prod", "Active", to))
		w.clk.Advance(time.Hour)
	}
	if _, _, err := w.st.Prune(context.Background(), at.Add(90*time.Minute)); err != nil {
		t.Fatal(err)
	}
	sink := newTestSink(t, "", nil)
	o := w.options(notify.Sink{Name: "ops", URL: sink.srv.URL})
	o.Metrics = metrics()
	w.start(o)
	got := sink.receive(1)
	if got[0].msg.Event.To != "Converged" {
		t.Errorf("sent %s", got[0].raw)
	}
	if n := value(t, o.Metrics, "pruned", "ops"); n != 2 {
		t.Errorf("pruned before sent: %v, want 2", n)
	}
}
