package controlplane_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/simagent"
	"github.com/nixfleet/nixfleet/internal/testkit/cptest"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/trust"
)

// caller sends raw requests as one identity: a key (nil: no client
// certificate).
type caller struct {
	e    *env
	http *http.Client
	key  ed25519.PrivateKey
}

func (e *env) caller(key ed25519.PrivateKey, name string) *caller {
	e.t.Helper()
	tc := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: e.cert.Pool}
	if key != nil {
		cert, err := apiclient.SelfSignedCert(key, name, time.Now())
		if err != nil {
			e.t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return &caller{e: e, key: key, http: &http.Client{Timeout: 20 * time.Second,
		Transport: &http.Transport{TLSClientConfig: tc}}}
}

// answer is a response: its status and, for errors, its code.
type answer struct {
	status int
	code   string
	body   []byte
}

func (c *caller) do(method, path string, body []byte, header http.Header) answer {
	c.e.t.Helper()
	req, err := http.NewRequest(method, c.e.url+path, bytes.NewReader(body))
	if err != nil {
		c.e.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, body: data}
	if resp.StatusCode >= 300 {
		var pe proto.Error
		if err := json.Unmarshal(data, &pe); err != nil || pe.Code == "" || pe.Message == "" {
			c.e.t.Fatalf("%s %s: HTTP %d without a {code, message} body: %q", method, path, resp.StatusCode, data)
		}
		a.code = pe.Code
	}
	return a
}

func (c *caller) post(path string, body []byte) answer { return c.do(http.MethodPost, path, body, nil) }

// signed posts a report signed by key.
func (c *caller) signed(key ed25519.PrivateKey, body []byte) answer {
	h := http.Header{}
	if key != nil {
		h.Set(controlplane.SignatureHeader, base64.StdEncoding.EncodeToString(ed25519.Sign(key, body)))
	}
	return c.do(http.MethodPost, "/v1/agent/report", body, h)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// snapshot is everything a client can observe of the state, plus the
// store's watermarks: equal snapshots mean no state changed.
func (e *env) snapshot() string {
	e.t.Helper()
	ctx := context.Background()
	c := e.client(e.viewKey.priv, "victor")
	var b strings.Builder
	get := func(path string) json.RawMessage {
		var raw json.RawMessage
		if err := c.Get(ctx, path, &raw); err != nil {
			e.t.Fatalf("GET %s: %v", path, err)
		}
		return raw
	}
	var list struct{ Rollouts []reconciler.Rollout }
	if err := json.Unmarshal(get("/v1/rollouts"), &list); err != nil {
		e.t.Fatal(err)
	}
	for _, r := range list.Rollouts {
		fmt.Fprintf(&b, "%s\n%s\n", get("/v1/rollouts/"+r.ID), get("/v1/rollouts/"+r.ID+"/events"))
	}
	fmt.Fprintf(&b, "%s\n", get("/v1/hosts"))
	fmt.Fprintf(&b, "watermark %+v\n", e.watermark())
	return b.String()
}

// watermark reads the store's watermark, which every write a tick must see
// moves.
func (e *env) watermark() store.Watermark {
	e.t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, e.cfg.DB)
	if err != nil {
		e.t.Fatal(err)
	}
	defer st.Close()
	wm, err := st.Watermark(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return wm
}

// settle waits until the control plane is idle, so that a snapshot is not
// overtaken by a tick or a batch that was already coming.
func (e *env) settle() string {
	e.t.Helper()
	prev := e.snapshot()
	for range 10 {
		e.tick()
		cur := e.snapshot()
		if cur == prev {
			return cur
		}
		prev = cur
	}
	e.t.Fatal("the control plane does not settle")
	return ""
}

// unchanged checks, after a tick that takes whatever the requests caused,
// that the state is the snapshot before.
func (e *env) unchanged(before, what string) {
	e.t.Helper()
	e.tick()
	if after := e.snapshot(); after != before {
		e.t.Fatalf("%s:\nbefore:\n%s\nafter:\n%s", what, before, after)
	}
}

// expect checks an answer's status and code.
func expect(t *testing.T, what string, a answer, status int, code string) {
	t.Helper()
	if a.status != status || a.code != code {
		t.Errorf("%s: HTTP %d %q (%s), want HTTP %d %q", what, a.status, a.code, a.body, status, code)
	}
}

// TestHostileInput: every bad request gets its status and stable code,
// and changes nothing.
func TestHostileInput(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			testHostileInput(t, backend)
		})
	}
}

func testHostileInput(t *testing.T, backend string) {
	e := newEnv(t, backend, smallSpec(), nil)
	hosts := e.hosts()
	e.onboard(hosts)
	// Release v1: the canary is dispatched and does not act on it; the
	// test confirms by hand.
	hosts["canary"].Decide = func(proto.Target) simagent.Action { return simagent.Ignore }
	e.release("v1", 2)
	rollout := rolloutID("stable", 2)
	key := map[string]ed25519.PrivateKey{}
	for _, h := range e.spec.Hosts {
		key[h.Name] = h.Key
	}
	canary := e.caller(key["canary"], "canary")
	web1 := e.caller(key["web-1"], "web-1")
	var target *proto.Target
	e.await(10*time.Second, "the canary is dispatched", func() bool {
		a := canary.post("/v1/agent/checkin", mustJSON(t, proto.CheckinRequest{Hostname: "canary",
			Current: fleetrepo.Closure("canary", "v0"), Booted: fleetrepo.Closure("canary", "v0")}))
		var resp proto.CheckinResponse
		if a.status != http.StatusOK || json.Unmarshal(a.body, &resp) != nil {
			t.Fatalf("check-in: HTTP %d %s", a.status, a.body)
		}
		target = resp.Target
		return target != nil && target.RolloutID == rollout
	})
	ghostKey := func() ed25519.PrivateKey {
		_, k, _ := ed25519.GenerateKey(rand.Reader)
		return k
	}
	stranger := e.caller(ghostKey(), "canary") // claims canary's name, wrong key
	anonymous := e.caller(nil, "")
	viewer := e.caller(e.viewKey.priv, "victor")
	alice := e.caller(e.opKey.priv, "alice")
	carol := e.caller(e.apprKey.priv, "carol")
	checkin := func(name string) []byte {
		return mustJSON(t, proto.CheckinRequest{Hostname: name, Current: fleetrepo.Closure(name, "v0"), Booted: fleetrepo.Closure(name, "v0")})
	}
	confirm := func(host string, tgt proto.Target, token string) []byte {
		return mustJSON(t, proto.ConfirmRequest{Hostname: host, RolloutID: tgt.RolloutID, Closure: tgt.Closure, Token: token})
	}
	report := func(host string) []byte {
		return mustJSON(t, proto.ReportRequest{Hostname: host, Kind: proto.ReportActivationFailed, RolloutID: target.RolloutID,
			Closure: target.Closure, Code: "switch_failed", Detail: "x", At: e.clock.Now().UTC().Format(time.RFC3339)})
	}
	hmacHook := func(body []byte, secret string) http.Header {
		return http.Header{"X-Hub-Signature-256": {cptest.HookSignature(body, secret)}}
	}
	big := append([]byte(`{"hostname":"canary","failedUnits":["`), bytes.Repeat([]byte("x"), 300<<10)...)
	big = append(big, `"]}`...)
	deep := strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200)

	cases := []struct {
		name   string
		send   func() answer
		status int
		code   string
	}{
		// Bodies.
		{"oversized check-in", func() answer { return canary.post("/v1/agent/checkin", big) }, 413, codes.BodyTooLarge},
		{"truncated JSON", func() answer { return canary.post("/v1/agent/checkin", []byte(`{"hostname":"canary"`)) }, 400, codes.MalformedJSON},
		{"empty body", func() answer { return canary.post("/v1/agent/checkin", nil) }, 400, codes.MalformedJSON},
		{"duplicate member", func() answer {
			return canary.post("/v1/agent/checkin", []byte(`{"hostname":"canary","hostname":"web-1"}`))
		}, 400, codes.MalformedJSON},
		{"case-variant member", func() answer {
			return canary.post("/v1/agent/checkin", []byte(`{"hostname":"canary","HostName":"web-1"}`))
		}, 400, codes.MalformedJSON},
		{"wrong type", func() answer { return canary.post("/v1/agent/checkin", []byte(`{"hostname":7}`)) }, 400, codes.MalformedJSON},
		{"trailing data", func() answer {
			return canary.post("/v1/agent/checkin", append(checkin("canary"), []byte(` {}`)...))
		}, 400, codes.MalformedJSON},
		{"invalid UTF-8", func() answer {
			return canary.post("/v1/agent/checkin", []byte("{\"hostname\":\"canary\",\"current\":\"\xff\"}"))
		}, 400, codes.MalformedJSON},
		{"nesting too deep", func() answer { return canary.post("/v1/agent/checkin", []byte(deep)) }, 400, codes.MalformedJSON},
		{"top level not an object", func() answer { return canary.post("/v1/agent/checkin", []byte(`[]`)) }, 400, codes.MalformedJSON},
		{"no hostname", func() answer { return canary.post("/v1/agent/checkin", []byte(`{}`)) }, 400, codes.BadRequest},
		{"wait out of range", func() answer {
			return canary.post("/v1/agent/checkin", []byte(`{"hostname":"canary","wait":3600}`))
		}, 400, codes.BadRequest},

		// Who is calling.
		{"no client certificate", func() answer { return anonymous.post("/v1/agent/checkin", checkin("canary")) }, 401, codes.Unauthenticated},
		{"wrong host key", func() answer { return stranger.post("/v1/agent/checkin", checkin("canary")) }, 401, codes.UnknownClient},
		{"unknown host", func() answer { return canary.post("/v1/agent/checkin", checkin("ghost")) }, 403, codes.UnknownHost},
		{"another host's name", func() answer { return web1.post("/v1/agent/checkin", checkin("canary")) }, 403, codes.HostMismatch},
		{"operator on an agent endpoint", func() answer { return viewer.post("/v1/agent/checkin", checkin("canary")) }, 403, codes.Forbidden},

		// Confirms.
		{"confirm with a wrong token", func() answer {
			return canary.post("/v1/agent/confirm", confirm("canary", *target, "not-the-token"))
		}, 410, codes.ConfirmRejected},
		{"confirm of another closure", func() answer {
			t2 := *target
			t2.Closure = fleetrepo.Closure("canary", "v9")
			return canary.post("/v1/agent/confirm", confirm("canary", t2, target.Token))
		}, 410, codes.ConfirmRejected},
		{"confirm for another host", func() answer {
			return web1.post("/v1/agent/confirm", confirm("canary", *target, target.Token))
		}, 403, codes.HostMismatch},
		{"confirm of a host not activating", func() answer {
			return web1.post("/v1/agent/confirm", confirm("web-1", *target, target.Token))
		}, 410, codes.ConfirmRejected},

		// Reports.
		{"unsigned report", func() answer { return canary.signed(nil, report("canary")) }, 403, codes.BadSignature},
		{"report signed by another host", func() answer { return canary.signed(key["web-1"], report("canary")) }, 403, codes.BadSignature},
		{"report signature of other bytes", func() answer {
			h := http.Header{controlplane.SignatureHeader: {base64.StdEncoding.EncodeToString(ed25519.Sign(key["canary"], []byte("{}")))}}
			return canary.do(http.MethodPost, "/v1/agent/report", report("canary"), h)
		}, 403, codes.BadSignature},
		{"report for another host", func() answer { return web1.signed(key["web-1"], report("canary")) }, 403, codes.HostMismatch},
		{"report of an unknown kind", func() answer {
			body := mustJSON(t, proto.ReportRequest{Hostname: "canary", Kind: "exploded", RolloutID: target.RolloutID, Closure: target.Closure})
			return canary.signed(key["canary"], body)
		}, 400, codes.BadRequest},

		// Operators.
		{"sign-in link valid for 0 s", func() answer { return viewer.post("/v1/web/logins", []byte(`{"validSeconds":0}`)) }, 400, codes.BadRequest},
		{"sign-in link valid for -1 s", func() answer { return viewer.post("/v1/web/logins", []byte(`{"validSeconds":-1}`)) }, 400, codes.BadRequest},
		{"sign-in link valid for 3601 s", func() answer { return viewer.post("/v1/web/logins", []byte(`{"validSeconds":3601}`)) }, 400, codes.BadRequest},
		{"viewer pauses", func() answer { return viewer.post("/v1/rollouts/"+rollout+"/pause", nil) }, 403, codes.Forbidden},
		{"host pauses", func() answer { return canary.post("/v1/rollouts/"+rollout+"/pause", nil) }, 403, codes.Forbidden},
		{"host lists rollouts", func() answer { return canary.do(http.MethodGet, "/v1/rollouts", nil, nil) }, 403, codes.Forbidden},
		{"stranger lists hosts", func() answer { return stranger.do(http.MethodGet, "/v1/hosts", nil, nil) }, 401, codes.UnknownClient},
		{"anonymous status", func() answer { return anonymous.do(http.MethodGet, "/v1/status", nil, nil) }, 401, codes.Unauthenticated},
		{"unknown action", func() answer {
			return e.caller(e.opKey.priv, "alice").post("/v1/rollouts/"+rollout+"/explode", nil)
		}, 404, codes.NotFound},
		{"action on an unknown rollout", func() answer {
			return e.caller(e.opKey.priv, "alice").post("/v1/rollouts/stable@nope/pause", nil)
		}, 404, codes.NotFound},
		{"malformed intent", func() answer {
			return e.caller(e.opKey.priv, "alice").post("/v1/rollouts/"+rollout+"/pause", []byte(`{"comment":`))
		}, 400, codes.MalformedJSON},
		{"intent comment over the limit", func() answer {
			body := mustJSON(t, proto.IntentRequest{Comment: strings.Repeat("x", proto.MaxCommentBytes+1)})
			return e.caller(e.opKey.priv, "alice").post("/v1/rollouts/"+rollout+"/pause", body)
		}, 400, codes.BadRequest},
		{"intent comment with a newline", func() answer {
			return e.caller(e.opKey.priv, "alice").post("/v1/rollouts/"+rollout+"/pause", []byte(`{"comment":"two\nlines"}`))
		}, 400, codes.BadRequest},

		// Change control: approve and break-freeze are an approver's
		// (rfcs/0007 §Intents); approve names its wave; both need a
		// comment. None of these files an intent.
		{"operator approves", func() answer {
			return alice.post("/v1/rollouts/"+rollout+"/approve", []byte(`{"wave":1,"comment":"looks good"}`))
		}, 403, codes.Forbidden},
		{"operator breaks a freeze", func() answer {
			return alice.post("/v1/rollouts/"+rollout+"/break-freeze", []byte(`{"comment":"hotfix"}`))
		}, 403, codes.Forbidden},
		{"viewer approves", func() answer {
			return viewer.post("/v1/rollouts/"+rollout+"/approve", []byte(`{"wave":1,"comment":"looks good"}`))
		}, 403, codes.Forbidden},
		{"host approves", func() answer {
			return canary.post("/v1/rollouts/"+rollout+"/approve", []byte(`{"wave":1,"comment":"looks good"}`))
		}, 403, codes.Forbidden},
		{"approve without a wave", func() answer {
			return carol.post("/v1/rollouts/"+rollout+"/approve", []byte(`{"comment":"looks good"}`))
		}, 400, codes.BadRequest},
		{"approve with a null wave", func() answer {
			return carol.post("/v1/rollouts/"+rollout+"/approve", []byte(`{"wave":null,"comment":"looks good"}`))
		}, 400, codes.BadRequest},
		{"approve of a negative wave", func() answer {
			return carol.post("/v1/rollouts/"+rollout+"/approve", []byte(`{"wave":-1,"comment":"looks good"}`))
		}, 400, codes.BadRequest},
		{"approve of a wave no store holds", func() answer {
			return carol.post("/v1/rollouts/"+rollout+"/approve", []byte(`{"wave":2147483648,"comment":"looks good"}`))
		}, 400, codes.BadRequest},
		{"approve of a wave that is no integer", func() answer {
			return carol.post("/v1/rollouts/"+rollout+"/approve", []byte(`{"wave":1.5,"comment":"looks good"}`))
		}, 400, codes.MalformedJSON},
		{"approve of a wave given as a string", func() answer {
			return carol.post("/v1/rollouts/"+rollout+"/approve", []byte(`{"wave":"1","comment":"looks good"}`))
		}, 400, codes.MalformedJSON},
		{"approve without a body", func() answer { return carol.post("/v1/rollouts/"+rollout+"/approve", nil) }, 400, codes.BadRequest},
		{"approve without a comment", func() answer {
			return carol.post("/v1/rollouts/"+rollout+"/approve", []byte(`{"wave":1}`))
		}, 400, codes.BadRequest},
		{"approve with a blank comment", func() answer {
			return carol.post("/v1/rollouts/"+rollout+"/approve", []byte(`{"wave":1,"comment":"   "}`))
		}, 400, codes.BadRequest},
		{"approve with a comment over the limit", func() answer {
			body := mustJSON(t, proto.IntentRequest{Wave: new(int), Comment: strings.Repeat("x", proto.MaxCommentBytes+1)})
			return carol.post("/v1/rollouts/"+rollout+"/approve", body)
		}, 400, codes.BadRequest},
		{"break-freeze without a comment", func() answer { return carol.post("/v1/rollouts/"+rollout+"/break-freeze", nil) }, 400, codes.BadRequest},
		{"break-freeze with a blank comment", func() answer {
			return carol.post("/v1/rollouts/"+rollout+"/break-freeze", []byte(`{"comment":" "}`))
		}, 400, codes.BadRequest},
		{"break-freeze with a wave", func() answer {
			return carol.post("/v1/rollouts/"+rollout+"/break-freeze", []byte(`{"wave":0,"comment":"hotfix"}`))
		}, 400, codes.BadRequest},
		{"pause with a wave", func() answer {
			return alice.post("/v1/rollouts/"+rollout+"/pause", []byte(`{"wave":1}`))
		}, 400, codes.BadRequest},
		{"approver pauses with a wave", func() answer {
			return carol.post("/v1/rollouts/"+rollout+"/pause", []byte(`{"wave":0,"comment":"x"}`))
		}, 400, codes.BadRequest},
		{"approve of an unknown rollout", func() answer {
			return carol.post("/v1/rollouts/stable@nope/approve", []byte(`{"wave":0,"comment":"looks good"}`))
		}, 404, codes.NotFound},
		{"break-freeze of a rollout no release names", func() answer {
			return carol.post("/v1/rollouts/stable@nope/break-freeze", []byte(`{"comment":"hotfix"}`))
		}, 404, codes.NotFound},
		{"break-freeze of a rollout id with NUL", func() answer {
			return carol.post("/v1/rollouts/stable@%00/break-freeze", []byte(`{"comment":"hotfix"}`))
		}, 404, codes.NotFound},
		{"viewer reads the release log", func() answer { return viewer.do(http.MethodGet, "/v1/releases?channel=stable", nil, nil) }, 200, ""},
		{"host reads the release log", func() answer { return canary.do(http.MethodGet, "/v1/releases", nil, nil) }, 403, codes.Forbidden},
		{"release log of a channel with NUL", func() answer { return viewer.do(http.MethodGet, "/v1/releases?channel=%00", nil, nil) }, 400, codes.BadRequest},
		{"manifest for a stranger", func() answer {
			return stranger.do(http.MethodGet, "/v1/rollouts/"+rollout+"/manifest", nil, nil)
		}, 401, codes.UnknownClient},

		// Names no fleet can hold (rfcs/0007 §Error codes): a control
		// character or a byte that is not UTF-8 in a rollout id or host
		// name is no such rollout or host, on both stores (PostgreSQL
		// refuses NUL and invalid UTF-8 in text); in an event filter it
		// is a bad request.
		{"rollout id with NUL", func() answer { return viewer.do(http.MethodGet, "/v1/rollouts/"+rollout+"%00", nil, nil) }, 404, codes.NotFound},
		{"rollout id not UTF-8", func() answer { return viewer.do(http.MethodGet, "/v1/rollouts/stable@%ff", nil, nil) }, 404, codes.NotFound},
		{"events of a rollout id with NUL", func() answer {
			return viewer.do(http.MethodGet, "/v1/rollouts/%00/events", nil, nil)
		}, 404, codes.NotFound},
		{"manifest of a rollout id with an escape", func() answer {
			return canary.do(http.MethodGet, "/v1/rollouts/stable@%1b%5b2J/manifest", nil, nil)
		}, 404, codes.NotFound},
		{"manifest signature of a rollout id with NUL", func() answer {
			return canary.do(http.MethodGet, "/v1/rollouts/"+rollout+"%00/manifest.sig", nil, nil)
		}, 404, codes.NotFound},
		{"intent on a rollout id with NUL", func() answer {
			return e.caller(e.opKey.priv, "alice").post("/v1/rollouts/"+rollout+"%00/pause", nil)
		}, 404, codes.NotFound},
		{"host name with NUL", func() answer { return viewer.do(http.MethodGet, "/v1/hosts/canary%00", nil, nil) }, 404, codes.NotFound},
		{"host name with DEL", func() answer { return viewer.do(http.MethodGet, "/v1/hosts/canary%7f", nil, nil) }, 404, codes.NotFound},
		{"host name not UTF-8", func() answer { return viewer.do(http.MethodGet, "/v1/hosts/%c3%28", nil, nil) }, 404, codes.NotFound},
		{"event host filter with NUL", func() answer {
			return viewer.do(http.MethodGet, "/v1/rollouts/"+rollout+"/events?host=canary%00", nil, nil)
		}, 400, codes.BadRequest},
		{"event rollout filter with NUL", func() answer { return viewer.do(http.MethodGet, "/v1/events?rollout=%00", nil, nil) }, 400, codes.BadRequest},
		{"event channel filter not UTF-8", func() answer { return viewer.do(http.MethodGet, "/v1/events?channel=%ff", nil, nil) }, 400, codes.BadRequest},

		// The webhook and the rest.
		{"webhook with a wrong secret", func() answer {
			body := []byte(`{}`)
			return anonymous.do(http.MethodPost, "/v1/hooks/git", body, hmacHook(body, "guess"))
		}, 401, codes.BadSignature},
		{"webhook without a signature", func() answer { return anonymous.post("/v1/hooks/git", []byte(`{}`)) }, 401, codes.BadSignature},
		{"unknown endpoint", func() answer { return viewer.do(http.MethodGet, "/v1/nothing", nil, nil) }, 404, codes.NotFound},
		{"wrong method", func() answer { return canary.do(http.MethodGet, "/v1/agent/checkin", nil, nil) }, 405, codes.MethodNotAllowed},
	}
	before := e.settle()
	for _, c := range cases {
		expect(t, c.name, c.send(), c.status, c.code)
	}
	e.unchanged(before, "bad requests changed the state")

	// Replayed and late confirms. The canary confirms rollout 2; v2 opens
	// rollout 3 and dispatches it again.
	expect(t, "the real confirm", canary.post("/v1/agent/confirm", confirm("canary", *target, target.Token)), 200, "")
	expect(t, "the same confirm again (a retry)", canary.post("/v1/agent/confirm", confirm("canary", *target, target.Token)), 200, "")
	old := *target
	e.await(10*time.Second, "rollout 2 converges", func() bool {
		// The canary checks in on its target: its soak can end.
		expect(t, "the check-in after the confirm", canary.post("/v1/agent/checkin", mustJSON(t, proto.CheckinRequest{Hostname: "canary",
			Current: old.Closure, Booted: old.Closure})), 200, "")
		for _, name := range []string{"web-1", "web-2", "web-3"} {
			_ = hosts[name].Step(context.Background(), 0)
		}
		return rolloutState(t, e, rollout) == reconciler.RolloutConverged
	})
	// A retry whose first answer was lost, after the tick that moved the
	// canary on (and changed its token): accepted, and nothing changes.
	before = e.settle()
	expect(t, "the confirm retried after the canary soaked", canary.post("/v1/agent/confirm", confirm("canary", *target, target.Token)), 200, "")
	e.unchanged(before, "a retried confirm changed the state")
	e.release("v2", 3)
	e.await(10*time.Second, "the canary is dispatched again", func() bool {
		a := canary.post("/v1/agent/checkin", mustJSON(t, proto.CheckinRequest{Hostname: "canary",
			Current: old.Closure, Booted: old.Closure}))
		var resp proto.CheckinResponse
		if a.status != http.StatusOK || json.Unmarshal(a.body, &resp) != nil {
			t.Fatalf("check-in: HTTP %d %s", a.status, a.body)
		}
		target = resp.Target
		return target != nil && target.RolloutID == rolloutID("stable", 3)
	})
	before = e.settle()
	expect(t, "a replayed confirm of the last rollout", canary.post("/v1/agent/confirm", confirm("canary", old, old.Token)), 410, codes.ConfirmRejected)
	expect(t, "the old token on the new target", canary.post("/v1/agent/confirm", confirm("canary", *target, old.Token)), 410, codes.ConfirmRejected)
	e.unchanged(before, "a replayed confirm changed the state")
	e.settle()
	e.clock.Advance(reconciler.DefaultConfirmWindow + time.Second)
	expect(t, "a confirm after the window", canary.post("/v1/agent/confirm", confirm("canary", *target, target.Token)), 410, codes.ConfirmRejected)
	// The next tick (a control plane back from a gap in its ticks, which
	// judges no silence yet) has no confirm to take.
	e.tick()
	if h := hostIn(t, e, rolloutID("stable", 3), "canary"); h.State != string(reconciler.HostActivating) {
		t.Errorf("after a late confirm the canary is %s (%s), want still Activating: the confirm was refused", h.State, h.Reason.Code)
	}
}

// TestTamperedRelease: a release whose artifacts fail verification, or
// that replays an older one, raises an event and a metric and never
// replaces the last verified release.
func TestTamperedRelease(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, backend, smallSpec(), nil)
			ctx := context.Background()
			op := e.client(e.viewKey.priv, "victor")
			rejected := func(code string, commit plumbing.Hash, ref int, rollouts int) {
				t.Helper()
				e.rejected(code, commit, ref, rollouts)
			}
			first, err := e.repo.Ref("stable")
			if err != nil {
				t.Fatal(err)
			}
			e.await(10*time.Second, "the first release opens its rollout", func() bool {
				return rolloutState(t, e, rolloutID("stable", 1)) != ""
			})
			// No agent checks in here, so the first rollout would wait for
			// its hosts; an operator cancels it, and later releases open
			// rollouts at once.
			if _, _, err := e.client(e.opKey.priv, "alice").Act(ctx, rolloutID("stable", 1), reconciler.IntentCancel, "no agents in this test"); err != nil {
				t.Fatal(err)
			}

			// A manifest changed after signing.
			e.clock.Advance(time.Minute)
			unsigned, err := e.spec.Fleet("v1")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.repo.Release(unsigned, fleetkit.Commit(2), e.clock.Now()); err != nil {
				t.Fatal(err)
			}
			mpath := filepath.Join("releases", "rollouts", rolloutID("stable", 2)+".json")
			body, err := os.ReadFile(filepath.Join(e.repo.Dir, mpath))
			if err != nil {
				t.Fatal(err)
			}
			tampered := bytes.Replace(body, []byte(fleetrepo.Closure("web-1", "v1")), []byte(fleetrepo.Closure("web-1", "v0")), 1)
			if bytes.Equal(tampered, body) {
				t.Fatal("the manifest does not name web-1's closure")
			}
			if err := e.repo.WriteFile(mpath, tampered); err != nil {
				t.Fatal(err)
			}
			commit, err := e.repo.Commit("tamper", e.clock.Now())
			if err != nil {
				t.Fatal(err)
			}
			if err := e.repo.Promote("stable", commit); err != nil {
				t.Fatal(err)
			}
			e.hook()
			rejected("bad_signature", commit, 1, 1)

			// The same release, signed as it should be, is taken.
			e.release("v1", 2)
			e.await(10*time.Second, "the good release is verified", func() bool {
				var st proto.Status
				return op.Get(ctx, "/v1/status", &st) == nil && len(st.Channels) == 1 &&
					st.Channels[0].Ref == fleetkit.Commit(2) && st.Channels[0].LastFailure == nil &&
					st.Channels[0].Rollout != nil && st.Channels[0].Rollout.Ref == fleetkit.Commit(2)
			})

			// A replay: the channel moved back to the first release, whose
			// signature is still valid.
			if err := e.repo.Promote("stable", first); err != nil {
				t.Fatal(err)
			}
			e.hook()
			rejected("replayed_release", first, 2, 2)
			// The push back is a row of the release log of its own, besides
			// the first release's, and the releases page shows it.
			rels, _, err := op.Releases(ctx, proto.ReleaseQuery{Channel: "stable"})
			if err != nil {
				t.Fatal(err)
			}
			if r := rels[0]; r.Commit != first.String() || r.Fate != proto.FateRefused || r.Reason.Code != codes.ReplayedRelease ||
				r.RolloutID != rolloutID("stable", 1) || !strings.Contains(r.Reason.Message, "nixfleet rollout rollback "+rolloutID("stable", 2)+",") ||
				!strings.Contains(r.Reason.Message, "revert the change in the fleet's source") {
				t.Errorf("the release log's newest row is %+v, want the refused push back to %s", r, first)
			}
			if n := len(rels); n != 4 {
				t.Errorf("the release log has %d rows, want 4: the first release, the tampered one, the second and the push back", n)
			}
			viewer := e.browser()
			viewer.signIn(e.viewKey.priv, "victor")
			if page := viewer.page("/ui/releases", http.StatusOK); !strings.Contains(page, ">refused<") || !strings.Contains(page, codes.ReplayedRelease) {
				t.Errorf("the releases page does not show the refused push back:\n%s", page)
			}

			// A fleet CI signed without stamping its commit (meta.ciCommit
			// null): there is no rollout id to read a manifest for.
			e.clock.Advance(time.Minute)
			fpath := filepath.Join(e.repo.Dir, "releases", "fleet.resolved.json")
			signed, err := os.ReadFile(fpath)
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := json.Unmarshal(signed, &doc); err != nil {
				t.Fatal(err)
			}
			doc["meta"].(map[string]any)["ciCommit"] = nil
			doc["meta"].(map[string]any)["signedAt"] = e.clock.Now().UTC().Format(time.RFC3339)
			raw, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			unstamped, err := trust.Canonicalize(raw)
			if err != nil {
				t.Fatal(err)
			}
			sig, err := e.repo.Key.Sign(unstamped)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.repo.WriteFile(filepath.Join("releases", "fleet.resolved.json"), unstamped); err != nil {
				t.Fatal(err)
			}
			if err := e.repo.WriteFile(filepath.Join("releases", "fleet.resolved.json.sig"), sig); err != nil {
				t.Fatal(err)
			}
			commit, err = e.repo.Commit("unstamped", e.clock.Now())
			if err != nil {
				t.Fatal(err)
			}
			if err := e.repo.Promote("stable", commit); err != nil {
				t.Fatal(err)
			}
			e.hook()
			rejected("malformed", commit, 2, 2)
		})
	}
}

// rejected waits until the channel's last refusal is the one of the ref's
// object commit, with code, and checks that nothing else moved: the
// channel is still on its last verified release (ciCommit ref) in GET
// /v1/status, there are still rollouts rollouts, and the refusal is a
// release_rejected event with the code naming the commit, and a metric.
func (e *env) rejected(code string, commit plumbing.Hash, ref int, rollouts int) {
	e.t.Helper()
	ctx := context.Background()
	op := e.client(e.viewKey.priv, "victor")
	var st proto.Status
	e.await(10*time.Second, fmt.Sprintf("commit %s refused with code %s", commit.String()[:12], code), func() bool {
		if err := op.Get(ctx, "/v1/status", &st); err != nil {
			e.t.Fatal(err)
		}
		return len(st.Channels) == 1 && st.Channels[0].LastFailure != nil && st.Channels[0].LastFailure.Commit == commit.String()
	})
	if f := st.Channels[0].LastFailure; f.Code != code {
		e.t.Errorf("commit %s refused with %s (%s), want %s", commit.String()[:12], f.Code, f.Message, code)
	}
	if ch := st.Channels[0]; ch.Ref != fleetkit.Commit(ref) {
		e.t.Errorf("after a refused release the channel is at %s, want the last verified %s", ch.Ref, fleetkit.Commit(ref))
	}
	var rs struct{ Rollouts []reconciler.Rollout }
	if err := op.Get(ctx, "/v1/rollouts", &rs); err != nil {
		e.t.Fatal(err)
	}
	if len(rs.Rollouts) != rollouts {
		e.t.Errorf("%d rollouts after a refused release, want %d", len(rs.Rollouts), rollouts)
	}
	var evs struct{ Events []proto.Event }
	if err := op.Get(ctx, "/v1/events?channel=stable", &evs); err != nil {
		e.t.Fatal(err)
	}
	found := false
	for _, ev := range evs.Events {
		found = found || (ev.Kind == controlplane.EventReleaseRejected && ev.Reason.Code == code && strings.Contains(ev.Reason.Message, commit.String()[:12]))
	}
	if !found {
		e.t.Errorf("no release_rejected event with code %s naming commit %s in %+v", code, commit.String()[:12], evs.Events)
	}
	metric := fmt.Sprintf(`nixfleet_verification_failures_total{code=%q}`, code)
	if m := e.metricsText(); !strings.Contains(m, metric) {
		e.t.Errorf("/metrics lacks %s", metric)
	}
}

// TestHostileRepository: what a channel ref or an artifact path names in
// the fleet repository that CI never writes. A symlink, a directory or a
// submodule where an artifact should be is not_a_file (a symlink is never
// followed: its target is not read as the artifact); a ref naming a blob
// or a tree, directly or through an annotated tag, is not_a_commit; each
// is refused with a release_rejected event and the last verified release
// stays. A ref naming an annotated tag of a release commit (or a tag of
// that tag) is peeled to the commit and taken.
func TestHostileRepository(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			testHostileRepository(t, backend)
		})
	}
}

func testHostileRepository(t *testing.T, backend string) {
	e := newEnv(t, backend, smallSpec(), nil)
	ctx := context.Background()
	op := e.client(e.viewKey.priv, "victor")
	e.await(10*time.Second, "the first release opens its rollout", func() bool {
		return rolloutState(t, e, rolloutID("stable", 1)) != ""
	})
	// No agent checks in: an operator cancels the first rollout so that a
	// release taken later opens its own at once.
	if _, _, err := e.client(e.opKey.priv, "alice").Act(ctx, rolloutID("stable", 1), reconciler.IntentCancel, "no agents in this test"); err != nil {
		t.Fatal(err)
	}
	base, err := e.repo.Ref("stable")
	if err != nil {
		t.Fatal(err)
	}
	must := func(h plumbing.Hash, err error) plumbing.Hash {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	const fleetPath = "releases/fleet.resolved.json"
	manifestPath := "releases/rollouts/" + rolloutID("stable", 1) + ".json"
	// A symlink's blob is its target path; one to a file holding the very
	// signed fleet would verify if it were followed, or read as the
	// artifact ("malformed: unexpected character '/'" before).
	link := must(e.repo.WriteBlob([]byte("../fleet.resolved.json")))
	rootTree := must(e.repo.TreeOf(base))
	signed, err := os.ReadFile(filepath.Join(e.repo.Dir, "releases", "fleet.resolved.json"))
	if err != nil {
		t.Fatal(err)
	}
	fleetBlob := must(e.repo.WriteBlob(signed))
	entry := func(path string, mode filemode.FileMode, h plumbing.Hash) func() plumbing.Hash {
		return func() plumbing.Hash {
			return must(e.repo.CommitEntry(base, path, mode, h, "hostile "+path, e.clock.Now()))
		}
	}
	direct := func(h plumbing.Hash) func() plumbing.Hash { return func() plumbing.Hash { return h } }
	tagged := func(name string, target plumbing.Hash, typ plumbing.ObjectType) func() plumbing.Hash {
		return func() plumbing.Hash { return must(e.repo.Tag(name, target, typ, e.clock.Now())) }
	}
	cases := []struct {
		name string
		ref  func() plumbing.Hash // the object the channel ref is moved to
		code string
	}{
		{"fleet.resolved.json is a symlink", entry(fleetPath, filemode.Symlink, link), "not_a_file"},
		{"the manifest is a symlink", entry(manifestPath, filemode.Symlink, link), "not_a_file"},
		{"the signature is a symlink", entry(fleetPath+".sig", filemode.Symlink, link), "not_a_file"},
		{"releases/ is a symlink", entry("releases", filemode.Symlink, link), "not_a_file"},
		{"fleet.resolved.json is a directory", entry(fleetPath, filemode.Dir, rootTree), "not_a_file"},
		{"the signature is a submodule", entry(fleetPath+".sig", filemode.Submodule, base), "not_a_file"},
		{"a file entry naming a tree", entry(fleetPath, filemode.Regular, rootTree), "not_a_file"},
		{"the ref names a blob", direct(fleetBlob), "not_a_commit"},
		{"the ref names a tree", direct(rootTree), "not_a_commit"},
		{"the ref names a tag of a tree", tagged("tree", rootTree, plumbing.TreeObject), "not_a_commit"},
		{"the ref names a tag of a blob", tagged("blob", fleetBlob, plumbing.BlobObject), "not_a_commit"},
		{"the ref names a missing object", direct(plumbing.NewHash("00000000000000000000000000000000000000aa")), "missing_artifact"},
	}
	for _, c := range cases {
		h := c.ref()
		if err := e.repo.Promote("stable", h); err != nil {
			t.Fatal(err)
		}
		e.hook()
		t.Logf("%s: %s", c.name, h)
		e.rejected(c.code, h, 1, 1)
	}

	// An annotated tag of a release commit is peeled to it, and a tag of
	// that tag too: the release is taken, its rollout opens, and the
	// channel's source commit is the commit, not the tag.
	for i, depth := range []int{1, 2} {
		n := 2 + i
		e.clock.Advance(time.Minute)
		unsigned, err := e.spec.Fleet(fmt.Sprintf("v%d", n))
		if err != nil {
			t.Fatal(err)
		}
		commit := must(e.repo.Release(unsigned, fleetkit.Commit(n), e.clock.Now()))
		ref, typ := commit, plumbing.CommitObject
		for d := range depth {
			ref, typ = must(e.repo.Tag(fmt.Sprintf("release-%d-%d", n, d), ref, typ, e.clock.Now())), plumbing.TagObject
		}
		if err := e.repo.Promote("stable", ref); err != nil {
			t.Fatal(err)
		}
		e.hook()
		e.await(10*time.Second, fmt.Sprintf("the release behind %d tags is taken and opens its rollout", depth), func() bool {
			var st proto.Status
			return op.Get(ctx, "/v1/status", &st) == nil && len(st.Channels) == 1 &&
				st.Channels[0].Ref == fleetkit.Commit(n) && st.Channels[0].Rollout != nil && st.Channels[0].Rollout.Ref == fleetkit.Commit(n)
		})
		var st proto.Status
		if err := op.Get(ctx, "/v1/status", &st); err != nil {
			t.Fatal(err)
		}
		if got := st.Channels[0].SourceCommit; got != commit.String() {
			t.Errorf("source commit %s, want the tagged commit %s", got, commit)
		}
		if f := st.Channels[0].LastFailure; f != nil {
			t.Errorf("a taken release left the failure %+v", f)
		}
		if _, _, err := e.client(e.opKey.priv, "alice").Act(ctx, rolloutID("stable", n), reconciler.IntentCancel, "the next release opens its own"); err != nil {
			t.Fatal(err)
		}
	}
}

// Environment of a TestHugeArtifact child process: the backend it runs
// on, the blobs it links in (JSON), and the file it writes its figures to.
const (
	hugeChildEnv = "NIXFLEET_TEST_HUGE_CHILD"
	hugeBlobsEnv = "NIXFLEET_TEST_HUGE_BLOBS"
	hugeOutEnv   = "NIXFLEET_TEST_HUGE_OUT"
)

// hugeSlack is how far above its resident memory before a promotion the
// control plane's peak may go while it refuses a huge artifact. Reading
// the 100 MB one would take it over 100 MiB.
const hugeSlack = 8 << 10 // KiB

// hugeCase is one huge blob a child refuses: loose, or packed by git.
type hugeCase struct {
	Blob   fleetrepo.ZeroBlob `json:"blob"`
	Packed bool               `json:"packed"`
}

// hugeFigure is what a child measured for one case, in KiB.
type hugeFigure struct {
	hugeCase
	Idle int64 `json:"idleKiB"` // VmRSS just before the ref moved
	Peak int64 `json:"peakKiB"` // VmHWM after the refusal, the peak reset to Idle before
}

func (c hugeCase) String() string {
	how := "loose"
	if c.Packed {
		how = "packed"
	}
	return fmt.Sprintf("a %d-byte fleet.resolved.json (%s)", c.Blob.Size, how)
}

// TestHugeArtifact: a releases/fleet.resolved.json of 100 MB, or of
// 1 GiB, is refused as malformed from its object header, unread (rfcs/0006
// §Channel source 3): the control plane's peak resident memory while it
// refuses one stays within hugeSlack of its resident memory before, a
// release_rejected event names the commit, and the channel stays on its
// last verified release with no new rollout.
//
// How it is measured. The blobs (zeros) are streamed once into valid
// loose object files (fleetrepo.WriteZeroBlob: the GiB takes about 1 MB on
// disk and a second) and hard-linked into each run's repository; the
// 100 MB one is refused a second time after git repack moved it into a
// pack. Each backend runs in a child process (this test binary again,
// selected by NIXFLEET_TEST_HUGE_CHILD) that starts a whole control plane
// in process (the harness's env: store, tick, API and the git source on
// the repository) and does nothing else. For each blob the child commits
// it at releases/fleet.resolved.json, first refuses a small bad release
// the same way (so the API and TLS paths are warm), collects garbage,
// reads its VmRSS in /proc/self/status, resets its peak to it (writing 5
// to /proc/self/clear_refs), moves the ref and calls the webhook, waits
// for the refusal through the API, then reads its VmHWM: the kernel's
// peak resident set of the process over the whole poll, not Go heap
// statistics. The parent asserts on the figures and logs them. Before
// the fix, the 100 MB blob took the process from 32 MB to a 450 MB peak.
func TestHugeArtifact(t *testing.T) {
	if backend := os.Getenv(hugeChildEnv); backend != "" {
		hugeChild(t, backend)
		return
	}
	dir := t.TempDir()
	var cases []hugeCase
	for _, size := range []int64{100_000_000, 1 << 30} {
		b, err := fleetrepo.WriteZeroBlob(dir, size)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, hugeCase{Blob: b})
	}
	// The 100 MB one in a pack too, as a git push or gc leaves it
	// (packing the GiB would take seconds more).
	cases = append(cases, hugeCase{Blob: cases[0].Blob, Packed: true})
	spec := mustJSON(t, cases)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			tmp := filepath.Join(dir, backend)
			if err := os.Mkdir(tmp, 0o700); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(tmp, "figures.json")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHugeArtifact$", "-test.count=1", "-test.v")
			// The child's temporary files live in the parent's, removed
			// with it even if the child is killed.
			cmd.Env = append(os.Environ(), hugeChildEnv+"="+backend, hugeBlobsEnv+"="+string(spec), hugeOutEnv+"="+out, "TMPDIR="+tmp)
			log, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the child control plane: %v\n%s", err, log)
			}
			raw, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("%v\n%s", err, log)
			}
			var figs []hugeFigure
			if err := json.Unmarshal(raw, &figs); err != nil || len(figs) != len(cases) {
				t.Fatalf("figures %s (%v), want %d", raw, err, len(cases))
			}
			for _, f := range figs {
				t.Logf("%s, %s: resident %d KiB before, peak %d KiB while refusing it (%+d KiB)",
					backend, f.hugeCase, f.Idle, f.Peak, f.Peak-f.Idle)
				if f.Peak-f.Idle > hugeSlack {
					t.Errorf("refusing %s took the control plane from %d KiB to a peak of %d KiB, over %d KiB more",
						f.hugeCase, f.Idle, f.Peak, hugeSlack)
				}
			}
		})
	}
}

// hugeChild is the child process of TestHugeArtifact.
func hugeChild(t *testing.T, backend string) {
	var cases []hugeCase
	if err := json.Unmarshal([]byte(os.Getenv(hugeBlobsEnv)), &cases); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, backend, smallSpec(), nil)
	e.await(10*time.Second, "the first release opens its rollout", func() bool {
		return rolloutState(t, e, rolloutID("stable", 1)) != ""
	})
	base, err := e.repo.Ref("stable")
	if err != nil {
		t.Fatal(err)
	}
	commit := func(h plumbing.Hash, mode filemode.FileMode) plumbing.Hash {
		t.Helper()
		c, err := e.repo.CommitEntry(base, "releases/fleet.resolved.json", mode, h, "huge", e.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	promote := func(c plumbing.Hash) {
		t.Helper()
		if err := e.repo.Promote("stable", c); err != nil {
			t.Fatal(err)
		}
		e.hook()
	}
	empty, err := e.repo.WriteBlob(nil)
	if err != nil {
		t.Fatal(err)
	}
	var figs []hugeFigure
	for i, c := range cases {
		if err := e.repo.AddLooseObject(c.Blob); err != nil {
			t.Fatal(err)
		}
		huge := commit(c.Blob.Hash, filemode.Regular)
		// Warm up: a small bad release, refused the same way.
		warm := commit(empty, filemode.Executable)
		if c.Packed {
			// Everything into one pack, the loose copies gone, as git
			// push or gc leaves a repository. Only last: the fleetrepo
			// writer does not see packs made behind its back.
			if i != len(cases)-1 {
				t.Fatal("a packed case must come last")
			}
			for n, h := range []plumbing.Hash{huge, warm} {
				if err := e.repo.Promote(fmt.Sprintf("keep-%d", n), h); err != nil {
					t.Fatal(err)
				}
			}
			for _, args := range [][]string{{"-c", "pack.compression=1", "repack", "-a", "-d", "-q"}, {"prune-packed"}} {
				if out, err := exec.Command("git", append([]string{"-C", e.repo.Dir}, args...)...).CombinedOutput(); err != nil {
					t.Fatalf("git %s: %v\n%s", args, err, out)
				}
			}
			id := c.Blob.Hash.String()
			if _, err := os.Stat(filepath.Join(e.repo.Dir, ".git", "objects", id[:2], id[2:])); !os.IsNotExist(err) {
				t.Fatalf("the blob is still loose after git repack (%v)", err)
			}
		}
		promote(warm)
		e.rejected("malformed", warm, 1, 1)
		runtime.GC()
		idle := procStatus(t, "VmRSS")
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			t.Fatalf("resetting the peak resident set: %v", err)
		}
		promote(huge)
		e.rejected("malformed", huge, 1, 1)
		figs = append(figs, hugeFigure{hugeCase: c, Idle: idle, Peak: procStatus(t, "VmHWM")})
	}
	if err := os.WriteFile(os.Getenv(hugeOutEnv), mustJSON(t, figs), 0o600); err != nil {
		t.Fatal(err)
	}
}

// procStatus reads a "kB" line of /proc/self/status.
func procStatus(t *testing.T, key string) int64 {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", key)
	return 0
}

// metrics returns the /metrics text.
func (e *env) metricsText() string {
	e.t.Helper()
	resp, err := e.httpClient().Get(e.url + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// events returns the event journal of a rollout ("" for all), as text.
func (e *env) events(rollout string) string {
	e.t.Helper()
	var raw json.RawMessage
	path := "/v1/rollouts/" + rollout + "/events"
	if rollout == "" {
		path = "/v1/events"
	}
	if err := e.client(e.viewKey.priv, "victor").Get(context.Background(), path, &raw); err != nil {
		e.t.Fatal(err)
	}
	return string(raw)
}
