package storetest

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// testPruneHosts: PruneHosts forgets exactly the hosts that left the
// fleet, that no live rollout lists, and that were not heard from since
// the cut — a status without a last-seen time counts as unheard — and a
// tick after it loads its input in full, without them. A host of the
// fleet keeps its rows however old they are, and so does a host a live
// rollout still lists.
func testPruneHosts(t *testing.T, s store.Store) {
	m := newSim(t, s)
	fb := testFleet(t)
	all := append(slices.Clone(edgeHosts), stableHosts...)
	m.checkIn(true, all...)
	m.release(fb.Build(), fleetkit.Commit(1))
	m.tick()

	old := m.now.Add(-48 * time.Hour)
	st := store.HostStatus{Current: fleetkit.Closure("x", "v0"), Booted: fleetkit.Closure("x", "v0"), Probes: rc.ProbeSummary{Total: 1}}
	for _, h := range []string{"gone-seen", "gone-unseen", "gone-recent"} {
		_, err := s.RecordStatus(m.ctx, h, st)
		must(t, err)
	}
	touch(t, s, m.ctx, map[string]time.Time{"gone-seen": old, "gone-recent": m.now, "gone-time-only": old,
		edgeHosts[0]: old, stableHosts[0]: old})

	// Activation times (rfcs/0014) go with the hosts forgotten, and
	// stay with the ones kept.
	var times []store.ActivationTime
	for _, h := range []string{"gone-seen", "gone-time-only", "gone-recent", edgeHosts[0]} {
		times = append(times, store.ActivationTime{Host: h, Typical: time.Minute, Samples: 1, MeasuredAt: old})
	}
	must(t, s.PutActivationTimes(m.ctx, times))

	// The fleet: every host but edgeHosts[0], which its live rollout
	// still lists, and the gone ones.
	inFleet := func(h string) bool { return slices.Contains(all, h) && h != edgeHosts[0] }
	gone, err := s.PruneHosts(m.ctx, inFleet, m.now.Add(-24*time.Hour))
	must(t, err)
	if want := []string{"gone-seen", "gone-time-only", "gone-unseen"}; !slices.Equal(gone, want) {
		t.Fatalf("PruneHosts forgot %v, want %v", gone, want)
	}
	for _, h := range gone {
		if _, err := s.Host(m.ctx, h); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s after it was forgotten: %v, want ErrNotFound", h, err)
		}
	}
	for _, h := range []string{"gone-recent", edgeHosts[0], stableHosts[0]} {
		rec, err := s.Host(m.ctx, h)
		if err != nil || !rec.Seen {
			t.Errorf("%s: %+v, %v; want it kept, seen", h, rec, err)
		}
	}
	left, err := s.ActivationTimes(m.ctx)
	must(t, err)
	if got, want := slices.Sorted(maps.Keys(left)), []string{edgeHosts[0], "gone-recent"}; !slices.Equal(got, want) {
		t.Errorf("activation times after the prune: of %v, want of %v", got, want)
	}
	var rep store.TickReport
	var in rc.Input
	_, err = s.Tick(m.ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: store.At(m.now), Tunables: m.tun, Report: func(r store.TickReport) { rep = r }},
		func(i rc.Input) (rc.Output, error) { in = i; return rc.Reconcile(i), nil })
	must(t, err)
	if !rep.Full {
		t.Error("the tick after hosts were forgotten used its kept input")
	}
	for _, h := range gone {
		if _, ok := in.Hosts[h]; ok {
			t.Errorf("the tick after %s was forgotten still observes it", h)
		}
	}
	if _, ok := in.Hosts["gone-recent"]; !ok {
		t.Error("the tick lost gone-recent, heard since the cut")
	}
	again, err := s.PruneHosts(m.ctx, inFleet, m.now.Add(-24*time.Hour))
	must(t, err)
	if len(again) != 0 {
		t.Errorf("a second prune forgot %v", again)
	}
}
