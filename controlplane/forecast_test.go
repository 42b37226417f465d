package controlplane_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestForecastServed: the leader forecasts a rollout beside its ticks and
// every client reads it at GET /v1/rollouts/{id}/forecast. The store holds
// the hosts' activation times, which a replica started on it reads (the
// canary's 2 minutes, the web hosts' 4), and the forecast takes those, not
// --forecast-activation: the canary is dispatched now, wave 1 after the
// canary's switch and its 5-minute soak (held by the wave gate), and the
// rollout ends after wave 1's switch and 10-minute soak; the first
// forecast's end is kept as later ones replace it.
func TestForecastServed(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			spec := fleetrepo.Spec{Channels: map[string][]int{"stable": {5, 10}}, Hosts: []fleetrepo.Host{
				fleetrepo.NewHost("canary", "stable", 0), fleetrepo.NewHost("web-1", "stable", 1), fleetrepo.NewHost("web-2", "stable", 1)}}
			e := newEnv(t, backend, spec, func(c *controlplane.Config) { c.ForecastActivation = 3 * time.Minute })
			hosts := e.hosts()
			ctx := context.Background()
			viewer := e.client(e.viewKey.priv, "victor")
			// Onboard through the soaks: the clock stands still unless moved.
			for i := 0; ; i++ {
				for _, h := range hosts {
					_ = h.Step(ctx, 0)
				}
				var r proto.Rollout
				if viewer.Get(ctx, "/v1/rollouts/"+rolloutID("stable", 1), &r) == nil && r.Counts[string(reconciler.HostConverged)] == len(hosts) {
					break
				}
				if i == 60 {
					t.Fatalf("the hosts do not converge on the first release: %+v", r.Counts)
				}
				e.clock.Advance(time.Minute)
				e.tick()
			}
			// The hosts' times as a replica that measured them left them.
			e.stop()
			st, err := store.Open(ctx, e.cfg.DB)
			if err != nil {
				t.Fatal(err)
			}
			at := e.clock.Now()
			err = st.PutActivationTimes(ctx, []store.ActivationTime{{Host: "canary", Typical: 2 * time.Minute, Samples: 3, MeasuredAt: at},
				{Host: "web-1", Typical: 4 * time.Minute, Samples: 3, MeasuredAt: at}, {Host: "web-2", Typical: 4 * time.Minute, Samples: 3, MeasuredAt: at}})
			st.Close()
			if err != nil {
				t.Fatal(err)
			}
			e.start()
			viewer = e.client(e.viewKey.priv, "victor")
			for _, h := range hosts {
				h.Client = e.client(h.Key, h.Name) // the replica listens elsewhere now
			}
			id := rolloutID("stable", 2)

			var missing proto.Forecast
			err = viewer.Get(ctx, "/v1/rollouts/stable@nope/forecast", &missing)
			if ae := (*apiclient.Error)(nil); !errors.As(err, &ae) || ae.Code != codes.NotFound {
				t.Fatalf("the forecast of an unknown rollout: %v", err)
			}

			e.release("v1", 2)
			var f proto.Forecast
			e.await(10*time.Second, "a forecast of the new rollout", func() bool {
				return viewer.Get(ctx, "/v1/rollouts/"+id+"/forecast", &f) == nil
			})
			// The tick that opened it, not this test's reading of the
			// clock after the push, which the tick may precede.
			var r proto.Rollout
			if err := viewer.Get(ctx, "/v1/rollouts/"+id, &r); err != nil {
				t.Fatal(err)
			}
			opened := r.OpenedAt
			var raw json.RawMessage
			if err := viewer.Get(ctx, "/v1/rollouts/"+id+"/forecast", &raw); err != nil {
				t.Fatal(err)
			}
			if err := validateJSON(newOpenAPISchemas(t).response("GET", "/v1/rollouts/{id}/forecast", 200, "application/json"), raw); err != nil {
				t.Errorf("the forecast does not validate against schema/openapi.json: %v\n%s", err, raw)
			}
			if f.RolloutID != id || f.State != string(reconciler.RolloutConverged) || f.End == nil || f.Assumes.Measured != len(hosts) ||
				f.Assumes.Activation != "4m0s" {
				t.Fatalf("forecast: %+v waiting %+v assuming %+v", f, f.Waiting, f.Assumes)
			}
			// The canary was dispatched as the rollout opened, before the
			// forecast: wave 0 has no start in it, only its end.
			if len(f.Waves) != 2 || f.Waves[0].Done == nil || f.Waves[1].Start == nil || !f.Waves[1].Start.Equal(*f.Waves[0].Done) ||
				f.Waves[1].Gate == nil || f.Waves[1].Gate.Gate != codes.WaveNotActive {
				t.Fatalf("waves: %+v", f.Waves)
			}
			// The canary switches in its 2 minutes and soaks 5; the soak
			// ends at its first check-in after that, within a check-in
			// period. The web hosts take 4 and soak 10.
			period := reconciler.Tunables{}.CheckinPeriod()
			if w1 := f.Waves[1].Start.Sub(opened); w1 < 7*time.Minute || w1 > 7*time.Minute+period {
				t.Errorf("wave 1 starts %s after the rollout opened; want 7 minutes and at most a check-in period more", w1)
			}
			if d := f.End.Sub(*f.Waves[1].Start); d < 14*time.Minute || d > 14*time.Minute+period {
				t.Errorf("the rollout ends %s after wave 1 starts; want 14 minutes and at most a check-in period more", d)
			}
			if f.FirstEnd == nil || !f.FirstEnd.Equal(*f.End) || f.MadeAt.Before(opened.Add(-time.Minute)) {
				t.Errorf("first forecast: made %s, first %s end %v", f.MadeAt, f.FirstMadeAt, f.FirstEnd)
			}
			hostsOf := map[string]proto.ForecastHost{}
			for _, h := range f.Hosts {
				hostsOf[h.Host] = h
			}
			if h := hostsOf["web-1"]; h.Dispatch == nil || !h.Dispatch.Equal(*f.Waves[1].Start) || h.Converged == nil {
				t.Errorf("web-1: %+v", h)
			}

			// The canary switches: a later forecast replaces this one and
			// keeps the first one's end.
			first := *f.End
			for _, h := range hosts {
				_ = h.Step(ctx, 0)
			}
			e.clock.Advance(time.Minute)
			e.tick()
			e.await(10*time.Second, "a newer forecast", func() bool {
				var g proto.Forecast
				if viewer.Get(ctx, "/v1/rollouts/"+id+"/forecast", &g) != nil || !g.MadeAt.After(f.MadeAt) {
					return false
				}
				f = g
				return true
			})
			if f.FirstEnd == nil || !f.FirstEnd.Equal(first) {
				t.Errorf("the first forecast's end is %v, want %s", f.FirstEnd, first)
			}

			// The rollout runs its course: the journal has its first
			// forecast and, at its end, how far off that was; so does the
			// metric.
			for i := 0; rolloutState(t, e, id) != reconciler.RolloutConverged; i++ {
				if i == 60 {
					t.Fatalf("the rollout does not converge: %s", rolloutState(t, e, id))
				}
				for _, h := range hosts {
					_ = h.Step(ctx, 0)
				}
				e.clock.Advance(time.Minute)
				e.tick()
			}
			codesOf := func() map[string]string {
				evs, _, err := viewer.RolloutEvents(ctx, id, proto.EventQuery{})
				if err != nil {
					t.Fatal(err)
				}
				out := map[string]string{}
				for _, ev := range evs {
					if ev.Kind == controlplane.EventForecast {
						out[ev.Reason.Code] = ev.Reason.Message
					}
				}
				return out
			}
			e.await(10*time.Second, "the forecast's outcome in the journal", func() bool { return codesOf()[codes.ForecastOutcome] != "" })
			journal := codesOf()
			// Its hosts were quicker than the model, by less than a move
			// the journal reports; a forecast never saw a host fail.
			if !strings.HasPrefix(journal[codes.ForecastMade], "expected to end Converged at ") ||
				!strings.HasPrefix(journal[codes.ForecastOutcome], "ended Converged ") || journal[codes.ForecastMoved] != "" {
				t.Errorf("forecast events: %q", journal)
			}
			if !strings.Contains(e.metricsText(), `nixfleet_forecast_error_seconds{channel="stable"}`) {
				t.Error("no nixfleet_forecast_error_seconds for the channel")
			}

		})
	}
}
