package cliapp

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Section is a table of a configuration file that its command reads
// itself, not a flag's key (ConfigFile.Sections): the control plane's
// [[notifications.webhook]], for one. It is decoded as strictly as the
// flags' keys, and knows the line of each of its keys, so that the
// command's own checks can name it too.
//
// Keys below the table are written as paths: parts joined by ".", an
// array's element as "[i]" (from 0), a part that is not a bare key
// quoted: "webhook[1].url".
type Section struct {
	// Name is the table's key at the top of the file; File is the file.
	Name, File string
	value      map[string]any
	lines      map[string]int // by path from the top of the file
}

// full is the path from the top of the file of a key below the table.
func (s *Section) full(key string) string {
	if key == "" {
		return keyPath("", s.Name)
	}
	return keyPath("", s.Name) + "." + key
}

// Line is the line of a key below the table ("" for the table): its own,
// else that of the nearest table or array above it in the file (the line
// a missing key would be added after); 0 when it is not known.
func (s *Section) Line(key string) int {
	p := s.full(key)
	for {
		if l, ok := s.lines[p]; ok {
			return l
		}
		i := max(strings.LastIndexByte(p, '.'), strings.LastIndexByte(p, '['))
		if i <= 0 {
			return 0
		}
		p = p[:i]
	}
}

// Has reports whether a key below the table is in the file.
func (s *Section) Has(key string) bool {
	var v any = s.value
	for _, step := range splitPath(key) {
		switch x := v.(type) {
		case map[string]any:
			if step.index >= 0 {
				return false
			}
			var ok bool
			if v, ok = x[step.key]; !ok {
				return false
			}
		case []any:
			if step.index < 0 || step.index >= len(x) {
				return false
			}
			v = x[step.index]
		default:
			return false
		}
	}
	return true
}

type pathStep struct {
	key   string
	index int // -1: a key
}

// splitPath splits a path of bare keys and indices (a quoted key part is
// taken as written, quotes and all, and so is found by no lookup).
func splitPath(key string) []pathStep {
	var out []pathStep
	for _, part := range strings.Split(key, ".") {
		if part == "" {
			continue
		}
		name, rest, _ := strings.Cut(part, "[")
		out = append(out, pathStep{key: name, index: -1})
		for rest != "" {
			n, after, _ := strings.Cut(rest, "]")
			i, err := strconv.Atoi(n)
			if err != nil {
				i = -2
			}
			out = append(out, pathStep{index: i})
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return out
}

// Errorf returns a usage error about a key below the table ("" for the
// table): a ConfigError at its line (Line) whose message is the key's
// path from the top of the file, quoted, a space and the formatted text —
// `"notifications.webhook[1].format" is "xml"; want json or slack`.
func (s *Section) Errorf(key, format string, args ...any) error {
	return Usage(&ConfigError{Path: s.File, Line: s.Line(key),
		Msg: strconv.Quote(s.full(key)) + " " + fmt.Sprintf(format, args...)})
}

var durationType = reflect.TypeFor[time.Duration]()

// Decode stores the table in v, a pointer to a struct whose fields name
// their keys with `toml:"name"` tags (a field without one is not read).
// Fields may be strings, booleans, integers (int, int64), float64s (an
// integer or a float in the file), time.Durations (a string like "30s"),
// structs (tables), and slices of any of these (arrays; of structs:
// arrays of tables). A key the struct lacks and a value of the wrong type
// are errors from Errorf, at the key's line; keys are checked in the
// file's order, so the first wrong one is reported. A key absent from
// the file leaves its field as it was.
func (s *Section) Decode(v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("cliapp: Decode needs a pointer to a struct, not %T", v)
	}
	return s.decode("", s.value, rv.Elem())
}

// decode stores val, the value of key, in rv.
func (s *Section) decode(key string, val any, rv reflect.Value) error {
	t := rv.Type()
	switch {
	case t == durationType:
		str, ok := val.(string)
		if !ok {
			return s.Errorf(key, "is %s; want a duration string like \"30s\"", tomlType(val))
		}
		d, err := time.ParseDuration(str)
		if err != nil {
			return s.Errorf(key, "is not a duration: %v (want a string like \"30s\" or \"1h30m\")", err)
		}
		rv.SetInt(int64(d))
		return nil
	case t.Kind() == reflect.Struct:
		m, ok := val.(map[string]any)
		if !ok {
			return s.Errorf(key, "is %s; want a table", tomlType(val))
		}
		return s.decodeTable(key, m, rv)
	case t.Kind() == reflect.Slice:
		elems, ok := val.([]any)
		if !ok {
			return s.Errorf(key, "is %s; want %s", tomlType(val), want(t))
		}
		out := reflect.MakeSlice(t, len(elems), len(elems))
		for i, e := range elems {
			if err := s.decode(elemPath(key, i), e, out.Index(i)); err != nil {
				return err
			}
		}
		rv.Set(out)
		return nil
	}
	switch t.Kind() {
	case reflect.String:
		if str, ok := val.(string); ok {
			rv.SetString(str)
			return nil
		}
	case reflect.Bool:
		if b, ok := val.(bool); ok {
			rv.SetBool(b)
			return nil
		}
	case reflect.Int, reflect.Int64:
		if i, ok := val.(int64); ok && !rv.OverflowInt(i) {
			rv.SetInt(i)
			return nil
		}
	case reflect.Float64:
		switch x := val.(type) {
		case float64:
			rv.SetFloat(x)
			return nil
		case int64:
			rv.SetFloat(float64(x))
			return nil
		}
	default:
		return fmt.Errorf("cliapp: cannot decode %s into a %s", s.full(key), t)
	}
	return s.Errorf(key, "is %s; want %s", tomlType(val), want(t))
}

// decodeTable stores a table's keys in the fields of a struct, in the
// order of their lines.
func (s *Section) decodeTable(key string, m map[string]any, rv reflect.Value) error {
	fields := map[string]int{}
	var names []string
	for i := range rv.NumField() {
		f := rv.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		fields[name] = i
		names = append(names, name)
	}
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		return cmp.Or(cmp.Compare(s.Line(join(key, a)), s.Line(join(key, b))), strings.Compare(a, b))
	})
	for _, k := range keys {
		i, ok := fields[k]
		if !ok {
			return Usage(&ConfigError{Path: s.File, Line: s.Line(join(key, k)),
				Msg: fmt.Sprintf("unknown key %q (known in %s: %s)", s.full(join(key, k)), s.tableName(key), strings.Join(names, ", "))})
		}
		if err := s.decode(join(key, k), m[k], rv.Field(i)); err != nil {
			return err
		}
	}
	return nil
}

// tableName names the table at key in a message: its path with elements'
// indices dropped ("notifications.webhook").
func (s *Section) tableName(key string) string {
	p := s.full(key)
	for {
		i := strings.IndexByte(p, '[')
		if i < 0 {
			return "[" + p + "]"
		}
		j := strings.IndexByte(p[i:], ']')
		if j < 0 {
			return "[" + p + "]"
		}
		p = p[:i] + p[i+j+1:]
	}
}

// join appends a key part to a path below the table.
func join(key, part string) string { return keyPath(key, part) }

// want says what TOML type a field of type t takes.
func want(t reflect.Type) string {
	if t == durationType {
		return "a duration string like \"30s\""
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Struct:
		return "a table"
	case reflect.Slice:
		e := t.Elem()
		switch {
		case e == durationType:
			return "an array of duration strings"
		case e.Kind() == reflect.Struct:
			return "an array of tables"
		case e.Kind() == reflect.String:
			return "an array of strings"
		case e.Kind() == reflect.Bool:
			return "an array of booleans"
		case e.Kind() == reflect.Int || e.Kind() == reflect.Int64:
			return "an array of integers"
		case e.Kind() == reflect.Float64:
			return "an array of numbers"
		}
		return "an array"
	}
	return t.String()
}
