package apicompat

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// base is a small document in the shape of schema/openapi.json: one
// operation with a path parameter, a query parameter, a request body
// and a response, its schemas in components.
const base = `{
  "openapi": "3.1.0",
  "info": {"title": "t", "version": "1.0.0"},
  "security": [{"mutualTLS": []}],
  "paths": {
    "/v1/things/{id}": {
      "post": {
        "parameters": [
          {"$ref": "#/components/parameters/id"},
          {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": 100}}
        ],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Req"}}}},
        "responses": {
          "200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
          "400": {"$ref": "#/components/responses/Bad"}
        }
      }
    }
  },
  "components": {
    "parameters": {"id": {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}},
    "responses": {"Bad": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}},
    "schemas": {
      "Req": {"type": "object", "properties": {
        "mode": {"type": "string", "enum": ["a", "b"]},
        "note": {"type": "string", "maxLength": 100},
        "tags": {"type": "array", "items": {"type": "string"}}
      }, "required": ["mode"]},
      "Thing": {"type": "object", "properties": {
        "state": {"type": "string", "enum": ["on", "off"]},
        "count": {"type": "integer", "minimum": 0},
        "size": {"type": ["integer", "null"]},
        "at": {"type": "string", "format": "date-time"},
        "next": {"anyOf": [{"$ref": "#/components/schemas/Thing"}, {"type": "null"}]},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}}
      }, "required": ["state", "count"], "additionalProperties": false},
      "Error": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
    }
  }
}`

// edit applies a change to a copy of base, at a path of keys.
func edit(t *testing.T, change func(doc map[string]any)) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal([]byte(base), &doc); err != nil {
		t.Fatal(err)
	}
	change(doc)
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func at(doc map[string]any, path ...string) map[string]any {
	m := doc
	for _, p := range path {
		m = m[p].(map[string]any)
	}
	return m
}

func schemaOf(doc map[string]any, name string) map[string]any {
	return at(doc, "components", "schemas", name)
}

func prop(doc map[string]any, schema, name string) map[string]any {
	return at(schemaOf(doc, schema), "properties", name)
}

func op(doc map[string]any) map[string]any { return at(doc, "paths", "/v1/things/{id}", "post") }

func TestDiff(t *testing.T) {
	cases := []struct {
		name     string
		change   func(map[string]any)
		key      string
		breaking bool
	}{
		{"operation removed", func(d map[string]any) { delete(at(d, "paths"), "/v1/things/{id}") },
			"POST /v1/things/{id}: operation removed", true},
		{"operation added", func(d map[string]any) { at(d, "paths")["/v1/new"] = map[string]any{"get": map[string]any{}} },
			"GET /v1/new: operation added", false},
		{"response member removed", func(d map[string]any) { delete(at(schemaOf(d, "Thing"), "properties"), "at") },
			"Thing.at: response member removed", true},
		{"response member added", func(d map[string]any) {
			at(schemaOf(d, "Thing"), "properties")["extra"] = map[string]any{"type": "string"}
		},
			"Thing.extra: response member added", false},
		{"response member made optional", func(d map[string]any) { schemaOf(d, "Thing")["required"] = []any{"state"} },
			"Thing.count: response member no longer always present", true},
		{"response type widened", func(d map[string]any) { prop(d, "Thing", "count")["type"] = []any{"integer", "null"} },
			"Thing.count: type response changed from integer to integer|null", true},
		{"response type narrowed", func(d map[string]any) {
			prop(d, "Thing", "size")["type"] = "integer"
			at(prop(d, "Thing", "labels"), "additionalProperties")["maxLength"] = 10.0
		}, "", false},
		{"response enum value added", func(d map[string]any) { prop(d, "Thing", "state")["enum"] = []any{"on", "off", "dim"} },
			`Thing.state: response enum value "dim" added`, false},
		{"request enum value removed", func(d map[string]any) { prop(d, "Req", "mode")["enum"] = []any{"a"} },
			`Req.mode: request enum value "b" removed`, true},
		{"request enum value added", func(d map[string]any) { prop(d, "Req", "mode")["enum"] = []any{"a", "b", "c"} },
			`Req.mode: request enum value "c" added`, false},
		{"request member now required", func(d map[string]any) { schemaOf(d, "Req")["required"] = []any{"mode", "note"} },
			"Req.note: request member now required", true},
		{"new required request member", func(d map[string]any) {
			at(schemaOf(d, "Req"), "properties")["must"] = map[string]any{"type": "string"}
			schemaOf(d, "Req")["required"] = []any{"mode", "must"}
		}, "Req.must: request member added", true},
		{"new optional request member", func(d map[string]any) { at(schemaOf(d, "Req"), "properties")["may"] = map[string]any{"type": "string"} },
			"Req.may: request member added", false},
		{"request member removed", func(d map[string]any) { delete(at(schemaOf(d, "Req"), "properties"), "note") },
			"Req.note: request member removed", true},
		{"request maxLength tightened", func(d map[string]any) { prop(d, "Req", "note")["maxLength"] = 50.0 },
			"Req.note: request maxLength changed from 100 to 50", true},
		{"request maxLength loosened", func(d map[string]any) { prop(d, "Req", "note")["maxLength"] = 200.0 },
			"Req.note: request maxLength changed from 100 to 200", false},
		{"request object closed", func(d map[string]any) { schemaOf(d, "Req")["additionalProperties"] = false },
			"Req: request object closed to unknown members", true},
		{"request items typed", func(d map[string]any) { at(prop(d, "Req", "tags"), "items")["type"] = "integer" },
			"Req.tags[]: type request changed from string to integer", true},
		{"response format dropped", func(d map[string]any) { delete(prop(d, "Thing", "at"), "format") },
			`Thing.at: response format changed from "date-time" to ""`, true},
		{"response minimum dropped", func(d map[string]any) { delete(prop(d, "Thing", "count"), "minimum") },
			"Thing.count: response minimum changed from 0 to none", true},
		{"map values retyped", func(d map[string]any) { at(prop(d, "Thing", "labels"), "additionalProperties")["type"] = "integer" },
			"Thing.labels{}: type response changed from string to integer", true},
		{"response alternative added", func(d map[string]any) {
			p := prop(d, "Thing", "next")
			p["anyOf"] = append(p["anyOf"].([]any), map[string]any{"type": "string"})
		}, "Thing.next: response alternatives added", true},
		{"query parameter now required", func(d map[string]any) { op(d)["parameters"].([]any)[1].(map[string]any)["required"] = true },
			"POST /v1/things/{id} parameter query limit: now required", true},
		{"query parameter bound tightened", func(d map[string]any) {
			at(op(d)["parameters"].([]any)[1].(map[string]any), "schema")["maximum"] = 10.0
		}, "POST /v1/things/{id} parameter query limit: request maximum changed from 100 to 10", true},
		{"required parameter added", func(d map[string]any) {
			op(d)["parameters"] = append(op(d)["parameters"].([]any), map[string]any{"name": "x", "in": "header", "required": true})
		}, "POST /v1/things/{id} parameter header x: added", true},
		{"success response removed", func(d map[string]any) { delete(at(op(d), "responses"), "200") },
			"POST /v1/things/{id} 200: response removed", true},
		{"error response added", func(d map[string]any) { at(op(d), "responses")["429"] = map[string]any{} },
			"POST /v1/things/{id} 429: response added", false},
		{"media type removed", func(d map[string]any) {
			c := at(op(d), "responses", "200", "content")
			c["text/plain"] = c["application/json"]
			delete(c, "application/json")
		}, "POST /v1/things/{id} 200: media type application/json removed", true},
		{"security tightened", func(d map[string]any) { op(d)["security"] = []any{map[string]any{"token": []any{}}} },
			"POST /v1/things/{id}: security mutualTLS no longer accepted", true},
		{"security widened", func(d map[string]any) {
			op(d)["security"] = []any{map[string]any{"mutualTLS": []any{}}, map[string]any{"token": []any{}}}
		}, "", false},
		{"shared error retyped, named once", func(d map[string]any) { prop(d, "Error", "code")["type"] = "integer" },
			"Error.code: type response changed from string to integer", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			changes, err := Diff([]byte(base), edit(t, c.change))
			if err != nil {
				t.Fatal(err)
			}
			if c.key == "" {
				for _, ch := range changes {
					if ch.Breaking {
						t.Errorf("breaking change found in a compatible edit: %s", ch.Key)
					}
				}
				return
			}
			found := false
			for _, ch := range changes {
				if ch.Key == c.key {
					found = true
					if ch.Breaking != c.breaking {
						t.Errorf("%s: breaking = %v, want %v", ch.Key, ch.Breaking, c.breaking)
					}
				} else if ch.Breaking && !c.breaking {
					t.Errorf("another breaking change: %s", ch.Key)
				}
			}
			if !found {
				t.Errorf("no change %q; got %v", c.key, changes)
			}
		})
	}
}

// The shared Error schema is reached from several responses; its change
// is one change, not one per use.
func TestDiffNamesComponentsOnce(t *testing.T) {
	changes, err := Diff([]byte(base), edit(t, func(d map[string]any) {
		at(d, "paths", "/v1/things/{id}", "post", "responses")["404"] = map[string]any{"$ref": "#/components/responses/Bad"}
		prop(d, "Error", "code")["type"] = "integer"
	}))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range changes {
		if strings.HasPrefix(c.Key, "Error.code") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("Error.code named %d times: %v", n, changes)
	}
}

func TestDiffOfItselfIsEmpty(t *testing.T) {
	real, err := os.ReadFile("../../schema/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range [][]byte{[]byte(base), real} {
		changes, err := Diff(doc, doc)
		if err != nil {
			t.Fatal(err)
		}
		if len(changes) != 0 {
			t.Errorf("changes between a document and itself: %v", changes)
		}
	}
	if v := Version(real); v == "" {
		t.Error("schema/openapi.json has no info.version")
	}
}

func TestDiffRefusesNonJSON(t *testing.T) {
	if _, err := Diff([]byte("{"), []byte(base)); err == nil {
		t.Error("a truncated old document was compared")
	}
	if _, err := Diff([]byte(base), []byte("[]x")); err == nil {
		t.Error("a malformed new document was compared")
	}
}
