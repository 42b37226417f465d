package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/testkit/testbin"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// gitFleet is a fleet repository the way operators and CI keep one, driven
// by the real git and nixfleet commands:
//
//   - Bare is the repository the control plane reads (--repo), as a forge
//     would host it;
//   - Work is CI's clone: a release is a commit of the unsigned fleet (the
//     "source"), then `nixfleet release sign` of that commit into releases/,
//     a second commit, and `git push origin HEAD:refs/heads/channels/stable`;
//   - the CI key lives outside the repository; TrustFile pins its public
//     half for the control plane.
type gitFleet struct {
	t         *testing.T
	Spec      fleetrepo.Spec
	Bare      string
	Work      string
	TrustFile string
	Roots     *trust.Roots
	key       string
	env       []string
	signed    time.Time // signedAt of the last release
}

// newGitFleet makes the repositories and the CI key.
func newGitFleet(t *testing.T, spec fleetrepo.Spec) *gitFleet {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	f := &gitFleet{t: t, Spec: spec, Bare: filepath.Join(dir, "fleet.git"), Work: filepath.Join(dir, "work"),
		TrustFile: filepath.Join(dir, "trust.json"), key: filepath.Join(dir, "ci")}
	// Nothing of the user's git configuration or identity applies.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			f.env = append(f.env, kv)
		}
	}
	f.env = append(f.env, "HOME="+home, "XDG_CONFIG_HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=nixfleet CI", "GIT_AUTHOR_EMAIL=ci@nixfleet.invalid",
		"GIT_COMMITTER_NAME=nixfleet CI", "GIT_COMMITTER_EMAIL=ci@nixfleet.invalid")

	f.run(dir, "git", "init", "--quiet", "--bare", f.Bare)
	// Keep every push as a pack, as forges do, rather than exploding small
	// ones into loose objects: the control plane must see objects that
	// arrive in new packs while it runs.
	f.run(f.Bare, "git", "config", "receive.unpackLimit", "1")
	f.run(dir, "git", "init", "--quiet", "--initial-branch=main", f.Work)
	f.run(f.Work, "git", "remote", "add", "origin", f.Bare)
	f.run(dir, bin.cli, "keygen", "--out", f.key)
	pub, err := os.ReadFile(f.key + ".pub.json")
	if err != nil {
		t.Fatal(err)
	}
	trustJSON := fmt.Sprintf(`{"schemaVersion":1,"ciReleaseKey":{"current":%s},"cacheKeys":[]}`, bytes.TrimSpace(pub))
	if err := os.WriteFile(f.TrustFile, []byte(trustJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	if f.Roots, err = trust.ParseRoots([]byte(trustJSON)); err != nil {
		t.Fatal(err)
	}
	return f
}

// run runs a command in dir with the fleet's environment and returns its
// stdout; a failure ends the test.
func (f *gitFleet) run(dir, name string, args ...string) string {
	f.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, testbin.Env(f.env)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		f.t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// Release commits the fleet at a version (every host's closure is
// fleetrepo.Closure(host, version)), signs that commit as CI does, commits
// the signed releases/ and pushes it to the channel stable. It returns the
// rollout id the control plane will open.
func (f *gitFleet) Release(version string) string {
	f.t.Helper()
	unsigned, err := f.Spec.Fleet(version)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.Work, "fleet.json"), unsigned, 0o644); err != nil {
		f.t.Fatal(err)
	}
	f.run(f.Work, "git", "add", "fleet.json")
	f.run(f.Work, "git", "commit", "--quiet", "--allow-empty", "-m", "fleet: "+version)
	source := f.run(f.Work, "git", "rev-parse", "HEAD")

	// CI signs once per commit and the clock moves on between releases; a
	// release signed in the same second as the last would be refused as a
	// replay, which is not what these tests are about.
	now := time.Now().UTC().Truncate(time.Second)
	if !now.After(f.signed) {
		now = f.signed.Add(time.Second)
	}
	f.signed = now
	// Without --commit, release sign stamps `git rev-parse HEAD`: the
	// source commit.
	f.run(f.Work, bin.cli, "release", "sign", "--fleet", "fleet.json", "--key", f.key+".pem", "--out", "releases",
		"--now", now.Format(time.RFC3339))
	f.run(f.Work, "git", "add", "releases")
	f.run(f.Work, "git", "commit", "--quiet", "-m", "release "+source)
	f.run(f.Work, "git", "push", "--quiet", "origin", "HEAD:refs/heads/channels/stable")
	return proto.RolloutID("stable", source)
}
