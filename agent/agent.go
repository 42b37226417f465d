package agent

import (
	"context"
	"errors"
	"fmt"
	"github.com/nixfleet/nixfleet/codes"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sync"
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
	// Loader is the host's boot loader, for reboots the control plane
	// orders (nil: NoBootLoader, which refuses them). New sets
	// Policy.BootLoader to its name.
	Loader BootLoader
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
	// MetricsFile, when set, is the node-exporter textfile the agent
	// rewrites after each check-in and activation outcome (Metrics).
	MetricsFile string
}

// Agent is one host's agent.
type Agent struct {
	c Config

	mu    sync.Mutex
	st    State
	obs   Observation
	tag   string
	known *proto.TargetRef
	// notBefore is when the control plane, answering 429, asked the agent
	// to send its next request (rfcs/0008 §Rate limits); pending are the
	// reports it refused so, sent again before the next check-in.
	notBefore time.Time
	pending   []proto.ReportRequest
	// metrics are written to Config.MetricsFile (nil: none).
	metrics *Metrics

	// Prefetch (prefetch.go): the fetch under way, the outcomes of ended
	// ones (folded into the state by the loop), and the back-off of the
	// last closure that failed.
	job      *fetchJob
	fetched  []fetchOutcome
	progress PrefetchProgress
	failures int

	// after is time.After; tests drive it with their clock.
	after func(time.Duration) <-chan time.Time
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
	if c.Loader == nil {
		c.Loader = NoBootLoader{}
	}
	c.BootLoader = c.Loader.Name()
	if c.Wait > 60*time.Second {
		c.Wait = 60 * time.Second
	}
	st, err := LoadState(c.StateDir)
	if err != nil {
		return nil, err
	}
	a := &Agent{c: c, st: st, after: time.After}
	if c.MetricsFile != "" {
		a.metrics = NewMetrics(c.MetricsFile)
	}
	return a, nil
}

// State returns the agent's current state.
func (a *Agent) State() State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st
}

// Run resumes whatever an earlier run left (rfcs/0008 §State, rule 2), then
// checks in until ctx ends: long-polls, acts on each target, and backs off
// with jitter after errors (1s doubling to 60s; never a tight loop). A
// rate-limited answer (429) holds the next request back for its
// Retry-After (at most maxHoldOff), except what an activation under way
// needs: the confirm before its deadline, and the rollback at it, happen
// whether or not the control plane answers (rfcs/0008 §Rate limits).
func (a *Agent) Run(ctx context.Context) error {
	defer a.stopFetch()
	a.startPrefetch(ctx)
	a.writeMetrics()
	a.act(ctx, nil)
	backoff := time.Duration(0)
	var pause time.Duration
	unanswered := false
	for ctx.Err() == nil {
		if p := a.pace(pause); p > 0 && !a.sleep(ctx, p) {
			break
		}
		pause = 0
		if unanswered || a.heldFor() > 0 {
			// After a failed check-in, or woken for the activation under
			// way while the control plane still holds the agent off: the
			// activation goes on without an answer.
			a.act(ctx, nil)
			unanswered = false
			if a.heldFor() > 0 {
				continue
			}
		}
		if a.flushReports(ctx); a.heldFor() > 0 {
			continue
		}
		a.settlePrefetch()
		resp, err := a.checkin(ctx)
		if errors.Is(err, errFetchEnded) {
			continue // check in again at once, reporting what was fetched
		}
		if err != nil && ctx.Err() != nil {
			break // stopping: no failure
		}
		if err != nil {
			a.metrics.CheckinFailed()
			a.writeMetrics()
			backoff = min(max(2*backoff, time.Second), time.Minute)
			pause, unanswered = backoff/2+rand.N(backoff/2+1), true
			a.c.Log.Warn("check-in failed", "err", err, "retryIn", a.pace(pause).Round(time.Millisecond))
			continue
		}
		backoff = 0
		a.metrics.CheckedIn(a.c.Now())
		a.writeMetrics()
		// Before acting, so that a dispatch of another closure cancels a
		// fetch under way first; after, for what acting changed.
		a.prefetch(ctx, resp)
		a.act(ctx, resp.Target)
		a.prefetch(ctx, resp)
		// The long-poll paces the loop; an answer that came at once
		// with nothing to do waits a little, within the server's hint.
		if resp.Target == nil || a.State().Done == resp.Target.Token {
			pause = time.Second
			if hint := time.Duration(resp.NextCheckinSeconds) * time.Second; hint > 0 && hint < pause {
				pause = hint
			}
		}
	}
	return nil
}

// Honouring the control plane's Retry-After (rfcs/0008 §Rate limits).
const (
	// maxHoldOff bounds a Retry-After the agent honours: well under the
	// control plane's offline threshold (5 min by default), so that
	// honouring one never makes the host look offline, and so that a
	// control plane cannot silence its agents for long.
	maxHoldOff = 2 * time.Minute
	// minHoldOff is the least a 429 holds the agent back, whatever its
	// header says: never a tight loop.
	minHoldOff = time.Second
	// confirmMargin: a rate-limited confirm is sent again at the latest
	// this long before its deadline, even when Retry-After asks for
	// longer. The server would refuse a later confirm, and the host would
	// roll back a switch that worked.
	confirmMargin = 5 * time.Second
	// maxPending bounds the rate-limited reports kept to send again.
	maxPending = 16
)

// heard notes how the control plane answered a request: a rate-limited
// answer holds the next request back until its Retry-After (between
// minHoldOff and maxHoldOff), any other answer ends the hold-off. It
// returns that wait, and whether err was a rate limit.
func (a *Agent) heard(err error) (time.Duration, bool) {
	d, limited := apiclient.RetryAfter(err)
	var apiErr *apiclient.Error
	if !limited && err != nil && !errors.As(err, &apiErr) {
		return 0, false // no answer
	}
	now := a.c.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if !limited {
		a.notBefore = time.Time{}
		return 0, false
	}
	d = min(max(d, minHoldOff), maxHoldOff)
	if until := now.Add(d); until.After(a.notBefore) {
		a.notBefore = until
	}
	return d, true
}

// heldFor is how long the control plane asked the agent to wait still.
func (a *Agent) heldFor() time.Duration {
	now := a.c.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	return max(a.notBefore.Sub(now), 0)
}

// pace stretches a pause before the next check-in to the control plane's
// Retry-After, and shortens it to wake in time for an activation under
// way: confirmMargin before its confirm deadline, or at the deadline, when
// the host rolls back unconfirmed.
func (a *Agent) pace(pause time.Duration) time.Duration {
	pause = max(pause, a.heldFor())
	now := a.c.Now()
	st := a.State()
	if st.Phase == PhaseConfirming || st.Phase == PhaseActivating || st.Phase == PhaseBootConfirming ||
		st.Phase == PhaseRebooting {
		deadline, _ := confirmBy(st.Target)
		wake := deadline.Add(-confirmMargin)
		if !wake.After(now) {
			wake = deadline
		}
		pause = min(pause, max(wake.Sub(now), 0))
	}
	return pause
}

// sleep waits d, sending probe results that change meanwhile; false when
// ctx ended.
func (a *Agent) sleep(ctx context.Context, d time.Duration) bool {
	t := a.after(d)
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t:
			return true
		case <-a.c.HealthChanged:
			a.reportHealth(ctx)
		}
	}
}

// wait waits d; false when ctx ended.
func (a *Agent) wait(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-a.after(d):
		return true
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

// reportHealth sends the probe results as a probe_results report, unless
// the control plane asked for no request yet (429): the next check-in
// carries them then.
func (a *Agent) reportHealth(ctx context.Context) {
	if a.heldFor() > 0 {
		return
	}
	s, units := a.health()
	resp, err := a.c.API.ReportProbes(ctx, proto.ReportRequest{Hostname: a.c.Hostname, Kind: proto.ReportProbeResults,
		Probes: &s, FailedUnits: units, At: a.c.Now().UTC().Format(time.RFC3339)})
	a.heard(err)
	if err != nil {
		a.c.Log.Warn("sending probe results", "err", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.tag = ""
		return
	}
	a.tag = resp.StatusTag
}

// Checkin sends one check-in with what the host runs and how it is, and
// returns the answer.
func (a *Agent) Checkin(ctx context.Context) (proto.CheckinResponse, error) {
	probes, units := a.health()
	bootID := a.c.Exec.BootID()
	a.mu.Lock()
	st := a.st
	// A reboot ordered and not yet done leaves the target staged.
	deferred := st.Phase == PhaseDeferred || st.Phase == PhaseRebooting && st.BootID == bootID
	req := proto.CheckinRequest{Hostname: a.c.Hostname, Current: closureName(a.c.Exec.Current()),
		Booted: closureName(a.c.Exec.Booted()), BootID: bootID, Probes: probes, FailedUnits: units,
		Compliance: []proto.ComplianceResult{}, Deferred: deferred,
		Quarantine: st.activeQuarantine(a.c.Now()), Known: a.known, Wait: int(a.c.Wait / time.Second), StatusTag: a.tag}
	if p := st.Prefetched; p != nil {
		req.Prefetched = p.Closure
	}
	a.mu.Unlock()
	resp, err := a.c.API.Checkin(ctx, req)
	a.heard(err)
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
		step, err := Decide(st, obs, t, now, a.c.Policy)
		if err != nil {
			// A move the phase table refuses: a bug; do nothing rather
			// than something the table does not hold.
			a.c.Log.Error("deciding", "phase", st.Phase, "err", err)
			return
		}
		if step.Kind == StepNone {
			return
		}
		a.c.Log.Info("step", "step", step.Kind, "path", step.Path, "why", step.Why, "phase", st.Phase)
		res := a.exec(ctx, st, t, step)
		if res.Err != nil {
			a.c.Log.Warn("step failed", "step", step.Kind, "code", res.Code, "err", res.Err)
		}
		next, rep, err := Apply(st, t, step, res, a.c.Now(), a.c.Policy)
		if err != nil {
			a.c.Log.Error("folding in a step's result", "step", step.Kind, "phase", st.Phase, "err", err)
			return
		}
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
		counted := a.countStep(st, next, step, res, rep)
		if step.Report != nil && !res.Retry {
			a.report(ctx, step.Report)
		}
		if rep != nil {
			a.report(ctx, rep)
		}
		if counted {
			a.writeMetrics()
		}
		if res.Retry || (step.Kind == StepConfirm || step.Kind == StepRollBack || step.Kind == StepMakeDefault) && res.Err != nil && !res.Rejected {
			return // retried at the next check-in
		}
		if step.Kind == StepReboot {
			return // the host goes down; or, failed, decided again at the next check-in
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
	obs.BootID = a.c.Exec.BootID()
	return obs
}

// exec runs one step.
func (a *Agent) exec(ctx context.Context, st State, t *proto.Target, step Step) Result {
	switch step.Kind {
	case StepSave:
		if step.ClearOnce {
			// Not saved before it is gone: a later boot would take it.
			if err := a.c.Loader.ClearOnce(ctx); err != nil {
				return Result{Err: fmt.Errorf("clearing the once-only entry of a reboot given up: %w", err), Code: codes.RebootFailed, Retry: true}
			}
		}
		return Result{} // Apply saves
	case StepVerify:
		body, sig, err := a.c.API.Manifest(ctx, t.RolloutID)
		a.heard(err)
		if err != nil {
			return Result{Err: fmt.Errorf("fetching the manifest of %s: %w", t.RolloutID, err), Code: codes.ManifestUnavailable, Retry: true}
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
		// Staged as a boot entry that is not the default only where the
		// loader can boot once into it: elsewhere a reboot could never
		// reach it.
		res := a.c.Exec.Activate(ctx, step.Path, deadline, st.Target.ManagedReboot && a.c.Policy.canBootOnce())
		if res.Err == nil && !res.Deferred {
			a.crash("after-switch")
		}
		return res
	case StepWait:
		deadline, _ := confirmBy(st.Target)
		return a.c.Exec.Wait(ctx, step.Path, deadline)
	case StepConfirm:
		if st.Phase == PhaseBootConfirming {
			// Booted once into the target: a kexec never ran the loader,
			// which so never consumed the once-only entry. Removed before
			// anything else, so that a reset boots the default entry.
			if err := a.c.Loader.ClearOnce(ctx); err != nil {
				a.c.Log.Warn("clearing the once-only entry after the boot into the target", "err", err)
			}
		}
		return a.confirm(ctx, st)
	case StepRollBack:
		bootID := a.c.Exec.BootID()
		res := a.c.Exec.SwitchTo(ctx, step.Path, a.c.Now().Add(rollbackWait))
		if res.Deferred {
			res.BootID = bootID
		}
		return res
	case StepReboot:
		return a.reboot(ctx, st, step)
	case StepMakeDefault:
		// A kexec never ran the loader, which so never consumed the
		// once-only entry: removed first, so that no later boot takes it.
		if err := a.c.Loader.ClearOnce(ctx); err != nil {
			return Result{Err: fmt.Errorf("clearing the once-only entry: %w", err), Code: codes.RebootFailed}
		}
		return a.c.Exec.MakeDefault(ctx, step.Path)
	}
	return Result{Err: fmt.Errorf("agent: unknown step %q", step.Kind)}
}

// confirm sends the confirm of st's activation. The agent does not wait
// for the next check-in when the control plane asks it to hold off (429):
// it sends the confirm again after the Retry-After, and at the latest
// confirmMargin before the deadline, even earlier than Retry-After asks,
// because a confirm that waited longer would come too late and the host
// would roll back a switch that worked. Any other failure is retried at
// the next check-in, until the deadline.
func (a *Agent) confirm(ctx context.Context, st State) Result {
	latest := func() time.Duration {
		deadline, _ := confirmBy(st.Target)
		return deadline.Add(-confirmMargin).Sub(a.c.Now())
	}
	req := proto.ConfirmRequest{Hostname: a.c.Hostname, RolloutID: st.Target.RolloutID, Closure: st.Target.Closure, Token: st.Target.Token}
	for {
		if d := min(a.heldFor(), latest()); d > 0 {
			a.c.Log.Warn("confirm held back by the control plane's rate limit", "retryIn", d, "confirmBy", st.Target.ConfirmBy)
			if !a.wait(ctx, d) {
				return Result{Err: ctx.Err(), Code: codes.ConfirmFailed, Retry: true}
			}
		}
		err := a.c.API.Confirm(ctx, req)
		_, limited := a.heard(err)
		switch {
		case err == nil:
			return Result{}
		case apiclient.IsCode(err, codes.ConfirmRejected):
			return Result{Err: err, Code: codes.ConfirmFailed, Rejected: true}
		case !limited || latest() <= 0:
			return Result{Err: err, Code: codes.ConfirmFailed, Retry: true}
		}
	}
}

// reboot runs a StepReboot, decided and saved in st (rfcs/0008
// §Reboots): once into the target's entry, or back into the previous
// system, made the default entry again first. A once-only entry that was
// set for a reboot that then failed is removed, so that no later reboot
// boots it unordered.
func (a *Agent) reboot(ctx context.Context, st State, step Step) Result {
	fail := func(err error) Result {
		code := codes.RebootFailed
		if errors.Is(err, ErrBootLoaderUnsupported) {
			code = codes.BootLoaderUnsupported
		}
		return Result{Err: err, Code: code}
	}
	if step.Once {
		if err := a.c.Loader.BootOnce(ctx, step.Path); err != nil {
			return fail(fmt.Errorf("booting once into %s: %w", step.Path, err))
		}
	} else {
		if step.Path != "" {
			if res := a.c.Exec.MakeDefault(ctx, step.Path); res.Err != nil {
				return res
			}
		}
		if err := a.c.Loader.ClearOnce(ctx); err != nil {
			return fail(fmt.Errorf("clearing the once-only entry: %w", err))
		}
	}
	a.crash("before-reboot")
	if err := a.c.Loader.Reboot(ctx, step.Kexec); err != nil {
		if step.Once {
			if cerr := a.c.Loader.ClearOnce(ctx); cerr != nil {
				a.c.Log.Warn("clearing the once-only entry after a failed reboot", "err", cerr)
			}
		}
		return fail(fmt.Errorf("rebooting: %w", err))
	}
	a.mu.Lock()
	a.obs.Rebooted = rebootMark(st)
	a.mu.Unlock()
	a.c.Log.Info("reboot ordered", "phase", st.Phase, "system", step.Path, "once", step.Once, "kexec", step.Kexec)
	return Result{}
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

// report sends a report (signed by the API client with the host key).
// While the control plane holds the agent off (429), the report waits in
// pending, and goes before the next check-in: a report says what
// check-ins do not (a failure's code, why the host rolled back). Any other
// failure is logged: the check-ins carry the host's state anyway.
func (a *Agent) report(ctx context.Context, r *proto.ReportRequest) {
	a.mu.Lock()
	a.pending = append(a.pending, *r)
	if n := len(a.pending); n > maxPending {
		a.c.Log.Warn("dropping a report held back by the rate limit", "kind", a.pending[0].Kind, "code", a.pending[0].Code)
		a.pending = a.pending[n-maxPending:]
	}
	a.mu.Unlock()
	a.flushReports(ctx)
}

// flushReports sends the pending reports, in order, unless the control
// plane holds the agent off.
func (a *Agent) flushReports(ctx context.Context) {
	for a.heldFor() == 0 {
		a.mu.Lock()
		if len(a.pending) == 0 {
			a.mu.Unlock()
			return
		}
		r := a.pending[0]
		a.mu.Unlock()
		_, err := a.c.API.ReportProbes(ctx, r)
		if _, limited := a.heard(err); limited {
			a.c.Log.Warn("report rate limited; sent again before the next check-in", "kind", r.Kind, "code", r.Code, "err", err)
			return
		}
		a.mu.Lock()
		a.pending = a.pending[1:]
		a.mu.Unlock()
		if err != nil {
			a.c.Log.Warn("sending a report", "kind", r.Kind, "code", r.Code, "err", err)
			continue
		}
		a.c.Log.Info("reported", "kind", r.Kind, "rollout", r.RolloutID, "closure", r.Closure, "code", r.Code)
	}
}
