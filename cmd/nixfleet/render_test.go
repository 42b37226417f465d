package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/proto"
)

func TestStyleFor(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if st := styleFor(&b, func(string) string { return "" }); st.tty || st.colour {
		t.Fatalf("a buffer is a terminal: %+v", st)
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
channel stable  ref 2  signed 2026-03-01T12:00:00Z
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
		Reason: proto.DecisionReason{Code: "dispatched", Message: "dispatched to x"}}
	plain := eventLine(style{}, ev)
	want := "7      2026-03-01T12:00:00Z  1     web-1       host_transition     Pending → Activating      [dispatched] dispatched to x"
	if plain != want {
		t.Fatalf("event line\n got %q\nwant %q", plain, want)
	}
	// In colour, the columns stay where they are.
	painted := eventLine(style{tty: true, colour: true}, ev)
	stripped := strings.NewReplacer("\x1b[33m", "", "\x1b[36m", "", "\x1b[0m", "").Replace(painted)
	if stripped != plain || painted == plain {
		t.Fatalf("coloured line %q does not strip to %q", painted, plain)
	}
	header := eventHeader()
	if got := strings.Index(header, "TRANSITION"); got != strings.Index(plain, "Pending") {
		t.Fatalf("header %q and line %q are not aligned", header, plain)
	}
	// The budgets the decision touched follow the reason.
	ev.Budgets = []proto.BudgetUse{{Name: "web", InFlight: 3, Limit: 3}, {Name: "tags=db", InFlight: 1, Limit: 2}}
	if got := eventLine(style{}, ev); got != want+" [web 3/3, tags=db 1/2]" {
		t.Fatalf("event line with budgets\n got %q\nwant %q", got, want+" [web 3/3, tags=db 1/2]")
	}
}

func TestWaveName(t *testing.T) {
	t.Parallel()
	r := proto.Rollout{Waves: []proto.RolloutWave{{Name: "canary"}, {}}}
	for i, want := range []string{"0 (canary)", "1", "2"} {
		if got := waveName(r, i); got != want {
			t.Errorf("waveName(%d) = %q, want %q", i, got, want)
		}
	}
}
