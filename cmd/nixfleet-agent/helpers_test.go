package main

import (
	"os"
	"testing"

	"github.com/nixfleet/nixfleet/internal/testkit/realfleet"
)

// bin holds the binaries the tests run, built once by TestMain (with the
// race detector when the tests have it), the agent with its fault
// injection (agent/faultinject.go), which TestAgentFaults uses.
var bin realfleet.Binaries

func TestMain(m *testing.M) { os.Exit(realfleet.Main(m, &bin, "faultinject")) }
