// Package schematest holds JSON Schema files to the Go types whose JSON
// they describe, for tests. It does three things:
//
//  1. Set compiles the schemas of one directory (draft 2020-12, formats
//     such as date-time asserted) with one compiler, so a $ref into
//     another file of the directory resolves from beside the file.
//  2. Validate checks a document, given as bytes, against a compiled
//     schema; a refusal is a *jsonschema.ValidationError that names the
//     member and the rule.
//  3. CheckType walks a Go type and a schema file in parallel, both ways:
//     every exported JSON field of every struct reached is a described
//     property of its object, of a JSON type that fits the Go type;
//     every property is a field; "required" is the fields without
//     omitempty/omitzero; objects are closed. Options name what a schema
//     may do differently and why.
package schematest

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Read decodes a schema file of dir.
func Read(t testing.TB, dir, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return doc
}

// Set compiles the schemas of one directory, each once.
type Set struct {
	t    testing.TB
	dir  string
	c    *jsonschema.Compiler
	done map[string]*jsonschema.Schema
}

// NewSet returns a Set for the schema files of dir.
func NewSet(t testing.TB, dir string) *Set {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	return &Set{t: t, dir: abs, c: c, done: map[string]*jsonschema.Schema{}}
}

// Schema compiles a file of the directory ("trust.schema.json"), or the
// schema at a JSON pointer in one ("openapi.json#/components/schemas/Status");
// the test fails when it does not compile.
func (s *Set) Schema(ref string) *jsonschema.Schema {
	s.t.Helper()
	if sch, ok := s.done[ref]; ok {
		return sch
	}
	file, ptr, hasPtr := strings.Cut(ref, "#")
	url := "file://" + filepath.ToSlash(filepath.Join(s.dir, file))
	if hasPtr {
		url += "#" + ptr
	}
	sch, err := s.c.Compile(url)
	if err != nil {
		s.t.Fatalf("compiling %s: %v", ref, err)
	}
	s.done[ref] = sch
	return sch
}

// Validate checks a document, given as bytes, against a schema. A
// document the schema refuses gives a *jsonschema.ValidationError, whose
// message lists each failing member with its rule.
func Validate(s *jsonschema.Schema, data []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return s.Validate(inst)
}

// Options are what a schema may do beyond the rules CheckType states.
type Options struct {
	// Open lists the struct types whose objects accept members the type
	// does not declare (additionalProperties: true); every other object
	// is closed (additionalProperties: false).
	Open []reflect.Type
	// RequiredByAlias lists, by struct type, fields left out of
	// "required" because an alternative spelling may stand for them (a
	// oneOf in the schema).
	RequiredByAlias map[reflect.Type][]string
	// AbsentIsNull is the rule of formats whose readers take null for an
	// absent member (rfcs/0001 §1 rule 6): every pointer field admits
	// null, omitempty or not, and one without omitempty may be required
	// or not. Without it, a pointer is null only when written nil: a
	// pointer field without omitempty admits null and is required, one
	// with omitempty need not admit null.
	AbsentIsNull bool
	// NonNull lists, by struct type, pointer fields the schema does not
	// let be null (AbsentIsNull aside: a signed manifest's meta is
	// always stamped).
	NonNull map[reflect.Type][]string
	// KeyedMaps lists the map types whose schema may name their keys as
	// properties without an additionalProperties schema (a closed set of
	// labels); any other map's values are its additionalProperties.
	KeyedMaps []reflect.Type
}

// CheckType walks the Go type root and the schema file of dir in
// parallel, following $refs within the file and into other files of dir
// and the branches of anyOf and oneOf, and reports every mismatch as a
// test error. The rules, from the top:
//
//   - a string, int, int64 or bool admits that JSON type (from "type",
//     "const" or "enum"); a time.Time a string of format date-time; a
//     json.RawMessage anything;
//   - a slice is an array whose items are its elements' schema;
//   - a map is an object whose additionalProperties (and named keys, for
//     Options.KeyedMaps) are its values' schema;
//   - a pointer admits null (but see Options.AbsentIsNull and NonNull);
//   - a struct is an object whose properties are its exported JSON
//     fields, each with a description, and nothing else; "required" is
//     the fields without omitempty or omitzero; additionalProperties is
//     false (true for Options.Open); an embedded field has no rule.
//
// The walk must reach a struct.
func CheckType(t testing.TB, dir, file string, root reflect.Type, o Options) {
	t.Helper()
	w := &walker{t: t, dir: dir, o: o, docs: map[string]map[string]any{}, structs: map[reflect.Type]bool{}}
	w.docs[file] = Read(t, dir, file)
	w.check(root, file, w.docs[file], file+"#", false)
	if len(w.structs) == 0 {
		t.Errorf("%s: the walk reached no struct", file)
	}
}

type walker struct {
	t       testing.TB
	dir     string
	o       Options
	docs    map[string]map[string]any // files of dir by name
	structs map[reflect.Type]bool     // the struct types reached
}

// resolve follows $refs, within a file ("#/…") or into another file of
// the directory ("openapi.json#/…"), and returns the node and its file.
func (w *walker) resolve(file string, node map[string]any) (string, map[string]any) {
	w.t.Helper()
	for range 10 {
		ref, ok := node["$ref"].(string)
		if !ok {
			return file, node
		}
		f, ptr, _ := strings.Cut(ref, "#")
		if f != "" {
			file = f
			if w.docs[file] == nil {
				w.docs[file] = Read(w.t, w.dir, file)
			}
		}
		var cur any = w.docs[file]
		for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
			if tok == "" {
				continue
			}
			m, ok := cur.(map[string]any)
			if !ok {
				w.t.Fatalf("%s: $ref %s does not resolve", file, ref)
			}
			cur = m[strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")]
		}
		if node, ok = cur.(map[string]any); !ok {
			w.t.Fatalf("%s: $ref %s does not resolve to a schema object", file, ref)
		}
	}
	w.t.Fatal("$ref chain too long")
	return "", nil
}

// branch is a schema node after $refs, with its file.
type branch struct {
	file string
	node map[string]any
}

// branches is the node itself, after $refs, and the branches of its anyOf
// and oneOf, after theirs.
func (w *walker) branches(file string, node map[string]any) []branch {
	w.t.Helper()
	file, node = w.resolve(file, node)
	out := []branch{{file, node}}
	for _, k := range []string{"anyOf", "oneOf"} {
		list, _ := node[k].([]any)
		for _, b := range list {
			if m, ok := b.(map[string]any); ok {
				out = append(out, w.branches(file, m)...)
			}
		}
	}
	return out
}

// jsonTypes is the set of JSON types a node admits, from its "type", or
// its "const" or "enum" values, across its branches.
func (w *walker) jsonTypes(file string, node map[string]any) map[string]bool {
	w.t.Helper()
	out := map[string]bool{}
	for _, b := range w.branches(file, node) {
		switch ty := b.node["type"].(type) {
		case string:
			out[ty] = true
		case []any:
			for _, x := range ty {
				out[x.(string)] = true
			}
		}
		values, _ := b.node["enum"].([]any)
		if c, ok := b.node["const"]; ok {
			values = append(values, c)
		}
		for _, v := range values {
			switch v.(type) {
			case nil:
				out["null"] = true
			case string:
				out["string"] = true
			case float64:
				out["integer"] = true
			case bool:
				out["boolean"] = true
			}
		}
	}
	return out
}

// branchWith returns the branch of node that has the given keyword.
func (w *walker) branchWith(file string, node map[string]any, keyword, where string) (branch, bool) {
	w.t.Helper()
	for _, b := range w.branches(file, node) {
		if _, ok := b.node[keyword]; ok {
			return b, true
		}
	}
	w.t.Errorf("%s: no %q in the schema", where, keyword)
	return branch{}, false
}

func (w *walker) wantType(file string, node map[string]any, jsonType, where string, goType reflect.Type) {
	w.t.Helper()
	if got := w.jsonTypes(file, node); !got[jsonType] {
		w.t.Errorf("%s: Go type %s, but the schema admits %v, not %s", where, goType, slices.Sorted(maps.Keys(got)), jsonType)
	}
}

var (
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	timeType       = reflect.TypeFor[time.Time]()
)

// check holds type t to a schema node; mayOmitNull is set for a pointer
// field whose nil is never written as null.
func (w *walker) check(t reflect.Type, file string, node map[string]any, where string, mayOmitNull bool) {
	w.t.Helper()
	if t.Kind() == reflect.Pointer {
		if !mayOmitNull && !w.jsonTypes(file, node)["null"] {
			w.t.Errorf("%s: Go pointer %s, written null when nil, but the schema does not admit null", where, t)
		}
		t = t.Elem()
	}
	switch {
	case t == rawMessageType:
		return // any JSON; the schema says what it may be
	case t == timeType:
		w.wantType(file, node, "string", where, t)
		if !slices.ContainsFunc(w.branches(file, node), func(b branch) bool { return b.node["format"] == "date-time" }) {
			w.t.Errorf("%s: a time without format date-time", where)
		}
		return
	}
	switch t.Kind() {
	case reflect.String:
		w.wantType(file, node, "string", where, t)
	case reflect.Int, reflect.Int64:
		w.wantType(file, node, "integer", where, t)
	case reflect.Bool:
		w.wantType(file, node, "boolean", where, t)
	case reflect.Slice:
		w.wantType(file, node, "array", where, t)
		if b, ok := w.branchWith(file, node, "items", where); ok {
			items, ok := b.node["items"].(map[string]any)
			if !ok {
				w.t.Errorf("%s: an array's items must be its elements' schema", where)
				return
			}
			w.check(t.Elem(), b.file, items, where+"/items", false)
		}
	case reflect.Map:
		w.checkMap(t, file, node, where)
	case reflect.Struct:
		w.wantType(file, node, "object", where, t)
		if b, ok := w.branchWith(file, node, "properties", where); ok {
			w.checkStruct(t, b.file, b.node, where)
		}
	default:
		w.t.Errorf("%s: Go type %s has no rule in schematest", where, t)
	}
}

func (w *walker) checkMap(t reflect.Type, file string, node map[string]any, where string) {
	w.t.Helper()
	w.wantType(file, node, "object", where, t)
	if slices.Contains(w.o.KeyedMaps, t) {
		// Known keys may be properties (then closed), the others
		// additionalProperties; each is the map's value type.
		var b branch
		for _, x := range w.branches(file, node) {
			_, hasProps := x.node["properties"]
			_, hasSchema := x.node["additionalProperties"].(map[string]any)
			if hasProps || hasSchema {
				b = x
				break
			}
		}
		props, _ := b.node["properties"].(map[string]any)
		for name, p := range props {
			w.check(t.Elem(), b.file, p.(map[string]any), where+"/properties/"+name, false)
		}
		ap, isSchema := b.node["additionalProperties"].(map[string]any)
		switch {
		case isSchema:
			w.check(t.Elem(), b.file, ap, where+"/additionalProperties", false)
		case props == nil:
			w.t.Errorf("%s: a map with neither properties nor an additionalProperties schema", where)
		}
		return
	}
	if b, ok := w.branchWith(file, node, "additionalProperties", where); ok {
		elem, ok := b.node["additionalProperties"].(map[string]any)
		if !ok {
			w.t.Errorf("%s: a map's additionalProperties must be its values' schema", where)
			return
		}
		w.check(t.Elem(), b.file, elem, where+"/additionalProperties", false)
	}
}

func (w *walker) checkStruct(t reflect.Type, file string, obj map[string]any, where string) {
	w.t.Helper()
	w.structs[t] = true
	props, _ := obj["properties"].(map[string]any)
	var required, wantRequired, fields []string
	list, _ := obj["required"].([]any)
	for _, r := range list {
		required = append(required, r.(string))
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Anonymous {
			w.t.Errorf("%s: embedded field %s of %s has no rule in schematest", where, f.Name, t)
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields = append(fields, name)
		omitted := slices.ContainsFunc(strings.Split(opts, ","), func(o string) bool { return o == "omitempty" || o == "omitzero" })
		pointer := f.Type.Kind() == reflect.Pointer
		switch {
		case omitted && slices.Contains(required, name):
			w.t.Errorf("%s: %s is omitempty in %s but required by the schema", where, name, t)
		case omitted, slices.Contains(w.o.RequiredByAlias[t], name):
		case pointer && w.o.AbsentIsNull:
			// Absent or null: the schema may require the member (as
			// null when unset) or not.
			if slices.Contains(required, name) {
				wantRequired = append(wantRequired, name)
			}
		default:
			wantRequired = append(wantRequired, name)
		}
		p, ok := props[name].(map[string]any)
		if !ok {
			w.t.Errorf("%s: %s.%s (JSON %q) is not a property of the schema", where, t, f.Name, name)
			continue
		}
		if d, _ := p["description"].(string); strings.TrimSpace(d) == "" {
			w.t.Errorf("%s/properties/%s: no description", where, name)
		}
		ft := f.Type
		if pointer && slices.Contains(w.o.NonNull[t], name) {
			ft = ft.Elem()
		}
		w.check(ft, file, p, where+"/properties/"+name, omitted && !w.o.AbsentIsNull)
	}
	for name := range props {
		if !slices.Contains(fields, name) {
			w.t.Errorf("%s/properties/%s: the schema has it but %s has no such JSON field", where, name, t)
		}
	}
	slices.Sort(required)
	slices.Sort(wantRequired)
	if d := cmp.Diff(wantRequired, required); d != "" {
		w.t.Errorf("%s: required differs from %s's fields without omitempty (-Go +schema):\n%s", where, t, d)
	}
	open := slices.Contains(w.o.Open, t)
	if ap, isBool := obj["additionalProperties"].(bool); !isBool || ap != open {
		w.t.Errorf("%s: additionalProperties = %v, want %v for %s", where, obj["additionalProperties"], open, t)
	}
}
