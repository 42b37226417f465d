package reconciler

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/schedule"
)

// Change control (rfcs/0003 rules 13 and 14): maintenance windows say when
// a host may be dispatched; freezes say when nothing new rolls out on a
// channel. Both are judged with the tick's time only. Neither holds what is
// already moving: a host in flight finishes, a soak runs past the end of a
// window, and rollbacks go out whenever they must (a rollback undoes a
// change; holding it would keep a broken release on the host).

// HostWindows are the maintenance windows that apply to a host of a
// rollout: those of the first host selector that lists it, else its
// wave's, else the channel's. None means any time.
func HostWindows(r *Rollout, h *RolloutHost) []proto.Window {
	for _, hw := range r.HostWindows {
		if _, found := slices.BinarySearch(hw.Hosts, h.Hostname); found {
			return hw.Windows
		}
	}
	if h.Wave >= 0 && h.Wave < len(r.Waves) && len(r.Waves[h.Wave].Windows) > 0 {
		return r.Waves[h.Wave].Windows
	}
	return r.Windows
}

// freezesOf returns the freezes in force on a channel now, from its latest
// verified release: a freeze pushed in a new release holds the channel's
// current rollout too.
func (t *tick) freezesOf(channel string) []proto.Freeze {
	if fs, ok := t.frozen[channel]; ok {
		return fs
	}
	var fs []proto.Freeze
	if c := t.channels[channel]; c != nil && c.Fleet != nil {
		fs = schedule.FreezeAt(c.Fleet.Freezes, channel, t.now)
		for _, f := range c.Fleet.Freezes {
			if len(f.Channels) == 0 || slices.Contains(f.Channels, channel) {
				t.wake(f.From)
				t.wake(f.Until)
			}
		}
	}
	if t.frozen == nil {
		t.frozen = map[string][]proto.Freeze{}
	}
	t.frozen[channel] = fs
	return fs
}

// freezeReason explains the freezes that hold a channel; its message does
// not change while they last.
func freezeReason(channel string, fs []proto.Freeze) Reason {
	until := fs[0].Until
	var why []string
	for _, f := range fs {
		if f.Until.After(until) {
			until = f.Until
		}
		why = append(why, f.Reason)
	}
	return Reason{Gate: codes.Freeze, Code: codes.Freeze,
		Message: fmt.Sprintf("channel %s is frozen until %s: %s", channel, stamp(until), strings.Join(why, "; "))}
}

// timeGate returns the change-control gate that holds a host, or a zero
// Reason: a freeze its rollout did not break (rule 14), its wave's
// missing approvals (rule 15), its closed windows (rule 13). Each
// message stays the same while it holds (the approvals' changes with
// each approval); a window's names the next opening.
func (t *tick) timeGate(w *work, i int) Reason {
	if fs := t.freezesOf(w.r.Channel); len(fs) > 0 && w.r.FreezeBreak == nil {
		return freezeReason(w.r.Channel, fs)
	}
	h := &w.r.Hosts[i]
	if why := approvalGate(w, h.Wave); why.Gate != "" {
		return why
	}
	ws := HostWindows(&w.r, h)
	if len(ws) == 0 {
		return Reason{}
	}
	st := t.windowsAt(ws)
	if st.Open {
		return Reason{}
	}
	return Reason{Gate: codes.Window, Code: codes.Window, Message: windowMessage(st)}
}

// windowsAt is schedule.At(ws, now), once per tick for each list of
// windows: the hosts of a wave or a channel share their rollout's frozen
// list, so a tick over many hosts computes each list's openings once.
func (t *tick) windowsAt(ws []proto.Window) schedule.Status {
	key := &ws[0]
	if st, ok := t.windowStatus[key]; ok {
		return st
	}
	st := schedule.At(ws, t.now)
	if st.Open && !st.Current.End.IsZero() {
		t.wake(st.Current.End)
	}
	if !st.Next.Start.IsZero() {
		t.wake(st.Next.Start)
	}
	if t.windowStatus == nil {
		t.windowStatus = map[*proto.Window]schedule.Status{}
	}
	t.windowStatus[key] = st
	return st
}

// windowMessage says when the next window opens, in its own zone and in
// UTC.
func windowMessage(st schedule.Status) string {
	if st.Next.Start.IsZero() {
		return "outside its maintenance windows, and none opens"
	}
	return fmt.Sprintf("outside its maintenance window; the next opens %s (%s)", st.Next.Label(), stamp(st.Next.Start))
}

// windowUntil is when a host held by its window may move: the next
// opening (zero when none).
func windowUntil(r *Rollout, h *RolloutHost, now time.Time) (time.Time, string) {
	st := schedule.At(HostWindows(r, h), now)
	if st.Open || st.Next.Start.IsZero() {
		return time.Time{}, ""
	}
	return st.Next.Start, st.Next.Label()
}

// approx is a duration in at most two units: "3 h 12 min", "45 s".
func approx(d time.Duration) string {
	secs := int64(d.Round(time.Second) / time.Second)
	switch {
	case secs < 60:
		return fmt.Sprintf("%d s", secs)
	case secs < 3600:
		return fmt.Sprintf("%d min", secs/60)
	case secs < 86400:
		return fmt.Sprintf("%d h %d min", secs/3600, secs%3600/60)
	}
	return fmt.Sprintf("%d d %d h", secs/86400, secs%86400/3600)
}

// Approvers returns the distinct approvers of a rollout's wave, in the
// order they approved.
func Approvers(r *Rollout, wave int) []string {
	var out []string
	for _, a := range r.Approvals {
		if a.Wave == wave && !slices.Contains(out, a.Actor) {
			out = append(out, a.Actor)
		}
	}
	return out
}

// approvalGate holds the hosts of a wave that needs more approvals than
// it has (rule 15).
func approvalGate(w *work, wave int) Reason {
	if wave < 0 || wave >= len(w.r.Waves) {
		return Reason{}
	}
	need := w.r.Waves[wave].Approval.Need()
	got := Approvers(&w.r, wave)
	if len(got) >= need {
		return Reason{}
	}
	so := "none yet"
	if len(got) > 0 {
		so = fmt.Sprintf("%d so far: %s", len(got), strings.Join(got, ", "))
	}
	// The command that approves is not in the message: each held host
	// would repeat it. A host's situation names it as its next step
	// (Situate), and the approval_needed event adds it (waveStarts).
	return Reason{Gate: codes.Approval, Code: codes.Approval,
		Message: fmt.Sprintf("%s needs %d approval(s) (%s)", w.waveLabel(wave), need, so)}
}

// waveStarts journals a wave that became its rollout's current one while
// it still needs approvals (rule 15): once, as it starts, so that
// approvers can be told, with the command that approves it.
func (t *tick) waveStarts(w *work) {
	if why := approvalGate(w, w.r.Wave); why.Gate != "" {
		why.Message += fmt.Sprintf("; an approver runs nixfleet rollout approve %s --wave %d", w.r.ID, w.r.Wave)
		t.emit(Event{Kind: EventApprovalNeeded, RolloutID: w.r.ID, Channel: w.r.Channel, Wave: w.r.Wave, Reason: why})
	}
}

// changeIntent decides an approve or break-freeze intent (rules 14, 15).
func (t *tick) changeIntent(in Intent, w *work) IntentResult {
	res := IntentResult{IntentID: in.ID}
	refuse := func(code, format string, args ...any) IntentResult {
		res.Reason = Reason{Code: code, Actor: in.Actor, Message: fmt.Sprintf(format, args...)}
		return res
	}
	accept := func(code, msg string) IntentResult {
		if in.Comment != "" {
			msg += ": " + in.Comment
		}
		res.Accepted, res.Reason = true, Reason{Code: code, Actor: in.Actor, Message: msg}
		return res
	}
	if in.Kind == IntentBreakFreeze {
		return t.breakFreeze(in, w, refuse, accept)
	}
	switch {
	case w == nil:
		return refuse(codes.UnknownRollout, "no rollout %q", in.RolloutID)
	case w.r.State.Terminal():
		return refuse(codes.NotApprovable, "rollout %s is %s; there is nothing left to approve", w.r.ID, w.r.State)
	case in.Wave == nil || *in.Wave < 0 || *in.Wave >= len(w.r.Waves):
		return refuse(codes.NotApprovable, "rollout %s has waves 0 to %d; an approval names one", w.r.ID, len(w.r.Waves)-1)
	}
	wave := *in.Wave
	need := w.r.Waves[wave].Approval.Need()
	switch {
	case need == 0:
		return refuse(codes.NotApprovable, "%s of %s needs no approval", w.waveLabel(wave), w.r.ID)
	case wave < w.r.Wave:
		return refuse(codes.NotApprovable, "%s of %s is done; there is nothing left to approve", w.waveLabel(wave), w.r.ID)
	}
	got := Approvers(&w.r, wave)
	if slices.Contains(got, in.Actor) {
		res.Accepted = true
		res.Reason = Reason{Code: codes.AlreadyInState, Actor: in.Actor,
			Message: fmt.Sprintf("%s approved %s of %s already; an approver counts once (%d of %d)", actorName(in.Actor), w.waveLabel(wave), w.r.ID, len(got), need)}
		return res
	}
	w.r.Approvals = append(w.r.Approvals, Approval{Wave: wave, Actor: in.Actor, At: t.now, Intent: in.ID})
	w.changed = true
	return accept(codes.OperatorApprove, fmt.Sprintf("%s approved by %s (%d of %d)", w.waveLabel(wave), actorName(in.Actor), len(got)+1, need))
}

// breakFreeze lets one rollout through its channel's freezes: a running
// one, or the channel's ref that a freeze alone keeps from opening now.
func (t *tick) breakFreeze(in Intent, w *work, refuse func(string, string, ...any) IntentResult, accept func(string, string) IntentResult) IntentResult {
	if w != nil {
		fs := t.freezesOf(w.r.Channel)
		switch {
		case w.r.State.Terminal():
			return refuse(codes.NotFrozen, "rollout %s is %s; nothing is left to let through", w.r.ID, w.r.State)
		case len(fs) == 0:
			return refuse(codes.NotFrozen, "no freeze holds channel %s now", w.r.Channel)
		case w.r.FreezeBreak != nil:
			res := accept(codes.AlreadyInState, fmt.Sprintf("%s broke the freezes for %s already", actorName(w.r.FreezeBreak.Actor), w.r.ID))
			res.Reason.Message = strings.TrimSuffix(res.Reason.Message, ": "+in.Comment)
			return res
		}
		w.r.FreezeBreak = &FreezeBreak{Actor: in.Actor, At: t.now, Intent: in.ID, Comment: in.Comment}
		w.changed = true
		return accept(codes.FreezeBroken, fmt.Sprintf("%s lets %s through the freezes of channel %s", actorName(in.Actor), w.r.ID, w.r.Channel))
	}
	for _, name := range t.order {
		c := t.channels[name]
		if c == nil || c.Ref == "" || proto.RolloutID(name, c.Ref) != in.RolloutID {
			continue
		}
		switch {
		case !t.pendingRef(name):
			return refuse(codes.UnknownRollout, "no rollout %q", in.RolloutID)
		case len(t.freezesOf(name)) == 0:
			return refuse(codes.NotFrozen, "no freeze holds channel %s now", name)
		case t.nonTerminal(name) != nil:
			return refuse(codes.NotFrozen, "%s cannot open now: it waits for %s; break the freeze when it can open", in.RolloutID, t.nonTerminal(name).r.ID)
		case t.channelBlocker(name) != nil:
			return refuse(codes.NotFrozen, "%s cannot open now: channel %s waits for channel %s; break the freeze when it can open", in.RolloutID, name, t.channelBlocker(name).channel)
		}
		t.openBreaks[name] = &FreezeBreak{Actor: in.Actor, At: t.now, Intent: in.ID, Comment: in.Comment}
		return accept(codes.FreezeBroken, fmt.Sprintf("%s lets %s open through the freezes of channel %s", actorName(in.Actor), in.RolloutID, name))
	}
	return refuse(codes.UnknownRollout, "no rollout %q", in.RolloutID)
}
