package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// testFleet is two channels, edge before stable: edge has a canary wave
// (soak 5 minutes) and a second wave with a host edge and a host that is
// offline when its wave starts; stable has one wave with a host whose
// activation fails. Web hosts share a budget of one in flight.
func testFleet(t testing.TB) *fleetkit.Builder {
	return fleetkit.New(t).Channel("edge", 5, 0).Channel("stable", 0).ChannelEdge("edge", "stable").
		Host("e1", "edge", 0, "web").Host("e2", "edge", 0, "db").
		Host("e3", "edge", 1, "web").Host("e4", "edge", 1, "db").Host("e5", "edge", 1, "web").
		Edge("e3", "e5").
		Host("s1", "stable", 0, "web").Host("s2", "stable", 0, "db").Host("s3", "stable", 0, "db").
		Budget(proto.Selector{Tags: []string{"web"}}, 1, 0)
}

var (
	edgeHosts   = []string{"e1", "e2", "e3", "e4", "e5"}
	stableHosts = []string{"s1", "s2", "s3"}
)

// testTickMatchesApply drives two releases through real ticks: waves,
// soaks, a budget, a host edge, a channel edge, an offline host that
// catches up, a failure that halts a rollout, operator intents (pause,
// resume, an unknown rollout), and a second release that opens a new
// rollout while the old one leaves the live set. After every tick the
// store must hold reconciler.Apply's state and decide as the whole state.
func testTickMatchesApply(t *testing.T, s store.Store) {
	m := newSim(t, s)
	fb := testFleet(t)
	m.checkIn(true, "e1", "e2", "e3", "e5", "s1", "s2", "s3")
	m.checkIn(false, "e4")
	m.failing["s3"] = true
	m.release(fb.Build(), fleetkit.Commit(1))
	edge1, stable1 := proto.RolloutID("edge", fleetkit.Commit(1)), proto.RolloutID("stable", fleetkit.Commit(1))

	var pause, resume, unknown, resumeStable string
	ticks, events := 0, 0
	settle := func(until func() bool) {
		t.Helper()
		for tick := 0; tick < 60; tick++ {
			out := m.tick()
			ticks, events = ticks+1, events+len(out.Events)
			switch tick {
			case 0:
				pause = m.intent(edge1, rc.IntentPause)
				unknown = m.intent("nope@0", rc.IntentCancel)
			case 1:
				resume = m.intent(edge1, rc.IntentResume)
			case 6:
				m.checkIn(true, "e4") // back online: catches up
			}
			if resumeStable == "" && m.state(stable1) == rc.RolloutHalted {
				resumeStable = m.intent(stable1, rc.IntentResume)
			}
			if until() && len(out.Events) == 0 {
				return
			}
			m.advance(time.Minute)
		}
		t.Fatal("the rollouts do not settle in 60 ticks")
	}
	settle(func() bool {
		return m.state(edge1) == rc.RolloutConverged && m.state(stable1) == rc.RolloutConverged
	})

	e := m.rollout(edge1)
	for _, h := range edgeHosts {
		if st := hostOf(e, h).State; st != rc.HostConverged {
			t.Errorf("%s in %s is %s, want Converged", h, edge1, st)
		}
	}
	evs, err := s.Events(m.ctx, proto.EventQuery{Host: "e4"})
	must(t, err)
	var e4 []string
	for _, ev := range evs {
		e4 = append(e4, ev.Reason.Code)
	}
	if !slices.Contains(e4, codes.Offline) || !slices.Contains(e4, codes.CatchUp) {
		t.Errorf("e4's events %v: want it skipped while offline and caught up", e4)
	}
	st := m.rollout(stable1)
	if got := hostOf(st, "s3").State; got != rc.HostFailed {
		t.Errorf("s3 is %s, want Failed", got)
	}
	for id, accepted := range map[string]bool{pause: true, resume: true, unknown: false, resumeStable: true} {
		rec, err := s.Intent(m.ctx, id)
		must(t, err)
		if rec.Result == nil || rec.Result.Accepted != accepted {
			t.Errorf("intent %s (%s %s): result %+v, want accepted=%v", id, rec.Kind, rec.RolloutID, rec.Result, accepted)
		}
	}

	// A second release of edge opens a new rollout; the converged one
	// stops being the channel's latest and leaves the live set.
	m.release(fb.Bump("v2").Build(), fleetkit.Commit(2), "edge")
	edge2 := proto.RolloutID("edge", fleetkit.Commit(2))
	settle(func() bool { return m.state(edge2) == rc.RolloutConverged })
	ids := map[string]bool{}
	for _, r := range m.peek().Rollouts {
		ids[r.ID] = true
	}
	if ids[edge1] || !ids[edge2] || !ids[stable1] {
		t.Errorf("live rollouts %v: want %s and %s, not %s", ids, edge2, stable1, edge1)
	}
	t.Logf("%d ticks, %d events, each checked against reconciler.Apply", ticks, events)
}

// testTickDecideError: an error from decide is returned and nothing is
// written.
func testTickDecideError(t *testing.T, s store.Store) {
	m := newSim(t, s)
	m.checkIn(true, edgeHosts...)
	m.release(testFleet(t).Build(), fleetkit.Commit(1), "edge")
	m.tick()
	id := m.intent(proto.RolloutID("edge", fleetkit.Commit(1)), rc.IntentPause)
	m.now = m.now.Add(time.Minute)
	before := m.snapshot(id)
	boom := errors.New("boom")
	out, err := s.Tick(m.ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: store.At(m.now), Tunables: m.tun}, func(in rc.Input) (rc.Output, error) {
		return rc.Reconcile(in), boom
	})
	wantErr(t, err, boom, "Tick with a failing decide")
	diff(t, "the tick's output after an error", out, rc.Output{})
	diff(t, "the store after a failed decide", m.snapshot(id), before)
}

// testTickApplyError: a failure while applying (an output that breaks a
// constraint after other writes succeeded) rolls the whole tick back.
func testTickApplyError(t *testing.T, s store.Store) {
	m := newSim(t, s)
	m.checkIn(true, edgeHosts...)
	rs := m.release(testFleet(t).Build(), fleetkit.Commit(1), "edge")
	m.tick()
	edge1 := proto.RolloutID("edge", fleetkit.Commit(1))
	id := m.intent(edge1, rc.IntentPause)
	m.now = m.now.Add(time.Minute)
	before := m.snapshot(id)

	bad := func(mutate func(in rc.Input, out *rc.Output)) {
		t.Helper()
		_, err := s.Tick(m.ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: store.At(m.now), Tunables: m.tun}, func(in rc.Input) (rc.Output, error) {
			out := rc.Reconcile(in)
			r := in.Rollouts[0]
			r.Hosts = nil
			r.FailuresForgiven = 7
			out.Rollouts = append(out.Rollouts,
				rc.RolloutUpdate{From: r.State, Rollout: r},
				rc.RolloutUpdate{New: true, Rollout: crafted("edge", fleetkit.Commit(9), rc.RolloutActive, m.now, m.now, rs[0].ManifestHash,
					craftedHost("o1", rc.HostPending, m.now))})
			h := in.Rollouts[0].Hosts[0]
			h.Blocked = rc.Reason{Gate: "test", Code: "test"}
			out.Hosts = append(out.Hosts, rc.HostUpdate{RolloutID: r.ID, From: h.State, Host: h})
			out.Channels = append(out.Channels, rc.ChannelUpdate{Name: "edge", LastRolledRef: "elsewhere"})
			out.Deferrals = append(out.Deferrals, rc.Deferral{Channel: "edge", Ref: "x", BlockedBy: "y"})
			out.IntentResults = append(out.IntentResults, rc.IntentResult{IntentID: id, Accepted: true})
			out.Events = append(out.Events, rc.Event{Kind: rc.EventHostWaiting, RolloutID: r.ID, Wave: -1})
			mutate(in, &out)
			return out, nil
		})
		if err == nil {
			t.Fatal("Tick applied an output that breaks the schema")
		}
		diff(t, "the store after a failed apply", m.snapshot(id), before)
	}
	// A host state the schema refuses, last of many writes.
	bad(func(in rc.Input, out *rc.Output) {
		h := in.Rollouts[0].Hosts[1]
		h.State = "Bogus"
		out.Hosts = append(out.Hosts, rc.HostUpdate{RolloutID: in.Rollouts[0].ID, From: rc.HostPending, Host: h})
	})
	// A new rollout whose manifest no release of its channel has.
	bad(func(in rc.Input, out *rc.Output) {
		out.Rollouts[len(out.Rollouts)-1].Rollout.ManifestHash = "0000"
	})
	// A rollout opened twice.
	bad(func(in rc.Input, out *rc.Output) {
		r := in.Rollouts[0]
		out.Rollouts = append(out.Rollouts, rc.RolloutUpdate{New: true, Rollout: r})
	})
}

// testTickFencing: a stale, foreign, expired or missing lease cannot
// tick; decide is not called and nothing is written.
func testTickFencing(t *testing.T, s store.Store) {
	ctx := t.Context()
	never := func(rc.Input) (rc.Output, error) {
		t.Error("decide called without the tick lease")
		return rc.Output{}, nil
	}
	_, err := s.Tick(ctx, store.TickParams{Lease: store.Lease{Name: store.TickLease, Holder: "nobody", Epoch: 1, Expires: t0.Add(time.Hour)},
		Clock: store.At(t0)}, never)
	wantErr(t, err, store.ErrNotLeader, "Tick before any lease was taken")

	m := newSim(t, s)
	m.checkIn(true, edgeHosts...)
	m.release(testFleet(t).Build(), fleetkit.Commit(1), "edge")
	short, err := s.AcquireLease(ctx, "other", "replica-a", time.Minute, t0)
	must(t, err)
	before := m.snapshot()
	stale := m.lease
	stale.Epoch--
	foreign := m.lease
	foreign.Holder = "replica-b"
	for _, tc := range []struct {
		name  string
		lease store.Lease
		now   time.Time
	}{
		{"stale epoch", stale, t0},
		{"other holder", foreign, t0},
		{"not the tick lease", short, t0},
		{"expired", m.lease, m.lease.Expires},
		{"long expired", m.lease, m.lease.Expires.Add(time.Hour)},
	} {
		_, err := s.Tick(ctx, store.TickParams{Lease: tc.lease, Clock: store.At(tc.now), Tunables: rc.Tunables{}}, never)
		wantErr(t, err, store.ErrNotLeader, tc.name)
	}
	diff(t, "the store after fenced ticks", m.snapshot(), before)

	// Another replica takes the lease over once it expired: the old
	// holder's lease no longer ticks, even at a time it had not expired.
	takeover, err := s.AcquireLease(ctx, store.TickLease, "replica-b", time.Hour, m.lease.Expires)
	must(t, err)
	if takeover.Epoch <= m.lease.Epoch {
		t.Fatalf("takeover epoch %d, want > %d", takeover.Epoch, m.lease.Epoch)
	}
	_, err = s.Tick(ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: store.At(m.lease.Expires.Add(-time.Minute)), Tunables: rc.Tunables{}}, never)
	wantErr(t, err, store.ErrNotLeader, "Tick with the lease taken over")
	m.lease, m.now = takeover, m.lease.Expires
	m.checkIn(true, edgeHosts...)
	if out := m.tick(); len(out.Rollouts) == 0 {
		t.Error("the new leader's tick opened no rollout")
	}
}

// testTicksSerialize: ticks with the same valid lease from several
// goroutines run one after the other: each sees the previous one's
// writes (no lost update), and the events are in tick order.
func testTicksSerialize(t *testing.T, s store.Store) {
	m := newSim(t, s)
	m.checkIn(true, edgeHosts...)
	m.release(testFleet(t).Build(), fleetkit.Commit(1), "edge")
	m.tick()
	id := proto.RolloutID("edge", fleetkit.Commit(1))

	// increment bumps the rollout's FailuresForgiven, a counter only the
	// ticks write, and journals the value it saw.
	increment := func(in rc.Input) (rc.Output, error) {
		for _, r := range in.Rollouts {
			if r.ID != id {
				continue
			}
			seen := r.FailuresForgiven
			r.FailuresForgiven++
			r.Hosts = nil
			return rc.Output{
				Rollouts: []rc.RolloutUpdate{{From: r.State, Rollout: r}},
				Events:   []rc.Event{{Kind: rc.EventRolloutTransition, RolloutID: id, Wave: -1, Reason: rc.Reason{Code: "count", Message: strconv.Itoa(seen)}}},
			}, nil
		}
		return rc.Output{}, fmt.Errorf("rollout %s not loaded", id)
	}
	tick := func() error {
		_, err := s.Tick(m.ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: store.At(m.now), Tunables: m.tun}, increment)
		return err
	}

	// Two ticks: the first decides while the second is already on its
	// way to the tick lock.
	inFirst, letFirstGo, secondStarting := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, err := s.Tick(m.ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: store.At(m.now), Tunables: m.tun}, func(in rc.Input) (rc.Output, error) {
			close(inFirst)
			<-letFirstGo
			return increment(in)
		})
		errs <- err
	}()
	<-inFirst
	go func() {
		defer wg.Done()
		close(secondStarting)
		errs <- tick()
	}()
	<-secondStarting
	close(letFirstGo)
	wg.Wait()

	// Then many at once.
	const workers, each = 6, 4
	wg.Add(workers)
	for range workers {
		go func() {
			defer wg.Done()
			for range each {
				errs <- tick()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	total := 2 + workers*each
	if got := m.rollout(id).FailuresForgiven; got != total {
		t.Fatalf("after %d serialized increments the counter is %d: an update was lost", total, got)
	}
	evs, err := s.Events(m.ctx, proto.EventQuery{RolloutID: id})
	must(t, err)
	var seen []int
	for _, e := range evs {
		if e.Reason.Code == "count" {
			n, _ := strconv.Atoi(e.Reason.Message)
			seen = append(seen, n)
		}
	}
	for i, n := range seen {
		if n != i {
			t.Fatalf("events in id order saw counters %v, want 0, 1, 2, …", seen)
		}
	}
	if len(seen) != total {
		t.Fatalf("%d counting events, want %d", len(seen), total)
	}
}

// testTickManyHosts applies a tick that opens a 2,500-host rollout and
// dispatches every host, then one that changes every host again: enough
// rows for every batched write to take several statements (SQLite's
// chunks of 100 rows, the chunks of 500 names of the reads by key), and
// PostgreSQL's COPY. BenchmarkTick measures 10,000 hosts and more.
func testTickManyHosts(t *testing.T, s store.Store) {
	const n = 2500
	fb := fleetkit.New(t).Channel("big", 0)
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("host-%05d", i)
		fb.Host(names[i], "big", 0)
	}
	m := newSim(t, s)
	// Each host checked in once, with the closure it runs: one batch.
	checkins := make([]store.StatusWrite, n)
	for i, h := range names {
		st := store.HostStatus{Current: fleetkit.Closure(h, "v0"), Booted: fleetkit.Closure(h, "v0")}
		checkins[i] = store.StatusWrite{Hostname: h, Status: &st, Seen: m.now}
	}
	_, err := s.RecordStatuses(m.ctx, checkins)
	must(t, err)
	m.release(fb.Build(), fleetkit.Commit(1))
	// The ticks are checked by what they wrote (the small scenarios
	// compare whole states with reconciler.Apply).
	tick := func(decide func(rc.Input) (rc.Output, error)) rc.Output {
		t.Helper()
		out, err := s.Tick(m.ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: store.At(m.now), Tunables: m.tun}, decide)
		must(t, err)
		return out
	}
	out := tick(func(in rc.Input) (rc.Output, error) { return rc.Reconcile(in), nil })
	id := proto.RolloutID("big", fleetkit.Commit(1))
	if len(out.Actions) != n {
		t.Fatalf("the first tick dispatched %d hosts, want %d", len(out.Actions), n)
	}
	r := m.rollout(id)
	if len(r.Hosts) != n {
		t.Fatalf("the rollout has %d hosts, want %d", len(r.Hosts), n)
	}
	for _, h := range r.Hosts {
		if h.State != rc.HostActivating {
			t.Fatalf("%s is %s, want Activating", h.Hostname, h.State)
		}
	}

	m.now = m.now.Add(time.Second)
	block := rc.Reason{Gate: "test", Code: "test", Message: "held by the suite"}
	out = tick(func(in rc.Input) (rc.Output, error) {
		var o rc.Output
		for _, h := range in.Rollouts[0].Hosts {
			from := h.State
			h.Blocked = block
			o.Hosts = append(o.Hosts, rc.HostUpdate{RolloutID: id, From: from, Host: h})
			o.Events = append(o.Events, rc.Event{Kind: rc.EventHostWaiting, RolloutID: id, Channel: "big", Host: h.Hostname, Reason: block})
		}
		return o, nil
	})
	if len(out.Hosts) != n {
		t.Fatalf("%d host updates, want %d", len(out.Hosts), n)
	}
	for _, h := range m.rollout(id).Hosts {
		if h.Blocked != block {
			t.Fatalf("%s: blocked %+v, want %+v", h.Hostname, h.Blocked, block)
		}
	}
	// Every event was written, in order: n dispatches, then n waits.
	kinds := map[string]int{}
	var last int64
	for {
		page, err := s.Events(m.ctx, proto.EventQuery{RolloutID: id, AfterID: last, Limit: store.MaxEventLimit})
		must(t, err)
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			if e.ID <= last {
				t.Fatalf("event ids out of order: %d after %d", e.ID, last)
			}
			if e.Kind == rc.EventHostTransition && kinds[rc.EventHostWaiting] > 0 {
				t.Fatalf("event %d: a dispatch after the second tick's events", e.ID)
			}
			last = e.ID
			kinds[e.Kind]++
		}
	}
	if kinds[rc.EventHostTransition] != n || kinds[rc.EventHostWaiting] != n {
		t.Fatalf("events by kind %v: want %d host transitions and %d waits", kinds, n, n)
	}
}
