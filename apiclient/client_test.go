package apiclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
)

func newClient(t *testing.T, h http.Handler, timeout time.Duration) *apiclient.Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := apiclient.New(srv.URL, apiclient.Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFollowOutlivesTimeout: a stream that lasts longer than the client's
// request timeout is not cut.
func TestFollowOutlivesTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 50 * time.Millisecond
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.URL.Query().Get("follow"); got != "1" {
			t.Errorf("follow=%q", got)
		}
		if got := r.URL.Query().Get("after"); got != "7" {
			t.Errorf("after=%q", got)
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		for id := 8; id <= 10; id++ {
			fmt.Fprintf(w, "{\"id\":%d}\n", id)
			w.(http.Flusher).Flush()
			// Each pause is longer than the whole timeout.
			select {
			case <-time.After(3 * timeout):
			case <-r.Context().Done():
				return
			}
		}
	}), timeout)
	var got []string
	var ids []int64
	err := c.Follow(context.Background(), "stable@1", 7, func(ev proto.Event, m json.RawMessage) error {
		got = append(got, string(m))
		ids = append(ids, ev.ID)
		return nil
	})
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	if diff := cmp.Diff([]string{`{"id":8}`, `{"id":9}`, `{"id":10}`}, got); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{8, 9, 10}, ids); diff != "" {
		t.Fatalf("decoded event ids (-want +got):\n%s", diff)
	}
}

// TestFollowHeaderTimeout: a server that never answers is still given up
// on after the timeout.
func TestFollowHeaderTimeout(t *testing.T) {
	t.Parallel()
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}), 50*time.Millisecond)
	err := c.Follow(context.Background(), "stable@1", 0, func(proto.Event, json.RawMessage) error { return nil })
	if err == nil {
		t.Fatal("Follow returned without an error")
	}
}

func TestFollowErrorAnswer(t *testing.T) {
	t.Parallel()
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintln(w, `{"code":"not_found","message":"no rollout \"x\""}`)
	}), time.Second)
	err := c.Follow(context.Background(), "x", 0, func(proto.Event, json.RawMessage) error { return nil })
	if !apiclient.IsCode(err, "not_found") {
		t.Fatalf("Follow: %v, want not_found", err)
	}
}

// TestAct: an intent's answer is decoded whatever the verdict, and a
// refusal carries the server's own code.
func TestAct(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		status   int
		body     string
		wantCode string // "" for success
		wantOut  bool
	}{
		{name: "accepted", status: 200, wantOut: true,
			body: `{"intent":{"id":"i1"},"result":{"intentId":"i1","accepted":true,"reason":{"code":"operator_pause"}}}`},
		{name: "queued", status: 202, wantOut: true, body: `{"intent":{"id":"i1"},"result":null}`},
		{name: "refused", status: 409, wantOut: true, wantCode: "illegal_transition",
			body: `{"intent":{"id":"i1"},"result":{"intentId":"i1","accepted":false,"reason":{"code":"illegal_transition","message":"a Converged rollout cannot resume"}}}`},
		{name: "conflict error body", status: 409, wantCode: "busy", body: `{"code":"busy","message":"later"}`},
		{name: "forbidden", status: 403, wantCode: "forbidden", body: `{"code":"forbidden","message":"viewers may not act"}`},
		{name: "no code", status: 500, wantCode: "http_500", body: `internal error`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost || r.URL.Path != "/v1/rollouts/stable@1/pause" {
					t.Errorf("%s %s", r.Method, r.URL.Path)
				}
				var req map[string]string
				if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req["comment"] != "why" {
					t.Errorf("body %v (%v)", req, err)
				}
				w.WriteHeader(tc.status)
				fmt.Fprintln(w, tc.body)
			}), time.Second)
			out, raw, err := c.Act(context.Background(), "stable@1", "pause", "why")
			if tc.wantCode == "" {
				if err != nil {
					t.Fatalf("Act: %v", err)
				}
			} else {
				var e *apiclient.Error
				if !errors.As(err, &e) || e.Code != tc.wantCode || e.Status != tc.status {
					t.Fatalf("Act: %#v, want code %s and status %d", err, tc.wantCode, tc.status)
				}
			}
			if got := out.Intent.ID == "i1"; got != tc.wantOut {
				t.Fatalf("answer decoded: %v, want %v", got, tc.wantOut)
			}
			if tc.wantOut && string(raw) != tc.body {
				t.Fatalf("answer as sent: %q, want %q", raw, tc.body)
			}
		})
	}
}

// TestApproverIntents: Approve sends its wave (0 too: it is no absent
// member), BreakFreeze and Act none, each to its action's path.
func TestApproverIntents(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, path, body string
		file             func(*apiclient.Client) (proto.IntentResponse, json.RawMessage, error)
	}{
		{"approve", "/v1/rollouts/stable@1/approve", `{"comment":"ok","wave":0}`, func(c *apiclient.Client) (proto.IntentResponse, json.RawMessage, error) {
			return c.Approve(context.Background(), "stable@1", 0, "ok")
		}},
		{"break-freeze", "/v1/rollouts/stable@1/break-freeze", `{"comment":"hotfix"}`, func(c *apiclient.Client) (proto.IntentResponse, json.RawMessage, error) {
			return c.BreakFreeze(context.Background(), "stable@1", "hotfix")
		}},
		{"pause", "/v1/rollouts/stable@1/pause", `{"comment":"why"}`, func(c *apiclient.Client) (proto.IntentResponse, json.RawMessage, error) {
			return c.Act(context.Background(), "stable@1", "pause", "why")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if r.Method != http.MethodPost || r.URL.Path != tc.path || string(body) != tc.body {
					t.Errorf("%s %s %s, want POST %s %s", r.Method, r.URL.Path, body, tc.path, tc.body)
				}
				fmt.Fprintln(w, `{"intent":{"id":"i1"},"result":null}`)
			}), time.Second)
			if out, _, err := tc.file(c); err != nil || out.Intent.ID != "i1" {
				t.Fatalf("%+v, %v", out, err)
			}
		})
	}
}

// TestRetryAfter: a 429 is an error with its code and the wait the
// server asked for, in seconds or as a date; other answers are not rate
// limits, whatever their headers.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	inAMinute := time.Now().Add(time.Minute + 30*time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		name       string
		status     int
		retryAfter string
		body       string
		wantCode   string
		wantLimit  bool
		wantWait   time.Duration // with wantMin: at least, else exactly
		wantMin    bool
	}{
		{name: "seconds", status: 429, retryAfter: "7", body: `{"code":"rate_limited","message":"slow down"}`,
			wantCode: codes.RateLimited, wantLimit: true, wantWait: 7 * time.Second},
		{name: "a date", status: 429, retryAfter: inAMinute, body: `{"code":"rate_limited","message":"slow down"}`,
			wantCode: codes.RateLimited, wantLimit: true, wantWait: time.Minute, wantMin: true},
		{name: "a date in the past", status: 429, retryAfter: "Sun, 06 Nov 1994 08:49:37 GMT", body: `{"code":"rate_limited","message":"x"}`,
			wantCode: codes.RateLimited, wantLimit: true},
		{name: "no header", status: 429, body: `{"code":"rate_limited","message":"x"}`,
			wantCode: codes.RateLimited, wantLimit: true},
		{name: "garbage", status: 429, retryAfter: "soon", body: `{"code":"rate_limited","message":"x"}`,
			wantCode: codes.RateLimited, wantLimit: true},
		{name: "huge", status: 429, retryAfter: "99999999999999999999", body: `{"code":"rate_limited","message":"x"}`,
			wantCode: codes.RateLimited, wantLimit: true, wantWait: 24 * time.Hour},
		{name: "a proxy's 429", status: 429, retryAfter: "3", body: `Too Many Requests`,
			wantCode: "http_429", wantLimit: true, wantWait: 3 * time.Second},
		{name: "503 with Retry-After is no rate limit", status: 503, retryAfter: "5", body: `{"code":"unavailable","message":"x"}`,
			wantCode: "unavailable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				w.WriteHeader(tc.status)
				fmt.Fprintln(w, tc.body)
			}), time.Second)
			_, err := c.Checkin(context.Background(), proto.CheckinRequest{Hostname: "web-1"})
			if !apiclient.IsCode(err, tc.wantCode) {
				t.Fatalf("Checkin: %v, want code %s", err, tc.wantCode)
			}
			wait, limited := apiclient.RetryAfter(err)
			if limited != tc.wantLimit {
				t.Fatalf("RetryAfter(%v) limited %v, want %v", err, limited, tc.wantLimit)
			}
			switch {
			case tc.wantMin && (wait < tc.wantWait || wait > tc.wantWait+time.Minute):
				t.Errorf("wait %s, want about %s", wait, tc.wantWait+30*time.Second)
			case !tc.wantMin && wait != tc.wantWait:
				t.Errorf("wait %s, want %s", wait, tc.wantWait)
			}
		})
	}
	if _, limited := apiclient.RetryAfter(errors.New("connection refused")); limited {
		t.Error("a network error is a rate limit")
	}
}

// TestOperatorCalls: each typed call asks its endpoint, with the query it
// was given, and returns the answer decoded and exactly as sent.
func TestOperatorCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name string
		call func(c *apiclient.Client) (got any, raw json.RawMessage, err error)
		// wantURI is the request's path and query.
		wantURI string
		body    string
		want    any
	}{
		{name: "status", wantURI: "/v1/status",
			body: `{"replica":"r1","leader":true,"insecureDev":false,"channels":[{"name":"stable","ref":"abc","pending":true}],"future":1}`,
			want: proto.Status{Replica: "r1", Leader: true, Channels: []proto.ChannelStatus{{Name: "stable", Ref: "abc", Pending: true}}},
			call: func(c *apiclient.Client) (any, json.RawMessage, error) { return c.Status(ctx) }},
		{name: "rollouts", wantURI: "/v1/rollouts",
			body: `{"rollouts":[{"id":"stable@2","state":"Active","hosts":null},{"id":"stable@1","state":"Converged","hosts":null}]}`,
			want: []proto.Rollout{{ID: "stable@2", State: "Active"}, {ID: "stable@1", State: "Converged"}},
			call: func(c *apiclient.Client) (any, json.RawMessage, error) { return c.Rollouts(ctx) }},
		{name: "rollout", wantURI: "/v1/rollouts/stable@1",
			body: `{"id":"stable@1","hosts":[{"hostname":"web-1","state":"Pending","blocked":{"code":"budget","gate":"budget"}}],"counts":{"Pending":1}}`,
			want: proto.Rollout{ID: "stable@1", Hosts: []proto.RolloutHost{{Hostname: "web-1", State: "Pending",
				Blocked: proto.DecisionReason{Code: "budget", Gate: "budget"}}}, Counts: map[string]int{"Pending": 1}},
			call: func(c *apiclient.Client) (any, json.RawMessage, error) { return c.Rollout(ctx, "stable@1") }},
		{name: "a rollout's events", wantURI: "/v1/rollouts/stable@1/events?after=7&host=web-1&limit=100",
			body: `{"events":[{"id":8,"kind":"host_transition","wave":0,"host":"web-1","reason":{"code":"dispatched"}}]}`,
			want: []proto.Event{{ID: 8, Kind: "host_transition", Host: "web-1", Reason: proto.DecisionReason{Code: "dispatched"}}},
			call: func(c *apiclient.Client) (any, json.RawMessage, error) {
				// The path names the rollout: the query's rollout and channel are not sent.
				return c.RolloutEvents(ctx, "stable@1", proto.EventQuery{RolloutID: "other@1", Channel: "other", Host: "web-1", AfterID: 7, Limit: 100})
			}},
		{name: "the journal", wantURI: "/v1/events?channel=edge&rollout=edge%401",
			body: `{"events":[]}`, want: []proto.Event{},
			call: func(c *apiclient.Client) (any, json.RawMessage, error) {
				return c.Events(ctx, proto.EventQuery{RolloutID: "edge@1", Channel: "edge"})
			}},
		{name: "the whole journal", wantURI: "/v1/events", body: `{"events":[]}`, want: []proto.Event{},
			call: func(c *apiclient.Client) (any, json.RawMessage, error) { return c.Events(ctx, proto.EventQuery{}) }},
		{name: "hosts", wantURI: "/v1/hosts?channel=stable&state=Failed",
			body: `{"hosts":[{"hostname":"web-1","online":true,"seen":true,"observed":{"current":"c1"},"explain":{"code":"converged","message":"ok"}}]}`,
			want: []proto.HostView{{Hostname: "web-1", Online: true, Seen: true, Observed: proto.ObservedHost{Current: "c1"},
				Explain: proto.Situation{Code: "converged", Message: "ok"}}},
			call: func(c *apiclient.Client) (any, json.RawMessage, error) {
				return c.Hosts(ctx, proto.HostQuery{Channel: "stable", State: "Failed"})
			}},
		{name: "a host", wantURI: "/v1/hosts/web%201",
			body: `{"hostname":"web 1","rollout":"stable@1","rolloutState":"Active","host":{"hostname":"web 1","state":"Soaking"}}`,
			want: proto.HostView{Hostname: "web 1", Rollout: "stable@1", RolloutState: "Active", Host: &proto.RolloutHost{Hostname: "web 1", State: "Soaking"}},
			call: func(c *apiclient.Client) (any, json.RawMessage, error) { return c.Host(ctx, "web 1") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet || r.URL.RequestURI() != tc.wantURI {
					t.Errorf("%s %s, want GET %s", r.Method, r.URL.RequestURI(), tc.wantURI)
				}
				fmt.Fprintln(w, tc.body)
			}), time.Second)
			got, raw, err := tc.call(c)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decoded (-want +got):\n%s", diff)
			}
			if string(raw) != tc.body {
				t.Errorf("as sent: %s, want %s", raw, tc.body)
			}
		})
	}
}

// TestOperatorCallErrors: an error answer keeps the server's code, and an
// answer of the wrong shape is a decoding error that says which call.
func TestOperatorCallErrors(t *testing.T) {
	t.Parallel()
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/rollouts/nope" {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintln(w, `{"code":"not_found","message":"no rollout \"nope\""}`)
			return
		}
		fmt.Fprintln(w, `{"rollouts":{"not":"a list"}}`)
	}), time.Second)
	if _, raw, err := c.Rollout(context.Background(), "nope"); !apiclient.IsCode(err, "not_found") || raw != nil {
		t.Errorf("Rollout: %v (%s), want not_found", err, raw)
	}
	_, _, err := c.Rollouts(context.Background())
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		t.Errorf("Rollouts: %v, want a *json.UnmarshalTypeError", err)
	}
}

// TestNotTheAPI: answers of something that is not the control plane (a
// web server's page, another JSON API, a proxy's error) are
// ErrBadResponse, and their errors never quote the body.
func TestNotTheAPI(t *testing.T) {
	t.Parallel()
	const page = "<html><body>It works! secret-looking body text</body></html>"
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		wantCode    string // of the *Error, "" when it is not one
	}{
		{name: "web page", status: 200, contentType: "text/html; charset=utf-8", body: page},
		{name: "web server's 404", status: 404, contentType: "text/html", body: page, wantCode: "http_404"},
		{name: "a web server's 500", status: 500, contentType: "text/plain", body: "internal error secret-looking", wantCode: "http_500"},
		{name: "another JSON API", status: 200, contentType: "application/json", body: `{"data":[],"secret-looking":1}`},
		{name: "JSON that is not an object", status: 200, contentType: "application/json", body: `["secret-looking"]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			}), time.Second)
			_, _, err := c.Rollouts(context.Background())
			if !errors.Is(err, apiclient.ErrBadResponse) {
				t.Fatalf("Rollouts: %v, want ErrBadResponse", err)
			}
			if strings.Contains(err.Error(), "secret-looking") {
				t.Errorf("the error quotes the body: %v", err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%d bytes", len(tc.body))) {
				t.Errorf("the error does not describe the answer: %v", err)
			}
			var e *apiclient.Error
			if got := errors.As(err, &e); got != (tc.wantCode != "") || (got && e.Code != tc.wantCode) {
				t.Errorf("Rollouts: %#v, want an *Error with code %q", err, tc.wantCode)
			}
		})
	}
}

// TestGatewayDownIsUnavailable: a proxy's 502/503/504 page in front of a
// control plane that is down or restarting is unavailable, not a foreign
// server; other pages without an API error are.
func TestGatewayDownIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		code   string
		bad    bool
	}{
		{http.StatusBadGateway, codes.Unavailable, false},
		{http.StatusServiceUnavailable, codes.Unavailable, false},
		{http.StatusGatewayTimeout, codes.Unavailable, false},
		{http.StatusNotFound, "http_404", true},
	} {
		c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte("<html><body>secret proxy page</body></html>"))
		}), 5*time.Second)
		_, _, err := c.Rollouts(context.Background())
		if !apiclient.IsCode(err, tc.code) || errors.Is(err, apiclient.ErrBadResponse) != tc.bad || strings.Contains(err.Error(), "secret") {
			t.Errorf("HTTP %d: %v, want code %s (bad response %v), without the body", tc.status, err, tc.code, tc.bad)
		}
	}
}

// TestPages: the paging calls ask for each page with the cursor the one
// before gave, and the calls that read every page join them, each item as
// the server sent it; a page that names itself as next ends the reading
// with ErrBadResponse instead of looping.
func TestPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hostPages := map[string]string{
		"/v1/hosts?limit=2&rollout=stable%401":                          `{"hosts":[{"hostname":"a","x":1},{"hostname":"b"}],"next":"b"}`,
		"/v1/hosts?after=b&limit=2&rollout=stable%401":                  `{"hosts":[],"next":"c"}`,
		"/v1/hosts?after=c&limit=2&rollout=stable%401":                  `{"hosts":[{"hostname":"d"}]}`,
		"/v1/hosts?after=x":                                             `{"hosts":[{"hostname":"y"}],"next":"x"}`,
		"/v1/rollouts?channel=stable&limit=1&state=Converged":           `{"rollouts":[{"id":"stable@2","hosts":null}],"next":"Q1"}`,
		"/v1/rollouts?before=Q1&channel=stable&limit=1&state=Converged": `{"rollouts":[{"id":"stable@1","hosts":null}]}`,
		"/v1/rollouts/stable@1?hostsAfter=web-1&hostsLimit=3":           `{"id":"stable@1","hosts":[{"hostname":"web-2"}],"hostsNext":"web-2"}`,
	}
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := hostPages[r.URL.RequestURI()]
		if !ok {
			t.Errorf("unexpected GET %s", r.URL.RequestURI())
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintln(w, `{"code":"not_found","message":"no"}`)
			return
		}
		fmt.Fprintln(w, body)
	}), time.Second)

	hosts, raw, err := c.Hosts(ctx, proto.HostQuery{Rollout: "stable@1", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range hosts {
		names = append(names, h.Hostname)
	}
	if d := cmp.Diff([]string{"a", "b", "d"}, names); d != "" {
		t.Errorf("every host (-want +got):\n%s", d)
	}
	if want := `{"hosts":[{"hostname":"a","x":1},{"hostname":"b"},{"hostname":"d"}]}`; string(raw) != want {
		t.Errorf("joined as sent: %s, want %s", raw, want)
	}
	pages := 0
	err = c.HostPages(ctx, proto.HostQuery{Rollout: "stable@1", Limit: 2}, func(proto.HostList, json.RawMessage) bool {
		pages++
		return false
	})
	if err != nil || pages != 1 {
		t.Errorf("HostPages stopped after the first page: %d pages, %v", pages, err)
	}
	if _, _, err := c.Hosts(ctx, proto.HostQuery{After: "x"}); !errors.Is(err, apiclient.ErrBadResponse) {
		t.Errorf("a page that names itself as next: %v", err)
	}

	var ids []string
	err = c.RolloutPages(ctx, proto.RolloutQuery{Channel: "stable", State: "Converged", Limit: 1}, func(p proto.RolloutList, _ json.RawMessage) bool {
		for _, r := range p.Rollouts {
			ids = append(ids, r.ID)
		}
		return true
	})
	if err != nil || !cmp.Equal(ids, []string{"stable@2", "stable@1"}) {
		t.Errorf("rollout pages: %v, %v", ids, err)
	}
	r, _, err := c.RolloutHostPage(ctx, "stable@1", "web-1", 3)
	if err != nil || r.HostsNext != "web-2" || len(r.Hosts) != 1 {
		t.Errorf("a page of a rollout's hosts: %+v, %v", r, err)
	}
}
