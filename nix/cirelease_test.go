package nix

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nixfleet/nixfleet/internal/testkit/testbin"
	"github.com/nixfleet/nixfleet/proto"
)

// ciRepo is a fleet repository whose fleet.nix is the mkFleet result of a
// case of testdata/nix (its hosts' toplevels are tiny derivations built
// with /bin/sh), committed, with a CI key next to it.
type ciRepo struct {
	dir, key, trust string
	env             []string
}

func newCIRepo(t *testing.T, caseFile string) ciRepo {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	r := ciRepo{dir: filepath.Join(base, "fleet"), env: append(testbin.Env(nixEnv(t)),
		"GIT_AUTHOR_NAME=ci", "GIT_AUTHOR_EMAIL=ci@example.invalid", "GIT_COMMITTER_NAME=ci", "GIT_COMMITTER_EMAIL=ci@example.invalid",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")}
	if err := os.Mkdir(r.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	fleet := "import " + q(filepath.Join(root, "nix/tests/case.nix")) + " { file = " + q(filepath.Join(root, caseFile)) + "; }\n"
	if err := os.WriteFile(filepath.Join(r.dir, "fleet.nix"), []byte(fleet), 0o644); err != nil {
		t.Fatal(err)
	}
	r.git(t, "init", "-q")
	r.git(t, "add", "fleet.nix")
	r.git(t, "commit", "-q", "-m", "fleet")

	r.key = filepath.Join(base, "ci")
	r.run(t, binary(t, "nixfleet"), "keygen", "--out", r.key)
	pub, err := os.ReadFile(r.key + ".pub.json")
	if err != nil {
		t.Fatal(err)
	}
	r.trust = filepath.Join(base, "trust.json")
	trustJSON := `{"schemaVersion":1,"ciReleaseKey":{"current":` + strings.TrimSpace(string(pub)) + `},"cacheKeys":[]}`
	if err := os.WriteFile(r.trust, []byte(trustJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r ciRepo) run(t *testing.T, name string, args ...string) string {
	t.Helper()
	res := runIn(t, r.dir, r.env, name, args...)
	if res.err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), res.err, res.stderr)
	}
	return strings.TrimSpace(string(res.stdout))
}

func (r ciRepo) git(t *testing.T, args ...string) string { return r.run(t, "git", args...) }

func (r ciRepo) release(t *testing.T, extra ...string) nixRun {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{filepath.Join(root, "nix", "ci-release.sh"), "--file", "fleet.nix", "--key", r.key + ".pem",
		"--nixfleet", binary(t, "nixfleet")}, extra...)
	return runIn(t, r.dir, r.env, "bash", args...)
}

// requireBuilds fails the test unless it can build into the machine's
// Nix store (root, as .ci/run runs the tests).
func requireBuilds(t *testing.T) {
	t.Helper()
	requireNix(t, "nix-store", "git")
	if os.Geteuid() != 0 {
		t.Fatal("building into /nix/store needs root; run .ci/run as root")
	}
}

// TestCIRelease: nix/ci-release.sh on a fleet repository evaluates the
// fleet, builds every host's toplevel, copies the closures to a binary
// cache, signs the fleet with every closureHash filled and commits
// releases/; `nixfleet verify` accepts what it wrote, and each host's
// closureHash is the store path that was built.
func TestCIRelease(t *testing.T) {
	t.Parallel()
	requireBuilds(t)
	r := newCIRepo(t, "testdata/nix/fleets/two-channels.nix")
	head := r.git(t, "rev-parse", "HEAD")
	cache := filepath.Join(t.TempDir(), "cache")

	res := r.release(t, "--copy-to", "file://"+cache)
	if res.err != nil {
		t.Fatalf("ci-release: %v\n%s", res.err, res.stderr)
	}

	if got := r.git(t, "log", "-1", "--format=%s"); got != "release: "+head {
		t.Errorf("last commit %q, want the release of %s", got, head)
	}
	if got := r.git(t, "rev-parse", "HEAD~1"); got != head {
		t.Errorf("the release commit's parent is %s, want %s", got, head)
	}
	if st := r.git(t, "status", "--porcelain"); st != "" {
		t.Errorf("uncommitted changes after the release:\n%s", st)
	}
	committed := strings.Fields(r.git(t, "show", "--name-only", "--format=", "HEAD"))
	want := []string{
		"releases/fleet.resolved.json", "releases/fleet.resolved.json.sig",
		"releases/rollouts/edge@" + head + ".json", "releases/rollouts/edge@" + head + ".json.sig",
		"releases/rollouts/stable@" + head + ".json", "releases/rollouts/stable@" + head + ".json.sig",
	}
	if !slices.Equal(committed, want) {
		t.Errorf("the release commit holds %q, want %q", committed, want)
	}

	for _, f := range want {
		if strings.HasSuffix(f, ".json") {
			r.run(t, binary(t, "nixfleet"), "verify", "--trust", r.trust, f)
		}
	}

	data, err := os.ReadFile(filepath.Join(r.dir, "releases", "fleet.resolved.json"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := proto.DecodeFleetResolved(data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Meta.CICommit == nil || *f.Meta.CICommit != head {
		t.Errorf("meta.ciCommit %v, want %s", f.Meta.CICommit, head)
	}
	var toplevels map[string]string
	out := mustNix(t, "nix", "eval", "--json", "-f", filepath.Join(r.dir, "fleet.nix"), "toplevels", "--apply",
		"builtins.mapAttrs (_: t: builtins.unsafeDiscardStringContext t.outPath)")
	if err := json.Unmarshal(out, &toplevels); err != nil {
		t.Fatal(err)
	}
	if len(toplevels) != len(f.Hosts) {
		t.Errorf("%d toplevels for %d hosts", len(toplevels), len(f.Hosts))
	}
	for name, h := range f.Hosts {
		p := toplevels[name]
		if h.ClosureHash == nil || *h.ClosureHash != filepath.Base(p) {
			t.Errorf("host %s: closureHash %v, want %s", name, h.ClosureHash, filepath.Base(p))
		}
		if _, err := os.Stat(p); err != nil {
			t.Errorf("host %s: the toplevel was not built: %v", name, err)
		}
		hash, _, _ := strings.Cut(filepath.Base(p), "-")
		if _, err := os.Stat(filepath.Join(cache, hash+".narinfo")); err != nil {
			t.Errorf("host %s: not in the cache: %v", name, err)
		}
	}
}

// TestCIReleaseRefusesInvalidFleet: an invalid fleet stops the release
// at evaluation, with every problem on stderr; nothing is built, written
// or committed.
func TestCIReleaseRefusesInvalidFleet(t *testing.T) {
	t.Parallel()
	requireBuilds(t)
	r := newCIRepo(t, "testdata/nix/invalid/host-edge-cycle.nix")
	head := r.git(t, "rev-parse", "HEAD")
	res := r.release(t)
	if res.err == nil {
		t.Fatal("ci-release succeeded on an invalid fleet")
	}
	if !strings.Contains(string(res.stderr), "edges form a cycle: a -> b -> c -> a") {
		t.Errorf("stderr does not name the problem:\n%s", res.stderr)
	}
	if strings.Contains(string(res.stderr), "building") {
		t.Errorf("ci-release built before the fleet was valid:\n%s", res.stderr)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "releases")); !os.IsNotExist(err) {
		t.Errorf("releases/ was written: %v", err)
	}
	if got := r.git(t, "rev-parse", "HEAD"); got != head {
		t.Errorf("HEAD moved to %s", got)
	}
}
