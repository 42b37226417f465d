package controlplane_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/intent"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// The approver's intents (rfcs/0007 §Intents, 0011): approve and
// break-freeze. Their refusals for role and input are in TestHostileInput;
// the page that shows each command, in TestRolloutPageChangeControl.

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
			if page := b.page("/ui/rollouts/"+id+"?intent="+in.ID, http.StatusOK); !strings.Contains(page, "approve of wave 1 by carol:") {
				t.Errorf("the notice of the intent:\n%s", page)
			}
		})
	}
}

// TestApprovals: a wave with an approval gate of two approvers waits for
// them (rfcs/0003 rule 15). Approvers are shown, on the rollout page, the
// approvals so far and the signed CLI command that approves the wave
// (waves counted from 0); operators and viewers see the approvals only. The
// dashboard files no approval: a browser holds no operator key. Approvals
// signed with the approvers' keys let the wave go on; a signed intent is
// refused when it is unsigned, stale, for another rollout, signed by
// another key or replayed (rfcs/0007 §Signed intents).
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
			approvals := func() []proto.WaveApproval {
				t.Helper()
				var r proto.Rollout
				if err := viewer.Get(ctx, "/v1/rollouts/"+id, &r); err != nil {
					t.Fatal(err)
				}
				return r.Approvals
			}

			e.spec.Approvals = map[string]map[int]proto.Approval{"stable": {1: {Required: true, Approvers: 2}}}
			e.release("v1", 2)
			e.await(10*time.Second, "the web hosts wait on gate approval", func() bool {
				step()
				return webHeld()
			})

			command := "nixfleet rollout approve " + id + " --wave 1 --comment"
			carolB, daveB, aliceB, victorB := e.browser(), e.browser(), e.browser(), e.browser()
			carolB.signIn(e.apprKey.priv, "carol")
			daveB.signIn(e.appr2Key.priv, "dave")
			aliceB.signIn(e.opKey.priv, "alice")
			victorB.signIn(e.viewKey.priv, "victor")
			if page := carolB.page("/ui/rollouts/"+id, http.StatusOK); !strings.Contains(page, "Approve wave 1</strong>") ||
				!strings.Contains(page, command) || !strings.Contains(page, "Approvals of wave 1: 0 of 2") ||
				strings.Contains(page, "/approve\"") {
				t.Errorf("carol's page:\n%s", page)
			}
			for name, b := range map[string]*browser{"alice, an operator,": aliceB, "victor, a viewer,": victorB} {
				if page := b.page("/ui/rollouts/"+id, http.StatusOK); strings.Contains(page, "Approve wave") || strings.Contains(page, "signed-action") ||
					strings.Contains(page, command) || !strings.Contains(page, "Approvals of wave 1: 0 of 2") {
					t.Errorf("%s is shown how to approve, or not the approvals so far:\n%s", name, page)
				}
			}

			// A held host's page says the command once, as its next
			// step: the gate's message does not repeat it.
			if page := victorB.page("/ui/hosts/web-1", http.StatusOK); strings.Count(page, "nixfleet rollout approve") != 1 ||
				!strings.Contains(page, "wave 1 needs 2 approval(s) (none yet)") {
				t.Errorf("web-1's page does not say the approve command once:\n%s", page)
			}

			// carol approves through the API, signed: one of two.
			iv, _, err := e.client(e.apprKey.priv, "carol").Approve(ctx, id, 1, "the canary is healthy")
			if err != nil || iv.Result == nil || !iv.Result.Accepted || iv.Result.Reason.Code != codes.OperatorApprove ||
				iv.Intent.Wave == nil || *iv.Intent.Wave != 1 {
				t.Fatalf("carol's approval: %+v, %v", iv, err)
			}
			e.settle()
			if as := approvals(); len(as) != 1 || as[0].Actor != "carol" || as[0].Wave != 1 || !webHeld() {
				t.Fatalf("after one approval of two: approvals %+v, web-1 %+v", as, hostIn(t, e, id, "web-1"))
			}
			if page := carolB.page("/ui/rollouts/"+id, http.StatusOK); strings.Contains(page, command) ||
				!strings.Contains(page, "Approvals of wave 1: 1 of 2: carol") {
				t.Errorf("carol, who approved, is shown how to approve again, or does not see her approval:\n%s", page)
			}
			page := daveB.page("/ui/rollouts/"+id, http.StatusOK)
			if !strings.Contains(page, command) || !strings.Contains(page, "approvals so far: 1 of 2: carol") {
				t.Fatalf("dave's page:\n%s", page)
			}

			// The dashboard refuses dave's approval: it cannot be signed.
			before := e.settle()
			res := daveB.do("POST", "/ui/rollouts/"+id+"/approve", url.Values{"csrf": {csrfOf(t, page)}, "wave": {"1"}, "comment": {"web looks fine"}},
				http.Header{"Origin": {e.url}})
			if res.StatusCode != http.StatusBadRequest || !strings.Contains(daveB.last, codes.UnsignedIntent) ||
				!strings.Contains(daveB.last, "run nixfleet rollout approve") {
				t.Errorf("dave's form: %d %s", res.StatusCode, daveB.last)
			}

			// Signed intents the API refuses, sent raw with dave's
			// certificate; none is filed.
			dave := e.caller(e.appr2Key.priv, "dave")
			wave := 1
			body := func(key []byte, rollout string, at time.Time) []byte {
				s, err := intent.Sign(key, proto.IntentDocument{Kind: reconciler.IntentApprove, RolloutID: rollout, Wave: &wave,
					Comment: "web looks fine", IssuedAt: at, Nonce: intent.NewNonce()})
				if err != nil {
					t.Fatal(err)
				}
				return mustJSON(t, proto.IntentRequest{Wave: &wave, Comment: "web looks fine", Signed: &s})
			}
			path, now := "/v1/rollouts/"+id+"/approve", e.clock.Now()
			expect(t, "an unsigned approval", dave.post(path, []byte(`{"wave":1,"comment":"web looks fine"}`)), http.StatusBadRequest, codes.UnsignedIntent)
			expect(t, "an approval signed 10 minutes ago", dave.post(path, body(e.appr2Key.priv, id, now.Add(-10*time.Minute))),
				http.StatusBadRequest, codes.StaleIntent)
			expect(t, "an approval signed 10 minutes ahead", dave.post(path, body(e.appr2Key.priv, id, now.Add(10*time.Minute))),
				http.StatusBadRequest, codes.StaleIntent)
			expect(t, "an approval signed for another rollout", dave.post(path, body(e.appr2Key.priv, rolloutID("stable", 1), now)),
				http.StatusBadRequest, codes.IntentMismatch)
			expect(t, "an approval signed by carol, sent by dave", dave.post(path, body(e.apprKey.priv, id, now)),
				http.StatusForbidden, codes.BadIntentSignature)
			e.unchanged(before, "a refused approval changed the state")

			// dave's approval, signed: the wave goes on. The same body
			// again is a replay.
			signed := body(e.appr2Key.priv, id, now)
			a := dave.post(path, signed)
			var dv proto.IntentResponse
			if err := json.Unmarshal(a.body, &dv); err != nil || a.status != http.StatusOK || dv.Result == nil || !dv.Result.Accepted ||
				dv.Intent.Actor != "dave" {
				t.Fatalf("dave's approval: HTTP %d %s", a.status, a.body)
			}
			expect(t, "dave's approval replayed", dave.post(path, signed), http.StatusConflict, codes.ReplayedIntent)
			e.await(10*time.Second, "the rollout converges", func() bool {
				step()
				return rolloutState(t, e, id) == reconciler.RolloutConverged
			})
			if as := approvals(); len(as) != 2 || as[0].Actor != "carol" || as[1].Actor != "dave" {
				t.Errorf("approvals: %+v", as)
			}
			// The store keeps each approval once, with what was signed.
			entries, _, err := viewer.Intents(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			keys := map[string][]byte{"carol": e.apprKey.priv, "dave": e.appr2Key.priv}
			n := 0
			for _, en := range entries {
				if en.Intent.Kind != reconciler.IntentApprove {
					continue
				}
				n++
				if en.Signed == nil {
					t.Errorf("%s's approval is kept unsigned", en.Intent.Actor)
					continue
				}
				d, err := intent.Verify(ed25519.PrivateKey(keys[en.Intent.Actor]).Public().(ed25519.PublicKey), *en.Signed)
				if err != nil || d.Nonce != en.Intent.ID || d.Wave == nil || *d.Wave != 1 {
					t.Errorf("%s's approval: %+v, %v", en.Intent.Actor, d, err)
				}
			}
			if n != 2 {
				t.Errorf("%d approvals filed, want 2: %+v", n, entries)
			}
			if after := daveB.page("/ui/rollouts/"+id+"?intent="+dv.Intent.ID, http.StatusOK); !strings.Contains(after, "approve of wave 1 by dave: accepted") {
				t.Errorf("the page does not show dave's approval accepted:\n%s", after)
			}
		})
	}
}

// TestWebFreezeBreak: while a freeze holds a rollout's hosts, the rollout
// page shows approvers the signed CLI command that breaks it; operators
// and viewers are not shown it. The dashboard files no break: its form
// is refused, an approver's as unsigned_intent (a browser holds no
// operator key), after the CSRF and role checks that refuse forged forms
// and other roles' first. An approver's break through the API, signed,
// lets the hosts go.
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

	command := "nixfleet rollout break-freeze " + id + " --comment"
	carol, alice, victor := e.browser(), e.browser(), e.browser()
	carol.signIn(e.apprKey.priv, "carol")
	alice.signIn(e.opKey.priv, "alice")
	victor.signIn(e.viewKey.priv, "victor")
	cpage := carol.page("/ui/rollouts/"+id, http.StatusOK)
	if !strings.Contains(cpage, "Break the freeze") || !strings.Contains(cpage, command) || !strings.Contains(cpage, "Pause…") ||
		strings.Contains(cpage, "/break-freeze\"") {
		t.Errorf("carol, an approver, is not shown how to break the freeze, or not offered to pause, or offered a form to break it:\n%s", cpage)
	}
	apage := alice.page("/ui/rollouts/"+id, http.StatusOK)
	if strings.Contains(apage, "break-freeze") || strings.Contains(apage, "Break the freeze") || !strings.Contains(apage, "Pause…") {
		t.Errorf("alice, an operator, is shown how to break the freeze, or not offered to pause:\n%s", apage)
	}
	vpage := victor.page("/ui/rollouts/"+id, http.StatusOK)
	if strings.Contains(vpage, "break-freeze") || strings.Contains(vpage, "Break the freeze") || strings.Contains(vpage, "Confirm") {
		t.Errorf("victor, a viewer, is offered actions:\n%s", vpage)
	}
	token, origin := csrfOf(t, cpage), http.Header{"Origin": {e.url}}

	// webWrap checks the CSRF token, then the role; webIntent then
	// refuses an approver's intent as unsigned before it reads the form.
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
		{"an operator breaks the freeze without a token", alice, "break-freeze", url.Values{"comment": {"hotfix"}}, 403, codes.CsrfRefused},
		{"a viewer breaks the freeze", victor, "break-freeze", url.Values{"csrf": {csrfOf(t, vpage)}, "comment": {"hotfix"}}, 403, "break-freeze needs role approver"},
		{"a viewer pauses", victor, "pause", url.Values{"csrf": {csrfOf(t, vpage)}, "comment": {"stop"}}, 403, codes.Forbidden},
		{"no token", carol, "break-freeze", url.Values{"comment": {"hotfix"}}, 403, codes.CsrfRefused},
		{"another session's token", carol, "break-freeze", url.Values{"csrf": {csrfOf(t, apage)}, "comment": {"hotfix"}}, 403, codes.CsrfRefused},
		{"an approver breaks the freeze", carol, "break-freeze", url.Values{"csrf": {token}, "comment": {"the fix for the outage"}}, 400, codes.UnsignedIntent},
		{"an approver approves", carol, "approve", url.Values{"csrf": {token}, "wave": {"1"}, "comment": {"ok"}}, 400, codes.UnsignedIntent},
		{"a blank comment", carol, "break-freeze", url.Values{"csrf": {token}, "comment": {"  "}}, 400, codes.UnsignedIntent},
		{"an approval without a wave", carol, "approve", url.Values{"csrf": {token}, "comment": {"ok"}}, 400, codes.UnsignedIntent},
		{"a pause with a wave", carol, "pause", url.Values{"csrf": {token}, "wave": {"0"}, "comment": {"stop"}}, 400, codes.BadRequest},
	}
	for _, c := range refused {
		res := c.b.do("POST", "/ui/rollouts/"+id+"/"+c.action, c.form, origin)
		if res.StatusCode != c.status || !strings.Contains(c.b.last, c.code) {
			t.Errorf("%s: %d, want %d %s: %s", c.name, res.StatusCode, c.status, c.code, c.b.last)
		}
		if c.code == codes.UnsignedIntent && !strings.Contains(c.b.last, "run nixfleet rollout "+c.action) {
			t.Errorf("%s: the refusal does not name the command: %s", c.name, c.b.last)
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
	if h := hostIn(t, e, id, "web-1"); h.State != string(reconciler.HostPending) || h.Blocked.Gate != codes.Freeze {
		t.Fatalf("after the refused forms, web-1: %+v", h)
	}

	// carol breaks the freeze with the API, signed: the web hosts are
	// dispatched.
	iv, _, err := e.client(e.apprKey.priv, "carol").BreakFreeze(ctx, id, "the fix for the outage")
	if err != nil || iv.Result == nil || !iv.Result.Accepted || iv.Intent.Actor != "carol" || iv.Intent.Wave != nil {
		t.Fatalf("carol's break: %+v, %v", iv, err)
	}
	if after := carol.page("/ui/rollouts/"+id+"?intent="+iv.Intent.ID, http.StatusOK); !strings.Contains(after, "break-freeze by carol: accepted") {
		t.Fatalf("the page does not show carol's break accepted:\n%s", after)
	}
	e.await(10*time.Second, "the web hosts are dispatched", func() bool {
		return hostIn(t, e, id, "web-1").State != string(reconciler.HostPending)
	})
	if page := carol.page("/ui/rollouts/"+id, http.StatusOK); strings.Contains(page, command) || !strings.Contains(page, "Freeze broken by carol") ||
		!strings.Contains(page, "the fix for the outage") {
		t.Errorf("after the break:\n%s", page)
	}
}

// TestWebFrozenRelease: a release that a freeze keeps from opening is shown
// on the overview, with the signed CLI command that breaks the freeze for
// approvers only. The dashboard refuses to file the break; the API files
// a signed break-freeze for its rollout id although no such rollout exists
// yet, and an accepted one opens it.
func TestWebFrozenRelease(t *testing.T) {
	e := newEnv(t, "sqlite", smallSpec(), nil)
	e.onboard(e.hosts())
	ctx := context.Background()
	id := rolloutID("stable", 2)
	e.spec.Freezes = []proto.Freeze{{From: e.clock.Now().Add(-time.Minute), Until: e.clock.Now().Add(24 * time.Hour), Reason: "year-end freeze"}}
	e.release("v1", 2)
	deferred := func() bool {
		rels, _, err := e.client(e.viewKey.priv, "victor").Releases(ctx, proto.ReleaseQuery{Channel: "stable"})
		return err == nil && len(rels) > 0 && rels[0].Ref == fleetkit.Commit(2) && rels[0].Fate == proto.FateDeferred &&
			rels[0].Reason.Code == codes.Freeze
	}
	e.await(10*time.Second, "the freeze defers the release", deferred)

	carol, alice := e.browser(), e.browser()
	carol.signIn(e.apprKey.priv, "carol")
	alice.signIn(e.opKey.priv, "alice")
	page := carol.page("/ui/", http.StatusOK)
	command := "nixfleet rollout break-freeze " + id + " --comment"
	if !strings.Contains(page, command) || strings.Contains(page, "/break-freeze\"") || !strings.Contains(page, "year-end freeze") {
		t.Fatalf("carol's overview:\n%s", page)
	}
	if apage := alice.page("/ui/", http.StatusOK); strings.Contains(apage, "break-freeze") || !strings.Contains(apage, "year-end freeze") {
		t.Errorf("alice's overview shows how to break the freeze, or does not show it:\n%s", apage)
	}
	// The dashboard files no break, for this release or for an id no
	// release names.
	for _, rid := range []string{id, "stable@nope"} {
		res := carol.do("POST", "/ui/rollouts/"+rid+"/break-freeze", url.Values{"csrf": {csrfOf(t, page)}, "comment": {"the fix for the outage"}},
			http.Header{"Origin": {e.url}})
		carol.wantCode(res, http.StatusBadRequest, codes.UnsignedIntent)
	}
	e.tick()
	if !deferred() || rolloutState(t, e, id) != "" {
		t.Fatalf("the release opened after a refused form")
	}

	// Nothing to break for an id no release names.
	cc := e.client(e.apprKey.priv, "carol")
	var ae *apiclient.Error
	if _, _, err := cc.BreakFreeze(ctx, "stable@nope", "hotfix"); !errors.As(err, &ae) || ae.Status != http.StatusNotFound || ae.Code != codes.NotFound {
		t.Errorf("a break of stable@nope: %v", err)
	}
	iv, _, err := cc.BreakFreeze(ctx, id, "the fix for the outage")
	if err != nil || iv.Result == nil || !iv.Result.Accepted || iv.Intent.RolloutID != id {
		t.Fatalf("carol's break: %+v, %v", iv, err)
	}
	if after := carol.page("/ui/?intent="+iv.Intent.ID, http.StatusOK); !strings.Contains(after, "break-freeze by carol: accepted") {
		t.Fatalf("the overview does not show carol's break accepted:\n%s", after)
	}
	e.await(10*time.Second, "the release opens", func() bool { return rolloutState(t, e, id) != "" })
}
