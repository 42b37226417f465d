package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// AddIntent records an operator intent (ErrDuplicate for a known id).
func (s *db) AddIntent(ctx context.Context, in reconciler.Intent) error {
	return s.AddSignedIntent(ctx, in, nil)
}

// AddSignedIntent records an intent with the signed document it came
// with, kept as the JSON of {document, signature} (ErrDuplicate for a
// known id).
func (s *db) AddSignedIntent(ctx context.Context, in reconciler.Intent, signed *proto.SignedIntent) error {
	if in.ID == "" {
		return fmt.Errorf("store: add intent: empty id")
	}
	kept := ""
	if signed != nil {
		b, err := json.Marshal(signed)
		if err != nil {
			return fmt.Errorf("store: add intent %s: %w", in.ID, err)
		}
		kept = string(b)
	}
	var n int64
	err := s.write(ctx, func(tx *txn) error {
		var err error
		wave := -1
		if in.Wave != nil {
			wave = *in.Wave
		}
		n, err = tx.exec(ctx, `INSERT INTO intents (id, rollout_id, kind, actor, at, comment, wave, signed) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO NOTHING`, in.ID, in.RolloutID, in.Kind, in.Actor, micros(in.At), in.Comment, wave, kept)
		if err != nil || n == 0 {
			return err
		}
		return tx.bumpChanges(ctx)
	})
	if err != nil {
		return fmt.Errorf("store: add intent %s: %w", in.ID, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: intent %q", ErrDuplicate, in.ID)
	}
	return nil
}

// intentCols are the columns scanIntent reads.
const intentCols = "id, rollout_id, kind, actor, at, comment, consumed, result, wave, signed"

// scanIntent reads one intents row (intentCols).
func scanIntent(rs row) (IntentRecord, error) {
	var (
		rec            IntentRecord
		at             int64
		consumed, wave int
		result, signed string
	)
	if err := rs.Scan(&rec.ID, &rec.RolloutID, &rec.Kind, &rec.Actor, &at, &rec.Comment, &consumed, &result, &wave, &signed); err != nil {
		return rec, err
	}
	rec.At, rec.Wave = fromMicros(at), waveOf(wave)
	if consumed != 0 {
		var r reconciler.IntentResult
		if err := unmarshal(result, &r); err != nil {
			return rec, err
		}
		rec.Result = &r
	}
	if signed != "" {
		var si proto.SignedIntent
		if err := json.Unmarshal([]byte(signed), &si); err != nil {
			return rec, err
		}
		rec.Signed = &si
	}
	return rec, nil
}

// Intents returns a rollout's intents (or all), oldest first.
func (s *db) Intents(ctx context.Context, rolloutID string) ([]IntentRecord, error) {
	where, args := "", []any{}
	if rolloutID != "" {
		where, args = " WHERE rollout_id = ?", append(args, rolloutID)
	}
	out := []IntentRecord{}
	err := s.read(ctx, func(tx *txn) error {
		var err error
		out, err = collect(ctx, tx, out, scanIntent, "SELECT "+intentCols+" FROM intents"+where+" ORDER BY at, id", args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: intents: %w", err)
	}
	return out, nil
}

// waveOf is the wave an intents row names: -1 is none.
func waveOf(wave int) *int {
	if wave < 0 {
		return nil
	}
	return &wave
}

// Intent returns an intent and its result (ErrNotFound).
func (s *db) Intent(ctx context.Context, id string) (IntentRecord, error) {
	var rec IntentRecord
	err := s.read(ctx, func(tx *txn) error {
		var err error
		rec, err = scanIntent(tx.queryRow(ctx, "SELECT "+intentCols+" FROM intents WHERE id = ?", id))
		return err
	})
	if errors.Is(err, errNoRows) {
		return IntentRecord{}, fmt.Errorf("%w: intent %q", ErrNotFound, id)
	}
	if err != nil {
		return IntentRecord{}, fmt.Errorf("store: intent %s: %w", id, err)
	}
	return rec, nil
}

// Rollouts returns every rollout without hosts, newest first (by opening
// time, then id).
func (s *db) Rollouts(ctx context.Context) ([]reconciler.Rollout, error) {
	var out []reconciler.Rollout
	err := s.read(ctx, func(tx *txn) error {
		var err error
		out, err = collect(ctx, tx, out, func(rs row) (reconciler.Rollout, error) {
			r, fz, err := scanRollout(rs)
			if err != nil {
				return r, err
			}
			var f frozen
			if err := unmarshal(fz, &f); err != nil {
				return r, err
			}
			f.into(&r)
			return r, nil
		}, "SELECT "+rolloutCols+" FROM rollouts")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: rollouts: %w", err)
	}
	slices.SortFunc(out, func(a, b reconciler.Rollout) int {
		return cmp.Or(b.OpenedAt.Compare(a.OpenedAt), strings.Compare(b.ID, a.ID))
	})
	return out, nil
}

// Rollout returns a rollout with its hosts, sorted by hostname
// (ErrNotFound).
func (s *db) Rollout(ctx context.Context, id string) (reconciler.Rollout, error) {
	var out []reconciler.Rollout
	err := s.read(ctx, func(tx *txn) error {
		var err error
		out, err = s.loadRollouts(ctx, tx, []string{id}, true, planWhole)
		return err
	})
	if err != nil {
		return reconciler.Rollout{}, fmt.Errorf("store: rollout %s: %w", id, err)
	}
	if len(out) == 0 {
		return reconciler.Rollout{}, fmt.Errorf("%w: rollout %q", ErrNotFound, id)
	}
	return out[0], nil
}

// Watermark returns the newest event id and the change counter.
func (s *db) Watermark(ctx context.Context) (Watermark, error) {
	var w Watermark
	err := s.read(ctx, func(tx *txn) error {
		return tx.queryRow(ctx, "SELECT (SELECT COALESCE(MAX(id), 0) FROM events), changes, seen, pruned_events FROM watermark WHERE id = 1").
			Scan(&w.Events, &w.Changes, &w.Seen, &w.PrunedEvents)
	})
	if err != nil {
		return Watermark{}, fmt.Errorf("store: watermark: %w", err)
	}
	// Pruning every event must not read as a journal gone back.
	w.Events = max(w.Events, w.PrunedEvents)
	return w, nil
}

// bumpChanges counts a write a tick must see, in the writer's transaction.
func (tx *txn) bumpChanges(ctx context.Context) error {
	_, err := tx.exec(ctx, "UPDATE watermark SET changes = changes + 1 WHERE id = 1")
	return err
}

// bumpStamp counts a write, in the writer's transaction, and returns the
// new value of the counter to stamp the written rows with (host_status.seq
// and host_seen.seq, migration 0009): changes for a write a tick must see,
// seen for last-seen times, both when both. The counter's row stays locked
// until the transaction ends, so stamps follow commit order: a reader that
// read a value of the counter finds every row stamped with it, or less,
// committed.
func (tx *txn) bumpStamp(ctx context.Context, changes, seen bool) (c, sn int64, err error) {
	set := []string{}
	if changes {
		set = append(set, "changes = changes + 1")
	}
	if seen {
		set = append(set, "seen = seen + 1")
	}
	err = tx.queryRow(ctx, "UPDATE watermark SET "+strings.Join(set, ", ")+" WHERE id = 1 RETURNING changes, seen").Scan(&c, &sn)
	return c, sn, err
}

// bumpEpoch marks a write outside a tick that an input kept between ticks
// cannot follow (a manifest replaced, rollouts or hosts pruned): the next
// tick loads everything. It is a change a tick must see, too.
func (tx *txn) bumpEpoch(ctx context.Context) error {
	_, err := tx.exec(ctx, "UPDATE watermark SET epoch = epoch + 1, changes = changes + 1 WHERE id = 1")
	return err
}

// AppendEvents writes events outside a tick, stamped at, under the tick
// lock: event ids then grow in commit order, so a reader paging with
// AfterID never skips an event that commits late.
func (s *db) AppendEvents(ctx context.Context, at time.Time, events []reconciler.Event) error {
	if len(events) == 0 {
		return nil
	}
	err := s.write(ctx, func(tx *txn) error {
		if err := tx.lockTick(ctx); err != nil {
			return err
		}
		return tx.insertEvents(ctx, newEncoder(), at, events)
	})
	if err != nil {
		return fmt.Errorf("store: append events: %w", err)
	}
	return nil
}

// Event query limits.
const (
	DefaultEventLimit = 1000
	MaxEventLimit     = 10000
)

// Events returns journal entries matching q, in ID order: after AfterID,
// at most Limit (DefaultEventLimit when zero or negative, at most
// MaxEventLimit), the oldest such or, with q.Newest, the newest.
func (s *db) Events(ctx context.Context, q proto.EventQuery) ([]proto.Event, error) {
	where := []string{"id > ?"}
	args := []any{q.AfterID}
	for _, f := range []struct{ col, v string }{{"rollout_id", q.RolloutID}, {"host", q.Host}, {"channel", q.Channel}} {
		if f.v != "" {
			where = append(where, f.col+" = ?")
			args = append(args, f.v)
		}
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultEventLimit
	}
	limit = min(limit, MaxEventLimit)
	args = append(args, limit)
	order := "ASC"
	if q.Newest {
		order = "DESC"
	}
	out := []proto.Event{}
	err := s.read(ctx, func(tx *txn) error {
		reasons := reasonDecoder{}
		var err error
		out, err = collect(ctx, tx, out, func(rs row) (proto.Event, error) {
			var (
				e               proto.Event
				at              int64
				reason, budgets string
			)
			if err := rs.Scan(&e.ID, &at, &e.Kind, &e.RolloutID, &e.Channel, &e.Wave, &e.Host, &e.From, &e.To, &reason, &budgets); err != nil {
				return e, err
			}
			e.At = fromMicros(at)
			r, err := reasons.decode(reason)
			if err != nil {
				return e, err
			}
			e.Reason = proto.DecisionReason(r)
			e.Budgets, err = decodeEventBudgets(budgets)
			return e, err
		}, "SELECT id, "+eventCols+" FROM events WHERE "+strings.Join(where, " AND ")+" ORDER BY id "+order+" LIMIT ?", args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: events: %w", err)
	}
	if q.Newest {
		slices.Reverse(out)
	}
	return out, nil
}

// Prune deletes, under the tick lock, events older than before, and
// terminal rollouts last updated before it that are not the latest of
// their channel, with their hosts, manifests, measurements and forecasts.
// A rollout that still matters to a tick — a host in flight, or an
// unconsumed intent naming it — is kept until it no longer does. The
// release log loses the refs whose fate is settled and last changed
// before it: superseded and refused ones, and opened ones whose rollout
// went. It returns how many events and rollouts went.
func (s *db) Prune(ctx context.Context, before time.Time) (events, rollouts int64, err error) {
	cut := micros(before)
	err = s.write(ctx, func(tx *txn) error {
		if err := tx.lockTick(ctx); err != nil {
			return err
		}
		// The newest event deleted marks the journal for its readers
		// (Watermark.PrunedEvents): a notification cursor below it missed
		// events.
		var newest int64
		if err := tx.queryRow(ctx, "SELECT COALESCE(MAX(id), 0) FROM events WHERE at < ?", cut).Scan(&newest); err != nil {
			return err
		}
		n, err := tx.exec(ctx, "DELETE FROM events WHERE at < ?", cut)
		if err != nil {
			return err
		}
		events = n
		if _, err := tx.exec(ctx, "UPDATE watermark SET pruned_events = ? WHERE id = 1 AND pruned_events < ?", newest, newest); err != nil {
			return err
		}
		l, err := loadLiveness(ctx, tx)
		if err != nil {
			return err
		}
		var ids []string
		for _, h := range l.heads {
			if l.prunable(h, cut) {
				ids = append(ids, h.id)
			}
		}
		err = inChunks(ids, idChunk, func(chunk []string) error {
			// Hosts go with their rollout (no foreign key on PostgreSQL:
			// 0011), manifests, measurements and forecasts too (ON DELETE
			// CASCADE).
			for _, table := range []string{"rollout_hosts", "rollout_hosts_owed"} {
				if _, err := tx.exec(ctx, "DELETE FROM "+table+" WHERE rollout_id IN ("+placeholders(len(chunk))+")", anys(chunk)...); err != nil {
					return err
				}
			}
			n, err := tx.exec(ctx, "DELETE FROM rollouts WHERE id IN ("+placeholders(len(chunk))+")", anys(chunk)...)
			rollouts += n
			return err
		})
		if err != nil {
			return err
		}
		if rollouts > 0 {
			if err := tx.bumpEpoch(ctx); err != nil {
				return err
			}
		}
		return pruneReleaseLog(ctx, tx, cut)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("store: prune: %w", err)
	}
	return events, rollouts, nil
}
