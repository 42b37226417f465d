package reconciler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// benchInput builds a fleet of n hosts on 10 channels (3 waves each, host
// edges, 20 disruption budgets), opens a rollout per channel and brings it
// mid-flight: wave 0 confirmed and soaking, some hosts offline and
// skipped, the rest pending.
func benchInput(b *testing.B, n int) rc.Input {
	b.Helper()
	return benchInputWith(b, n, nil, rc.OutcomeConfirmed)
}

// benchInputWith is benchInput with every channel's policy edited, and
// the first hosts dispatched answering with outcome (confirmed, or
// deferred: staged for the next boot).
func benchInputWith(b *testing.B, n int, policy func(*proto.RolloutPolicy), outcome string) rc.Input {
	b.Helper()
	const channels = 10
	fb := fleetkit.New(b)
	for c := range channels {
		fb.Channel(fmt.Sprintf("ch%02d", c), 10, 10, 0)
	}
	roles := []string{"web", "db", "cache", "batch"}
	names := make([]string, n)
	for i := range n {
		name := fmt.Sprintf("host-%06d", i)
		names[i] = name
		wave := 2
		switch {
		case i%100 < 2:
			wave = 0
		case i%100 < 20:
			wave = 1
		}
		fb.Host(name, fmt.Sprintf("ch%02d", i%channels), wave, fmt.Sprintf("rack-%03d", i/200%500), "role-"+roles[i%4])
		// A chain of edges inside each channel's last wave.
		if wave == 2 && i >= 2*channels && i%7 == 0 && (i-channels)%100 >= 20 {
			fb.Edge(fmt.Sprintf("host-%06d", i-channels), name)
		}
	}
	for _, r := range roles {
		fb.Budget(proto.Selector{Tags: []string{"role-" + r}}, 0, 5)
	}
	for k := range 10 {
		fb.Budget(proto.Selector{TagsAny: []string{fmt.Sprintf("rack-%03d", 2*k), fmt.Sprintf("rack-%03d", 2*k+1)}}, 2, 0)
	}
	for c := range 5 {
		ch := fmt.Sprintf("ch%02d", c)
		fb.Budget(proto.Selector{Channel: &ch}, 50, 0)
	}
	fb.Budget(proto.Selector{All: true}, 0, 10)
	if policy != nil {
		for c := range channels {
			fb.Policy(fmt.Sprintf("ch%02d", c), policy)
		}
	}
	f := fb.Build()
	s := newScenario(b)
	s.in.Tunables = rc.Tunables{ConfirmWindowSeconds: 3600}
	s.release(f, fleetkit.Commit(1)).online(names...)
	for i, name := range names {
		if i%50 == 49 {
			s.offline(name)
		}
	}
	// A tick moves at most Tunables.MaxHostMoves hosts; the next, at once,
	// goes on (More).
	var actions []rc.HostAction
	for s.tick(); ; s.tick() {
		actions = append(actions, s.last.Actions...)
		if !s.last.More {
			break
		}
	}
	for _, it := range actions {
		s.report(it.RolloutID, it.Host, outcome)
	}
	s.advance(time.Minute)
	for s.tick(); s.last.More; s.tick() {
	}
	s.advance(time.Minute)
	return s.in
}

// BenchmarkReconcile measures one tick on a fleet mid-rollout.
func BenchmarkReconcile(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			in := benchInput(b, n)
			out := rc.Reconcile(in)
			if len(in.Rollouts) != 10 {
				b.Fatalf("want a rollout per channel, got %d", len(in.Rollouts))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				out = rc.Reconcile(in)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/host")
			_ = out
		})
	}
}

// BenchmarkReconcileCompared is BenchmarkReconcile with a comparison on
// every channel's health gate (rfcs/0003 rule 16): each tick also picks
// every running comparison's canary and baseline.
func BenchmarkReconcileCompared(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			in := benchInputWith(b, n, func(p *proto.RolloutPolicy) {
				p.HealthGate.Analysis = []proto.Analysis{{Name: "vs-baseline", Query: `max(errors{host=~"{{ .HostsRegex }}"})`,
					SuccessCondition: "result < 0.5", Interval: "1m", Count: 3,
					Compare: &proto.Comparison{Worse: proto.WorseHigher, Effect: "0.01", Confidence: "0.95", MinSamples: 10, Window: "10m", Step: "30s"}}}
			}, rc.OutcomeConfirmed)
			out := rc.Reconcile(in)
			compared := 0
			for _, m := range out.Measure {
				if len(m.Baseline) > 0 {
					compared++
				}
			}
			if compared < 5 {
				b.Fatalf("%d comparisons with a baseline asked for, want one per channel whose first wave runs the release", compared)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				out = rc.Reconcile(in)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/host")
		})
	}
}

// BenchmarkReconcileRebooting is BenchmarkReconcile where every channel's
// policy reboots staged hosts (rfcs/0003 rule 17) and every host
// dispatched staged its target and was told to reboot: the budgets are
// full of hosts rebooting, so each tick watches their boots, walks the
// waves the policy reboots, and holds the hosts still to dispatch.
func BenchmarkReconcileRebooting(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			in := benchInputWith(b, n, func(p *proto.RolloutPolicy) {
				p.Reboot = &proto.Reboot{Allowed: true, BootTimeoutMinutes: 120}
			}, rc.OutcomeDeferred)
			states := map[rc.HostState]int{}
			for _, r := range in.Rollouts {
				for _, h := range r.Hosts {
					states[h.State]++
				}
			}
			if states[rc.HostRebooting] == 0 {
				b.Fatalf("hosts by state %v: want some rebooting", states)
			}
			out := rc.Reconcile(in)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				out = rc.Reconcile(in)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/host")
			_ = out
		})
	}
}

// BenchmarkReconcileBlind measures a tick while the control plane cannot
// see most of the fleet: 60% of the hosts of every channel fall silent at
// once, so every channel is in partial visibility (the first tick reports
// it and holds every Pending host; the measured ticks decide nothing new).
func BenchmarkReconcileBlind(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			in := benchInput(b, n)
			names := make([]string, 0, len(in.Hosts))
			for name := range in.Hosts {
				names = append(names, name)
			}
			for _, name := range names {
				// Hosts are spread over channels by their last digit: the
				// tens digit silences 60% of each channel.
				if name[len(name)-2]-'0' < 6 {
					o := in.Hosts[name]
					o.LastSeen = in.Now.Add(-time.Hour)
					in.Hosts[name] = o
				}
			}
			for {
				out := rc.Reconcile(in)
				if in = rc.Apply(in, out); !out.More {
					break
				}
			}
			if len(in.Visibility) != 10 {
				b.Fatalf("want every channel in partial visibility, got %+v", in.Visibility)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var out rc.Output
			for b.Loop() {
				out = rc.Reconcile(in)
			}
			if len(out.Events) != 0 {
				b.Fatalf("the steady tick decided %d events", len(out.Events))
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/host")
		})
	}
}

// BenchmarkReconcileAllInFlight measures a tick while every host of the
// fleet is in flight, as while a fleet onboards (each host's first
// check-in dispatches it to what it runs) or a one-wave channel
// activates: one channel, one wave soaking 10 minutes, no budget; every
// host confirmed and soaking, and nothing for the tick to change.
func BenchmarkReconcileAllInFlight(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			fb := fleetkit.New(b).Channel("stable", 10)
			names := make([]string, n)
			for i := range n {
				names[i] = fmt.Sprintf("host-%06d", i)
				fb.Host(names[i], "stable", 0)
			}
			s := newScenario(b)
			s.in.Tunables = rc.Tunables{ConfirmWindowSeconds: 3600, MaxHostMoves: -1}
			s.release(fb.Build(), fleetkit.Commit(1)).online(names...)
			s.tick()
			for _, it := range s.last.Actions {
				s.confirm(it.RolloutID, it.Host)
			}
			s.advance(time.Minute).tick().advance(time.Minute)
			in := s.in
			if out := rc.Reconcile(in); len(in.Rollouts) != 1 || len(out.Hosts) != 0 || out.More {
				b.Fatalf("%d rollouts, %d host records changed: want every host soaking, and a tick that changes nothing", len(in.Rollouts), len(out.Hosts))
			}
			b.ReportAllocs()
			for b.Loop() {
				rc.Reconcile(in)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/host")
		})
	}
}

// BenchmarkForecast measures a forecast of the mid-flight fleet of
// benchInput, every host taking the default two minutes, over its first
// 100 ticks: its cost is its ticks times the cost of one (a tick and its
// Apply). Its racks' budgets of two let 400 hosts through two at a time,
// so the whole forecast runs thousands of ticks (BENCHMARKS.md).
func BenchmarkForecast(b *testing.B) {
	const ticks = 100
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			in := benchInput(b, n)
			var f rc.ForecastResult
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				f = rc.Forecast(in, rc.Model{MaxTicks: ticks})
			}
			if f.Ticks != ticks {
				b.Fatalf("the forecast ran %d ticks (%s), want %d", f.Ticks, f.Cut, ticks)
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N)/ticks, "ms/tick")
			b.ReportMetric(f.Until.Sub(f.From).Minutes(), "simulated-min")
		})
	}
}
