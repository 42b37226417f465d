package controlplane_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/trust"
)

// TestPrefetch: with --prefetch-concurrency 2, once the v1 rollout opens
// (its canary, wave 0, is dispatched and does not confirm), the hosts of
// wave 1 are answered their target in `prefetch`, at most two at once;
// a host that reports it prefetched gives its slot back and is answered
// it still, without a slot, and the next host takes the slot. host
// explain and the metrics show it; once wave 1 is dispatched, its hosts
// are answered targets and no prefetch, and every slot is free.
func TestPrefetch(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, smallSpec(), func(c *controlplane.Config) { c.PrefetchConcurrency = 2 })
			roots, err := trust.ParseRoots(e.repo.TrustJSON())
			if err != nil {
				t.Fatal(err)
			}
			hosts := e.hosts()
			for _, h := range hosts {
				h.Roots = roots
			}
			e.onboard(hosts)
			ctx := context.Background()
			clients := map[string]func(proto.CheckinRequest) (proto.CheckinResponse, error){}
			for _, h := range e.spec.Hosts {
				c := e.client(h.Key, h.Name)
				clients[h.Name] = func(req proto.CheckinRequest) (proto.CheckinResponse, error) { return c.Checkin(ctx, req) }
			}
			// ask checks a host in as running v0, holding prefetched;
			// askWaiting long-polls up to wait seconds.
			askWaiting := func(name, prefetched string, wait int) proto.CheckinResponse {
				t.Helper()
				v0 := fleetrepo.Closure(name, "v0")
				resp, err := clients[name](proto.CheckinRequest{Hostname: name, Current: v0, Booted: v0,
					Probes: proto.ProbeSummary{Total: 1, Failed: []string{}}, FailedUnits: []string{}, Prefetched: prefetched, Wait: wait})
				if err != nil {
					t.Fatalf("%s checks in: %v", name, err)
				}
				return resp
			}
			ask := func(name, prefetched string) proto.CheckinResponse {
				t.Helper()
				return askWaiting(name, prefetched, 0)
			}
			v1 := func(name string) string { return fleetrepo.Closure(name, "v1") }

			// Before the rollout: nothing to fetch.
			if r := ask("web-1", ""); r.Prefetch != nil {
				t.Fatalf("web-1 converged on v0 is told to prefetch %+v", r.Prefetch)
			}
			e.release("v1", 2)
			id := rolloutID("stable", 2)
			var first proto.CheckinResponse
			e.await(10*time.Second, "web-1 waits in the v1 rollout", func() bool {
				first = ask("web-1", "")
				return first.Reason.Code == codes.WaveNotActive
			})
			ro, _, err := e.client(e.viewKey.priv, "victor").Rollout(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			want := proto.PrefetchTarget{RolloutID: id, Closure: v1("web-1"), WaveIndex: 1, ManifestHash: ro.ManifestHash}
			if first.Target != nil || first.Prefetch == nil || *first.Prefetch != want {
				t.Fatalf("web-1 is answered target %+v prefetch %+v, want no target and prefetch %+v", first.Target, first.Prefetch, want)
			}
			if r := ask("canary", ""); r.Target == nil || r.Prefetch != nil {
				t.Fatalf("the canary is answered target %+v prefetch %+v, want its dispatch and no prefetch", r.Target, r.Prefetch)
			}
			// The bound: web-2 takes the second slot, web-3 finds none.
			if r := ask("web-2", ""); r.Prefetch == nil || r.Prefetch.Closure != v1("web-2") {
				t.Fatalf("web-2 is answered prefetch %+v, want %s", r.Prefetch, v1("web-2"))
			}
			for range 3 {
				if r := ask("web-3", ""); r.Prefetch != nil {
					t.Fatalf("web-3 is answered prefetch %+v while two hosts fetch", r.Prefetch)
				}
				// Renewals keep the slots.
				if r := ask("web-2", ""); r.Prefetch == nil {
					t.Fatal("web-2 lost its slot")
				}
			}
			m := e.metrics()
			if m["nixfleet_prefetch_slots_in_use"] != 2 || m["nixfleet_prefetch_granted_total"] != 2 {
				t.Fatalf("metrics: %v slots in use, %v granted; want 2 and 2", m["nixfleet_prefetch_slots_in_use"], m["nixfleet_prefetch_granted_total"])
			}

			// web-1 has it: its slot goes to web-3, and it is still told
			// that v1 is its coming target.
			if r := ask("web-1", v1("web-1")); r.Prefetch == nil || *r.Prefetch != want {
				t.Fatalf("web-1, holding its target, is answered prefetch %+v, want %+v", r.Prefetch, want)
			}
			// A long-poll that takes a slot is answered at once, not after
			// its 30 s.
			start := time.Now()
			if r := askWaiting("web-3", "", 30); r.Prefetch == nil || r.Prefetch.Closure != v1("web-3") {
				t.Fatalf("web-3 is answered prefetch %+v after web-1 gave its slot back", r.Prefetch)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("web-3's long-poll that took a slot was answered after %s", d)
			}
			m = e.metrics()
			if m["nixfleet_prefetch_slots_in_use"] != 2 || m["nixfleet_prefetch_granted_total"] != 3 {
				t.Fatalf("metrics: %v slots in use, %v granted; want 2 and 3", m["nixfleet_prefetch_slots_in_use"], m["nixfleet_prefetch_granted_total"])
			}

			// The status holds it, and the explanation says so; the
			// decisions do not change.
			op := e.client(e.viewKey.priv, "victor")
			e.await(10*time.Second, "web-1's explanation mentions its prefetched target", func() bool {
				v, _, err := op.Host(ctx, "web-1")
				return err == nil && v.Observed.Prefetched == v1("web-1") && strings.HasSuffix(v.Explain.Message, "; its target is prefetched") &&
					v.Explain.Code == codes.WaveNotActive
			})
			if v, _, err := op.Host(ctx, "web-2"); err != nil || v.Observed.Prefetched != "" || strings.Contains(v.Explain.Message, "prefetched") {
				t.Fatalf("web-2 (fetching, not done): %+v, %v", v, err)
			}
			b := e.browser()
			b.signIn(e.viewKey.priv, "victor")
			page := b.page("/ui/hosts/web-1", http.StatusOK)
			for _, want := range []string{"<dt>Prefetched</dt><dd><code>" + v1("web-1") + "</code> (its target: the dispatch only switches)</dd>",
				"its target is prefetched"} {
				if !strings.Contains(page, want) {
					t.Errorf("web-1's dashboard page does not show %q", want)
				}
			}
			if page := b.page("/ui/hosts/web-2", http.StatusOK); strings.Contains(page, "Prefetched") {
				t.Errorf("web-2's dashboard page shows a prefetched closure")
			}

			// The canary confirms; wave 1 is dispatched: targets, no
			// prefetch, no slot held.
			e.await(10*time.Second, "wave 1 is dispatched", func() bool {
				_ = hosts["canary"].Step(ctx, 0)
				r := ask("web-2", "")
				return r.Target != nil && r.Target.Kind == proto.TargetDispatch
			})
			for _, name := range []string{"web-1", "web-3"} {
				prefetched := ""
				if name == "web-1" {
					prefetched = v1(name)
				}
				if r := ask(name, prefetched); r.Target == nil || r.Prefetch != nil {
					t.Fatalf("%s in wave 1 is answered target %+v prefetch %+v, want its dispatch alone", name, r.Target, r.Prefetch)
				}
			}
			if m := e.metrics(); m["nixfleet_prefetch_slots_in_use"] != 0 {
				t.Fatalf("%v slots in use after wave 1 was dispatched", m["nixfleet_prefetch_slots_in_use"])
			}
			e.await(10*time.Second, "the rollout converges", func() bool {
				for _, h := range hosts {
					_ = h.Step(ctx, 0)
				}
				return rolloutState(t, e, id) == reconciler.RolloutConverged
			})
		})
	}
}
