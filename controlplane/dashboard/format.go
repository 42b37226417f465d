package dashboard

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"
)

// How the dashboard writes things. Every state is written as text; the
// class only adds its colour (rfcs/0011 §Accessibility).

// stateClass is the CSS class of a host or rollout state, a fate or a
// situation: "st-ok", "st-busy", "st-bad", "st-wait" or "st-idle".
func stateClass(state string) string {
	switch state {
	case "Converged", "opened", "Active":
		return "st-ok"
	case "Activating", "Rebooting", "Soaking", "RollingBack", "Reverting", "Opening":
		return "st-busy"
	case "Failed", "Halted", "refused":
		return "st-bad"
	case "Pending", "Deferred", "Skipped", "Paused", "waiting", "pending", "deferred":
		return "st-wait"
	}
	return "st-idle" // Reverted, Cancelled, Superseded, superseded
}

// ago is a time as "3 min ago" from now.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + span(-d)
	}
	return span(d) + " ago"
}

// until is a time as "in 3 min 12 s" from now ("now" once passed).
func until(now, t time.Time) string {
	if !t.After(now) {
		return "now"
	}
	return "in " + span(t.Sub(now))
}

// span is a duration in at most two units: "2 h 5 min", "42 s".
func span(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%d s", s)
	case s < 3600:
		if s%60 == 0 {
			return fmt.Sprintf("%d min", s/60)
		}
		return fmt.Sprintf("%d min %d s", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%d h %d min", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%d d %d h", s/86400, s%86400/3600)
}

// shortHash is a commit or closure hash cut to 12 characters.
func shortHash(s string) string {
	if i := strings.LastIndexByte(s, '/'); i >= 0 { // a store path: its hash part
		s = s[i+1:]
	}
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// pct is n of total in percent (0 for an empty total).
func pct(n, total int) float64 {
	if total == 0 {
		return 0
	}
	return float64(n) * 100 / float64(total)
}

// codeWords is what a gate's or a situation's code means, in words, from
// the registry of package codes: "the host's wave has not started" for
// wave_not_active, without the registry's "gate: " and its remarks in
// parentheses. The page writes the code beside it, for grep.
func codeWords(code string) string {
	in, ok := codes.Lookup(codes.Code(code))
	if !ok {
		return code
	}
	m := in.Meaning
	if i := strings.Index(m, ": "); i > 0 && strings.HasPrefix(m, "gate") {
		m = m[i+2:] // "gate: …", "gate and deferral: …"
	}
	if i := strings.Index(m, " ("); i > 0 {
		m = m[:i]
	}
	return m
}

// urlPath escapes a rollout id or host name for a URL path.
func urlPath(s string) string { return url.PathEscape(s) }

func containsString(list []string, s string) bool { return slices.Contains(list, s) }

// sortCounts orders counts by count, largest first, then by name.
func sortCounts(cs []stateCount) {
	slices.SortFunc(cs, func(a, b stateCount) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return strings.Compare(a.Name, b.Name)
	})
}
