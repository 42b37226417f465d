package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/crypto/ssh"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/internal/devcert"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/simagent"
	"github.com/nixfleet/nixfleet/internal/testkit/cptest"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/trust"
)

// testFleet is a control plane serving a small fleet over TLS, in the test
// process, with simulated hosts. Scripts start one with "fleet start".
//
// Two channels, every soak zero:
//
//	stable: wave 0 canary, wave 1 web-1, wave 2 web-2
//	edge:   wave 0 edge-1, wave 1 edge-2
//
// Release v0 (ciCommit 1) rolls out on both channels before any host checks
// in; the hosts then come online and converge (rollouts stable@1 and
// edge@1: Converged). Release v1 (ciCommit 2) follows: on stable the canary
// converges and web-1's switch fails, so stable@2 halts on the health gate
// with web-2 still Pending; on edge, edge-1 takes its target and never
// confirms (the clock stands still, so its confirm window never closes), so
// edge@2 stays Active in wave 0 with edge-2 Pending behind the wave gate.
type testFleet struct {
	dir    string
	url    string
	clock  *cptest.Clock
	repo   *fleetrepo.Repo
	spec   fleetrepo.Spec
	cert   devcert.Files
	hosts  map[string]*simagent.Host
	viewer *apiclient.Client
	// commits are the commits CI made, by ciCommit number (the latest
	// one that signed it).
	commits map[int]plumbing.Hash
	cancel  context.CancelFunc
	done    chan error
	log     *lockedBuffer

	caFile, operatorKey, viewerKey, approverKey string
}

const fleetHookSecret = "fleet-hook-secret"

// fleetRollout is the id of a rollout of the test fleet: ciCommit n on a
// channel.
func fleetRollout(channel string, n int) string { return channel + "@" + fleetkit.Commit(n) }

func startFleet(dir string, insecure, forecasts bool) (_ *testFleet, err error) {
	f := &testFleet{dir: dir, clock: cptest.NewClock(time.Now().UTC().Truncate(time.Second)), log: &lockedBuffer{},
		commits: map[int]plumbing.Hash{}}
	defer func() {
		if err != nil {
			f.stop()
			err = fmt.Errorf("%w\ncontrol plane log:\n%s", err, lastLines(f.log.String(), 40))
		}
	}()
	if f.repo, err = fleetrepo.Init(filepath.Join(dir, "fleet")); err != nil {
		return nil, err
	}
	f.spec = fleetrepo.Spec{
		Channels: map[string][]int{"stable": {0, 0, 0}, "edge": {0, 0}},
		Hosts: []fleetrepo.Host{
			fleetrepo.NewHost("canary", "stable", 0), fleetrepo.NewHost("web-1", "stable", 1),
			fleetrepo.NewHost("web-2", "stable", 2), fleetrepo.NewHost("edge-1", "edge", 0),
			fleetrepo.NewHost("edge-2", "edge", 1),
		},
	}
	if f.cert, err = devcert.Write(dir, f.clock.Now()); err != nil {
		return nil, err
	}
	f.caFile = f.cert.CertFile
	trustFile := filepath.Join(dir, "trust.json")
	if err := os.WriteFile(trustFile, f.repo.TrustJSON(), 0o644); err != nil {
		return nil, err
	}
	opPub, err := writeOperatorKey(filepath.Join(dir, "operator_ed25519"))
	if err != nil {
		return nil, err
	}
	viewPub, err := writeOperatorKey(filepath.Join(dir, "viewer_ed25519"))
	if err != nil {
		return nil, err
	}
	apprPub, err := writeOperatorKey(filepath.Join(dir, "approver_ed25519"))
	if err != nil {
		return nil, err
	}
	f.operatorKey, f.viewerKey = filepath.Join(dir, "operator_ed25519"), filepath.Join(dir, "viewer_ed25519")
	f.approverKey = filepath.Join(dir, "approver_ed25519")
	ops := fmt.Sprintf(`[{"name":"alice","role":"operator","key":%q},{"name":"victor","role":"viewer","key":%q},{"name":"carol","role":"approver","key":%q}]`,
		opPub, viewPub, apprPub)
	opsFile := filepath.Join(dir, "operators.json")
	if err := os.WriteFile(opsFile, []byte(ops), 0o644); err != nil {
		return nil, err
	}
	if err := f.release("v0", 1); err != nil {
		return nil, err
	}
	cfg := controlplane.Config{
		Listen: "127.0.0.1:0", DB: "sqlite://" + filepath.Join(dir, "cp.db"), Repo: f.repo.Dir,
		StateDir: filepath.Join(dir, "state"), TrustFile: trustFile, OperatorsFile: opsFile,
		TLSCert: f.cert.CertFile, TLSKey: f.cert.KeyFile, WebhookSecret: fleetHookSecret,
		// Ticks come from check-ins, intents and the webhook; the clock
		// stands still, so no lease expires and no confirm window closes.
		TickInterval: time.Hour, PollInterval: time.Hour, Debounce: 20 * time.Millisecond,
		LeaseTTL: 24 * time.Hour, Clock: f.clock, ReplicaID: "r1",
		// Forecasts journal events as they are made, beside the ticks:
		// scripts that compare the journal whole start without them.
		NoForecasts: !forecasts,
	}
	scheme := "https://"
	if insecure {
		cfg.InsecureDev, cfg.TLSCert, cfg.TLSKey, scheme = true, "", "", "http://"
	}
	logger := slog.New(slog.NewTextHandler(f.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := controlplane.New(context.Background(), cfg, logger)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel, f.done = cancel, make(chan error, 1)
	go func() { f.done <- srv.Run(ctx) }()
	f.url = scheme + srv.Addr()
	viewKey, err := readTestKey(f.viewerKey)
	if err != nil {
		return nil, err
	}
	if f.viewer, err = f.client(viewKey, "victor"); err != nil {
		return nil, err
	}
	if err := f.until("the control plane is ready", func() (bool, error) {
		var out map[string]any
		return f.viewer.Get(context.Background(), "/readyz", &out) == nil, nil
	}); err != nil {
		return nil, err
	}

	// v0 opens its rollouts before any host checked in: the channels are
	// in partial visibility from the first tick (rfcs/0003 rule 6), and
	// recover once the hosts are heard (for an offline threshold the frozen
	// clock never reaches: status shows it).
	if err := f.until("v0's rollouts open", func() (bool, error) {
		for _, ch := range []string{"stable", "edge"} {
			var out map[string]any
			if f.viewer.Get(context.Background(), "/v1/rollouts/"+fleetRollout(ch, 1), &out) != nil {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return nil, err
	}
	f.hosts = map[string]*simagent.Host{}
	for _, h := range f.spec.Hosts {
		c, err := f.client(h.Key, h.Name)
		if err != nil {
			return nil, err
		}
		sh := simagent.New(h.Name, h.Key, c, fleetrepo.Closure(h.Name, "v0"))
		sh.Now = f.clock.Now
		f.hosts[h.Name] = sh
	}
	// The hosts come online and every host converges in v0's rollouts.
	for _, ch := range []string{"stable", "edge"} {
		if err := f.converge(fleetRollout(ch, 1)); err != nil {
			return nil, err
		}
	}
	// v1: web-1's switch fails, edge-1 never confirms.
	f.hosts["web-1"].Decide = func(t proto.Target) simagent.Action {
		if t.Closure == fleetrepo.Closure("web-1", "v1") {
			return simagent.FailSwitch
		}
		return simagent.Confirm
	}
	f.hosts["edge-1"].Decide = func(t proto.Target) simagent.Action {
		if t.Closure == fleetrepo.Closure("edge-1", "v1") {
			return simagent.Ignore
		}
		return simagent.Confirm
	}
	f.clock.Advance(time.Minute) // CI signs each release later than the last
	if err := f.release("v1", 2); err != nil {
		return nil, err
	}
	if err := f.hook(); err != nil {
		return nil, err
	}
	if err := f.settle(fleetRollout("stable", 2), reconciler.RolloutHalted); err != nil {
		return nil, err
	}
	if err := f.until("edge-1 takes its v1 target", func() (bool, error) {
		f.step()
		var r struct {
			Counts map[reconciler.HostState]int `json:"counts"`
		}
		if err := f.viewer.Get(context.Background(), "/v1/rollouts/"+fleetRollout("edge", 2), &r); err != nil {
			return false, nil
		}
		return r.Counts[reconciler.HostActivating] == 1 && r.Counts[reconciler.HostPending] == 1, nil
	}); err != nil {
		return nil, err
	}
	return f, nil
}

// release signs the fleet at a version as ciCommit n and promotes it on
// every channel.
func (f *testFleet) release(version string, n int) error {
	if err := cptest.Release(f.repo, f.spec, version, n, f.clock.Now()); err != nil {
		return err
	}
	c, err := f.repo.Ref("stable")
	f.commits[n] = c
	return err
}

// push signs the fleet at a version as ciCommit n a minute later than
// the last release, promotes it on every channel, calls the webhook, and
// waits until a tick decided what each channel's new ref does (its fate
// in the release log is no longer pending).
func (f *testFleet) push(version string, n int) error {
	f.clock.Advance(time.Minute)
	if err := f.release(version, n); err != nil {
		return err
	}
	if err := f.hook(); err != nil {
		return err
	}
	return f.until(fmt.Sprintf("a tick decides about ciCommit %d", n), func() (bool, error) {
		rels, _, err := f.viewer.Releases(context.Background(), proto.ReleaseQuery{})
		if err != nil {
			return false, nil
		}
		decided := 0
		for _, r := range rels {
			if r.Ref == fleetkit.Commit(n) && r.Fate != proto.FatePending {
				decided++
			}
		}
		return decided == len(f.spec.Channels), nil
	})
}

// point moves a channel's ref to the commit of ciCommit n, as an operator
// pushing it back does, calls the webhook, and waits until the release
// log's newest push of the channel is that commit (accepted or refused).
func (f *testFleet) point(channel string, n int) error {
	c, ok := f.commits[n]
	if !ok {
		return fmt.Errorf("no commit of ciCommit %d", n)
	}
	if err := f.repo.Promote(channel, c); err != nil {
		return err
	}
	if err := f.hook(); err != nil {
		return err
	}
	return f.logged(c, channel)
}

// resign signs the fleet at a version as ciCommit n again, a minute later
// than the last release (CI rebuilding an old commit), promotes it on
// every channel, calls the webhook, and waits until each channel's newest
// push in the release log is the new commit.
func (f *testFleet) resign(version string, n int) error {
	f.clock.Advance(time.Minute)
	if err := f.release(version, n); err != nil {
		return err
	}
	if err := f.hook(); err != nil {
		return err
	}
	return f.logged(f.commits[n], slices.Sorted(maps.Keys(f.spec.Channels))...)
}

// logged waits until the newest push of each channel in the release log
// is commit c.
func (f *testFleet) logged(c plumbing.Hash, channels ...string) error {
	return f.until(fmt.Sprintf("the release log lists commit %s", c), func() (bool, error) {
		for _, ch := range channels {
			rels, _, err := f.viewer.Releases(context.Background(), proto.ReleaseQuery{Channel: ch})
			if err != nil || len(rels) == 0 || rels[0].Commit != c.String() {
				return false, nil
			}
		}
		return true, nil
	})
}

// follow adds to the fleet, from its next release on, a channel of one
// wave holding new hosts that run no agent (they never check in), which
// channel gates orders first: a rollout of the channel does not open
// while gates has one that is not terminal (after edge, whose edge@2
// never ends, none opens: its hosts are in no rollout, its release is
// deferred).
func (f *testFleet) follow(channel, gates string, hosts []string) {
	f.spec.Channels[channel] = []int{0}
	for _, h := range hosts {
		f.spec.Hosts = append(f.spec.Hosts, fleetrepo.NewHost(h, channel, 0))
	}
	f.spec.ChannelEdges = append(f.spec.ChannelEdges, proto.ChannelEdge{Gates: gates, Gated: channel, Reason: channel + " follows " + gates})
}

// hook calls the webhook as a forge does after a push.
func (f *testFleet) hook() error { return cptest.Hook(f.url, fleetHookSecret, f.cert.Pool) }

func (f *testFleet) client(key ed25519.PrivateKey, name string) (*apiclient.Client, error) {
	return apiclient.New(f.url, apiclient.Options{Key: key, Name: name, ServerCAs: f.cert.Pool, Timeout: 20 * time.Second})
}

// step checks every host in once.
func (f *testFleet) step() {
	for _, h := range f.hosts {
		_ = h.Step(context.Background(), 0)
	}
}

// settle steps the hosts until a rollout is in a state.
func (f *testFleet) settle(id string, want reconciler.RolloutState) error {
	return f.until(fmt.Sprintf("rollout %s is %s", id, want), func() (bool, error) {
		f.step()
		var r struct {
			State reconciler.RolloutState `json:"state"`
		}
		if err := f.viewer.Get(context.Background(), "/v1/rollouts/"+id, &r); err != nil {
			return false, nil
		}
		return r.State == want, nil
	})
}

// forecast waits until the control plane has a forecast of a rollout made
// after its state was last changed (the leader makes them beside its
// ticks).
func (f *testFleet) forecast(id string) error {
	return f.until(fmt.Sprintf("a forecast of rollout %s", id), func() (bool, error) {
		var r struct {
			UpdatedAt time.Time `json:"updatedAt"`
		}
		var fc struct {
			MadeAt time.Time `json:"madeAt"`
		}
		if f.viewer.Get(context.Background(), "/v1/rollouts/"+id, &r) != nil || f.viewer.Get(context.Background(), "/v1/rollouts/"+id+"/forecast", &fc) != nil {
			return false, nil
		}
		return !fc.MadeAt.Before(r.UpdatedAt), nil
	})
}

// converge steps the hosts until a rollout and every host in it converged.
func (f *testFleet) converge(id string) error {
	return f.until(fmt.Sprintf("rollout %s and its hosts converge", id), func() (bool, error) {
		f.step()
		var r struct {
			State  reconciler.RolloutState      `json:"state"`
			Hosts  []reconciler.RolloutHost     `json:"hosts"`
			Counts map[reconciler.HostState]int `json:"counts"`
		}
		if err := f.viewer.Get(context.Background(), "/v1/rollouts/"+id, &r); err != nil {
			return false, nil
		}
		return r.State == reconciler.RolloutConverged && len(r.Hosts) > 0 && r.Counts[reconciler.HostConverged] == len(r.Hosts), nil
	})
}

// until polls cond for up to a minute.
func (f *testFleet) until(what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("%s: not within a minute", what)
}

// eventID is the id of a rollout's first event of a kind.
func (f *testFleet) eventID(rollout, kind string) (int64, error) {
	var page struct {
		Events []struct {
			ID   int64  `json:"id"`
			Kind string `json:"kind"`
		} `json:"events"`
	}
	if err := f.viewer.Get(context.Background(), "/v1/rollouts/"+rollout+"/events", &page); err != nil {
		return 0, err
	}
	for _, ev := range page.Events {
		if ev.Kind == kind {
			return ev.ID, nil
		}
	}
	return 0, fmt.Errorf("rollout %s has no %s event", rollout, kind)
}

func (f *testFleet) stop() {
	if f.cancel == nil {
		return
	}
	f.cancel()
	<-f.done
	f.cancel = nil
}

// writeOperatorKey writes a fresh ed25519 key as OpenSSH writes it (mode
// 0600) and returns its public key line.
func writeOperatorKey(path string) (string, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return "", err
	}
	return trust.SSHEd25519Line(pub), nil
}

func readTestKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := ssh.ParseRawPrivateKey(data)
	if err != nil {
		return nil, err
	}
	return *k.(*ed25519.PrivateKey), nil
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// deadURL is an https URL on which nothing listens.
func deadURL() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return "https://" + addr, l.Close()
}

// cmdFleet is the script command "fleet": start the test fleet (and set
// NIXFLEET_CP_URL, NIXFLEET_CA, NIXFLEET_KEY (alice, role operator),
// VIEWER_KEY (victor, viewer), APPROVER_KEY (carol, approver) and the
// rollout ids STABLE1, STABLE2, EDGE1, EDGE2), or step its hosts until a
// rollout reaches a state. "start insecure" serves plain HTTP without
// authentication (nixfleet-cp --insecure-dev); "start forecast" makes
// forecasts (rfcs/0014), which it does not otherwise.
//
// "push" signs a new release and promotes it on every channel (see
// testFleet.push); it sets the rollout ids STABLE<N> and EDGE<N>.
// "follow" adds a channel to the fleet from the next push on (see
// testFleet.follow). "point" moves one channel back to an earlier
// release's commit (testFleet.point); "resign" signs an earlier ciCommit
// anew (testFleet.resign).
//
//	fleet start [insecure] [forecast]
//	fleet settle ROLLOUT STATE
//	fleet forecast ROLLOUT
//	fleet follow CHANNEL GATES HOST...
//	fleet push VERSION N
//	fleet point CHANNEL N
//	fleet resign VERSION N
func cmdFleet(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: fleet start [insecure] [forecast] | fleet settle ROLLOUT STATE | fleet forecast ROLLOUT | fleet follow CHANNEL GATES HOST... | fleet push VERSION N | fleet point CHANNEL N | fleet resign VERSION N")
	}
	switch {
	case args[0] == "start" && !slices.ContainsFunc(args[1:], func(a string) bool { return a != "insecure" && a != "forecast" }):
		if fleets.get(ts) != nil {
			ts.Fatalf("fleet: already started")
		}
		dir := ts.MkAbs(".fleet")
		ts.Check(os.MkdirAll(dir, 0o755))
		f, err := startFleet(dir, slices.Contains(args[1:], "insecure"), slices.Contains(args[1:], "forecast"))
		if err != nil {
			ts.Fatalf("fleet start: %v", err)
		}
		fleets.put(ts, f)
		ts.Defer(func() {
			fleets.drop(ts)
			f.stop()
			ts.Logf("control plane log:\n%s", lastLines(f.log.String(), 40))
		})
		ts.Setenv("NIXFLEET_CP_URL", f.url)
		ts.Setenv("PLAIN_CP_URL", "http://"+strings.TrimPrefix(f.url, "https://")) // the wrong scheme
		ts.Setenv("NIXFLEET_CA", f.caFile)
		ts.Setenv("NIXFLEET_KEY", f.operatorKey)
		ts.Setenv("VIEWER_KEY", f.viewerKey)
		ts.Setenv("APPROVER_KEY", f.approverKey)
		for _, ch := range []string{"stable", "edge"} {
			for n := 1; n <= 2; n++ {
				ts.Setenv(fmt.Sprintf("%s%d", strings.ToUpper(ch), n), fleetRollout(ch, n))
			}
		}
		// Event ids depend on how the onboarding's ticks fell; this one is
		// stable@2's wave_promoted.
		id, err := f.eventID(fleetRollout("stable", 2), reconciler.EventWavePromoted)
		if err != nil {
			ts.Fatalf("fleet start: %v", err)
		}
		ts.Setenv("STABLE2_PROMOTED", fmt.Sprint(id))
	case args[0] == "settle" && len(args) == 3:
		f := fleets.get(ts)
		if f == nil {
			ts.Fatalf("fleet: not started")
		}
		if err := f.settle(args[1], reconciler.RolloutState(args[2])); err != nil {
			ts.Fatalf("fleet settle: %v", err)
		}
	case args[0] == "forecast" && len(args) == 2:
		f := fleets.get(ts)
		if f == nil {
			ts.Fatalf("fleet: not started")
		}
		if err := f.forecast(args[1]); err != nil {
			ts.Fatalf("fleet forecast: %v", err)
		}
	case args[0] == "follow" && len(args) >= 4:
		f := fleets.get(ts)
		if f == nil {
			ts.Fatalf("fleet: not started")
		}
		f.follow(args[1], args[2], args[3:])
	case args[0] == "push" && len(args) == 3:
		f := fleets.get(ts)
		if f == nil {
			ts.Fatalf("fleet: not started")
		}
		n, err := strconv.Atoi(args[2])
		if err != nil || n < 3 {
			ts.Fatalf("fleet push: N must be a ciCommit number after the fleet's 2")
		}
		if err := f.push(args[1], n); err != nil {
			ts.Fatalf("fleet push: %v", err)
		}
		for _, ch := range []string{"stable", "edge"} {
			ts.Setenv(fmt.Sprintf("%s%d", strings.ToUpper(ch), n), fleetRollout(ch, n))
		}
	case (args[0] == "point" || args[0] == "resign") && len(args) == 3:
		f := fleets.get(ts)
		if f == nil {
			ts.Fatalf("fleet: not started")
		}
		n, err := strconv.Atoi(args[2])
		if err != nil {
			ts.Fatalf("fleet %s: N must be a ciCommit number", args[0])
		}
		if args[0] == "point" {
			err = f.point(args[1], n)
		} else {
			err = f.resign(args[1], n)
		}
		if err != nil {
			ts.Fatalf("fleet %s: %v", args[0], err)
		}
	default:
		ts.Fatalf("usage: fleet start [insecure] | fleet settle ROLLOUT STATE | fleet forecast ROLLOUT | fleet follow CHANNEL GATES HOST... | fleet push VERSION N | fleet point CHANNEL N | fleet resign VERSION N")
	}
}

// fleets are the running test fleets, by script.
var fleets = &fleetRegistry{m: map[*testscript.TestScript]*testFleet{}}

type fleetRegistry struct {
	mu sync.Mutex
	m  map[*testscript.TestScript]*testFleet
}

func (r *fleetRegistry) get(ts *testscript.TestScript) *testFleet {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[ts]
}

func (r *fleetRegistry) put(ts *testscript.TestScript, f *testFleet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[ts] = f
}

func (r *fleetRegistry) drop(ts *testscript.TestScript) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, ts)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Variable parts of the operator commands' output, for "normalize".
var (
	rfc3339Time   = regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	sha256Hex     = regexp.MustCompile(`\b[0-9a-f]{64}\b`)
	intentID      = regexp.MustCompile(`\b[0-9a-f]{24}([0-9a-f]{8})?\b`)
	leadingNumber = regexp.MustCompile(`(?m)^[0-9]+`)
)

// cmdNormalize is the script command "normalize [-ids] SRC DST": copy SRC
// to DST with times (RFC 3339, to the second, as people see them) replaced
// by YYYY-MM-DDThh:mm:ssZ (the same width, so that columns stay aligned),
// SHA-256 hashes by HASH and intent ids by INTENT, so that output can be
// compared with cmp or cmpenv. With -ids, a number that starts a line
// (an event id) becomes N, padded to its width.
// gitCommit is a git commit as status shortens it, after "commit ".
var gitCommit = regexp.MustCompile(`commit [0-9a-f]{12}\b`)

func cmdNormalize(ts *testscript.TestScript, neg bool, args []string) {
	ids := len(args) > 0 && args[0] == "-ids"
	if ids {
		args = args[1:]
	}
	if neg || len(args) != 2 {
		ts.Fatalf("usage: normalize [-ids] SRC DST")
	}
	s := ts.ReadFile(args[0])
	if ids {
		s = leadingNumber.ReplaceAllStringFunc(s, func(n string) string { return "N" + strings.Repeat(" ", len(n)-1) })
	}
	s = rfc3339Time.ReplaceAllString(s, "YYYY-MM-DDThh:mm:ssZ")
	s = sha256Hex.ReplaceAllString(s, "HASH")
	s = intentID.ReplaceAllString(s, "INTENT")
	s = gitCommit.ReplaceAllString(s, "commit COMMIT")
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), []byte(s), 0o644))
}
