package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/nixfleet/nixfleet/internal/realfleet"
)

// bin holds the binaries the tests run, built once by TestMain (with the
// race detector when the tests have it).
var bin realfleet.Binaries

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nixfleet-agent-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if bin, err = realfleet.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
