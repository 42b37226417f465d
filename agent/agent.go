package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"sync"
	"syscall"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// API is what the agent needs of the control plane; *apiclient.Client is
// the real one.
type API interface {
	Checkin(ctx context.Context, req proto.CheckinRequest) (proto.CheckinResponse, error)
	Confirm(ctx context.Context, req proto.ConfirmRequest) error
	ReportProbes(ctx context.Context, req proto.ReportRequest) (proto.ReportResponse, error)
	Manifest(ctx context.Context, rolloutID string) (body, sig []byte, err error)
}

// Health is where check-ins read probe results from.
type Health interface {
	Summary() (proto.ProbeSummary, []string)
}

// Config configures an Agent.
type Config struct {
	Policy
	// API is the control plane.
	API API
	// Roots are the agent's own trust roots: every manifest is verified
	// with them, never with anything the control plane says.
	Roots *trust.Roots
	// StateDir holds state.json.
	StateDir string
	// Exec acts on the host.
	Exec Executor
	// Health gives probe results (nil: no probes, no failed units).
	Health Health
	// HealthChanged, when set, signals a change of the probe results:
	// the agent sends them at once as a probe_results report.
	HealthChanged <-chan struct{}
	// Wait is the long-poll of a check-in (default 30s, at most 60s).
	Wait time.Duration
	// Now is the clock (time.Now).
	Now func() time.Time
	// Log receives the agent's structured log.
	Log *slog.Logger
	// CrashAt, for fault-injection tests only, kills the process with
	// SIGKILL at a point of an activation: "before-switch" (after the
	// breadcrumb, before the profile is set) or "after-switch" (the host
	// runs the target, nothing recorded yet).
	CrashAt string
}

// Agent is one host's agent.
type Agent struct {
	c Config

	mu    sync.Mutex
	st    State
	obs   Observation
	tag   string
	known *proto.TargetRef
}

// New loads the state directory and returns an agent.
func New(c Config) (*Agent, error) {
	if c.API == nil || c.Exec == nil || c.Roots == nil || c.Hostname == "" || c.StateDir == "" {
		return nil, errors.New("agent: API, Exec, Roots, Hostname and StateDir are required")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Wait <= 0 {
		c.Wait = 30 * time.Second
	}
	if c.Wait > 60*time.Second {
		c.Wait = 60 * time.Second
	}
	st, err := LoadState(c.StateDir)
	if err != nil {
		return nil, err
	}
	return &Agent{c: c, st: st}, nil
}

// State returns the agent's current state.
func (a *Agent) State() State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st
}

// Run resumes whatever an earlier run left (rfcs/0008 §Restarts), then
// checks in until ctx ends: long-polls, acts on each target, and backs off
// with jitter after errors (1s doubling to 60s; never a tight loop).
func (a *Agent) Run(ctx context.Context) error {
	a.act(ctx, nil)
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		resp, err := a.Checkin(ctx)
		var pause time.Duration
		if err != nil {
			backoff = min(max(2*backoff, time.Second), time.Minute)
			pause = backoff/2 + rand.N(backoff/2+1)
			a.c.Log.Warn("check-in failed", "err", err, "retryIn", pause.Round(time.Millisecond))
		} else {
			backoff = 0
			a.act(ctx, resp.Target)
			// The long-poll paces the loop; an answer that came at once
			// with nothing to do waits a little, within the server's hint.
			if resp.Target == nil || a.State().Done == resp.Target.Token {
				pause = time.Second
				if hint := time.Duration(resp.NextCheckinSeconds) * time.Second; hint > 0 && hint < pause {
					pause = hint
				}
			}
		}
		if !a.sleep(ctx, pause) {
			break
		}
	}
	return nil
}

// sleep waits d, sending probe results that change meanwhile; false when
// ctx ended.
func (a *Agent) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-a.c.HealthChanged:
			a.reportHealth(ctx)
		}
	}
}

// health returns the probe results.
func (a *Agent) health() (proto.ProbeSummary, []string) {
	if a.c.Health == nil {
		return proto.ProbeSummary{Failed: []string{}}, []string{}
	}
	s, units := a.c.Health.Summary()
	if s.Failed == nil {
		s.Failed = []string{}
	}
	if units == nil {
		units = []string{}
	}
	return s, units
}

// reportHealth sends the probe results as a probe_results report.
func (a *Agent) reportHealth(ctx context.Context) {
	s, units := a.health()
	resp, err := a.c.API.ReportProbes(ctx, proto.ReportRequest{Hostname: a.c.Hostname, Kind: proto.ReportProbeResults,
		Probes: &s, FailedUnits: units, At: a.c.Now().UTC().Format(time.RFC3339)})
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.tag = ""
		a.c.Log.Warn("sending probe results", "err", err)
		return
	}
	a.tag = resp.StatusTag
}

// Checkin sends one check-in with what the host runs and how it is, and
// returns the answer.
func (a *Agent) Checkin(ctx context.Context) (proto.CheckinResponse, error) {
	probes, units := a.health()
	a.mu.Lock()
	st := a.st
	req := proto.CheckinRequest{Hostname: a.c.Hostname, Current: filepath.Base(a.c.Exec.Current()),
		Booted: filepath.Base(a.c.Exec.Booted()), BootID: a.c.Exec.BootID(), Probes: probes, FailedUnits: units,
		Compliance: []proto.ComplianceResult{}, Deferred: st.Phase == PhaseDeferred,
		Quarantine: st.activeQuarantine(a.c.Now()), Known: a.known, Wait: int(a.c.Wait / time.Second), StatusTag: a.tag}
	a.mu.Unlock()
	if req.Current == "." {
		req.Current = ""
	}
	if req.Booted == "." {
		req.Booted = ""
	}
	resp, err := a.c.API.Checkin(ctx, req)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.tag = "" // the server may hold that status, or not
		return resp, err
	}
	a.tag = resp.StatusTag
	if t := resp.Target; t != nil {
		a.known = &proto.TargetRef{RolloutID: t.RolloutID, Closure: t.Closure, Token: t.Token}
	} else {
		a.known = nil
	}
	return resp, nil
}

// maxSteps bounds one round of decisions (a full activation is about
// eight steps).
const maxSteps = 32

// act decides and executes steps until there is nothing to do.
func (a *Agent) act(ctx context.Context, t *proto.Target) {
	for range maxSteps {
		if ctx.Err() != nil {
			return
		}
		a.mu.Lock()
		st := a.st
		a.mu.Unlock()
		obs := a.observe()
		now := a.c.Now()
		step := Decide(st, obs, t, now, a.c.Policy)
		if step.Kind == StepNone {
			return
		}
		a.c.Log.Info("step", "step", step.Kind, "path", step.Path, "why", step.Why, "phase", st.Phase)
		res := a.exec(ctx, st, t, step)
		if res.Err != nil {
			a.c.Log.Warn("step failed", "step", step.Kind, "code", res.Code, "err", res.Err)
		}
		next, rep := Apply(st, t, step, res, a.c.Now(), a.c.Policy)
		if !reflect.DeepEqual(next, st) {
			if err := SaveState(a.c.StateDir, next); err != nil {
				// Without its breadcrumbs the agent must not go on.
				a.c.Log.Error("saving the state", "err", err)
				return
			}
			a.mu.Lock()
			a.st = next
			a.mu.Unlock()
		}
		if step.Report != nil {
			a.report(ctx, step.Report)
		}
		if rep != nil {
			a.report(ctx, rep)
		}
		if res.Retry || (step.Kind == StepConfirm || step.Kind == StepRollBack) && res.Err != nil && !res.Rejected {
			return // retried at the next check-in
		}
	}
	a.c.Log.Error("too many steps in one round; going on at the next check-in")
}

// observe reads the host, and this process's progress on the target.
func (a *Agent) observe() Observation {
	a.mu.Lock()
	obs := a.obs
	a.mu.Unlock()
	obs.Current, obs.Booted, obs.Profile = a.c.Exec.Current(), a.c.Exec.Booted(), a.c.Exec.Profile()
	return obs
}

func (a *Agent) crash(at string) {
	if a.c.CrashAt == at {
		a.c.Log.Warn("fault injection: killing the agent", "at", at)
		_ = syscall.Kill(syscall.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// exec runs one step.
func (a *Agent) exec(ctx context.Context, st State, t *proto.Target, step Step) Result {
	switch step.Kind {
	case StepSave:
		return Result{} // Apply saves
	case StepVerify:
		body, sig, err := a.c.API.Manifest(ctx, t.RolloutID)
		if err != nil {
			return Result{Err: fmt.Errorf("fetching the manifest of %s: %w", t.RolloutID, err), Code: "manifest_unavailable", Retry: true}
		}
		if err := a.verify(t, body, sig); err != nil {
			return Result{Err: err, Code: trust.Code(err)}
		}
		a.mu.Lock()
		a.obs.Verified = t.Token
		a.mu.Unlock()
		return Result{}
	case StepRealise:
		res := a.c.Exec.Realise(ctx, step.Path)
		if res.Err == nil {
			a.mu.Lock()
			a.obs.Realised = t.Token
			a.mu.Unlock()
		}
		return res
	case StepActivate:
		deadline, _ := confirmBy(st.Target)
		a.crash("before-switch")
		res := a.c.Exec.Activate(ctx, step.Path, deadline)
		if res.Err == nil && !res.Deferred {
			a.crash("after-switch")
		}
		return res
	case StepWait:
		deadline, _ := confirmBy(st.Target)
		return a.c.Exec.Wait(ctx, step.Path, deadline)
	case StepConfirm:
		err := a.c.API.Confirm(ctx, proto.ConfirmRequest{Hostname: a.c.Hostname, RolloutID: st.Target.RolloutID,
			Closure: st.Target.Closure, Token: st.Target.Token})
		if err != nil {
			rejected := apiclient.IsCode(err, "confirm_rejected")
			return Result{Err: err, Code: "confirm_failed", Rejected: rejected, Retry: !rejected}
		}
		return Result{}
	case StepRollBack:
		return a.c.Exec.SwitchTo(ctx, step.Path, a.c.Now().Add(rollbackWait))
	}
	return Result{Err: fmt.Errorf("agent: unknown step %q", step.Kind)}
}

// rollbackWait bounds the wait for the previous system to come back.
const rollbackWait = 2 * time.Minute

// verify checks a target's manifest with the agent's own roots:
// signature, freshness, rollout id, content hash, and that it lists this
// host in the target's wave with the target's closure.
func (a *Agent) verify(t *proto.Target, body, sig []byte) error {
	_, err := manifest.Verify(body, sig, a.c.Roots, manifest.Expect{RolloutID: t.RolloutID, ContentHash: t.ManifestHash,
		Host: &manifest.HostExpect{Hostname: a.c.Hostname, WaveIndex: t.WaveIndex, TargetClosure: t.Closure}}, a.c.Now())
	return err
}

// report sends a report (signed by the API client with the host key). A
// failure is logged: the check-ins carry the host's state anyway.
func (a *Agent) report(ctx context.Context, r *proto.ReportRequest) {
	if _, err := a.c.API.ReportProbes(ctx, *r); err != nil {
		a.c.Log.Warn("sending a report", "kind", r.Kind, "code", r.Code, "err", err)
		return
	}
	a.c.Log.Info("reported", "kind", r.Kind, "rollout", r.RolloutID, "closure", r.Closure, "code", r.Code)
}
