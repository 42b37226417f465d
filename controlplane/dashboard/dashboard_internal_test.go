package dashboard

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestRolloutPageChangeControl: the rollout page shows a wave's approvals
// so far to everyone, and to approvers who have not approved a wave whose
// hosts wait on gate approval the signed CLI command that approves it; to
// approvers while a freeze holds hosts, the command that breaks it. The
// page has no form for either (a browser holds no operator key), operators
// and viewers get neither command, and a rollout that is over shows
// neither. Waves are counted from 0, as in the journal and the CLI.
func TestRolloutPageChangeControl(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	gated := reconciler.Rollout{ID: "stable@abc", Channel: "stable", State: reconciler.RolloutActive, Wave: 1,
		Waves: []reconciler.WaveSpec{{}, {Name: "web", Approval: &proto.Approval{Required: true, Approvers: 2}}},
		Hosts: []reconciler.RolloutHost{
			{Hostname: "canary", Wave: 0, State: reconciler.HostConverged},
			{Hostname: "web-1", Wave: 1, State: reconciler.HostPending, Blocked: reconciler.Reason{Gate: codes.Approval, Code: codes.Approval}},
			{Hostname: "web-2", Wave: 1, State: reconciler.HostPending, Blocked: reconciler.Reason{Gate: codes.Approval, Code: codes.Approval}},
		},
		Approvals: []reconciler.Approval{{Wave: 1, Actor: "dave", At: now, Intent: "i1"}},
	}
	frozen := reconciler.Rollout{ID: "stable@def", Channel: "stable", State: reconciler.RolloutActive, Wave: 1,
		Waves: []reconciler.WaveSpec{{}, {}},
		Hosts: []reconciler.RolloutHost{
			{Hostname: "canary", Wave: 0, State: reconciler.HostConverged},
			{Hostname: "web-1", Wave: 1, State: reconciler.HostPending, Blocked: reconciler.Reason{Gate: codes.Freeze, Code: codes.Freeze}},
		},
	}
	broken := frozen
	broken.FreezeBreak = &reconciler.FreezeBreak{Actor: "carol", At: now, Intent: "i2", Comment: "hotfix for the outage"}
	over := gated
	over.State = reconciler.RolloutCancelled

	page := func(ro reconciler.Rollout, u User) (rolloutPage, string) {
		t.Helper()
		sum := summary(ro)
		p := rolloutPage{webPage: webPage{Title: "Rollout", User: u, Now: now}, R: sum, Actions: actionsFor(ro, true)}
		p.Approvals, p.BreakFreeze = changeControl(ro, waveBars(ro, &sum))
		var buf bytes.Buffer
		if err := webTemplates["rollout"].Execute(&buf, &p); err != nil {
			t.Fatal(err)
		}
		return p, buf.String()
	}
	carol := User{Name: "carol", Role: "approver", Acts: true, Approves: true, CSRF: "token"}
	dave := User{Name: "dave", Role: "approver", Acts: true, Approves: true, CSRF: "token"}
	alice := User{Name: "alice", Role: "operator", Acts: true, CSRF: "token"}
	victor := User{Name: "victor", Role: "viewer", CSRF: "token"}
	const (
		approve     = "nixfleet rollout approve "
		breakFreeze = "nixfleet rollout break-freeze "
	)

	p, html := page(gated, carol)
	want := []waveApproval{{Wave: 1, Label: "wave 1 (web)", Need: 2, By: []string{"dave"}, Waiting: true}}
	if diff := cmp.Diff(want, p.Approvals); diff != "" || p.BreakFreeze {
		t.Errorf("approvals (-want +got):\n%s\nbreak freeze %v", diff, p.BreakFreeze)
	}
	if diff := cmp.Diff(want, p.Offers()); diff != "" || p.OffersBreakFreeze() || !p.HasActions() {
		t.Errorf("carol's offers (-want +got):\n%s\nbreak freeze %v, actions %v", diff, p.OffersBreakFreeze(), p.HasActions())
	}
	for _, s := range []string{"Approvals of wave 1 (web): 1 of 2: dave", "Approve wave 1 (web)</strong>", "approvals so far: 1 of 2: dave",
		approve + "stable@abc --wave 1 --comment", "Pause…", `action="/ui/rollouts/stable@abc/pause"`} {
		if !strings.Contains(html, s) {
			t.Errorf("carol's page lacks %q:\n%s", s, html)
		}
	}
	if strings.Contains(html, "/approve") || strings.Contains(html, `name="wave"`) {
		t.Errorf("carol's page has a form to approve:\n%s", html)
	}
	if strings.Contains(html, "break-freeze") || strings.Contains(html, "Break the freeze") {
		t.Errorf("no freeze holds the rollout, yet carol is shown how to break it")
	}
	for name, u := range map[string]User{"dave, who approved it,": dave, "alice, an operator,": alice, "victor, a viewer,": victor} {
		p, html := page(gated, u)
		if len(p.Offers()) != 0 || strings.Contains(html, "Approve wave") || strings.Contains(html, approve) || strings.Contains(html, "/approve") {
			t.Errorf("%s is shown how to approve", name)
		}
		if !strings.Contains(html, "Approvals of wave 1 (web): 1 of 2: dave") {
			t.Errorf("%s does not see the approvals so far", name)
		}
	}
	if p, html := page(gated, victor); p.HasActions() || strings.Contains(html, "Confirm") {
		t.Errorf("victor, a viewer, is offered actions")
	}
	if _, html := page(over, carol); strings.Contains(html, "Approve wave") || strings.Contains(html, approve) {
		t.Errorf("a cancelled rollout offers approval")
	}

	p, html = page(frozen, carol)
	if !p.BreakFreeze || !p.OffersBreakFreeze() || len(p.Approvals) != 0 || !strings.Contains(html, "Break the freeze") ||
		!strings.Contains(html, breakFreeze+"stable@def --comment") || strings.Contains(html, "/break-freeze") {
		t.Errorf("a frozen rollout does not show carol how to break the freeze, or has a form for it:\n%s", html)
	}
	for name, u := range map[string]User{"alice, an operator,": alice, "victor, a viewer,": victor} {
		if p, html := page(frozen, u); p.OffersBreakFreeze() || strings.Contains(html, "Break the freeze") || strings.Contains(html, "break-freeze") {
			t.Errorf("%s is shown how to break the freeze", name)
		}
	}
	p, html = page(broken, carol)
	if p.BreakFreeze || strings.Contains(html, breakFreeze) || !strings.Contains(html, "Freeze broken by carol") ||
		!strings.Contains(html, "hotfix for the outage") {
		t.Errorf("a broken freeze is offered again or not shown:\n%s", html)
	}

	// The intent notice names an approve's wave as the page counts waves,
	// from 0.
	wave := 1
	p, _ = page(gated, carol)
	p.Intent = &proto.IntentResponse{Intent: proto.Intent{ID: "i3", Kind: reconciler.IntentApprove, Actor: "carol", Wave: &wave}}
	var buf bytes.Buffer
	if err := webTemplates["rollout"].Execute(&buf, &p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "approve of wave 1 by carol: filed") {
		t.Errorf("the intent notice:\n%s", buf.String())
	}
}

// summary is as much of the API's view of a rollout as the page reads
// of it here.
func summary(ro reconciler.Rollout) proto.Rollout {
	out := proto.Rollout{ID: ro.ID, Channel: ro.Channel, State: string(ro.State), Wave: ro.Wave,
		Approvals: ro.Approvals, FreezeBreak: ro.FreezeBreak}
	for _, w := range ro.Waves {
		out.Waves = append(out.Waves, proto.RolloutWave(w))
		out.WaveCounts = append(out.WaveCounts, map[string]int{})
	}
	for _, h := range ro.Hosts {
		out.WaveCounts[h.Wave][string(h.State)]++
		out.Hosts = append(out.Hosts, proto.RolloutHost{Hostname: h.Hostname, Wave: h.Wave, State: string(h.State),
			Blocked: proto.DecisionReason{Code: h.Blocked.Code, Message: h.Blocked.Message}})
	}
	return out
}

// TestSoakSaysWhenItIsOver: before its end the overview and the rollout
// page count the soak down; past it they say it is over and what it waits
// for, never "ends now" for ever.
func TestSoakSaysWhenItIsOver(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		end  time.Time
		want string
	}{{now.Add(3 * time.Minute), "ends "}, {now.Add(-2 * time.Minute), "over 2 min ago"}} {
		end := c.end
		sum := proto.Rollout{ID: "stable@abc", Channel: "stable", State: string(reconciler.RolloutActive), SoakUntil: &end,
			Waves: []proto.RolloutWave{{}}, WaveCounts: []map[string]int{{"Soaking": 1}}}
		var over, page bytes.Buffer
		data := struct {
			webPage
			Status   proto.Status
			Channels []channelCard
			Intent   *proto.IntentResponse
		}{webPage: webPage{Title: "Fleet", Now: now}, Channels: []channelCard{{ChannelStatus: proto.ChannelStatus{Name: "stable", Rollout: &sum}}}}
		if err := webTemplates["overview"].Execute(&over, &data); err != nil {
			t.Fatal(err)
		}
		p := rolloutPage{webPage: webPage{Title: "Rollout", Now: now}, R: sum}
		if err := webTemplates["rollout"].Execute(&page, &p); err != nil {
			t.Fatal(err)
		}
		for name, html := range map[string]string{"overview": over.String(), "rollout page": page.String()} {
			if !strings.Contains(html, c.want) || (c.end.Before(now) && (strings.Contains(html, "ends now") || !strings.Contains(html, "next check-in"))) {
				t.Errorf("soak ending %s: the %s lacks %q or says it ends now:\n%s", c.end.Format(time.TimeOnly), name, c.want, html)
			}
		}
	}
}

// TestCodeWords: a waiting count and a situation name their code in words
// from the code registry, not only by the code.
func TestCodeWords(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ code, want string }{
		{codes.WaveNotActive, "the host's wave has not started"},
		{codes.Window, "outside the host's maintenance window"},
		{codes.Freeze, "a freeze holds the channel; nothing opens or is dispatched"},
		{codes.Approval, "the wave waits for its approvals"},
		{codes.Dispatched, "the host was given its target"},
		{"no_such_gate", "no_such_gate"},
	} {
		if got := codeWords(c.code); got != c.want {
			t.Errorf("codeWords(%q) = %q, want %q", c.code, got, c.want)
		}
	}
}

// TestCardBudgets: a channel card shows, of the budgets that count its
// hosts, those that bind (full) or have hosts in flight, and counts the
// others; budgets of other hosts only are left to the rollout page.
func TestCardBudgets(t *testing.T) {
	t.Parallel()
	web := proto.BudgetUse{Name: "web", InFlight: 1, Limit: 2}
	db := proto.BudgetUse{Name: "db", InFlight: 2, Limit: 2}
	idle := proto.BudgetUse{Name: "idle", InFlight: 0, Limit: 3}
	closed := proto.BudgetUse{Name: "closed", InFlight: 0, Limit: 0}
	elsewhere := proto.BudgetUse{Name: "elsewhere", InFlight: 1, Limit: 1}
	for _, c := range []struct {
		name   string
		all    []proto.BudgetUse
		covers []bool
		shown  []proto.BudgetUse
		others int
	}{
		{"none", nil, nil, nil, 0},
		{"idle only", []proto.BudgetUse{idle, idle, idle}, []bool{true, true, true}, nil, 3},
		{"in flight and full", []proto.BudgetUse{idle, web, db}, []bool{true, true, true}, []proto.BudgetUse{web, db}, 1},
		{"a limit of 0 binds", []proto.BudgetUse{closed, idle}, []bool{true, true}, []proto.BudgetUse{closed}, 1},
		{"another channel's", []proto.BudgetUse{elsewhere, web, idle, idle}, []bool{false, true, true, false}, []proto.BudgetUse{web}, 1},
	} {
		shown, others := cardBudgets(c.all, c.covers)
		if diff := cmp.Diff(c.shown, shown); diff != "" || others != c.others {
			t.Errorf("%s: shown (-want +got):\n%s\nothers %d, want %d", c.name, diff, others, c.others)
		}
	}

	render := func(shown []proto.BudgetUse, others int) string {
		t.Helper()
		sum := proto.Rollout{ID: "stable@abc", Channel: "stable", State: string(reconciler.RolloutActive)}
		data := struct {
			webPage
			Status   proto.Status
			Channels []channelCard
			Intent   *proto.IntentResponse
		}{webPage: webPage{Title: "Fleet"}, Channels: []channelCard{{ChannelStatus: proto.ChannelStatus{Name: "stable", Rollout: &sum},
			Budgets: shown, OtherBudgets: others}}}
		var buf bytes.Buffer
		if err := webTemplates["overview"].Execute(&buf, &data); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	if html := render(nil, 3); !strings.Contains(html, `Budgets: <a href="/ui/rollouts/stable@abc#budgets">3</a>, none binding: no host of theirs is in flight`) ||
		strings.Contains(html, "idle") {
		t.Errorf("a card whose budgets are all idle:\n%s", html)
	}
	html := render([]proto.BudgetUse{web, db}, 1)
	for _, want := range []string{`<span class="chip">web 1/2</span>`, `<span class="chip st-wait">db 2/2 full</span>`,
		`and <a href="/ui/rollouts/stable@abc#budgets">1 more</a> with no host in flight`} {
		if !strings.Contains(html, want) {
			t.Errorf("a card with budgets in use lacks %q:\n%s", want, html)
		}
	}
	if html := render(nil, 0); strings.Contains(html, "Budgets") {
		t.Errorf("a card without budgets shows them:\n%s", html)
	}
}

// TestNextNamesTheButton: the rollout page's next step names the button
// it offers the user ("press Resume") rather than the CLI command, and
// keeps the command for a user who has no button (a viewer) and for an
// action the page has no button for (rollback of a rollout that is not
// its channel's latest).
func TestNextNamesTheButton(t *testing.T) {
	t.Parallel()
	paused := reconciler.Rollout{ID: "stable@abc", Channel: "stable", State: reconciler.RolloutHalted, Wave: 0,
		Reason: reconciler.Reason{Code: codes.OperatorPause, Message: "pause by alice"}, Waves: []reconciler.WaveSpec{{}}}
	failed := paused
	failed.Reason = reconciler.Reason{Code: codes.HealthFailure, Message: "2 host(s) failed"}
	alice := User{Name: "alice", Role: "operator", Acts: true, CSRF: "token"}
	victor := User{Name: "victor", Role: "viewer", CSRF: "token"}
	for _, c := range []struct {
		name          string
		ro            reconciler.Rollout
		latest        bool
		u             User
		want, notWant string
	}{
		{"alice, paused", paused, true, alice, "<strong>Next:</strong> press Resume</p>", "nixfleet rollout resume"},
		{"victor, paused", paused, true, victor, "<strong>Next:</strong> nixfleet rollout resume stable@abc</p>", "press "},
		{"alice, failed", failed, true, alice, "look at its failed hosts, then press Resume (forgives them) or Rollback</p>", "nixfleet rollout"},
		{"alice, failed, not the latest", failed, false, alice,
			"look at its failed hosts, then press Resume (forgives them) or nixfleet rollout rollback stable@abc</p>", "press Rollback"},
		{"victor, failed", failed, true, victor,
			"look at its failed hosts, then nixfleet rollout resume stable@abc (forgives them) or rollback stable@abc</p>", "press "},
	} {
		sum := summary(c.ro)
		p := rolloutPage{webPage: webPage{Title: "Rollout", User: c.u}, R: sum, Actions: actionsFor(c.ro, c.latest)}
		p.Next = reconciler.NextStepSaid(c.ro, p.say(c.ro))
		var buf bytes.Buffer
		if err := webTemplates["rollout"].Execute(&buf, &p); err != nil {
			t.Fatal(err)
		}
		next := buf.String()
		if i := strings.Index(next, `<p class="next">`); i >= 0 {
			next = next[i:]
			next = next[:strings.Index(next, "</p>")+len("</p>")]
		}
		if !strings.Contains(next, c.want) || strings.Contains(next, c.notWant) {
			t.Errorf("%s: the next step says %q; want %q without %q", c.name, next, c.want, c.notWant)
		}
	}
}
