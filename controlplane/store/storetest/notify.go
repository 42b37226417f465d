package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// testNotificationCursors: a sink's cursor is set once (a second start
// returns the first place), moves only forward and only from where the
// mover says it is, is listed by sink, survives a reopen, and is deleted
// only when its sink is not kept and it has not moved since the cut.
func testNotificationCursors(t *testing.T, s store.Store) {
	ctx := t.Context()
	at, err := s.StartNotificationCursor(ctx, "ops", 7, t0)
	must(t, err)
	if at != 7 {
		t.Fatalf("a new cursor starts at %d, want 7", at)
	}
	if at, err = s.StartNotificationCursor(ctx, "ops", 100, t0.Add(time.Second)); err != nil || at != 7 {
		t.Fatalf("starting a cursor again: %d, %v; want the stored 7", at, err)
	}
	if _, err := s.StartNotificationCursor(ctx, "", 0, t0); err == nil {
		t.Error("a cursor without a sink was started")
	}
	if _, err := s.StartNotificationCursor(ctx, "x", -1, t0); err == nil {
		t.Error("a cursor before the journal was started")
	}

	wantErr(t, s.AdvanceNotificationCursor(ctx, "ops", 6, 9, t0), store.ErrCursorMoved, "advance from the wrong place")
	must(t, s.AdvanceNotificationCursor(ctx, "ops", 7, 9, t0.Add(time.Minute)))
	wantErr(t, s.AdvanceNotificationCursor(ctx, "ops", 7, 10, t0), store.ErrCursorMoved, "advance from where it was")
	if err := s.AdvanceNotificationCursor(ctx, "ops", 9, 9, t0); err == nil {
		t.Error("a cursor advanced to where it is")
	}
	if err := s.AdvanceNotificationCursor(ctx, "ops", 9, 3, t0); err == nil {
		t.Error("a cursor moved back")
	}
	wantErr(t, s.AdvanceNotificationCursor(ctx, "nobody", 0, 1, t0), store.ErrNotFound, "advance a cursor that does not exist")

	_, err = s.StartNotificationCursor(ctx, "chat", 0, t0.Add(2*time.Minute))
	must(t, err)
	got, err := s.NotificationCursors(ctx)
	must(t, err)
	diff(t, "cursors", got, []store.NotificationCursor{
		{Sink: "chat", LastEvent: 0, UpdatedAt: t0.Add(2 * time.Minute)},
		{Sink: "ops", LastEvent: 9, UpdatedAt: t0.Add(time.Minute)},
	})

	if re, err := internals(t, s).Reopen(ctx); err != nil {
		t.Fatal(err)
	} else {
		again, err := re.NotificationCursors(ctx)
		re.Close()
		must(t, err)
		diff(t, "cursors after a reopen", again, got)
	}

	// Kept sinks stay, and so do the others that moved since the cut.
	n, err := s.DeleteNotificationCursors(ctx, []string{"ops"}, t0.Add(2*time.Minute))
	must(t, err)
	if n != 0 {
		t.Fatalf("deleted %d cursors, want none (chat moved at the cut)", n)
	}
	n, err = s.DeleteNotificationCursors(ctx, []string{"ops"}, t0.Add(time.Hour))
	must(t, err)
	if n != 1 {
		t.Fatalf("deleted %d cursors, want chat's", n)
	}
	n, err = s.DeleteNotificationCursors(ctx, nil, t0.Add(time.Hour))
	must(t, err)
	if n != 1 {
		t.Fatalf("deleted %d cursors with none kept, want ops's", n)
	}
	if got, err := s.NotificationCursors(ctx); err != nil || len(got) != 0 {
		t.Fatalf("cursors left: %v, %v", got, err)
	}
}

// testNotificationCursorRace: of replicas that move a cursor from the
// same place at once, exactly one does; the others are told it moved.
func testNotificationCursorRace(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.StartNotificationCursor(ctx, "ops", 0, t0)
	must(t, err)
	for round := range 3 {
		from := int64(round * 20)
		const replicas = 8
		var wg sync.WaitGroup
		won := make(chan int64, replicas)
		errs := make(chan error, replicas)
		for i := range replicas {
			wg.Add(1)
			go func() {
				defer wg.Done()
				to := from + 10 + int64(i) // each would send a different batch
				if err := s.AdvanceNotificationCursor(ctx, "ops", from, to, t0); err != nil {
					errs <- err
					return
				}
				won <- to
			}()
		}
		wg.Wait()
		close(won)
		close(errs)
		if len(won) != 1 {
			t.Fatalf("round %d: %d replicas moved the cursor, want 1", round, len(won))
		}
		for err := range errs {
			wantErr(t, err, store.ErrCursorMoved, "a losing replica")
		}
		to := <-won
		got, err := s.NotificationCursors(ctx)
		must(t, err)
		if len(got) != 1 || got[0].LastEvent != to {
			t.Fatalf("round %d: the winner moved it to %d, the store has %+v", round, to, got)
		}
		must(t, s.AdvanceNotificationCursor(ctx, "ops", to, from+20, t0)) // where the next round starts
	}
}

// testPrunedEvents: Prune keeps the newest event id it deleted as the
// watermark's PrunedEvents, which never goes back.
func testPrunedEvents(t *testing.T, s store.Store) {
	ctx := t.Context()
	w, err := s.Watermark(ctx)
	must(t, err)
	if w.PrunedEvents != 0 {
		t.Fatalf("a new store has pruned through event %d", w.PrunedEvents)
	}
	for i := range 4 {
		ev := rc.Event{Kind: "release_rejected", Channel: "prod", Wave: -1, Reason: rc.Reason{Code: "crafted", Message: fmt.Sprint(i)}}
		must(t, s.AppendEvents(ctx, t0.Add(time.Duration(i)*time.Hour), []rc.Event{ev}))
	}
	evs, err := s.Events(ctx, proto.EventQuery{})
	must(t, err)
	if len(evs) != 4 {
		t.Fatalf("%d events", len(evs))
	}
	_, _, err = s.Prune(ctx, t0.Add(90*time.Minute))
	must(t, err)
	if w, err = s.Watermark(ctx); err != nil || w.PrunedEvents != evs[1].ID {
		t.Fatalf("after pruning two events: pruned through %d, %v; want %d", w.PrunedEvents, err, evs[1].ID)
	}
	_, _, err = s.Prune(ctx, t0)
	must(t, err)
	if w, err = s.Watermark(ctx); err != nil || w.PrunedEvents != evs[1].ID || w.Events != evs[3].ID {
		t.Fatalf("after pruning nothing: %+v, %v; want pruned through %d, newest %d", w, err, evs[1].ID, evs[3].ID)
	}
}
