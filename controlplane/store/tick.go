package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/reconciler"
)

// Tick runs one reconcile tick in one write transaction:
//
//  1. take the tick lock (PostgreSQL: a transaction-scoped advisory lock,
//     so the ticks of every replica run one at a time; SQLite: the single
//     writer);
//  2. check that lease is the tick lease's current holder and epoch and
//     has not expired at now, holding the lease row until commit (else
//     ErrNotLeader, before decide is called);
//  3. load the Input: now (UTC, to the microsecond, as every stored time),
//     tunables, every channel's release (artifacts decoded once per hash
//     and cached), the live rollouts with their hosts (see
//     liveness.live), every observed host, the unconsumed intents and the
//     deferrals;
//  4. call decide;
//  5. apply its Output as reconciler.Apply does, relative to the loaded
//     Input, and commit.
//
// An error from decide, or from applying, rolls everything back. decide
// runs inside the transaction: it must not call the store (on SQLite it
// would wait for the writer it holds), and must not modify what the Input
// points to (decoded artifacts and frozen rollout parts are shared with
// later ticks).
func (s *db) Tick(ctx context.Context, lease Lease, now time.Time, tunables reconciler.Tunables,
	decide func(reconciler.Input) (reconciler.Output, error)) (reconciler.Output, error) {
	now = utcMicro(now)
	var out reconciler.Output
	err := s.write(ctx, func(tx *txn) error {
		if err := tx.lockTick(ctx); err != nil {
			return err
		}
		if err := checkLease(ctx, tx, lease, now); err != nil {
			return err
		}
		in := reconciler.Input{Now: now, Tunables: tunables}
		if err := s.loadInput(ctx, tx, &in); err != nil {
			return err
		}
		o, err := decide(in)
		if err != nil {
			return fmt.Errorf("store: tick: %w", err)
		}
		if err := s.apply(ctx, tx, &in, &o, now); err != nil {
			return fmt.Errorf("store: tick: apply: %w", err)
		}
		out = o
		return nil
	})
	if err != nil {
		return reconciler.Output{}, err
	}
	return out, nil
}

// checkLease locks the tick lease's row and checks that l holds it at now.
func checkLease(ctx context.Context, tx *txn, l Lease, now time.Time) error {
	if l.Name != TickLease {
		return fmt.Errorf("%w: lease %q is not the tick lease", ErrNotLeader, l.Name)
	}
	var (
		holder         string
		epoch, expires int64
	)
	err := tx.queryRow(ctx, "SELECT holder, epoch, expires_at FROM leases WHERE name = ? FOR UPDATE", TickLease).
		Scan(&holder, &epoch, &expires)
	switch {
	case errors.Is(err, errNoRows):
		return fmt.Errorf("%w: the tick lease was never taken", ErrNotLeader)
	case err != nil:
		return fmt.Errorf("store: tick lease: %w", err)
	case holder == "" || holder != l.Holder || epoch != l.Epoch:
		return fmt.Errorf("%w: the tick lease is held by %q at epoch %d, not by %q at epoch %d",
			ErrNotLeader, holder, epoch, l.Holder, l.Epoch)
	case expires <= micros(now):
		return fmt.Errorf("%w: the tick lease of %q expired at %s", ErrNotLeader, holder,
			fromMicros(expires).Format(time.RFC3339Nano))
	}
	return nil
}

// apply persists out as reconciler.Apply(in, out) describes: in is what
// the tick loaded, so updates of rollouts, hosts and channels it did not
// load are ignored, as Apply ignores them.
func (s *db) apply(ctx context.Context, tx *txn, in *reconciler.Input, out *reconciler.Output, now time.Time) error {
	enc := newEncoder()
	// Which hosts each known rollout has, computed when first needed.
	known := make(map[string][]reconciler.RolloutHost, len(in.Rollouts)+len(out.Rollouts))
	for _, r := range in.Rollouts {
		known[r.ID] = r.Hosts
	}
	members := map[string]map[string]bool{}

	// 1. Rollouts, in order: new ones with their hosts and their channel's
	// manifest; changed headers of known ones (hosts stay).
	for i := range out.Rollouts {
		u := &out.Rollouts[i]
		r := &u.Rollout
		args, err := rolloutArgs(r)
		if err != nil {
			return err
		}
		if u.New {
			if _, err := tx.exec(ctx, "INSERT INTO rollouts ("+rolloutCols+") VALUES ("+placeholders(len(args))+")", args...); err != nil {
				return fmt.Errorf("open rollout %s: %w", r.ID, err)
			}
			rows := make([]hostRow, len(r.Hosts))
			for j := range r.Hosts {
				rows[j] = hostRow{r.ID, &r.Hosts[j]}
			}
			if err := tx.insertHosts(ctx, enc, rows); err != nil {
				return fmt.Errorf("open rollout %s: hosts: %w", r.ID, err)
			}
			n, err := tx.exec(ctx, `INSERT INTO rollout_manifests (rollout_id, body, sig, hash)
				SELECT ?, manifest_body, manifest_sig, manifest_hash FROM channels WHERE channel = ? AND manifest_hash = ?`,
				r.ID, r.Channel, r.ManifestHash)
			if err != nil {
				return fmt.Errorf("open rollout %s: manifest: %w", r.ID, err)
			}
			if n == 0 {
				return fmt.Errorf("open rollout %s: channel %q has no release with manifest hash %q", r.ID, r.Channel, r.ManifestHash)
			}
			known[r.ID] = r.Hosts
			delete(members, r.ID)
			continue
		}
		if _, ok := known[r.ID]; !ok {
			continue
		}
		if _, err := tx.exec(ctx, "UPDATE rollouts SET "+setList(rolloutCols)+" WHERE id = ?", append(args[1:], r.ID)...); err != nil {
			return fmt.Errorf("update rollout %s: %w", r.ID, err)
		}
	}

	// 2. Hosts: the last update of each known host wins.
	if len(out.Hosts) > 0 {
		type key struct{ rollout, host string }
		last := make(map[key]int, len(out.Hosts))
		for i, u := range out.Hosts {
			hosts, ok := known[u.RolloutID]
			if !ok {
				continue
			}
			set := members[u.RolloutID]
			if set == nil {
				set = make(map[string]bool, len(hosts))
				for _, h := range hosts {
					set[h.Hostname] = true
				}
				members[u.RolloutID] = set
			}
			if set[u.Host.Hostname] {
				last[key{u.RolloutID, u.Host.Hostname}] = i
			}
		}
		rows := make([]hostRow, 0, len(last))
		for i := range out.Hosts {
			u := &out.Hosts[i]
			if j, ok := last[key{u.RolloutID, u.Host.Hostname}]; ok && j == i {
				rows = append(rows, hostRow{u.RolloutID, &u.Host})
			}
		}
		if err := tx.updateHosts(ctx, enc, rows); err != nil {
			return fmt.Errorf("update hosts: %w", err)
		}
	}

	// 3. Channels' last rolled refs.
	for _, u := range out.Channels {
		for _, c := range in.Channels {
			if c.Name != u.Name {
				continue
			}
			if _, err := tx.exec(ctx, "UPDATE channels SET last_rolled_ref = ? WHERE channel = ?", u.LastRolledRef, u.Name); err != nil {
				return fmt.Errorf("channel %s: %w", u.Name, err)
			}
			break
		}
	}

	// 4. Deferrals: the complete current set.
	if _, err := tx.exec(ctx, "DELETE FROM deferrals"); err != nil {
		return fmt.Errorf("deferrals: %w", err)
	}
	dargs := make([]any, 0, 4*len(out.Deferrals))
	for i, d := range out.Deferrals {
		dargs = append(dargs, i, d.Channel, d.Ref, d.BlockedBy)
	}
	if err := tx.insertRows(ctx, "INSERT INTO deferrals (seq, channel, ref, blocked_by)", "", 4, dargs); err != nil {
		return fmt.Errorf("deferrals: %w", err)
	}

	// 5. Operator intents consumed, with their results.
	for _, r := range out.IntentResults {
		res, err := marshal(r)
		if err != nil {
			return err
		}
		if _, err := tx.exec(ctx, "UPDATE intents SET consumed = 1, result = ? WHERE id = ? AND consumed = 0", res, r.IntentID); err != nil {
			return fmt.Errorf("intent %s: %w", r.IntentID, err)
		}
	}

	// 6. Events, stamped now, in order.
	if err := tx.insertEvents(ctx, enc, now, out.Events); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	return nil
}

// setList turns "id, a, b" into "a = ?, b = ?": the columns after the
// first (the key), for an UPDATE.
func setList(cols string) string {
	names := strings.Split(cols, ", ")[1:]
	for i, n := range names {
		names[i] = n + " = ?"
	}
	return strings.Join(names, ", ")
}
