package store_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// lastList returns the quoted names of the last match of re (whose group
// 1 is a list of SQL string literals) across the scripts, in order.
func lastList(t *testing.T, scripts []string, re *regexp.Regexp) []string {
	t.Helper()
	var list string
	for _, s := range scripts {
		for _, m := range re.FindAllStringSubmatch(s, -1) {
			list = m[1]
		}
	}
	if list == "" {
		t.Fatalf("no match for %s in the migrations", re)
	}
	var out []string
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if len(item) < 2 || item[0] != '\'' || item[len(item)-1] != '\'' {
			t.Fatalf("%q is not a string literal", item)
		}
		out = append(out, item[1:len(item)-1])
	}
	return out
}

func names[S ~string](l []S) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = string(s)
	}
	return out
}

// TestSchemaStates: the state CHECK constraints of every backend's
// migrations list exactly the reconciler's states, the in-flight index
// exactly the in-flight host states, and the release log's fate
// constraint exactly proto.ReleaseFates.
func TestSchemaStates(t *testing.T) {
	t.Parallel()
	inFlight := []string{}
	for _, s := range rc.HostStates {
		if s.InFlight() {
			inFlight = append(inFlight, string(s))
		}
	}
	for _, backend := range []string{"postgres", "sqlite"} {
		scripts, err := store.MigrationScripts(backend)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			re   string
			want []string
		}{
			{"rollout_hosts.state", `CONSTRAINT rollout_hosts_state CHECK \(state IN \(([^)]*)\)\)`, names(rc.HostStates)},
			{"rollouts.state", `CONSTRAINT rollouts_state CHECK \(state IN \(([^)]*)\)\)`, names(rc.RolloutStates)},
			{"rollouts.wave_phase", `CONSTRAINT rollouts_wave_phase CHECK \(wave_phase IN \(([^)]*)\)\)`,
				names([]rc.WavePhase{rc.PhaseDispatching, rc.PhaseSoaking})},
			{"rollout_hosts_in_flight", `INDEX rollout_hosts_in_flight ON rollout_hosts \(rollout_id\) WHERE state IN \(([^)]*)\)`, inFlight},
			{"channel_refs.fate", `CONSTRAINT channel_refs_fate CHECK \(fate IN \(([^)]*)\)\)`, proto.ReleaseFates},
		} {
			got := lastList(t, scripts, regexp.MustCompile(tc.re))
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.want))
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%s: %s allows other names than the reconciler's (-reconciler +schema):\n%s", backend, tc.name, d)
			}
		}
	}
}

var (
	tableChange = regexp.MustCompile(`(?s)CREATE TABLE (\w+) \((.*?)\n\)|DROP TABLE (\w+);|ALTER TABLE (\w+) RENAME TO (\w+);`)
	column      = regexp.MustCompile(`^\s*([a-z_]+)\s+([A-Z]+)`)
)

// columns maps each table of the scripts to its columns and types.
func columns(t *testing.T, scripts []string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, s := range scripts {
		// In the script's order: a table rebuilt under another name, the
		// old one dropped and the new one renamed, is the old one again.
		for _, m := range tableChange.FindAllStringSubmatch(s, -1) {
			switch {
			case m[1] != "":
				out[m[1]] = nil
				for _, line := range strings.Split(m[2], "\n") {
					if c := column.FindStringSubmatch(line); c != nil && c[1] != "" && c[2] != "KEY" && !strings.HasPrefix(strings.TrimSpace(line), "CONSTRAINT") &&
						!strings.HasPrefix(strings.TrimSpace(line), "PRIMARY") {
						out[m[1]] = append(out[m[1]], c[1]+" "+c[2])
					}
				}
			case m[3] != "":
				delete(out, m[3])
			case m[4] != "":
				out[m[5]] = out[m[4]]
				delete(out, m[4])
			}
		}
	}
	return out
}

// TestSchemaBackendsAgree: both backends have the same tables and columns,
// with corresponding types.
func TestSchemaBackendsAgree(t *testing.T) {
	t.Parallel()
	pg, err := store.MigrationScripts("postgres")
	if err != nil {
		t.Fatal(err)
	}
	lite, err := store.MigrationScripts("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	if len(pg) != len(lite) {
		t.Fatalf("%d postgres migrations, %d sqlite ones", len(pg), len(lite))
	}
	sqliteType := map[string]string{"TEXT": "TEXT", "BIGINT": "INTEGER", "INTEGER": "INTEGER", "BYTEA": "BLOB", "BIGSERIAL": "INTEGER"}
	want := map[string][]string{}
	for table, cols := range columns(t, pg) {
		for _, c := range cols {
			name, typ, _ := strings.Cut(c, " ")
			st, ok := sqliteType[typ]
			if !ok {
				t.Fatalf("postgres %s.%s: type %s has no SQLite counterpart here", table, name, typ)
			}
			want[table] = append(want[table], name+" "+st)
		}
	}
	got := columns(t, lite)
	if len(want) < 10 {
		t.Fatalf("found only %d tables in the postgres migrations", len(want))
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the backends' schemas differ (-postgres +sqlite):\n%s", d)
	}
}
