package agent

import (
	"fmt"
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
)

// Step is one thing the Runner does.
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
}

// Result is how a step ended.
type Result struct {
	// Err is nil on success.
	Err error
	// Code is a stable code for a failure (rfcs/0008 §Codes).
	Code string
	// Deferred: an activation staged the target for the next boot.
	Deferred bool
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
// pure; the Runner executes the step, folds its Result in with Apply, and
// asks again until StepNone.
func Decide(st State, obs Observation, t *proto.Target, now time.Time, p Policy) Step {
	switch st.Phase {
	case PhaseActivating:
		target := p.storePath(st.Target.Closure)
		deadline, _ := confirmBy(st.Target)
		switch {
		case obs.Current == target:
			return saveStep(st.with(PhaseConfirming, now), "the host runs the target", nil)
		case obs.Profile != target:
			// The breadcrumb was written and the profile not set: the
			// switch never started. Start it, once.
			return Step{Kind: StepActivate, Path: target, Why: "activate the target"}
		case now.Before(deadline):
			return Step{Kind: StepWait, Path: target, Why: "a switch started before a restart may still run"}
		default:
			return saveStep(st.rollingBack("switch_incomplete", now), "the host does not run the target by the confirm deadline", nil)
		}
	case PhaseConfirming:
		if deadline, _ := confirmBy(st.Target); !now.Before(deadline) {
			return saveStep(st.rollingBack("confirm_timeout", now), "no confirm before the deadline", nil)
		}
		return Step{Kind: StepConfirm, Path: p.storePath(st.Target.Closure), Why: "confirm the switch"}
	case PhaseRollingBack:
		if st.Previous == "" {
			// Nothing to return to (the first system this agent saw).
			next := st.idle(now, st.Target.Token)
			return saveStep(next, "no previous system to roll back to",
				p.report(st.Target, proto.ReportActivationFailed, "no_previous_system",
					fmt.Sprintf("%s: and no previous system to roll back to", st.Why), now))
		}
		if obs.Current == st.Previous && obs.Profile == st.Previous {
			next := st.idle(now, st.Target.Token)
			if st.Target.Kind == proto.TargetDispatch {
				next.quarantine(st.Target.Closure, now.Add(p.quarantineFor()), now)
			}
			return saveStep(next, "rolled back", p.report(st.Target, proto.ReportRolledBack, st.Why,
				fmt.Sprintf("back on %s", path.Base(st.Previous)), now))
		}
		return Step{Kind: StepRollBack, Path: st.Previous, Why: "roll back: " + st.Why}
	case PhaseDeferred:
		target := p.storePath(st.Target.Closure)
		switch {
		case obs.Booted == target:
			return saveStep(st.idle(now, st.Target.Token), "booted into the staged target", nil)
		case t != nil && t.Token != st.Target.Token:
			// The control plane moved on: the staged entry stays until
			// the next activation replaces it.
			return saveStep(st.idle(now, st.Target.Token), "a new target replaces the staged one", nil)
		}
		return Step{Kind: StepNone, Why: "waiting for a reboot into the staged target"}
	}
	return decideIdle(st, obs, t, now, p)
}

// decideIdle: a new target, or nothing.
func decideIdle(st State, obs Observation, t *proto.Target, now time.Time, p Policy) Step {
	if t == nil || t.Token == st.Done {
		return Step{Kind: StepNone, Why: "no new target"}
	}
	target := p.storePath(t.Closure)
	deadline, ok := confirmBy(t)
	if !ok || !now.Before(deadline) {
		return Step{Kind: StepNone, Why: "the target's confirm window has passed; waiting for a fresh one"}
	}
	if t.Kind == proto.TargetRollback {
		switch {
		case obs.Current == target:
			return saveStep(st.idle(now, t.Token), "already on the rollback target", nil)
		case !st.knows(target):
			return saveStep(st.idle(now, t.Token), "refused a rollback to a system this host never ran",
				p.report(t, proto.ReportActivationFailed, "unknown_rollback_target",
					fmt.Sprintf("%s is not a system this host ran", t.Closure), now))
		case obs.Realised != t.Token:
			return Step{Kind: StepRealise, Path: target, Why: "realise the rollback target"}
		}
		next := st
		next.Phase, next.Target, next.Previous, next.Why, next.Since = PhaseRollingBack, t, target, "rollback_requested", now
		return saveStep(next, "the control plane asks for a rollback", nil)
	}
	if t.Kind != proto.TargetDispatch {
		return saveStep(st.idle(now, t.Token), "unknown target kind",
			p.report(t, proto.ReportActivationFailed, "unknown_target_kind", fmt.Sprintf("target kind %q", t.Kind), now))
	}
	if until, held := st.quarantined(t.Closure, now); held {
		return saveStep(st.idle(now, t.Token), "the closure is quarantined",
			p.report(t, proto.ReportActivationFailed, "quarantined",
				fmt.Sprintf("%s failed here; held back until %s", t.Closure, until.UTC().Format(time.RFC3339)), now))
	}
	switch {
	case obs.Verified != t.Token:
		return Step{Kind: StepVerify, Path: target, Why: "verify the manifest"}
	case obs.Current == target:
		// Already running it (a catch-up to what the host runs): only
		// the confirm is missing.
		next := st.activation(PhaseConfirming, t, obs.Current, now)
		return saveStep(next, "the host already runs the target", nil)
	case obs.Realised != t.Token:
		return Step{Kind: StepRealise, Path: target, Why: "realise the target"}
	}
	next := st.activation(PhaseActivating, t, obs.Current, now)
	return saveStep(next, "activation starts", p.report(t, proto.ReportActivationStarted, "", "", now))
}

func saveStep(next State, why string, r *proto.ReportRequest) Step {
	return Step{Kind: StepSave, Next: &next, Report: r, Why: why}
}

// activation starts an activation of t from the system previous.
func (s State) activation(ph Phase, t *proto.Target, previous string, now time.Time) State {
	s.Phase, s.Target, s.Previous, s.Why, s.Since = ph, t, previous, "", now
	s.remember(previous)
	return s
}

// with moves to another phase of the same activation.
func (s State) with(ph Phase, now time.Time) State {
	s.Phase, s.Since = ph, now
	return s
}

// rollingBack starts the rollback of the current activation.
func (s State) rollingBack(why string, now time.Time) State {
	s.Phase, s.Why, s.Since = PhaseRollingBack, why, now
	return s
}

// Apply folds a step's result into the state: the state to save next, and
// a report to send, if any. Steps that need no state change return st;
// t is the target of the check-in the step was decided on.
func Apply(st State, t *proto.Target, step Step, res Result, now time.Time, p Policy) (State, *proto.ReportRequest) {
	if res.Retry {
		return st, nil
	}
	switch step.Kind {
	case StepSave:
		return *step.Next, nil
	case StepVerify:
		if res.Err == nil {
			return st, nil
		}
		// Refused: the target is done, and the host keeps its system.
		return refusal(st, t, proto.ReportManifestRejected, res.Code, res.Err, now, p)
	case StepRealise:
		if res.Err == nil {
			return st, nil
		}
		return refusal(st, t, proto.ReportActivationFailed, res.Code, res.Err, now, p)
	case StepActivate, StepWait:
		switch {
		case res.Err != nil:
			code := res.Code
			if code == "" {
				code = "switch_failed"
			}
			return st.rollingBack(code, now), p.report(st.Target, proto.ReportActivationFailed, code, res.Err.Error(), now)
		case res.Deferred:
			return st.with(PhaseDeferred, now), p.report(st.Target, proto.ReportDeferred, "",
				"a switch inhibitor changes: staged for the next boot", now)
		}
		return st.with(PhaseConfirming, now), nil
	case StepConfirm:
		switch {
		case res.Err == nil:
			next := st.idle(now, st.Target.Token)
			next.remember(p.storePath(st.Target.Closure))
			return next, nil
		case res.Rejected:
			return st.rollingBack("confirm_rejected", now), nil
		}
		return st, nil // retried until the deadline
	}
	// StepRollBack changes no state: Decide sees the host back on the
	// previous system, or, when the rollback failed too, tries again at
	// the next check-in (the control plane sees the host on neither).
	return st, nil
}

// refusal is the report and state after a target failed verification or
// realisation: the host keeps its system and the target is done.
func refusal(st State, t *proto.Target, kind, code string, err error, now time.Time, p Policy) (State, *proto.ReportRequest) {
	return st.idle(now, t.Token), p.report(t, kind, code, err.Error(), now)
}
