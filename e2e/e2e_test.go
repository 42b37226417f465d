// Package e2e holds the end-to-end test of the whole system: a real
// nixfleet-cp on PostgreSQL over TLS, real nixfleet-agent processes on
// simulated hosts with their own Nix stores and network namespaces, a
// signed binary cache, a real git fleet repository, and the nixfleet CLI
// driving rollouts. Its assertions come from the control plane's events
// journal and from the hosts' real profiles, links and switch logs.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/testkit/nixtest"
	"github.com/nixfleet/nixfleet/internal/testkit/pgtest"
	"github.com/nixfleet/nixfleet/internal/testkit/realfleet"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// bin holds the binaries the test runs, built once by TestMain.
var bin realfleet.Binaries

func TestMain(m *testing.M) { os.Exit(realfleet.Main(m, &bin)) }

// budget is the fleet's disruption budget: at most two hosts in flight.
const budget = 2

// TestEndToEnd: five hosts on one channel, a canary wave and a wave of
// four, at most two hosts in flight, onHealthFailure rollback-and-halt.
//
//  1. Onboarding: every host confirms v0, which it runs.
//  2. web-3 is cut off the network; v1 rolls out in waves, the budget holds
//     at every event of the journal, web-3 is skipped, the others converge;
//     web-3 comes back and catches up to v1.
//  3. v2's closure fails to switch on the canary: the canary rolls back to
//     v1, rollback-and-halt reverts the rollout, no other host moves, and
//     `nixfleet rollout resume` of the reverted rollout is refused.
//  4. v3 soaks its canary for a minute; during the soak `nixfleet rollout
//     pause`, `resume` and `cancel` move the rollout as rfcs/0005 says:
//     the canary keeps v3 (in-flight hosts finish), nobody else gets it,
//     and a resume of the cancelled rollout is refused.
func TestEndToEnd(t *testing.T) {
	network := nixtest.NewNet(t)
	limit, channel := budget, "stable"
	spec := fleetrepo.Spec{
		Channels:        map[string][]int{"stable": {0, 0}},
		OnHealthFailure: proto.OnHealthFailureRollbackAndHalt,
		Budgets:         []proto.DisruptionBudget{{Selector: proto.Selector{Channel: &channel}, MaxInFlight: &limit}},
		Hosts: []fleetrepo.Host{fleetrepo.NewHost("canary", "stable", 0, "canary"),
			fleetrepo.NewHost("db-1", "stable", 1, "db"), fleetrepo.NewHost("web-1", "stable", 1, "web"),
			fleetrepo.NewHost("web-2", "stable", 1, "web"), fleetrepo.NewHost("web-3", "stable", 1, "web")},
	}
	names := []string{"canary", "db-1", "web-1", "web-2", "web-3"}
	f := realfleet.New(t, realfleet.Options{Bin: bin, Net: network, Spec: spec, DB: pgtest.URL(t),
		Versions: []string{"v0", "v1", "v2", "v3"},
		Change:   map[string]map[string]nixtest.ClosureSpec{"v2": {"canary": {FailSwitch: true}}},
		CPArgs:   []string{"--tick-interval", "1s", "--offline-threshold", "12s"}})
	path := func(version, host string) string { return f.Closure(version, host).Path }

	// 1. Onboarding.
	first := "stable@" + f.Release("v0", 1, "stable")
	f.LogOnFailure(first)
	realfleet.Eventually(t, 30*time.Second, "the control plane opens the first rollout", func() bool {
		_, ok := f.Rollout(first)
		return ok
	})
	for _, n := range names {
		f.StartAgent(n, realfleet.AgentOptions{})
	}
	realfleet.Eventually(t, 60*time.Second, "every host confirms v0", func() bool {
		r, ok := f.Rollout(first)
		return ok && r.Counts[string(reconciler.HostConverged)] == len(names)
	})

	// 2. An offline host is skipped and catches up.
	network.SetOnline(t, f.Host("web-3"), false)
	realfleet.Eventually(t, 60*time.Second, "the control plane sees web-3 offline", func() bool {
		var h proto.HostView
		return f.Op.Get(context.Background(), "/v1/hosts/web-3", &h) == nil && !h.Online
	})
	second := "stable@" + f.Release("v1", 2, "stable")
	f.LogOnFailure(second)
	realfleet.Eventually(t, 90*time.Second, "v1 converges without web-3", func() bool {
		r, ok := f.Rollout(second)
		return ok && r.State == string(reconciler.RolloutConverged)
	})
	states := f.States(second)
	for _, n := range names {
		want := reconciler.HostConverged
		if n == "web-3" {
			want = reconciler.HostSkipped
		}
		if states[n] != want {
			t.Errorf("%s is %s in %s, want %s", n, states[n], second, want)
		}
	}
	// Three hosts of wave 1 are online: two go at once, the third waits
	// for a slot.
	if peak := checkJournal(t, f.Events(second), spec); peak != budget {
		t.Errorf("at most %d hosts of %s were in flight at once; the budget (%d) was never reached", peak, second, budget)
	}
	for _, n := range names {
		want := path("v1", n)
		if n == "web-3" {
			want = path("v0", n)
		}
		if got := f.Host(n).CurrentSystem(t); got != want {
			t.Errorf("%s runs %s, want %s", n, got, want)
		}
	}
	network.SetOnline(t, f.Host("web-3"), true)
	realfleet.Eventually(t, 90*time.Second, "web-3 catches up to v1", func() bool {
		return f.States(second)["web-3"] == reconciler.HostConverged && f.Host("web-3").CurrentSystem(t) == path("v1", "web-3")
	})
	f.JournalMentions(second, map[string]string{"web-3": "Skipped offline"})
	f.JournalMentions(second, map[string]string{"web-3": "Activating catch_up"})

	// 3. A canary that fails to switch: rollback-and-halt reverts the
	// rollout, which a resume cannot revive.
	third := "stable@" + f.Release("v2", 3, "stable")
	f.LogOnFailure(third)
	realfleet.Eventually(t, 90*time.Second, "v2 is reverted after the canary's failure", func() bool {
		r, ok := f.Rollout(third)
		return ok && r.State == string(reconciler.RolloutReverted)
	})
	canary := f.Host("canary")
	if log := canary.SwitchLog(t); len(log) < 2 || !realfleet.Equal(log[len(log)-2:], []string{"switch " + path("v2", "canary"), "switch " + path("v1", "canary")}) {
		t.Errorf("the canary's switch log ends %q, want the v2 switch and the switch back to v1", log)
	}
	if got := canary.CurrentSystem(t); got != path("v1", "canary") {
		t.Errorf("the canary runs %s, want v1 %s", got, path("v1", "canary"))
	}
	if got := canary.Profile(t); got != path("v1", "canary") {
		t.Errorf("the canary's profile is %s, want v1 %s", got, path("v1", "canary"))
	}
	f.JournalMentions(third, map[string]string{"canary": "switch_failed"})
	if !hasRolloutMove(f.Events(third), reconciler.RolloutActive, reconciler.RolloutReverting, "health_failure", "") {
		t.Errorf("the journal of %s does not show rollback-and-halt reverting it on the health failure", third)
	}
	untouched(t, f, third, names[1:], "v1")
	if out, code := cli(t, f, "rollout", "resume", third); code != 1 {
		t.Errorf("resuming a reverted rollout: exit %d: %s, want a refusal (exit 1)", code, out)
	}

	// 4. Pause, resume and cancel during v3's canary soak (a minute).
	f.Spec.Channels["stable"] = []int{1, 0}
	fourth := "stable@" + f.Release("v3", 4, "stable")
	f.LogOnFailure(fourth)
	realfleet.Eventually(t, 60*time.Second, "v3's canary soaks", func() bool {
		return f.States(fourth)["canary"] == reconciler.HostSoaking
	})
	for _, step := range []struct {
		action string
		want   reconciler.RolloutState
	}{{"pause", reconciler.RolloutHalted}, {"resume", reconciler.RolloutActive}, {"cancel", reconciler.RolloutCancelled}} {
		if out, code := cli(t, f, "rollout", step.action, fourth); code != 0 {
			t.Fatalf("nixfleet rollout %s: exit %d: %s", step.action, code, out)
		}
		realfleet.Eventually(t, 30*time.Second, fourth+" is "+string(step.want), func() bool {
			r, ok := f.Rollout(fourth)
			return ok && r.State == string(step.want)
		})
	}
	evs := f.Events(fourth)
	for _, m := range []struct{ from, to reconciler.RolloutState }{
		{reconciler.RolloutActive, reconciler.RolloutHalted}, {reconciler.RolloutHalted, reconciler.RolloutActive},
		{reconciler.RolloutActive, reconciler.RolloutCancelled}} {
		if !hasRolloutMove(evs, m.from, m.to, "", "olga") {
			t.Errorf("the journal of %s does not show olga moving it from %s to %s", fourth, m.from, m.to)
		}
	}
	if got := canary.CurrentSystem(t); got != path("v3", "canary") {
		t.Errorf("the canary runs %s after the cancel, want v3 (in-flight hosts finish)", got)
	}
	untouched(t, f, fourth, names[1:], "v1")
	if out, code := cli(t, f, "rollout", "resume", fourth); code != 1 {
		t.Errorf("resuming a cancelled rollout: exit %d: %s, want a refusal (exit 1)", code, out)
	}
}

// untouched checks that hosts were never dispatched in a rollout and
// still run their closure at a version.
func untouched(t *testing.T, f *realfleet.Fleet, id string, hosts []string, version string) {
	t.Helper()
	states := f.States(id)
	for _, n := range hosts {
		if st := states[n]; st != reconciler.HostPending {
			t.Errorf("%s is %s in %s, want Pending", n, st, id)
		}
		if got, want := f.Host(n).CurrentSystem(t), f.Closure(version, n).Path; got != want {
			t.Errorf("%s runs %s, want its %s %s", n, got, version, want)
		}
	}
}

// hasRolloutMove reports whether the journal holds a move of the rollout
// itself from one state to another, with the reason code and actor when
// they are not empty.
func hasRolloutMove(evs []realfleet.Event, from, to reconciler.RolloutState, code, actor string) bool {
	for _, e := range evs {
		if e.Host == "" && e.From == string(from) && e.To == string(to) &&
			(code == "" || e.Reason.Code == code) && (actor == "" || e.Reason.Actor == actor) {
			return true
		}
	}
	return false
}

// checkJournal replays a rollout's journal and checks, at every event,
// that no more than the budget's hosts are in flight and that no host of
// a later wave starts while an earlier wave still has a host to finish.
// It returns the most hosts in flight at once.
func checkJournal(t *testing.T, evs []realfleet.Event, spec fleetrepo.Spec) int {
	t.Helper()
	wave := map[string]int{}
	for _, h := range spec.Hosts {
		wave[h.Name] = h.Wave
	}
	state := map[string]reconciler.HostState{}
	peak := 0
	for _, e := range evs {
		if e.Host == "" || e.To == "" {
			continue
		}
		to := reconciler.HostState(e.To)
		if to == reconciler.HostActivating {
			for h, st := range state {
				if wave[h] < wave[e.Host] && (st == reconciler.HostPending || st.InFlight()) {
					t.Errorf("event %d: %s (wave %d) starts while %s of wave %d is %s", e.ID, e.Host, wave[e.Host], h, wave[h], st)
				}
			}
		}
		state[e.Host] = to
		n := 0
		for _, st := range state {
			if st.InFlight() {
				n++
			}
		}
		if n > budget {
			t.Errorf("event %d (%s %s → %s): %d hosts in flight, the budget is %d", e.ID, e.Host, e.From, e.To, n, budget)
		}
		peak = max(peak, n)
	}
	if len(state) == 0 {
		t.Errorf("the journal has no host transitions")
	}
	return peak
}

// cli runs the nixfleet CLI as the fleet's operator and returns its
// output (stdout and stderr) and exit code.
func cli(t *testing.T, f *realfleet.Fleet, args ...string) (string, int) {
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
