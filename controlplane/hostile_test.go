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
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/simagent"
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

// quiet is long enough for the control plane to show what a request
// caused: the replicas notice writes within 250 ms (and may tick once
// more), and write last-seen times every second.
const quiet = 1200 * time.Millisecond

// settle waits until the control plane is idle, so that a snapshot is not
// overtaken by a tick or a batch that was already coming.
func (e *env) settle() string {
	e.t.Helper()
	prev := e.snapshot()
	for range 10 {
		time.Sleep(quiet)
		cur := e.snapshot()
		if cur == prev {
			return cur
		}
		prev = cur
	}
	e.t.Fatal("the control plane does not settle")
	return ""
}

// unchanged checks, after long enough for a tick the requests caused to
// show, that the state is the snapshot before.
func (e *env) unchanged(before, what string) {
	e.t.Helper()
	time.Sleep(quiet)
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
	eventually(t, 10*time.Second, "the canary is dispatched", func() bool {
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
		return http.Header{"X-Hub-Signature-256": {hookSig(body, secret)}}
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
		{"oversized check-in", func() answer { return canary.post("/v1/agent/checkin", big) }, 413, controlplane.CodeBodyTooLarge},
		{"truncated JSON", func() answer { return canary.post("/v1/agent/checkin", []byte(`{"hostname":"canary"`)) }, 400, controlplane.CodeMalformedJSON},
		{"empty body", func() answer { return canary.post("/v1/agent/checkin", nil) }, 400, controlplane.CodeMalformedJSON},
		{"duplicate member", func() answer {
			return canary.post("/v1/agent/checkin", []byte(`{"hostname":"canary","hostname":"web-1"}`))
		}, 400, controlplane.CodeMalformedJSON},
		{"case-variant member", func() answer {
			return canary.post("/v1/agent/checkin", []byte(`{"hostname":"canary","HostName":"web-1"}`))
		}, 400, controlplane.CodeMalformedJSON},
		{"wrong type", func() answer { return canary.post("/v1/agent/checkin", []byte(`{"hostname":7}`)) }, 400, controlplane.CodeMalformedJSON},
		{"trailing data", func() answer {
			return canary.post("/v1/agent/checkin", append(checkin("canary"), []byte(` {}`)...))
		}, 400, controlplane.CodeMalformedJSON},
		{"invalid UTF-8", func() answer {
			return canary.post("/v1/agent/checkin", []byte("{\"hostname\":\"canary\",\"current\":\"\xff\"}"))
		}, 400, controlplane.CodeMalformedJSON},
		{"nesting too deep", func() answer { return canary.post("/v1/agent/checkin", []byte(deep)) }, 400, controlplane.CodeMalformedJSON},
		{"top level not an object", func() answer { return canary.post("/v1/agent/checkin", []byte(`[]`)) }, 400, controlplane.CodeMalformedJSON},
		{"no hostname", func() answer { return canary.post("/v1/agent/checkin", []byte(`{}`)) }, 400, controlplane.CodeBadRequest},
		{"wait out of range", func() answer {
			return canary.post("/v1/agent/checkin", []byte(`{"hostname":"canary","wait":3600}`))
		}, 400, controlplane.CodeBadRequest},

		// Who is calling.
		{"no client certificate", func() answer { return anonymous.post("/v1/agent/checkin", checkin("canary")) }, 401, controlplane.CodeUnauthenticated},
		{"wrong host key", func() answer { return stranger.post("/v1/agent/checkin", checkin("canary")) }, 401, controlplane.CodeUnknownClient},
		{"unknown host", func() answer { return canary.post("/v1/agent/checkin", checkin("ghost")) }, 403, controlplane.CodeUnknownHost},
		{"another host's name", func() answer { return web1.post("/v1/agent/checkin", checkin("canary")) }, 403, controlplane.CodeHostMismatch},
		{"operator on an agent endpoint", func() answer { return viewer.post("/v1/agent/checkin", checkin("canary")) }, 403, controlplane.CodeForbidden},

		// Confirms.
		{"confirm with a wrong token", func() answer {
			return canary.post("/v1/agent/confirm", confirm("canary", *target, "not-the-token"))
		}, 410, controlplane.CodeConfirmRejected},
		{"confirm of another closure", func() answer {
			t2 := *target
			t2.Closure = fleetrepo.Closure("canary", "v9")
			return canary.post("/v1/agent/confirm", confirm("canary", t2, target.Token))
		}, 410, controlplane.CodeConfirmRejected},
		{"confirm for another host", func() answer {
			return web1.post("/v1/agent/confirm", confirm("canary", *target, target.Token))
		}, 403, controlplane.CodeHostMismatch},
		{"confirm of a host not activating", func() answer {
			return web1.post("/v1/agent/confirm", confirm("web-1", *target, target.Token))
		}, 410, controlplane.CodeConfirmRejected},

		// Reports.
		{"unsigned report", func() answer { return canary.signed(nil, report("canary")) }, 403, controlplane.CodeBadSignature},
		{"report signed by another host", func() answer { return canary.signed(key["web-1"], report("canary")) }, 403, controlplane.CodeBadSignature},
		{"report signature of other bytes", func() answer {
			h := http.Header{controlplane.SignatureHeader: {base64.StdEncoding.EncodeToString(ed25519.Sign(key["canary"], []byte("{}")))}}
			return canary.do(http.MethodPost, "/v1/agent/report", report("canary"), h)
		}, 403, controlplane.CodeBadSignature},
		{"report for another host", func() answer { return web1.signed(key["web-1"], report("canary")) }, 403, controlplane.CodeHostMismatch},
		{"report of an unknown kind", func() answer {
			body := mustJSON(t, proto.ReportRequest{Hostname: "canary", Kind: "exploded", RolloutID: target.RolloutID, Closure: target.Closure})
			return canary.signed(key["canary"], body)
		}, 400, controlplane.CodeBadRequest},

		// Operators.
		{"viewer pauses", func() answer { return viewer.post("/v1/rollouts/"+rollout+"/pause", nil) }, 403, controlplane.CodeForbidden},
		{"host pauses", func() answer { return canary.post("/v1/rollouts/"+rollout+"/pause", nil) }, 403, controlplane.CodeForbidden},
		{"host lists rollouts", func() answer { return canary.do(http.MethodGet, "/v1/rollouts", nil, nil) }, 403, controlplane.CodeForbidden},
		{"stranger lists hosts", func() answer { return stranger.do(http.MethodGet, "/v1/hosts", nil, nil) }, 401, controlplane.CodeUnknownClient},
		{"anonymous status", func() answer { return anonymous.do(http.MethodGet, "/v1/status", nil, nil) }, 401, controlplane.CodeUnauthenticated},
		{"unknown action", func() answer {
			return e.caller(e.opKey.priv, "alice").post("/v1/rollouts/"+rollout+"/explode", nil)
		}, 404, controlplane.CodeNotFound},
		{"action on an unknown rollout", func() answer {
			return e.caller(e.opKey.priv, "alice").post("/v1/rollouts/stable@nope/pause", nil)
		}, 404, controlplane.CodeNotFound},
		{"malformed intent", func() answer {
			return e.caller(e.opKey.priv, "alice").post("/v1/rollouts/"+rollout+"/pause", []byte(`{"comment":`))
		}, 400, controlplane.CodeMalformedJSON},
		{"manifest for a stranger", func() answer {
			return stranger.do(http.MethodGet, "/v1/rollouts/"+rollout+"/manifest", nil, nil)
		}, 401, controlplane.CodeUnknownClient},

		// The webhook and the rest.
		{"webhook with a wrong secret", func() answer {
			body := []byte(`{}`)
			return anonymous.do(http.MethodPost, "/v1/hooks/git", body, hmacHook(body, "guess"))
		}, 401, controlplane.CodeBadSignature},
		{"webhook without a signature", func() answer { return anonymous.post("/v1/hooks/git", []byte(`{}`)) }, 401, controlplane.CodeBadSignature},
		{"unknown endpoint", func() answer { return viewer.do(http.MethodGet, "/v1/nothing", nil, nil) }, 404, controlplane.CodeNotFound},
		{"wrong method", func() answer { return canary.do(http.MethodGet, "/v1/agent/checkin", nil, nil) }, 405, controlplane.CodeMethodNotAllowed},
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
	eventually(t, 10*time.Second, "rollout 2 converges", func() bool {
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
	eventually(t, 10*time.Second, "the canary is dispatched again", func() bool {
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
	expect(t, "a replayed confirm of the last rollout", canary.post("/v1/agent/confirm", confirm("canary", old, old.Token)), 410, controlplane.CodeConfirmRejected)
	expect(t, "the old token on the new target", canary.post("/v1/agent/confirm", confirm("canary", *target, old.Token)), 410, controlplane.CodeConfirmRejected)
	e.unchanged(before, "a replayed confirm changed the state")
	e.settle()
	e.clock.Advance(reconciler.DefaultConfirmWindow + time.Second)
	before = e.snapshot()
	expect(t, "a confirm after the window", canary.post("/v1/agent/confirm", confirm("canary", *target, target.Token)), 410, controlplane.CodeConfirmRejected)
	e.unchanged(before, "a late confirm changed the state")
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
			// rejected waits for a refusal with code and checks that the channel
			// stayed on its last verified release, with no new rollout.
			rejected := func(code string, ref int, rollouts int) {
				t.Helper()
				eventually(t, 10*time.Second, "a refused release with code "+code, func() bool {
					var st controlplane.Status
					if err := op.Get(ctx, "/v1/status", &st); err != nil {
						t.Fatal(err)
					}
					return len(st.Channels) == 1 && st.Channels[0].LastFailure != nil && st.Channels[0].LastFailure.Code == code
				})
				var st controlplane.Status
				if err := op.Get(ctx, "/v1/status", &st); err != nil {
					t.Fatal(err)
				}
				if ch := st.Channels[0]; ch.Ref != commitID(ref) {
					t.Errorf("after a refused release the channel is at %s, want the last verified %s", ch.Ref, commitID(ref))
				}
				var rs struct{ Rollouts []reconciler.Rollout }
				if err := op.Get(ctx, "/v1/rollouts", &rs); err != nil {
					t.Fatal(err)
				}
				if len(rs.Rollouts) != rollouts {
					t.Errorf("%d rollouts after a refused release, want %d", len(rs.Rollouts), rollouts)
				}
				metric := fmt.Sprintf(`nixfleet_verification_failures_total{code=%q}`, code)
				if m := e.metricsText(); !strings.Contains(m, metric) {
					t.Errorf("/metrics lacks %s", metric)
				}
			}
			first, err := e.repo.Ref("stable")
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, "the first release opens its rollout", func() bool {
				return rolloutState(t, e, rolloutID("stable", 1)) != ""
			})
			// No agent checks in here, so the first rollout would wait for
			// its hosts; an operator cancels it, and later releases open
			// rollouts at once.
			if err := e.client(e.opKey.priv, "alice").Act(ctx, rolloutID("stable", 1), reconciler.IntentCancel, "no agents in this test", nil); err != nil {
				t.Fatal(err)
			}

			// A manifest changed after signing.
			e.clock.Advance(time.Minute)
			unsigned, err := e.spec.Fleet("v1")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.repo.Release(unsigned, commitID(2), e.clock.Now()); err != nil {
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
			rejected("bad_signature", 1, 1)
			events := e.events("")
			if !strings.Contains(events, `"kind":"release_rejected"`) || !strings.Contains(events, commit.String()[:12]) {
				t.Errorf("no release_rejected event naming commit %s in:\n%s", commit.String()[:12], events)
			}

			// The same release, signed as it should be, is taken.
			e.release("v1", 2)
			eventually(t, 10*time.Second, "the good release is verified", func() bool {
				var st controlplane.Status
				return op.Get(ctx, "/v1/status", &st) == nil && len(st.Channels) == 1 &&
					st.Channels[0].Ref == commitID(2) && st.Channels[0].LastFailure == nil &&
					st.Channels[0].Rollout != nil && st.Channels[0].Rollout.Ref == commitID(2)
			})

			// A replay: the channel moved back to the first release, whose
			// signature is still valid.
			if err := e.repo.Promote("stable", first); err != nil {
				t.Fatal(err)
			}
			e.hook()
			rejected("replayed_release", 2, 2)

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
			rejected("malformed", 2, 2)
		})
	}
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
