package controlplane_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestListPages: GET /v1/hosts and GET /v1/rollouts answer pages that,
// followed by their next, list what one big page lists, in order; the
// filters of /v1/hosts match a host's assignment; rollouts are
// summaries; GET /v1/rollouts/{id} pages its hosts and counts all of
// them; bad limits, cursors and filters are 400 bad_request.
func TestListPages(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			pe := newPagesEnv(t, backend, 40, 7)
			e := pe.e
			ctx := context.Background()
			viewer := e.client(e.viewKey.priv, "victor")

			// Hosts: every page of 7 is the list of one page of 5,000.
			all, _, err := viewer.HostPage(ctx, proto.HostQuery{Limit: 5000})
			if err != nil {
				t.Fatal(err)
			}
			if len(all.Hosts) != 40 || all.Next != "" {
				t.Fatalf("one page of every host: %d hosts, next %q", len(all.Hosts), all.Next)
			}
			names := func(hs []proto.HostView) []string {
				out := []string{}
				for _, h := range hs {
					out = append(out, h.Hostname)
				}
				return out
			}
			if !slices.IsSorted(names(all.Hosts)) {
				t.Errorf("hosts not by name: %v", names(all.Hosts))
			}
			for _, tc := range []struct {
				name string
				q    proto.HostQuery
				keep func(proto.HostView) bool
			}{
				{"all", proto.HostQuery{}, func(proto.HostView) bool { return true }},
				{"channel", proto.HostQuery{Channel: "stable"}, func(h proto.HostView) bool { return h.Channel == "stable" }},
				{"state", proto.HostQuery{State: "Pending"}, func(h proto.HostView) bool { return h.Host != nil && h.Host.State == "Pending" }},
				{"rollout", proto.HostQuery{Rollout: rolloutID("lts", 1)}, func(h proto.HostView) bool { return h.Rollout == rolloutID("lts", 1) }},
				{"past rollout", proto.HostQuery{Rollout: pastID(0)}, func(proto.HostView) bool { return false }},
			} {
				want := []string{}
				for _, h := range all.Hosts {
					if tc.keep(h) {
						want = append(want, h.Hostname)
					}
				}
				q := tc.q
				q.Limit = 7
				var got []proto.HostView
				pages := 0
				err := viewer.HostPages(ctx, q, func(p proto.HostList, _ json.RawMessage) bool {
					pages++
					if len(p.Hosts) > 7 {
						t.Errorf("%s: a page of %d hosts", tc.name, len(p.Hosts))
					}
					got = append(got, p.Hosts...)
					return true
				})
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(want, names(got)); d != "" {
					t.Errorf("%s: hosts paged by 7 (-want +got):\n%s", tc.name, d)
				}
				if tc.name == "all" && pages != 6 {
					t.Errorf("40 hosts in %d pages of 7", pages)
				}
				every, _, err := viewer.Hosts(ctx, tc.q)
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(want, names(every)); d != "" {
					t.Errorf("%s: apiclient's Hosts (-want +got):\n%s", tc.name, d)
				}
			}

			// Rollouts: summaries, newest first, in pages.
			var list proto.RolloutList
			raw := pe.get(t, "/v1/rollouts?limit=1000")
			if err := json.Unmarshal(raw, &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Rollouts) != 3+7 || list.Next != "" {
				t.Fatalf("one page of every rollout: %d rollouts, next %q", len(list.Rollouts), list.Next)
			}
			var doc struct {
				Rollouts []map[string]json.RawMessage `json:"rollouts"`
			}
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatal(err)
			}
			for i, r := range doc.Rollouts {
				id := list.Rollouts[i].ID
				for _, m := range []string{"hosts", "edges"} {
					if string(r[m]) != "null" {
						t.Errorf("summary of %s: %s is %s, want null", id, m, r[m])
					}
				}
				if _, ok := r["hostWindows"]; ok {
					t.Errorf("summary of %s has hostWindows", id)
				}
				var budgets []map[string]json.RawMessage
				if err := json.Unmarshal(r["budgets"], &budgets); err != nil || len(budgets) != 3 {
					t.Fatalf("summary of %s: budgets %s", id, r["budgets"])
				}
				for _, b := range budgets {
					if string(b["hosts"]) != "null" || b["selector"] == nil {
						t.Errorf("summary of %s: a budget %v", id, b)
					}
				}
				sum, total := list.Rollouts[i], 0
				for _, n := range sum.Counts {
					total += n
				}
				if want := hostsOf(t, pe, id); total != want || len(sum.WaveCounts) != 3 {
					t.Errorf("summary of %s: %d hosts counted, want %d; %d wave counts", id, total, want, len(sum.WaveCounts))
				}
			}
			if list.Rollouts[0].OpenedAt.Before(list.Rollouts[len(list.Rollouts)-1].OpenedAt) {
				t.Errorf("rollouts not newest first")
			}
			var ids []string
			pages := 0
			err = viewer.RolloutPages(ctx, proto.RolloutQuery{Limit: 3}, func(p proto.RolloutList, _ json.RawMessage) bool {
				pages++
				for _, r := range p.Rollouts {
					ids = append(ids, r.ID)
				}
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, r := range list.Rollouts {
				want = append(want, r.ID)
			}
			if d := cmp.Diff(want, ids); d != "" || pages != 4 {
				t.Errorf("rollouts paged by 3, %d pages (-want +got):\n%s", pages, d)
			}
			stable, _, err := viewer.RolloutPage(ctx, proto.RolloutQuery{Channel: "stable", State: string(reconciler.RolloutConverged)})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range stable.Rollouts {
				if r.Channel != "stable" || r.State != string(reconciler.RolloutConverged) {
					t.Errorf("stable and Converged: %s is %s", r.ID, r.State)
				}
			}
			if len(stable.Rollouts) == 0 {
				t.Errorf("no Converged rollout of stable")
			}

			// A rollout's hosts, in pages; its counts over all of them.
			id := rolloutID("stable", 1)
			whole, _, err := viewer.RolloutHostPage(ctx, id, "", 5000)
			if err != nil {
				t.Fatal(err)
			}
			if whole.HostsNext != "" || len(whole.Hosts) == 0 {
				t.Fatalf("a page of every host of %s: %d, next %q", id, len(whole.Hosts), whole.HostsNext)
			}
			var hosts []proto.RolloutHost
			after := ""
			for {
				r, _, err := viewer.RolloutHostPage(ctx, id, after, 4)
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(whole.Counts, r.Counts); d != "" {
					t.Errorf("counts of the page after %q (-all +page):\n%s", after, d)
				}
				if d := cmp.Diff(whole.WaveCounts, r.WaveCounts); d != "" {
					t.Errorf("wave counts of the page after %q (-all +page):\n%s", after, d)
				}
				hosts = append(hosts, r.Hosts...)
				if r.HostsNext == "" {
					break
				}
				after = r.HostsNext
			}
			if d := cmp.Diff(whole.Hosts, hosts); d != "" {
				t.Errorf("the hosts of %s paged by 4 (-whole +pages):\n%s", id, d)
			}
			if len(whole.Budgets) != 3 || whole.Budgets[0].Hosts == nil {
				t.Errorf("the whole view of %s has budgets %v, with their hosts", id, whole.Budgets)
			}

			// Bad parameters.
			view := e.caller(e.viewKey.priv, "victor")
			for _, path := range []string{
				"/v1/hosts?limit=0", "/v1/hosts?limit=5001", "/v1/hosts?limit=x", "/v1/hosts?after=a%00",
				"/v1/hosts?state=Sleeping", "/v1/hosts?channel=%ff", "/v1/hosts?rollout=%7f",
				"/v1/rollouts?limit=0", "/v1/rollouts?limit=1001", "/v1/rollouts?before=nope", "/v1/rollouts?before=" + url.QueryEscape("MTp4OnN0YWJsZQ"),
				"/v1/rollouts?state=Sleeping", "/v1/rollouts?channel=%00",
				"/v1/rollouts/" + id + "?hostsLimit=0", "/v1/rollouts/" + id + "?hostsLimit=5001", "/v1/rollouts/" + id + "?hostsAfter=%01",
			} {
				a := view.do(http.MethodGet, path, nil, nil)
				if a.status != http.StatusBadRequest || a.code != string(codes.BadRequest) {
					t.Errorf("GET %s: %d %s, want 400 bad_request", path, a.status, a.code)
				}
			}
			if a := view.do(http.MethodGet, "/v1/rollouts/stable@nope?hostsLimit=1", nil, nil); a.status != http.StatusNotFound {
				t.Errorf("GET of an unknown rollout: %d", a.status)
			}
		})
	}
}

// pastID is the id of the ith past rollout of newPagesEnv.
func pastID(i int) string {
	return proto.RolloutID([]string{"edge", "stable", "lts"}[i%3], pastRollout(reconciler.Rollout{}, i, 1).Ref)
}

// hostsOf counts a rollout's hosts from its whole view.
func hostsOf(t *testing.T, pe *pagesEnv, id string) int {
	t.Helper()
	r, _, err := pe.e.client(pe.e.viewKey.priv, "victor").RolloutHostPage(context.Background(), id, "", 5000)
	if err != nil {
		t.Fatal(err)
	}
	return len(r.Hosts)
}
