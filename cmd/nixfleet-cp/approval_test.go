package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestApprovalThroughTheCLI, with real processes (nixfleet-cp serving,
// the nixfleet CLI, simulated agents over mutual TLS): a release waits for
// the approval of its wave 1; an approver approves with `nixfleet rollout
// approve`; the rollout goes on and converges; `nixfleet audit verify`
// accepts the control plane's record and refuses it after one byte of the
// signed intent is changed (rfcs/0003 rule 15, rfcs/0007 §Signed intents).
func TestApprovalThroughTheCLI(t *testing.T) {
	t.Parallel()
	spec := twoWaveSpec()
	spec.Approvals = map[string]map[int]proto.Approval{"stable": {1: {Required: true}}}
	f := newGitFleet(t, spec)
	site := newSite(t)
	v1 := f.Release("v1")
	cp := startCP(t, site, f, dbURL(t, "sqlite"), "cp-1", "--tick-interval", "1s")
	stop := runHosts(fleetHosts(f, cp)["canary"], fleetHosts(f, cp)["web-1"], fleetHosts(f, cp)["web-2"])
	defer stop()

	eventually(t, 30*time.Second, "wave 1 waits for its approval", func() bool {
		ro, ok := getRollout(cp, v1)
		if !ok || ro.Wave != 1 {
			return false
		}
		for _, h := range ro.Hosts {
			if h.Wave == 1 && (h.State != string(reconciler.HostPending) || h.Blocked.Gate != codes.Approval) {
				return false
			}
		}
		return true
	})

	dir := t.TempDir()
	cli := cliAs(t, site, cp, site.apprKey)
	out, _ := cli(0, "rollout", "approve", v1, "--wave", "1", "--comment", "CAB 42 approved")
	if !strings.Contains(out, "accepted") || !strings.Contains(out, "operator_approve") {
		t.Fatalf("approve said:\n%s", out)
	}
	eventually(t, 30*time.Second, "the rollout converges after the approval", func() bool {
		ro, ok := getRollout(cp, v1)
		return ok && ro.State == string(reconciler.RolloutConverged)
	})

	export, _ := cli(0, "audit", "export")
	exportFile := filepath.Join(dir, "audit.json")
	if err := os.WriteFile(exportFile, []byte(export), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ = cli(0, "audit", "verify", "--operators", site.Operators, "--from", exportFile)
	if !strings.Contains(out, "1 intent(s): 1 verified, 0 unsigned, 0 forged or altered") {
		t.Fatalf("audit verify said:\n%s", out)
	}
	// The same straight from the control plane.
	cli(0, "audit", "verify", "--operators", site.Operators)

	// One byte of the signed document changed: refused.
	i := strings.Index(export, "CAB 42 approved")
	if i < 0 || strings.Count(export, "CAB 42 approved") < 2 {
		t.Fatalf("the export does not hold the comment in the record and the signed document:\n%s", export)
	}
	j := strings.LastIndex(export, "CAB 42 approved") + len("CAB 4")
	tampered := export[:j] + "3" + export[j+1:]
	if err := os.WriteFile(exportFile, []byte(tampered), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr := cli(1, "audit", "verify", "--operators", site.Operators, "--from", exportFile)
	if !strings.Contains(out, "FORGED") || !strings.Contains(stderr, codes.AuditFailed) {
		t.Fatalf("a changed byte: stdout\n%s\nstderr\n%s", out, stderr)
	}
}
