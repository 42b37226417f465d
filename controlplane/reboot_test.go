package controlplane_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/simagent"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestRebootsUnderABudget (rfcs/0003 rule 17): four hosts in one wave,
// one in flight at a time, whose policy lets the control plane reboot.
// Release v1 changes every host's kernel: each stages it for the next
// boot, is told to reboot (a reboot target, with the dispatch's
// managedReboot before it), boots into it and confirms; the journal,
// replayed tick by tick, never has more than one host in flight
// (Activating, Rebooting, Soaking), and every host converged after a
// reboot order. Release v2: web-2's boot comes up on its previous closure
// and its agent says so: web-2 fails (boot_failed) and the policy,
// rollback-and-halt, reverts the rollout.
func TestRebootsUnderABudget(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			one := 1
			spec := fleetrepo.Spec{
				Channels: map[string][]int{"stable": {0}},
				Hosts: []fleetrepo.Host{fleetrepo.NewHost("web-1", "stable", 0), fleetrepo.NewHost("web-2", "stable", 0),
					fleetrepo.NewHost("web-3", "stable", 0), fleetrepo.NewHost("web-4", "stable", 0)},
				Budgets:         []proto.DisruptionBudget{{Name: "web", Selector: proto.Selector{All: true}, MaxInFlight: &one}},
				OnHealthFailure: proto.OnHealthFailureRollbackAndHalt,
				Reboot:          &proto.Reboot{Allowed: true, BootTimeoutMinutes: 5},
			}
			e := newEnv(t, backend, spec, nil)
			hosts := e.hosts()
			e.onboard(hosts)
			managed := map[string]bool{}
			for _, h := range hosts {
				h.Decide = func(tg proto.Target) simagent.Action {
					managed[h.Name] = managed[h.Name] || tg.ManagedReboot
					return simagent.Defer
				}
				h.BootFails = func(tg proto.Target) bool { return h.Name == "web-2" && tg.Closure == fleetrepo.Closure("web-2", "v2") }
			}
			ctx := context.Background()
			step := func() {
				for _, name := range []string{"web-1", "web-2", "web-3", "web-4"} {
					if err := hosts[name].Step(ctx, 0); err != nil {
						t.Logf("%s: %v", name, err)
					}
				}
			}
			defer func() {
				if t.Failed() {
					for name, h := range hosts {
						t.Logf("%s did: %q", name, h.Log)
					}
				}
			}()

			e.release("v1", 2)
			v1 := rolloutID("stable", 2)
			if backend == "sqlite" {
				// The rollout page while a host reboots: the hosts step
				// until one is told to, then stand still.
				e.await(20*time.Second, "a host is Rebooting", func() bool {
					if rebooting(t, e, v1) != "" {
						return true
					}
					step()
					return rebooting(t, e, v1) != ""
				})
				host := rebooting(t, e, v1)
				ctx := chromium(t)
				login, _, err := e.client(e.opKey.priv, "alice").WebLogin(context.Background(), 0)
				if err != nil {
					t.Fatal(err)
				}
				run(t, ctx, "opening the rollout", chromedp.Navigate(e.url+login.Path), chromedp.WaitVisible(chromedp.CSS("section.channel")),
					chromedp.Navigate(e.url+"/ui/rollouts/"+v1), chromedp.WaitVisible(chromedp.CSS("ul.tiles")))
				tile := text(t, ctx, `a.tile.st-busy[title^="`+host+`: Rebooting"]`)
				if !strings.Contains(tile, "Rebooting") || !strings.Contains(tile, codes.RebootDispatched) {
					t.Errorf("%s's tile says %q, want Rebooting and %s", host, tile, codes.RebootDispatched)
				}
				screenshot(t, ctx, "rollout-rebooting")
			}
			e.await(20*time.Second, "v1 converges", func() bool {
				step()
				return rolloutState(t, e, v1) == reconciler.RolloutConverged
			})
			for name, h := range hosts {
				if h.Current() != fleetrepo.Closure(name, "v1") || !managed[name] {
					t.Errorf("%s runs %s (managed reboot on its dispatch: %v)", name, h.Current(), managed[name])
				}
			}
			evs := journal(t, e)
			checkRebootJournal(t, evs, v1, 1)

			e.release("v2", 3)
			v2 := rolloutID("stable", 3)
			e.await(20*time.Second, "v2 is reverted", func() bool {
				step()
				return rolloutState(t, e, v2) == reconciler.RolloutReverted
			})
			evs = journal(t, e)
			failed := slices.ContainsFunc(evs, func(ev proto.Event) bool {
				return ev.RolloutID == v2 && ev.Host == "web-2" && ev.From == string(reconciler.HostRebooting) &&
					ev.To == string(reconciler.HostFailed) && ev.Reason.Code == codes.BootFailed
			})
			if !failed {
				t.Errorf("no Rebooting → Failed (boot_failed) of web-2 in %s", v2)
			}
			checkRebootJournal(t, evs, v2, 1)
			if got := hosts["web-2"].Current(); got != fleetrepo.Closure("web-2", "v1") {
				t.Errorf("web-2 runs %s after its failed boot, want v1's closure", got)
			}
		})
	}
}

// rebooting is a host Rebooting in a rollout, "" when none.
func rebooting(t *testing.T, e *env, id string) string {
	t.Helper()
	var r proto.Rollout
	if err := e.client(e.viewKey.priv, "victor").Get(context.Background(), "/v1/rollouts/"+id, &r); err != nil {
		return ""
	}
	for _, h := range r.Hosts {
		if h.State == string(reconciler.HostRebooting) {
			return h.Hostname
		}
	}
	return ""
}

func journal(t *testing.T, e *env) []proto.Event {
	t.Helper()
	var evs struct {
		Events []proto.Event `json:"events"`
	}
	if err := e.client(e.viewKey.priv, "victor").Get(context.Background(), "/v1/events?limit=10000", &evs); err != nil {
		t.Fatal(err)
	}
	return evs.Events
}

// checkRebootJournal replays a rollout's host transitions tick by tick
// (the events of one tick share its time): at the end of no tick are more
// than budget hosts in flight, and every host that converged was ordered
// to reboot first.
func checkRebootJournal(t *testing.T, evs []proto.Event, id string, budget int) {
	t.Helper()
	state := map[string]reconciler.HostState{}
	rebooted := map[string]bool{}
	for i, ev := range evs {
		if ev.RolloutID == id && ev.Kind == reconciler.EventHostTransition {
			state[ev.Host] = reconciler.HostState(ev.To)
			switch {
			case ev.To == string(reconciler.HostRebooting):
				rebooted[ev.Host] = true
				if ev.Reason.Code != codes.RebootDispatched {
					t.Errorf("%s: %s → Rebooting with %s", id, ev.Host, ev.Reason.Code)
				}
			case ev.To == string(reconciler.HostConverged) && !rebooted[ev.Host]:
				t.Errorf("%s: %s converged without a reboot order", id, ev.Host)
			}
		}
		if last := i == len(evs)-1; last || !evs[i+1].At.Equal(ev.At) {
			n := 0
			for _, s := range state {
				if s.InFlight() {
					n++
				}
			}
			if n > budget {
				t.Errorf("%s: after the tick at %s, %d hosts are in flight (%v); the budget allows %d", id, ev.At.Format(time.RFC3339Nano), n, state, budget)
			}
		}
	}
	if len(rebooted) == 0 {
		t.Errorf("%s: no host was ordered to reboot", id)
	}
}
