package controlplane_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/simagent"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// loadSpec is n hosts on one channel: a canary wave of n/20 and the rest,
// no soak, at most a quarter of the fleet in flight.
func loadSpec(n int) fleetrepo.Spec {
	quarter := 25
	s := fleetrepo.Spec{Channels: map[string][]int{"stable": {0, 0}},
		Budgets: []proto.DisruptionBudget{{Selector: proto.Selector{All: true}, MaxInFlightPct: &quarter}}}
	for i := range n {
		wave := 1
		if i < n/20 {
			wave = 0
		}
		s.Hosts = append(s.Hosts, fleetrepo.NewHost(fmt.Sprintf("host-%03d", i), "stable", wave))
	}
	return s
}

// burnCPU keeps every core busy until stop is called, so that ticks,
// check-ins and confirms interleave as they do on a loaded machine.
func burnCPU() (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for range 2 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := uint64(1)
			for i := 0; !done.Load(); i++ {
				x = x*6364136223846793005 + 1442695040888963407
				if i%4096 == 0 {
					runtime.Gosched()
				}
			}
			_ = x
		}()
	}
	return func() { done.Store(true); wg.Wait() }
}

// TestHealthyFleetUnderLoad: 100 simulated agents that always confirm and
// stay healthy roll out a release on a control plane that runs on the real
// clock, ticks often, and shares a CPU kept busy. Confirms then land
// between a tick's clock read and its reading of the input; before ticks
// read their clock after their lock and left observations newer than it
// for the next tick, such a confirm was applied with a soak start earlier
// than itself, the check-in the host made just before switching counted
// as "since the confirm", and healthy hosts failed (4–39 of 1,000 hosts per
// rollout). Now no host fails and the rollout converges.
func TestHealthyFleetUnderLoad(t *testing.T) {
	t.Parallel()
	// 100 hosts confirm often enough to land between a tick's clock read
	// and its input (the bug took 4–39 of 1,000). The bounds below only
	// stop a hang: on a machine also running another suite, each rollout
	// takes minutes.
	const n = 100
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, loadSpec(n), func(c *controlplane.Config) {
				c.Clock = clock.Real{}
				c.TickInterval = 250 * time.Millisecond
				c.Debounce = 10 * time.Millisecond
			})
			hosts := e.hosts()
			ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			for _, h := range hosts {
				h.Now = time.Now
				// As a real agent does while it realises a closure, each host
				// checks in once more on the system it still runs before it
				// switches and confirms.
				old := fleetrepo.Closure(h.Name, "v0") // what it runs before either release
				h.Decide = func(proto.Target) simagent.Action {
					// A status that changed (one more probe) is written at once,
					// with its last-seen time.
					_, _ = h.Client.Checkin(ctx, proto.CheckinRequest{Hostname: h.Name, Current: old, Booted: old,
						Probes: proto.ProbeSummary{Total: 2}, FailedUnits: []string{}})
					return simagent.Confirm
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					h.Run(ctx, time.Second)
				}()
			}
			stop := burnCPU()
			defer stop()
			viewer := e.client(e.viewKey.priv, "victor")
			converged := func(id string) func() bool {
				return func() bool {
					var r proto.Rollout
					return viewer.Get(ctx, "/v1/rollouts/"+id, &r) == nil && r.State == string(reconciler.RolloutConverged) &&
						r.Counts[string(reconciler.HostConverged)] == n
				}
			}
			e.await(4*time.Minute, "the hosts converge on the first release", converged(rolloutID("stable", 1)))
			e.release("v1", 2)
			e.await(4*time.Minute, "the second release converges", converged(rolloutID("stable", 2)))
			stop()

			var evs struct {
				Events []proto.Event `json:"events"`
			}
			if err := viewer.Get(ctx, "/v1/events?limit=10000", &evs); err != nil {
				t.Fatal(err)
			}
			confirms := 0
			for _, ev := range evs.Events {
				switch {
				case ev.To == string(reconciler.HostFailed) || ev.Reason.Code == codes.HealthFailure:
					t.Errorf("%s %s %s→%s: %s: %s", ev.RolloutID, ev.Host, ev.From, ev.To, ev.Reason.Code, ev.Reason.Message)
				case ev.To == string(reconciler.HostSoaking):
					confirms++
				}
			}
			if confirms != 2*n {
				t.Errorf("%d hosts soaked, want %d (every host, twice)", confirms, 2*n)
			}
		})
	}
}
