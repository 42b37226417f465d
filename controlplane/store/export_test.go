package store

import (
	"context"
	"fmt"
	"regexp"
)

// This file exists only in this package's tests: it gives the conformance
// suite (storetest.Internals) and the schema test what the Store
// interface does not.

// Reopen opens the store's database again, running the migrations again.
func (s *db) Reopen(ctx context.Context) (Store, error) {
	if s.url == "sqlite::memory:" {
		return nil, fmt.Errorf("store: an in-memory database cannot be reopened")
	}
	return Open(ctx, s.url)
}

// AppliedMigrations lists the versions in schema_migrations, in order.
func (s *db) AppliedMigrations(ctx context.Context) ([]int, error) {
	var out []int
	err := s.read(ctx, func(tx *txn) error {
		var err error
		out, err = collect(ctx, tx, out, func(rs row) (int, error) {
			var v int
			err := rs.Scan(&v)
			return v, err
		}, "SELECT version FROM schema_migrations ORDER BY version")
		return err
	})
	return out, err
}

// EmbeddedMigrations is the number of migrations embedded for the backend.
func (s *db) EmbeddedMigrations() int {
	ms, err := migrations(s.dialect)
	if err != nil {
		panic(err)
	}
	return len(ms)
}

func (s *db) execRaw(ctx context.Context, query string, args ...any) error {
	return s.write(ctx, func(tx *txn) error {
		n, err := tx.exec(ctx, query, args...)
		if err == nil && n != 1 {
			err = fmt.Errorf("%d rows changed, want 1", n)
		}
		return err
	})
}

// SetRolloutStateRaw writes a rollout's state with SQL.
func (s *db) SetRolloutStateRaw(ctx context.Context, rolloutID, state string) error {
	return s.execRaw(ctx, "UPDATE rollouts SET state = ? WHERE id = ?", state, rolloutID)
}

// SetWavePhaseRaw writes a rollout's wave phase with SQL.
func (s *db) SetWavePhaseRaw(ctx context.Context, rolloutID, phase string) error {
	return s.execRaw(ctx, "UPDATE rollouts SET wave_phase = ? WHERE id = ?", phase, rolloutID)
}

// SetHostStateRaw writes a rollout host's state with SQL.
func (s *db) SetHostStateRaw(ctx context.Context, rolloutID, hostname, state string) error {
	return s.execRaw(ctx, "UPDATE rollout_hosts SET state = ? WHERE rollout_id = ? AND hostname = ?", state, rolloutID, hostname)
}

var tableName = regexp.MustCompile(`^[a-z_]+$`)

// CountRows counts a table's rows.
func (s *db) CountRows(ctx context.Context, table string) (int64, error) {
	if !tableName.MatchString(table) {
		return 0, fmt.Errorf("bad table name %q", table)
	}
	var n int64
	err := s.read(ctx, func(tx *txn) error {
		return tx.queryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n)
	})
	return n, err
}

// MigrationScripts returns a backend's migration scripts in order.
func MigrationScripts(backend string) ([]string, error) {
	d := dialectSQLite
	switch backend {
	case "postgres":
		d = dialectPostgres
	case "sqlite":
	default:
		return nil, fmt.Errorf("unknown backend %q", backend)
	}
	ms, err := migrations(d)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.SQL
	}
	return out, nil
}

// ExecRaw runs a statement that must change one row, as no writer of the
// store would: without a stamp or a lock.
func (s *db) ExecRaw(ctx context.Context, query string, args ...any) error {
	return s.execRaw(ctx, query, args...)
}

// SetPartedBlob sets the size from which PostgreSQL keeps a release blob
// in parts and the size of a part, and returns a func that restores them.
func SetPartedBlob(from, size int64) (restore func()) {
	f, s := partedBlob.Swap(from), partSize.Swap(size)
	return func() { partedBlob.Store(f); partSize.Store(s) }
}

// WaveSoaksRaw reads a rollout's wave_soaks column.
func (s *db) WaveSoaksRaw(ctx context.Context, rolloutID string) (string, error) {
	var out string
	err := s.read(ctx, func(tx *txn) error {
		return tx.queryRow(ctx, "SELECT wave_soaks FROM rollouts WHERE id = ?", rolloutID).Scan(&out)
	})
	return out, err
}
