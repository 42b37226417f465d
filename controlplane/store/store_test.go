package store_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/controlplane/store/storetest"
	"github.com/nixfleet/nixfleet/internal/testkit/pgtest"
)

// TestPostgres runs the conformance suite on PostgreSQL, a fresh database
// per subtest on the server named by NIXFLEET_TEST_PG.
func TestPostgres(t *testing.T) {
	if os.Getenv(pgtest.Env) == "" {
		t.Fatal(pgtest.Unset)
	}
	// Every staged body but the smallest is kept in parts of 256 bytes
	// here, so that the suite reads and writes both forms (a fleet is
	// parted from 8 MiB, in parts of 7 KiB).
	t.Cleanup(store.SetPartedBlob(256, 256))
	storetest.Run(t, func(t *testing.T) store.Store { return openPostgres(t) })
}

// TestPostgresLinguisticCollation: on a database whose collation does not
// sort as bytes (ICU's en-US: capitals among the lower-case letters,
// punctuation ignored at first), host pages still list by name in byte
// order, so that the fleet's hosts merge into them.
func TestPostgresLinguisticCollation(t *testing.T) {
	if os.Getenv(pgtest.Env) == "" {
		t.Fatal(pgtest.Unset)
	}
	t.Parallel()
	s, err := store.Open(context.Background(), pgtest.URLWith(t, "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	storetest.HostPagesWithFleet(t, s)
}

// TestSQLite runs the conformance suite on SQLite, a fresh file per
// subtest.
func TestSQLite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openSQLite(t) })
}

// openPostgres opens a store on a database of its own on the test server
// (pgtest.URL), closed before the database is dropped when the test ends.
func openPostgres(tb testing.TB) store.Store {
	tb.Helper()
	s, err := store.Open(context.Background(), pgtest.URL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// openSQLite opens a store on a new file in a temporary directory (in a
// subdirectory Open must create).
func openSQLite(tb testing.TB) store.Store {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "state", "nixfleet.db")
	s, err := store.Open(context.Background(), "sqlite://"+path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

func TestOpen(t *testing.T) {
	ctx := t.Context()
	for _, bad := range []string{"mysql://x", "sqlite:", "sqlite://", "sqlite:///tmp/x.db?mode=ro", "postgres//x", ""} {
		if s, err := store.Open(ctx, bad); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", bad)
		}
	}
	_, err := store.Open(ctx, "mysql://user:secret@host/db")
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("Open of an unknown scheme: %v (must fail without echoing the password)", err)
	}

	mem, err := store.Open(ctx, "sqlite::memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if mem.Backend() != "sqlite" {
		t.Errorf("backend %q", mem.Backend())
	}
	if _, err := mem.Releases(ctx); err != nil {
		t.Errorf("in-memory store: %v", err)
	}

	// A relative path is relative to the working directory.
	dir := t.TempDir()
	t.Chdir(dir)
	rel, err := store.Open(ctx, "sqlite://data/rel.db")
	if err != nil {
		t.Fatal(err)
	}
	rel.Close()
	if _, err := os.Stat(filepath.Join(dir, "data", "rel.db")); err != nil {
		t.Errorf("sqlite://data/rel.db: %v", err)
	}
}

// TestPostgresSchemaForLargeFleets: after the migrations, the columns that
// hold a whole fleet compress with lz4 (0010_lz4; Debian's PostgreSQL has
// it), and no foreign key checks each row of rollout_hosts (0011).
func TestPostgresSchemaForLargeFleets(t *testing.T) {
	ctx := t.Context()
	url := pgtest.URL(t)
	s, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, c := range []struct{ table, column string }{
		{"release_blobs", "body"}, {"rollout_manifests", "body"}, {"rollouts", "frozen"},
	} {
		var method string
		err := conn.QueryRow(ctx, "SELECT attcompression::text FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2",
			c.table, c.column).Scan(&method)
		if err != nil {
			t.Fatalf("%s.%s: %v", c.table, c.column, err)
		}
		if method != "l" {
			t.Errorf("%s.%s compresses with %q, want lz4 (l)", c.table, c.column, method)
		}
	}
	var fks int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_constraint WHERE conrelid = 'rollout_hosts'::regclass AND contype = 'f'").Scan(&fks); err != nil {
		t.Fatal(err)
	}
	if fks != 0 {
		t.Errorf("rollout_hosts has %d foreign keys, want none", fks)
	}
}
