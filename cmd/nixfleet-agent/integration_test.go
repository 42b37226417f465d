package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/internal/devcert"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/nixtest"
	"github.com/nixfleet/nixfleet/internal/testbin"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/trust"
)

// bin holds the binaries the tests run, built once by TestMain (with the
// race detector when the tests have it).
var bin struct{ cp, agent string }

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
	paths, err := testbin.Build(dir, "github.com/nixfleet/nixfleet/cmd/nixfleet-cp", "github.com/nixfleet/nixfleet/cmd/nixfleet-agent")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bin.cp, bin.agent = paths[0], paths[1]
	return m.Run()
}

// proc is a process whose output is kept for the test's log.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	done chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// start runs cmd, stops it (SIGTERM, then SIGKILL) when the test ends and
// prints its output when the test failed.
func start(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p, p
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		if strings.Contains(p.String(), "WARNING: DATA RACE") {
			t.Errorf("%s: the race detector found a data race", name)
		}
		if t.Failed() {
			t.Logf("==== %s output:\n%s", name, p.String())
		}
	})
	return p
}

// listenAddr waits for the control plane's "serving" log line.
func listenAddr(t *testing.T, p *proc) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		sc := bufio.NewScanner(strings.NewReader(p.String()))
		for sc.Scan() {
			var rec struct{ Msg, Listen string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "control plane serving" {
				return rec.Listen
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited: %s", p.name, p.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("%s: not serving within 30s", p.name)
	return ""
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s", what, d)
}

// writeHostKey writes an ed25519 key as OpenSSH writes a host key.
func writeHostKey(t *testing.T, path string, key ed25519.PrivateKey) {
	t.Helper()
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func commitID(n int) string { return fmt.Sprintf("%07x%033d", n, 0) }

// TestAgentWithRealNix: a real nixfleet-cp on SQLite over mutual TLS and
// one real nixfleet-agent per host, each host with its own /nix in a
// private mount namespace, realising from a signed binary cache on
// loopback:
//
//   - web-1 gets a good closure: it verifies the manifest, realises,
//     switches, confirms, and converges;
//   - web-2's closure fails to switch: the agent rolls back to the
//     closure it ran before and reports it;
//   - web-3's closure is in the cache unsigned: Nix refuses it, the agent
//     reports closure_unsigned and keeps its system;
//   - a client with a key CI did not sign is refused.
//
// What is asserted comes from the hosts' real links and switch logs and
// from the control plane's journal.
func TestAgentWithRealNix(t *testing.T) {
	nixtest.Require(t)
	dir := t.TempDir()
	names := []string{"web-1", "web-2", "web-3"}
	specs := []nixtest.ClosureSpec{}
	for _, n := range names {
		specs = append(specs, nixtest.ClosureSpec{Host: n, Version: "v0"},
			nixtest.ClosureSpec{Host: n, Version: "v1", FailSwitch: n == "web-2"})
	}
	built := nixtest.Build(t, specs...)
	closure := map[string]map[string]nixtest.Closure{"v0": {}, "v1": {}}
	for _, c := range built {
		closure[c.Spec.Version][c.Spec.Host] = c
	}
	cache := nixtest.NewCache(t)
	for _, n := range names {
		cache.Add(t, closure["v1"][n], n != "web-3")
	}

	// The fleet: one channel, one wave of three hosts, real closures.
	spec := fleetrepo.Spec{Channels: map[string][]int{"stable": {0}}, Closures: map[string]map[string]string{"v0": {}, "v1": {}}}
	for _, n := range names {
		spec.Hosts = append(spec.Hosts, fleetrepo.NewHost(n, "stable", 0))
		for _, v := range []string{"v0", "v1"} {
			spec.Closures[v][n] = closure[v][n].Name
		}
	}
	repo, err := fleetrepo.Init(filepath.Join(dir, "fleet"))
	if err != nil {
		t.Fatal(err)
	}
	pub := repo.Key.Public().Proto()
	trustFile := filepath.Join(dir, "trust.json")
	writeJSON(t, trustFile, proto.TrustFile{SchemaVersion: 1, CIReleaseKey: proto.KeySlot{Current: &pub}, CacheKeys: []string{cache.PublicKey}})
	release := func(version string, n int) {
		t.Helper()
		unsigned, err := spec.Fleet(version)
		if err != nil {
			t.Fatal(err)
		}
		commit, err := repo.Release(unsigned, commitID(n), time.Now().Add(time.Duration(n)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := repo.Promote("stable", commit); err != nil {
			t.Fatal(err)
		}
	}
	release("v0", 1)

	// The control plane, and an operator to read it.
	cert, err := devcert.Write(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	opPub, opKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	opsFile := filepath.Join(dir, "operators.json")
	writeJSON(t, opsFile, []map[string]string{{"name": "olga", "role": "viewer", "key": trust.SSHEd25519Line(opPub)}})
	cp := start(t, "nixfleet-cp", exec.Command(bin.cp, "serve", "--listen", "127.0.0.1:0", "--db", "sqlite://"+filepath.Join(dir, "cp.db"),
		"--repo", repo.Dir, "--trust", trustFile, "--operators", opsFile, "--tls-cert", cert.CertFile, "--tls-key", cert.KeyFile,
		"--state-dir", filepath.Join(dir, "cp-state"), "--poll-interval", "500ms", "--confirm-window", "2m"))
	cpURL := "https://" + listenAddr(t, cp)
	op, err := apiclient.New(cpURL, apiclient.Options{Key: opKey, Name: "olga", ServerCAs: cert.Pool})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// Every host runs v0 and its agent.
	hosts := map[string]*nixtest.Host{}
	probes := filepath.Join(dir, "probes.json")
	if err := os.WriteFile(probes, []byte(`{"failedUnits":{"enabled":false},"probes":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, h := range spec.Hosts {
		nh := nixtest.NewHost(t, h.Name)
		nh.Seed(t, closure["v0"][h.Name])
		hosts[h.Name] = nh
		keyFile := filepath.Join(nh.Dir, "ssh_host_ed25519_key")
		writeHostKey(t, keyFile, h.Key)
		cmd := nh.Command(context.Background(), bin.agent, "run", "--cp", cpURL, "--cp-ca", cert.CertFile,
			"--hostname", h.Name, "--host-key", keyFile, "--trust", trustFile, "--state-dir", filepath.Join(nh.Dir, "agent-state"),
			"--probes", probes, "--substituter", cache.URL, "--current-system", nh.CurrentSystemLink(),
			"--booted-system", nh.BootedSystemLink(), "--detach", "", "--wait", "5s", "--quarantine", "1h")
		start(t, "agent "+h.Name, cmd)
	}

	rollout := func(id string) (controlplane.RolloutSummary, bool) {
		var r controlplane.RolloutSummary
		err := op.Get(ctx, "/v1/rollouts/"+id, &r)
		return r, err == nil
	}
	// Onboarding: the agents check in, verify the v0 manifest and confirm
	// what they run.
	eventually(t, 60*time.Second, "the hosts converge on v0", func() bool {
		r, ok := rollout("stable@" + commitID(1))
		return ok && r.Counts[reconciler.HostConverged] == len(names)
	})

	release("v1", 2)
	id := "stable@" + commitID(2)
	defer func() {
		if t.Failed() {
			var raw json.RawMessage
			_ = op.Get(ctx, "/v1/rollouts/"+id, &raw)
			t.Logf("rollout %s: %s", id, raw)
		}
	}()
	eventually(t, 90*time.Second, "every host of the v1 rollout is done", func() bool {
		r, ok := rollout(id)
		if !ok {
			return false
		}
		// web-1 confirmed; the failures of the others halt the rollout
		// (healthGate.maxFailures 0), which keeps web-1 Soaking.
		want := map[string][]reconciler.HostState{"web-1": {reconciler.HostSoaking, reconciler.HostConverged},
			"web-2": {reconciler.HostReverted, reconciler.HostFailed}, "web-3": {reconciler.HostFailed}}
		for _, h := range r.Hosts {
			if !slices.Contains(want[h.Hostname], h.State) {
				return false
			}
		}
		// And web-2 is back on v0.
		return hosts["web-2"].CurrentSystem(t) == closure["v0"]["web-2"].Path && len(hosts["web-2"].SwitchLog(t)) == 2
	})

	// web-1: on v1 for real, switched once, confirmed.
	v1, v0 := closure["v1"], closure["v0"]
	if got := hosts["web-1"].CurrentSystem(t); got != v1["web-1"].Path {
		t.Errorf("web-1 runs %s, want %s", got, v1["web-1"].Path)
	}
	if log := hosts["web-1"].SwitchLog(t); !equal(log, []string{"switch " + v1["web-1"].Path}) {
		t.Errorf("web-1's switch log: %q", log)
	}
	// web-2: tried v1, whose switch failed, and switched back to v0.
	if got := hosts["web-2"].CurrentSystem(t); got != v0["web-2"].Path {
		t.Errorf("web-2 runs %s, want its previous %s", got, v0["web-2"].Path)
	}
	if log := hosts["web-2"].SwitchLog(t); !equal(log, []string{"switch " + v1["web-2"].Path, "switch " + v0["web-2"].Path}) {
		t.Errorf("web-2's switch log: %q", log)
	}
	// web-3: never switched; Nix refused the unsigned closure.
	if got := hosts["web-3"].CurrentSystem(t); got != v0["web-3"].Path {
		t.Errorf("web-3 runs %s, want %s", got, v0["web-3"].Path)
	}
	if log := hosts["web-3"].SwitchLog(t); len(log) != 0 {
		t.Errorf("web-3 switched: %q", log)
	}
	if hosts["web-3"].Valid(t, v1["web-3"].Path) {
		t.Errorf("the unsigned closure is valid in web-3's store")
	}

	// The journal explains each host's end.
	var evs struct{ Events []json.RawMessage }
	if err := op.Get(ctx, "/v1/rollouts/"+id+"/events", &evs); err != nil {
		t.Fatal(err)
	}
	journal := map[string][]string{}
	for _, raw := range evs.Events {
		var e struct {
			Host, To string
			Reason   proto.Reason
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		if e.Host != "" {
			journal[e.Host] = append(journal[e.Host], e.To+" "+e.Reason.Code+": "+e.Reason.Message)
		}
	}
	for host, want := range map[string]string{"web-1": "Soaking confirmed", "web-2": "switch_failed", "web-3": "closure_unsigned"} {
		if !strings.Contains(strings.Join(journal[host], "\n"), want) {
			t.Errorf("%s's events do not mention %q:\n%s", host, want, strings.Join(journal[host], "\n"))
		}
	}

	// A key CI did not sign for any host is refused.
	_, stranger, _ := ed25519.GenerateKey(nil)
	sc, err := apiclient.New(cpURL, apiclient.Options{Key: stranger, Name: "web-1", ServerCAs: cert.Pool})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sc.Checkin(ctx, proto.CheckinRequest{Hostname: "web-1"})
	if !apiclient.IsCode(err, controlplane.CodeUnknownClient) {
		t.Errorf("a check-in as web-1 with another key: %v, want %s", err, controlplane.CodeUnknownClient)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
