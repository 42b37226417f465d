package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/simagent"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// The promises of rfcs/0013 that must hold in real time, with real
// processes and real faults: a partition of most of a channel, writes the
// store acknowledged and then lost, and a dashboard stream signed out
// while events keep coming.

// cutter forwards TCP connections to a replica, and cuts them off as a
// network partition does: while cut, nothing passes either way (bytes
// wait, connections hang, new ones are accepted and hang); when it heals,
// what waited goes on. Nothing is refused or reset: the control plane only
// stops hearing the hosts behind it.
type cutter struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	open  chan struct{} // closed while traffic passes
	conns []net.Conn
}

func newCutter(t *testing.T, target string) *cutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{ln: ln, target: target, open: make(chan struct{})}
	close(c.open)
	go c.serve()
	t.Cleanup(c.close)
	return c
}

// URL is the replica's URL through the cutter.
func (c *cutter) URL() string { return "https://" + c.ln.Addr().String() }

func (c *cutter) serve() {
	for {
		in, err := c.ln.Accept()
		if err != nil {
			return
		}
		go c.pipe(in)
	}
}

func (c *cutter) pipe(in net.Conn) {
	c.pass()
	out, err := net.Dial("tcp", c.target)
	if err != nil {
		in.Close()
		return
	}
	c.mu.Lock()
	c.conns = append(c.conns, in, out)
	c.mu.Unlock()
	go c.copy(out, in)
	go c.copy(in, out)
}

// copy forwards what src sends to dst, each read once traffic passes.
func (c *cutter) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			c.pass()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

// pass waits until traffic passes.
func (c *cutter) pass() {
	c.mu.Lock()
	open := c.open
	c.mu.Unlock()
	<-open
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.open:
		c.open = make(chan struct{})
	default:
	}
}

func (c *cutter) heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.open:
	default:
		close(c.open)
	}
}

func (c *cutter) close() {
	c.ln.Close()
	c.heal()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
}

// runAgents runs hosts as agents do: long-polls of 30 s (the control plane
// holds them for at most a quarter of its offline threshold) and a pause
// of a second between check-ins. stop ends them.
func runAgents(hosts map[string]*simagent.Host) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, h := range hosts {
		h.Pause = time.Second
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.Run(ctx, 30*time.Second)
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// allEvents is GET /v1/events, every event.
func allEvents(t *testing.T, r *replica) []proto.Event {
	t.Helper()
	return journal(t, r, "/v1/events?limit=10000")
}

// noHostFailed fails the test for every host a rollout's journal moved to
// Failed, Skipped or Reverted: the hosts of these tests are healthy.
func noHostFailed(t *testing.T, evs []proto.Event) {
	t.Helper()
	for _, e := range evs {
		if e.Kind != reconciler.EventHostTransition {
			continue
		}
		switch reconciler.HostState(e.To) {
		case reconciler.HostFailed, reconciler.HostSkipped, reconciler.HostReverted:
			t.Errorf("%s moved %s→%s at %s (%s: %s)", e.Host, e.From, e.To, e.At.Format(time.RFC3339Nano), e.Reason.Code, e.Reason.Message)
		}
	}
}

// TestPartitionOfMostOfAChannel (rfcs/0013 rule 4, rfcs/0003 rule 6):
// 60 agents with a realistic long-poll; mid-soak, 60% of the channel —
// two soaking canaries, the two canaries still pending, and 32 hosts of
// the next wave — is cut off for 25 s, longer than the 10 s offline
// threshold. Their last check-ins fall anywhere in their check-in period
// before the cut. The control plane sees the partition whole (partial
// visibility) before the first of them is offline: no host is failed or
// skipped, wave 0 is not promoted while they are away (had the pending
// canaries been skipped, it would have been), and once they are back the
// rollout converges.
func TestPartitionOfMostOfAChannel(t *testing.T) {
	t.Parallel()
	const offline = 10 * time.Second
	spec := fleetrepo.Spec{Channels: map[string][]int{"stable": {0, 0}},
		Budgets: []proto.DisruptionBudget{{Selector: proto.Selector{All: true}, MaxInFlight: new(5)}}}
	var canaries, rest []string
	for i := range 60 {
		wave, name := 1, fmt.Sprintf("web-%02d", i)
		if i < 7 {
			wave, name = 0, fmt.Sprintf("canary-%d", i)
			canaries = append(canaries, name)
		} else {
			rest = append(rest, name)
		}
		spec.Hosts = append(spec.Hosts, fleetrepo.NewHost(name, "stable", wave))
	}
	f := newGitFleet(t, spec)
	v0 := f.Release("v0")
	cp := startCP(t, newSite(t), f, dbURL(t, "postgres"), "cp-1", "--offline-threshold", offline.String())
	cut := newCutter(t, cp.Addr)
	hosts := fleetHosts(f, cp)
	onboard(t, cp, hosts, v0)

	// The budget lets five canaries in at once: five soak for a minute,
	// two wait. Of those cut off, two soak and two wait; the others are
	// of wave 1.
	f.Spec.Channels["stable"] = []int{1, 0}
	v1 := f.Release("v1")
	cp.Hook()
	stop := runAgents(hosts)
	defer stop()
	var soaking, pending []string
	eventually(t, 30*time.Second, "five canaries soak", func() bool {
		ro, ok := getRollout(cp, v1)
		if !ok {
			return false
		}
		soaking, pending = nil, nil
		for _, n := range canaries {
			switch hostState(ro, n) {
			case reconciler.HostSoaking:
				soaking = append(soaking, n)
			case reconciler.HostPending:
				pending = append(pending, n)
			}
		}
		return len(soaking) == 5 && len(pending) == 2
	})
	behind := append(append(soaking[:2:2], pending...), rest[:32]...)
	stop()
	for _, n := range behind {
		h := hosts[n]
		c, err := apiclient.New(cut.URL(), apiclient.Options{Key: h.Key, Name: h.Name, ServerCAs: cp.site.Cert.Pool, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		h.Client = c
	}
	stop = runAgents(hosts)
	defer stop()

	// The cut covers the end of the soak: the three canaries not cut off
	// converge while it lasts, and wave 0 could then be promoted if the
	// pending canaries behind it were skipped.
	time.Sleep(35 * time.Second)
	cut.cut()
	cutAt := time.Now()
	time.Sleep(25 * time.Second)
	cut.heal()
	healedAt := time.Now()
	t.Logf("cut %d of 60 hosts (%v) from %s to %s", len(behind), behind[:4], cutAt.Format(time.RFC3339Nano), healedAt.Format(time.RFC3339Nano))

	eventually(t, 3*time.Minute, v1+" converges", func() bool {
		ro, ok := getRollout(cp, v1)
		return ok && ro.State == string(reconciler.RolloutConverged) && ro.Counts[string(reconciler.HostConverged)] == 60
	})
	evs := allEvents(t, cp)
	noHostFailed(t, evs)
	var seen, restored bool
	for _, e := range evs {
		during := e.At.After(cutAt) && e.At.Before(healedAt)
		switch {
		case e.Kind == reconciler.EventPartialVisibility && during:
			seen = true
			// Every host behind the cut is late within the late threshold
			// (half the offline threshold) and a check-in period.
			if d := e.At.Sub(cutAt); d > offline/2+offline/4+2*time.Second {
				t.Errorf("partial visibility began %s after the cut, want within %s", d, offline/2+offline/4+2*time.Second)
			}
		case e.Kind == reconciler.EventVisibilityRestored && e.At.After(healedAt):
			restored = true
		case during && (e.Kind == reconciler.EventWavePromoted || e.To == string(reconciler.RolloutConverged)):
			t.Errorf("%s while the partition lasted: %s", e.Kind, e.Reason.Message)
		}
	}
	if !seen || !restored {
		t.Errorf("partial visibility began during the cut: %v; ended after it: %v", seen, restored)
	}
}

// pgCluster is a PostgreSQL server of the test's own, which it crashes and
// starts again.
type pgCluster struct {
	t    *testing.T
	bin  string
	dir  string
	port int
	opts string
}

// startPG initialises and starts a PostgreSQL cluster on a free loopback
// port, with the given settings (name=value), as the postgres user when
// run as root. It is stopped and deleted when the test ends.
func startPG(t *testing.T, settings ...string) *pgCluster {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		t.Fatal("PostgreSQL is not installed: run .ci/run, which installs it")
	}
	slices.Sort(bins)
	root, err := os.MkdirTemp("", "nixfleet-pg-")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	p := &pgCluster{t: t, bin: filepath.Dir(bins[len(bins)-1]), dir: filepath.Join(root, "data"), port: port}
	p.opts = fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s", port, root)
	for _, s := range settings {
		p.opts += " -c " + s
	}
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chown", "postgres:", root).CombinedOutput(); err != nil {
			t.Fatalf("chown postgres %s: %v\n%s", root, err, out)
		}
	}
	p.pg("initdb", "-D", p.dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	p.start()
	t.Cleanup(func() {
		_ = p.cmd("pg_ctl", "-D", p.dir, "-m", "immediate", "stop").Run()
		os.RemoveAll(root)
	})
	return p
}

// URL is the cluster's postgres database.
func (p *pgCluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

func (p *pgCluster) start() {
	p.t.Helper()
	p.pg("pg_ctl", "-D", p.dir, "-l", filepath.Join(filepath.Dir(p.dir), "server.log"), "-w", "-t", "60", "-o", p.opts, "start")
}

// crash stops the server at once, as a power cut would stop it: what it
// had not written to its log is lost.
func (p *pgCluster) crash() {
	p.t.Helper()
	p.pg("pg_ctl", "-D", p.dir, "-m", "immediate", "stop")
}

// cmd is a command of the cluster's binaries, as the postgres user when
// the test runs as root.
func (p *pgCluster) cmd(name string, args ...string) *exec.Cmd {
	path := filepath.Join(p.bin, name)
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

func (p *pgCluster) pg(name string, args ...string) {
	p.t.Helper()
	if out, err := p.cmd(name, args...).CombinedOutput(); err != nil {
		p.t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// as runs a command as the cluster's owner (on its files).
func (p *pgCluster) as(name string, args ...string) {
	p.t.Helper()
	c := exec.Command(name, args...)
	if os.Geteuid() == 0 {
		c = exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	if out, err := c.CombinedOutput(); err != nil {
		p.t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// metric reads a counter or gauge without labels from a replica's
// /metrics.
func metric(t *testing.T, r *replica, name string) float64 {
	t.Helper()
	res, err := r.httpClient().Get(r.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no %s in /metrics", name)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestLostWritesFailNoHost (rfcs/0013 rule 8): a write the store
// acknowledged and then lost never fails a healthy host.
//
//  1. The control plane's PostgreSQL commits asynchronously
//     (synchronous_commit=off, its log written every 10 s), and is stopped
//     at once right after the canaries of release v1 switched, confirmed
//     and checked in on their new closure: it loses what it had not
//     written of that (which part varies from run to run: the statuses,
//     the confirms, the dispatch).
//  2. A restore from a backup: the cluster is copied between v1 and v2,
//     and put back after v2's canaries switched, confirmed and checked
//     in: the store has lost all of it, for certain.
//
// Each time, the hosts go on echoing their status tags and saying what
// they run; no host is failed, and the rollout converges.
func TestLostWritesFailNoHost(t *testing.T) {
	t.Parallel()
	pg := startPG(t, "synchronous_commit=off", "wal_writer_delay=10000ms")
	spec := fleetrepo.Spec{Channels: map[string][]int{"stable": {0, 0}}}
	for i := range 3 {
		spec.Hosts = append(spec.Hosts, fleetrepo.NewHost(fmt.Sprintf("canary-%d", i), "stable", 0),
			fleetrepo.NewHost(fmt.Sprintf("web-%d", i), "stable", 1))
	}
	f := newGitFleet(t, spec)
	v0 := f.Release("v0")
	cp := startCP(t, newSite(t), f, pg.URL(), "cp-1", "--offline-threshold", "10s", "--confirm-window", "10s")
	hosts := fleetHosts(f, cp)
	onboard(t, cp, hosts, v0)
	stop := runAgents(hosts)
	defer stop()

	// lost pushes a release, waits until its canaries switched and
	// checked in once on it (an agent pauses a second), and has the store
	// lose what it can; then the release must converge with no failure.
	// It returns how many times the canaries acted on a dispatch of it.
	lost := func(version string, lose func()) (string, int) {
		t.Helper()
		id := f.Release(version)
		cp.Hook()
		eventually(t, 20*time.Second, "the canaries switch to "+version, func() bool {
			for i := range 3 {
				if n := fmt.Sprintf("canary-%d", i); hosts[n].Current() != fleetrepo.Closure(n, version) {
					return false
				}
			}
			return true
		})
		time.Sleep(1500 * time.Millisecond)
		lose()
		var last proto.Rollout
		if err := poll(2*time.Minute, func() bool {
			ro, ok := getRollout(cp, id)
			last = ro
			return ok && ro.State == string(reconciler.RolloutConverged) && ro.Counts[string(reconciler.HostConverged)] == len(hosts)
		}); err != nil {
			for _, e := range allEvents(t, cp) {
				t.Logf("event %s %s %s %s %s→%s %s: %s", e.At.Format(time.RFC3339Nano), e.Kind, e.RolloutID, e.Host, e.From, e.To, e.Reason.Code, e.Reason.Message)
			}
			t.Fatalf("%s does not converge: %v; last seen %s %s", id, err, last.State, last.Reason.Message)
		}
		evs := rolloutEvents(t, cp, id)
		noHostFailed(t, evs)
		acted, inferred := 0, 0
		for i := range 3 {
			for _, l := range hosts[fmt.Sprintf("canary-%d", i)].Log {
				if strings.HasPrefix(l, "dispatch "+id) {
					acted++
				}
			}
		}
		for _, e := range evs {
			if e.Reason.Code == codes.ConfirmInferred {
				inferred++
			}
		}
		t.Logf("%s: the canaries acted on %d dispatches; %d confirms inferred; %g status rechecks so far",
			version, acted, inferred, metric(t, cp, "nixfleet_status_rechecks_total"))
		return id, acted
	}

	lost("v1", func() {
		pg.crash()
		time.Sleep(2 * time.Second)
		pg.start()
	})

	backup := filepath.Join(filepath.Dir(pg.dir), "backup")
	pg.pg("pg_ctl", "-D", pg.dir, "-m", "fast", "stop")
	pg.as("cp", "-a", pg.dir, backup)
	pg.start()
	if _, acted := lost("v2", func() {
		pg.crash()
		pg.as("rm", "-rf", pg.dir)
		pg.as("cp", "-a", backup, pg.dir)
		pg.start()
	}); acted <= 3 {
		t.Errorf("after the restore the canaries acted on %d dispatches of v2, want more than 3: the store lost the dispatch, and dispatched them again", acted)
	}
}

// TestDashboardStreamSignedOut (rfcs/0011 §Live updates): with the git
// poll every 500 ms waking every stream, an open /ui/events stream still
// sends a keep-alive every 20 s, and one whose session is signed out ends
// with signed-out within 20 s.
func TestDashboardStreamSignedOut(t *testing.T) {
	t.Parallel()
	f := newGitFleet(t, twoWaveSpec())
	f.Release("v0")
	cp := startCP(t, newSite(t), f, dbURL(t, "sqlite"), "cp-1", "--poll-interval", "500ms")
	login, _, err := cp.Operator().WebLogin(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	browser := cp.httpClient()
	browser.Jar, browser.Timeout = jar, 0
	browser.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	get := func(path string) *http.Response {
		t.Helper()
		res, err := browser.Get(cp.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := get(login.Path); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("opening the sign-in link: %d", res.StatusCode)
	}
	page, err := io.ReadAll(get("/ui/").Body)
	if err != nil {
		t.Fatal(err)
	}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
	if csrf == nil {
		t.Fatalf("no CSRF token on the overview:\n%s", page)
	}

	res := get("/ui/events")
	defer res.Body.Close()
	opened := time.Now()
	type line struct {
		at   time.Time
		text string
	}
	lines := make(chan line, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			lines <- line{time.Now(), sc.Text()}
		}
	}()
	var keepAlives []time.Duration
	for len(keepAlives) < 2 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the stream ended before two keep-alives")
			}
			if l.text == ": still here" {
				keepAlives = append(keepAlives, l.at.Sub(opened))
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no keep-alive for 30 s (after %v)", keepAlives)
		}
	}
	for i, d := range keepAlives {
		if want := time.Duration(i+1) * 20 * time.Second; d < want-time.Second || d > want+3*time.Second {
			t.Errorf("keep-alive %d came %s after the stream opened, want %s", i+1, d, want)
		}
	}

	form := url.Values{"csrf": {string(csrf[1])}}
	req, _ := http.NewRequest(http.MethodPost, cp.URL()+"/ui/logout", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", cp.URL())
	out, err := browser.Do(req)
	if err != nil || out.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %v %v", out, err)
	}
	signedOut := time.Now()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the stream ended without signed-out")
			}
			if l.text == "event: signed-out" {
				if d := l.at.Sub(signedOut); d > 21*time.Second {
					t.Errorf("signed-out came %s after the sign-out, want within 20 s", d)
				}
				return
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the stream still runs 30 s after its session was signed out")
		}
	}
}
