package reconciler

import (
	"cmp"
	"slices"
	"strings"
)

// The Output of a tick: what changed, in a deterministic order.

// output assembles the tick's Output from what changed.
func (t *tick) output() Output {
	vis, visEvents := t.visibilityOutput()
	// Visibility is judged first in a tick; its events lead, though a
	// verdict may have been judged again once a rollout opened.
	out := Output{Rollouts: []RolloutUpdate{}, Hosts: []HostUpdate{}, Actions: t.actions,
		Events: append(visEvents, t.events...), IntentResults: t.results, Deferrals: t.deferrals,
		Channels: t.chUpdates, Visibility: vis, Measure: t.measureRequests()}
	for _, w := range t.rollouts {
		if w.isNew {
			out.Rollouts = append(out.Rollouts, RolloutUpdate{New: true, Rollout: w.r})
			continue
		}
		if w.changed {
			head := w.r
			head.Hosts = nil
			out.Rollouts = append(out.Rollouts, RolloutUpdate{From: w.from, Rollout: head})
		}
		touched := make([]int, 0, len(w.orig))
		for i := range w.orig {
			touched = append(touched, i)
		}
		slices.Sort(touched)
		for _, i := range touched {
			if !sameHost(w.orig[i], w.r.Hosts[i]) {
				out.Hosts = append(out.Hosts, HostUpdate{RolloutID: w.r.ID, From: w.orig[i].State, Host: w.r.Hosts[i]})
			}
		}
	}
	if t.cut {
		// The channels the tick did not reach wait as they did.
		for _, d := range t.in.Deferrals {
			if !t.reached[d.Channel] {
				out.Deferrals = append(out.Deferrals, d)
			}
		}
	}
	slices.SortFunc(out.Deferrals, func(a, b Deferral) int {
		return cmp.Or(strings.Compare(a.Channel, b.Channel), strings.Compare(a.Ref, b.Ref), strings.Compare(a.BlockedBy, b.BlockedBy))
	})
	if out.Actions == nil {
		out.Actions = []HostAction{}
	}
	if out.Events == nil {
		out.Events = []Event{}
	}
	if out.IntentResults == nil {
		out.IntentResults = []IntentResult{}
	}
	if out.Deferrals == nil {
		out.Deferrals = []Deferral{}
	}
	if out.Channels == nil {
		out.Channels = []ChannelUpdate{}
	}
	if out.Visibility == nil {
		out.Visibility = []Visibility{}
	}
	out.QuietUntil, out.WakeAt = t.wakeAt, t.wakeAt
	if len(out.Actions)+len(out.Events)+len(out.Rollouts)+len(out.Hosts)+len(out.IntentResults)+len(out.Channels) > 0 {
		out.QuietUntil = t.now
		// A tick stopped at its bound whose changes all cancelled out
		// made no progress: it does not ask for another at once.
		out.More = t.cut
	}
	return out
}

func sameHost(a, b RolloutHost) bool {
	return a.Hostname == b.Hostname && a.Wave == b.Wave && a.Target == b.Target && a.State == b.State &&
		a.Since.Equal(b.Since) && a.Previous == b.Previous && a.Reason == b.Reason && a.Blocked == b.Blocked &&
		slices.Equal(a.Budgets, b.Budgets)
}
