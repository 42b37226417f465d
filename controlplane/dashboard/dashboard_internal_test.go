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

// TestGateWords: a waiting count names its gate in words from the code
// registry, not only by its code.
func TestGateWords(t *testing.T) {
	for code, want := range map[string]string{
		codes.WaveNotActive: "the host's wave has not started",
		codes.Window:        "outside the host's maintenance window",
		"no_such_gate":      "no_such_gate",
	} {
		if got := gateWords(code); got != want {
			t.Errorf("gateWords(%q) = %q, want %q", code, got, want)
		}
	}
}
