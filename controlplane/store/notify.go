package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// A notification cursor is one row of notification_cursors: a webhook
// sink's place in the journal (rfcs/0006 §Notifications). Event ids grow
// in commit order (every event is written under the tick lock), so a
// reader that pages the journal after its cursor never skips an event
// that commits late. The cursor moves only forward, with one conditional
// UPDATE, so that of two replicas moving it from the same place exactly
// one succeeds.

// NotificationCursor is a sink's place in the journal.
type NotificationCursor struct {
	Sink string
	// LastEvent is the id of the last event the sink was sent or passed.
	LastEvent int64
	// UpdatedAt is when it last moved (or was set).
	UpdatedAt time.Time
}

// StartNotificationCursor returns a sink's cursor, setting it to at
// (stamped now) first when the sink has none.
func (s *db) StartNotificationCursor(ctx context.Context, sink string, at int64, now time.Time) (int64, error) {
	if sink == "" || at < 0 {
		return 0, fmt.Errorf("store: start notification cursor %q at %d: a sink and an event id are required", sink, at)
	}
	var last int64
	err := s.write(ctx, func(tx *txn) error {
		if _, err := tx.exec(ctx, `INSERT INTO notification_cursors (sink, last_event, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (sink) DO NOTHING`, sink, at, micros(now)); err != nil {
			return err
		}
		return tx.queryRow(ctx, "SELECT last_event FROM notification_cursors WHERE sink = ?", sink).Scan(&last)
	})
	if err != nil {
		return 0, fmt.Errorf("store: start notification cursor %s: %w", sink, err)
	}
	return last, nil
}

// AdvanceNotificationCursor moves a sink's cursor from from to to,
// stamped now, only if it is at from (ErrCursorMoved when it is
// elsewhere, ErrNotFound when the sink has none).
func (s *db) AdvanceNotificationCursor(ctx context.Context, sink string, from, to int64, now time.Time) error {
	if to <= from {
		return fmt.Errorf("store: advance notification cursor %s from %d to %d: a cursor moves forward only", sink, from, to)
	}
	var (
		n   int64
		cur int64
	)
	err := s.write(ctx, func(tx *txn) error {
		var err error
		n, err = tx.exec(ctx, "UPDATE notification_cursors SET last_event = ?, updated_at = ? WHERE sink = ? AND last_event = ?",
			to, micros(now), sink, from)
		if err != nil || n == 1 {
			return err
		}
		return tx.queryRow(ctx, "SELECT last_event FROM notification_cursors WHERE sink = ?", sink).Scan(&cur)
	})
	switch {
	case errors.Is(err, errNoRows):
		return fmt.Errorf("%w: notification cursor %q", ErrNotFound, sink)
	case err != nil:
		return fmt.Errorf("store: advance notification cursor %s: %w", sink, err)
	case n == 0:
		return fmt.Errorf("%w: %s is at event %d, not %d", ErrCursorMoved, sink, cur, from)
	}
	return nil
}

// NotificationCursors returns every sink's cursor, by sink name.
func (s *db) NotificationCursors(ctx context.Context) ([]NotificationCursor, error) {
	out := []NotificationCursor{}
	err := s.read(ctx, func(tx *txn) error {
		var err error
		out, err = collect(ctx, tx, out, func(rs row) (NotificationCursor, error) {
			var (
				c  NotificationCursor
				at int64
			)
			err := rs.Scan(&c.Sink, &c.LastEvent, &at)
			c.UpdatedAt = fromMicros(at)
			return c, err
		}, "SELECT sink, last_event, updated_at FROM notification_cursors ORDER BY sink")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: notification cursors: %w", err)
	}
	return out, nil
}

// DeleteNotificationCursors deletes the cursors of the sinks not in keep
// that last moved before before, and returns how many went.
func (s *db) DeleteNotificationCursors(ctx context.Context, keep []string, before time.Time) (int64, error) {
	var gone int64
	err := s.write(ctx, func(tx *txn) error {
		sinks, err := collect(ctx, tx, nil, scanString, "SELECT sink FROM notification_cursors WHERE updated_at < ?", micros(before))
		if err != nil {
			return err
		}
		sinks = slices.DeleteFunc(sinks, func(s string) bool { return slices.Contains(keep, s) })
		return inChunks(sinks, idChunk, func(chunk []string) error {
			n, err := tx.exec(ctx, "DELETE FROM notification_cursors WHERE sink IN ("+placeholders(len(chunk))+")", anys(chunk)...)
			gone += n
			return err
		})
	})
	if err != nil {
		return 0, fmt.Errorf("store: delete notification cursors: %w", err)
	}
	return gone, nil
}
