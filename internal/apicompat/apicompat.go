// Package apicompat compares two versions of an OpenAPI 3.1 document and
// lists what changed between them, marking the changes that break a
// client written against the older one.
//
// It reads the part of OpenAPI and JSON Schema that schema/openapi.json
// uses: paths and their operations, parameters, request bodies, responses
// (each possibly a $ref into components), security requirements, and in
// schemas type, enum, const, format, properties, required,
// additionalProperties, items, anyOf, minimum, maximum, maxLength and
// pattern. Which way a change breaks depends on who writes the value: a
// request's schema may only accept more, a response's may only promise
// more. Two rules follow the document's own statements: a response may
// gain members (clients ignore members they do not know), and a response
// enum may gain values (new states appear within a version).
package apicompat

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// A Change is one difference between two documents. Key names it stably,
// for a version note to list: where, and what.
type Change struct {
	Key      string
	Breaking bool
}

// Diff lists the changes from old to new, breaking ones first, each group
// sorted by key.
func Diff(old, new []byte) ([]Change, error) {
	var o, n map[string]any
	if err := json.Unmarshal(old, &o); err != nil {
		return nil, fmt.Errorf("apicompat: the old document: %w", err)
	}
	if err := json.Unmarshal(new, &n); err != nil {
		return nil, fmt.Errorf("apicompat: the new document: %w", err)
	}
	d := &differ{old: o, new: n, seen: map[string]bool{}}
	d.paths()
	slices.SortFunc(d.out, func(a, b Change) int {
		if a.Breaking != b.Breaking {
			if a.Breaking {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	return slices.CompactFunc(d.out, func(a, b Change) bool { return a == b }), nil
}

// Version is a document's info.version, "" when it has none.
func Version(doc []byte) string {
	var d struct {
		Info struct {
			Version string `json:"version"`
		} `json:"info"`
	}
	if json.Unmarshal(doc, &d) != nil {
		return ""
	}
	return d.Info.Version
}

var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

type differ struct {
	old, new map[string]any
	// seen holds the pairs of referenced schemas already compared in a
	// direction, so that recursive schemas end.
	seen map[string]bool
	out  []Change
}

func (d *differ) add(breaking bool, where, format string, args ...any) {
	d.out = append(d.out, Change{Key: where + ": " + fmt.Sprintf(format, args...), Breaking: breaking})
}

func obj(v any) map[string]any { m, _ := v.(map[string]any); return m }

func (d *differ) paths() {
	op, np := obj(d.old["paths"]), obj(d.new["paths"])
	for _, path := range slices.Sorted(maps.Keys(op)) {
		oi, ni := obj(op[path]), obj(np[path])
		for _, m := range methods {
			oo, ok := oi[m].(map[string]any)
			if !ok {
				continue
			}
			where := strings.ToUpper(m) + " " + path
			no, ok := ni[m].(map[string]any)
			if !ok {
				d.add(true, where, "operation removed")
				continue
			}
			d.operation(where, oi, oo, ni, no)
		}
	}
	for _, path := range slices.Sorted(maps.Keys(np)) {
		for _, m := range methods {
			if _, ok := obj(np[path])[m].(map[string]any); ok && obj(op[path])[m] == nil {
				d.add(false, strings.ToUpper(m)+" "+path, "operation added")
			}
		}
	}
}

func (d *differ) operation(where string, oItem, oOp, nItem, nOp map[string]any) {
	d.security(where, oOp, nOp)
	d.parameters(where, d.params(d.old, oItem, oOp), d.params(d.new, nItem, nOp))
	d.requestBody(where, d.resolve(d.old, oOp["requestBody"]), d.resolve(d.new, nOp["requestBody"]))
	d.responses(where, obj(oOp["responses"]), obj(nOp["responses"]))
}

// security: every way an old client could authenticate must still work.
func (d *differ) security(where string, oOp, nOp map[string]any) {
	alts := func(doc, op map[string]any) []string {
		reqs, ok := op["security"].([]any)
		if !ok {
			reqs, _ = doc["security"].([]any)
		}
		var out []string
		for _, r := range reqs {
			out = append(out, strings.Join(slices.Sorted(maps.Keys(obj(r))), "+"))
		}
		if len(out) == 0 {
			out = []string{""}
		}
		return out
	}
	oa, na := alts(d.old, oOp), alts(d.new, nOp)
	for _, a := range oa {
		if !slices.Contains(na, a) {
			name := a
			if name == "" {
				name = "none"
			}
			d.add(true, where, "security %s no longer accepted", name)
		}
	}
}

// resolve follows a local $ref ("#/components/...") to what it names.
func (d *differ) resolve(doc map[string]any, v any) map[string]any {
	m := obj(v)
	for range 16 {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		m = pointer(doc, ref)
	}
	return m
}

func pointer(doc map[string]any, ref string) map[string]any {
	var cur any = doc
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		cur = obj(cur)[part]
	}
	return obj(cur)
}

// params are an operation's parameters, its path item's included, by
// "in name".
func (d *differ) params(doc, item, op map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, list := range []any{item["parameters"], op["parameters"]} {
		ps, _ := list.([]any)
		for _, p := range ps {
			p := d.resolve(doc, p)
			out[fmt.Sprint(p["in"], " ", p["name"])] = p
		}
	}
	return out
}

func (d *differ) parameters(where string, op, np map[string]map[string]any) {
	for _, k := range slices.Sorted(maps.Keys(op)) {
		n, ok := np[k]
		w := where + " parameter " + k
		if !ok {
			d.add(true, w, "removed")
			continue
		}
		if n["required"] == true && op[k]["required"] != true {
			d.add(true, w, "now required")
		}
		d.schema(w, op[k]["schema"], n["schema"], request)
	}
	for _, k := range slices.Sorted(maps.Keys(np)) {
		if _, ok := op[k]; !ok {
			d.add(np[k]["required"] == true, where+" parameter "+k, "added")
		}
	}
}

func (d *differ) requestBody(where string, o, n map[string]any) {
	w := where + " request"
	switch {
	case o == nil && n == nil:
		return
	case o == nil:
		d.add(n["required"] == true, w, "body added")
	case n == nil:
		d.add(true, w, "body removed")
	default:
		if n["required"] == true && o["required"] != true {
			d.add(true, w, "body now required")
		}
		d.content(w, obj(o["content"]), obj(n["content"]), request)
	}
}

func (d *differ) responses(where string, o, n map[string]any) {
	success := func(code string) bool { return strings.HasPrefix(code, "2") || strings.HasPrefix(code, "3") }
	for _, code := range slices.Sorted(maps.Keys(o)) {
		w := where + " " + code
		nr, ok := n[code]
		if !ok {
			d.add(success(code), w, "response removed")
			continue
		}
		d.content(w, obj(d.resolve(d.old, o[code])["content"]), obj(d.resolve(d.new, nr)["content"]), response)
	}
	for _, code := range slices.Sorted(maps.Keys(n)) {
		if _, ok := o[code]; !ok {
			d.add(success(code), where+" "+code, "response added")
		}
	}
}

func (d *differ) content(where string, o, n map[string]any, dir direction) {
	for _, mt := range slices.Sorted(maps.Keys(o)) {
		nm, ok := n[mt]
		if !ok {
			d.add(true, where, "media type %s removed", mt)
			continue
		}
		d.schema(where+" "+mt, obj(o[mt])["schema"], obj(nm)["schema"], dir)
	}
	for _, mt := range slices.Sorted(maps.Keys(n)) {
		if _, ok := o[mt]; !ok {
			// A new way to say the same is harmless in a response only
			// when the client asks for it; in a request it is an option.
			d.add(false, where, "media type %s added", mt)
		}
	}
}

// direction says who writes a value: the client (request) or the server
// (response).
type direction int

const (
	request direction = iota
	response
)

func (dir direction) String() string {
	if dir == request {
		return "request"
	}
	return "response"
}

func (d *differ) schema(where string, ov, nv any, dir direction) {
	oRef, _ := obj(ov)["$ref"].(string)
	nRef, _ := obj(nv)["$ref"].(string)
	if oRef != "" || nRef != "" {
		key := dir.String() + " " + oRef + " " + nRef
		if d.seen[key] {
			return
		}
		d.seen[key] = true
		// A component is compared once a direction and named by itself,
		// wherever it is used.
		where = refName(nRef, oRef)
	}
	o, n := d.resolve(d.old, ov), d.resolve(d.new, nv)
	switch {
	case o == nil && n == nil:
		return
	case o == nil:
		d.add(dir == request, where, "%s schema added", dir)
		return
	case n == nil:
		d.add(dir == response, where, "%s schema removed", dir)
		return
	}
	d.types(where, o, n, dir)
	d.enum(where, o, n, dir)
	d.bounds(where, o, n, dir)
	d.properties(where, o, n, dir)
	if oi, ni := o["items"], n["items"]; oi != nil || ni != nil {
		d.schema(where+"[]", oi, ni, dir)
	}
	if oa, na := o["additionalProperties"], n["additionalProperties"]; obj(oa) != nil && obj(na) != nil {
		d.schema(where+"{}", oa, na, dir)
	}
	d.anyOf(where, o, n, dir)
}

// refName is the last part of a $ref, the new one when there is one.
func refName(refs ...string) string {
	for _, r := range refs {
		if r != "" {
			return r[strings.LastIndex(r, "/")+1:]
		}
	}
	return ""
}

// typeSet is a schema's types; nil means any.
func typeSet(s map[string]any) []string {
	switch t := s["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			out = append(out, fmt.Sprint(x))
		}
		sort.Strings(out)
		return out
	}
	return nil
}

// within reports whether every value of types a is a value of types b.
func within(a, b []string) bool {
	if b == nil {
		return true
	}
	if a == nil {
		return false
	}
	for _, t := range a {
		if !slices.Contains(b, t) && !(t == "integer" && slices.Contains(b, "number")) {
			return false
		}
	}
	return true
}

func (d *differ) types(where string, o, n map[string]any, dir direction) {
	ot, nt := typeSet(o), typeSet(n)
	if slices.Equal(ot, nt) {
		return
	}
	ok := within(ot, nt)
	if dir == response {
		ok = within(nt, ot)
	}
	d.add(!ok, where, "type %s changed from %s to %s", dir, typeName(ot), typeName(nt))
}

func typeName(t []string) string {
	if t == nil {
		return "any"
	}
	return strings.Join(t, "|")
}

// values is a schema's enum (or const), nil when it has none.
func values(s map[string]any) []string {
	var vs []any
	if c, ok := s["const"]; ok {
		vs = []any{c}
	} else if e, ok := s["enum"].([]any); ok {
		vs = e
	} else {
		return nil
	}
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		b, _ := json.Marshal(v)
		out = append(out, string(b))
	}
	sort.Strings(out)
	return out
}

func (d *differ) enum(where string, o, n map[string]any, dir direction) {
	ov, nv := values(o), values(n)
	switch {
	case slices.Equal(ov, nv):
	case nv == nil:
		// Any value now: a request accepts more; a response may say
		// values a client does not know, which a version allows.
		d.add(false, where, "%s enum removed", dir)
	case ov == nil:
		d.add(dir == request, where, "%s enum added: %s", dir, strings.Join(nv, ", "))
	default:
		for _, v := range ov {
			if !slices.Contains(nv, v) {
				// A response value that no longer appears breaks no client.
				d.add(dir == request, where, "%s enum value %s removed", dir, v)
			}
		}
		for _, v := range nv {
			if !slices.Contains(ov, v) {
				d.add(false, where, "%s enum value %s added", dir, v)
			}
		}
	}
}

func (d *differ) bounds(where string, o, n map[string]any, dir direction) {
	num := func(s map[string]any, k string) (float64, bool) { f, ok := s[k].(float64); return f, ok }
	// tighter reports whether the new bound accepts fewer values than
	// the old; lower says that larger bounds accept fewer.
	tighter := func(k string, lower bool) {
		ob, oOK := num(o, k)
		nb, nOK := num(n, k)
		if oOK == nOK && ob == nb {
			return
		}
		narrower := nOK && (!oOK || (lower && nb > ob) || (!lower && nb < ob))
		// A request's bound may only widen; a response's only narrow.
		breaking := narrower == (dir == request)
		d.add(breaking, where, "%s %s changed from %s to %s", dir, k, bound(ob, oOK), bound(nb, nOK))
	}
	tighter("minimum", true)
	tighter("maximum", false)
	tighter("maxLength", false)
	for _, k := range []string{"format", "pattern"} {
		of, _ := o[k].(string)
		nf, _ := n[k].(string)
		if of == nf {
			continue
		}
		// Added in a request or dropped from a response: clients lose;
		// changed either way: they may.
		breaking := of != "" && nf != "" || (dir == request) == (of == "")
		d.add(breaking, where, "%s %s changed from %q to %q", dir, k, of, nf)
	}
}

func bound(f float64, ok bool) string {
	if !ok {
		return "none"
	}
	return fmt.Sprint(f)
}

func required(s map[string]any) []string {
	var out []string
	r, _ := s["required"].([]any)
	for _, x := range r {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

func (d *differ) properties(where string, o, n map[string]any, dir direction) {
	op, np := obj(o["properties"]), obj(n["properties"])
	oreq, nreq := required(o), required(n)
	for _, k := range slices.Sorted(maps.Keys(op)) {
		w := where + "." + k
		nv, ok := np[k]
		if !ok {
			// A request member the server no longer reads is ignored
			// without a word: the client loses what it asked for.
			d.add(true, w, "%s member removed", dir)
			continue
		}
		switch {
		case dir == request && slices.Contains(nreq, k) && !slices.Contains(oreq, k):
			d.add(true, w, "request member now required")
		case dir == response && slices.Contains(oreq, k) && !slices.Contains(nreq, k):
			d.add(true, w, "response member no longer always present")
		}
		d.schema(w, op[k], nv, dir)
	}
	for _, k := range slices.Sorted(maps.Keys(np)) {
		if _, ok := op[k]; !ok {
			d.add(dir == request && slices.Contains(nreq, k), where+"."+k, "%s member added", dir)
		}
	}
	// Closing a request object refuses members old clients may send.
	if dir == request && n["additionalProperties"] == false && o["additionalProperties"] != false {
		d.add(true, where, "request object closed to unknown members")
	}
}

func (d *differ) anyOf(where string, o, n map[string]any, dir direction) {
	oa, _ := o["anyOf"].([]any)
	na, _ := n["anyOf"].([]any)
	if oa == nil && na == nil {
		return
	}
	// Alternatives are compared by position; one added at the end widens
	// the schema, one removed narrows it.
	for i := range min(len(oa), len(na)) {
		d.schema(fmt.Sprintf("%s|%d", where, i), oa[i], na[i], dir)
	}
	switch {
	case len(na) > len(oa):
		d.add(dir == response, where, "%s alternatives added", dir)
	case len(na) < len(oa):
		d.add(dir == request || len(na) == 0, where, "%s alternatives removed", dir)
	}
}
