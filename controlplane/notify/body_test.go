package notify_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/notify"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

var at = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const rollout = "staging@2c5b9d5b2656e1d3b1e0f2a4c6d8e0f1a3b5c7d9"

// events has one journal event of each kind the control plane writes
// (and two transitions no sink is sent), with the category each stands
// for ("" for none).
var events = []struct {
	e   proto.Event
	cat notify.Category
}{
	{proto.Event{ID: 1, Kind: rc.EventRolloutOpened, RolloutID: rollout, Channel: "staging", Wave: -1, From: "", To: "Opening",
		Reason: proto.DecisionReason{Code: codes.RefMoved, Message: "channel staging moved to 2c5b9d5b2656"}}, notify.CategoryRolloutOpened},
	{proto.Event{ID: 2, Kind: rc.EventRolloutTransition, RolloutID: rollout, Channel: "staging", Wave: -1, From: "Opening", To: "Active"}, ""},
	{proto.Event{ID: 3, Kind: rc.EventHostTransition, RolloutID: rollout, Channel: "staging", Wave: 0, Host: "web-1", From: "Pending", To: "Activating"}, ""},
	{proto.Event{ID: 4, Kind: rc.EventWavePromoted, RolloutID: rollout, Channel: "staging", Wave: 0,
		Reason: proto.DecisionReason{Code: codes.WavePromoted, Message: "wave 0 done; wave 1 starts"}}, notify.CategoryWavePromoted},
	{proto.Event{ID: 5, Kind: rc.EventRolloutTransition, RolloutID: rollout, Channel: "staging", Wave: 1, From: "Active", To: "Halted",
		Reason: proto.DecisionReason{Code: codes.HealthFailure, Message: "1 host(s) failed, more than maxFailures 0"}}, notify.CategoryHalted},
	{proto.Event{ID: 6, Kind: rc.EventRolloutTransition, RolloutID: rollout, Channel: "staging", Wave: 1, From: "Halted", To: "Reverting",
		Reason: proto.DecisionReason{Code: codes.OperatorRollback, Message: "rolled back", Actor: "alice"}}, notify.CategoryReverted},
	{proto.Event{ID: 7, Kind: rc.EventRolloutTransition, RolloutID: rollout, Channel: "staging", Wave: 1, From: "Reverting", To: "Reverted"}, notify.CategoryReverted},
	{proto.Event{ID: 8, Kind: rc.EventRolloutTransition, RolloutID: rollout, Channel: "staging", Wave: 1, From: "Active", To: "Converged"}, notify.CategoryConverged},
	{proto.Event{ID: 9, Kind: rc.EventRolloutTransition, RolloutID: rollout, Channel: "staging", Wave: -1, From: "Opening", To: "Failed"}, notify.CategoryFailed},
	{proto.Event{ID: 10, Kind: rc.EventRolloutTransition, RolloutID: rollout, Channel: "staging", Wave: -1, From: "Active", To: "Cancelled"}, ""},
	{proto.Event{ID: 11, Kind: rc.EventApprovalNeeded, RolloutID: rollout, Channel: "staging", Wave: 1,
		Reason: proto.DecisionReason{Code: codes.Approval, Message: "wave 1 needs 2 approval(s)"}}, notify.CategoryApprovalNeeded},
	{proto.Event{ID: 12, Kind: rc.EventPartialVisibility, Channel: "prod", Wave: -1,
		Reason: proto.DecisionReason{Code: codes.PartialVisibility, Message: "3 of 4 hosts silent"}}, notify.CategoryPartialVisibility},
	{proto.Event{ID: 13, Kind: rc.EventVisibilityRestored, Channel: "prod", Wave: -1,
		Reason: proto.DecisionReason{Code: codes.VisibilityRestored}}, notify.CategoryPartialVisibility},
	{proto.Event{ID: 14, Kind: notify.EventReleaseRejected, Channel: "prod", Wave: -1,
		Reason: proto.DecisionReason{Code: codes.Stale, Message: "commit 0123456789ab: the fleet is stale\nsigned 3 days ago"}}, notify.CategoryReleaseRefused},
	{proto.Event{ID: 15, Kind: rc.EventAnalysisCompleted, RolloutID: rollout, Channel: "staging", Wave: 0,
		Reason: proto.DecisionReason{Code: codes.AnalysisFailed, Message: "analysis errors of wave 0 ended Failed"}}, notify.CategoryAnalysis},
	{proto.Event{ID: 19, Kind: notify.EventForecast, RolloutID: rollout, Channel: "staging", Wave: -1,
		Reason: proto.DecisionReason{Code: codes.ForecastMoved, Message: "expected to end Converged at 2026-03-01T14:00:00Z (in 2h0m0s); 45m0s later than the forecast said before"}}, notify.CategoryForecast},
	{proto.Event{ID: 16, Kind: rc.EventWatchStarted, Wave: -1}, ""},
	{proto.Event{ID: 17, Kind: rc.EventHostWaiting, RolloutID: rollout, Channel: "staging", Wave: 1, Host: "db"}, ""},
	{proto.Event{ID: 18, Kind: rc.EventIntentAccepted, RolloutID: rollout, Channel: "staging", Wave: -1}, ""},
}

// TestCategoryOf: each notified event kind maps to its category; the
// others (host events, waits, intents, other transitions) to none.
func TestCategoryOf(t *testing.T) {
	t.Parallel()
	for _, tc := range events {
		got, ok := notify.CategoryOf(tc.e)
		if got != tc.cat || ok != (tc.cat != "") {
			t.Errorf("%s %s→%s: category %q, %v; want %q", tc.e.Kind, tc.e.From, tc.e.To, got, ok, tc.cat)
		}
	}
	for _, c := range notify.Categories {
		if got, err := notify.ParseCategory(string(c)); err != nil || got != c {
			t.Errorf("ParseCategory(%q) = %q, %v", c, got, err)
		}
	}
	_, err := notify.ParseCategory("halt")
	if want := `unknown event category "halt" (known: rollout_opened, wave_promoted, halted, reverted, converged, failed, ` +
		`approval_needed, partial_visibility, release_refused, analysis, forecast)`; err == nil || err.Error() != want {
		t.Errorf("ParseCategory(halt): %v\nwant %s", err, want)
	}
}

// TestSummary: one line per event, its subject (the rollout with a short
// ref, or the channel), what happened, the reason's code and message.
func TestSummary(t *testing.T) {
	t.Parallel()
	want := map[int64]string{
		1:  "staging@2c5b9d5b2656: rollout opened [ref_moved] channel staging moved to 2c5b9d5b2656",
		4:  "staging@2c5b9d5b2656: wave 0 promoted [wave_promoted] wave 0 done; wave 1 starts",
		5:  "staging@2c5b9d5b2656: Active → Halted [health_failure] 1 host(s) failed, more than maxFailures 0",
		6:  "staging@2c5b9d5b2656: Halted → Reverting [operator_rollback] rolled back (by alice)",
		7:  "staging@2c5b9d5b2656: Reverting → Reverted",
		11: "staging@2c5b9d5b2656: wave 1 needs approval [approval] wave 1 needs 2 approval(s)",
		12: "channel prod: partial visibility [partial_visibility] 3 of 4 hosts silent",
		13: "channel prod: visibility restored [visibility_restored]",
		14: "channel prod: release refused [stale] commit 0123456789ab: the fleet is stale signed 3 days ago",
		15: "staging@2c5b9d5b2656: wave 0 analysis ended [analysis_failed] analysis errors of wave 0 ended Failed",
		16: "fleet: watch_started",
	}
	for _, tc := range events {
		if w, ok := want[tc.e.ID]; ok {
			if got := notify.Summary(tc.e); got != w {
				t.Errorf("event %d:\n got %s\nwant %s", tc.e.ID, got, w)
			}
		}
	}
	if got := notify.Summary(proto.Event{Kind: rc.EventRolloutOpened, RolloutID: "dev@main", Wave: -1}); got != "dev@main: rollout opened" {
		t.Errorf("a ref that is no commit: %s", got)
	}
}

// TestBodies: the json body is the event with its summary, the slack one
// the summary (markup escaped), the alertmanager one an alert named after
// the category with labels, the summary, and the event's time; a
// visibility_restored alert ends the partial visibility's.
func TestBodies(t *testing.T) {
	t.Parallel()
	halted := events[4].e
	halted.At = at
	halted.Reason.Message = "1 host(s) failed <web-1 & db-1>"
	sink := notify.Sink{Name: "ops", URL: "https://hooks.example.org/x"}

	body, err := notify.Body(sink, notify.CategoryHalted, halted)
	if err != nil {
		t.Fatal(err)
	}
	var msg map[string]any
	if err := json.Unmarshal(body, &msg); err != nil {
		t.Fatal(err)
	}
	ev, _ := json.Marshal(halted)
	var evm map[string]any
	_ = json.Unmarshal(ev, &evm)
	want := map[string]any{"version": 1.0, "deliveryId": "ops/5", "sink": "ops", "category": "halted",
		"summary": "staging@2c5b9d5b2656: Active → Halted [health_failure] 1 host(s) failed <web-1 & db-1>", "event": evm}
	if d := cmp.Diff(want, msg); d != "" {
		t.Errorf("json body (-want +got):\n%s", d)
	}
	if evm["at"] != "2026-03-01T12:00:00Z" || evm["id"] != 5.0 || evm["to"] != "Halted" {
		t.Errorf("the event is not as the API shows it: %s", ev)
	}

	sink.Format = notify.FormatSlack
	body, err = notify.Body(sink, notify.CategoryHalted, halted)
	if want := `{"text":"staging@2c5b9d5b2656: Active → Halted [health_failure] 1 host(s) failed &lt;web-1 &amp; db-1&gt;"}`; err != nil || string(body) != want {
		t.Errorf("slack body %s, %v\nwant %s", body, err, want)
	}

	sink.Format = notify.FormatAlertmanager
	body, err = notify.Body(sink, notify.CategoryHalted, halted)
	if err != nil {
		t.Fatal(err)
	}
	var alerts []map[string]any
	if err := json.Unmarshal(body, &alerts); err != nil {
		t.Fatal(err)
	}
	wantAlerts := []map[string]any{{
		"labels": map[string]any{"alertname": "NixfleetRolloutHalted", "severity": "critical", "category": "halted",
			"rollout": rollout, "channel": "staging"},
		"annotations": map[string]any{"summary": want["summary"], "description": "1 host(s) failed <web-1 & db-1> (health_failure)"},
		"startsAt":    "2026-03-01T12:00:00Z",
	}}
	if d := cmp.Diff(wantAlerts, alerts); d != "" {
		t.Errorf("alertmanager body (-want +got):\n%s", d)
	}

	partial, restored := events[11].e, events[12].e
	partial.At, restored.At = at, at.Add(time.Hour)
	var a, b []map[string]any
	for _, x := range []struct {
		e   proto.Event
		out *[]map[string]any
	}{{partial, &a}, {restored, &b}} {
		body, err := notify.Body(sink, notify.CategoryPartialVisibility, x.e)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(body, x.out); err != nil {
			t.Fatal(err)
		}
	}
	if d := cmp.Diff(a[0]["labels"], b[0]["labels"]); d != "" || a[0]["endsAt"] != nil || b[0]["endsAt"] != "2026-03-01T13:00:00Z" {
		t.Errorf("visibility_restored does not end the partial visibility's alert: %v\n%v\n%s", a, b, d)
	}
	if l := a[0]["labels"].(map[string]any); l["alertname"] != "NixfleetRolloutPartialVisibility" || l["severity"] != "warning" || l["rollout"] != nil {
		t.Errorf("partial visibility labels %v", l)
	}
}

// TestSignature: HMAC-SHA256 in hex after "sha256=" (RFC 4231 test case
// 2).
func TestSignature(t *testing.T) {
	t.Parallel()
	got := notify.Signature([]byte("Jefe"), []byte("what do ya want for nothing?"))
	if want := "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"; got != want {
		t.Errorf("%s, want %s", got, want)
	}
}

// TestSinkCheck: names, URLs, formats, categories, timeouts and backoffs
// are checked; names must differ.
func TestSinkCheck(t *testing.T) {
	t.Parallel()
	ok := notify.Sink{Name: "ops-1_a", URL: "https://hooks.example.org/x?token=1"}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*notify.Sink)
		err  string
	}{
		{"upper-case name", func(s *notify.Sink) { s.Name = "Ops" }, `sink name "Ops"`},
		{"empty name", func(s *notify.Sink) { s.Name = "" }, `sink name ""`},
		{"long name", func(s *notify.Sink) { s.Name = strings.Repeat("a", 64) }, `want 1 to 63`},
		{"leading dash", func(s *notify.Sink) { s.Name = "-a" }, `sink name "-a"`},
		{"no scheme", func(s *notify.Sink) { s.URL = "hooks.example.org/x" }, `is not an http or https URL`},
		{"ftp", func(s *notify.Sink) { s.URL = "ftp://x/y" }, `is not an http or https URL`},
		{"no host", func(s *notify.Sink) { s.URL = "https:///x" }, `is not an http or https URL`},
		{"password not echoed", func(s *notify.Sink) { s.URL = "ftp://u:secret@x/y" }, `"ftp://u:xxxxx@x/y"`},
		{"format", func(s *notify.Sink) { s.Format = "xml" }, `unknown format "xml"`},
		{"category", func(s *notify.Sink) { s.Events = []notify.Category{"halt"} }, `unknown event category "halt"`},
		{"empty channel", func(s *notify.Sink) { s.Channels = []string{""} }, `an empty channel name`},
		{"timeout", func(s *notify.Sink) { s.Timeout = 2 * time.Minute }, `timeout 2m0s`},
		{"backoffs", func(s *notify.Sink) { s.MinBackoff, s.MaxBackoff = time.Minute, time.Second }, `backoff 1m0s to 1s`},
	} {
		s := ok
		tc.edit(&s)
		if err := s.Check(); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
	if err := notify.CheckSinks([]notify.Sink{ok, ok}); err == nil || !strings.Contains(err.Error(), "the name is taken") {
		t.Errorf("two sinks of one name: %v", err)
	}
}

// TestAccepts: a sink's categories and channels filter; an event of no
// channel passes any channel filter.
func TestAccepts(t *testing.T) {
	t.Parallel()
	s := notify.Sink{Events: []notify.Category{notify.CategoryHalted, notify.CategoryReleaseRefused}, Channels: []string{"prod"}}
	for _, tc := range []struct {
		c       notify.Category
		channel string
		want    bool
	}{
		{notify.CategoryHalted, "prod", true},
		{notify.CategoryHalted, "staging", false},
		{notify.CategoryConverged, "prod", false},
		{notify.CategoryReleaseRefused, "", true},
	} {
		if got := s.Accepts(tc.c, proto.Event{Channel: tc.channel}); got != tc.want {
			t.Errorf("%s on %q: %v", tc.c, tc.channel, got)
		}
	}
	if !(notify.Sink{}).Accepts(notify.CategoryAnalysis, proto.Event{Channel: "x"}) {
		t.Error("a sink without filters refused an event")
	}
}

// TestBackoff: 1s doubling to the cap, and never less than Retry-After
// (itself at most an hour).
func TestBackoff(t *testing.T) {
	t.Parallel()
	s := notify.Sink{MaxBackoff: 20 * time.Second}
	var got []time.Duration
	for attempt := 1; attempt <= 7; attempt++ {
		got = append(got, s.Backoff(attempt, 0))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 20 * time.Second, 20 * time.Second}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("schedule (-want +got):\n%s", d)
	}
	if d := (notify.Sink{}).Backoff(1000, 0); d != notify.DefaultMaxBackoff {
		t.Errorf("the default cap after many failures: %s", d)
	}
	if d := s.Backoff(1, 30*time.Second); d != 30*time.Second {
		t.Errorf("Retry-After 30s over 1s: %s", d)
	}
	if d := s.Backoff(6, time.Second); d != 20*time.Second {
		t.Errorf("Retry-After 1s under 20s: %s", d)
	}
	if d := s.Backoff(1, 48*time.Hour); d != notify.MaxRetryAfter {
		t.Errorf("Retry-After 48h: %s", d)
	}
	for h, want := range map[string]time.Duration{
		"7": 7 * time.Second, " 0 ": 0, "-3": 0, "soon": 0, "": 0, "999999": notify.MaxRetryAfter,
		at.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second, at.Add(-time.Hour).Format(http.TimeFormat): 0,
	} {
		if got := notify.RetryAfter(h, at); got != want {
			t.Errorf("Retry-After %q: %s, want %s", h, got, want)
		}
	}
}
