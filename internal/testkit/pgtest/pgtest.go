// Package pgtest gives a test its own PostgreSQL database on the server
// that NIXFLEET_TEST_PG names (.ci/run starts a throwaway one; so does
// `.ci/pg start`).
//
// A test that asks for a database and finds NIXFLEET_TEST_PG unset fails:
// the PostgreSQL backend is never skipped, and so never silently untested.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Env is the environment variable holding the URL of the test server, a
// postgres:// URL of a role that may create and drop databases.
const Env = "NIXFLEET_TEST_PG"

// Unset is the failure message of a test that needs the server while Env
// is not set.
const Unset = Env + " is not set: run .ci/run, which starts a throwaway PostgreSQL, or start one with `.ci/pg start` and set " +
	Env + " to the URL it prints (a postgres:// URL of a server where tests may create and drop databases)"

// URL creates a database nf_test_<random> on the test server and returns
// its URL. The database is dropped, with whatever is still connected to
// it, when the test ends.
func URL(t testing.TB) string {
	t.Helper()
	return URLWith(t, "")
}

// URLWith is URL with options for CREATE DATABASE after the database's
// name, like "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'".
func URLWith(t testing.TB, options string) string {
	t.Helper()
	admin := os.Getenv(Env)
	if admin == "" {
		t.Fatal(Unset)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "nf_test_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connecting to %s: %v", admin, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, strings.TrimSpace("CREATE DATABASE "+name+" "+options)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}
