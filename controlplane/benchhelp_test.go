package controlplane_test

// The check-in load driver of BenchmarkCheckin10k and TestCheckinLoad.
//
// The simulated hosts run in a child process: this test binary started
// again as TestCheckinLoadProcess. A process may hold 20,000 open files on
// the benchmark machine, and root cannot raise that limit there; 10,000
// TLS connections need 10,000 descriptors at each end, so the server's
// ends stay in this process and the hosts' ends go to the child. The two
// processes talk over the child's stdin and stdout, one JSON value a
// line: a loadConfig, then a loadOp, answered by a loadResult, and so on
// until stdin closes.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/simagent"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// loadEnvVar tells the test binary it runs as the load process.
const loadEnvVar = "NIXFLEET_CHECKIN_LOAD"

// benchKey derives a host's ed25519 key from its name, so the fleet and the
// load process make the same keys without passing 10,000 of them around.
func benchKey(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("nixfleet-bench-host/" + name))
	return ed25519.NewKeyFromSeed(seed[:])
}

func benchHostName(i int) string { return fmt.Sprintf("host-%05d", i) }

// benchSpec is one channel with one wave (no soak) of n hosts.
func benchSpec(n int) fleetrepo.Spec {
	s := fleetrepo.Spec{Channels: map[string][]int{"stable": {0}}, Hosts: make([]fleetrepo.Host, n)}
	for i := range s.Hosts {
		name := benchHostName(i)
		s.Hosts[i] = fleetrepo.Host{Name: name, Channel: "stable", Key: benchKey(name)}
	}
	return s
}

// loadConfig is the load process's first input.
type loadConfig struct {
	URL string `json:"url"`
	// CA is the server certificate (PEM).
	CA []byte `json:"ca"`
	// Hosts are benchHostName(0) … benchHostName(Hosts-1), running
	// fleetrepo.Closure(name, Version).
	Hosts   int    `json:"hosts"`
	Version string `json:"version"`
}

// loadOp is one run of check-ins. Check-in j of a run goes to the host
// after the one check-in j-1 went to, across runs: every host gets its
// turn in order (the rotation).
type loadOp struct {
	// Kind is "closed": Workers check in back to back; or "open": check-in
	// j starts j/Rate seconds after the run does, however long the answers
	// take.
	Kind    string  `json:"kind"`
	Count   int     `json:"count"`
	Workers int     `json:"workers,omitempty"`
	Rate    float64 `json:"rate,omitempty"`
}

// loadResult is what a run measured.
type loadResult struct {
	// Latency of each check-in in microseconds, by j. Closed: from its
	// start. Open: from when it was due, so a server that falls behind
	// shows in the figures instead of slowing the run down.
	Latency []int64 `json:"latency"`
	// Sent (open runs): from when it was sent.
	Sent []int64 `json:"sent,omitempty"`
	// Elapsed is from the run's start to its last answer.
	Elapsed    time.Duration `json:"elapsed"`
	Errors     int           `json:"errors"`
	FirstError string        `json:"firstError,omitempty"`
	// The load process after the run: resident memory, open descriptors
	// (each host's connection is one), goroutines.
	RSS        int64 `json:"rss"`
	FDs        int   `json:"fds"`
	Goroutines int   `json:"goroutines"`
}

// TestCheckinLoadProcess is the load process when loadEnvVar is set, and
// nothing otherwise.
func TestCheckinLoadProcess(t *testing.T) {
	if os.Getenv(loadEnvVar) != "1" {
		return
	}
	if err := serveLoad(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "load process:", err)
		os.Exit(1)
	}
}

// serveLoad reads a loadConfig, then runs loadOps until in ends.
func serveLoad(in io.Reader, out io.Writer) error {
	dec := json.NewDecoder(in)
	var cfg loadConfig
	if err := dec.Decode(&cfg); err != nil {
		return fmt.Errorf("reading the configuration: %w", err)
	}
	cas := x509.NewCertPool()
	if !cas.AppendCertsFromPEM(cfg.CA) {
		return errors.New("no certificate in the configuration")
	}
	d := &loadDriver{hosts: make([]*loadHost, cfg.Hosts)}
	for i := range d.hosts {
		name := benchHostName(i)
		key := benchKey(name)
		c, err := apiclient.New(cfg.URL, apiclient.Options{Key: key, Name: name, ServerCAs: cas, Timeout: time.Minute})
		if err != nil {
			return err
		}
		d.hosts[i] = &loadHost{Host: simagent.New(name, key, c, fleetrepo.Closure(name, cfg.Version))}
	}
	enc := json.NewEncoder(out)
	for {
		var op loadOp
		if err := dec.Decode(&op); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading a run: %w", err)
		}
		res, err := d.run(context.Background(), op)
		if err != nil {
			return err
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
}

// loadDriver runs check-ins of simulated hosts. Each host has its own API
// client, so its own keep-alive TLS connection, authenticated by its key.
type loadDriver struct {
	hosts []*loadHost
	next  int // the host the next run starts with
}

type loadHost struct {
	mu sync.Mutex // one check-in at a time, so one connection
	*simagent.Host
}

// step checks the host in (and confirms a target it gets, as an agent
// does): the check-ins of a converged host change nothing.
func (h *loadHost) step(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.Step(ctx, 0)
}

func (d *loadDriver) run(ctx context.Context, op loadOp) (loadResult, error) {
	n := len(d.hosts)
	if op.Count <= 0 || n == 0 {
		return loadResult{}, fmt.Errorf("a run of %d check-ins over %d hosts", op.Count, n)
	}
	first := d.next
	d.next = (first + op.Count) % n
	host := func(j int) *loadHost { return d.hosts[(first+j)%n] }
	res := loadResult{Latency: make([]int64, op.Count)}
	var errMu sync.Mutex
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if res.Errors++; res.FirstError == "" {
			res.FirstError = err.Error()
		}
	}
	var last atomic.Int64 // nanoseconds after start of the last answer
	done := func(start time.Time) {
		el := int64(time.Since(start))
		for {
			cur := last.Load()
			if el <= cur || last.CompareAndSwap(cur, el) {
				return
			}
		}
	}
	var wg sync.WaitGroup
	start := time.Now()
	switch op.Kind {
	case "closed":
		workers := min(max(op.Workers, 1), op.Count)
		for w := range workers {
			wg.Go(func() {
				for j := w; j < op.Count; j += workers {
					t := time.Now()
					if err := host(j).step(ctx); err != nil {
						fail(err)
					}
					res.Latency[j] = time.Since(t).Microseconds()
					done(start)
				}
			})
		}
	case "open":
		if op.Rate <= 0 {
			return loadResult{}, fmt.Errorf("an open run at %v check-ins a second", op.Rate)
		}
		res.Sent = make([]int64, op.Count)
		// One goroutine per host: a host's check-ins are due n/Rate apart
		// and a late one delays only that host's next.
		for k := range min(n, op.Count) {
			wg.Go(func() {
				for j := k; j < op.Count; j += n {
					due := start.Add(time.Duration(float64(j) / op.Rate * float64(time.Second)))
					time.Sleep(time.Until(due))
					t := time.Now()
					if err := host(j).step(ctx); err != nil {
						fail(err)
					}
					end := time.Now()
					res.Latency[j], res.Sent[j] = end.Sub(due).Microseconds(), end.Sub(t).Microseconds()
					done(start)
				}
			})
		}
	default:
		return loadResult{}, fmt.Errorf("unknown kind of run %q", op.Kind)
	}
	wg.Wait()
	res.Elapsed = time.Duration(last.Load())
	res.RSS, res.FDs, res.Goroutines = residentBytes(), openFiles(), runtime.NumGoroutine()
	return res, nil
}

// residentBytes is this process's resident memory (VmRSS), 0 if unknown.
func residentBytes() int64 {
	data, err := os.ReadFile("/proc/self/status")
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

// openFiles counts this process's open file descriptors, -1 if unknown.
func openFiles() int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(fds)
}

// loadProc is the parent's handle on a load process.
type loadProc struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	enc    *json.Encoder
	dec    *json.Decoder
	stderr *bytes.Buffer
	mu     sync.Mutex // stderr is written by exec's copier
}

// startLoad starts a load process; it ends when the test does.
func startLoad(tb testing.TB, cfg loadConfig) *loadProc {
	tb.Helper()
	p := &loadProc{stderr: &bytes.Buffer{}}
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestCheckinLoadProcess$")
	p.cmd.Env = append(os.Environ(), loadEnvVar+"=1")
	p.cmd.Stderr = &lockedWriter{mu: &p.mu, w: p.stderr}
	var err error
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		tb.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		p.in.Close()
		if err := p.cmd.Wait(); err != nil {
			tb.Errorf("load process: %v\n%s", err, p.errors())
		}
	})
	p.enc, p.dec = json.NewEncoder(p.in), json.NewDecoder(bufio.NewReader(out))
	if err := p.enc.Encode(cfg); err != nil {
		tb.Fatalf("configuring the load process: %v\n%s", err, p.errors())
	}
	return p
}

func (p *loadProc) errors() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// run has the load process run op and returns what it measured.
func (p *loadProc) run(tb testing.TB, op loadOp) loadResult {
	tb.Helper()
	var res loadResult
	if err := p.enc.Encode(op); err != nil {
		tb.Fatalf("load process: %v\n%s", err, p.errors())
	}
	if err := p.dec.Decode(&res); err != nil {
		tb.Fatalf("load process: %v\n%s", err, p.errors())
	}
	if len(res.Latency) != op.Count {
		tb.Fatalf("load process: %d latencies for %d check-ins", len(res.Latency), op.Count)
	}
	return res
}

// checkinBench is a control plane on PostgreSQL serving a fleet of n hosts
// that all checked in and converged, and the load process that simulates
// them.
type checkinBench struct {
	e    *env
	n    int
	load *loadProc
	st   store.Store // the control plane's database, for its watermark
	// rollout is the id of the rollout the hosts converged in; release
	// the number of the last release (the first is 1, version v0).
	rollout string
	release int
	// onboard covers the onboarding: every host's first check-in, catch-up
	// dispatch and confirm.
	onboard     time.Duration
	onboardTick tickSample
	// Resident memory of this process (the control plane and the harness)
	// before and after the hosts connected; the load process's after.
	rssBefore, rssAfter, loadRSS int64
	fdsAfter, loadFDs            int
}

// driveWorkers is how many hosts check in at once while a rollout is
// driven (drive).
const driveWorkers = 32

// newCheckinBench builds and signs the fleet, starts the control plane and
// the load process, and onboards every host.
func newCheckinBench(tb testing.TB, n int) *checkinBench {
	tb.Helper()
	ctx := context.Background()
	began := time.Now()
	e := newEnv(tb, "postgres", benchSpec(n), func(c *controlplane.Config) {
		// Production settings: real time (last-seen times move, so every
		// flush writes them; status tags age), a tick every 30 s,
		// triggers collapsed over 500 ms, git polled every 5 s.
		c.Now = time.Now
		c.TickInterval, c.Debounce, c.LeaseTTL, c.PollInterval = 0, 0, 0, 0
	})
	cb := &checkinBench{e: e, n: n, rollout: rolloutID("stable", 1), release: 1, rssBefore: residentBytes()}
	tb.Logf("%d hosts: fleet signed, control plane ready in %s", n, time.Since(began).Round(time.Millisecond))
	st, err := store.Open(ctx, e.cfg.DB)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(st.Close)
	cb.st = st
	cb.load = startLoad(tb, loadConfig{URL: e.url, CA: e.cert.CertPEM, Hosts: n, Version: "v0"})

	// The first rollout opened before any host checked in: every host was
	// skipped. Now they come online, catch up (a dispatch to what they run)
	// and confirm.
	began = time.Now()
	m0 := e.metrics()
	cb.drive(tb)
	cb.onboard = time.Since(began)
	cb.onboardTick = tickDelta(m0, e.metrics())
	// One more rotation: every host now holds a fresh status tag from the
	// control plane, as in a steady state.
	if res := cb.load.run(tb, loadOp{Kind: "closed", Count: n, Workers: driveWorkers}); res.Errors > 0 {
		tb.Fatalf("%d check-ins failed, the first: %s", res.Errors, res.FirstError)
	}
	cb.rssAfter, cb.fdsAfter = residentBytes(), openFiles()
	cb.logSetup(tb)
	return cb
}

// logSetup logs the setup's figures.
func (cb *checkinBench) logSetup(tb testing.TB) {
	tb.Helper()
	tb.Logf("%d hosts onboarded in %s: %d ticks, %.0f ms each on average", cb.n, cb.onboard.Round(time.Millisecond),
		cb.onboardTick.count, cb.onboardTick.meanMS())
	tb.Logf("control plane process: %d MiB resident before the hosts connected, %d MiB after, %d open files; load process: %d MiB, %d open files",
		cb.rssBefore>>20, cb.rssAfter>>20, cb.fdsAfter, cb.loadRSS>>20, cb.loadFDs)
}

// drive has every host check in, pass after pass, with a tick after each,
// until all converged in the current rollout. A soaking host converges
// once a check-in after its confirm is recorded, and check-ins are
// recorded in batches a second apart (the hub's flush): after a pass that
// found every host soaking or converged, drive waits for the flush.
func (cb *checkinBench) drive(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	soaking := false
	for pass := 1; ; pass++ {
		if pass > 6 {
			tb.Fatalf("the hosts did not converge in %d passes: %v", pass-1, cb.counts())
		}
		res := cb.load.run(tb, loadOp{Kind: "closed", Count: cb.n, Workers: driveWorkers})
		if res.Errors > 0 {
			tb.Fatalf("pass %d: %d check-ins failed, the first: %s", pass, res.Errors, res.FirstError)
		}
		cb.loadRSS, cb.loadFDs = res.RSS, res.FDs
		tb.Logf("onboarding pass %d: %s, %v", pass, res.Elapsed, cb.counts())
		if soaking {
			time.Sleep(1100 * time.Millisecond)
		}
		cb.e.srv.TickNow(ctx)
		c := cb.counts()
		if c[reconciler.HostConverged] == cb.n {
			return
		}
		soaking = c[reconciler.HostSoaking]+c[reconciler.HostConverged] == cb.n
	}
}

// counts returns the current rollout's hosts by state.
func (cb *checkinBench) counts() map[reconciler.HostState]int {
	var r proto.Rollout
	if err := cb.e.client(cb.e.viewKey.priv, "victor").Get(context.Background(), "/v1/rollouts/"+cb.rollout, &r); err != nil {
		return nil
	}
	out := map[reconciler.HostState]int{}
	for s, n := range r.Counts {
		out[reconciler.HostState(s)] = n
	}
	return out
}

// watermark returns the store's watermark: steady-state check-ins must not
// move it.
func (cb *checkinBench) watermark(tb testing.TB) store.Watermark {
	tb.Helper()
	w, err := cb.st.Watermark(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// metrics reads the control plane's /metrics: sample (with its labels) to
// value.
func (e *env) metrics() map[string]float64 {
	e.t.Helper()
	resp, err := e.httpClient().Get(e.url + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET /metrics: HTTP %d", resp.StatusCode)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	if err := sc.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// tickSample is the ticks between two readings of /metrics.
type tickSample struct {
	count int
	sum   time.Duration
}

func (s tickSample) meanMS() float64 {
	if s.count == 0 {
		return 0
	}
	return float64(s.sum) / float64(s.count) / float64(time.Millisecond)
}

func tickDelta(before, after map[string]float64) tickSample {
	const name = "nixfleet_tick_duration_seconds"
	return tickSample{count: int(after[name+"_count"] - before[name+"_count"]),
		sum: time.Duration((after[name+"_sum"] - before[name+"_sum"]) * float64(time.Second))}
}

// percentile returns the p-th percentile (nearest rank) of sorted values.
func percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}
