//go:build faultinject

package agent

import (
	"os"
	"syscall"
)

// Fault injection, for the tests that kill the agent in an activation
// (cmd/nixfleet-agent TestAgentFaults). Only a binary built with
// -tags faultinject has it (internal/testkit/realfleet builds the test's
// agent so); the shipped agent has the empty crash of nofaultinject.go.
//
// NIXFLEET_AGENT_TEST_CRASH_AT names the point where the agent kills
// itself with SIGKILL: "before-switch" (after the breadcrumb, before the
// profile is set), "after-switch" (the host runs the target, nothing
// recorded yet) or "before-reboot" (a reboot the control plane ordered is
// recorded, the once-only entry set, the reboot not ordered).
var crashAt = os.Getenv("NIXFLEET_AGENT_TEST_CRASH_AT")

// crash kills the process when at is the point the environment names.
func (a *Agent) crash(at string) {
	if crashAt == at {
		a.c.Log.Warn("fault injection: killing the agent", "at", at)
		_ = syscall.Kill(syscall.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
