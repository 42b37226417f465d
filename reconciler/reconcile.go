package reconciler

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/proto"
)

// Reconcile runs one tick: from the verified releases, the rollouts, what
// the hosts report and what operators asked, it decides what happens next.
// It is pure: no clock, no I/O, no randomness; the same input gives the
// same output, in the same order. The steps, in order (rfcs/0003):
//
//  0. what the control plane can see: channels entering or leaving
//     partial visibility;
//  1. operator intents, oldest first (those newer than now wait);
//  2. host observations: confirms, failures, timeouts, health, soak;
//  3. health policy: too many failures trigger onHealthFailure;
//  4. channel by channel, predecessors first (channel edges), so that a
//     channel sees its predecessors' final state of the tick:
//     a. its rollouts, oldest first, dispatch: promote finished waves,
//     skip offline hosts, pass Pending hosts through the gates under
//     the disruption budgets, send rollbacks in reverse edge order;
//     b. their readiness deadlines;
//     c. a moved ref opens a rollout (dispatched at once), waits for the
//     active one, or is deferred by a channel edge.
//
// Applying the output and reconciling again at the same time decides
// nothing more: the tick is a fixpoint.
func Reconcile(in Input) Output {
	t := newTick(in)
	t.see()
	t.intents()
	// A pass can change what an earlier part of the same pass would have
	// decided (a rollout stops counting and frees budget, a host a rollback
	// waited for is back). Passes repeat until one changes nothing, so the
	// output is a fixpoint; a pass costs one walk over the hosts.
	for range maxPasses {
		t.moved = false
		t.pass()
		if !t.moved {
			break
		}
	}
	return t.output()
}

// maxPasses bounds the passes of one tick. Passes after the first only
// finish what the first one's changes made possible; two or three suffice.
const maxPasses = 8

func (t *tick) pass() {
	t.deferrals = t.deferrals[:0]
	for _, r := range t.rollouts {
		t.observe(r)
	}
	for _, r := range t.rollouts {
		t.healthPolicy(r)
	}
	t.buildBudgets()
	done := map[*work]bool{}
	step := func(channel string) {
		for _, w := range slices.Clone(t.rollouts) {
			if !done[w] && (channel == "" || w.r.Channel == channel) {
				done[w] = true
				t.dispatch(w)
				t.deadline(w)
			}
		}
	}
	for _, name := range t.order {
		step(name)
		if w := t.openChannel(name); w != nil {
			done[w] = true
			t.addBudgets(w)
			t.dispatch(w)
		}
	}
	step("") // rollouts of channels that have no verified release
}

// tick is the working state of one Reconcile call.
type tick struct {
	in       Input
	now      time.Time
	obs      map[string]ObservedHost
	channels map[string]*Channel
	order    []string // channel names, predecessors first
	rollouts []*work  // by (OpenedAt, ID)
	byID     map[string]*work

	partial      map[string]bool         // channels in partial visibility
	recovering   map[string]time.Time    // channels that left it, and when
	visibility   []Visibility            // their records, for the output
	visMsg       map[string]Reason       // their gate, per channel
	pendingLists []groupList             // budgets of the releases about to open
	moved        bool                    // something changed in the current pass
	deferSeen    map[Deferral]bool       // deferrals reported in this tick
	groups       map[string]*budgetGroup // by selector key
	inFlight     map[string]*work        // hosts in flight, and where
	quarantine   map[string][]Quarantine // the hosts that report quarantines
	deferrals    []Deferral
	prevDeferOK  map[Deferral]bool
	chUpdates    []ChannelUpdate
	events       []Event
	hostIntents  []HostIntent
	results      []IntentResult
}

// work is a rollout being reconciled: a private copy of its record plus
// what changed.
type work struct {
	r        Rollout
	isNew    bool
	from     RolloutState
	changed  bool
	orig     map[int]RolloutHost    // hosts as they came in, saved when first changed
	waveMsg  map[int]Reason         // the wave gate's reason, per wave
	waves    [][]int                // host indexes per wave
	preds    map[int][]int          // host index -> predecessor indexes
	succs    map[int][]int          // host index -> successor indexes
	groupOf  []*budgetGroup         // per budget index of the rollout
	counting bool                   // its budgets count in this pass
	stale    bool                   // no longer its channel's current rollout (groupsOf)
	held     map[int][]*budgetGroup // the groups each host in flight holds a slot in
	failed0  int                    // its failures when the tick began
	latest   bool                   // the latest rollout of its channel
}

func newTick(in Input) *tick {
	t := &tick{in: in, now: in.Now, obs: in.Hosts, channels: map[string]*Channel{}, byID: map[string]*work{},
		groups: map[string]*budgetGroup{}, prevDeferOK: map[Deferral]bool{}, deferSeen: map[Deferral]bool{}}
	if t.obs == nil {
		t.obs = map[string]ObservedHost{}
	}
	t.quarantine = map[string][]Quarantine{}
	for name, o := range t.obs {
		if len(o.Quarantine) > 0 {
			t.quarantine[name] = o.Quarantine
		}
	}
	for i := range in.Channels {
		c := in.Channels[i]
		t.channels[c.Name] = &c
	}
	for _, d := range in.Deferrals {
		t.prevDeferOK[d] = true
	}
	for i := range in.Rollouts {
		w := newWork(in.Rollouts[i], false)
		t.rollouts = append(t.rollouts, w)
		t.byID[w.r.ID] = w
	}
	t.sortRollouts()
	t.order = t.channelOrder()
	return t
}

func newWork(r Rollout, isNew bool) *work {
	w := &work{r: r, isNew: isNew, from: r.State}
	if isNew {
		w.from = ""
	}
	w.r.Hosts = slices.Clone(r.Hosts)
	byName := func(a, b RolloutHost) int { return strings.Compare(a.Hostname, b.Hostname) }
	if !slices.IsSortedFunc(w.r.Hosts, byName) {
		slices.SortFunc(w.r.Hosts, byName)
	}
	w.orig = map[int]RolloutHost{}
	w.waveMsg = map[int]Reason{}
	if r.State == RolloutConverged {
		w.failed0 = w.failures()
	}
	w.waves = make([][]int, max(len(r.Waves), 1))
	for i, h := range w.r.Hosts {
		wv := min(max(h.Wave, 0), len(w.waves)-1)
		w.waves[wv] = append(w.waves[wv], i)
	}
	if !slices.IsSortedFunc(r.Edges, compareEdges) {
		w.r.Edges = slices.Clone(r.Edges)
		sortEdges(w.r.Edges)
	}
	w.preds, w.succs = map[int][]int{}, map[int][]int{}
	for _, e := range r.Edges {
		a, b := w.index(e.Gates), w.index(e.Gated)
		if a < 0 || b < 0 || a == b {
			continue
		}
		w.preds[b] = append(w.preds[b], a)
		w.succs[a] = append(w.succs[a], b)
	}
	// Host indexes follow hostname order: sorted lists make reasons that
	// name "the first" predecessor independent of the order of Edges.
	for _, m := range []map[int][]int{w.preds, w.succs} {
		for k := range m {
			slices.Sort(m[k])
			m[k] = slices.Compact(m[k])
		}
	}
	return w
}

func (t *tick) sortRollouts() {
	slices.SortFunc(t.rollouts, func(a, b *work) int {
		if c := a.r.OpenedAt.Compare(b.r.OpenedAt); c != 0 {
			return c
		}
		return strings.Compare(a.r.ID, b.r.ID)
	})
	latest := map[string]*work{}
	for _, w := range t.rollouts {
		w.latest = false
		latest[w.r.Channel] = w
	}
	for _, w := range latest {
		w.latest = true
	}
}

// touch saves a host's record before its first change in the tick.
func (w *work) touch(i int) {
	if _, saved := w.orig[i]; !saved {
		w.orig[i] = w.r.Hosts[i]
	}
}

// index finds a host by name in the sorted host list, or -1.
func (w *work) index(name string) int {
	i := sort.Search(len(w.r.Hosts), func(i int) bool { return w.r.Hosts[i].Hostname >= name })
	if i < len(w.r.Hosts) && w.r.Hosts[i].Hostname == name {
		return i
	}
	return -1
}

// ---- events and changes ----

func (t *tick) emit(e Event) { t.events = append(t.events, e) }

// setRollout moves a rollout to a new state through the state machine.
func (t *tick) setRollout(w *work, ev RolloutEvent, reason Reason) bool {
	to, err := w.r.State.Next(ev)
	if err != nil {
		return false
	}
	t.emit(Event{Kind: EventRolloutTransition, RolloutID: w.r.ID, Channel: w.r.Channel, Wave: w.r.Wave,
		From: string(w.r.State), To: string(to), Reason: reason})
	w.r.State, w.r.Reason, w.r.UpdatedAt, w.r.ProgressAt = to, reason, t.now, t.now
	w.changed, t.moved = true, true
	return true
}

// setHost moves a host through the state machine, records the reason and
// emits the transition.
func (t *tick) setHost(w *work, i int, ev HostEvent, reason Reason) bool {
	h := &w.r.Hosts[i]
	to, err := h.State.Next(ev)
	if err != nil {
		return false
	}
	t.emit(Event{Kind: EventHostTransition, RolloutID: w.r.ID, Channel: w.r.Channel, Wave: h.Wave, Host: h.Hostname,
		From: string(h.State), To: string(to), Reason: reason})
	w.touch(i)
	h.State, h.Since, h.Reason, h.Blocked = to, t.now, reason, Reason{}
	w.r.ProgressAt = t.now
	w.changed, t.moved = true, true
	return true
}

// block records why a host was held; an event is emitted only when the
// reason changes, and not for hosts merely waiting for their wave.
func (t *tick) block(w *work, i int, why Reason) {
	h := &w.r.Hosts[i]
	if h.Blocked == why {
		return
	}
	w.touch(i)
	h.Blocked = why
	t.moved = true
	if why.Gate != GateWave && why.Gate != "" {
		t.emit(Event{Kind: EventHostWaiting, RolloutID: w.r.ID, Channel: w.r.Channel, Wave: h.Wave, Host: h.Hostname,
			From: string(h.State), Reason: why})
	}
}

// ---- 1. operator intents ----

func (t *tick) intents() {
	ints := slices.Clone(t.in.Intents)
	slices.SortFunc(ints, func(a, b Intent) int {
		return cmp.Or(a.At.Compare(b.At), strings.Compare(a.ID, b.ID))
	})
	for _, in := range ints {
		if in.At.After(t.now) {
			// Filed after the tick's clock was read (while it loaded its
			// input): the next tick takes it, in order.
			continue
		}
		res := IntentResult{IntentID: in.ID}
		w := t.byID[in.RolloutID]
		var ev RolloutEvent
		var code string
		switch in.Kind {
		case IntentPause:
			ev, code = EvPause, CodeOperatorPause
		case IntentResume:
			ev, code = EvResume, CodeOperatorResume
		case IntentCancel:
			ev, code = EvCancel, CodeOperatorCancel
		case IntentRollback:
			ev, code = EvRollback, CodeOperatorRollback
		}
		switch {
		case ev == "":
			res.Reason = Reason{Code: CodeUnknownIntent, Actor: in.Actor, Message: fmt.Sprintf("unknown intent %q", in.Kind)}
		case w == nil:
			res.Reason = Reason{Code: CodeUnknownRollout, Actor: in.Actor, Message: fmt.Sprintf("no rollout %q", in.RolloutID)}
		default:
			if _, err := w.r.State.Next(ev); err != nil {
				res.Reason = Reason{Code: CodeIllegalIntent, Actor: in.Actor,
					Message: fmt.Sprintf("cannot %s a rollout that is %s", in.Kind, w.r.State)}
				break
			}
			if ev == EvResume && w.r.Reason.Code == CodeRevertStalled {
				// Going forward again would roll its hosts out anew without
				// the proof the revert took away (rule 8).
				res.Reason = Reason{Code: CodeIllegalIntent, Actor: in.Actor,
					Message: fmt.Sprintf("cannot resume %s: its revert stalled and hosts were rolled back; roll it back again or cancel it", w.r.ID)}
				break
			}
			if newer := t.newerOnChannel(w); ev == EvRollback && newer != nil {
				res.Reason = Reason{Code: CodeIllegalIntent, Actor: in.Actor,
					Message: fmt.Sprintf("cannot roll back %s: %s is newer on channel %s; roll that one back", w.r.ID, newer.r.ID, w.r.Channel)}
				break
			}
			reason := Reason{Code: code, Actor: in.Actor, Message: fmt.Sprintf("%s by %s", in.Kind, actorName(in.Actor))}
			if ev == EvResume {
				// Failures so far are forgiven: onHealthFailure counts anew.
				w.r.FailuresForgiven = w.failures()
				reason.Message += fmt.Sprintf("; %d failed host(s) forgiven", w.r.FailuresForgiven)
			}
			t.setRollout(w, ev, reason)
			res.Accepted, res.Reason = true, reason
		}
		kind := EventIntentRefused
		if res.Accepted {
			kind = EventIntentAccepted
		}
		t.emit(Event{Kind: kind, RolloutID: in.RolloutID, Wave: -1, Reason: res.Reason})
		t.results = append(t.results, res)
	}
}

// newerOnChannel returns a rollout of the same channel opened after w, if
// any: only a channel's latest rollout may be rolled back, so that two
// rollouts never drive the channel's hosts at once.
func (t *tick) newerOnChannel(w *work) *work {
	for _, o := range t.rollouts {
		if o != w && o.r.Channel == w.r.Channel && (o.r.OpenedAt.After(w.r.OpenedAt) ||
			(o.r.OpenedAt.Equal(w.r.OpenedAt) && o.r.ID > w.r.ID)) {
			return o
		}
	}
	return nil
}

func actorName(a string) string {
	if a == "" {
		return "an unnamed operator"
	}
	return a
}

// ---- 2. host observations ----

// observing reports whether a rollout's hosts still move on observations:
// in-flight hosts of halted and cancelled rollouts finish; a converged
// rollout keeps catching up skipped hosts while it is the latest; and a
// host in flight is watched until it lands in any rollout, whatever
// became of the rollout (superseded, reverted, an older converged one).
func (w *work) observing() bool {
	switch w.r.State {
	case RolloutActive, RolloutHalted, RolloutReverting, RolloutCancelled:
		return true
	case RolloutConverged:
		return w.latest || w.anyInFlight()
	}
	return w.anyInFlight()
}

func (w *work) anyInFlight() bool {
	for _, h := range w.r.Hosts {
		if h.State.InFlight() {
			return true
		}
	}
	return false
}

func (t *tick) observe(w *work) {
	if !w.observing() {
		return
	}
	for i := range w.r.Hosts {
		t.observeHost(w, i)
	}
}

// observeHost applies what a host reports, repeatedly, until its state
// stops moving (a confirmed host with no soak converges in the same tick).
func (t *tick) observeHost(w *work, i int) {
	for range len(HostStates) {
		before := w.r.Hosts[i].State
		t.observeOnce(w, i)
		if w.r.Hosts[i].State == before {
			return
		}
	}
}

func (t *tick) observeOnce(w *work, i int) {
	confirm := t.in.Tunables.confirm()
	h := &w.r.Hosts[i]
	switch h.State {
	case HostActivating, HostSoaking, HostDeferred, HostRollingBack:
	default:
		return
	}
	o := t.obs[h.Hostname]
	act := o.Activation
	// An outcome counts for the host's current state only: not older than
	// it, and not about a state entered in this very tick (the agent has
	// not been told yet). One stamped after now was recorded while the tick
	// loaded its input, and waits for the next tick (rfcs/0006 §Tick loop 3).
	matches := act != nil && act.RolloutID == w.r.ID && act.Closure == h.Target && !act.At.Before(h.Since) &&
		!act.At.After(t.now) && h.Since.Before(t.now)
	switch h.State {
	case HostActivating:
		switch {
		case matches && act.Outcome == OutcomeConfirmed:
			t.setHost(w, i, EvConfirm, Reason{Code: CodeConfirmed, Message: "the agent confirmed the switch"})
		case matches && act.Outcome == OutcomeFailed:
			t.setHost(w, i, EvActivationFailed, Reason{Code: CodeActivationFailed, Message: detail("the activation failed", act.Detail)})
		case matches && act.Outcome == OutcomeManifestRejected:
			t.setHost(w, i, EvManifestRejected, Reason{Code: CodeManifestRejected, Message: detail("the agent refused the rollout manifest", act.Detail)})
		case matches && act.Outcome == OutcomeRolledBack && act.Code == CodeConfirmTimeout && t.blindWindow(w, h):
			t.setHost(w, i, EvConfirmUnheard, Reason{Code: CodeConfirmUnheard,
				Message: detail("the agent rolled back when its confirm window closed while the control plane could not hear it; not a failure: it catches up", act.Detail)})
		case matches && act.Outcome == OutcomeRolledBack:
			t.setHost(w, i, EvAgentRolledBack, Reason{Code: CodeAgentRolledBack, Message: detail("the agent rolled back to its previous closure", act.Detail)})
		case matches && act.Outcome == OutcomeDeferred:
			t.setHost(w, i, EvDeferredReported, Reason{Code: CodeDeferred, Message: "the target is staged for the next boot"})
		case t.now.Sub(h.Since) <= confirm:
		case o.LastSeen.After(h.Since.Add(confirm)) && t.blindWindow(w, h):
			// Heard again after a window the control plane could not hear:
			// its confirm may have been lost, and its agent rolled back (its
			// own safety). Not a failure; it catches up like a skipped host.
			t.setHost(w, i, EvConfirmUnheard, Reason{Code: CodeConfirmUnheard,
				Message: fmt.Sprintf("no confirmation within the %s confirm window, which ran while the control plane could not hear the host; not a failure: it catches up", confirm)})
		case !o.LastSeen.After(h.Since.Add(confirm)) && !t.judges(w.r.Channel):
			// Not heard since the window closed, and silence is not judged:
			// what the host says when it is heard again decides.
			t.block(w, i, t.silenceHold(w.r.Channel, CodeConfirmUnheard, "the confirm window closed without a word from the host"))
		default:
			t.setHost(w, i, EvConfirmTimeout, Reason{Code: CodeConfirmTimeout,
				Message: fmt.Sprintf("no confirmation within the %s confirm window", confirm)})
		}
	case HostSoaking:
		soak := w.soak(h.Wave)
		if (h.Blocked.Gate == GateUnheard || h.Blocked.Gate == GateVisibility) && t.heard(o) {
			t.block(w, i, Reason{}) // heard again: the silence hold is over
		}
		switch {
		case matches && act.Outcome == OutcomeRolledBack:
			t.setHost(w, i, EvAgentRolledBack, Reason{Code: CodeAgentRolledBack, Message: detail("the agent rolled back to its previous closure", act.Detail)})
		case !t.heard(o) && !t.judges(w.r.Channel):
			// Silent, but the control plane cannot tell: the soak waits.
			t.block(w, i, t.silenceHold(w.r.Channel, "", "silent while soaking"))
		case !t.heard(o):
			t.setHost(w, i, EvUnhealthy, Reason{Code: CodeOfflineSoaking, Message: "the host stopped checking in while soaking"})
		case o.LastSeen.Before(h.Since):
			// Health is judged from check-ins since the confirm: the status
			// stored before it describes the closure the host left.
		case unhealthy(o, w.r.HealthGate, h.Target) != "":
			t.setHost(w, i, EvUnhealthy, Reason{Code: CodeUnhealthy, Message: unhealthy(o, w.r.HealthGate, h.Target)})
		case t.now.Sub(h.Since) >= soak && !o.LastSeen.Before(h.Since.Add(soak)):
			t.setHost(w, i, EvSoaked, Reason{Code: CodeSoaked, Message: fmt.Sprintf("healthy for the %s soak", soak)})
		}
	case HostDeferred:
		switch {
		case matches && act.Outcome == OutcomeRolledBack:
			t.setHost(w, i, EvAgentRolledBack, Reason{Code: CodeAgentRolledBack, Message: detail("the agent rolled back to its previous closure", act.Detail)})
		case matches && act.Outcome == OutcomeFailed:
			t.setHost(w, i, EvActivationFailed, Reason{Code: CodeActivationFailed, Message: detail("the boot into the target failed", act.Detail)})
		}
	case HostRollingBack:
		switch {
		case o.Current == h.Previous && o.LastSeen.After(h.Since):
			t.setHost(w, i, EvRolledBack, Reason{Code: CodeRolledBack, Message: "back on the previous closure " + h.Previous})
		case t.now.Sub(h.Since) <= confirm:
		case !o.LastSeen.After(h.Since.Add(confirm)) && !t.judges(w.r.Channel):
			t.block(w, i, t.silenceHold(w.r.Channel, "", "not back on the previous closure within the confirm window, and not heard since"))
		default:
			t.setHost(w, i, EvRollbackTimeout, Reason{Code: CodeRollbackTimeout,
				Message: fmt.Sprintf("not seen on the previous closure within %s", confirm)})
		}
	}
}

func detail(msg, d string) string {
	if d == "" {
		return msg
	}
	return msg + ": " + d
}

// unhealthy returns why o fails the health gate for target, or "".
func unhealthy(o ObservedHost, g proto.HealthGate, target string) string {
	var why []string
	if o.Current != target {
		why = append(why, fmt.Sprintf("runs %s, not the target", orNone(o.Current)))
	}
	if g.SystemdFailedUnits != nil && len(o.FailedUnits) > g.SystemdFailedUnits.Max {
		why = append(why, fmt.Sprintf("%d failed systemd unit(s) (%s), at most %d allowed",
			len(o.FailedUnits), strings.Join(sortedCopy(o.FailedUnits), ", "), g.SystemdFailedUnits.Max))
	}
	if len(o.Probes.Failed) > 0 {
		why = append(why, fmt.Sprintf("health probe(s) failing: %s", strings.Join(sortedCopy(o.Probes.Failed), ", ")))
	}
	if g.ComplianceProbes != nil && g.ComplianceProbes.Required {
		if f := failingControls(o, target, ControlRuntime, nil); len(f) > 0 {
			why = append(why, "compliance control(s) failing: "+strings.Join(f, ", "))
		}
	}
	return strings.Join(why, "; ")
}

// failingControls lists the failing compliance controls of a kind
// (static or runtime; "both" counts as either) for a closure, restricted
// to frameworks when given.
func failingControls(o ObservedHost, closure, kind string, frameworks []string) []string {
	var out []string
	for _, c := range o.Compliance {
		if c.Passed || c.Closure != closure || (c.Type != kind && c.Type != ControlBoth) {
			continue
		}
		if len(frameworks) > 0 && c.Framework != "" && !slices.Contains(frameworks, c.Framework) {
			continue
		}
		name := c.Control
		if c.Framework != "" {
			name += " (" + c.Framework + ")"
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func orNone(s string) string {
	if s == "" {
		return "nothing known"
	}
	return s
}

func (w *work) soak(wave int) time.Duration {
	if wave < 0 || wave >= len(w.r.Waves) {
		return 0
	}
	return time.Duration(w.r.Waves[wave].SoakMinutes) * time.Minute
}

// ---- 3. health policy ----

// failures counts the hosts that failed the rollout: Failed (except a
// rollback that timed out during a revert), and Reverted by their own
// agent.
func (w *work) failures() int {
	n := 0
	for _, h := range w.r.Hosts {
		switch {
		case h.State == HostFailed && h.Reason.Code != CodeRollbackTimeout:
			n++
		case h.State == HostReverted && h.Reason.Code == CodeAgentRolledBack:
			n++
		}
	}
	return n
}

func (w *work) maxFailures() int {
	if m := w.r.HealthGate.MaxFailures; m != nil && *m > 0 {
		return *m
	}
	return 0
}

func (t *tick) healthPolicy(w *work) {
	rollback := w.r.OnHealthFailure == proto.OnHealthFailureRollbackAndHalt
	// A rollout paused or stalled still reverts when its hosts fail; one
	// whose revert stalled stays halted for an operator. A converged one
	// still catches up skipped hosts while it is the channel's latest:
	// their failures count too (rule 9), when one happens (a failure
	// recorded before is not judged again).
	haltedMayRevert := w.r.State == RolloutHalted && rollback && w.r.Reason.Code != CodeRevertStalled
	catchingUp := w.r.State == RolloutConverged && w.latest && w.failures() > w.failed0
	if w.r.State != RolloutActive && !haltedMayRevert && !catchingUp {
		return
	}
	failed := w.failures() - w.r.FailuresForgiven
	if failed <= w.maxFailures() {
		return
	}
	reason := Reason{Code: CodeHealthFailure, Message: fmt.Sprintf("%d host(s) failed, healthGate.maxFailures is %d; onHealthFailure is %s",
		failed, w.maxFailures(), cmp.Or(w.r.OnHealthFailure, proto.OnHealthFailureHalt))}
	if rollback {
		t.setRollout(w, EvRollback, reason)
	} else {
		t.setRollout(w, EvHealthHalt, reason)
	}
}
