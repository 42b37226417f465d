// Package realfleet runs a real fleet for integration and end-to-end
// tests: the project's binaries as real processes (a nixfleet-cp over
// mutual TLS, one nixfleet-agent per simulated host), hosts with their own
// Nix store (and optionally network namespace) from package nixtest, a
// signed binary cache and a git fleet repository with a CI key. What tests
// assert comes from the hosts' links, profiles and switch logs and from the
// control plane's journal, never from the kit's own bookkeeping.
package realfleet

import (
	"bufio"
	"crypto/ed25519"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/nixfleet/nixfleet/internal/testkit/testbin"
)

// Binaries are the commands a fleet runs.
type Binaries struct{ CP, Agent, CLI string }

// Build builds the three commands into dir, with the race detector when
// the tests have it (internal/testbin) and with the build tags given (the
// agent's faultinject). Call it once, from TestMain.
func Build(dir string, tags ...string) (Binaries, error) {
	paths, err := testbin.BuildTags(dir, tags, "github.com/nixfleet/nixfleet/cmd/nixfleet-cp",
		"github.com/nixfleet/nixfleet/cmd/nixfleet-agent", "github.com/nixfleet/nixfleet/cmd/nixfleet")
	if err != nil {
		return Binaries{}, err
	}
	return Binaries{CP: paths[0], Agent: paths[1], CLI: paths[2]}, nil
}

// Proc is a process whose output is kept for the test's log.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	done chan struct{}
}

// Write keeps the process's output.
func (p *Proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// String is the output so far.
func (p *Proc) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Kill kills the process's group with SIGKILL, as a power cut would, and
// waits until the process has exited.
func (p *Proc) Kill() {
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Start runs cmd in its own process group, stops it (SIGTERM, then SIGKILL
// after 5 s) when the test ends, fails the test when the race detector
// reported a race in it, and prints its output when the test failed.
func Start(t testing.TB, name string, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Name: name, Cmd: cmd, done: make(chan struct{})}
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

// ListenAddr waits for the control plane's "serving" log line and returns
// the address it listens on.
func ListenAddr(t testing.TB, p *Proc) string {
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
			t.Fatalf("%s exited: %s", p.Name, p.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("%s: not serving within 30s", p.Name)
	return ""
}

// Eventually polls cond every 100 ms and fails the test when it does not
// hold within d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
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

// WriteSSHKey writes an ed25519 private key as OpenSSH writes one (a host
// key, or an operator's key).
func WriteSSHKey(t testing.TB, path string, key ed25519.PrivateKey) {
	t.Helper()
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
}

// WriteJSON writes v as JSON.
func WriteJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Equal reports whether two string slices are equal (nil equals empty).
func Equal(a, b []string) bool {
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

// Main is the body of a TestMain that runs a fleet: it builds the
// binaries into a temporary directory (with the build tags given), sets
// *bin, runs the tests and returns their exit code:
// os.Exit(realfleet.Main(m, &bin)).
func Main(m *testing.M, bin *Binaries, tags ...string) int {
	dir, err := os.MkdirTemp("", "nixfleet-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = Build(dir, tags...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
