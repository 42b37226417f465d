package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/controlplane/store/storetest"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// BenchmarkTick10000 measures one tick on a 10,000-host fleet
// (fleetkit.Synthetic without its channel edges: three channels, three
// rollouts mid-flight, every host reporting a status) on each backend:
//
//   - load: the tick reads its Input and writes nothing (decide fails);
//   - idle: a real reconcile tick that has nothing to change;
//   - churn: a tick whose output changes every host of every rollout
//     (10,000 host updates) and journals an event for each.
func BenchmarkTick10000(b *testing.B) {
	for _, backend := range []struct {
		name string
		open func(testing.TB) store.Store
	}{{"sqlite", openSQLite}, {"postgres", openPostgres}} {
		b.Run(backend.name, func(b *testing.B) {
			s := backend.open(b)
			ctx := context.Background()
			now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			lease := setupBench(b, s, 10000, now)
			errLoadOnly := errors.New("load only")
			b.Run("load", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_, err := s.Tick(ctx, store.TickParams{Lease: lease, Clock: store.At(now), Tunables: rc.Tunables{}}, func(rc.Input) (rc.Output, error) { return rc.Output{}, errLoadOnly })
					if !errors.Is(err, errLoadOnly) {
						b.Fatal(err)
					}
				}
			})
			b.Run("idle", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					out, err := s.Tick(ctx, store.TickParams{Lease: lease, Clock: store.At(now), Tunables: rc.Tunables{}}, func(in rc.Input) (rc.Output, error) { return rc.Reconcile(in), nil })
					if err != nil {
						b.Fatal(err)
					}
					if len(out.Hosts) != 0 {
						b.Fatalf("an idle tick changed %d hosts", len(out.Hosts))
					}
				}
			})
			b.Run("churn", func(b *testing.B) {
				b.ReportAllocs()
				flip := 0
				for b.Loop() {
					flip++
					_, err := s.Tick(ctx, store.TickParams{Lease: lease, Clock: store.At(now), Tunables: rc.Tunables{}}, func(in rc.Input) (rc.Output, error) {
						var out rc.Output
						why := rc.Reason{Gate: "bench", Code: "bench", Message: fmt.Sprint("round ", flip)}
						for _, r := range in.Rollouts {
							for _, h := range r.Hosts {
								h.Blocked = why
								out.Hosts = append(out.Hosts, rc.HostUpdate{RolloutID: r.ID, From: h.State, Host: h})
								out.Events = append(out.Events, rc.Event{Kind: rc.EventHostWaiting, RolloutID: r.ID, Host: h.Hostname, Reason: why})
							}
						}
						if len(out.Hosts) != 10000 {
							return out, fmt.Errorf("%d hosts in the rollouts, want 10000", len(out.Hosts))
						}
						return out, nil
					})
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// setupBench publishes the fleet, records a status and a check-in for
// every host, and runs the first tick (which opens the rollouts and
// dispatches what the budgets allow, confirmed by the agents).
func setupBench(b *testing.B, s store.Store, n int, now time.Time) store.Lease {
	b.Helper()
	ctx := context.Background()
	f := fleetkit.Synthetic(n)
	f.ChannelEdges = nil
	for _, r := range storetest.Releases(b, f, fleetkit.Commit(1), now) {
		if err := s.PutRelease(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	seen := map[string]time.Time{}
	statuses := map[string]store.HostStatus{}
	for name, h := range f.Hosts {
		seen[name] = now
		statuses[name] = store.HostStatus{Current: "0000000000000000000000000000000a-old-" + name, Booted: "0000000000000000000000000000000a-old-" + name,
			Probes: rc.ProbeSummary{Total: 3}, Compliance: []rc.ComplianceResult{{Control: "fw", Framework: "nis2", Type: rc.ControlStatic, Closure: *h.ClosureHash, Passed: true}}}
	}
	record(b, s, statuses)
	if err := s.TouchHosts(ctx, seen); err != nil {
		b.Fatal(err)
	}
	lease, err := s.AcquireLease(ctx, store.TickLease, "bench", 1000*time.Hour, now)
	if err != nil {
		b.Fatal(err)
	}
	out, err := s.Tick(ctx, store.TickParams{Lease: lease, Clock: store.At(now), Tunables: rc.Tunables{}}, func(in rc.Input) (rc.Output, error) { return rc.Reconcile(in), nil })
	if err != nil {
		b.Fatal(err)
	}
	confirmed := map[string]store.HostStatus{}
	for _, it := range out.Actions {
		st := statuses[it.Host]
		st.Current, st.Booted = it.Target, it.Target
		st.Activation = &rc.Activation{RolloutID: it.RolloutID, Closure: it.Target, Outcome: rc.OutcomeConfirmed, At: now}
		confirmed[it.Host] = st
	}
	record(b, s, confirmed)
	// Settle: the confirmations move hosts to Soaking.
	if _, err := s.Tick(ctx, store.TickParams{Lease: lease, Clock: store.At(now), Tunables: rc.Tunables{}}, func(in rc.Input) (rc.Output, error) { return rc.Reconcile(in), nil }); err != nil {
		b.Fatal(err)
	}
	return lease
}

// record writes statuses from a few goroutines, as agents checking in do.
func record(b *testing.B, s store.Store, statuses map[string]store.HostStatus) {
	b.Helper()
	names := make(chan string)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				if _, err := s.RecordStatus(context.Background(), name, statuses[name]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for name := range statuses {
		names <- name
	}
	close(names)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
