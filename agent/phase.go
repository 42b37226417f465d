package agent

import (
	"errors"
	"fmt"
)

// ErrIllegalTransition is wrapped by Phase.Next, and so by Decide and
// Apply, when the phase table has no move for an event in the current
// phase: a bug, or a Step that was not decided on the State given.
var ErrIllegalTransition = errors.New("agent: illegal transition")

// Phase is where the agent is in an activation (rfcs/0008-agent.md
// §Phases). The names are the values state.json holds.
type Phase string

// The phases. Every phase but PhaseIdle names an activation (State.Target).
const (
	// PhaseIdle: nothing in progress.
	PhaseIdle Phase = "idle"
	// PhaseActivating: the profile is about to be set, or set, and the
	// switch started; written before either.
	PhaseActivating Phase = "activating"
	// PhaseConfirming: the host runs the target; the confirm is due.
	PhaseConfirming Phase = "confirming"
	// PhaseRollingBack: returning to State.Previous; written before the
	// profile is set back.
	PhaseRollingBack Phase = "rolling_back"
	// PhaseDeferred: the target is staged for the next boot: the default
	// boot entry, or, for a managed reboot, an entry that is not.
	PhaseDeferred Phase = "deferred"
	// PhaseRebooting: the control plane ordered a reboot once into the
	// staged target (rfcs/0008 §Reboots); written, with the boot id,
	// before the once-only entry is set and the host reboots.
	PhaseRebooting Phase = "rebooting"
	// PhaseBootConfirming: the host booted once into the target; the
	// confirm is due. The default boot entry is still State.Previous.
	PhaseBootConfirming Phase = "boot_confirming"
	// PhaseMakingDefault: the control plane accepted the confirm; the
	// target becomes the default boot entry.
	PhaseMakingDefault Phase = "making_default"
	// PhaseRebootingBack: returning to State.Previous, the default boot
	// entry, by a reboot; written, with the boot id, before it.
	PhaseRebootingBack Phase = "rebooting_back"
)

// Phases lists every phase, in the order of the RFC's table.
var Phases = []Phase{PhaseIdle, PhaseActivating, PhaseConfirming, PhaseRollingBack, PhaseDeferred,
	PhaseRebooting, PhaseBootConfirming, PhaseMakingDefault, PhaseRebootingBack}

// Event is something that moves the agent from one phase to another.
type Event string

// The events.
const (
	// EvDone: a target is finished without a change to the host: its
	// manifest refused, its closure not realised, quarantined, of an
	// unknown kind, or a rollback to a system the host never ran or
	// already runs; while a target is staged, a reboot target refused.
	EvDone Event = "done"
	// EvActivate: a dispatched target is verified and realised; the
	// activation starts.
	EvActivate Event = "activate"
	// EvAlreadyRunning: the host runs a dispatched target already (a
	// catch-up); only the confirm is missing.
	EvAlreadyRunning Event = "already_running"
	// EvRunning: the host runs the activation's target: the switch
	// worked (seen at once, or after a restart).
	EvRunning Event = "running"
	// EvRollbackRequested: the control plane asks for a rollback to a
	// system the host ran.
	EvRollbackRequested Event = "rollback_requested"
	// EvStaged: a switch inhibitor changes; the target is the boot entry
	// (in a rollback: the previous system is the default entry, and the
	// host reboots into it).
	EvStaged Event = "staged"
	// EvSwitchFailed: setting the profile, the switch or the wait for it
	// failed.
	EvSwitchFailed Event = "switch_failed"
	// EvDeadline: confirmBy passed before the host ran the target
	// (switch_incomplete) or before the confirm went through
	// (confirm_timeout).
	EvDeadline Event = "deadline"
	// EvConfirmed: the control plane accepted the confirm.
	EvConfirmed Event = "confirmed"
	// EvConfirmRejected: the control plane refused the confirm (410).
	EvConfirmRejected Event = "confirm_rejected"
	// EvRolledBack: the host runs the previous system again, and its
	// profile points at it.
	EvRolledBack Event = "rolled_back"
	// EvNoPrevious: a rollback with no previous system to return to.
	EvNoPrevious Event = "no_previous"
	// EvBooted: the host booted into the staged target; while rebooting
	// back, into the refused target again.
	EvBooted Event = "booted"
	// EvRebootOrdered: a reboot target for the staged closure; the
	// reboot once into it starts.
	EvRebootOrdered Event = "reboot_ordered"
	// EvRebootFailed: the once-only entry or the reboot could not be
	// ordered, or the host did not reboot by confirmBy; the target stays
	// staged.
	EvRebootFailed Event = "reboot_failed"
	// EvFellBack: the host rebooted, or restarted after its boot into the
	// target, and came up on another system than the one the reboot was
	// for.
	EvFellBack Event = "fell_back"
	// EvBootedUnordered: the host booted into a target staged as a boot
	// entry that is not the default (managedReboot) without a reboot
	// order (a choice at the boot menu, an entry left set): it is made
	// the default, as a reboot into a default entry would have run it.
	EvBootedUnordered Event = "booted_unordered"
	// EvMadeDefault: the confirmed target is the default boot entry.
	EvMadeDefault Event = "made_default"
	// EvReplaced: the control plane sends a new target while one is
	// staged; the staged entry stays until an activation replaces it.
	EvReplaced Event = "replaced"
)

// Events lists every event.
var Events = []Event{EvDone, EvActivate, EvAlreadyRunning, EvRunning, EvRollbackRequested, EvStaged, EvSwitchFailed,
	EvDeadline, EvConfirmed, EvConfirmRejected, EvRolledBack, EvNoPrevious, EvBooted, EvReplaced,
	EvRebootOrdered, EvRebootFailed, EvFellBack, EvMadeDefault, EvBootedUnordered}

type phaseMove struct {
	from Phase
	ev   Event
}

// phaseTable is the whole phase machine: every legal move. rfcs/0008
// §Phases draws it.
var phaseTable = map[phaseMove]Phase{
	{PhaseIdle, EvDone}:                      PhaseIdle,
	{PhaseIdle, EvActivate}:                  PhaseActivating,
	{PhaseIdle, EvAlreadyRunning}:            PhaseConfirming,
	{PhaseIdle, EvRollbackRequested}:         PhaseRollingBack,
	{PhaseActivating, EvRunning}:             PhaseConfirming,
	{PhaseActivating, EvStaged}:              PhaseDeferred,
	{PhaseActivating, EvSwitchFailed}:        PhaseRollingBack,
	{PhaseActivating, EvDeadline}:            PhaseRollingBack,
	{PhaseConfirming, EvConfirmed}:           PhaseIdle,
	{PhaseConfirming, EvConfirmRejected}:     PhaseRollingBack,
	{PhaseConfirming, EvDeadline}:            PhaseRollingBack,
	{PhaseRollingBack, EvRolledBack}:         PhaseIdle,
	{PhaseRollingBack, EvNoPrevious}:         PhaseIdle,
	{PhaseRollingBack, EvStaged}:             PhaseRebootingBack,
	{PhaseDeferred, EvBooted}:                PhaseIdle,
	{PhaseDeferred, EvReplaced}:              PhaseIdle,
	{PhaseDeferred, EvDone}:                  PhaseDeferred,
	{PhaseDeferred, EvRebootOrdered}:         PhaseRebooting,
	{PhaseDeferred, EvBootedUnordered}:       PhaseMakingDefault,
	{PhaseRebooting, EvBooted}:               PhaseBootConfirming,
	{PhaseRebooting, EvFellBack}:             PhaseIdle,
	{PhaseRebooting, EvRebootFailed}:         PhaseDeferred,
	{PhaseBootConfirming, EvConfirmed}:       PhaseMakingDefault,
	{PhaseBootConfirming, EvConfirmRejected}: PhaseRebootingBack,
	{PhaseBootConfirming, EvDeadline}:        PhaseRebootingBack,
	{PhaseBootConfirming, EvFellBack}:        PhaseIdle,
	{PhaseMakingDefault, EvMadeDefault}:      PhaseIdle,
	{PhaseMakingDefault, EvFellBack}:         PhaseIdle,
	{PhaseRebootingBack, EvBooted}:           PhaseRebootingBack,
	{PhaseRebootingBack, EvRolledBack}:       PhaseIdle,
	{PhaseRebootingBack, EvFellBack}:         PhaseIdle,
}

// Next applies ev to p, or refuses with ErrIllegalTransition.
func (p Phase) Next(ev Event) (Phase, error) {
	if to, ok := phaseTable[phaseMove{p, ev}]; ok {
		return to, nil
	}
	return p, fmt.Errorf("%w: phase %s on %s", ErrIllegalTransition, p, ev)
}
