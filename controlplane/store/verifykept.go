package store

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/nixfleet/nixfleet/reconciler"
)

// VerifyReport says what VerifyKept found.
type VerifyReport struct {
	// Skipped says why nothing was compared, "" when something was: no
	// input kept, rows a tick still owes, or a write that makes the next
	// tick load in full anyway.
	Skipped string
	// Diverged: the kept input differed from a cold load; Divergence says
	// where. The store dropped the kept input: the next tick loads in
	// full.
	Diverged   bool
	Divergence string
}

// VerifyKept compares the input the store keeps between ticks with a cold
// load, as TickParams.Verify does, but without holding the tick lock
// while it loads (rfcs/0006 §Tick loop 3): at 100,000 hosts a cold load
// takes seconds, and a release or a status change must not wait for it.
//
//  1. It opens a read transaction (PostgreSQL: REPEATABLE READ; SQLite: a
//     read transaction), then, between two ticks (holding what serializes
//     them on this store), reads the watermark there, which fixes the
//     snapshot, and copies the kept input. Nothing a tick writes can
//     commit between the two: ticks run one at a time, and this replica
//     holds the lease.
//  2. It lets ticks run again, and loads everything from the snapshot,
//     with caches of its own (the ticks' stay as they are).
//  3. It compares as a verifying tick does (compareInputs), without the
//     channels, which every tick reads in full.
//
// It compares nothing when the store keeps no input, when rows a tick
// deferred are still owed, when the lease changed, when the watermark's
// epoch moved (the next tick loads in full), or on an in-memory SQLite
// database (one connection: the load would hold the ticks up). On a
// difference, the kept input is dropped, so the next tick loads in full.
func (s *db) VerifyKept(ctx context.Context) (VerifyReport, error) {
	var rep VerifyReport
	if s.dialect != dialectPostgres && s.reader == s.writer {
		rep.Skipped = "an in-memory database has one connection"
		return rep, nil
	}
	var r *resident
	locked := false
	unlock := func() {
		if locked {
			locked = false
			s.resMu.Unlock()
		}
	}
	defer unlock()
	err := s.read(ctx, func(tx *txn) error {
		// The connection and the transaction are taken before the ticks
		// are held up; the snapshot is fixed by the first statement.
		s.resMu.Lock()
		locked = true
		r = s.res
		switch {
		case r == nil:
			rep.Skipped = "no input kept"
			return nil
		case s.owed != nil:
			rep.Skipped = "a tick still owes host rows"
			return nil
		}
		m, err := readMarks(ctx, tx)
		if err != nil {
			return err
		}
		var holder string
		var epoch int64
		if err := tx.queryRow(ctx, "SELECT holder, epoch FROM leases WHERE name = ?", TickLease).Scan(&holder, &epoch); err != nil {
			return fmt.Errorf("store: tick lease: %w", err)
		}
		switch {
		case holder != r.holder || epoch != r.lease:
			rep.Skipped = "the tick lease changed hands"
			return nil
		case m.epoch != r.marks.epoch || m.changes < r.marks.changes || m.seen < r.marks.seen:
			rep.Skipped = "the next tick loads in full"
			return nil
		}
		kept, marks := r.copyInput(), r.marks
		shadow := s.shadow()
		unlock()

		var cold reconciler.Input
		lv, err := shadow.loadInput(ctx, tx, &cold)
		if err != nil {
			return err
		}
		cold.Channels = nil
		d, err := compareInputs(&kept, &cold, lv, func(names []string) (map[string]lateRows, error) {
			return lateHosts(ctx, tx, names, marks)
		})
		if err != nil {
			return err
		}
		rep.Diverged, rep.Divergence = d != "", d
		return nil
	})
	unlock()
	if err != nil {
		return VerifyReport{}, fmt.Errorf("store: verify the kept input: %w", err)
	}
	if rep.Diverged {
		s.resMu.Lock()
		locked = true
		if s.res == r {
			s.res = nil
		}
	}
	return rep, nil
}

// copyInput is the kept input as a tick would see it, copied so that the
// ticks that follow may change the kept one: the observed hosts, and each
// live rollout with its host list (a tick replaces a rollout's header
// whole, and its hosts' records in place).
func (r *resident) copyInput() reconciler.Input {
	var in reconciler.Input
	r.input(&in)
	in.Hosts = maps.Clone(in.Hosts)
	for i := range in.Rollouts {
		in.Rollouts[i].Hosts = slices.Clone(in.Rollouts[i].Hosts)
	}
	return in
}

// shadow is a store value on the same database whose caches start as
// copies of this one's: loads through it decode only what the ticks have
// not, and change none of what the ticks keep.
func (s *db) shadow() *db {
	c := newCache()
	s.cache.mu.Lock()
	c.fleets, c.manifests = maps.Clone(s.cache.fleets), maps.Clone(s.cache.manifests)
	c.statuses, c.frozen = maps.Clone(s.cache.statuses), maps.Clone(s.cache.frozen)
	s.cache.mu.Unlock()
	return &db{dialect: s.dialect, pool: s.pool, tickPool: s.tickPool, leasePool: s.leasePool,
		writer: s.writer, reader: s.reader, url: s.url, cache: c}
}
