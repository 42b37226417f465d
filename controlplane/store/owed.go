package store

import (
	"context"
	"fmt"

	"github.com/nixfleet/nixfleet/controlplane/kept"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// The tick that opens a rollout writes a row per host of it. At 100,000
// hosts those rows take half a second to write, and the first wave's
// dispatch would wait for them. So a tick writes the rollout and the
// hosts it dispatched (or otherwise moved), marks the rollout in
// rollout_hosts_owed, and commits; the hosts still Pending follow in a
// second transaction right after the tick reported (TickParams.Report:
// the control plane hands the dispatch to the agents meanwhile), which
// removes the mark (rfcs/0006 §Tick loop 6).
//
// Nothing decides from the missing rows: the leader's kept input has
// them, and its Keeper the rows (kept.Owed). When the second transaction fails, the leader writes them at the
// start of its next tick, before it loads anything. When the leader
// stopped in between, the next one to load in full writes what a mark
// says is missing first, from the rollout's manifest, as the open made
// them (reconciler.PendingHost). Readers other than the leader's ticks
// (the API's pages and counts) may meanwhile see the rollout with only
// its moved hosts, for as long as the second transaction takes.

// deferHosts marks a new rollout as owing rows, which the tick's
// transaction collects (txn.owed).
func (tx *txn) deferHosts(ctx context.Context, rolloutID string, rows []hostRow) error {
	if _, err := tx.exec(ctx, "INSERT INTO rollout_hosts_owed (rollout_id) VALUES (?)", rolloutID); err != nil {
		return fmt.Errorf("mark: %w", err)
	}
	tx.owed = append(tx.owed, rows...)
	tx.owedIDs = append(tx.owedIDs, rolloutID)
	return nil
}

// claimOwed takes the rows that updates in the same tick touch out of
// what the tick defers: they are inserted by the tick, with the update's
// values. It returns the rows to insert and those to update.
func (tx *txn) claimOwed(rows []hostRow) (insert, update []hostRow) {
	if len(tx.owed) == 0 {
		return nil, rows
	}
	type key struct{ rollout, host string }
	at := make(map[key]int, len(tx.owed))
	for i, r := range tx.owed {
		at[key{r.RolloutID, r.Host.Hostname}] = i
	}
	claimed := make([]bool, len(tx.owed))
	for _, r := range rows {
		if i, ok := at[key{r.RolloutID, r.Host.Hostname}]; ok {
			claimed[i] = true
			insert = append(insert, r)
			continue
		}
		update = append(update, r)
	}
	if len(insert) > 0 {
		kept := tx.owed[:0]
		for i, r := range tx.owed {
			if !claimed[i] {
				kept = append(kept, r)
			}
		}
		tx.owed = kept
	}
	return insert, update
}

// writeOwed writes owed rows and removes their rollouts' marks. again
// means they may have been written already (a retry, a repair): rows
// that exist are kept.
func (tx *txn) writeOwed(ctx context.Context, rows []hostRow, ids []string, again bool) error {
	enc := newEncoder()
	if !again {
		if err := tx.insertHosts(ctx, enc, rows); err != nil {
			return err
		}
	} else if len(rows) > 0 {
		values, err := hostTable(enc, rows)
		if err != nil {
			return err
		}
		if err := tx.insertRows(ctx, "INSERT INTO rollout_hosts ("+hostCols+")", " ON CONFLICT (rollout_id, hostname) DO NOTHING",
			hostColCount, flatten(values, hostColCount)); err != nil {
			return err
		}
	}
	return inChunks(ids, idChunk, func(chunk []string) error {
		_, err := tx.exec(ctx, "DELETE FROM rollout_hosts_owed WHERE rollout_id IN ("+placeholders(len(chunk))+")", anys(chunk)...)
		return err
	})
}

// flushOwed is the second transaction of a tick that deferred rows: it
// writes them while p's lease still holds, and extends the lease as the
// tick did. On failure they stay owed in k, for the lease's next tick.
func (s *db) flushOwed(ctx context.Context, p TickParams, k *kept.Keeper, o *kept.Owed) {
	err := s.writeTick(ctx, func(tx *txn) error {
		if err := tx.lockTick(ctx); err != nil {
			return err
		}
		if err := checkLease(ctx, tx, p.Lease, utcMicro(p.Clock())); err != nil {
			return err
		}
		if err := tx.writeOwed(ctx, o.Rows, o.IDs, false); err != nil {
			return err
		}
		return extendTickLease(ctx, tx, p.Lease, p.LeaseTTL, p.Clock)
	})
	if err != nil {
		k.Owed = o
	}
}

// settleOwed runs at the start of a tick, in its transaction, before it
// loads: rows the lease's last tick could not write (k.Owed) are written
// now (wrote: clear k.Owed once this transaction commits); a tick that
// loads in full (full) first writes whatever a mark says is missing, and
// reports whether it wrote any (repaired).
func settleOwed(ctx context.Context, s *db, tx *txn, k *kept.Keeper, l Lease, full bool) (wrote, repaired bool, err error) {
	if o := k.Owed; o != nil {
		if o.Lease != keptLease(l) {
			// Another leader's ticks may have come between: the marks
			// say what is missing.
			k.Owed, full = nil, true
		} else {
			if err := tx.writeOwed(ctx, o.Rows, o.IDs, true); err != nil {
				return false, false, fmt.Errorf("store: owed rows: %w", err)
			}
			wrote = true
		}
	}
	if !full {
		return wrote, false, nil
	}
	ids, err := stringSet(ctx, tx, "SELECT rollout_id FROM rollout_hosts_owed")
	if err != nil {
		return false, false, err
	}
	for id := range ids {
		rows, err := s.missingRows(ctx, tx, id)
		if err == nil {
			err = tx.writeOwed(ctx, rows, []string{id}, true)
		}
		if err != nil {
			return false, false, fmt.Errorf("store: rollout %s: owed rows: %w", id, err)
		}
		repaired = repaired || len(rows) > 0
	}
	return wrote, repaired, nil
}

// missingRows are the Pending rows of the hosts of a rollout's manifest
// that it has no row for, as the tick that opened it made them.
func (s *db) missingRows(ctx context.Context, tx *txn, id string) ([]hostRow, error) {
	rs, err := s.loadRollouts(ctx, tx, []string{id}, true, planWhole)
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	r := rs[0]
	var body []byte
	if err := tx.queryRow(ctx, "SELECT body FROM rollout_manifests WHERE rollout_id = ?", id).Scan(&body); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	m, err := proto.DecodeRolloutManifest(body)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	have := make(map[string]bool, len(r.Hosts))
	for _, h := range r.Hosts {
		have[h.Hostname] = true
	}
	var rows []hostRow
	for _, hw := range m.HostSet {
		if !have[hw.Hostname] {
			h := reconciler.PendingHost(hw, r.Budgets, r.OpenedAt)
			rows = append(rows, hostRow{RolloutID: id, Host: &h})
		}
	}
	return rows, nil
}
