// Package schedule evaluates the time-based parts of change control
// (rfcs/0001 §2.2): weekly maintenance windows in IANA time
// zones and absolute freezes. It is pure: every answer is for a time the
// caller gives.
//
// The time zone database is embedded (time/tzdata), so that every binary
// that links this package — the control plane, the CLI, CI's validation —
// reads the same rules whatever the operating system ships.
package schedule

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // the same zone rules on every machine

	"github.com/nixfleet/nixfleet/proto"
)

// Days are the day names of a window, Monday first.
var Days = []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}

// MaxDurationMinutes is the longest window: a week.
const MaxDurationMinutes = 7 * 24 * 60

// weekday maps a day name to time's weekday.
var weekday = map[string]time.Weekday{"mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday, "sun": time.Sunday}

// zones caches loaded locations: LoadLocation parses the embedded
// database each time.
var zones sync.Map // name -> *time.Location

// Location loads an IANA time zone by name.
func Location(name string) (*time.Location, error) {
	if l, ok := zones.Load(name); ok {
		return l.(*time.Location), nil
	}
	if name == "" || name == "Local" {
		return nil, fmt.Errorf("time zone %q: name an IANA zone, like Europe/Berlin or UTC", name)
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("time zone %q is not in the IANA database", name)
	}
	zones.Store(name, l)
	return l, nil
}

// Check reports what is wrong with a window, or nil.
func Check(w proto.Window) error {
	var problems []string
	if len(w.Days) == 0 {
		problems = append(problems, "days is empty")
	}
	seen := map[string]bool{}
	for _, d := range w.Days {
		_, known := weekday[d]
		switch {
		case !known:
			problems = append(problems, fmt.Sprintf("day %q is not one of %s", d, strings.Join(Days, ", ")))
		case seen[d]:
			problems = append(problems, fmt.Sprintf("day %q is listed twice", d))
		}
		seen[d] = true
	}
	if _, _, err := clock(w.Start); err != nil {
		problems = append(problems, err.Error())
	}
	if w.DurationMinutes < 1 || w.DurationMinutes > MaxDurationMinutes {
		problems = append(problems, fmt.Sprintf("durationMinutes %d must be between 1 and %d", w.DurationMinutes, MaxDurationMinutes))
	}
	if _, err := Location(w.TimeZone); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// clock parses "HH:MM".
func clock(s string) (hour, minute int, err error) {
	digit := func(i int) bool { return s[i] >= '0' && s[i] <= '9' }
	if len(s) != 5 || s[2] != ':' || !digit(0) || !digit(1) || !digit(3) || !digit(4) {
		return 0, 0, fmt.Errorf("start %q is not HH:MM", s)
	}
	hour, minute = int(s[0]-'0')*10+int(s[1]-'0'), int(s[3]-'0')*10+int(s[4]-'0')
	if hour > 23 || minute > 59 {
		return 0, 0, fmt.Errorf("start %q is not a time of day HH:MM (00:00 to 23:59)", s)
	}
	return hour, minute, nil
}

// Opening is one opening of a window: from Start for the window's
// duration.
type Opening struct {
	Start, End time.Time
	Window     proto.Window
}

// Label says when an opening starts, as its window's zone has it:
// "Sat 22:00 Europe/Berlin".
func (o Opening) Label() string {
	l, err := Location(o.Window.TimeZone)
	if err != nil {
		l = time.UTC
	}
	return o.Start.In(l).Format("Mon 15:04") + " " + o.Window.TimeZone
}

// openings lists a window's openings that start within eight days before
// or after t, in order. A start that falls in a daylight-saving gap moves
// forward as time.Date normalises it (02:30 on a spring-forward night is
// 03:30); one that falls in the repeated hour of a fall-back night is its
// first occurrence. A window lasts DurationMinutes of real time, so a
// window over a change of clocks ends an hour earlier or later on the
// wall clock.
func openings(w proto.Window, t time.Time) []Opening {
	loc, err := Location(w.TimeZone)
	if err != nil {
		return nil
	}
	hour, minute, err := clock(w.Start)
	if err != nil {
		return nil
	}
	local := t.In(loc)
	var out []Opening
	for d := -8; d <= 8; d++ {
		day := time.Date(local.Year(), local.Month(), local.Day()+d, 12, 0, 0, 0, loc)
		if !slices.ContainsFunc(w.Days, func(s string) bool { wd, ok := weekday[s]; return ok && wd == day.Weekday() }) {
			continue
		}
		start := time.Date(day.Year(), day.Month(), day.Day(), hour, minute, 0, 0, loc)
		out = append(out, Opening{Start: start, End: start.Add(time.Duration(w.DurationMinutes) * time.Minute), Window: w})
	}
	return out
}

// Status is where t stands with a set of windows.
type Status struct {
	// Open: t is inside an opening (always, when there are no windows).
	Open bool
	// Current is the opening t is in, when Open and there are windows:
	// the one that ends last.
	Current Opening
	// Next is the next opening that starts after t (zero when there are
	// no windows or none is valid).
	Next Opening
}

// At says whether t is inside one of the windows, and when the next one
// opens. No windows means always open.
func At(ws []proto.Window, t time.Time) Status {
	if len(ws) == 0 {
		return Status{Open: true}
	}
	var st Status
	for _, w := range ws {
		for _, o := range openings(w, t) {
			if !t.Before(o.Start) && t.Before(o.End) && (!st.Open || o.End.After(st.Current.End)) {
				st.Open, st.Current = true, o
			}
			if o.Start.After(t) && (st.Next.Start.IsZero() || o.Start.Before(st.Next.Start)) {
				st.Next = o
			}
		}
	}
	return st
}

// FreezeAt returns the freezes in force on a channel at t: those that
// name the channel (or no channel) with From <= t < Until, in a canonical
// order (by From, Until, then Reason), whatever their order in fs.
func FreezeAt(fs []proto.Freeze, channel string, t time.Time) []proto.Freeze {
	var out []proto.Freeze
	for _, f := range fs {
		if (len(f.Channels) == 0 || slices.Contains(f.Channels, channel)) && !t.Before(f.From) && t.Before(f.Until) {
			out = append(out, f)
		}
	}
	slices.SortStableFunc(out, func(a, b proto.Freeze) int {
		return cmp.Or(a.From.Compare(b.From), a.Until.Compare(b.Until), strings.Compare(a.Reason, b.Reason))
	})
	return out
}

// Canonical returns a copy of windows in a canonical order: each window's
// days Monday first without repeats, and the windows by their first day,
// start, zone, duration and days. Two lists that hold the same windows
// give the same copy, so that what is frozen from them, and every message
// made from it, does not depend on the order they were written in.
func Canonical(ws []proto.Window) []proto.Window {
	if ws == nil {
		return nil
	}
	out := make([]proto.Window, len(ws))
	for i, w := range ws {
		days := slices.Clone(w.Days)
		slices.SortStableFunc(days, func(a, b string) int { return cmp.Compare(dayIndex(a), dayIndex(b)) })
		w.Days = slices.Compact(days)
		out[i] = w
	}
	slices.SortStableFunc(out, func(a, b proto.Window) int {
		return cmp.Or(cmp.Compare(firstDay(a), firstDay(b)), strings.Compare(a.Start, b.Start),
			strings.Compare(a.TimeZone, b.TimeZone), cmp.Compare(a.DurationMinutes, b.DurationMinutes),
			slices.Compare(a.Days, b.Days))
	})
	return out
}

// dayIndex is a day name's place in Days (unknown names last).
func dayIndex(d string) int {
	if i := slices.Index(Days, d); i >= 0 {
		return i
	}
	return len(Days)
}

func firstDay(w proto.Window) int {
	if len(w.Days) == 0 {
		return len(Days)
	}
	return dayIndex(w.Days[0])
}
