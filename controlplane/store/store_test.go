package store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/controlplane/store/storetest"
)

// pgEnv names the PostgreSQL server the tests create their databases on.
const pgEnv = "NIXFLEET_TEST_PG"

// TestPostgres runs the conformance suite on PostgreSQL, a fresh database
// per subtest on the server named by NIXFLEET_TEST_PG.
func TestPostgres(t *testing.T) {
	if os.Getenv(pgEnv) == "" {
		t.Fatal(pgUnset)
	}
	storetest.Run(t, func(t *testing.T) store.Store { return openPostgres(t) })
}

// TestSQLite runs the conformance suite on SQLite, a fresh file per
// subtest.
func TestSQLite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openSQLite(t) })
}

var pgUnset = pgEnv + " is not set: run .ci/run, or start a throwaway server with `.ci/pg start` and set " + pgEnv +
	" to the URL it prints (a postgres:// URL of a server where the tests may create and drop databases)"

// openPostgres creates a database nf_<random> on the test server, opens a
// store on it, and drops it when the test ends. Without NIXFLEET_TEST_PG
// the test fails: the PostgreSQL backend is never silently untested.
func openPostgres(tb testing.TB) store.Store {
	tb.Helper()
	admin := os.Getenv(pgEnv)
	if admin == "" {
		tb.Fatal(pgUnset)
	}
	ctx := context.Background()
	name := "nf_" + randomHex(tb, 8)
	adminExec(tb, admin, "CREATE DATABASE "+name)
	u, err := url.Parse(admin)
	if err != nil {
		tb.Fatalf("%s: %v", pgEnv, err)
	}
	u.Path = "/" + name
	s, err := store.Open(ctx, u.String())
	if err != nil {
		adminExec(tb, admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		s.Close()
		adminExec(tb, admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return s
}

func adminExec(tb testing.TB, admin, sql string) {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatalf("%s: %v", pgEnv, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}

func randomHex(tb testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
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
