package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nixfleet/nixfleet/controlplane/kept"
	"github.com/nixfleet/nixfleet/reconciler"
)

// The SQL side of the kept input (package kept): a leading replica keeps
// the reconciler's Input between its ticks, and a tick reads only what
// changed since the previous one:
//
//  1. The first tick under a lease (holder and epoch), a tick after the
//     watermark's epoch moved (a manifest replaced, rollouts or hosts
//     pruned), a tick after one that failed, and a tick whose caller asks
//     for it (TickParams.Full) load everything, as a cold start does.
//  2. Any other tick reads the watermark's counters, then the host
//     statuses stamped with a changes value above the last one read and
//     not above the current one, and the last-seen times likewise with
//     the seen counter (bumpStamp: stamps follow commit order, so none is
//     missed); the channels, the unconsumed intents and the measurements
//     of running waves, which are few, in full; and a rollout an intent
//     names that the input does not hold (it becomes live): catchUp.
//  3. After the tick commits, its Output is applied to the kept input
//     (kept.Input.Apply): it is again what a cold load would read. A tick
//     that fails leaves no kept input.
//  4. VerifyKept compares a copy of the kept input with a cold load from
//     one snapshot, beside the ticks; TickParams.Verify does the same in
//     the tick's transaction (kept.Compare, with lateHosts).

func readMarks(ctx context.Context, tx *txn) (kept.Marks, error) {
	var m kept.Marks
	err := tx.queryRow(ctx, "SELECT changes, seen, epoch FROM watermark WHERE id = 1").Scan(&m.Changes, &m.Seen, &m.Epoch)
	if err != nil {
		return m, fmt.Errorf("store: watermark: %w", err)
	}
	return m, nil
}

// follows reports whether an input kept at marks k can be brought up to
// the store's marks m by reading what was stamped since.
func follows(k, m kept.Marks) bool {
	return m.Epoch == k.Epoch && m.Changes >= k.Changes && m.Seen >= k.Seen
}

// TickReport says what a tick did, for its caller (TickParams.Report).
type TickReport struct {
	// Full: the tick loaded its input in full (a cold load).
	Full bool
	// Skipped: nothing the reconciler reads had changed and the previous
	// tick's quiet time had not passed (TickParams.SkipBefore), so decide
	// was not called and nothing but the watch was written.
	Skipped bool
	// Changed: something a tick must see was written since the previous
	// tick (a status, an activation, an intent, a release, a
	// measurement); with Full, always set.
	Changed bool
	// More: more statuses changed than the tick read
	// (TickParams.MaxStatuses), or the reconciler stopped at its bound
	// (reconciler.Output.More); the next tick goes on, and should come at
	// once.
	More bool
	// Diverged: TickParams.Verify found the kept input different from
	// a cold load (which was used); Divergence says where.
	Diverged   bool
	Divergence string
	// Assignments are the hosts whose assignment (reconciler.Assignment:
	// their record in the rollout that drives them) the tick changed, with
	// the new one (nil: the host is in no live rollout any more); with
	// Full, every host's.
	Assignments map[string]*reconciler.Assignment
	// Early: this report comes first, with the assignments of the hosts
	// whose activation the tick may have started (those it updated, and
	// those a rollout it opened dispatched to), and is not Full; a second
	// report, with the tick's flags, follows with the rest of the
	// assignments it changed (with Full, every host's). A tick that opens
	// a rollout of 100,000 hosts changes every host's assignment, which
	// takes a while to work out: the hosts to wake learn theirs first.
	Early bool
}

// errReload: the kept input cannot follow; load everything.
var errReload = errors.New("store: the kept input must be loaded again")

// catchUp reads what changed between the kept input's marks and m, the
// counters the tick read first: statuses, last-seen times, and the
// rollouts the unconsumed intents name that it does not hold. It reports whether anything a tick must see changed, and
// whether more statuses changed than it read (errReload when the input
// cannot follow). At most limit statuses are read (0: every one), in the
// order of their stamps and never part of one stamp's: the rest are the
// next tick's, as if they were written after this one.
func (s *db) catchUp(ctx context.Context, tx *txn, r *kept.Input, m kept.Marks, intents []reconciler.Intent, limit int) (changed, more bool, err error) {
	if !follows(r.Marks, m) {
		return false, false, errReload
	}
	changed = m.Changes != r.Marks.Changes
	if changed {
		rows, err := changedStatuses(ctx, tx, r.Marks.Changes, m.Changes, limit)
		if err != nil {
			return false, false, err
		}
		if limit > 0 && len(rows) > limit {
			// Stop before the stamp of the first row past the limit; when
			// one stamp holds more than the limit, read that stamp whole.
			cut := rows[limit].seq
			keep := 0
			for keep < len(rows) && rows[keep].seq < cut {
				keep++
			}
			if keep == 0 {
				if rows, err = changedStatuses(ctx, tx, r.Marks.Changes, cut, 0); err != nil {
					return false, false, err
				}
				keep, cut = len(rows), cut+1
			}
			rows, m.Changes, more = rows[:keep], cut-1, cut <= m.Changes
		}
		for _, c := range rows {
			st, err := decodeStatus(c.body)
			if err != nil {
				return false, false, fmt.Errorf("store: load changed statuses: host %s: %w", c.name, err)
			}
			r.Observe(c.name, observed(st, r.Observed(c.name)))
		}
	}
	// A last-seen time is written after the status it goes with: while
	// statuses wait for the next tick, so do the times, lest a tick see a
	// host heard after a status it has not read.
	if more {
		m.Seen = r.Marks.Seen
	}
	if m.Seen != r.Marks.Seen {
		err := eachRow(ctx, tx, func(rs row) error {
			var name string
			var at, saidAt int64
			if err := rs.Scan(&name, &at, &saidAt); err != nil {
				return err
			}
			o := r.Observed(name)
			seenTimes(&o, at, saidAt)
			r.Observe(name, o)
			return nil
		}, "SELECT hostname, last_seen, said_at FROM host_seen WHERE seq > ? AND seq <= ?", r.Marks.Seen, m.Seen)
		if err != nil {
			return false, false, fmt.Errorf("store: load last-seen times: %w", err)
		}
	}
	r.Marks = m
	// A rollout an unconsumed intent names is live (liveness.live): one
	// the input does not hold is loaded, as a cold load would.
	var missing []string
	for _, it := range intents {
		if !r.Holds(it.RolloutID) && r.Knows(it.RolloutID) && !slices.Contains(missing, it.RolloutID) {
			missing = append(missing, it.RolloutID)
		}
	}
	if len(missing) > 0 {
		rs, err := s.loadRollouts(ctx, tx, missing, true, planCached)
		if err != nil {
			return false, false, err
		}
		for i := range rs {
			r.Add(&rs[i])
		}
	}
	return changed, more, nil
}

// changedStatus is a status row stamped after the kept input's mark.
type changedStatus struct {
	name, body string
	seq        int64
}

// changedStatuses reads the statuses stamped in (after, upto], in stamp
// order: limit+1 of them when limit is set (one more, to tell where a
// stamp ends), else all.
func changedStatuses(ctx context.Context, tx *txn, after, upto int64, limit int) ([]changedStatus, error) {
	q := "SELECT hostname, status, seq FROM host_status WHERE seq > ? AND seq <= ? ORDER BY seq"
	args := []any{after, upto}
	if limit > 0 {
		q += " LIMIT ?"
		args = append(args, limit+1)
	}
	var out []changedStatus
	err := eachRow(ctx, tx, func(rs row) error {
		var c changedStatus
		if err := rs.Scan(&c.name, &c.body, &c.seq); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	}, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store: load changed statuses: %w", err)
	}
	return out, nil
}

// lateHosts reports, of names, the hosts with a status stamped after m's
// changes or a last-seen time stamped after m's seen: written after the
// kept input read its marks, in a transaction that committed before
// the cold load read them (PostgreSQL's READ COMMITTED lets each of a
// tick's statements see those; a snapshot taken after the marks were read
// holds them). Stamps only grow, so a row not among them was not written
// since, and a cold load read what the kept input holds.
func lateHosts(ctx context.Context, tx *txn, names []string, m kept.Marks) (map[string]kept.Late, error) {
	late := map[string]kept.Late{}
	err := inChunks(names, idChunk, func(chunk []string) error {
		in := placeholders(len(chunk))
		return eachRow(ctx, tx, func(rs row) error {
			var name string
			var seen int64
			if err := rs.Scan(&name, &seen); err != nil {
				return err
			}
			l := late[name]
			if seen == 1 {
				l.Seen = true
			} else {
				l.Status = true
			}
			late[name] = l
			return nil
		}, "SELECT hostname, 0 FROM host_status WHERE seq > ? AND hostname IN ("+in+")"+
			" UNION ALL SELECT hostname, 1 FROM host_seen WHERE seq > ? AND hostname IN ("+in+")",
			slices.Concat([]any{m.Changes}, anys(chunk), []any{m.Seen}, anys(chunk))...)
	})
	if err != nil {
		return nil, fmt.Errorf("store: hosts written during the tick: %w", err)
	}
	return late, nil
}
