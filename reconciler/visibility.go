package reconciler

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
)

// What the control plane can see (rfcs/0003 rule 6). Silence is not
// failure: a host the control plane does not hear may be down, or the
// control plane may be the one that is blind — just started, back from a
// lost database, or cut off from a part of the network. Silence is judged
// as a cohort: a host is late after Tunables.LateAfter without a
// check-in, and a channel with too many late hosts at once is in partial
// visibility; a host's silence is judged (a Pending host skipped, a
// soaking host failed, a confirm window counted as a failure) only once
// it is offline (Tunables.OfflineThreshold), the control plane has
// watched for one offline threshold, and its channel is neither in
// partial visibility nor recovering from it. A partition's hosts are all
// late before the first of them is offline, so none of them is judged
// alone; otherwise the channel holds and says why.

// heard reports whether a host checked in within the offline threshold.
// A check-in later than now (recorded while the tick loaded its input)
// counts as heard now.
func (t *tick) heard(o ObservedHost) bool {
	if o.AlwaysHeard {
		return true
	}
	h := t.in.Tunables.Heard(o.LastSeen, t.now)
	if h {
		t.wake(o.LastSeen.Add(t.in.Tunables.offline() + time.Nanosecond)) // it falls silent then
	}
	return h
}

// late reports whether a host has not checked in within the late
// threshold (Tunables.LateAfter), or never did: it counts toward its
// channel's silent share.
func (t *tick) late(o ObservedHost) bool {
	if o.AlwaysHeard {
		return false
	}
	if t.in.Tunables.Late(o.LastSeen, t.now) {
		return true
	}
	t.wake(o.LastSeen.Add(t.in.Tunables.LateAfter() + time.Nanosecond)) // it is late then
	return false
}

// warm reports whether the control plane has watched its hosts for one
// offline threshold: before that, not hearing a host says nothing.
func (t *tick) warm() bool {
	if t.in.WatchingSince.IsZero() {
		return true
	}
	t.wake(t.watchEnd())
	return !t.now.Before(t.watchEnd())
}

// watchEnd is when the current watch has lasted one offline threshold.
func (t *tick) watchEnd() time.Time {
	return t.in.WatchingSince.Add(t.in.Tunables.offline())
}

// judges reports whether silence is judged on a channel now: the control
// plane has watched long enough, and the channel is neither in partial
// visibility nor within an offline threshold of its end (the tail of a
// partition that heals host by host is not judged at once).
func (t *tick) judges(channel string) bool {
	return t.warm() && !t.partial[channel] && t.recovering[channel].IsZero()
}

// silenceHold is the reason a silent host is left as it is instead of
// being judged; its code is the gate's unless one is given (a held
// confirm window is marked confirm_unheard).
func (t *tick) silenceHold(channel, code, what string) Reason {
	switch {
	case t.partial[channel]:
		return Reason{Gate: codes.PartialVisibility, Code: cmp.Or(code, codes.PartialVisibility),
			Message: fmt.Sprintf("%s; channel %s is in partial visibility, where silence is not judged", what, channel)}
	case !t.warm():
		return Reason{Gate: codes.Unheard, Code: cmp.Or(code, codes.Unheard),
			Message: fmt.Sprintf("%s; the control plane has watched its hosts only since %s and judges no silence before %s",
				what, stamp(t.in.WatchingSince), stamp(t.watchEnd()))}
	}
	ended := t.recovering[channel]
	return Reason{Gate: codes.Unheard, Code: cmp.Or(code, codes.Unheard),
		Message: fmt.Sprintf("%s; channel %s left partial visibility at %s and judges no silence before %s",
			what, channel, stamp(ended), stamp(ended.Add(t.in.Tunables.offline())))}
}

// unheardBlock is why a Pending host that is not heard is neither skipped
// nor dispatched while the control plane warms up.
func (t *tick) unheardBlock(w *work, o ObservedHost) Reason {
	what := "never heard from"
	if !o.LastSeen.IsZero() {
		what = "not heard from since " + stamp(o.LastSeen)
	}
	return t.silenceHold(w.r.Channel, "", what)
}

// visibilityBlock is the gate of a channel in partial visibility, made
// once per tick.
func (t *tick) visibilityBlock(channel string) Reason {
	why, ok := t.visMsg[channel]
	if !ok {
		why = Reason{Gate: codes.PartialVisibility, Code: codes.PartialVisibility,
			Message: fmt.Sprintf("channel %s is in partial visibility: nothing is dispatched until most of its hosts are heard again", channel)}
		t.visMsg[channel] = why
	}
	return why
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05Z") }

// silence counts the late hosts of a channel, and its hosts: those of its
// verified release and of its latest rollout (a host the new release
// moved elsewhere is still driven by that rollout until it opens another).
// Both lists are sorted by hostname: one merge walk, no set.
func (t *tick) silence(name string) (silent, total int) {
	var a []proto.HostWave
	if c := t.channels[name]; c != nil && c.Manifest != nil {
		a = c.Manifest.HostSet
	}
	var b []RolloutHost
	if w := t.latestOf(name); w != nil {
		b = w.r.Hosts
	}
	count := func(host string) {
		total++
		if t.late(t.obs[host]) {
			silent++
		}
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i].Hostname < b[j].Hostname):
			count(a[i].Hostname)
			i++
		case i == len(a) || b[j].Hostname < a[i].Hostname:
			count(b[j].Hostname)
			j++
		default:
			count(a[i].Hostname)
			i, j = i+1, j+1
		}
	}
	return silent, total
}

// see decides which channels are in partial visibility at the start of
// the tick. A channel that left it stays recovering for one offline
// threshold, its record kept with the time it ended. It judges while the
// control plane warms up too: a channel most of whose hosts have not been
// heard since the control plane started holds as it would one threshold
// later (rfcs/0013 rule 4).
func (t *tick) see() {
	t.partial, t.recovering, t.visMsg = map[string]bool{}, map[string]time.Time{}, map[string]Reason{}
	t.prevVis, t.verdicts = map[string]Visibility{}, map[string]verdict{}
	for _, v := range t.in.Visibility {
		t.prevVis[v.Channel] = v
	}
	names := map[string]bool{}
	for n := range t.channels {
		names[n] = true
	}
	for _, w := range t.rollouts {
		names[w.r.Channel] = true
	}
	for n := range t.prevVis {
		names[n] = true
	}
	for _, name := range sortedNames(names) {
		t.judge(name)
	}
}

// rejudge judges a channel again after the tick opened a rollout on it:
// its hosts are now those of the new rollout, and the rest of the tick
// (and the next one) sees the channel as the tick leaves it. It reports
// whether the verdict changed.
func (t *tick) rejudge(name string) bool {
	before := t.verdicts[name]
	t.judge(name)
	return t.verdicts[name].rec.Ended.IsZero() != before.rec.Ended.IsZero() || t.verdicts[name].kept != before.kept
}

// verdict is what a tick concluded about one channel's visibility: the
// record it keeps (kept false: none, the channel is simply seen), and the
// event that reports a change since the previous tick.
type verdict struct {
	rec   Visibility
	kept  bool
	event *Event
}

// judge decides one channel's visibility from its late share and the
// previous tick's record.
func (t *tick) judge(name string) {
	pct, floor := t.in.Tunables.visibilityPct(), t.in.Tunables.visibilityFloor()
	silent, total := t.silence(name)
	was, known := t.prevVis[name]
	wasPartial := known && was.Ended.IsZero()
	var v verdict
	switch {
	case silent*100 > pct*total && silent >= floor:
		v = verdict{rec: Visibility{Channel: name, Since: t.now, Silent: silent, Total: total}, kept: true}
		if wasPartial {
			v.rec.Since = was.Since
		} else {
			watch := ""
			if !t.warm() {
				watch = fmt.Sprintf(" (the control plane has watched its hosts only since %s)", stamp(t.in.WatchingSince))
			}
			v.event = &Event{Kind: EventPartialVisibility, Channel: name, Wave: -1, Reason: Reason{Code: codes.PartialVisibility,
				Message: fmt.Sprintf("%d of %d hosts not heard from for more than %s (more than %d%%)%s: the control plane cannot tell failed hosts from its own blindness, so nothing on the channel is skipped, failed for silence, promoted or dispatched until most are heard again",
					silent, total, t.in.Tunables.LateAfter(), pct, watch)}}
		}
	case wasPartial:
		t.wake(t.now.Add(t.in.Tunables.offline())) // it stops recovering then
		v = verdict{rec: Visibility{Channel: name, Since: was.Since, Ended: t.now, Silent: silent, Total: total}, kept: true,
			event: &Event{Kind: EventVisibilityRestored, Channel: name, Wave: -1, Reason: Reason{Code: codes.VisibilityRestored,
				Message: fmt.Sprintf("%d of %d hosts late; partial visibility since %s is over and the channel moves again (silence is judged from %s)",
					silent, total, stamp(was.Since), stamp(t.now.Add(t.in.Tunables.offline())))}}}
	case known && t.now.Before(was.Ended.Add(t.in.Tunables.offline())):
		v = verdict{rec: was, kept: true} // recovering
		t.wake(was.Ended.Add(t.in.Tunables.offline()))
	}
	t.setVerdict(name, v)
}

func (t *tick) setVerdict(name string, v verdict) {
	t.verdicts[name] = v
	delete(t.partial, name)
	delete(t.recovering, name)
	delete(t.visMsg, name)
	switch {
	case !v.kept:
	case v.rec.Ended.IsZero():
		t.partial[name] = true
	default:
		t.recovering[name] = v.rec.Ended
	}
}

// visibilityOutput returns the records the tick keeps and the events that
// report changes, by channel name.
func (t *tick) visibilityOutput() ([]Visibility, []Event) {
	var recs []Visibility
	var events []Event
	for _, name := range slices.Sorted(maps.Keys(t.verdicts)) {
		v := t.verdicts[name]
		if v.event != nil {
			events = append(events, *v.event)
		}
		if v.kept {
			recs = append(recs, v.rec)
		}
	}
	return recs, events
}

func sortedNames(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// blindWindow reports whether a host's confirm window ran while the
// control plane could not hear it: the watch began after the host was
// dispatched (the control plane was down or lost its store), the window
// closed while silence was held (its mark), or the channel is in partial
// visibility or recovering from it now. A missing confirm of a host heard
// again after its window is then not the host's failure.
func (t *tick) blindWindow(w *work, h *RolloutHost) bool {
	return h.Blocked.Code == codes.ConfirmUnheard || t.in.WatchingSince.After(h.Since) || t.partial[w.r.Channel] ||
		!t.recovering[w.r.Channel].IsZero()
}
