package nix

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/internal/testkit/nixtest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/nix")

// repoRoot is the repository, relative to this package's directory (where
// go test runs the tests). Nix commands run there, so that the paths they
// are given are relative (a Nix path literal cannot hold a space).
const repoRoot = ".."

// nixTimeout bounds one Nix command.
const nixTimeout = 2 * time.Minute

// requireNix fails the test (never skips it) unless the Nix commands the
// tests run are on PATH; .ci/run installs Debian's nix-bin.
func requireNix(t testing.TB, commands ...string) {
	t.Helper()
	var missing []string
	for _, c := range append([]string{"nix", "nix-instantiate"}, commands...) {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("Nix is required: %s not on PATH; run .ci/run, which installs Debian's nix-bin", strings.Join(missing, ", "))
	}
}

// nixEnv is the environment of every Nix command: nixtest's (offline, the
// nix command enabled, no sandbox, no build users) with a private cache
// directory.
func nixEnv(t testing.TB) []string {
	return append(nixtest.BaseEnv(), "XDG_CACHE_HOME="+t.TempDir())
}

// nixRun is the outcome of one command.
type nixRun struct {
	stdout, stderr []byte
	err            error
}

// runIn runs name with args in dir with env and returns what happened;
// it does not fail the test.
func runIn(t testing.TB, dir string, env []string, name string, args ...string) nixRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), nixTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return nixRun{stdout: stdout.Bytes(), stderr: stderr.Bytes(), err: err}
}

// runNix runs a Nix command in the repository.
func runNix(t testing.TB, name string, args ...string) nixRun {
	t.Helper()
	return runIn(t, repoRoot, nixEnv(t), name, args...)
}

// mustNix runs a Nix command that must succeed and returns its stdout.
func mustNix(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	r := runNix(t, name, args...)
	if r.err != nil {
		t.Fatalf("%s %s: %v\nstderr:\n%s", name, strings.Join(args, " "), r.err, r.stderr)
	}
	return r.stdout
}

// evalCase evaluates attr of the case file (a path relative to the
// repository) with nix-instantiate --eval --strict --json.
func evalCase(t testing.TB, file, attr string) nixRun {
	t.Helper()
	return runNix(t, "nix-instantiate", "--eval", "--strict", "--json", "nix/tests/case.nix", "--arg", "file", "./"+file, "-A", attr)
}

// mustEvalCase is evalCase that must succeed, decoded into v.
func mustEvalCase(t testing.TB, file, attr string, v any) []byte {
	t.Helper()
	r := evalCase(t, file, attr)
	if r.err != nil {
		t.Fatalf("evaluating %s of %s: %v\nstderr:\n%s", attr, file, r.err, r.stderr)
	}
	if v != nil {
		if err := json.Unmarshal(r.stdout, v); err != nil {
			t.Fatalf("%s of %s: %v", attr, file, err)
		}
	}
	return r.stdout
}

// caseRoots hold the mkFleet cases, relative to the repository, each in
// its fleets/ and invalid/: testdata/nix, and nix/tests for the cases of
// change control and canary analysis. nix/tests/default.nix runs the same.
var caseRoots = []string{"testdata/nix", "nix/tests"}

// caseFiles returns the case files (relative to the repository) of
// <root>/<dir> for each of caseRoots, sorted.
func caseFiles(t testing.TB, dir string) []string {
	t.Helper()
	var matches []string
	for _, root := range caseRoots {
		m, err := filepath.Glob(filepath.Join(repoRoot, filepath.FromSlash(root), dir, "*.nix"))
		if err != nil {
			t.Fatal(err)
		}
		if len(m) == 0 {
			t.Fatalf("no cases in %s/%s", root, dir)
		}
		matches = append(matches, m...)
	}
	var files []string
	for _, m := range matches {
		rel, err := filepath.Rel(repoRoot, m)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	slices.Sort(files)
	return files
}

func caseName(file string) string { return strings.TrimSuffix(filepath.Base(file), ".nix") }

// fakeClosure is a valid closureHash for host: 32 characters of Nix's
// base32 alphabet derived from the name, and "-nixos-system".
func fakeClosure(host string) string {
	const alphabet = "0123456789abcdfghijklmnpqrsvwxyz"
	sum := sha256.Sum256([]byte(host))
	b := make([]byte, 32)
	for i := range b {
		b[i] = alphabet[sum[i]%32]
	}
	return string(b) + "-nixos-system"
}

// withClosures returns the fleet.resolved document doc with the
// closureHash of each host of closures set, as CI does after building.
func withClosures(t testing.TB, doc []byte, closures map[string]string) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatal(err)
	}
	hosts, _ := m["hosts"].(map[string]any)
	for name, c := range closures {
		h, ok := hosts[name].(map[string]any)
		if !ok {
			t.Fatalf("host %q is not in the document", name)
		}
		h["closureHash"] = c
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fakeClosures gives every host of built a fake closure.
func fakeClosures(built []string) map[string]string {
	m := map[string]string{}
	for _, h := range built {
		m[h] = fakeClosure(h)
	}
	return m
}
