package main

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestForecastInRealTime, with real processes on the real clock
// (nixfleet-cp serving on PostgreSQL, the nixfleet CLI, agents in 10-second
// long-polls over mutual TLS): a release whose canary soaks a minute and
// whose maintenance window, in Europe/Berlin, opens about a minute after
// the push (rfcs/0014).
//
//   - The release before it measures each host's activation, and the
//     forecast takes those times (assumes.measured).
//   - The first forecast dispatches the canary when the window opens, held
//     by the window gate, and wave 1 after the canary's soak; `nixfleet
//     rollout plan`, `nixfleet host explain` and the dashboard's rollout
//     page show it.
//   - The rollout converges, and the journal and
//     nixfleet_forecast_error_seconds record how far off the first
//     forecast was: less than the check-in period and a tick's slack.
func TestForecastInRealTime(t *testing.T) {
	t.Parallel()
	spec := twoWaveSpec()
	f := newGitFleet(t, spec)
	site := newSite(t)
	v0 := f.Release("v0")
	const checkin = 10 * time.Second // a quarter of the offline threshold
	cp := startCP(t, site, f, dbURL(t, "postgres"), "cp-1", "--offline-threshold", "40s")
	hosts := fleetHosts(f, cp)
	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Go(func() { h.Run(runCtx, checkin) })
	}
	defer func() { cancel(); wg.Wait() }()
	eventually(t, time.Minute, "the hosts onboard", func() bool {
		ro, ok := getRollout(cp, v0)
		return ok && ro.State == string(reconciler.RolloutConverged)
	})

	// A release without soak or window: every host's activation is
	// measured.
	v1 := f.Release("v1")
	cp.Hook()
	eventually(t, time.Minute, v1+" converges", func() bool {
		ro, ok := getRollout(cp, v1)
		return ok && ro.State == string(reconciler.RolloutConverged)
	})

	// The window opens at the first whole minute at least 40 s away.
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	open := time.Now().Truncate(time.Minute).Add(time.Minute)
	if time.Until(open) < 40*time.Second {
		open = open.Add(time.Minute)
	}
	local := open.In(berlin)
	f.Spec.Channels["stable"] = []int{1, 0}
	f.Spec.Windows = []proto.Window{{Days: []string{strings.ToLower(local.Weekday().String()[:3])},
		Start: local.Format("15:04"), DurationMinutes: 30, TimeZone: "Europe/Berlin"}}
	v2 := f.Release("v2")
	cp.Hook()

	var fc proto.Forecast
	eventually(t, 20*time.Second, "a forecast of "+v2, func() bool {
		return cp.Operator().Get(ctx, "/v1/rollouts/"+v2+"/forecast", &fc) == nil
	})
	if !time.Now().Before(open) {
		t.Fatalf("the forecast came after the window opened (%s)", open)
	}
	t.Logf("forecast made %s: window opens %s, wave 1 %v, end %v", fc.MadeAt.Format(time.RFC3339Nano), open.Format(time.RFC3339), fc.Waves[1].Start, fc.End)
	if fc.State != string(reconciler.RolloutConverged) || fc.End == nil || fc.Assumes.Measured != len(hosts) || fc.Assumes.Checkin != checkin.String() {
		t.Fatalf("forecast: state %s end %v assumes %+v", fc.State, fc.End, fc.Assumes)
	}
	w0, w1 := fc.Waves[0], fc.Waves[1]
	if w0.Start == nil || !w0.Start.Equal(open) || w0.Gate == nil || w0.Gate.Gate != codes.Window || !strings.Contains(w0.Gate.Message, "Europe/Berlin") {
		t.Fatalf("wave 0 starts %v after %+v; want %s, after the window gate", w0.Start, w0.Gate, open)
	}
	if w1.Start == nil || w1.Start.Sub(open) < time.Minute || w1.Start.Sub(open) > time.Minute+checkin+time.Second {
		t.Fatalf("wave 1 starts %v; want a soak of a minute, and at most a check-in period, after %s", w1.Start, open)
	}

	// Where the operator looks: the CLI and the dashboard.
	cli := cliAs(t, site, cp, site.opKey)
	plan, _ := cli(0, "rollout", "plan", v2)
	for _, want := range []string{"ends ", "Converged", "[window] outside its maintenance window; the next opens", "Europe/Berlin",
		"(3 of its hosts: their own measured time)"} {
		if !strings.Contains(plan, want) {
			t.Errorf("rollout plan lacks %q:\n%s", want, plan)
		}
	}
	explain, _ := cli(0, "host", "explain", "web-1")
	if !regexp.MustCompile(`(?m)^  expected +dispatched at .*after \[wave_not_active\]`).MatchString(explain) {
		t.Errorf("host explain does not say when web-1 is expected to move:\n%s", explain)
	}
	page := dashboardPage(t, cp, "/ui/rollouts/"+v2)
	for _, want := range []string{"Expected to end <strong>Converged</strong>", "Europe/Berlin", "3 of its hosts: their own measured time", "timeline-bar"} {
		if !strings.Contains(page, want) {
			t.Errorf("the dashboard's rollout page lacks %q", want)
		}
	}

	// The rollout runs on the real clock, and its forecast's error is
	// recorded.
	eventually(t, time.Until(open)+3*time.Minute, v2+" converges", func() bool {
		ro, ok := getRollout(cp, v2)
		return ok && ro.State == string(reconciler.RolloutConverged)
	})
	var outcome *proto.Event
	eventually(t, 10*time.Second, "the forecast's outcome is journalled", func() bool {
		for _, e := range rolloutEvents(t, cp, v2) {
			if e.Kind == controlplane.EventForecast && e.Reason.Code == codes.ForecastOutcome {
				outcome = &e
				return true
			}
		}
		return false
	})
	off := metric(t, cp, `nixfleet_forecast_error_seconds{channel="stable"}`)
	t.Logf("%s: %s; the metric says %.1f s", outcome.Reason.Code, outcome.Reason.Message, off)
	if limit := (checkin + 5*time.Second).Seconds(); off < -limit || off > limit {
		t.Errorf("the first forecast was %.1f s off; want within %.0f s", off, limit)
	}
	if !strings.Contains(outcome.Reason.Message, "ended Converged") {
		t.Errorf("forecast outcome: %s", outcome.Reason.Message)
	}
}

// dashboardPage signs in to a replica's dashboard with the operator's
// one-time link and returns a page's HTML.
func dashboardPage(t *testing.T, r *replica, path string) string {
	t.Helper()
	login, _, err := r.Operator().WebLogin(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	browser := r.httpClient()
	browser.Jar = jar
	for _, p := range []string{login.Path, path} {
		res, err := browser.Get(r.URL() + p)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", p, res.StatusCode, err)
		}
		if p == path {
			return string(body)
		}
	}
	return ""
}
