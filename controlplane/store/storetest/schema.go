package storetest

import (
	"testing"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// testMigrations: Open migrated every embedded migration, once; opening
// the same database again applies nothing and keeps the data.
func testMigrations(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := internals(t, s)
	want := make([]int, in.EmbeddedMigrations())
	for i := range want {
		want[i] = i + 1
	}
	got, err := in.AppliedMigrations(ctx)
	must(t, err)
	diff(t, "applied migrations", got, want)
	must(t, s.AddIntent(ctx, rc.Intent{ID: "kept", RolloutID: "r", Kind: rc.IntentPause, At: t0}))
	for range 2 {
		again, err := in.Reopen(ctx)
		must(t, err)
		got, err := internals(t, again).AppliedMigrations(ctx)
		must(t, err)
		diff(t, "applied migrations after reopening", got, want)
		if _, err := again.Intent(ctx, "kept"); err != nil {
			t.Fatalf("reopening lost data: %v", err)
		}
		again.Close()
	}
}

// testStateConstraints: the schema refuses state names the reconciler
// does not have, and accepts every one it has.
func testStateConstraints(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := internals(t, s)
	m := newSim(t, s)
	hash := m.release(testFleet(t).Build(), fleetkit.Commit(1), "edge")[0].ManifestHash
	m.open(crafted("edge", fleetkit.Commit(1), rc.RolloutActive, t0, t0, hash, craftedHost("e1", rc.HostPending, t0)))
	id := proto.RolloutID("edge", fleetkit.Commit(1))
	for _, st := range rc.HostStates {
		must(t, in.SetHostStateRaw(ctx, id, "e1", string(st)))
		if got := hostOf(m.rollout(id), "e1").State; got != st {
			t.Fatalf("host state %s reads back as %s", st, got)
		}
	}
	for _, st := range rc.RolloutStates {
		must(t, in.SetRolloutStateRaw(ctx, id, string(st)))
		if got := m.rollout(id).State; got != st {
			t.Fatalf("rollout state %s reads back as %s", st, got)
		}
	}
	for _, p := range []rc.WavePhase{rc.PhaseDispatching, rc.PhaseSoaking} {
		must(t, in.SetWavePhaseRaw(ctx, id, string(p)))
	}
	for _, bad := range []string{"", "Bogus", "pending", "Pending "} {
		if err := in.SetHostStateRaw(ctx, id, "e1", bad); err == nil {
			t.Errorf("the schema accepted host state %q", bad)
		}
		if err := in.SetRolloutStateRaw(ctx, id, bad); err == nil {
			t.Errorf("the schema accepted rollout state %q", bad)
		}
		if err := in.SetWavePhaseRaw(ctx, id, bad); err == nil {
			t.Errorf("the schema accepted wave phase %q", bad)
		}
	}
}
