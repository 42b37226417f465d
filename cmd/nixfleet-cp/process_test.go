package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/internal/devcert"
	"github.com/nixfleet/nixfleet/internal/testkit/cptest"
	"github.com/nixfleet/nixfleet/internal/testkit/realfleet"
	"github.com/nixfleet/nixfleet/internal/testkit/testbin"
	"github.com/nixfleet/nixfleet/trust"
)

// site is what the control plane replicas of a test share besides the
// database and the fleet repository: the TLS certificate, the webhook
// secret, the operators file and an operator key.
type site struct {
	Cert       devcert.Files
	SecretFile string
	Secret     string
	Operators  string
	opKey      ed25519.PrivateKey
	apprKey    ed25519.PrivateKey // ada's, an approver
}

func newSite(t *testing.T) *site {
	t.Helper()
	dir := t.TempDir()
	cert, err := devcert.Write(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s := &site{Cert: cert, SecretFile: filepath.Join(dir, "webhook-secret"), Secret: "a-shared-webhook-secret",
		Operators: filepath.Join(dir, "operators.json")}
	if err := os.WriteFile(s.SecretFile, []byte(s.Secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	s.opKey = priv
	apub, apriv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	s.apprKey = apriv
	ops := fmt.Sprintf(`[{"name":"olga","role":"operator","key":%q},{"name":"ada","role":"approver","key":%q}]`,
		trust.SSHEd25519Line(pub), trust.SSHEd25519Line(apub))
	if err := os.WriteFile(s.Operators, []byte(ops), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// replica is one nixfleet-cp serve process.
type replica struct {
	t    *testing.T
	name string
	site *site
	args []string
	env  []string // added to the test's environment
	Addr string   // host:port, once started

	op     *apiclient.Client // the operator's, once started
	cmd    *exec.Cmd
	out    *logBuffer
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

// startReplica starts nixfleet-cp serve with args (plus the site's TLS,
// operators and webhook flags) and waits until it is ready. listen is an
// address, or "" for a free port on 127.0.0.1. The per-host rate limit is
// off: the simulated hosts and the operator of these tests poll every
// 20 ms, far more often than agents do (the limits have their own tests,
// in package controlplane and TestRateLimitSettings).
func startReplica(t *testing.T, s *site, name, listen string, args ...string) *replica {
	t.Helper()
	r := newReplica(t, s, name, listen, args...)
	r.start()
	return r
}

// newReplica is startReplica's replica, not started yet.
func newReplica(t *testing.T, s *site, name, listen string, args ...string) *replica {
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	return &replica{t: t, name: name, site: s, out: &logBuffer{}, exited: make(chan struct{}),
		args: append([]string{"serve", "--listen", listen, "--tls-cert", s.Cert.CertFile, "--tls-key", s.Cert.KeyFile,
			"--operators", s.Operators, "--webhook-secret-file", s.SecretFile, "--log-level", "debug",
			"--rate-limit-per-host", "0"}, args...)}
}

// Restart starts a replica again with the same arguments and address,
// after it died.
func (r *replica) Restart() *replica {
	r.t.Helper()
	select {
	case <-r.exited:
	default:
		r.t.Fatalf("%s: restart of a running replica", r.name)
	}
	args := append([]string{}, r.args...)
	for i := range args {
		if args[i] == "--listen" {
			args[i+1] = r.Addr
		}
	}
	n := &replica{t: r.t, name: r.name + "'", site: r.site, args: args, env: r.env, out: &logBuffer{}, exited: make(chan struct{})}
	n.start()
	return n
}

func (r *replica) start() {
	t := r.t
	t.Helper()
	r.cmd = exec.Command(bin.cp, r.args...)
	r.cmd.Env = append(testbin.Env(os.Environ()), r.env...)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	// Its own process group, so cleanup kills whatever it started.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(r.cleanup)
	deadline := time.Now().Add(20 * time.Second)
	for r.Addr == "" {
		if a := r.out.field("control plane serving", "listen"); a != "" {
			r.Addr = a
			break
		}
		select {
		case <-r.exited:
			t.Fatalf("%s exited before serving: %v", r.name, r.err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not serving within 20s", r.name)
		}
	}
	r.op = r.Client(r.site.opKey, "olga")
	r.waitReady()
}

// waitReady waits for GET /readyz: the store answers and git was read.
func (r *replica) waitReady() {
	r.t.Helper()
	hc := r.httpClient()
	eventually(r.t, 20*time.Second, r.name+" is ready", func() bool {
		select {
		case <-r.exited:
			r.t.Fatalf("%s exited: %v", r.name, r.err)
		default:
		}
		resp, err := hc.Get(r.URL() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// cleanup stops the process: SIGTERM and a few seconds to shut down
// cleanly, then SIGKILL of its whole group. It reports data races the
// process found, and prints its log when the test failed.
func (r *replica) cleanup() {
	select {
	case <-r.exited:
	default:
		if r.t.Failed() {
			// The test may have caught the process stuck: SIGQUIT has the
			// Go runtime print every goroutine's stack into the log, and
			// exit.
			_ = r.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-r.exited:
			case <-time.After(8 * time.Second):
			}
			break
		}
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-r.exited:
			if r.err != nil {
				r.t.Errorf("%s: %v after SIGTERM, want a clean exit", r.name, r.err)
			}
		case <-time.After(8 * time.Second):
			r.t.Errorf("%s: no exit within 8s of SIGTERM", r.name)
		}
	}
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	<-r.exited
	log := r.out.String()
	if strings.Contains(log, "WARNING: DATA RACE") {
		r.t.Errorf("%s: the race detector found a data race", r.name)
	}
	if r.t.Failed() {
		r.t.Logf("==== %s (%s) log:\n%s", r.name, strings.Join(r.args, " "), log)
	}
}

// Kill sends SIGKILL to the process group and waits for the process.
func (r *replica) Kill() {
	r.t.Helper()
	if err := syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		r.t.Fatal(err)
	}
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		r.t.Fatalf("%s: still running 10s after SIGKILL", r.name)
	}
}

// Alive reports whether the process still runs.
func (r *replica) Alive() bool {
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

func (r *replica) URL() string { return "https://" + r.Addr }

// httpClient trusts the site certificate and presents no client
// certificate (webhooks, /readyz, /metrics).
func (r *replica) httpClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: r.site.Cert.Pool, MinVersion: tls.VersionTLS13}}}
}

// Client returns an API client authenticated by key (a host's SSH host
// key, or the operator's).
func (r *replica) Client(key ed25519.PrivateKey, name string) *apiclient.Client {
	r.t.Helper()
	c, err := apiclient.New(r.URL(), apiclient.Options{Key: key, Name: name, ServerCAs: r.site.Cert.Pool, Timeout: 10 * time.Second})
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

// Operator is the operator's client.
func (r *replica) Operator() *apiclient.Client { return r.op }

// Hook calls POST /v1/hooks/git with the body's HMAC-SHA256, as a forge
// does after a push, and returns when the answer arrived.
func (r *replica) Hook() {
	r.t.Helper()
	body := []byte(`{"ref":"refs/heads/channels/stable"}`)
	req, err := http.NewRequest(http.MethodPost, r.URL()+"/v1/hooks/git", bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Hub-Signature-256", cptest.HookSignature(body, r.site.Secret))
	resp, err := r.httpClient().Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		r.t.Fatalf("webhook: HTTP %d: %s", resp.StatusCode, b)
	}
}

// Leader reads the nixfleet_leader gauge from GET /metrics: 1 while the
// replica holds the tick lease. ok is false when /metrics did not answer.
func (r *replica) Leader() (leader, ok bool) {
	resp, err := r.httpClient().Get(r.URL() + "/metrics")
	if err != nil {
		return false, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, false
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, found := strings.Cut(sc.Text(), " ")
		if found && name == "nixfleet_leader" {
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			return err == nil && v == 1, err == nil
		}
	}
	return false, false
}

// logBuffer collects a process's output (JSON log lines) for the test to
// read while the process writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// field returns a string attribute of the first JSON log line with a
// message, or "".
func (b *logBuffer) field(msg, key string) string {
	for _, line := range strings.Split(b.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != msg {
			continue
		}
		if v, ok := rec[key].(string); ok {
			return v
		}
	}
	return ""
}

// times returns the times of the JSON log lines with a message, in order.
func (b *logBuffer) times(msg string) []time.Time {
	var out []time.Time
	for _, line := range strings.Split(b.String(), "\n") {
		var rec struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == msg {
			out = append(out, rec.Time)
		}
	}
	return out
}

// eventually retries cond every 20ms until it holds or hangSlack × d
// passed: d only tells a hang from slow progress, and a loaded CI machine
// runs these processes two to three times slower than an idle one.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := poll(hangSlack*d, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// hangSlack stretches the bound a test gives eventually; it costs time
// only when a test fails.
const hangSlack = 3

var errTimeout = errors.New("not within the deadline")

// poll retries cond every 20ms for up to d.
func poll(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w of %s", errTimeout, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ctx is for requests made by the tests; each bounds itself by its
// client's timeout.
var ctx = context.Background()

// cliAs runs the nixfleet CLI against a replica with an operator's key:
// it returns a function that runs it with args, fails the test unless it
// exits with wantExit, and returns its stdout and stderr.
func cliAs(t *testing.T, s *site, r *replica, priv ed25519.PrivateKey) func(wantExit int, args ...string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "operator_ed25519")
	realfleet.WriteSSHKey(t, key, priv)
	return func(wantExit int, args ...string) (string, string) {
		t.Helper()
		cmd := exec.Command(bin.cli, append(args, "--cp", r.URL(), "--key", key, "--ca", s.Cert.CertFile)...)
		cmd.Env = testbin.Env(append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "NIXFLEET_CONFIG=", "NO_COLOR=1"))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != wantExit {
			t.Fatalf("nixfleet %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, wantExit, stdout.String(), stderr.String())
		}
		return stdout.String(), stderr.String()
	}
}
