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
	c := t.channels[channel]
	if c == nil || c.Fleet == nil {
		return nil
	}
	return schedule.FreezeAt(c.Fleet.Freezes, channel, t.now)
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

// timeGate returns the freeze or the closed window that holds a host, or
// a zero Reason (rules 13, 14). Its message names the next opening, which
// does not change while the window is closed.
func (t *tick) timeGate(w *work, i int) Reason {
	if fs := t.freezesOf(w.r.Channel); len(fs) > 0 {
		return freezeReason(w.r.Channel, fs)
	}
	h := &w.r.Hosts[i]
	ws := HostWindows(&w.r, h)
	if len(ws) == 0 {
		return Reason{}
	}
	st := schedule.At(ws, t.now)
	if st.Open {
		return Reason{}
	}
	return Reason{Gate: codes.Window, Code: codes.Window, Message: windowMessage(st)}
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
