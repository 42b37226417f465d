package reconciler_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

const forecastDir = "../testdata/forecast"

// A forecast golden case: an input, a model, and what the forecast must
// say of it (checked whatever the file holds, so that regenerating the
// files cannot change what a case shows).
type forecastCase struct {
	name  string
	desc  string
	build func(s *scenario) rc.Model
	check func(t *testing.T, f rc.ForecastResult)
}

// at is t0 plus minutes.
func at(minutes float64) time.Time { return t0.Add(time.Duration(minutes * float64(time.Minute))) }

var forecastCases = []forecastCase{
	{
		name: "waves-and-soaks",
		desc: "three with every host on line and the default model (2 minutes to switch): a at once, converged after its 5-minute soak; b and c when wave 0 is promoted, converged 12 minutes later",
		build: func(s *scenario) rc.Model {
			s.release(three(s).Build(), fleetkit.Commit(1)).online("a", "b", "c")
			return rc.Model{}
		},
		check: all2(wantEnd(rid("stable", 1), rc.RolloutConverged, at(19)),
			wantHost(rid("stable", 1), "a", at(0), at(7), ""),
			wantHost(rid("stable", 1), "b", at(7), at(19), codes.WaveNotActive),
			wantWave(rid("stable", 1), 1, at(7), at(19), codes.WaveNotActive)),
	},
	{
		name: "staged-hosts-rebooted",
		desc: "rule 17: four hosts in one wave, one in flight at a time, whose policy reboots staged hosts; a rebooting, b staged and waiting both for the budget and for a check-in saying its target is still staged: the model hears b check in, takes Model.Reboot (5 min by default) for each reboot, has c and d stage like a and b did before they are rebooted in turn, and the rollout ends converged once every host took its turn",
		build: func(s *scenario) rc.Model {
			// A report comes before the check-in that says the host is
			// staged: its status is from before.
			staleStatus := func(host string) {
				s.observe(host, func(o *rc.ObservedHost) { o.StatusAt = s.in.Now.Add(-time.Second) })
			}
			s.release(rebooting(s).Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Minute)
			stage(s, "a")
			staleStatus("a")
			s.tick().advance(time.Minute)
			stage(s, "b")
			staleStatus("b")
			s.observe("a", func(o *rc.ObservedHost) { o.StatusAt = s.in.Now })
			s.tick()
			if got := [2]rc.HostState{s.hostIn(id1, "a").State, s.hostIn(id1, "b").State}; got != [2]rc.HostState{rc.HostRebooting, rc.HostDeferred} {
				s.t.Fatalf("a and b are %v, want Rebooting and Deferred", got)
			}
			return rc.Model{}
		},
		check: func(t *testing.T, f rc.ForecastResult) {
			t.Helper()
			if r := rolloutOf(t, f, id1); r.State != rc.RolloutConverged || !r.End.After(t0) {
				t.Fatalf("%s: %s at %s, want Converged after %s", id1, r.State, r.End, t0)
			}
		},
	},
	{
		name: "staged-report-before-status",
		desc: "rule 17: a reported it staged its target, but the status on record is from before (it does not say so yet), while b stages: the model takes a's next check-in to say what it reported, as it takes a confirmed closure, so a is rebooted, not taken to have lost its target; every host converges",
		build: func(s *scenario) rc.Model {
			s.release(rebooting(s).Build(), fleetkit.Commit(1)).online("a", "b", "c", "d").tick().advance(time.Second)
			stage(s, "a")
			s.observe("a", func(o *rc.ObservedHost) { o.StatusAt = s.in.Now.Add(-time.Second) })
			s.tick()
			s.observe("a", func(o *rc.ObservedHost) { o.Deferred = false })
			if got := [2]rc.HostState{s.hostIn(id1, "a").State, s.hostIn(id1, "b").State}; got != [2]rc.HostState{rc.HostDeferred, rc.HostActivating} {
				s.t.Fatalf("a and b are %v, want Deferred and Activating", got)
			}
			return rc.Model{Activation: 17 * time.Millisecond}
		},
		check: func(t *testing.T, f rc.ForecastResult) {
			t.Helper()
			r := rolloutOf(t, f, id1)
			for _, h := range r.Hosts {
				if h.State != rc.HostConverged || h.Converged.IsZero() {
					t.Errorf("%s ends %s (converged %s), want Converged within the forecast", h.Host, h.State, h.Converged)
				}
			}
		},
	},
	{
		name: "window-across-dst",
		desc: "a window on Sundays from 20:00 Europe/Berlin, forecast on Saturday 28 March 2026: the clocks move to summer time that night, so it opens at 18:00 UTC, not 19:00",
		build: func(s *scenario) rc.Model {
			s.in.Now = time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)
			s.release(windowed(s, sundayEvening).Build(), fleetkit.Commit(1)).online("a", "b", "c")
			return rc.Model{}
		},
		check: all2(wantHost(rid("stable", 1), "a", time.Date(2026, 3, 29, 18, 0, 0, 0, time.UTC), time.Date(2026, 3, 29, 18, 7, 0, 0, time.UTC), codes.Window),
			wantWave(rid("stable", 1), 0, time.Date(2026, 3, 29, 18, 0, 0, 0, time.UTC), time.Time{}, codes.Window)),
	},
	{
		name: "freeze",
		desc: "a freeze of the channel for its first three hours: nothing is dispatched before it ends, then the rollout runs its course",
		build: func(s *scenario) rc.Model {
			f := withFreezes(three(s).Build(), proto.Freeze{From: at(-60), Until: at(180), Reason: "quarter-end close"})
			s.release(f, fleetkit.Commit(1)).online("a", "b", "c")
			return rc.Model{}
		},
		check: all2(wantHost(rid("stable", 1), "a", at(180), at(187), codes.Freeze),
			wantEnd(rid("stable", 1), rc.RolloutConverged, at(199))),
	},
	{
		name: "approval-owed",
		desc: "wave 1 needs an approval the model does not assume: the canary converges, wave 1 has no start, and the rollout says it waits for the approval",
		build: func(s *scenario) rc.Model {
			s.release(approving(s, 1).Build(), fleetkit.Commit(1)).online("a", "b", "c")
			return rc.Model{}
		},
		check: func(t *testing.T, f rc.ForecastResult) {
			t.Helper()
			r := rolloutOf(t, f, rid("stable", 1))
			if f.Cut != "waiting" || !r.End.IsZero() || r.Waiting.Gate != codes.Approval {
				t.Fatalf("cut %q, end %s, waiting %+v; want it waiting for an approval, without end", f.Cut, r.End, r.Waiting)
			}
			if !r.Waves[1].Start.IsZero() || !hostOf(t, r, "b").Dispatch.IsZero() {
				t.Fatalf("wave 1 starts at %s without its approval", r.Waves[1].Start)
			}
			wantHost(rid("stable", 1), "a", at(0), at(7), "")(t, f)
		},
	},
	{
		name: "approval-assumed",
		desc: "the same with the approval assumed two hours in: wave 1 starts then, held by the approval gate until then",
		build: func(s *scenario) rc.Model {
			s.release(approving(s, 2).Build(), fleetkit.Commit(1)).online("a", "b", "c")
			return rc.Model{Approvals: []rc.AssumedApproval{{RolloutID: rid("stable", 1), Wave: 1, At: at(120)}}}
		},
		check: all2(wantWave(rid("stable", 1), 1, at(120), at(132), codes.Approval),
			wantEnd(rid("stable", 1), rc.RolloutConverged, at(132))),
	},
	{
		name: "budget-bound-wave",
		desc: "one wave of four web hosts under a budget of one in flight, no soak, hosts taking 3, 2, 4 and 1 minutes: one after the other, each when the one before converged",
		build: func(s *scenario) rc.Model {
			b := fleetkit.New(s.t).Channel("stable", 0).
				Host("w1", "stable", 0, "web").Host("w2", "stable", 0, "web").Host("w3", "stable", 0, "web").Host("w4", "stable", 0, "web").
				Budget(proto.Selector{TagsAny: []string{"web"}}, 1, 0)
			s.release(b.Build(), fleetkit.Commit(1)).online("w1", "w2", "w3", "w4")
			return rc.Model{Hosts: map[string]rc.HostModel{"w1": {Activation: 3 * time.Minute}, "w3": {Activation: 4 * time.Minute}, "w4": {Activation: time.Minute}}}
		},
		check: all2(wantHost(rid("stable", 1), "w1", at(0), at(3), ""),
			wantHost(rid("stable", 1), "w2", at(3), at(5), codes.Budget),
			wantHost(rid("stable", 1), "w3", at(5), at(9), codes.Budget),
			wantHost(rid("stable", 1), "w4", at(9), at(10), codes.Budget),
			wantEnd(rid("stable", 1), rc.RolloutConverged, at(10))),
	},
	{
		name: "silent-host-back",
		desc: "c is silent when the forecast starts and the model says it is back at 13:00: wave 1 goes on without it (skipped), and it catches up when it is back",
		build: func(s *scenario) rc.Model {
			s.release(three(s).Build(), fleetkit.Commit(1)).online("a", "b").offline("c")
			return rc.Model{Hosts: map[string]rc.HostModel{"c": {Back: at(60)}}}
		},
		check: func(t *testing.T, f rc.ForecastResult) {
			t.Helper()
			r := rolloutOf(t, f, rid("stable", 1))
			c := hostOf(t, r, "c")
			if c.Dispatch.Before(at(60)) || c.Converged.IsZero() {
				t.Fatalf("c: dispatch %s, converged %s; want it dispatched once back at %s, and converged", c.Dispatch, c.Converged, at(60))
			}
			wantHost(rid("stable", 1), "b", at(7), at(19), codes.WaveNotActive)(t, f)
		},
	},
}

func all2(checks ...func(*testing.T, rc.ForecastResult)) func(*testing.T, rc.ForecastResult) {
	return func(t *testing.T, f rc.ForecastResult) {
		t.Helper()
		for _, c := range checks {
			c(t, f)
		}
	}
}

func rolloutOf(t *testing.T, f rc.ForecastResult, id string) rc.RolloutForecast {
	t.Helper()
	for _, r := range f.Rollouts {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no rollout %s in the forecast", id)
	return rc.RolloutForecast{}
}

func hostOf(t *testing.T, r rc.RolloutForecast, host string) rc.HostForecast {
	t.Helper()
	for _, h := range r.Hosts {
		if h.Host == host {
			return h
		}
	}
	t.Fatalf("no host %s in %s", host, r.ID)
	return rc.HostForecast{}
}

func wantEnd(id string, state rc.RolloutState, end time.Time) func(*testing.T, rc.ForecastResult) {
	return func(t *testing.T, f rc.ForecastResult) {
		t.Helper()
		if r := rolloutOf(t, f, id); r.State != state || !r.End.Equal(end) {
			t.Fatalf("%s: %s at %s, want %s at %s", id, r.State, r.End, state, end)
		}
	}
}

func wantHost(id, host string, dispatch, converged time.Time, gate string) func(*testing.T, rc.ForecastResult) {
	return func(t *testing.T, f rc.ForecastResult) {
		t.Helper()
		h := hostOf(t, rolloutOf(t, f, id), host)
		if !h.Dispatch.Equal(dispatch) || !h.Converged.Equal(converged) || h.Gate.Gate != gate {
			t.Fatalf("%s: dispatch %s, converged %s, gate %q; want %s, %s, %q", host, h.Dispatch, h.Converged, h.Gate.Gate, dispatch, converged, gate)
		}
	}
}

func wantWave(id string, wave int, start, done time.Time, gate string) func(*testing.T, rc.ForecastResult) {
	return func(t *testing.T, f rc.ForecastResult) {
		t.Helper()
		w := rolloutOf(t, f, id).Waves[wave]
		if !w.Start.Equal(start) || (!done.IsZero() && !w.Done.Equal(done)) || w.Gate.Gate != gate {
			t.Fatalf("wave %d: start %s, done %s, gate %q; want %s, %s, %q", wave, w.Start, w.Done, w.Gate.Gate, start, done, gate)
		}
	}
}

// forecastGolden is a case's file: what it forecasts from and what it
// forecast.
type forecastGolden struct {
	Description string            `json:"description"`
	Input       rc.Input          `json:"input"`
	Model       rc.Model          `json:"model"`
	Forecast    rc.ForecastResult `json:"forecast"`
}

// TestForecastGolden forecasts each case's input, checks what it must
// show, and compares the whole forecast with testdata/forecast/<case>.json
// (-update rewrites the files).
func TestForecastGolden(t *testing.T) {
	for _, c := range forecastCases {
		t.Run(c.name, func(t *testing.T) {
			s := newScenario(t)
			m := c.build(s)
			f := rc.Forecast(s.in, m)
			c.check(t, f)
			path := filepath.Join(forecastDir, c.name+".json")
			if *update {
				s.in.Description = c.desc
				b, err := json.MarshalIndent(forecastGolden{Description: c.desc, Input: s.in, Model: m, Forecast: f}, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(forecastDir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			var g forecastGolden
			if err := json.Unmarshal(data, &g); err != nil {
				t.Fatal(err)
			}
			// The file's own input gives the file's forecast: a file can
			// be read and replayed without the builders.
			got, _ := json.Marshal(rc.Forecast(g.Input, g.Model))
			want, _ := json.Marshal(g.Forecast)
			if string(got) != string(want) {
				t.Fatalf("%s: the forecast of its input differs from the file's (run with -update and review the diff)", path)
			}
			mine, _ := json.Marshal(f)
			if string(mine) != string(want) {
				t.Fatalf("%s: the case's forecast differs from the file's (run with -update and review the diff)", path)
			}
		})
	}
}

// A forecast is pure: it leaves its input as it was, and gives the same
// result twice.
func TestForecastIsPure(t *testing.T) {
	s := newScenario(t)
	s.release(approving(s, 1).Build(), fleetkit.Commit(1)).online("a", "b").offline("c")
	before, _ := json.Marshal(s.in)
	m := rc.Model{Approvals: []rc.AssumedApproval{{RolloutID: rid("stable", 1), Wave: 1, At: at(30)}}}
	a, _ := json.Marshal(rc.Forecast(s.in, m))
	after, _ := json.Marshal(s.in)
	b, _ := json.Marshal(rc.Forecast(s.in, m))
	if string(before) != string(after) {
		t.Error("the forecast changed its input")
	}
	if string(a) != string(b) {
		t.Error("two forecasts of one input differ")
	}
	// With the rollout open, its hosts listed in the input: the
	// forecast's ticks move them in its own copy only.
	open := rc.Apply(s.in, rc.Reconcile(s.in))
	before, _ = json.Marshal(open)
	rc.Forecast(open, m)
	if after, _ := json.Marshal(open); string(before) != string(after) {
		t.Error("the forecast changed the host lists of its input")
	}
}

// The bounds hold: a forecast stops at its horizon and at its tick bound,
// and says so.
func TestForecastBounds(t *testing.T) {
	s := newScenario(t)
	s.release(three(s).Build(), fleetkit.Commit(1)).online("a", "b", "c")
	if f := rc.Forecast(s.in, rc.Model{Horizon: 10 * time.Minute}); f.Cut != "horizon" || f.Until.After(at(10)) {
		t.Errorf("horizon 10m: cut %q until %s", f.Cut, f.Until)
	}
	if f := rc.Forecast(s.in, rc.Model{MaxTicks: 3}); f.Cut != "ticks" || f.Ticks != 3 {
		t.Errorf("3 ticks: cut %q after %d", f.Cut, f.Ticks)
	}
}

// A ref that does not open within the forecast is listed with what it
// waits for: here the channel's active rollout, whose next wave is owed
// an approval the model does not assume.
func TestForecastUnopened(t *testing.T) {
	s := newScenario(t)
	b := approving(s, 1)
	s.release(b.Build(), fleetkit.Commit(1)).online("a", "b", "c").tick().advance(time.Minute)
	s.release(b.Bump("v2").Build(), fleetkit.Commit(2))
	f := rc.Forecast(s.in, rc.Model{})
	if len(f.Unopened) != 1 || f.Unopened[0].RolloutID != rid("stable", 2) || f.Unopened[0].Waiting.Code != codes.RefWaiting {
		t.Fatalf("unopened: %+v", f.Unopened)
	}
}

// A confirm on record before the check-in that carries its closure (the
// status write lags the confirm): the host soaks, and the forecast takes
// it to run what it confirmed from its next check-in on, not to have
// failed on its old closure.
func TestForecastTakesConfirmedClosure(t *testing.T) {
	s := newScenario(t)
	started(s)
	s.confirm(id1, "a").tick()
	if h := s.hostIn(id1, "a"); h.State != rc.HostSoaking {
		t.Fatalf("a is %s, want it soaking on its confirm", h.State)
	}
	// What the control plane holds: the check-in before the confirm.
	s.observe("a", func(o *rc.ObservedHost) {
		o.Current, o.Booted = fleetkit.Closure("a", "v0"), fleetkit.Closure("a", "v0")
		o.LastSeen = o.Activation.At.Add(-time.Millisecond)
	})
	f := rc.Forecast(s.in, rc.Model{})
	if r := rolloutOf(t, f, id1); r.State != rc.RolloutConverged || hostOf(t, r, "a").State != rc.HostConverged {
		t.Fatalf("forecast: %s, a %s; want both converged", r.State, hostOf(t, r, "a").State)
	}
}
