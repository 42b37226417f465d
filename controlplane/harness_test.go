package controlplane_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/internal/devcert"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/simagent"
	"github.com/nixfleet/nixfleet/internal/testkit/cptest"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/internal/testkit/pgtest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// backends are the stores every control plane test runs against.
var backends = []string{"sqlite", "postgres"}

// dbURL returns a fresh database of a backend for one test.
func dbURL(t testing.TB, backend string) string {
	t.Helper()
	if backend == "sqlite" {
		return "sqlite://" + filepath.Join(t.TempDir(), "cp.db")
	}
	return pgtest.URL(t)
}

// env is a fleet repository, a control plane serving it over TLS, and
// clients.
type env struct {
	t       testing.TB
	repo    *fleetrepo.Repo
	spec    fleetrepo.Spec
	clock   *cptest.Clock
	cert    devcert.Files
	cfg     controlplane.Config
	srv     *controlplane.Server
	proc    *exec.Cmd // the control plane, when it runs in its own process (benchprocess_test.go)
	url     string
	cancel  context.CancelFunc
	done    chan error
	opKey   *keyPair // alice, role operator
	viewKey *keyPair // victor, role viewer
	// apprKey and appr2Key are carol's and dave's, role approver.
	apprKey, appr2Key *keyPair
	log               *strings.Builder
	logMu             *sync.Mutex
}

type keyPair struct {
	priv []byte
	pub  string
}

// newEnv makes a repository with the spec's first release on every
// channel, and starts a control plane on it.
func newEnv(t testing.TB, backend string, spec fleetrepo.Spec, tune func(*controlplane.Config)) *env {
	t.Helper()
	dir := t.TempDir()
	repo, err := fleetrepo.Init(filepath.Join(dir, "fleet"))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, repo: repo, spec: spec, clock: cptest.NewClock(time.Now().UTC().Truncate(time.Second)), logMu: &sync.Mutex{}, log: &strings.Builder{}}
	if e.cert, err = devcert.Write(dir, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	trustFile := filepath.Join(dir, "trust.json")
	if err := os.WriteFile(trustFile, repo.TrustJSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	e.opKey, e.viewKey, e.apprKey, e.appr2Key = newOperatorKey(t), newOperatorKey(t), newOperatorKey(t), newOperatorKey(t)
	ops := fmt.Sprintf(`[{"name":"alice","role":"operator","key":%q},{"name":"victor","role":"viewer","key":%q},`+
		`{"name":"carol","role":"approver","key":%q},{"name":"dave","role":"approver","key":%q}]`,
		e.opKey.pub, e.viewKey.pub, e.apprKey.pub, e.appr2Key.pub)
	opsFile := filepath.Join(dir, "operators.json")
	if err := os.WriteFile(opsFile, []byte(ops), 0o644); err != nil {
		t.Fatal(err)
	}
	e.cfg = controlplane.Config{
		Listen: "127.0.0.1:0", DB: dbURL(t, backend), Repo: repo.Dir, StateDir: filepath.Join(dir, "state"),
		TrustFile: trustFile, OperatorsFile: opsFile, TLSCert: e.cert.CertFile, TLSKey: e.cert.KeyFile,
		WebhookSecret: "hook-secret", TickInterval: time.Hour, PollInterval: time.Hour, Debounce: 20 * time.Millisecond,
		LeaseTTL: 24 * time.Hour, Clock: e.clock, ReplicaID: "r1", // the frozen clock jumps: no lease expires in between
	}
	if tune != nil {
		tune(&e.cfg)
	}
	e.release("v0", 1)
	e.start()
	return e
}

// onboard brings the simulated hosts in: the first release (v0, what they
// run) opened before they ever checked in, while the control plane had
// just started watching, so they waited unheard; they check in, are
// dispatched wave by wave, and converge in it.
func (e *env) onboard(hosts map[string]*simagent.Host) {
	e.t.Helper()
	ctx := context.Background()
	defer func() {
		if e.t.Failed() {
			for name, h := range hosts {
				e.t.Logf("%s did: %q", name, h.Log)
			}
			var raw json.RawMessage
			_ = e.client(e.viewKey.priv, "victor").Get(ctx, "/v1/rollouts/"+rolloutID("stable", 1), &raw)
			e.t.Logf("rollout: %s", raw)
		}
	}()
	e.await(20*time.Second, "the hosts converge on the first release", func() bool {
		for _, h := range hosts {
			_ = h.Step(ctx, 0)
		}
		var r proto.Rollout
		if err := e.client(e.viewKey.priv, "victor").Get(ctx, "/v1/rollouts/"+rolloutID("stable", 1), &r); err != nil {
			return false
		}
		return r.Counts[string(reconciler.HostConverged)] == len(hosts)
	})
}

// waitReady waits for /readyz.
func (e *env) waitReady() {
	e.t.Helper()
	e.await(10*time.Second, "the control plane is ready", func() bool {
		var out map[string]string
		return e.client(nil, "").Get(context.Background(), "/readyz", &out) == nil
	})
}

func rolloutID(channel string, n int) string { return channel + "@" + fleetkit.Commit(n) }

// release signs the spec at a version as ciCommit n and promotes it on
// every channel.
func (e *env) release(version string, n int) {
	e.t.Helper()
	if e.srv != nil {
		e.clock.Advance(time.Minute) // CI signs each release later than the last
	}
	if err := cptest.Release(e.repo, e.spec, version, n, e.clock.Now()); err != nil {
		e.t.Fatal(err)
	}
	if e.srv != nil {
		e.hook()
	}
}

// hook calls the git webhook, as a forge would after a push.
func (e *env) hook() {
	e.t.Helper()
	if err := cptest.Hook(e.url, e.cfg.WebhookSecret, e.cert.Pool); err != nil {
		e.t.Fatal(err)
	}
}

// httpClient trusts the test server certificate and sends no client
// certificate.
func (e *env) httpClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.cert.Pool}}}
}

func (e *env) start() {
	e.t.Helper()
	if !inProcess() {
		e.startProcess()
		return
	}
	log := slog.New(slog.NewJSONHandler(e.logWriter(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := controlplane.New(context.Background(), e.cfg, log)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.srv, e.cancel, e.done = srv, cancel, make(chan error, 1)
	go func() { e.done <- srv.Run(ctx) }()
	e.url = "https://" + srv.Addr()
	if e.cfg.InsecureDev {
		e.url = "http://" + srv.Addr()
	}
	e.t.Cleanup(e.stop)
	e.waitReady()
}

// logWriter is where the control plane logs: the test's buffer, shown
// when it fails, and NIXFLEET_BENCH_CPLOG's file when a benchmark keeps
// its log.
func (e *env) logWriter() io.Writer {
	var w io.Writer = e.log
	if path := os.Getenv("NIXFLEET_BENCH_CPLOG"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { f.Close() })
		w = io.MultiWriter(w, f)
	}
	return &lockedWriter{mu: e.logMu, w: w}
}

func (e *env) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	if err := <-e.done; err != nil {
		e.t.Errorf("control plane: %v", err)
	}
	e.cancel = nil
	if e.t.Failed() {
		e.logMu.Lock()
		e.t.Logf("control plane log:\n%s", e.log.String())
		e.logMu.Unlock()
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// client returns an API client with a key (nil: no client certificate).
func (e *env) client(key []byte, name string) *apiclient.Client {
	e.t.Helper()
	c, err := apiclient.New(e.url, apiclient.Options{Key: key, Name: name, ServerCAs: e.cert.Pool, Timeout: 20 * time.Second, Now: e.clock.Now})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// hosts returns simulated hosts for every host of the spec, on version v0.
func (e *env) hosts() map[string]*simagent.Host {
	out := map[string]*simagent.Host{}
	for _, h := range e.spec.Hosts {
		sh := simagent.New(h.Name, h.Key, e.client(h.Key, h.Name), fleetrepo.Closure(h.Name, "v0"))
		sh.Now = e.clock.Now
		out[h.Name] = sh
	}
	return out
}

// awaitRecheck is how often await checks its condition without a change.
const awaitRecheck = 500 * time.Millisecond

// hangSlack stretches the bound a test gives await: a bound only tells a
// hang from slow progress, and a loaded CI machine runs these tests two
// to three times slower than an idle one. It costs time only when a test
// fails.
const hangSlack = 3

// await checks cond, and again each time the control plane ticks, sees
// new events or polls git, until it holds; and at least every
// awaitRecheck, because a cond that steps hosts is itself what moves the
// control plane next (an agent checks in again whether or not anything
// changed), and on a busy machine that step can come after the last
// change it would have waited for. d, stretched by hangSlack, bounds a
// test that hangs.
func (e *env) await(d time.Duration, what string, cond func() bool) {
	e.t.Helper()
	d *= hangSlack
	limit := time.NewTimer(d)
	defer limit.Stop()
	recheck := time.NewTicker(awaitRecheck)
	defer recheck.Stop()
	for {
		changed := e.changed()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-recheck.C:
		case <-limit.C:
			e.t.Fatalf("%s: not within %s", what, d)
		}
	}
}

// tick writes the last-seen times collected so far, asks for a tick and
// waits until the control plane has taken it: whatever requests before it
// caused is then in the store.
func (e *env) tick() {
	e.t.Helper()
	if err := e.srv.FlushSeen(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	changed := e.srv.Changed()
	e.srv.Kick()
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		e.t.Fatal("the control plane does not tick")
	}
}
