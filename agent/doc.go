// Package agent is the nixfleet agent (rfcs/0008-agent.md): it checks in
// with the control plane, verifies every target against its own trust
// roots, realises and activates Nix closures, confirms them, and rolls the
// host back when it cannot.
//
// The decisions are pure functions: Decide, from the agent's State, what
// it observes of the host (Observation), the target of the last check-in
// and the time, to the next Step; Apply, from a step's Result to the next
// State and a report. The phase of the State changes only by a move of the
// phase table (Phase.Next, drawn in rfcs/0008 §Phases); both refuse a move
// the table does not hold with ErrIllegalTransition.
//
// An Agent (New, Run) runs the loop:
//
//  1. check in (a long-poll), holding back as the control plane's rate
//     limit asks, except for the confirm an activation needs;
//  2. ask Decide for a step, execute it with the Executor (NixExecutor runs
//     nix), fold its result in with Apply;
//  3. write the State atomically (SaveState) when it changed, before the
//     next step, so that a step that cannot be undone is preceded by its
//     breadcrumb and an agent killed anywhere resumes correctly;
//  4. send the step's report, and ask again until Decide says StepNone;
//  5. act on the answer's prefetch (DecidePrefetch): fetch the host's
//     coming closure in the background, verified as for a dispatch and
//     rooted in the state directory, report it in every check-in, drop it
//     when no answer names it (prefetch.go, rfcs/0008 §Prefetch).
//
// A target that needs a reboot is staged for the next boot; when the
// control plane orders the reboot (rfcs/0008 §Reboots), the agent boots
// once into it through the BootLoader seam (boot.go: systemd-boot, GRUB),
// confirms from the new boot, and only then makes it the default entry; a
// boot it cannot confirm is left by a reboot into the default entry.
//
// With Config.MetricsFile, the loop also writes its Metrics there, a
// node-exporter textfile replaced atomically, after each check-in attempt,
// activation outcome and ended prefetch (metrics.go, rfcs/0008 §Metrics).
//
// Health probes live in agent/probe; the agent reads them through Health.
package agent
