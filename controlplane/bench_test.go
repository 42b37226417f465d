package controlplane_test

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
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
// Metrics: checkins/s, p50_ms, p99_ms (client side), srv_us (mean time in
// the check-in handler, TLS and HTTP excluded), tick_ms (mean store tick).
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
	b.Run("tick-idle", cb.benchTick)
}

// benchRun runs op per b.Loop and reports what the check-ins measured.
func (cb *checkinBench) benchRun(b *testing.B, op loadOp) {
	w0, m0 := cb.watermark(b), cb.e.metrics()
	var lat, sent []int64
	var elapsed time.Duration
	if f := os.Getenv("DEBUG_PROF"); f != "" {
		pf, _ := os.Create(f + "-" + strings.ReplaceAll(b.Name(), "/", "_"))
		pprof.StartCPUProfile(pf)
		defer pprof.StopCPUProfile()
	}
	for b.Loop() {
		res := cb.load.run(b, op)
		if res.Errors > 0 {
			b.Fatalf("%d of %d check-ins failed, the first: %s", res.Errors, op.Count, res.FirstError)
		}
		lat, sent, elapsed = append(lat, res.Latency...), append(sent, res.Sent...), elapsed+res.Elapsed
	}
	b.StopTimer()
	m1 := cb.e.metrics()
	if w := cb.watermark(b); w != w0 {
		b.Fatalf("steady-state check-ins wrote to the store: watermark %+v, then %+v", w0, w)
	}
	slices.Sort(lat)
	slices.Sort(sent)
	ms := func(us int64) float64 { return float64(us) / 1000 }
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "checkins/s")
	b.ReportMetric(ms(percentile(lat, 50)), "p50_ms")
	b.ReportMetric(ms(percentile(lat, 99)), "p99_ms")
	const h = "nixfleet_checkin_duration_seconds"
	if n := m1[h+"_count"] - m0[h+"_count"]; n > 0 {
		b.ReportMetric((m1[h+"_sum"]-m0[h+"_sum"])/n*1e6, "srv_us")
	}
	td := tickDelta(m0, m1)
	if td.count > 0 {
		b.ReportMetric(td.meanMS(), "tick_ms")
	}
	b.Logf("%d check-ins: p90 %.1f ms, p99.9 %.1f ms, max %.1f ms; %d tick(s)",
		len(lat), ms(percentile(lat, 90)), ms(percentile(lat, 99.9)), ms(percentile(lat, 100)), td.count)
	if len(sent) > 0 {
		b.Logf("from when each was sent instead of due: p50 %.1f ms, p99 %.1f ms", ms(percentile(sent, 50)), ms(percentile(sent, 99)))
	}
}

// benchTick times ticks that change nothing, with nobody checking in.
func (cb *checkinBench) benchTick(b *testing.B) {
	ctx := context.Background()
	m0 := cb.e.metrics()
	for b.Loop() {
		cb.e.srv.TickNow(ctx)
	}
	b.StopTimer()
	td := tickDelta(m0, cb.e.metrics())
	if td.count != b.N {
		b.Fatalf("%d ticks ran for %d asked: does the control plane lead?", td.count, b.N)
	}
	b.ReportMetric(td.meanMS(), "tick_ms")
	b.ReportMetric(cb.onboardTick.meanMS(), "onboard_tick_ms")
	b.ReportMetric(float64(cb.onboardTick.count), "onboard_ticks")
	b.ReportMetric(cb.onboard.Seconds(), "onboard_s")
	cb.logSetup(b)
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
	if w := cb.watermark(t); w != w0 {
		t.Errorf("steady-state check-ins wrote to the store: watermark %+v, then %+v", w0, w)
	}
	if c := cb.counts(); c[reconciler.HostConverged] != cb.n {
		t.Errorf("hosts by state after the runs: %v", c)
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
