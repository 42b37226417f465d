package main

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/testkit/nixtest"
	"github.com/nixfleet/nixfleet/internal/testkit/realfleet"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// rebooter is a control plane in front of the real one that orders a
// reboot at once, whatever the policy, so that the agent's paths the real
// one reaches only by chance can be driven (TestControlPlaneRebootsWithRealNix
// has the real one order them): a liar that makes the host's dispatch a
// managed reboot, answers every check-in of the staged host with a reboot
// target, and answers the reboot's confirm (accepted, or refused with
// 410) and the reports of the reboot itself. It records what it saw.
type rebooter struct {
	host   *nixtest.Host
	refuse bool // answer the reboot's confirm 410
	// rollback, once the reboot is confirmed, sends a rollback target to
	// this closure.
	rollback string

	mu       sync.Mutex
	dispatch *proto.Target // the managed dispatch
	reboot   *proto.Target
	// confirmedOn is the system profile when the reboot's confirm came.
	confirmedOn string
	reports     []string
}

func (r *rebooter) liar(t *testing.T) liar {
	return liar{
		CheckinFor: func(req proto.CheckinRequest, resp *proto.CheckinResponse) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if d := resp.Target; r.reboot == nil && d != nil && d.Kind == proto.TargetDispatch && d.Closure != req.Current {
				d.ManagedReboot = true
				r.dispatch = d
			}
			if d := r.dispatch; r.reboot == nil && d != nil && req.Deferred {
				r.reboot = &proto.Target{Kind: proto.TargetReboot, RolloutID: d.RolloutID, Closure: d.Closure, WaveIndex: d.WaveIndex,
					ManifestHash: d.ManifestHash, Token: "reboot-" + r.host.Name, Kexec: true,
					ConfirmBy: time.Now().Add(3 * time.Minute).UTC().Format(time.RFC3339)}
			}
			if r.reboot != nil {
				resp.Target = r.reboot
			}
			if r.rollback != "" && r.confirmedOn != "" && !r.refuse {
				resp.Target = &proto.Target{Kind: proto.TargetRollback, RolloutID: r.reboot.RolloutID, Closure: r.rollback,
					WaveIndex: r.reboot.WaveIndex, Token: "rollback-" + r.host.Name,
					ConfirmBy: time.Now().Add(3 * time.Minute).UTC().Format(time.RFC3339)}
			}
		},
		Answer: func(path string, body []byte) (int, any, bool) {
			r.mu.Lock()
			defer r.mu.Unlock()
			switch path {
			case "/v1/agent/confirm":
				var c proto.ConfirmRequest
				if json.Unmarshal(body, &c) != nil || r.reboot == nil || c.Token != r.reboot.Token {
					return 0, nil, false
				}
				r.confirmedOn = r.host.Profile(t)
				if r.refuse {
					return http.StatusGone, proto.Error{Code: codes.ConfirmRejected, Message: "refused by the test"}, true
				}
				return http.StatusOK, struct{}{}, true
			case "/v1/agent/report":
				var rep proto.ReportRequest
				if json.Unmarshal(body, &rep) != nil || r.reboot == nil || rep.Kind == proto.ReportProbeResults {
					return 0, nil, false
				}
				r.reports = append(r.reports, rep.Kind+"/"+rep.Code)
				return http.StatusOK, proto.ReportResponse{Recorded: true}, true
			}
			return 0, nil, false
		},
	}
}

func (r *rebooter) seen() (string, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.confirmedOn, slices.Clone(r.reports)
}

// TestAgentRebootsWithRealNix: reboots the control plane orders
// (rfcs/0008 §Reboots), with real Nix and the real agent, its boot loader
// systemd-boot driven through bootctl and systemctl stubs that record the
// one-shot entry and the reboot (nixtest.Host.LoaderStubs); the test
// powers the host off (kills the agent) and on (nixtest.Host.PowerCycle)
// and starts the agent again. The v1 closures change the kernel, and a
// control plane in front of the real one (rebooter) makes the dispatch a
// managed reboot, then orders the reboot, refuses a confirm or sends a
// rollback where the test needs it:
//
//   - every host stages v1 as a generation of the system profile that is
//     not its default (the profile still v0, switch-to-configuration boot
//     of v0), and orders a reboot once into that generation's entry;
//   - boot-ok boots into it and confirms; only then is v1 the profile
//     and the default entry (switch-to-configuration boot of v1). A
//     rollback target to v0 then crosses the kernel: v0 is made the
//     default again and the host reboots into it, rolled_back;
//   - boot-back comes up on its default entry (v0) instead: boot_failed
//     /boot_fell_back, the profile still v0;
//   - boot-refused boots into v1, its confirm is refused (410): it makes
//     v0 the default entry again and reboots into it, and reports
//     rolled_back/confirm_rejected once on v0;
//   - boot-crash is killed after the one-shot entry is set, before the
//     reboot; restarted on the same boot, it orders the reboot again, and
//     goes on as boot-ok.
func TestAgentRebootsWithRealNix(t *testing.T) {
	names := []string{"boot-ok", "boot-back", "boot-refused", "boot-crash"}
	var hosts []fleetrepo.Host
	change := map[string]nixtest.ClosureSpec{}
	for _, n := range names {
		hosts = append(hosts, fleetrepo.NewHost(n, "stable", 0))
		change[n] = nixtest.ClosureSpec{Kernel: "kernel-2"}
	}
	w := realfleet.New(t, realfleet.Options{Bin: bin, Spec: fleetrepo.Spec{Hosts: hosts, Channels: map[string][]int{"stable": {0}}},
		Change: map[string]map[string]nixtest.ClosureSpec{"v1": change}})
	v0, v1 := w.Closures["v0"], w.Closures["v1"]
	cps := map[string]*rebooter{}
	opts := map[string]realfleet.AgentOptions{}
	procs := map[string]*realfleet.Proc{}
	for i, n := range names {
		h := w.Host(n)
		cps[n] = &rebooter{host: h, refuse: n == "boot-refused"}
		if n == "boot-ok" {
			cps[n].rollback = v0[n].Name
		}
		opts[n] = realfleet.AgentOptions{CP: cps[n].liar(t).serve(w, hosts[i].Key), Env: []string{
			"PATH=" + h.LoaderStubs(t) + string(os.PathListSeparator) + os.Getenv("PATH"),
			"NIXFLEET_AGENT_BOOT_LOADER=systemd-boot", "NIXFLEET_AGENT_BOOT_ID_FILE=" + h.BootIDFile()}}
	}
	first := "stable@" + w.Release("v0", 1, "stable")
	for _, n := range names {
		o := opts[n]
		if n == "boot-crash" {
			o.Env = append(slices.Clone(o.Env), "NIXFLEET_AGENT_TEST_CRASH_AT=before-reboot")
		}
		procs[n] = w.StartAgent(n, o)
	}
	realfleet.Eventually(t, 60*time.Second, "the hosts converge on v0", func() bool {
		r, ok := w.Rollout(first)
		return ok && r.Counts[string(reconciler.HostConverged)] == len(names)
	})

	id := "stable@" + w.Release("v1", 2, "stable")
	w.LogOnFailure(id)
	// boot-crash dies with its one-shot entry set, not rebooted; its
	// restart on the same boot orders the reboot again.
	select {
	case <-procs["boot-crash"].Done():
	case <-time.After(90 * time.Second):
		t.Fatal("the agent of boot-crash did not crash")
	}
	crashed := w.Host("boot-crash")
	if out := procs["boot-crash"].String(); !strings.Contains(out, "fault injection") {
		t.Fatalf("the agent of boot-crash ended without the injected fault:\n%s", out)
	}
	if got := crashed.Reboots(t); len(got) != 0 || crashed.OneShot(t) == "" {
		t.Errorf("boot-crash crashed with reboots %q and one-shot entry %q; want none and one", got, crashed.OneShot(t))
	}
	procs["boot-crash"] = w.StartAgent("boot-crash", opts["boot-crash"])

	realfleet.Eventually(t, 90*time.Second, "every host orders its reboot", func() bool {
		for _, n := range names {
			if len(w.Host(n).Reboots(t)) == 0 {
				return false
			}
		}
		return true
	})
	for _, n := range names {
		h := w.Host(n)
		// Staged, not the default: the profile is v0, a generation is v1,
		// the one-shot entry is that generation's, and only v0's
		// switch-to-configuration boot ran (it writes the entries).
		once := h.OneShot(t)
		gen := strings.TrimSuffix(strings.TrimPrefix(once, "nixos-generation-"), ".conf")
		if got := h.Profile(t); got != v0[n].Path {
			t.Errorf("%s: staged, the profile is %s, want v0 %s", n, got, v0[n].Path)
		}
		if g, err := strconv.Atoi(gen); err != nil || h.Generation(t, g) != v1[n].Path {
			t.Errorf("%s: the one-shot entry %q is not a generation of v1 %s", n, once, v1[n].Path)
		}
		if got := h.SwitchLog(t); !realfleet.Equal(got, []string{"boot " + v0[n].Path}) {
			t.Errorf("%s's switch log after the stage: %q", n, got)
		}
		if got := h.Reboots(t); !realfleet.Equal(got, []string{"kexec"}) {
			t.Errorf("%s's reboots: %q, want one kexec", n, got)
		}
		// Power off, and on: into the one-shot entry, or, for boot-back,
		// the default one.
		procs[n].Kill()
		booted := h.PowerCycle(t, n == "boot-back")
		want := v1[n].Path
		if n == "boot-back" {
			want = v0[n].Path
		}
		if booted != want {
			t.Fatalf("%s booted %s, want %s", n, booted, want)
		}
		procs[n] = w.StartAgent(n, opts[n])
	}

	// boot-refused reboots back into v0, and boot-ok into v0 for the
	// rollback target; power them off and on again.
	realfleet.Eventually(t, 60*time.Second, "boot-refused and boot-ok order their reboots back", func() bool {
		return len(w.Host("boot-refused").Reboots(t)) == 2 && len(w.Host("boot-ok").Reboots(t)) == 2
	})
	for _, n := range []string{"boot-refused", "boot-ok"} {
		h := w.Host(n)
		if got := h.Reboots(t); !realfleet.Equal(got, []string{"kexec", "reboot"}) || h.OneShot(t) != "" {
			t.Errorf("%s reboots back: %q, with the one-shot entry %q; want a reboot, none", n, got, h.OneShot(t))
		}
		procs[n].Kill()
		if booted := h.PowerCycle(t, false); booted != v0[n].Path {
			t.Fatalf("%s booted %s, want v0", n, booted)
		}
		procs[n] = w.StartAgent(n, opts[n])
	}

	want := map[string][]string{
		"boot-ok":      {"rolled_back/" + codes.RollbackRequested},
		"boot-back":    {"boot_failed/" + codes.BootFellBack},
		"boot-refused": {"rolled_back/" + codes.ConfirmRejected},
		"boot-crash":   nil,
	}
	realfleet.Eventually(t, 60*time.Second, "every host is done with its reboot", func() bool {
		for _, n := range names {
			if _, reports := cps[n].seen(); !realfleet.Equal(reports, want[n]) {
				return false
			}
		}
		return w.Host("boot-crash").Profile(t) == v1["boot-crash"].Path
	})

	for _, n := range names {
		h := w.Host(n)
		on, _ := cps[n].seen()
		v0p, v1p := v0[n].Path, v1[n].Path
		var confirmedOn, profile, current string
		var switches []string
		switch n {
		case "boot-ok":
			// Confirmed on v1 while v0 was the default; v1 the default
			// only after; the rollback made v0 the default again
			// (switch-to-configuration boot, then again before the
			// reboot) and rebooted into it.
			confirmedOn, profile, current = v0p, v0p, v0p
			switches = []string{"boot " + v0p, "boot " + v1p, "boot " + v0p, "boot " + v0p}
		case "boot-crash":
			confirmedOn, profile, current = v0p, v1p, v1p
			switches = []string{"boot " + v0p, "boot " + v1p}
		case "boot-back":
			// On v0, its default, which never changed; no confirm.
			profile, current = v0p, v0p
			switches = []string{"boot " + v0p}
		case "boot-refused":
			// Back on v0, made the default again before the reboot.
			confirmedOn, profile, current = v0p, v0p, v0p
			switches = []string{"boot " + v0p, "boot " + v0p}
		}
		if on != confirmedOn {
			t.Errorf("%s confirmed the reboot with the profile on %q, want %q", n, on, confirmedOn)
		}
		if got := h.Profile(t); got != profile {
			t.Errorf("%s's profile is %s, want %s", n, got, profile)
		}
		if got := h.CurrentSystem(t); got != current {
			t.Errorf("%s runs %s, want %s", n, got, current)
		}
		if got := h.SwitchLog(t); !realfleet.Equal(got, switches) {
			t.Errorf("%s's switch log: %q, want %q", n, got, switches)
		}
	}
}
