package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// world is a fake control plane, host and clock for the Agent: every
// call is recorded at the clock's time, and the agent's pauses move the
// clock instead of sleeping.
type world struct {
	mu      sync.Mutex
	now     time.Time
	current string // the system the host runs (and its profile)
	cancel  context.CancelFunc

	// Answers, in order; past the end, a check-in ends the run, a
	// confirm or report succeeds.
	checkins []error // nil: 200 without a target
	confirms []error
	reports  []error

	calls []call
}

// call is one request the agent sent, or one pause it made.
type call struct {
	At   time.Duration // since t0
	What string
}

func (w *world) clock() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

func (w *world) record(what string) {
	w.calls = append(w.calls, call{w.now.Sub(t0), what})
}

// after fires at once, once the clock moved by d.
func (w *world) after(d time.Duration) <-chan time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.now = w.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- w.now
	return ch
}

func next(list *[]error) (error, bool) {
	if len(*list) == 0 {
		return nil, false
	}
	err := (*list)[0]
	*list = (*list)[1:]
	return err, true
}

func (w *world) Checkin(ctx context.Context, req proto.CheckinRequest) (proto.CheckinResponse, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.record("checkin")
	err, ok := next(&w.checkins)
	if !ok {
		w.cancel()
		return proto.CheckinResponse{}, context.Canceled
	}
	return proto.CheckinResponse{NextCheckinSeconds: 30}, err
}

func (w *world) Confirm(ctx context.Context, req proto.ConfirmRequest) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.record("confirm")
	err, _ := next(&w.confirms)
	return err
}

func (w *world) ReportProbes(ctx context.Context, req proto.ReportRequest) (proto.ReportResponse, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.record("report " + req.Kind + "/" + req.Code)
	err, _ := next(&w.reports)
	return proto.ReportResponse{Recorded: true}, err
}

func (w *world) Manifest(ctx context.Context, rolloutID string) ([]byte, []byte, error) {
	return nil, nil, errors.New("no manifests here")
}

func (w *world) Current() string { w.mu.Lock(); defer w.mu.Unlock(); return w.current }
func (w *world) Booted() string  { return w.Current() }
func (w *world) Profile() string { return w.Current() }
func (w *world) BootID() string  { return "boot-1" }
func (w *world) Realise(context.Context, string) Result {
	return Result{Err: errors.New("no realising here")}
}

func (w *world) Activate(context.Context, string, time.Time, bool) Result {
	return Result{Err: errors.New("no activating here")}
}
func (w *world) MakeDefault(context.Context, string) Result {
	return Result{Err: errors.New("no boot entries here")}
}
func (w *world) Wait(context.Context, string, time.Time) Result { return Result{} }

func (w *world) SwitchTo(_ context.Context, path string, _ time.Time) Result {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.record("switch " + filepath.Base(path))
	w.current = path
	return Result{}
}

// run starts an agent from st in the world and runs it until the world's
// check-ins are used up; it returns the calls and the final state.
func (w *world) run(t *testing.T, st State) ([]call, State) {
	t.Helper()
	dir := t.TempDir()
	if err := SaveState(dir, st); err != nil {
		t.Fatal(err)
	}
	w.now = t0
	a, err := New(Config{Policy: policy, API: w, Roots: &trust.Roots{}, StateDir: dir, Exec: w, Now: w.clock,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	a.after = w.after
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w.cancel = cancel
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the agent did not use up the check-ins in time")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls, a.State()
}

func limited(d time.Duration) error {
	return &apiclient.Error{Status: 429, Code: codes.RateLimited, Message: "slow down", RetryAfter: d}
}

// TestCheckinHonoursRetryAfter: after a 429 the next check-in waits the
// server's Retry-After, at least a second and at most maxHoldOff; other
// failures keep the jittered back-off.
func TestCheckinHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		err      error
		min, max time.Duration // between the first check-in and the second
	}{
		{"Retry-After 7s", limited(7 * time.Second), 7 * time.Second, 7 * time.Second},
		{"Retry-After 90s, over the error back-off", limited(90 * time.Second), 90 * time.Second, 90 * time.Second},
		{"Retry-After an hour is bounded", limited(time.Hour), maxHoldOff, maxHoldOff},
		{"no Retry-After: a second", limited(0), time.Second, time.Second},
		{"another error: the jittered back-off", &apiclient.Error{Status: 500, Code: "internal"}, time.Second / 2, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := &world{current: v1, checkins: []error{tc.err, nil}}
			calls, _ := w.run(t, idle())
			if len(calls) < 2 || calls[0].What != "checkin" || calls[1].What != "checkin" {
				t.Fatalf("calls %v", calls)
			}
			if gap := calls[1].At - calls[0].At; gap < tc.min || gap > tc.max {
				t.Errorf("the next check-in after %s, want %s to %s", gap, tc.min, tc.max)
			}
		})
	}
}

// confirming is the state of an agent whose switch to v2 worked and whose
// confirm is due within window.
func confirming(window time.Duration) State {
	target := dispatch(v2, "tok-2")
	target.ConfirmBy = t0.Add(window).Format(time.RFC3339)
	return must(idle().begin(EvAlreadyRunning, target, v1, t0))
}

// TestConfirmRateLimited: a rate-limited confirm is retried after its
// Retry-After, and never later than confirmMargin before the deadline; a
// confirm the server keeps refusing, with check-ins refused too, ends in
// a rollback at the deadline, not after the server's long Retry-After.
func TestConfirmRateLimited(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		window   time.Duration
		confirms []error
		checkins []error
		want     []call
		// rolledBack: the host is back on v1; else it runs v2, confirmed.
		rolledBack bool
	}{
		{
			name: "retried after Retry-After", window: 5 * time.Minute,
			confirms: []error{limited(3 * time.Second), limited(3 * time.Second)},
			want: []call{{0, "confirm"}, {3 * time.Second, "confirm"}, {6 * time.Second, "confirm"},
				{6 * time.Second, "checkin"}, {7 * time.Second, "checkin"}},
		},
		{
			name: "a Retry-After past the deadline: retried before it", window: time.Minute,
			confirms: []error{limited(time.Hour)},
			// The accepted confirm ends the hold-off.
			want: []call{{0, "confirm"}, {time.Minute - confirmMargin, "confirm"},
				{time.Minute - confirmMargin, "checkin"}, {time.Minute - confirmMargin + time.Second, "checkin"}},
		},
		{
			name: "refused until the deadline: rolled back at it", window: time.Minute,
			confirms: []error{limited(time.Hour), limited(time.Hour)},
			want: []call{
				{0, "confirm"}, {time.Minute - confirmMargin, "confirm"},
				// No check-in while held off, but the rollback at the deadline.
				{time.Minute, "switch " + filepath.Base(v1)},
				// The report waits for the end of the hold-off (bounded), and
				// goes before the check-in.
				{time.Minute - confirmMargin + maxHoldOff, "report rolled_back/confirm_timeout"},
				{time.Minute - confirmMargin + maxHoldOff, "checkin"},
				{time.Minute - confirmMargin + maxHoldOff + time.Second, "checkin"},
			},
			rolledBack: true,
		},
		{
			name: "check-ins refused meanwhile: the confirm still goes before the deadline", window: time.Minute,
			checkins: []error{limited(time.Hour)},
			confirms: []error{errors.New("connection reset"), limited(time.Hour)},
			want: []call{
				{0, "confirm"},                           // failed: retried after the next check-in
				{0, "checkin"},                           // refused for an hour, bounded to maxHoldOff
				{time.Minute - confirmMargin, "confirm"}, // early, the last try: still refused
				{time.Minute, "switch " + filepath.Base(v1)},
				{maxHoldOff + time.Minute - confirmMargin, "report rolled_back/confirm_timeout"},
				{maxHoldOff + time.Minute - confirmMargin, "checkin"},
				{maxHoldOff + time.Minute - confirmMargin + time.Second, "checkin"},
			},
			rolledBack: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := &world{current: v2, confirms: tc.confirms, checkins: append(tc.checkins, nil)}
			calls, st := w.run(t, confirming(tc.window))
			if d := cmp.Diff(tc.want, calls); d != "" {
				t.Errorf("calls (-want +got):\n%s", d)
			}
			want := v2
			if tc.rolledBack {
				want = v1
			}
			if st.Phase != PhaseIdle || st.Done != "tok-2" || w.Current() != want {
				t.Errorf("phase %s, done %q, on %s; want idle, tok-2, on %s", st.Phase, st.Done, w.Current(), want)
			}
		})
	}
}

// TestReportRateLimited: a rate-limited report is sent again after a short
// Retry-After; a long one drops it and holds the next check-in back.
func TestReportRateLimited(t *testing.T) {
	t.Parallel()
	rolledBack := must(confirming(time.Minute).rollingBack(EvDeadline, "confirm_timeout", t0))
	for _, tc := range []struct {
		name    string
		reports []error
		want    []call
	}{
		{"sent again after Retry-After", []error{limited(2 * time.Second)}, []call{
			{0, "report rolled_back/confirm_timeout"}, {2 * time.Second, "report rolled_back/confirm_timeout"},
			{2 * time.Second, "checkin"}, {3 * time.Second, "checkin"},
		}},
		{"refused again: no check-in before it goes", []error{limited(time.Second), limited(time.Second), limited(time.Second)}, []call{
			{0, "report rolled_back/confirm_timeout"}, {time.Second, "report rolled_back/confirm_timeout"},
			{2 * time.Second, "report rolled_back/confirm_timeout"}, {3 * time.Second, "report rolled_back/confirm_timeout"},
			{3 * time.Second, "checkin"}, {4 * time.Second, "checkin"},
		}},
		{"a long Retry-After, bounded", []error{limited(time.Hour)}, []call{
			{0, "report rolled_back/confirm_timeout"}, {maxHoldOff, "report rolled_back/confirm_timeout"},
			{maxHoldOff, "checkin"}, {maxHoldOff + time.Second, "checkin"},
		}},
		{"another failure: dropped, as before", []error{errors.New("connection reset")}, []call{
			{0, "report rolled_back/confirm_timeout"}, {0, "checkin"}, {time.Second, "checkin"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Already back on v1: only the report is left.
			w := &world{current: v1, reports: tc.reports, checkins: []error{nil}}
			calls, st := w.run(t, rolledBack)
			if d := cmp.Diff(tc.want, calls); d != "" {
				t.Errorf("calls (-want +got):\n%s", d)
			}
			if st.Phase != PhaseIdle {
				t.Errorf("phase %s, want idle", st.Phase)
			}
		})
	}
}
