package demo

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// view prints the demo's progress: the control plane's journal as it
// grows, one line per event (host events of one tick that say the same
// thing share a line), a progress line when a wave or a rollout finishes,
// and the demo's own narration. It is safe for concurrent use.
type view struct {
	mu    sync.Mutex
	w     io.Writer
	color bool
	start time.Time
	fleet *fleet
	// quiet drops journal lines (the enrolment is summed up instead) but
	// still follows host states.
	quiet bool
	// release names a rollout's release ("v1") by its ref.
	release map[string]string
	// states follows every host's state per rollout, from the journal.
	states map[string]map[string]reconciler.HostState
	// rollouts follows every rollout's state, from the journal.
	rollouts map[string]rolloutSeen
	opened   map[string]time.Time
	// notes wait to be printed in time order among the journal's events.
	notes []pendingNote
}

type pendingNote struct {
	at   time.Time
	text string
}

type rolloutSeen struct {
	state  reconciler.RolloutState
	reason proto.DecisionReason
}

func newView(w io.Writer, fleet *fleet, start time.Time) *view {
	return &view{w: w, color: useColor(w), start: start, fleet: fleet, release: map[string]string{},
		states: map[string]map[string]reconciler.HostState{}, rollouts: map[string]rolloutSeen{}, opened: map[string]time.Time{}}
}

// useColor is true when w is a terminal and NO_COLOR is unset or empty
// (https://no-color.org).
func useColor(w io.Writer) bool {
	if os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

const (
	ansiReset  = "\x1b[0m"
	ansiBold   = "\x1b[1m"
	ansiDim    = "\x1b[2m"
	ansiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiCyan   = "\x1b[36m"
)

func (v *view) paint(style, s string) string {
	if !v.color || style == "" || s == "" {
		return s
	}
	return style + s + ansiReset
}

// stateStyle colours a host or rollout state, or a reason code.
func stateStyle(s string) string {
	switch s {
	case "Converged", "converged", "soaked", "reverted", "Reverted", "rolled_back":
		return ansiGreen
	case "Activating", "Rebooting", "Soaking", "confirmed", "reboot_dispatched", "booted_into_target":
		return ansiCyan
	case "Failed", "Reverting", "RollingBack", "health_failure", "unhealthy", "activation_failed",
		"confirm_timeout", "agent_rolled_back", "rollback_dispatched", "wave_stalled", "wave_unprovable", "revert_stalled", "Cancelled",
		"boot_failed", "boot_timeout":
		return ansiRed
	case "Halted", "Skipped", "Deferred", "offline", "deferred", "rollout_deferred", "ref_waiting":
		return ansiYellow
	}
	return ""
}

func (v *view) elapsed(t time.Time) string {
	return fmt.Sprintf("%7.2fs", t.Sub(v.start).Seconds())
}

// printf prints at once, after the notes that wait.
func (v *view) printf(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.flushNotes(time.Time{})
	fmt.Fprintf(v.w, format, args...)
}

// flush prints the notes that wait.
func (v *view) flush() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.flushNotes(time.Time{})
}

// flushNotes prints the notes taken before t (all when t is zero); v.mu
// is held.
func (v *view) flushNotes(t time.Time) {
	n := 0
	for n < len(v.notes) && (t.IsZero() || v.notes[n].at.Before(t)) {
		nt := v.notes[n]
		fmt.Fprintf(v.w, "%s  %s %s\n", v.paint(ansiDim, v.elapsed(nt.at)), v.paint(ansiCyan, "»"), nt.text)
		n++
	}
	v.notes = v.notes[n:]
}

// section starts a part of the demo.
func (v *view) section(format string, args ...any) {
	v.printf("\n%s\n", v.paint(ansiBold, fmt.Sprintf(format, args...)))
}

// note is the demo's narration, taken now: it is printed with the next
// page of the journal, among its events in time order.
func (v *view) note(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.notes = append(v.notes, pendingNote{at: time.Now(), text: fmt.Sprintf(format, args...)})
}

func (v *view) setQuiet(q bool) {
	v.mu.Lock()
	v.quiet = q
	v.mu.Unlock()
}

// rolloutState is a rollout's state as the journal told; ok is false
// before it opened.
func (v *view) rolloutState(id string) (reconciler.RolloutState, proto.DecisionReason, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, ok := v.rollouts[id]
	return r.state, r.reason, ok
}

// hostCounts counts hosts of a rollout by state, as the journal told.
func (v *view) hostCounts(id string, hosts []string) map[reconciler.HostState]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	by := map[reconciler.HostState]int{}
	for _, h := range hosts {
		by[cmp.Or(v.states[id][h], reconciler.HostPending)]++
	}
	return by
}

// releaseOf names the release of a rollout ("v1"), or "" if unknown.
func (v *view) releaseOf(id string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.releaseName(refOf(id))
}

// releaseName names the release of a ciCommit: the story's, or one that
// nixfleet-demo push signed in another process. v.mu is held.
func (v *view) releaseName(ref string) string {
	if rel, ok := v.release[ref]; ok {
		return rel
	}
	rel := pushedVersion(ref)
	v.release[ref] = rel
	return rel
}

// events prints a page of the journal, in id order.
func (v *view) events(evs []proto.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for i := 0; i < len(evs); {
		ev := evs[i]
		j := i + 1
		if ev.Kind == reconciler.EventHostTransition || ev.Kind == reconciler.EventHostWaiting {
			for j < len(evs) && sameLine(ev, evs[j]) {
				j++
			}
		}
		if !v.quiet {
			v.flushNotes(ev.At)
		}
		v.event(evs[i:j])
		i = j
	}
	v.flushNotes(time.Time{})
}

// sameLine reports whether two host events say the same thing in the
// same tick: they then share a line.
func sameLine(a, b proto.Event) bool {
	return a.Kind == b.Kind && a.At.Equal(b.At) && a.RolloutID == b.RolloutID && a.Wave == b.Wave &&
		a.From == b.From && a.To == b.To && a.Reason.Code == b.Reason.Code && a.Reason.Gate == b.Reason.Gate &&
		(a.Reason.Message == b.Reason.Message || plainCode(a.Reason.Code))
}

// plainCode is true for the reason codes whose message says nothing
// the code does not: they are shown alone.
func plainCode(code string) bool {
	switch code {
	case codes.Dispatched, codes.Confirmed, codes.Soaked, codes.WavePromoted,
		codes.CompliancePassed, codes.RefMoved, codes.CatchUp:
		return true
	}
	return false
}

// event prints one line for a group of events that sameLine joined.
func (v *view) event(group []proto.Event) {
	ev := group[0]
	if ev.Kind == reconciler.EventHostTransition {
		st := v.states[ev.RolloutID]
		if st == nil {
			st = map[string]reconciler.HostState{}
			v.states[ev.RolloutID] = st
		}
		for _, e := range group {
			st[e.Host] = reconciler.HostState(e.To)
		}
	}
	switch ev.Kind {
	case reconciler.EventRolloutOpened:
		v.opened[ev.RolloutID] = ev.At
		v.rollouts[ev.RolloutID] = rolloutSeen{state: reconciler.RolloutState(cmp.Or(ev.To, string(reconciler.RolloutOpening))), reason: ev.Reason}
	case reconciler.EventRolloutTransition:
		v.rollouts[ev.RolloutID] = rolloutSeen{state: reconciler.RolloutState(ev.To), reason: ev.Reason}
	}
	if v.quiet {
		return
	}
	if ev.Kind == reconciler.EventWavePromoted {
		v.waveDone(ev) // a progress line instead
		return
	}
	wave := "  "
	if ev.Wave >= 0 {
		wave = fmt.Sprintf("w%d", ev.Wave)
	}
	subject, transition := "", ""
	switch ev.Kind {
	case reconciler.EventHostTransition:
		subject = hostList(group)
		transition = v.paint(stateStyle(ev.From), ev.From) + " → " + v.paint(stateStyle(ev.To), ev.To)
	case reconciler.EventHostWaiting:
		subject = hostList(group)
		transition = v.paint(ansiYellow, "waits")
	case reconciler.EventRolloutOpened:
		subject, transition = proto.ShortRolloutID(ev.RolloutID), "opened"
	case reconciler.EventRolloutTransition:
		subject = proto.ShortRolloutID(ev.RolloutID)
		transition = v.paint(stateStyle(ev.From), ev.From) + " → " + v.paint(stateStyle(ev.To), ev.To)
	default:
		subject, transition = cmp.Or(proto.ShortRolloutID(ev.RolloutID), ev.Host), v.paint(stateStyle(ev.Kind), strings.ReplaceAll(ev.Kind, "_", " "))
	}
	channel := ev.Channel
	if rel := v.releaseName(refOf(ev.RolloutID)); rel != "" {
		channel += " " + rel
	}
	fmt.Fprintf(v.w, "%s  %-14s %s  %-16s  %s  %s\n", v.paint(ansiDim, v.elapsed(ev.At)), channel, wave,
		subject, pad(transition, 22, v.color), v.reason(ev))
	if ev.Kind == reconciler.EventRolloutTransition && ev.To == string(reconciler.RolloutConverged) {
		v.rolloutDone(ev)
	}
}

// reason is the reason column: the code, and the message when it says
// more than the code, with the demo's closures named by their release.
func (v *view) reason(ev proto.Event) string {
	r := ev.Reason
	code := v.paint(stateStyle(r.Code), r.Code)
	if plainCode(r.Code) || r.Message == "" {
		return code
	}
	// The demo's closures are named by their release.
	msg := closureName.ReplaceAllString(r.Message, "$1")
	if r.Actor != "" {
		msg += " (by " + r.Actor + ")"
	}
	if ev.Kind == reconciler.EventHostWaiting {
		return v.paint(ansiYellow, r.Gate) + ": " + msg
	}
	return code + ": " + msg
}

// closureName matches a closure of the demo (fleetrepo.Closure), its
// release in the group.
var closureName = regexp.MustCompile(`\b[0-9a-z]{32}-nixos-system-[a-z0-9-]+?-(v[0-9]+(?:` + badSuffix + `)?)\b`)

// waveDone is the progress line of a promoted wave.
func (v *view) waveDone(ev proto.Event) {
	c := v.fleet.channel(ev.Channel)
	if c == nil || ev.Wave < 0 || ev.Wave >= len(c.waves) {
		return
	}
	w := c.waves[ev.Wave]
	fmt.Fprintf(v.w, "%s  %s\n", v.paint(ansiDim, v.elapsed(ev.At)), v.paint(ansiGreen,
		fmt.Sprintf("── %s wave %d (%s) promoted: %s", proto.ShortRolloutID(ev.RolloutID), ev.Wave, w.name, v.count(ev.RolloutID, w.hosts))))
}

// rolloutDone is the progress line of a converged rollout.
func (v *view) rolloutDone(ev proto.Event) {
	c := v.fleet.channel(ev.Channel)
	if c == nil {
		return
	}
	took := ""
	if at, ok := v.opened[ev.RolloutID]; ok {
		took = fmt.Sprintf(" in %.2fs", ev.At.Sub(at).Seconds())
	}
	fmt.Fprintf(v.w, "%s  %s\n", v.paint(ansiDim, v.elapsed(ev.At)), v.paint(ansiGreen+ansiBold,
		fmt.Sprintf("══ %s converged%s: %s", proto.ShortRolloutID(ev.RolloutID), took, v.count(ev.RolloutID, c.hosts))))
}

// count says how many of hosts are in which state in a rollout, as far as
// the journal told.
func (v *view) count(rollout string, hosts []string) string {
	by := map[reconciler.HostState]int{}
	for _, h := range hosts {
		by[cmp.Or(v.states[rollout][h], reconciler.HostPending)]++
	}
	return countsText(by, len(hosts))
}

// countsText renders host counts by state as "3/4 Converged, 1 Skipped".
func countsText(by map[reconciler.HostState]int, total int) string {
	var parts []string
	if n := by[reconciler.HostConverged]; n > 0 || len(by) == 0 {
		parts = append(parts, fmt.Sprintf("%d/%d Converged", n, total))
	}
	for _, s := range reconciler.HostStates {
		if s != reconciler.HostConverged && by[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", by[s], s))
		}
	}
	return strings.Join(parts, ", ")
}

// hostList names the hosts of a group: the first few, then how many more.
func hostList(group []proto.Event) string {
	const shown = 1
	var names []string
	for i, e := range group {
		if i == shown {
			names = append(names, fmt.Sprintf("+%d", len(group)-shown))
			break
		}
		names = append(names, e.Host)
	}
	return strings.Join(names, " ")
}

// pad pads s (which may hold colour codes) to n visible characters.
func pad(s string, n int, colored bool) string {
	visible := s
	if colored {
		visible = stripANSI(s)
	}
	if l := len([]rune(visible)); l < n {
		return s + strings.Repeat(" ", n-l)
	}
	return s
}

func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b {
			for i < len(s) && s[i] != 'm' {
				i++
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// refOf is the ref part of a rollout id.
func refOf(rolloutID string) string {
	_, ref, _ := strings.Cut(rolloutID, "@")
	return ref
}
