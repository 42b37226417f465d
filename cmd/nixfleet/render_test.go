package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/proto"
)

func TestStyleFor(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if st := styleFor(&b, func(string) string { return "" }); st.tty || st.colour || st.width != 0 {
		t.Fatalf("a buffer is a terminal, or its lines are wrapped: %+v", st)
	}
	env := map[string]string{"COLUMNS": "200"}
	if st := styleFor(&b, func(k string) string { return env[k] }); st.width != 200 {
		t.Fatalf("COLUMNS=200 gives width %d", st.width)
	}
	env["COLUMNS"] = "-3"
	if st := styleFor(&b, func(k string) string { return env[k] }); st.width != 0 {
		t.Fatalf("COLUMNS=-3 gives width %d", st.width)
	}
}

func TestTableAlignsPaintedCells(t *testing.T) {
	t.Parallel()
	st := style{tty: true, colour: true}
	tb := newTable("HOST", "STATE", "WHY")
	tb.paint[1] = st.state
	tb.add("web-1", "Failed", "switch failed")
	tb.add("canary-long", "Converged", "")
	var b bytes.Buffer
	tb.write(&b)
	want := "HOST         STATE      WHY\n" +
		"web-1        \x1b[31mFailed\x1b[0m     switch failed\n" +
		"canary-long  \x1b[32mConverged\x1b[0m\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Fatalf("table (-want +got):\n%s", diff)
	}
}

func TestProgressBar(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		done, total int
		want        string
	}{
		{0, 4, "[..........]"}, {1, 4, "[##........]"}, {4, 4, "[##########]"}, {0, 0, "[..........]"},
	} {
		if got := progressBar(tc.done, tc.total, 10); got != tc.want {
			t.Errorf("progressBar(%d, %d) = %q, want %q", tc.done, tc.total, got, tc.want)
		}
	}
}

// statusFixture is a channel with a blocked host, a ref waiting for a
// rollout, and a refused release.
func statusFixture() (proto.ChannelStatus, *proto.Rollout) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	r := &proto.Rollout{
		ID: "stable@1", Channel: "stable", Ref: "1", State: "Active", Wave: 1, WavePhase: "dispatching",
		Waves: []proto.RolloutWave{{SoakMinutes: 0}, {SoakMinutes: 5}},
		Hosts: []proto.RolloutHost{
			{Hostname: "a", Wave: 0, State: "Converged"},
			{Hostname: "b", Wave: 1, State: "Soaking"},
			{Hostname: "c", Wave: 1, State: "Pending", Blocked: proto.DecisionReason{Gate: "budget", Code: "budget", Message: "budget web is full"},
				Situation: &proto.Situation{Code: "budget", Message: "budget web is full", Moves: true}},
			{Hostname: "d", Wave: 1, State: "Converged"},
		},
		Counts: map[string]int{"Converged": 2, "Soaking": 1, "Pending": 1},
	}
	ch := proto.ChannelStatus{Name: "stable", Ref: "2", SignedAt: at, Rollout: r, Pending: true}
	ch.LastFailure = &proto.SourceFailure{Commit: "abc", Code: "stale", Message: "signed too long ago", At: at}
	return ch, r
}

func TestChannelStatusOnATerminal(t *testing.T) {
	t.Parallel()
	ch, r := statusFixture()
	var b bytes.Buffer
	printChannelStatus(&b, style{tty: true}, ch, r)
	want := `
channel stable  commit -  ci 2  signed 2026-03-01T12:00:00Z
  rollout  stable@1  Active  wave 1 of waves 0-1 (dispatching)
  wave 0   [####################] 1/1 converged
  wave 1   [######..............] 1/3 converged, Pending 1, Soaking 1  <- current
  hosts    Pending 1, Soaking 1, Converged 2
  waiting  c (wave 1): [budget] budget web is full
  pending  ref 2 has no rollout yet: it waits for the channel's active rollout or a channel edge
  refused  release at commit abc, 2026-03-01T12:00:00Z: [stale] signed too long ago
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Fatalf("status (-want +got):\n%s", diff)
	}
}

func TestChannelStatusInColour(t *testing.T) {
	t.Parallel()
	ch, r := statusFixture()
	var b bytes.Buffer
	printChannelStatus(&b, style{tty: true, colour: true}, ch, r)
	out := b.String()
	// Colour never stands alone: every coloured state is its word.
	for _, want := range []string{"\x1b[36mActive\x1b[0m", "\x1b[33mPending\x1b[0m 1", "\x1b[32mConverged\x1b[0m 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

func TestEventLine(t *testing.T) {
	t.Parallel()
	ev := proto.Event{ID: 7, At: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		Kind: "host_transition", RolloutID: "stable@1", Wave: 1, Host: "web-1", From: "Pending", To: "Activating",
		Reason: proto.DecisionReason{Code: "dispatched", Message: "dispatched to /nix/store/0123456789abcdfghijklmnpqrsvwxyz-nixos-system-web-1-v2"}}
	l := layoutFor([]string{"web-1", ""}, testWidth)
	plain := l.line(style{}, ev)
	want := "7      2026-03-01T12:00:00Z  1     web-1  Pending → Activating      [dispatched] dispatched to nixos-system-web-1-v2"
	if plain != want {
		t.Fatalf("event line\n got %q\nwant %q", plain, want)
	}
	// In colour, the columns stay where they are.
	painted := l.line(style{tty: true, colour: true}, ev)
	stripped := strings.NewReplacer("\x1b[33m", "", "\x1b[36m", "", "\x1b[0m", "").Replace(painted)
	if stripped != plain || painted == plain {
		t.Fatalf("coloured line %q does not strip to %q", painted, plain)
	}
	header := l.header()
	if got := strings.Index(header, "EVENT"); got != strings.Index(plain, "Pending") {
		t.Fatalf("header %q and line %q are not aligned", header, plain)
	}
	// The budgets the decision touched follow the reason.
	ev.Budgets = []proto.BudgetUse{{Name: "web", InFlight: 3, Limit: 3}, {Name: "tags=db", InFlight: 1, Limit: 2}}
	// A line they make too long wraps, and no line passes 120 columns.
	got := l.line(style{}, ev)
	if flat := strings.Join(strings.Fields(got), " "); flat != strings.Join(strings.Fields(plain), " ")+" [web 3/3, tags=db 1/2]" {
		t.Fatalf("event line with budgets %q", got)
	}
	for _, line := range strings.Split(got, "\n") {
		if utf8.RuneCountInString(line) > testWidth {
			t.Fatalf("a line of %d columns: %q", utf8.RuneCountInString(line), line)
		}
	}
	// Off a terminal (width 0) nothing wraps: one event, one line.
	if one := layoutFor([]string{"web-1"}, 0).line(style{}, ev); strings.Contains(one, "\n") ||
		strings.Join(strings.Fields(one), " ") != strings.Join(strings.Fields(got), " ") {
		t.Fatalf("unwrapped line %q", one)
	}
	// The longest transition keeps the reason's column.
	ev.From, ev.To = "Activating", "RollingBack"
	if a, b := strings.Index(l.line(style{}, ev), "[dispatched]"), strings.Index(plain, "[dispatched]"); a != b {
		t.Fatalf("a long transition moves the reason from column %d to %d", b, a)
	}
}

// testWidth is the terminal width of the layout tests.
const testWidth = 120

func TestWaveName(t *testing.T) {
	t.Parallel()
	r := proto.Rollout{Waves: []proto.RolloutWave{{Name: "canary"}, {}}}
	for i, want := range []string{"0 (canary)", "1", "2"} {
		if got := waveName(r, i); got != want {
			t.Errorf("waveName(%d) = %q, want %q", i, got, want)
		}
	}
}

// TestEventLineWidth: long hosts are elided to the cap; long reasons are
// wrapped at spaces under their column, never inside a word, and every
// line fits the width but for a word longer than the column. On a
// terminal that leaves the reason less than minReasonCols, it starts on
// the next line, under the time.
func TestEventLineWidth(t *testing.T) {
	t.Parallel()
	long := "a-very-long-hostname-in-a-big-datacenter-01"
	ev := proto.Event{ID: 123456, At: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), Kind: "host_transition",
		Wave: 12, Host: long, From: "Activating", To: "Converged",
		Reason: proto.DecisionReason{Code: "health_failure", Message: strings.Repeat("word ", 30) + strings.Repeat("x", 90), Actor: "alice"}}
	for _, c := range []struct {
		width int
		below bool // the reason starts on the next line
	}{{testWidth, true}, {200, false}, {300, false}} {
		l := layoutFor([]string{long, "db"}, c.width)
		out := l.line(style{}, ev)
		header := l.header()
		if c.below != strings.Contains(header, "\n"+strings.Repeat(" ", reasonIndent)+"REASON") {
			t.Errorf("width %d: the header %q does not put REASON where the reasons are", c.width, header)
		}
		lines := strings.Split(out, "\n")
		for _, line := range append(strings.Split(header, "\n"), lines...) {
			if n := utf8.RuneCountInString(line); n > c.width && len(strings.Fields(line)) != 1 {
				t.Errorf("width %d: %d columns: %q", c.width, n, line)
			}
		}
		if !strings.HasPrefix(lines[0], "123456  2026-03-01T12:00:00Z  12    a-very-long-hostname-in…  Activating → Converged") {
			t.Errorf("width %d: line %q: want the host elided to %d columns", c.width, lines[0], maxHostWidth)
		}
		first := 0
		if c.below {
			first = 1
			if strings.Contains(lines[0], "[") || !strings.HasPrefix(lines[1], strings.Repeat(" ", reasonIndent)+"[health_failure]") {
				t.Errorf("width %d: the reason does not start on the next line, under the time:\n%s", c.width, out)
			}
		}
		col := utf8.RuneCountInString(lines[first][:strings.Index(lines[first], "[health_failure]")]) // continuations are ASCII
		for _, line := range lines[first+1:] {
			if len(line) <= col || strings.TrimSpace(line[:col]) != "" || line[col] == ' ' {
				t.Errorf("width %d: the reason is not wrapped under its column:\n%s", c.width, out)
				break
			}
		}
		all := strings.Join(lines[first:], " ")
		if strings.Count(all, "word") != 30 || !strings.Contains(out, strings.Repeat("x", 90)) || !strings.HasSuffix(all, "(by alice)") {
			t.Errorf("width %d: the wrapped reason lost something:\n%s", c.width, out)
		}
	}
}

func TestElideClosures(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"dispatched to j95csr2wpmgx75zdpmgx75zdpmgx75zd-nixos-system-canary-v1":       "dispatched to nixos-system-canary-v1",
		"from /nix/store/n9ilzhjrv1k9bi3rv1k9bi3rv1k9bi3r-nixos-system-web-1-v1 to x": "from nixos-system-web-1-v1 to x",
		"no closure here; a short-hash-name stays":                                    "no closure here; a short-hash-name stays",
	} {
		if got := elideClosures(in); got != want {
			t.Errorf("elideClosures(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestBudgetLines: rollout show says each budget's limit, of how many
// hosts, and how many of the rollout's hosts are in flight in it; a paged
// view, which does not hold every host, gives the limit only.
func TestBudgetLines(t *testing.T) {
	t.Parallel()
	one := 1
	r := proto.Rollout{
		Budgets: []proto.RolloutBudget{{Name: "web", MaxInFlight: &one, Hosts: []string{"web-1", "web-2", "web-3"}}},
		Hosts: []proto.RolloutHost{{Hostname: "web-1", State: "Activating"}, {Hostname: "web-2", State: "Pending"},
			{Hostname: "web-3", State: "Converged"}},
	}
	if got, want := budgetLines(r), []string{"web: at most 1 of its 3 host(s) in flight; 1 of this rollout's now"}; !slices.Equal(got, want) {
		t.Errorf("budget lines %q, want %q", got, want)
	}
	r.HostsNext = "web-3"
	if got, want := budgetLines(r), []string{"web: at most 1 of its 3 host(s) in flight"}; !slices.Equal(got, want) {
		t.Errorf("budget lines of a paged view %q, want %q", got, want)
	}
}

// TestChannelStatusSaysAnApprovalOnce: the hosts of a wave that waits for
// its approvals share one line, which says the approve command once;
// hosts held with other words keep a line each.
func TestChannelStatusSaysAnApprovalOnce(t *testing.T) {
	t.Parallel()
	approval := func(name string) proto.RolloutHost {
		return proto.RolloutHost{Hostname: name, Wave: 1, State: "Pending",
			Blocked: proto.DecisionReason{Gate: "approval", Code: "approval", Message: "wave 1 needs 2 approval(s) (none yet)"},
			Situation: &proto.Situation{Code: "approval", Message: "wave 1 needs 2 approval(s) (none yet)",
				Next: "approvers approve the wave: nixfleet rollout approve stable@1 --wave 1 --comment …"}}
	}
	quarantined := func(name, closure string) proto.RolloutHost {
		return proto.RolloutHost{Hostname: name, Wave: 1, State: "Pending",
			Blocked:   proto.DecisionReason{Gate: "quarantined", Code: "quarantined", Message: closure + " failed here"},
			Situation: &proto.Situation{Code: "quarantined", Message: closure + " failed here", Next: "push a release"}}
	}
	r := &proto.Rollout{ID: "stable@1", Channel: "stable", Ref: "1", State: "Active", Wave: 1, WavePhase: "dispatching",
		Waves: []proto.RolloutWave{{}, {}},
		Hosts: []proto.RolloutHost{{Hostname: "a", Wave: 0, State: "Converged"},
			approval("w1"), approval("w2"), approval("w3"), approval("w4"), approval("w5"),
			quarantined("x1", "/nix/store/x1"), quarantined("x2", "/nix/store/x2")},
		Counts: map[string]int{"Converged": 1, "Pending": 7},
	}
	var b bytes.Buffer
	printChannelStatus(&b, style{}, proto.ChannelStatus{Name: "stable", Ref: "1", Rollout: r}, r)
	out := b.String()
	if n := strings.Count(out, "nixfleet rollout approve"); n != 1 {
		t.Errorf("the approve command is said %d times, want once:\n%s", n, out)
	}
	for _, want := range []string{
		"  stuck    w1, w2, w3 and 2 more (wave 1): [approval] wave 1 needs 2 approval(s) (none yet); next: approvers approve the wave: nixfleet rollout approve stable@1 --wave 1 --comment …\n",
		"           x1 (wave 1): [quarantined] /nix/store/x1 failed here; next: push a release\n",
		"           x2 (wave 1): [quarantined] /nix/store/x2 failed here; next: push a release\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the status lacks %q:\n%s", want, out)
		}
	}
}
