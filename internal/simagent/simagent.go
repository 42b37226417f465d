// Package simagent simulates nixfleet agents over the real API: each host
// checks in, verifies the manifest of a target, "switches" (a field
// changes, no Nix involved), confirms, and reports. Tests and the demo use
// it to drive a control plane with many hosts; the real agent is package
// agent.
package simagent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"github.com/nixfleet/nixfleet/codes"
	"sync"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// Action is what a simulated host does with a dispatch target.
type Action int

// Actions.
const (
	// Confirm: switch and confirm.
	Confirm Action = iota
	// FailSwitch: report activation_failed and stay on the old closure.
	FailSwitch
	// SwitchUnhealthy: switch, confirm, then report a failing probe.
	SwitchUnhealthy
	// RollBackItself: switch, fail to confirm, roll back and report it.
	RollBackItself
	// Defer: stage for the next boot and report deferred (Reboot finishes).
	Defer
	// Ignore: do nothing (the confirm window runs out).
	Ignore
)

// Host is one simulated host.
type Host struct {
	Name   string
	Key    ed25519.PrivateKey
	Client *apiclient.Client
	Roots  *trust.Roots // when set, manifests are verified like the agent does
	Now    func() time.Time
	Decide func(t proto.Target) Action
	// BootFails, when set, says whether the boot a reboot target orders
	// comes up on the previous closure (the agent then reports
	// boot_failed) rather than on the staged one.
	BootFails func(t proto.Target) bool
	// Pause is how long Run waits between two check-ins (the agent waits a
	// second after an answer that gave it nothing to do); zero: not at
	// all.
	Pause   time.Duration
	mu      sync.Mutex
	current string
	booted  string
	staged  string
	failing []string
	known   *proto.TargetRef
	tag     string // the statusTag of the last answer
	// Log records what the host did, for tests.
	Log []string
}

// New makes a host running closure current.
func New(name string, key ed25519.PrivateKey, c *apiclient.Client, current string) *Host {
	return &Host{Name: name, Key: key, Client: c, Now: time.Now, current: current, booted: current,
		Decide: func(proto.Target) Action { return Confirm }}
}

// Current returns the closure the host runs.
func (h *Host) Current() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.current
}

// SetFailingProbes makes the next check-ins report failing probes.
func (h *Host) SetFailingProbes(names ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failing = names
}

// ReportProbes sends the host's health results at once, in a
// probe_results report, as an agent does when a probe changes between
// check-ins.
func (h *Host) ReportProbes(ctx context.Context) error {
	h.mu.Lock()
	probes := proto.ProbeSummary{Total: 1, Failed: h.failing}
	h.mu.Unlock()
	resp, err := h.Client.ReportProbes(ctx, proto.ReportRequest{Hostname: h.Name, Kind: proto.ReportProbeResults,
		Probes: &probes, FailedUnits: []string{}, At: h.Now().UTC().Format(time.RFC3339)})
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.tag = ""
		return err
	}
	h.tag = resp.StatusTag
	return nil
}

// Reboot boots into a staged closure.
func (h *Host) Reboot() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.staged != "" {
		h.current, h.booted, h.staged = h.staged, h.staged, ""
	}
}

func (h *Host) logf(format string, args ...any) {
	h.Log = append(h.Log, fmt.Sprintf(format, args...))
}

// Step checks in once (waiting up to wait for a change) and acts on the
// answer.
func (h *Host) Step(ctx context.Context, wait time.Duration) error {
	h.mu.Lock()
	req := proto.CheckinRequest{Hostname: h.Name, Current: h.current, Booted: h.booted, Deferred: h.staged != "",
		Probes: proto.ProbeSummary{Total: 1, Failed: h.failing}, FailedUnits: []string{}, Known: h.known,
		Wait: int(wait / time.Second), StatusTag: h.tag}
	h.mu.Unlock()
	resp, err := h.Client.Checkin(ctx, req)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.tag = "" // the server may hold this status or not
		return err
	}
	h.tag = resp.StatusTag
	t := resp.Target
	if t == nil {
		h.known = nil
		return nil
	}
	if h.known != nil && h.known.Token == t.Token {
		return nil // acted on already
	}
	h.known = &proto.TargetRef{RolloutID: t.RolloutID, Closure: t.Closure, Token: t.Token}
	if h.Roots != nil && t.Kind == proto.TargetDispatch {
		if err := h.verify(ctx, t); err != nil {
			h.logf("manifest rejected: %v", err)
			return h.report(ctx, t, proto.ReportManifestRejected, trust.Code(err), err.Error())
		}
	}
	action := Confirm
	switch t.Kind {
	case proto.TargetDispatch:
		action = h.Decide(*t)
	case proto.TargetReboot:
		err = h.reboot(ctx, t)
		if err != nil {
			h.known = nil
		}
		return err
	}
	err = h.act(ctx, t, action)
	if err != nil {
		// Not acted on (a refused or lost confirm or report, a rate
		// limit): the next check-in acts on the target again, as a real
		// agent retries.
		h.known = nil
	}
	return err
}

// act does what the host decided about a target.
func (h *Host) act(ctx context.Context, t *proto.Target, action Action) error {
	switch action {
	case Confirm, SwitchUnhealthy:
		h.current, h.booted = t.Closure, t.Closure
		if err := h.Client.Confirm(ctx, proto.ConfirmRequest{Hostname: h.Name, RolloutID: t.RolloutID, Closure: t.Closure, Token: t.Token}); err != nil {
			if apiclient.IsCode(err, codes.ConfirmRejected) {
				h.logf("confirm refused, rolling back: %v", err)
				return nil
			}
			return err
		}
		h.logf("%s %s -> %s", t.Kind, t.RolloutID, t.Closure)
		if action == SwitchUnhealthy {
			h.failing = []string{"simulated-probe"}
		}
	case FailSwitch:
		h.logf("switch to %s failed", t.Closure)
		return h.report(ctx, t, proto.ReportActivationFailed, codes.SwitchFailed, "simulated switch failure")
	case RollBackItself:
		h.logf("switched to %s, could not confirm, rolled back", t.Closure)
		return h.report(ctx, t, proto.ReportRolledBack, "", "simulated: no confirm possible")
	case Defer:
		h.staged = t.Closure
		h.logf("staged %s for the next boot", t.Closure)
		return h.report(ctx, t, proto.ReportDeferred, "", "simulated: kernel change")
	case Ignore:
		h.logf("ignored %s", t.Closure)
	}
	return nil
}

// reboot boots once into the staged closure a reboot target names, as the
// agent does (rfcs/0008 §Reboots): it comes up on it and confirms, or on
// the previous closure and reports boot_failed.
func (h *Host) reboot(ctx context.Context, t *proto.Target) error {
	switch {
	case h.staged != t.Closure:
		h.logf("reboot into %s refused: %q is staged", t.Closure, h.staged)
		return h.report(ctx, t, proto.ReportBootFailed, codes.RebootFailed, "simulated: the closure is not staged")
	case h.BootFails != nil && h.BootFails(*t):
		h.staged = ""
		h.booted = h.current
		h.logf("rebooted into %s, which did not come up; back on %s", t.Closure, h.current)
		return h.report(ctx, t, proto.ReportBootFailed, codes.BootFellBack, "simulated: the previous default entry booted")
	}
	h.current, h.booted, h.staged = t.Closure, t.Closure, ""
	h.logf("rebooted into %s", t.Closure)
	return h.act(ctx, t, Confirm)
}

func (h *Host) report(ctx context.Context, t *proto.Target, kind, code, detail string) error {
	return h.Client.Report(ctx, proto.ReportRequest{Hostname: h.Name, Kind: kind, RolloutID: t.RolloutID,
		Closure: t.Closure, Code: code, Detail: detail, At: h.Now().UTC().Format(time.RFC3339)})
}

// verify checks the target's manifest as the real agent does.
func (h *Host) verify(ctx context.Context, t *proto.Target) error {
	body, sig, err := h.Client.Manifest(ctx, t.RolloutID)
	if err != nil {
		return err
	}
	_, err = manifest.Verify(body, sig, h.Roots, manifest.Expect{RolloutID: t.RolloutID, ContentHash: t.ManifestHash,
		Host: &manifest.HostExpect{Hostname: h.Name, WaveIndex: t.WaveIndex, TargetClosure: t.Closure}}, h.Now())
	return err
}

// Run checks in in a loop (long-polling up to wait) until ctx ends. Errors
// are retried after a pause: 200 ms, or the Retry-After of a rate-limited
// answer (429), as the agent does.
func (h *Host) Run(ctx context.Context, wait time.Duration) {
	for ctx.Err() == nil {
		err := h.Step(ctx, wait)
		pause := h.Pause
		if err != nil && !errors.Is(err, context.Canceled) {
			pause = max(pause, 200*time.Millisecond)
			if d, limited := apiclient.RetryAfter(err); limited {
				pause = max(pause, d)
			}
		}
		if pause > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
	}
}
