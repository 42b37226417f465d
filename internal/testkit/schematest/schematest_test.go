package schematest_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/nixfleet/nixfleet/internal/testkit/schematest"
)

type inner struct {
	N  int64     `json:"n"`
	At time.Time `json:"at"`
}

type doc struct {
	Name   string            `json:"name"`
	Tags   []string          `json:"tags,omitempty"`
	Inner  inner             `json:"inner"`
	Opt    *inner            `json:"opt,omitempty"`
	Ptr    *string           `json:"ptr"`
	Labels map[string]string `json:"labels"`
	Raw    json.RawMessage   `json:"raw"`
	Either string            `json:"either"`
	hidden int
}

// The document's schema; inner's is in another file of the directory.
const docSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "name": {"description": "d", "type": "string"},
    "tags": {"description": "d", "type": "array", "items": {"type": "string"}},
    "inner": {"description": "d", "$ref": "defs.schema.json#/$defs/Inner"},
    "opt": {"description": "d", "$ref": "defs.schema.json#/$defs/Inner"},
    "ptr": {"description": "d", "type": ["string", "null"]},
    "labels": {"description": "d", "type": "object", "additionalProperties": {"type": "string"}},
    "raw": {"description": "d"},
    "either": {"description": "d", "anyOf": [{"const": "a"}, {"$ref": "#/$defs/B"}]}
  },
  "required": ["name", "inner", "ptr", "labels", "raw", "either"],
  "additionalProperties": false,
  "$defs": {"B": {"enum": ["b", "c"]}}
}`

const defsSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$defs": {
    "Inner": {
      "type": "object",
      "properties": {
        "n": {"description": "d", "type": "integer"},
        "at": {"description": "d", "type": "string", "format": "date-time"}
      },
      "required": ["n", "at"],
      "additionalProperties": false
    }
  }
}`

// recorder collects what CheckType reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); panic(r) }
func (r *recorder) Fatal(args ...any)                 { r.Errorf("%s", fmt.Sprint(args...)); panic(r) }

// check writes the two schemas, each edited, and returns what CheckType
// reports about doc.
func check(t *testing.T, editDoc, editDefs func(map[string]any)) []string {
	t.Helper()
	dir := t.TempDir()
	for file, text := range map[string]string{"doc.schema.json": docSchema, "defs.schema.json": defsSchema} {
		var m map[string]any
		if err := json.Unmarshal([]byte(text), &m); err != nil {
			t.Fatal(err)
		}
		if file == "doc.schema.json" && editDoc != nil {
			editDoc(m)
		}
		if file == "defs.schema.json" && editDefs != nil {
			editDefs(m)
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != nil && p != r {
				panic(p)
			}
		}()
		schematest.CheckType(r, dir, "doc.schema.json", reflect.TypeFor[doc](), schematest.Options{})
	}()
	return r.errs
}

func props(m map[string]any) map[string]any { return m["properties"].(map[string]any) }

func innerDef(m map[string]any) map[string]any {
	return m["$defs"].(map[string]any)["Inner"].(map[string]any)
}

func TestCheckType(t *testing.T) {
	t.Parallel()
	if errs := check(t, nil, nil); len(errs) != 0 {
		t.Fatalf("the matching schema: %q", errs)
	}
	tests := []struct {
		name     string
		editDoc  func(map[string]any)
		editDefs func(map[string]any)
		want     string
	}{
		{"field not a property", func(m map[string]any) { delete(props(m), "name") }, nil, `doc.Name (JSON "name") is not a property`},
		{"property not a field", func(m map[string]any) { props(m)["extra"] = map[string]any{"description": "d"} }, nil, "no such JSON field"},
		{"no description", func(m map[string]any) { delete(props(m)["name"].(map[string]any), "description") }, nil, "/properties/name: no description"},
		{"wrong JSON type", func(m map[string]any) { props(m)["name"].(map[string]any)["type"] = "integer" }, nil, "not string"},
		{"not required", func(m map[string]any) { m["required"] = []any{"name", "inner", "labels", "raw", "either"} }, nil, "required differs"},
		{"omitempty required", func(m map[string]any) { m["required"] = append(m["required"].([]any), "tags") }, nil, "tags is omitempty"},
		{"open object", func(m map[string]any) { m["additionalProperties"] = true }, nil, "additionalProperties = true, want false"},
		{"pointer not null", func(m map[string]any) { props(m)["ptr"].(map[string]any)["type"] = "string" }, nil, "does not admit null"},
		{"no items", func(m map[string]any) { delete(props(m)["tags"].(map[string]any), "items") }, nil, `no "items"`},
		{"map without values' schema", func(m map[string]any) { props(m)["labels"].(map[string]any)["additionalProperties"] = true }, nil, "additionalProperties must be"},
		{"one branch suffices", func(m map[string]any) { m["$defs"].(map[string]any)["B"] = map[string]any{"type": "integer"} }, nil, ""},
		{"no branch of the type", func(m map[string]any) {
			props(m)["either"].(map[string]any)["anyOf"] = []any{map[string]any{"type": "integer"}}
		}, nil, "not string"},
		{"other file: field not a property", nil, func(m map[string]any) { delete(props(innerDef(m)), "n") }, `inner.N (JSON "n") is not a property`},
		{"other file: time without format", nil, func(m map[string]any) { delete(props(innerDef(m))["at"].(map[string]any), "format") }, "without format date-time"},
		{"other file: $ref does not resolve", func(m map[string]any) {
			props(m)["inner"].(map[string]any)["$ref"] = "defs.schema.json#/$defs/Nope"
		}, nil, "does not resolve"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			errs := check(t, tc.editDoc, tc.editDefs)
			if tc.want == "" {
				if len(errs) != 0 {
					t.Errorf("want no error, got %q", errs)
				}
				return
			}
			for _, e := range errs {
				if strings.Contains(e, tc.want) {
					return
				}
			}
			t.Errorf("want an error with %q, got %q", tc.want, errs)
		})
	}
}

func TestSetValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for file, text := range map[string]string{"doc.schema.json": docSchema, "defs.schema.json": defsSchema} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	set := schematest.NewSet(t, dir)
	s := set.Schema("doc.schema.json")
	if set.Schema("doc.schema.json") != s {
		t.Error("a schema compiled twice")
	}
	good := `{"name":"x","inner":{"n":1,"at":"2026-01-01T00:00:00Z"},"ptr":null,"labels":{},"raw":[1],"either":"b"}`
	if err := schematest.Validate(s, []byte(good)); err != nil {
		t.Fatalf("a valid document: %v", err)
	}
	if err := schematest.Validate(set.Schema("defs.schema.json#/$defs/Inner"), []byte(`{"n":1,"at":"2026-01-01T00:00:00Z"}`)); err != nil {
		t.Fatalf("a valid document, by pointer: %v", err)
	}
	for _, bad := range []string{
		strings.Replace(good, `"2026-01-01T00:00:00Z"`, `"2026-01-01 00:00"`, 1), // format asserted, in the other file
		strings.Replace(good, `"name":"x"`, `"name":1`, 1),
		strings.Replace(good, `"either":"b"`, `"either":"d"`, 1),
	} {
		err := schematest.Validate(s, []byte(bad))
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: want a validation error, got %v", bad, err)
		}
	}
	if err := schematest.Validate(s, []byte(`{`)); err == nil {
		t.Error("not JSON: no error")
	}
}
