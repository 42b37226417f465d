package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/store"
)

// TestMigrateReleaseLogPushes: after 0017_release_log_pushes, a channel
// whose rows all predate the release log (no commit) has its current
// release's row stamped with the channel's commit, so that reading that
// ref again is no new push; a channel with a row that has a commit keeps
// its rows as they were.
func TestMigrateReleaseLogPushes(t *testing.T) {
	const before = 16 // the migrations of a database kept before 0017
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			url, run := oldDatabase(t, backend, before)
			noBytes := "X''"
			if backend == "postgres" {
				noBytes = "''::bytea"
			}
			for _, ch := range []string{"stable", "edge"} {
				run(fmt.Sprintf(`INSERT INTO channels (channel, ref, source_commit, signed_at, fleet_sig, fleet_hash, manifest_sig,
					manifest_hash, verified_at, last_rolled_ref, fleet_blob, manifest_blob)
					VALUES ('%s', 'b', 'c-%[1]s-b', 2, %[2]s, 'fh', %[2]s, 'mh', 2, 'b', 'fb', 'mb')`, ch, noBytes))
			}
			ref := `INSERT INTO channel_refs (channel, commit_hash, ref, rollout_id, seen_at, signed_at, fate, blocked_by, code, message, updated_at)
				VALUES ('%s', '%s', '%s', '%[1]s@%[3]s', %d, 0, '%s', '', 'ref_moved', 'm', %[4]d)`
			run(fmt.Sprintf(ref, "stable", "", "a", 1, "opened"))
			run(fmt.Sprintf(ref, "stable", "", "b", 2, "opened"))
			run(fmt.Sprintf(ref, "edge", "", "a", 1, "opened"))
			run(fmt.Sprintf(ref, "edge", "c-edge-b", "b", 2, "pending"))
			s, err := store.Open(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// commits reads the log as "rollout id commit", newest first.
			commits := func() []string {
				t.Helper()
				rels, err := s.ReleaseLog(t.Context(), store.ReleaseQuery{})
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, r := range rels {
					out = append(out, r.RolloutID+" "+r.Commit)
				}
				return out
			}
			want := []string{"edge@b c-edge-b", "stable@b c-stable-b", "edge@a ", "stable@a "}
			if d := cmp.Diff(want, commits()); d != "" {
				t.Errorf("the log after the migration (-want +got):\n%s", d)
			}
			// The channel's current ref read again and refused (stale by
			// now): the same push, no new row.
			err = s.RefuseRelease(t.Context(), store.RefusedRelease{Channel: "stable", Commit: "c-stable-b", Ref: "b",
				Code: codes.Stale, Message: "stale", At: time.Unix(3, 0)})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, commits()); d != "" {
				t.Errorf("the current ref read again after the migration (-want +got):\n%s", d)
			}
		})
	}
}
