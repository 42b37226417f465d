package controlplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/simagent"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// The dashboard in a real headless Chromium (Debian's chromium package,
// which .ci/run installs), driven over the DevTools protocol, against a
// real control plane with simulated agents. Screenshots of every page go
// to $NIXFLEET_ARTIFACTS/dashboard (.ci/run keeps them in .ci/artifacts),
// else to a directory under the system's temporary directory; they are
// not committed.

// chromium starts a headless Chromium for one test and returns a context
// of its first tab.
func chromium(t *testing.T) context.Context {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed: .ci/run installs Debian's chromium package (%v)", err)
	}
	opts := append([]chromedp.ExecAllocatorOption{}, chromedp.DefaultExecAllocatorOptions[:]...)
	opts = append(opts,
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, // tests run as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		// The test server's certificate is the test's own, on loopback.
		chromedp.Flag("ignore-certificate-errors", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// artifacts is where screenshots go.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("NIXFLEET_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "nixfleet-artifacts")
	}
	dir = filepath.Join(dir, "dashboard")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// screenshot saves the whole page as name.png.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(artifacts(t), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// run runs browser actions with a bound, failing the test on error.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	runFor(t, ctx, what, chromedp.Steps(actions...))
}

// runFor runs one browser action with a bound and returns its value. An
// action whose page load Chromium aborted because the machine's network
// changed (net::ERR_NETWORK_CHANGED: other tests create and remove
// network namespaces and their links) is run again, twice at most.
func runFor[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	for try := 1; ; try++ {
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		v, err := chromedp.Run(rctx, a)
		cancel()
		switch {
		case err == nil:
			return v
		case try < 3 && strings.Contains(err.Error(), "ERR_NETWORK_CHANGED"):
			t.Logf("%s: %v; again", what, err)
			continue
		}
		t.Fatalf("%s: %v", what, err)
	}
}

// text is the visible text of the first element matching sel, once there
// is one. It is read in one evaluation: a page that renders again between
// finding the node and reading it (after an intent) cannot lose it.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	q := "document.querySelector(" + strconv.Quote(sel) + ")"
	waitFor(t, ctx, "the page shows "+sel, q+" !== null", nil)
	return eval[string](t, ctx, "("+q+" || {}).innerText || ''")
}

// eval evaluates a JavaScript expression.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	return runFor(t, ctx, "evaluating "+js, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
}

// waitFor waits until a JavaScript expression is true in the page, while
// step (if any) moves the fleet on between looks.
func waitFor(t *testing.T, ctx context.Context, what, js string, step func()) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	guarded := `(() => { try { return !!(` + js + `); } catch (e) { return false; } })()`
	for {
		// A page between two documents (a form's answer loading) has no
		// body yet, or no context at all: that is a "not yet".
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ok, err := chromedp.Run(ectx, chromedp.Evaluate[bool](guarded))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			body, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
			t.Fatalf("%s: not within 20s; the page says:\n%s", what, body)
		}
		if step != nil {
			step()
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// jsString quotes s for JavaScript.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// a11y is the accessibility basics every page is checked for: every
// state tile and badge has text, every button, summary and link has a
// name, every input has a label, and the page has one h1 and a lang.
const a11y = `(() => {
  const bad = [];
  const name = el => (el.getAttribute('aria-label') || el.textContent || '').trim();
  document.querySelectorAll('.badge, .tile, .chip').forEach(el => { if (!name(el)) bad.push('state without text: ' + el.outerHTML.slice(0, 80)); });
  document.querySelectorAll('button, summary, a').forEach(el => { if (!name(el)) bad.push('control without a name: ' + el.outerHTML.slice(0, 80)); });
  document.querySelectorAll('input:not([type=hidden])').forEach(el => { if (!el.id || !document.querySelector('label[for="' + el.id + '"]')) bad.push('input without a label: ' + el.outerHTML.slice(0, 80)); });
  document.querySelectorAll('svg[role=img]').forEach(el => { if (!el.getAttribute('aria-label')) bad.push('image without a label'); });
  if (document.querySelectorAll('h1').length !== 1) bad.push('h1 count ' + document.querySelectorAll('h1').length);
  if (!document.documentElement.lang) bad.push('no lang');
  return bad;
})()`

func checkA11y(t *testing.T, ctx context.Context, page string) {
	t.Helper()
	for _, p := range eval[[]string](t, ctx, a11y) {
		t.Errorf("%s: %s", page, p)
	}
}

// twoChannels is staging (one wave) and prod (canary and a second wave),
// five hosts.
func twoChannels() fleetrepo.Spec {
	return fleetrepo.Spec{
		Channels: map[string][]int{"staging": {0}, "prod": {0, 0}},
		Hosts: []fleetrepo.Host{
			fleetrepo.NewHost("stage-1", "staging", 0),
			fleetrepo.NewHost("prod-canary", "prod", 0), fleetrepo.NewHost("prod-web-1", "prod", 1),
			fleetrepo.NewHost("prod-web-2", "prod", 1), fleetrepo.NewHost("prod-db-1", "prod", 1),
		},
	}
}

// converge steps every host until every channel's latest rollout of
// release n converged.
func (e *env) converge(hosts map[string]*simagent.Host, n int) {
	e.t.Helper()
	ctx := context.Background()
	e.await(20*time.Second, fmt.Sprintf("release %d converges", n), func() bool {
		for _, h := range hosts {
			_ = h.Step(ctx, 0)
		}
		// A minute between check-ins: the hosts' activations take one
		// (the forecasts measure them).
		e.clock.Advance(time.Minute)
		e.tick()
		for ch := range e.spec.Channels {
			var r proto.Rollout
			if err := e.client(e.viewKey.priv, "victor").Get(ctx, "/v1/rollouts/"+rolloutID(ch, n), &r); err != nil ||
				r.State != string(reconciler.RolloutConverged) {
				return false
			}
		}
		return true
	})
}

// TestDashboardInBrowser: the overview shows every channel; a rollout page
// follows the reconciler live, without a reload; pause files the intent
// with its comment and the page shows Halted and the next step; a viewer
// has no buttons and its forged form is refused; an expired session says
// so on the open page; every page passes the accessibility basics and is
// usable by keyboard.
func TestDashboardInBrowser(t *testing.T) {
	e := newEnv(t, "sqlite", twoChannels(), func(c *controlplane.Config) { c.WebSessionTTL = time.Hour })
	hosts := e.hosts()
	e.converge(hosts, 1)
	ctx := chromium(t)
	login, _, err := e.client(e.opKey.priv, "alice").WebLogin(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}

	// Overview.
	run(t, ctx, "opening the sign-in link", chromedp.Navigate(e.url+login.Path), chromedp.WaitVisible(chromedp.CSS("section.channel")))
	if u := eval[string](t, ctx, "location.pathname"); u != "/ui/" {
		t.Fatalf("signed in at %s", u)
	}
	overview := text(t, ctx, "main")
	for _, want := range []string{"Channel prod", "Channel staging", rolloutID("prod", 1), "Converged", "1 of 1 converged", "3 of 3 converged"} {
		if !strings.Contains(overview, want) {
			t.Errorf("the overview lacks %q:\n%s", want, overview)
		}
	}
	checkA11y(t, ctx, "overview")
	screenshot(t, ctx, "overview")

	// A release: the rollout page follows it without a reload.
	e.release("v1", 2)
	id := rolloutID("prod", 2)
	e.await(10*time.Second, "the release opens and is forecast", func() bool {
		var f proto.Forecast
		return e.client(e.viewKey.priv, "victor").Get(context.Background(), "/v1/rollouts/"+id+"/forecast", &f) == nil
	})
	run(t, ctx, "opening the rollout", chromedp.Navigate(e.url+"/ui/rollouts/"+id), chromedp.WaitVisible(chromedp.CSS("#waves")))
	// Its forecast: the end, what it assumed, each wave on a time axis.
	forecast := text(t, ctx, "#forecast")
	for _, want := range []string{"Expected to end Converged", "Assumes a host takes", "of its hosts: their own measured time", "wave 1", "starts +", "after wave 1 is not active yet"} {
		if !strings.Contains(forecast, want) {
			t.Errorf("the forecast lacks %q:\n%s", want, forecast)
		}
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#forecast rect.timeline-bar').length`); n != 2 {
		t.Errorf("%d wave bars on the forecast's time axis, want 2", n)
	}
	screenshot(t, ctx, "rollout-forecast")
	eval[bool](t, ctx, `window.__sameDocument = true`)
	waitFor(t, ctx, "the stream is live", `document.getElementById('live-status').textContent === 'Live'`, nil)
	if !strings.Contains(text(t, ctx, "#summary"), "Active") {
		t.Fatalf("the new rollout is not Active: %s", text(t, ctx, "#summary"))
	}
	canary := hosts["prod-canary"]
	tile := `document.querySelector('a.tile[href="/ui/hosts/prod-canary"]').textContent`
	before := eval[string](t, ctx, tile)
	waitFor(t, ctx, "the canary's tile shows it moved", tile+` !== `+jsString(before), func() { _ = canary.Step(context.Background(), 0) })
	if !eval[bool](t, ctx, `window.__sameDocument === true`) {
		t.Fatal("the page reloaded instead of updating in place")
	}
	if eval[string](t, ctx, `document.body.dataset.refreshed || '0'`) == "0" {
		t.Error("no live refresh counted")
	}
	checkA11y(t, ctx, "rollout")
	screenshot(t, ctx, "rollout-active")

	// Pause, by keyboard: Tab to the action, Enter opens it, type the
	// comment, Enter submits.
	focused := ""
	for range 40 {
		run(t, ctx, "tabbing", chromedp.KeyEvent(kb.Tab))
		focused = eval[string](t, ctx, `(document.activeElement.textContent || '').trim()`)
		if focused == "Pause…" {
			break
		}
	}
	if focused != "Pause…" {
		t.Fatalf("Pause… is not reachable by keyboard (last focus %q)", focused)
	}
	run(t, ctx, "opening pause", chromedp.KeyEvent(kb.Enter))
	waitFor(t, ctx, "the comment field has the focus", `document.activeElement && document.activeElement.name === 'comment'`, nil)
	run(t, ctx, "confirming pause", chromedp.SendKeys(chromedp.CSS("#comment-pause"), "canary looks slow"+kb.Enter))
	waitFor(t, ctx, "the page shows the pause", `/pause by alice: accepted/.test(document.body.textContent)`, nil)
	// The page renders the rollout again after the intent: the summary is
	// read once it is back and says the rollout is paused, in amber, not
	// red as a health halt (rfcs/0005: Paused is how Halted by a pause
	// reads).
	waitFor(t, ctx, "the summary shows the pause", `/Paused/.test((document.querySelector('#summary') || {}).textContent || '')`, nil)
	summary := text(t, ctx, "#summary")
	if !strings.Contains(summary, "Paused") || strings.Contains(summary, "Halted") || !strings.Contains(summary, "canary looks slow") {
		t.Errorf("after pause the summary says:\n%s", summary)
	}
	// The next step names the button the page offers, not the CLI
	// command that does the same.
	if next := text(t, ctx, "#summary .next"); next != "Next: press Resume" {
		t.Errorf("alice, who has a Resume button, is told %q", next)
	}
	if !strings.Contains(text(t, ctx, "#summary .actions"), "Resume…") {
		t.Errorf("the page names a Resume button it does not offer:\n%s", summary)
	}
	if badge := eval[string](t, ctx, `document.querySelector('#summary .badge').className`); !strings.Contains(badge, "st-wait") {
		t.Errorf("the paused rollout's badge has class %q, want st-wait (amber)", badge)
	}
	screenshot(t, ctx, "rollout-halted")
	evs, _, err := e.client(e.viewKey.priv, "victor").RolloutEvents(context.Background(), id, proto.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs {
		found = found || (ev.Kind == reconciler.EventIntentAccepted && ev.Reason.Actor == "alice" && strings.Contains(ev.Reason.Message, "canary looks slow"))
	}
	if !found {
		t.Errorf("no intent_accepted by alice with the comment in %+v", evs)
	}

	// Host and releases pages.
	run(t, ctx, "opening a host", chromedp.Navigate(e.url+"/ui/hosts/prod-canary"), chromedp.WaitVisible(chromedp.CSS("#host")))
	hostText := text(t, ctx, "main")
	for _, want := range []string{"Situation", fleetrepo.Closure("prod-canary", "v1"), id, "History across rollouts", rolloutID("prod", 1)} {
		if !strings.Contains(hostText, want) {
			t.Errorf("the host page lacks %q:\n%s", want, hostText)
		}
	}
	checkA11y(t, ctx, "host")
	screenshot(t, ctx, "host")
	run(t, ctx, "opening releases", chromedp.Navigate(e.url+"/ui/releases"), chromedp.WaitVisible(chromedp.CSS("table.releases")))
	rel := text(t, ctx, "table.releases")
	// Rollout ids are short, as in the CLI; the link and its title hold
	// the whole id.
	if !strings.Contains(rel, "opened") || !strings.Contains(rel, proto.ShortRolloutID(id)) || strings.Contains(rel, id) {
		t.Errorf("the releases page:\n%s", rel)
	}
	checkA11y(t, ctx, "releases")
	screenshot(t, ctx, "releases")

	// A viewer, in a browser of its own: no buttons, and a forged form is
	// refused.
	vctx := chromium(t)
	vlogin, _, err := e.client(e.viewKey.priv, "victor").WebLogin(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	run(t, vctx, "viewer signs in", chromedp.Navigate(e.url+vlogin.Path), chromedp.WaitVisible(chromedp.CSS("section.channel")),
		chromedp.Navigate(e.url+"/ui/rollouts/"+id), chromedp.WaitVisible(chromedp.CSS("#waves")))
	if n := eval[int](t, vctx, `document.querySelectorAll('details.action, form[action*="/ui/rollouts/"]').length`); n != 0 {
		t.Errorf("a viewer sees %d actions", n)
	}
	if next := text(t, vctx, "#summary .next"); next != "Next: nixfleet rollout resume "+proto.ShortRolloutID(id) {
		t.Errorf("victor, who has no button, is told %q", next)
	}
	forged := `fetch(location.pathname + '/resume', {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'comment=x&csrf=' + encodeURIComponent(document.querySelector('input[name=csrf]').value)}).then(r => r.status)`
	if status := eval[int](t, vctx, forged); status != 403 {
		t.Errorf("a viewer's form with its own CSRF token: %d, want 403", status)
	}
	noToken := `fetch(location.pathname + '/resume', {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'comment=x'}).then(r => r.status)`
	run(t, ctx, "an operator's page", chromedp.Navigate(e.url+"/ui/rollouts/"+id), chromedp.WaitVisible(chromedp.CSS("#waves")))
	if status := eval[int](t, ctx, noToken); status != 403 {
		t.Errorf("a form without the CSRF token: %d, want 403", status)
	}
	if got := rolloutState(t, e, id); got != reconciler.RolloutHalted {
		t.Errorf("the forged forms moved the rollout to %s", got)
	}
	screenshot(t, vctx, "rollout-viewer")

	// The viewer's session expires while its page is open: the page says
	// so.
	waitFor(t, vctx, "the viewer's stream is live", `document.getElementById('live-status').textContent === 'Live'`, nil)
	e.clock.Advance(time.Hour + time.Minute)
	waitFor(t, vctx, "the open page says the session ended", `/session has ended/.test(document.getElementById('live-status').textContent)`, e.tick)
	screenshot(t, vctx, "session-ended")
	run(t, vctx, "reloading", chromedp.Reload())
	if !strings.Contains(text(t, vctx, "main"), "sign_in_required") {
		t.Errorf("after expiry the page says:\n%s", text(t, vctx, "main"))
	}
}

// overflows lists what sticks out of a page horizontally: the document
// wider than the viewport, and every element whose box ends past its
// right edge, unless an ancestor scrolls or clips it (that ancestor is
// judged itself). width is the viewport's width in CSS pixels.
func overflows(width int) string {
	return fmt.Sprintf(`(() => {
  const w = %d, bad = [];
  const doc = document.documentElement;
  // A phone lays a page that is too wide out wider and zooms it out.
  if (window.innerWidth !== w) bad.push('the page is laid out ' + window.innerWidth + ' px wide and zoomed out');
  if (doc.scrollWidth > w || document.body.scrollWidth > w) bad.push('the document is ' + doc.scrollWidth + ' px wide');
  const held = el => { for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) { if (getComputedStyle(a).overflowX !== 'visible') return true; } return false; };
  document.querySelectorAll('body *').forEach(el => {
    const r = el.getBoundingClientRect();
    if ((r.width || r.height) && r.right > w + 0.5 && !held(el)) {
      bad.push(el.tagName.toLowerCase() + (el.className ? '.' + String(el.className).split(' ').join('.') : '') + ' ends at ' + Math.round(r.right) + ' px: ' + (el.textContent || '').trim().slice(0, 60));
    }
  });
  return bad;
})()`, width)
}

// phoneWidth is a phone's viewport, in CSS pixels.
const phoneWidth, phoneHeight = 390, 844

// checkFits fails for everything that sticks out of the page at phone
// width.
func checkFits(t *testing.T, ctx context.Context, page string) {
	t.Helper()
	for _, p := range eval[[]string](t, ctx, overflows(phoneWidth)) {
		t.Errorf("%s at %d px: %s", page, phoneWidth, p)
	}
}

// TestDashboardAtPhoneWidth: at a phone's 390 px, nothing on the overview,
// a rollout's page (with an action form open) or a host's page sticks out
// horizontally, long rollout ids and closures included. The overview's
// channel cards show only the budgets that matter to their rollout now
// (full, or with hosts in flight), and count the rest of their own; the
// rollout page lists every budget. A wave that waits for its approvals
// says the approve command once, on a held host's page too.
func TestDashboardAtPhoneWidth(t *testing.T) {
	spec := twoChannels()
	one, two := 1, 2
	prod := "prod"
	spec.Budgets = []proto.DisruptionBudget{
		{Name: "prod-canary", Selector: proto.Selector{Hosts: []string{"prod-canary"}}, MaxInFlight: &one},
		{Name: "prod-all", Selector: proto.Selector{Channel: &prod}, MaxInFlight: &two},
		{Name: "prod-db", Selector: proto.Selector{Hosts: []string{"prod-db-1"}}, MaxInFlight: &one},
		{Name: "stage", Selector: proto.Selector{Hosts: []string{"stage-1"}}, MaxInFlight: &one},
	}
	e := newEnv(t, "sqlite", spec, nil)
	hosts := e.hosts()
	e.converge(hosts, 1)
	e.spec.Approvals = map[string]map[int]proto.Approval{"prod": {1: {Required: true, Approvers: 1}}}
	e.release("v1", 2)
	id := rolloutID("prod", 2)
	viewer := e.client(e.viewKey.priv, "victor")
	// The API reads the store; the overview's budgets are the hub's, which
	// hears a tick just after it committed: both have the canaries first.
	overview := e.browser()
	overview.signIn(e.viewKey.priv, "victor")
	e.await(30*time.Second, "the canaries are dispatched", func() bool {
		var p, s proto.Rollout
		return viewer.Get(context.Background(), "/v1/rollouts/"+id, &p) == nil && p.Counts[string(reconciler.HostActivating)] == 1 &&
			viewer.Get(context.Background(), "/v1/rollouts/"+rolloutID("staging", 2), &s) == nil && s.Counts[string(reconciler.HostActivating)] == 1 &&
			strings.Contains(overview.page("/ui/", http.StatusOK), ">stage 1/1 full<") &&
			strings.Contains(overview.page("/ui/", http.StatusOK), ">prod-canary 1/1 full<")
	})

	ctx := chromium(t)
	run(t, ctx, "a phone's viewport", chromedp.EmulateViewport(phoneWidth, phoneHeight, chromedp.EmulatePortrait, chromedp.EmulateMobile))
	login, _, err := e.client(e.opKey.priv, "alice").WebLogin(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "signing in", chromedp.Navigate(e.url+login.Path), chromedp.WaitVisible(chromedp.CSS("section.channel")))
	// Each card: the budgets in use that count its hosts, and how many
	// others of its own are idle; not another channel's.
	cards := eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll('section.channel')].map(s =>
	  [s.querySelector('h2').textContent, (s.querySelector('.budgets') || {}).textContent || '']))`)
	if b := cards["Channel prod"]; !strings.Contains(b, "prod-canary 1/1 full") || !strings.Contains(b, "prod-all 1/2") ||
		!strings.Contains(b, "and 1 more with no host in flight") || strings.Contains(b, "stage") || strings.Contains(b, "prod-db") {
		t.Errorf("prod's card says %q", b)
	}
	if b := strings.TrimSpace(cards["Channel staging"]); b != "Budgets: stage 1/1 full" {
		t.Errorf("staging's card says %q", b)
	}
	checkFits(t, ctx, "the overview")
	checkA11y(t, ctx, "overview at phone width")
	screenshot(t, ctx, "overview-phone")

	// prod's canary converges; its web hosts wait for an approval.
	e.await(60*time.Second, "prod's wave 1 waits for its approval", func() bool {
		for _, h := range hosts {
			_ = h.Step(context.Background(), 0)
		}
		var r proto.Rollout
		if viewer.Get(context.Background(), "/v1/rollouts/"+id, &r) != nil {
			return false
		}
		held := 0
		for _, h := range r.Hosts {
			if h.State == string(reconciler.HostPending) && h.Blocked.Gate == codes.Approval {
				held++
			}
		}
		if held != 3 {
			return false
		}
		page := overview.page("/ui/rollouts/"+id, http.StatusOK)
		return strings.Contains(page, ">prod-canary 0/1<") && strings.Contains(page, ">prod-all 0/2<")
	})
	run(t, ctx, "opening the rollout", chromedp.Navigate(e.url+"/ui/rollouts/"+id), chromedp.WaitVisible(chromedp.CSS("#waves")))
	page := text(t, ctx, "main")
	for _, want := range []string{"Approvals of wave 1: 0 of 1 waiting for approval",
		"prod-canary 0/1", "prod-all 0/2", "prod-db 0/1"} {
		if !strings.Contains(page, want) {
			t.Errorf("the rollout page lacks %q:\n%s", want, page)
		}
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('#budgets .chip').length`); n != len(spec.Budgets) {
		t.Errorf("the rollout page lists %d budgets, want all %d", n, len(spec.Budgets))
	}
	// The command is said once: in the journal's approval_needed, for
	// the wave; alice, an operator, has no approve block, and the held
	// hosts do not repeat it.
	if n := strings.Count(page, "nixfleet rollout approve"); n != 1 || strings.Contains(text(t, ctx, "#summary"), "nixfleet rollout approve") ||
		strings.Contains(text(t, ctx, "#waves"), "nixfleet rollout approve") {
		t.Errorf("the rollout page says the approve command %d times, want once, in the journal:\n%s", n, page)
	}
	checkFits(t, ctx, "the rollout page")
	run(t, ctx, "opening pause", chromedp.Click(chromedp.CSS("details.action summary")))
	waitFor(t, ctx, "the pause form is open", `document.querySelector('details.action').open`, nil)
	checkFits(t, ctx, "the rollout page with the pause form open")
	checkA11y(t, ctx, "rollout at phone width")
	screenshot(t, ctx, "rollout-phone")

	run(t, ctx, "opening a held host", chromedp.Navigate(e.url+"/ui/hosts/prod-web-1"), chromedp.WaitVisible(chromedp.CSS("#host")))
	if n := strings.Count(text(t, ctx, "main"), "nixfleet rollout approve"); n != 1 {
		t.Errorf("prod-web-1's page says the approve command %d times, want once:\n%s", n, text(t, ctx, "main"))
	}
	checkFits(t, ctx, "a host's page")
	screenshot(t, ctx, "host-phone")
}

// bigSpec is one channel of n hosts: a wave of 100 canaries and a wave of
// the rest.
func bigSpec(n int) fleetrepo.Spec {
	spec := fleetrepo.Spec{Channels: map[string][]int{"prod": {0, 0}}}
	for i := range n {
		wave := 1
		if i < 100 {
			wave = 0
		}
		spec.Hosts = append(spec.Hosts, fleetrepo.NewHost(fmt.Sprintf("host-%05d", i), "prod", wave))
	}
	return spec
}

// pageBudget is what a rollout page of 10,000 hosts may weigh: the waves
// beyond tileLimit hosts show a tile per state, not per host.
const (
	pageBudgetBytes = 200 << 10
	pageBudgetNodes = 4000
)

// TestDashboardBigRollout: a rollout of 2,000 hosts, of which a wave of
// 1,900 shown as tiles per state (beyond tileLimit), renders within the
// weight budget of a 10,000-host page in the browser, and the figures of
// its load are logged (times are not asserted). NIXFLEET_DASHBOARD_HOSTS
// sizes it otherwise: BENCHMARKS.md records 10,000.
func TestDashboardBigRollout(t *testing.T) {
	n := 2000
	if v := os.Getenv("NIXFLEET_DASHBOARD_HOSTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 400 {
			t.Fatalf("NIXFLEET_DASHBOARD_HOSTS=%q: want a number of hosts, at least 400", v)
		}
	}
	e := newEnv(t, "sqlite", bigSpec(n), nil)
	id := rolloutID("prod", 1)
	e.await(60*time.Second, "the release opens", func() bool {
		var r proto.Rollout
		return e.client(e.viewKey.priv, "victor").Get(context.Background(), "/v1/rollouts/"+id, &r) == nil
	})
	b := e.browser()
	b.signIn(e.opKey.priv, "alice")
	page := b.page("/ui/rollouts/"+id, 200)
	if len(page) > pageBudgetBytes {
		t.Errorf("the page is %d bytes, over the %d-byte budget", len(page), pageBudgetBytes)
	}
	ctx := chromium(t)
	login, _, err := e.client(e.opKey.priv, "alice").WebLogin(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "signing in", chromedp.Navigate(e.url+login.Path), chromedp.WaitVisible(chromedp.CSS("section.channel")))
	start := time.Now()
	run(t, ctx, "opening the rollout", chromedp.Navigate(e.url+"/ui/rollouts/"+id), chromedp.WaitVisible(chromedp.CSS("#journal")))
	wall := time.Since(start)
	type timing struct {
		Response, DOMReady, Load float64
		Nodes                    int
	}
	tm := eval[timing](t, ctx, `(() => { const n = performance.getEntriesByType('navigation')[0];
	  return {Response: n.responseEnd - n.startTime, DOMReady: n.domContentLoadedEventEnd - n.startTime, Load: n.loadEventEnd - n.startTime,
	          Nodes: document.getElementsByTagName('*').length}; })()`)
	if tm.Nodes > pageBudgetNodes {
		t.Errorf("the page has %d elements, over the budget of %d", tm.Nodes, pageBudgetNodes)
	}
	text := text(t, ctx, "#waves")
	wave1 := strconv.Itoa(n - 100)
	// The table of situations says each code in words too.
	for _, want := range []string{wave1, "Pending", "0 of " + wave1 + " converged", "host-00000", "the host's wave has not started wave_not_active"} {
		if !strings.Contains(text, want) {
			t.Errorf("the %d-host page lacks %q", n, want)
		}
	}
	checkA11y(t, ctx, fmt.Sprintf("%d hosts", n))
	screenshot(t, ctx, fmt.Sprintf("rollout-%d-hosts", n))
	t.Logf("%d-host rollout page: %d bytes, %d elements; response %.0f ms, DOM ready %.0f ms, load %.0f ms (wall %s)",
		n, len(page), tm.Nodes, tm.Response, tm.DOMReady, tm.Load, wall.Round(time.Millisecond))
}

// BenchmarkWebRolloutPage10000 is the server's side of a 10,000-host
// rollout page: reading the rollout, situating every host, rendering.
//
//	go test ./controlplane -run '^$' -bench WebRolloutPage10000 -benchtime 20x
func BenchmarkWebRolloutPage10000(b *testing.B) {
	for _, backend := range backends {
		b.Run(backend, func(b *testing.B) {
			e := newEnv(b, backend, bigSpec(10000), nil)
			id := rolloutID("prod", 1)
			e.await(60*time.Second, "the release opens", func() bool {
				var r proto.Rollout
				return e.client(e.viewKey.priv, "victor").Get(context.Background(), "/v1/rollouts/"+id, &r) == nil
			})
			br := e.browser()
			br.signIn(e.opKey.priv, "alice")
			b.ResetTimer()
			for b.Loop() {
				br.page("/ui/rollouts/"+id, 200)
			}
			b.ReportMetric(float64(len(br.last)), "bytes/page")
		})
	}
}
