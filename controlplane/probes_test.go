package controlplane_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// hostIn returns a host's entry in a rollout (zero when it is not there).
func hostIn(t *testing.T, e *env, id, host string) proto.RolloutHost {
	t.Helper()
	var r proto.Rollout
	if err := e.client(e.viewKey.priv, "victor").Get(context.Background(), "/v1/rollouts/"+id, &r); err != nil {
		return proto.RolloutHost{}
	}
	for _, h := range r.Hosts {
		if h.Hostname == host {
			return h
		}
	}
	return proto.RolloutHost{}
}

// TestProbeReport: a soaking canary's health comes from what the host
// reports. Check-ins that echo the server's status tag with an unchanged
// status write nothing; a probe_results report with a failing probe is
// recorded at once and fails the canary, which halts the rollout, without
// the host checking in again; the same report again writes nothing.
func TestProbeReport(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, smallSpec(), nil)
			hosts := e.hosts()
			ctx := context.Background()
			canary := hosts["canary"]
			defer func() {
				if t.Failed() {
					for _, n := range []int{1, 2} {
						var raw json.RawMessage
						_ = e.client(e.viewKey.priv, "victor").Get(ctx, "/v1/rollouts/"+rolloutID("stable", n), &raw)
						t.Logf("rollout %d: %s", n, raw)
					}
				}
			}()

			e.onboard(hosts)
			e.spec.Channels["stable"] = []int{5, 0} // from v1 on, the canary soaks five minutes
			e.release("v1", 2)
			id := rolloutID("stable", 2)
			e.await(10*time.Second, "the canary soaks in the new rollout", func() bool {
				_ = canary.Step(ctx, 0)
				return hostIn(t, e, id, "canary").State == string(reconciler.HostSoaking)
			})
			if err := canary.Step(ctx, 0); err != nil { // its first check-in of the soak
				t.Fatal(err)
			}

			// Healthy check-ins that echo the tag write nothing a tick
			// must see (last-seen times aside).
			e.settle()
			w0 := e.watermark()
			for range 3 {
				if err := canary.Step(ctx, 0); err != nil {
					t.Fatal(err)
				}
			}
			e.tick()
			if w := e.watermark(); w.Events != w0.Events || w.Changes != w0.Changes {
				t.Errorf("unchanged check-ins moved the watermark from %+v to %+v", w0, w)
			}
			if got := hostIn(t, e, id, "canary").State; got != string(reconciler.HostSoaking) {
				t.Fatalf("the canary is %s after healthy check-ins, want Soaking", got)
			}

			// A failing probe, reported between check-ins.
			canary.SetFailingProbes("http-ok")
			if err := canary.ReportProbes(ctx); err != nil {
				t.Fatal(err)
			}
			e.await(10*time.Second, "the rollout halts on the canary's probe", func() bool {
				return rolloutState(t, e, id) == reconciler.RolloutHalted
			})
			h := hostIn(t, e, id, "canary")
			if h.State != string(reconciler.HostFailed) || !strings.Contains(h.Reason.Message, "http-ok") {
				t.Errorf("the canary is %s (%s: %s), want Failed naming the probe http-ok", h.State, h.Reason.Code, h.Reason.Message)
			}
			if got := canary.Current(); got != fleetrepo.Closure("canary", "v1") {
				t.Errorf("the canary runs %s", got)
			}

			// The same results again are no news.
			e.settle()
			w0 = e.watermark()
			if err := canary.ReportProbes(ctx); err != nil {
				t.Fatal(err)
			}
			if err := canary.Step(ctx, 0); err != nil {
				t.Fatal(err)
			}
			e.tick()
			if w := e.watermark(); w.Events != w0.Events || w.Changes != w0.Changes {
				t.Errorf("a repeated probe report moved the watermark from %+v to %+v", w0, w)
			}
		})
	}
}
