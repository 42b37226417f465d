package reconciler_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	rc "github.com/nixfleet/nixfleet/reconciler"
)

var update = flag.Bool("update", false, "regenerate testdata/reconciler")

const goldenDir = "../testdata/reconciler"

// TestGolden runs every case of testdata/reconciler: input.json through
// Reconcile must give expected.json. With -update the cases are rebuilt
// from the scenarios below. Every case also checks rule 12: applying the
// output and reconciling again at the same time decides nothing more
// (after the ticks that follow at once, when the tick stopped at its
// bound), and a second run on the same input gives the same output.
func TestGolden(t *testing.T) {
	if *update {
		writeGolden(t)
	}
	dirs, err := filepath.Glob(filepath.Join(goldenDir, "*"))
	if err != nil || len(dirs) < 40 {
		t.Fatalf("expected at least 40 golden cases in %s (run with -update), found %d: %v", goldenDir, len(dirs), err)
	}
	names := map[string]bool{}
	for _, sc := range scenarios {
		names[sc.name] = true
	}
	for _, dir := range dirs {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if !names[name] {
				t.Fatalf("no scenario builds %s; remove the directory or regenerate", name)
			}
			var in rc.Input
			readJSON(t, filepath.Join(dir, "input.json"), &in)
			var want rc.Output
			readJSON(t, filepath.Join(dir, "expected.json"), &want)
			got := rc.Reconcile(in)
			if diff := cmp.Diff(want, roundTrip(t, got)); diff != "" {
				t.Fatalf("%s (-expected +got):\n%s", in.Description, diff)
			}
			if again := rc.Reconcile(in); !reflect.DeepEqual(got, again) {
				t.Fatal("a second run on the same input gave another output")
			}
			after := rc.Apply(in, got)
			for n := 0; got.More; n++ {
				// A tick stopped at its bound: the ticks that follow at
				// once end it (Output.More).
				if n == 100 {
					t.Fatal("the ticks that follow a bounded one still say More after 100")
				}
				got = rc.Reconcile(after)
				after = rc.Apply(after, got)
			}
			next := rc.Reconcile(after)
			if len(next.Actions)+len(next.Events)+len(next.Rollouts)+len(next.Hosts) != 0 {
				t.Fatalf("not idempotent: after applying the output, the next tick decides more:\n%s", mustJSON(t, next))
			}
		})
	}
}

// roundTrip passes an output through JSON, as the expected file was.
func roundTrip(t *testing.T, out rc.Output) rc.Output {
	var back rc.Output
	if err := json.Unmarshal(mustJSON(t, out), &back); err != nil {
		t.Fatal(err)
	}
	return back
}

func mustJSON(t testing.TB, v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func writeGolden(t *testing.T) {
	if err := os.RemoveAll(goldenDir); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, sc := range scenarios {
		if seen[sc.name] || strings.ContainsAny(sc.name, " /") {
			t.Fatalf("bad or duplicate scenario name %q", sc.name)
		}
		seen[sc.name] = true
		s := newScenario(t)
		sc.build(s)
		in := s.in
		in.Description = sc.desc
		out := rc.Reconcile(in)
		if sc.check != nil {
			t.Run("check/"+sc.name, func(t *testing.T) { sc.check(t, out) })
		}
		dir := filepath.Join(goldenDir, sc.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for file, v := range map[string]any{"input.json": in, "expected.json": out} {
			if err := os.WriteFile(filepath.Join(dir, file), mustJSON(t, v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// ---- assertions scenarios make about their final tick, so that a
// regenerated golden file cannot silently change meaning ----

func wantEvent(kind, host, to, code string) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		if !slices.ContainsFunc(out.Events, func(e rc.Event) bool {
			return e.Kind == kind && (host == "" || e.Host == host) && (to == "" || e.To == to) && (code == "" || e.Reason.Code == code)
		}) {
			t.Fatalf("no %s event for host %q to %q with code %q in:\n%s", kind, host, to, code, mustJSON(t, out.Events))
		}
	}
}

// wantBudgets wants the host's event of kind to note exactly these
// budget occupancies.
func wantBudgets(kind, host string, want ...rc.BudgetUse) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		for _, e := range out.Events {
			if e.Kind == kind && e.Host == host {
				if !slices.Equal(e.Budgets, want) {
					t.Fatalf("%s event of %s notes budgets %v, want %v", kind, host, e.Budgets, want)
				}
				return
			}
		}
		t.Fatalf("no %s event for host %q in:\n%s", kind, host, mustJSON(t, out.Events))
	}
}

func noEvent(kind string) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		if slices.ContainsFunc(out.Events, func(e rc.Event) bool { return e.Kind == kind }) {
			t.Fatalf("unexpected %s event in:\n%s", kind, mustJSON(t, out.Events))
		}
	}
}

func wantBlocked(host, gate string) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		for _, u := range out.Hosts {
			if u.Host.Hostname == host && u.Host.Blocked.Gate == gate {
				return
			}
		}
		for _, u := range out.Rollouts {
			for _, h := range u.Rollout.Hosts {
				if h.Hostname == host && h.Blocked.Gate == gate {
					return
				}
			}
		}
		t.Fatalf("host %s is not blocked by %s:\n%s", host, gate, mustJSON(t, out))
	}
}

func wantIntents(hosts ...string) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		var got []string
		for _, it := range out.Actions {
			got = append(got, it.Host)
		}
		if !slices.Equal(got, hosts) {
			t.Fatalf("intents for %v, want %v", got, hosts)
		}
	}
}

func all(checks ...func(*testing.T, rc.Output)) func(*testing.T, rc.Output) {
	return func(t *testing.T, out rc.Output) {
		t.Helper()
		for _, c := range checks {
			c(t, out)
		}
	}
}
