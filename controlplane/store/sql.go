package store

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The SQL of this package is written once, for both backends, in the
// dialect they share: `?` placeholders (rewritten to $1, $2, … for
// PostgreSQL), INSERT … ON CONFLICT upserts, RETURNING, and row locks
// written `FOR UPDATE`, `FOR SHARE` or `FOR KEY SHARE` (dropped for
// SQLite, whose single writer already serializes write transactions).
// Only what the two cannot share — the tick lock, the migration lock — is
// written per backend.

// dialect is a backend's SQL flavour.
type dialect int

const (
	dialectPostgres dialect = iota
	dialectSQLite
)

func (d dialect) String() string {
	if d == dialectPostgres {
		return "postgres"
	}
	return "sqlite"
}

// conn runs SQL on a pool, connection or transaction of either backend.
type conn interface {
	// exec runs a statement and returns the number of rows it affected.
	exec(ctx context.Context, query string, args ...any) (int64, error)
	query(ctx context.Context, query string, args ...any) (rows, error)
	// queryRow runs a query returning at most one row; Scan returns
	// errNoRows when there is none.
	queryRow(ctx context.Context, query string, args ...any) row
}

// rows iterates over a result set; Close is idempotent.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

type row interface {
	Scan(dest ...any) error
}

// eachRow runs a query on c and calls fn with each row of its result, in
// order. It stops at the first error, the query's, fn's or the iteration's,
// and returns it; the rows are closed when it returns, so the caller may
// run its next statement on c.
func eachRow(ctx context.Context, c conn, fn func(row) error, query string, args ...any) error {
	rs, err := c.query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		if err := fn(rs); err != nil {
			return err
		}
	}
	return rs.Err()
}

// collect runs a query on c and appends what scan makes of each row to
// dst, in order, returning the extended slice as append does: a caller that
// wants an empty list rather than nil when nothing matches passes an empty
// dst. It stops at the first error, as eachRow does.
func collect[T any](ctx context.Context, c conn, dst []T, scan func(row) (T, error), query string, args ...any) ([]T, error) {
	err := eachRow(ctx, c, func(r row) error {
		v, err := scan(r)
		if err != nil {
			return err
		}
		dst = append(dst, v)
		return nil
	}, query, args...)
	return dst, err
}

// scanString scans a row of one text column.
func scanString(r row) (string, error) {
	var s string
	err := r.Scan(&s)
	return s, err
}

// errNoRows is what row.Scan returns, for both backends, when the query
// matched nothing.
var errNoRows = errors.New("store: no rows")

func noRows(err error) error {
	if errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) {
		return errNoRows
	}
	return err
}

// ---- PostgreSQL (pgx) ----

// pgQuerier is what pgxpool.Pool and pgx.Tx have in common.
type pgQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type pgConn struct{ q pgQuerier }

func (c pgConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := c.q.Exec(ctx, pgSQL(query), args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (c pgConn) query(ctx context.Context, query string, args ...any) (rows, error) {
	r, err := c.q.Query(ctx, pgSQL(query), args...)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (c pgConn) queryRow(ctx context.Context, query string, args ...any) row {
	return rowErr{c.q.QueryRow(ctx, pgSQL(query), args...)}
}

// pgQueries caches the PostgreSQL form of each query text.
var pgQueries sync.Map

// pgSQL rewrites `?` placeholders to $1, $2, … (outside quoted strings
// and identifiers).
func pgSQL(q string) string {
	if v, ok := pgQueries.Load(q); ok {
		return v.(string)
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	var quote byte
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	out := b.String()
	pgQueries.Store(q, out)
	return out
}

// ---- SQLite (database/sql) ----

// sqlQuerier is what sql.DB and sql.Tx have in common.
type sqlQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type sqliteConn struct{ q sqlQuerier }

func (c sqliteConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := c.q.ExecContext(ctx, sqliteSQL(query), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (c sqliteConn) query(ctx context.Context, query string, args ...any) (rows, error) {
	r, err := c.q.QueryContext(ctx, sqliteSQL(query), args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{r}, nil
}

func (c sqliteConn) queryRow(ctx context.Context, query string, args ...any) row {
	return rowErr{c.q.QueryRowContext(ctx, sqliteSQL(query), args...)}
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// sqliteQueries caches the SQLite form of each query text.
var sqliteQueries sync.Map

// sqliteSQL drops row-lock clauses, which SQLite does not have: its write
// transactions are serialized (BEGIN IMMEDIATE on one writer connection).
func sqliteSQL(q string) string {
	if !strings.Contains(q, " FOR ") {
		return q
	}
	if v, ok := sqliteQueries.Load(q); ok {
		return v.(string)
	}
	out := strings.ReplaceAll(q, " FOR UPDATE", "")
	out = strings.ReplaceAll(out, " FOR SHARE", "")
	out = strings.ReplaceAll(out, " FOR KEY SHARE", "")
	sqliteQueries.Store(q, out)
	return out
}

// rowErr maps "no rows" to errNoRows.
type rowErr struct{ r row }

func (r rowErr) Scan(dest ...any) error { return noRows(r.r.Scan(dest...)) }

// placeholders returns "?, ?, …" with n placeholders.
func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// valuesRows returns "(?, ?), (?, ?)…": rows tuples of cols placeholders.
func valuesRows(rows, cols int) string {
	tuple := "(" + placeholders(cols) + ")"
	var b strings.Builder
	b.Grow(rows * (len(tuple) + 2))
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tuple)
	}
	return b.String()
}
