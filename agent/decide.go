package agent

import (
	"fmt"
	"github.com/nixfleet/nixfleet/codes"
	"path"
	"time"

	"github.com/nixfleet/nixfleet/proto"
)

// Observation is what the agent sees of the host and of its own work on
// the current target, when it decides.
type Observation struct {
	// Current, Booted and Profile are full store paths: what
	// /run/current-system, /run/booted-system and the system profile
	// point at ("" when unknown).
	Current, Booted, Profile string
	// Verified and Realised are the token of the target whose manifest
	// this process verified, and whose closure it realised ("" when none).
	// They are not kept across restarts: both are done again.
	Verified, Realised string
	// BootID is the kernel's boot id ("" when unknown).
	BootID string
	// Rebooted marks the reboot this process ordered (rebootMark), ""
	// when none: a reboot is ordered once per process and phase, and
	// again after a restart on the same boot (rfcs/0008 §Reboots).
	Rebooted string
}

// StepKind names what a step does.
type StepKind string

// The steps.
const (
	// StepNone: nothing to do until the next check-in.
	StepNone StepKind = "none"
	// StepVerify: fetch the target's manifest and signature and verify
	// them with the agent's own trust roots.
	StepVerify StepKind = "verify"
	// StepRealise: nix-store --realise Path from the substituters.
	StepRealise StepKind = "realise"
	// StepSave: write Next as the state (a breadcrumb before what cannot
	// be undone), then send Report if set.
	StepSave StepKind = "save"
	// StepActivate: set the system profile to Path, then switch (or stage
	// for boot when a switch inhibitor changes) and wait until the host
	// runs it.
	StepActivate StepKind = "activate"
	// StepWait: wait, until the confirm deadline, for the host to run
	// Path (a switch started before a restart).
	StepWait StepKind = "wait"
	// StepConfirm: POST /v1/agent/confirm.
	StepConfirm StepKind = "confirm"
	// StepRollBack: set the profile back to Path and switch to it.
	StepRollBack StepKind = "roll_back"
	// StepReboot: reboot the host, once into Path's boot entry (Once),
	// or into Path made the default entry again (rfcs/0008 §Reboots).
	StepReboot StepKind = "reboot"
	// StepMakeDefault: make Path, which the host booted once into and
	// confirmed, the default boot entry.
	StepMakeDefault StepKind = "make_default"
)

// Step is one thing the Agent does.
type Step struct {
	Kind StepKind
	// Path is the full store path the step is about.
	Path string
	// Next is the state a StepSave writes.
	Next *State
	// Report, when set, is sent after the step.
	Report *proto.ReportRequest
	// Why says, for people, why this step.
	Why string
	// Once and Kexec, on a StepReboot: boot Path's entry once (else make
	// Path the default entry and clear any once-only entry first), and
	// load the kernel with kexec where the host can.
	Once, Kexec bool
	// ClearOnce, on a StepSave: remove the loader's once-only entry
	// first (a reboot given up); the state is not saved, and the step is
	// tried again, while it cannot be removed.
	ClearOnce bool
}

// Result is how a step ended.
type Result struct {
	// Err is nil on success.
	Err error
	// Code is a stable code for a failure (rfcs/0008 §Decisions).
	Code string
	// Deferred: an activation staged the target for the next boot, or a
	// rollback made the previous system the default boot entry.
	Deferred bool
	// BootID, on a Deferred rollback, is the boot id before the reboot
	// into the previous system.
	BootID string
	// Rejected: the control plane refused the confirm (410).
	Rejected bool
	// Retry: a transient failure (the control plane or the network); the
	// step is tried again at the next check-in and nothing is decided.
	Retry bool
}

// Policy holds the agent's settings that decisions depend on.
type Policy struct {
	// Hostname is this host.
	Hostname string
	// StoreDir is the Nix store (default /nix/store).
	StoreDir string
	// QuarantineFor is how long a failed closure is held back (default
	// 1h).
	QuarantineFor time.Duration
	// BootLoader names the host's boot loader (BootLoader.Name): a reboot
	// target is refused when it is "" or BootLoaderNone, which cannot
	// boot once into an entry.
	BootLoader string
}

// DefaultQuarantine is Policy.QuarantineFor's default.
const DefaultQuarantine = time.Hour

func (p Policy) storePath(closure string) string {
	dir := p.StoreDir
	if dir == "" {
		dir = "/nix/store"
	}
	return path.Join(dir, closure)
}

func (p Policy) quarantineFor() time.Duration {
	if p.QuarantineFor > 0 {
		return p.QuarantineFor
	}
	return DefaultQuarantine
}

// canBootOnce reports whether the host's boot loader can boot once into
// an entry.
func (p Policy) canBootOnce() bool {
	return p.BootLoader != "" && p.BootLoader != proto.BootLoaderNone
}

// report builds a report about a target.
func (p Policy) report(t *proto.Target, kind, code, detail string, now time.Time) *proto.ReportRequest {
	return &proto.ReportRequest{Hostname: p.Hostname, Kind: kind, RolloutID: t.RolloutID, Closure: t.Closure,
		Code: code, Detail: detail, At: now.UTC().Format(time.RFC3339)}
}

// confirmBy parses a target's deadline; a target without a valid one has
// none to meet and is treated as expired.
func confirmBy(t *proto.Target) (time.Time, bool) {
	d, err := time.Parse(time.RFC3339, t.ConfirmBy)
	return d, err == nil
}

// Decide returns the next step: from the agent's state, what it observes,
// the target of the last check-in (nil when none) and the time. It is
// pure; the Agent executes the step, folds its Result in with Apply, and
// asks again until StepNone. Every phase a step saves is a move of the
// phase table (Phase.Next); Decide returns ErrIllegalTransition rather
// than a step whose move the table refuses.
func Decide(st State, obs Observation, t *proto.Target, now time.Time, p Policy) (Step, error) {
	switch st.Phase {
	case PhaseActivating:
		target := p.storePath(st.Target.Closure)
		deadline, _ := confirmBy(st.Target)
		switch {
		case obs.Current == target:
			next, err := st.move(EvRunning, now)
			return saveStep(next, err, "the host runs the target", nil)
		case obs.Profile != target:
			// The breadcrumb was written and the profile not set: the
			// switch never started. Start it, once.
			return Step{Kind: StepActivate, Path: target, Why: "activate the target"}, nil
		case st.Target.ManagedReboot:
			// Staging runs no switch that could still be running: a
			// restart between its commands stages again.
			return Step{Kind: StepActivate, Path: target, Why: "stage the target again"}, nil
		case now.Before(deadline):
			return Step{Kind: StepWait, Path: target, Why: "a switch started before a restart may still run"}, nil
		default:
			next, err := st.rollingBack(EvDeadline, codes.SwitchIncomplete, now)
			return saveStep(next, err, "the host does not run the target by the confirm deadline", nil)
		}
	case PhaseConfirming:
		if deadline, _ := confirmBy(st.Target); !now.Before(deadline) {
			next, err := st.rollingBack(EvDeadline, codes.ConfirmTimeout, now)
			return saveStep(next, err, "no confirm before the deadline", nil)
		}
		return Step{Kind: StepConfirm, Path: p.storePath(st.Target.Closure), Why: "confirm the switch"}, nil
	case PhaseRollingBack:
		if st.Previous == "" {
			// Nothing to return to (the first system this agent saw).
			next, err := st.finish(EvNoPrevious, st.Target, now)
			return saveStep(next, err, "no previous system to roll back to",
				p.report(st.Target, proto.ReportActivationFailed, codes.NoPreviousSystem,
					fmt.Sprintf("%s: and no previous system to roll back to", st.Why), now))
		}
		if obs.Current == st.Previous && obs.Profile == st.Previous {
			next, err := st.finish(EvRolledBack, st.Target, now)
			if st.Target.Kind == proto.TargetDispatch {
				next.quarantine(st.Target.Closure, now.Add(p.quarantineFor()), now)
			}
			return saveStep(next, err, "rolled back", p.report(st.Target, proto.ReportRolledBack, st.Why,
				fmt.Sprintf("back on %s", path.Base(st.Previous)), now))
		}
		return Step{Kind: StepRollBack, Path: st.Previous, Why: "roll back: " + st.Why}, nil
	case PhaseDeferred:
		target := p.storePath(st.Target.Closure)
		switch {
		case obs.Booted == target && (st.Target.ManagedReboot || st.Target.Kind == proto.TargetReboot):
			// Staged for a reboot the control plane orders (a reboot
			// target here is one that failed): the host booted it anyway.
			next, err := st.move(EvBootedUnordered, now)
			return saveStep(next, err, "booted into the staged target without a reboot order; it becomes the default entry", nil)
		case obs.Booted == target:
			next, err := st.finish(EvBooted, st.Target, now)
			return saveStep(next, err, "booted into the staged target", nil)
		case t == nil || t.Token == st.Target.Token || t.Token == st.Done:
		case t.Kind == proto.TargetReboot:
			return decideReboot(st, obs, t, now, p)
		default:
			// The control plane moved on: the staged entry stays until
			// the next activation replaces it.
			next, err := st.finish(EvReplaced, st.Target, now)
			return saveStep(next, err, "a new target replaces the staged one", nil)
		}
		return Step{Kind: StepNone, Why: "waiting for a reboot into the staged target"}, nil
	case PhaseRebooting, PhaseBootConfirming, PhaseMakingDefault, PhaseRebootingBack:
		return decideRebooted(st, obs, now, p)
	}
	return decideIdle(st, obs, t, now, p)
}

// rebootMark is Observation.Rebooted once this process ordered the reboot
// of st's phase.
func rebootMark(st State) string { return string(st.Phase) + " " + st.Target.Token }

// decideReboot: a reboot target while a target is staged (rfcs/0008
// §Reboots). The state, with the boot id, is saved before the reboot is
// ordered; a target that is not for the staged closure, or a loader that
// cannot boot once into an entry, is refused and the host keeps its boot.
func decideReboot(st State, obs Observation, t *proto.Target, now time.Time, p Policy) (Step, error) {
	if deadline, ok := confirmBy(t); !ok || !now.Before(deadline) {
		return Step{Kind: StepNone, Why: "the reboot's boot deadline has passed; waiting for a fresh one"}, nil
	}
	refuse := func(code, detail string) (Step, error) {
		next, err := st.move(EvDone, now)
		next.Done = t.Token
		return saveStep(next, err, "refused a reboot", p.report(t, proto.ReportBootFailed, code, detail, now))
	}
	switch {
	case t.Closure != st.Target.Closure:
		return refuse(codes.RebootFailed, fmt.Sprintf("%s is not the staged target %s", t.Closure, st.Target.Closure))
	case !p.canBootOnce():
		return refuse(codes.BootLoaderUnsupported, fmt.Sprintf("boot loader %q cannot boot once into an entry", p.BootLoader))
	case obs.BootID == "":
		// Without it a boot that fell back cannot be told from no boot.
		return refuse(codes.RebootFailed, "the kernel's boot id is unknown: a new boot could not be told")
	}
	next, err := st.move(EvRebootOrdered, now)
	next.Target, next.BootID = t, obs.BootID
	return saveStep(next, err, "the control plane orders a reboot into the staged target", nil)
}

// decideRebooted: the phases of a reboot. A new boot is told from the
// boot id saved before the reboot; the boot into the target from
// /run/booted-system.
func decideRebooted(st State, obs Observation, now time.Time, p Policy) (Step, error) {
	target := p.storePath(st.Target.Closure)
	deadline, _ := confirmBy(st.Target)
	if obs.BootID == "" || obs.Booted == "" {
		// Without them a new boot cannot be told from this one, nor the
		// system it booted.
		return Step{Kind: StepNone, Why: "the boot id or the booted system cannot be read: waiting"}, nil
	}
	newBoot := obs.BootID != st.BootID
	switch st.Phase {
	case PhaseRebooting:
		switch {
		case obs.Booted == target:
			next, err := st.move(EvBooted, now)
			next.BootID = obs.BootID
			return saveStep(next, err, "booted once into the target", nil)
		case newBoot:
			next, err := st.finish(EvFellBack, st.Target, now)
			next.quarantine(st.Target.Closure, now.Add(p.quarantineFor()), now)
			return saveStep(next, err, "the host came up on its previous default entry",
				p.report(st.Target, proto.ReportBootFailed, codes.BootFellBack,
					fmt.Sprintf("booted %s, not %s", path.Base(obs.Booted), st.Target.Closure), now))
		case !now.Before(deadline):
			next, err := st.move(EvRebootFailed, now)
			next.BootID = ""
			step, err := saveStep(next, err, "the host did not reboot by the boot deadline",
				p.report(st.Target, proto.ReportBootFailed, codes.RebootFailed, "the host did not reboot by confirmBy", now))
			step.ClearOnce = true // no later reboot may boot the target unordered
			return step, err
		case obs.Rebooted == rebootMark(st):
			return Step{Kind: StepNone, Why: "waiting for the reboot"}, nil
		}
		return Step{Kind: StepReboot, Path: target, Once: true, Kexec: st.Target.Kexec, Why: "reboot once into the target"}, nil
	case PhaseBootConfirming, PhaseMakingDefault:
		if obs.Booted != target {
			// The host restarted since it booted into the target, and came
			// up on its default entry: the boot into the target is lost,
			// and neither confirmed nor made the default here.
			next, err := st.finish(EvFellBack, st.Target, now)
			next.quarantine(st.Target.Closure, now.Add(p.quarantineFor()), now)
			return saveStep(next, err, "the host restarted after its boot into the target, on another system",
				p.report(st.Target, proto.ReportBootFailed, codes.BootFellBack,
					fmt.Sprintf("restarted after booting %s, and came up on %s", st.Target.Closure, path.Base(obs.Booted)), now))
		}
		if st.Phase == PhaseMakingDefault {
			return Step{Kind: StepMakeDefault, Path: target, Why: "make the confirmed target the default boot entry"}, nil
		}
		if !now.Before(deadline) {
			next, err := st.rollingBack(EvDeadline, codes.ConfirmTimeout, now)
			return saveStep(next, err, "no confirm before the deadline", nil)
		}
		return Step{Kind: StepConfirm, Path: target, Why: "confirm the boot"}, nil
	}
	// PhaseRebootingBack.
	switch {
	case newBoot && obs.Booted == target && st.Target.Kind != proto.TargetRollback:
		// The refused target again (a once-only entry a kexec left): the
		// reboot back starts over from this boot.
		next, err := st.move(EvBooted, now)
		next.BootID = obs.BootID
		return saveStep(next, err, "booted the refused target again; rebooting back", nil)
	case newBoot && obs.Booted == st.Previous:
		next, err := st.finish(EvRolledBack, st.Target, now)
		if st.Target.Kind != proto.TargetRollback {
			next.quarantine(st.Target.Closure, now.Add(p.quarantineFor()), now)
		}
		return saveStep(next, err, "rebooted back", p.report(st.Target, proto.ReportRolledBack, st.Why,
			fmt.Sprintf("rebooted back into %s", path.Base(st.Previous)), now))
	case newBoot:
		next, err := st.finish(EvFellBack, st.Target, now)
		if st.Target.Kind != proto.TargetRollback {
			next.quarantine(st.Target.Closure, now.Add(p.quarantineFor()), now)
		}
		return saveStep(next, err, "the host came up on another system than the previous one",
			p.report(st.Target, proto.ReportBootFailed, codes.BootFellBack,
				fmt.Sprintf("%s: booted %s, not the previous %s", st.Why, path.Base(obs.Booted), path.Base(st.Previous)), now))
	case obs.Rebooted == rebootMark(st):
		return Step{Kind: StepNone, Why: "waiting for the reboot back"}, nil
	}
	// No deadline: a host never stays on a system it could not confirm.
	return Step{Kind: StepReboot, Path: st.Previous, Why: "reboot back into the previous system: " + st.Why}, nil
}

// decideIdle: a new target, or nothing.
func decideIdle(st State, obs Observation, t *proto.Target, now time.Time, p Policy) (Step, error) {
	if t == nil || t.Token == st.Done {
		return Step{Kind: StepNone, Why: "no new target"}, nil
	}
	target := p.storePath(t.Closure)
	deadline, ok := confirmBy(t)
	if !ok || !now.Before(deadline) {
		return Step{Kind: StepNone, Why: "the target's confirm window has passed; waiting for a fresh one"}, nil
	}
	if t.Kind == proto.TargetRollback {
		switch {
		case obs.Current == target:
			next, err := st.finish(EvDone, t, now)
			return saveStep(next, err, "already on the rollback target", nil)
		case !st.knows(target):
			next, err := st.finish(EvDone, t, now)
			return saveStep(next, err, "refused a rollback to a system this host never ran",
				p.report(t, proto.ReportActivationFailed, codes.UnknownRollbackTarget,
					fmt.Sprintf("%s is not a system this host ran", t.Closure), now))
		case obs.Realised != t.Token:
			return Step{Kind: StepRealise, Path: target, Why: "realise the rollback target"}, nil
		}
		next, err := st.move(EvRollbackRequested, now)
		next.Target, next.Previous, next.Why = t, target, codes.RollbackRequested
		return saveStep(next, err, "the control plane asks for a rollback", nil)
	}
	if t.Kind == proto.TargetReboot {
		next, err := st.finish(EvDone, t, now)
		if obs.Current == target {
			return saveStep(next, err, "already on the reboot's target", nil)
		}
		return saveStep(next, err, "refused a reboot: nothing is staged",
			p.report(t, proto.ReportBootFailed, codes.RebootFailed, fmt.Sprintf("%s is not staged here", t.Closure), now))
	}
	if t.Kind != proto.TargetDispatch {
		next, err := st.finish(EvDone, t, now)
		return saveStep(next, err, "unknown target kind",
			p.report(t, proto.ReportActivationFailed, codes.UnknownTargetKind, fmt.Sprintf("target kind %q", t.Kind), now))
	}
	if until, held := st.quarantined(t.Closure, now); held {
		next, err := st.finish(EvDone, t, now)
		return saveStep(next, err, "the closure is quarantined",
			p.report(t, proto.ReportActivationFailed, codes.Quarantined,
				fmt.Sprintf("%s failed here; held back until %s", t.Closure, until.UTC().Format(time.RFC3339)), now))
	}
	switch {
	case obs.Verified != t.Token:
		return Step{Kind: StepVerify, Path: target, Why: "verify the manifest"}, nil
	case obs.Current == target:
		// Already running it (a catch-up to what the host runs): only
		// the confirm is missing.
		next, err := st.begin(EvAlreadyRunning, t, obs.Current, now)
		return saveStep(next, err, "the host already runs the target", nil)
	case obs.Realised != t.Token:
		return Step{Kind: StepRealise, Path: target, Why: "realise the target"}, nil
	}
	next, err := st.begin(EvActivate, t, obs.Current, now)
	return saveStep(next, err, "activation starts", p.report(t, proto.ReportActivationStarted, "", "", now))
}

// saveStep is the step that writes next, a state that a move of the phase
// table made; or err, when the table refused the move.
func saveStep(next State, err error, why string, r *proto.ReportRequest) (Step, error) {
	if err != nil {
		return Step{}, err
	}
	return Step{Kind: StepSave, Next: &next, Report: r, Why: why}, nil
}

// Apply folds a step's result into the state: the state to save next, and
// a report to send, if any. Steps that need no state change return st;
// t is the target of the check-in the step was decided on. A result whose
// move the phase table refuses in st's phase (a step that was not decided
// on st) is refused with ErrIllegalTransition: st, and no report.
func Apply(st State, t *proto.Target, step Step, res Result, now time.Time, p Policy) (State, *proto.ReportRequest, error) {
	if res.Retry {
		return st, nil, nil
	}
	switch step.Kind {
	case StepSave:
		return *step.Next, nil, nil
	case StepVerify:
		if res.Err == nil {
			return st, nil, nil
		}
		// Refused: the target is done, and the host keeps its system.
		return refusal(st, t, proto.ReportManifestRejected, res.Code, res.Err, now, p)
	case StepRealise:
		if res.Err == nil {
			return st, nil, nil
		}
		return refusal(st, t, proto.ReportActivationFailed, res.Code, res.Err, now, p)
	case StepActivate, StepWait:
		switch {
		case res.Err != nil:
			code := res.Code
			if code == "" {
				code = codes.SwitchFailed
			}
			next, err := st.rollingBack(EvSwitchFailed, code, now)
			if err != nil {
				return st, nil, err
			}
			return next, p.report(st.Target, proto.ReportActivationFailed, code, res.Err.Error(), now), nil
		case res.Deferred:
			next, err := st.move(EvStaged, now)
			if err != nil {
				return st, nil, err
			}
			return next, p.report(st.Target, proto.ReportDeferred, "", "a switch inhibitor changes: staged for the next boot", now), nil
		}
		next, err := st.move(EvRunning, now)
		if err != nil {
			return st, nil, err
		}
		return next, nil, nil
	case StepConfirm:
		switch {
		case res.Err == nil && st.Phase == PhaseBootConfirming:
			// A boot's confirm: the target becomes the default entry next.
			next, err := st.move(EvConfirmed, now)
			if err != nil {
				return st, nil, err
			}
			return next, nil, nil
		case res.Err == nil:
			next, err := st.finish(EvConfirmed, st.Target, now)
			if err != nil {
				return st, nil, err
			}
			next.remember(p.storePath(st.Target.Closure))
			return next, nil, nil
		case res.Rejected:
			// Refused: back to the previous system, by a switch, or by a
			// reboot into the default entry after a boot (the phase
			// table says which).
			next, err := st.rollingBack(EvConfirmRejected, codes.ConfirmRejected, now)
			if err != nil {
				return st, nil, err
			}
			return next, nil, nil
		}
		return st, nil, nil // retried until the deadline
	case StepReboot:
		if res.Err == nil || st.Phase != PhaseRebooting {
			// Ordered; or a reboot back that failed, tried again at the
			// next check-in.
			return st, nil, nil
		}
		code := res.Code
		if code == "" {
			code = codes.RebootFailed
		}
		next, err := st.move(EvRebootFailed, now)
		if err != nil {
			return st, nil, err
		}
		next.BootID = ""
		return next, p.report(st.Target, proto.ReportBootFailed, code, res.Err.Error(), now), nil
	case StepMakeDefault:
		if res.Err != nil {
			return st, nil, nil // tried again at the next check-in
		}
		next, err := st.finish(EvMadeDefault, st.Target, now)
		if err != nil {
			return st, nil, err
		}
		next.remember(p.storePath(st.Target.Closure))
		return next, nil, nil
	}
	if step.Kind == StepRollBack && res.Err == nil && res.Deferred {
		if res.BootID == "" {
			// A reboot back needs this boot's id to tell the next one:
			// tried again at the next check-in.
			return st, nil, nil
		}
		// A switch inhibitor changes: the host reboots back.
		next, err := st.move(EvStaged, now)
		if err != nil {
			return st, nil, err
		}
		next.BootID = res.BootID
		return next, nil, nil
	}
	// StepRollBack changes no state: Decide sees the host back on the
	// previous system, or, when the rollback failed too, tries again at
	// the next check-in (the control plane sees the host on neither).
	return st, nil, nil
}

// refusal is the report and state after a target failed verification or
// realisation: the host keeps its system and the target is done.
func refusal(st State, t *proto.Target, kind, code string, err error, now time.Time, p Policy) (State, *proto.ReportRequest, error) {
	next, merr := st.finish(EvDone, t, now)
	if merr != nil {
		return st, nil, merr
	}
	return next, p.report(t, kind, code, err.Error(), now), nil
}
