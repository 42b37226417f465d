package schedule

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/proto"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestCheck(t *testing.T) {
	good := proto.Window{Days: []string{"sat", "sun"}, Start: "22:00", DurationMinutes: 240, TimeZone: "Europe/Berlin"}
	if err := Check(good); err != nil {
		t.Fatalf("a good window: %v", err)
	}
	for name, tc := range map[string]struct {
		change func(*proto.Window)
		want   string
	}{
		"no days":        {func(w *proto.Window) { w.Days = nil }, "days is empty"},
		"unknown day":    {func(w *proto.Window) { w.Days = []string{"sat", "Sunday"} }, `day "Sunday" is not one of`},
		"day twice":      {func(w *proto.Window) { w.Days = []string{"sat", "sat"} }, `day "sat" is listed twice`},
		"start 24:00":    {func(w *proto.Window) { w.Start = "24:00" }, `start "24:00" is not a time of day`},
		"start 7:00":     {func(w *proto.Window) { w.Start = "7:00" }, `start "7:00" is not HH:MM`},
		"start 12:60":    {func(w *proto.Window) { w.Start = "12:60" }, "not a time of day"},
		"start +1:00":    {func(w *proto.Window) { w.Start = "+1:00" }, `start "+1:00" is not HH:MM`},
		"start 00:+1":    {func(w *proto.Window) { w.Start = "00:+1" }, `start "00:+1" is not HH:MM`},
		"duration 0":     {func(w *proto.Window) { w.DurationMinutes = 0 }, "durationMinutes 0 must be between 1 and 10080"},
		"duration 10081": {func(w *proto.Window) { w.DurationMinutes = 10081 }, "durationMinutes 10081"},
		"no zone":        {func(w *proto.Window) { w.TimeZone = "" }, `time zone ""`},
		"Local":          {func(w *proto.Window) { w.TimeZone = "Local" }, `time zone "Local"`},
		"unknown zone":   {func(w *proto.Window) { w.TimeZone = "Mars/Olympus" }, "not in the IANA database"},
	} {
		w := good
		w.Days = append([]string(nil), good.Days...)
		tc.change(&w)
		err := Check(w)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// TestAt: inside and outside a window, the next opening, in the window's
// zone, across the end of daylight saving time in Berlin (2026-10-25,
// 03:00 CEST becomes 02:00 CET).
func TestAt(t *testing.T) {
	// Saturdays and Sundays 22:00 Berlin time, four hours.
	w := proto.Window{Days: []string{"sat", "sun"}, Start: "22:00", DurationMinutes: 240, TimeZone: "Europe/Berlin"}
	for _, tc := range []struct {
		now      string
		open     bool
		next     string // RFC 3339 UTC of the next opening
		label    string
		currentT string // start of the current opening
	}{
		// Friday 2026-11-27 12:00 UTC (13:00 CET): closed; opens Sat 22:00 CET = 21:00 UTC.
		{now: "2026-11-27T12:00:00Z", next: "2026-11-28T21:00:00Z", label: "Sat 22:00 Europe/Berlin"},
		// Saturday 21:30 UTC = 22:30 CET: open since 21:00 UTC, next is Sunday's.
		{now: "2026-11-28T21:30:00Z", open: true, next: "2026-11-29T21:00:00Z", currentT: "2026-11-28T21:00:00Z"},
		// Sunday 01:00 UTC = 02:00 CET: still in Saturday's (22:00–02:00 CET is 21:00–01:00 UTC): closed at 01:00 exactly.
		{now: "2026-11-29T01:00:00Z", next: "2026-11-29T21:00:00Z"},
		{now: "2026-11-29T00:59:59Z", open: true, next: "2026-11-29T21:00:00Z", currentT: "2026-11-28T21:00:00Z"},
		// Summer: 22:00 CEST is 20:00 UTC.
		{now: "2026-07-03T12:00:00Z", next: "2026-07-04T20:00:00Z"},
	} {
		st := At([]proto.Window{w}, mustTime(t, tc.now))
		if st.Open != tc.open {
			t.Errorf("%s: open %v, want %v", tc.now, st.Open, tc.open)
		}
		if got := st.Next.Start.UTC().Format(time.RFC3339); got != tc.next {
			t.Errorf("%s: next %s, want %s", tc.now, got, tc.next)
		}
		if tc.label != "" && st.Next.Label() != tc.label {
			t.Errorf("%s: label %q, want %q", tc.now, st.Next.Label(), tc.label)
		}
		if tc.currentT != "" && !st.Current.Start.Equal(mustTime(t, tc.currentT)) {
			t.Errorf("%s: current opening %s, want %s", tc.now, st.Current.Start.UTC(), tc.currentT)
		}
	}

	// Across the change of clocks: Sunday 2026-10-25 01:00 Berlin time,
	// three hours of real time. 01:00 CEST is 23:00 UTC on the 24th; the
	// window ends at 02:00 UTC, which is 03:00 CET on the wall clock (the
	// hour from 02:00 to 03:00 happened twice).
	dst := proto.Window{Days: []string{"sun"}, Start: "01:00", DurationMinutes: 180, TimeZone: "Europe/Berlin"}
	st := At([]proto.Window{dst}, mustTime(t, "2026-10-25T01:59:00Z"))
	if !st.Open || !st.Current.Start.Equal(mustTime(t, "2026-10-24T23:00:00Z")) || !st.Current.End.Equal(mustTime(t, "2026-10-25T02:00:00Z")) {
		t.Errorf("over the DST change: %+v", st)
	}
	if st := At([]proto.Window{dst}, mustTime(t, "2026-10-25T02:00:00Z")); st.Open {
		t.Error("still open three real hours after it opened")
	}
	// A start in the spring-forward gap (02:30 on 2026-03-29 does not
	// exist in Berlin) moves forward with the clocks: 03:30 CEST.
	gap := proto.Window{Days: []string{"sun"}, Start: "02:30", DurationMinutes: 60, TimeZone: "Europe/Berlin"}
	st = At([]proto.Window{gap}, mustTime(t, "2026-03-28T12:00:00Z"))
	if got := st.Next.Start.UTC().Format(time.RFC3339); got != "2026-03-29T01:30:00Z" {
		t.Errorf("a start in the gap opens at %s", got)
	}

	if st := At(nil, time.Now()); !st.Open {
		t.Error("no windows must mean always open")
	}
	// Two windows: the nearer next opening wins; open when either is.
	weekday := proto.Window{Days: []string{"mon", "tue", "wed", "thu", "fri"}, Start: "03:00", DurationMinutes: 60, TimeZone: "UTC"}
	st = At([]proto.Window{w, weekday}, mustTime(t, "2026-11-27T12:00:00Z")) // a Friday
	if got := st.Next.Start.UTC().Format(time.RFC3339); got != "2026-11-28T21:00:00Z" {
		t.Errorf("two windows on a Friday noon: next %s", got)
	}
	st = At([]proto.Window{w, weekday}, mustTime(t, "2026-11-26T12:00:00Z")) // a Thursday
	if got := st.Next.Start.UTC().Format(time.RFC3339); got != "2026-11-27T03:00:00Z" {
		t.Errorf("two windows on a Thursday noon: next %s", got)
	}
}

func TestFreezeAt(t *testing.T) {
	fs := []proto.Freeze{
		{From: mustTime(t, "2026-12-20T00:00:00Z"), Until: mustTime(t, "2027-01-04T00:00:00Z"), Reason: "holidays", Channels: []string{"prod"}},
		{From: mustTime(t, "2026-12-31T00:00:00Z"), Until: mustTime(t, "2027-01-01T00:00:00Z"), Reason: "new year"},
	}
	for _, tc := range []struct {
		channel, at string
		want        int
	}{
		{"prod", "2026-12-19T23:59:59Z", 0},
		{"prod", "2026-12-20T00:00:00Z", 1},
		{"staging", "2026-12-24T00:00:00Z", 0},
		{"staging", "2026-12-31T12:00:00Z", 1},
		{"prod", "2026-12-31T12:00:00Z", 2},
		{"prod", "2027-01-04T00:00:00Z", 0},
	} {
		if got := len(FreezeAt(fs, tc.channel, mustTime(t, tc.at))); got != tc.want {
			t.Errorf("%s at %s: %d freezes, want %d", tc.channel, tc.at, got, tc.want)
		}
	}
}

// TestOrderIsCanonical: the freezes in force and a list of windows come
// out in one order whatever the order they went in.
func TestOrderIsCanonical(t *testing.T) {
	t.Parallel()
	at := mustTime(t, "2026-12-31T12:00:00Z")
	a := proto.Freeze{From: mustTime(t, "2026-12-20T00:00:00Z"), Until: mustTime(t, "2027-01-04T00:00:00Z"), Reason: "holidays"}
	b := proto.Freeze{From: mustTime(t, "2026-12-31T00:00:00Z"), Until: mustTime(t, "2027-01-01T00:00:00Z"), Reason: "new year"}
	c := proto.Freeze{From: a.From, Until: a.Until, Reason: "audit"}
	want := []proto.Freeze{c, a, b}
	for _, in := range [][]proto.Freeze{{a, b, c}, {b, c, a}, {c, b, a}} {
		if got := FreezeAt(in, "prod", at); !slices.EqualFunc(got, want, func(x, y proto.Freeze) bool { return x.Reason == y.Reason }) {
			t.Errorf("FreezeAt(%v) = %v, want %v", in, got, want)
		}
	}
	sun := proto.Window{Days: []string{"sun", "sat"}, Start: "20:00", DurationMinutes: 120, TimeZone: "Europe/Berlin"}
	mon := proto.Window{Days: []string{"fri", "mon"}, Start: "06:00", DurationMinutes: 60, TimeZone: "UTC"}
	utc := proto.Window{Days: []string{"sat"}, Start: "19:00", DurationMinutes: 60, TimeZone: "UTC"}
	first := Canonical([]proto.Window{sun, mon, utc})
	if got := fmt.Sprint(first); got != "[{[mon fri] 06:00 60 UTC} {[sat] 19:00 60 UTC} {[sat sun] 20:00 120 Europe/Berlin}]" {
		t.Errorf("Canonical = %s", got)
	}
	if again := Canonical([]proto.Window{utc, sun, mon}); !reflect.DeepEqual(again, first) {
		t.Errorf("Canonical of another order = %v, want %v", again, first)
	}
	if sun.Days[0] != "sun" {
		t.Error("Canonical changed its input")
	}
	if Canonical(nil) != nil {
		t.Error("Canonical(nil) is not nil")
	}
}
