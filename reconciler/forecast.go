package reconciler

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/analysis"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
)

// Model is what a forecast assumes of the hosts and of the people a
// rollout waits for (rfcs/0014).
type Model struct {
	// Activation is how long a host takes from learning its target to
	// confirming it (realising the closure, switching, its probes):
	// DefaultForecastActivation when zero. Hosts may have their own.
	Activation time.Duration `json:"activation,omitempty"`
	// Learn is how long a host takes to learn a new target: zero for an
	// agent waiting in a long-poll, which is answered at once.
	Learn time.Duration `json:"learn,omitempty"`
	// Reboot is how long a staged host takes from its reboot order (rule
	// 17) to confirming its new boot: shutting down, the firmware, the
	// boot and its probes. DefaultForecastReboot when zero.
	Reboot time.Duration `json:"reboot,omitempty"`
	// Checkin is how often a connected agent checks in (its long-poll's
	// length): Tunables.CheckinPeriod when zero. An agent checks in at
	// its last check-in (its phase) plus whole periods, and at once when
	// it reports; a soak ends at its host's first check-in after it
	// (rfcs/0003 rule 8).
	Checkin time.Duration `json:"checkin,omitempty"`
	// Hosts are the hosts that differ from the defaults, by name.
	Hosts map[string]HostModel `json:"hosts,omitempty"`
	// Approvals are the approvals assumed given, each at its time. A
	// wave that needs approvals and has none assumed here waits "not
	// before approved": the forecast of its rollout ends there.
	Approvals []AssumedApproval `json:"approvals,omitempty"`
	// Horizon bounds the time simulated: DefaultForecastHorizon when
	// zero.
	Horizon time.Duration `json:"horizon,omitempty"`
	// MaxTicks bounds the ticks simulated: DefaultForecastTicks when zero.
	MaxTicks int `json:"maxTicks,omitempty"`
	// Done, when it is closed, stops the forecast at its next tick (Cut
	// "stopped"): a caller shutting down need not wait for a long one.
	Done <-chan struct{} `json:"-"`
}

// HostModel is what a forecast assumes of one host.
type HostModel struct {
	// Activation and Learn override the model's when not zero.
	Activation time.Duration `json:"activation,omitempty"`
	Learn      time.Duration `json:"learn,omitempty"`
	// Back is when a host the control plane does not hear now is heard
	// again; zero: it stays silent, and the rollout meets it as the rules
	// meet a silent host. Ignored for a host heard now.
	Back time.Time `json:"back,omitzero"`
}

// AssumedApproval says that a wave of a rollout gets all the approvals
// it needs at a time.
type AssumedApproval struct {
	RolloutID string    `json:"rolloutId"`
	Wave      int       `json:"wave"`
	At        time.Time `json:"at"`
}

// Forecast bounds and defaults.
const (
	DefaultForecastActivation = 2 * time.Minute
	DefaultForecastReboot     = 5 * time.Minute
	DefaultForecastHorizon    = 31 * 24 * time.Hour
	DefaultForecastTicks      = 20000
)

// ForecastResult is what a forecast expects of every rollout that is live
// at its start or opens during it.
type ForecastResult struct {
	// From is the input's time; Until the last time simulated.
	From  time.Time `json:"from"`
	Until time.Time `json:"until"`
	// Ticks is how many ticks were simulated.
	Ticks int `json:"ticks"`
	// Cut is why the forecast stopped before every rollout ended:
	// "horizon" or "ticks" (its bounds), "waiting" (no time passing
	// changes anything: an approval owed, a freeze without end, a host
	// silent for good), "stopped" (Model.Done), "" when every rollout
	// ended.
	Cut string `json:"cut,omitempty"`
	// Rollouts, by opening time and id.
	Rollouts []RolloutForecast `json:"rollouts"`
	// Unopened are the channels whose latest verified ref has not opened
	// its rollout when the forecast ends, with what it waits for (the
	// channel's active rollout, a channel edge, a freeze).
	Unopened []UnopenedRef `json:"unopened,omitempty"`
}

// UnopenedRef is a verified ref that does not open within a forecast.
type UnopenedRef struct {
	Channel   string `json:"channel"`
	RolloutID string `json:"rolloutId"`
	Waiting   Reason `json:"waiting"`
}

// RolloutForecast is one rollout's expected course.
type RolloutForecast struct {
	ID      string `json:"id"`
	Channel string `json:"channel"`
	// State is its state when the forecast ends; End when it reaches it,
	// if that is a terminal state (zero otherwise).
	State RolloutState `json:"state"`
	End   time.Time    `json:"end,omitzero"`
	// Waiting is what a rollout that does not end waits for at the end of
	// the forecast (the gate no time passes).
	Waiting Reason         `json:"waiting,omitzero"`
	Waves   []WaveForecast `json:"waves"`
	Hosts   []HostForecast `json:"hosts"`
	// Reboots: a wave of it reboots its staged hosts (rule 17), which
	// take Model.Reboot.
	Reboots bool `json:"reboots,omitempty"`
}

// WaveForecast is one wave's expected course.
type WaveForecast struct {
	Index int    `json:"index"`
	Name  string `json:"name,omitempty"`
	// Start is when its first host is dispatched; Done when it is
	// promoted (or its rollout converges). Zero: not within the forecast,
	// or before it (a wave already done).
	Start time.Time `json:"start,omitzero"`
	Done  time.Time `json:"done,omitzero"`
	// Gate is what last held its first host before Start: the gate that
	// decides when it starts.
	Gate Reason `json:"gate,omitzero"`
}

// HostForecast is one host's expected course in a rollout.
type HostForecast struct {
	Host string `json:"host"`
	Wave int    `json:"wave"`
	// Dispatch, Converged: when it is dispatched and when it converges
	// (zero: not within the forecast, or before it).
	Dispatch  time.Time `json:"dispatch,omitzero"`
	Converged time.Time `json:"converged,omitzero"`
	// State is its state when the forecast ends.
	State HostState `json:"state"`
	// Gate is what last held it before its dispatch.
	Gate Reason `json:"gate,omitzero"`
}

// Forecast runs the reconciler forward from in: each tick as the control
// plane would run it (at the times a tick asks to be woken, and when a
// host reports), the hosts answering as m says. It returns, for every
// rollout live at the start or opened on the way, when each wave and host
// is expected to move and the gate that decides it, until every such
// rollout is over or a bound is hit. It is pure: the same input and model
// give the same forecast.
//
// A forecast never claims a time a gate makes impossible: a wave owed an
// approval the model does not assume, or held by a freeze without end,
// has no Start, and its rollout says what it waits for.
func Forecast(in Input, m Model) ForecastResult {
	f := newForecaster(in, m)
	f.run()
	return f.result()
}

type forecaster struct {
	in      Input
	from    time.Time
	m       Model
	horizon time.Time
	// stages: the rollouts whose release stages on the hosts (one of
	// them is staged or rebooting at the start): their other hosts of a
	// wave that reboots stage too, and are rebooted in turn.
	stages map[string]bool
	// agents: the model's hosts, by name.
	agents map[string]*modelAgent
	// events are the model's pending happenings, by time and then in the
	// order they were scheduled (seq).
	events []modelEvent
	seq    int
	// measured: the measurements already scheduled, by run and seq.
	measured map[string]bool
	// approved: the assumed approvals already filed.
	approved map[string]bool
	ticks    int
	cut      string
	// What was seen of each rollout, by id, in order of first sight.
	seen  map[string]*RolloutForecast
	order []string
	// host index per rollout, by name.
	hostAt map[string]map[string]int
	// opening: why a rollout about to open waited (a freeze, the
	// channel's active rollout, a channel edge), by its id.
	opening map[string]Reason
	// flying are the hosts in flight, and the staged ones, by rollout id
	// and name: the only ones whose check-ins a tick reads beyond hearing
	// them (a soak's end, a confirm window, a staged target still staged
	// before its reboot), so the only ones hear refreshes.
	flying map[[2]string]bool
}

type modelAgent struct {
	activation, learn, reboot time.Duration
	// heard: the control plane hears the agent (it is connected); it
	// checks in at anchor plus whole periods (Model.Checkin).
	heard  bool
	anchor time.Time
	// ends is the check-in scheduled to end its host's soak.
	ends time.Time
	// queued is an action it learns once it is heard again.
	queued *HostAction
}

type modelEvent struct {
	at   time.Time
	seq  int
	host string
	// kind: an activation's steps ("started", then "done"), a host heard
	// again ("back"), the check-in that ends a soak ("checkin"), a
	// measurement taken ("measure").
	kind   string
	action HostAction
	meas   *Measurement
}

func newForecaster(in Input, m Model) *forecaster {
	if m.Activation <= 0 {
		m.Activation = DefaultForecastActivation
	}
	if m.Reboot <= 0 {
		m.Reboot = DefaultForecastReboot
	}
	if m.Horizon <= 0 {
		m.Horizon = DefaultForecastHorizon
	}
	if m.MaxTicks <= 0 {
		m.MaxTicks = DefaultForecastTicks
	}
	if m.Checkin <= 0 {
		m.Checkin = in.Tunables.CheckinPeriod()
	}
	f := &forecaster{in: in, from: in.Now, m: m, horizon: in.Now.Add(m.Horizon), agents: map[string]*modelAgent{},
		measured: map[string]bool{}, approved: map[string]bool{}, seen: map[string]*RolloutForecast{},
		hostAt: map[string]map[string]int{}, opening: map[string]Reason{}, flying: map[[2]string]bool{}, stages: map[string]bool{}}
	for _, r := range in.Rollouts {
		f.stages[r.ID] = slices.ContainsFunc(r.Hosts, func(h RolloutHost) bool { return h.State == HostDeferred || h.State == HostRebooting })
	}
	for _, d := range in.Deferrals {
		gate := ""
		if d.BlockedBy == codes.Freeze {
			gate = codes.Freeze
		}
		f.opening[proto.RolloutID(d.Channel, d.Ref)] = Reason{Code: codes.RefWaiting, Gate: gate, Message: "opens after " + d.BlockedBy}
	}
	f.in.Hosts = maps.Clone(in.Hosts)
	f.in.Intents = slices.Clone(in.Intents)
	f.in.Measurements = slices.Clone(in.Measurements)
	names := map[string]bool{}
	for name := range in.Hosts {
		names[name] = true
	}
	for _, r := range in.Rollouts {
		for _, h := range r.Hosts {
			names[h.Hostname] = true
		}
	}
	for _, ch := range in.Channels {
		if ch.Fleet != nil {
			for name := range ch.Fleet.Hosts {
				names[name] = true
			}
		}
	}
	for name := range names {
		hm := m.Hosts[name]
		a := &modelAgent{activation: cmp.Or(hm.Activation, m.Activation), learn: cmp.Or(hm.Learn, m.Learn), reboot: m.Reboot}
		o := in.Hosts[name]
		a.heard, a.anchor = !in.Tunables.Late(o.LastSeen, in.Now), o.LastSeen
		if a.heard {
			o.AlwaysHeard = true
			f.in.Hosts[name] = o
		}
		if !a.heard && !hm.Back.IsZero() {
			f.push(modelEvent{at: hm.Back, host: name, kind: "back"})
		}
		f.agents[name] = a
	}
	for _, r := range in.Rollouts {
		if !r.State.Terminal() {
			f.note(r)
		}
		f.inFlight(r)
		f.fly(r.ID, r.Hosts)
	}
	return f
}

// fly notes which of a rollout's hosts are in flight.
func (f *forecaster) fly(id string, hosts []RolloutHost) {
	for _, h := range hosts {
		if h.State.InFlight() || h.State == HostDeferred {
			f.flying[[2]string{id, h.Hostname}] = true
		} else {
			delete(f.flying, [2]string{id, h.Hostname})
		}
	}
}

// inFlight schedules the answers of a rollout's hosts that were told to
// move before the forecast: an activating host confirms, a rebooting one
// confirms from its new boot, a rolling-back one is back, as long after it was told (its state's Since) as the
// model says, and not before the forecast's start.
func (f *forecaster) inFlight(r Rollout) {
	for _, h := range r.Hosts {
		act := HostAction{Host: h.Hostname, RolloutID: r.ID, Wave: h.Wave}
		switch h.State {
		case HostActivating:
			act.Kind, act.Target = ActionDispatch, h.Target
		case HostRollingBack:
			act.Kind, act.Target = ActionRollback, h.Previous
		case HostRebooting:
			act.Kind, act.Target = ActionReboot, h.Target
		default:
			continue
		}
		a := f.agents[h.Hostname]
		switch {
		case a == nil:
			continue
		case !a.heard:
			a.queued = &act
			continue
		}
		o := f.in.Hosts[h.Hostname]
		started := o.Activation != nil && o.Activation.RolloutID == r.ID && o.Activation.Closure == act.Target
		start := h.Since.Add(a.learn)
		if !started {
			f.push(modelEvent{at: latest(start, f.in.Now), host: h.Hostname, kind: "started", action: act})
		}
		f.push(modelEvent{at: latest(start.Add(a.takes(act)), f.in.Now), host: h.Hostname, kind: "done", action: act})
	}
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (f *forecaster) push(e modelEvent) {
	f.seq++
	e.seq = f.seq
	i, _ := slices.BinarySearchFunc(f.events, e, func(a, b modelEvent) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.seq, b.seq))
	})
	f.events = slices.Insert(f.events, i, e)
}

func (f *forecaster) run() {
	for {
		f.hear()
		f.fileApprovals()
		out := Reconcile(f.in)
		f.ticks++
		f.record(out)
		if f.ticks == 1 {
			f.in = Apply(f.in, out) // the caller's host lists
		} else {
			f.in = applyOwned(f.in, out)
		}
		f.in.Measurements = f.keepMeasurements()
		f.schedule(out)
		if f.over() {
			return
		}
		next := f.next(out)
		switch {
		case next.IsZero():
			f.cut = "waiting"
			return
		case next.After(f.horizon):
			f.cut = "horizon"
			return
		case f.ticks >= f.m.MaxTicks:
			f.cut = "ticks"
			return
		case f.stopped():
			f.cut = "stopped"
			return
		}
		f.in.Now = next
		f.fire(next)
	}
}

// stopped reports whether the caller closed Model.Done.
func (f *forecaster) stopped() bool {
	select {
	case <-f.m.Done:
		return true
	default:
		return false
	}
}

// hear gives each connected agent in flight its last check-in: the last
// of its periodic ones, with the status it has. A connected agent is
// marked always heard (never late, so no tick wakes for its silence);
// the check-ins of the others decide nothing.
func (f *forecaster) hear() {
	for _, k := range slices.SortedFunc(maps.Keys(f.flying), cmpKey) {
		name := k[1]
		a := f.agents[name]
		if a == nil || !a.heard {
			continue
		}
		o := f.in.Hosts[name]
		o.LastSeen = a.checkinBefore(f.in.Now, f.m.Checkin)
		o.StatusAt, o.AlwaysHeard = o.LastSeen, true
		// A host runs what it last confirmed, and has staged what it last
		// reported staged: a check-in on record from before the report
		// still shows the host before it.
		if act := o.Activation; act != nil && !o.LastSeen.Before(act.At) {
			switch {
			case act.Outcome == OutcomeConfirmed && o.Current != act.Closure:
				o.Current, o.Booted, o.Deferred = act.Closure, act.Closure, false
			case act.Outcome == OutcomeDeferred:
				o.Deferred = true
			}
		}
		f.in.Hosts[name] = o
	}
}

func cmpKey(a, b [2]string) int {
	return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1]))
}

// checkinBefore is the agent's last check-in at or before t.
func (a *modelAgent) checkinBefore(t time.Time, period time.Duration) time.Time {
	if t.Before(a.anchor) {
		return a.anchor
	}
	return a.anchor.Add(t.Sub(a.anchor) / period * period)
}

// checkinFrom is the agent's first check-in at or after t.
func (a *modelAgent) checkinFrom(t time.Time, period time.Duration) time.Time {
	c := a.checkinBefore(t, period)
	if c.Before(t) {
		c = c.Add(period)
	}
	return c
}

// fileApprovals files the model's approvals that are due as intents, one
// a distinct approver, enough for the wave.
func (f *forecaster) fileApprovals() {
	for _, ap := range f.m.Approvals {
		key := ap.RolloutID + "#" + strconv.Itoa(ap.Wave)
		if f.approved[key] || ap.At.After(f.in.Now) {
			continue
		}
		need := 1
		for _, r := range f.in.Rollouts {
			if r.ID == ap.RolloutID && ap.Wave >= 0 && ap.Wave < len(r.Waves) {
				need = max(r.Waves[ap.Wave].Approval.Need(), 1)
			}
		}
		if !f.open(ap.RolloutID) {
			continue
		}
		f.approved[key] = true
		for i := range need {
			wave := ap.Wave
			f.in.Intents = append(f.in.Intents, Intent{ID: fmt.Sprintf("forecast-%s-%d", key, i), RolloutID: ap.RolloutID,
				Kind: IntentApprove, Actor: fmt.Sprintf("forecast-approver-%d", i+1), At: f.in.Now, Wave: &wave})
		}
	}
}

// open reports whether a rollout has opened.
func (f *forecaster) open(id string) bool {
	return slices.ContainsFunc(f.in.Rollouts, func(r Rollout) bool { return r.ID == id })
}

// schedule turns a tick's actions into the model agents' steps, and its
// measurement requests into measurements.
func (f *forecaster) schedule(out Output) {
	for _, act := range out.Actions {
		a := f.agents[act.Host]
		if a == nil {
			a = &modelAgent{activation: f.m.Activation, learn: f.m.Learn, reboot: f.m.Reboot}
			f.agents[act.Host] = a
		}
		if !a.heard {
			q := act
			a.queued = &q
			continue
		}
		f.act(act.Host, a, act, f.in.Now)
	}
	// A soak ends at its host's first check-in after it, which reaches a
	// tick at once (CheckinUrgent).
	byID := make(map[string]*Rollout, len(f.in.Rollouts))
	for i := range f.in.Rollouts {
		byID[f.in.Rollouts[i].ID] = &f.in.Rollouts[i]
	}
	for _, k := range slices.SortedFunc(maps.Keys(f.flying), cmpKey) {
		r, a := byID[k[0]], f.agents[k[1]]
		if r == nil || a == nil || !a.heard {
			continue
		}
		i, ok := slices.BinarySearchFunc(r.Hosts, k[1], func(h RolloutHost, name string) int { return strings.Compare(h.Hostname, name) })
		if !ok || (r.Hosts[i].State != HostSoaking && r.Hosts[i].State != HostDeferred) {
			continue
		}
		h := r.Hosts[i]
		// A soak ends at the first check-in after it; a staged host is
		// rebooted once a check-in after it staged says so (rule 17).
		from := h.Since.Add(r.WaveSoak(h.Wave))
		if h.State == HostDeferred {
			from = h.Since.Add(time.Nanosecond)
		}
		at := a.checkinFrom(from, f.m.Checkin)
		if at.After(f.in.Now) && !at.Equal(a.ends) {
			a.ends = at
			f.push(modelEvent{at: at, host: h.Hostname, kind: "checkin"})
		}
	}
	for _, req := range out.Measure {
		key := fmt.Sprintf("%s#%d#%s#%d", req.RolloutID, req.Wave, req.Analysis, req.Seq)
		if f.measured[key] {
			continue
		}
		f.measured[key] = true
		at := req.At
		if at.Before(f.in.Now) {
			at = f.in.Now
		}
		m := Measurement{RolloutID: req.RolloutID, Wave: req.Wave, Analysis: req.Analysis, Seq: req.Seq, At: at,
			Query: "forecast", Samples: []proto.MetricSample{{Value: f.passing(req)}}}
		if c := f.spec(req).Compare; c != nil && len(req.Baseline) > 0 {
			// A healthy canary is its baseline's equal.
			same := make([]float64, c.MinSamples)
			m.Samples, m.Compared = nil, &Compared{Canary: same, Baseline: same}
		}
		f.push(modelEvent{at: at, kind: "measure", meas: &m})
	}
}

// act schedules an agent's answer to an action it learns at at.
func (f *forecaster) act(host string, a *modelAgent, act HostAction, at time.Time) {
	start := at.Add(a.learn)
	f.push(modelEvent{at: start, host: host, kind: "started", action: act})
	f.push(modelEvent{at: start.Add(a.takes(act)), host: host, kind: "done", action: act})
}

// staging reports whether a dispatch stages its target for a reboot the
// control plane orders, as its rollout's staged hosts did.
func (f *forecaster) staging(act HostAction) bool {
	if act.Kind != ActionDispatch || !f.stages[act.RolloutID] {
		return false
	}
	i := slices.IndexFunc(f.in.Rollouts, func(r Rollout) bool { return r.ID == act.RolloutID })
	return i >= 0 && f.in.Rollouts[i].RebootOf(act.Wave).Managed
}

// takes is how long the agent takes to answer an action: a reboot's time
// for a reboot order, its activation's otherwise.
func (a *modelAgent) takes(act HostAction) time.Duration {
	if act.Kind == ActionReboot {
		return a.reboot
	}
	return a.activation
}

// spec is the analysis a request measures (the zero Analysis when its
// rollout has none of that name).
func (f *forecaster) spec(req MeasureRequest) proto.Analysis {
	for _, r := range f.in.Rollouts {
		if r.ID != req.RolloutID {
			continue
		}
		for _, an := range r.HealthGate.Analysis {
			if an.Name == req.Analysis {
				return an
			}
		}
	}
	return proto.Analysis{}
}

// passing is a value that meets an analysis's success condition and not
// its failure condition: the model's hosts are healthy.
func (f *forecaster) passing(req MeasureRequest) string {
	an := f.spec(req)
	ok, err := analysis.ParseCondition(an.SuccessCondition)
	if err != nil {
		return "0"
	}
	bad, _ := analysis.ParseCondition(an.FailureCondition)
	for _, v := range []float64{ok.Value, ok.Value - 1, ok.Value + 1, ok.Value - 0.5, ok.Value + 0.5} {
		if ok.Holds(v) && (an.FailureCondition == "" || !bad.Holds(v)) {
			return strconv.FormatFloat(v, 'g', -1, 64)
		}
	}
	return "0"
}

// keepMeasurements drops the measurements every run has counted.
func (f *forecaster) keepMeasurements() []Measurement {
	counted := map[string]int{}
	for _, r := range f.in.Rollouts {
		for _, run := range r.Analyses {
			counted[fmt.Sprintf("%s#%d#%s", r.ID, run.Wave, run.Name)] = run.Measured
		}
	}
	return slices.DeleteFunc(f.in.Measurements, func(m Measurement) bool {
		n, ok := counted[fmt.Sprintf("%s#%d#%s", m.RolloutID, m.Wave, m.Analysis)]
		return ok && m.Seq <= n
	})
}

// next is when the next tick runs: at once when the last one stopped at
// its bound, else at the earliest of its wake time, the model's next
// happening and the next approval due; zero when nothing is to come.
func (f *forecaster) next(out Output) time.Time {
	now := f.in.Now
	if out.More {
		return now
	}
	next := out.WakeAt
	consider := func(t time.Time) {
		if t.Before(now) {
			t = now
		}
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	if len(f.events) > 0 {
		consider(f.events[0].at)
	}
	for _, ap := range f.m.Approvals {
		// One for a rollout not open yet is filed when it opens, as an
		// intent that makes a tick at once.
		if !f.approved[ap.RolloutID+"#"+strconv.Itoa(ap.Wave)] && (ap.At.After(now) || f.open(ap.RolloutID)) {
			consider(ap.At)
		}
	}
	return next
}

// fire applies the model's happenings due at now to the observations.
func (f *forecaster) fire(now time.Time) {
	for len(f.events) > 0 && !f.events[0].at.After(now) {
		e := f.events[0]
		f.events = f.events[1:]
		switch e.kind {
		case "measure":
			f.in.Measurements = append(f.in.Measurements, *e.meas)
		case "back":
			a := f.agents[e.host]
			a.heard, a.anchor = true, e.at
			o := f.in.Hosts[e.host]
			o.LastSeen, o.StatusAt, o.AlwaysHeard = e.at, e.at, true
			f.in.Hosts[e.host] = o
			if a.queued != nil {
				f.act(e.host, a, *a.queued, e.at)
				a.queued = nil
			}
		case "started", "done":
			o := f.in.Hosts[e.host]
			outcome := OutcomeStarted
			switch {
			case e.kind == "done" && f.staging(e.action):
				outcome, o.Deferred = OutcomeDeferred, true
			case e.kind == "done":
				outcome = OutcomeConfirmed
				o.Current, o.Booted, o.Deferred = e.action.Target, e.action.Target, false
				if o.Probes.Total == 0 {
					o.Probes = ProbeSummary{Total: 1}
				}
				o.Probes.Failed, o.FailedUnits = nil, nil
			}
			o.Activation = &Activation{RolloutID: e.action.RolloutID, Closure: e.action.Target, Outcome: outcome, At: e.at}
			o.LastSeen, o.StatusAt = e.at, e.at
			f.in.Hosts[e.host] = o
			f.agents[e.host].anchor = e.at // a report is a check-in; its long-polls go on from it
		}
	}
}

// over reports whether every rollout the forecast follows has ended, no
// channel waits to open one, and no host is still to answer or to come
// back (a host back catches up, also in a converged rollout).
func (f *forecaster) over() bool {
	for _, e := range f.events {
		if e.kind != "measure" {
			return false
		}
	}
	for _, r := range f.in.Rollouts {
		if !r.State.Terminal() {
			return false
		}
	}
	for _, ch := range f.in.Channels {
		if ch.Ref != "" && ch.Ref != ch.LastRolledRef {
			return false
		}
	}
	return true
}

// note starts following a rollout.
func (f *forecaster) note(r Rollout) *RolloutForecast {
	if rf := f.seen[r.ID]; rf != nil {
		return rf
	}
	rf := &RolloutForecast{ID: r.ID, Channel: r.Channel, State: r.State}
	for i, w := range r.Waves {
		rf.Waves = append(rf.Waves, WaveForecast{Index: i, Name: w.Name})
		rf.Reboots = rf.Reboots || r.RebootOf(i).Managed
	}
	idx := make(map[string]int, len(r.Hosts))
	for i, h := range r.Hosts {
		idx[h.Hostname] = i
		hf := HostForecast{Host: h.Hostname, Wave: h.Wave, State: h.State, Gate: f.opening[r.ID]}
		if h.State == HostPending && h.Blocked.Code != "" {
			hf.Gate = h.Blocked
		}
		rf.Hosts = append(rf.Hosts, hf)
	}
	f.seen[r.ID], f.hostAt[r.ID] = rf, idx
	f.order = append(f.order, r.ID)
	return rf
}

// record notes what a tick decided.
func (f *forecaster) record(out Output) {
	now := f.in.Now
	// Deferrals first: a rollout that opens in this tick waited for them.
	for _, e := range out.Events {
		if e.Kind == EventRolloutDeferred || e.Kind == EventRefWaiting {
			f.opening[e.RolloutID] = e.Reason
		}
	}
	for _, u := range out.Rollouts {
		if u.New {
			f.fly(u.Rollout.ID, u.Rollout.Hosts)
		}
		rf := f.note(u.Rollout)
		rf.State = u.Rollout.State
		if u.Rollout.State.Terminal() && rf.End.IsZero() {
			rf.End = now
			if u.Rollout.State == RolloutConverged {
				for i := range rf.Waves {
					if rf.Waves[i].Done.IsZero() && !rf.Waves[i].Start.IsZero() {
						rf.Waves[i].Done = now
					}
				}
			}
		}
	}
	host := func(rollout, name string) (*RolloutForecast, *HostForecast) {
		rf := f.seen[rollout]
		if rf == nil {
			return nil, nil
		}
		i, ok := f.hostAt[rollout][name]
		if !ok {
			return nil, nil
		}
		return rf, &rf.Hosts[i]
	}
	for _, u := range out.Hosts {
		f.fly(u.RolloutID, []RolloutHost{u.Host})
		_, hf := host(u.RolloutID, u.Host.Hostname)
		if hf == nil {
			continue
		}
		hf.State = u.Host.State
		if u.Host.State == HostPending && u.Host.Blocked.Code != "" {
			hf.Gate = u.Host.Blocked
		}
		if u.Host.State == HostConverged && hf.Converged.IsZero() {
			hf.Converged = now
		}
	}
	for _, act := range out.Actions {
		rf, hf := host(act.RolloutID, act.Host)
		if hf == nil || act.Kind != ActionDispatch || !hf.Dispatch.IsZero() {
			continue
		}
		hf.Dispatch = now
		if hf.Wave >= len(rf.Waves) {
			continue
		}
		if w := &rf.Waves[hf.Wave]; w.Start.IsZero() {
			w.Start, w.Gate = now, hf.Gate
		}
	}
	for _, e := range out.Events {
		if e.Kind != EventWavePromoted {
			continue
		}
		if rf := f.seen[e.RolloutID]; rf != nil && e.Wave >= 0 && e.Wave < len(rf.Waves) {
			rf.Waves[e.Wave].Done = now
		}
	}
}

func (f *forecaster) result() ForecastResult {
	res := ForecastResult{From: f.from, Until: f.in.Now, Ticks: f.ticks, Cut: f.cut}
	byID := map[string]Rollout{}
	for _, r := range f.in.Rollouts {
		byID[r.ID] = r
	}
	for _, id := range f.order {
		rf := *f.seen[id]
		if r, ok := byID[id]; ok && !r.State.Terminal() {
			rf.Waiting = waitingFor(r)
		}
		res.Rollouts = append(res.Rollouts, rf)
	}
	for _, ch := range f.in.Channels {
		id := proto.RolloutID(ch.Name, ch.Ref)
		if _, opened := byID[id]; ch.Ref == "" || ch.Ref == ch.LastRolledRef || opened {
			continue
		}
		res.Unopened = append(res.Unopened, UnopenedRef{Channel: ch.Name, RolloutID: id, Waiting: f.opening[id]})
	}
	return res
}

// waitingFor is what a rollout that has not ended waits for: its reason
// when it is stopped, else the gate that holds a host of its current
// wave.
func waitingFor(r Rollout) Reason {
	if r.State != RolloutActive && r.State != RolloutOpening {
		return r.Reason
	}
	for _, h := range r.Hosts {
		if h.Wave == r.Wave && h.State == HostPending && h.Blocked.Code != "" {
			return h.Blocked
		}
	}
	return r.Reason
}
