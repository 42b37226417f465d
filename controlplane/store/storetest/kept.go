package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nixfleet/nixfleet/controlplane/kept"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// testKeptEqualsColdLoad is the property of the kept input (package
// kept), which each replica keeps between the ticks of its lease (rfcs/0006
// §Tick loop 3). Randomized sequences of check-ins (statuses, urgent and
// batched last-seen times), confirms and failed activations, operator
// intents (of live, finished and unknown rollouts), releases, manifests
// replaced, prunes, hosts forgotten (PruneHosts), leader changes between
// two replicas with a Keeper each, runs of ticks that read only a few
// changed statuses each (TickParams.MaxStatuses), and ticks whose deferred
// host rows could not be written after they committed (kept.Owed). After
// each: every verifying tick's kept input equals a cold load read in the
// same transaction (TickParams.Verify); the kept view of assignments, and
// those the ticks reported, equal a cold read of the store; and a tick
// made from the kept input decides what Reconcile decides on a cold load
// of the same store by another replica. Each sequence is seeded (the seed
// is logged; NIXFLEET_KEPT_SEED replays one).
func testKeptEqualsColdLoad(t *testing.T, s store.Store) {
	seeds := []uint64{1, 2, 3}
	if v := os.Getenv("NIXFLEET_KEPT_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		must(t, err)
		seeds = []uint64{n}
	}
	m := newSim(t, s)
	fb := testFleet(t)
	all := append(slices.Clone(edgeHosts), stableHosts...)
	m.checkIn(true, all...)
	// Hosts that are not in the fleet any more, last heard an hour ago.
	m.checkIn(false, "retired-1", "retired-2", "retired-3")
	m.release(fb.Build(), fleetkit.Commit(1))
	version := 1
	holders := []string{"replica-a", "replica-b"}
	// Each replica keeps its own input: one that leads again holds what
	// it kept under its previous lease.
	keepers := []*kept.Keeper{m.kept, {}}
	holder := 0
	ticks, verified, full, skipped, partial, forgotten, lostOpens := 0, 0, 0, 0, 0, 0, 0
	keptVerified := 0 // VerifyKept compared something
	hub := &reported{}
	for _, seed := range seeds {
		t.Logf("sequence seed %d", seed)
		rnd := rand.New(rand.NewPCG(seed, 0x6e6978666c656574))
		var actions []rc.HostAction
		var quiet time.Time // the last tick's QuietUntil
		for step := range 120 {
			what := rnd.IntN(100)
			switch {
			case what < 10: // many hosts move at once; ticks read a few of them each
				for _, h := range all {
					if rnd.IntN(2) == 0 {
						continue
					}
					st := m.status[h]
					if len(st.Probes.Failed) == 0 {
						st.Probes = rc.ProbeSummary{Total: 1, Failed: []string{"healthz"}}
					} else {
						st.Probes = rc.ProbeSummary{Total: 1}
					}
					m.status[h] = st
					_, _, err := s.RecordCheckin(m.ctx, h, &st, m.now, false)
					must(t, err)
				}
				for range 200 {
					var rep store.TickReport
					var in rc.Input
					out, err := s.Tick(m.ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: store.At(m.now), Tunables: m.tun,
						MaxStatuses: 1 + rnd.IntN(2), Report: func(r store.TickReport) { rep = r; hub.take(r) }},
						func(i rc.Input) (rc.Output, error) { in = i; return rc.Reconcile(i), nil })
					must(t, err)
					hub.check(t, m, seed, step)
					ticks++
					if rep.Full {
						full++
					}
					if !rep.Skipped {
						m.checkApplied(in, out)
						quiet = out.QuietUntil
						if quiet.IsZero() {
							quiet = m.now.Add(time.Hour)
						}
						actions = append(actions, out.Actions...)
					}
					if !rep.More {
						break
					}
					partial++
				}
			case what < 30: // a tick, checked against a cold load
				// First beside the ticks (VerifyKept), with what was
				// recorded since the last tick not yet read.
				vr, err := s.VerifyKept(m.ctx, m.kept)
				must(t, err)
				if vr.Diverged {
					t.Fatalf("seed %d step %d: the kept input differs from a cold load of one snapshot: %s", seed, step, vr.Divergence)
				}
				if vr.Skipped == "" {
					keptVerified++
				}
				var rep store.TickReport
				var in rc.Input
				decided := false
				// Sometimes the store cannot write what the tick deferred
				// after it committed (its context ends when it reports):
				// the next tick, of this leader or another, does.
				ctx, cancel := context.WithCancel(m.ctx)
				lost := rnd.IntN(2) == 0
				out, err := s.Tick(ctx, store.TickParams{Kept: m.kept, Lease: m.lease, Clock: store.At(m.now), Tunables: m.tun, Verify: true,
					SkipBefore: quiet, Report: func(r store.TickReport) {
						rep = r
						hub.take(r)
						if lost {
							cancel()
						}
					}},
					func(i rc.Input) (rc.Output, error) { in, decided = i, true; return rc.Reconcile(i), nil })
				cancel()
				must(t, err)
				if !lost {
					hub.check(t, m, seed, step)
				}
				if lost && slices.ContainsFunc(out.Rollouts, func(u rc.RolloutUpdate) bool { return u.New && len(u.Rollout.Hosts) > 0 }) {
					lostOpens++
				}
				ticks++
				verified++
				if rep.Diverged {
					t.Fatalf("seed %d step %d: the kept input differs from a cold load: %s", seed, step, rep.Divergence)
				}
				if rep.Full {
					full++
				}
				if rep.Skipped {
					skipped++
					continue
				}
				if !decided {
					t.Fatalf("seed %d step %d: a tick neither skipped nor decided", seed, step)
				}
				m.checkApplied(in, out)
				quiet = out.QuietUntil
				if quiet.IsZero() {
					quiet = m.now.Add(time.Hour)
				}
				actions = append(actions, out.Actions...)
			case what < 45: // agents act on what they were told
				for _, a := range actions {
					if rnd.IntN(3) == 0 {
						continue
					}
					st := m.status[a.Host]
					act := rc.Activation{RolloutID: a.RolloutID, Closure: a.Target, Outcome: rc.OutcomeConfirmed, At: m.now}
					if rnd.IntN(8) == 0 {
						act.Outcome = rc.OutcomeFailed
					} else {
						st.Current, st.Booted = a.Target, a.Target
					}
					st.Activation = &act
					m.status[a.Host] = st
					_, err := s.RecordStatus(m.ctx, a.Host, st)
					must(t, err)
				}
				actions = nil
			case what < 60: // check-ins: a probe flips, some urgent, others batched
				// Some are recorded together, as the status batcher
				// does (RecordStatuses).
				var batch []store.StatusWrite
				for _, h := range all {
					switch rnd.IntN(6) {
					case 0:
						st := m.status[h]
						st.Probes = rc.ProbeSummary{Total: 1}
						if rnd.IntN(2) == 0 {
							st.Probes.Failed = []string{"healthz"}
						}
						m.status[h] = st
						if rnd.IntN(2) == 0 {
							batch = append(batch, store.StatusWrite{Hostname: h, Status: &st, Seen: m.now, Urgent: rnd.IntN(2) == 0})
							continue
						}
						_, _, err := s.RecordCheckin(m.ctx, h, &st, m.now, rnd.IntN(2) == 0)
						must(t, err)
					case 1:
						_, _, err := s.RecordCheckin(m.ctx, h, nil, m.now, true)
						must(t, err)
					case 2:
						touch(t, s, m.ctx, map[string]time.Time{h: m.now.Add(-time.Duration(rnd.IntN(600)) * time.Second)})
					}
				}
				if len(batch) > 0 {
					_, err := s.RecordStatuses(m.ctx, batch)
					must(t, err)
				}
			case what < 68: // an operator intent
				kinds := []string{rc.IntentPause, rc.IntentResume, rc.IntentCancel, rc.IntentRollback}
				ids := []string{"nope@0"}
				for _, r := range m.model {
					ids = append(ids, r.ID)
				}
				m.intent(ids[rnd.IntN(len(ids))], kinds[rnd.IntN(len(kinds))])
			case what < 74: // a release on one channel, or both
				version++
				m.now = m.now.Add(time.Second) // each release signed later than the last
				ch := []string{"edge", "stable"}[rnd.IntN(2)]
				fb.Bump(fmt.Sprintf("v%d", version))
				if rnd.IntN(3) == 0 {
					m.release(fb.Build(), fleetkit.Commit(version))
				} else {
					m.release(fb.Build(), fleetkit.Commit(version), ch)
				}
			case what < 77: // a re-signed manifest replaces a live rollout's
				if len(m.model) > 0 {
					r := m.model[rnd.IntN(len(m.model))]
					man, err := s.Manifest(m.ctx, r.ID)
					if err == nil {
						must(t, s.ReplaceManifest(m.ctx, man))
					}
				}
			case what < 80: // the leader changes: the lease expires, another takes it
				m.now = m.now.Add(time.Second)
				holder = 1 - holder
				l, err := s.AcquireLease(m.ctx, store.TickLease, holders[holder], time.Hour, m.now)
				if err != nil { // held by the other: it gives it up first
					must(t, s.ReleaseLease(m.ctx, m.lease))
					l, err = s.AcquireLease(m.ctx, store.TickLease, holders[holder], time.Hour, m.now)
					must(t, err)
				}
				m.lease, m.kept = l, keepers[holder]
			case what < 82: // retention
				_, _, err := s.Prune(m.ctx, m.now.Add(-10*time.Minute))
				must(t, err)
				m.resync()
			case what < 84: // hosts that left the fleet are forgotten
				left := all[rnd.IntN(len(all))]
				inFleet := func(h string) bool { return h != left && slices.Contains(all, h) }
				gone, err := s.PruneHosts(m.ctx, inFleet, m.now.Add(-time.Duration(rnd.IntN(900))*time.Second))
				must(t, err)
				forgotten += len(gone)
				m.resync()
			default: // time passes; online hosts check in (batched)
				m.advance(time.Duration(5+rnd.IntN(120)) * time.Second)
			}
		}
	}
	t.Logf("%d ticks (%d checked against a cold load): %d loaded in full, %d skipped as quiet, %d left changed statuses for the next; %d hosts forgotten",
		ticks, verified, full, skipped, partial, forgotten)
	t.Logf("%d ticks that opened rollouts could not write their deferred host rows", lostOpens)
	t.Logf("%d comparisons beside the ticks (VerifyKept)", keptVerified)
	if keptVerified == 0 {
		t.Errorf("VerifyKept never compared anything")
	}
	if lostOpens == 0 && os.Getenv("NIXFLEET_KEPT_SEED") == "" {
		t.Errorf("no tick that opened a rollout lost its deferred host rows")
	}
	if partial == 0 {
		t.Errorf("no tick left changed statuses for the next (TickParams.MaxStatuses)")
	}
	t.Logf("%d ticks reported their urgent assignments first", hub.early)
	if hub.early == 0 {
		t.Errorf("no tick reported early (TickReport.Early)")
	}
	if ticks-full < ticks/3 {
		t.Errorf("only %d of %d ticks used the kept input", ticks-full, ticks)
	}
}

// reported keeps the assignments the ticks report, as the control plane's
// hub does: a full load's replace everything, the others change the hosts
// they name (nil: in no live rollout), an early report's and then the
// rest's. After a tick that wrote all it deferred, they must equal what
// the store holds.
// A host the tick dispatched to (Activating, RollingBack or Rebooting in a new
// record) must come in the early report, when there is one.
type reported struct {
	assign map[string]rc.Assignment
	early  int  // early reports taken
	after  bool // the last report was early: this one is the rest
	late   []string
}

func (h *reported) take(r store.TickReport) {
	if r.Skipped {
		return
	}
	rest := h.after && !r.Early
	h.after = r.Early
	if r.Early {
		h.early++
	}
	prev := h.assign
	if r.Full || h.assign == nil {
		h.assign = map[string]rc.Assignment{}
	}
	for host, a := range r.Assignments {
		if old, had := prev[host]; rest && a != nil && (a.Host.State == rc.HostActivating || a.Host.State == rc.HostRollingBack || a.Host.State == rc.HostRebooting) &&
			(!had || old.RolloutID != a.RolloutID || old.Host.State != a.Host.State || old.Host.Target != a.Host.Target) {
			h.late = append(h.late, fmt.Sprintf("%s %s in %s", host, a.Host.State, a.RolloutID))
		}
		if a == nil {
			delete(h.assign, host)
		} else {
			h.assign[host] = *a
		}
	}
}

func (h *reported) check(t *testing.T, m *sim, seed uint64, step int) {
	t.Helper()
	if len(h.late) > 0 {
		t.Fatalf("seed %d step %d: dispatches reported after the early report: %v", seed, step, h.late)
	}
	want, err := m.s.Assignments(m.ctx)
	must(t, err)
	// The kept view: what the leader serves check-ins from is a cold read.
	if k := m.kept.Input; k != nil {
		view := k.Assignments()
		for host, w := range want {
			if g := view[host]; g == nil || !sameAssignment(*g, w) {
				t.Fatalf("seed %d step %d: %s: the kept input's assignment %+v, the store holds %+v", seed, step, host, g, w)
			}
		}
		if len(view) != len(want) {
			t.Fatalf("seed %d step %d: the kept input assigns %d hosts, the store %d", seed, step, len(view), len(want))
		}
	}
	for host, w := range want {
		g, ok := h.assign[host]
		if !ok {
			t.Fatalf("seed %d step %d: %s has assignment %s/%s in the store, none reported", seed, step, host, w.RolloutID, w.Host.State)
		}
		if !sameAssignment(g, w) {
			t.Fatalf("seed %d step %d: %s: reported %+v, the store holds %+v", seed, step, host, g, w)
		}
	}
	for host, g := range h.assign {
		if _, ok := want[host]; !ok {
			t.Fatalf("seed %d step %d: %s: reported %s/%s, the store holds no assignment", seed, step, host, g.RolloutID, g.Host.State)
		}
	}
}

func sameAssignment(a, b rc.Assignment) bool {
	ha, hb := a.Host, b.Host
	a.Host, b.Host = rc.RolloutHost{}, rc.RolloutHost{}
	return sameHost(ha, hb) && cmp.Equal(a, b, cmpOpts)
}
