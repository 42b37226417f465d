package main

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/testkit/nixtest"
	"github.com/nixfleet/nixfleet/internal/testkit/realfleet"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestControlPlaneRebootsWithRealNix: the real nixfleet-cp orders the
// reboots (rfcs/0003 rule 17) of real agents with real Nix, one host at a
// time (a budget of one), under a policy that halts on a failure. v1
// changes every host's kernel:
//
//   - a-ok stages v1 without making it the default, is told to reboot,
//     powers off and on into its one-shot entry (nixtest.Host.PowerCycle),
//     checks in and confirms from the new boot: only then is v1 its
//     profile; it soaks and converges;
//   - b-back is rebooted only after a-ok landed (the budget), and comes
//     up on its default entry, v0: its agent reports boot_failed, the
//     control plane fails it (boot_failed) and halts the rollout;
//   - c-never is never rebooted: dispatched or not (b-back's reboot and
//     its dispatch race for the slot b-back left when it staged), the
//     rollout halted first, and its profile is still v0.
//
// The journal, replayed tick by tick, never has two hosts in flight.
func TestControlPlaneRebootsWithRealNix(t *testing.T) {
	names := []string{"a-ok", "b-back", "c-never"}
	one := 1
	var hosts []fleetrepo.Host
	change := map[string]nixtest.ClosureSpec{}
	for _, n := range names {
		hosts = append(hosts, fleetrepo.NewHost(n, "stable", 0))
		change[n] = nixtest.ClosureSpec{Kernel: "kernel-2"}
	}
	spec := fleetrepo.Spec{Hosts: hosts, Channels: map[string][]int{"stable": {0}},
		Budgets: []proto.DisruptionBudget{{Name: "all", Selector: proto.Selector{All: true}, MaxInFlight: &one}},
		Reboot:  &proto.Reboot{Allowed: true, BootTimeoutMinutes: 5}}
	w := realfleet.New(t, realfleet.Options{Bin: bin, Spec: spec, Change: map[string]map[string]nixtest.ClosureSpec{"v1": change}})
	v0, v1 := w.Closures["v0"], w.Closures["v1"]
	opts := map[string]realfleet.AgentOptions{}
	procs := map[string]*realfleet.Proc{}
	for _, n := range names {
		h := w.Host(n)
		opts[n] = realfleet.AgentOptions{Env: []string{
			"PATH=" + h.LoaderStubs(t) + string(os.PathListSeparator) + os.Getenv("PATH"),
			"NIXFLEET_AGENT_BOOT_LOADER=systemd-boot", "NIXFLEET_AGENT_BOOT_ID_FILE=" + h.BootIDFile()}}
		procs[n] = w.StartAgent(n, opts[n])
	}
	first := "stable@" + w.Release("v0", 1, "stable")
	realfleet.Eventually(t, 60*time.Second, "the hosts converge on v0", func() bool {
		r, ok := w.Rollout(first)
		return ok && r.Counts[string(reconciler.HostConverged)] == len(names)
	})

	id := "stable@" + w.Release("v1", 2, "stable")
	w.LogOnFailure(id)
	cycled := map[string]bool{}
	realfleet.Eventually(t, 120*time.Second, "a-ok converges and b-back's failed boot halts the rollout", func() bool {
		for _, n := range names {
			h := w.Host(n)
			if cycled[n] || len(h.Reboots(t)) == 0 {
				continue
			}
			// Ordered to reboot: it is staged, not the default yet.
			if got := h.Profile(t); got != v0[n].Path {
				t.Errorf("%s ordered its reboot with its profile on %s, want v0", n, got)
			}
			procs[n].Kill()
			booted := h.PowerCycle(t, n == "b-back")
			if want := map[bool]string{false: v1[n].Path, true: v0[n].Path}[n == "b-back"]; booted != want {
				t.Fatalf("%s booted %s, want %s", n, booted, want)
			}
			procs[n] = w.StartAgent(n, opts[n])
			cycled[n] = true
		}
		r, ok := w.Rollout(id)
		return ok && r.State == string(reconciler.RolloutHalted) && w.States(id)["a-ok"] == reconciler.HostConverged
	})

	states := w.States(id)
	if c := states["c-never"]; states["b-back"] != reconciler.HostFailed || (c != reconciler.HostPending && c != reconciler.HostDeferred) {
		t.Errorf("after the halt: %v; want b-back Failed, c-never Pending or Deferred", states)
	}
	if got := w.Host("c-never").Profile(t); got != v0["c-never"].Path {
		t.Errorf("c-never's profile is %s, want v0", got)
	}
	if got := w.Host("a-ok").Profile(t); got != v1["a-ok"].Path {
		t.Errorf("a-ok's profile is %s, want v1 after its confirm", got)
	}
	if got := w.Host("b-back").Profile(t); got != v0["b-back"].Path {
		t.Errorf("b-back's profile is %s, want v0: its staged entry never became the default", got)
	}
	if got := w.Host("c-never").Reboots(t); len(got) != 0 {
		t.Errorf("c-never rebooted: %q", got)
	}
	w.JournalMentions(id, map[string]string{"a-ok": "Converged soaked", "b-back": "Failed " + codes.BootFailed})

	// Replayed tick by tick: at most one host in flight, and every host
	// that converged was rebooted first.
	evs := w.Events(id)
	state := map[string]reconciler.HostState{}
	rebooted := map[string]bool{}
	for i, ev := range evs {
		if ev.Kind == reconciler.EventHostTransition {
			state[ev.Host] = reconciler.HostState(ev.To)
			rebooted[ev.Host] = rebooted[ev.Host] || ev.To == string(reconciler.HostRebooting)
			if ev.To == string(reconciler.HostConverged) && !rebooted[ev.Host] {
				t.Errorf("%s converged without a reboot order", ev.Host)
			}
		}
		if i == len(evs)-1 || !evs[i+1].At.Equal(ev.At) {
			var flying []string
			for h, s := range state {
				if s.InFlight() {
					flying = append(flying, h)
				}
			}
			if len(flying) > 1 {
				slices.Sort(flying)
				t.Errorf("after the tick at %s, %v are in flight; the budget allows one", ev.At.Format(time.RFC3339Nano), flying)
			}
		}
	}
}
