package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/release"
	"github.com/nixfleet/nixfleet/trust"
)

func coming(closure string) *proto.PrefetchTarget {
	return &proto.PrefetchTarget{RolloutID: "stable@c1", Closure: filepath.Base(closure), WaveIndex: 1, ManifestHash: "h"}
}

func holding(st State, closure string) State {
	st.Prefetched = &Prefetched{RolloutID: "stable@c1", Closure: filepath.Base(closure), WaveIndex: 1, At: t0}
	return st
}

// TestDecidePrefetch: every rule of DecidePrefetch, in order.
func TestDecidePrefetch(t *testing.T) {
	t.Parallel()
	v3 := "/nix/store/cccccccccccccccccccccccccccccccc-nixos-system-web-1-v3"
	host := Observation{Current: v1, Booted: v1, Profile: v1}
	quarantined := idle()
	quarantined.quarantine(filepath.Base(v2), t0.Add(time.Hour), t0)
	finished := idle()
	finished.Done = "tok-2"
	for _, tc := range []struct {
		name string
		st   State
		obs  Observation
		t    *proto.Target
		pf   *proto.PrefetchTarget
		pr   PrefetchProgress
		want PrefetchKind
	}{
		{"nothing to prefetch", idle(), host, nil, nil, PrefetchProgress{}, PrefetchNone},
		{"a coming target: fetch it", idle(), host, nil, coming(v2), PrefetchProgress{}, PrefetchFetch},
		{"an activation under way", must(idle().begin(EvActivate, dispatch(v2, "tok-2"), v1, t0)), host, nil, coming(v3), PrefetchProgress{}, PrefetchNone},
		{"an activation under way keeps what it holds", holding(must(idle().begin(EvActivate, dispatch(v2, "tok-2"), v1, t0)), v2), host, nil, nil, PrefetchProgress{}, PrefetchNone},
		{"a dispatch to act on", idle(), host, dispatch(v2, "tok-2"), coming(v2), PrefetchProgress{}, PrefetchNone},
		{"a dispatch of the closure being fetched", idle(), host, dispatch(v2, "tok-2"), nil, PrefetchProgress{Fetching: filepath.Base(v2)}, PrefetchNone},
		{"a dispatch of another closure cancels the fetch", idle(), host, dispatch(v3, "tok-3"), nil, PrefetchProgress{Fetching: filepath.Base(v2)}, PrefetchCancel},
		{"a dispatch already done is no target to act on", finished, host, dispatch(v2, "tok-2"), coming(v3), PrefetchProgress{}, PrefetchFetch},
		{"the host runs the prefetched closure", holding(idle(), v2), Observation{Current: v2, Profile: v2}, nil, nil, PrefetchProgress{}, PrefetchDrop},
		{"the profile holds the prefetched closure", holding(idle(), v2), Observation{Current: v1, Profile: v2}, nil, coming(v2), PrefetchProgress{}, PrefetchDrop},
		{"no longer the coming target", holding(idle(), v2), host, nil, nil, PrefetchProgress{}, PrefetchDrop},
		{"still the coming target", holding(idle(), v2), host, nil, coming(v2), PrefetchProgress{}, PrefetchNone},
		{"another coming target", holding(idle(), v2), host, nil, coming(v3), PrefetchProgress{}, PrefetchDrop},
		{"quarantined here", quarantined, host, nil, coming(v2), PrefetchProgress{}, PrefetchNone},
		{"the host runs it", idle(), Observation{Current: v2, Profile: v2}, nil, coming(v2), PrefetchProgress{}, PrefetchNone},
		{"a fetch under way", idle(), host, nil, coming(v2), PrefetchProgress{Fetching: filepath.Base(v2)}, PrefetchNone},
		{"a fetch of another closure under way: this one", idle(), host, nil, coming(v3), PrefetchProgress{Fetching: filepath.Base(v2)}, PrefetchFetch},
		{"failed, before its retry", idle(), host, nil, coming(v2), PrefetchProgress{Failed: filepath.Base(v2), RetryAt: t0.Add(time.Second)}, PrefetchNone},
		{"failed, at its retry", idle(), host, nil, coming(v2), PrefetchProgress{Failed: filepath.Base(v2), RetryAt: t0}, PrefetchFetch},
		{"another closure failed", idle(), host, nil, coming(v2), PrefetchProgress{Failed: filepath.Base(v3), RetryAt: t0.Add(time.Hour)}, PrefetchFetch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := DecidePrefetch(tc.st, tc.obs, tc.t, tc.pf, tc.pr, t0, policy)
			if got.Kind != tc.want || got.Why == "" {
				t.Fatalf("%s (%s), want %s", got.Kind, got.Why, tc.want)
			}
			if (got.Target != nil) != (got.Kind == PrefetchFetch) || got.Target != nil && *got.Target != *tc.pf {
				t.Errorf("target %+v with %s", got.Target, got.Kind)
			}
		})
	}
}

func TestPrefetchRetry(t *testing.T) {
	t.Parallel()
	var got []time.Duration
	for n := 1; n <= 7; n++ {
		got = append(got, prefetchRetry(n))
	}
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// web2v2 is web-2's closure in signedRollout.
const web2v2 = "/nix/store/dddddddddddddddddddddddddddddddd-nixos-system-web-2-v2"

// signedRollout is a rollout manifest CI signed: web-1 in wave 1 with v2,
// web-2 in wave 0 with web2v2; the roots that verify it.
func signedRollout(t *testing.T) (id string, body, sig []byte, roots *trust.Roots) {
	t.Helper()
	key, err := trust.GenerateKey(proto.AlgorithmEd25519)
	if err != nil {
		t.Fatal(err)
	}
	spec := fleetrepo.Spec{Channels: map[string][]int{"stable": {0, 0}},
		Hosts:    []fleetrepo.Host{fleetrepo.NewHost("web-1", "stable", 1), fleetrepo.NewHost("web-2", "stable", 0)},
		Closures: map[string]map[string]string{"v2": {"web-1": filepath.Base(v2), "web-2": filepath.Base(web2v2)}}}
	unsigned, err := spec.Fleet("v2")
	if err != nil {
		t.Fatal(err)
	}
	b, err := release.Sign(unsigned, release.Options{Signer: key, Commit: fleetkit.Commit(1), Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	pub := key.Public().Proto()
	roots, err = trust.ParseRoots(mustJSON(t, proto.TrustFile{SchemaVersion: 1, CIReleaseKey: proto.KeySlot{Current: &pub}, CacheKeys: []string{}}))
	if err != nil {
		t.Fatal(err)
	}
	return b.RolloutIDs[0], b.Rollouts[0].Body, b.Rollouts[0].Sig, roots
}

// pfWorld is a fake control plane and host that can prefetch: check-ins
// are answered from a script, fetches are recorded (and may wait for a
// gate), and pauses move the clock.
type pfWorld struct {
	mu      sync.Mutex
	now     time.Time
	current string
	cancel  context.CancelFunc
	id      string
	body    []byte
	sig     []byte

	// script answers the check-ins in order; past its end the run ends.
	script []answer
	// gate holds a fetch (at its manifest) until a check-in opens it.
	gate chan struct{}
	// fetchErr fails fetches; holds reports what Holds answers.
	fetchErr error
	holds    bool
	// switches: the host realises closures and switches to them, or
	// fails the switch with switchErr (else both fail); metrics is the
	// agent's metrics file ("" none).
	switches  bool
	switchErr error
	metrics   string

	calls []string
}

// answer is one scripted check-in: the answer, or (hold) a long-poll that
// opens the fetch gate and waits until the agent gives up on it (the
// fetch under way ended).
type answer struct {
	resp proto.CheckinResponse
	hold bool
}

func (w *pfWorld) record(what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, what)
}

func (w *pfWorld) clock() time.Time { w.mu.Lock(); defer w.mu.Unlock(); return w.now }

func (w *pfWorld) after(d time.Duration) <-chan time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.now = w.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- w.now
	return ch
}

func (w *pfWorld) Checkin(ctx context.Context, req proto.CheckinRequest) (proto.CheckinResponse, error) {
	w.mu.Lock()
	if len(w.script) == 0 {
		w.mu.Unlock()
		w.cancel()
		return proto.CheckinResponse{}, context.Canceled
	}
	a := w.script[0]
	w.script = w.script[1:]
	w.mu.Unlock()
	if a.hold {
		close(w.gate)
		<-ctx.Done()
		w.record("checkin cut short")
		return proto.CheckinResponse{}, ctx.Err()
	}
	w.record("checkin prefetched=" + req.Prefetched)
	a.resp.NextCheckinSeconds = 30
	return a.resp, nil
}

func (w *pfWorld) Confirm(context.Context, proto.ConfirmRequest) error { return nil }
func (w *pfWorld) ReportProbes(_ context.Context, r proto.ReportRequest) (proto.ReportResponse, error) {
	w.record("report " + r.Kind)
	return proto.ReportResponse{Recorded: true}, nil
}

func (w *pfWorld) Manifest(ctx context.Context, id string) ([]byte, []byte, error) {
	if w.gate != nil {
		select {
		case <-w.gate:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	w.record("manifest " + id)
	if id != w.id {
		return nil, nil, errors.New("404")
	}
	return w.body, w.sig, nil
}

func (w *pfWorld) Current() string { w.mu.Lock(); defer w.mu.Unlock(); return w.current }
func (w *pfWorld) Booted() string  { return w.Current() }
func (w *pfWorld) Profile() string { return w.Current() }
func (w *pfWorld) BootID() string  { return "boot-1" }
func (w *pfWorld) Realise(context.Context, string) Result {
	if w.switches {
		return Result{}
	}
	return Result{Err: errors.New("no realising here")}
}
func (w *pfWorld) MakeDefault(context.Context, string) Result { return Result{} }
func (w *pfWorld) Activate(_ context.Context, path string, _ time.Time, _ bool) Result {
	switch {
	case !w.switches:
		return Result{Err: errors.New("no activating here")}
	case w.switchErr != nil:
		return Result{Err: w.switchErr, Code: codes.SwitchFailed}
	}
	w.record("switch " + filepath.Base(path))
	w.mu.Lock()
	defer w.mu.Unlock()
	w.current = path
	return Result{}
}
func (w *pfWorld) SwitchTo(context.Context, string, time.Time) Result { return Result{} }
func (w *pfWorld) Wait(context.Context, string, time.Time) Result     { return Result{} }

func (w *pfWorld) Fetch(ctx context.Context, path, root string) Result {
	w.record("fetch " + filepath.Base(path) + " rooted at " + filepath.Base(root))
	if w.fetchErr != nil {
		return Result{Err: w.fetchErr, Code: codes.RealiseFailed}
	}
	return Result{}
}

func (w *pfWorld) Holds(_ context.Context, path, root string) bool {
	w.record("holds " + filepath.Base(path))
	return w.holds
}

func (w *pfWorld) Unroot(root string) error {
	w.record("unroot " + filepath.Base(root))
	return nil
}

// run starts an agent from st and runs it until the script is used up.
func (w *pfWorld) run(t *testing.T, st State, roots *trust.Roots) ([]string, State) {
	t.Helper()
	dir := t.TempDir()
	if err := SaveState(dir, st); err != nil {
		t.Fatal(err)
	}
	w.now = t0
	a, err := New(Config{Policy: policy, API: w, Roots: roots, StateDir: dir, Exec: w, Now: w.clock,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MetricsFile: w.metrics})
	if err != nil {
		t.Fatal(err)
	}
	a.after = w.after
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w.cancel = cancel
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the agent did not use up the script in time")
	}
	saved, err := LoadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(a.State(), saved); d != "" {
		t.Errorf("the state file is not the agent's state (-agent +file):\n%s", d)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls, saved
}

// TestAgentPrefetch runs the agent against a scripted control plane:
//
//   - told to prefetch its coming target, it verifies the signed manifest
//     and fetches it in the background; the long-poll under way when the
//     fetch ends is cut short, and every check-in after reports it, until
//     an answer names it no more: then its root goes;
//   - a lying control plane naming another host's closure, or another
//     wave, gets the manifest fetched and nothing else;
//   - a failed fetch is not reported, and is tried again only after its
//     back-off;
//   - after a restart, a prefetched closure that is still valid and
//     rooted is reported; one that is not is forgotten and unrooted.
func TestAgentPrefetch(t *testing.T) {
	t.Parallel()
	id, body, sig, roots := signedRollout(t)
	pf := func(closure string, wave int) *proto.PrefetchTarget {
		return &proto.PrefetchTarget{RolloutID: id, Closure: filepath.Base(closure), WaveIndex: wave}
	}
	say := func(p *proto.PrefetchTarget) answer {
		return answer{resp: proto.CheckinResponse{Reason: proto.Reason{Code: codes.WaveNotActive}, Prefetch: p}}
	}
	v2n := filepath.Base(v2)
	for _, tc := range []struct {
		name     string
		st       State
		script   []answer
		fetchErr error
		holds    bool
		want     []string
		// prefetched: the state's at the end ("" none).
		prefetched string
		// counted: nixfleet_agent_prefetches_total by result, 0 if absent.
		counted map[string]float64
	}{
		{name: "fetched, reported while it comes, dropped when it does not",
			st:     idle(),
			script: []answer{say(pf(v2, 1)), {hold: true}, say(pf(v2, 1)), say(nil), say(nil)},
			want: []string{"unroot prefetched", // nothing prefetched at the start: no stale root
				"checkin prefetched=", "manifest " + id, "fetch " + v2n + " rooted at prefetched", "checkin cut short",
				"checkin prefetched=" + v2n, "checkin prefetched=" + v2n, "unroot prefetched", "checkin prefetched="},
			counted: map[string]float64{"fetched": 1},
		},
		{name: "another host's closure: verified, refused, nothing fetched",
			st:     idle(),
			script: []answer{say(pf(web2v2, 1)), {hold: true}, say(nil)},
			want: []string{"unroot prefetched", "checkin prefetched=", "manifest " + id, "checkin cut short",
				"unroot prefetched", // a failed fetch may have left a root: nothing owns it
				"checkin prefetched="},
			counted: map[string]float64{"failed": 1},
		},
		{name: "another wave: refused",
			st:     idle(),
			script: []answer{say(pf(v2, 0)), {hold: true}, say(nil)},
			want: []string{"unroot prefetched", "checkin prefetched=", "manifest " + id, "checkin cut short",
				"unroot prefetched", // a failed fetch may have left a root: nothing owns it
				"checkin prefetched="},
			counted: map[string]float64{"failed": 1},
		},
		{name: "a failed fetch backs off",
			st: idle(), fetchErr: errors.New("the cache is down"),
			// The second answer renews the prefetch before the back-off
			// ends (the pause is a second): not fetched again.
			script: []answer{say(pf(v2, 1)), {hold: true}, say(pf(v2, 1)), say(pf(v2, 1))},
			want: []string{"unroot prefetched", "checkin prefetched=", "manifest " + id, "fetch " + v2n + " rooted at prefetched",
				"checkin cut short", "unroot prefetched", "checkin prefetched=", "checkin prefetched="},
			counted: map[string]float64{"failed": 1},
		},
		{name: "restarted holding it, still valid: reported",
			st: holding(idle(), v2), holds: true,
			script:     []answer{say(pf(v2, 1))},
			want:       []string{"holds " + v2n, "checkin prefetched=" + v2n},
			prefetched: v2n,
		},
		{name: "restarted holding it, gone from the store: forgotten",
			st: holding(idle(), v2), holds: false,
			script: []answer{say(nil)},
			want:   []string{"holds " + v2n, "unroot prefetched", "checkin prefetched="},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := &pfWorld{current: v1, id: id, body: body, sig: sig, script: tc.script, fetchErr: tc.fetchErr, holds: tc.holds,
				gate: make(chan struct{}), metrics: filepath.Join(t.TempDir(), "nixfleet-agent.prom")}
			calls, st := w.run(t, tc.st, roots)
			if d := cmp.Diff(tc.want, calls); d != "" {
				t.Errorf("calls (-want +got):\n%s", d)
			}
			got := ""
			if st.Prefetched != nil {
				got = st.Prefetched.Closure
			}
			if got != tc.prefetched {
				t.Errorf("prefetched %q at the end, want %q", got, tc.prefetched)
			}
			for _, c := range calls {
				if strings.HasPrefix(c, "report") {
					t.Errorf("a prefetch reported %q", c)
				}
			}
			series, err := readMetrics(w.metrics)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range prefetchResults {
				if got := series[`nixfleet_agent_prefetches_total{result="`+r+`"}`]; got != tc.counted[r] {
					t.Errorf("prefetches %s: %v, want %v", r, got, tc.counted[r])
				}
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
