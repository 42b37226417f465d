package reconciler

import (
	"errors"
	"testing"
)

// TestHostStateMachine checks every (state, event) pair: the legal moves
// listed here, and a refusal for everything else.
func TestHostStateMachine(t *testing.T) {
	t.Parallel()
	legal := map[HostState]map[HostEvent]HostState{
		HostPending:     {EvDispatch: HostActivating, EvSkip: HostSkipped},
		HostSkipped:     {EvDispatch: HostActivating},
		HostActivating:  {EvConfirm: HostSoaking, EvConfirmTimeout: HostFailed, EvActivationFailed: HostFailed, EvManifestRejected: HostFailed, EvAgentRolledBack: HostReverted, EvDeferredReported: HostDeferred, EvConfirmUnheard: HostSkipped},
		HostDeferred:    {EvBootedIntoTarget: HostSoaking, EvActivationFailed: HostFailed, EvAgentRolledBack: HostReverted, EvRollbackDispatch: HostRollingBack, EvRebootDispatch: HostRebooting},
		HostRebooting:   {EvBootedIntoTarget: HostSoaking, EvBootFailed: HostFailed, EvAgentRolledBack: HostReverted, EvRollbackDispatch: HostRollingBack, EvDeferredReported: HostDeferred},
		HostSoaking:     {EvSoaked: HostConverged, EvUnhealthy: HostFailed, EvAgentRolledBack: HostReverted, EvRollbackDispatch: HostRollingBack},
		HostConverged:   {EvRollbackDispatch: HostRollingBack},
		HostFailed:      {EvRollbackDispatch: HostRollingBack, EvRolledBack: HostReverted},
		HostRollingBack: {EvRolledBack: HostReverted, EvAgentRolledBack: HostReverted, EvRollbackTimeout: HostFailed},
		HostReverted:    {},
	}
	if len(legal) != len(HostStates) {
		t.Fatalf("the test lists %d states, the package %d", len(legal), len(HostStates))
	}
	moves := 0
	for _, s := range HostStates {
		for _, ev := range HostEvents {
			got, err := s.Next(ev)
			want, ok := legal[s][ev]
			switch {
			case ok && (err != nil || got != want):
				t.Errorf("%s on %s = %s, %v; want %s", s, ev, got, err, want)
			case !ok && !errors.Is(err, ErrIllegalTransition):
				t.Errorf("%s on %s = %s, %v; want ErrIllegalTransition", s, ev, got, err)
			case !ok && got != s:
				t.Errorf("%s on %s: a refused move changed the state to %s", s, ev, got)
			}
			if ok {
				moves++
			}
		}
	}
	if moves != len(hostTable) {
		t.Errorf("the table has %d moves, the test knows %d", len(hostTable), moves)
	}
}

// TestRolloutStateMachine checks every (state, event) pair.
func TestRolloutStateMachine(t *testing.T) {
	t.Parallel()
	legal := map[RolloutState]map[RolloutEvent]RolloutState{
		RolloutOpening:    {EvGatePassed: RolloutActive, EvGateFailed: RolloutFailed, EvCancel: RolloutCancelled},
		RolloutActive:     {EvPause: RolloutHalted, EvHealthHalt: RolloutHalted, EvStalled: RolloutHalted, EvCancel: RolloutCancelled, EvRollback: RolloutReverting, EvLastWaveDone: RolloutConverged},
		RolloutHalted:     {EvResume: RolloutActive, EvCancel: RolloutCancelled, EvRollback: RolloutReverting, EvSupersede: RolloutSuperseded},
		RolloutReverting:  {EvRevertDone: RolloutReverted, EvStalled: RolloutHalted, EvCancel: RolloutCancelled},
		RolloutConverged:  {EvRollback: RolloutReverting, EvHealthHalt: RolloutHalted},
		RolloutCancelled:  {EvRollback: RolloutReverting},
		RolloutReverted:   {},
		RolloutFailed:     {},
		RolloutSuperseded: {},
	}
	if len(legal) != len(RolloutStates) {
		t.Fatalf("the test lists %d states, the package %d", len(legal), len(RolloutStates))
	}
	moves := 0
	for _, s := range RolloutStates {
		for _, ev := range RolloutEvents {
			got, err := s.Next(ev)
			want, ok := legal[s][ev]
			switch {
			case ok && (err != nil || got != want):
				t.Errorf("%s on %s = %s, %v; want %s", s, ev, got, err, want)
			case !ok && !errors.Is(err, ErrIllegalTransition):
				t.Errorf("%s on %s = %s, %v; want ErrIllegalTransition", s, ev, got, err)
			}
			if ok {
				moves++
			}
		}
	}
	if moves != len(rolloutTable) {
		t.Errorf("the table has %d moves, the test knows %d", len(rolloutTable), moves)
	}
	for _, s := range RolloutStates {
		wantTerminal := s == RolloutConverged || s == RolloutReverted || s == RolloutFailed || s == RolloutCancelled || s == RolloutSuperseded
		if s.Terminal() != wantTerminal {
			t.Errorf("%s.Terminal() = %v", s, s.Terminal())
		}
	}
	for _, s := range HostStates {
		want := s == HostActivating || s == HostSoaking || s == HostRollingBack || s == HostRebooting
		if s.InFlight() != want {
			t.Errorf("%s.InFlight() = %v", s, s.InFlight())
		}
	}
}

// TestTakes: a rollout state takes an intent exactly when the rollout
// state machine has a move for its event; unknown kinds are never taken.
func TestTakes(t *testing.T) {
	events := map[string]RolloutEvent{IntentPause: EvPause, IntentResume: EvResume, IntentCancel: EvCancel, IntentRollback: EvRollback}
	for _, s := range RolloutStates {
		for kind, ev := range events {
			_, legal := rolloutTable[rolloutMove{s, ev}]
			if got := s.Takes(kind); got != legal {
				t.Errorf("%s takes %s: %v, want %v", s, kind, got, legal)
			}
		}
		if s.Takes("approve") || s.Takes("") {
			t.Errorf("%s takes an unknown intent", s)
		}
	}
}
