package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// bin holds the real binaries the integration tests run: built once per
// test binary by TestMain, with the race detector when the tests have it,
// so a data race in a control plane process fails the test that ran it.
var bin struct {
	cp  string // nixfleet-cp
	cli string // nixfleet
}

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nixfleet-cp-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// go test puts its own go command first on PATH.
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/nixfleet/nixfleet/cmd/nixfleet-cp", "github.com/nixfleet/nixfleet/cmd/nixfleet")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go %s: %v\n%s", strings.Join(args, " "), err, out)
		return 1
	}
	bin.cp, bin.cli = filepath.Join(dir, "nixfleet-cp"), filepath.Join(dir, "nixfleet")
	return m.Run()
}

// raceEnv returns an environment for a binary built with -race: the race
// runtime sleeps a second before exiting (GORACE atexit_sleep_ms), which
// every command and every stopped replica would pay.
func raceEnv(env []string) []string {
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
