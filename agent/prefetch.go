package agent

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// Prefetch (rfcs/0008 §Prefetch): a check-in answer with no target to act
// on may carry `prefetch`, the host's coming target, which the control
// plane lets it fetch now (it bounds how many hosts fetch at once). The
// agent verifies that rollout's manifest as it does for a dispatch, then
// realises the closure in the background with a GC root in its state
// directory, keeps it in its state and reports it in every check-in's
// `prefetched`. A dispatch of it then verifies and realises it again, as
// always: the realise finds it valid. Nothing here is an activation: a
// failure is logged and retried with back-off, never reported, and never
// holds a dispatch back.

// Prefetched is a closure the agent holds realised for an activation to
// come.
type Prefetched struct {
	RolloutID string `json:"rolloutId"`
	// Closure is the store path basename.
	Closure   string `json:"closure"`
	WaveIndex int    `json:"waveIndex"`
	// At is when the fetch ended.
	At time.Time `json:"at"`
}

// Prefetcher is an Executor that can fetch closures ahead of their
// activation; NixExecutor is one. An agent whose Executor is not one never
// prefetches.
type Prefetcher interface {
	// Fetch realises path from the substituters, with the checks of
	// Realise (its codes too), and makes the symlink root a GC root of it
	// (replacing what root was).
	Fetch(ctx context.Context, path, root string) Result
	// Holds reports whether root is a GC root of path and path is valid in
	// the store.
	Holds(ctx context.Context, path, root string) bool
	// Unroot removes the GC root root (none is no error).
	Unroot(root string) error
}

// PrefetchKind names what the agent does about a check-in's prefetch.
type PrefetchKind string

// The prefetch steps.
const (
	// PrefetchNone: nothing.
	PrefetchNone PrefetchKind = "none"
	// PrefetchFetch: verify Target's manifest and realise its closure, in
	// the background; a fetch under way of another closure is cancelled.
	PrefetchFetch PrefetchKind = "fetch"
	// PrefetchDrop: forget the prefetched closure and remove its root.
	PrefetchDrop PrefetchKind = "drop"
	// PrefetchCancel: cancel the fetch under way.
	PrefetchCancel PrefetchKind = "cancel"
)

// PrefetchStep is what DecidePrefetch says.
type PrefetchStep struct {
	Kind PrefetchKind
	// Target is what a PrefetchFetch fetches.
	Target *proto.PrefetchTarget
	// Why says it for people.
	Why string
}

// PrefetchProgress is what this process does and did about prefetches
// (it is not kept across restarts).
type PrefetchProgress struct {
	// Fetching is the closure of the fetch under way ("" when none).
	Fetching string
	// Failed is the closure whose last fetch failed, and RetryAt when it
	// may be fetched again.
	Failed  string
	RetryAt time.Time
}

// DecidePrefetch says what to do about the prefetch of a check-in answer
// (pf, nil when none), given the target of the same answer (t), the state,
// what the host runs, the fetch in progress and the time. It is pure. In
// order:
//
//  1. while an activation is under way (any phase but idle), nothing;
//  2. an answer with a target to act on: a fetch under way of another
//     closure is cancelled, nothing else;
//  3. a prefetched closure the host runs, or its system profile holds, is
//     dropped (the system roots it now);
//  4. an answer without prefetch drops the prefetched closure: it is no
//     longer the host's coming target (the control plane names it in
//     every answer while it is);
//  5. a prefetch naming the held closure: nothing; naming another: the
//     held one is dropped;
//  6. a closure quarantined here, one the host runs, one being fetched,
//     or one whose fetch failed before RetryAt: nothing; else fetch it.
func DecidePrefetch(st State, obs Observation, t *proto.Target, pf *proto.PrefetchTarget, pr PrefetchProgress, now time.Time, p Policy) PrefetchStep {
	held := st.Prefetched
	switch {
	case st.Phase != PhaseIdle:
		return PrefetchStep{Kind: PrefetchNone, Why: "an activation is under way"}
	case t != nil && t.Token != st.Done:
		if pr.Fetching != "" && pr.Fetching != t.Closure {
			return PrefetchStep{Kind: PrefetchCancel, Why: "a target to act on names another closure"}
		}
		return PrefetchStep{Kind: PrefetchNone, Why: "a target to act on"}
	case held != nil && (obs.Current == p.storePath(held.Closure) || obs.Profile == p.storePath(held.Closure)):
		return PrefetchStep{Kind: PrefetchDrop, Why: "the system holds the prefetched closure now"}
	case pf == nil && held != nil:
		return PrefetchStep{Kind: PrefetchDrop, Why: "the prefetched closure is no longer the host's coming target"}
	case pf == nil:
		return PrefetchStep{Kind: PrefetchNone, Why: "nothing to prefetch"}
	case held != nil && held.Closure == pf.Closure:
		return PrefetchStep{Kind: PrefetchNone, Why: "the coming target is prefetched"}
	case held != nil:
		return PrefetchStep{Kind: PrefetchDrop, Why: "another closure is the host's coming target"}
	}
	if until, q := st.quarantined(pf.Closure, now); q {
		return PrefetchStep{Kind: PrefetchNone, Why: "the closure is quarantined until " + until.UTC().Format(time.RFC3339)}
	}
	switch {
	case obs.Current == p.storePath(pf.Closure):
		return PrefetchStep{Kind: PrefetchNone, Why: "the host runs the closure"}
	case pr.Fetching == pf.Closure:
		return PrefetchStep{Kind: PrefetchNone, Why: "a fetch of the closure is under way"}
	case pr.Failed == pf.Closure && now.Before(pr.RetryAt):
		return PrefetchStep{Kind: PrefetchNone, Why: "the last fetch failed; tried again from " + pr.RetryAt.UTC().Format(time.RFC3339)}
	}
	return PrefetchStep{Kind: PrefetchFetch, Target: pf, Why: "fetch the coming target"}
}

// Back-off of failed fetches: 30 s, doubling to 10 min. The control plane
// may take the host's fetch slot back meanwhile (rfcs/0006 §Prefetch).
const (
	prefetchRetryMin = 30 * time.Second
	prefetchRetryMax = 10 * time.Minute
)

// prefetchRetry is the pause after the n-th failure in a row (n ≥ 1).
func prefetchRetry(n int) time.Duration {
	d := prefetchRetryMin
	for i := 1; i < n && d < prefetchRetryMax; i++ {
		d *= 2
	}
	return min(d, prefetchRetryMax)
}

// rootName is the GC root of the prefetched closure, in the state
// directory.
const rootName = "prefetched"

// fetchJob is a fetch under way.
type fetchJob struct {
	target proto.PrefetchTarget
	cancel context.CancelFunc
	done   chan struct{}
}

// fetchOutcome is how a fetch ended.
type fetchOutcome struct {
	target    proto.PrefetchTarget
	res       Result
	cancelled bool
	at        time.Time
}

// prefetcher is the executor as a Prefetcher, if it is one.
func (a *Agent) prefetcher() (Prefetcher, bool) {
	px, ok := a.c.Exec.(Prefetcher)
	return px, ok
}

func (a *Agent) prefetchRoot() string {
	root := filepath.Join(a.c.StateDir, rootName)
	if abs, err := filepath.Abs(root); err == nil {
		root = abs // Nix prints the root it made absolute
	}
	return root
}

// startPrefetch makes the state and the root agree at start-up: a
// prefetched closure that is no longer valid, or no longer rooted, is
// forgotten, and a root without a prefetched closure (left by a crash) is
// removed.
func (a *Agent) startPrefetch(ctx context.Context) {
	px, ok := a.prefetcher()
	if !ok {
		return
	}
	st := a.State()
	if held := st.Prefetched; held != nil && !px.Holds(ctx, a.c.storePath(held.Closure), a.prefetchRoot()) {
		a.dropPrefetch(px, "the prefetched closure is no longer valid in the store, or no longer rooted")
		return
	}
	if st.Prefetched == nil {
		if err := px.Unroot(a.prefetchRoot()); err != nil {
			a.c.Log.Warn("removing a stale prefetch root", "err", err)
		}
	}
}

// prefetch acts on the prefetch of a check-in answer (rfcs/0008
// §Prefetch): the loop calls it before the answer's target is acted on
// (a dispatch of another closure cancels the fetch under way) and after.
func (a *Agent) prefetch(ctx context.Context, resp proto.CheckinResponse) {
	px, ok := a.prefetcher()
	if !ok {
		return
	}
	for range 4 { // a drop, then a fetch, at most
		a.mu.Lock()
		st, pr := a.st, a.progress
		if a.job != nil {
			pr.Fetching = a.job.target.Closure
		}
		a.mu.Unlock()
		step := DecidePrefetch(st, a.observe(), resp.Target, resp.Prefetch, pr, a.c.Now(), a.c.Policy)
		switch step.Kind {
		case PrefetchNone:
			return
		case PrefetchDrop:
			a.dropPrefetch(px, step.Why)
		case PrefetchCancel:
			a.c.Log.Info("prefetch cancelled", "closure", pr.Fetching, "why", step.Why)
			a.stopFetch()
			a.settlePrefetch()
			return
		case PrefetchFetch:
			a.stopFetch() // one fetch at a time: the root is one symlink
			a.settlePrefetch()
			a.startFetch(ctx, px, *step.Target, step.Why)
			return
		}
	}
}

// dropPrefetch forgets the prefetched closure, then removes its root,
// unless a fetch under way owns the root now (it replaces it; when it
// fails, settlePrefetch removes it).
func (a *Agent) dropPrefetch(px Prefetcher, why string) {
	st := a.State()
	if st.Prefetched != nil {
		next := st
		next.Prefetched = nil
		if err := SaveState(a.c.StateDir, next); err != nil {
			a.c.Log.Error("saving the state", "err", err)
			return
		}
		a.mu.Lock()
		a.st = next
		a.mu.Unlock()
		a.c.Log.Info("prefetched closure dropped", "closure", st.Prefetched.Closure, "why", why)
	}
	a.mu.Lock()
	fetching := a.job != nil
	a.mu.Unlock()
	if fetching {
		return
	}
	if err := px.Unroot(a.prefetchRoot()); err != nil {
		a.c.Log.Warn("removing the prefetch root", "err", err)
	}
}

// startFetch starts a fetch in the background; the loop folds its outcome
// in (settlePrefetch), and a check-in under way when it ends is cut
// short, so that the next one reports it at once.
func (a *Agent) startFetch(ctx context.Context, px Prefetcher, pf proto.PrefetchTarget, why string) {
	jctx, cancel := context.WithCancel(ctx)
	j := &fetchJob{target: pf, cancel: cancel, done: make(chan struct{})}
	a.mu.Lock()
	a.job = j
	a.mu.Unlock()
	a.c.Log.Info("prefetch", "rollout", pf.RolloutID, "closure", pf.Closure, "why", why)
	go func() {
		defer close(j.done)
		res := a.fetchClosure(jctx, px, pf)
		a.mu.Lock()
		a.fetched = append(a.fetched, fetchOutcome{target: pf, res: res, cancelled: jctx.Err() != nil, at: a.c.Now()})
		if a.job == j {
			a.job = nil
		}
		a.mu.Unlock()
		cancel()
	}()
}

// fetchClosure verifies the manifest of pf's rollout with the agent's own
// roots, exactly as for a dispatch, then realises pf's closure with a GC
// root: a control plane cannot make the host download what CI did not
// sign for it.
func (a *Agent) fetchClosure(ctx context.Context, px Prefetcher, pf proto.PrefetchTarget) Result {
	body, sig, err := a.c.API.Manifest(ctx, pf.RolloutID)
	a.heard(err)
	if err != nil {
		return Result{Err: fmt.Errorf("fetching the manifest of %s: %w", pf.RolloutID, err), Code: codes.ManifestUnavailable}
	}
	if _, err := manifest.Verify(body, sig, a.c.Roots, manifest.Expect{RolloutID: pf.RolloutID, ContentHash: pf.ManifestHash,
		Host: &manifest.HostExpect{Hostname: a.c.Hostname, WaveIndex: pf.WaveIndex, TargetClosure: pf.Closure}}, a.c.Now()); err != nil {
		return Result{Err: err, Code: trust.Code(err)}
	}
	if path.Base(pf.Closure) != pf.Closure {
		// Not reached: a signed manifest names store path basenames.
		return Result{Err: fmt.Errorf("closure %q is not a store path basename", pf.Closure), Code: codes.RealiseFailed}
	}
	return px.Fetch(ctx, a.c.storePath(pf.Closure), a.prefetchRoot())
}

// stopFetch cancels the fetch under way, if any, and waits for it to end.
func (a *Agent) stopFetch() {
	a.mu.Lock()
	j := a.job
	a.mu.Unlock()
	if j == nil {
		return
	}
	j.cancel()
	<-j.done
}

// settlePrefetch folds the outcomes of ended fetches into the state: a
// closure fetched becomes the prefetched one (even from a fetch that was
// cancelled too late: it is realised and rooted, and the next answer
// keeps or drops it); a failure is logged and backs off, unless it was a
// cancellation. Then, with no fetch under way, a root that no prefetched
// closure owns is removed.
func (a *Agent) settlePrefetch() {
	a.mu.Lock()
	outs := a.fetched
	a.fetched = nil
	a.mu.Unlock()
	if len(outs) == 0 {
		return
	}
	defer a.writeMetrics()
	defer func() {
		a.mu.Lock()
		orphan := a.job == nil && a.st.Prefetched == nil
		a.mu.Unlock()
		if px, ok := a.prefetcher(); ok && orphan {
			if err := px.Unroot(a.prefetchRoot()); err != nil {
				a.c.Log.Warn("removing the prefetch root", "err", err)
			}
		}
	}()
	for _, o := range outs {
		pf := o.target
		if o.res.Err != nil {
			if o.cancelled {
				a.metrics.Prefetch(prefetchCancelled)
				continue
			}
			a.metrics.Prefetch(prefetchFailed)
			a.mu.Lock()
			if a.progress.Failed != pf.Closure {
				a.failures = 0
			}
			a.failures++
			a.progress.Failed, a.progress.RetryAt = pf.Closure, o.at.Add(prefetchRetry(a.failures))
			retry := a.progress.RetryAt
			a.mu.Unlock()
			a.c.Log.Warn("prefetch failed; the dispatch fetches it anyway", "rollout", pf.RolloutID, "closure", pf.Closure,
				"code", o.res.Code, "err", o.res.Err, "retryAt", retry)
			continue
		}
		a.mu.Lock()
		if a.progress.Failed == pf.Closure {
			a.progress, a.failures = PrefetchProgress{}, 0
		}
		next := a.st
		a.mu.Unlock()
		next.Prefetched = &Prefetched{RolloutID: pf.RolloutID, Closure: pf.Closure, WaveIndex: pf.WaveIndex, At: o.at.UTC()}
		if err := SaveState(a.c.StateDir, next); err != nil {
			a.c.Log.Error("saving the state", "err", err)
			continue
		}
		a.mu.Lock()
		a.st = next
		a.mu.Unlock()
		a.metrics.Prefetch(prefetchFetched)
		a.c.Log.Info("prefetched", "rollout", pf.RolloutID, "closure", pf.Closure)
	}
}

// errFetchEnded cuts a check-in short when a fetch ends.
var errFetchEnded = errors.New("agent: a prefetch ended")

// checkin checks in; while a fetch is under way, a check-in still waiting
// (a long-poll) when it ends is cut short with errFetchEnded, so that the
// next one reports the closure at once and the control plane's fetch slot
// goes to another host.
func (a *Agent) checkin(ctx context.Context) (proto.CheckinResponse, error) {
	a.mu.Lock()
	j, ended := a.job, len(a.fetched) > 0
	a.mu.Unlock()
	switch {
	case ended: // between settlePrefetch and now
		return proto.CheckinResponse{}, errFetchEnded
	case j == nil:
		return a.Checkin(ctx)
	}
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-j.done:
			cancel(errFetchEnded)
		case <-cctx.Done():
		}
	}()
	resp, err := a.Checkin(cctx)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(cctx), errFetchEnded) {
		return resp, errFetchEnded
	}
	return resp, err
}
