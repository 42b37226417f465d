package controlplane_test

// BenchmarkScale's fleet, its canary and what it measures beyond the
// check-in runs of benchhelp_test.go: push→dispatch and status→tick trials,
// and the memory a long-poll holds.

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/testkit/cptest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// scaleSoakMinutes is the canary wave's soak in the releases the trials
// push: long enough that no trial's canary finishes it, so wave 1 never
// starts and each trial ends with the canary's failure.
const scaleSoakMinutes = 5

// scaleSpec is one channel, stable, with two waves: host 0 alone (the
// canary) and everyone else; a health failure halts. The first release
// (v0, what the hosts run) soaks 0 minutes, so that onboarding does not
// wait for the canary; the trials' releases soak scaleSoakMinutes.
func scaleSpec(n int) fleetrepo.Spec {
	s := fleetrepo.Spec{Channels: map[string][]int{"stable": {0, 0}}, Hosts: make([]fleetrepo.Host, n),
		OnHealthFailure: proto.OnHealthFailureHalt}
	for i := range s.Hosts {
		name := benchHostName(i)
		s.Hosts[i] = fleetrepo.Host{Name: name, Channel: "stable", Wave: min(i, 1), Key: benchKey(name)}
	}
	return s
}

// maxWait is the longest long-poll (rfcs/0007), the one agents make.
const maxWait = 60 * time.Second

// benchCanary is the canary as its agent behaves, simulated in this
// process so that the trials see each answer when it comes: it checks in
// with what it runs, its probes and the target it knows, long-polls,
// switches to a dispatched closure and confirms.
type benchCanary struct {
	name    string
	c       *apiclient.Client
	current string
	known   *proto.TargetRef
	tag     string
	failing []string
	last    time.Time // its last answered check-in
}

func newBenchCanary(tb testing.TB, e *env, name string) *benchCanary {
	tb.Helper()
	// The timeout is above the longest long-poll.
	c, err := apiclient.New(e.url, apiclient.Options{Key: benchKey(name), Name: name, ServerCAs: e.cert.Pool, Timeout: 2 * time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	return &benchCanary{name: name, c: c, current: fleetrepo.Closure(name, "v0")}
}

// checkin checks in once, waiting up to wait for a change.
func (k *benchCanary) checkin(ctx context.Context, wait time.Duration) (proto.CheckinResponse, error) {
	req := proto.CheckinRequest{Hostname: k.name, Current: k.current, Booted: k.current,
		Probes: proto.ProbeSummary{Total: 1, Failed: k.failing}, FailedUnits: []string{}, Known: k.known,
		Wait: int(wait / time.Second), StatusTag: k.tag}
	resp, err := k.c.Checkin(ctx, req)
	if err != nil {
		k.tag = ""
		return resp, err
	}
	k.tag, k.last = resp.StatusTag, time.Now()
	if resp.Target == nil {
		k.known = nil
	}
	return resp, nil
}

// confirm switches to a target and confirms it.
func (k *benchCanary) confirm(ctx context.Context, t *proto.Target) error {
	k.current = t.Closure
	if err := k.c.Confirm(ctx, proto.ConfirmRequest{Hostname: k.name, RolloutID: t.RolloutID, Closure: t.Closure, Token: t.Token}); err != nil {
		return fmt.Errorf("%s confirming %s in %s: %w", k.name, t.Closure, t.RolloutID, err)
	}
	k.known = &proto.TargetRef{RolloutID: t.RolloutID, Closure: t.Closure, Token: t.Token}
	return nil
}

// step checks in once without waiting, and confirms a target it had not
// acted on.
func (k *benchCanary) step(ctx context.Context) error {
	resp, err := k.checkin(ctx, 0)
	if err != nil {
		return fmt.Errorf("%s checking in: %w", k.name, err)
	}
	if t := resp.Target; t != nil && (k.known == nil || k.known.Token != t.Token) {
		return k.confirm(ctx, t)
	}
	return nil
}

// heardAge: before each measured run, trial and hold, the hosts whose last
// answered check-in is older check in again (unmeasured). A fleet checks
// in all the time, and one that fell silent here would change what is
// measured: a host silent for half the offline threshold (2.5 min by
// default) writes its last-seen time at its next check-in and wakes a
// tick; one silent for the threshold is judged, and a channel more than
// half silent holds everything (partial visibility, rfcs/0003 rule 6). At
// 100,000 hosts a rotation takes about a minute, so the trials there run
// between rotations. It is 15% of the offline threshold: 45 s of the
// default 5 min (benchOpts.offline raises both).
func heardAge(offline time.Duration) time.Duration {
	return cmp.Or(offline, reconciler.DefaultOfflineThreshold) * 3 / 20
}

// keepHeard has the hosts heard from more than heardAge ago check in.
func (cb *checkinBench) keepHeard(tb testing.TB) {
	tb.Helper()
	res := cb.load.run(tb, loadOp{Kind: "refresh", Age: cb.heardAge, Workers: driveWorkers})
	if res.Errors > 0 {
		tb.Fatalf("keeping the hosts heard: %d of %d check-ins failed, the first: %s", res.Errors, len(res.Latency), res.FirstError)
	}
	if cb.canary != nil && time.Since(cb.canary.last) > cb.heardAge {
		if err := cb.canary.step(context.Background()); err != nil {
			tb.Fatal(err)
		}
	}
}

// warmKept has every host that keeps its connection check in once, so
// that each has its connection open when a run starts, as an agent has:
// one long-polls back to back and is never idle for its client's 90 s
// (apiclient's IdleConnTimeout), but a host here may not have checked in
// since a run minutes ago, and the client closed its connection. Without
// this pass a run at 100,000 hosts measured thousands of hosts opening a
// connection at once, their SYNs past the listen backlog retried after 1
// and 3 s, and not check-ins.
func (cb *checkinBench) warmKept(tb testing.TB) {
	tb.Helper()
	res := cb.load.run(tb, loadOp{Kind: "closed", Count: cb.conns, Workers: driveWorkers, Kept: true})
	if res.Errors > 0 {
		tb.Fatalf("opening the kept connections: %d of %d check-ins failed, the first: %s", res.Errors, len(res.Latency), res.FirstError)
	}
}

// trialLimit bounds each wait of a benchmark's trial: a trial that hangs
// fails (checkinBench.limit; tests wait less).
const trialLimit = 10 * time.Minute

// trialResult is what one trial measured.
type trialResult struct {
	// push: from the webhook's POST until the canary, long-polling, had
	// its target in the new rollout.
	push time.Duration
	// status: from the canary's check-in with a failing probe until the
	// journal held the committed tick's Soaking → Failed for it (read
	// every journalPoll); began: until that tick began (the event's time).
	status, began time.Duration
	// sign is how long CI's part took (signing and committing the release).
	sign time.Duration
	// ahead: from the forge's webhook for CI's commit until the control
	// plane had verified the release ahead (rfcs/0006 §Channel source 8):
	// this machine's verification time, off push→dispatch.
	ahead time.Duration
}

// journalPoll is how often status→tick reads the store's watermark.
const journalPoll = 5 * time.Millisecond

// runTrials runs push-dispatch trials until count have run (the first call
// runs them; push-dispatch and status-tick share them).
func (cb *checkinBench) runTrials(tb testing.TB, count int) []trialResult {
	tb.Helper()
	if cb.canary == nil {
		tb.Fatal("trials need the canary fleet")
	}
	if path := os.Getenv("NIXFLEET_BENCH_CPUPROFILE"); path != "" && len(cb.trials) < count {
		// Where the trials' time goes: go tool pprof (the process's CPU
		// while the trials run, the control plane's and the canary's).
		f, err := os.Create(path)
		if err != nil {
			tb.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			tb.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	for len(cb.trials) < count {
		cb.trials = append(cb.trials, cb.trial(tb, len(cb.trials)+1))
	}
	return cb.trials[:count]
}

// trial pushes a release and measures push→dispatch and status→tick in
// the rollout it opens:
//
//  1. CI signs and commits release t<k> (new closures for every host; the
//     canary's wave soaks scaleSoakMinutes), in a process of its own
//     (benchci_test.go); the canary long-polls with
//     what it knows, and waits in the control plane.
//  2. The push moves the channel's ref, and the forge calls the webhook;
//     push→dispatch runs from there until the canary's long-poll answers
//     its target in the new rollout (rfcs/0003 rule 1: the channel's
//     latest rollout is Converged, or Halted with nobody activating, which
//     the new ref supersedes).
//  3. The canary confirms; a tick makes it Soaking.
//  4. The canary checks in with a failing probe. status→tick ends when the
//     journal holds the tick that made it Failed (rule 8); the same tick
//     halts the rollout (rule 9, halt), so the next push opens its rollout
//     at once. The deciding tick is known by its event, not as the next
//     tick to end: one already running when the check-in landed, which
//     read the canary's status before, decides nothing and is not taken;
//     one that read it after does decide (its began is then negative).
//  5. The canary's probe passes again, and the tick this status change
//     asks for runs before the next trial.
func (cb *checkinBench) trial(tb testing.TB, k int) trialResult {
	tb.Helper()
	ctx := context.Background()
	e, canary := cb.e, cb.canary
	var res trialResult
	cb.keepHeard(tb)

	// 1. CI signs and commits; the channel's ref moves with the push
	// (which the control plane's poll of git, every 5 s, must not see
	// first: signing takes seconds at 100,000 hosts).
	cb.release++
	id := rolloutID("stable", cb.release)
	e.spec.Channels["stable"] = []int{scaleSoakMinutes, 0}
	// signedAt has a resolution of a second, and a release not signed
	// after the channel's current one is refused as a replay: a trial
	// that follows the last within its second waits for the next.
	if next := cb.signed.Truncate(time.Second).Add(time.Second); time.Now().Before(next) {
		time.Sleep(time.Until(next))
	}
	began := time.Now()
	cb.signed = began
	var ci ciResult
	cb.ci.call(tb, ciRelease{Version: fmt.Sprintf("t%d", k), Release: cb.release, Now: began, Channels: e.spec.Channels}, &ci)
	if ci.Error != "" {
		tb.Fatalf("trial %d: CI: %s", k, ci.Error)
	}
	commit := plumbing.NewHash(ci.Commit)
	res.sign = time.Since(began)

	// CI pushed its branch and the forge calls the webhook: the control
	// plane verifies the release ahead of any promotion.
	verified := cb.scrape(tb)[verifiedAhead]
	t0 := time.Now()
	if err := cptest.Hook(e.url, e.cfg.WebhookSecret, e.cert.Pool); err != nil {
		tb.Fatal(err)
	}
	cb.pollMetrics(tb, "the release verified ahead of its push", func(m map[string]float64) bool { return m[verifiedAhead] > verified })
	res.ahead = time.Since(t0)

	type answer struct {
		at  time.Time
		t   *proto.Target
		err error
	}
	got := make(chan answer, 1)
	m0 := cb.scrape(tb)
	go func() {
		for {
			resp, err := canary.checkin(ctx, maxWait)
			if err != nil {
				got <- answer{err: err}
				return
			}
			if t := resp.Target; t != nil && t.Kind == proto.TargetDispatch && t.RolloutID == id {
				got <- answer{at: time.Now(), t: t}
				return
			}
		}
	}()
	cb.pollMetrics(tb, "the canary's long-poll reaches the control plane", func(m map[string]float64) bool {
		return m[checkinCount] > m0[checkinCount]
	})

	// 2. The push.
	mark := cb.watermark(tb).Events
	t0 = time.Now()
	if err := e.repo.Promote("stable", commit); err != nil {
		tb.Fatal(err)
	}
	if err := cptest.Hook(e.url, e.cfg.WebhookSecret, e.cert.Pool); err != nil {
		tb.Fatal(err)
	}
	var a answer
	select {
	case a = <-got:
	case <-time.After(cb.limit):
		tb.Fatalf("trial %d: the canary had no target in %s within %s of the push", k, id, cb.limit)
	}
	if a.err != nil {
		tb.Fatalf("trial %d: the canary's long-poll: %v", k, a.err)
	}
	res.push = a.at.Sub(t0)
	tb.Logf("trial %d: verified ahead in %s; pushed at %s, dispatched after %s", k, res.ahead.Round(time.Millisecond),
		t0.UTC().Format("15:04:05.000"), res.push.Round(time.Millisecond))

	// 3. The canary switches and soaks.
	if err := canary.confirm(ctx, a.t); err != nil {
		tb.Fatal(err)
	}
	mark = cb.awaitEvent(tb, id, mark, "the canary soaks in "+id, hostTo(canary.name, reconciler.HostSoaking)).ID

	// 4. A probe fails.
	mark = max(mark, cb.watermark(tb).Events)
	canary.failing = []string{"bench-probe"}
	t0 = time.Now()
	if _, err := canary.checkin(ctx, 0); err != nil {
		tb.Fatal(err)
	}
	failed, at := cb.pollJournal(tb, id, mark, hostTo(canary.name, reconciler.HostFailed))
	res.status, res.began = at.Sub(t0), failed.At.Sub(t0)
	cb.awaitEvent(tb, id, mark, id+" halts", func(ev proto.Event) bool {
		return ev.Kind == reconciler.EventRolloutTransition && ev.To == string(reconciler.RolloutHalted)
	})

	// 5. The probe passes again.
	ticks := cb.scrape(tb)[okTicks]
	canary.failing = nil
	if _, err := canary.checkin(ctx, 0); err != nil {
		tb.Fatal(err)
	}
	cb.awaitMetrics(tb, "the tick after the canary's probe passes", func(m map[string]float64) bool { return m[okTicks] > ticks })
	return res
}

// Samples of /metrics.
const (
	checkinCount  = "nixfleet_checkin_duration_seconds_count"
	okTicks       = `nixfleet_ticks_total{result="ok"}`
	verifiedAhead = `nixfleet_releases_verified_ahead_total{outcome="verified"}`
)

// checkinsAnswered counts the check-ins answered, every status.
func checkinsAnswered(m map[string]float64) int {
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, "nixfleet_http_requests_total{") && strings.Contains(k, `route="POST /v1/agent/checkin"`) {
			n += v
		}
	}
	return int(n)
}

// hostTo matches a host's transition to a state.
func hostTo(host string, to reconciler.HostState) func(proto.Event) bool {
	return func(ev proto.Event) bool {
		return ev.Kind == reconciler.EventHostTransition && ev.Host == host && ev.To == string(to)
	}
}

// awaitEvent waits for an event of a rollout after the id after that
// matches, reading the journal again each time the control plane ticks or
// sees new events.
func (cb *checkinBench) awaitEvent(tb testing.TB, id string, after int64, what string, match func(proto.Event) bool) proto.Event {
	tb.Helper()
	limit := time.NewTimer(cb.limit)
	defer limit.Stop()
	for {
		changed := cb.e.changed()
		ev, ok, next := cb.findEvent(tb, id, after, match)
		if ok {
			return ev
		}
		after = next
		select {
		case <-changed:
		case <-limit.C:
			tb.Fatalf("%s: not within %s", what, cb.limit)
		}
	}
}

// pollJournal waits for an event of a rollout after the id after that
// matches, reading the store's watermark every journalPoll, and returns
// it and when it was seen: soon after its tick committed.
func (cb *checkinBench) pollJournal(tb testing.TB, id string, after int64, match func(proto.Event) bool) (proto.Event, time.Time) {
	tb.Helper()
	limit := time.Now().Add(cb.limit)
	poll := time.NewTicker(journalPoll)
	defer poll.Stop()
	for {
		if w := cb.watermark(tb); w.Events > after {
			at := time.Now()
			ev, ok, next := cb.findEvent(tb, id, after, match)
			if ok {
				return ev, at
			}
			after = next
		}
		if time.Now().After(limit) {
			tb.Fatalf("no matching event of %s within %s", id, cb.limit)
		}
		<-poll.C
	}
}

// findEvent looks for a matching event of a rollout after the id after,
// and returns the id to look after next time.
func (cb *checkinBench) findEvent(tb testing.TB, id string, after int64, match func(proto.Event) bool) (proto.Event, bool, int64) {
	tb.Helper()
	for {
		evs, err := cb.st.Events(context.Background(), proto.EventQuery{RolloutID: id, AfterID: after, Limit: store.MaxEventLimit})
		if err != nil {
			tb.Fatal(err)
		}
		for _, ev := range evs {
			if match(ev) {
				return ev, true, ev.ID
			}
		}
		if len(evs) < store.MaxEventLimit {
			if len(evs) > 0 {
				after = evs[len(evs)-1].ID
			}
			return proto.Event{}, false, after
		}
		after = evs[len(evs)-1].ID
	}
}

// awaitMetrics waits until the control plane's metrics satisfy cond,
// reading them again each time it ticks or sees new events.
func (cb *checkinBench) awaitMetrics(tb testing.TB, what string, cond func(map[string]float64) bool) {
	tb.Helper()
	limit := time.NewTimer(cb.limit)
	defer limit.Stop()
	for {
		changed := cb.e.changed()
		if cond(cb.scrape(tb)) {
			return
		}
		select {
		case <-changed:
		case <-limit.C:
			tb.Fatalf("%s: not within %s", what, cb.limit)
		}
	}
}

// pollMetrics waits until the control plane's metrics satisfy cond, for
// what no signal announces (a request that came in), reading them every
// 2 ms for at most 45 s.
func (cb *checkinBench) pollMetrics(tb testing.TB, what string, cond func(map[string]float64) bool) map[string]float64 {
	tb.Helper()
	return cb.pollMetricsFor(tb, 45*time.Second, what, cond)
}

// pollMetricsFor is pollMetrics with its limit.
func (cb *checkinBench) pollMetricsFor(tb testing.TB, limit time.Duration, what string, cond func(map[string]float64) bool) map[string]float64 {
	tb.Helper()
	poll := time.NewTicker(2 * time.Millisecond)
	defer poll.Stop()
	began := time.Now()
	for {
		m := cb.scrape(tb)
		if cond(m) {
			return m
		}
		if time.Since(began) > limit {
			tb.Fatalf("%s: not within %s", what, limit)
		}
		<-poll.C
	}
}

// trialFigures reports p50, p99 and max of some durations and logs them
// with the mean (once: without -benchtime 1x, a sub-benchmark that
// reports trials already run is run again with larger b.N).
func trialFigures(b *testing.B, what string, ds []time.Duration) {
	ms := make([]int64, len(ds))
	var sum time.Duration
	for i, d := range ds {
		ms[i], sum = d.Microseconds(), sum+d
	}
	slices.Sort(ms)
	f := func(us int64) float64 { return float64(us) / 1000 }
	b.ReportMetric(f(percentile(ms, 50)), "p50_ms")
	b.ReportMetric(f(percentile(ms, 99)), "p99_ms")
	b.ReportMetric(f(percentile(ms, 100)), "max_ms")
	if b.N > 1 {
		return // run again for -benchtime: logged the first time
	}
	b.Logf("%s, %d trials: p50 %.1f ms, p99 %.1f ms, min %.1f ms, max %.1f ms, mean %.1f ms", what, len(ds),
		f(percentile(ms, 50)), f(percentile(ms, 99)), f(percentile(ms, 0)), f(percentile(ms, 100)),
		float64(sum.Microseconds())/float64(max(len(ds), 1))/1000)
}

// memSample is this process's memory (the control plane's, and the
// harness's): the Go heap and stacks in use after a collection that also
// gave freed memory back to the system, resident memory, goroutines.
type memSample struct {
	heapStack, rss int64
	goroutines     int
}

func sampleMemory() memSample {
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{heapStack: int64(ms.HeapInuse + ms.StackInuse), rss: residentBytes(), goroutines: runtime.NumGoroutine()}
}

// sampleMemory is the control plane's memory: this process's
// (sampleMemory), or, in its own process, as its metrics and
// /proc/PID/status say, not collected first.
func (e *env) sampleMemory(tb testing.TB) memSample {
	tb.Helper()
	if e.proc == nil {
		return sampleMemory()
	}
	m := e.metrics()
	return memSample{heapStack: int64(m["go_memstats_heap_inuse_bytes"] + m["go_memstats_stack_inuse_bytes"]),
		rss: e.cpResident(), goroutines: int(m["go_goroutines"])}
}

// longPolls is what measureLongPolls found.
type longPolls struct {
	held, waiting int
	before, after memSample
	// seen is this process's VmRSS once every one has waited settle, as
	// it is: what someone sizing a machine reads from outside
	// (sampleMemory collects and returns the free memory to the system
	// first); peak the same once all wait, before the replica gave back
	// what their burst left; trimmed whether it did (memory.go).
	seen, peak int64
	trimmed    bool
	// answered is how many long-polls ended with an answer (not cancelled).
	answered int
}

// perConn is the memory that each waiting long-poll added, in KiB: heap
// and stacks, and resident.
func (lp longPolls) perConn() (mem, rss float64) {
	if lp.waiting == 0 {
		return 0, 0
	}
	n := float64(lp.waiting) * 1024
	return float64(lp.after.heapStack-lp.before.heapStack) / n, float64(lp.after.rss-lp.before.rss) / n
}

// settle is how long the long-polls wait at least before the memory is
// read: a steady state, well inside their wait (maxWait); quiet how long
// at most, for the replica to give back what their burst left.
const (
	settle = 40 * time.Second
	quiet  = 50 * time.Second
)

// measureLongPolls puts every host on a kept connection into a long-poll
// at once (wait 60 s, with the target it knows), samples this process's
// memory before and once every one waits in the control plane (check-ins
// counted by the handler's histogram, which observes before the wait, and
// not yet answered), and releases them: by waiting for their answers, or,
// with cancel, by ending them (which closes their connections).
func (cb *checkinBench) measureLongPolls(tb testing.TB, cancel bool) longPolls {
	tb.Helper()
	cb.keepHeard(tb)
	// Measured from no connection at all: an idle kept connection holds
	// more than a parked long-poll (net/http's goroutine and buffers).
	g := cb.e.goroutines(tb)
	cb.load.run(tb, loadOp{Kind: "close"})
	cb.e.awaitGoroutines(tb, g-cb.conns*9/10)
	var lp longPolls
	lp.before = cb.e.sampleMemory(tb)
	// Every long-poll must be waiting before the first one's wait runs
	// out: connections opened by the hold itself would all come at once,
	// past the listen backlog.
	cb.warmKept(tb)
	m0 := cb.scrape(tb)
	waiting := func(m map[string]float64) int {
		return int(m[checkinCount]-m0[checkinCount]) - (checkinsAnswered(m) - checkinsAnswered(m0))
	}
	lp.held = cb.load.run(tb, loadOp{Kind: "hold", Wait: int(maxWait / time.Second)}).Held
	cb.pollMetrics(tb, fmt.Sprintf("%d long-polls wait", lp.held), func(m map[string]float64) bool { return waiting(m) >= lp.held })
	// Settled: the agents wait, nothing else happens, and the runtime
	// has had time to return what earlier work freed (its scavenger).
	// Settled: the agents wait, nothing else happens, and the replica has
	// had time to give back what the burst of their check-ins left
	// (memory.go): at least settle, and up to quiet for its trimmer to
	// act once (it acts 10–20 s after the last collection the burst
	// caused). peak is what is resident before that.
	lp.peak = cb.e.cpResident()
	trims := func() float64 { return cb.scrape(tb)["nixfleet_memory_trims_total"] }
	t0, waited := trims(), time.Now()
	time.Sleep(settle)
	for trims() == t0 && time.Since(waited) < quiet {
		time.Sleep(time.Second)
	}
	lp.trimmed = trims() > t0
	lp.seen = cb.e.cpResident()
	lp.after = cb.e.sampleMemory(tb)
	if path := os.Getenv("NIXFLEET_BENCH_HEAPPROFILE"); path != "" {
		// What the memory is, while they wait: go tool pprof -sample_index=inuse_space.
		writeHeapProfile(tb, path)
	}
	lp.waiting = waiting(cb.scrape(tb))
	res := cb.load.run(tb, loadOp{Kind: "release", Cancel: cancel})
	if res.Errors > 0 {
		tb.Fatalf("%d of %d long-polls failed, the first: %s", res.Errors, lp.held, res.FirstError)
	}
	for _, us := range res.Latency {
		if time.Duration(us)*time.Microsecond >= maxWait {
			lp.answered++
		}
	}
	return lp
}

// awaitGoroutines waits, for up to 10 s, until the control plane runs at
// most n goroutines: the server's ends of the connections its clients
// closed are gone. Other tests may run beside it, so it never fails.
func (e *env) awaitGoroutines(tb testing.TB, n int) {
	tb.Helper()
	for deadline := time.Now().Add(10 * time.Second); e.goroutines(tb) > n && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
}

// goroutines is how many goroutines the control plane runs: this
// process's, or its own process's as its metrics say.
func (e *env) goroutines(tb testing.TB) int {
	tb.Helper()
	if e.proc == nil {
		return runtime.NumGoroutine()
	}
	return int(e.metrics()["go_goroutines"])
}

// writeHeapProfile writes this process's heap profile to path.
func writeHeapProfile(tb testing.TB, path string) {
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		tb.Fatal(err)
	}
}
