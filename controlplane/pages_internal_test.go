package controlplane

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// followStore is the journal and one rollout's header, counting the reads
// a follower makes. Its embedded Store is nil: any other call panics.
type followStore struct {
	store.Store
	mu      sync.Mutex
	events  []proto.Event
	state   reconciler.RolloutState
	reads   map[string]int
	pending []proto.Event // written but not yet in the journal's watermark
}

func (f *followStore) count(what string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads[what]++
}

func (f *followStore) readsOf(what string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads[what]
}

func (f *followStore) add(ev ...proto.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, ev...)
}

func (f *followStore) setState(s reconciler.RolloutState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = s
}

func (f *followStore) RolloutHeader(_ context.Context, id string) (reconciler.Rollout, error) {
	f.count("header")
	f.mu.Lock()
	defer f.mu.Unlock()
	return reconciler.Rollout{ID: id, Channel: "stable", State: f.state}, nil
}

func (f *followStore) LatestRollouts(context.Context) (map[string]string, error) {
	f.count("latest")
	return map[string]string{"stable": "stable@1"}, nil
}

func (f *followStore) Rollout(context.Context, string) (reconciler.Rollout, error) {
	f.count("rollout") // a whole rollout: a follower must not read one
	return reconciler.Rollout{}, fmt.Errorf("not here")
}

func (f *followStore) Events(_ context.Context, q proto.EventQuery) ([]proto.Event, error) {
	f.count("events")
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []proto.Event
	for _, ev := range f.events {
		if ev.ID > q.AfterID && (q.Limit <= 0 || len(out) < q.Limit) {
			out = append(out, ev)
		}
	}
	return out, nil
}

func (f *followStore) Watermark(context.Context) (store.Watermark, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var w store.Watermark
	if len(f.events) > 0 {
		w.Events = f.events[len(f.events)-1].ID
	}
	return w, nil
}

func (f *followStore) Assignments(context.Context) (map[string]reconciler.Assignment, error) {
	return map[string]reconciler.Assignment{}, nil
}

// streamWriter is a ResponseWriter a test reads while the handler writes.
type streamWriter struct {
	mu   sync.Mutex
	h    http.Header
	body strings.Builder
}

func (w *streamWriter) Header() http.Header { return w.h }
func (w *streamWriter) WriteHeader(int)     {}
func (w *streamWriter) Flush()              {}
func (w *streamWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.Write(b)
}

func (w *streamWriter) lines() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Count(w.body.String(), "\n")
}

// TestFollowReadsOnlyNewEvents: a follower of a rollout's events reads the
// journal only when the hub has seen events past its last read, judges
// whether the stream is over from the rollout's header (never the whole
// rollout, with its hosts), and reads the journal once more before it
// ends, even when the hub has not seen the events of the tick that ended
// the rollout.
func TestFollowReadsOnlyNewEvents(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	st := &followStore{reads: map[string]int{}, state: reconciler.RolloutActive}
	ev := func(id int64) proto.Event {
		return proto.Event{ID: id, Kind: "host_transition", RolloutID: "stable@1", Channel: "stable", Wave: 0}
	}
	st.add(ev(1), ev(2))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := &Server{st: st, cfg: Config{Clock: clk}, log: log, stopping: make(chan struct{})}
	s.hub = newHub(st, log, newMetrics(), clk, newBoard())

	req := httptest.NewRequest(http.MethodGet, "/v1/rollouts/stable@1/events?follow=1", nil)
	req.SetPathValue("id", "stable@1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req = req.WithContext(ctx)
	w := &streamWriter{h: http.Header{}}
	made := clk.Made()
	done := make(chan *codes.Error, 1)
	go func() { done <- s.rolloutEvents(w, req, client{dev: true}) }()
	<-made // asleep after the first read

	want := map[string]int{"header": 1, "events": 1} // the header to know the rollout, then the journal
	check := func(when string, lines int) {
		t.Helper()
		got := map[string]int{}
		for _, k := range []string{"events", "header", "latest", "rollout"} {
			if n := st.readsOf(k); n > 0 {
				got[k] = n
			}
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("%s: reads (-want +got):\n%s", when, d)
		}
		if n := w.lines(); n != lines {
			t.Fatalf("%s: %d events sent, want %d", when, n, lines)
		}
	}
	check("after the first read", 2)

	// Quiet seconds: the header each, the journal never.
	for i := range 5 {
		made = clk.Made()
		clk.Advance(time.Second)
		<-made
		want["header"]++
		check(fmt.Sprintf("quiet second %d", i+1), 2)
	}

	// An event the hub sees: one read.
	made = clk.Made()
	st.add(ev(3))
	if err := s.hub.checkJournal(ctx); err != nil {
		t.Fatal(err)
	}
	<-made
	want["header"]++ // woken in a quiet spell: is it over?
	want["events"]++
	check("after a new event", 3)

	// The rollout ends in a tick whose events the hub has not seen yet:
	// the judgement is followed by a read all the same.
	st.add(ev(4))
	st.setState(reconciler.RolloutReverted)
	made = clk.Made()
	clk.Advance(time.Second)
	<-made
	want["header"]++
	want["latest"]++ // terminal: is it still its channel's latest?
	want["events"]++
	check("after the last tick", 4)
	// Then a quiet second: over, one last read, and the end.
	clk.Advance(time.Second)
	if e := <-done; e != nil {
		t.Fatalf("the stream ended with %v", e)
	}
	want["header"]++
	want["latest"]++
	want["events"]++
	check("at the end", 4)
}

// TestRolloutCursor: a cursor reads back as the place it was made of;
// anything else is refused.
func TestRolloutCursor(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 123456000, time.UTC)
	for _, c := range []store.RolloutCursor{{OpenedAt: at, ID: "stable@abc"}, {OpenedAt: time.UnixMicro(-5).UTC(), ID: "a:b@c"}} {
		got, ok := decodeRolloutCursor(encodeRolloutCursor(c))
		if !ok || !got.OpenedAt.Equal(c.OpenedAt) || got.ID != c.ID {
			t.Errorf("cursor %+v read back as %+v, %v", c, got, ok)
		}
	}
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, bad := range []string{"", "!!!", "MTox", b64("1:x:stable@a"), b64("2:5:stable@a"), b64("1:5:"), b64("1:5"), b64("1:5:a\x00b"), b64("1:5:\xff")} {
		if c, ok := decodeRolloutCursor(bad); ok {
			t.Errorf("cursor %q read as %+v", bad, c)
		}
	}
}

// TestTotalsJudgeGroupsAsHosts: a rollout's waiting hosts and soak end,
// computed from its hosts' groups, are what judging every host gives.
func TestTotalsJudgeGroupsAsHosts(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	s := &Server{cfg: Config{Clock: clock.NewFake(now)}}
	gate := func(g string) reconciler.Reason { return reconciler.Reason{Gate: g, Code: g, Message: "held by " + g} }
	var hosts []reconciler.RolloutHost
	for i, b := range []reconciler.Reason{{}, gate(codes.Budget), gate(codes.HostEdge), gate(codes.Approval), gate(codes.Freeze),
		gate(codes.Window), gate(codes.Quarantined), gate(codes.WaveNotActive), {Code: codes.Budget}} {
		for w := range 3 {
			hosts = append(hosts, reconciler.RolloutHost{Hostname: fmt.Sprintf("p%d-%d", i, w), Wave: w, State: reconciler.HostPending, Blocked: b})
		}
	}
	for i := range 4 {
		for w := range 2 {
			hosts = append(hosts, reconciler.RolloutHost{Hostname: fmt.Sprintf("s%d-%d", i, w), Wave: w, State: reconciler.HostSoaking,
				Since: now.Add(-time.Duration(i) * time.Minute), Target: "t", Previous: "p"})
		}
	}
	hosts = append(hosts, reconciler.RolloutHost{Hostname: "c", Wave: 0, State: reconciler.HostConverged},
		reconciler.RolloutHost{Hostname: "f", Wave: 1, State: reconciler.HostFailed})
	for _, state := range reconciler.RolloutStates {
		for _, latest := range []bool{true, false} {
			r := reconciler.Rollout{ID: "stable@1", Channel: "stable", State: state, Wave: 1, Hosts: hosts,
				Waves: []reconciler.WaveSpec{{SoakMinutes: 10}, {SoakMinutes: 20}, {SoakMinutes: 0}}}
			// Host by host, as the view judged them before it had groups.
			want := proto.Rollout{Counts: map[string]int{}, Waiting: map[string]int{}}
			var soak time.Time
			for _, h := range r.Hosts {
				want.Counts[string(h.State)]++
				sit := reconciler.Situate(reconciler.Place{Rollout: r, Latest: latest, Host: h}, now, s.cfg.Tunables)
				if h.State == reconciler.HostPending && sit.Moves && h.Blocked.Gate != "" && sit.Code == h.Blocked.Gate {
					want.Waiting[h.Blocked.Gate]++
				}
				if h.State == reconciler.HostSoaking && h.Wave == r.Wave && sit.Until.After(soak) {
					soak = sit.Until
				}
			}
			var got proto.Rollout
			got.Waves = make([]proto.RolloutWave, len(r.Waves))
			s.totals(&got, r, latest, groupHosts(r.Hosts), now)
			if d := cmp.Diff(want.Counts, got.Counts); d != "" {
				t.Errorf("%s, latest %v: counts (-want +got):\n%s", state, latest, d)
			}
			if d := cmp.Diff(want.Waiting, got.Waiting); d != "" {
				t.Errorf("%s, latest %v: waiting (-want +got):\n%s", state, latest, d)
			}
			var gotSoak time.Time
			if got.SoakUntil != nil {
				gotSoak = *got.SoakUntil
			}
			if state != reconciler.RolloutActive {
				soak = time.Time{}
			}
			if !gotSoak.Equal(soak) {
				t.Errorf("%s, latest %v: soak ends %v, want %v", state, latest, gotSoak, soak)
			}
			if total := got.WaveCounts[0][string(reconciler.HostPending)] + got.WaveCounts[1][string(reconciler.HostPending)] +
				got.WaveCounts[2][string(reconciler.HostPending)]; total != want.Counts[string(reconciler.HostPending)] {
				t.Errorf("%s: Pending by wave adds up to %d, want %d", state, total, want.Counts[string(reconciler.HostPending)])
			}
		}
	}
}
