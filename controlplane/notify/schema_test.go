package notify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/notify"
	"github.com/nixfleet/nixfleet/internal/testkit/schematest"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// schema/notification*.schema.json are the bodies' contract for
// receivers. These tests hold them to the Go types both ways, validate
// real bodies (notify.Body's for every category and the bodies a notifier
// really POSTs) with a maintained validator, and break real bodies one
// way at a time to show the schemas refuse each.

const schemaDir = "../../schema"

// bodySchemas maps each format to its schema and the Go type of its body;
// root is nil for slack, an anonymous struct in notify.Body whose shape
// (one member, always written) the real bodies pin instead.
var bodySchemas = []struct {
	format notify.Format
	file   string
	root   reflect.Type
}{
	{notify.FormatJSON, "notification.schema.json", reflect.TypeFor[notify.Message]()},
	{notify.FormatSlack, "notification-slack.schema.json", nil},
	{notify.FormatAlertmanager, "notification-alertmanager.schema.json", reflect.TypeFor[[]notify.Alert]()},
}

func readSchema(t *testing.T, file string) map[string]any {
	t.Helper()
	return schematest.Read(t, schemaDir, file)
}

// compileBodySchemas compiles each format's schema; the json format's
// refers to openapi.json, which the compiler loads from beside it.
func compileBodySchemas(t *testing.T) map[notify.Format]*jsonschema.Schema {
	t.Helper()
	set := schematest.NewSet(t, schemaDir)
	out := map[notify.Format]*jsonschema.Schema{}
	for _, s := range bodySchemas {
		out[s.format] = set.Schema(s.file)
	}
	return out
}

var validateBody = schematest.Validate

// TestBodySchemasMatchGoTypes walks each schema and its Go type in
// parallel from the root, following $refs into openapi.json: every JSON
// field of every struct reached is a described property of a closed
// object, of a JSON type that fits the Go type, required exactly when it
// is not omitempty/omitzero; every property is a field. Then: every
// property anywhere has a description, every $def is used, and the
// enumerations are the Go side's (the categories, one alert name each).
func TestBodySchemasMatchGoTypes(t *testing.T) {
	t.Parallel()
	for _, s := range bodySchemas {
		t.Run(string(s.format), func(t *testing.T) {
			t.Parallel()
			doc := readSchema(t, s.file)
			if got := doc["$schema"]; got != "https://json-schema.org/draft/2020-12/schema" {
				t.Errorf("$schema = %v, want draft 2020-12", got)
			}
			if d, _ := doc["description"].(string); !strings.Contains(d, "notify.Body") {
				t.Errorf("the description does not name the Go code that writes the body: %q", d)
			}
			checkDescribed(t, s.file, doc)
			if s.root == nil {
				return
			}
			// An alert's labels and annotations name their keys.
			schematest.CheckType(t, schemaDir, s.file, s.root, schematest.Options{KeyedMaps: []reflect.Type{reflect.TypeFor[map[string]string]()}})
		})
	}

	var cats []any
	for _, c := range notify.Categories {
		cats = append(cats, string(c))
	}
	msg := readSchema(t, "notification.schema.json")
	am := readSchema(t, "notification-alertmanager.schema.json")
	labels := obj(am, "$defs", "Alert", "properties", "labels", "properties")
	for where, got := range map[string]any{
		"notification.schema.json category":              obj(msg, "properties", "category")["enum"],
		"notification-alertmanager.schema.json category": obj(labels, "category")["enum"],
	} {
		if d := cmp.Diff(cats, got); d != "" {
			t.Errorf("%s is not notify.Categories (-Go +schema):\n%s", where, d)
		}
	}
	if n := len(obj(labels, "alertname")["enum"].([]any)); n != len(cats) {
		t.Errorf("%d alert names, want one per category (%d)", n, len(cats))
	}
	if rules, _ := msg["allOf"].([]any); len(rules) != len(cats) {
		t.Errorf("notification.schema.json states the events of %d categories, want %d", len(rules), len(cats))
	}
}

// checkDescribed: every property anywhere in a schema has a description,
// and every $def is referred to.
func checkDescribed(t *testing.T, file string, doc map[string]any) {
	t.Helper()
	var walk func(v any, where string)
	walk = func(v any, where string) {
		switch x := v.(type) {
		case map[string]any:
			if props, ok := x["properties"].(map[string]any); ok && !strings.Contains(where, "/allOf/") {
				for name, p := range props {
					if d, _ := p.(map[string]any)["description"].(string); strings.TrimSpace(d) == "" {
						t.Errorf("%s: %s/properties/%s has no description", file, where, name)
					}
				}
			}
			for k, c := range x {
				walk(c, where+"/"+k)
			}
		case []any:
			for i, c := range x {
				walk(c, where+"/"+strconv.Itoa(i))
			}
		}
	}
	walk(doc, "#")
	raw, _ := json.Marshal(doc)
	defs, _ := doc["$defs"].(map[string]any)
	for name, d := range defs {
		if s, _ := d.(map[string]any)["description"].(string); s == "" {
			t.Errorf("%s: $defs/%s has no description", file, name)
		}
		if !bytes.Contains(raw, []byte(`"#/$defs/`+name+`"`)) {
			t.Errorf("%s: $defs/%s is never referred to", file, name)
		}
	}
}

func obj(doc map[string]any, path ...string) map[string]any {
	for _, p := range path {
		doc, _ = doc[p].(map[string]any)
	}
	return doc
}

// TestBodySchemasRealBodies validates notify.Body's bodies of every
// journal event of body_test.go in every format, and of events whose
// messages need escaping. In the json format it pairs every event with
// every category: the schema accepts exactly the pairs notify.CategoryOf
// makes. Every alert name the schema lists is written.
func TestBodySchemasRealBodies(t *testing.T) {
	t.Parallel()
	schemas := compileBodySchemas(t)
	type notified struct {
		e proto.Event
		c notify.Category
	}
	var all []notified
	for _, x := range events {
		e := x.e
		e.At = at.Add(time.Duration(e.ID) * time.Minute)
		for _, c := range notify.Categories {
			body, err := notify.Body(notify.Sink{Name: "ops"}, c, e)
			if err != nil {
				t.Fatal(err)
			}
			switch err := validateBody(schemas[notify.FormatJSON], body); {
			case c == x.cat && err != nil:
				t.Errorf("event %d (%s) as %s: %v\n%s", e.ID, e.Kind, c, err, body)
			case c != x.cat && err == nil:
				t.Errorf("event %d (%s %s) as %s, not its category %q: the schema accepts it", e.ID, e.Kind, e.To, c, x.cat)
			}
		}
		if x.cat != "" {
			all = append(all, notified{e, x.cat})
		}
	}
	// Messages with markup, line breaks and an actor; an analysis that
	// passed (severity info) and one inconclusive.
	of := func(c notify.Category) proto.Event {
		for _, n := range all {
			if n.c == c {
				return n.e
			}
		}
		t.Fatalf("no %s event", c)
		return proto.Event{}
	}
	odd := of(notify.CategoryHalted)
	odd.Reason = proto.DecisionReason{Code: codes.HealthFailure, Message: "1 host(s) failed <web-1 & db-1>\r\n\tsee\x7f", Actor: "a&b"}
	all = append(all, notified{odd, notify.CategoryHalted})
	for _, code := range []string{codes.AnalysisInconclusive, codes.AnalysisSuccessful} {
		e := of(notify.CategoryAnalysis)
		e.Reason.Code = code
		all = append(all, notified{e, notify.CategoryAnalysis})
	}

	alertnames, severities := map[string]bool{}, map[string]bool{}
	for _, n := range all {
		for _, f := range notify.Formats {
			body, err := notify.Body(notify.Sink{Name: "ops-1", Format: f}, n.c, n.e)
			if err != nil {
				t.Fatal(err)
			}
			if err := validateBody(schemas[f], body); err != nil {
				t.Errorf("event %d (%s) in format %s: %v\n%s", n.e.ID, n.e.Kind, f, err, body)
			}
			if f == notify.FormatAlertmanager {
				var alerts []notify.Alert
				if err := json.Unmarshal(body, &alerts); err != nil || len(alerts) != 1 {
					t.Fatalf("%s: %v", body, err)
				}
				alertnames[alerts[0].Labels["alertname"]] = true
				severities[alerts[0].Labels["severity"]] = true
			}
		}
	}
	am := readSchema(t, "notification-alertmanager.schema.json")
	labels := obj(am, "$defs", "Alert", "properties", "labels", "properties")
	for label, seen := range map[string]map[string]bool{"alertname": alertnames, "severity": severities} {
		var enum []string
		for _, v := range obj(labels, label)["enum"].([]any) {
			enum = append(enum, v.(string))
		}
		slices.Sort(enum)
		if d := cmp.Diff(enum, slices.Sorted(maps.Keys(seen))); d != "" {
			t.Errorf("the %s values the schema lists are not those written (-schema +written):\n%s", label, d)
		}
	}
}

// TestBodySchemasDeliveries validates the bodies a notifier really POSTs
// to three sinks, one per format, for an event of every category (and
// visibility_restored), read back from the journal.
func TestBodySchemasDeliveries(t *testing.T) {
	t.Parallel()
	schemas := compileBodySchemas(t)
	w := newWorld(t, "sqlite")
	var sinks []notify.Sink
	received := map[notify.Format]*testSink{}
	for _, f := range notify.Formats {
		s := newTestSink(t, "secret", nil)
		name := "to-" + string(f)
		received[f] = s
		sinks = append(sinks, notify.Sink{Name: name, URL: s.srv.URL, Format: f, Secret: []byte("secret")})
		if _, err := w.st.StartNotificationCursor(context.Background(), name, 0, at); err != nil {
			t.Fatal(err)
		}
	}
	w.start(w.options(sinks...))
	reason := func(code, message string) rc.Reason { return rc.Reason{Code: code, Message: message} }
	evs := []rc.Event{
		ev(rc.EventRolloutOpened, "prod", "", "Opening"),
		ev(rc.EventHostTransition, "prod", "Pending", "Activating"), // not sent
		ev(rc.EventWavePromoted, "prod", "", ""),
		ev(rc.EventApprovalNeeded, "prod", "", ""),
		ev(rc.EventAnalysisCompleted, "prod", "", ""),
		ev(rc.EventRolloutTransition, "prod", "Active", "Halted"),
		ev(rc.EventRolloutTransition, "prod", "Halted", "Reverting"),
		ev(rc.EventRolloutTransition, "prod", "Reverting", "Reverted"),
		ev(rc.EventRolloutTransition, "prod", "Active", "Converged"),
		ev(rc.EventRolloutTransition, "prod", "Opening", "Failed"),
		{Kind: rc.EventPartialVisibility, Channel: "prod", Wave: -1, Reason: reason(codes.PartialVisibility, "3 of 4 hosts silent")},
		{Kind: rc.EventVisibilityRestored, Channel: "prod", Wave: -1, Reason: reason(codes.VisibilityRestored, "")},
		{Kind: notify.EventReleaseRejected, Channel: "prod", Wave: -1, Reason: reason(codes.Stale, "the fleet is stale\nsigned 3 days ago")},
		{Kind: notify.EventForecast, RolloutID: "prod@" + strings.Repeat("0", 40), Channel: "prod", Wave: -1, Reason: reason(codes.ForecastMade, "expected to end Converged at 2026-03-01T14:00:00Z (in 2h0m0s)")},
	}
	evs[3].Reason.Actor = "alice & bob <ops>"
	w.append(evs...)
	cats := map[notify.Category]bool{}
	for _, f := range notify.Formats {
		for _, d := range received[f].receive(len(evs) - 1) {
			if !d.signedOK {
				t.Errorf("%s: an unsigned POST", f)
			}
			if err := validateBody(schemas[f], d.raw); err != nil {
				t.Errorf("%s: %v\n%s", f, err, d.raw)
			}
			if f == notify.FormatJSON {
				cats[d.msg.Category] = true
			}
		}
	}
	if len(cats) != len(notify.Categories) {
		t.Errorf("the json sink was sent %d categories, want every one (%d)", len(cats), len(notify.Categories))
	}
}

// TestBodySchemasRefuseBrokenBodies breaks a real body of each format one
// way at a time (a member renamed, of the wrong type, missing, added, a
// value out of its set) and checks its schema refuses each.
func TestBodySchemasRefuseBrokenBodies(t *testing.T) {
	t.Parallel()
	schemas := compileBodySchemas(t)
	halted := events[4].e
	halted.At = at
	good := map[notify.Format][]byte{}
	for _, f := range notify.Formats {
		body, err := notify.Body(notify.Sink{Name: "ops", Format: f}, notify.CategoryHalted, halted)
		if err != nil {
			t.Fatal(err)
		}
		if err := validateBody(schemas[f], body); err != nil {
			t.Fatalf("the unbroken %s body: %v", f, err)
		}
		good[f] = body
	}
	alert := func(v any) map[string]any { return v.([]any)[0].(map[string]any) }
	cases := []struct {
		name   string
		format notify.Format
		edit   func(v any) any
	}{
		{"member renamed: deliveryID", notify.FormatJSON, func(v any) any {
			m := v.(map[string]any)
			m["deliveryID"] = m["deliveryId"]
			delete(m, "deliveryId")
			return m
		}},
		{"wrong type: version a string", notify.FormatJSON, func(v any) any { v.(map[string]any)["version"] = "1"; return v }},
		{"another version", notify.FormatJSON, func(v any) any { v.(map[string]any)["version"] = 2; return v }},
		{"missing summary", notify.FormatJSON, func(v any) any { delete(v.(map[string]any), "summary"); return v }},
		{"summary of two lines", notify.FormatJSON, func(v any) any { v.(map[string]any)["summary"] = "a\nb"; return v }},
		{"unknown category", notify.FormatJSON, func(v any) any { v.(map[string]any)["category"] = "halt"; return v }},
		{"category not the event's", notify.FormatJSON, func(v any) any { v.(map[string]any)["category"] = "converged"; return v }},
		{"deliveryId without the event id", notify.FormatJSON, func(v any) any { v.(map[string]any)["deliveryId"] = "ops"; return v }},
		{"undocumented member", notify.FormatJSON, func(v any) any { v.(map[string]any)["severity"] = "critical"; return v }},
		{"event: wrong type: id a string", notify.FormatJSON, func(v any) any { obj(v.(map[string]any), "event")["id"] = "5"; return v }},
		{"event: at not a time", notify.FormatJSON, func(v any) any { obj(v.(map[string]any), "event")["at"] = "2026-03-01 12:00"; return v }},
		{"event: missing reason", notify.FormatJSON, func(v any) any { delete(obj(v.(map[string]any), "event"), "reason"); return v }},
		{"event: undocumented reason member", notify.FormatJSON, func(v any) any {
			obj(v.(map[string]any), "event", "reason")["severity"] = "high"
			return v
		}},
		{"missing text", notify.FormatSlack, func(v any) any { return map[string]any{} }},
		{"wrong type: text a list", notify.FormatSlack, func(v any) any { v.(map[string]any)["text"] = []any{"a"}; return v }},
		{"markup not escaped", notify.FormatSlack, func(v any) any { v.(map[string]any)["text"] = "<!channel> halted"; return v }},
		{"undocumented member", notify.FormatSlack, func(v any) any { v.(map[string]any)["channel"] = "#ops"; return v }},
		{"an alert, not a list", notify.FormatAlertmanager, func(v any) any { return alert(v) }},
		{"no alert", notify.FormatAlertmanager, func(v any) any { return []any{} }},
		{"missing alertname", notify.FormatAlertmanager, func(v any) any { delete(obj(alert(v), "labels"), "alertname"); return v }},
		{"unknown severity", notify.FormatAlertmanager, func(v any) any { obj(alert(v), "labels")["severity"] = "page"; return v }},
		{"undocumented label", notify.FormatAlertmanager, func(v any) any { obj(alert(v), "labels")["host"] = "web-1"; return v }},
		{"wrong type: a label a number", notify.FormatAlertmanager, func(v any) any { obj(alert(v), "labels")["channel"] = 1; return v }},
		{"startsAt not a time", notify.FormatAlertmanager, func(v any) any { alert(v)["startsAt"] = "now"; return v }},
		{"member renamed: startsat", notify.FormatAlertmanager, func(v any) any {
			a := alert(v)
			a["startsat"] = a["startsAt"]
			delete(a, "startsAt")
			return v
		}},
		{"missing description", notify.FormatAlertmanager, func(v any) any { delete(obj(alert(v), "annotations"), "description"); return v }},
	}
	for _, tc := range cases {
		t.Run(string(tc.format)+"/"+tc.name, func(t *testing.T) {
			t.Parallel()
			var v any
			if err := json.Unmarshal(good[tc.format], &v); err != nil {
				t.Fatal(err)
			}
			broken, err := json.Marshal(tc.edit(v))
			if err != nil {
				t.Fatal(err)
			}
			var ve *jsonschema.ValidationError
			if err := validateBody(schemas[tc.format], broken); !errors.As(err, &ve) {
				t.Errorf("the schema accepts it: %v\n%s", err, broken)
			}
		})
	}
}
