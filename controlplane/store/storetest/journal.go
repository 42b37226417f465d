package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// testIntents: intents are recorded once, with their comment, seen by
// the next tick, and carry their result once consumed.
func testIntents(t *testing.T, s store.Store) {
	ctx := t.Context()
	m := newSim(t, s)
	m.checkIn(true, edgeHosts...)
	m.release(testFleet(t).Build(), fleetkit.Commit(1), "edge")
	m.tick()
	id := proto.RolloutID("edge", fleetkit.Commit(1))
	w0, err := s.Watermark(ctx)
	must(t, err)
	pause := rc.Intent{ID: "i1", RolloutID: id, Kind: rc.IntentPause, Actor: "alice", At: t0.Add(time.Second), Comment: "maintenance window"}
	must(t, s.AddIntent(ctx, pause))
	wantErr(t, s.AddIntent(ctx, rc.Intent{ID: "i1", RolloutID: id, Kind: rc.IntentCancel, At: t0}), store.ErrDuplicate, "AddIntent with a known id")
	must(t, s.AddIntent(ctx, rc.Intent{ID: "i0", RolloutID: id, Kind: "explode", Actor: "bob", At: t0}))
	if w, _ := s.Watermark(ctx); w.Changes != w0.Changes+2 {
		t.Errorf("watermark changes %d after two intents, want %d", w.Changes, w0.Changes+2)
	}
	rec, err := s.Intent(ctx, "i1")
	must(t, err)
	diff(t, "a new intent", rec, store.IntentRecord{Intent: pause})
	diff(t, "unconsumed intents, oldest first", m.peek().Intents, []rc.Intent{
		{ID: "i0", RolloutID: id, Kind: "explode", Actor: "bob", At: t0}, pause})

	m.now = m.now.Add(2 * time.Second) // both intents are older than the tick
	out := m.tick()
	if len(out.IntentResults) != 2 {
		t.Fatalf("intent results %+v", out.IntentResults)
	}
	for _, r := range out.IntentResults {
		rec, err := s.Intent(ctx, r.IntentID)
		must(t, err)
		diff(t, "a consumed intent's result", rec.Result, &r)
	}
	if rec, _ := s.Intent(ctx, "i1"); !rec.Result.Accepted || rec.Result.Reason.Message != "pause by alice: maintenance window" {
		t.Errorf("pause with a comment: result %+v", rec.Result)
	}
	if rec, _ := s.Intent(ctx, "i0"); rec.Result.Accepted || rec.Result.Reason.Code != codes.UnknownIntent {
		t.Errorf("unknown kind: result %+v", rec.Result)
	}
	if in := m.peek(); len(in.Intents) != 0 {
		t.Fatalf("consumed intents still loaded: %+v", in.Intents)
	}
	_, err = s.Intent(ctx, "nope")
	wantErr(t, err, store.ErrNotFound, "Intent of an unknown id")
	if err := s.AddIntent(ctx, rc.Intent{}); err == nil {
		t.Error("AddIntent accepted an empty id")
	}

	// A signed intent is kept verbatim, with its wave; a replay of its id
	// is a duplicate; Intents lists a rollout's, oldest first.
	wave := 2
	signed := &proto.SignedIntent{Document: `{"kind":"approve","nonce":"00ff"}`, Signature: "c2ln"}
	approve := rc.Intent{ID: "i2", RolloutID: id, Kind: rc.IntentApprove, Actor: "carol", At: t0.Add(3 * time.Second), Wave: &wave}
	must(t, s.AddSignedIntent(ctx, approve, signed))
	wantErr(t, s.AddSignedIntent(ctx, approve, signed), store.ErrDuplicate, "a replayed signed intent")
	must(t, s.AddIntent(ctx, rc.Intent{ID: "j1", RolloutID: "other@1", Kind: rc.IntentPause, At: t0}))
	rec, err = s.Intent(ctx, "i2")
	must(t, err)
	diff(t, "a signed intent", rec, store.IntentRecord{Intent: approve, Signed: signed})
	all, err := s.Intents(ctx, id)
	must(t, err)
	var ids []string
	for _, r := range all {
		ids = append(ids, r.ID)
	}
	diff(t, "a rollout's intents, oldest first", ids, []string{"i0", "i1", "i2"})
	if all[0].Result == nil || all[2].Result != nil || all[2].Signed == nil || all[1].Signed != nil {
		t.Errorf("listed intents lost their results or signatures: %+v", all)
	}
	every, err := s.Intents(ctx, "")
	must(t, err)
	if len(every) != 4 {
		t.Errorf("every intent: %d, want 4", len(every))
	}
}

// testEvents: events keep every field (budget occupancy included) and
// their tick's time; filters,
// paging and limits.
func testEvents(t *testing.T, s store.Store) {
	ctx := t.Context()
	m := newSim(t, s)
	w, err := s.Watermark(ctx)
	must(t, err)
	if w.Events != 0 {
		t.Fatalf("watermark of an empty journal: %d", w.Events)
	}
	evs := []rc.Event{
		{Kind: rc.EventHostTransition, RolloutID: "a@1", Channel: "a", Wave: 2, Host: "h1", From: "Pending", To: "Activating",
			Reason:  rc.Reason{Code: codes.Dispatched, Message: "go", Gate: "g", Actor: "alice"},
			Budgets: []rc.BudgetUse{{Name: "web", InFlight: 2, Limit: 3}, {Name: "tags=db", InFlight: 1, Limit: 1}}},
		{Kind: rc.EventIntentRefused, RolloutID: "b@1", Wave: -1, Reason: rc.Reason{Code: codes.UnknownRollout}},
		{Kind: rc.EventHostWaiting, RolloutID: "a@1", Channel: "a", Wave: 0, Host: "h2", From: "Pending",
			Budgets: []rc.BudgetUse{{Name: "web", InFlight: 3, Limit: 3}}},
		{Kind: rc.EventRefWaiting, Channel: "b", Wave: -1},
	}
	// The first tick starts the watch (one watch_started event, testWatch).
	m.tickWith(func(rc.Input) (rc.Output, error) { return rc.Output{}, nil })
	start, err := s.Watermark(ctx)
	must(t, err)
	m.tickWith(func(rc.Input) (rc.Output, error) { return rc.Output{Events: evs}, nil })
	later := t0.Add(time.Hour)
	must(t, s.AppendEvents(ctx, later, []rc.Event{{Kind: "release_refused", Channel: "a", Wave: -1, Reason: rc.Reason{Code: "bad_signature"}}}))
	must(t, s.AppendEvents(ctx, later, nil))

	all, err := s.Events(ctx, proto.EventQuery{AfterID: start.Events})
	must(t, err)
	if len(all) != 5 {
		t.Fatalf("%d events, want 5", len(all))
	}
	for i, e := range all {
		if i > 0 && e.ID <= all[i-1].ID {
			t.Fatalf("event ids not increasing: %d after %d", e.ID, all[i-1].ID)
		}
		at := t0
		if i == 4 {
			at = later
		}
		if !e.At.Equal(at) || e.At.Location() != time.UTC {
			t.Errorf("event %d at %s, want %s in UTC", i, e.At, at)
		}
		if i < 4 {
			w := evs[i]
			diff(t, fmt.Sprintf("event %d", i), e, proto.Event{ID: e.ID, At: e.At, Kind: w.Kind, RolloutID: w.RolloutID,
				Channel: w.Channel, Wave: w.Wave, Host: w.Host, From: w.From, To: w.To, Reason: proto.DecisionReason(w.Reason),
				Budgets: w.Budgets})
		}
	}
	if w, _ := s.Watermark(ctx); w.Events != all[4].ID {
		t.Errorf("watermark events %d, want %d", w.Events, all[4].ID)
	}
	ids := func(q proto.EventQuery) []int64 {
		t.Helper()
		got, err := s.Events(ctx, q)
		must(t, err)
		var out []int64
		for _, e := range got {
			out = append(out, e.ID)
		}
		return out
	}
	id := func(i ...int) []int64 {
		var out []int64
		for _, x := range i {
			out = append(out, all[x].ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		q    proto.EventQuery
		want []int64
	}{
		{"rollout", proto.EventQuery{RolloutID: "a@1"}, id(0, 2)},
		{"host", proto.EventQuery{Host: "h2"}, id(2)},
		{"channel", proto.EventQuery{Channel: "b"}, id(3)},
		{"channel and rollout", proto.EventQuery{Channel: "a", RolloutID: "a@1"}, id(0, 2)},
		{"after", proto.EventQuery{AfterID: all[1].ID}, id(2, 3, 4)},
		{"after, limit", proto.EventQuery{AfterID: all[0].ID, Limit: 2}, id(1, 2)},
		{"no match", proto.EventQuery{Host: "nope"}, nil},
		{"after the last", proto.EventQuery{AfterID: all[4].ID}, nil},
		{"newest, limit", proto.EventQuery{Limit: 2, Newest: true}, id(3, 4)},
		{"newest of a rollout", proto.EventQuery{RolloutID: "a@1", Limit: 1, Newest: true}, id(2)},
		{"newest after", proto.EventQuery{AfterID: all[2].ID, Limit: 10, Newest: true}, id(3, 4)},
	} {
		if got := ids(tc.q); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ids %v, want %v", tc.name, got, tc.want)
		}
	}

	// Limits: 1000 by default, 10,000 at most.
	many := make([]rc.Event, 10050)
	for i := range many {
		many[i] = rc.Event{Kind: rc.EventHostWaiting, Channel: "bulk", Wave: i}
	}
	m.now = m.now.Add(time.Minute)
	m.tickWith(func(rc.Input) (rc.Output, error) { return rc.Output{Events: many}, nil })
	for _, tc := range []struct{ limit, want int }{{0, 1000}, {-5, 1000}, {20000, 10000}, {10000, 10000}, {1, 1}} {
		got, err := s.Events(ctx, proto.EventQuery{Channel: "bulk", Limit: tc.limit})
		must(t, err)
		if len(got) != tc.want {
			t.Errorf("limit %d: %d events, want %d", tc.limit, len(got), tc.want)
		}
		for i, e := range got {
			if e.Wave != i {
				t.Fatalf("limit %d: event %d has wave %d: out of order", tc.limit, i, e.Wave)
			}
		}
	}
}

// testPrune: old events and old terminal rollouts go (with their hosts
// and manifests); the latest of a channel, non-terminal ones, and ones a
// tick still needs stay.
func testPrune(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := internals(t, s)
	m := newSim(t, s)
	rel := m.release(testFleet(t).Build(), fleetkit.Commit(7), "edge")[0] // the ref of the latest rollout
	hash := rel.ManifestHash
	old, cut := t0.Add(-3*time.Hour), t0.Add(-time.Hour)
	h := func(name string, st rc.HostState) rc.RolloutHost { return craftedHost(name, st, old) }
	m.now = old
	m.open(
		crafted("edge", fleetkit.Commit(1), rc.RolloutConverged, old, old, hash, h("a", rc.HostConverged), h("b", rc.HostConverged)),
		crafted("edge", fleetkit.Commit(2), rc.RolloutSuperseded, old.Add(time.Minute), old, hash, h("a", rc.HostSkipped)),
		crafted("edge", fleetkit.Commit(3), rc.RolloutCancelled, old.Add(2*time.Minute), old, hash, h("a", rc.HostSoaking)),
		crafted("edge", fleetkit.Commit(4), rc.RolloutFailed, old.Add(3*time.Minute), old, hash, h("c", rc.HostFailed)),
		crafted("edge", fleetkit.Commit(5), rc.RolloutHalted, old.Add(4*time.Minute), old, hash, h("d", rc.HostPending)),
		crafted("edge", fleetkit.Commit(6), rc.RolloutReverted, old.Add(5*time.Minute), t0, hash, h("e", rc.HostReverted)),
		crafted("edge", fleetkit.Commit(7), rc.RolloutConverged, old.Add(6*time.Minute), old, hash, h("f", rc.HostConverged)),
	)
	id := func(n int) string { return proto.RolloutID("edge", fleetkit.Commit(n)) }
	journal := func() {
		m.tickWith(func(rc.Input) (rc.Output, error) {
			return rc.Output{Events: []rc.Event{{Kind: rc.EventRefWaiting, Channel: "edge", Wave: -1}}}, nil
		})
	}
	journal()
	must(t, s.AddIntent(ctx, rc.Intent{ID: "keep", RolloutID: id(4), Kind: rc.IntentRollback, At: t0}))
	m.now = t0
	journal()
	hostsBefore, err := in.CountRows(ctx, "rollout_hosts")
	must(t, err)

	events, rollouts, err := s.Prune(ctx, cut)
	must(t, err)
	// Gone: 1 (old, converged), 2 (superseded). Kept: 3 (a host in
	// flight), 4 (an intent names it), 5 (halted), 6 (updated after the
	// cut), 7 (the channel's latest). The first tick's events (the watch
	// starting, and the one it wrote) are older than the cut; the
	// second's is not.
	if events != 2 || rollouts != 2 {
		t.Fatalf("Prune removed %d events and %d rollouts, want 2 and 2", events, rollouts)
	}
	for _, n := range []int{1, 2} {
		_, err := s.Rollout(ctx, id(n))
		wantErr(t, err, store.ErrNotFound, "a pruned rollout")
		_, err = s.Manifest(ctx, id(n))
		wantErr(t, err, store.ErrNotFound, "a pruned rollout's manifest")
	}
	for _, n := range []int{3, 4, 5, 6, 7} {
		if _, err := s.Rollout(ctx, id(n)); err != nil {
			t.Errorf("rollout %s: %v", id(n), err)
		}
	}
	hostsAfter, err := in.CountRows(ctx, "rollout_hosts")
	must(t, err)
	if hostsBefore-hostsAfter != 3 {
		t.Errorf("Prune removed %d rollout hosts, want 3", hostsBefore-hostsAfter)
	}
	if n, err := in.CountRows(ctx, "rollout_manifests"); err != nil || n != 5 {
		t.Errorf("%d rollout manifests left (%v), want 5", n, err)
	}
	left, err := s.Events(ctx, proto.EventQuery{})
	must(t, err)
	// The second tick's: its own, and the watch restarting after three
	// hours without a tick.
	if len(left) != 2 || !left[0].At.Equal(t0) || !left[1].At.Equal(t0) || left[0].Kind != rc.EventWatchStarted {
		t.Errorf("events left: %+v", left)
	}
	if e, r, err := s.Prune(ctx, cut); err != nil || e != 0 || r != 0 {
		t.Errorf("a second Prune removed %d events and %d rollouts (%v)", e, r, err)
	}
	m.resync()
	m.tickWith(func(rc.Input) (rc.Output, error) { return rc.Output{}, nil })

	// A journal pruned whole does not read as one gone back: its
	// watermark's newest event stays where it was.
	before, err := s.Watermark(ctx)
	must(t, err)
	_, _, err = s.Prune(ctx, t0.Add(1000*time.Hour))
	must(t, err)
	if after, err := s.Watermark(ctx); err != nil || after.Events < before.Events {
		t.Errorf("pruning every event moved the watermark's newest event from %d to %d (%v)", before.Events, after.Events, err)
	}
}
