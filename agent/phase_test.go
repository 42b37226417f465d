package agent

import (
	"errors"
	"testing"
	"time"
)

// TestPhaseMachine checks every (phase, event) pair: the legal moves
// listed here (the table of rfcs/0008 §Phases), and a refusal for
// everything else.
func TestPhaseMachine(t *testing.T) {
	t.Parallel()
	legal := map[Phase]map[Event]Phase{
		PhaseIdle:        {EvDone: PhaseIdle, EvActivate: PhaseActivating, EvAlreadyRunning: PhaseConfirming, EvRollbackRequested: PhaseRollingBack},
		PhaseActivating:  {EvRunning: PhaseConfirming, EvStaged: PhaseDeferred, EvSwitchFailed: PhaseRollingBack, EvDeadline: PhaseRollingBack},
		PhaseConfirming:  {EvConfirmed: PhaseIdle, EvConfirmRejected: PhaseRollingBack, EvDeadline: PhaseRollingBack},
		PhaseRollingBack: {EvRolledBack: PhaseIdle, EvNoPrevious: PhaseIdle, EvStaged: PhaseRebootingBack},
		PhaseDeferred: {EvBooted: PhaseIdle, EvReplaced: PhaseIdle, EvDone: PhaseDeferred, EvRebootOrdered: PhaseRebooting,
			EvBootedUnordered: PhaseMakingDefault},
		PhaseRebooting: {EvBooted: PhaseBootConfirming, EvFellBack: PhaseIdle, EvRebootFailed: PhaseDeferred},
		PhaseBootConfirming: {EvConfirmed: PhaseMakingDefault, EvConfirmRejected: PhaseRebootingBack,
			EvDeadline: PhaseRebootingBack, EvFellBack: PhaseIdle},
		PhaseMakingDefault: {EvMadeDefault: PhaseIdle, EvFellBack: PhaseIdle},
		PhaseRebootingBack: {EvRolledBack: PhaseIdle, EvFellBack: PhaseIdle, EvBooted: PhaseRebootingBack},
	}
	if len(legal) != len(Phases) {
		t.Fatalf("the test lists %d phases, the package %d", len(legal), len(Phases))
	}
	moves := 0
	for _, ph := range Phases {
		for _, ev := range Events {
			got, err := ph.Next(ev)
			want, ok := legal[ph][ev]
			switch {
			case ok && (err != nil || got != want):
				t.Errorf("%s on %s = %s, %v; want %s", ph, ev, got, err, want)
			case !ok && !errors.Is(err, ErrIllegalTransition):
				t.Errorf("%s on %s = %s, %v; want ErrIllegalTransition", ph, ev, got, err)
			case !ok && got != ph:
				t.Errorf("%s on %s: a refused move changed the phase to %s", ph, ev, got)
			}
			if ok {
				moves++
			}
		}
	}
	if moves != len(phaseTable) {
		t.Errorf("the table has %d moves, the test knows %d", len(phaseTable), moves)
	}
	// Every event moves some phase, and every phase is reachable and
	// left: no dead names in the lists.
	for _, ev := range Events {
		used := false
		for _, ph := range Phases {
			_, used = legal[ph][ev]
			if used {
				break
			}
		}
		if !used {
			t.Errorf("event %s moves no phase", ev)
		}
	}
	for _, ph := range Phases {
		reached := false
		for _, m := range legal {
			for _, to := range m {
				reached = reached || to == ph
			}
		}
		if !reached || len(legal[ph]) == 0 {
			t.Errorf("phase %s: reached %v, %d moves out", ph, reached, len(legal[ph]))
		}
	}
}

// TestPhasesLoad: every phase is a value state.json may hold.
func TestPhasesLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, ph := range Phases {
		st := must(idle().begin(EvActivate, dispatch(v2, "tok"), v1, t0))
		st.Phase = ph
		if ph == PhaseIdle {
			st = idle()
		}
		if err := SaveState(dir, st); err != nil {
			t.Fatal(err)
		}
		if got, err := LoadState(dir); err != nil || got.Phase != ph {
			t.Errorf("phase %s: loaded %s, %v", ph, got.Phase, err)
		}
	}
}

// TestApplyRefusesIllegalMoves: a result folded into a state it was not
// decided on is refused, and changes nothing.
func TestApplyRefusesIllegalMoves(t *testing.T) {
	t.Parallel()
	target := dispatch(v2, "tok-2")
	activating := must(idle().begin(EvActivate, target, v1, t0))
	for _, tc := range []struct {
		name string
		st   State
		step StepKind
		res  Result
	}{
		{"a confirm while idle", idle(), StepConfirm, Result{}},
		{"a rejected confirm while idle", idle(), StepConfirm, Result{Err: errors.New("410"), Rejected: true}},
		{"a confirm while activating", activating, StepConfirm, Result{}},
		{"a switch while idle", idle(), StepActivate, Result{}},
		{"a failed switch while idle", idle(), StepActivate, Result{Err: errors.New("exit 1")}},
		{"a staged switch while deferred", must(activating.move(EvStaged, t0)), StepActivate, Result{Deferred: true}},
		{"a refused manifest while activating", activating, StepVerify, Result{Err: errors.New("bad"), Code: "bad_signature"}},
		{"a failed realise while confirming", must(activating.move(EvRunning, t0)), StepRealise, Result{Err: errors.New("no sig")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, rep, err := Apply(tc.st, target, Step{Kind: tc.step}, tc.res, t0.Add(time.Minute), policy)
			if !errors.Is(err, ErrIllegalTransition) {
				t.Errorf("err = %v, want ErrIllegalTransition", err)
			}
			if rep != nil || got.Phase != tc.st.Phase || !got.Since.Equal(tc.st.Since) {
				t.Errorf("a refused move gave %s since %s and report %v; want %s since %s and none", got.Phase, got.Since, rep, tc.st.Phase, tc.st.Since)
			}
		})
	}
}
