package controlplane

import (
	"testing"
	"time"
)

// TestTagTime: which echoed tags are trusted, and the time the answer's
// tag keeps.
func TestTagTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 21, 8, 0, 0, 0, time.UTC)
	tag := func(d time.Duration, digest string) string { return makeTag(digest, now.Add(d)) }
	tests := []struct {
		name    string
		tag     string
		trusted bool
		at      time.Time
	}{
		{name: "fresh", tag: tag(-5*time.Minute, "abc"), trusted: true, at: now.Add(-5 * time.Minute)},
		{name: "just stamped", tag: tag(0, "abc"), trusted: true, at: now},
		{name: "stamped within the second", tag: tag(-900*time.Millisecond, "abc"), trusted: true, at: now.Add(-time.Second)},
		{name: "at the ttl", tag: tag(-tagTTL, "abc"), trusted: true, at: now.Add(-tagTTL)},
		{name: "past the ttl", tag: tag(-tagTTL-time.Second, "abc"), trusted: false},
		{name: "another digest", tag: tag(-time.Minute, "abd"), trusted: false},
		{name: "from the future, within a minute, taken as now", tag: tag(59*time.Second, "abc"), trusted: true, at: now},
		{name: "more than a minute in the future", tag: tag(61*time.Second, "abc"), trusted: false},
		{name: "no tag", tag: "", trusted: false},
		{name: "no time", tag: ".abc", trusted: false},
		{name: "no digest", tag: tag(0, ""), trusted: false},
		{name: "not a number", tag: "x.abc", trusted: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			at, ok := tagTime(tc.tag, "abc", now)
			if ok != tc.trusted || !at.Equal(tc.at) {
				t.Errorf("tagTime(%q) = %s, %v; want %s, %v", tc.tag, at, ok, tc.at, tc.trusted)
			}
		})
	}
}
