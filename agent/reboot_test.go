package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

var v3 = "/nix/store/cccccccccccccccccccccccccccccccc-nixos-system-web-1-v3"

// managed is a dispatch of v2 whose reboot the control plane orders.
func managed() *proto.Target {
	d := dispatch(v2, "tok-2")
	d.ManagedReboot = true
	return d
}

// staged is the state of an agent that staged v2, from v1, for a reboot.
func staged() State {
	return must(must(idle().begin(EvActivate, managed(), v1, t0)).move(EvStaged, t0))
}

// rebootTarget orders a reboot once into closure, its boot deadline in
// (after t0).
func rebootTarget(closure, token string, in time.Duration) *proto.Target {
	return &proto.Target{Kind: proto.TargetReboot, RolloutID: "stable@c1", Closure: filepath.Base(closure), WaveIndex: 1,
		ManifestHash: "h", Token: token, ConfirmBy: t0.Add(in).Format(time.RFC3339)}
}

// rebootOrdered is the state of an agent that staged v2 and was ordered to
// reboot into it by t, on boot-1.
func rebootOrdered(t *proto.Target) State {
	st := must(staged().move(EvRebootOrdered, t0))
	st.Target, st.BootID = t, "boot-1"
	return st
}

// TestDecideReboots: every row of rfcs/0008 §Reboots, decided on a
// state and what the host shows.
func TestDecideReboots(t *testing.T) {
	t.Parallel()
	tr := rebootTarget(v2, "tok-r", 10*time.Minute)
	onV1 := Observation{Current: v1, Booted: v1, Profile: v1, BootID: "boot-1"}
	rebooting := rebootOrdered(tr)
	bootConfirming := must(rebooting.move(EvBooted, t0))
	bootConfirming.BootID = "boot-2"
	onV2 := Observation{Current: v2, Booted: v2, Profile: v1, BootID: "boot-2"}
	back := must(bootConfirming.rollingBack(EvConfirmRejected, codes.ConfirmRejected, t0))
	done := staged()
	done.Done = "tok-old"
	rebootFailed := must(rebooting.move(EvRebootFailed, t0))
	for _, tc := range []struct {
		name   string
		st     State
		obs    Observation
		target *proto.Target
		now    time.Time
		p      Policy
		want   Step // Kind, Path, Once; Next's phase, and the report's kind/code
		next   Phase
		report string
	}{
		{name: "staged, the dispatch again", st: staged(), obs: onV1, target: managed(), want: Step{Kind: StepNone}},
		{name: "staged, a reboot target", st: staged(), obs: onV1, target: tr, want: Step{Kind: StepSave}, next: PhaseRebooting},
		{name: "staged, a reboot target past its deadline", st: staged(), obs: onV1, target: tr, now: t0.Add(time.Hour),
			want: Step{Kind: StepNone}},
		{name: "staged, a reboot target for another closure", st: staged(), obs: onV1, target: rebootTarget(v3, "tok-r", time.Minute),
			want: Step{Kind: StepSave}, next: PhaseDeferred, report: "boot_failed/reboot_failed"},
		{name: "staged, a loader that cannot boot once", st: staged(), obs: onV1, target: tr, p: Policy{BootLoader: proto.BootLoaderNone},
			want: Step{Kind: StepSave}, next: PhaseDeferred, report: "boot_failed/boot_loader_unsupported"},
		{name: "staged, a reboot token already done", st: done, obs: onV1, target: rebootTarget(v2, "tok-old", time.Minute),
			want: Step{Kind: StepNone}},
		{name: "staged, another dispatch", st: staged(), obs: onV1, target: dispatch(v3, "tok-3"), want: Step{Kind: StepSave}, next: PhaseIdle},
		{name: "idle, a reboot target", st: idle(), obs: onV1, target: tr, want: Step{Kind: StepSave}, next: PhaseIdle,
			report: "boot_failed/reboot_failed"},
		{name: "idle, a reboot target the host runs", st: idle(), obs: Observation{Current: v2, Booted: v2, Profile: v2},
			target: tr, want: Step{Kind: StepSave}, next: PhaseIdle},
		{name: "rebooting, same boot", st: rebooting, obs: onV1, want: Step{Kind: StepReboot, Path: v2, Once: true}},
		{name: "rebooting, same boot, ordered by this process", st: rebooting, obs: Observation{Current: v1, Booted: v1,
			Profile: v1, BootID: "boot-1", Rebooted: rebootMark(rebooting)}, want: Step{Kind: StepNone}},
		{name: "rebooting, same boot, past the deadline", st: rebooting, obs: onV1, now: t0.Add(time.Hour),
			want: Step{Kind: StepSave}, next: PhaseDeferred, report: "boot_failed/reboot_failed"},
		{name: "rebooting, booted into the target", st: rebooting, obs: onV2, want: Step{Kind: StepSave}, next: PhaseBootConfirming},
		{name: "rebooting, came up on the previous default", st: rebooting, obs: Observation{Current: v1, Booted: v1,
			Profile: v1, BootID: "boot-2"}, want: Step{Kind: StepSave}, next: PhaseIdle, report: "boot_failed/boot_fell_back"},
		{name: "boot confirming", st: bootConfirming, obs: onV2, want: Step{Kind: StepConfirm, Path: v2}},
		{name: "boot confirming, past the deadline", st: bootConfirming, obs: onV2, now: t0.Add(time.Hour),
			want: Step{Kind: StepSave}, next: PhaseRebootingBack},
		{name: "making default", st: must(bootConfirming.move(EvConfirmed, t0)), obs: onV2, want: Step{Kind: StepMakeDefault, Path: v2}},
		{name: "rebooting back, same boot", st: back, obs: onV2, want: Step{Kind: StepReboot, Path: v1}},
		{name: "rebooting back, on the previous system", st: back, obs: Observation{Current: v1, Booted: v1, Profile: v1,
			BootID: "boot-3"}, want: Step{Kind: StepSave}, next: PhaseIdle, report: "rolled_back/confirm_rejected"},
		{name: "rebooting back, on the refused target again", st: back, obs: Observation{Current: v2, Booted: v2, Profile: v1,
			BootID: "boot-3"}, want: Step{Kind: StepSave}, next: PhaseRebootingBack},
		{name: "rebooting back, on another system", st: back, obs: Observation{Current: v3, Booted: v3, Profile: v3,
			BootID: "boot-3"}, want: Step{Kind: StepSave}, next: PhaseIdle, report: "boot_failed/boot_fell_back"},
		{name: "rebooting back, the boot id unreadable", st: back, obs: Observation{Current: v2, Booted: v2, Profile: v1},
			want: Step{Kind: StepNone}},
		{name: "rebooting, the boot id unreadable", st: rebooting, obs: Observation{Current: v1, Booted: v1, Profile: v1},
			want: Step{Kind: StepNone}},
		{name: "boot confirming, the booted system unreadable", st: bootConfirming, obs: Observation{Current: v2, Profile: v1,
			BootID: "boot-2"}, want: Step{Kind: StepNone}},
		{name: "boot confirming, restarted onto the previous default", st: bootConfirming, obs: Observation{Current: v1,
			Booted: v1, Profile: v1, BootID: "boot-3"}, want: Step{Kind: StepSave}, next: PhaseIdle, report: "boot_failed/boot_fell_back"},
		{name: "making default, restarted onto the previous default", st: must(bootConfirming.move(EvConfirmed, t0)),
			obs: Observation{Current: v1, Booted: v1, Profile: v1, BootID: "boot-3"}, want: Step{Kind: StepSave}, next: PhaseIdle,
			report: "boot_failed/boot_fell_back"},
		{name: "staged again after a failed reboot, booted into the target", st: rebootFailed, obs: onV2,
			want: Step{Kind: StepSave}, next: PhaseMakingDefault},
		{name: "staging, restarted after the profile was set", st: must(idle().begin(EvActivate, managed(), v1, t0)),
			obs: Observation{Current: v1, Booted: v1, Profile: v2, BootID: "boot-1"}, want: Step{Kind: StepActivate, Path: v2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			now, p := tc.now, tc.p
			if now.IsZero() {
				now = t0
			}
			if p.BootLoader == "" {
				p.BootLoader = "fake"
			}
			p.Hostname, p.StoreDir = policy.Hostname, policy.StoreDir
			s, err := Decide(tc.st, tc.obs, tc.target, now, p)
			if err != nil {
				t.Fatal(err)
			}
			got := Step{Kind: s.Kind, Path: s.Path, Once: s.Once}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("step (-want +got):\n%s\n(%s)", d, s.Why)
			}
			if s.Kind == StepSave && s.Next.Phase != tc.next {
				t.Errorf("next phase %s, want %s", s.Next.Phase, tc.next)
			}
			report := ""
			if s.Report != nil {
				report = s.Report.Kind + "/" + s.Report.Code
			}
			if report != tc.report {
				t.Errorf("report %q, want %q", report, tc.report)
			}
		})
	}
}

// bootHost is a host with a boot loader, and its control plane: the
// executor, the BootLoader and the API of the agents it runs. Its calls
// are recorded with the phase state.json holds at the time, so that a
// test sees what was saved before each step.
type bootHost struct {
	mu       sync.Mutex
	stateDir string
	now      time.Time
	// current and booted run; profile is the default boot entry, once
	// the once-only one ("" when none), bootID the boot's id.
	current, booted, profile, once, bootID string
	boots                                  int

	// The answers: check-ins in order (past the end, the run ends);
	// the confirm's error; the loader's errors.
	targets               []*proto.Target
	confirmErr            error
	onceErr, rebootErr    error
	clearErr              error
	cancel                context.CancelFunc
	stayUp                bool // a reboot ordered does not end the run
	kernelChanges         bool // a rollback changes the kernel: SwitchTo stages
	calls                 []string
	reports               []string
	rebootsOrdered, kexec int
}

func newBootHost(t *testing.T) *bootHost {
	return &bootHost{stateDir: t.TempDir(), now: t0, current: v1, booted: v1, profile: v1, bootID: "boot-1", boots: 1}
}

func (h *bootHost) record(format string, args ...any) {
	st, err := LoadState(h.stateDir)
	phase := string(st.Phase)
	if err != nil {
		phase = err.Error()
	}
	h.calls = append(h.calls, fmt.Sprintf(format, args...)+" ("+phase+")")
}

// powerCycle boots the host: the once-only entry if set, else the
// default.
func (h *bootHost) powerCycle(intoDefault bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sys := h.profile
	if h.once != "" && !intoDefault {
		sys = h.once
	}
	h.current, h.booted, h.once = sys, sys, ""
	h.boots++
	h.bootID = fmt.Sprintf("boot-%d", h.boots)
}

// run runs an agent on the host, loader being its boot loader (the host
// itself when nil), until the check-ins are used up or it reboots.
func (h *bootHost) run(t *testing.T, loader BootLoader, targets ...*proto.Target) State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h.mu.Lock()
	h.targets, h.cancel = targets, cancel
	h.mu.Unlock()
	if loader == nil {
		loader = h
	}
	a, err := New(Config{Policy: policy, API: h, Roots: &trust.Roots{}, StateDir: h.stateDir, Exec: h, Loader: loader,
		Now: h.clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	a.after = h.after
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the agent did not use up the check-ins in time")
	}
	return a.State()
}

func (h *bootHost) clock() time.Time { h.mu.Lock(); defer h.mu.Unlock(); return h.now }
func (h *bootHost) after(d time.Duration) <-chan time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now = h.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- h.now
	return ch
}

func (h *bootHost) Checkin(context.Context, proto.CheckinRequest) (proto.CheckinResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.targets) == 0 {
		h.cancel()
		return proto.CheckinResponse{}, context.Canceled
	}
	t := h.targets[0]
	h.targets = h.targets[1:]
	return proto.CheckinResponse{Target: t, NextCheckinSeconds: 30}, nil
}

func (h *bootHost) Confirm(_ context.Context, r proto.ConfirmRequest) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.record("confirm %s", r.Token)
	return h.confirmErr
}

func (h *bootHost) ReportProbes(_ context.Context, r proto.ReportRequest) (proto.ReportResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reports = append(h.reports, r.Kind+"/"+r.Code)
	return proto.ReportResponse{Recorded: true}, nil
}

func (h *bootHost) Manifest(context.Context, string) ([]byte, []byte, error) {
	return nil, nil, errors.New("no manifests here")
}

func (h *bootHost) Current() string { h.mu.Lock(); defer h.mu.Unlock(); return h.current }
func (h *bootHost) Booted() string  { h.mu.Lock(); defer h.mu.Unlock(); return h.booted }
func (h *bootHost) Profile() string { h.mu.Lock(); defer h.mu.Unlock(); return h.profile }
func (h *bootHost) BootID() string  { h.mu.Lock(); defer h.mu.Unlock(); return h.bootID }
func (h *bootHost) Realise(context.Context, string) Result {
	return Result{}
}
func (h *bootHost) Wait(context.Context, string, time.Time) Result { return Result{} }

// Activate stages every target (a kernel change); keepDefault leaves the
// default entry.
func (h *bootHost) Activate(_ context.Context, path string, _ time.Time, keepDefault bool) Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.record("stage %s keepDefault=%v", filepath.Base(path), keepDefault)
	if !keepDefault {
		h.profile = path
	}
	return Result{Deferred: true}
}

func (h *bootHost) MakeDefault(_ context.Context, path string) Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.record("make-default %s", filepath.Base(path))
	h.profile = path
	return Result{}
}

func (h *bootHost) SwitchTo(_ context.Context, path string, _ time.Time) Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.record("switch %s", filepath.Base(path))
	h.profile = path
	if h.kernelChanges {
		return Result{Deferred: true}
	}
	h.current = path
	return Result{}
}

func (h *bootHost) Name() string { return "fake" }

func (h *bootHost) BootOnce(_ context.Context, system string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.record("boot-once %s", filepath.Base(system))
	if h.onceErr != nil {
		return h.onceErr
	}
	h.once = system
	return nil
}

func (h *bootHost) ClearOnce(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.record("clear-once")
	if h.clearErr != nil {
		return h.clearErr
	}
	h.once = ""
	return nil
}

// Reboot ends the agent's run, as the shutdown would, unless stayUp.
func (h *bootHost) Reboot(_ context.Context, kexec bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.record("reboot kexec=%v", kexec)
	if h.rebootErr != nil {
		return h.rebootErr
	}
	h.rebootsOrdered++
	if !h.stayUp {
		h.cancel()
	}
	return nil
}

// TestAgentReboots: the agent with a fake boot loader through every way a
// reboot the control plane orders ends (rfcs/0008 §Reboots).
func TestAgentReboots(t *testing.T) {
	t.Parallel()
	rejected := &apiclient.Error{Status: 410, Code: codes.ConfirmRejected, Message: "gone"}
	tr := rebootTarget(v2, "tok-r", 10*time.Minute)
	tr.Kexec = true

	// stageAndReboot takes a host from the activation of the managed
	// dispatch to the reboot ordered.
	stageAndReboot := func(t *testing.T, h *bootHost) {
		t.Helper()
		if err := SaveState(h.stateDir, must(idle().begin(EvActivate, managed(), v1, t0))); err != nil {
			t.Fatal(err)
		}
		if st := h.run(t, nil, managed()); st.Phase != PhaseDeferred {
			t.Fatalf("after the stage: phase %s, want deferred", st.Phase)
		}
		if h.profile != v1 {
			t.Fatalf("the managed stage made %s the default entry", h.profile)
		}
		if st := h.run(t, nil, tr); st.Phase != PhaseRebooting || st.BootID != "boot-1" || st.Previous != v1 {
			t.Fatalf("after the reboot order: phase %s, boot id %q, previous %s", st.Phase, st.BootID, st.Previous)
		}
	}
	ordered := []string{"stage " + filepath.Base(v2) + " keepDefault=true (activating)",
		"boot-once " + filepath.Base(v2) + " (rebooting)", "reboot kexec=true (rebooting)"}

	t.Run("booted into the target: confirmed, then the default", func(t *testing.T) {
		t.Parallel()
		h := newBootHost(t)
		stageAndReboot(t, h)
		h.powerCycle(false)
		st := h.run(t, nil, tr, tr)
		want := append(ordered, "clear-once (boot_confirming)", "confirm tok-r (boot_confirming)", "clear-once (making_default)", "make-default "+filepath.Base(v2)+" (making_default)")
		if d := cmp.Diff(want, h.calls); d != "" {
			t.Errorf("calls (-want +got):\n%s", d)
		}
		if st.Phase != PhaseIdle || st.Done != "tok-r" || !st.knows(v2) || h.profile != v2 {
			t.Errorf("phase %s, done %q, knows v2 %v, default %s; want idle, tok-r, true, v2", st.Phase, st.Done, st.knows(v2), h.profile)
		}
		if d := cmp.Diff([]string{"deferred/"}, h.reports); d != "" {
			t.Errorf("reports (-want +got):\n%s", d)
		}
	})
	t.Run("confirm refused: rebooted back into the default", func(t *testing.T) {
		t.Parallel()
		h := newBootHost(t)
		stageAndReboot(t, h)
		h.powerCycle(false)
		h.confirmErr = rejected
		if st := h.run(t, nil, tr); st.Phase != PhaseRebootingBack {
			t.Fatalf("phase %s, want rebooting_back", st.Phase)
		}
		h.powerCycle(false)
		st := h.run(t, nil, tr)
		want := append(ordered, "clear-once (boot_confirming)", "confirm tok-r (boot_confirming)", "make-default "+filepath.Base(v1)+" (rebooting_back)",
			"clear-once (rebooting_back)", "reboot kexec=false (rebooting_back)")
		if d := cmp.Diff(want, h.calls); d != "" {
			t.Errorf("calls (-want +got):\n%s", d)
		}
		if _, q := st.quarantined(filepath.Base(v2), h.now); st.Phase != PhaseIdle || !q || h.current != v1 || h.profile != v1 {
			t.Errorf("phase %s, quarantined %v, on %s, default %s; want idle, true, v1, v1", st.Phase, q, h.current, h.profile)
		}
		if d := cmp.Diff([]string{"deferred/", "rolled_back/confirm_rejected"}, h.reports); d != "" {
			t.Errorf("reports (-want +got):\n%s", d)
		}
	})
	t.Run("came up on the previous default", func(t *testing.T) {
		t.Parallel()
		h := newBootHost(t)
		stageAndReboot(t, h)
		h.powerCycle(true)
		st := h.run(t, nil, tr)
		if d := cmp.Diff(ordered, h.calls); d != "" {
			t.Errorf("calls (-want +got):\n%s", d)
		}
		if _, q := st.quarantined(filepath.Base(v2), h.now); st.Phase != PhaseIdle || !q || h.profile != v1 {
			t.Errorf("phase %s, quarantined %v, default %s; want idle, true, v1", st.Phase, q, h.profile)
		}
		if d := cmp.Diff([]string{"deferred/", "boot_failed/boot_fell_back"}, h.reports); d != "" {
			t.Errorf("reports (-want +got):\n%s", d)
		}
	})
	t.Run("booted into the staged target unordered: made the default", func(t *testing.T) {
		t.Parallel()
		h := newBootHost(t)
		if err := SaveState(h.stateDir, must(idle().begin(EvActivate, managed(), v1, t0))); err != nil {
			t.Fatal(err)
		}
		h.run(t, nil, managed())
		h.mu.Lock()
		h.once = v2 // chosen at the boot menu
		h.mu.Unlock()
		h.powerCycle(false)
		st := h.run(t, nil, managed())
		want := []string{"stage " + filepath.Base(v2) + " keepDefault=true (activating)", "clear-once (making_default)",
			"make-default " + filepath.Base(v2) + " (making_default)"}
		if d := cmp.Diff(want, h.calls); d != "" {
			t.Errorf("calls (-want +got):\n%s", d)
		}
		if st.Phase != PhaseIdle || !st.knows(v2) || h.profile != v2 {
			t.Errorf("phase %s, knows v2 %v, default %s; want idle, true, v2", st.Phase, st.knows(v2), h.profile)
		}
	})
	t.Run("no reboot by the deadline: the once-only entry is removed", func(t *testing.T) {
		t.Parallel()
		h := newBootHost(t)
		h.stayUp = true // the reboot is ordered, and never happens
		if err := SaveState(h.stateDir, staged()); err != nil {
			t.Fatal(err)
		}
		h.run(t, nil, tr)
		h.mu.Lock()
		h.now = h.now.Add(11 * time.Minute)
		h.mu.Unlock()
		st := h.run(t, nil, tr)
		if st.Phase != PhaseDeferred || h.once != "" {
			t.Errorf("phase %s, once-only entry %q; want deferred, none", st.Phase, h.once)
		}
		if d := cmp.Diff([]string{"boot_failed/reboot_failed"}, h.reports); d != "" {
			t.Errorf("reports (-want +got):\n%s", d)
		}
	})
	t.Run("an unknown boot id: refused", func(t *testing.T) {
		t.Parallel()
		h := newBootHost(t)
		h.bootID = ""
		if err := SaveState(h.stateDir, staged()); err != nil {
			t.Fatal(err)
		}
		st := h.run(t, nil, tr, tr)
		if st.Phase != PhaseDeferred || len(h.calls) != 0 {
			t.Errorf("phase %s, calls %q; want deferred, none", st.Phase, h.calls)
		}
		if d := cmp.Diff([]string{"boot_failed/reboot_failed"}, h.reports); d != "" {
			t.Errorf("reports (-want +got):\n%s", d)
		}
	})
	t.Run("a loader that cannot boot once stages as the default", func(t *testing.T) {
		t.Parallel()
		h := newBootHost(t)
		if err := SaveState(h.stateDir, must(idle().begin(EvActivate, managed(), v1, t0))); err != nil {
			t.Fatal(err)
		}
		h.run(t, NoBootLoader{}, managed())
		if d := cmp.Diff([]string{"stage " + filepath.Base(v2) + " keepDefault=false (activating)"}, h.calls); d != "" {
			t.Errorf("calls (-want +got):\n%s", d)
		}
	})
	t.Run("the reboot fails", func(t *testing.T) {
		t.Parallel()
		h := newBootHost(t)
		h.rebootErr = errors.New("Failed to reboot: access denied")
		if err := SaveState(h.stateDir, staged()); err != nil {
			t.Fatal(err)
		}
		st := h.run(t, nil, tr, tr)
		want := []string{"boot-once " + filepath.Base(v2) + " (rebooting)", "reboot kexec=true (rebooting)", "clear-once (rebooting)"}
		if d := cmp.Diff(want, h.calls); d != "" {
			t.Errorf("calls (-want +got):\n%s", d)
		}
		if st.Phase != PhaseDeferred || h.once != "" {
			t.Errorf("phase %s, once-only entry %q; want deferred, none", st.Phase, h.once)
		}
		if d := cmp.Diff([]string{"boot_failed/reboot_failed"}, h.reports); d != "" {
			t.Errorf("reports (-want +got):\n%s", d)
		}
	})
	t.Run("a loader that cannot boot once", func(t *testing.T) {
		t.Parallel()
		h := newBootHost(t)
		if err := SaveState(h.stateDir, staged()); err != nil {
			t.Fatal(err)
		}
		st := h.run(t, NoBootLoader{}, tr, tr)
		if st.Phase != PhaseDeferred || st.Done != "tok-r" || len(h.calls) != 0 {
			t.Errorf("phase %s, done %q, calls %q; want deferred, tok-r, none", st.Phase, st.Done, h.calls)
		}
		if d := cmp.Diff([]string{"boot_failed/boot_loader_unsupported"}, h.reports); d != "" {
			t.Errorf("reports (-want +got):\n%s", d)
		}
	})
	t.Run("refused without a reboot: another closure, a token done, nothing staged", func(t *testing.T) {
		t.Parallel()
		h := newBootHost(t)
		if err := SaveState(h.stateDir, staged()); err != nil {
			t.Fatal(err)
		}
		other := rebootTarget(v3, "tok-x", 10*time.Minute)
		st := h.run(t, nil, other, other)
		if st.Phase != PhaseDeferred || st.Done != "tok-x" {
			t.Errorf("another closure: phase %s, done %q", st.Phase, st.Done)
		}
		idleHost := newBootHost(t)
		st = idleHost.run(t, nil, tr, tr)
		if st.Phase != PhaseIdle || st.Done != "tok-r" {
			t.Errorf("nothing staged: phase %s, done %q", st.Phase, st.Done)
		}
		if calls := append(h.calls, idleHost.calls...); len(calls) != 0 {
			t.Errorf("calls %q, want none", calls)
		}
		if d := cmp.Diff([]string{"boot_failed/reboot_failed", "boot_failed/reboot_failed"},
			append(h.reports, idleHost.reports...)); d != "" {
			t.Errorf("reports (-want +got):\n%s", d)
		}
	})
	t.Run("a rollback target across a kernel change: a reboot back", func(t *testing.T) {
		t.Parallel()
		h := newBootHost(t)
		h.current, h.booted, h.profile, h.kernelChanges = v2, v2, v2, true
		st := idle()
		st.remember(v1)
		st.remember(v2)
		if err := SaveState(h.stateDir, st); err != nil {
			t.Fatal(err)
		}
		rb := &proto.Target{Kind: proto.TargetRollback, RolloutID: "stable@c1", Closure: filepath.Base(v1), Token: "tok-rb",
			ConfirmBy: t0.Add(5 * time.Minute).Format(time.RFC3339)}
		if st := h.run(t, nil, rb); st.Phase != PhaseRebootingBack || st.BootID != "boot-1" {
			t.Fatalf("phase %s, boot id %q; want rebooting_back, boot-1", st.Phase, st.BootID)
		}
		h.powerCycle(false)
		st = h.run(t, nil, rb)
		want := []string{"switch " + filepath.Base(v1) + " (rolling_back)", "make-default " + filepath.Base(v1) + " (rebooting_back)",
			"clear-once (rebooting_back)", "reboot kexec=false (rebooting_back)"}
		if d := cmp.Diff(want, h.calls); d != "" {
			t.Errorf("calls (-want +got):\n%s", d)
		}
		if _, q := st.quarantined(filepath.Base(v1), h.now); st.Phase != PhaseIdle || q || h.current != v1 {
			t.Errorf("phase %s, v1 quarantined %v, on %s; want idle, false, v1", st.Phase, q, h.current)
		}
		if d := cmp.Diff([]string{"rolled_back/rollback_requested"}, h.reports); d != "" {
			t.Errorf("reports (-want +got):\n%s", d)
		}
	})
	t.Run("restarted before the reboot, or the host slow to go down", func(t *testing.T) {
		t.Parallel()
		h := newBootHost(t)
		rebooting := rebootOrdered(tr)
		if err := SaveState(h.stateDir, rebooting); err != nil {
			t.Fatal(err)
		}
		// A restart on the same boot orders the reboot again, once.
		h.stayUp = true
		if st := h.run(t, nil, tr, tr, tr); st.Phase != PhaseRebooting || h.rebootsOrdered != 1 {
			t.Errorf("phase %s, reboots ordered %d; want rebooting, 1", st.Phase, h.rebootsOrdered)
		}
		// Past the boot deadline on the same boot: failed, no reboot.
		h.now = t0.Add(time.Hour)
		h.calls, h.rebootsOrdered = nil, 0
		st := h.run(t, nil, tr)
		if st.Phase != PhaseDeferred || h.rebootsOrdered != 0 || slices.Contains(h.calls, "reboot kexec=true (rebooting)") {
			t.Errorf("past the deadline: phase %s, calls %q", st.Phase, h.calls)
		}
		if d := cmp.Diff([]string{"boot_failed/reboot_failed"}, h.reports); d != "" {
			t.Errorf("reports (-want +got):\n%s", d)
		}
	})
}

// TestStateRebootPhases: the phases of a reboot keep their boot id across
// a restart.
func TestStateRebootPhases(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st := rebootOrdered(rebootTarget(v2, "tok-r", time.Minute))
	if err := SaveState(dir, st); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(st, got); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
}

// TestAgentRebootsThroughResets: a host that resets between the steps of
// a reboot never runs, confirms or makes the default a system it did not
// confirm, and never drops a rollback (rfcs/0008 §Reboots).
func TestAgentRebootsThroughResets(t *testing.T) {
	t.Parallel()
	tr := rebootTarget(v2, "tok-r", 10*time.Minute)
	t.Run("reset before the confirm went through: no confirm from the default entry", func(t *testing.T) {
		t.Parallel()
		h := newBootHost(t)
		if err := SaveState(h.stateDir, staged()); err != nil {
			t.Fatal(err)
		}
		if st := h.run(t, nil, tr); st.Phase != PhaseRebooting {
			t.Fatalf("phase %s, want rebooting", st.Phase)
		}
		h.powerCycle(false) // once into v2
		h.confirmErr = errors.New("dial tcp: connection refused")
		if st := h.run(t, nil, tr); st.Phase != PhaseBootConfirming {
			t.Fatalf("phase %s, want boot_confirming", st.Phase)
		}
		h.powerCycle(true) // a reset: the default entry, v1
		h.confirmErr, h.calls = nil, nil
		st := h.run(t, nil, tr)
		if slices.Contains(h.calls, "confirm tok-r (boot_confirming)") || h.profile != v1 {
			t.Errorf("on %s: calls %q, default %s; want no confirm, and v1 the default", filepath.Base(h.current), h.calls, filepath.Base(h.profile))
		}
		if _, q := st.quarantined(filepath.Base(v2), h.now); st.Phase != PhaseIdle || !q {
			t.Errorf("phase %s, quarantined %v; want idle, true", st.Phase, q)
		}
		if d := cmp.Diff([]string{"boot_failed/boot_fell_back"}, h.reports); d != "" {
			t.Errorf("reports (-want +got):\n%s", d)
		}
	})
	t.Run("a once-only entry a kexec left boots the refused target again: rebooted back", func(t *testing.T) {
		t.Parallel()
		h := newBootHost(t)
		rebooting := rebootOrdered(tr)
		bc := must(rebooting.move(EvBooted, t0))
		bc.BootID = "boot-2"
		back := must(bc.rollingBack(EvConfirmRejected, codes.ConfirmRejected, t0))
		if err := SaveState(h.stateDir, back); err != nil {
			t.Fatal(err)
		}
		// Kexec'd into v2, the once-only entry still set; the power went
		// before the reboot back.
		h.current, h.booted, h.profile, h.once, h.bootID, h.boots = v2, v2, v1, v2, "boot-2", 2
		h.powerCycle(false)
		if st := h.run(t, nil, tr); st.Phase != PhaseRebootingBack || st.BootID != "boot-3" {
			t.Fatalf("on the refused target again: phase %s, boot id %q; want rebooting_back from boot-3", st.Phase, st.BootID)
		}
		h.powerCycle(false)
		st := h.run(t, nil, tr)
		if st.Phase != PhaseIdle || h.current != v1 || h.profile != v1 {
			t.Errorf("phase %s, on %s, default %s; want idle on v1", st.Phase, filepath.Base(h.current), filepath.Base(h.profile))
		}
		if d := cmp.Diff([]string{"rolled_back/confirm_rejected"}, h.reports); d != "" {
			t.Errorf("reports (-want +got):\n%s", d)
		}
	})
	t.Run("a failed reboot, then a boot into the staged entry: made the default", func(t *testing.T) {
		t.Parallel()
		h := newBootHost(t)
		h.rebootErr = errors.New("systemctl reboot: signal: killed")
		if err := SaveState(h.stateDir, staged()); err != nil {
			t.Fatal(err)
		}
		if st := h.run(t, nil, tr); st.Phase != PhaseDeferred {
			t.Fatalf("phase %s, want deferred", st.Phase)
		}
		h.rebootErr = nil
		h.once = v2 // chosen at the boot menu
		h.powerCycle(false)
		h.calls = nil
		st := h.run(t, nil, tr)
		if !slices.Contains(h.calls, "make-default "+filepath.Base(v2)+" (making_default)") || st.Phase != PhaseIdle {
			t.Errorf("phase %s, calls %q; want v2 made the default", st.Phase, h.calls)
		}
	})
	t.Run("the once-only entry cannot be cleared: the reboot stays ordered", func(t *testing.T) {
		t.Parallel()
		h := newBootHost(t)
		rebooting := rebootOrdered(tr)
		if err := SaveState(h.stateDir, rebooting); err != nil {
			t.Fatal(err)
		}
		h.once, h.clearErr = v2, errors.New("bootctl: read-only file system")
		h.now = t0.Add(time.Hour) // past the boot deadline, on the same boot
		st := h.run(t, nil, tr)
		if st.Phase != PhaseRebooting || len(h.reports) != 0 {
			t.Errorf("phase %s, reports %q; want rebooting, none sent until the entry is gone", st.Phase, h.reports)
		}
		h.clearErr = nil
		if st := h.run(t, nil, tr); st.Phase != PhaseDeferred || h.once != "" {
			t.Errorf("phase %s, once-only entry %q; want deferred, none", st.Phase, h.once)
		}
		if d := cmp.Diff([]string{"boot_failed/reboot_failed"}, h.reports); d != "" {
			t.Errorf("reports (-want +got):\n%s", d)
		}
	})
}
