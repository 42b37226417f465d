package reconciler

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nixfleet/nixfleet/codes"
)

// ErrIllegalTransition is wrapped by Next when a state machine has no move
// for an event in the current state.
var ErrIllegalTransition = errors.New("reconciler: illegal transition")

// HostState is a host's state inside one rollout (rfcs/0004-host-states.md).
// The names are the values stored in the database and written in JSON.
type HostState string

// Host states.
const (
	// HostPending: not dispatched yet.
	HostPending HostState = "Pending"
	// HostActivating: told to switch to the target; not confirmed yet.
	HostActivating HostState = "Activating"
	// HostSoaking: confirmed on the target; the health gate is watched
	// for the wave's soak time.
	HostSoaking HostState = "Soaking"
	// HostConverged: soaked and healthy on the target.
	HostConverged HostState = "Converged"
	// HostFailed: the activation or the health gate failed.
	HostFailed HostState = "Failed"
	// HostReverted: back on the previous closure.
	HostReverted HostState = "Reverted"
	// HostDeferred: the target is staged for the next boot (kernel,
	// initrd, systemd or dbus would change under a live switch).
	HostDeferred HostState = "Deferred"
	// HostSkipped: offline when its wave began, or its confirm window ran
	// while the control plane could not hear it; does not block the wave,
	// and catches up when it is heard.
	HostSkipped HostState = "Skipped"
	// HostRollingBack: told to return to its previous closure while the
	// rollout is Reverting.
	HostRollingBack HostState = "RollingBack"
	// HostRebooting: a staged host told to boot once into its target
	// (rule 17); in flight until it checks in on the new boot, then it
	// soaks like any other.
	HostRebooting HostState = "Rebooting"
)

// HostStates lists every host state, in diagram order.
var HostStates = []HostState{HostPending, HostActivating, HostSoaking, HostConverged, HostFailed,
	HostReverted, HostDeferred, HostSkipped, HostRollingBack, HostRebooting}

// InFlight reports whether a host in this state counts against disruption
// budgets: it is being switched, rebooted, watched, or switched back.
func (s HostState) InFlight() bool {
	return s == HostActivating || s == HostSoaking || s == HostRollingBack || s == HostRebooting
}

// HostEvent is something that moves a host between states.
type HostEvent string

// Host events.
const (
	EvDispatch         HostEvent = "dispatch"           // the reconciler sends the target
	EvSkip             HostEvent = "skip"               // offline when its wave is active
	EvConfirm          HostEvent = "confirm"            // the agent confirmed the switch
	EvConfirmTimeout   HostEvent = "confirm_timeout"    // no confirm within the confirm window
	EvActivationFailed HostEvent = "activation_failed"  // the agent reports the switch failed
	EvManifestRejected HostEvent = "manifest_rejected"  // the agent refused the manifest
	EvAgentRolledBack  HostEvent = "agent_rolled_back"  // the agent rolled itself back
	EvDeferredReported HostEvent = "deferred"           // the agent staged the target for next boot
	EvBootedIntoTarget HostEvent = "booted_into_target" // a deferred host now runs the target
	EvUnhealthy        HostEvent = "unhealthy"          // the health gate failed while soaking
	EvSoaked           HostEvent = "soaked"             // soak time elapsed, healthy
	EvRollbackDispatch HostEvent = "rollback"           // the reconciler sends the previous closure
	EvRolledBack       HostEvent = "rolled_back"        // the host runs its previous closure again
	EvRollbackTimeout  HostEvent = "rollback_timeout"   // no rollback within the confirm window
	EvConfirmUnheard   HostEvent = "confirm_unheard"    // the confirm window ran while the control plane could not hear the host
	EvRebootDispatch   HostEvent = "reboot"             // the reconciler orders a staged host to boot once into its target
	EvBootFailed       HostEvent = "boot_failed"        // the new boot did not come up: the agent says so, or bootTimeout passed
)

// HostEvents lists every host event.
var HostEvents = []HostEvent{EvDispatch, EvSkip, EvConfirm, EvConfirmTimeout, EvActivationFailed,
	EvManifestRejected, EvAgentRolledBack, EvDeferredReported, EvBootedIntoTarget, EvUnhealthy,
	EvSoaked, EvRollbackDispatch, EvRolledBack, EvRollbackTimeout, EvConfirmUnheard, EvRebootDispatch, EvBootFailed}

type hostMove struct {
	from HostState
	ev   HostEvent
}

// hostTable is the whole host state machine: every legal move.
var hostTable = map[hostMove]HostState{
	{HostPending, EvDispatch}:            HostActivating,
	{HostPending, EvSkip}:                HostSkipped,
	{HostSkipped, EvDispatch}:            HostActivating,
	{HostActivating, EvConfirm}:          HostSoaking,
	{HostActivating, EvConfirmTimeout}:   HostFailed,
	{HostActivating, EvActivationFailed}: HostFailed,
	{HostActivating, EvManifestRejected}: HostFailed,
	{HostActivating, EvAgentRolledBack}:  HostReverted,
	{HostActivating, EvDeferredReported}: HostDeferred,
	{HostActivating, EvConfirmUnheard}:   HostSkipped,
	{HostDeferred, EvBootedIntoTarget}:   HostSoaking,
	{HostDeferred, EvActivationFailed}:   HostFailed,
	{HostDeferred, EvAgentRolledBack}:    HostReverted,
	{HostDeferred, EvRollbackDispatch}:   HostRollingBack,
	{HostDeferred, EvRebootDispatch}:     HostRebooting,
	{HostRebooting, EvBootedIntoTarget}:  HostSoaking,
	{HostRebooting, EvBootFailed}:        HostFailed,
	{HostRebooting, EvDeferredReported}:  HostDeferred,
	{HostRebooting, EvAgentRolledBack}:   HostReverted,
	{HostRebooting, EvRollbackDispatch}:  HostRollingBack,
	{HostSoaking, EvSoaked}:              HostConverged,
	{HostSoaking, EvUnhealthy}:           HostFailed,
	{HostSoaking, EvAgentRolledBack}:     HostReverted,
	{HostSoaking, EvRollbackDispatch}:    HostRollingBack,
	{HostConverged, EvRollbackDispatch}:  HostRollingBack,
	{HostFailed, EvRollbackDispatch}:     HostRollingBack,
	{HostFailed, EvRolledBack}:           HostReverted,
	{HostRollingBack, EvRolledBack}:      HostReverted,
	{HostRollingBack, EvAgentRolledBack}: HostReverted,
	{HostRollingBack, EvRollbackTimeout}: HostFailed,
}

// Next applies ev to s, or refuses with ErrIllegalTransition.
func (s HostState) Next(ev HostEvent) (HostState, error) {
	if to, ok := hostTable[hostMove{s, ev}]; ok {
		return to, nil
	}
	return s, fmt.Errorf("%w: host %s on %s", ErrIllegalTransition, s, ev)
}

// RolloutState is a rollout's state (rfcs/0005-rollout-states.md).
type RolloutState string

// Rollout states.
const (
	// RolloutOpening: the manifest is adopted; the static compliance gate
	// runs.
	RolloutOpening RolloutState = "Opening"
	// RolloutActive: waves are being dispatched and soaked.
	RolloutActive RolloutState = "Active"
	// RolloutConverged: the last wave was promoted. Skipped hosts that
	// return still catch up, and a failure among them can halt or revert
	// it again (onHealthFailure).
	RolloutConverged RolloutState = "Converged"
	// RolloutHalted: stopped by policy, an operator or a stalled wave;
	// resumable. Nothing new is dispatched; in-flight hosts finish.
	RolloutHalted RolloutState = "Halted"
	// RolloutReverting: hosts that moved are being sent back.
	RolloutReverting RolloutState = "Reverting"
	// RolloutReverted: every host that moved is back.
	RolloutReverted RolloutState = "Reverted"
	// RolloutFailed: could not start (static compliance gate).
	RolloutFailed RolloutState = "Failed"
	// RolloutCancelled: an operator cancelled it; in-flight hosts finish.
	RolloutCancelled RolloutState = "Cancelled"
	// RolloutSuperseded: a newer ref of the channel replaced it while it
	// was halted.
	RolloutSuperseded RolloutState = "Superseded"
)

// RolloutStates lists every rollout state, in diagram order.
var RolloutStates = []RolloutState{RolloutOpening, RolloutActive, RolloutConverged, RolloutHalted,
	RolloutReverting, RolloutReverted, RolloutFailed, RolloutCancelled, RolloutSuperseded}

// Paused is how people read Halted when an operator paused the rollout
// (its reason is operator_pause): nothing is wrong, it waits for a
// resume. The state machine and the API keep Halted, with the reason that
// tells the two apart (rfcs/0005 §Diagram).
const Paused = "Paused"

// ShownState is a rollout state as people read it: Paused for a rollout
// an operator paused, else the state's own name.
func ShownState(state, reasonCode string) string {
	if state == string(RolloutHalted) && reasonCode == codes.OperatorPause {
		return Paused
	}
	return state
}

// OffTarget says, for people, how many hosts of a Converged rollout do not
// run its target and why, from its hosts counted by state (the API's
// Counts): "1 host not on target: Skipped 1 (away; it catches up when
// heard again)". It is empty for a rollout of another state, whose state
// says already that not every host is on target, and when every host is.
func OffTarget(state string, counts map[string]int) string {
	if state != string(RolloutConverged) {
		return ""
	}
	why := map[HostState]string{
		HostSkipped:     "away; it catches up when heard again",
		HostDeferred:    "staged; it switches at its next boot",
		HostFailed:      "its activation failed; a release that fixes it moves it",
		HostActivating:  "catching up",
		HostSoaking:     "catching up",
		HostRollingBack: "rolling back",
		HostRebooting:   "rebooting into its target",
	}
	n := 0
	var parts []string
	for _, s := range HostStates {
		if c := counts[string(s)]; c > 0 && s != HostConverged {
			n += c
			part := fmt.Sprintf("%s %d", s, c)
			if w := why[s]; w != "" {
				part += " (" + w + ")"
			}
			parts = append(parts, part)
		}
	}
	switch n {
	case 0:
		return ""
	case 1:
		return "1 host not on target: " + parts[0]
	}
	return fmt.Sprintf("%d hosts not on target: %s", n, strings.Join(parts, ", "))
}

// Terminal reports whether the rollout is over: it blocks neither its
// channel nor the channels it gates.
func (s RolloutState) Terminal() bool {
	switch s {
	case RolloutConverged, RolloutReverted, RolloutFailed, RolloutCancelled, RolloutSuperseded:
		return true
	}
	return false
}

// RolloutEvent is something that moves a rollout between states.
type RolloutEvent string

// Rollout events.
const (
	EvGatePassed   RolloutEvent = "gate_passed" // static compliance gate passed
	EvGateFailed   RolloutEvent = "gate_failed" // static compliance gate blocked
	EvPause        RolloutEvent = "pause"       // operator intent
	EvResume       RolloutEvent = "resume"      // operator intent
	EvCancel       RolloutEvent = "cancel"      // operator intent
	EvRollback     RolloutEvent = "rollback"    // operator intent, or onHealthFailure rollback-and-halt
	EvHealthHalt   RolloutEvent = "health_halt" // onHealthFailure halt (also of a converged rollout whose catch-up failed)
	EvStalled      RolloutEvent = "stalled"     // readiness deadline passed, or a wave unprovable
	EvLastWaveDone RolloutEvent = "converge"    // the last wave was promoted
	EvRevertDone   RolloutEvent = "revert_done" // every host that moved is back
	EvSupersede    RolloutEvent = "supersede"   // a newer ref opens on the channel
)

// RolloutEvents lists every rollout event.
var RolloutEvents = []RolloutEvent{EvGatePassed, EvGateFailed, EvPause, EvResume, EvCancel, EvRollback,
	EvHealthHalt, EvStalled, EvLastWaveDone, EvRevertDone, EvSupersede}

type rolloutMove struct {
	from RolloutState
	ev   RolloutEvent
}

// rolloutTable is the whole rollout state machine: every legal move.
var rolloutTable = map[rolloutMove]RolloutState{
	{RolloutOpening, EvGatePassed}:   RolloutActive,
	{RolloutOpening, EvGateFailed}:   RolloutFailed,
	{RolloutOpening, EvCancel}:       RolloutCancelled,
	{RolloutActive, EvPause}:         RolloutHalted,
	{RolloutActive, EvHealthHalt}:    RolloutHalted,
	{RolloutActive, EvStalled}:       RolloutHalted,
	{RolloutActive, EvCancel}:        RolloutCancelled,
	{RolloutActive, EvRollback}:      RolloutReverting,
	{RolloutActive, EvLastWaveDone}:  RolloutConverged,
	{RolloutHalted, EvResume}:        RolloutActive,
	{RolloutHalted, EvCancel}:        RolloutCancelled,
	{RolloutHalted, EvRollback}:      RolloutReverting,
	{RolloutHalted, EvSupersede}:     RolloutSuperseded,
	{RolloutReverting, EvRevertDone}: RolloutReverted,
	{RolloutReverting, EvStalled}:    RolloutHalted,
	{RolloutReverting, EvCancel}:     RolloutCancelled,
	{RolloutConverged, EvRollback}:   RolloutReverting,
	{RolloutConverged, EvHealthHalt}: RolloutHalted,
	{RolloutCancelled, EvRollback}:   RolloutReverting,
}

// Reopenable reports whether a rollout in s can still move on: a
// terminal state with a way out (Converged and Cancelled can be rolled
// back while they are their channel's latest, a Converged one halted by a
// catch-up's failure) is over only for now.
func (s RolloutState) Reopenable() bool {
	for m := range rolloutTable {
		if m.from == s {
			return true
		}
	}
	return false
}

// Takes reports whether a rollout in s has a move for an operator intent
// of that kind (pause, resume, cancel, rollback). The tick may still
// refuse it for other reasons (a newer rollout on the channel, a stalled
// revert), and a repeat is accepted without a move.
func (s RolloutState) Takes(kind string) bool {
	ev, ok := map[string]RolloutEvent{IntentPause: EvPause, IntentResume: EvResume, IntentCancel: EvCancel, IntentRollback: EvRollback}[kind]
	if !ok {
		return false
	}
	_, err := s.Next(ev)
	return err == nil
}

// Over reports whether a rollout in s will not move again: terminal, and
// with no way out, or no longer its channel's latest (only the latest
// rollout is rolled back or catches up).
func (s RolloutState) Over(latest bool) bool {
	return s.Terminal() && (!s.Reopenable() || !latest)
}

// Next applies ev to s, or refuses with ErrIllegalTransition.
func (s RolloutState) Next(ev RolloutEvent) (RolloutState, error) {
	if to, ok := rolloutTable[rolloutMove{s, ev}]; ok {
		return to, nil
	}
	return s, fmt.Errorf("%w: rollout %s on %s", ErrIllegalTransition, s, ev)
}
