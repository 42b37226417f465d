package store

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Leases are rows (name, holder, epoch, expires_at). Every change happens
// in a write transaction that holds the row (SELECT … FOR UPDATE on
// PostgreSQL, the single writer on SQLite) or in one conditional UPDATE,
// so two replicas can never both take a lease. A lease is valid at t when
// its holder is not empty and expires_at > t. Tick holds the tick lease's
// row from its check to its commit, so a takeover waits for a running tick.

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

// RenewLease extends a held lease to now+ttl (ErrNotLeader when the lease
// changed holder or epoch, or expired at or before now).
func (s *db) RenewLease(ctx context.Context, l Lease, ttl time.Duration, now time.Time) (Lease, error) {
	if ttl <= 0 {
		return Lease{}, fmt.Errorf("store: renew lease %s: ttl %s is not positive", l.Name, ttl)
	}
	expires := micros(now.Add(ttl))
	var n int64
	err := s.writeLease(ctx, func(tx *txn) error {
		var err error
		n, err = tx.exec(ctx, `UPDATE leases SET expires_at = ?
			WHERE name = ? AND holder = ? AND holder <> '' AND epoch = ? AND expires_at > ?`,
			expires, l.Name, l.Holder, l.Epoch, micros(now))
		return err
	})
	if err != nil {
		return Lease{}, fmt.Errorf("store: renew lease %s: %w", l.Name, err)
	}
	if n == 0 {
		return Lease{}, fmt.Errorf("%w: lease %s is no longer held by %q at epoch %d", ErrNotLeader, l.Name, l.Holder, l.Epoch)
	}
	l.Expires = fromMicros(expires)
	return l, nil
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
