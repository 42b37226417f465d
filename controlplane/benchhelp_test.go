package controlplane_test

// The check-in load driver of BenchmarkCheckin10k, BenchmarkScale and
// their tests.
//
// The simulated hosts run in a child process: this test binary started
// again as TestCheckinLoadProcess. A process may hold 20,000 open files on
// the benchmark machine, and root cannot raise that limit there; 10,000
// TLS connections need 10,000 descriptors at each end, so the server's
// ends stay in this process and the hosts' ends go to the child. The two
// processes talk over the child's stdin and stdout, one JSON value a
// line: a loadConfig, then a loadOp, answered by a loadResult, and so on
// until stdin closes.
//
// The same limit, and the ~28,000 ports one client address has towards
// one server port, cap the hosts that can hold a connection at once below
// 20,000. A fleet larger than that keeps loadConfig.Conns hosts on
// keep-alive connections and has the others open one connection (one TLS
// handshake) per request, as hosts behind a proxy that does not pool
// would; no more of those are open at once than the descriptors left
// (shortSlots).

import (
	"bufio"
	"bytes"
	"cmp"
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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/simagent"
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
	// Hosts are benchHostName(First) … benchHostName(Hosts-1), running
	// fleetrepo.Closure(name, Version). (BenchmarkScale's canary, host 0,
	// is simulated by the parent.)
	Hosts   int    `json:"hosts"`
	First   int    `json:"first,omitempty"`
	Version string `json:"version"`
	// Conns is how many of the hosts keep a connection open between
	// their requests (0: all of them), spread evenly over the rotation;
	// the others open one per request (keepAlive).
	Conns int `json:"conns,omitempty"`
}

// keepAlive reports whether the i-th of n hosts (0-based) is one of the
// conns that keep their connection: every n/conns-th host.
func keepAlive(i, n, conns int) bool {
	if conns <= 0 || conns >= n {
		return true
	}
	return (i+1)*conns/n > i*conns/n
}

// loadOp is one run of check-ins. Check-in j of a closed or open run goes
// to the host after the one check-in j-1 went to, across runs: every host
// gets its turn in order (the rotation).
type loadOp struct {
	// Kind is
	//   - "closed": Workers check in back to back;
	//   - "open": check-in j starts j/Rate seconds after the run does,
	//     however long the answers take;
	//   - "refresh": Workers check in, back to back, every host whose last
	//     answered check-in is older than Age, oldest first (Count is not
	//     used): what keeps an idle fleet heard between runs;
	//   - "hold": every host that keeps its connection starts a long-poll
	//     (wait Wait seconds, with the target it knows, as agents do); the
	//     answer comes at once, with Held;
	//   - "release": waits for the long-polls of the last hold to end, or,
	//     with Cancel, ends them (closing their connections); Latency is
	//     each one's duration.
	//   - "close": every host closes its idle connections.
	Kind    string        `json:"kind"`
	Count   int           `json:"count,omitempty"`
	Workers int           `json:"workers,omitempty"`
	Rate    float64       `json:"rate,omitempty"`
	Age     time.Duration `json:"age,omitempty"`
	Wait    int           `json:"wait,omitempty"`
	Cancel  bool          `json:"cancel,omitempty"`
	// Kept: a closed or open run goes over the hosts that keep their
	// connection only, in a rotation of their own.
	Kept bool `json:"kept,omitempty"`
	// Hosts: a closed run goes over these hosts only (indexes among the
	// load process's, Count not used), outside the rotation.
	Hosts []int `json:"hosts,omitempty"`
}

// loadResult is what a run measured.
type loadResult struct {
	// Latency of each check-in in microseconds, by j. Closed: from its
	// start. Open: from when it was due, so a server that falls behind
	// shows in the figures instead of slowing the run down.
	Latency []int64 `json:"latency"`
	// Sent (open runs): from when it was sent.
	Sent []int64 `json:"sent,omitempty"`
	// Short has, by j, 's' for a check-in of a host that opens a
	// connection per request, 'k' for one of a host that keeps its own.
	Short string `json:"short,omitempty"`
	// Elapsed is from the run's start to its last answer.
	Elapsed    time.Duration `json:"elapsed"`
	Errors     int           `json:"errors"`
	FirstError string        `json:"firstError,omitempty"`
	// The load process after the run: resident memory, open descriptors
	// (each host's connection is one), goroutines.
	RSS        int64 `json:"rss"`
	FDs        int   `json:"fds"`
	Goroutines int   `json:"goroutines"`
	// Held is how many long-polls a hold started.
	Held int `json:"held,omitempty"`
}

// TestCheckinLoadProcess is the load process when loadEnvVar is set, and
// nothing otherwise.
func TestCheckinLoadProcess(t *testing.T) { serveAsChild(loadEnvVar, "load process", serveLoad) }

// serveAsChild is the body of a child process's test (startChild): when
// env is set to 1, serve runs on stdin and stdout, and an error it
// returns ends the process with status 1; otherwise nothing happens.
func serveAsChild(env, what string, serve func(in io.Reader, out io.Writer) error) {
	if os.Getenv(env) != "1" {
		return
	}
	if err := serve(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, what+":", err)
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
	n := cfg.Hosts - cfg.First
	if n <= 0 {
		return fmt.Errorf("hosts %d to %d", cfg.First, cfg.Hosts-1)
	}
	d := &loadDriver{hosts: make([]*loadHost, n)}
	keep := 0
	for i := range d.hosts {
		name := benchHostName(cfg.First + i)
		key := benchKey(name)
		ka := keepAlive(i, n, cfg.Conns)
		// The timeout is above the longest long-poll (60 s).
		c, err := apiclient.New(cfg.URL, apiclient.Options{Key: key, Name: name, ServerCAs: cas, Timeout: 2 * time.Minute,
			DisableKeepAlives: !ka})
		if err != nil {
			return err
		}
		d.hosts[i] = &loadHost{Host: simagent.New(name, key, c, fleetrepo.Closure(name, cfg.Version)), short: !ka}
		if ka {
			keep++
			d.kept = append(d.kept, d.hosts[i])
		}
	}
	d.short = make(chan struct{}, shortSlots(keep))
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

// shortSlots is how many hosts without a kept connection may have one open
// at once, besides the kept connections: what the process's
// descriptor limit leaves, less a margin, and at most 1,024. The server's
// process has the same limit and holds the other ends.
func shortSlots(keep int) int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 64
	}
	return int(min(max(int64(lim.Cur)-int64(keep)-256, 8), 1024))
}

// loadDriver runs check-ins of simulated hosts. Each host has its own API
// client, so its own TLS connection (kept open, or one per request),
// authenticated by its key.
type loadDriver struct {
	hosts []*loadHost
	next  int // the host the next run starts with
	// kept are the hosts that keep their connection, and nextKept the one
	// the next run over them starts with (loadOp.Kept).
	kept     []*loadHost
	nextKept int
	// short holds a token while a host without a kept connection has one
	// open (shortSlots).
	short chan struct{}
	// held are the long-polls of the last hold; cancel ends them.
	held   *loadResult
	heldWG sync.WaitGroup
	cancel context.CancelFunc
}

type loadHost struct {
	mu sync.Mutex // one check-in at a time, so one connection
	*simagent.Host
	short bool         // no kept connection: one per request
	last  atomic.Int64 // its last answered check-in, Unix nanoseconds
}

// step checks the host in (and confirms a target it gets, as an agent
// does), long-polling up to wait: the check-ins of a converged host change
// nothing.
func (d *loadDriver) step(ctx context.Context, h *loadHost, wait time.Duration) error {
	if h.short {
		d.short <- struct{}{}
		defer func() { <-d.short }()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	err := h.Step(ctx, wait)
	if err == nil {
		h.last.Store(time.Now().UnixNano())
	}
	return err
}

func (d *loadDriver) run(ctx context.Context, op loadOp) (loadResult, error) {
	hosts, next := d.hosts, &d.next
	if op.Kept {
		hosts, next = d.kept, &d.nextKept
	}
	n := len(hosts)
	switch op.Kind {
	case "hold":
		return d.hold(op)
	case "release":
		return d.release(op)
	case "close":
		for _, h := range d.hosts {
			h.Client.CloseIdleConnections()
		}
		return loadResult{Latency: []int64{}}, nil
	case "refresh":
		// The hosts due, those heard from least recently first.
		var due []*loadHost
		limit := time.Now().Add(-op.Age).UnixNano()
		for _, h := range d.hosts {
			if h.last.Load() < limit {
				due = append(due, h)
			}
		}
		slices.SortFunc(due, func(a, b *loadHost) int { return cmp.Compare(a.last.Load(), b.last.Load()) })
		if len(due) == 0 {
			return loadResult{Latency: []int64{}}, nil
		}
		return d.closed(ctx, op.Workers, len(due), func(j int) *loadHost { return due[j] }), nil
	}
	if op.Kind == "closed" && len(op.Hosts) > 0 {
		for _, j := range op.Hosts {
			if j < 0 || j >= len(d.hosts) {
				return loadResult{}, fmt.Errorf("no host %d of %d", j, len(d.hosts))
			}
		}
		return d.closed(ctx, op.Workers, len(op.Hosts), func(j int) *loadHost { return d.hosts[op.Hosts[j]] }), nil
	}
	if op.Count <= 0 || n == 0 {
		return loadResult{}, fmt.Errorf("a run of %d check-ins over %d hosts", op.Count, n)
	}
	first := *next
	*next = (first + op.Count) % n
	host := func(j int) *loadHost { return hosts[(first+j)%n] }
	if op.Kind == "closed" {
		return d.closed(ctx, op.Workers, op.Count, host), nil
	}
	res := loadResult{Latency: make([]int64, op.Count), Short: shortOf(op.Count, host)}
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
					if err := d.step(ctx, host(j), 0); err != nil {
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

// closed has workers check in count hosts, host(0) … host(count-1), back
// to back; Latency is each one's round trip.
func (d *loadDriver) closed(ctx context.Context, workers, count int, host func(j int) *loadHost) loadResult {
	res := loadResult{Latency: make([]int64, count), Short: shortOf(count, host)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	workers = min(max(workers, 1), count)
	for w := range workers {
		wg.Go(func() {
			for j := w; j < count; j += workers {
				t := time.Now()
				err := d.step(ctx, host(j), 0)
				res.Latency[j] = time.Since(t).Microseconds()
				if err != nil {
					mu.Lock()
					if res.Errors++; res.FirstError == "" {
						res.FirstError = err.Error()
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.RSS, res.FDs, res.Goroutines = residentBytes(), openFiles(), runtime.NumGoroutine()
	return res
}

// shortOf is loadResult.Short of a run of count check-ins.
func shortOf(count int, host func(j int) *loadHost) string {
	b := make([]byte, count)
	for j := range b {
		b[j] = 'k'
		if host(j).short {
			b[j] = 's'
		}
	}
	return string(b)
}

// hold starts a long-poll of every host that keeps its connection, and
// answers at once.
func (d *loadDriver) hold(op loadOp) (loadResult, error) {
	if d.held != nil {
		return loadResult{}, errors.New("a hold while the last one's long-polls are not released")
	}
	if op.Wait <= 0 {
		return loadResult{}, fmt.Errorf("a hold of %d s", op.Wait)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	var keep []*loadHost
	for _, h := range d.hosts {
		if !h.short {
			keep = append(keep, h)
		}
	}
	res := &loadResult{Latency: make([]int64, len(keep)), Held: len(keep)}
	d.held = res
	var mu sync.Mutex
	for j, h := range keep {
		d.heldWG.Go(func() {
			t := time.Now()
			err := d.step(ctx, h, time.Duration(op.Wait)*time.Second)
			res.Latency[j] = time.Since(t).Microseconds()
			if err != nil && ctx.Err() == nil {
				mu.Lock()
				if res.Errors++; res.FirstError == "" {
					res.FirstError = err.Error()
				}
				mu.Unlock()
			}
		})
	}
	return loadResult{Held: len(keep), Latency: []int64{}}, nil
}

// release waits for the long-polls of the last hold (ending them first,
// with op.Cancel) and returns what they measured.
func (d *loadDriver) release(op loadOp) (loadResult, error) {
	if d.held == nil {
		return loadResult{}, errors.New("a release without a hold")
	}
	if op.Cancel {
		d.cancel()
	}
	d.heldWG.Wait()
	d.cancel()
	res := *d.held
	d.held = nil
	res.RSS, res.FDs, res.Goroutines = residentBytes(), openFiles(), runtime.NumGoroutine()
	return res, nil
}

// residentBytes is this process's resident memory (VmRSS), 0 if unknown.
func residentBytes() int64 { return residentOf("/proc/self/status") }

// openFiles counts this process's open file descriptors, -1 if unknown.
func openFiles() int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(fds)
}

// childProc is the parent's handle on a child process: this test binary
// started again as one test, with an environment variable that makes it
// serve (the load process, the CI process of benchci_test.go). The two
// talk over the child's stdin and stdout, one JSON value a line: a
// configuration, then a request answered by a result, until stdin closes.
type childProc struct {
	what   string
	cmd    *exec.Cmd
	in     io.WriteCloser
	enc    *json.Encoder
	dec    *json.Decoder
	stderr *bytes.Buffer
	mu     sync.Mutex // stderr is written by exec's copier
}

// startLoad starts a load process; it ends when the test does.
func startLoad(tb testing.TB, cfg loadConfig) *childProc {
	tb.Helper()
	return startChild(tb, "load process", "TestCheckinLoadProcess", loadEnvVar, cfg)
}

// startChild starts the test binary again as test, with env set to 1, and
// sends it cfg; it ends when the test does. what names it in errors.
func startChild(tb testing.TB, what, test, env string, cfg any) *childProc {
	tb.Helper()
	p := &childProc{what: what, stderr: &bytes.Buffer{}}
	p.cmd = exec.Command(os.Args[0], "-test.run=^"+test+"$")
	p.cmd.Env = append(os.Environ(), env+"=1")
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
			tb.Errorf("%s: %v\n%s", p.what, err, p.errors())
		}
	})
	p.enc, p.dec = json.NewEncoder(p.in), json.NewDecoder(bufio.NewReader(out))
	if err := p.enc.Encode(cfg); err != nil {
		tb.Fatalf("configuring the %s: %v\n%s", p.what, err, p.errors())
	}
	return p
}

func (p *childProc) errors() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// call sends the child a request and decodes its answer into res.
func (p *childProc) call(tb testing.TB, req, res any) {
	tb.Helper()
	if err := p.enc.Encode(req); err != nil {
		tb.Fatalf("%s: %v\n%s", p.what, err, p.errors())
	}
	if err := p.dec.Decode(res); err != nil {
		tb.Fatalf("%s: %v\n%s", p.what, err, p.errors())
	}
}

// run has the load process run op and returns what it measured.
func (p *childProc) run(tb testing.TB, op loadOp) loadResult {
	tb.Helper()
	var res loadResult
	p.call(tb, op, &res)
	if (op.Kind == "closed" || op.Kind == "open") && len(res.Latency) != op.Count {
		tb.Fatalf("load process: %d latencies for %d check-ins", len(res.Latency), op.Count)
	}
	return res
}

// checkinBench is a control plane on PostgreSQL serving a fleet of n hosts
// that all checked in and converged, and the load process that simulates
// them (all but the canary, when the fleet has one).
type checkinBench struct {
	e    *env
	n    int
	load *childProc
	// ci makes the trials' releases (a fleet with a canary only).
	ci *childProc
	st store.Store // the control plane's database, for its watermark and journal
	mc *http.Client
	// canary is BenchmarkScale's wave 0, simulated here (nil for a fleet
	// of one wave); first is then 1, the first host of the load process.
	canary *benchCanary
	first  int
	// conns is how many of the load process's hosts keep a connection.
	conns int
	// rollout is the id of the rollout the hosts converged in; release
	// the number of the last release (the first is 1, version v0).
	rollout string
	release int
	// sign covers signing the first release and starting the control
	// plane; onboard the onboarding: every host's first check-in, catch-up
	// dispatch and confirm.
	sign        time.Duration
	onboard     time.Duration
	onboardTick tickSample
	// Resident memory of this process (the control plane and the harness)
	// before and after the hosts connected; the load process's after.
	rssBefore, rssAfter, loadRSS int64
	// before is this process's memory after a collection, before the
	// hosts connected (memSample).
	before            memSample
	fdsAfter, loadFDs int
	// trials are BenchmarkScale's push-dispatch trials, once run; signed
	// is when the last release was signed.
	trials []trialResult
	signed time.Time
	// limit bounds each wait of a trial (trialLimit).
	limit time.Duration
	// heardAge: hosts heard from longer ago check in before a run
	// (keepHeard).
	heardAge time.Duration
}

// benchOpts shape a checkinBench.
type benchOpts struct {
	hosts int
	// conns is how many of the load process's hosts keep a connection
	// open (0: all of them); the others open one per request.
	conns int
	// canary: scaleSpec's fleet, whose canary (host 0, wave 0) this
	// process simulates, instead of benchSpec's.
	canary bool
	// offline is the control plane's offline threshold and confirm
	// window (0: their defaults, 5 min). A fleet whose hosts on short connections take longer than
	// half of it to check in once each, on this machine, needs more: a
	// host silent for the threshold is judged, and a channel half silent
	// holds everything.
	offline time.Duration
}

// driveWorkers is how many hosts check in at once while a rollout is
// driven (drive).
const driveWorkers = 32

// newCheckinBench builds and signs a fleet of one wave of n hosts, starts
// the control plane and the load process (every host on a kept
// connection), and onboards every host.
func newCheckinBench(tb testing.TB, n int) *checkinBench {
	tb.Helper()
	return newBench(tb, benchOpts{hosts: n})
}

// newBench builds and signs the fleet, starts the control plane and the
// load process, and onboards every host.
func newBench(tb testing.TB, o benchOpts) *checkinBench {
	tb.Helper()
	ctx := context.Background()
	began := time.Now()
	n := o.hosts
	spec := benchSpec(n)
	if o.canary {
		spec = scaleSpec(n)
	}
	e := newEnv(tb, "postgres", spec, func(c *controlplane.Config) {
		// Production settings: real time (last-seen times move, so every
		// flush writes them; status tags age), a tick every 30 s,
		// a trigger ticks at once or at the end of a 100 ms window
		// (leading-edge debounce), git polled every 5 s.
		c.Clock = clock.Real{}
		c.TickInterval, c.Debounce, c.LeaseTTL, c.PollInterval = 0, 0, 0, 0
		// As nixfleet-cp: CI's branch is verified ahead of the push.
		c.WatchRefs = []string{controlplane.DefaultWatchRef}
		if o.offline > 0 {
			// The confirm window too: while onboarding, a host learns of
			// its dispatch at its next check-in, a pass later.
			c.Tunables.OfflineThresholdSeconds = int(o.offline / time.Second)
			c.Tunables.ConfirmWindowSeconds = int(o.offline / time.Second)
		}
	})
	cb := &checkinBench{e: e, n: n, rollout: rolloutID("stable", 1), release: 1, signed: time.Now(), limit: trialLimit, heardAge: heardAge(o.offline), rssBefore: e.cpResident(), before: e.sampleMemory(tb), sign: time.Since(began)}
	tb.Logf("%d hosts: fleet signed, control plane ready in %s", n, cb.sign.Round(time.Millisecond))
	st, err := store.Open(ctx, e.cfg.DB)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(st.Close)
	cb.st = st
	cb.mc = e.httpClient()
	tb.Cleanup(cb.mc.CloseIdleConnections)
	if o.canary {
		cb.canary, cb.first = newBenchCanary(tb, e, benchHostName(0)), 1
		cb.ci = startCI(tb, e, n)
	}
	cb.conns = n - cb.first
	if o.conns > 0 {
		cb.conns = min(o.conns, cb.conns)
	}
	cb.load = startLoad(tb, loadConfig{URL: e.url, CA: e.cert.CertPEM, Hosts: n, First: cb.first, Version: "v0", Conns: o.conns})

	// The first rollout opened before any host checked in: every host was
	// skipped. Now they come online, catch up (a dispatch to what they run)
	// and confirm.
	began = time.Now()
	m0 := cb.scrape(tb)
	cb.drive(tb)
	cb.onboard = time.Since(began)
	cb.onboardTick = tickDelta(m0, cb.scrape(tb))
	// One more rotation: every host now holds a fresh status tag from the
	// control plane, as in a steady state.
	if cb.canary != nil {
		if err := cb.canary.step(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	if res := cb.load.run(tb, loadOp{Kind: "closed", Count: cb.loadHosts(), Workers: driveWorkers}); res.Errors > 0 {
		tb.Fatalf("%d check-ins failed, the first: %s", res.Errors, res.FirstError)
	}
	cb.rssAfter, cb.fdsAfter = e.cpResident(), openFiles()
	cb.logSetup(tb)
	return cb
}

// loadHosts is how many hosts the load process simulates.
func (cb *checkinBench) loadHosts() int { return cb.n - cb.first }

// logSetup logs the setup's figures.
func (cb *checkinBench) logSetup(tb testing.TB) {
	tb.Helper()
	tb.Logf("%d hosts onboarded in %s: %d ticks, %.0f ms each on average", cb.n, cb.onboard.Round(time.Millisecond),
		cb.onboardTick.count, cb.onboardTick.meanMS())
	tb.Logf("control plane process: %d MiB resident before the hosts connected, %d MiB after, %d open files; load process: %d MiB, %d open files (%d hosts on kept connections)",
		cb.rssBefore>>20, cb.rssAfter>>20, cb.fdsAfter, cb.loadRSS>>20, cb.loadFDs, cb.conns)
}

// drive has every host check in, then those not converged, pass after
// pass, with a tick after each, until all converged in the current rollout. A soaking host converges
// once a check-in after its confirm is recorded, and check-ins are
// recorded in batches a second apart (the hub's flush): after a pass that
// found every host soaking or converged, drive waits for the flush. A
// fleet with a canary takes three passes more: the canary's wave first.
func (cb *checkinBench) drive(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	soaking := false
	for pass := 1; ; pass++ {
		if pass > 9 {
			tb.Fatalf("the hosts did not converge in %d passes: %v", pass-1, cb.counts(tb))
		}
		if cb.canary != nil {
			if err := cb.canary.step(ctx); err != nil {
				tb.Fatalf("pass %d: the canary: %v", pass, err)
			}
		}
		stop := cb.stepCanary(ctx)
		op := loadOp{Kind: "closed", Count: cb.loadHosts(), Workers: driveWorkers}
		if pass > 1 {
			// Only the hosts not converged: a converged host's agent only
			// long-polls, and one whose state moved is woken to check in
			// again (the hub answers its long-poll).
			op.Hosts = cb.unconverged(tb)
			op.Count = len(op.Hosts)
		}
		var res loadResult
		if pass == 1 || len(op.Hosts) > 0 {
			res = cb.load.run(tb, op)
		}
		if err := stop(); err != nil {
			tb.Fatalf("pass %d: the canary: %v", pass, err)
		}
		if res.Errors > 0 {
			tb.Fatalf("pass %d: %d check-ins failed, the first: %s", pass, res.Errors, res.FirstError)
		}
		if res.RSS > 0 {
			cb.loadRSS, cb.loadFDs = res.RSS, res.FDs
		}
		tb.Logf("onboarding pass %d: %s, %v", pass, res.Elapsed, cb.counts(tb))
		if soaking {
			time.Sleep(1100 * time.Millisecond)
		}
		cb.tickNow(tb)
		c := cb.counts(tb)
		if c[reconciler.HostConverged] == cb.n {
			return
		}
		soaking = c[reconciler.HostSoaking]+c[reconciler.HostConverged] == cb.n
	}
}

// tickNow has the control plane tick and waits for it; in its own
// process, it waits for a tick that begins now (a trigger or its interval).
func (cb *checkinBench) tickNow(tb testing.TB) {
	tb.Helper()
	if cb.e.srv != nil {
		cb.e.srv.TickNow(context.Background())
		return
	}
	const ticks = "nixfleet_tick_duration_seconds_count"
	n := cb.scrape(tb)[ticks]
	cb.pollMetricsFor(tb, time.Minute, "two ticks", func(m map[string]float64) bool { return m[ticks] >= n+2 })
}

// stepCanary has the canary check in every canaryStep while a pass runs,
// and act on what it is answered, as its agent would: a pass of 100,000
// hosts outlasts its confirm window. stop ends it and returns its first
// error.
func (cb *checkinBench) stepCanary(ctx context.Context) (stop func() error) {
	if cb.canary == nil {
		return func() error { return nil }
	}
	done := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		t := time.NewTicker(canaryStep)
		defer t.Stop()
		for {
			select {
			case <-done:
				errc <- nil
				return
			case <-t.C:
				if err := cb.canary.step(ctx); err != nil {
					errc <- err
					return
				}
			}
		}
	}()
	return func() error {
		close(done)
		return <-errc
	}
}

// unconverged returns the load process's hosts (their indexes) not
// converged in the rollout the fleet onboards in.
func (cb *checkinBench) unconverged(tb testing.TB) []int {
	tb.Helper()
	r, err := cb.st.Rollout(context.Background(), cb.rollout)
	if err != nil {
		tb.Fatal(err)
	}
	var out []int
	for _, h := range r.Hosts {
		var i int
		if _, err := fmt.Sscanf(h.Hostname, "host-%d", &i); err != nil {
			tb.Fatalf("host %q: %v", h.Hostname, err)
		}
		if h.State != reconciler.HostConverged && i >= cb.first {
			out = append(out, i-cb.first)
		}
	}
	return out
}

// canaryStep is how often the canary checks in during a pass.
const canaryStep = 5 * time.Second

// counts returns the hosts by state in the rollouts that drive them, as
// the control plane's gauge nixfleet_hosts has them (its view after its
// last tick or reload): reading the rollout would move every host's row
// through the API at each pass.
func (cb *checkinBench) counts(tb testing.TB) map[reconciler.HostState]int {
	tb.Helper()
	m := cb.scrape(tb)
	out := map[reconciler.HostState]int{}
	for _, s := range reconciler.HostStates {
		if v := int(m[`nixfleet_hosts{state="`+string(s)+`"}`]); v > 0 {
			out[s] = v
		}
	}
	return out
}

// scrape reads the control plane's /metrics over the bench's own client,
// which keeps its connection.
func (cb *checkinBench) scrape(tb testing.TB) map[string]float64 {
	tb.Helper()
	m, err := readMetrics(cb.mc, cb.e.url)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// sameWrites reports whether two watermarks show the same writes a tick
// must see: events and changes (last-seen times aside).
func sameWrites(a, b store.Watermark) bool { return a.Events == b.Events && a.Changes == b.Changes }

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
	hc := e.httpClient()
	defer hc.CloseIdleConnections()
	m, err := readMetrics(hc, e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// readMetrics reads /metrics of the control plane at url: sample (with its
// labels) to value.
func readMetrics(hc *http.Client, url string) (map[string]float64, error) {
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: HTTP %d", resp.StatusCode)
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
		return nil, err
	}
	return out, nil
}

// watchTicks reads /metrics every 200 ms until stop is called, and stop
// returns the duration of each tick it saw end meanwhile (ticks that ended
// between the same two readings get their mean each).
func (cb *checkinBench) watchTicks() (stop func() []time.Duration) {
	done, out := make(chan struct{}), make(chan []time.Duration, 1)
	go func() {
		var ticks []time.Duration
		var prev map[string]float64
		poll := time.NewTicker(200 * time.Millisecond)
		defer poll.Stop()
		for {
			if m, err := readMetrics(cb.mc, cb.e.url); err == nil {
				if prev != nil {
					td := tickDelta(prev, m)
					for range td.count {
						ticks = append(ticks, td.sum/time.Duration(td.count))
					}
				}
				prev = m
			}
			select {
			case <-done:
				out <- ticks
				return
			case <-poll.C:
			}
		}
	}()
	return func() []time.Duration {
		close(done)
		return <-out
	}
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
