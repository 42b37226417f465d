package store_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/pgtest"
)

// TestMigrateReleaseBlobs: a database kept before 0013_release_blobs
// (the bodies in the channels table) still serves its channels' releases
// after the migration, their bytes unchanged, and the next release stored
// deletes the migrated bodies it no longer names.
func TestMigrateReleaseBlobs(t *testing.T) {
	const before = 12 // the migrations of a database kept before 0013
	insert := `INSERT INTO channels (channel, ref, source_commit, signed_at, fleet_body, fleet_sig, fleet_hash,
		manifest_body, manifest_sig, manifest_hash, verified_at) VALUES ('edge', 'r1', 'c1', 1000000, %s, %s, 'fh', %s, %s, 'mh', 2000000)`
	bodies := []any{[]byte("fleet-bytes"), []byte("fs"), []byte("manifest-bytes"), []byte("ms")}
	for _, tc := range []struct {
		backend string
		prepare func(t *testing.T) string // returns the store URL
	}{
		{"sqlite", func(t *testing.T) string {
			url, run := oldDatabase(t, "sqlite", before)
			run(fmt.Sprintf(insert, "?", "?", "?", "?"), bodies...)
			return url
		}},
		{"postgres", func(t *testing.T) string {
			url, run := oldDatabase(t, "postgres", before)
			run(fmt.Sprintf(insert, "$1", "$2", "$3", "$4"), bodies...)
			return url
		}},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			ctx := t.Context()
			s, err := store.Open(ctx, tc.prepare(t))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			rels, err := s.Releases(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(rels) != 1 || string(rels[0].FleetBody) != "fleet-bytes" || string(rels[0].ManifestBody) != "manifest-bytes" ||
				string(rels[0].FleetSig) != "fs" || rels[0].ManifestHash != "mh" {
				t.Fatalf("after the migration the releases are %+v", rels)
			}
			next := rels[0]
			next.Ref, next.SignedAt, next.FleetBody, next.ManifestBody = "r2", next.SignedAt.Add(time.Second), []byte("fleet-2"), []byte("manifest-2")
			if err := s.PutRelease(ctx, next); err != nil {
				t.Fatal(err)
			}
			if n, err := s.(interface {
				CountRows(context.Context, string) (int64, error)
			}).CountRows(ctx, "release_blobs"); err != nil || n != 2 {
				t.Errorf("%d blobs (%v) after the next release, want its two", n, err)
			}
			// A body gone from under its channel is an error, not a
			// channel without a release.
			if err := s.(interface {
				ExecRaw(context.Context, string, ...any) error
			}).ExecRaw(ctx, "DELETE FROM release_blobs WHERE id = ?", "sha256:"+fmt.Sprintf("%x", sha256.Sum256([]byte("manifest-2")))); err != nil {
				t.Fatal(err)
			}
			if rels, err := s.Releases(ctx); err == nil || !strings.Contains(err.Error(), "channel edge") {
				t.Errorf("Releases with a body missing: %d releases, error %v", len(rels), err)
			}
		})
	}
}

// oldDatabase makes a database of the backend as the first before
// migrations left it, and returns its store URL and a function that runs
// a statement on it (with the backend's placeholders).
func oldDatabase(t *testing.T, backend string, before int) (string, func(q string, args ...any)) {
	t.Helper()
	scripts, err := store.MigrationScripts(backend)
	if err != nil {
		t.Fatal(err)
	}
	var (
		url  string
		exec func(q string, args ...any) error
	)
	switch backend {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "old.db")
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		url = "sqlite://" + path
		exec = func(q string, args ...any) error { _, err := db.Exec(q, args...); return err }
	default:
		url = pgtest.URL(t)
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(ctx) })
		exec = func(q string, args ...any) error { _, err := conn.Exec(ctx, q, args...); return err }
	}
	run := func(q string, args ...any) {
		t.Helper()
		if err := exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	run("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL)")
	for i, s := range scripts[:before] {
		run(s)
		run(fmt.Sprintf("INSERT INTO schema_migrations (version, name) VALUES (%d, 'old')", i+1))
	}
	return url, run
}
