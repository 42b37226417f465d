package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// testRecordStatus: statuses are written only when they change; the
// watermark counts changes; activations update the status alone.
func testRecordStatus(t *testing.T, s store.Store) {
	ctx := t.Context()
	m := newSim(t, s)
	wm := func() int64 {
		w, err := s.Watermark(ctx)
		must(t, err)
		return w.Changes
	}
	record := func(st store.HostStatus, want bool) {
		t.Helper()
		before := wm()
		changed, err := s.RecordStatus(ctx, "h1", st)
		must(t, err)
		if changed != want {
			t.Fatalf("RecordStatus(%+v) changed=%v, want %v", st, changed, want)
		}
		if grew := wm() > before; grew != want {
			t.Fatalf("watermark grew=%v after a status with changed=%v", grew, want)
		}
	}
	cet := time.FixedZone("CET", 3600)
	st := store.HostStatus{Current: fleetkit.Closure("h1", "v0"), Booted: fleetkit.Closure("h1", "v0"), BootID: "b1",
		Probes:      rc.ProbeSummary{Total: 2, Failed: []string{"http"}},
		FailedUnits: []string{"nginx.service"},
		Compliance:  []rc.ComplianceResult{{Control: "c1", Framework: "nis2", Type: rc.ControlRuntime, Closure: fleetkit.Closure("h1", "v0"), Passed: true}},
		Activation:  &rc.Activation{RolloutID: "edge@1", Closure: fleetkit.Closure("h1", "v1"), Outcome: rc.OutcomeStarted, At: t0.In(cet)},
		Quarantine:  []rc.Quarantine{{Closure: fleetkit.Closure("h1", "v1"), Until: t0.Add(time.Hour)}},
	}
	record(st, true)
	record(st, false)
	// The same status with empty lists as nil and times in UTC is the same.
	same := st
	act := *st.Activation
	act.At = t0
	same.Activation = &act
	record(same, false)
	empty := store.HostStatus{Current: "x", FailedUnits: []string{}, Compliance: []rc.ComplianceResult{}, Quarantine: []rc.Quarantine{}}
	record(empty, true)
	record(store.HostStatus{Current: "x"}, false)
	record(st, true)

	h, err := s.Host(ctx, "h1")
	must(t, err)
	want := rc.ObservedHost{Current: st.Current, Booted: st.Booted, Probes: st.Probes, FailedUnits: st.FailedUnits,
		Compliance: st.Compliance, Activation: &act, Quarantine: st.Quarantine}
	diff(t, "observed host", h.Observed, want)
	if !h.Seen || h.Assignment != nil {
		t.Fatalf("host record %+v: want seen, no assignment", h)
	}

	// An activation replaces the activation only, and counts as a change
	// when it is one.
	confirmed := rc.Activation{RolloutID: "edge@1", Closure: fleetkit.Closure("h1", "v1"), Outcome: rc.OutcomeConfirmed, At: t0.Add(time.Minute)}
	before := wm()
	must(t, s.RecordActivation(ctx, "h1", confirmed))
	must(t, s.RecordActivation(ctx, "h1", confirmed))
	if got := wm(); got != before+1 {
		t.Fatalf("watermark %d after one new activation recorded twice, want %d", got, before+1)
	}
	want.Activation = &confirmed
	h, err = s.Host(ctx, "h1")
	must(t, err)
	diff(t, "observed host after an activation", h.Observed, want)
	// A status without an activation (a check-in) keeps the stored one.
	checkin := st
	checkin.Activation, checkin.BootID = nil, "b2"
	changed, err := s.RecordStatus(ctx, "h1", checkin)
	must(t, err)
	if !changed {
		t.Fatal("a check-in with a new boot id was not recorded")
	}
	h, err = s.Host(ctx, "h1")
	must(t, err)
	diff(t, "observed host after a check-in without an activation", h.Observed, want)
	if changed, err = s.RecordStatus(ctx, "h1", checkin); err != nil || changed {
		t.Fatalf("the same check-in again: changed=%v err=%v, want no change", changed, err)
	}
	// A host with no status yet gets one with only the activation.
	must(t, s.RecordActivation(ctx, "h2", confirmed))
	h, err = s.Host(ctx, "h2")
	must(t, err)
	diff(t, "observed host with only an activation", h.Observed, rc.ObservedHost{Activation: &confirmed})

	// Probes reported apart from a check-in replace the probes and failed
	// units only, and come back as stored.
	probes := rc.ProbeSummary{Total: 3, Failed: []string{"http", "tcp"}}
	before = wm()
	stored, changed, err := s.RecordProbes(ctx, "h1", probes, nil)
	must(t, err)
	if !changed || wm() != before+1 {
		t.Fatalf("RecordProbes: changed=%v, watermark %d after %d", changed, wm(), before)
	}
	wantStored := checkin
	storedAct := confirmed
	storedAct.At = storedAct.At.UTC()
	wantStored.Probes, wantStored.FailedUnits, wantStored.Activation = probes, nil, &storedAct
	diff(t, "the status after RecordProbes", stored, wantStored)
	if store.StatusDigest(stored) == store.StatusDigest(checkin) {
		t.Fatal("StatusDigest does not see a change of probes")
	}
	withoutActivation := stored
	withoutActivation.Activation = nil
	if store.StatusDigest(stored) != store.StatusDigest(withoutActivation) {
		t.Fatal("StatusDigest depends on the activation")
	}
	if _, changed, err = s.RecordProbes(ctx, "h1", probes, []string{}); err != nil || changed {
		t.Fatalf("the same probes again: changed=%v err=%v, want no change", changed, err)
	}
	want.Probes, want.FailedUnits = probes, nil
	h, err = s.Host(ctx, "h1")
	must(t, err)
	diff(t, "observed host after RecordProbes", h.Observed, want)

	// The tick sees the statuses as the reconciler's observations.
	in := m.peek()
	diff(t, "the tick's observation of h1", in.Hosts["h1"], want)
	if _, err := s.RecordStatus(ctx, "", st); err == nil {
		t.Error("RecordStatus accepted an empty hostname")
	}
}

// testTouchHosts: last-seen times only move forward, in batches.
func testTouchHosts(t *testing.T, s store.Store) {
	ctx := t.Context()
	m := newSim(t, s)
	batch := map[string]time.Time{}
	for i := range 2500 {
		batch[fmt.Sprintf("h%04d", i)] = t0.Add(time.Duration(i) * time.Microsecond)
	}
	touch(t, s, ctx, batch)
	touch(t, s, ctx, map[string]time.Time{
		"h0000": t0.Add(-time.Hour),           // older: ignored
		"h0001": t0.Add(time.Hour),            // newer
		"h0002": t0.Add(2 * time.Microsecond), // equal
		"new":   t0.Add(time.Minute).In(time.FixedZone("X", 7200)),
	})
	touch(t, s, ctx, nil)
	want := map[string]time.Time{"h0000": t0, "h0001": t0.Add(time.Hour), "h0002": t0.Add(2 * time.Microsecond), "new": t0.Add(time.Minute)}
	for name, at := range want {
		h, err := s.Host(ctx, name)
		must(t, err)
		if !h.Seen || !h.Observed.LastSeen.Equal(at) || h.Observed.LastSeen.Location() != time.UTC {
			t.Errorf("%s: seen=%v at %s, want %s in UTC", name, h.Seen, h.Observed.LastSeen, at)
		}
	}
	in := m.peek()
	if len(in.Hosts) != 2501 {
		t.Fatalf("the tick observes %d hosts, want 2501", len(in.Hosts))
	}
	diff(t, "observation of a host that only checked in", in.Hosts["new"], rc.ObservedHost{LastSeen: t0.Add(time.Minute), StatusAt: neverSaid})
	hosts, err := s.Hosts(ctx)
	must(t, err)
	if len(hosts) != 2501 || hosts[0].Hostname != "h0000" || hosts[2500].Hostname != "new" {
		t.Fatalf("Hosts: %d hosts from %s to %s", len(hosts), hosts[0].Hostname, hosts[len(hosts)-1].Hostname)
	}
	_, err = s.Host(ctx, "never")
	wantErr(t, err, store.ErrNotFound, "Host of an unknown host")
}

// testLiveAndAssignments: which rollouts a tick loads, and which record
// drives each host.
func testLiveAndAssignments(t *testing.T, s store.Store) {
	ctx := t.Context()
	m := newSim(t, s)
	// The channels' refs are those of their latest rollouts, as after
	// real ticks.
	f := testFleet(t).Build()
	edgeHash := m.release(f, fleetkit.Commit(3), "edge")[0].ManifestHash
	stableHash := m.release(f, fleetkit.Commit(4), "stable")[0].ManifestHash
	at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
	h := func(name string, st rc.HostState) rc.RolloutHost { return craftedHost(name, st, t0) }
	// The first rollout's one wave soaks 10 minutes and reboots staged
	// hosts: an assignment carries its wave's soak and reboot step.
	soaking := crafted("edge", fleetkit.Commit(1), rc.RolloutConverged, at(0), at(0), edgeHash, h("e1", rc.HostSoaking), h("e2", rc.HostConverged))
	soaking.Waves = []rc.WaveSpec{{SoakMinutes: 10, Reboot: true}}
	soaking.Reboot = &proto.Reboot{Allowed: true, BootTimeoutMinutes: 7, Kexec: true}
	m.open(
		// edge: an old converged rollout with a host still soaking (live),
		// an old converged one (not live), the latest (live).
		soaking,
		crafted("edge", fleetkit.Commit(2), rc.RolloutConverged, at(1), at(1), edgeHash, h("e1", rc.HostConverged), h("e3", rc.HostConverged)),
		crafted("edge", fleetkit.Commit(3), rc.RolloutActive, at(2), at(2), edgeHash, h("e1", rc.HostPending), h("e2", rc.HostPending)),
		// stable: a cancelled rollout (live), a failed one an intent names
		// (live), a superseded one (not live), the latest, failed (live).
		crafted("stable", fleetkit.Commit(1), rc.RolloutCancelled, at(0), at(0), stableHash, h("s1", rc.HostConverged)),
		crafted("stable", fleetkit.Commit(2), rc.RolloutFailed, at(1), at(1), stableHash, h("s2", rc.HostPending)),
		crafted("stable", fleetkit.Commit(3), rc.RolloutSuperseded, at(2), at(2), stableHash, h("s3", rc.HostConverged), h("s4", rc.HostConverged)),
		crafted("stable", fleetkit.Commit(4), rc.RolloutFailed, at(3), at(3), stableHash, h("s3", rc.HostPending)),
	)
	must(t, s.AddIntent(ctx, rc.Intent{ID: "i", RolloutID: proto.RolloutID("stable", fleetkit.Commit(2)), Kind: rc.IntentRollback, At: t0}))
	var live []string
	for _, r := range m.peek().Rollouts {
		live = append(live, r.ID)
	}
	id := proto.RolloutID
	diff(t, "live rollouts", live, []string{id("edge", fleetkit.Commit(1)), id("stable", fleetkit.Commit(1)), id("stable", fleetkit.Commit(2)),
		id("edge", fleetkit.Commit(3)), id("stable", fleetkit.Commit(4))})

	as, err := s.Assignments(ctx)
	must(t, err)
	got := map[string]string{}
	for name, a := range as {
		got[name] = a.RolloutID + " " + string(a.Host.State)
		if a.Host.Hostname != name {
			t.Errorf("assignment of %s holds host %s", name, a.Host.Hostname)
		}
	}
	diff(t, "assignments", got, map[string]string{
		"e1": id("edge", fleetkit.Commit(1)) + " Soaking", // in flight wins over the latest
		"e2": id("edge", fleetkit.Commit(3)) + " Pending",
		"s1": id("stable", fleetkit.Commit(1)) + " Converged",
		"s2": id("stable", fleetkit.Commit(2)) + " Pending",
		"s3": id("stable", fleetkit.Commit(4)) + " Pending",
		// e3 and s4 are only in rollouts that are not live.
	})
	a := as["e2"]
	if a.Channel != "edge" || a.RolloutState != rc.RolloutActive || a.ManifestHash != edgeHash || a.Soak != 0 || a.Reboot != (rc.RebootSpec{}) {
		t.Errorf("assignment of e2: %+v", a)
	}
	if a := as["e1"]; a.Soak != 10*time.Minute || !a.SoakEnd().Equal(t0.Add(10*time.Minute)) {
		t.Errorf("assignment of e1 soaks %s until %s, want 10m0s until %s", a.Soak, a.SoakEnd(), t0.Add(10*time.Minute))
	}
	if a, want := as["e1"], (rc.RebootSpec{Managed: true, Timeout: 7 * time.Minute, Kexec: true}); a.Reboot != want {
		t.Errorf("assignment of e1 reboots %+v, want %+v", a.Reboot, want)
	}

	m.checkIn(true, "e2", "x1")
	hosts, err := s.Hosts(ctx)
	must(t, err)
	var names []string
	for _, h := range hosts {
		names = append(names, h.Hostname)
		if want, ok := as[h.Hostname]; ok {
			diff(t, "Hosts' assignment of "+h.Hostname, h.Assignment, &want)
		} else if h.Assignment != nil {
			t.Errorf("%s has assignment %+v", h.Hostname, h.Assignment)
		}
		if h.Seen != (h.Hostname == "e2" || h.Hostname == "x1") {
			t.Errorf("%s: seen=%v", h.Hostname, h.Seen)
		}
	}
	diff(t, "hosts", names, []string{"e1", "e2", "s1", "s2", "s3", "x1"})
	for _, name := range names {
		one, err := s.Host(ctx, name)
		must(t, err)
		i := slices.IndexFunc(hosts, func(r store.HostRecord) bool { return r.Hostname == name })
		diff(t, "Host("+name+")", one, hosts[i])
	}
	_, err = s.Host(ctx, "e3")
	wantErr(t, err, store.ErrNotFound, "Host of a host only in rollouts that are not live")

	list, err := s.Rollouts(ctx)
	must(t, err)
	var order []string
	for _, r := range list {
		order = append(order, r.ID)
		if r.Hosts != nil {
			t.Errorf("Rollouts returned %s with hosts", r.ID)
		}
	}
	// Newest first: by opening time, then by id, both descending.
	diff(t, "rollouts, newest first", order, []string{id("stable", fleetkit.Commit(4)), id("stable", fleetkit.Commit(3)), id("edge", fleetkit.Commit(3)),
		id("stable", fleetkit.Commit(2)), id("edge", fleetkit.Commit(2)), id("stable", fleetkit.Commit(1)), id("edge", fleetkit.Commit(1))})
	_, err = s.Rollout(ctx, "nope@1")
	wantErr(t, err, store.ErrNotFound, "Rollout of an unknown id")
}

// testRecordStatusesBatched: a batch of check-ins and activations
// (RecordStatuses, one transaction) leaves every host as the same writes
// made one at a time (RecordCheckin, RecordActivation) do, with the same
// results, several writes of one host in one batch applied in order; the
// watermark grows when anything was written, and not otherwise.
func testRecordStatusesBatched(t *testing.T, s store.Store) {
	ctx := t.Context()
	rnd := rand.New(rand.NewPCG(7, 11))
	const hosts = 6
	for round := range 40 {
		now := t0.Add(time.Duration(round) * time.Second)
		var batch []store.StatusWrite
		for range 1 + rnd.IntN(12) {
			i := rnd.IntN(hosts)
			w := store.StatusWrite{Hostname: fmt.Sprintf("h%d", i)}
			switch rnd.IntN(4) {
			case 0:
				w.Activation = &rc.Activation{RolloutID: "edge@1", Closure: fleetkit.Closure(w.Hostname, fmt.Sprint("v", rnd.IntN(2))),
					Outcome: rc.OutcomeConfirmed, At: now}
			case 1:
				w.Urgent, w.Seen = true, now.Add(-time.Duration(rnd.IntN(3))*time.Second)
			default:
				st := store.HostStatus{Current: fleetkit.Closure(w.Hostname, fmt.Sprint("v", rnd.IntN(2))), Probes: rc.ProbeSummary{Total: rnd.IntN(2)}}
				w.Status, w.Seen, w.Urgent = &st, now, rnd.IntN(3) == 0
			}
			batch = append(batch, w)
		}
		// One at a time, on hosts a<i>.
		var want []store.StatusResult
		for _, w := range batch {
			name := "a" + w.Hostname
			var r store.StatusResult
			if w.Activation != nil {
				before, err := s.Host(ctx, name)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					t.Fatal(err)
				}
				must(t, s.RecordActivation(ctx, name, *w.Activation))
				after, err := s.Host(ctx, name)
				must(t, err)
				r.Changed = !reflect.DeepEqual(before.Observed.Activation, after.Observed.Activation)
				r.Written = r.Changed
			} else {
				var err error
				r.Changed, r.Written, err = s.RecordCheckin(ctx, name, w.Status, w.Seen, w.Urgent)
				must(t, err)
			}
			want = append(want, r)
		}
		// Batched, on hosts b<i>.
		bs := slices.Clone(batch)
		for i := range bs {
			bs[i].Hostname = "b" + bs[i].Hostname
		}
		w0, err := s.Watermark(ctx)
		must(t, err)
		got, err := s.RecordStatuses(ctx, bs)
		must(t, err)
		w1, err := s.Watermark(ctx)
		must(t, err)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: batch %+v: results %v, one at a time %v", round, batch, got, want)
		}
		written := slices.ContainsFunc(got, func(r store.StatusResult) bool { return r.Written })
		if grew := w1.Changes > w0.Changes; grew != written {
			t.Fatalf("round %d: the watermark grew=%v, something written=%v", round, grew, written)
		}
		for i := range hosts {
			a, errA := s.Host(ctx, fmt.Sprintf("ah%d", i))
			b, errB := s.Host(ctx, fmt.Sprintf("bh%d", i))
			if errors.Is(errA, store.ErrNotFound) != errors.Is(errB, store.ErrNotFound) {
				t.Fatalf("round %d: host %d: one at a time %v, batched %v", round, i, errA, errB)
			}
			a.Hostname, b.Hostname = "", ""
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("round %d: host %d: one at a time %+v, batched %+v", round, i, a, b)
			}
		}
	}
	if _, err := s.RecordStatuses(ctx, []store.StatusWrite{{Hostname: "ok"}, {}}); err == nil {
		t.Error("a batch with an empty hostname was recorded")
	}
}

// neverSaid is the StatusAt of a host no check-in of which carried its
// stored status: the Unix epoch, before any verdict's moment.
var neverSaid = time.Unix(0, 0).UTC()

// testStatusSaid: what a host said (rfcs/0003 rule 8). A check-in that
// wrote or carried the stored status records when it was said
// (ObservedHost.StatusAt); one that carried another status — the store
// lost the write of it — records only its time, and TouchHosts names the
// host, so that the caller writes the status again; a probe report, which
// carries part of a status, says none of it. A row from before migration
// 0015 is taken as said until its status is compared again.
func testStatusSaid(t *testing.T, s store.Store) {
	ctx := t.Context()
	m := newSim(t, s)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s1 := store.HostStatus{Current: fleetkit.Closure("web", "v1"), Booted: fleetkit.Closure("web", "v1"), Probes: rc.ProbeSummary{Total: 1}}
	s2 := s1
	s2.Current, s2.Booted = fleetkit.Closure("web", "v2"), fleetkit.Closure("web", "v2")
	times := func(what string, lastSeen, said time.Time) {
		t.Helper()
		h, err := s.Host(ctx, "web")
		must(t, err)
		cold := m.peek().Hosts["web"]
		for _, o := range []rc.ObservedHost{h.Observed, cold} {
			if !o.LastSeen.Equal(lastSeen) || !o.StatusAt.Equal(said) {
				t.Fatalf("%s: last seen %s, status said %s; want %s and %s", what, o.LastSeen, o.StatusAt, lastSeen, said)
			}
		}
	}
	// A host with no stored status at all whose check-in carried one:
	// the store lost the status of a host it had not written since.
	unsaid, err := s.TouchHosts(ctx, map[string]store.Seen{"new": {At: at(0), Said: store.StatusDigest(s1)}})
	must(t, err)
	if !slices.Equal(unsaid, []string{"new"}) {
		t.Fatalf("a check-in of a host with no status: TouchHosts names %v as not said, want [new]", unsaid)
	}
	touchSaid := func(what string, want []string, seen store.Seen) {
		t.Helper()
		unsaid, err := s.TouchHosts(ctx, map[string]store.Seen{"web": seen})
		must(t, err)
		if !slices.Equal(unsaid, want) {
			t.Fatalf("%s: TouchHosts names %v as not said, want %v", what, unsaid, want)
		}
	}

	_, _, err = s.RecordCheckin(ctx, "web", &s1, at(time.Second), false)
	must(t, err)
	times("a first check-in", at(time.Second), at(time.Second))
	touchSaid("a check-in that carried the stored status", nil, store.Seen{At: at(2 * time.Second), Said: store.StatusDigest(s1)})
	times("a check-in that carried the stored status", at(2*time.Second), at(2*time.Second))

	// The host switched to v2 and said so, but the write is lost: its
	// later check-ins, which echo their tag, carry v2's digest.
	touchSaid("a check-in after a lost write", []string{"web"}, store.Seen{At: at(3 * time.Second), Said: store.StatusDigest(s2)})
	times("a check-in after a lost write", at(3*time.Second), at(2*time.Second))
	_, _, err = s.RecordProbes(ctx, "web", rc.ProbeSummary{Total: 1, Failed: []string{"http"}}, nil)
	must(t, err)
	touchSaid("a probe report", nil, store.Seen{At: at(4 * time.Second)})
	times("a probe report", at(4*time.Second), at(2*time.Second))

	// Written again, as the hub does with a check-in TouchHosts named.
	res, err := s.RecordStatuses(ctx, []store.StatusWrite{{Hostname: "web", Status: &s2, Seen: at(3 * time.Second), Urgent: true}})
	must(t, err)
	if !res[0].Changed {
		t.Fatal("the status written again did not change the stored one")
	}
	times("the status written again", at(4*time.Second), at(3*time.Second))
	touchSaid("a later check-in", nil, store.Seen{At: at(5 * time.Second), Said: store.StatusDigest(s2)})
	touchSaid("an earlier check-in", nil, store.Seen{At: at(time.Second), Said: store.StatusDigest(s2)})
	times("a later check-in", at(5*time.Second), at(5*time.Second))

	// A lost write of the status itself: the store holds v1 again, as a
	// restore from a backup would.
	body := `{"current":"` + s1.Current + `","booted":"` + s1.Booted + `","probes":{"total":1},"failedUnits":null,"compliance":null,"deferred":false,"quarantine":null}`
	must(t, internals(t, s).ExecRaw(ctx, "UPDATE host_status SET status = ?, digest = 'restored', said = ? WHERE hostname = ?",
		body, store.StatusDigest(s1), "web"))
	touchSaid("a check-in after a restore", []string{"web"}, store.Seen{At: at(6 * time.Second), Said: store.StatusDigest(s2)})
	times("a check-in after a restore", at(6*time.Second), at(5*time.Second))

	// A row from before migration 0015 (no said digest) is taken as said,
	// and gets its digest at the next comparison.
	must(t, internals(t, s).ExecRaw(ctx, "UPDATE host_status SET said = '' WHERE hostname = ?", "web"))
	touchSaid("a check-in on a row from before", nil, store.Seen{At: at(7 * time.Second), Said: store.StatusDigest(s2)})
	times("a check-in on a row from before", at(7*time.Second), at(7*time.Second))
	_, _, err = s.RecordCheckin(ctx, "web", &s1, at(8*time.Second), true)
	must(t, err)
	touchSaid("a check-in after the comparison", []string{"web"}, store.Seen{At: at(9 * time.Second), Said: store.StatusDigest(s2)})
	times("a check-in after the comparison", at(9*time.Second), at(8*time.Second))
}
