package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Leases are rows (name, holder, epoch, expires_at). A lease is valid at
// t when its holder is not empty and expires_at > t. Taking a lease
// happens in a write transaction that holds the row (SELECT … FOR UPDATE
// on PostgreSQL, the single writer on SQLite), so two replicas can never
// both take it. A renewal is one conditional UPDATE that never moves
// expires_at back.
//
// Renewing never waits for a tick, and a tick longer than the TTL does
// not cost the lease (rfcs/0006 §Tick loop 1):
//
//  1. on PostgreSQL a tick holds the tick lease's row FOR KEY SHARE from
//     its check to its commit. A renewal, or a release, updates no column
//     of a unique index, so it takes FOR NO KEY UPDATE, which KEY SHARE
//     does not conflict with: it runs beside the tick. A takeover's FOR
//     UPDATE conflicts with KEY SHARE, on the renewed row too (the lock
//     carries over to the new row version): it waits until the running
//     tick ends, so no tick commits once its lease changed hands;
//  2. a tick that commits extends its lease, in its transaction, to the
//     clock at commit + TickParams.LeaseTTL, never back. On SQLite a
//     renewal cannot run beside a tick (one writer): the extension keeps
//     the lease, and a renewal that waited, with a now read before, keeps
//     the later expiry. On PostgreSQL a renewal waits at most for the
//     commit that follows the extension. A tick that finds its lease
//     released when it extends it writes nothing (ErrNotLeader).

// AcquireLease takes the named lease for holder until now+ttl if it is
// free, expired, or already the holder's (ErrLeaseHeld otherwise). Taking
// a lease that was not validly held by holder — free, released, expired,
// or another's — increases the epoch; re-acquiring one's own valid lease
// only extends it.
func (s *db) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration, now time.Time) (Lease, error) {
	if name == "" || holder == "" {
		return Lease{}, fmt.Errorf("store: acquire lease: name and holder are required")
	}
	if ttl <= 0 {
		return Lease{}, fmt.Errorf("store: acquire lease %s: ttl %s is not positive", name, ttl)
	}
	at, expires := micros(now), micros(now.Add(ttl))
	var out Lease
	err := s.writeLease(ctx, func(tx *txn) error {
		if _, err := tx.exec(ctx, "INSERT INTO leases (name, holder, epoch, expires_at) VALUES (?, '', 0, ?) ON CONFLICT (name) DO NOTHING",
			name, int64(math.MinInt64)); err != nil {
			return err
		}
		var (
			cur            string
			epoch, curExpr int64
		)
		if err := tx.queryRow(ctx, "SELECT holder, epoch, expires_at FROM leases WHERE name = ? FOR UPDATE", name).
			Scan(&cur, &epoch, &curExpr); err != nil {
			return err
		}
		valid := cur != "" && curExpr > at
		switch {
		case valid && cur != holder:
			return fmt.Errorf("%w: %s is held by %q until %s", ErrLeaseHeld, name, cur,
				fromMicros(curExpr).Format(time.RFC3339Nano))
		case !valid:
			epoch++
		}
		if _, err := tx.exec(ctx, "UPDATE leases SET holder = ?, epoch = ?, expires_at = ? WHERE name = ?",
			holder, epoch, expires, name); err != nil {
			return err
		}
		out = Lease{Name: name, Holder: holder, Epoch: epoch, Expires: fromMicros(expires)}
		return nil
	})
	if err != nil {
		return Lease{}, fmt.Errorf("store: acquire lease %s: %w", name, err)
	}
	return out, nil
}

// RenewLease extends a held lease to now+ttl, or leaves it where it is
// when it is later already (a tick extended it while the renewal waited),
// and returns it with the expiry stored (ErrNotLeader when the lease
// changed holder or epoch, or expired at or before now).
func (s *db) RenewLease(ctx context.Context, l Lease, ttl time.Duration, now time.Time) (Lease, error) {
	if ttl <= 0 {
		return Lease{}, fmt.Errorf("store: renew lease %s: ttl %s is not positive", l.Name, ttl)
	}
	expires := micros(now.Add(ttl))
	var got int64
	err := s.writeLease(ctx, func(tx *txn) error {
		return tx.queryRow(ctx, `UPDATE leases SET expires_at = CASE WHEN expires_at > ? THEN expires_at ELSE ? END
			WHERE name = ? AND holder = ? AND holder <> '' AND epoch = ? AND expires_at > ?
			RETURNING expires_at`,
			expires, expires, l.Name, l.Holder, l.Epoch, micros(now)).Scan(&got)
	})
	switch {
	case errors.Is(err, errNoRows):
		return Lease{}, fmt.Errorf("%w: lease %s is no longer held by %q at epoch %d", ErrNotLeader, l.Name, l.Holder, l.Epoch)
	case err != nil:
		return Lease{}, fmt.Errorf("store: renew lease %s: %w", l.Name, err)
	}
	l.Expires = fromMicros(got)
	return l, nil
}

// extendTickLease extends the tick lease l, whose row tx holds since
// checkLease, to the clock's time + ttl unless it is later already (step
// 2 above); when ttl is not positive it does nothing, and does not read
// the clock. ErrNotLeader: l was released since the check.
func extendTickLease(ctx context.Context, tx *txn, l Lease, ttl time.Duration, clock func() time.Time) error {
	if ttl <= 0 {
		return nil
	}
	expires := micros(clock().Add(ttl))
	n, err := tx.exec(ctx, `UPDATE leases SET expires_at = CASE WHEN expires_at > ? THEN expires_at ELSE ? END
		WHERE name = ? AND holder = ? AND epoch = ?`,
		expires, expires, TickLease, l.Holder, l.Epoch)
	switch {
	case err != nil:
		return fmt.Errorf("store: tick lease: %w", err)
	case n == 0:
		return fmt.Errorf("%w: the tick lease of %q at epoch %d was released during the tick", ErrNotLeader, l.Holder, l.Epoch)
	}
	return nil
}

// ReleaseLease gives a held lease up at once: the next AcquireLease takes
// it, with a new epoch. Releasing a lease one no longer holds does
// nothing.
func (s *db) ReleaseLease(ctx context.Context, l Lease) error {
	err := s.writeLease(ctx, func(tx *txn) error {
		_, err := tx.exec(ctx, "UPDATE leases SET holder = '', expires_at = ? WHERE name = ? AND holder = ? AND epoch = ?",
			int64(math.MinInt64), l.Name, l.Holder, l.Epoch)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: release lease %s: %w", l.Name, err)
	}
	return nil
}
