package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/testkit/realfleet"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestPrefetchWithRealNix: a canary in wave 0 and four hosts in wave 1,
// with a real nixfleet-cp that lets one host fetch at a time
// (--prefetch-concurrency 1), real agents, one /nix per host, and a
// binary cache that serves each NAR 1.5 s late (so that unbounded fetches
// would overlap). The canary's agent is stopped before v1 is released, so
// wave 0 (its dispatch) waits for the test; meanwhile:
//
//   - every wave-1 host's v1 closure becomes valid in its own store, with
//     the agent's GC root on it, while the host is still Pending, runs v0
//     and never switched;
//   - the API shows it prefetched, and `nixfleet host explain` says so;
//   - the cache never served more than one NAR download at once.
//
// Then the canary's agent comes back: wave 0 converges, wave 1 is
// dispatched and switches to v1 without downloading its NAR again; the
// roots go once the hosts run what they held.
func TestPrefetchWithRealNix(t *testing.T) {
	wave1 := []string{"web-1", "web-2", "web-3", "web-4"}
	hosts := []fleetrepo.Host{fleetrepo.NewHost("canary", "stable", 0)}
	for _, n := range wave1 {
		hosts = append(hosts, fleetrepo.NewHost(n, "stable", 1))
	}
	w := realfleet.New(t, realfleet.Options{Bin: bin, Spec: fleetrepo.Spec{Hosts: hosts, Channels: map[string][]int{"stable": {0, 0}}},
		CPArgs: []string{"--prefetch-concurrency", "1", "--confirm-window", "10m"}})
	first := "stable@" + w.Release("v0", 1, "stable")
	canary := w.StartAgent("canary", realfleet.AgentOptions{})
	for _, n := range wave1 {
		w.StartAgent(n, realfleet.AgentOptions{})
	}
	realfleet.Eventually(t, 90*time.Second, "the hosts converge on v0", func() bool {
		r, ok := w.Rollout(first)
		return ok && r.Counts[string(reconciler.HostConverged)] == len(hosts)
	})
	v0, v1 := w.Closures["v0"], w.Closures["v1"]

	// Wave 0 waits for the test: its only host's agent is gone.
	_ = syscall.Kill(-canary.Cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-canary.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the canary's agent does not stop")
	}
	w.Cache.SlowNARs(1500 * time.Millisecond)
	id := "stable@" + w.Release("v1", 2, "stable")
	w.LogOnFailure(id)
	ctx := context.Background()
	// prefetched reads what each host reports it holds prefetched, with
	// one request at most every half second (operators are rate limited
	// too).
	var last time.Time
	seen := map[string]string{}
	prefetched := func() map[string]string {
		if time.Since(last) < 500*time.Millisecond {
			return seen
		}
		last = time.Now()
		hs, _, err := w.Op.Hosts(ctx, proto.HostQuery{})
		if err != nil {
			return seen
		}
		seen = map[string]string{}
		for _, h := range hs {
			seen[h.Hostname] = h.Observed.Prefetched
		}
		return seen
	}
	realfleet.Eventually(t, 180*time.Second, "every wave-1 host holds v1 prefetched", func() bool {
		got := prefetched()
		for _, n := range wave1 {
			if got[n] != v1[n].Name {
				return false
			}
		}
		return true
	})
	if st := w.States(id)["canary"]; st != reconciler.HostActivating {
		t.Fatalf("the canary is %s, want Activating (its agent is stopped)", st)
	}
	for _, n := range wave1 {
		h := w.Host(n)
		if st := w.States(id)[n]; st != reconciler.HostPending {
			t.Errorf("%s is %s in %s, want Pending", n, st, id)
		}
		if !h.Valid(t, v1[n].Path) {
			t.Errorf("%s reports v1 prefetched, and it is not valid in its store", n)
		}
		if got := h.CurrentSystem(t); got != v0[n].Path {
			t.Errorf("%s runs %s, want v0 %s", n, got, v0[n].Path)
		}
		if got := h.Profile(t); got != v0[n].Path {
			t.Errorf("%s's profile is %s, want v0 %s", n, got, v0[n].Path)
		}
		if log := h.SwitchLog(t); len(log) != 0 {
			t.Errorf("%s switched before its wave: %q", n, log)
		}
		if root, err := os.Readlink(filepath.Join(h.Dir, "agent-state", "prefetched")); err != nil || root != v1[n].Path {
			t.Errorf("%s's prefetch GC root points at %q (%v), want %s", n, root, err, v1[n].Path)
		}
		v, _, err := w.Op.Host(ctx, n)
		if err != nil || !strings.HasSuffix(v.Explain.Message, "its target is prefetched") {
			t.Errorf("%s's explanation does not say it is prefetched: %+v (%v)", n, v.Explain, err)
		}
	}
	out, code := nixfleetCLI(t, w, "host", "explain", "web-1")
	if code != 0 || !strings.Contains(out, "prefetched") || !strings.Contains(out, v1["web-1"].Name+" (its target") {
		t.Errorf("nixfleet host explain web-1: exit %d:\n%s", code, out)
	}
	if peak := w.Cache.NARPeak(); peak != 1 {
		t.Errorf("the cache served %d NAR downloads at once, want 1 (--prefetch-concurrency 1)", peak)
	}
	nar := map[string]string{}
	served := func(path string) int {
		n := 0
		for _, r := range w.Cache.Requests() {
			if strings.HasPrefix(r, "GET "+path+" ") {
				n++
			}
		}
		return n
	}
	for _, n := range wave1 {
		nar[n] = w.Cache.NARPath(t, v1[n].Path)
		if got := served(nar[n]); got != 1 {
			t.Errorf("%s's v1 NAR was downloaded %d times before the dispatch, want once", n, got)
		}
	}

	// The canary comes back: the rollout goes on, and wave 1 only switches.
	w.StartAgent("canary", realfleet.AgentOptions{})
	realfleet.Eventually(t, 180*time.Second, "the v1 rollout converges", func() bool {
		r, ok := w.Rollout(id)
		return ok && r.State == string(reconciler.RolloutConverged)
	})
	for _, n := range wave1 {
		h := w.Host(n)
		if got := h.CurrentSystem(t); got != v1[n].Path {
			t.Errorf("%s runs %s, want v1 %s", n, got, v1[n].Path)
		}
		if log := h.SwitchLog(t); !slices.Equal(log, []string{"switch " + v1[n].Path}) {
			t.Errorf("%s's switch log: %q", n, log)
		}
		if got := served(nar[n]); got != 1 {
			t.Errorf("%s's v1 NAR was downloaded %d times in all, want once: the dispatch fetched it again", n, got)
		}
	}
	realfleet.Eventually(t, 60*time.Second, "the hosts drop their prefetch roots", func() bool {
		got := prefetched()
		for _, n := range wave1 {
			if _, err := os.Lstat(filepath.Join(w.Host(n).Dir, "agent-state", "prefetched")); !errors.Is(err, os.ErrNotExist) {
				return false
			}
			if got[n] != "" {
				return false
			}
		}
		return true
	})
}

// nixfleetCLI runs the nixfleet CLI as the fleet's operator and returns its
// output (stdout and stderr) and exit code.
func nixfleetCLI(t *testing.T, f *realfleet.Fleet, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.Bin.CLI, args...)
	cmd.Env = append(os.Environ(), "NIXFLEET_CP_URL="+f.CPURL, "NIXFLEET_CA="+f.Cert.CertFile,
		"NIXFLEET_KEY="+f.OpKey, "NIXFLEET_NAME=olga", "NIXFLEET_CONFIG=/dev/null", "NO_COLOR=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	}
	t.Fatalf("nixfleet %s: %v", strings.Join(args, " "), err)
	return "", -1
}
