package main

import (
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/simagent"
	"github.com/nixfleet/nixfleet/internal/testkit/pgtest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// The integration tests run the real nixfleet-cp and nixfleet binaries,
// real git, real TLS and both real stores, talking over 127.0.0.1 only.

// backends are the stores the tests run against (PostgreSQL needs
// NIXFLEET_TEST_PG, a superuser URL on a throwaway cluster).
var backends = []string{"sqlite", "postgres"}

// dbURL returns a fresh, empty store of a backend for one test.
func dbURL(t *testing.T, backend string) string {
	t.Helper()
	if backend == "sqlite" {
		return "sqlite://" + filepath.Join(t.TempDir(), "cp.db")
	}
	return pgtest.URL(t)
}

// fleetHosts makes a simulated agent for every host of the spec, on
// closure v0, talking to a replica; manifests are verified against the
// fleet's trust roots as the real agent does.
func fleetHosts(f *gitFleet, r *replica) map[string]*simagent.Host {
	out := map[string]*simagent.Host{}
	for _, h := range f.Spec.Hosts {
		sh := simagent.New(h.Name, h.Key, r.Client(h.Key, h.Name), fleetrepo.Closure(h.Name, "v0"))
		sh.Roots = f.Roots
		out[h.Name] = sh
	}
	return out
}

// stepAll checks every named host in once (all when names is empty).
// Errors are logged: a replica may be down on purpose.
func stepAll(t *testing.T, hosts map[string]*simagent.Host, names ...string) {
	t.Helper()
	if len(names) == 0 {
		for n := range hosts {
			names = append(names, n)
		}
		slices.Sort(names)
	}
	for _, n := range names {
		if err := hosts[n].Step(ctx, 0); err != nil {
			t.Logf("%s: %v", n, err)
		}
	}
}

// getRollout reads a rollout with its hosts; ok is false when it does not
// exist (yet) or the replica did not answer.
func getRollout(r *replica, id string) (proto.Rollout, bool) {
	var out proto.Rollout
	err := r.Operator().Get(ctx, "/v1/rollouts/"+url.PathEscape(id), &out)
	return out, err == nil
}

// listRollouts is GET /v1/rollouts.
func listRollouts(t *testing.T, r *replica) []reconciler.Rollout {
	t.Helper()
	var out struct {
		Rollouts []reconciler.Rollout `json:"rollouts"`
	}
	if err := r.Operator().Get(ctx, "/v1/rollouts", &out); err != nil {
		t.Fatalf("GET /v1/rollouts on %s: %v", r.name, err)
	}
	return out.Rollouts
}

// rolloutEvents is GET /v1/rollouts/{id}/events.
func rolloutEvents(t *testing.T, r *replica, id string) []proto.Event {
	t.Helper()
	return journal(t, r, "/v1/rollouts/"+url.PathEscape(id)+"/events?limit=10000")
}

// journal reads the events an events endpoint answers.
func journal(t *testing.T, r *replica, path string) []proto.Event {
	t.Helper()
	var out struct {
		Events []proto.Event `json:"events"`
	}
	if err := r.Operator().Get(ctx, path, &out); err != nil {
		t.Fatalf("GET %s on %s: %v", path, r.name, err)
	}
	return out.Events
}

// converge checks the hosts in until the rollout is Converged with every
// host Converged, within d.
func converge(t *testing.T, r *replica, hosts map[string]*simagent.Host, id string, d time.Duration) proto.Rollout {
	t.Helper()
	var last proto.Rollout
	err := poll(d, func() bool {
		stepAll(t, hosts)
		ro, ok := getRollout(r, id)
		if ok {
			last = ro
		}
		return ok && ro.State == string(reconciler.RolloutConverged) && ro.Counts[string(reconciler.HostConverged)] == len(hosts)
	})
	if err != nil {
		t.Fatalf("%s does not converge: %v; last seen: %+v", id, err, last)
	}
	return last
}

// onboard brings the hosts in: the first release opened before any host
// had checked in, so every host was skipped; they check in, catch up on
// the closure they already run, and the rollout converges.
func onboard(t *testing.T, r *replica, hosts map[string]*simagent.Host, id string) {
	t.Helper()
	eventually(t, 20*time.Second, "the first rollout opens", func() bool {
		_, ok := getRollout(r, id)
		return ok
	})
	converge(t, r, hosts, id, 30*time.Second)
}

// hostState returns a host's state in a rollout summary.
func hostState(ro proto.Rollout, host string) reconciler.HostState {
	for _, h := range ro.Hosts {
		if h.Hostname == host {
			return reconciler.HostState(h.State)
		}
	}
	return ""
}

// checkStory asserts that a converged rollout's events tell its whole
// story, in order: the rollout opened because the ref moved and became
// Active; every host was dispatched exactly once, in its wave, confirmed
// and soaked, in that order; each wave but the last was promoted after its
// hosts converged and before the next wave's dispatches; the rollout
// converged last. Every event carries a reason code and message, and no
// event reports a failure.
func checkStory(t *testing.T, evs []proto.Event, spec fleetrepo.Spec, id string) {
	t.Helper()
	dump := func() {
		for _, e := range evs {
			t.Logf("  event %d %s wave=%d host=%q %s->%s %s: %s", e.ID, e.Kind, e.Wave, e.Host, e.From, e.To, e.Reason.Code, e.Reason.Message)
		}
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
		dump()
	}
	// The forecasts are journalled beside the story (rfcs/0014), as they
	// are made: they say why and are of the rollout, like the rest.
	for _, e := range evs {
		if e.Kind == controlplane.EventForecast && (e.RolloutID != id || e.Reason.Code == "" || e.Reason.Message == "") {
			fail("forecast event %d: %+v", e.ID, e)
		}
	}
	evs = slices.DeleteFunc(slices.Clone(evs), func(e proto.Event) bool { return e.Kind == controlplane.EventForecast })
	if len(evs) == 0 {
		t.Fatalf("%s: no events", id)
	}
	// find returns the positions of the events that match.
	find := func(match func(e proto.Event) bool) []int {
		var at []int
		for i, e := range evs {
			if match(e) {
				at = append(at, i)
			}
		}
		return at
	}
	for i, e := range evs {
		if e.RolloutID != id {
			fail("event %d is of rollout %q, not %s", e.ID, e.RolloutID, id)
		}
		if e.Reason.Code == "" || e.Reason.Message == "" {
			fail("event %d (%s) does not say why: %+v", e.ID, e.Kind, e.Reason)
		}
		if i > 0 && e.ID <= evs[i-1].ID {
			fail("event ids out of order: %d after %d", e.ID, evs[i-1].ID)
		}
		switch e.Kind {
		case reconciler.EventRolloutOpened, reconciler.EventRolloutTransition, reconciler.EventHostTransition, reconciler.EventWavePromoted:
		default:
			fail("unexpected event %d: %s (%s: %s)", e.ID, e.Kind, e.Reason.Code, e.Reason.Message)
		}
	}
	first, last := evs[0], evs[len(evs)-1]
	if first.Kind != reconciler.EventRolloutOpened || first.To != string(reconciler.RolloutOpening) || first.Reason.Code != codes.RefMoved {
		fail("the first event is %s %s (%s), want rollout_opened Opening (ref_moved)", first.Kind, first.To, first.Reason.Code)
	}
	if at := find(func(e proto.Event) bool {
		return e.Kind == reconciler.EventRolloutTransition && e.From == string(reconciler.RolloutOpening) && e.To == string(reconciler.RolloutActive)
	}); len(at) != 1 {
		fail("%d Opening->Active transitions, want 1", len(at))
	}
	if last.Kind != reconciler.EventRolloutTransition || last.To != string(reconciler.RolloutConverged) || last.Reason.Code != codes.Converged {
		fail("the last event is %s %s (%s), want rollout_transition Converged (converged)", last.Kind, last.To, last.Reason.Code)
	}

	hostStep := func(host, from, to, code string) []int {
		return find(func(e proto.Event) bool {
			return e.Kind == reconciler.EventHostTransition && e.Host == host && e.From == from && e.To == to && e.Reason.Code == code
		})
	}
	dispatched := map[int][]int{} // wave -> positions of its dispatches
	converged := map[int][]int{}  // wave -> positions of its hosts' Converged
	waves := 0
	for _, h := range spec.Hosts {
		waves = max(waves, h.Wave+1)
		steps := [][]int{
			hostStep(h.Name, string(reconciler.HostPending), string(reconciler.HostActivating), codes.Dispatched),
			hostStep(h.Name, string(reconciler.HostActivating), string(reconciler.HostSoaking), codes.Confirmed),
			hostStep(h.Name, string(reconciler.HostSoaking), string(reconciler.HostConverged), codes.Soaked),
		}
		if len(steps[0]) != 1 || len(steps[1]) != 1 || len(steps[2]) != 1 {
			fail("%s: %d dispatched, %d confirmed, %d soaked events; want one each", h.Name, len(steps[0]), len(steps[1]), len(steps[2]))
			continue
		}
		if !(steps[0][0] < steps[1][0] && steps[1][0] < steps[2][0]) {
			fail("%s: dispatched, confirmed and soaked out of order", h.Name)
		}
		if w := evs[steps[0][0]].Wave; w != h.Wave {
			fail("%s was dispatched in wave %d, want %d", h.Name, w, h.Wave)
		}
		dispatched[h.Wave] = append(dispatched[h.Wave], steps[0][0])
		converged[h.Wave] = append(converged[h.Wave], steps[2][0])
	}
	for w := range waves - 1 {
		at := find(func(e proto.Event) bool { return e.Kind == reconciler.EventWavePromoted && e.Wave == w })
		if len(at) != 1 {
			fail("wave %d: %d wave_promoted events, want 1", w, len(at))
			continue
		}
		if slices.Max(converged[w]) > at[0] || slices.Min(dispatched[w+1]) < at[0] {
			fail("wave %d was promoted before its hosts converged or after wave %d began", w, w+1)
		}
	}
}

// checkDispatchedOnce asserts that each simulated host switched to the
// rollout's target exactly once: a host that confirmed was never sent the
// same rollout and closure again.
func checkDispatchedOnce(t *testing.T, hosts map[string]*simagent.Host, id string) {
	t.Helper()
	for name, h := range hosts {
		n := 0
		for _, line := range h.Log {
			if strings.HasPrefix(line, "dispatch "+id+" -> ") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s switched to %s %d times, want once: %q", name, id, n, h.Log)
		}
		if want := fleetrepo.Closure(name, "v1"); h.Current() != want {
			t.Errorf("%s runs %s, want %s", name, h.Current(), want)
		}
	}
}

// startCP starts a replica on a fleet with short intervals: git polled
// every 3 seconds, a 2-second lease. The periodic tick and the debounce
// keep their defaults (30s, 500ms), so every step of a rollout in these
// tests is driven by what triggers a tick: a ref change, a host's status
// change or confirm, the first check-in of a soak, an operator command.
func startCP(t *testing.T, s *site, f *gitFleet, db, name string, extra ...string) *replica {
	t.Helper()
	return startReplica(t, s, name, "", append([]string{"--db", db, "--repo", f.Bare, "--trust", f.TrustFile,
		"--state-dir", t.TempDir(), "--replica-id", name,
		"--poll-interval", pollInterval.String(), "--lease-ttl", leaseTTL.String()}, extra...)...)
}

const (
	pollInterval = 3 * time.Second
	leaseTTL     = 2 * time.Second
	// debounce is nixfleet-cp's default --debounce, which the tests keep.
	debounce = 100 * time.Millisecond
)

// twoWaveSpec: canary in wave 0, two web hosts in wave 1, no soak.
func twoWaveSpec() fleetrepo.Spec {
	return fleetrepo.Spec{
		Channels: map[string][]int{"stable": {0, 0}},
		Hosts: []fleetrepo.Host{
			fleetrepo.NewHost("canary", "stable", 0),
			fleetrepo.NewHost("web-1", "stable", 1), fleetrepo.NewHost("web-2", "stable", 1),
		},
	}
}

// threeWaveSpec adds a database host in a third wave.
func threeWaveSpec() fleetrepo.Spec {
	s := twoWaveSpec()
	s.Channels["stable"] = []int{0, 0, 0}
	s.Hosts = append(s.Hosts, fleetrepo.NewHost("db-1", "stable", 2))
	return s
}

// switchOnce checks a host in until it has switched to its v1 closure and
// confirmed, then stops: the host does not check in again.
func switchOnce(t *testing.T, h *simagent.Host) {
	t.Helper()
	want := fleetrepo.Closure(h.Name, "v1")
	eventually(t, 10*time.Second, h.Name+" switches", func() bool {
		if err := h.Step(ctx, 0); err != nil {
			t.Logf("%s: %v", h.Name, err)
		}
		return h.Current() == want
	})
}

// TestReleaseByGitPush: CI pushes a signed release to the channel ref of a
// bare repository with git; the control plane opens the rollout within a
// second of the webhook, and within a poll interval without it; simulated
// agents over mutual TLS take it to Converged, and the events journal
// tells every step.
func TestReleaseByGitPush(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			f := newGitFleet(t, twoWaveSpec())
			v0 := f.Release("v0")
			cp := startCP(t, newSite(t), f, dbURL(t, backend), "cp-1")
			hosts := fleetHosts(f, cp)
			onboard(t, cp, hosts, v0)

			// With the webhook: the rollout opens within a second.
			v1 := f.Release("v1")
			cp.Hook()
			hooked := time.Now()
			err := poll(time.Second, func() bool {
				return slices.ContainsFunc(listRollouts(t, cp), func(r reconciler.Rollout) bool { return r.ID == v1 })
			})
			if err != nil {
				t.Fatalf("%s did not open within 1s of the webhook: %v", v1, err)
			}
			t.Logf("%s opened %s after the webhook", v1, time.Since(hooked).Round(time.Millisecond))
			converge(t, cp, hosts, v1, 20*time.Second)
			checkStory(t, rolloutEvents(t, cp, v1), f.Spec, v1)
			checkDispatchedOnce(t, hosts, v1)

			// Without it: the poll finds the ref within an interval, the tick
			// follows a debounce later; one more debounce of slack covers
			// reading git, verifying and ticking. The new rollout runs too.
			v2 := f.Release("v2")
			pushed := time.Now()
			within := pollInterval + 2*debounce
			err = poll(within, func() bool {
				return slices.ContainsFunc(listRollouts(t, cp), func(r reconciler.Rollout) bool { return r.ID == v2 })
			})
			if err != nil {
				t.Fatalf("%s did not open within %s of the push, without a webhook: %v", v2, within, err)
			}
			t.Logf("%s opened %s after the push", v2, time.Since(pushed).Round(time.Millisecond))
			converge(t, cp, hosts, v2, 20*time.Second)
			if ro, _ := getRollout(cp, v1); ro.State != string(reconciler.RolloutConverged) {
				t.Errorf("%s is %s after %s converged", v1, ro.State, v2)
			}
			for name, h := range hosts {
				if want := fleetrepo.Closure(name, "v2"); h.Current() != want {
					t.Errorf("%s runs %s, want %s", name, h.Current(), want)
				}
			}
		})
	}
}

// TestKillAndRestart: nixfleet-cp is killed with SIGKILL in the middle of a
// three-wave rollout (wave 0 converged, a wave-1 host soaking, another
// dispatched but not yet told, wave 2 pending) and restarted on the same
// store and repository. Nothing is lost: the rollout, its hosts and its
// events are as they were. It is killed again right after a host's
// confirm, before the tick that reads it. No host is dispatched twice, and
// the rollout converges with every host on the target.
func TestKillAndRestart(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			f, cp, hosts, v1 := releasedThreeWaves(t, backend)

			// Wave 0 converges and wave 1 is dispatched.
			eventually(t, 20*time.Second, "wave 0 converges", func() bool {
				stepAll(t, hosts, "canary")
				ro, ok := getRollout(cp, v1)
				return ok && hostState(ro, "canary") == reconciler.HostConverged && hostState(ro, "web-1") == reconciler.HostActivating
			})
			// web-1 gets its target and confirms, then stays quiet: it is
			// Soaking, and stays so until it checks in again (a soak, even
			// of zero minutes, ends only once the host was seen after it
			// began). web-2 has not checked in since its dispatch.
			switchOnce(t, hosts["web-1"])
			var before proto.Rollout
			eventually(t, 10*time.Second, "web-1 soaks", func() bool {
				ro, ok := getRollout(cp, v1)
				before = ro
				return ok && hostState(ro, "web-1") == reconciler.HostSoaking
			})
			want := map[string]reconciler.HostState{"canary": reconciler.HostConverged, "web-1": reconciler.HostSoaking,
				"web-2": reconciler.HostActivating, "db-1": reconciler.HostPending}
			for h, st := range want {
				if got := hostState(before, h); got != st {
					t.Fatalf("before the kill, %s is %s, want %s", h, got, st)
				}
			}
			if before.State != string(reconciler.RolloutActive) || before.Wave != 1 {
				t.Fatalf("before the kill, the rollout is %s in wave %d, want Active in wave 1", before.State, before.Wave)
			}
			eventsBefore := rolloutEvents(t, cp, v1)
			rolloutsBefore := listRollouts(t, cp)

			cp.Kill()
			cp = cp.Restart()

			after, ok := getRollout(cp, v1)
			if !ok {
				t.Fatalf("%s is gone after the restart", v1)
			}
			if d := cmp.Diff(before, after); d != "" {
				t.Errorf("the rollout changed across the restart (-before +after):\n%s", d)
			}
			if d := cmp.Diff(rolloutsBefore, listRollouts(t, cp)); d != "" {
				t.Errorf("the rollouts changed across the restart (-before +after):\n%s", d)
			}
			eventsAfter := rolloutEvents(t, cp, v1)
			if len(eventsAfter) < len(eventsBefore) {
				t.Fatalf("%d events before the kill, %d after the restart", len(eventsBefore), len(eventsAfter))
			}
			if d := cmp.Diff(eventsBefore, eventsAfter[:len(eventsBefore)]); d != "" {
				t.Errorf("the events before the kill changed (-before +after):\n%s", d)
			}

			// web-2 takes the target it was dispatched before the kill and
			// confirms; the replica dies again before it ticks on that.
			switchOnce(t, hosts["web-2"])
			cp.Kill()
			cp = cp.Restart()

			converge(t, cp, hosts, v1, 30*time.Second)
			checkStory(t, rolloutEvents(t, cp, v1), f.Spec, v1)
			checkDispatchedOnce(t, hosts, v1)
		})
	}
}

// releasedThreeWaves starts a replica (with extra flags) on a three-wave
// fleet, onboards its hosts on v0, and pushes v1 (with the webhook): it
// returns the fleet, the replica, the hosts and v1's rollout id. The hosts'
// logs are printed when the test fails.
func releasedThreeWaves(t *testing.T, backend string, extra ...string) (*gitFleet, *replica, map[string]*simagent.Host, string) {
	t.Helper()
	f := newGitFleet(t, threeWaveSpec())
	v0 := f.Release("v0")
	cp := startCP(t, newSite(t), f, dbURL(t, backend), "cp-1", extra...)
	hosts := fleetHosts(f, cp)
	t.Cleanup(func() {
		if t.Failed() {
			for name, h := range hosts {
				t.Logf("%s did: %q", name, h.Log)
			}
		}
	})
	onboard(t, cp, hosts, v0)
	v1 := f.Release("v1")
	cp.Hook()
	return f, cp, hosts, v1
}

// TestTwoReplicas: two nixfleet-cp processes on one PostgreSQL database.
// Exactly one leads the tick; both serve agents and operators; when the
// leader is killed, the other leads within the lease TTL plus one lease
// check, and the rollout goes on to Converged.
//
// PostgreSQL only: several replicas on one store is a PostgreSQL feature;
// an SQLite store is one replica's file, and the product defines no
// behaviour for a second replica on it.
func TestTwoReplicas(t *testing.T) {
	t.Parallel()
	f := newGitFleet(t, threeWaveSpec())
	v0 := f.Release("v0")
	s, db := newSite(t), dbURL(t, "postgres")
	a := startCP(t, s, f, db, "cp-a")
	b := startCP(t, s, f, db, "cp-b")
	replicas := []*replica{a, b}

	leaders := func() []*replica {
		var out []*replica
		for _, r := range replicas {
			l, ok := r.Leader()
			if !ok {
				t.Fatalf("%s: no nixfleet_leader gauge on /metrics", r.name)
			}
			if l {
				out = append(out, r)
			}
		}
		return out
	}
	var leader, follower *replica
	eventually(t, 10*time.Second, "exactly one replica leads", func() bool {
		l := leaders()
		if len(l) == 1 {
			leader = l[0]
		}
		return len(l) == 1
	})
	// It stays so over a lease check period.
	for range 5 {
		time.Sleep(leaseTTL / 3 / 5)
		if l := leaders(); len(l) != 1 || l[0] != leader {
			t.Fatalf("%d replicas lead (want exactly %s)", len(l), leader.name)
		}
	}
	follower = a
	if leader == a {
		follower = b
	}
	t.Logf("%s leads, %s follows", leader.name, follower.name)

	// Both serve agents: half the hosts check in with each replica.
	hosts := fleetHosts(f, a)
	onLeader := map[string]bool{}
	for i, h := range f.Spec.Hosts {
		r := replicas[i%2]
		hosts[h.Name].Client = r.Client(h.Key, h.Name)
		onLeader[h.Name] = r == leader
		if i < len(replicas) {
			if err := hosts[h.Name].Step(ctx, 0); err != nil {
				t.Fatalf("%s checking in with %s: %v", h.Name, r.name, err)
			}
		}
	}
	onboard(t, leader, hosts, v0)
	// And operators: both list the same rollouts.
	if d := cmp.Diff(listRollouts(t, a), listRollouts(t, b)); d != "" {
		t.Errorf("the replicas list different rollouts (-a +b):\n%s", d)
	}

	// The follower gets the webhook: it reads the release, the leader
	// opens the rollout.
	v1 := f.Release("v1")
	follower.Hook()
	eventually(t, 20*time.Second, "wave 0 converges", func() bool {
		stepAll(t, hosts)
		ro, ok := getRollout(follower, v1)
		return ok && ro.Wave == 1
	})
	killed := time.Now()
	leader.Kill()
	// The dead leader's lease expires at most a TTL after the kill; the
	// follower tries to take it every TTL/3. The follower logs the moment
	// it takes the lease ("leading the tick"): that, not when a scrape of
	// /metrics happens to see the gauge, is what must meet the deadline,
	// with 300ms of slack for scheduling on a busy machine.
	eventually(t, 10*time.Second, follower.name+" leads", func() bool { l, _ := follower.Leader(); return l })
	var took time.Time
	for _, at := range follower.out.times("leading the tick") {
		if at.After(killed) {
			took = at
			break
		}
	}
	if took.IsZero() {
		t.Fatalf("%s reports leading, but did not log taking the lease after the kill", follower.name)
	}
	deadline := leaseTTL + leaseTTL/3 + 300*time.Millisecond
	if d := took.Sub(killed); d > deadline {
		t.Errorf("%s took the lead %s after the kill, want at most %s", follower.name, d.Round(time.Millisecond), deadline)
	}
	t.Logf("%s took the lead %s after the kill (the gauge showed it after %s)", follower.name,
		took.Sub(killed).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))

	// The agents of the dead replica fail over to the live one.
	for _, h := range f.Spec.Hosts {
		if onLeader[h.Name] {
			hosts[h.Name].Client = follower.Client(h.Key, h.Name)
		}
	}
	converge(t, follower, hosts, v1, 30*time.Second)
	checkStory(t, rolloutEvents(t, follower, v1), f.Spec, v1)
	checkDispatchedOnce(t, hosts, v1)
}
