// Benchmarks of the control plane with its hosts (issue 18), and how to
// run them.
//
// BenchmarkScale starts a control plane in this process, on PostgreSQL
// (NIXFLEET_TEST_PG) with production settings (real clock, a tick every
// 30 s, a trigger ticking at once or after a 100 ms window, git polled
// every 5 s; no rate limits, since every simulated host comes from one
// address), serving
// HTTPS with client certificates, and a load process (benchhelp_test.go)
// that simulates the hosts, each with its own key and API client. Its
// environment:
//
//	NIXFLEET_BENCH_HOSTS   fleet sizes, comma-separated (default 10000);
//	                       each size is a sub-benchmark hosts=N with a
//	                       control plane and database of its own
//	NIXFLEET_BENCH_CONNS   how many hosts keep a TLS connection open
//	                       (default 19000, at most the fleet); the others
//	                       open one per request (a handshake each). The
//	                       benchmark machine allows 20,000 open files a
//	                       process, and one client address ~28,000 ports
//	                       towards one server port
//	NIXFLEET_BENCH_TRIALS  push-dispatch trials (default 20)
//	NIXFLEET_BENCH_CLOSED  the closed runs' worker counts (default 16,64;
//	                       none: skip them)
//	NIXFLEET_BENCH_OFFLINE the control plane's offline threshold and
//	                       confirm window (default 5m). Raise them when the hosts on short
//	                       connections cannot all check in within half of
//	                       it on the machine (at 100,000 hosts here:
//	                       NIXFLEET_BENCH_OFFLINE=40m): a host silent for
//	                       the threshold is judged, and a half-silent
//	                       channel holds everything. Before each run the
//	                       hosts heard from longer than 15% of it ago check
//	                       in (heardAge)
//	NIXFLEET_BENCH_RUNPROFILE  a path: CPU profiles of this process during
//	                       each closed and open run, at <path>-<run>
//	NIXFLEET_BENCH_CPUPROFILE  a path: a CPU profile of this process while
//	                       the push-dispatch trials run
//	NIXFLEET_BENCH_CPLOG   a path: the control plane's log, kept there
//	                       (each trial's verify, store and tick times)
//
// The sizes of issue 18, one after the other, each run once (record
// figures on a PostgreSQL with fsync on; the throwaway ones of .ci/pg and
// /tmp/devenv.sh have it off):
//
//	NIXFLEET_TEST_PG=postgres://… NIXFLEET_BENCH_HOSTS=10000,30000,100000 NIXFLEET_BENCH_CONNS=19000 \
//	  go test ./controlplane -run '^$' -bench Scale -benchtime 1x -timeout 4h
//
// One figure: -bench 'Scale/hosts=100000/push-dispatch' (setup runs
// anyway). A check of the machinery, a few minutes:
// NIXFLEET_BENCH_HOSTS=500 NIXFLEET_BENCH_CONNS=300 … -bench Scale
// -benchtime 1x. TestScaleLoad runs it on 200 hosts in CI.
//
// The fleet is one channel, stable: wave 0 is the canary, host-00000,
// simulated in this process as its agent behaves; wave 1 is every other
// host; a health failure halts. Setup signs it, starts both processes and
// onboards every host. The sub-benchmarks of hosts=N, in order:
//
//   - onboard: the setup's figures. sign_s: signing the first release and
//     starting the control plane; onboard_s: every host's first check-in,
//     catch-up dispatch, confirm and soak (the canary's wave, then the
//     rest), until all converged; onboard_ticks, onboard_tick_ms: the ticks
//     meanwhile and their mean duration; rss_before_MiB, rss_after_MiB:
//     this process's resident memory before the hosts connected and after
//     onboarding, and rss_KiB_per_host the difference over the fleet.
//   - closed-16, closed-64: W hosts check in back to back, one rotation of
//     the fleet (every host once): checkins/s; p50_ms, p99_ms, p99.9_ms
//     from each one's start; srv_us, the mean time in the check-in
//     handler (TLS and HTTP excluded); ticks, tick_ms: the ticks that fell
//     in the run and their mean duration (the log has each one's); when
//     some hosts have no kept connection, kept_p99_ms and short_p99_ms
//     split p99_ms between the two kinds (the log has their p50 and
//     p99.9): a check-in over a connection of its own pays a TLS
//     handshake, whose CPU both ends spend on this one machine.
//   - open-2000: check-ins start at 2,000 a second for 30 s, whatever the
//     answers take, with the periodic tick running (open-2000-kept: the
//     same over the hosts on kept connections only, when some have none:
//     what a fleet whose agents all keep their connection sees); p50_ms, p99_ms,
//     p99.9_ms from when each was due (so a server that falls behind shows
//     in them; each host's check-ins run one after the other, so below
//     ~10,000 hosts a host that falls behind also delays its own next),
//     and the same others.
//   - tick-idle: a tick that changes nothing, nobody checking in: tick_ms
//     (the assignments' reload included).
//   - memory: every host on a kept connection long-polls at once (wait
//     60 s, with the target it knows, as agents do); this process's Go
//     heap and stacks in use (after a collection) and its VmRSS, with all
//     of them waiting in the control plane, less before, over the waiting
//     long-polls: mem_KiB_per_conn and rss_KiB_per_conn, what a host costs
//     while it waits over what its idle kept connection costs (negative:
//     a parked long-poll holds less than an idle connection, park.go);
//     host_mem_KiB and host_rss_KiB, the same with everyone waiting less
//     before the hosts connected, over the fleet: all a host costs, its
//     state and its connection (with every host on a kept connection,
//     what a connected host costs); seen_rss_KiB_per_conn, the whole
//     process's VmRSS as it is (not collected first: what someone sizing
//     a machine reads from outside, once the replica gave back what the
//     long-polls' burst left) over the waiting long-polls;
//     peak_rss_KiB_per_conn, the same before it did; waiting. Their 60 s
//     run out after. Run without GOGC, as nixfleet-cp runs by default.
//   - push-dispatch: NIXFLEET_BENCH_TRIALS trials (checkinBench.trial,
//     benchscale_test.go). In each, CI signs and commits a release with
//     new closures for every host to its branch, in a third process
//     (benchci_test.go: CI's garbage is not the control plane's to
//     collect, as in production), and the forge calls the webhook: the
//     control plane verifies the release ahead (verify_p50_ms, and each
//     trial's in the log: this machine's verification time); then the
//     push: the channel's ref moves to that commit and the forge calls
//     the webhook. p50_ms, p99_ms, max_ms from the push until the
//     canary's long-poll answers its dispatch (the poll of git, the
//     rechecks of the kept verdicts, the debounce, the tick that opens
//     the rollout and dispatches, the wake-up).
//   - status-tick: in the same trials, once the canary confirmed and
//     soaks: from its check-in with a failing probe until the store's
//     journal holds the committed tick that failed it (read every 5 ms;
//     the rest of the debounce window included, when a tick had just
//     started): p50_ms, p99_ms, max_ms. The deciding tick is known by its
//     event (the log counts those that were already running when the
//     check-in was sent). That tick halts the rollout; the next trial's
//     release supersedes it.
//
// Check-in runs fail if they wrote anything a tick must see (the store's
// watermark moved). Before each sub-benchmark and trial, the hosts heard
// from more than 45 s ago check in, unmeasured (heardAge): a fleet checks
// in all the time. Ticks without the HTTP side, at the same sizes: the
// store's tick benchmark (controlplane/store/bench_test.go).
//
// BenchmarkCheckin10k is the earlier check-in benchmark, one wave of
// 10,000 hosts all on kept connections, kept as it was for comparison with
// its published figures:
//
//	go test ./controlplane -run '^$' -bench Checkin10k -benchtime 2x -timeout 40m

package controlplane_test

import (
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/reconciler"
)

// BenchmarkCheckin10k measures check-ins as a fleet of 10,000 hosts makes
// them: a control plane on PostgreSQL (NIXFLEET_TEST_PG) with its
// production settings, serving HTTPS with client certificates, and 10,000
// simulated hosts in a load process (benchhelp_test.go), each with its own
// key, API client and keep-alive TLS connection over loopback. Setup signs
// the fleet, starts both and onboards every host (first check-in, catch-up
// dispatch, confirm) until all converged, so what follows is the steady
// state: check-ins that change nothing (wait=0, the status the host
// reported before).
//
//   - closed-W: W hosts check in back to back, one rotation (every host
//     once) an op: the most the machine serves, and the latency at that
//     concurrency;
//   - open-R: check-ins start at R a second whatever the answers take,
//     for 30 s an op (the default tick interval, so one periodic tick
//     falls in each); latencies count from when a check-in was due;
//   - tick-idle: a tick of the 10,000-host rollout that changes nothing,
//     nobody checking in (ns/op includes reloading the assignments); its
//     log has the onboarding's figures (ticks under churn).
//
// Every op fails the benchmark if it wrote anything a tick must see.
// Metrics: checkins/s, p50_ms, p99_ms, p99.9_ms (client side), srv_us
// (mean time in the check-in handler, TLS and HTTP excluded), tick_ms
// (mean store tick). BenchmarkScale measures the same and more, at any
// size; this one stays as it was, for comparison with its published
// figures.
func BenchmarkCheckin10k(b *testing.B) {
	cb := newCheckinBench(b, 10000)
	for _, w := range []int{16, 64} {
		b.Run(fmt.Sprintf("closed-%d", w), func(b *testing.B) {
			cb.benchRun(b, loadOp{Kind: "closed", Count: cb.n, Workers: w})
		})
	}
	for _, r := range []int{2000, 3000} {
		b.Run(fmt.Sprintf("open-%d", r), func(b *testing.B) {
			cb.benchRun(b, loadOp{Kind: "open", Count: 30 * r, Rate: float64(r)})
		})
	}
	b.Run("tick-idle", func(b *testing.B) {
		cb.benchTick(b)
		b.ReportMetric(cb.onboardTick.meanMS(), "onboard_tick_ms")
		b.ReportMetric(float64(cb.onboardTick.count), "onboard_ticks")
		b.ReportMetric(cb.onboard.Seconds(), "onboard_s")
		cb.logSetup(b)
	})
}

// BenchmarkScale measures the control plane at NIXFLEET_BENCH_HOSTS hosts
// (see the top of this file): onboarding, check-ins closed and open loop,
// an idle tick, the memory of long-polls, push→dispatch and status→tick.
func BenchmarkScale(b *testing.B) {
	sizes := benchEnv(b, "NIXFLEET_BENCH_HOSTS", 10000)
	conns := benchEnv(b, "NIXFLEET_BENCH_CONNS", 19000)[0]
	trials := benchEnv(b, "NIXFLEET_BENCH_TRIALS", 20)[0]
	closed := []int{16, 64}
	switch os.Getenv("NIXFLEET_BENCH_CLOSED") {
	case "":
	case "none":
		closed = nil
	default:
		closed = benchEnv(b, "NIXFLEET_BENCH_CLOSED", 0)
	}
	var offline time.Duration
	if v := os.Getenv("NIXFLEET_BENCH_OFFLINE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute {
			b.Fatalf("NIXFLEET_BENCH_OFFLINE=%q: want a duration of a minute or more", v)
		}
		offline = d
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			if n < 2 {
				b.Fatalf("a fleet of %d hosts: the canary and at least one more", n)
			}
			cb := newBench(b, benchOpts{hosts: n, conns: min(conns, n-1), canary: true, offline: offline})
			b.Run("onboard", cb.benchOnboard)
			for _, w := range closed {
				b.Run(fmt.Sprintf("closed-%d", w), func(b *testing.B) {
					cb.keepHeard(b)
					cb.benchRun(b, loadOp{Kind: "closed", Count: cb.loadHosts(), Workers: w})
				})
			}
			b.Run("open-2000", func(b *testing.B) {
				cb.keepHeard(b)
				cb.warmKept(b)
				cb.benchRun(b, loadOp{Kind: "open", Count: 30 * 2000, Rate: 2000})
			})
			if cb.conns < cb.loadHosts() {
				b.Run("open-2000-kept", func(b *testing.B) {
					cb.keepHeard(b)
					cb.warmKept(b)
					cb.benchRun(b, loadOp{Kind: "open", Count: 30 * 2000, Rate: 2000, Kept: true})
				})
			}
			b.Run("tick-idle", func(b *testing.B) {
				cb.keepHeard(b)
				cb.benchTick(b)
			})
			b.Run("memory", cb.benchMemory)
			b.Run("push-dispatch", func(b *testing.B) {
				tr := cb.runTrials(b, trials)
				d, ahead := make([]time.Duration, len(tr)), make([]time.Duration, len(tr))
				var sign time.Duration
				for i, t := range tr {
					d[i], ahead[i], sign = t.push, t.ahead, sign+t.sign
				}
				trialFigures(b, "push→dispatch", d)
				if b.N == 1 {
					slices.Sort(ahead)
					b.Logf("verification ahead of each push (webhook to verified): p50 %s, max %s",
						ahead[len(ahead)/2].Round(time.Millisecond), ahead[len(ahead)-1].Round(time.Millisecond))
					b.ReportMetric(float64(ahead[len(ahead)/2].Microseconds())/1000, "verify_p50_ms")
				}
				if b.N == 1 {
					b.Logf("CI's part before each push (signing, committing): %.1f ms on average", float64(sign.Microseconds())/float64(len(tr))/1000)
				}
			})
			b.Run("status-tick", func(b *testing.B) {
				tr := cb.runTrials(b, trials)
				d, began := make([]time.Duration, len(tr)), make([]time.Duration, len(tr))
				for i, t := range tr {
					d[i], began[i] = t.status, t.began
				}
				trialFigures(b, "status→tick (committed, seen in the journal)", d)
				if b.N == 1 {
					slices.Sort(began)
					running := 0
					for _, d := range began {
						if d <= 0 {
							running++
						}
					}
					// A tick that began before the check-in was sent and
					// read the status after it was written decides it too.
					b.Logf("status→tick began (the deciding tick's time): p50 %s, max %s; %d of %d decided by a tick already running when the check-in was sent",
						began[len(began)/2].Round(time.Millisecond), began[len(began)-1].Round(time.Millisecond), running, len(began))
				}
			})
		})
	}
}

// benchEnv reads a comma-separated list of positive integers from an
// environment variable, def when it is unset.
func benchEnv(b *testing.B, name string, def int) []int {
	v := os.Getenv(name)
	if v == "" {
		return []int{def}
	}
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want positive integers, comma-separated", name, v)
		}
		out = append(out, n)
	}
	return out
}

// benchOnboard reports the setup's figures.
func (cb *checkinBench) benchOnboard(b *testing.B) {
	b.ReportMetric(cb.sign.Seconds(), "sign_s")
	b.ReportMetric(cb.onboard.Seconds(), "onboard_s")
	b.ReportMetric(float64(cb.onboardTick.count), "onboard_ticks")
	b.ReportMetric(cb.onboardTick.meanMS(), "onboard_tick_ms")
	b.ReportMetric(float64(cb.rssBefore>>20), "rss_before_MiB")
	b.ReportMetric(float64(cb.rssAfter>>20), "rss_after_MiB")
	b.ReportMetric(float64(cb.rssAfter-cb.rssBefore)/1024/float64(cb.n), "rss_KiB_per_host")
	if b.N == 1 {
		cb.logSetup(b)
	}
}

// benchMemory measures what the control plane holds for each waiting
// long-poll (measureLongPolls), and lets their wait run out.
func (cb *checkinBench) benchMemory(b *testing.B) {
	lp := cb.measureLongPolls(b, false)
	mem, rss := lp.perConn()
	b.ReportMetric(mem, "mem_KiB_per_conn")
	b.ReportMetric(rss, "rss_KiB_per_conn")
	b.ReportMetric(float64(lp.waiting), "waiting")
	// Everything the hosts cost the process, their state and their
	// connections, with every kept connection in a long-poll.
	b.ReportMetric(float64(lp.after.heapStack-cb.before.heapStack)/1024/float64(cb.n), "host_mem_KiB")
	b.ReportMetric(float64(lp.after.rss-cb.before.rss)/1024/float64(cb.n), "host_rss_KiB")
	// As seen from outside: the whole process's VmRSS, not collected
	// first, over the hosts connected (rfcs/0006 §Check-ins at scale).
	b.ReportMetric(float64(lp.seen)/1024/float64(max(lp.waiting, 1)), "seen_rss_KiB_per_conn")
	b.ReportMetric(float64(lp.peak)/1024/float64(max(lp.waiting, 1)), "peak_rss_KiB_per_conn")
	if !lp.trimmed {
		b.Logf("the control plane gave back nothing within %s of the long-polls' burst: seen_rss_KiB_per_conn is what it kept of the burst", quiet)
	}
	b.Logf("%d long-polls waiting (%d held): Go heap and stacks %d MiB, then %d MiB; resident %d MiB, then %d MiB (%d MiB before it was collected); goroutines %d, then %d (%.2f a long-poll); %d answered when their %s ran out",
		lp.waiting, lp.held, lp.before.heapStack>>20, lp.after.heapStack>>20, lp.before.rss>>20, lp.after.rss>>20, lp.seen>>20,
		lp.before.goroutines, lp.after.goroutines, float64(lp.after.goroutines-lp.before.goroutines)/float64(max(lp.waiting, 1)),
		lp.answered, maxWait)
}

// benchRun runs op per b.Loop and reports what the check-ins measured.
func (cb *checkinBench) benchRun(b *testing.B, op loadOp) {
	w0, m0 := cb.watermark(b), cb.scrape(b)
	stopTicks := cb.watchTicks()
	var lat, sent, kept, short []int64
	var elapsed time.Duration
	if path := os.Getenv("NIXFLEET_BENCH_RUNPROFILE"); path != "" {
		f, err := os.Create(path + "-" + strings.ReplaceAll(b.Name(), "/", "_"))
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	for b.Loop() {
		res := cb.load.run(b, op)
		if res.Errors > 0 {
			b.Fatalf("%d of %d check-ins failed, the first: %s", res.Errors, op.Count, res.FirstError)
		}
		lat, sent, elapsed = append(lat, res.Latency...), append(sent, res.Sent...), elapsed+res.Elapsed
		for j, us := range res.Latency {
			if j < len(res.Short) && res.Short[j] == 's' {
				short = append(short, us)
			} else {
				kept = append(kept, us)
			}
		}
	}
	b.StopTimer()
	ticks := stopTicks()
	m1 := cb.scrape(b)
	if w := cb.watermark(b); !sameWrites(w, w0) {
		b.Fatalf("steady-state check-ins wrote to the store: watermark %+v, then %+v", w0, w)
	}
	slices.Sort(lat)
	slices.Sort(sent)
	ms := func(us int64) float64 { return float64(us) / 1000 }
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "checkins/s")
	b.ReportMetric(ms(percentile(lat, 50)), "p50_ms")
	b.ReportMetric(ms(percentile(lat, 99)), "p99_ms")
	b.ReportMetric(ms(percentile(lat, 99.9)), "p99.9_ms")
	const h = "nixfleet_checkin_duration_seconds"
	if n := m1[h+"_count"] - m0[h+"_count"]; n > 0 {
		b.ReportMetric((m1[h+"_sum"]-m0[h+"_sum"])/n*1e6, "srv_us")
	}
	td := tickDelta(m0, m1)
	b.ReportMetric(float64(td.count), "ticks")
	if td.count > 0 {
		b.ReportMetric(td.meanMS(), "tick_ms")
	}
	b.Logf("%d check-ins: p90 %.1f ms, p99.9 %.1f ms, max %.1f ms; %d tick(s), those that ended within the run: %v",
		len(lat), ms(percentile(lat, 90)), ms(percentile(lat, 99.9)), ms(percentile(lat, 100)), td.count, roundAll(ticks, time.Millisecond))
	if len(sent) > 0 {
		b.Logf("from when each was sent instead of due: p50 %.1f ms, p99 %.1f ms", ms(percentile(sent, 50)), ms(percentile(sent, 99)))
	}
	if len(kept) > 0 && len(short) > 0 {
		// A host without a kept connection pays a TLS handshake (both
		// ends' CPU, on this machine) with every check-in.
		slices.Sort(kept)
		slices.Sort(short)
		b.ReportMetric(ms(percentile(kept, 99)), "kept_p99_ms")
		b.ReportMetric(ms(percentile(short, 99)), "short_p99_ms")
		b.Logf("%d check-ins over kept connections: p50 %.1f ms, p99 %.1f ms, p99.9 %.1f ms; %d over a connection each: p50 %.1f ms, p99 %.1f ms, p99.9 %.1f ms",
			len(kept), ms(percentile(kept, 50)), ms(percentile(kept, 99)), ms(percentile(kept, 99.9)),
			len(short), ms(percentile(short, 50)), ms(percentile(short, 99)), ms(percentile(short, 99.9)))
	}
}

// roundAll rounds durations, for logs.
func roundAll(ds []time.Duration, m time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(m)
	}
	return out
}

// benchTick times ticks that change nothing, with nobody checking in (a
// periodic tick may fall in among them).
func (cb *checkinBench) benchTick(b *testing.B) {
	m0 := cb.scrape(b)
	for b.Loop() {
		cb.tickNow(b)
	}
	b.StopTimer()
	td := tickDelta(m0, cb.scrape(b))
	if td.count < b.N {
		b.Fatalf("%d ticks ran for %d asked: does the control plane lead?", td.count, b.N)
	}
	b.ReportMetric(td.meanMS(), "tick_ms")
}

// TestCheckinLoad runs the benchmark's machinery on 50 hosts: the fleet,
// the load process and its connections, onboarding, closed and open runs.
func TestCheckinLoad(t *testing.T) {
	t.Parallel()
	cb := newCheckinBench(t, 50)
	w0 := cb.watermark(t)
	for _, op := range []loadOp{{Kind: "closed", Count: 120, Workers: 8}, {Kind: "open", Count: 60, Rate: 200}} {
		res := cb.load.run(t, op)
		if res.Errors > 0 {
			t.Fatalf("%s: %d check-ins failed, the first: %s", op.Kind, res.Errors, res.FirstError)
		}
		if i := slices.IndexFunc(res.Latency, func(us int64) bool { return us <= 0 }); i >= 0 {
			t.Errorf("%s: check-in %d has latency %d µs", op.Kind, i, res.Latency[i])
		}
		if op.Kind == "open" {
			if min := time.Duration(float64(op.Count-1) / op.Rate * float64(time.Second)); res.Elapsed < min {
				t.Errorf("open run of %d at %v/s took %s, less than its schedule's %s", op.Count, op.Rate, res.Elapsed, min)
			}
			if len(res.Sent) != op.Count {
				t.Errorf("open run: %d send latencies for %d check-ins", len(res.Sent), op.Count)
			}
		}
		if res.FDs < cb.n {
			t.Errorf("%s: the load process has %d open files, fewer than one connection for each of %d hosts", op.Kind, res.FDs, cb.n)
		}
	}
	if w := cb.watermark(t); !sameWrites(w, w0) {
		t.Errorf("steady-state check-ins wrote to the store: watermark %+v, then %+v", w0, w)
	}
	if c := cb.counts(t); c[reconciler.HostConverged] != cb.n {
		t.Errorf("hosts by state after the runs: %v", c)
	}
}

// TestScaleLoad runs BenchmarkScale's machinery on 200 hosts, 150 of them
// on kept connections and the others on one connection per request: the
// canary fleet's onboarding, closed and open runs, every kept connection
// in a long-poll at once (ended by cancelling them), and three
// push-dispatch trials with their status→tick. It checks what happens,
// never how fast.
func TestScaleLoad(t *testing.T) {
	t.Parallel()
	const n, conns = 200, 150
	cb := newBench(t, benchOpts{hosts: n, conns: conns, canary: true})
	cb.limit = 2 * time.Minute
	short := cb.loadHosts() - conns
	w0 := cb.watermark(t)
	for _, op := range []loadOp{{Kind: "closed", Count: 2 * cb.loadHosts(), Workers: 8}, {Kind: "open", Count: 200, Rate: 400},
		{Kind: "open", Count: 2 * conns, Rate: 400, Kept: true}} {
		res := cb.load.run(t, op)
		if res.Errors > 0 {
			t.Fatalf("%s: %d check-ins failed, the first: %s", op.Kind, res.Errors, res.FirstError)
		}
		if kept, short := strings.Count(res.Short, "k"), strings.Count(res.Short, "s"); op.Kept && (kept != op.Count || short != 0) {
			t.Errorf("a run over the kept connections: %d check-ins over kept connections, %d over one each; want %d and none", kept, short, op.Count)
		} else if !op.Kept && short == 0 {
			t.Errorf("%s: no check-in over a connection of its own", op.Kind)
		}
		// One descriptor for each kept connection, none left for the
		// hosts that open one per request.
		if res.FDs < conns || res.FDs >= conns+short {
			t.Errorf("%s: the load process has %d open files: want one for each of %d kept connections, and none for %d hosts without",
				op.Kind, res.FDs, conns, short)
		}
	}
	if w := cb.watermark(t); !sameWrites(w, w0) {
		t.Errorf("steady-state check-ins wrote to the store: watermark %+v, then %+v", w0, w)
	}

	lp := cb.measureLongPolls(t, true)
	if lp.held != conns || lp.waiting != conns {
		t.Errorf("%d long-polls held, %d seen waiting at once; want %d, one for each kept connection", lp.held, lp.waiting, conns)
	}
	if lp.answered != 0 {
		t.Errorf("%d long-polls answered before they were cancelled", lp.answered)
	}
	if res := cb.load.run(t, loadOp{Kind: "closed", Count: cb.loadHosts(), Workers: 8}); res.Errors > 0 {
		t.Fatalf("after the long-polls: %d check-ins failed, the first: %s", res.Errors, res.FirstError)
	}

	trials := cb.runTrials(t, 3)
	for i, tr := range trials {
		t.Logf("trial %d: push→dispatch %s, status→tick %s (its tick began after %s)", i+1, tr.push, tr.status, tr.began)
		if tr.push <= 0 || tr.status <= 0 {
			t.Errorf("trial %d: push→dispatch %s, status→tick %s", i+1, tr.push, tr.status)
		}
	}
	// Each trial's release was verified ahead, and its push judged from
	// the kept verdicts (rfcs/0006 §Channel source 8).
	if m := cb.scrape(t); m[verifiedAhead] < 3 || m[`nixfleet_release_verification_seconds_count{how="kept"}`] < 3 {
		t.Errorf("over 3 trials: %v releases verified ahead, %v pushes judged from kept verdicts; want 3 of each",
			m[verifiedAhead], m[`nixfleet_release_verification_seconds_count{how="kept"}`])
	}
	if again := cb.runTrials(t, 2); len(again) != 2 || again[0] != trials[0] {
		t.Errorf("runTrials ran trials again: %+v, then %+v", trials, again)
	}
	id := rolloutID("stable", cb.release)
	if got := rolloutState(t, cb.e, id); got != reconciler.RolloutHalted {
		t.Errorf("%s is %s after the last trial, want Halted", id, got)
	}
	if c := cb.counts(t); c[reconciler.HostFailed] != 1 || c[reconciler.HostPending] != n-1 {
		t.Errorf("hosts by state after the trials: %v, want the canary Failed and the others Pending", c)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	hundred := make([]int64, 100)
	for i := range hundred {
		hundred[i] = int64(i + 1)
	}
	for _, tc := range []struct {
		name   string
		sorted []int64
		p      float64
		want   int64
	}{
		{"empty", nil, 50, 0},
		{"one", []int64{7}, 99, 7},
		{"median of 100", hundred, 50, 50},
		{"p99 of 100", hundred, 99, 99},
		{"p99.9 of 100", hundred, 99.9, 100},
		{"max", hundred, 100, 100},
		{"min", hundred, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(tc.sorted, tc.p); got != tc.want {
				t.Errorf("percentile(%v) = %d, want %d", tc.p, got, tc.want)
			}
		})
	}
}
