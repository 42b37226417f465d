package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// testReleases: a release replaces the channel's only if signed later;
// the channel's last rolled ref survives a new release.
func testReleases(t *testing.T, s store.Store) {
	ctx := t.Context()
	m := newSim(t, s)
	fb := testFleet(t)
	v1 := m.release(fb.Build(), fleetkit.Commit(1))
	got, err := s.Releases(ctx)
	must(t, err)
	diff(t, "releases", got, v1)
	if got[0].Channel != "edge" || got[1].Channel != "stable" {
		t.Fatalf("releases not by channel name: %s, %s", got[0].Channel, got[1].Channel)
	}
	w0, err := s.Watermark(ctx)
	must(t, err)

	for _, tc := range []struct {
		name string
		at   time.Time
	}{{"older", t0.Add(-time.Minute)}, {"same time", t0}} {
		old := Releases(t, fb.Build(), fleetkit.Commit(7), tc.at, "edge")[0]
		wantErr(t, s.PutRelease(ctx, old), store.ErrStaleRelease, "PutRelease of a release signed "+tc.name)
	}
	got, err = s.Releases(ctx)
	must(t, err)
	diff(t, "releases after stale puts", got, v1)
	if w, _ := s.Watermark(ctx); w.Changes != w0.Changes {
		t.Errorf("a refused release counted as a change")
	}

	m.checkIn(true, edgeHosts...)
	m.tick() // opens edge@1: last rolled ref is fleetkit.Commit(1)
	m.now = m.now.Add(time.Microsecond)
	v2 := m.release(fb.Bump("v2").Build(), fleetkit.Commit(2), "edge")
	got, err = s.Releases(ctx)
	must(t, err)
	diff(t, "releases after a newer put", got, []store.Release{v2[0], v1[1]})
	if w, _ := s.Watermark(ctx); w.Changes <= w0.Changes {
		t.Errorf("a new release did not count as a change")
	}
	for _, c := range m.peek().Channels {
		if c.Name == "edge" && (c.Ref != fleetkit.Commit(2) || c.LastRolledRef != fleetkit.Commit(1) || c.ManifestHash != v2[0].ManifestHash) {
			t.Errorf("edge after a new release: ref %s, last rolled %s, manifest %s", c.Ref, c.LastRolledRef, c.ManifestHash)
		}
	}
	if err := s.PutRelease(ctx, store.Release{Channel: "x"}); err == nil {
		t.Error("PutRelease accepted a release without ref and hashes")
	}

	// A batch: the stale release is refused, the others are stored, and
	// the batch is one change.
	w1, err := s.Watermark(ctx)
	must(t, err)
	v3 := Releases(t, fb.Bump("v3").Build(), fleetkit.Commit(3), m.now.Add(time.Minute), "edge", "stable")
	stale := Releases(t, fb.Build(), fleetkit.Commit(8), t0, "edge")[0]
	errs, err := s.PutReleases(ctx, []store.Release{stale, v3[0], v3[1]})
	must(t, err)
	if len(errs) != 3 {
		t.Fatalf("PutReleases returned %d errors for 3 releases", len(errs))
	}
	wantErr(t, errs[0], store.ErrStaleRelease, "PutReleases of a stale release")
	if errs[1] != nil || errs[2] != nil {
		t.Errorf("PutReleases refused newer releases: %v, %v", errs[1], errs[2])
	}
	got, err = s.Releases(ctx)
	must(t, err)
	diff(t, "releases after a batch", got, v3)
	if w, _ := s.Watermark(ctx); w.Changes != w1.Changes+1 {
		t.Errorf("a batch of two new releases moved the changes from %d to %d, want one change", w1.Changes, w.Changes)
	}

	// CI signs anew a ciCommit whose rollout the channel opened before
	// (edge@5, crafted), not the one it rolled last (edge@1): its rollout
	// id would open twice, so it is refused and nothing is written. The
	// last rolled one signed anew (to stay fresh) is taken.
	m.open(crafted("edge", fleetkit.Commit(5), rc.RolloutConverged, t0, t0, v3[0].ManifestHash))
	w2, err := s.Watermark(ctx)
	must(t, err)
	m.now = m.now.Add(time.Hour)
	old5 := Releases(t, fb.Bump("v5").Build(), fleetkit.Commit(5), m.now, "edge")[0]
	wantErr(t, s.PutRelease(ctx, old5), store.ErrReusedRef, "PutRelease of a ciCommit whose rollout exists")
	got, err = s.Releases(ctx)
	must(t, err)
	diff(t, "releases after a reused ciCommit", got, v3)
	if w, _ := s.Watermark(ctx); w.Changes != w2.Changes {
		t.Errorf("a refused release counted as a change")
	}
	if rels, err := s.ReleaseLog(ctx, store.ReleaseQuery{RolloutID: old5.Channel + "@" + old5.Ref}); err != nil || len(rels) != 0 {
		t.Errorf("a reused ciCommit was logged by the store: %+v, %v", rels, err)
	}
	fresh := Releases(t, fb.Build(), fleetkit.Commit(1), m.now, "edge")[0]
	must(t, s.PutRelease(ctx, fresh))
}

// testManifests: a rollout serves a copy of its channel's manifest at
// open, which a later release does not change; ReplaceManifest swaps it
// and the rollout's hash, and no tick writes the old hash back.
func testManifests(t *testing.T, s store.Store) {
	ctx := t.Context()
	m := newSim(t, s)
	fb := testFleet(t)
	m.checkIn(true, edgeHosts...)
	v1 := m.release(fb.Build(), fleetkit.Commit(1), "edge")
	m.tick()
	id := proto.RolloutID("edge", fleetkit.Commit(1))
	got, err := s.Manifest(ctx, id)
	must(t, err)
	diff(t, "the rollout's manifest", got, store.Manifest{RolloutID: id, Body: v1[0].ManifestBody, Sig: v1[0].ManifestSig, Hash: v1[0].ManifestHash})

	m.now = m.now.Add(time.Minute)
	m.release(fb.Bump("v2").Build(), fleetkit.Commit(2), "edge")
	got, err = s.Manifest(ctx, id)
	must(t, err)
	if got.Hash != v1[0].ManifestHash {
		t.Fatal("a new release changed the manifest an open rollout serves")
	}

	resigned := store.Manifest{RolloutID: id, Body: append([]byte(nil), v1[0].ManifestBody...), Sig: fakeSig("resigned"), Hash: "resigned-hash"}
	must(t, s.ReplaceManifest(ctx, resigned))
	got, err = s.Manifest(ctx, id)
	must(t, err)
	diff(t, "the replaced manifest", got, resigned)
	if h := m.rollout(id).ManifestHash; h != "resigned-hash" {
		t.Fatalf("the rollout's manifest hash is %q after ReplaceManifest", h)
	}
	m.resync()
	m.tick()
	if h := m.rollout(id).ManifestHash; h != "resigned-hash" {
		t.Fatalf("a tick wrote manifest hash %q back", h)
	}
	_, err = s.Manifest(ctx, "edge@nope")
	wantErr(t, err, store.ErrNotFound, "Manifest of an unknown rollout")
	wantErr(t, s.ReplaceManifest(ctx, store.Manifest{RolloutID: "edge@nope", Hash: "h"}), store.ErrNotFound, "ReplaceManifest of an unknown rollout")
}

// testStagedBodies: the bodies of a release staged while it is verified
// are what PutReleases names (written once, one fleet.resolved for
// channels that share it); bodies staged for releases never stored stay
// bounded, and a stored release deletes every body no channel names,
// while a rollout keeps serving the manifest it opened with.
func testStagedBodies(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := internals(t, s)
	m := newSim(t, s)
	fb := testFleet(t)
	blobs := func() int64 {
		t.Helper()
		n, err := in.CountRows(ctx, "release_blobs")
		must(t, err)
		return n
	}
	stage := func(want int, bodies ...[]byte) {
		t.Helper()
		n, err := s.StageReleaseBodies(ctx, m.now, bodies...)
		must(t, err)
		if n != want {
			t.Fatalf("StageReleaseBodies wrote %d of %d bodies, want %d", n, len(bodies), want)
		}
	}

	v1 := Releases(t, fb.Build(), fleetkit.Commit(1), m.now)
	if len(v1) != 2 || string(v1[0].FleetBody) != string(v1[1].FleetBody) {
		t.Fatal("the test fleet's channels do not share one fleet.resolved")
	}
	stage(2, v1[0].FleetBody, v1[0].ManifestBody)
	stage(0, v1[0].FleetBody, v1[0].ManifestBody) // kept already
	stage(1, v1[1].FleetBody, v1[1].ManifestBody) // the fleet is shared
	errs, err := s.PutReleases(ctx, v1)
	must(t, err)
	for _, err := range errs {
		must(t, err)
	}
	if n := blobs(); n != 3 {
		t.Errorf("%d blobs after storing two channels of one fleet, want 3 (the fleet and two manifests)", n)
	}
	got, err := s.Releases(ctx)
	must(t, err)
	diff(t, "the releases stored from staged bodies", got, v1)

	// Bodies of releases that are then refused, staged at once (as
	// replicas may): staging stops at the bound, and nothing is lost by it.
	var wg sync.WaitGroup
	written := make([]int, 20)
	for i := range written {
		wg.Go(func() {
			n, err := s.StageReleaseBodies(ctx, m.now, fmt.Appendf(nil, `{"refused":%d}`, i))
			if err != nil {
				t.Error(err)
			}
			written[i] = n
		})
	}
	wg.Wait()
	loose := 0
	for _, n := range written {
		loose += n
	}
	if loose != 8 || blobs() != 3+int64(loose) {
		t.Errorf("staged %d of 20 bodies no release names (%d blobs), want 8", loose, blobs())
	}
	m.checkIn(true, edgeHosts...)
	m.tick() // opens edge@1, with a copy of its manifest
	id := proto.RolloutID("edge", fleetkit.Commit(1))

	// A release stored without staging writes its bodies itself, and
	// every body no channel names goes: the previous fleet, the edge
	// manifest, the refused bodies.
	m.now = m.now.Add(time.Minute)
	v2 := Releases(t, fb.Bump("v2").Build(), fleetkit.Commit(2), m.now, "edge")
	must(t, s.PutRelease(ctx, v2[0]))
	if n := blobs(); n != 4 {
		t.Errorf("%d blobs after edge moved on, want 4 (stable's fleet and manifest, edge's new fleet and manifest)", n)
	}
	got, err = s.Releases(ctx)
	must(t, err)
	diff(t, "the releases after edge moved on", got, []store.Release{v2[0], v1[1]})
	man, err := s.Manifest(ctx, id)
	must(t, err)
	if string(man.Body) != string(v1[0].ManifestBody) {
		t.Error("the open rollout lost the manifest it opened with")
	}
	// The bound counts only bodies no channel names: staging works again,
	// also for the content of a blob deleted whose parts (where the store
	// keeps bodies in parts) are not swept yet.
	stage(1, []byte(`{"next":1}`))
	stage(1, v1[0].ManifestBody)

	// Bodies larger than what one write carries (PostgreSQL streams a
	// staged body in 64 KiB messages) come back byte for byte.
	big := Releases(t, fleetkit.Synthetic(2000), fleetkit.Commit(3), m.now.Add(time.Hour), "stable")[0]
	if len(big.FleetBody) < 4<<16 {
		t.Fatalf("the large fleet is %d bytes: too small to take several messages", len(big.FleetBody))
	}
	stage(2, big.FleetBody, big.ManifestBody)
	must(t, s.PutRelease(ctx, big))
	got, err = s.Releases(ctx)
	must(t, err)
	diff(t, "the releases after a large release was staged and stored", got, []store.Release{v2[0], big})

	// Storing it deleted stable's fleet before (the v1 fleet): its parts,
	// on a store that parts bodies, are swept; those of the blobs named
	// stay.
	swept, err := s.SweepBlobParts(ctx)
	must(t, err)
	if s.Backend() == "postgres" && swept == 0 {
		t.Error("the sweep deleted no parts after a parted fleet was deleted")
	}
	if again, err := s.SweepBlobParts(ctx); err != nil || again != 0 {
		t.Errorf("a second sweep deleted the parts of %d blobs (%v), want none", again, err)
	}
	got, err = s.Releases(ctx)
	must(t, err)
	diff(t, "the releases after the sweep", got, []store.Release{v2[0], big})
}
