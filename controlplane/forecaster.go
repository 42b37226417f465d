package controlplane

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/kept"
	"github.com/nixfleet/nixfleet/controlplane/notify"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// forecaster makes the leader's forecasts (rfcs/0014) beside its ticks:
// after a committed tick that decided something, from the state that tick
// left, one at a time, and records them in the store, where every replica
// serves them. A tick that decides while one runs is not lost: the next
// forecast starts when the running one ends, from the state then. The
// tick never waits for a forecast, only, when one starts, for the copy of
// the kept input it starts from.
type forecaster struct {
	st     store.Store
	log    *slog.Logger
	model  reconciler.Model
	keeper *kept.Keeper
	// made is how long forecasts take; errors how far off a rollout's
	// first forecast was, by channel, when the rollout ends.
	made   prometheus.Histogram
	errors *prometheus.GaugeVec

	mu sync.Mutex
	// seed is what a forecast takes from the last tick that decided: its
	// time, tunables and watch, and its channels as it left them; the
	// rest is the kept input, which that tick left.
	seed reconciler.Input
	// pending: a tick decided something no forecast started from yet;
	// running: a forecast runs.
	pending, running bool
	// told is the end the journal last said of each rollout (zero: that
	// it does not end), by id; told[id] absent: nothing said yet by this
	// replica.
	told map[string]time.Time
	// dispatched is when each host in Activating was dispatched, by
	// rollout and host, as the ticks decided it (ticks only); samples the
	// activations measured since the forecasting loop last took them:
	// dispatch to confirm.
	dispatched map[[2]string]time.Time
	samples    []store.ActivationTime
	// ordered is when each Rebooting host was ordered to reboot, by
	// rollout and host; reboots the boots measured since the forecasting
	// loop last took them: order to confirm (rule 17).
	ordered map[[2]string]time.Time
	reboots []time.Duration
	// rebootTimes are the last maxRebootTimes reboots the leader
	// measured, the model of a reboot (the forecasting loop's alone; not
	// kept in the store: a new leader takes the default until it
	// measures one).
	rebootTimes []time.Duration
	// times is what the leader measured of each host's activations, the
	// model of it (the forecasting loop's alone); loaded once it has read
	// the store's.
	times  map[string]store.ActivationTime
	loaded bool
	// restUntil is when the forecasting loop may start its next forecast
	// (forecastRest; the loop's alone).
	restUntil time.Time
	wg        sync.WaitGroup
}

func newForecaster(st store.Store, log *slog.Logger, m *metrics, model reconciler.Model, k *kept.Keeper) *forecaster {
	f := &forecaster{st: st, log: log, model: model, keeper: k, told: map[string]time.Time{}, pending: true,
		dispatched: map[[2]string]time.Time{}, ordered: map[[2]string]time.Time{}, times: map[string]store.ActivationTime{},
		made: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nixfleet_forecast_duration_seconds", Help: "Time to make a forecast of the live rollouts (rfcs/0014), beside the ticks.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
		}),
		errors: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nixfleet_forecast_error_seconds", Help: "How much later than its first forecast said the channel's last ended rollout ended (negative: earlier).",
		}, []string{"channel"}),
	}
	m.reg.MustRegister(f.made, f.errors)
	return f
}

// decided notes what a tick decided, from within it (the kept input it
// leaves is applied once the tick commits): the seed of the next forecast,
// and whether one is due (the tick changed something, or none was made).
func (f *forecaster) decided(in reconciler.Input, out reconciler.Output) {
	seed := reconciler.Input{Now: in.Now, Tunables: in.Tunables, WatchingSince: in.WatchingSince, Channels: slices.Clone(in.Channels)}
	for _, u := range out.Channels {
		for i := range seed.Channels {
			if seed.Channels[i].Name == u.Name {
				seed.Channels[i].LastRolledRef = u.LastRolledRef
			}
		}
	}
	changed := len(out.Rollouts)+len(out.Hosts)+len(out.Events) > 0
	f.mu.Lock()
	f.seed, f.pending = seed, f.pending || changed
	f.measure(in, out)
	f.mu.Unlock()
}

// measure takes the activations a tick saw end from its output (under
// f.mu): a host's time from its dispatch (entering Activating) to its
// confirm (leaving it for Soaking, or Converged). Hosts dispatched before
// this replica led, or while another did, are not measured. Its cost is
// the tick's host updates, and the hosts of rollouts it opened.
func (f *forecaster) measure(in reconciler.Input, out reconciler.Output) {
	live := map[string]bool{}
	for _, r := range in.Rollouts {
		live[r.ID] = true
	}
	for _, u := range out.Rollouts {
		live[u.Rollout.ID] = true
		if !u.New {
			continue
		}
		for _, h := range u.Rollout.Hosts {
			if h.State == reconciler.HostActivating {
				f.dispatched[[2]string{u.Rollout.ID, h.Hostname}] = h.Since
			}
		}
	}
	for _, m := range []map[[2]string]time.Time{f.dispatched, f.ordered} {
		for key := range m {
			if !live[key[0]] {
				delete(m, key) // its rollout left while another replica led
			}
		}
	}
	for _, u := range out.Hosts {
		to := u.Host.State
		if d, ok := stay(f.dispatched, reconciler.HostActivating, u); ok && (to == reconciler.HostSoaking || to == reconciler.HostConverged) {
			f.samples = append(f.samples, store.ActivationTime{Host: u.Host.Hostname, Typical: d, Samples: 1, MeasuredAt: u.Host.Since})
		}
		if d, ok := stay(f.ordered, reconciler.HostRebooting, u); ok && to == reconciler.HostSoaking {
			f.reboots = append(f.reboots, d)
		}
	}
}

// stay follows hosts through state in a tick's update: it notes in since
// when a host enters it, and says how long it stayed when it leaves (false
// for one not seen entering).
func stay(since map[[2]string]time.Time, state reconciler.HostState, u reconciler.HostUpdate) (time.Duration, bool) {
	key := [2]string{u.RolloutID, u.Host.Hostname}
	switch {
	case u.Host.State == state && u.From != state:
		since[key] = u.Host.Since
	case u.From == state && u.Host.State != state:
		at, ok := since[key]
		delete(since, key)
		if d := u.Host.Since.Sub(at); ok && d > 0 {
			return d, true
		}
	}
	return 0, false
}

// kick starts forecasting in the background after a committed tick, if a
// forecast is due and none runs; it goes on while ticks decide something
// meanwhile.
func (f *forecaster) kick(ctx context.Context) {
	f.mu.Lock()
	if f.running || !f.pending {
		f.mu.Unlock()
		return
	}
	f.running = true
	f.mu.Unlock()
	f.wg.Go(func() {
		for {
			f.rest(ctx)
			f.mu.Lock()
			if !f.pending || ctx.Err() != nil {
				f.running = false
				f.mu.Unlock()
				return
			}
			f.pending = false
			seed, samples, reboots := f.seed, f.samples, f.reboots
			f.samples, f.reboots = nil, nil
			f.mu.Unlock()
			f.learn(ctx, samples)
			f.learnReboots(reboots)
			in, ok := f.input(seed)
			if !ok {
				f.mu.Lock()
				f.running = false // the next tick loads in full and kicks again
				f.mu.Unlock()
				return
			}
			began := time.Now()
			f.run(ctx, in)
			f.restUntil = time.Now().Add(forecastRest * time.Since(began))
		}
	})
}

// forecastRest is how many times as long as a forecast took the
// forecasting loop rests before it starts the next: forecasting takes at
// most a quarter of one core over time, and between forecasts a replica
// of a large fleet is quiet long enough to give back the memory one used
// (memory.go). At 100,000 hosts a forecast can take minutes.
const forecastRest = 3

// rest waits until the forecasting loop may start the next forecast, or
// ctx ends.
func (f *forecaster) rest(ctx context.Context) {
	if d := time.Until(f.restUntil); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

// input is what a forecast starts from: the kept input (copied under its
// lock, so a tick waits only for the copy) with the seed's channels,
// time and tunables; false when no input is kept.
func (f *forecaster) input(seed reconciler.Input) (reconciler.Input, bool) {
	f.keeper.Lock()
	if f.keeper.Input == nil {
		f.keeper.Unlock()
		return reconciler.Input{}, false
	}
	in := f.keeper.Input.Copy()
	f.keeper.Unlock()
	in.Now, in.Tunables, in.WatchingSince, in.Channels = seed.Now, seed.Tunables, seed.WatchingSince, seed.Channels
	in.Intents, in.Measurements = nil, nil
	return in, true
}

// learn folds newly measured activations into the hosts' times (the
// forecasting loop's), and records the hosts they changed. Each host's
// time is smoothed: the mean of its last measured time and the one
// before, so that a slow activation (a large download) moves it half
// way. The store's are read once, before the first.
func (f *forecaster) learn(ctx context.Context, samples []store.ActivationTime) {
	if !f.loaded {
		stored, err := f.st.ActivationTimes(ctx)
		if err != nil {
			if ctx.Err() == nil {
				f.log.Warn("reading the hosts' activation times: forecasts take the default until they are read", "err", err)
			}
		} else {
			for h, t := range stored {
				if mine, ok := f.times[h]; ok {
					t = store.ActivationTime{Host: h, Typical: mine.Typical, Samples: t.Samples + mine.Samples, MeasuredAt: mine.MeasuredAt}
				}
				f.times[h] = t
			}
			f.loaded = true
		}
	}
	if len(samples) == 0 {
		return
	}
	changed := make(map[string]bool, len(samples))
	for _, s := range samples {
		t, ok := f.times[s.Host]
		if ok && t.Typical > 0 {
			t.Typical = (t.Typical + s.Typical) / 2
		} else {
			t.Typical = s.Typical
		}
		t.Host, t.Samples, t.MeasuredAt = s.Host, t.Samples+1, s.MeasuredAt
		f.times[s.Host] = t
		changed[s.Host] = true
	}
	put := make([]store.ActivationTime, 0, len(changed))
	for h := range changed {
		put = append(put, f.times[h])
	}
	if err := f.st.PutActivationTimes(ctx, put); err != nil && ctx.Err() == nil {
		f.log.Warn("recording the hosts' activation times", "err", err)
	}
}

// modelNow is the model a forecast takes: each host measured takes its
// own time, and the others the median of those (the configured default
// while none is measured).
func (f *forecaster) modelNow() reconciler.Model {
	m := f.model
	if len(f.rebootTimes) > 0 {
		all := slices.Sorted(slices.Values(f.rebootTimes))
		m.Reboot = all[len(all)/2]
	}
	if len(f.times) == 0 {
		return m
	}
	m.Hosts = make(map[string]reconciler.HostModel, len(f.times))
	all := make([]time.Duration, 0, len(f.times))
	for h, t := range f.times {
		if t.Typical > 0 {
			m.Hosts[h] = reconciler.HostModel{Activation: t.Typical}
			all = append(all, t.Typical)
		}
	}
	if len(all) > 0 {
		slices.Sort(all)
		m.Activation = all[len(all)/2]
	}
	return m
}

// learnReboots folds newly measured reboots into the latest
// (the forecasting loop's).
func (f *forecaster) learnReboots(reboots []time.Duration) {
	f.rebootTimes = append(f.rebootTimes, reboots...)
	f.rebootTimes = f.rebootTimes[max(len(f.rebootTimes)-maxRebootTimes, 0):]
}

// maxRebootTimes bounds the reboots a forecast's model of one is the
// median of: the fleet's latest.
const maxRebootTimes = 32

// wait waits for the forecasting in the background, which stops at its
// next simulated tick once its context ends.
func (f *forecaster) wait() { f.wg.Wait() }

func (f *forecaster) run(ctx context.Context, in reconciler.Input) {
	start := time.Now()
	m := f.modelNow()
	m.Done = ctx.Done()
	res := reconciler.Forecast(in, m)
	if res.Cut == "stopped" {
		return
	}
	f.made.Observe(time.Since(start).Seconds())
	recs := make([]store.Forecast, 0, len(res.Rollouts))
	var events []reconciler.Event
	for _, r := range res.Rollouts {
		body, err := json.Marshal(forecastView(res, r, m))
		if err != nil {
			f.log.Error("encoding a forecast", "rollout", r.ID, "err", err)
			return
		}
		recs = append(recs, store.Forecast{RolloutID: r.ID, MadeAt: res.From, End: r.End, Body: body})
		if ev, ok := f.news(ctx, res.From, r); ok {
			events = append(events, ev)
		}
	}
	if err := f.st.PutForecasts(ctx, recs); err != nil {
		if ctx.Err() == nil {
			f.log.Error("recording forecasts", "err", err)
		}
		return
	}
	if len(events) > 0 {
		if err := f.st.AppendEvents(ctx, res.From, events); err != nil && ctx.Err() == nil {
			f.log.Error("journalling forecasts", "err", err)
		}
	}
	f.log.Debug("forecast made", "rollouts", len(recs), "ticks", res.Ticks, "cut", res.Cut, "duration", time.Since(start))
}

// EventForecast is the event kind of the forecasts the control plane
// journals (rfcs/0014): a rollout's first (forecast_made), one whose end
// moved (forecast_moved), and how the first compared with the end
// (forecast_outcome).
const EventForecast = notify.EventForecast

// minMove is the least move of a forecast's end the journal reports; a
// move must also be more than a tenth of what remained.
const minMove = 5 * time.Minute

// news is the event a new forecast of a rollout makes: its first, or an
// end that moved enough since the journal last said one. What was said
// before is this replica's memory, or the latest forecast stored.
func (f *forecaster) news(ctx context.Context, now time.Time, r reconciler.RolloutForecast) (reconciler.Event, bool) {
	ev := reconciler.Event{Kind: EventForecast, RolloutID: r.ID, Channel: r.Channel, Wave: -1}
	f.mu.Lock()
	before, said := f.told[r.ID]
	f.mu.Unlock()
	if !said {
		prev, err := f.st.Forecast(ctx, r.ID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			ev.Reason = reconciler.Reason{Code: codes.ForecastMade, Message: expected(now, r)}
			f.tell(r.ID, r.End)
			return ev, true
		case err != nil:
			return ev, false
		}
		before = prev.End
		f.tell(r.ID, before)
	}
	moved := false
	switch {
	case before.IsZero() != r.End.IsZero():
		moved = true
	case !before.IsZero():
		d := r.End.Sub(before)
		moved = d.Abs() > max(minMove, before.Sub(now)/10)
	}
	if !moved {
		return ev, false
	}
	msg := expected(now, r)
	if !before.IsZero() && !r.End.IsZero() {
		msg += fmt.Sprintf("; %s than the forecast said before (%s)", shift(r.End.Sub(before)), before.UTC().Format(time.RFC3339))
	}
	ev.Reason = reconciler.Reason{Code: codes.ForecastMoved, Message: msg}
	f.tell(r.ID, r.End)
	return ev, true
}

func (f *forecaster) tell(id string, end time.Time) {
	f.mu.Lock()
	f.told[id] = end
	f.mu.Unlock()
}

// expected says what a forecast expects of a rollout.
func expected(now time.Time, r reconciler.RolloutForecast) string {
	if r.End.IsZero() {
		return fmt.Sprintf("not expected to end: it waits for [%s] %s", r.Waiting.Code, r.Waiting.Message)
	}
	return fmt.Sprintf("expected to end %s at %s (in %s)", r.State, r.End.UTC().Format(time.RFC3339), r.End.Sub(now).Round(time.Second))
}

// shift says how much later or earlier.
func shift(d time.Duration) string {
	if d < 0 {
		return (-d).Round(time.Second).String() + " earlier"
	}
	return d.Round(time.Second).String() + " later"
}

// ended notes rollouts a tick ended, beside the ticks: how far off their
// first forecast was, in the journal, the log and a metric.
func (f *forecaster) ended(ctx context.Context, now time.Time, out reconciler.Output) {
	var over []reconciler.Rollout
	for _, u := range out.Rollouts {
		if !u.New && u.Rollout.State.Terminal() && !u.From.Terminal() {
			over = append(over, u.Rollout)
		}
	}
	if len(over) == 0 {
		return
	}
	f.wg.Go(func() {
		for _, r := range over {
			f.mu.Lock()
			delete(f.told, r.ID)
			f.mu.Unlock()
			fc, err := f.st.Forecast(ctx, r.ID)
			if err != nil || fc.FirstEnd.IsZero() {
				continue
			}
			off := now.Sub(fc.FirstEnd)
			f.errors.WithLabelValues(r.Channel).Set(off.Seconds())
			f.log.Info("rollout ended", "rollout", r.ID, "state", r.State,
				"forecast_at_opening", fc.FirstEnd, "forecast_made", fc.FirstMadeAt, "error", off)
			ev := reconciler.Event{Kind: EventForecast, RolloutID: r.ID, Channel: r.Channel, Wave: -1,
				Reason: reconciler.Reason{Code: codes.ForecastOutcome, Message: fmt.Sprintf("ended %s %s than its first forecast said (%s, made %s)",
					r.State, shift(off), fc.FirstEnd.UTC().Format(time.RFC3339), fc.FirstMadeAt.UTC().Format(time.RFC3339))}}
			if err := f.st.AppendEvents(ctx, now, []reconciler.Event{ev}); err != nil && ctx.Err() == nil {
				f.log.Error("journalling a forecast's outcome", "err", err)
			}
		}
	})
}

// forecastView is a rollout's forecast as the API serves it.
func forecastView(res reconciler.ForecastResult, r reconciler.RolloutForecast, m reconciler.Model) proto.Forecast {
	v := proto.Forecast{RolloutID: r.ID, MadeAt: res.From, State: string(r.State), End: timePtr(r.End), Cut: res.Cut,
		Waiting: reasonPtr(r.Waiting), Waves: make([]proto.ForecastWave, len(r.Waves)), Hosts: []proto.ForecastHost{},
		Assumes: proto.ForecastModel{Activation: forPeople(cmp.Or(m.Activation, reconciler.DefaultForecastActivation)).String(),
			Checkin: m.Checkin.String(), Approvals: "only those given", Silent: "stay silent"}}
	if r.Reboots {
		v.Assumes.Reboot = forPeople(cmp.Or(m.Reboot, reconciler.DefaultForecastReboot)).String()
	}
	for _, h := range r.Hosts {
		if _, ok := m.Hosts[h.Host]; ok {
			v.Assumes.Measured++
		}
	}
	if r.End.IsZero() && res.Cut == "" {
		v.Cut = "waiting"
	}
	for i, w := range r.Waves {
		v.Waves[i] = proto.ForecastWave{Index: w.Index, Name: w.Name, Start: timePtr(w.Start), Done: timePtr(w.Done), Gate: reasonPtr(w.Gate)}
	}
	hosts := slices.Clone(r.Hosts)
	hosts = slices.DeleteFunc(hosts, func(h reconciler.HostForecast) bool {
		return h.State == reconciler.HostConverged && h.Converged.IsZero()
	})
	// By expected dispatch (none last), then name.
	slices.SortStableFunc(hosts, func(a, b reconciler.HostForecast) int {
		if a.Dispatch.IsZero() != b.Dispatch.IsZero() {
			if a.Dispatch.IsZero() {
				return 1
			}
			return -1
		}
		return cmp.Or(a.Dispatch.Compare(b.Dispatch), cmp.Compare(a.Host, b.Host))
	})
	if len(hosts) > proto.MaxForecastHosts {
		v.HostsOmitted = len(hosts) - proto.MaxForecastHosts
		hosts = hosts[:proto.MaxForecastHosts]
	}
	for _, h := range hosts {
		v.Hosts = append(v.Hosts, proto.ForecastHost{Host: h.Host, Wave: h.Wave, Dispatch: timePtr(h.Dispatch),
			Converged: timePtr(h.Converged), Gate: reasonPtr(h.Gate)})
	}
	return v
}

// forPeople rounds a measured time for people: to the second, or to the
// millisecond below one.
func forPeople(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func reasonPtr(r reconciler.Reason) *proto.DecisionReason {
	if r.Code == "" && r.Message == "" {
		return nil
	}
	return &proto.DecisionReason{Code: r.Code, Message: r.Message, Gate: r.Gate, Actor: r.Actor}
}

// getForecast is GET /v1/rollouts/{id}/forecast: the latest forecast the
// leader recorded of a rollout, with its first one's end.
func (s *Server) getForecast(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
	if e := may(c, false); e != nil {
		return e
	}
	ro, e := s.rolloutHead(r)
	if e != nil {
		return e
	}
	fc, err := s.st.Forecast(r.Context(), ro.ID)
	if errors.Is(err, store.ErrNotFound) {
		return codes.Errorf(codes.NotFound, "no forecast of rollout %s yet: the leader makes one after a tick that decides something", ro.ID)
	}
	if err != nil {
		return s.internal("reading a forecast", err)
	}
	var v proto.Forecast
	if err := json.Unmarshal(fc.Body, &v); err != nil {
		return s.internal("decoding a forecast", err)
	}
	v.FirstMadeAt, v.FirstEnd = fc.FirstMadeAt, timePtr(fc.FirstEnd)
	writeJSON(w, http.StatusOK, v)
	return nil
}

// expectation is what the latest forecast of the rollout that drives a
// host expects of it, while it is not converged; nil when there is none
// (an error reading it only leaves it out).
func (s *Server) expectation(r *http.Request, v proto.HostView) *proto.HostExpectation {
	if v.Host == nil || v.Rollout == "" || v.Host.State == string(reconciler.HostConverged) || reconciler.RolloutState(v.RolloutState).Terminal() {
		return nil
	}
	fc, err := s.st.Forecast(r.Context(), v.Rollout)
	if err != nil {
		return nil
	}
	var f proto.Forecast
	if json.Unmarshal(fc.Body, &f) != nil {
		return nil
	}
	for _, h := range f.Hosts {
		if h.Host == v.Hostname {
			return &proto.HostExpectation{MadeAt: f.MadeAt, Dispatch: h.Dispatch, Converged: h.Converged, Gate: h.Gate}
		}
	}
	if f.HostsOmitted == 0 || v.Host.Wave >= len(f.Waves) {
		return nil
	}
	w := f.Waves[v.Host.Wave]
	return &proto.HostExpectation{MadeAt: f.MadeAt, Dispatch: w.Start, Converged: w.Done, Gate: w.Gate, ByWave: true}
}
