package reconciler_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// promises are phrases that say something will happen by itself: an
// answer may use them only when its situation moves.
var promises = []string{"will", "next tick", "catches up", "converges at", "waits for", "in turn", "confirms by"}

// TestSituationEveryPair judges a host in every host state, in a rollout
// in every state, with every gate a Pending host can carry, online and
// not, latest and not, rebooting staged hosts (rule 17) and not: the answer never promises what cannot happen, a
// host of a rollout that dispatches no more is never shown as held by a
// gate, and an answer that does not move says what an operator can do.
func TestSituationEveryPair(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tu := rc.Tunables{}
	gates := []rc.Reason{{}, {Gate: codes.Budget, Code: codes.Budget, Message: "disruption budget web is full"},
		{Gate: codes.Quarantined, Code: codes.Quarantined, Message: "its target failed here"},
		{Gate: codes.HostEdge, Code: codes.HostEdge, Message: "db-1 has not converged"},
		{Gate: codes.PartialVisibility, Code: codes.PartialVisibility, Message: "channel is in partial visibility"}}
	reasons := []rc.Reason{{Code: codes.OperatorPause, Message: "pause by alice"}, {Code: codes.HealthFailure, Message: "2 failed"},
		{Code: codes.RevertStalled, Message: "no progress"}}
	n := 0
	for _, rs := range rc.RolloutStates {
		for _, reason := range reasons {
			for _, hs := range rc.HostStates {
				for _, gate := range gates {
					for _, wave := range []int{0, 1} {
						for flags := range 8 {
							online, latest := flags&1 != 0, flags&2 != 0
							r := rc.Rollout{ID: "stable@abc", Channel: "stable", State: rs, Reason: reason, Wave: 0,
								WavePhase: rc.WavePhase("dispatching"), Waves: []rc.WaveSpec{{SoakMinutes: 10}, {SoakMinutes: 0}}}
							if flags&4 != 0 {
								r.Reboot = &proto.Reboot{Allowed: true, BootTimeoutMinutes: 10}
								r.Waves[0].Reboot, r.Waves[1].Reboot = true, true
							}
							h := rc.RolloutHost{Hostname: "web-01", Wave: wave, State: hs, Since: now.Add(-time.Minute),
								Target: "t-web-01-v2", Previous: "t-web-01-v1", Reason: rc.Reason{Code: codes.Dispatched, Message: "why"}}
							if hs == rc.HostPending || hs == rc.HostSkipped || hs == rc.HostDeferred || (rs == rc.RolloutReverting && hs != rc.HostReverted) {
								h.Blocked = gate // a staged host's reboot passes gates too (rule 17)
							}
							if flags&1 != 0 && hs == rc.HostConverged {
								h.Previous = h.Target // a host the release did not change
							}
							s := rc.Situate(rc.Place{Rollout: r, Latest: latest, Host: h, Online: online}, now, tu)
							n++
							what := fmt.Sprintf("%s host (wave %d, gate %q, online %v, latest %v, reboots %v) in a %s rollout (%s): %+v",
								hs, wave, gate.Gate, online, latest, r.Reboot != nil, rs, reason.Code, s)
							checkSituation(t, what, r, h, latest, s)
						}
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no pair judged")
	}
}

func checkSituation(t *testing.T, what string, r rc.Rollout, h rc.RolloutHost, latest bool, s rc.Situation) {
	t.Helper()
	if s.Message == "" || !codes.Registered(codes.Code(s.Code)) {
		t.Errorf("%s: no message, or an unregistered code", what)
	}
	if !s.Moves {
		for _, p := range promises {
			if strings.Contains(s.Message, p) {
				t.Errorf("%s: promises %q but nothing moves it", what, p)
			}
		}
	}
	dispatching := r.State == rc.RolloutActive || r.State == rc.RolloutOpening ||
		(r.State == rc.RolloutConverged && latest && h.State == rc.HostSkipped)
	waiting := h.State == rc.HostPending || h.State == rc.HostSkipped
	back := h.State == rc.HostSoaking || h.State == rc.HostConverged || h.State == rc.HostDeferred || h.State == rc.HostFailed
	sentBack := r.State == rc.RolloutReverting && back && h.Previous != h.Target
	switch {
	case waiting && !dispatching:
		if s.Moves || s.Code != codes.RolloutStopped {
			t.Errorf("%s: a rollout that dispatches no more shows the host as waiting", what)
		}
	case h.State.InFlight() && !sentBack:
		if !s.Moves || s.Until.IsZero() {
			t.Errorf("%s: a host in flight lands by itself, at a known time", what)
		}
	}
	done := h.State == rc.HostConverged || h.State == rc.HostReverted || (r.State == rc.RolloutReverting && waiting)
	if !s.Moves && !done && s.Next == "" {
		t.Errorf("%s: nothing moves it and no next step is named", what)
	}
	// A host a revert sends back (rfcs/0003 rule 9) moves unless a gate
	// that does not clear holds it, and is not said to converge.
	if sentBack {
		stuck := h.Blocked.Code == codes.Quarantined || h.Blocked.Code == codes.NoPreviousClosure
		if s.Moves == stuck || strings.Contains(s.Message, "converges") {
			t.Errorf("%s: a host the revert sends back", what)
		}
	}
	if waiting && r.State == rc.RolloutHalted && r.Reason.Code == codes.OperatorPause && !strings.Contains(s.Next, "resume") {
		t.Errorf("%s: a paused rollout's host does not name resume", what)
	}
}

// TestSituationPausedWithRoomInTheBudget: the gate the last tick recorded
// (a full budget) is not what holds a host of a paused rollout; the pause
// is, and resume is the way on.
func TestSituationPausedWithRoomInTheBudget(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	r := rc.Rollout{ID: "stable@abc", State: rc.RolloutHalted, Reason: rc.Reason{Code: codes.OperatorPause, Message: "pause by alice"},
		Waves: []rc.WaveSpec{{}}}
	h := rc.RolloutHost{Hostname: "web-01", State: rc.HostPending,
		Blocked: rc.Reason{Gate: codes.Budget, Code: codes.Budget, Message: "disruption budget web is full"}}
	s := rc.Situate(rc.Place{Rollout: r, Latest: true, Host: h, Online: true}, now, rc.Tunables{})
	if s.Code != codes.RolloutStopped || strings.Contains(s.Message, "budget") || s.Next != "nixfleet rollout resume stable@abc" {
		t.Fatalf("%+v", s)
	}
}

// TestSituationSoakETA: a soaking host says when it converges.
func TestSituationSoakETA(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 3, 1, 12, 21, 25, 0, time.UTC)
	r := rc.Rollout{ID: "stable@abc", State: rc.RolloutActive, Waves: []rc.WaveSpec{{SoakMinutes: 10}}}
	h := rc.RolloutHost{Hostname: "web-01", State: rc.HostSoaking, Since: since, Target: "t"}
	s := rc.Situate(rc.Place{Rollout: r, Host: h, Online: true}, since.Add(time.Minute), rc.Tunables{})
	if !s.Until.Equal(since.Add(10*time.Minute)) || !strings.Contains(s.Message, "converges at 2026-03-01T12:31:25Z") {
		t.Fatalf("%+v", s)
	}
}
