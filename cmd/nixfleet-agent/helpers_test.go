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

// world is a fleet for agent tests: real closures (v0, which every host
// runs at first, and v1), a signed loopback binary cache, a git fleet
// repository with a CI key, a real nixfleet-cp on SQLite over mutual TLS,
// an operator to read it, and the hosts with their agents.
type world struct {
	t        *testing.T
	dir      string
	net      *nixtest.Net // nil: everything on loopback
	spec     fleetrepo.Spec
	repo     *fleetrepo.Repo
	cache    *nixtest.Cache
	closures map[string]map[string]nixtest.Closure // version -> host
	trust    string                                // trust.json of the agents
	cert     devcert.Files
	cpURL    string
	cp       *proc
	op       *apiclient.Client
	probes   string

	hosts map[string]*nixtest.Host
}

// worldOpts configure newWorld.
type worldOpts struct {
	// Net, when set, holds the hosts; the control plane and the cache
	// listen on its gateway.
	Net *nixtest.Net
	// Hosts and the channels' waves (soak minutes).
	Hosts    []fleetrepo.Host
	Channels map[string][]int
	// V1 changes a host's v1 closure (Host and Version are set).
	V1 map[string]nixtest.ClosureSpec
	// Unsigned hosts' v1 closures are in the cache without signatures.
	Unsigned []string
}

// newWorld builds the closures, fills the cache, signs nothing yet
// (release does) and starts the control plane.
func newWorld(t *testing.T, o worldOpts) *world {
	t.Helper()
	nixtest.Require(t)
	w := &world{t: t, dir: t.TempDir(), net: o.Net, hosts: map[string]*nixtest.Host{},
		closures: map[string]map[string]nixtest.Closure{"v0": {}, "v1": {}}}
	var specs []nixtest.ClosureSpec
	for _, h := range o.Hosts {
		v1 := o.V1[h.Name]
		v1.Host, v1.Version = h.Name, "v1"
		specs = append(specs, nixtest.ClosureSpec{Host: h.Name, Version: "v0"}, v1)
	}
	for _, c := range nixtest.Build(t, specs...) {
		w.closures[c.Spec.Version][c.Spec.Host] = c
	}
	listen := "127.0.0.1"
	var extra []string
	if w.net != nil {
		listen = w.net.Gateway
		extra = append(extra, w.net.Gateway)
	}
	w.cache = nixtest.NewCacheOn(t, listen+":0")
	for _, h := range o.Hosts {
		w.cache.Add(t, w.closures["v1"][h.Name], !slices.Contains(o.Unsigned, h.Name))
	}

	w.spec = fleetrepo.Spec{Channels: o.Channels, Hosts: o.Hosts, Closures: map[string]map[string]string{"v0": {}, "v1": {}}}
	for v, cs := range w.closures {
		for h, c := range cs {
			w.spec.Closures[v][h] = c.Name
		}
	}
	var err error
	if w.repo, err = fleetrepo.Init(filepath.Join(w.dir, "fleet")); err != nil {
		t.Fatal(err)
	}
	pub := w.repo.Key.Public().Proto()
	w.trust = filepath.Join(w.dir, "trust.json")
	writeJSON(t, w.trust, proto.TrustFile{SchemaVersion: 1, CIReleaseKey: proto.KeySlot{Current: &pub}, CacheKeys: []string{w.cache.PublicKey}})
	w.probes = filepath.Join(w.dir, "probes.json")
	if err := os.WriteFile(w.probes, []byte(`{"failedUnits":{"enabled":false},"probes":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}

	// The control plane, and an operator to read it.
	if w.cert, err = devcert.Write(w.dir, time.Now(), extra...); err != nil {
		t.Fatal(err)
	}
	opPub, opKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	opsFile := filepath.Join(w.dir, "operators.json")
	writeJSON(t, opsFile, []map[string]string{{"name": "olga", "role": "viewer", "key": trust.SSHEd25519Line(opPub)}})
	w.cp = start(t, "nixfleet-cp", exec.Command(bin.cp, "serve", "--listen", listen+":0", "--db", "sqlite://"+filepath.Join(w.dir, "cp.db"),
		"--repo", w.repo.Dir, "--trust", w.trust, "--operators", opsFile, "--tls-cert", w.cert.CertFile, "--tls-key", w.cert.KeyFile,
		"--state-dir", filepath.Join(w.dir, "cp-state"), "--poll-interval", "500ms", "--confirm-window", "2m"))
	w.cpURL = "https://" + listenAddr(t, w.cp)
	if w.op, err = apiclient.New(w.cpURL, apiclient.Options{Key: opKey, Name: "olga", ServerCAs: w.cert.Pool}); err != nil {
		t.Fatal(err)
	}
	return w
}

// closure is a host's closure at a version.
func (w *world) closure(version, host string) nixtest.Closure { return w.closures[version][host] }

// release signs the fleet at version as CI commit n and promotes it to
// the channels; it returns the commit id.
func (w *world) release(version string, n int, channels ...string) string {
	w.t.Helper()
	unsigned, err := w.spec.Fleet(version)
	if err != nil {
		w.t.Fatal(err)
	}
	commit, err := w.repo.Release(unsigned, commitID(n), time.Now().Add(time.Duration(n)*time.Second))
	if err != nil {
		w.t.Fatal(err)
	}
	for _, ch := range channels {
		if err := w.repo.Promote(ch, commit); err != nil {
			w.t.Fatal(err)
		}
	}
	return commitID(n)
}

// agentOpts change how startAgent runs an agent.
type agentOpts struct {
	CP    string             // the control plane URL (w.cpURL)
	Trust string             // trust.json (w.trust)
	Key   ed25519.PrivateKey // the host key (the fleet's)
	Env   []string           // added to the host's environment
}

// host returns the host called name, made on first use: its own /nix
// running v0, on the network when there is one.
func (w *world) host(name string) *nixtest.Host {
	w.t.Helper()
	if h, ok := w.hosts[name]; ok {
		return h
	}
	h := nixtest.NewHost(w.t, name)
	h.Seed(w.t, w.closure("v0", name))
	if w.net != nil {
		w.net.Attach(w.t, h)
	}
	w.hosts[name] = h
	return h
}

// startAgent starts the agent of a host of the fleet (again, after a
// crash: the state directory is the host's).
func (w *world) startAgent(name string, o agentOpts) *proc {
	w.t.Helper()
	h := w.host(name)
	if o.CP == "" {
		o.CP = w.cpURL
	}
	if o.Trust == "" {
		o.Trust = w.trust
	}
	if o.Key == nil {
		for _, fh := range w.spec.Hosts {
			if fh.Name == name {
				o.Key = fh.Key
			}
		}
	}
	keyFile := filepath.Join(h.Dir, "ssh_host_ed25519_key")
	writeHostKey(w.t, keyFile, o.Key)
	cmd := h.Command(context.Background(), bin.agent, "run", "--cp", o.CP, "--cp-ca", w.cert.CertFile,
		"--hostname", name, "--host-key", keyFile, "--trust", o.Trust, "--state-dir", filepath.Join(h.Dir, "agent-state"),
		"--probes", w.probes, "--substituter", w.cache.URL, "--current-system", h.CurrentSystemLink(),
		"--booted-system", h.BootedSystemLink(), "--detach", "", "--wait", "5s", "--quarantine", "1h")
	cmd.Env = append(cmd.Env, o.Env...)
	return start(w.t, "agent "+name, cmd)
}

// rollout reads a rollout from the control plane.
func (w *world) rollout(id string) (controlplane.RolloutSummary, bool) {
	var r controlplane.RolloutSummary
	err := w.op.Get(context.Background(), "/v1/rollouts/"+id, &r)
	return r, err == nil
}

// states are a rollout's host states by host name.
func (w *world) states(id string) map[string]reconciler.HostState {
	r, ok := w.rollout(id)
	if !ok {
		return nil
	}
	out := map[string]reconciler.HostState{}
	for _, h := range r.Hosts {
		out[h.Hostname] = h.State
	}
	return out
}

// journal is a rollout's host events, "<to> <code>: <message>" by host.
func (w *world) journal(id string) map[string][]string {
	w.t.Helper()
	var evs struct{ Events []json.RawMessage }
	if err := w.op.Get(context.Background(), "/v1/rollouts/"+id+"/events", &evs); err != nil {
		w.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, raw := range evs.Events {
		var e struct {
			Host, To string
			Reason   proto.Reason
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			w.t.Fatal(err)
		}
		if e.Host != "" {
			out[e.Host] = append(out[e.Host], e.To+" "+e.Reason.Code+": "+e.Reason.Message)
		}
	}
	return out
}

// logOnFailure logs a rollout as the control plane has it when the test
// failed.
func (w *world) logOnFailure(id string) {
	w.t.Cleanup(func() {
		if w.t.Failed() {
			var raw json.RawMessage
			_ = w.op.Get(context.Background(), "/v1/rollouts/"+id, &raw)
			w.t.Logf("rollout %s: %s", id, raw)
		}
	})
}

// journalMentions checks that each host's events mention a text.
func (w *world) journalMentions(id string, want map[string]string) {
	w.t.Helper()
	j := w.journal(id)
	for host, text := range want {
		if !strings.Contains(strings.Join(j[host], "\n"), text) {
			w.t.Errorf("%s's events in %s do not mention %q:\n%s", host, id, text, strings.Join(j[host], "\n"))
		}
	}
}
