package main

import (
	"context"
	"crypto/ed25519"
	"slices"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/testkit/nixtest"
	"github.com/nixfleet/nixfleet/internal/testkit/realfleet"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestAgentWithRealNix: a real nixfleet-cp on SQLite over mutual TLS and
// one real nixfleet-agent per host, each host with its own /nix in a
// private mount namespace, realising from a signed binary cache on
// loopback:
//
//   - web-1 gets a good closure: it verifies the manifest, realises,
//     switches, confirms, and converges;
//   - web-2's closure fails to switch: the agent rolls back to the
//     closure it ran before and reports it;
//   - web-3's closure is in the cache unsigned: Nix refuses it, the agent
//     reports closure_unsigned and keeps its system;
//   - a client with a key CI did not sign is refused.
//
// What is asserted comes from the hosts' real links and switch logs and
// from the control plane's journal.
func TestAgentWithRealNix(t *testing.T) {
	names := []string{"web-1", "web-2", "web-3"}
	var hosts []fleetrepo.Host
	for _, n := range names {
		hosts = append(hosts, fleetrepo.NewHost(n, "stable", 0))
	}
	w := realfleet.New(t, realfleet.Options{Bin: bin, Spec: fleetrepo.Spec{Hosts: hosts, Channels: map[string][]int{"stable": {0}}},
		Change:   map[string]map[string]nixtest.ClosureSpec{"v1": {"web-2": {FailSwitch: true}}},
		Unsigned: map[string][]string{"v1": {"web-3"}}})
	first := "stable@" + w.Release("v0", 1, "stable")
	for _, n := range names {
		w.StartAgent(n, realfleet.AgentOptions{})
	}
	// Onboarding: the agents check in, verify the v0 manifest and confirm
	// what they run.
	realfleet.Eventually(t, 60*time.Second, "the hosts converge on v0", func() bool {
		r, ok := w.Rollout(first)
		return ok && r.Counts[string(reconciler.HostConverged)] == len(names)
	})

	id := "stable@" + w.Release("v1", 2, "stable")
	w.LogOnFailure(id)
	v1, v0 := w.Closures["v1"], w.Closures["v0"]
	realfleet.Eventually(t, 90*time.Second, "every host of the v1 rollout is done", func() bool {
		// web-1 confirmed; the failures of the others halt the rollout
		// (healthGate.maxFailures 0), which keeps web-1 Soaking.
		want := map[string][]reconciler.HostState{"web-1": {reconciler.HostSoaking, reconciler.HostConverged},
			"web-2": {reconciler.HostReverted, reconciler.HostFailed}, "web-3": {reconciler.HostFailed}}
		states := w.States(id)
		for _, n := range names {
			if !slices.Contains(want[n], states[n]) {
				return false
			}
		}
		// And web-2 is back on v0.
		return w.Host("web-2").CurrentSystem(t) == v0["web-2"].Path && len(w.Host("web-2").SwitchLog(t)) == 2
	})

	// web-1: on v1 for real, switched once, confirmed.
	if got := w.Host("web-1").CurrentSystem(t); got != v1["web-1"].Path {
		t.Errorf("web-1 runs %s, want %s", got, v1["web-1"].Path)
	}
	if log := w.Host("web-1").SwitchLog(t); !realfleet.Equal(log, []string{"switch " + v1["web-1"].Path}) {
		t.Errorf("web-1's switch log: %q", log)
	}
	// web-2: tried v1, whose switch failed, and switched back to v0.
	if got := w.Host("web-2").CurrentSystem(t); got != v0["web-2"].Path {
		t.Errorf("web-2 runs %s, want its previous %s", got, v0["web-2"].Path)
	}
	if log := w.Host("web-2").SwitchLog(t); !realfleet.Equal(log, []string{"switch " + v1["web-2"].Path, "switch " + v0["web-2"].Path}) {
		t.Errorf("web-2's switch log: %q", log)
	}
	if got := w.Host("web-2").Profile(t); got != v0["web-2"].Path {
		t.Errorf("web-2's system profile is %s, want its previous %s", got, v0["web-2"].Path)
	}
	// web-3: never switched; Nix refused the unsigned closure.
	if got := w.Host("web-3").CurrentSystem(t); got != v0["web-3"].Path {
		t.Errorf("web-3 runs %s, want %s", got, v0["web-3"].Path)
	}
	if log := w.Host("web-3").SwitchLog(t); len(log) != 0 {
		t.Errorf("web-3 switched: %q", log)
	}
	if w.Host("web-3").Valid(t, v1["web-3"].Path) {
		t.Errorf("the unsigned closure is valid in web-3's store")
	}

	// The journal explains each host's end.
	w.JournalMentions(id, map[string]string{"web-1": "Soaking confirmed", "web-2": "switch_failed", "web-3": "closure_unsigned"})

	// A key CI did not sign for any host is refused.
	_, stranger, _ := ed25519.GenerateKey(nil)
	sc, err := apiclient.New(w.CPURL, apiclient.Options{Key: stranger, Name: "web-1", ServerCAs: w.Cert.Pool})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sc.Checkin(context.Background(), proto.CheckinRequest{Hostname: "web-1"})
	if !apiclient.IsCode(err, codes.UnknownClient) {
		t.Errorf("a check-in as web-1 with another key: %v, want %s", err, codes.UnknownClient)
	}
}
