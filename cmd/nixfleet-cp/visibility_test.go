package main

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/simagent"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// Silence is not failure (rfcs/0003 rule 6), with real nixfleet-cp
// processes on real time: a short offline threshold and a one-second tick
// make the control plane judge (or refuse to judge) silence within a few
// seconds. A host is late after half the threshold, and the control plane
// holds a long-poll for a quarter of it: 6 s leaves a host checking in
// every 1.5 s as much again before it looks late, on a busy machine too.
const (
	offlineThreshold = 6 * time.Second
	tickInterval     = time.Second
)

func silenceFlags() []string {
	return []string{"--offline-threshold", offlineThreshold.String(), "--tick-interval", tickInterval.String()}
}

// runHosts checks hosts in continuously (long-polls of a second) until
// the returned stop is called.
func runHosts(hosts ...*simagent.Host) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.Run(ctx, time.Second)
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// silenceCodes are the reasons a host gets when its silence is judged.
var silenceCodes = []string{codes.Offline, codes.OfflineWhileSoaking, codes.ConfirmTimeout}

// hostMoves lists a journal's host transitions as "host from→to (code)".
func hostMoves(evs []proto.Event) []string {
	var out []string
	for _, e := range evs {
		if e.Kind == reconciler.EventHostTransition {
			out = append(out, e.Host+" "+e.From+"→"+e.To+" ("+e.Reason.Code+")")
		}
	}
	return out
}

// TestLateAgentsCanaryFirst: the channel ref moved before the control plane
// started, and no agent has checked in when it opens the rollout. Nothing
// is skipped and nothing converges on silence: the rollout waits (and,
// once the control plane has watched for the offline threshold, the
// channel is in partial visibility, which /v1/status shows). The wave-1
// hosts arrive first and are held by their wave; the canary arrives last,
// goes first, soaks, and fails its health probe: the rollout halts on its
// health gate before any other host was dispatched.
func TestLateAgentsCanaryFirst(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			f := newGitFleet(t, twoWaveSpec())
			v1 := f.Release("v1")
			cp := startCP(t, newSite(t), f, dbURL(t, backend), "cp-1", silenceFlags()...)
			hosts := fleetHosts(f, cp)
			hosts["canary"].Decide = func(proto.Target) simagent.Action { return simagent.SwitchUnhealthy }
			defer func() {
				if t.Failed() {
					for name, h := range hosts {
						t.Logf("%s did: %q", name, h.Log)
					}
					t.Logf("journal: %q", hostMoves(rolloutEvents(t, cp, v1)))
				}
			}()

			// Nobody is heard: past the control plane's warm-up the channel
			// is in partial visibility, and the rollout still waits.
			eventually(t, 20*time.Second, "the channel is in partial visibility", func() bool {
				var st proto.Status
				if err := cp.Operator().Get(ctx, "/v1/status", &st); err != nil || len(st.Channels) != 1 {
					return false
				}
				v := st.Channels[0].Visibility
				return v != nil && v.Silent == 3 && v.Total == 3 && st.Watch != nil && !st.Watch.WarmingUp
			})
			ro, ok := getRollout(cp, v1)
			if !ok || ro.State != string(reconciler.RolloutActive) || ro.Wave != 0 || ro.Counts[string(reconciler.HostSkipped)] != 0 || ro.Counts[string(reconciler.HostPending)] != 3 {
				t.Fatalf("with no host heard, %s is %s at wave %d with %v; want Active at wave 0, every host Pending", v1, ro.State, ro.Wave, ro.Counts)
			}

			// The wave-1 hosts arrive; the canary, last.
			stopWeb := runHosts(hosts["web-1"], hosts["web-2"])
			defer stopWeb()
			// Heard again, the channel recovers for an offline threshold.
			eventually(t, 3*offlineThreshold, "the web hosts are heard", func() bool {
				var st proto.Status
				return cp.Operator().Get(ctx, "/v1/status", &st) == nil && len(st.Channels) == 1 && st.Channels[0].Visibility == nil
			})
			stopCanary := runHosts(hosts["canary"])
			defer stopCanary()
			eventually(t, 20*time.Second, "the canary's failure halts the rollout", func() bool {
				ro, ok := getRollout(cp, v1)
				return ok && ro.State == string(reconciler.RolloutHalted)
			})
			stopWeb()
			stopCanary()

			ro, _ = getRollout(cp, v1)
			if ro.Reason.Code != codes.HealthFailure || ro.Wave != 0 {
				t.Errorf("%s halted at wave %d for %s (%s), want wave 0 for health_failure", v1, ro.Wave, ro.Reason.Code, ro.Reason.Message)
			}
			moves := hostMoves(rolloutEvents(t, cp, v1))
			for _, m := range moves {
				if !strings.HasPrefix(m, "canary ") {
					t.Errorf("%s moved before the canary's verdict: %s", v1, m)
				}
			}
			for _, want := range []string{"→Activating", "Activating→Soaking (confirmed)", "Soaking→Failed (unhealthy)"} {
				if !slices.ContainsFunc(moves, func(m string) bool { return strings.Contains(m, want) }) {
					t.Errorf("the canary's journal %q lacks %s", moves, want)
				}
			}
			for _, name := range []string{"web-1", "web-2"} {
				if hostState(ro, name) != reconciler.HostPending || slices.ContainsFunc(hosts[name].Log, func(l string) bool { return strings.HasPrefix(l, "dispatch") }) {
					t.Errorf("%s is %s and did %q; want Pending and never dispatched", name, hostState(ro, name), hosts[name].Log)
				}
			}
		})
	}
}

// TestOutageLongerThanOfflineThreshold: nixfleet-cp is killed mid-rollout
// (canary converged, web-1 soaking, web-2 dispatched or soaking, db-1
// pending) and
// stays down for longer than the offline threshold while nothing can
// check in. Restarted, it starts a new watch: no host is skipped or failed
// for the silence it could not hear, the rollout is where it was, and once
// the hosts check in again it goes on to Converged.
func TestOutageLongerThanOfflineThreshold(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			_, cp, hosts, v1 := releasedThreeWaves(t, backend, silenceFlags()...)
			// The wave-1 hosts check in until they have switched, and not
			// after: nothing they say after their confirm can end their
			// (zero-minute) soak before the outage. The canary and db-1 go
			// on checking in.
			switched := func(n string) bool { return hosts[n].Current() == fleetrepo.Closure(n, "v1") }
			eventually(t, 20*time.Second, "wave 0 converges and web-1 switches", func() bool {
				for _, n := range []string{"canary", "db-1", "web-1", "web-2"} {
					if n == "canary" || n == "db-1" || !switched(n) {
						stepAll(t, hosts, n)
					}
				}
				ro, ok := getRollout(cp, v1)
				return ok && hostState(ro, "canary") == reconciler.HostConverged && switched("web-1")
			})
			// The snapshot to compare with is taken once the control plane
			// has taken in all the hosts did: web-1 soaks, and web-2, if
			// its last step switched it, is past its confirm too.
			var before proto.Rollout
			eventually(t, 10*time.Second, "web-1 soaks, and web-2's switch is taken in", func() bool {
				ro, ok := getRollout(cp, v1)
				before = ro
				return ok && hostState(ro, "web-1") == reconciler.HostSoaking &&
					(!switched("web-2") || hostState(ro, "web-2") != reconciler.HostActivating)
			})
			if before.State != string(reconciler.RolloutActive) || before.Wave != 1 || hostState(before, "db-1") != reconciler.HostPending {
				t.Fatalf("before the kill %s is %s at wave %d, db-1 %s; want Active at wave 1, db-1 Pending", v1, before.State, before.Wave, hostState(before, "db-1"))
			}

			cp.Kill()
			time.Sleep(2*offlineThreshold + 2*tickInterval) // longer than the threshold, and than the watch's gap
			cp = cp.Restart()

			// Nobody has checked in since the kill: every host has been silent
			// for longer than the threshold. For one threshold after its
			// restart the control plane judges none of them.
			eventually(t, 10*time.Second, "a new watch starts", func() bool {
				var st proto.Status
				return cp.Operator().Get(ctx, "/v1/status", &st) == nil && st.Watch != nil && st.Watch.WarmingUp
			})
			time.Sleep(2 * tickInterval) // ticks happen, and decide nothing about the silent hosts
			after, ok := getRollout(cp, v1)
			if !ok || after.State != string(reconciler.RolloutActive) || after.Wave != 1 {
				t.Fatalf("after the restart %s is %s at wave %d, want Active at wave 1", v1, after.State, after.Wave)
			}
			for _, h := range before.Hosts {
				if got := hostState(after, h.Hostname); got != reconciler.HostState(h.State) {
					t.Errorf("%s was %s before the outage and is %s after it", h.Hostname, h.State, got)
				}
			}

			converge(t, cp, hosts, v1, 30*time.Second)
			evs := rolloutEvents(t, cp, v1)
			for _, e := range evs {
				if slices.Contains(silenceCodes, e.Reason.Code) {
					t.Errorf("%s was judged for silence: %s→%s (%s: %s)", e.Host, e.From, e.To, e.Reason.Code, e.Reason.Message)
				}
			}
			var all struct {
				Events []proto.Event `json:"events"`
			}
			if err := cp.Operator().Get(ctx, "/v1/events?limit=10000", &all); err != nil {
				t.Fatal(err)
			}
			if n := len(slices.DeleteFunc(all.Events, func(e proto.Event) bool { return e.Kind != reconciler.EventWatchStarted })); n != 2 {
				t.Errorf("%d watch_started events, want 2 (the first start, the restart)", n)
			}
			checkDispatchedOnce(t, hosts, v1)
		})
	}
}
