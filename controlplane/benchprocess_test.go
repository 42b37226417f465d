package controlplane_test

// The control plane in its own process, for what a user measures from
// outside (NIXFLEET_BENCH_PROCESS=1): `nixfleet-cp serve` built from this
// tree without the race detector, run with the harness's configuration
// and otherwise with the defaults nixfleet-cp ships (its GOGC, rate
// limits, logs at info), so that /proc/PID/status is the control plane's
// alone, not the harness's beside it.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nixfleet/nixfleet/internal/testkit/testbin"
)

// benchProcess names the environment variable that starts the control
// plane as a process.
const benchProcess = "NIXFLEET_BENCH_PROCESS"

func inProcess() bool { return os.Getenv(benchProcess) == "" }

// startProcess is start for a control plane in its own process.
func (e *env) startProcess() {
	e.t.Helper()
	dir := e.t.TempDir()
	bins, err := testbin.BuildAsShipped(dir, "github.com/nixfleet/nixfleet/cmd/nixfleet-cp")
	if err != nil {
		e.t.Fatal(err)
	}
	addr, err := freeAddr()
	if err != nil {
		e.t.Fatal(err)
	}
	secret := filepath.Join(dir, "webhook-secret")
	if err := os.WriteFile(secret, []byte(e.cfg.WebhookSecret), 0o600); err != nil {
		e.t.Fatal(err)
	}
	c := e.cfg
	args := []string{"serve", "--listen", addr, "--db", c.DB, "--repo", c.Repo, "--state-dir", c.StateDir,
		"--trust", c.TrustFile, "--operators", c.OperatorsFile, "--tls-cert", c.TLSCert, "--tls-key", c.TLSKey,
		"--webhook-secret-file", secret, "--replica-id", c.ReplicaID}
	for _, ref := range c.WatchRefs {
		args = append(args, "--watch-ref", ref)
	}
	for flag, d := range map[string]time.Duration{"tick-interval": c.TickInterval, "poll-interval": c.PollInterval,
		"debounce": c.Debounce, "lease-ttl": c.LeaseTTL,
		"offline-threshold": time.Duration(c.Tunables.OfflineThresholdSeconds) * time.Second,
		"confirm-window":    time.Duration(c.Tunables.ConfirmWindowSeconds) * time.Second} {
		if d > 0 {
			args = append(args, "--"+flag, d.String())
		}
	}
	cmd := exec.Command(bins[0], args...)
	// The runtime's settings are the ones nixfleet-cp ships, whatever this
	// process runs with.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") && !strings.HasPrefix(kv, "NIXFLEET_CP_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	w := e.logWriter()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.proc, e.url = cmd, "https://"+addr
	e.t.Cleanup(e.stopProcess)
	e.waitReady()
}

// stopProcess ends the control plane process as systemd would.
func (e *env) stopProcess() {
	if e.proc == nil {
		return
	}
	_ = e.proc.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- e.proc.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			e.t.Errorf("control plane: %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = e.proc.Process.Kill()
		<-done
		e.t.Errorf("control plane: not stopped 30 s after SIGTERM")
	}
	e.proc = nil
}

// cpResident is the control plane's resident memory (VmRSS): its
// process's, or this one's when it runs here.
func (e *env) cpResident() int64 {
	if e.proc != nil {
		return residentOf(fmt.Sprintf("/proc/%d/status", e.proc.Process.Pid))
	}
	return residentBytes()
}

// changed is closed when the control plane ticks or sees new events; in
// its own process, which says nothing, after a few milliseconds (a poll).
func (e *env) changed() <-chan struct{} {
	if e.srv != nil {
		return e.srv.Changed()
	}
	ch := make(chan struct{})
	time.AfterFunc(5*time.Millisecond, func() { close(ch) })
	return ch
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// residentOf reads VmRSS from a /proc/PID/status file, 0 if unknown.
func residentOf(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
