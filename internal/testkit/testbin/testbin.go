// Package testbin builds the project's commands for tests that run them
// as real processes: with the race detector when the test binary has it,
// so that a data race in a child process fails the test that ran it.
package testbin

import (
	"fmt"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// Build builds the packages into dir and returns each binary's path, in
// the order given. It uses the go command go test put first on PATH.
func Build(dir string, pkgs ...string) ([]string, error) {
	return BuildTags(dir, nil, pkgs...)
}

// BuildTags is Build with build tags (go build -tags): test-only code that
// shipped binaries lack, such as the agent's fault injection
// (faultinject).
func BuildTags(dir string, tags []string, pkgs ...string) ([]string, error) {
	return build(dir, RaceEnabled, tags, pkgs)
}

// BuildAsShipped builds the packages without the race detector whatever
// the test binary has: for a test of what a binary does at its documented
// limits, which the race detector's 5-10x slowdown would not measure.
func BuildAsShipped(dir string, pkgs ...string) ([]string, error) {
	return build(dir, false, nil, pkgs)
}

func build(dir string, race bool, tags, pkgs []string) ([]string, error) {
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if race {
		args = append(args, "-race")
	}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, pkgs...)
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	paths := make([]string, len(pkgs))
	for i, p := range pkgs {
		paths[i] = filepath.Join(dir, path.Base(p))
	}
	return paths, nil
}

// Env returns env for a binary built with -race: the race runtime
// otherwise sleeps a second before exiting (GORACE atexit_sleep_ms), which
// every command and every stopped process would pay.
func Env(env []string) []string {
	out := make([]string, 0, len(env)+1)
	opts := "atexit_sleep_ms=0"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GORACE="); ok {
			opts = v + " " + opts
			continue
		}
		out = append(out, kv)
	}
	return append(out, "GORACE="+opts)
}
