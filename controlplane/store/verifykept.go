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
//  1. Between two ticks (holding what serializes them on this store), it
//     opens a read transaction on one snapshot (PostgreSQL: REPEATABLE
//     READ; SQLite: a read transaction) and reads the watermark there,
//     then copies the kept input. Nothing a tick writes can commit between
//     the two: ticks run one at a time, and this replica holds the lease.
//  2. It lets ticks run again, and loads everything from the snapshot,
//     with caches of its own (the ticks' stay as they are).
//  3. It compares, as a verifying tick does, but for what the snapshot
//     may hold that the copy cannot: the hosts stamped after the copy's
//     marks (lateHosts), the channels and the intents (which every tick
//     reads in full), and the rollouts that only an unconsumed intent
//     keeps live and the copy does not hold (the next tick loads them).
//
// It compares nothing when the store keeps no input, when rows a tick
// deferred are still owed, when the lease changed, or when the watermark's
// epoch moved (the next tick loads in full). On a difference, the kept
// input is dropped, so the next tick loads in full.
func (s *db) VerifyKept(ctx context.Context) (VerifyReport, error) {
	var rep VerifyReport
	s.resMu.Lock()
	locked := true
	unlock := func() {
		if locked {
			locked = false
			s.resMu.Unlock()
		}
	}
	defer unlock()
	r := s.res
	switch {
	case r == nil:
		rep.Skipped = "no input kept"
		return rep, nil
	case s.owed != nil:
		rep.Skipped = "a tick still owes host rows"
		return rep, nil
	}
	err := s.read(ctx, func(tx *txn) error {
		m, err := readMarks(ctx, tx) // the snapshot: no tick can commit before it
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
		if _, err := shadow.loadInput(ctx, tx, &cold); err != nil {
			return err
		}
		// Rollouts only the snapshot's unconsumed intents keep live.
		intended := map[string]bool{}
		for _, it := range cold.Intents {
			intended[it.RolloutID] = true
		}
		held := map[string]bool{}
		for i := range kept.Rollouts {
			held[kept.Rollouts[i].ID] = true
		}
		cold.Rollouts = slices.DeleteFunc(cold.Rollouts, func(ro reconciler.Rollout) bool {
			return !held[ro.ID] && intended[ro.ID]
		})
		cold.Channels = nil
		d, err := compareInputs(&kept, &cold, func(names []string) (map[string]bool, error) {
			return lateHosts(ctx, tx, names, marks)
		})
		if err != nil {
			return err
		}
		rep.Diverged, rep.Divergence = d != "", d
		return nil
	})
	if err != nil {
		return VerifyReport{}, fmt.Errorf("store: verify the kept input: %w", err)
	}
	if rep.Diverged {
		if !locked {
			s.resMu.Lock()
			locked = true
		}
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
