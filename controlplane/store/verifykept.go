package store

import (
	"context"
	"fmt"
	"maps"

	"github.com/nixfleet/nixfleet/controlplane/kept"
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

// VerifyKept compares the input k keeps between ticks with a cold load,
// as TickParams.Verify does, but without holding the tick lock
// while it loads (rfcs/0006 §Tick loop 3): at 100,000 hosts a cold load
// takes seconds, and a release or a status change must not wait for it.
//
//  1. It opens a read transaction (PostgreSQL: REPEATABLE READ; SQLite: a
//     read transaction), then, between two ticks (holding k's lock, which
//     serializes them), reads the watermark there, which fixes the
//     snapshot, and copies the kept input. Nothing a tick writes can
//     commit between the two: ticks run one at a time, and this replica
//     holds the lease.
//  2. It lets ticks run again, and loads everything from the snapshot,
//     with caches of its own (the ticks' stay as they are).
//  3. It compares as a verifying tick does (kept.Compare), without the
//     channels, which every tick reads in full.
//
// It compares nothing when k holds no input, when rows a tick
// deferred are still owed, when the lease changed, when the watermark's
// epoch moved (the next tick loads in full), or on an in-memory SQLite
// database (one connection: the load would hold the ticks up). On a
// difference, the kept input is dropped, so the next tick loads in full.
func (s *db) VerifyKept(ctx context.Context, k *kept.Keeper) (VerifyReport, error) {
	var rep VerifyReport
	if s.dialect != dialectPostgres && s.reader == s.writer {
		rep.Skipped = "an in-memory database has one connection"
		return rep, nil
	}
	var r *kept.Input
	locked := false
	unlock := func() {
		if locked {
			locked = false
			k.Unlock()
		}
	}
	defer unlock()
	err := s.read(ctx, func(tx *txn) error {
		// The connection and the transaction are taken before the ticks
		// are held up; the snapshot is fixed by the first statement.
		k.Lock()
		locked = true
		r = k.Input
		switch {
		case r == nil:
			rep.Skipped = "no input kept"
			return nil
		case k.Owed != nil:
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
		case (kept.Lease{Holder: holder, Epoch: epoch}) != r.Lease:
			rep.Skipped = "the tick lease changed hands"
			return nil
		case !follows(r.Marks, m):
			rep.Skipped = "the next tick loads in full"
			return nil
		}
		copied, marks := r.Copy(), r.Marks
		shadow := s.shadow()
		unlock()

		var cold reconciler.Input
		lv, err := shadow.loadInput(ctx, tx, &cold)
		if err != nil {
			return err
		}
		cold.Channels = nil
		d, err := kept.Compare(&copied, &cold, lv.onlyIntended, func(names []string) (map[string]kept.Late, error) {
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
		k.Lock()
		locked = true
		if k.Input == r {
			k.Input = nil
		}
	}
	return rep, nil
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
