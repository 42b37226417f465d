package agent

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/proto"
)

var (
	t0     = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	policy = Policy{Hostname: "web-1", StoreDir: "/nix/store", QuarantineFor: time.Hour}
	v1     = "/nix/store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-nixos-system-web-1-v1"
	v2     = "/nix/store/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-nixos-system-web-1-v2"
)

func dispatch(closure, token string) *proto.Target {
	return &proto.Target{Kind: proto.TargetDispatch, RolloutID: "stable@c1", Closure: filepath.Base(closure), WaveIndex: 1,
		ManifestHash: "h", Token: token, ConfirmBy: t0.Add(5 * time.Minute).Format(time.RFC3339)}
}

func idle() State {
	return State{Phase: PhaseIdle, Quarantine: []proto.Quarantine{}, Known: []string{}}
}

// decide is Decide, failing the test when it refuses a move.
func decide(t *testing.T, st State, obs Observation, target *proto.Target, now time.Time) Step {
	t.Helper()
	step, err := Decide(st, obs, target, now, policy)
	if err != nil {
		t.Fatalf("Decide in phase %s: %v", st.Phase, err)
	}
	return step
}

// must is a state a move made, for building test cases; it panics when the
// phase table refuses the move.
func must(st State, err error) State {
	if err != nil {
		panic(err)
	}
	return st
}

// run drives Decide and Apply the way the Agent does, with results from
// results (by step kind; success when absent) and a host that runs what
// activations and rollbacks switch to. It returns the steps and reports.
func run(t *testing.T, st State, obs Observation, target *proto.Target, now time.Time, results map[StepKind]Result) (State, []StepKind, []proto.ReportRequest) {
	t.Helper()
	var kinds []StepKind
	var reports []proto.ReportRequest
	for range maxSteps {
		step := decide(t, st, obs, target, now)
		if step.Kind == StepNone {
			return st, kinds, reports
		}
		kinds = append(kinds, step.Kind)
		res := results[step.Kind]
		switch {
		case step.Kind == StepVerify && res.Err == nil:
			obs.Verified = target.Token
		case step.Kind == StepRealise && res.Err == nil:
			obs.Realised = target.Token
		case step.Kind == StepActivate && res.Err != nil:
			obs.Profile = step.Path // set before the switch that failed
		case (step.Kind == StepActivate || step.Kind == StepRollBack) && res.Err == nil:
			obs.Profile = step.Path
			if !res.Deferred {
				obs.Current = step.Path
			}
		}
		next, rep, err := Apply(st, target, step, res, now, policy)
		if err != nil {
			t.Fatalf("Apply(%s) in phase %s: %v", step.Kind, st.Phase, err)
		}
		if step.Report != nil {
			reports = append(reports, *step.Report)
		}
		if rep != nil {
			reports = append(reports, *rep)
		}
		st = next
		if res.Retry || (step.Kind == StepConfirm || step.Kind == StepRollBack) && res.Err != nil && !res.Rejected {
			return st, kinds, reports
		}
	}
	t.Fatalf("no end after %d steps: %v", maxSteps, kinds)
	return st, kinds, reports
}

func reportKinds(rs []proto.ReportRequest) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Kind+"/"+r.Code)
	}
	return out
}

func TestDecideActivation(t *testing.T) {
	host := Observation{Current: v1, Booted: v1, Profile: v1}
	for _, tc := range []struct {
		name    string
		results map[StepKind]Result
		steps   []StepKind
		reports []string
		phase   Phase
		quar    bool // v2 quarantined after
	}{
		{"good switch and confirm", nil,
			[]StepKind{StepVerify, StepRealise, StepSave, StepActivate, StepConfirm}, []string{"activation_started/"}, PhaseIdle, false},
		{"manifest refused", map[StepKind]Result{StepVerify: {Err: errors.New("bad"), Code: "bad_signature"}},
			[]StepKind{StepVerify}, []string{"manifest_rejected/bad_signature"}, PhaseIdle, false},
		{"manifest unavailable: retried later", map[StepKind]Result{StepVerify: {Err: errors.New("down"), Retry: true}},
			[]StepKind{StepVerify}, nil, PhaseIdle, false},
		{"unsigned closure", map[StepKind]Result{StepRealise: {Err: errors.New("no sig"), Code: "closure_unsigned"}},
			[]StepKind{StepVerify, StepRealise}, []string{"activation_failed/closure_unsigned"}, PhaseIdle, false},
		{"switch fails: roll back", map[StepKind]Result{StepActivate: {Err: errors.New("exit 1"), Code: "switch_failed"}},
			[]StepKind{StepVerify, StepRealise, StepSave, StepActivate, StepRollBack, StepSave},
			[]string{"activation_started/", "activation_failed/switch_failed", "rolled_back/switch_failed"}, PhaseIdle, true},
		{"confirm refused: roll back", map[StepKind]Result{StepConfirm: {Err: errors.New("410"), Rejected: true}},
			[]StepKind{StepVerify, StepRealise, StepSave, StepActivate, StepConfirm, StepRollBack, StepSave},
			[]string{"activation_started/", "rolled_back/confirm_rejected"}, PhaseIdle, true},
		{"confirm unreachable: stays confirming", map[StepKind]Result{StepConfirm: {Err: errors.New("down"), Retry: true}},
			[]StepKind{StepVerify, StepRealise, StepSave, StepActivate, StepConfirm},
			[]string{"activation_started/"}, PhaseConfirming, false},
		{"kernel changes: deferred", map[StepKind]Result{StepActivate: {Deferred: true}},
			[]StepKind{StepVerify, StepRealise, StepSave, StepActivate},
			[]string{"activation_started/", "deferred/"}, PhaseDeferred, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := dispatch(v2, "tok-2")
			st, steps, reports := run(t, idle(), host, target, t0, tc.results)
			if d := cmp.Diff(tc.steps, steps); d != "" {
				t.Errorf("steps (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.reports, reportKinds(reports)); d != "" {
				t.Errorf("reports (-want +got):\n%s", d)
			}
			if st.Phase != tc.phase {
				t.Errorf("phase %s, want %s", st.Phase, tc.phase)
			}
			if _, q := st.quarantined(filepath.Base(v2), t0); q != tc.quar {
				t.Errorf("quarantined %v, want %v", q, tc.quar)
			}
			if st.Phase == PhaseIdle && !tc.results[StepVerify].Retry && st.Done != "tok-2" {
				t.Errorf("done %q, want the target's token", st.Done)
			}
			for _, r := range reports {
				if r.Hostname != "web-1" || r.RolloutID != "stable@c1" || r.Closure != filepath.Base(v2) {
					t.Errorf("report %+v is not about the target", r)
				}
			}
			// The same target again is not acted on.
			if st.Phase == PhaseIdle && st.Done == "tok-2" {
				if s := decide(t, st, host, target, t0); s.Kind != StepNone {
					t.Errorf("the finished target is acted on again: %s", s.Kind)
				}
			}
		})
	}
}

func TestDecideGuards(t *testing.T) {
	host := Observation{Current: v1, Booted: v1, Profile: v1}
	stale := dispatch(v2, "tok-s")
	stale.ConfirmBy = t0.Add(-time.Second).Format(time.RFC3339)
	if s := decide(t, idle(), host, stale, t0); s.Kind != StepNone {
		t.Errorf("a target past its confirm window: %s, want none", s.Kind)
	}
	if s := decide(t, idle(), host, nil, t0); s.Kind != StepNone {
		t.Errorf("no target: %s", s.Kind)
	}

	// A quarantined closure is refused, with a new token too; another
	// closure is not held back; the quarantine ends.
	st := idle()
	st.quarantine(filepath.Base(v2), t0.Add(time.Hour), t0)
	_, steps, reports := run(t, st, host, dispatch(v2, "tok-3"), t0, nil)
	if !slices.Equal(reportKinds(reports), []string{"activation_failed/quarantined"}) || len(steps) != 1 {
		t.Errorf("quarantined closure: steps %v, reports %v", steps, reportKinds(reports))
	}
	v3 := "/nix/store/cccccccccccccccccccccccccccccccc-nixos-system-web-1-v3"
	if s := decide(t, st, host, dispatch(v3, "tok-4"), t0); s.Kind != StepVerify {
		t.Errorf("another closure: %s, want verify", s.Kind)
	}
	late := t0.Add(2 * time.Hour)
	late2 := dispatch(v2, "tok-5")
	late2.ConfirmBy = late.Add(5 * time.Minute).Format(time.RFC3339)
	if s := decide(t, st, host, late2, late); s.Kind != StepVerify {
		t.Errorf("after the quarantine: %s, want verify", s.Kind)
	}

	// The host already runs the target: only the confirm.
	_, steps, _ = run(t, idle(), Observation{Current: v2, Booted: v2, Profile: v2}, dispatch(v2, "tok-6"), t0, nil)
	if d := cmp.Diff([]StepKind{StepVerify, StepSave, StepConfirm}, steps); d != "" {
		t.Errorf("already on the target (-want +got):\n%s", d)
	}

	// Rollback targets: only to a system this host ran.
	rb := &proto.Target{Kind: proto.TargetRollback, RolloutID: "stable@c1", Closure: filepath.Base(v1), Token: "tok-7",
		ConfirmBy: t0.Add(5 * time.Minute).Format(time.RFC3339)}
	onV2 := Observation{Current: v2, Booted: v2, Profile: v2}
	_, steps, reports = run(t, idle(), onV2, rb, t0, nil)
	if !slices.Equal(reportKinds(reports), []string{"activation_failed/unknown_rollback_target"}) {
		t.Errorf("rollback to an unknown system: steps %v, reports %v", steps, reportKinds(reports))
	}
	known := idle()
	known.remember(v1)
	st, steps, reports = run(t, known, onV2, rb, t0, nil)
	if d := cmp.Diff([]StepKind{StepRealise, StepSave, StepRollBack, StepSave}, steps); d != "" {
		t.Errorf("rollback to a known system (-want +got):\n%s", d)
	}
	if !slices.Equal(reportKinds(reports), []string{"rolled_back/rollback_requested"}) || st.Phase != PhaseIdle {
		t.Errorf("rollback: reports %v, phase %s", reportKinds(reports), st.Phase)
	}
	if _, q := st.quarantined(filepath.Base(v1), t0); q {
		t.Errorf("a requested rollback quarantined the system it returned to")
	}
}

// TestDecideRestarts: the agent killed at each point resumes from its
// breadcrumbs, without activating twice.
func TestDecideRestarts(t *testing.T) {
	target := dispatch(v2, "tok-2")
	activating := must(idle().begin(EvActivate, target, v1, t0))
	toConfirm := must(activating.move(EvRunning, t0))
	rejected := must(toConfirm.rollingBack(EvConfirmRejected, "confirm_rejected", t0))
	deferred := must(activating.move(EvStaged, t0))
	for _, tc := range []struct {
		name string
		st   State
		obs  Observation
		now  time.Time
		want StepKind
		next Phase
	}{
		{"killed before the profile was set", activating, Observation{Current: v1, Profile: v1}, t0, StepActivate, ""},
		{"killed after the switch, before the confirm", activating, Observation{Current: v2, Profile: v2}, t0, StepSave, PhaseConfirming},
		{"killed while a detached switch runs", activating, Observation{Current: v1, Profile: v2}, t0, StepWait, ""},
		{"the switch never finished", activating, Observation{Current: v1, Profile: v2}, t0.Add(6 * time.Minute), StepSave, PhaseRollingBack},
		{"confirming, in time", toConfirm, Observation{Current: v2, Profile: v2}, t0, StepConfirm, ""},
		{"confirming, too late", toConfirm, Observation{Current: v2, Profile: v2}, t0.Add(6 * time.Minute), StepSave, PhaseRollingBack},
		{"killed mid-rollback", rejected, Observation{Current: v2, Profile: v1}, t0, StepRollBack, ""},
		{"rolled back, not yet recorded", rejected, Observation{Current: v1, Profile: v1}, t0, StepSave, PhaseIdle},
		{"deferred, not rebooted", deferred, Observation{Current: v1, Booted: v1, Profile: v2}, t0, StepNone, ""},
		{"deferred, rebooted", deferred, Observation{Current: v2, Booted: v2, Profile: v2}, t0, StepSave, PhaseIdle},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := decide(t, tc.st, tc.obs, nil, tc.now)
			if s.Kind != tc.want {
				t.Fatalf("step %s (%s), want %s", s.Kind, s.Why, tc.want)
			}
			if tc.next != "" && s.Next.Phase != tc.next {
				t.Errorf("next phase %s, want %s", s.Next.Phase, tc.next)
			}
		})
	}
}

func TestStateFile(t *testing.T) {
	dir := t.TempDir()
	st, err := LoadState(dir)
	if err != nil || st.Phase != PhaseIdle {
		t.Fatalf("empty state dir: %+v, %v", st, err)
	}
	want := must(idle().begin(EvAlreadyRunning, dispatch(v2, "tok"), v1, t0))
	want.quarantine("x", t0.Add(time.Hour), t0)
	if err := SaveState(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("the state directory holds %d files, want state.json alone", len(entries))
	}
	for name, body := range map[string]string{
		"unknown phase":        `{"phase":"exploding","quarantine":[],"known":[]}`,
		"phase without target": `{"phase":"confirming","quarantine":[],"known":[]}`,
		"malformed":            `{"phase":`,
	} {
		if err := os.WriteFile(filepath.Join(dir, stateFile), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadState(dir); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}
