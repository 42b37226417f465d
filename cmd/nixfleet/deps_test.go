package main

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// serverDeps are what the operator CLI must not link: the control plane,
// its store and their drivers, git, and the demo that runs them all
// (issue #14: nixfleet linked the whole server). The operator API's
// bodies are in proto, its client in apiclient; the demo is nixfleet-demo.
var serverDeps = []string{
	"github.com/nixfleet/nixfleet/controlplane",
	"github.com/nixfleet/nixfleet/cmd/nixfleet-demo/internal/demo",
	"github.com/jackc/pgx",
	"modernc.org/sqlite",
	"github.com/go-git/go-git",
}

// forbiddenDeps lists the packages pkg depends on, with go list -deps,
// that are or are under one of serverDeps.
func forbiddenDeps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
	}
	var bad []string
	for _, dep := range strings.Fields(string(out)) {
		if slices.ContainsFunc(serverDeps, func(p string) bool { return dep == p || strings.HasPrefix(dep, p+"/") }) {
			bad = append(bad, dep)
		}
	}
	return bad
}

// TestNoServerDeps: nixfleet imports no package of the server, directly or
// not.
func TestNoServerDeps(t *testing.T) {
	t.Parallel()
	if bad := forbiddenDeps(t, "."); len(bad) > 0 {
		t.Errorf("nixfleet depends on server packages (rfcs/0009 §The demo):\n  %s", strings.Join(bad, "\n  "))
	}
}

// TestNoServerDepsCheck: the check finds them where they are.
func TestNoServerDepsCheck(t *testing.T) {
	t.Parallel()
	bad := forbiddenDeps(t, "../nixfleet-demo")
	for _, want := range []string{"github.com/nixfleet/nixfleet/controlplane", "github.com/nixfleet/nixfleet/controlplane/store",
		"github.com/nixfleet/nixfleet/cmd/nixfleet-demo/internal/demo", "modernc.org/sqlite", "github.com/jackc/pgx/v5", "github.com/go-git/go-git/v5"} {
		if !slices.Contains(bad, want) {
			t.Errorf("the check misses %s in nixfleet-demo; it found %q", want, bad)
		}
	}
}
