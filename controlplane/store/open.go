package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// Open connects to the store named by url and migrates its schema before
// returning:
//
//   - postgres://… or postgresql://… — PostgreSQL through a pgx pool (the
//     URL is pgx's connection string);
//   - sqlite:///abs/path.db or sqlite://relative/path.db — an SQLite file,
//     created with its directory when missing, in WAL mode (synchronous
//     NORMAL: a commit survives a crash of the process; an OS crash may
//     lose the last commits, never consistency) with foreign keys on and a
//     busy timeout; one connection writes (write transactions are
//     serialized and begin IMMEDIATE), a small pool reads;
//   - sqlite::memory: — a private in-memory SQLite database on one
//     connection, for tests.
//
// Any other scheme is an error.
func Open(ctx context.Context, url string) (Store, error) {
	var (
		s   *db
		err error
	)
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		s, err = openPostgres(ctx, url)
	case url == "sqlite::memory:":
		s, err = openSQLite(ctx, ":memory:", true)
	case strings.HasPrefix(url, "sqlite://"):
		path := strings.TrimPrefix(url, "sqlite://")
		if path == "" || strings.ContainsAny(path, "?#") {
			return nil, fmt.Errorf("store: sqlite URL %q: want sqlite:///absolute/path.db or sqlite://relative/path.db, without parameters", url)
		}
		s, err = openSQLite(ctx, path, false)
	default:
		return nil, fmt.Errorf("store: unsupported store URL %q: want postgres://…, postgresql://…, sqlite:///path.db or sqlite::memory:", redact(url))
	}
	if err != nil {
		return nil, err
	}
	s.url = url
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// redact cuts a URL at its first "@", so errors never echo a password.
func redact(url string) string {
	if i := strings.IndexByte(url, '@'); i >= 0 {
		if j := strings.Index(url, "://"); j >= 0 && j < i {
			return url[:j+3] + "…" + url[i:]
		}
	}
	return url
}

// db is the Store of both backends: the same SQL over pgx or database/sql.
type db struct {
	dialect dialect
	// PostgreSQL: pool serves everything but ticks and leases, which
	// have a connection of their own each (tickPool, leasePool), so that
	// a busy API can neither delay a tick nor let the lease lapse.
	pool, tickPool, leasePool *pgxpool.Pool
	// SQLite: writer has one connection; reader is a pool (the writer
	// itself for an in-memory database).
	writer, reader *sql.DB
	// url is what Open was given.
	url string
	// cache holds decoded artifacts, statuses and frozen rollout parts
	// between ticks: what a hash or an unchanged row names, decoded once.
	// What a tick keeps of its input is its caller's (TickParams.Kept).
	cache *cache
	// pages keeps the summaries of rollouts that no longer change
	// (pages.go).
	pages pageCache
	// hostOrder says whether the database compares hostnames as bytes
	// (pages.go, byteOrder); 0 until a host page found out.
	hostOrder atomic.Int32
}

// DefaultPoolSize is how many connections the PostgreSQL store opens for
// requests when the URL does not say (pool_max_conns), besides one for
// ticks and one for the lease.
const DefaultPoolSize = 16

func openPostgres(ctx context.Context, url string) (*db, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: postgres URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = DefaultPoolSize
	}
	one := func() (*pgxpool.Pool, error) {
		c := cfg.Copy()
		c.MaxConns, c.MinConns = 1, 0
		return pgxpool.NewWithConfig(ctx, c)
	}
	s := &db{dialect: dialectPostgres, cache: newCache()}
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err == nil {
		if s.tickPool, err = one(); err == nil {
			s.leasePool, err = one()
		}
	}
	if err == nil {
		err = s.pool.Ping(ctx)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("store: postgres: %w", err)
	}
	return s, nil
}

func openSQLite(ctx context.Context, path string, memory bool) (*db, error) {
	const common = "_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"
	if memory {
		w, err := sql.Open("sqlite", path+"?"+common+"&_txlock=immediate")
		if err != nil {
			return nil, fmt.Errorf("store: sqlite: %w", err)
		}
		// One connection holds the database: it must never be closed.
		w.SetMaxOpenConns(1)
		w.SetMaxIdleConns(1)
		w.SetConnMaxLifetime(0)
		w.SetConnMaxIdleTime(0)
		if err := w.PingContext(ctx); err != nil {
			_ = w.Close()
			return nil, fmt.Errorf("store: sqlite: %w", err)
		}
		return &db{dialect: dialectSQLite, writer: w, reader: w, cache: newCache()}, nil
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("store: sqlite: %w", err)
		}
	}
	w, err := sql.Open("sqlite", path+"?"+common+"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("store: sqlite: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := w.PingContext(ctx); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("store: sqlite %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", path+"?"+common+"&_pragma=query_only(1)")
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("store: sqlite: %w", err)
	}
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)
	return &db{dialect: dialectSQLite, writer: w, reader: r, cache: newCache()}, nil
}

// Backend names the implementation.
func (s *db) Backend() string { return s.dialect.String() }

// Close releases the connections.
func (s *db) Close() {
	for _, p := range []*pgxpool.Pool{s.pool, s.tickPool, s.leasePool} {
		if p != nil {
			p.Close()
		}
	}
	if s.writer != nil {
		_ = s.writer.Close()
	}
	if s.reader != nil && s.reader != s.writer {
		_ = s.reader.Close()
	}
}

// txn is a transaction of either backend.
type txn struct {
	conn
	dialect dialect
	pg      pgx.Tx  // PostgreSQL only
	sq      *sql.Tx // SQLite only
	// owed are the host rows a tick defers to a second transaction,
	// and owedIDs their rollouts (owed.go).
	owed    []hostRow
	owedIDs []string
}

// write runs fn in a write transaction and commits when fn returns nil.
// SQLite write transactions run one at a time on the writer connection
// and begin IMMEDIATE; PostgreSQL ones are READ COMMITTED, and take row
// locks or the tick lock where they need them.
func (s *db) write(ctx context.Context, fn func(*txn) error) error {
	return s.inTx(ctx, s.pool, true, fn)
}

// writeTick is write on the ticks' own connection (PostgreSQL).
func (s *db) writeTick(ctx context.Context, fn func(*txn) error) error {
	return s.inTx(ctx, s.tickPool, true, fn)
}

// writeLease is write on the lease's own connection (PostgreSQL).
func (s *db) writeLease(ctx context.Context, fn func(*txn) error) error {
	return s.inTx(ctx, s.leasePool, true, fn)
}

// read runs fn in a read-only transaction, a consistent snapshot.
func (s *db) read(ctx context.Context, fn func(*txn) error) error {
	return s.inTx(ctx, s.pool, false, fn)
}

// inTx runs fn in a transaction: on pool (PostgreSQL), or on SQLite's
// writer or reader.
func (s *db) inTx(ctx context.Context, pool *pgxpool.Pool, write bool, fn func(*txn) error) error {
	if s.dialect == dialectPostgres {
		opts := pgx.TxOptions{}
		if !write {
			opts = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
		}
		tx, err := pool.BeginTx(ctx, opts)
		if err != nil {
			return fmt.Errorf("store: begin: %w", err)
		}
		committed := false
		defer func() {
			if !committed {
				// Also on a panic in fn; the rollback must run even when
				// ctx is cancelled.
				_ = tx.Rollback(context.WithoutCancel(ctx))
			}
		}()
		if err := fn(&txn{conn: pgConn{tx}, dialect: dialectPostgres, pg: tx}); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("store: commit: %w", err)
		}
		committed = true
		return nil
	}
	conns := s.reader
	if write {
		conns = s.writer
	}
	tx, err := conns.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	if err := fn(&txn{conn: sqliteConn{tx}, dialect: dialectSQLite, sq: tx}); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	committed = true
	return nil
}

// Advisory lock keys (PostgreSQL): "nixfleet" in ASCII, and the next ones.
const (
	tickLockKey    int64 = 0x6e6978666c656574
	migrateLockKey int64 = tickLockKey + 1
	stageLockKey   int64 = tickLockKey + 2 // StageReleaseBodies, one at a time
)

// lockTick takes the tick lock until the end of the transaction: ticks,
// and writes that must not interleave with one (releases, manifests,
// pruning), run one at a time across every replica. SQLite's single
// writer serializes them already.
func (tx *txn) lockTick(ctx context.Context) error {
	if tx.dialect != dialectPostgres {
		return nil
	}
	if _, err := tx.exec(ctx, "SELECT pg_advisory_xact_lock(?)", tickLockKey); err != nil {
		return fmt.Errorf("store: tick lock: %w", err)
	}
	return nil
}
