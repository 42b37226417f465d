package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

var planT0 = time.Date(2026, 3, 2, 8, 30, 0, 0, time.UTC)

// planFleet is three hosts of channel stable: a in wave 0 (soak 5
// minutes), b and c in wave 1 (soak 10); edit changes its policy.
func planFleet(t *testing.T, version string, edit func(*proto.RolloutPolicy)) *proto.FleetResolved {
	t.Helper()
	b := fleetkit.New(t).Channel("stable", 5, 10).
		Host("a", "stable", 0, "canary").Host("b", "stable", 1, "web").Host("c", "stable", 1, "web")
	if edit != nil {
		b.Policy("stable", edit)
	}
	return b.Bump(version).Build()
}

func planOf(t *testing.T, f *proto.FleetResolved, state *reconciler.Input, opts planOptions) *plan {
	t.Helper()
	raw, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	p, err := makePlan(f, raw, state, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPlanWithoutState(t *testing.T) {
	t.Parallel()
	p := planOf(t, planFleet(t, "v2", nil), nil, planOptions{at: planT0})
	if p.Ref != plannedRef || p.CICommit != nil || p.State != "assumed" {
		t.Fatalf("ref %q, ciCommit %v, state %q; want the placeholder ref and an assumed state", p.Ref, p.CICommit, p.State)
	}
	if len(p.Channels) != 1 {
		t.Fatalf("%d channels, want 1", len(p.Channels))
	}
	c := p.Channels[0]
	if c.RolloutID != "stable@planned" || !c.Opens || c.ChangeCount != 3 || c.HostCount != 3 || c.SilentCount != 0 {
		t.Fatalf("channel %+v; want stable@planned opening, 3 of 3 hosts changing", c)
	}
	// a: 2 minutes, 5 of soak; b and c then: 2 minutes and 10 of soak.
	if w := c.Waves[0]; !w.Start.Equal(planT0) || !w.Done.Equal(planT0.Add(7*time.Minute)) || w.HostCount != 1 {
		t.Fatalf("wave 0 %+v", w)
	}
	if w := c.Waves[1]; !w.Start.Equal(planT0.Add(7*time.Minute)) || w.Gate == nil || w.Gate.Code != codes.WaveNotActive || w.HostCount != 2 {
		t.Fatalf("wave 1 %+v", w)
	}
	if c.End.IsZero() || p.DurationSeconds == nil || *p.DurationSeconds != int64(c.End.Sub(planT0)/time.Second) || !p.End.Equal(c.End) {
		t.Fatalf("end %s, duration %v; want the rollout's end", p.End, p.DurationSeconds)
	}
	if c.Hosts != nil {
		t.Fatalf("hosts listed without --hosts: %+v", c.Hosts)
	}
}

// An approval owed: without --approve-after the rollout waits for it and
// has no end; with it, the wave starts the delay after wave 0 is done.
func TestPlanApproveAfter(t *testing.T) {
	t.Parallel()
	needs := func(p *proto.RolloutPolicy) { p.Waves[1].Approval = &proto.Approval{Required: true, Approvers: 2} }
	p := planOf(t, planFleet(t, "v2", needs), nil, planOptions{at: planT0})
	c := p.Channels[0]
	if !c.End.IsZero() || c.Waiting == nil || c.Waiting.Gate != codes.Approval || !c.Waves[1].Start.IsZero() || p.DurationSeconds != nil {
		t.Fatalf("end %s, waiting %+v, wave 1 start %s; want it waiting for an approval", c.End, c.Waiting, c.Waves[1].Start)
	}
	if p.Cut != "waiting" || len(c.Approvals) != 0 {
		t.Fatalf("cut %q, approvals %+v", p.Cut, c.Approvals)
	}
	after := 90 * time.Minute
	p = planOf(t, planFleet(t, "v2", needs), nil, planOptions{at: planT0, approveAfter: &after, hosts: true})
	c = p.Channels[0]
	done0 := c.Waves[0].Done
	if done0.IsZero() || len(c.Approvals) != 1 || c.Approvals[0].Wave != 1 || !c.Approvals[0].At.Equal(done0.Add(after)) {
		t.Fatalf("wave 0 done %s, approvals %+v; want wave 1's approval 90 minutes after it", done0, c.Approvals)
	}
	if w := c.Waves[1]; !w.Start.Equal(done0.Add(after)) || w.Gate == nil || w.Gate.Gate != codes.Approval {
		t.Fatalf("wave 1 %+v; want it started by its approval", w)
	}
	if c.End.IsZero() || c.State != reconciler.RolloutConverged || p.Cut != "" {
		t.Fatalf("state %s, end %s, cut %q; want it converged", c.State, c.End, p.Cut)
	}
	if len(c.Hosts) != 3 || c.Hosts[1].Host != "b" || c.Hosts[1].Dispatch.IsZero() {
		t.Fatalf("hosts %+v; want all three with their dispatch", c.Hosts)
	}
}

// A state with a live rollout of the channel: the planned release waits
// for it to end (rfcs/0003 rule 1), then opens; a host already on its
// target does not change, and a host not heard is taken as silent.
func TestPlanWithLiveRollout(t *testing.T) {
	t.Parallel()
	v1 := planFleet(t, "v1", nil)
	ref1 := fleetkit.Commit(1)
	v1.Meta.CICommit = &ref1
	ms, err := manifest.Project(v1, "fleet-1")
	if err != nil {
		t.Fatal(err)
	}
	body, err := manifest.Marshal(ms[0])
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	in := reconciler.Input{Now: planT0.Add(-2 * time.Minute), Hosts: map[string]reconciler.ObservedHost{},
		Channels: []reconciler.Channel{{Name: "stable", Ref: ref1, Fleet: v1, Manifest: ms[0], ManifestHash: hex.EncodeToString(sum[:])}}}
	for _, h := range []string{"a", "b", "c"} {
		in.Hosts[h] = reconciler.ObservedHost{LastSeen: in.Now, Current: fleetkit.Closure(h, "v0"), Booted: fleetkit.Closure(h, "v0")}
	}
	in = reconciler.Apply(in, reconciler.Reconcile(in)) // stable@1 opens, a is dispatched
	if len(in.Rollouts) != 1 {
		t.Fatalf("%d rollouts live, want stable@1", len(in.Rollouts))
	}
	// a confirms a minute later: it soaks when the plan is made.
	in.Now = planT0.Add(-time.Minute)
	a := in.Hosts["a"]
	a.Current, a.Booted, a.LastSeen = fleetkit.Closure("a", "v1"), fleetkit.Closure("a", "v1"), in.Now
	a.Activation = &reconciler.Activation{RolloutID: "stable@" + ref1, Closure: a.Current, Outcome: reconciler.OutcomeConfirmed, At: in.Now}
	in.Hosts["a"] = a
	in = reconciler.Apply(in, reconciler.Reconcile(in))
	if h := in.Rollouts[0].Hosts[0]; h.Hostname != "a" || h.State != reconciler.HostSoaking {
		t.Fatalf("a is %s, want it soaking", h.State)
	}
	in.Now = planT0
	for _, h := range []string{"a", "b"} {
		o := in.Hosts[h]
		o.LastSeen = planT0
		in.Hosts[h] = o
	}
	c := in.Hosts["c"]
	c.LastSeen = planT0.Add(-time.Hour) // silent since
	in.Hosts["c"] = c
	// The release to plan gives b the closure it runs already.
	v2 := fleetkit.New(t).Channel("stable", 5, 10).
		Host("a", "stable", 0, "canary").Host("b", "stable", 1, "web").Host("c", "stable", 1, "web").
		Bump("v2").BumpHost("b", "v0").Build()
	p := planOf(t, v2, &in, planOptions{at: planT0})
	if p.State != "given" || len(p.Others) != 1 || p.Others[0].State != reconciler.RolloutConverged || p.Others[0].RolloutID != "stable@"+ref1 {
		t.Fatalf("state %q, others %+v; want the live rollout among the others", p.State, p.Others)
	}
	pc := p.Channels[0]
	if pc.ChangeCount != 2 || pc.SilentCount != 1 || pc.HostCount != 3 {
		t.Fatalf("changes %d, silent %d of %d; want a and c changing, c silent", pc.ChangeCount, pc.SilentCount, pc.HostCount)
	}
	old := p.Others[0]
	if !pc.Opens || old.End.IsZero() || pc.Waves[0].Start.Before(old.End) || pc.Waves[0].Gate == nil || pc.Waves[0].Gate.Code != codes.RefWaiting {
		t.Fatalf("live rollout ends %s; planned wave 0 %+v; want it to start after, held by ref_waiting", old.End, pc.Waves[0])
	}
}

func TestSpan(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		d    time.Duration
		want string
	}{
		{"zero", 0, "0s"},
		{"seconds", 90 * time.Second, "1m30s"},
		{"hours", 2*time.Hour + 10*time.Minute, "2h10m"},
		{"days", 26*time.Hour + 5*time.Second, "1d2h5s"},
		{"rounded", 1499 * time.Millisecond, "1s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := span(c.d); got != c.want {
				t.Fatalf("span(%s) = %q, want %q", c.d, got, c.want)
			}
		})
	}
}

// A live rollout that waits for an approval nobody assumes holds the
// planned ref: it does not open, and the plan says what it waits for.
func TestPlanHeldByLiveRollout(t *testing.T) {
	t.Parallel()
	approve := func(p *proto.RolloutPolicy) { p.Waves[1].Approval = &proto.Approval{Required: true} }
	v1 := planFleet(t, "v1", approve)
	ref1 := fleetkit.Commit(1)
	v1.Meta.CICommit = &ref1
	ms, err := manifest.Project(v1, "fleet-1")
	if err != nil {
		t.Fatal(err)
	}
	in := reconciler.Input{Now: planT0, Hosts: map[string]reconciler.ObservedHost{},
		Channels: []reconciler.Channel{{Name: "stable", Ref: ref1, Fleet: v1, Manifest: ms[0], ManifestHash: "h1"}}}
	for _, h := range []string{"a", "b", "c"} {
		in.Hosts[h] = reconciler.ObservedHost{LastSeen: in.Now, Current: fleetkit.Closure(h, "v0"), Booted: fleetkit.Closure(h, "v0")}
	}
	in = reconciler.Apply(in, reconciler.Reconcile(in)) // stable@1 opens, a is dispatched
	p := planOf(t, planFleet(t, "v2", approve), &in, planOptions{at: planT0})
	pc := p.Channels[0]
	if pc.Opens || pc.Held == nil || pc.Held.Code != codes.RefWaiting {
		t.Fatalf("planned: opens %v, held %+v; want it held by the live rollout (ref_waiting)", pc.Opens, pc.Held)
	}
}
