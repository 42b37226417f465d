package reconciler_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// TestPrefetchFor: a host may fetch its target ahead of its dispatch while
// it is Pending or Skipped in an Active rollout, unless it runs it, holds
// it prefetched already, or the quarantine gate holds it; Coming names the
// same closure whether or not the host holds it already.
func TestPrefetchFor(t *testing.T) {
	t.Parallel()
	const target, old, other = "/nix/store/new", "/nix/store/old", "/nix/store/other"
	want := proto.PrefetchTarget{RolloutID: "stable@abc", Closure: target, WaveIndex: 1, ManifestHash: "m1"}
	budget := rc.Reason{Gate: codes.Budget, Code: codes.Budget, Message: "budget full"}
	quarantined := rc.Reason{Gate: codes.Quarantined, Code: codes.Quarantined, Message: "failed here"}
	host := func(state rc.HostState, blocked rc.Reason) rc.RolloutHost {
		return rc.RolloutHost{State: state, Blocked: blocked}
	}
	noTarget := assigned(rc.RolloutActive, host(rc.HostPending, rc.Reason{}))
	noTarget.Host.Target = ""
	cases := []struct {
		name                string
		a                   *rc.Assignment
		current, prefetched string
		// coming: Coming names the target; fetch: PrefetchFor does.
		coming, fetch bool
	}{
		{"no rollout", nil, old, "", false, false},
		{"pending in an active rollout", assigned(rc.RolloutActive, host(rc.HostPending, rc.Reason{})), old, "", true, true},
		{"pending, held by a budget", assigned(rc.RolloutActive, host(rc.HostPending, budget)), old, "", true, true},
		{"pending, an older closure prefetched", assigned(rc.RolloutActive, host(rc.HostPending, rc.Reason{})), old, other, true, true},
		{"pending, prefetched already", assigned(rc.RolloutActive, host(rc.HostPending, rc.Reason{})), old, target, true, false},
		{"pending, runs its target", assigned(rc.RolloutActive, host(rc.HostPending, rc.Reason{})), target, "", false, false},
		{"pending, never heard", assigned(rc.RolloutActive, host(rc.HostPending, rc.Reason{})), "", "", true, true},
		{"pending, quarantined", assigned(rc.RolloutActive, host(rc.HostPending, quarantined)), old, "", false, false},
		{"pending, no target", noTarget, old, "", false, false},
		{"skipped in an active rollout", assigned(rc.RolloutActive, host(rc.HostSkipped, rc.Reason{})), old, "", true, true},
		{"pending in an opening rollout", assigned(rc.RolloutOpening, host(rc.HostPending, rc.Reason{})), old, "", false, false},
		{"pending in a halted rollout", assigned(rc.RolloutHalted, host(rc.HostPending, rc.Reason{})), old, "", false, false},
		{"pending in a cancelled rollout", assigned(rc.RolloutCancelled, host(rc.HostPending, rc.Reason{})), old, "", false, false},
		{"skipped in a converged rollout", assigned(rc.RolloutConverged, host(rc.HostSkipped, rc.Reason{})), old, "", false, false},
		{"pending in a reverting rollout", assigned(rc.RolloutReverting, host(rc.HostPending, rc.Reason{})), old, "", false, false},
		{"activating", assigned(rc.RolloutActive, host(rc.HostActivating, rc.Reason{})), old, "", false, false},
		{"soaking", assigned(rc.RolloutActive, host(rc.HostSoaking, rc.Reason{})), target, "", false, false},
		{"deferred", assigned(rc.RolloutActive, host(rc.HostDeferred, rc.Reason{})), old, target, false, false},
		{"failed", assigned(rc.RolloutActive, host(rc.HostFailed, rc.Reason{})), old, "", false, false},
		{"rolling back", assigned(rc.RolloutActive, host(rc.HostRollingBack, rc.Reason{})), target, "", false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, f := range []struct {
				name string
				want bool
				call func() (proto.PrefetchTarget, bool)
			}{
				{"Coming", c.coming, func() (proto.PrefetchTarget, bool) { return rc.Coming(c.a, c.current) }},
				{"PrefetchFor", c.fetch, func() (proto.PrefetchTarget, bool) { return rc.PrefetchFor(c.a, c.current, c.prefetched) }},
			} {
				got, ok := f.call()
				if ok != f.want {
					t.Fatalf("%s: ok %v, want %v (%+v)", f.name, ok, f.want, got)
				}
				wantT := proto.PrefetchTarget{}
				if ok {
					wantT = want
				}
				if d := cmp.Diff(wantT, got); d != "" {
					t.Errorf("%s (-want +got):\n%s", f.name, d)
				}
			}
		})
	}
}

// TestSituationPrefetched: a waiting host whose agent holds its target
// prefetched says so, with the same code, moves and next step as without;
// a prefetched closure that is not the target, or a host that no longer
// waits, says nothing of it.
func TestSituationPrefetched(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	r := rc.Rollout{ID: "stable@abc", State: rc.RolloutActive, Wave: 0, WavePhase: rc.PhaseSoaking, Waves: []rc.WaveSpec{{SoakMinutes: 10}, {}}}
	budget := rc.Reason{Gate: codes.Budget, Code: codes.Budget, Message: "disruption budget web is full"}
	cases := []struct {
		name       string
		host       rc.RolloutHost
		prefetched string
		says       bool
	}{
		{"a later wave", rc.RolloutHost{State: rc.HostPending, Wave: 1, Target: "new"}, "new", true},
		{"held by a budget", rc.RolloutHost{State: rc.HostPending, Target: "new", Blocked: budget}, "new", true},
		{"skipped", rc.RolloutHost{State: rc.HostSkipped, Target: "new"}, "new", true},
		{"another closure prefetched", rc.RolloutHost{State: rc.HostPending, Wave: 1, Target: "new"}, "older", false},
		{"nothing prefetched", rc.RolloutHost{State: rc.HostPending, Wave: 1, Target: "new"}, "", false},
		{"activating", rc.RolloutHost{State: rc.HostActivating, Target: "new", Since: now}, "new", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.host.Hostname = "web-01"
			without := rc.Situate(rc.Place{Rollout: r, Latest: true, Host: c.host, Online: true}, now, rc.Tunables{})
			with := rc.Situate(rc.Place{Rollout: r, Latest: true, Host: c.host, Online: true, Prefetched: c.prefetched}, now, rc.Tunables{})
			if got := strings.HasSuffix(with.Message, "; its target is prefetched"); got != c.says {
				t.Fatalf("says prefetched: %v, want %v: %q", got, c.says, with.Message)
			}
			with.Message = strings.TrimSuffix(with.Message, "; its target is prefetched")
			if d := cmp.Diff(without, with); d != "" {
				t.Errorf("prefetch changes more than the message (-without +with):\n%s", d)
			}
		})
	}
}
