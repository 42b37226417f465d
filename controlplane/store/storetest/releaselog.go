package storetest

import (
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// testReleaseLog: every push the store was given keeps a row with its
// fate: pending until a tick decides, then opened, waiting or deferred;
// superseded (with an event) when a newer ref replaces it before it
// opened, whether a tick saw it or not; refused when the source says so.
// A row is a push, not a commit: a ref moved back to a commit of an
// earlier push (refused as a replay), or back to the channel's current
// release, is a new row, while the same ref read again (a poll, a
// restart) adds none and keeps an accepted push's fate. Prune keeps what
// is not settled, and each channel's latest push.
func testReleaseLog(t *testing.T, s store.Store) {
	ctx := t.Context()
	m := newSim(t, s)
	fb := testFleet(t)
	m.checkIn(true, append(edgeHosts, stableHosts...)...)
	id := func(ch string, n int) string { return proto.RolloutID(ch, fleetkit.Commit(n)) }
	// fates reads the log (of one channel when given) as "rollout id:
	// fate by".
	fates := func(q store.ReleaseQuery) []string {
		t.Helper()
		rels, err := s.ReleaseLog(ctx, q)
		must(t, err)
		out := []string{}
		for _, r := range rels {
			out = append(out, r.RolloutID+": "+r.Fate+" "+r.By)
		}
		return out
	}

	m.release(fb.Build(), fleetkit.Commit(1))
	diff(t, "refs before a tick", fates(store.ReleaseQuery{}), []string{id("stable", 1) + ": pending ", id("edge", 1) + ": pending "})
	m.tick() // edge@1 opens; stable@1 waits for it (channel edge)
	diff(t, "refs after a tick", fates(store.ReleaseQuery{}), []string{
		id("stable", 1) + ": deferred edge", id("edge", 1) + ": opened "})
	// An opened ref carries how its rollout stands (state, reason, its
	// channel's latest); one that did not open carries none.
	all, err := s.ReleaseLog(ctx, store.ReleaseQuery{})
	must(t, err)
	for _, r := range all {
		switch ro := r.Rollout; {
		case r.RolloutID == id("edge", 1) && (ro == nil || ro.State != string(rc.RolloutActive) || !ro.Latest || ro.Reason.Code == ""):
			t.Errorf("the opened %s carries %+v, want its Active rollout, latest, with its reason", r.RolloutID, ro)
		case r.RolloutID != id("edge", 1) && ro != nil:
			t.Errorf("the %s %s carries a rollout: %+v", r.Fate, r.RolloutID, ro)
		}
	}

	edge := store.ReleaseQuery{Channel: "edge"}
	m.now = m.now.Add(time.Minute)
	m.release(fb.Bump("v2").Build(), fleetkit.Commit(2), "edge")
	m.tick()
	diff(t, "a ref behind an active rollout", fates(edge), []string{id("edge", 2) + ": waiting " + id("edge", 1), id("edge", 1) + ": opened "})

	// v3 replaces the waiting v2; v4 replaces v3 before any tick saw it.
	m.now = m.now.Add(time.Minute)
	m.release(fb.Bump("v3").Build(), fleetkit.Commit(3), "edge")
	m.now = m.now.Add(time.Minute)
	v4 := m.release(fb.Bump("v4").Build(), fleetkit.Commit(4), "edge")[0]
	m.tick()
	diff(t, "superseded refs", fates(edge), []string{
		id("edge", 4) + ": waiting " + id("edge", 1),
		id("edge", 3) + ": superseded " + fleetkit.Commit(4),
		id("edge", 2) + ": superseded " + fleetkit.Commit(3),
		id("edge", 1) + ": opened "})
	for n, by := range map[int]int{2: 3, 3: 4} {
		evs, err := s.Events(ctx, proto.EventQuery{RolloutID: id("edge", n)})
		must(t, err)
		last := evs[len(evs)-1]
		if last.Kind != rc.EventRefSuperseded || last.Channel != "edge" || last.Reason.Code != codes.Superseded {
			t.Errorf("%s: last event %+v, want %s", id("edge", n), last, rc.EventRefSuperseded)
		}
		rels, err := s.ReleaseLog(ctx, store.ReleaseQuery{RolloutID: id("edge", n)})
		must(t, err)
		if len(rels) != 1 || rels[0].Commit != "src-"+fleetkit.Commit(n) || rels[0].By != fleetkit.Commit(by) ||
			rels[0].Reason.Code != codes.Superseded || rels[0].SignedAt.IsZero() {
			t.Errorf("the log of %s: %+v", id("edge", n), rels)
		}
	}

	// Refusals: a refused push is logged, once however often its ref is
	// read.
	at := m.now.Add(2 * time.Minute) // after v4 was verified
	sec := func(n int) time.Time { return at.Add(time.Duration(n) * time.Second) }
	bad := store.RefusedRelease{Channel: "edge", Commit: "bad0", Code: codes.BadSignature, Message: "first", At: at}
	must(t, s.RefuseRelease(ctx, bad))
	bad.Message, bad.At = "again", sec(1)
	must(t, s.RefuseRelease(ctx, bad))
	rels, err := s.ReleaseLog(ctx, edge)
	must(t, err)
	want := proto.Release{Channel: "edge", Commit: "bad0", SeenAt: at, Fate: proto.FateRefused,
		Reason: proto.DecisionReason{Code: codes.BadSignature, Message: "again"}, UpdatedAt: sec(1)}
	diff(t, "a refused ref", rels[0], want)

	// The ref moves back to v1's commit (a GitOps rollback): a replay, and
	// a push of its own beside v1's opened one; read again, it adds none.
	replay := store.RefusedRelease{Channel: "edge", Commit: "src-" + fleetkit.Commit(1), Ref: fleetkit.Commit(1),
		Code: codes.ReplayedRelease, Message: "a replay", At: sec(2)}
	must(t, s.RefuseRelease(ctx, replay))
	replay.Message, replay.At = "read again", sec(3)
	must(t, s.RefuseRelease(ctx, replay))
	rels, err = s.ReleaseLog(ctx, edge)
	must(t, err)
	diff(t, "a push back to an earlier commit", rels[0], proto.Release{Channel: "edge", Commit: "src-" + fleetkit.Commit(1),
		Ref: fleetkit.Commit(1), RolloutID: id("edge", 1), SeenAt: sec(2), Fate: proto.FateRefused,
		Reason: proto.DecisionReason{Code: codes.ReplayedRelease, Message: "read again"}, UpdatedAt: sec(3)})

	// The ref moves forward to the channel's current release again: not
	// newer, so not stored, yet a push with the release's fate; read
	// again, and refused when read again (stale by now, say), it adds no
	// row and keeps its fate.
	for i := range 2 {
		again := v4
		again.VerifiedAt = sec(4 + i)
		wantErr(t, s.PutRelease(ctx, again), store.ErrStaleRelease, "PutRelease of the current release")
	}
	must(t, s.RefuseRelease(ctx, store.RefusedRelease{Channel: "edge", Commit: v4.SourceCommit, Ref: v4.Ref,
		Code: codes.Stale, Message: "stale by now", At: sec(6)}))
	// And back to v1's commit once more: another push.
	replay.At = sec(7)
	must(t, s.RefuseRelease(ctx, replay))
	diff(t, "refs after refusals", fates(edge), []string{
		id("edge", 1) + ": refused ",
		id("edge", 4) + ": waiting " + id("edge", 1),
		id("edge", 1) + ": refused ",
		": refused ",
		id("edge", 4) + ": waiting " + id("edge", 1),
		id("edge", 3) + ": superseded " + fleetkit.Commit(4),
		id("edge", 2) + ": superseded " + fleetkit.Commit(3),
		id("edge", 1) + ": opened "})
	if err := s.RefuseRelease(ctx, store.RefusedRelease{Commit: "x"}); err == nil {
		t.Error("RefuseRelease accepted a ref without channel and code")
	}

	// Prune drops the settled refs (superseded, refused) but the latest
	// push of each channel, where its ref stands, and keeps the rest.
	_, _, err = s.Prune(ctx, m.now.Add(time.Hour))
	must(t, err)
	diff(t, "refs after pruning", fates(store.ReleaseQuery{}), []string{
		id("edge", 1) + ": refused ",
		id("edge", 4) + ": waiting " + id("edge", 1),
		id("edge", 4) + ": waiting " + id("edge", 1),
		id("stable", 1) + ": deferred edge", id("edge", 1) + ": opened "})
	// Read again after pruning, that ref is still no new push.
	replay.At = m.now.Add(2 * time.Hour)
	must(t, s.RefuseRelease(ctx, replay))
	if n := len(fates(edge)); n != 4 {
		t.Errorf("the ref read again after pruning: %d refs of edge, want 4", n)
	}
}
