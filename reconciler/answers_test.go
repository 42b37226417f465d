package reconciler_test

import (
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// assigned is a host record in a rollout, for the answer tests.
func assigned(state rc.RolloutState, h rc.RolloutHost) *rc.Assignment {
	h.Hostname, h.Wave = "web-01", 1
	h.Target, h.Previous = "/nix/store/new", "/nix/store/old"
	h.Since = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return &rc.Assignment{RolloutID: "stable@abc", Channel: "stable", RolloutState: state, ManifestHash: "m1", Host: h}
}

// TestAgentAnswer: what an agent is told follows from its host record
// alone: a dispatch or rollback target with its token and confirm deadline
// while the host is switching, the gate that holds it while Pending, and
// nothing to do otherwise.
func TestAgentAnswer(t *testing.T) {
	t.Parallel()
	tu := rc.Tunables{}
	held := rc.Reason{Gate: codes.Budget, Code: codes.Budget, Message: "budget full"}
	cases := []struct {
		name          string
		a             *rc.Assignment
		kind, closure string
		code          string
		next          int
	}{
		{"no rollout", nil, "", "", codes.NotInRollout, rc.IdleCheckinSeconds},
		{"activating", assigned(rc.RolloutActive, rc.RolloutHost{State: rc.HostActivating, Reason: rc.Reason{Code: codes.Dispatched}}),
			proto.TargetDispatch, "/nix/store/new", codes.Dispatched, rc.SwitchingCheckinSeconds},
		{"rolling back", assigned(rc.RolloutReverting, rc.RolloutHost{State: rc.HostRollingBack, Reason: rc.Reason{Code: codes.RollbackDispatched}}),
			proto.TargetRollback, "/nix/store/old", codes.RollbackDispatched, rc.SwitchingCheckinSeconds},
		{"held by a gate", assigned(rc.RolloutActive, rc.RolloutHost{State: rc.HostPending, Blocked: held}),
			"", "", codes.Budget, rc.IdleCheckinSeconds},
		{"pending in a halted rollout", assigned(rc.RolloutHalted, rc.RolloutHost{State: rc.HostPending, Blocked: held}),
			"", "", codes.RolloutStopped, rc.IdleCheckinSeconds},
		{"pending, nothing recorded", assigned(rc.RolloutActive, rc.RolloutHost{State: rc.HostPending}),
			"", "", codes.Waiting, rc.IdleCheckinSeconds},
		{"soaking", assigned(rc.RolloutActive, rc.RolloutHost{State: rc.HostSoaking, Reason: rc.Reason{Code: codes.Confirmed}}),
			"", "", codes.Confirmed, rc.SoakingCheckinSeconds},
		{"converged", assigned(rc.RolloutConverged, rc.RolloutHost{State: rc.HostConverged, Reason: rc.Reason{Code: codes.Soaked}}),
			"", "", codes.Soaked, rc.IdleCheckinSeconds},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := rc.AgentAnswer(c.a, tu)
			if got.Reason.Code != c.code || got.NextCheckinSeconds != c.next {
				t.Fatalf("answer %+v, want code %s and next check-in %d s", got, c.code, c.next)
			}
			if c.kind == "" {
				if got.Target != nil {
					t.Fatalf("told to run %+v, want nothing", got.Target)
				}
				return
			}
			tg := got.Target
			if tg == nil || tg.Kind != c.kind || tg.Closure != c.closure || tg.RolloutID != c.a.RolloutID ||
				tg.WaveIndex != 1 || tg.ManifestHash != "m1" {
				t.Fatalf("target %+v, want %s to %s", tg, c.kind, c.closure)
			}
			if tg.Token != c.a.Token() || tg.ConfirmBy != c.a.ConfirmBy(tu).Format(time.RFC3339) {
				t.Fatalf("token %s confirm by %s, want %s and %s", tg.Token, tg.ConfirmBy, c.a.Token(), c.a.ConfirmBy(tu).Format(time.RFC3339))
			}
		})
	}
}

// TestActivationTokenChanges: a later activation of the same closure on
// the same host has another token, so that its confirm cannot be replayed.
func TestActivationTokenChanges(t *testing.T) {
	t.Parallel()
	a := assigned(rc.RolloutActive, rc.RolloutHost{State: rc.HostActivating})
	b := *a
	b.Host.Since = b.Host.Since.Add(time.Microsecond)
	if a.Token() == b.Token() || len(a.Token()) != 24 {
		t.Fatalf("tokens %s and %s", a.Token(), b.Token())
	}
}

// TestHeard: a host is heard up to the offline threshold after its last
// check-in, never when it was never seen.
func TestHeard(t *testing.T) {
	t.Parallel()
	tu := rc.Tunables{}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if tu.Heard(time.Time{}, now) || !tu.Heard(now.Add(-tu.OfflineThreshold()), now) ||
		tu.Heard(now.Add(-tu.OfflineThreshold()-time.Second), now) || !tu.Heard(now.Add(time.Minute), now) {
		t.Fatal("heard disagrees with the offline threshold")
	}
}

// TestCheckinUrgent: a check-in reaches a tick at once when its host was
// late, when it is the first at or after its soak's end, or when a host
// rolling back is seen on its previous closure; not otherwise.
func TestCheckinUrgent(t *testing.T) {
	t.Parallel()
	tu := rc.Tunables{}
	since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	soakEnd := since.Add(10 * time.Minute)
	soaking := assigned(rc.RolloutActive, rc.RolloutHost{State: rc.HostSoaking})
	soaking.Soak = soakEnd.Sub(soaking.Host.Since)
	rolling := assigned(rc.RolloutReverting, rc.RolloutHost{State: rc.HostRollingBack})
	pending := assigned(rc.RolloutActive, rc.RolloutHost{State: rc.HostPending})
	for _, c := range []struct {
		name    string
		a       *rc.Assignment
		current string
		now     time.Time
		want    bool
	}{
		{"no rollout", nil, "/nix/store/old", soakEnd, false},
		{"soaking, before its end", soaking, "/nix/store/new", soakEnd.Add(-time.Nanosecond), false},
		{"soaking, at its end", soaking, "/nix/store/new", soakEnd, true},
		{"soaking, after its end", soaking, "/nix/store/new", soakEnd.Add(time.Hour), true},
		{"rolling back, still on the target", rolling, "/nix/store/new", soakEnd, false},
		{"rolling back, on the previous closure", rolling, "/nix/store/old", since, true},
		{"pending", pending, "/nix/store/old", soakEnd, false},
	} {
		if got := rc.EndsWait(c.a, c.current, c.now); got != c.want {
			t.Errorf("%s: EndsWait %v, want %v", c.name, got, c.want)
		}
	}
	now := since.Add(time.Hour)
	for _, c := range []struct {
		name     string
		lastSeen time.Time
		ends     bool
		want     bool
	}{
		{"never seen", time.Time{}, false, true},
		{"seen just now", now.Add(-time.Second), false, false},
		{"seen at the late threshold", now.Add(-tu.LateAfter()), false, false},
		{"seen before the late threshold", now.Add(-tu.LateAfter() - time.Nanosecond), false, true},
		{"seen just now, ending its soak", now.Add(-time.Second), true, true},
	} {
		if got := tu.CheckinUrgent(c.lastSeen, now, c.ends); got != c.want {
			t.Errorf("%s: CheckinUrgent %v, want %v", c.name, got, c.want)
		}
	}
}

// TestDrives: the rollout where a host is in flight drives it; among
// rollouts where it is not (or where it is in both), the newest by
// opening time, then id.
func TestDrives(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rec := func(id string, state rc.HostState) rc.Assignment {
		return rc.Assignment{RolloutID: id, Host: rc.RolloutHost{Hostname: "web-01", State: state}}
	}
	for _, c := range []struct {
		name    string
		a       rc.Assignment
		aOpened time.Time
		b       rc.Assignment
		bOpened time.Time
		want    bool
	}{
		{"newer, both idle", rec("s@2", rc.HostPending), t0.Add(time.Minute), rec("s@1", rc.HostConverged), t0, true},
		{"older, both idle", rec("s@1", rc.HostConverged), t0, rec("s@2", rc.HostPending), t0.Add(time.Minute), false},
		{"older, in flight", rec("s@1", rc.HostSoaking), t0, rec("s@2", rc.HostPending), t0.Add(time.Minute), true},
		{"newer, the other in flight", rec("s@2", rc.HostPending), t0.Add(time.Minute), rec("s@1", rc.HostRollingBack), t0, false},
		{"same time, greater id", rec("s@b", rc.HostPending), t0, rec("s@a", rc.HostPending), t0, true},
		{"itself", rec("s@a", rc.HostPending), t0, rec("s@a", rc.HostPending), t0, false},
	} {
		if got := rc.Drives(c.a, c.aOpened, c.b, c.bOpened); got != c.want {
			t.Errorf("%s: Drives %v, want %v", c.name, got, c.want)
		}
	}
}

// TestOccupancy: a budget's occupancy is its hosts in flight, out of the
// smaller of its two limits.
func TestOccupancy(t *testing.T) {
	t.Parallel()
	two, fifty := 2, 50
	budgets := []proto.RolloutBudget{
		{Name: "web", MaxInFlight: &two, Hosts: []string{"web-1", "web-2", "web-3"}},
		{Name: "db", MaxInFlightPct: &fifty, Hosts: []string{"db-1", "db-2", "db-3", "db-4"}},
	}
	flying := map[string]bool{"web-1": true, "web-3": true, "db-2": true, "other": true}
	got := rc.Occupancy(budgets, func(h string) bool { return flying[h] })
	want := []rc.BudgetUse{{Name: budgets[0].Label(), InFlight: 2, Limit: 2}, {Name: budgets[1].Label(), InFlight: 1, Limit: 2}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Occupancy = %+v, want %+v", got, want)
	}
}
