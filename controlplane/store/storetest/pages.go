package storetest

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// pagesFixture writes the rollouts of testLiveAndAssignments, with more
// hosts in the latest of each channel (waves, gates and states of their
// own), and hosts that checked in; it returns its driver and the
// rollouts' ids by name.
func pagesFixture(t *testing.T, s store.Store) (*sim, map[string]string) {
	m := newSim(t, s)
	f := testFleet(t).Build()
	edgeHash := m.release(f, fleetkit.Commit(3), "edge")[0].ManifestHash
	stableHash := m.release(f, fleetkit.Commit(4), "stable")[0].ManifestHash
	at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
	h := func(name string, st rc.HostState) rc.RolloutHost { return craftedHost(name, st, t0) }
	// A host of wave w, in state st since t0 plus sec seconds, held by gate
	// (none when empty).
	hw := func(name string, w int, st rc.HostState, sec int, gate string) rc.RolloutHost {
		x := craftedHost(name, st, t0.Add(time.Duration(sec)*time.Second))
		x.Wave = w
		if gate != "" {
			x.Blocked = rc.Reason{Gate: gate, Code: gate, Message: "held by " + gate}
		}
		return x
	}
	edge3 := crafted("edge", fleetkit.Commit(3), rc.RolloutActive, at(2), at(2), edgeHash, h("e1", rc.HostPending), h("e2", rc.HostPending))
	edge3.Waves = []rc.WaveSpec{{SoakMinutes: 10}, {SoakMinutes: 5, Name: "rest"}}
	edge3.Edges = []rc.Edge{{Gates: "e2", Gated: "h03"}}
	edge3.HostWindows = []rc.HostWindowSpec{{Hosts: []string{"h04"}, Windows: []proto.Window{{Days: []string{"mon"}, Start: "01:00", DurationMinutes: 60, TimeZone: "UTC"}}}}
	for i := 1; i <= 12; i++ {
		name := fmt.Sprintf("h%02d", i)
		switch {
		case i <= 3:
			edge3.Hosts = append(edge3.Hosts, hw(name, 0, rc.HostSoaking, i, ""))
		case i <= 5:
			edge3.Hosts = append(edge3.Hosts, hw(name, 0, rc.HostConverged, i, ""))
		case i <= 8:
			edge3.Hosts = append(edge3.Hosts, hw(name, 1, rc.HostPending, i, "budget"))
		case i <= 10:
			edge3.Hosts = append(edge3.Hosts, hw(name, 1, rc.HostPending, i, "edge"))
		default:
			edge3.Hosts = append(edge3.Hosts, hw(name, 1, rc.HostPending, i, ""))
		}
	}
	stable4 := crafted("stable", fleetkit.Commit(4), rc.RolloutFailed, at(3), at(3), stableHash, h("s3", rc.HostPending))
	for i := 1; i <= 8; i++ {
		st := rc.HostConverged
		if i%3 == 0 {
			st = rc.HostFailed
		}
		stable4.Hosts = append(stable4.Hosts, h(fmt.Sprintf("k%02d", i), st))
	}
	m.open(
		crafted("edge", fleetkit.Commit(1), rc.RolloutConverged, at(0), at(0), edgeHash, h("e1", rc.HostSoaking), h("e2", rc.HostConverged)),
		crafted("edge", fleetkit.Commit(2), rc.RolloutConverged, at(1), at(1), edgeHash, h("e1", rc.HostConverged), h("e3", rc.HostConverged)),
		edge3,
		crafted("stable", fleetkit.Commit(1), rc.RolloutCancelled, at(0), at(0), stableHash, h("s1", rc.HostConverged)),
		crafted("stable", fleetkit.Commit(2), rc.RolloutFailed, at(1), at(1), stableHash, h("s2", rc.HostPending)),
		crafted("stable", fleetkit.Commit(3), rc.RolloutSuperseded, at(2), at(2), stableHash, h("s3", rc.HostConverged), h("s4", rc.HostConverged)),
		stable4,
	)
	must(t, s.AddIntent(t.Context(), rc.Intent{ID: "i", RolloutID: proto.RolloutID("stable", fleetkit.Commit(2)), Kind: rc.IntentRollback, At: t0}))
	m.checkIn(true, "e2", "x1", "h02", "k01")
	m.checkIn(false, "x2")
	ids := map[string]string{}
	for _, ch := range []string{"edge", "stable"} {
		for i := 1; i <= 4; i++ {
			ids[fmt.Sprintf("%s%d", ch, i)] = proto.RolloutID(ch, fleetkit.Commit(i))
		}
	}
	return m, ids
}

// testHostPages: pages of hosts, under each filter and for several
// limits and scan bounds, cover exactly the hosts Hosts returns that the
// filter's assignment test passes, once each, by name; each record is
// Hosts'; next continues where a page stopped; filters match a host's
// assignment, not the rollouts that list it.
func testHostPages(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, ids := pagesFixture(t, s)
	all, err := s.Hosts(ctx)
	must(t, err)
	byName := map[string]store.HostRecord{}
	for _, r := range all {
		byName[r.Hostname] = r
	}
	var names []string
	for _, r := range all {
		names = append(names, r.Hostname)
	}
	// The fixture's hosts: in live rollouts, checked in, or both; e3 and
	// s4 are only in rollouts that are not live.
	diff(t, "every host", names, []string{"e1", "e2", "h01", "h02", "h03", "h04", "h05", "h06", "h07", "h08", "h09", "h10", "h11", "h12",
		"k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "s1", "s2", "s3", "x1", "x2"})
	for _, tc := range []struct {
		name string
		q    store.HostQuery
		want []string // nil: every host
	}{
		{"all", store.HostQuery{}, nil},
		{"channel edge", store.HostQuery{Channel: "edge"}, []string{"e1", "e2", "h01", "h02", "h03", "h04", "h05", "h06", "h07", "h08", "h09", "h10", "h11", "h12"}},
		{"channel stable", store.HostQuery{Channel: "stable"}, []string{"k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "s1", "s2", "s3"}},
		{"unknown channel", store.HostQuery{Channel: "nope"}, []string{}},
		// e1 is Pending in edge@3, but edge@1 drives it (it soaks there).
		{"state Pending", store.HostQuery{State: rc.HostPending}, []string{"e2", "h06", "h07", "h08", "h09", "h10", "h11", "h12", "s2", "s3"}},
		{"state Soaking", store.HostQuery{State: rc.HostSoaking}, []string{"e1", "h01", "h02", "h03"}},
		{"state Failed", store.HostQuery{State: rc.HostFailed}, []string{"k03", "k06"}},
		{"state Deferred", store.HostQuery{State: rc.HostDeferred}, []string{}},
		{"channel and state", store.HostQuery{Channel: "stable", State: rc.HostPending}, []string{"s2", "s3"}},
		{"latest edge rollout", store.HostQuery{RolloutID: ids["edge3"]}, []string{"e2", "h01", "h02", "h03", "h04", "h05", "h06", "h07", "h08", "h09", "h10", "h11", "h12"}},
		// edge@1 lists e2 too, but edge@3 drives it.
		{"older live rollout", store.HostQuery{RolloutID: ids["edge1"]}, []string{"e1"}},
		{"rollout not live", store.HostQuery{RolloutID: ids["edge2"]}, []string{}},
		{"unknown rollout", store.HostQuery{RolloutID: "nope@1"}, []string{}},
		{"rollout and state", store.HostQuery{RolloutID: ids["edge3"], State: rc.HostConverged}, []string{"h04", "h05"}},
		{"rollout of another channel", store.HostQuery{RolloutID: ids["edge3"], Channel: "stable"}, []string{}},
		{"after", store.HostQuery{After: "k08"}, []string{"s1", "s2", "s3", "x1", "x2"}},
		{"after, filtered", store.HostQuery{After: "h07", State: rc.HostPending}, []string{"h08", "h09", "h10", "h11", "h12", "s2", "s3"}},
		{"after the last", store.HostQuery{After: "zzz"}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			if want == nil {
				want = names
			}
			for _, limit := range []int{1, 2, 3, 7, 0} {
				for _, scan := range []int{0, 1, 5} {
					q := tc.q
					q.Limit, q.MaxScan = limit, scan
					var got []string
					for pages := 0; ; pages++ {
						if pages > len(names)+2 {
							t.Fatalf("limit %d, scan %d: %d pages and no end: %v", limit, scan, pages, got)
						}
						p, err := s.HostPage(ctx, q)
						must(t, err)
						if limit > 0 && len(p.Hosts) > limit {
							t.Fatalf("limit %d: a page of %d hosts", limit, len(p.Hosts))
						}
						if p.Hosts == nil {
							t.Fatalf("limit %d: a page with nil hosts", limit)
						}
						for _, r := range p.Hosts {
							got = append(got, r.Hostname)
							diff(t, "the page's record of "+r.Hostname, r, byName[r.Hostname])
						}
						if p.Next == "" {
							break
						}
						if p.Next <= q.After {
							t.Fatalf("limit %d, scan %d: next %q after %q", limit, scan, p.Next, q.After)
						}
						if scan == 0 && (tc.q == store.HostQuery{}) && len(p.Hosts) != limit {
							t.Fatalf("limit %d: a page of %d hosts of an unfiltered list, and more follow", limit, len(p.Hosts))
						}
						q.After = p.Next
					}
					diff(t, fmt.Sprintf("hosts paged by %d, scanning %d", limit, scan), got, want)
				}
			}
		})
	}
	// An unfiltered list whose last page is full says nothing follows.
	p, err := s.HostPage(ctx, store.HostQuery{Limit: len(names)})
	must(t, err)
	if len(p.Hosts) != len(names) || p.Next != "" {
		t.Errorf("a page of exactly every host: %d hosts, next %q", len(p.Hosts), p.Next)
	}
	// The limits are bounded.
	p, err = s.HostPage(ctx, store.HostQuery{Limit: 1 << 30})
	must(t, err)
	if len(p.Hosts) != len(names) {
		t.Errorf("a page of a huge limit: %d hosts", len(p.Hosts))
	}

	seen, err := s.LastSeen(ctx, []string{"e2", "x2", "h01", "nobody"})
	must(t, err)
	diff(t, "last seen", seen, map[string]time.Time{"e2": t0, "x2": t0.Add(-time.Hour)})
}

// testRoster is a signed fleet's hosts for HostQuery.Fleet: a sorted
// list and a map, as the control plane keeps them.
type testRoster struct {
	names []string
	hosts map[string]store.FleetHost
}

func newTestRoster(hosts map[string]store.FleetHost) testRoster {
	r := testRoster{hosts: hosts}
	for name := range hosts {
		r.names = append(r.names, name)
	}
	slices.Sort(r.names)
	return r
}

func (r testRoster) After(channel, after string, n int) []string {
	var out []string
	for _, name := range r.names {
		if len(out) < n && name > after && (channel == "" || r.hosts[name].Channel == channel) {
			out = append(out, name)
		}
	}
	return out
}

func (r testRoster) Host(name string) (store.FleetHost, bool) {
	h, ok := r.hosts[name]
	return h, ok
}

// HostPagesWithFleet: with HostQuery.Fleet, the hosts of the fleet are
// listed too, merged by name in byte order with the hosts the store knows
// (whatever the database's collation: the backends also run it on a
// PostgreSQL database that sorts otherwise), once each, each record with
// its place in the fleet. A host of the fleet in no rollout matches a
// channel filter by its channel there, and no state or rollout filter; a
// host in a rollout matches by its assignment, as without the fleet.
func HostPagesWithFleet(t *testing.T, s store.Store) {
	ctx := t.Context()
	m, ids := pagesFixture(t, s)
	// Names that a linguistic collation orders otherwise than bytes do:
	// capitals (before every lower-case letter as bytes) and punctuation.
	m.checkIn(true, "Y1", "h0-seen")
	all, err := s.Hosts(ctx)
	must(t, err)
	known := map[string]store.HostRecord{}
	for _, r := range all {
		known[r.Hostname] = r
	}
	fleet := newTestRoster(map[string]store.FleetHost{
		"e1":   {Channel: "edge", Built: true},    // in edge@1
		"h05":  {Channel: "stable", Built: true},  // in edge@3: it matches as edge's
		"x1":   {Channel: "stable", Built: true},  // checked in, in no rollout
		"Y1":   {Channel: "prod", Built: true},    // checked in, in no rollout
		"A0":   {Channel: "prod", Built: true},    // never heard of
		"e-0":  {Channel: "edge", Built: true},    // never heard of
		"h0.5": {Channel: "edge", Built: false},   // never heard of, not built
		"zz":   {Channel: "stable", Built: true},  // never heard of
		"s2":   {Channel: "stable", Built: true},  // in stable@2
		"k03":  {Channel: "stable", Built: true},  // Failed in stable@4
		"e3":   {Channel: "edge", Built: true},    // only in a rollout that is not live
		"Zulu": {Channel: "nowhere", Built: true}, // never heard of
	})
	want := map[string]store.HostRecord{}
	for name, r := range known {
		want[name] = r
	}
	for name, h := range fleet.hosts {
		r, ok := want[name]
		if !ok {
			r = store.HostRecord{Hostname: name}
		}
		r.Fleet = &h
		want[name] = r
	}
	var every []string
	for name := range want {
		every = append(every, name)
	}
	slices.Sort(every) // bytes
	in := func(keep func(store.HostRecord) bool) []string {
		out := []string{}
		for _, name := range every {
			if keep(want[name]) {
				out = append(out, name)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		q    store.HostQuery
		want []string
	}{
		{"all", store.HostQuery{}, every},
		{"channel prod", store.HostQuery{Channel: "prod"}, []string{"A0", "Y1"}},
		{"channel edge", store.HostQuery{Channel: "edge"}, in(func(r store.HostRecord) bool {
			return r.Assignment != nil && r.Assignment.Channel == "edge" || r.Assignment == nil && r.Fleet != nil && r.Fleet.Channel == "edge"
		})},
		{"channel stable", store.HostQuery{Channel: "stable"}, in(func(r store.HostRecord) bool {
			return r.Assignment != nil && r.Assignment.Channel == "stable" || r.Assignment == nil && r.Fleet != nil && r.Fleet.Channel == "stable"
		})},
		{"state Pending", store.HostQuery{State: rc.HostPending}, []string{"e2", "h06", "h07", "h08", "h09", "h10", "h11", "h12", "s2", "s3"}},
		{"rollout", store.HostQuery{RolloutID: ids["stable4"]}, []string{"k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "s3"}},
		{"channel and state", store.HostQuery{Channel: "prod", State: rc.HostPending}, []string{}},
		{"after", store.HostQuery{After: "x1"}, []string{"x2", "zz"}},
		{"after, a channel", store.HostQuery{After: "A0", Channel: "prod"}, []string{"Y1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, limit := range []int{1, 2, 5, 0} {
				for _, scan := range []int{0, 1, 3} {
					q := tc.q
					q.Limit, q.MaxScan, q.Fleet = limit, scan, fleet
					got := []string{}
					for pages := 0; ; pages++ {
						if pages > len(every)+2 {
							t.Fatalf("limit %d, scan %d: %d pages and no end: %v", limit, scan, pages, got)
						}
						p, err := s.HostPage(ctx, q)
						must(t, err)
						if limit > 0 && len(p.Hosts) > limit {
							t.Fatalf("limit %d: a page of %d hosts", limit, len(p.Hosts))
						}
						for _, r := range p.Hosts {
							got = append(got, r.Hostname)
							diff(t, "the page's record of "+r.Hostname, r, want[r.Hostname])
						}
						if p.Next == "" {
							break
						}
						if p.Next <= q.After {
							t.Fatalf("limit %d, scan %d: next %q after %q", limit, scan, p.Next, q.After)
						}
						q.After = p.Next
					}
					diff(t, fmt.Sprintf("hosts paged by %d, scanning %d", limit, scan), got, tc.want)
				}
			}
		})
	}
}

// testRolloutPages: pages of rollout summaries cover every rollout once,
// newest first, under each filter and limit; a summary is the rollout
// without its hosts, edges, host windows and budgets' host lists, with its
// hosts counted by wave and state, also when read again, and after its
// rollout changed.
func testRolloutPages(t *testing.T, s store.Store) {
	ctx := t.Context()
	m, ids := pagesFixture(t, s)
	list, err := s.Rollouts(ctx)
	must(t, err)
	full := map[string]rc.Rollout{}
	for _, r := range list {
		full[r.ID], err = s.Rollout(ctx, r.ID)
		must(t, err)
	}
	defer func() {
		if t.Failed() {
			return
		}
		// A rollout that is not live (edge@2) becomes live while an intent
		// names it, and a tick changes it as the reconciler would (a
		// host's state, and so the rollout's progress time, rfcs/0005);
		// then it is not live again. Its summary, read before, is what it
		// is now.
		p, err := s.RolloutPage(ctx, store.RolloutQuery{Limit: 100})
		must(t, err)
		edge2 := ids["edge2"]
		must(t, s.AddIntent(ctx, rc.Intent{ID: "j", RolloutID: edge2, Kind: rc.IntentPause, At: m.now}))
		m.now = m.now.Add(time.Hour)
		m.tickWith(func(in rc.Input) (rc.Output, error) {
			var out rc.Output
			for _, r := range in.Rollouts {
				if r.ID != edge2 {
					continue
				}
				h := hostOf(r, "e3")
				h.State, h.Since = rc.HostFailed, m.now
				out.Hosts = append(out.Hosts, rc.HostUpdate{RolloutID: r.ID, From: rc.HostConverged, Host: h})
				r.ProgressAt, r.Hosts = m.now, nil
				out.Rollouts = append(out.Rollouts, rc.RolloutUpdate{From: r.State, Rollout: r})
			}
			out.IntentResults = []rc.IntentResult{{IntentID: "j", Reason: rc.Reason{Code: "illegal_transition"}}}
			if len(out.Hosts) != 1 {
				return out, fmt.Errorf("%s is not loaded while an intent names it", edge2)
			}
			return out, nil
		})
		after, err := s.RolloutPage(ctx, store.RolloutQuery{Limit: 100})
		must(t, err)
		if len(after.Rollouts) != len(p.Rollouts) {
			t.Fatalf("%d rollouts, then %d", len(p.Rollouts), len(after.Rollouts))
		}
		for _, sum := range after.Rollouts {
			r, err := s.Rollout(ctx, sum.Rollout.ID)
			must(t, err)
			checkSummary(t, sum, r)
		}
	}()
	for _, tc := range []struct {
		name string
		q    store.RolloutQuery
	}{
		{"all", store.RolloutQuery{}},
		{"channel", store.RolloutQuery{Channel: "edge"}},
		{"state", store.RolloutQuery{State: rc.RolloutFailed}},
		{"channel and state", store.RolloutQuery{Channel: "stable", State: rc.RolloutConverged}},
		{"unknown channel", store.RolloutQuery{Channel: "nope"}},
		{"before", store.RolloutQuery{Before: &store.RolloutCursor{OpenedAt: t0.Add(2 * time.Minute), ID: "m"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := []string{}
			for _, r := range list { // newest first
				if (tc.q.Channel == "" || r.Channel == tc.q.Channel) && (tc.q.State == "" || r.State == tc.q.State) &&
					(tc.q.Before == nil || r.OpenedAt.Before(tc.q.Before.OpenedAt) || r.OpenedAt.Equal(tc.q.Before.OpenedAt) && r.ID < tc.q.Before.ID) {
					want = append(want, r.ID)
				}
			}
			for _, limit := range []int{1, 2, 3, 0} {
				q := tc.q
				q.Limit = limit
				got := []string{}
				for pages := 0; ; pages++ {
					if pages > len(list)+1 {
						t.Fatalf("limit %d: no end", limit)
					}
					p, err := s.RolloutPage(ctx, q)
					must(t, err)
					if limit > 0 && len(p.Rollouts) > limit {
						t.Fatalf("limit %d: a page of %d", limit, len(p.Rollouts))
					}
					for _, sum := range p.Rollouts {
						got = append(got, sum.Rollout.ID)
						checkSummary(t, sum, full[sum.Rollout.ID])
					}
					if p.Next == nil {
						break
					}
					if limit > 0 && len(p.Rollouts) != limit {
						t.Fatalf("limit %d: a page of %d, and more follow", limit, len(p.Rollouts))
					}
					last := p.Rollouts[len(p.Rollouts)-1].Rollout
					diff(t, "next", *p.Next, store.RolloutCursor{OpenedAt: last.OpenedAt, ID: last.ID})
					q.Before = p.Next
				}
				diff(t, fmt.Sprintf("rollouts paged by %d", limit), got, want)
			}
		})
	}
}

// checkSummary compares a summary with the whole rollout.
func checkSummary(t *testing.T, sum store.RolloutSummary, r rc.Rollout) {
	t.Helper()
	want := r
	want.Hosts, want.Edges, want.HostWindows = nil, nil, nil
	want.Budgets = nil
	for _, b := range r.Budgets {
		b.Hosts = nil
		want.Budgets = append(want.Budgets, b)
	}
	diff(t, "summary of "+r.ID, sum.Rollout, want)
	diff(t, "host counts of "+r.ID, sum.Groups, groupsOf(r.Hosts, false))
}

// groupsOf groups hosts as the store does: by wave and state (and, with
// gates, the gate that held them, with their latest Since), in that order.
func groupsOf(hosts []rc.RolloutHost, gates bool) []store.HostGroup {
	var out []store.HostGroup
	for _, h := range hosts {
		g := store.HostGroup{Wave: h.Wave, State: h.State}
		if gates {
			g.Blocked = h.Blocked
		}
		i := slices.IndexFunc(out, func(o store.HostGroup) bool {
			return o.Wave == g.Wave && o.State == g.State && o.Blocked == g.Blocked
		})
		if i < 0 {
			i, out = len(out), append(out, g)
		}
		out[i].Count++
		if gates && h.Since.After(out[i].LatestSince) {
			out[i].LatestSince = h.Since
		}
	}
	slices.SortFunc(out, func(a, b store.HostGroup) int {
		return cmp.Or(cmp.Compare(a.Wave, b.Wave), strings.Compare(string(a.State), string(b.State)),
			strings.Compare(a.Blocked.Gate, b.Blocked.Gate), strings.Compare(a.Blocked.Code, b.Blocked.Code),
			strings.Compare(a.Blocked.Message, b.Blocked.Message))
	})
	return out
}

// testRolloutView: a rollout's view has its whole plan, its hosts in
// pages by name, and every host grouped; its header, the rollouts by id
// and each channel's latest read what they say and no more.
func testRolloutView(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, ids := pagesFixture(t, s)
	for _, id := range []string{ids["edge3"], ids["stable4"], ids["edge2"]} {
		r, err := s.Rollout(ctx, id)
		must(t, err)
		plan := r
		plan.Hosts = nil
		for _, limit := range []int{1, 4, 100, 0} {
			var got []rc.RolloutHost
			after := ""
			for pages := 0; ; pages++ {
				if pages > len(r.Hosts)+1 {
					t.Fatalf("%s by %d: no end", id, limit)
				}
				v, err := s.RolloutView(ctx, id, after, limit)
				must(t, err)
				page := v.Rollout.Hosts
				v.Rollout.Hosts = nil
				diff(t, "the view's rollout "+id, v.Rollout, plan)
				diff(t, "the view's host groups "+id, v.Groups, groupsOf(r.Hosts, true))
				if limit > 0 && len(page) > limit {
					t.Fatalf("%s by %d: a page of %d hosts", id, limit, len(page))
				}
				got = append(got, page...)
				if v.Next == "" {
					break
				}
				if len(page) != limit || v.Next != page[len(page)-1].Hostname {
					t.Fatalf("%s by %d: a page of %d hosts, next %q", id, limit, len(page), v.Next)
				}
				after = v.Next
			}
			diff(t, fmt.Sprintf("the hosts of %s paged by %d", id, limit), got, r.Hosts)
		}
		v, err := s.RolloutView(ctx, id, "", -1)
		must(t, err)
		if v.Rollout.Hosts != nil || v.Next != "" || len(v.Groups) == 0 {
			t.Errorf("a view of %s without hosts: %d hosts, next %q, %d groups", id, len(v.Rollout.Hosts), v.Next, len(v.Groups))
		}

		head, err := s.RolloutHeader(ctx, id)
		must(t, err)
		want := rc.Rollout{ID: r.ID, Channel: r.Channel, Ref: r.Ref, State: r.State, Wave: r.Wave, WavePhase: r.WavePhase,
			OpenedAt: r.OpenedAt, WaveStartedAt: r.WaveStartedAt, UpdatedAt: r.UpdatedAt, ProgressAt: r.ProgressAt, Reason: r.Reason,
			ManifestHash: r.ManifestHash, FailuresForgiven: r.FailuresForgiven}
		diff(t, "the header of "+id, head, want)
	}
	_, err := s.RolloutView(ctx, "nope@1", "", 0)
	wantErr(t, err, store.ErrNotFound, "RolloutView of an unknown id")
	_, err = s.RolloutHeader(ctx, "nope@1")
	wantErr(t, err, store.ErrNotFound, "RolloutHeader of an unknown id")

	// edge3 has edges and host windows: the view leaves out the one and
	// keeps the other.
	rs, err := s.RolloutsByID(ctx, []string{ids["stable4"], "nope@1", ids["edge1"], ids["edge3"]})
	must(t, err)
	var got []string
	for _, r := range rs {
		got = append(got, r.ID)
		whole, err := s.Rollout(ctx, r.ID)
		must(t, err)
		// What a host's view needs: not the hosts, the edges or the
		// budgets' host lists.
		if len(whole.Budgets) == 0 || len(whole.Budgets[0].Hosts) == 0 {
			t.Fatalf("%s has no budget with hosts: the comparison would not see them left out", r.ID)
		}
		whole.Hosts, whole.Edges = nil, nil
		for i := range whole.Budgets {
			whole.Budgets[i].Hosts = nil
		}
		diff(t, "RolloutsByID's "+r.ID, r, whole)
	}
	diff(t, "RolloutsByID, oldest first", got, []string{ids["edge1"], ids["edge3"], ids["stable4"]})
	none, err := s.RolloutsByID(ctx, nil)
	must(t, err)
	if len(none) != 0 {
		t.Errorf("RolloutsByID of no id: %v", none)
	}

	latest, err := s.LatestRollouts(ctx)
	must(t, err)
	diff(t, "latest rollouts", latest, map[string]string{"edge": ids["edge3"], "stable": ids["stable4"]})
}
