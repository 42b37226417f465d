package controlplane_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// The approver's intents (rfcs/0007 §Intents, 0011): approve and
// break-freeze. Their refusals for role and input are in TestHostileInput;
// the page each button is on, in TestRolloutPageChangeControl.

// TestApproveFiledWithItsWave: an approve is filed with the wave it names,
// which its answer and the dashboard's notice (read back from the store)
// show; the tick decides it (a converged rollout's wave: refused).
func TestApproveFiledWithItsWave(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, smallSpec(), nil)
			e.onboard(e.hosts())
			id := rolloutID("stable", 1)
			iv, _, err := e.client(e.apprKey.priv, "carol").Approve(context.Background(), id, 1, "after the fact")
			var ae *apiclient.Error
			if err != nil && (!errors.As(err, &ae) || ae.Status != http.StatusConflict) {
				t.Fatalf("approve: %v", err)
			}
			in := iv.Intent
			if in.Kind != reconciler.IntentApprove || in.Actor != "carol" || in.RolloutID != id || in.Comment != "after the fact" ||
				in.Wave == nil || *in.Wave != 1 || iv.Result == nil {
				t.Fatalf("the answer: %+v", iv)
			}
			b := e.browser()
			b.signIn(e.viewKey.priv, "victor")
			if page := b.page("/ui/rollouts/"+id+"?intent="+in.ID, http.StatusOK); !strings.Contains(page, "approve of wave 2 by carol:") {
				t.Errorf("the notice of the intent:\n%s", page)
			}
		})
	}
}

// TestApprovals: a wave with an approval gate of two approvers waits for
// them (rfcs/0003 rule 15). Approvers are offered "Approve wave 2…" on the
// rollout page with the approvals so far, operators are not; an approval
// through the API and one through the dashboard let the wave go on.
//
// It needs the reconciler's approval gate and its decision of approve.
func TestApprovals(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, smallSpec(), nil)
			hosts := e.hosts()
			e.onboard(hosts)
			ctx := context.Background()
			viewer := e.client(e.viewKey.priv, "victor")
			id := rolloutID("stable", 2)
			step := func() {
				for _, h := range hosts {
					_ = h.Step(ctx, 0)
				}
			}
			webHeld := func() bool {
				for _, name := range []string{"web-1", "web-2", "web-3"} {
					if h := hostIn(t, e, id, name); h.State != string(reconciler.HostPending) || h.Blocked.Gate != codes.Approval {
						return false
					}
				}
				return true
			}

			e.spec.Approvals = map[string]map[int]proto.Approval{"stable": {1: {Required: true, Approvers: 2}}}
			e.release("v1", 2)
			e.await(10*time.Second, "the web hosts wait on gate approval", func() bool {
				step()
				return webHeld()
			})

			carolB, daveB, aliceB := e.browser(), e.browser(), e.browser()
			carolB.signIn(e.apprKey.priv, "carol")
			daveB.signIn(e.appr2Key.priv, "dave")
			aliceB.signIn(e.opKey.priv, "alice")
			if page := carolB.page("/ui/rollouts/"+id, http.StatusOK); !strings.Contains(page, "Approve wave 2…") ||
				!strings.Contains(page, "Approvals of wave 2: 0 of 2") {
				t.Errorf("carol's page:\n%s", page)
			}
			if page := aliceB.page("/ui/rollouts/"+id, http.StatusOK); strings.Contains(page, "Approve wave") {
				t.Errorf("alice, an operator, is offered to approve")
			}

			// carol approves through the API: one of two.
			iv, _, err := e.client(e.apprKey.priv, "carol").Approve(ctx, id, 1, "the canary is healthy")
			if err != nil || iv.Result == nil || !iv.Result.Accepted || iv.Result.Reason.Code != codes.OperatorApprove {
				t.Fatalf("carol's approval: %+v, %v", iv, err)
			}
			e.settle()
			var r proto.Rollout
			if err := viewer.Get(ctx, "/v1/rollouts/"+id, &r); err != nil {
				t.Fatal(err)
			}
			if len(r.Approvals) != 1 || r.Approvals[0].Actor != "carol" || r.Approvals[0].Wave != 1 || !webHeld() {
				t.Fatalf("after one approval of two: approvals %+v, web-1 %+v", r.Approvals, hostIn(t, e, id, "web-1"))
			}
			if page := carolB.page("/ui/rollouts/"+id, http.StatusOK); strings.Contains(page, "Approve wave 2…") ||
				!strings.Contains(page, "Approvals of wave 2: 1 of 2: carol") {
				t.Errorf("carol, who approved, is offered to approve again, or does not see her approval:\n%s", page)
			}

			// dave approves through the dashboard: the wave goes on.
			page := daveB.page("/ui/rollouts/"+id, http.StatusOK)
			if !strings.Contains(page, "Approve wave 2…") || !strings.Contains(page, "1 of 2: carol") {
				t.Fatalf("dave's page:\n%s", page)
			}
			res := daveB.do("POST", "/ui/rollouts/"+id+"/approve", url.Values{"csrf": {csrfOf(t, page)}, "wave": {"1"}, "comment": {"web looks fine"}},
				http.Header{"Origin": {e.url}})
			if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/ui/rollouts/"+id+"?intent=") {
				t.Fatalf("dave's form: %d %q %s", res.StatusCode, res.Header.Get("Location"), daveB.last)
			}
			if after := daveB.page(res.Header.Get("Location"), http.StatusOK); !strings.Contains(after, "approve of wave 2 by dave: accepted") {
				t.Errorf("the page does not show dave's approval accepted:\n%s", after)
			}
			e.await(10*time.Second, "the rollout converges", func() bool {
				step()
				return rolloutState(t, e, id) == reconciler.RolloutConverged
			})
		})
	}
}

// TestWebFreezeBreak: while a freeze holds a rollout's hosts, the rollout
// page offers approvers "Break freeze…"; operators and viewers are not
// offered it and their forms are refused, as are forged forms and forms
// that are not what the intent takes. An approver's break lets the hosts
// go.
//
// Its last part needs the reconciler's decision of break-freeze.
func TestWebFreezeBreak(t *testing.T) {
	e := newEnv(t, "sqlite", smallSpec(), nil)
	hosts := e.hosts()
	e.onboard(hosts)
	ctx := context.Background()
	id := rolloutID("stable", 2)

	// v1 declares a freeze that begins after it opened and dispatched the
	// canary: the canary lands, and the freeze holds the second wave.
	start := e.clock.Now().Add(2 * time.Minute)
	e.spec.Freezes = []proto.Freeze{{From: start, Until: start.Add(24 * time.Hour), Reason: "year-end freeze"}}
	e.release("v1", 2)
	e.await(10*time.Second, "the canary is dispatched", func() bool {
		return hostIn(t, e, id, "canary").State == string(reconciler.HostActivating)
	})
	e.clock.Advance(2 * time.Minute)
	e.await(10*time.Second, "the freeze holds the web hosts", func() bool {
		for _, h := range hosts {
			_ = h.Step(ctx, 0)
		}
		for _, name := range []string{"web-1", "web-2", "web-3"} {
			if h := hostIn(t, e, id, name); h.State != string(reconciler.HostPending) || h.Blocked.Gate != codes.Freeze {
				return false
			}
		}
		return true
	})

	carol, alice, victor := e.browser(), e.browser(), e.browser()
	carol.signIn(e.apprKey.priv, "carol")
	alice.signIn(e.opKey.priv, "alice")
	victor.signIn(e.viewKey.priv, "victor")
	cpage := carol.page("/ui/rollouts/"+id, http.StatusOK)
	if !strings.Contains(cpage, "Break freeze…") || !strings.Contains(cpage, "Pause…") {
		t.Errorf("carol, an approver, is not offered to break the freeze and to pause:\n%s", cpage)
	}
	apage := alice.page("/ui/rollouts/"+id, http.StatusOK)
	if strings.Contains(apage, "Break freeze") || !strings.Contains(apage, "Pause…") {
		t.Errorf("alice, an operator, is offered to break the freeze, or not to pause:\n%s", apage)
	}
	vpage := victor.page("/ui/rollouts/"+id, http.StatusOK)
	if strings.Contains(vpage, "Break freeze") || strings.Contains(vpage, "Confirm") {
		t.Errorf("victor, a viewer, is offered actions")
	}
	token, origin := csrfOf(t, cpage), http.Header{"Origin": {e.url}}

	refused := []struct {
		name   string
		b      *browser
		action string
		form   url.Values
		status int
		code   string // or a part of the message
	}{
		{"an operator breaks the freeze", alice, "break-freeze", url.Values{"csrf": {csrfOf(t, apage)}, "comment": {"hotfix"}}, 403, "break-freeze needs role approver"},
		{"an operator approves", alice, "approve", url.Values{"csrf": {csrfOf(t, apage)}, "wave": {"1"}, "comment": {"ok"}}, 403, codes.Forbidden},
		{"a viewer breaks the freeze", victor, "break-freeze", url.Values{"csrf": {csrfOf(t, vpage)}, "comment": {"hotfix"}}, 403, "break-freeze needs role approver"},
		{"a viewer pauses", victor, "pause", url.Values{"csrf": {csrfOf(t, vpage)}, "comment": {"stop"}}, 403, codes.Forbidden},
		{"no token", carol, "break-freeze", url.Values{"comment": {"hotfix"}}, 403, codes.CsrfRefused},
		{"another session's token", carol, "break-freeze", url.Values{"csrf": {csrfOf(t, apage)}, "comment": {"hotfix"}}, 403, codes.CsrfRefused},
		{"a blank comment", carol, "break-freeze", url.Values{"csrf": {token}, "comment": {"  "}}, 400, codes.BadRequest},
		{"a break with a wave", carol, "break-freeze", url.Values{"csrf": {token}, "wave": {"1"}, "comment": {"hotfix"}}, 400, codes.BadRequest},
		{"an approval without a wave", carol, "approve", url.Values{"csrf": {token}, "comment": {"ok"}}, 400, codes.BadRequest},
		{"an approval of a negative wave", carol, "approve", url.Values{"csrf": {token}, "wave": {"-1"}, "comment": {"ok"}}, 400, codes.BadRequest},
		{"an approval of a wave that is no number", carol, "approve", url.Values{"csrf": {token}, "wave": {"two"}, "comment": {"ok"}}, 400, codes.BadRequest},
		{"an approval of two waves", carol, "approve", url.Values{"csrf": {token}, "wave": {"1", "0"}, "comment": {"ok"}}, 400, codes.BadRequest},
		{"a pause with a wave", carol, "pause", url.Values{"csrf": {token}, "wave": {"0"}, "comment": {"stop"}}, 400, codes.BadRequest},
	}
	for _, c := range refused {
		res := c.b.do("POST", "/ui/rollouts/"+id+"/"+c.action, c.form, origin)
		if res.StatusCode != c.status || !strings.Contains(c.b.last, c.code) {
			t.Errorf("%s: %d, want %d %s: %s", c.name, res.StatusCode, c.status, c.code, c.b.last)
		}
	}
	evs, _, err := e.client(e.viewKey.priv, "victor").RolloutEvents(ctx, id, proto.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Kind == reconciler.EventIntentAccepted || ev.Kind == reconciler.EventIntentRefused {
			t.Fatalf("a refused form filed an intent: %+v", ev)
		}
	}

	// carol breaks the freeze: the web hosts are dispatched.
	res := carol.do("POST", "/ui/rollouts/"+id+"/break-freeze", url.Values{"csrf": {token}, "comment": {"the fix for the outage"}}, origin)
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/ui/rollouts/"+id+"?intent=") {
		t.Fatalf("carol's form: %d %q %s", res.StatusCode, res.Header.Get("Location"), carol.last)
	}
	if after := carol.page(res.Header.Get("Location"), http.StatusOK); !strings.Contains(after, "break-freeze by carol: accepted") {
		t.Fatalf("the page does not show carol's break accepted:\n%s", after)
	}
	e.await(10*time.Second, "the web hosts are dispatched", func() bool {
		return hostIn(t, e, id, "web-1").State != string(reconciler.HostPending)
	})
	if page := carol.page("/ui/rollouts/"+id, http.StatusOK); strings.Contains(page, "Break freeze…") || !strings.Contains(page, "Freeze broken by carol") {
		t.Errorf("after the break:\n%s", page)
	}
}

// TestWebFrozenRelease: a release that a freeze keeps from opening is shown
// on the overview with a "Break freeze…" form for approvers only; the API
// files a break-freeze for its rollout id although no such rollout exists
// yet, and an accepted one opens it.
//
// Its last part needs the reconciler's decision of break-freeze.
func TestWebFrozenRelease(t *testing.T) {
	e := newEnv(t, "sqlite", smallSpec(), nil)
	e.onboard(e.hosts())
	ctx := context.Background()
	id := rolloutID("stable", 2)
	e.spec.Freezes = []proto.Freeze{{From: e.clock.Now().Add(-time.Minute), Until: e.clock.Now().Add(24 * time.Hour), Reason: "year-end freeze"}}
	e.release("v1", 2)
	e.await(10*time.Second, "the freeze defers the release", func() bool {
		rels, _, err := e.client(e.viewKey.priv, "victor").Releases(ctx, proto.ReleaseQuery{Channel: "stable"})
		return err == nil && len(rels) > 0 && rels[0].Ref == fleetkit.Commit(2) && rels[0].Fate == proto.FateDeferred &&
			rels[0].Reason.Code == codes.Freeze
	})

	carol, alice := e.browser(), e.browser()
	carol.signIn(e.apprKey.priv, "carol")
	alice.signIn(e.opKey.priv, "alice")
	page := carol.page("/ui/", http.StatusOK)
	form := `action="/ui/rollouts/` + id + `/break-freeze"`
	if !strings.Contains(page, "Break freeze…") || !strings.Contains(page, form) || !strings.Contains(page, "year-end freeze") {
		t.Fatalf("carol's overview:\n%s", page)
	}
	if apage := alice.page("/ui/", http.StatusOK); strings.Contains(apage, "Break freeze") || !strings.Contains(apage, "year-end freeze") {
		t.Errorf("alice's overview offers to break the freeze, or does not show it:\n%s", apage)
	}
	// Nothing to break for an id no release names.
	res := carol.do("POST", "/ui/rollouts/stable@nope/break-freeze", url.Values{"csrf": {csrfOf(t, page)}, "comment": {"hotfix"}}, http.Header{"Origin": {e.url}})
	carol.wantCode(res, http.StatusNotFound, codes.NotFound)

	res = carol.do("POST", "/ui/rollouts/"+id+"/break-freeze", url.Values{"csrf": {csrfOf(t, page)}, "comment": {"the fix for the outage"}},
		http.Header{"Origin": {e.url}})
	loc := res.Header.Get("Location")
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/ui/rollouts/"+id+"?intent=") && !strings.HasPrefix(loc, "/ui/?intent=") {
		t.Fatalf("carol's form: %d %q %s", res.StatusCode, loc, carol.last)
	}
	if after := carol.page(loc, http.StatusOK); !strings.Contains(after, "break-freeze by carol: accepted") {
		t.Fatalf("the page does not show carol's break accepted:\n%s", after)
	}
	e.await(10*time.Second, "the release opens", func() bool { return rolloutState(t, e, id) != "" })
}
