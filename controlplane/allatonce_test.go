package controlplane_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/trust"
)

// labBudget is the budget of the all-at-once channel of allAtOnceSpec.
const labBudget = 2

// allAtOnceSpec is two channels side by side: lab, rolled out all at once
// (no waves: waves.lab is an empty list, as the reference Nix library
// writes for strategy all-at-once), six hosts at most two in flight; and
// stable, a canary (wave 0) before three web hosts (wave 1).
func allAtOnceSpec() fleetrepo.Spec {
	lab := "lab"
	limit := labBudget
	return fleetrepo.Spec{
		Channels: map[string][]int{"lab": {}, "stable": {0, 0}},
		Hosts: []fleetrepo.Host{
			fleetrepo.NewHost("canary", "stable", 0), fleetrepo.NewHost("web-1", "stable", 1),
			fleetrepo.NewHost("web-2", "stable", 1), fleetrepo.NewHost("web-3", "stable", 1),
			fleetrepo.NewHost("lab-1", "lab", 0), fleetrepo.NewHost("lab-2", "lab", 0),
			fleetrepo.NewHost("lab-3", "lab", 0), fleetrepo.NewHost("lab-4", "lab", 0),
			fleetrepo.NewHost("lab-5", "lab", 0), fleetrepo.NewHost("lab-6", "lab", 0),
		},
		Budgets: []proto.DisruptionBudget{{Selector: proto.Selector{Channel: &lab}, MaxInFlight: &limit}},
	}
}

// TestAllAtOnceNextToCanary: a release of a fleet with a channel rolled
// out all at once next to a canary channel, signed by CI and promoted on
// both channels, rolls out on a real control plane with simulated agents
// that verify their manifests: the all-at-once channel's rollout has one
// wave holding all six hosts, dispatched in it two at a time by its budget
// (never more in flight, counting every rollout, and at some point both
// slots used), and converges without a wave promotion; the canary channel
// goes wave by wave, its web hosts dispatched only once its canary
// converged and wave 0 was promoted. Every host ends on the release.
func TestAllAtOnceNextToCanary(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			spec := allAtOnceSpec()
			e := newEnv(t, backend, spec, nil)
			roots, err := trust.ParseRoots(e.repo.TrustJSON())
			if err != nil {
				t.Fatal(err)
			}
			hosts := e.hosts()
			for _, h := range hosts {
				h.Roots = roots
			}
			ctx := context.Background()
			viewer := e.client(e.viewKey.priv, "victor")
			converged := func(id string, n int) bool {
				var r proto.Rollout
				return viewer.Get(ctx, "/v1/rollouts/"+id, &r) == nil && r.State == string(reconciler.RolloutConverged) &&
					r.Counts[string(reconciler.HostConverged)] == n
			}
			step := func() {
				for _, h := range hosts {
					if err := h.Step(ctx, 0); err != nil {
						t.Logf("%s: %v", h.Name, err)
					}
				}
			}
			defer func() {
				if t.Failed() {
					for name, h := range hosts {
						t.Logf("%s did: %q", name, h.Log)
					}
					for _, id := range []string{rolloutID("lab", 2), rolloutID("stable", 2)} {
						var raw json.RawMessage
						_ = viewer.Get(ctx, "/v1/rollouts/"+id, &raw)
						t.Logf("%s: %s", id, raw)
					}
				}
			}()

			// The first release (what the hosts run) opened before any
			// of them checked in: they check in and it converges.
			e.await(20*time.Second, "the hosts converge on the first release", func() bool {
				step()
				return converged(rolloutID("lab", 1), 6) && converged(rolloutID("stable", 1), 4)
			})

			e.release("v1", 2)
			e.await(20*time.Second, "both channels converge on the second release", func() bool {
				step()
				return converged(rolloutID("lab", 2), 6) && converged(rolloutID("stable", 2), 4)
			})
			for name, h := range hosts {
				if want := fleetrepo.Closure(name, "v1"); h.Current() != want {
					t.Errorf("%s runs %s, want %s", name, h.Current(), want)
				}
			}

			// The lab rollout: one wave, every host in it.
			var lab proto.Rollout
			if err := viewer.Get(ctx, "/v1/rollouts/"+rolloutID("lab", 2), &lab); err != nil {
				t.Fatal(err)
			}
			if len(lab.Waves) != 1 || lab.Waves[0].SoakMinutes != 0 {
				t.Errorf("lab's rollout has waves %+v, want one without soak", lab.Waves)
			}
			for _, h := range lab.Hosts {
				if h.Wave != 0 {
					t.Errorf("lab's rollout has %s in wave %d, want 0", h.Hostname, h.Wave)
				}
			}

			var evs struct {
				Events []proto.Event `json:"events"`
			}
			if err := viewer.Get(ctx, "/v1/events?limit=10000", &evs); err != nil {
				t.Fatal(err)
			}
			checkAllAtOnceJournal(t, spec, evs.Events)
		})
	}
}

// checkAllAtOnceJournal replays the journal, tick by tick (the events of
// one tick share its time), and checks the budget of the lab channel,
// counting its hosts in flight in every rollout, and the order in which
// each channel dispatched the second release.
func checkAllAtOnceJournal(t *testing.T, spec fleetrepo.Spec, evs []proto.Event) {
	t.Helper()
	channelOf := map[string]string{}
	for _, h := range spec.Hosts {
		channelOf[h.Name] = h.Channel
	}
	inFlight := func(s string) bool {
		switch reconciler.HostState(s) {
		case reconciler.HostActivating, reconciler.HostSoaking, reconciler.HostRollingBack:
			return true
		}
		return false
	}
	labID, stableID := rolloutID("lab", 2), rolloutID("stable", 2)
	state := map[[2]string]string{} // (rollout, host) → state
	most := 0                       // lab hosts in flight in labID at the end of a tick, at most
	labDispatched := 0
	canaryConverged, wave0Promoted := false, false
	// flying counts the lab hosts in flight in a rollout ("": in any).
	flying := func(rollout string) int {
		n := 0
		for host, ch := range channelOf {
			if ch != "lab" {
				continue
			}
			for key, s := range state {
				if key[1] == host && (rollout == "" || key[0] == rollout) && inFlight(s) {
					n++
					break
				}
			}
		}
		return n
	}
	for i, ev := range evs {
		if ev.Kind == reconciler.EventHostTransition {
			state[[2]string{ev.RolloutID, ev.Host}] = ev.To
		}
		switch {
		case ev.RolloutID == labID && ev.Kind == reconciler.EventWavePromoted:
			t.Errorf("lab's rollout promoted wave %d; its one wave ends with the rollout", ev.Wave)
		case ev.RolloutID == labID && ev.Kind == reconciler.EventHostTransition && ev.To == string(reconciler.HostActivating):
			labDispatched++
			if ev.Wave != 0 {
				t.Errorf("lab's %s was dispatched in wave %d, want 0", ev.Host, ev.Wave)
			}
		case ev.RolloutID == stableID && ev.Kind == reconciler.EventHostTransition && ev.Host == "canary" && ev.To == string(reconciler.HostConverged):
			canaryConverged = true
		case ev.RolloutID == stableID && ev.Kind == reconciler.EventWavePromoted && ev.Wave == 0:
			if !canaryConverged {
				t.Errorf("stable's wave 0 was promoted before its canary converged")
			}
			wave0Promoted = true
		case ev.RolloutID == stableID && ev.Kind == reconciler.EventHostTransition && ev.To == string(reconciler.HostActivating) && ev.Host != "canary":
			if !wave0Promoted || ev.Wave != 1 {
				t.Errorf("stable's %s was dispatched in wave %d before wave 0 was promoted", ev.Host, ev.Wave)
			}
		}
		if last := i == len(evs)-1; last || !evs[i+1].At.Equal(ev.At) {
			if n := flying(""); n > labBudget {
				t.Errorf("after the tick at %s, %d lab hosts are in flight; the budget allows %d", ev.At.Format(time.RFC3339Nano), n, labBudget)
			}
			most = max(most, flying(labID))
		}
	}
	if labDispatched != 6 {
		t.Errorf("lab's rollout dispatched %d hosts, want 6", labDispatched)
	}
	if most != labBudget {
		t.Errorf("at most %d lab hosts were in flight at once in %s, want the budget's %d: the channel did not go all at once", most, labID, labBudget)
	}
	if !wave0Promoted {
		t.Error("stable's wave 0 was never promoted")
	}
}
