package storetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// tickAt runs a tick at now with params' gap, deciding nothing, and returns
// its Input and Output.
func (m *sim) tickAt(now time.Time, gap time.Duration, decide func(rc.Input) (rc.Output, error)) (rc.Input, rc.Output) {
	m.t.Helper()
	var in rc.Input
	out, err := m.s.Tick(m.ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: store.At(now), Tunables: m.tun, MaxGap: gap},
		func(i rc.Input) (rc.Output, error) {
			in = i
			return decide(i)
		})
	must(m.t, err)
	return in, out
}

func nothing(rc.Input) (rc.Output, error) { return rc.Output{}, nil }

// watchStarts reports whether a tick's output begins with a watch_started
// event.
func watchStarts(out rc.Output) bool {
	return len(out.Events) > 0 && out.Events[0].Kind == rc.EventWatchStarted && out.Events[0].Reason.Code == codes.WatchStarted
}

// testWatch: the store keeps the control plane's watch over its hosts
// (rfcs/0006 §Tick loop 3): the first tick starts it, ticks at most MaxGap
// apart keep it, a longer gap, a clock that went back or a store that lost
// writes restarts it (with a watch_started event each time), a tick that
// writes nothing does not
// touch it, and Sight reports it with the channels in partial visibility,
// which a tick's Output replaces.
func testWatch(t *testing.T, s store.Store) {
	m := newSim(t, s)
	const gap = time.Minute
	sight := func() store.Sight {
		t.Helper()
		sg, err := s.Sight(m.ctx)
		must(t, err)
		return sg
	}
	if sg := sight(); !sg.WatchingSince.IsZero() || !sg.LastTick.IsZero() || len(sg.Visibility) != 0 {
		t.Fatalf("the sight of an empty store: %+v", sg)
	}

	in, out := m.tickAt(t0, gap, nothing)
	if !in.WatchingSince.Equal(t0) || !watchStarts(out) {
		t.Fatalf("first tick: watching since %s, events %+v; want since %s and watch_started", in.WatchingSince, out.Events, t0)
	}
	in, out = m.tickAt(t0.Add(gap), gap, nothing)
	if !in.WatchingSince.Equal(t0) || len(out.Events) != 0 {
		t.Fatalf("a tick MaxGap later: watching since %s, events %+v; want the watch kept", in.WatchingSince, out.Events)
	}
	// A tick whose decide fails writes nothing, the watch neither.
	_, err := s.Tick(m.ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: store.At(t0.Add(10 * gap)), MaxGap: gap},
		func(rc.Input) (rc.Output, error) { return rc.Output{}, errPeek })
	wantErr(t, err, errPeek, "a failing tick")
	if sg := sight(); !sg.LastTick.Equal(t0.Add(gap)) || !sg.WatchingSince.Equal(t0) {
		t.Fatalf("after a failed tick: %+v; want the last tick %s, watching since %s", sg, t0.Add(gap), t0)
	}

	later := t0.Add(2*gap + time.Microsecond)
	in, out = m.tickAt(later, gap, nothing)
	if !in.WatchingSince.Equal(later) || !watchStarts(out) || !strings.Contains(out.Events[0].Reason.Message, t0.Add(gap).Format(time.RFC3339)) {
		t.Fatalf("a tick more than MaxGap later: watching since %s, events %+v; want a new watch naming the last tick", in.WatchingSince, out.Events)
	}
	evs, err := s.Events(m.ctx, proto.EventQuery{})
	must(t, err)
	if len(evs) != 2 || evs[1].Kind != rc.EventWatchStarted || !evs[1].At.Equal(later) {
		t.Fatalf("journal %+v: want two watch_started events, the second at %s", evs, later)
	}

	back := later.Add(-2 * time.Minute)
	if in, out = m.tickAt(back, gap, nothing); !in.WatchingSince.Equal(back) || !watchStarts(out) {
		t.Fatalf("a clock gone back two minutes: watching since %s; want a new watch", in.WatchingSince)
	}
	if in, _ = m.tickAt(back.Add(gap), 0, nothing); !in.WatchingSince.Equal(back) {
		t.Fatalf("MaxGap 0 (half the offline threshold): watching since %s after a minute; want %s", in.WatchingSince, back)
	}

	// Lost writes: a store whose counters are below those the replica's
	// last committed tick read lost writes it had acknowledged (its
	// last-seen times may be too old), and so does one the caller says
	// went back (TickParams.Rewound): a new watch, once.
	lost := back.Add(gap + time.Second)
	m.kept.High.Seen++
	if in, out = m.tickAt(lost, gap, nothing); !in.WatchingSince.Equal(lost) || !watchStarts(out) ||
		!strings.Contains(out.Events[0].Reason.Message, "lost writes") {
		t.Fatalf("counters below the last tick's: watching since %s, events %+v; want a new watch saying the store lost writes", in.WatchingSince, out.Events)
	}
	if in, out = m.tickAt(lost.Add(time.Second), gap, nothing); !in.WatchingSince.Equal(lost) || len(out.Events) != 0 {
		t.Fatalf("the tick after: watching since %s, events %+v; want the new watch kept", in.WatchingSince, out.Events)
	}
	rewound := lost.Add(2 * time.Second)
	_, err = s.Tick(m.ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: store.At(rewound), MaxGap: gap, Rewound: true},
		func(i rc.Input) (rc.Output, error) { in = i; return rc.Output{}, nil })
	must(t, err)
	if !in.WatchingSince.Equal(rewound) {
		t.Fatalf("TickParams.Rewound: watching since %s, want %s", in.WatchingSince, rewound)
	}
	back = rewound

	// Visibility: the Output's set replaces the stored one.
	vis := []rc.Visibility{{Channel: "edge", Since: back, Silent: 3, Total: 5},
		{Channel: "stable", Since: back.Add(-gap), Ended: back, Silent: 1, Total: 2}}
	now := back.Add(gap)
	in, _ = m.tickAt(now, gap, func(rc.Input) (rc.Output, error) { return rc.Output{Visibility: vis}, nil })
	if len(in.Visibility) != 0 {
		t.Fatalf("visibility before any was written: %+v", in.Visibility)
	}
	in, _ = m.tickAt(now, gap, func(i rc.Input) (rc.Output, error) { return rc.Output{Visibility: i.Visibility[1:]}, nil })
	diff(t, "the visibility a tick loads", in.Visibility, vis)
	sg := sight()
	diff(t, "the sight after the visibility changed", sg, store.Sight{WatchingSince: back, LastTick: now, Visibility: vis[1:]})
}

// testTickClock: a tick never reads the future (rfcs/0006 §Tick loop 3).
// The tick's clock is read after the tick lock; an agent confirms right
// after that read, having checked in on its old closure just before the
// confirm. On PostgreSQL the confirm is committed before the tick loads
// its input, which then holds an activation newer than now; on SQLite the
// single writer keeps it out of the tick. Either way the tick must not
// apply it (a confirm applied with a since earlier than itself would
// judge the old-closure check-in as the first after the confirm and fail
// a healthy host), and the next tick must.
func testTickClock(t *testing.T, s store.Store) {
	m := newSim(t, s)
	m.checkIn(true, edgeHosts...)
	m.release(testFleet(t).Build(), fleetkit.Commit(1), "edge")
	reconcile := func(i rc.Input) (rc.Output, error) { return rc.Reconcile(i), nil }
	_, out := m.tickWith(reconcile)
	// e2 switches and confirms at once; e1 takes longer.
	m.agents(rc.Output{Actions: slices.DeleteFunc(out.Actions, func(it rc.HostAction) bool { return it.Host == "e1" })})
	id := proto.RolloutID("edge", fleetkit.Commit(1))
	if st := hostOf(m.rollout(id), "e1").State; st != rc.HostActivating {
		t.Fatalf("e1 is %s after the first tick, want Activating", st)
	}
	m.advance(time.Minute)
	now := m.now
	target := hostOf(m.rollout(id), "e1").Target
	race := func() {
		// Just after the clock was read: a check-in on the old closure,
		// then the confirm of the switch.
		touch(t, s, m.ctx, map[string]time.Time{"e1": now.Add(500 * time.Microsecond)})
		must(t, s.RecordActivation(m.ctx, "e1", rc.Activation{RolloutID: id, Closure: target, Outcome: rc.OutcomeConfirmed,
			At: now.Add(time.Millisecond)}))
	}
	raced := make(chan struct{})
	clock := func() time.Time {
		if s.Backend() == "sqlite" {
			// The tick holds the only writer: the agent's writes land
			// after it commits.
			go func() { defer close(raced); race() }()
		} else {
			race()
			close(raced)
		}
		return now
	}
	// Not m.tickClock: on SQLite the agent's writes land between this tick
	// and the state check, which compares observations too; the model is
	// kept by hand.
	var in rc.Input
	out, err := s.Tick(m.ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: clock, Tunables: m.tun}, func(i rc.Input) (rc.Output, error) {
		in = i
		return rc.Reconcile(i), nil
	})
	must(t, err)
	<-raced
	full := in
	full.Rollouts = m.model
	m.model = rc.Apply(full, out).Rollouts
	act := in.Hosts["e1"].Activation
	switch {
	case s.Backend() == "sqlite" && act != nil:
		t.Fatalf("SQLite: the tick saw the confirm written while it held the writer: %+v", act)
	case s.Backend() != "sqlite" && (act == nil || !act.At.After(in.Now)):
		t.Fatalf("%s: the tick did not load the confirm committed after its clock read (activation %+v, now %s); the race was not exercised",
			s.Backend(), act, in.Now)
	}
	for _, e := range out.Events {
		if e.Host == "e1" && e.Kind == rc.EventHostTransition {
			t.Fatalf("the tick at %s moved e1 %s→%s (%s) on a confirm stamped after it", now, e.From, e.To, e.Reason.Message)
		}
	}

	// The agent now runs the target; the next tick applies the confirm,
	// and the soak judges check-ins from then on only.
	st := m.status["e1"]
	st.Current, st.Booted = target, target
	m.status["e1"] = st
	_, err = s.RecordStatus(m.ctx, "e1", st)
	must(t, err)
	m.advance(time.Minute)
	m.tick()
	if h := hostOf(m.rollout(id), "e1"); h.State != rc.HostSoaking || h.Since.Before(now.Add(time.Millisecond)) {
		t.Fatalf("e1 after the next tick: %s since %s; want Soaking since after the confirm", h.State, h.Since)
	}
	for range 6 {
		m.advance(time.Minute)
		m.tick()
	}
	if h := hostOf(m.rollout(id), "e1"); h.State != rc.HostConverged {
		t.Fatalf("e1 is %s (%s), want Converged after its soak", h.State, h.Reason.Message)
	}
}
