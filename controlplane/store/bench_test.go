package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/kept"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/controlplane/store/storetest"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// benchSizes are the fleet sizes of the store benchmarks: the
// comma-separated NIXFLEET_BENCH_HOSTS (10000 when unset).
func benchSizes(b *testing.B) []int {
	v := os.Getenv("NIXFLEET_BENCH_HOSTS")
	if v == "" {
		return []int{10000}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 100 {
			b.Fatalf("NIXFLEET_BENCH_HOSTS=%q: want sizes of at least 100, comma-separated", v)
		}
		out = append(out, n)
	}
	return out
}

// benchBackends are the store backends benchmarked: the comma-separated
// NIXFLEET_BENCH_BACKENDS (sqlite,postgres when unset).
func benchBackends() []struct {
	name string
	open func(testing.TB) store.Store
} {
	all := []struct {
		name string
		open func(testing.TB) store.Store
	}{{"sqlite", openSQLite}, {"postgres", openPostgres}}
	v := os.Getenv("NIXFLEET_BENCH_BACKENDS")
	if v == "" {
		return all
	}
	names := strings.Split(v, ",")
	return slices.DeleteFunc(all, func(b struct {
		name string
		open func(testing.TB) store.Store
	}) bool {
		return !slices.Contains(names, b.name)
	})
}

// BenchmarkTick measures one tick on a fleet of NIXFLEET_BENCH_HOSTS
// hosts (fleetkit.Synthetic without its channel edges: three channels,
// three rollouts mid-flight, every host reporting a status) on each
// backend:
//
//   - load: the tick reads its Input (what changed since the previous
//     one, rfcs/0006 §Tick loop 3) and writes nothing (decide fails);
//   - decide: a real reconcile tick that has nothing to change: the
//     reconciler runs over the whole fleet (as when something changed, or
//     at the latest every five minutes);
//   - idle: the same tick as the control plane's ticker makes it when
//     nothing changed and nothing is due (TickParams.SkipBefore): it
//     reads the watermark and writes the watch, and does not decide;
//   - verify: the comparison of the kept input with a cold load beside
//     the ticks (VerifyKept), with an idle tick started at the same time
//     (max_tick_ms: how long it waited); verify-in-tick: the same
//     comparison inside a tick (TickParams.Verify), all of it under the
//     tick lock;
//   - moved-1000: 1,000 hosts report a changed status (not timed), and a
//     tick reads them and decides;
//   - churn: a tick whose output changes every host of every rollout
//     (one host update each) and journals an event for each.
func BenchmarkTick(b *testing.B) {
	for _, n := range benchSizes(b) {
		for _, backend := range benchBackends() {
			b.Run(fmt.Sprintf("%s/hosts=%d", backend.name, n), func(b *testing.B) {
				benchTick(b, backend.open(b), n)
			})
		}
	}
}

func benchTick(b *testing.B, s store.Store, n int) {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	lease, statuses := setupBench(b, s, n, now)
	errLoadOnly := errors.New("load only")
	b.Run("load", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, err := s.Tick(ctx, store.TickParams{Kept: keeperOf(s), Lease: lease, Clock: store.At(now), Tunables: rc.Tunables{}}, func(rc.Input) (rc.Output, error) { return rc.Output{}, errLoadOnly })
			if !errors.Is(err, errLoadOnly) {
				b.Fatal(err)
			}
		}
	})
	var quiet time.Time
	b.Run("decide", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			out, err := s.Tick(ctx, idleParams(s, lease, now), func(in rc.Input) (rc.Output, error) { return rc.Reconcile(in), nil })
			if err != nil {
				b.Fatal(err)
			}
			if len(out.Hosts) != 0 {
				b.Fatalf("an idle tick changed %d hosts", len(out.Hosts))
			}
			quiet = out.QuietUntil
		}
	})
	b.Run("idle", func(b *testing.B) {
		b.ReportAllocs()
		p := idleParams(s, lease, now)
		p.SkipBefore = quiet
		if quiet.IsZero() {
			p.SkipBefore = now.Add(time.Hour)
		}
		for b.Loop() {
			decided := false
			if _, err := s.Tick(ctx, p, func(in rc.Input) (rc.Output, error) { decided = true; return rc.Reconcile(in), nil }); err != nil {
				b.Fatal(err)
			}
			if decided {
				b.Fatal("an idle tick decided: nothing changed and nothing was due")
			}
		}
	})
	b.Run("verify", func(b *testing.B) {
		// VerifyKept, and an idle tick started beside it: how long the
		// comparison holds the ticks up (tick_ms, at most the copy of
		// the kept input).
		p := idleParams(s, lease, now)
		p.SkipBefore = now.Add(time.Hour)
		var beside time.Duration
		for b.Loop() {
			done := make(chan error, 1)
			go func() {
				rep, err := s.VerifyKept(ctx, keeperOf(s))
				if err == nil && (rep.Diverged || rep.Skipped != "") {
					err = fmt.Errorf("diverged %v (%s), skipped %q", rep.Diverged, rep.Divergence, rep.Skipped)
				}
				done <- err
			}()
			began := time.Now()
			if _, err := s.Tick(ctx, p, func(in rc.Input) (rc.Output, error) { return rc.Reconcile(in), nil }); err != nil {
				b.Fatal(err)
			}
			beside = max(beside, time.Since(began))
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(beside.Microseconds())/1000, "max_tick_ms")
	})
	b.Run("verify-in-tick", func(b *testing.B) {
		// The same comparison in a tick's transaction (TickParams.Verify),
		// as the control plane made it before VerifyKept: the tick lock
		// is held for all of it.
		p := idleParams(s, lease, now)
		p.Verify = true
		for b.Loop() {
			var rep store.TickReport
			p.Report = func(r store.TickReport) { rep = r }
			if _, err := s.Tick(ctx, p, func(in rc.Input) (rc.Output, error) { return rc.Reconcile(in), nil }); err != nil {
				b.Fatal(err)
			}
			if rep.Diverged {
				b.Fatal(rep.Divergence)
			}
		}
	})
	b.Run("moved-1000", func(b *testing.B) {
		// 1,000 hosts report a changed status (untimed); the tick reads
		// them and decides.
		names := slices.Sorted(maps.Keys(statuses))
		round := 0
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			round++
			moved := map[string]store.HostStatus{}
			for i := range min(1000, len(names)) {
				name := names[(round*1000+i)%len(names)]
				st := statuses[name]
				st.Probes = rc.ProbeSummary{Total: 3 + round%2}
				moved[name] = st
			}
			record(b, s, moved)
			b.StartTimer()
			if _, err := s.Tick(ctx, idleParams(s, lease, now), func(in rc.Input) (rc.Output, error) { return rc.Reconcile(in), nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("open", func(b *testing.B) { benchOpen(b, s, lease, n, now) })
	b.Run("churn", func(b *testing.B) {
		b.ReportAllocs()
		flip := 0
		for b.Loop() {
			flip++
			_, err := s.Tick(ctx, store.TickParams{Kept: keeperOf(s), Lease: lease, Clock: store.At(now), Tunables: rc.Tunables{}}, func(in rc.Input) (rc.Output, error) {
				var out rc.Output
				why := rc.Reason{Gate: "bench", Code: "bench", Message: fmt.Sprint("round ", flip)}
				for _, r := range in.Rollouts {
					for _, h := range r.Hosts {
						h.Blocked = why
						out.Hosts = append(out.Hosts, rc.HostUpdate{RolloutID: r.ID, From: h.State, Host: h})
						out.Events = append(out.Events, rc.Event{Kind: rc.EventHostWaiting, RolloutID: r.ID, Host: h.Hostname, Reason: why})
					}
				}
				if len(out.Hosts) != n {
					return out, fmt.Errorf("%d hosts in the rollouts, want %d", len(out.Hosts), n)
				}
				return out, nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchOpen measures the tick a push asks for: every channel has a new
// release with a new closure for every host (untimed, as is halting the
// rollouts it supersedes); the tick decodes it, opens the rollouts (those
// whose channel has no host activating) with a
// row per host and dispatches their first waves. The releases come with
// their decoded artifacts, as the control plane's source stores them.
// Push→dispatch at the control plane is verifying the release, storing it
// (put_ms) and this tick until it reports (commit_ms; BENCHMARKS.md).
func benchOpen(b *testing.B, s store.Store, lease store.Lease, n int, now time.Time) {
	ctx := context.Background()
	round := 1
	var put, committed time.Duration
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		round++
		_, err := s.Tick(ctx, idleParams(s, lease, now), func(in rc.Input) (rc.Output, error) {
			var out rc.Output
			for _, r := range in.Rollouts {
				if r.State.Terminal() || r.State == rc.RolloutHalted {
					continue
				}
				from := r.State
				r.Hosts, r.State = nil, rc.RolloutHalted
				out.Rollouts = append(out.Rollouts, rc.RolloutUpdate{From: from, Rollout: r})
			}
			return out, nil
		})
		if err != nil {
			b.Fatal(err)
		}
		f := fleetkit.Synthetic(n)
		f.ChannelEdges = nil
		for name, h := range f.Hosts {
			c := fmt.Sprintf("%s-r%d", *h.ClosureHash, round)
			h.ClosureHash = &c
			f.Hosts[name] = h
		}
		rels := storetest.Releases(b, f, fleetkit.Commit(round), now.Add(time.Duration(round)*time.Second))
		for i := range rels {
			// As the control plane's source does: the artifacts it
			// decoded while verifying them come with the release.
			if rels[i].Fleet, err = proto.DecodeFleetResolved(rels[i].FleetBody); err != nil {
				b.Fatal(err)
			}
			if rels[i].Manifest, err = proto.DecodeRolloutManifest(rels[i].ManifestBody); err != nil {
				b.Fatal(err)
			}
		}
		began := time.Now()
		if _, err := s.PutReleases(ctx, rels); err != nil {
			b.Fatal(err)
		}
		put += time.Since(began)
		b.StartTimer()
		began = time.Now()
		p := idleParams(s, lease, now)
		p.Report = func(store.TickReport) { committed += time.Since(began) }
		out, err := s.Tick(ctx, p, func(in rc.Input) (rc.Output, error) { return rc.Reconcile(in), nil })
		if err != nil {
			b.Fatal(err)
		}
		opened := 0
		for _, r := range out.Rollouts {
			if r.New {
				opened++
			}
		}
		// A channel whose halted rollout has a host activating waits
		// (rfcs/0003 rule 1); the others open.
		if opened == 0 {
			b.Fatal("the push opened no rollout")
		}
		b.ReportMetric(float64(opened), "opened/op")
	}
	// Storing the releases (untimed): the part of the push between
	// verifying and this tick.
	b.ReportMetric(float64(put.Milliseconds())/float64(b.N), "put_ms")
	// Until the tick reported: what a dispatch waits for (the rows of
	// the hosts still Pending are written after, store/owed.go).
	b.ReportMetric(float64(committed.Milliseconds())/float64(b.N), "commit_ms")
}

// setupBench publishes the fleet, records a status and a check-in for
// every host, and runs the first tick (which opens the rollouts and
// dispatches what the budgets allow, confirmed by the agents); it returns
// the lease and every host's status.
func setupBench(b *testing.B, s store.Store, n int, now time.Time) (store.Lease, map[string]store.HostStatus) {
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
	if _, err := s.TouchHosts(ctx, store.SeenAt(seen)); err != nil {
		b.Fatal(err)
	}
	lease, err := s.AcquireLease(ctx, store.TickLease, "bench", 1000*time.Hour, now)
	if err != nil {
		b.Fatal(err)
	}
	out, err := s.Tick(ctx, store.TickParams{Kept: keeperOf(s), Lease: lease, Clock: store.At(now), Tunables: rc.Tunables{}}, func(in rc.Input) (rc.Output, error) { return rc.Reconcile(in), nil })
	if err != nil {
		b.Fatal(err)
	}
	confirmed := map[string]store.HostStatus{}
	for _, it := range out.Actions {
		st := statuses[it.Host]
		st.Current, st.Booted = it.Target, it.Target
		st.Activation = &rc.Activation{RolloutID: it.RolloutID, Closure: it.Target, Outcome: rc.OutcomeConfirmed, At: now}
		confirmed[it.Host] = st
		statuses[it.Host] = st
	}
	record(b, s, confirmed)
	// Settle: the confirmations move hosts to Soaking.
	if _, err := s.Tick(ctx, store.TickParams{Kept: keeperOf(s), Lease: lease, Clock: store.At(now), Tunables: rc.Tunables{}}, func(in rc.Input) (rc.Output, error) { return rc.Reconcile(in), nil }); err != nil {
		b.Fatal(err)
	}
	return lease, statuses
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

// keepers hold what each benchmark's store value's ticks keep, as the
// control plane's ticker does (one kept.Keeper per replica).
var keepers sync.Map

// keeperOf is the keeper of the ticks on s.
func keeperOf(s store.Store) *kept.Keeper {
	k, _ := keepers.LoadOrStore(s, &kept.Keeper{})
	return k.(*kept.Keeper)
}

// idleParams are the parameters of an idle tick, as the control plane's
// ticker gives them.
func idleParams(s store.Store, lease store.Lease, now time.Time) store.TickParams {
	return store.TickParams{Kept: keeperOf(s), Lease: lease, Clock: store.At(now), Tunables: rc.Tunables{}}
}

// BenchmarkStageRelease measures keeping a release of one channel of
// NIXFLEET_BENCH_HOSTS hosts as the control plane's source does: its
// bodies staged while it is verified (the op, stage_ms; a 27.5 MB
// fleet.resolved and a 5.7 MB manifest at 100,000 hosts), then the
// verified release stored, which only names them (put_ms):
//
//	NIXFLEET_TEST_PG=<fsync on> NIXFLEET_BENCH_HOSTS=100000 \
//	  go test ./controlplane/store -run '^$' -bench StageRelease -benchtime 5x
func BenchmarkStageRelease(b *testing.B) {
	for _, n := range benchSizes(b) {
		for _, backend := range benchBackends() {
			b.Run(fmt.Sprintf("%s/hosts=%d", backend.name, n), func(b *testing.B) {
				s := backend.open(b)
				ctx := context.Background()
				now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
				f := fleetkit.Synthetic(n)
				f.ChannelEdges = nil
				var put time.Duration
				round := 0
				for b.Loop() {
					b.StopTimer()
					round++
					// New bytes each round, as every release has.
					rel := storetest.Releases(b, f, fleetkit.Commit(round), now.Add(time.Duration(round)*time.Second), "stable")[0]
					b.SetBytes(int64(len(rel.FleetBody) + len(rel.ManifestBody)))
					b.StartTimer()
					if _, err := s.StageReleaseBodies(ctx, now, rel.FleetBody, rel.ManifestBody); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					began := time.Now()
					if err := s.PutRelease(ctx, rel); err != nil {
						b.Fatal(err)
					}
					put += time.Since(began)
					b.StartTimer()
				}
				b.ReportMetric(float64(put.Milliseconds())/float64(b.N), "put_ms")
			})
		}
	}
}

// BenchmarkTouchHosts measures one batch of check-ins as a replica's hub
// writes it every second (TouchHosts): 2,000 hosts of a fleet of
// NIXFLEET_BENCH_HOSTS, each naming the status the store holds, so that
// the batch records their last-seen times and that each said its status
// then (rfcs/0003 rule 8). ns/op is one batch.
func BenchmarkTouchHosts(b *testing.B) {
	const batch = 2000
	for _, n := range benchSizes(b) {
		for _, backend := range benchBackends() {
			b.Run(fmt.Sprintf("%s/hosts=%d/batch=%d", backend.name, n, batch), func(b *testing.B) {
				s := backend.open(b)
				now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
				_, statuses := setupBench(b, s, n, now)
				names := slices.Sorted(maps.Keys(statuses))[:min(batch, len(statuses))]
				said := make(map[string]string, len(names))
				for _, h := range names {
					said[h] = store.StatusDigest(statuses[h])
				}
				seen := make(map[string]store.Seen, len(names))
				b.ReportAllocs()
				for b.Loop() {
					now = now.Add(time.Second)
					for _, h := range names {
						seen[h] = store.Seen{At: now, Said: said[h]}
					}
					unsaid, err := s.TouchHosts(context.Background(), seen)
					if err != nil || len(unsaid) != 0 {
						b.Fatalf("TouchHosts: %d not said, %v", len(unsaid), err)
					}
				}
			})
		}
	}
}
