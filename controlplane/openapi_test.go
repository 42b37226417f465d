package controlplane_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/internal/testkit/schematest"
	"github.com/nixfleet/nixfleet/proto"
)

// schema/openapi.json is the /v1 API's contract for other implementations
// and clients. These tests hold it to the routes the server registers, both
// ways, and validate real answers of a running control plane against the
// response schemas of their operations, with a maintained validator.

const openAPIFile = "../schema/openapi.json"

// httpMethods are the operation keys of an OpenAPI path item.
var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

func readOpenAPI(t *testing.T) map[string]any {
	t.Helper()
	return schematest.Read(t, filepath.Dir(openAPIFile), filepath.Base(openAPIFile))
}

// registeredRoutes reads the API's route patterns ("GET /v1/status") from
// the source of Server.routes: the API's handler table and its other
// s.mux.Handle calls. The dashboard's routes (/ui) are registered by
// package dashboard and are no part of the API.
func registeredRoutes(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("server.go")
	if err != nil {
		t.Fatal(err)
	}
	body := regexp.MustCompile(`(?s)\nfunc \(s \*Server\) routes\(\) \{\n(.*?)\n\}\n`).FindSubmatch(src)
	if body == nil {
		t.Fatal("server.go: no func (s *Server) routes()")
	}
	set := map[string]bool{}
	for _, m := range regexp.MustCompile(`"((?:GET|HEAD|POST|PUT|PATCH|DELETE) /[^"\s]*)"`).FindAllSubmatch(body[1], -1) {
		set[string(m[1])] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// documentedOperations lists the document's operations as route patterns.
func documentedOperations(doc map[string]any) []string {
	var out []string
	paths, _ := doc["paths"].(map[string]any)
	for p, item := range paths {
		for _, m := range httpMethods {
			if _, ok := item.(map[string]any)[m]; ok {
				out = append(out, strings.ToUpper(m)+" "+p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestOpenAPIRoutes: every route the server registers has an operation in
// the document, and every operation is a registered route; each names its
// path parameters exactly, answers a success, and describes each error
// status with the Error object.
func TestOpenAPIRoutes(t *testing.T) {
	t.Parallel()
	doc := readOpenAPI(t)
	if v := doc["openapi"]; v != "3.1.0" {
		t.Errorf("openapi = %v, want 3.1.0", v)
	}
	routes := registeredRoutes(t)
	for _, must := range []string{"GET /v1/status", "POST /v1/agent/checkin", "POST /v1/hooks/git", "GET /metrics"} {
		if !slices.Contains(routes, must) {
			t.Fatalf("reading server.go found %d routes, without %s: %q", len(routes), must, routes)
		}
	}
	ops := documentedOperations(doc)
	for _, r := range routes {
		if !slices.Contains(ops, r) {
			t.Errorf("route %s is registered but not in %s", r, openAPIFile)
		}
	}
	for _, op := range ops {
		if !slices.Contains(routes, op) {
			t.Errorf("operation %s is documented but not registered", op)
		}
	}

	params, _ := doc["components"].(map[string]any)["parameters"].(map[string]any)
	pathParam := regexp.MustCompile(`\{([^}]+)\}`)
	for _, route := range ops {
		method, path, _ := strings.Cut(route, " ")
		op := operation(doc, method, path)
		var want, got []string
		for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
			want = append(want, m[1])
		}
		list, _ := op["parameters"].([]any)
		for _, p := range list {
			pm := p.(map[string]any)
			if ref, ok := pm["$ref"].(string); ok {
				pm, _ = params[strings.TrimPrefix(ref, "#/components/parameters/")].(map[string]any)
				if pm == nil {
					t.Errorf("%s: parameter %s does not resolve", route, ref)
					continue
				}
			}
			if pm["in"] == "path" {
				got = append(got, pm["name"].(string))
				if pm["required"] != true {
					t.Errorf("%s: path parameter %v is not required", route, pm["name"])
				}
			}
			if d, _ := pm["description"].(string); d == "" {
				t.Errorf("%s: parameter %v has no description", route, pm["name"])
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(want, got) {
			t.Errorf("%s: path parameters %q, want %q", route, got, want)
		}
		if d, _ := op["description"].(string); d == "" {
			t.Errorf("%s: no description", route)
		}
		resps, _ := op["responses"].(map[string]any)
		success := false
		for status := range resps {
			n, err := strconv.Atoi(status)
			if err != nil {
				t.Errorf("%s: response %q is not a status", route, status)
				continue
			}
			success = success || n < 300
			if n < 400 {
				continue
			}
			ptr, ok := responseSchemaPointer(doc, method, path, n, "application/json")
			if !ok {
				t.Errorf("%s: %d has no application/json body", route, n)
				continue
			}
			if !strings.Contains(oaJSON(t, pointerGet(doc, ptr)), `"#/components/schemas/Error"`) {
				t.Errorf("%s: %d is not described by the Error object", route, n)
			}
		}
		if !success {
			t.Errorf("%s: no success response", route)
		}
	}
}

// operation returns the operation of a method ("GET") and path.
func operation(doc map[string]any, method, path string) map[string]any {
	item, _ := doc["paths"].(map[string]any)[path].(map[string]any)
	op, _ := item[strings.ToLower(method)].(map[string]any)
	return op
}

// escapePointer escapes a JSON pointer token.
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// pointerGet follows a JSON pointer ("#/a/b") in the document.
func pointerGet(doc map[string]any, ptr string) any {
	var cur any = doc
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "#/"), "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")]
	}
	return cur
}

// responseSchemaPointer is the JSON pointer to the schema of an
// operation's response to a status, in a media type, following a $ref to
// components/responses; ok is false when the operation documents no such
// answer.
func responseSchemaPointer(doc map[string]any, method, path string, status int, mediaType string) (string, bool) {
	resp := "#/paths/" + escapePointer(path) + "/" + strings.ToLower(method) + "/responses/" + strconv.Itoa(status)
	r, ok := pointerGet(doc, resp).(map[string]any)
	if !ok {
		return "", false
	}
	if ref, ok := r["$ref"].(string); ok {
		resp = ref
		if r, ok = pointerGet(doc, ref).(map[string]any); !ok {
			return "", false
		}
	}
	content, _ := r["content"].(map[string]any)
	if _, ok := content[mediaType].(map[string]any)["schema"]; !ok {
		return "", false
	}
	return resp + "/content/" + escapePointer(mediaType) + "/schema", true
}

func oaJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// openAPISchemas compiles schemas of the document by JSON pointer, with
// the artifact schemas beside it that it refers to, as draft 2020-12
// (the document's jsonSchemaDialect) with formats asserted.
type openAPISchemas struct {
	t   *testing.T
	doc map[string]any
	set *schematest.Set
}

func newOpenAPISchemas(t *testing.T) *openAPISchemas {
	t.Helper()
	doc := readOpenAPI(t)
	if d := doc["jsonSchemaDialect"]; d != "https://json-schema.org/draft/2020-12/schema" {
		t.Fatalf("jsonSchemaDialect = %v, want draft 2020-12", d)
	}
	return &openAPISchemas{t: t, doc: doc, set: schematest.NewSet(t, filepath.Dir(openAPIFile))}
}

// schema compiles the schema at a pointer of the document ("#/components/schemas/Status").
func (o *openAPISchemas) schema(ptr string) *jsonschema.Schema {
	o.t.Helper()
	return o.set.Schema(filepath.Base(openAPIFile) + ptr)
}

// response is the schema of an operation's answer to a status in a media
// type; the test fails when the document does not describe that answer.
func (o *openAPISchemas) response(method, path string, status int, mediaType string) *jsonschema.Schema {
	o.t.Helper()
	ptr, ok := responseSchemaPointer(o.doc, method, path, status, mediaType)
	if !ok {
		o.t.Fatalf("%s %s: the document has no %d answer in %s", method, path, status, mediaType)
	}
	return o.schema(ptr)
}

var validateJSON = schematest.Validate

// got is one real answer of the control plane to check against the
// operation it answers.
type got struct {
	method, pattern string // the operation, as documented
	status          int
	mediaType       string
	body            []byte
}

// TestOpenAPIRealResponses validates real answers of a control plane
// (sqlite) whose hosts converged on a first release against the schemas
// of their operations: the operator reads, a manifest, a check-in, a
// signed probe report, the webhook (taken and refused), an intent a tick
// refuses, a dashboard link, the probes, and error answers (400, 401,
// 403, 404, 410). Then it breaks a real /v1/status body in four ways and
// an error body in one, and checks that the schemas refuse each.
func TestOpenAPIRealResponses(t *testing.T) {
	t.Parallel()
	oa := newOpenAPISchemas(t)
	e := newEnv(t, "sqlite", smallSpec(), nil)
	hosts := e.hosts()
	e.onboard(hosts)
	ctx := context.Background()
	id := rolloutID("stable", 1)
	rid := url.PathEscape(id)
	viewer := e.caller(e.viewKey.priv, "victor")
	var key ed25519.PrivateKey
	for _, h := range e.spec.Hosts {
		if h.Name == "canary" {
			key = h.Key
		}
	}
	canary := e.caller(key, "canary")

	var answers []got
	call := func(c *caller, method, pattern, path string, body []byte) answer {
		t.Helper()
		a := c.do(method, path, body, nil)
		answers = append(answers, got{method, pattern, a.status, "application/json", a.body})
		return a
	}
	for _, r := range []struct{ pattern, path string }{
		{"/v1/status", "/v1/status"},
		{"/v1/rollouts", "/v1/rollouts"},
		{"/v1/rollouts", "/v1/rollouts?channel=stable&limit=1"},
		{"/v1/rollouts/{id}", "/v1/rollouts/" + rid},
		{"/v1/rollouts/{id}", "/v1/rollouts/" + rid + "?hostsLimit=1"},
		{"/v1/rollouts/{id}/events", "/v1/rollouts/" + rid + "/events"},
		{"/v1/events", "/v1/events"},
		{"/v1/hosts", "/v1/hosts"},
		{"/v1/hosts/{name}", "/v1/hosts/canary"},
		{"/v1/releases", "/v1/releases"},
		{"/v1/intents", "/v1/intents"},
		{"/v1/rollouts/{id}/manifest", "/v1/rollouts/" + rid + "/manifest"},
		{"/healthz", "/healthz"},
		{"/readyz", "/readyz"},
	} {
		if a := call(viewer, http.MethodGet, r.pattern, r.path, nil); a.status != http.StatusOK {
			t.Fatalf("GET %s: HTTP %d: %s", r.path, a.status, a.body)
		}
	}
	if a := call(viewer, http.MethodPost, "/v1/web/logins", "/v1/web/logins", []byte(`{"validSeconds":60}`)); a.status != http.StatusOK {
		t.Fatalf("POST /v1/web/logins: HTTP %d: %s", a.status, a.body)
	}
	cur := hosts["canary"]
	checkin, err := json.Marshal(proto.CheckinRequest{Hostname: "canary", Current: cur.Current(), Booted: cur.Current(),
		Probes: proto.ProbeSummary{Total: 1, Failed: []string{}}})
	if err != nil {
		t.Fatal(err)
	}
	if a := call(canary, http.MethodPost, "/v1/agent/checkin", "/v1/agent/checkin", checkin); a.status != http.StatusOK {
		t.Fatalf("POST /v1/agent/checkin: HTTP %d: %s", a.status, a.body)
	}

	// A probe report, signed with the host key; the forge's webhook.
	report, err := json.Marshal(proto.ReportRequest{Hostname: "canary", Kind: proto.ReportProbeResults,
		Probes: &proto.ProbeSummary{Total: 2, Failed: []string{"http"}}, At: e.clock.Now().Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	a := canary.signed(key, report)
	answers = append(answers, got{http.MethodPost, "/v1/agent/report", a.status, "application/json", a.body})
	if a.status != http.StatusOK {
		t.Fatalf("POST /v1/agent/report: HTTP %d: %s", a.status, a.body)
	}
	hook := []byte(`{"ref":"refs/heads/main"}`)
	mac := hmac.New(sha256.New, []byte(e.cfg.WebhookSecret))
	mac.Write(hook)
	for _, h := range []struct {
		sig  string
		want int
	}{{"sha256=" + hex.EncodeToString(mac.Sum(nil)), http.StatusAccepted}, {"sha256=00", http.StatusUnauthorized}} {
		a := e.caller(nil, "").do(http.MethodPost, "/v1/hooks/git", hook, http.Header{controlplane.SignatureHeader: {h.sig}})
		answers = append(answers, got{http.MethodPost, "/v1/hooks/git", a.status, "application/json", a.body})
		if a.status != h.want {
			t.Errorf("POST /v1/hooks/git with %s: HTTP %d, want %d", h.sig, a.status, h.want)
		}
	}

	// Errors: a confirm not for the host's activation, no such rollout or
	// host, no client certificate, a host on an operator route, a
	// viewer's intent, a limit out of range.
	errs := []struct {
		c             *caller
		method        string
		pattern, path string
		body          string
		status        int
		code          string
	}{
		{canary, http.MethodPost, "/v1/agent/confirm", "/v1/agent/confirm",
			`{"hostname":"canary","rolloutId":"` + id + `","closure":"not-its-target","token":"stale"}`, http.StatusGone, "confirm_rejected"},
		{viewer, http.MethodGet, "/v1/rollouts/{id}", "/v1/rollouts/nope", "", http.StatusNotFound, "not_found"},
		{viewer, http.MethodGet, "/v1/hosts/{name}", "/v1/hosts/nope", "", http.StatusNotFound, "not_found"},
		{e.caller(nil, ""), http.MethodGet, "/v1/status", "/v1/status", "", http.StatusUnauthorized, "unauthenticated"},
		{canary, http.MethodGet, "/v1/status", "/v1/status", "", http.StatusForbidden, "forbidden"},
		{viewer, http.MethodPost, "/v1/rollouts/{id}/{action}", "/v1/rollouts/" + rid + "/pause", "", http.StatusForbidden, "forbidden"},
		{viewer, http.MethodGet, "/v1/events", "/v1/events?limit=0", "", http.StatusBadRequest, "bad_request"},
	}
	for _, x := range errs {
		a := call(x.c, x.method, x.pattern, x.path, []byte(x.body))
		if a.status != x.status || a.code != x.code {
			t.Errorf("%s %s: HTTP %d %s, want %d %s", x.method, x.path, a.status, a.code, x.status, x.code)
		}
	}

	// An intent the tick refuses (pausing a converged rollout), as the
	// CLI files it: signed.
	_, raw, err := e.client(e.opKey.priv, "alice").Act(ctx, id, "pause", "openapi check")
	status := http.StatusOK
	var ae *apiclient.Error
	switch {
	case errors.As(err, &ae):
		status = ae.Status
	case err != nil:
		t.Fatal(err)
	case bytes.Contains(raw, []byte(`"result":null`)):
		status = http.StatusAccepted
	}
	if raw == nil || status != http.StatusConflict {
		t.Fatalf("pausing a converged rollout: HTTP %d, want 409 with the refusal: %v", status, err)
	}
	answers = append(answers, got{http.MethodPost, "/v1/rollouts/{id}/{action}", status, "application/json", raw})

	for _, a := range answers {
		s := oa.response(a.method, a.pattern, a.status, a.mediaType)
		if err := validateJSON(s, a.body); err != nil {
			t.Errorf("%s %s, HTTP %d: the answer does not validate: %v\n%s", a.method, a.pattern, a.status, err, a.body)
		}
	}

	// A broken answer fails: the real /v1/status without a required
	// member, with a member of the wrong type, with a member the
	// document does not describe; an error body without its code.
	var status0 map[string]any
	if err := json.Unmarshal(answers[0].body, &status0); err != nil || answers[0].pattern != "/v1/status" {
		t.Fatalf("the first answer is not /v1/status: %v", err)
	}
	chans, _ := status0["channels"].([]any)
	if len(chans) == 0 {
		t.Fatalf("/v1/status has no channel: %s", answers[0].body)
	}
	statusSchema := oa.response(http.MethodGet, "/v1/status", http.StatusOK, "application/json")
	if err := validateJSON(oa.schema("#/components/schemas/Status"), answers[0].body); err != nil {
		t.Errorf("components/schemas/Status refuses the real /v1/status: %v", err)
	}
	broken := []struct {
		name   string
		mutate func(m map[string]any)
	}{
		{"without replica", func(m map[string]any) { delete(m, "replica") }},
		{"leader a string", func(m map[string]any) { m["leader"] = "yes" }},
		{"a channel's signedAt not a time", func(m map[string]any) {
			m["channels"].([]any)[0].(map[string]any)["signedAt"] = "yesterday"
		}},
		{"an undocumented member", func(m map[string]any) { m["surprise"] = 1 }},
	}
	for _, b := range broken {
		var m map[string]any
		_ = json.Unmarshal(answers[0].body, &m)
		b.mutate(m)
		if err := validateJSON(statusSchema, []byte(oaJSON(t, m))); err == nil {
			t.Errorf("/v1/status %s: the schema accepts it", b.name)
		}
	}
	notFound := oa.response(http.MethodGet, "/v1/rollouts/{id}", http.StatusNotFound, "application/json")
	if err := validateJSON(notFound, []byte(`{"message":"no rollout"}`)); err == nil {
		t.Error("an error body without its code: the schema accepts it")
	}
}

// openAPITypes maps each object schema of components/schemas to the Go
// type the control plane writes or reads for it; the other schemas name
// bodies written from maps (the probes', the webhook's).
var openAPITypes = map[string]reflect.Type{
	"Error": reflect.TypeFor[proto.Error](), "ProbeSummary": reflect.TypeFor[proto.ProbeSummary](),
	"ComplianceResult": reflect.TypeFor[proto.ComplianceResult](), "Quarantine": reflect.TypeFor[proto.Quarantine](),
	"TargetRef": reflect.TypeFor[proto.TargetRef](), "CheckinRequest": reflect.TypeFor[proto.CheckinRequest](),
	"Target": reflect.TypeFor[proto.Target](), "Reason": reflect.TypeFor[proto.Reason](),
	"PrefetchTarget": reflect.TypeFor[proto.PrefetchTarget](), "CheckinResponse": reflect.TypeFor[proto.CheckinResponse](),
	"ConfirmRequest": reflect.TypeFor[proto.ConfirmRequest](), "ConfirmResponse": reflect.TypeFor[proto.ConfirmResponse](),
	"ReportRequest": reflect.TypeFor[proto.ReportRequest](), "ReportResponse": reflect.TypeFor[proto.ReportResponse](),
	"SignedIntent": reflect.TypeFor[proto.SignedIntent](), "IntentRequest": reflect.TypeFor[proto.IntentRequest](),
	"DecisionReason": reflect.TypeFor[proto.DecisionReason](), "Intent": reflect.TypeFor[proto.Intent](),
	"IntentResult": reflect.TypeFor[proto.IntentResult](), "IntentResponse": reflect.TypeFor[proto.IntentResponse](),
	"IntentEntry": reflect.TypeFor[proto.IntentEntry](), "IntentList": reflect.TypeFor[proto.IntentList](),
	"AnalysisTrialRequest": reflect.TypeFor[proto.AnalysisTrialRequest](), "AnalysisTrial": reflect.TypeFor[proto.AnalysisTrial](),
	"TrialResult":     reflect.TypeFor[proto.TrialResult](),
	"WebLoginRequest": reflect.TypeFor[proto.WebLoginRequest](), "WebLogin": reflect.TypeFor[proto.WebLogin](),
	"Situation": reflect.TypeFor[proto.Situation](), "RolloutHost": reflect.TypeFor[proto.RolloutHost](),
	"RolloutWave": reflect.TypeFor[proto.RolloutWave](), "RolloutHostWindows": reflect.TypeFor[proto.RolloutHostWindows](),
	"WaveApproval": reflect.TypeFor[proto.WaveApproval](), "FreezeBreak": reflect.TypeFor[proto.FreezeBreak](),
	"AnalysisRun": reflect.TypeFor[proto.AnalysisRun](), "Rollout": reflect.TypeFor[proto.Rollout](),
	"RolloutList": reflect.TypeFor[proto.RolloutList](), "Activation": reflect.TypeFor[proto.Activation](),
	"ObservedHost": reflect.TypeFor[proto.ObservedHost](), "ReleaseRollout": reflect.TypeFor[proto.ReleaseRollout](),
	"Release": reflect.TypeFor[proto.Release](), "ReleaseList": reflect.TypeFor[proto.ReleaseList](),
	"HostView": reflect.TypeFor[proto.HostView](), "HostList": reflect.TypeFor[proto.HostList](),
	"BudgetUse": reflect.TypeFor[proto.BudgetUse](), "Event": reflect.TypeFor[proto.Event](),
	"Forecast": reflect.TypeFor[proto.Forecast](), "ForecastModel": reflect.TypeFor[proto.ForecastModel](),
	"ForecastWave": reflect.TypeFor[proto.ForecastWave](), "ForecastHost": reflect.TypeFor[proto.ForecastHost](),
	"HostExpectation": reflect.TypeFor[proto.HostExpectation](), "EventList": reflect.TypeFor[proto.EventList](),
	"Watch":      reflect.TypeFor[proto.Watch](),
	"Visibility": reflect.TypeFor[proto.Visibility](), "SourceFailure": reflect.TypeFor[proto.SourceFailure](),
	"ChannelStatus": reflect.TypeFor[proto.ChannelStatus](), "Status": reflect.TypeFor[proto.Status](),
}

// mapBodies are the schemas of bodies written from maps, not types.
var mapBodies = []string{"Health", "Ready", "Polling"}

// artifactTypes are the types a body holds whose schemas are the artifact
// schemas' (schema/*.schema.json, held to them by package proto's tests).
var artifactTypes = []reflect.Type{reflect.TypeFor[proto.Window](), reflect.TypeFor[proto.Approval](),
	reflect.TypeFor[proto.Edge](), reflect.TypeFor[proto.RolloutBudget](), reflect.TypeFor[proto.HealthGate](), reflect.TypeFor[proto.Analysis](),
	reflect.TypeFor[proto.Reboot]()}

// TestOpenAPIMatchesGoTypes: every object schema of components is a Go
// type's, member for member both ways, each member described, required
// exactly when the field is not omitempty or omitzero; and every struct a
// documented type holds has its own schema (or an artifact schema's).
func TestOpenAPIMatchesGoTypes(t *testing.T) {
	t.Parallel()
	doc := readOpenAPI(t)
	schemas, _ := doc["components"].(map[string]any)["schemas"].(map[string]any)
	for name := range schemas {
		if _, ok := openAPITypes[name]; !ok && !slices.Contains(mapBodies, name) {
			t.Errorf("schema %s has no Go type in openAPITypes", name)
		}
	}
	documented := map[reflect.Type]bool{}
	for _, typ := range openAPITypes {
		documented[typ] = true
	}
	for name, typ := range openAPITypes {
		s, ok := schemas[name].(map[string]any)
		if !ok {
			t.Errorf("%s: no schema in components", name)
			continue
		}
		props, _ := s["properties"].(map[string]any)
		var required []string
		list, _ := s["required"].([]any)
		for _, r := range list {
			required = append(required, r.(string))
		}
		fields := map[string]bool{}
		for f := range typ.Fields() {
			tag := f.Tag.Get("json")
			member, opts, _ := strings.Cut(tag, ",")
			if member == "-" || !f.IsExported() {
				continue
			}
			if member == "" {
				member = f.Name
			}
			fields[member] = true
			p, ok := props[member].(map[string]any)
			if !ok {
				t.Errorf("%s.%s: field %q is not a property of schema %s", typ, f.Name, member, name)
				continue
			}
			if d, _ := p["description"].(string); d == "" {
				t.Errorf("%s.%s: no description", name, member)
			}
			optional := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
			if optional == slices.Contains(required, member) {
				t.Errorf("%s.%s: required is %v, but the field is omitempty/omitzero: %v", name, member, !optional, optional)
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice || ft.Kind() == reflect.Map {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && ft.PkgPath() == typ.PkgPath() && !documented[ft] && !slices.Contains(artifactTypes, ft) {
				t.Errorf("%s.%s: type %s has no schema", name, member, ft)
			}
		}
		for member := range props {
			if !fields[member] {
				t.Errorf("%s: property %q is no field of %s", name, member, typ)
			}
		}
	}
}
