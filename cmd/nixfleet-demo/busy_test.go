package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/internal/testkit/testbin"
)

// TestDemoAtItsLimitOnABusyMachine runs the demo at its documented
// maximum, 500 hosts, as shipped (no race detector), beside two processes
// that keep the machine's CPUs busy: it passes, the stand-in Prometheus
// answering in time and no analysis inconclusive.
func TestDemoAtItsLimitOnABusyMachine(t *testing.T) {
	bins, err := testbin.BuildAsShipped(t.TempDir(), "github.com/nixfleet/nixfleet/cmd/nixfleet-demo")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// The hogs: busy loops bounded by the test's context.
	for range 2 {
		hog := exec.CommandContext(ctx, "sh", "-c", "while :; do :; done")
		if err := hog.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = hog.Process.Kill(); _ = hog.Wait() })
	}
	cmd := exec.CommandContext(ctx, bins[0], "--hosts", "500", "--json", "--timeout", "6m")
	cmd.Env = append(cmd.Environ(), "TMPDIR="+t.TempDir())
	out, err := cmd.Output()
	var rep struct {
		OK       bool   `json:"ok"`
		Code     string `json:"code"`
		Message  string `json:"message"`
		Hosts    int    `json:"hosts"`
		Rollouts []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"rollouts"`
	}
	if jerr := json.Unmarshal(out, &rep); jerr != nil {
		t.Fatalf("demo: %v; its report: %v\n%s", err, jerr, out)
	}
	if err != nil || !rep.OK || rep.Hosts != 500 {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("demo at 500 hosts beside two CPU hogs: %v, ok %v, %s: %s; rollouts %+v\n%s", err, rep.OK, rep.Code, rep.Message, rep.Rollouts, stderr)
	}
}
