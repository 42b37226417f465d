package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// The release log (table channel_refs, rfcs/0006 §Release log): every
// push the source read, one row each time a channel's ref moved, and its
// fate (proto.ReleaseFates). A channel's latest row with a commit is where
// the source last saw its ref: a ref read again at that commit (a poll, a
// restart) is the same push, and adds no row. Four writers keep it, all
// under the tick lock:
//
//  1. PutReleases records a verified release as pending (or with the fate
//     its ref already has, when another commit carried the same release),
//     and marks the channel's previous ref superseded when it had not
//     opened, with a ref_superseded event;
//  2. PutReleases, meeting the channel's current release at another
//     commit than the latest row's (the ref moved back to it), records
//     that push with the release's fate;
//  3. RefuseRelease records a refused one;
//  4. a tick moves pending, waiting and deferred refs to the fate its
//     rollout_opened, ref_waiting and rollout_deferred events say.

// RefusedRelease is a channel ref the source refused: verification failed,
// the release was a replay, or it named a rollout its channel opened before
// (ErrReusedRef).
type RefusedRelease struct {
	Channel string
	// Commit is the git commit the channel ref pointed to.
	Commit string
	// Ref is the release's meta.ciCommit when verification got that far
	// (a replay), else empty.
	Ref      string
	SignedAt time.Time
	// Code and Message say why.
	Code    string
	Message string
	// At is when the source refused it.
	At time.Time
}

// openFates are the fates a tick may still change.
const openFates = "('" + proto.FatePending + "', '" + proto.FateWaiting + "', '" + proto.FateDeferred + "')"

// refRow is a release log row's changeable part.
type refRow struct {
	fate, by, code, message string
}

// logRelease records a verified release in the release log, in a
// transaction that holds the tick lock and has just made it the channel's
// current release; prevRef is the ref it replaced ("" when none). A ref
// replaced before it opened is superseded, with an event. now stamps what
// it writes.
func logRelease(ctx context.Context, tx *txn, r Release, prevRef string, now time.Time) error {
	id := proto.RolloutID(r.Channel, r.Ref)
	if prevRef != "" && prevRef != r.Ref {
		prevID := proto.RolloutID(r.Channel, prevRef)
		msg := fmt.Sprintf("%s replaced it before it opened: a channel opens only its latest release", r.Ref)
		n, err := tx.exec(ctx, "UPDATE channel_refs SET fate = ?, blocked_by = ?, code = ?, message = ?, updated_at = ? WHERE rollout_id = ? AND fate IN "+openFates,
			proto.FateSuperseded, r.Ref, codes.Superseded, msg, micros(now), prevID)
		if err != nil {
			return fmt.Errorf("release log: supersede %s: %w", prevID, err)
		}
		if n > 0 {
			ev := reconciler.Event{Kind: reconciler.EventRefSuperseded, RolloutID: prevID, Channel: r.Channel, Wave: -1,
				Reason: reconciler.Reason{Code: codes.Superseded, Message: msg}}
			if err := tx.insertEvents(ctx, newEncoder(), now, []reconciler.Event{ev}); err != nil {
				return fmt.Errorf("release log: supersede %s: %w", prevID, err)
			}
		}
	}
	f, err := fateOf(ctx, tx, id)
	if err != nil {
		return err
	}
	return putRef(ctx, tx, r.Channel, r.SourceCommit, r.Ref, id, r.SignedAt, f, now, true)
}

// logCurrent records that the source met the channel's current release r
// again, in a transaction that holds the tick lock: a push when the
// channel's latest row names another commit (the ref moved back to the
// release, after a refused push, say), with the release's fate; nothing
// when it names this one (a poll or a restart reading the ref again).
func logCurrent(ctx context.Context, tx *txn, r Release, now time.Time) error {
	id := proto.RolloutID(r.Channel, r.Ref)
	f, err := fateOf(ctx, tx, id)
	if err != nil {
		return err
	}
	return putRef(ctx, tx, r.Channel, r.SourceCommit, r.Ref, id, r.SignedAt, f, now, false)
}

// fateOf is the fate a verified release of rollout id takes: that of the
// release's latest row still open or opened (the same release seen
// through another commit, or re-signed), else opened when its rollout
// exists, else pending.
func fateOf(ctx context.Context, tx *txn, id string) (refRow, error) {
	f := refRow{fate: proto.FatePending, code: codes.RefMoved, message: "verified; the next tick decides what it opens"}
	err := tx.queryRow(ctx, `SELECT fate, blocked_by, code, message FROM channel_refs
		WHERE rollout_id = ? AND fate NOT IN (?, ?) ORDER BY id DESC LIMIT 1`, id, proto.FateSuperseded, proto.FateRefused).
		Scan(&f.fate, &f.by, &f.code, &f.message)
	switch {
	case errors.Is(err, errNoRows):
		var one int
		err = tx.queryRow(ctx, "SELECT 1 FROM rollouts WHERE id = ?", id).Scan(&one)
		if err == nil {
			return refRow{fate: proto.FateOpened, code: codes.RefMoved, message: "its rollout is open"}, nil
		} else if !errors.Is(err, errNoRows) {
			return f, fmt.Errorf("release log: %w", err)
		}
	case err != nil:
		return f, fmt.Errorf("release log: %w", err)
	}
	return f, nil
}

// putRef writes the row of a push of channel to commit. The channel's
// latest row with a commit is where the source last saw its ref: another
// commit there means the ref moved, and the push gets a new row; the same
// commit is the same push read again, whose row takes the new values when
// replace is set or it was refused, and keeps when it was seen. Without a
// commit (rows older than the log), the row of the same rollout id
// without one is the push's.
func putRef(ctx context.Context, tx *txn, channel, commit, ref, rolloutID string, signed time.Time, f refRow, now time.Time, replace bool) error {
	signedAt := int64(0)
	if !signed.IsZero() {
		signedAt = micros(signed)
	}
	var rowID int64
	var rowCommit, fate string
	lookup, args := "commit_hash <> ''", []any{channel}
	if commit == "" {
		lookup, args = "commit_hash = '' AND rollout_id = ?", []any{channel, rolloutID}
	}
	err := tx.queryRow(ctx, "SELECT id, commit_hash, fate FROM channel_refs WHERE channel = ? AND "+lookup+" ORDER BY id DESC LIMIT 1", args...).
		Scan(&rowID, &rowCommit, &fate)
	switch {
	case errors.Is(err, errNoRows) || (err == nil && rowCommit != commit):
		_, err = tx.exec(ctx, `INSERT INTO channel_refs (channel, commit_hash, ref, rollout_id, seen_at, signed_at, fate, blocked_by, code, message, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			channel, commit, ref, rolloutID, micros(now), signedAt, f.fate, f.by, f.code, f.message, micros(now))
	case err != nil:
	case replace || fate == proto.FateRefused:
		_, err = tx.exec(ctx, `UPDATE channel_refs SET ref = ?, rollout_id = ?, signed_at = ?, fate = ?, blocked_by = ?, code = ?, message = ?, updated_at = ?
			WHERE id = ?`, ref, rolloutID, signedAt, f.fate, f.by, f.code, f.message, micros(now), rowID)
	}
	if err != nil {
		return fmt.Errorf("release log: %s at %s: %w", channel, commit, err)
	}
	return nil
}

// RefuseRelease records a refused channel ref in the release log, under
// the tick lock. A commit the log already holds with another fate (a
// release accepted once, and refused when read again: stale by now, or a
// replay of it) keeps that fate: the journal's release_rejected event
// tells of the new refusal.
func (s *db) RefuseRelease(ctx context.Context, r RefusedRelease) error {
	if r.Channel == "" || r.Code == "" {
		return errors.New("store: refuse release: channel and code are required")
	}
	rolloutID := ""
	if r.Ref != "" {
		rolloutID = proto.RolloutID(r.Channel, r.Ref)
	}
	err := s.write(ctx, func(tx *txn) error {
		if err := tx.lockTick(ctx); err != nil {
			return err
		}
		return putRef(ctx, tx, r.Channel, r.Commit, r.Ref, rolloutID, r.SignedAt,
			refRow{fate: proto.FateRefused, code: r.Code, message: r.Message}, r.At, false)
	})
	if err != nil {
		return fmt.Errorf("store: refuse release: %w", err)
	}
	return nil
}

// applyReleaseFates moves the refs a tick decided about to their new
// fate, from its events: rollout_opened (opened), ref_waiting (waiting
// for the rollout its deferral names) and rollout_deferred (deferred by
// what its deferral names). Only pending, waiting and deferred refs move.
func (tx *txn) applyReleaseFates(ctx context.Context, out *reconciler.Output, now time.Time) error {
	var blockers map[string]string // by rollout id
	for _, ev := range out.Events {
		var fate string
		switch ev.Kind {
		case reconciler.EventRolloutOpened:
			fate = proto.FateOpened
		case reconciler.EventRefWaiting:
			fate = proto.FateWaiting
		case reconciler.EventRolloutDeferred:
			fate = proto.FateDeferred
		default:
			continue
		}
		by := ""
		if fate != proto.FateOpened {
			if blockers == nil {
				blockers = make(map[string]string, len(out.Deferrals))
				for _, d := range out.Deferrals {
					blockers[proto.RolloutID(d.Channel, d.Ref)] = d.BlockedBy
				}
			}
			by = blockers[ev.RolloutID]
		}
		if _, err := tx.exec(ctx, "UPDATE channel_refs SET fate = ?, blocked_by = ?, code = ?, message = ?, updated_at = ? WHERE rollout_id = ? AND fate IN "+openFates,
			fate, by, ev.Reason.Code, ev.Reason.Message, micros(now), ev.RolloutID); err != nil {
			return fmt.Errorf("release log: %s: %w", ev.RolloutID, err)
		}
	}
	return nil
}

// pruneReleaseLog deletes the refs whose fate is settled and last changed
// before cut: superseded and refused ones, and opened ones whose rollout
// was pruned; never a channel's latest row with a commit (where its ref
// stands: reading it again must stay no new push).
func pruneReleaseLog(ctx context.Context, tx *txn, cut int64) error {
	_, err := tx.exec(ctx, `DELETE FROM channel_refs WHERE updated_at < ? AND (fate IN (?, ?)
		OR (fate = ? AND NOT EXISTS (SELECT 1 FROM rollouts r WHERE r.id = channel_refs.rollout_id)))
		AND id NOT IN (SELECT max(id) FROM channel_refs WHERE commit_hash <> '' GROUP BY channel)`,
		cut, proto.FateSuperseded, proto.FateRefused, proto.FateOpened)
	return err
}

// ReleaseLog returns the pushes seen that q selects, newest first (by
// when seen, then by insertion).
func (s *db) ReleaseLog(ctx context.Context, q ReleaseQuery) ([]proto.Release, error) {
	var where []string
	var args []any
	for _, f := range []struct{ col, v string }{{"c.channel", q.Channel}, {"c.rollout_id", q.RolloutID}} {
		if f.v != "" {
			where = append(where, f.col+" = ?")
			args = append(args, f.v)
		}
	}
	// An opened ref comes with its rollout's state and reason: how the
	// release stands, or ended.
	query := "SELECT c.channel, c.commit_hash, c.ref, c.rollout_id, c.seen_at, c.signed_at, c.fate, c.blocked_by, c.code, c.message, c.updated_at, " +
		"COALESCE(r.state, ''), COALESCE(r.reason, '') FROM channel_refs c LEFT JOIN rollouts r ON r.id = c.rollout_id AND c.fate = 'opened'"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	out := []proto.Release{}
	err := s.read(ctx, func(tx *txn) error {
		latest, err := latestRollouts(ctx, tx)
		if err != nil {
			return err
		}
		reasons := reasonDecoder{}
		out, err = collect(ctx, tx, out, func(rs row) (proto.Release, error) {
			var (
				r                     proto.Release
				seen, signed, updated int64
				state, reason         string
			)
			err := rs.Scan(&r.Channel, &r.Commit, &r.Ref, &r.RolloutID, &seen, &signed, &r.Fate, &r.By,
				&r.Reason.Code, &r.Reason.Message, &updated, &state, &reason)
			if err != nil {
				return r, err
			}
			r.SeenAt, r.UpdatedAt = fromMicros(seen), fromMicros(updated)
			if signed != 0 {
				r.SignedAt = fromMicros(signed)
			}
			if state != "" {
				why, err := reasons.decode(reason)
				if err != nil {
					return r, err
				}
				r.Rollout = &proto.ReleaseRollout{State: state, Reason: proto.DecisionReason(why), Latest: latest[r.Channel] == r.RolloutID}
			}
			return r, nil
		}, query+" ORDER BY c.seen_at DESC, c.id DESC", args...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: release log: %w", err)
	}
	return out, nil
}

// ReleaseQuery selects refs of the release log. Zero fields do not
// filter.
type ReleaseQuery struct {
	Channel string
	// RolloutID selects the refs of one release: "<channel>@<ref>".
	RolloutID string
}
