package proto

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/nixfleet/nixfleet/internal/jsonscan"
)

// encoding/json binds a member to a struct field case-insensitively when no
// exact match exists, so {"SchemaVersion": 2} would fill SchemaVersion while
// a case-sensitive reader (the Rust implementation, the Nix library) ignores
// it. The schemas below let the syntax scan reject such names: a member whose
// name equals a field's name under Unicode case folding, but not exactly, is
// an error. Truly unknown names stay tolerated.

type structSchema struct {
	names []string
	elems []jsonscan.Schema
}

func (s *structSchema) Member(name []byte) (jsonscan.Schema, error) {
	for i, n := range s.names {
		if string(name) == n {
			return s.elems[i], nil
		}
	}
	for _, n := range s.names {
		if strings.EqualFold(string(name), n) {
			return nil, fmt.Errorf("member name %q differs from %q only in letter case", name, n)
		}
	}
	return nil, nil
}

func (s *structSchema) Elem() jsonscan.Schema { return nil }

type mapSchema struct{ elem jsonscan.Schema }

func (s mapSchema) Member([]byte) (jsonscan.Schema, error) { return s.elem, nil }
func (s mapSchema) Elem() jsonscan.Schema                  { return nil }

type sliceSchema struct{ elem jsonscan.Schema }

func (s sliceSchema) Member([]byte) (jsonscan.Schema, error) { return nil, nil }
func (s sliceSchema) Elem() jsonscan.Schema                  { return s.elem }

var (
	schemaMu    sync.Mutex
	schemaCache = map[reflect.Type]jsonscan.Schema{}
	rawMessage  = reflect.TypeFor[json.RawMessage]()
)

// schemaOf returns the member-name schema of the Go type a document is
// decoded into.
func schemaOf(t reflect.Type) jsonscan.Schema {
	schemaMu.Lock()
	defer schemaMu.Unlock()
	return buildSchema(t)
}

func buildSchema(t reflect.Type) jsonscan.Schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s, ok := schemaCache[t]; ok {
		return s
	}
	switch {
	case t == rawMessage:
		return nil
	case t.Kind() == reflect.Map:
		return mapSchema{elem: buildSchema(t.Elem())}
	case t.Kind() == reflect.Slice:
		return sliceSchema{elem: buildSchema(t.Elem())}
	case t.Kind() != reflect.Struct:
		return nil
	}
	s := &structSchema{}
	schemaCache[t] = s // before recursing, in case a type refers to itself
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		s.names = append(s.names, name)
		s.elems = append(s.elems, buildSchema(f.Type))
	}
	return s
}

// SchemaFor returns the member-name schema for an artifact kind, for callers
// that scan a document themselves before decoding it with DecodeChecked.
func SchemaFor(k Kind) jsonscan.Schema {
	switch k {
	case KindFleetResolved:
		return schemaOf(reflect.TypeFor[FleetResolved]())
	case KindRolloutManifest:
		return schemaOf(reflect.TypeFor[RolloutManifest]())
	}
	return nil
}

// UnknownMembers lists the members of a document of kind k that its types
// do not know, each by the names on its path (hosts, web-1, tagz), in
// document order. A verifier tolerates them (a newer producer may write
// more); a producer must not write them: a misspelled member is otherwise
// dropped in silence.
func UnknownMembers(data []byte, k Kind) ([][]string, error) {
	var out [][]string
	_, err := jsonscan.Check(data, jsonscan.Options{MaxDepth: MaxDepth, Schema: pathSchema{inner: SchemaFor(k), out: &out}})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return out, nil
}

// pathSchema walks a document with a type's schema, noting the path of
// every member the type has no field for.
type pathSchema struct {
	inner jsonscan.Schema
	path  []string
	out   *[][]string
}

func (p pathSchema) Member(name []byte) (jsonscan.Schema, error) {
	path := append(slices.Clip(p.path), string(name))
	switch s := p.inner.(type) {
	case *structSchema:
		for i, n := range s.names {
			if n == string(name) {
				return pathSchema{inner: s.elems[i], path: path, out: p.out}, nil
			}
		}
		*p.out = append(*p.out, path)
		return nil, nil
	case mapSchema:
		return pathSchema{inner: s.elem, path: path, out: p.out}, nil
	}
	return nil, nil
}

func (p pathSchema) Elem() jsonscan.Schema {
	if s, ok := p.inner.(sliceSchema); ok {
		return pathSchema{inner: s.elem, path: append(slices.Clip(p.path), "[]"), out: p.out}
	}
	return nil
}
