package reconciler_test

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/nixfleet/nixfleet/analysis"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// The forecast's promise (rfcs/0014): when the hosts behave as
// its model says, it is what the control plane does, host by host. The
// control plane here is a loop of its own, as nixfleet-cp runs ticks: at
// the time the last tick asked to be woken, and when a host reports; its
// agents check in every minute at their own phase (not all the time, as
// the forecast's model hears them), take as long as the model says to
// switch, and an analysis is measured when it is due.
//
// The forecast is made before the first tick, or from the state the
// driven control plane is in after a drawn number of ticks: hosts
// activating, soaking, analyses running, approvals filed.
func TestPropertyForecastIsWhatHappens(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		o := fleetGenOpts{maxHosts: 10, changeControl: rapid.Bool().Draw(t, "changeControl"), analysis: rapid.Bool().Draw(t, "analysis")}
		s := newFleetSim(t, o, true)
		m := drawModel(t, s.in)
		warm := 0
		if rapid.Bool().Draw(t, "midway") {
			warm = rapid.IntRange(1, 40).Draw(t, "warmTicks")
		}
		var from rc.Input
		fm := m
		taken := false
		want := drive(t, s.in, m, warm, func(in rc.Input, filed map[int]bool) {
			from, taken = in, true
			fm.Approvals = nil
			for i, ap := range m.Approvals {
				if !filed[i] {
					fm.Approvals = append(fm.Approvals, ap)
				}
			}
		})
		if !taken {
			return // it ended before
		}
		compareForecast(t, rc.Forecast(from, fm), want, warm)
	})
}

// drawModel draws how long each host takes to switch (all under the
// confirm window), how long it takes to learn a target, and when each
// approval a wave needs is given (some never).
func drawModel(t *rapid.T, in rc.Input) rc.Model {
	// Two days: a control plane waiting for what no time brings (an
	// approval never given) ticks every minute or two for its hosts'
	// check-ins, and the driven one must end.
	m := rc.Model{Activation: time.Duration(rapid.IntRange(10, 240).Draw(t, "activationSeconds")) * time.Second,
		Hosts: map[string]rc.HostModel{}, Horizon: 48 * time.Hour}
	if rapid.Bool().Draw(t, "learnDelay") {
		m.Learn = time.Duration(rapid.IntRange(1, 30).Draw(t, "learnSeconds")) * time.Second
	}
	for _, name := range slices.Sorted(maps.Keys(in.Hosts)) {
		if rapid.IntRange(0, 2).Draw(t, "ownActivation") == 0 {
			m.Hosts[name] = rc.HostModel{Activation: time.Duration(rapid.IntRange(5, 280).Draw(t, "hostActivationSeconds")) * time.Second}
		}
	}
	for _, ch := range in.Channels {
		if ch.Fleet == nil {
			continue
		}
		for wave, w := range ch.Fleet.RolloutPolicies[ch.Fleet.Channels[ch.Name].RolloutPolicy].Waves {
			if w.Approval.Need() == 0 || rapid.IntRange(0, 3).Draw(t, "approvalNever") == 0 {
				continue
			}
			at := in.Now.Add(time.Duration(rapid.IntRange(0, 6*60).Draw(t, "approvalMinutes")) * time.Minute)
			m.Approvals = append(m.Approvals, rc.AssumedApproval{RolloutID: proto.RolloutID(ch.Name, ch.Ref), Wave: wave, At: at})
		}
	}
	return m
}

// happened is what the driven control plane did: by rollout and host.
type happened struct {
	dispatch, converged map[[2]string]time.Time
	end                 map[string]time.Time
	state               map[string]rc.RolloutState
	// tick is the driven tick (its number) of each of those, by
	// "dispatch/<rollout>/<host>", "converged/…" and "end/<rollout>".
	tick map[string]int
}

type drivenAgent struct {
	anchor     time.Time // it checks in at anchor + k periods: its last report, or its last check-in before the run
	activation time.Duration
	learn      time.Duration
	connected  bool
}

type step struct {
	at   time.Time
	host string
	done bool // else started
	act  rc.HostAction
}

// drive runs the control plane's ticks with agents that behave as m says.
// Before its tick number warm, it hands snap a copy of the state it is in
// and the approvals it has filed.
func drive(t *rapid.T, in rc.Input, m rc.Model, warm int, snap func(rc.Input, map[int]bool)) happened {
	period := cmpOr(m.Checkin, in.Tunables.CheckinPeriod())
	h := happened{dispatch: map[[2]string]time.Time{}, converged: map[[2]string]time.Time{}, end: map[string]time.Time{}, state: map[string]rc.RolloutState{},
		tick: map[string]int{}}
	agents := map[string]*drivenAgent{}
	for _, name := range slices.Sorted(maps.Keys(in.Hosts)) {
		hm := m.Hosts[name]
		agents[name] = &drivenAgent{anchor: in.Hosts[name].LastSeen,
			activation: cmpOr(hm.Activation, m.Activation, rc.DefaultForecastActivation), learn: cmpOr(hm.Learn, m.Learn),
			connected: !in.Tunables.Late(in.Hosts[name].LastSeen, in.Now)}
	}
	in.Hosts = maps.Clone(in.Hosts)
	var steps []step
	var measures []rc.Measurement
	measured := map[string]bool{}
	filed := map[int]bool{}
	horizon := in.Now.Add(m.Horizon)
	for i := range 20000 {
		now := in.Now
		for name, a := range agents {
			if !a.connected {
				continue
			}
			o := in.Hosts[name]
			last := a.anchor
			for !last.Add(period).After(now) {
				last = last.Add(period)
			}
			o.LastSeen, o.StatusAt = last, last
			in.Hosts[name] = o
		}
		// What a control plane holds between ticks: every check-in so far.
		if i == warm && snap != nil {
			c := in
			c.Hosts = maps.Clone(in.Hosts)
			c.Rollouts = slices.Clone(in.Rollouts)
			for j := range c.Rollouts {
				c.Rollouts[j].Hosts = slices.Clone(c.Rollouts[j].Hosts)
			}
			c.Intents, c.Measurements = slices.Clone(in.Intents), slices.Clone(in.Measurements)
			snap(c, maps.Clone(filed))
		}
		for i, ap := range m.Approvals {
			if filed[i] || ap.At.After(now) || !slices.ContainsFunc(in.Rollouts, func(r rc.Rollout) bool { return r.ID == ap.RolloutID }) {
				continue
			}
			filed[i] = true
			for k := range 3 { // enough distinct approvers for any wave drawn
				wave := ap.Wave
				in.Intents = append(in.Intents, rc.Intent{ID: fmt.Sprintf("ap-%d-%d", i, k), RolloutID: ap.RolloutID, Kind: rc.IntentApprove,
					Actor: "approver-" + strconv.Itoa(k), At: now, Wave: &wave})
			}
		}
		out := rc.Reconcile(in)
		in = rc.Apply(in, out)
		for _, a := range out.Actions {
			k := [2]string{a.RolloutID, a.Host}
			if _, ok := h.dispatch[k]; !ok && a.Kind == rc.ActionDispatch {
				h.dispatch[k] = now
				h.tick["dispatch/"+k[0]+"/"+k[1]] = i
			}
			ag := agents[a.Host]
			start := now.Add(ag.learn)
			steps = append(steps, step{at: start, host: a.Host, act: a}, step{at: start.Add(ag.activation), host: a.Host, done: true, act: a})
		}
		for _, u := range out.Hosts {
			k := [2]string{u.RolloutID, u.Host.Hostname}
			if _, ok := h.converged[k]; !ok && u.Host.State == rc.HostConverged {
				h.converged[k] = now
				h.tick["converged/"+k[0]+"/"+k[1]] = i
			}
		}
		for _, u := range out.Rollouts {
			h.state[u.Rollout.ID] = u.Rollout.State
			if _, ok := h.end[u.Rollout.ID]; !ok && u.Rollout.State.Terminal() {
				h.end[u.Rollout.ID] = now
				h.tick["end/"+u.Rollout.ID] = i
			}
		}
		for _, req := range out.Measure {
			key := fmt.Sprintf("%s/%d/%s/%d", req.RolloutID, req.Wave, req.Analysis, req.Seq)
			if !measured[key] {
				measured[key] = true
				measures = append(measures, rc.Measurement{RolloutID: req.RolloutID, Wave: req.Wave, Analysis: req.Analysis, Seq: req.Seq,
					At: maxTime(req.At, now), Query: "q", Samples: []proto.MetricSample{{Value: healthyValue(in, req)}}})
			}
		}
		over := len(steps) == 0
		for _, r := range in.Rollouts {
			over = over && r.State.Terminal()
		}
		for _, c := range in.Channels {
			over = over && (c.Ref == "" || c.Ref == c.LastRolledRef)
		}
		if over {
			return h
		}
		next := out.WakeAt
		if out.More {
			next = now
		}
		soonest := func(at time.Time) {
			at = maxTime(at, now)
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		for _, st := range steps {
			soonest(st.at)
		}
		for _, ms := range measures {
			soonest(ms.At)
		}
		for i, ap := range m.Approvals {
			if !filed[i] && (ap.At.After(now) || slices.ContainsFunc(in.Rollouts, func(r rc.Rollout) bool { return r.ID == ap.RolloutID })) {
				soonest(ap.At) // filed as an intent, which makes a tick
			}
		}
		// The check-in that ends a soak reaches a tick at once.
		for _, r := range in.Rollouts {
			for _, rh := range r.Hosts {
				if a := agents[rh.Hostname]; rh.State == rc.HostSoaking && a.connected {
					c := a.anchor
					for c.Before(rh.Since.Add(r.WaveSoak(rh.Wave))) {
						c = c.Add(period)
					}
					if c.After(now) {
						soonest(c)
					}
				}
			}
		}
		if next.IsZero() || next.After(horizon) {
			return h
		}
		in.Now = next
		slices.SortStableFunc(steps, func(a, b step) int { return a.at.Compare(b.at) })
		for len(steps) > 0 && !steps[0].at.After(next) {
			st := steps[0]
			steps = steps[1:]
			o := in.Hosts[st.host]
			outcome := rc.OutcomeStarted
			if st.done {
				outcome = rc.OutcomeConfirmed
				o.Current, o.Booted, o.Deferred, o.Probes.Failed, o.FailedUnits = st.act.Target, st.act.Target, false, nil, nil
			}
			o.Activation = &rc.Activation{RolloutID: st.act.RolloutID, Closure: st.act.Target, Outcome: outcome, At: st.at}
			o.LastSeen, o.StatusAt = st.at, st.at
			agents[st.host].anchor = st.at
			in.Hosts[st.host] = o
		}
		keep := measures[:0]
		for _, ms := range measures {
			if ms.At.After(next) {
				keep = append(keep, ms)
			} else {
				in.Measurements = append(slices.Clip(in.Measurements), ms)
			}
		}
		measures = keep
	}
	t.Fatalf("the driven control plane did not settle in 20000 ticks")
	return h
}

func cmpOr(ds ...time.Duration) time.Duration {
	for _, d := range ds {
		if d != 0 {
			return d
		}
	}
	return 0
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// healthyValue is a result that passes the analysis a request is for.
func healthyValue(in rc.Input, req rc.MeasureRequest) string {
	for _, r := range in.Rollouts {
		for _, a := range r.HealthGate.Analysis {
			if r.ID != req.RolloutID || a.Name != req.Analysis {
				continue
			}
			ok, _ := analysis.ParseCondition(a.SuccessCondition)
			bad, errBad := analysis.ParseCondition(a.FailureCondition)
			for _, d := range []float64{0, -1, 1, -0.5, 0.5} {
				if v := ok.Value + d; ok.Holds(v) && (errBad != nil || !bad.Holds(v)) {
					return strconv.FormatFloat(v, 'g', -1, 64)
				}
			}
		}
	}
	return "0"
}

// compareForecast holds a forecast made before the driven tick number
// from to what the driven control plane did from that tick on.
func compareForecast(t *rapid.T, got rc.ForecastResult, want happened, from int) {
	since := func(key string, at time.Time) time.Time {
		if i, ok := want.tick[key]; !ok || i < from {
			return time.Time{}
		}
		return at
	}
	for _, r := range got.Rollouts {
		if end := since("end/"+r.ID, want.end[r.ID]); !r.End.Equal(end) || (r.State != want.state[r.ID] && want.state[r.ID] != "") {
			t.Fatalf("rollout %s: forecast %s at %s (%s: %s), driven %s at %s", r.ID, r.State, r.End, r.Waiting.Code, r.Waiting.Message, want.state[r.ID], end)
		}
		for _, hf := range r.Hosts {
			k := [2]string{r.ID, hf.Host}
			if d := since("dispatch/"+r.ID+"/"+hf.Host, want.dispatch[k]); !hf.Dispatch.Equal(d) {
				t.Fatalf("%s in %s: forecast dispatch %s, driven %s", hf.Host, r.ID, hf.Dispatch, d)
			}
			if c := since("converged/"+r.ID+"/"+hf.Host, want.converged[k]); !hf.Converged.Equal(c) {
				t.Fatalf("%s in %s: forecast converged %s, driven %s", hf.Host, r.ID, hf.Converged, c)
			}
		}
	}
	for id, end := range want.end {
		if want.tick["end/"+id] >= from && !slices.ContainsFunc(got.Rollouts, func(r rc.RolloutForecast) bool { return r.ID == id }) {
			t.Fatalf("rollout %s ended at %s, and the forecast does not know it", id, end)
		}
	}
}
