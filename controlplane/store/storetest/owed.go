package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// testDeferredHostRows: the tick that opens a rollout commits the rollout
// with the hosts it moved, and the rows of its Pending hosts follow in a
// second transaction after Report (rfcs/0006 §Tick loop 6). When that
// transaction fails, nothing is lost: the same lease's next tick writes
// the rows as the open made them, and a leader that takes over writes
// them from the rollout's manifest before it loads; either way a cold
// load equals what the leader keeps.
func testDeferredHostRows(t *testing.T, s store.Store) {
	m := newSim(t, s)
	fb := fleetkit.New(t).Channel("a", 5, 0).Channel("b", 5, 0).
		Host("a0", "a", 0, "web").Host("a1", "a", 1, "web").Host("a2", "a", 1, "db").Host("a3", "a", 1).
		Host("b0", "b", 0).Host("b1", "b", 1, "web").Host("b2", "b", 1).
		Budget(proto.Selector{Tags: []string{"web"}}, 1, 0)
	m.checkIn(true, "a0", "a1", "a2", "a3", "b0", "b1", "b2")

	// open ticks with a release on channel, whose second transaction
	// fails: the tick's context ends when it reports. It returns the
	// rollout the tick opened, and the one the store held when the tick
	// reported.
	open := func(channel string, commit int) (opened, atReport rc.Rollout) {
		t.Helper()
		m.now = m.now.Add(time.Second)
		m.release(fb.Build(), fleetkit.Commit(commit), channel)
		id := proto.RolloutID(channel, fleetkit.Commit(commit))
		ctx, cancel := context.WithCancel(m.ctx)
		defer cancel()
		var in rc.Input
		var reports []store.TickReport
		out, err := s.Tick(ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: store.At(m.now), Tunables: m.tun,
			Report: func(r store.TickReport) {
				if len(reports) == 0 {
					atReport = m.rollout(id)
				}
				reports = append(reports, r)
				cancel()
			}},
			func(i rc.Input) (rc.Output, error) { in = i; return rc.Reconcile(i), nil })
		must(t, err)
		m.checkApplied(in, out)
		for _, u := range out.Rollouts {
			if u.New && u.Rollout.ID == id {
				opened = u.Rollout
			}
		}
		if opened.ID == "" {
			t.Fatalf("the tick did not open %s", id)
		}
		pending, moved := 0, 0
		for _, h := range opened.Hosts {
			if h.State == rc.HostPending {
				pending++
			} else {
				moved++
			}
		}
		if pending == 0 || moved == 0 {
			t.Fatalf("%s opened with %d hosts pending and %d moved; the test wants both", id, pending, moved)
		}
		// The hosts it moved learn their assignment first, in an early
		// report; the pending ones in the second (TickReport.Early).
		if len(reports) != 2 || !reports[0].Early || reports[1].Early {
			t.Fatalf("%s: %d reports, want an early one and the rest", id, len(reports))
		}
		for _, h := range opened.Hosts {
			a, early := reports[0].Assignments[h.Hostname]
			_, rest := reports[1].Assignments[h.Hostname]
			switch {
			case h.State != rc.HostPending && (!early || a == nil || a.RolloutID != id || a.Host.State != h.State):
				t.Errorf("%s: %s, %s, is not in the early report with it: %+v", id, h.Hostname, h.State, a)
			case h.State == rc.HostPending && (early || !rest):
				t.Errorf("%s: %s, pending, is in the early report (%v) or not in the second (%v)", id, h.Hostname, early, rest)
			}
		}
		for _, r := range []rc.Rollout{atReport, m.rollout(id)} {
			if len(r.Hosts) != moved {
				t.Errorf("%s: the store holds %d hosts of %s before its second transaction, want the %d the tick moved", channel, len(r.Hosts), id, moved)
			}
		}
		return opened, atReport
	}

	// The same lease ticks again: the rows as the open made them.
	a, _ := open("a", 1)
	m.tick()
	got := m.rollout(a.ID)
	for _, want := range a.Hosts {
		if h := hostOf(got, want.Hostname); want.State == rc.HostPending && !sameHost(h, want) {
			t.Errorf("%s after the lease's next tick: %+v, want %+v as the open made it", want.Hostname, h, want)
		}
	}

	// Another leader takes over before the rows were written: it writes
	// them from the manifest, then loads; a cold load agrees.
	b, _ := open("b", 2)
	m.now = m.now.Add(time.Second)
	must(t, s.ReleaseLease(m.ctx, m.lease))
	l, err := s.AcquireLease(m.ctx, store.TickLease, "replica-b", time.Hour, m.now)
	must(t, err)
	m.lease = l
	var rep store.TickReport
	var in rc.Input
	_, err = s.Tick(m.ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: store.At(m.now), Tunables: m.tun, Verify: true,
		Report: func(r store.TickReport) { rep = r }},
		func(i rc.Input) (rc.Output, error) { in = i; return rc.Reconcile(i), nil })
	must(t, err)
	if rep.Diverged {
		t.Fatalf("the new leader's first tick diverged from a cold load: %s", rep.Divergence)
	}
	var loaded rc.Rollout
	for _, r := range in.Rollouts {
		if r.ID == b.ID {
			loaded = r
		}
	}
	if len(loaded.Hosts) != len(b.Hosts) {
		t.Fatalf("the new leader loaded %s with %d hosts, want %d", b.ID, len(loaded.Hosts), len(b.Hosts))
	}
	got = m.rollout(b.ID)
	for _, want := range b.Hosts {
		h := hostOf(got, want.Hostname)
		if want.State == rc.HostPending {
			// What held the host when the open ticked (Blocked) is the
			// one thing the manifest does not say; the next tick says
			// it again.
			want.Blocked, h.Blocked = rc.Reason{}, rc.Reason{}
			if !sameHost(h, want) || !sameHost(hostOf(loaded, want.Hostname), hostOf(got, want.Hostname)) {
				t.Errorf("%s written by the new leader: %+v, want %+v", want.Hostname, h, want)
			}
		}
	}
	m.resync()
	m.tickWith(func(i rc.Input) (rc.Output, error) { return rc.Reconcile(i), nil })
}

// sameHost compares two rollout hosts, times by instant.
func sameHost(a, b rc.RolloutHost) bool {
	sa, sb := a.Since, b.Since
	a.Since, b.Since = time.Time{}, time.Time{}
	return sa.Equal(sb) && cmp.Equal(a, b, cmpOpts)
}
