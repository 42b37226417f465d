package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/nixfleet/nixfleet/internal/testkit/testbin"
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
	paths, err := testbin.Build(dir, "github.com/nixfleet/nixfleet/cmd/nixfleet-cp", "github.com/nixfleet/nixfleet/cmd/nixfleet")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bin.cp, bin.cli = paths[0], paths[1]
	return m.Run()
}
