package controlplane_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// browser is an HTTP client that keeps cookies and does not follow
// redirects, as the tests look at them.
type browser struct {
	t    testing.TB
	e    *env
	c    *http.Client
	jar  http.CookieJar
	last string // the body of the last page
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	c := e.httpClient()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &browser{t: e.t, e: e, c: c, jar: jar}
}

// signIn asks for a sign-in link with an operator's key and opens it.
func (b *browser) signIn(key []byte, name string) string {
	b.t.Helper()
	login, _, err := b.e.client(key, name).WebLogin(context.Background(), 0)
	if err != nil {
		b.t.Fatal(err)
	}
	link := b.e.url + login.Path
	res := b.do("GET", link, nil, nil)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/" {
		b.t.Fatalf("opening the sign-in link: %d %s, location %q", res.StatusCode, b.last, res.Header.Get("Location"))
	}
	return link
}

func (b *browser) do(method, u string, form url.Values, header http.Header) *http.Response {
	b.t.Helper()
	if !strings.HasPrefix(u, "http") {
		u = b.e.url + u
	}
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	data, _ := io.ReadAll(res.Body)
	res.Body.Close()
	b.last = string(data)
	return res
}

// page gets a page and fails unless its status is want.
func (b *browser) page(path string, want int) string {
	b.t.Helper()
	res := b.do("GET", path, nil, nil)
	if res.StatusCode != want {
		b.t.Fatalf("GET %s: %d, want %d: %s", path, res.StatusCode, want, b.last)
	}
	return b.last
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t testing.TB, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF field in the page")
	}
	return m[1]
}

// wantCode fails unless the last answer carries the code.
func (b *browser) wantCode(res *http.Response, status int, code string) {
	b.t.Helper()
	if res.StatusCode != status || !strings.Contains(b.last, code) {
		b.t.Fatalf("got %d %s, want %d with %s", res.StatusCode, b.last, status, code)
	}
}

// TestWebSignIn: a one-time link becomes a session cookie once; the
// session has a role; forms need the session's CSRF token from this
// origin; sessions expire and end when their operator leaves the
// operators file or signs out.
func TestWebSignIn(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, smallSpec(), func(c *controlplane.Config) { c.WebSessionTTL = time.Hour })
			e.onboard(e.hosts())
			id := rolloutID("stable", 1)

			anon := e.browser()
			res := anon.do("GET", "/ui/", nil, nil)
			anon.wantCode(res, http.StatusUnauthorized, codes.SignInRequired)
			for h, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"} {
				if got := res.Header.Get(h); got != want {
					t.Errorf("%s: %q, want %q", h, got, want)
				}
			}
			if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
			res = anon.do("GET", "/ui/login?token=forged", nil, nil)
			anon.wantCode(res, http.StatusUnauthorized, codes.LoginLinkInvalid)
			// The API refuses to make links for unknown keys.
			if _, _, err := e.client(newOperatorKey(t).priv, "mallory").WebLogin(context.Background(), 0); err == nil || !strings.Contains(err.Error(), codes.UnknownClient) {
				t.Fatalf("a link for an unknown key: %v", err)
			}

			// A link followed from another site's page is refused (login
			// CSRF), and stays good for its operator.
			op := e.browser()
			xlogin, _, err := e.client(e.opKey.priv, "alice").WebLogin(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			res = op.do("GET", xlogin.Path, nil, http.Header{"Sec-Fetch-Site": {"cross-site"}})
			op.wantCode(res, http.StatusForbidden, codes.CsrfRefused)
			link := op.signIn(e.opKey.priv, "alice")
			var cookie *http.Cookie
			for _, c := range op.jar.Cookies(mustURL(t, e.url)) {
				cookie = c
			}
			if cookie == nil || !strings.HasPrefix(cookie.Name, "__Host-") {
				t.Fatalf("session cookie %v", cookie)
			}
			// The link works once only: a second browser gets nothing.
			other := e.browser()
			res = other.do("GET", link, nil, nil)
			other.wantCode(res, http.StatusUnauthorized, codes.LoginLinkInvalid)

			overview := op.page("/ui/", http.StatusOK)
			for _, want := range []string{"Channel stable", id, "Converged", "Signed in as <strong>alice</strong> (operator)"} {
				if !strings.Contains(overview, want) {
					t.Errorf("the overview lacks %q", want)
				}
			}
			page := op.page("/ui/rollouts/"+id, http.StatusOK)
			if !strings.Contains(page, "Rollback…") || strings.Contains(page, "Pause…") {
				t.Errorf("a converged rollout offers rollback only:\n%s", page)
			}
			token := csrfOf(t, page)

			// A viewer sees no buttons, and the server refuses its form.
			viewer := e.browser()
			viewer.signIn(e.viewKey.priv, "victor")
			vpage := viewer.page("/ui/rollouts/"+id, http.StatusOK)
			if strings.Contains(vpage, "Rollback…") || strings.Contains(vpage, "Confirm") {
				t.Errorf("a viewer is offered actions")
			}
			res = viewer.do("POST", "/ui/rollouts/"+id+"/rollback", url.Values{"csrf": {csrfOf(t, vpage)}, "comment": {"x"}}, nil)
			viewer.wantCode(res, http.StatusForbidden, codes.Forbidden)

			// Forged forms: no token, another session's token, another
			// site's request.
			res = op.do("POST", "/ui/rollouts/"+id+"/rollback", url.Values{"comment": {"x"}}, nil)
			op.wantCode(res, http.StatusForbidden, codes.CsrfRefused)
			res = op.do("POST", "/ui/rollouts/"+id+"/rollback", url.Values{"csrf": {csrfOf(t, vpage)}, "comment": {"x"}}, nil)
			op.wantCode(res, http.StatusForbidden, codes.CsrfRefused)
			res = op.do("POST", "/ui/rollouts/"+id+"/rollback", url.Values{"csrf": {token}, "comment": {"x"}}, http.Header{"Origin": {"https://evil.example"}})
			op.wantCode(res, http.StatusForbidden, codes.CsrfRefused)
			res = op.do("POST", "/ui/rollouts/"+id+"/rollback", url.Values{"csrf": {token}, "comment": {"x"}}, http.Header{"Sec-Fetch-Site": {"cross-site"}})
			op.wantCode(res, http.StatusForbidden, codes.CsrfRefused)
			res = op.do("POST", "/ui/rollouts/"+id+"/rollback", url.Values{"csrf": {token}, "comment": {"  "}}, nil)
			op.wantCode(res, http.StatusBadRequest, codes.BadRequest)
			res = op.do("POST", "/ui/rollouts/"+id+"/explode", url.Values{"csrf": {token}, "comment": {"x"}}, nil)
			op.wantCode(res, http.StatusNotFound, codes.NotFound)
			res = op.do("POST", "/ui/rollouts/"+id+"/rollback", url.Values{"csrf": {token}, "comment": {strings.Repeat("y", 20<<10)}}, nil)
			op.wantCode(res, http.StatusRequestEntityTooLarge, codes.BodyTooLarge)
			evs, _, err := e.client(e.viewKey.priv, "victor").RolloutEvents(context.Background(), id, proto.EventQuery{})
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				if ev.Kind == reconciler.EventIntentAccepted || ev.Kind == reconciler.EventIntentRefused {
					t.Fatalf("a refused form filed an intent: %+v", ev)
				}
			}

			// A real form files the intent with the operator's name and
			// comment, and the rollout page shows its result.
			res = op.do("POST", "/ui/rollouts/"+id+"/rollback", url.Values{"csrf": {token}, "comment": {"bad release"}},
				http.Header{"Origin": {e.url}, "Sec-Fetch-Site": {"same-origin"}})
			if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/ui/rollouts/"+id+"?intent=") {
				t.Fatalf("filing: %d %q %s", res.StatusCode, res.Header.Get("Location"), op.last)
			}
			after := op.page(res.Header.Get("Location"), http.StatusOK)
			if !strings.Contains(after, "rollback by alice: accepted") {
				t.Errorf("the page does not show the accepted rollback:\n%s", after)
			}
			if got := rolloutState(t, e, id); got != reconciler.RolloutReverting && got != reconciler.RolloutReverted {
				t.Errorf("rollout %s after the rollback", got)
			}

			// Signing out ends the session; the viewer's expires.
			res = op.do("POST", "/ui/logout", url.Values{"csrf": {token}}, nil)
			if res.StatusCode != http.StatusSeeOther {
				t.Fatalf("sign out: %d %s", res.StatusCode, op.last)
			}
			res = op.do("GET", "/ui/", nil, nil)
			op.wantCode(res, http.StatusUnauthorized, codes.SignInRequired)
			viewer.page("/ui/", http.StatusOK)
			e.clock.Advance(time.Hour)
			res = viewer.do("GET", "/ui/", nil, nil)
			viewer.wantCode(res, http.StatusUnauthorized, codes.SignInRequired)
		})
	}
}

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestWebOperatorsFileEndsSessions: a replica started with an operators
// file that drops an operator, or gives it another key, refuses that
// operator's sessions; one that changes the role changes what the
// session may do.
func TestWebOperatorsFileEndsSessions(t *testing.T) {
	e := newEnv(t, "sqlite", smallSpec(), nil)
	op, viewer := e.browser(), e.browser()
	op.signIn(e.opKey.priv, "alice")
	viewer.signIn(e.viewKey.priv, "victor")
	e.stop()
	// alice is re-keyed, victor becomes an operator.
	e.opKey = newOperatorKey(t)
	ops := fmt.Sprintf(`[{"name":"alice","role":"operator","key":%q},{"name":"victor","role":"operator","key":%q}]`, e.opKey.pub, e.viewKey.pub)
	writeFile(t, e.cfg.OperatorsFile, ops)
	e.start()
	res := op.do("GET", "/ui/", nil, nil)
	op.wantCode(res, http.StatusUnauthorized, codes.SignInRequired)
	if page := viewer.page("/ui/", http.StatusOK); !strings.Contains(page, "(operator)") {
		t.Errorf("victor's session keeps the old role")
	}
}

// TestWebEventStream: /ui/events streams the journal as Server-Sent
// Events with ids, and a reconnect with Last-Event-ID resumes after it.
func TestWebEventStream(t *testing.T) {
	e := newEnv(t, "sqlite", smallSpec(), nil)
	e.onboard(e.hosts())
	b := e.browser()
	b.signIn(e.viewKey.priv, "victor")
	id := rolloutID("stable", 1)
	all, _, err := e.client(e.viewKey.priv, "victor").RolloutEvents(context.Background(), id, proto.EventQuery{})
	if err != nil || len(all) < 3 {
		t.Fatalf("events %d, %v", len(all), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/ui/events?rollout="+url.QueryEscape(id), nil)
	req.Header.Set("Last-Event-ID", fmt.Sprint(all[1].ID))
	res, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(res.Body)
	var ids []string
	for sc.Scan() && len(ids) < len(all)-2 {
		if v, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			ids = append(ids, v)
		}
	}
	if ids[0] != fmt.Sprint(all[2].ID) || ids[len(ids)-1] != fmt.Sprint(all[len(all)-1].ID) {
		t.Fatalf("resumed with ids %v, want %d…%d", ids, all[2].ID, all[len(all)-1].ID)
	}
	// A user may hold maxWebStreams (32) streams on a replica; one more
	// is refused with 429 and Retry-After.
	var open []*http.Response
	defer func() {
		for _, o := range open {
			o.Body.Close()
		}
	}()
	for i := 0; ; i++ {
		req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/ui/events", nil)
		r, err := b.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if r.StatusCode != http.StatusOK {
			r.Body.Close()
			if i != 31 || r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
				t.Fatalf("stream %d: %d, want 429 after 32", i+2, r.StatusCode)
			}
			break
		}
		open = append(open, r)
		if i > 40 {
			t.Fatal("no cap on streams")
		}
	}
	// Bad input: a resume point that is no id.
	req, _ = http.NewRequest("GET", e.url+"/ui/events", nil)
	req.Header.Set("Last-Event-ID", "-3")
	res2, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res2.Body.Close()
	if res2.StatusCode != http.StatusBadRequest {
		t.Fatalf("a bad Last-Event-ID: %d", res2.StatusCode)
	}
}

// TestWebStreamKeepsItsClock: an open stream looks at its session again,
// and sends a keep-alive, every 20 s of the control plane's clock, however
// often new events wake it (rfcs/0011 §Live updates 3 and 5): ticks every
// 5 s do not put the check off, so a stream signed out ends within 20 s.
func TestWebStreamKeepsItsClock(t *testing.T) {
	e := newEnv(t, "sqlite", smallSpec(), nil)
	b := e.browser()
	b.signIn(e.viewKey.priv, "victor")
	token := csrfOf(t, b.page("/ui/", http.StatusOK))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/ui/events", nil)
	res, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// wake moves the clock on 5 s and ticks (waking the stream), then
	// collects what the stream sent.
	wake := func() []string {
		t.Helper()
		e.clock.Advance(5 * time.Second)
		e.tick()
		var got []string
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					return append(got, "<closed>")
				}
				got = append(got, l)
			case <-time.After(200 * time.Millisecond):
				return got
			}
		}
	}
	var keepAlives int
	for range 9 { // 45 s of the clock, a wake-up every 5 s
		for _, l := range wake() {
			if l == ": still here" {
				keepAlives++
			}
		}
	}
	if keepAlives != 2 {
		t.Errorf("%d keep-alives in 45 s of wake-ups every 5 s, want 2 (every 20 s)", keepAlives)
	}
	res2 := b.do("POST", "/ui/logout", url.Values{"csrf": {token}}, nil)
	if res2.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out: %d %s", res2.StatusCode, b.last)
	}
	for i := 1; ; i++ {
		if slices.Contains(wake(), "event: signed-out") {
			if i > 4 {
				t.Errorf("the stream signed out %d s after the sign-out, want within 20 s", 5*i)
			}
			break
		}
		if i == 8 {
			t.Fatal("the stream still runs 40 s after its session was signed out")
		}
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWebInsecureDev: under --insecure-dev (plain HTTP on loopback) the
// dashboard needs no sign-in and everybody may act, but forms still need
// the process's CSRF token and to come from the dashboard itself.
func TestWebInsecureDev(t *testing.T) {
	e := newEnv(t, "sqlite", smallSpec(), func(c *controlplane.Config) {
		c.InsecureDev, c.TLSCert, c.TLSKey, c.OperatorsFile = true, "", "", ""
	})
	e.onboard(e.hosts())
	id := rolloutID("stable", 1)
	b := e.browser()
	page := b.page("/ui/rollouts/"+id, http.StatusOK)
	if !strings.Contains(page, "insecure-dev: nobody is authenticated") || !strings.Contains(page, "Rollback…") {
		t.Fatalf("the insecure-dev page:\n%s", page)
	}
	res := b.do("GET", "/ui/login?token=anything", nil, nil)
	if res.StatusCode != http.StatusSeeOther {
		t.Errorf("a sign-in link under --insecure-dev: %d", res.StatusCode)
	}
	// DNS rebinding: another name for 127.0.0.1 is not served.
	req, _ := http.NewRequest("GET", e.url+"/ui/", nil)
	req.Host = "attacker.example:80"
	res, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("a foreign Host under --insecure-dev: %d, want 403", res.StatusCode)
	}
	res = b.do("POST", "/ui/rollouts/"+id+"/rollback", url.Values{"comment": {"x"}}, nil)
	b.wantCode(res, http.StatusForbidden, codes.CsrfRefused)
	res = b.do("POST", "/ui/rollouts/"+id+"/rollback", url.Values{"csrf": {csrfOf(t, page)}, "comment": {"x"}}, http.Header{"Origin": {"http://localhost.evil:1"}})
	b.wantCode(res, http.StatusForbidden, codes.CsrfRefused)
	res = b.do("POST", "/ui/rollouts/"+id+"/rollback", url.Values{"csrf": {csrfOf(t, page)}, "comment": {"dev rollback"}}, http.Header{"Origin": {e.url}})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("a dev form: %d %s", res.StatusCode, b.last)
	}
	if !strings.Contains(b.page(res.Header.Get("Location"), http.StatusOK), "rollback by insecure-dev: accepted") {
		t.Errorf("the dev rollback is not shown as accepted")
	}
}

// TestWebBudgetOccupancy: the rollout page shows each budget's hosts in
// flight now, out of its limit: none while the fleet is idle, the canary
// once it is dispatched (reconciler.Occupancy over the hub's
// assignments). The overview shows a budget on a channel's card only
// while it matters to the channel's rollout: not for a rollout that is
// over, and once the canary is dispatched, the budget it takes room in.
func TestWebBudgetOccupancy(t *testing.T) {
	t.Parallel()
	spec := smallSpec()
	two := 2
	stable := "stable"
	spec.Budgets = []proto.DisruptionBudget{{Name: "web", Selector: proto.Selector{Channel: &stable}, MaxInFlight: &two}}
	e := newEnv(t, "sqlite", spec, nil)
	hosts := e.hosts()
	e.onboard(hosts)
	viewer := e.browser()
	viewer.signIn(e.viewKey.priv, "victor")
	chip := func(path, want string) {
		t.Helper()
		if page := viewer.page(path, http.StatusOK); !strings.Contains(page, `<span class="chip">web `+want+`</span>`) {
			t.Errorf("%s does not show the budget at %s", path, want)
		}
	}
	chip("/ui/rollouts/"+rolloutID("stable", 1), "0/2")
	if page := viewer.page("/ui/", http.StatusOK); strings.Contains(page, "Budgets:") {
		t.Errorf("the overview shows the budgets of a converged rollout:\n%s", page)
	}
	e.release("v1", 2)
	id := rolloutID("stable", 2)
	// The API reads the store; the budgets are the hub's, which hears a
	// tick just after it committed.
	e.await(20*time.Second, "the canary is dispatched", func() bool {
		var r proto.Rollout
		return e.client(e.viewKey.priv, "victor").Get(context.Background(), "/v1/rollouts/"+id, &r) == nil &&
			r.Counts[string(reconciler.HostActivating)] == 1 &&
			strings.Contains(viewer.page("/ui/rollouts/"+id, http.StatusOK), `<span class="chip">web 1/2</span>`)
	})
	chip("/ui/", "1/2")
	chip("/ui/rollouts/"+id, "1/2")
}
