package controlplane

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// waiting is a host's assignment as Pending in an Active rollout, with a
// target of its own.
func waiting(host, target string) reconciler.Assignment {
	return reconciler.Assignment{RolloutID: "stable@c2", Channel: "stable", RolloutState: reconciler.RolloutActive, ManifestHash: "m2",
		Host: reconciler.RolloutHost{Hostname: host, Wave: 1, Target: target, State: reconciler.HostPending,
			Blocked: reconciler.Reason{Gate: codes.WaveNotActive, Code: codes.WaveNotActive}}}
}

// TestPrefetchSlots drives the fetch slots of one replica with a fake
// clock, check-in by check-in: at most the limit are held; a slot is kept
// while its host asks again for the same closure, and given back when the
// host reports it prefetched, runs it, needs another closure or stops
// waiting, when the host is silent for slotTTL, or after slotMaxHold (the
// host then rests for slotTTL); a host holding its target prefetched is
// answered it without a slot.
func TestPrefetchSlots(t *testing.T) {
	t.Parallel()
	type checkin struct {
		after                     time.Duration // since the previous step
		host                      string
		target, current, prefetch string // target "": the host is in no rollout
		state                     reconciler.HostState
		rollout                   reconciler.RolloutState
		// want: the answer names the target; inUse: slots held after it.
		want  bool
		inUse int
	}
	// c is a check-in of a host waiting for target t, running "v0",
	// holding nothing prefetched.
	c := func(host, t string, want bool, inUse int) checkin {
		return checkin{host: host, target: t, current: "v0", want: want, inUse: inUse}
	}
	after := func(d time.Duration, ci checkin) checkin { ci.after = d; return ci }
	prefetched := func(ci checkin, p string) checkin { ci.prefetch = p; return ci }
	running := func(ci checkin, cur string) checkin { ci.current = cur; return ci }
	in := func(ci checkin, st reconciler.HostState, r reconciler.RolloutState) checkin {
		ci.state, ci.rollout = st, r
		return ci
	}
	for _, tc := range []struct {
		name    string
		limit   int
		steps   []checkin
		granted int // nixfleet_prefetch_granted_total at the end
	}{
		{"the limit bounds the slots; renewals keep them", 2, []checkin{
			c("a", "v1-a", true, 1), c("b", "v1-b", true, 2), c("c", "v1-c", false, 2),
			c("a", "v1-a", true, 2), c("b", "v1-b", true, 2), c("c", "v1-c", false, 2),
		}, 2},
		{"reporting the closure prefetched frees the slot for the next host", 1, []checkin{
			c("a", "v1-a", true, 1), c("b", "v1-b", false, 1),
			prefetched(c("a", "v1-a", true, 0), "v1-a"), // held: answered without a slot
			c("b", "v1-b", true, 1),
			prefetched(c("a", "v1-a", true, 1), "v1-a"), // still its coming target
		}, 2},
		{"an older closure prefetched needs a slot for the new one", 1, []checkin{
			prefetched(c("a", "v2-a", true, 1), "v1-a"),
		}, 1},
		{"running the target, or stopping to wait, frees the slot", 1, []checkin{
			c("a", "v1-a", true, 1), c("b", "v1-b", false, 1),
			running(c("a", "v1-a", false, 0), "v1-a"),
			c("b", "v1-b", true, 1),
			in(c("b", "v1-b", false, 0), reconciler.HostActivating, reconciler.RolloutActive),
			c("c", "v1-c", true, 1),
			in(c("c", "v1-c", false, 0), reconciler.HostPending, reconciler.RolloutHalted),
			c("d", "v1-d", true, 1),
			c("d", "", false, 0), // in no rollout any more
		}, 4},
		{"another closure replaces the slot, and counts as a new one", 1, []checkin{
			c("a", "v1-a", true, 1), c("a", "v2-a", true, 1), c("b", "v1-b", false, 1),
		}, 2},
		{"a silent host's slot expires after slotTTL", 1, []checkin{
			c("a", "v1-a", true, 1),
			after(slotTTL-time.Second, c("b", "v1-b", false, 1)),
			after(time.Second, c("b", "v1-b", true, 1)),
			// a comes back: its slot is gone, and b holds the only one.
			c("a", "v1-a", false, 1),
		}, 2},
		{"a host that never reports its closure holds the slot slotMaxHold, then rests", 1, []checkin{
			c("a", "v1-a", true, 1),
			after(9*time.Minute, c("a", "v1-a", true, 1)),
			after(9*time.Minute, c("a", "v1-a", true, 1)),
			after(9*time.Minute, c("a", "v1-a", true, 1)),
			after(3*time.Minute-time.Second, c("b", "v1-b", false, 1)),
			after(time.Second, c("a", "v1-a", false, 0)), // 30 minutes: its turn is over
			c("b", "v1-b", true, 1),
			prefetched(c("b", "v1-b", true, 0), "v1-b"),
			c("a", "v1-a", false, 0), // resting, though a slot is free
			after(slotTTL, c("a", "v1-a", true, 1)),
		}, 3},
		{"a full table frees the slots of hosts that went silent", 2, []checkin{
			c("a", "v1-a", true, 1), c("b", "v1-b", true, 2),
			after(slotTTL, c("c", "v1-c", true, 1)),
			c("d", "v1-d", true, 2), c("e", "v1-e", false, 2),
		}, 4},
		{"off", 0, []checkin{c("a", "v1-a", false, 0), prefetched(c("b", "v1-b", false, 0), "v1-b")}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := &fakeClock{t: limitEpoch}
			reg := prometheus.NewRegistry()
			p := newPrefetchSlots(tc.limit, clk.now, reg)
			for i, s := range tc.steps {
				clk.advance(s.after)
				a, ok := reconciler.Assignment{}, s.target != ""
				if ok {
					a = waiting(s.host, s.target)
					if s.state != "" {
						a.Host.State, a.RolloutState = s.state, s.rollout
					}
				}
				prev, had := p.held[s.host]
				got, taken := p.answer(s.host, a, ok, s.current, s.prefetch)
				// Taken: a slot the host did not hold before (none, or one
				// for another closure, or one that expired).
				cur, has := p.held[s.host]
				if want := has && (!had || cur.closure != prev.closure || !cur.granted.Equal(prev.granted)); taken != want {
					t.Fatalf("step %d (%s asks for %s): taken %v, want %v (slot before %+v, after %+v)", i, s.host, s.target, taken, want, prev, cur)
				}
				want := (*proto.PrefetchTarget)(nil)
				if s.want {
					want = &proto.PrefetchTarget{RolloutID: "stable@c2", Closure: s.target, WaveIndex: 1, ManifestHash: "m2"}
				}
				if (got == nil) != (want == nil) || got != nil && *got != *want {
					t.Fatalf("step %d (%s asks for %s): answered %+v, want %+v", i, s.host, s.target, got, want)
				}
				if n := p.inUse(); n != s.inUse {
					t.Fatalf("step %d (%s asks for %s): %d slots in use, want %d", i, s.host, s.target, n, s.inUse)
				}
			}
			got := slotMetrics(t, reg)
			if want := tc.steps[len(tc.steps)-1].inUse; got["nixfleet_prefetch_slots_in_use"] != float64(want) {
				t.Errorf("nixfleet_prefetch_slots_in_use %v, want %d", got["nixfleet_prefetch_slots_in_use"], want)
			}
			if got["nixfleet_prefetch_granted_total"] != float64(tc.granted) {
				t.Errorf("nixfleet_prefetch_granted_total %v, want %d", got["nixfleet_prefetch_granted_total"], tc.granted)
			}
		})
	}
}

// slotMetrics reads the prefetch metrics of a registry, by name.
func slotMetrics(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				out[mf.GetName()] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[mf.GetName()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// BenchmarkPrefetchAnswer: what the fetch slots add to a check-in, with
// 10,000 hosts checking in from every core at once: all waiting for a
// closure (50 hold slots, the others find none), or none waiting (a
// check-in only gives back a slot it does not hold).
func BenchmarkPrefetchAnswer(b *testing.B) {
	const hosts = 10000
	names := make([]string, hosts)
	waits := make([]reconciler.Assignment, hosts)
	for i := range names {
		names[i] = "host-" + strconv.Itoa(i)
		waits[i] = waiting(names[i], "v1-"+names[i])
	}
	for _, bc := range []struct {
		name string
		ok   bool
	}{{"waiting", true}, {"idle", false}} {
		b.Run(bc.name, func(b *testing.B) {
			p := newPrefetchSlots(DefaultPrefetchConcurrency, time.Now, prometheus.NewRegistry())
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := int(next.Add(1)) % hosts
					p.answer(names[i], waits[i], bc.ok, "v0", "")
				}
			})
		})
	}
}
