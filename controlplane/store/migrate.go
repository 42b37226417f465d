package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
)

// migrationFiles holds the schema of each backend:
// migrations/<backend>/NNNN_name.sql, applied in number order. The two
// backends have the same tables and columns; only types differ.
//
//go:embed migrations
var migrationFiles embed.FS

// migration is one numbered schema change.
type migration struct {
	Version int
	Name    string
	SQL     string
}

var migrationName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.sql$`)

// migrations returns a backend's migrations in version order. Versions
// start at 1 and have no gaps.
func migrations(d dialect) ([]migration, error) {
	dir := path.Join("migrations", d.String())
	entries, err := fs.ReadDir(migrationFiles, dir)
	if err != nil {
		return nil, fmt.Errorf("store: migrations: %w", err)
	}
	var out []migration
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("store: migrations: unexpected file %s/%s", dir, e.Name())
		}
		body, err := fs.ReadFile(migrationFiles, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("store: migrations: %w", err)
		}
		v, _ := strconv.Atoi(m[1])
		out = append(out, migration{Version: v, Name: m[2], SQL: string(body)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.Version - b.Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("store: migrations: %s: want version %04d, found %04d", dir, i+1, m.Version)
		}
	}
	return out, nil
}

// migrate applies the migrations not applied yet, each in its own
// transaction together with its schema_migrations row. On PostgreSQL an
// advisory lock makes replicas that start together migrate one at a time;
// the second finds the work done.
func (s *db) migrate(ctx context.Context) error {
	ms, err := migrations(s.dialect)
	if err != nil {
		return err
	}
	for _, m := range ms {
		err := s.write(ctx, func(tx *txn) error {
			if tx.dialect == dialectPostgres {
				if _, err := tx.exec(ctx, "SELECT pg_advisory_xact_lock(?)", migrateLockKey); err != nil {
					return err
				}
			}
			if _, err := tx.exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
				version INTEGER PRIMARY KEY,
				name    TEXT NOT NULL
			)`); err != nil {
				return err
			}
			var n int64
			if err := tx.queryRow(ctx, "SELECT count(*) FROM schema_migrations WHERE version = ?", m.Version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			if err := tx.execScript(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES (?, ?)", m.Version, m.Name)
			return err
		})
		if err != nil {
			return fmt.Errorf("store: migration %04d_%s: %w", m.Version, m.Name, err)
		}
	}
	return nil
}

// execScript runs a migration script of several statements as it is,
// without placeholder rewriting.
func (tx *txn) execScript(ctx context.Context, script string) error {
	if tx.dialect == dialectPostgres {
		// Without arguments pgx uses the simple protocol, which runs
		// several statements.
		_, err := tx.pg.Exec(ctx, script)
		return err
	}
	_, err := tx.conn.(sqliteConn).q.ExecContext(ctx, script)
	return err
}
