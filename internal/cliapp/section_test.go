package cliapp

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pelletier/go-toml/v2"
)

// hook and hooks are a section a test daemon reads: an array of tables
// with a field of each type Decode takes.
type hook struct {
	Name    string        `toml:"name"`
	Events  []string      `toml:"events"`
	Timeout time.Duration `toml:"timeout"`
	Retries int           `toml:"retries"`
	Ratio   float64       `toml:"ratio"`
	On      bool          `toml:"on"`
	TLS     struct {
		CA string `toml:"ca"`
	} `toml:"tls"`
	ignored string
}

type hooks struct {
	Hook  []hook `toml:"hook"`
	Quiet bool   `toml:"quiet"`
}

// runSections runs the test daemon with a file holding in, whose
// "notify" table its section function decodes into hooks (then check,
// when set, looks at it); it returns the exit status, stderr, the
// decoded table and the daemon's settings.
func runSections(t *testing.T, in string, check func(*Section, *hooks) error) (int, string, hooks, settings) {
	t.Helper()
	file := writeFile(t, t.TempDir(), "d.toml", in)
	var got hooks
	cf := ConfigFile{Sections: map[string]func(*Section) error{"notify": func(s *Section) error {
		if s.Name != "notify" || s.File != file {
			t.Errorf("section %q of %q", s.Name, s.File)
		}
		if err := s.Decode(&got); err != nil {
			return err
		}
		if check != nil {
			return check(s, &got)
		}
		return nil
	}}}
	code, stderr, set := runDaemon(t, cf, "--config", file)
	return code, strings.TrimPrefix(stderr, "d: bad config file: "+file), got, set
}

// TestConfigureSections: a table of ConfigFile.Sections is decoded
// strictly by its command, after the flags' keys were set; an unknown key,
// a value of the wrong type and the command's own complaints name the
// line of the key, also in the second element of an array of tables.
func TestConfigureSections(t *testing.T) {
	const file = `listen = "127.0.0.1:9"

[[notify.hook]]
name = "ops"    # the first
events = [
  "halted",
  "reverted",
]
timeout = "5s"
retries = 3
ratio = 2
on = true
tls.ca = "/ca.pem"

[notify]
quiet = true

[[notify.hook]]
name = 'second'
timeout = "1m"
`
	code, stderr, got, set := runSections(t, file, nil)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := hooks{Quiet: true, Hook: []hook{
		{Name: "ops", Events: []string{"halted", "reverted"}, Timeout: 5 * time.Second, Retries: 3, Ratio: 2, On: true},
		{Name: "second", Timeout: time.Minute},
	}}
	want.Hook[0].TLS.CA = "/ca.pem"
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(hook{})); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	if set.Values["listen"] != "127.0.0.1:9" {
		t.Errorf("the flags' keys were not set: %v", set.Values)
	}

	lines := func(s *Section) error {
		got := map[string]int{}
		for _, k := range []string{"", "hook", "hook[0]", "hook[0].name", "hook[0].events[1]", "hook[0].tls.ca", "hook[0].tls",
			"quiet", "hook[1]", "hook[1].timeout", "hook[1].events", "hook[1].events[3]", "hook[2]", "nothing"} {
			got[k] = s.Line(k)
		}
		want := map[string]int{"": 3, "hook": 3, "hook[0]": 3, "hook[0].name": 4, "hook[0].events[1]": 7, "hook[0].tls.ca": 13,
			"hook[0].tls": 13, "quiet": 16, "hook[1]": 18, "hook[1].timeout": 20, "hook[1].events": 18, "hook[1].events[3]": 18,
			"hook[2]": 3, "nothing": 3}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("lines (-want +got):\n%s", diff)
		}
		for k, has := range map[string]bool{"hook": true, "hook[1].timeout": true, "hook[1].retries": false, "hook[2]": false,
			"hook[0].events[1]": true, "hook[0].events[2]": false, "quiet": true, "hook[0].tls.ca": true, "hook.name": false} {
			if s.Has(k) != has {
				t.Errorf("Has(%q) = %v", k, !has)
			}
		}
		return s.Errorf("hook[1].name", "is %q; want a name", "second")
	}
	code, stderr, _, _ = runSections(t, file, func(s *Section, _ *hooks) error { return lines(s) })
	if want := `:19: "notify.hook[1].name" is "second"; want a name` + "\n"; code != 2 || stderr != want {
		t.Errorf("Errorf: exit %d, %q; want 2 and %q", code, stderr, want)
	}

	for _, tc := range []struct {
		name, in string
		check    func(*Section, *hooks) error
		err      string // after the file name
	}{
		{name: "unknown key in the second element", in: "[[notify.hook]]\nname = \"a\"\n[[notify.hook]]\nname = \"b\"\n\nnmae = \"c\"\n",
			err: `:6: unknown key "notify.hook[1].nmae" (known in [notify.hook]: name, events, timeout, retries, ratio, on, tls)`},
		{name: "unknown key in the table", in: "[notify]\nquiet = false\nloud = true\n",
			err: `:3: unknown key "notify.loud" (known in [notify]: hook, quiet)`},
		{name: "unknown key in a sub-table", in: "[[notify.hook]]\ntls.ca = \"x\"\ntls.key = \"y\"\n",
			err: `:3: unknown key "notify.hook[0].tls.key" (known in [notify.hook.tls]: ca)`},
		{name: "the first unknown key in the file", in: "[[notify.hook]]\nzz = 1\naa = 2\n", err: `:2: unknown key "notify.hook[0].zz"`},
		{name: "a string for a duration", in: "[[notify.hook]]\n[[notify.hook]]\ntimeout = 30\n",
			err: `:3: "notify.hook[1].timeout" is an integer; want a duration string like "30s"`},
		{name: "not a duration", in: "[[notify.hook]]\ntimeout = \"soon\"\n",
			err: `:2: "notify.hook[0].timeout" is not a duration: time: invalid duration "soon" (want a string like "30s" or "1h30m")`},
		{name: "a number in an array of strings", in: "[[notify.hook]]\nevents = [\n\"a\",\n2]\n",
			err: `:4: "notify.hook[0].events[1]" is an integer; want a string`},
		{name: "a string for an array", in: "[[notify.hook]]\nevents = \"halted\"\n",
			err: `:2: "notify.hook[0].events" is a string; want an array of strings`},
		{name: "a float for an integer", in: "[[notify.hook]]\nretries = 1.5\n", err: `:2: "notify.hook[0].retries" is a float; want an integer`},
		{name: "a string for a boolean", in: "[[notify.hook]]\non = \"yes\"\n", err: `:2: "notify.hook[0].on" is a string; want a boolean (true or false)`},
		{name: "a table for an array of tables", in: "[notify.hook]\nname = \"x\"\n", err: `:1: "notify.hook" is a table; want an array of tables`},
		{name: "not a table", in: "\nnotify = \"all\"\n", err: `:2: "notify" is a string; want a table`},
		{name: "inline tables", in: "notify.hook = [\n  {name = \"a\"},\n  {name = \"b\", retries = \"2\"},\n]\n",
			err: `:3: "notify.hook[1].retries" is a string; want an integer`},
		{name: "a plain error from the command", in: "\n[[notify.hook]]\nname = \"x\"\n",
			check: func(*Section, *hooks) error { return errors.New("no good") }, err: `:2: no good`},
		{name: "unknown top-level key", in: "lissen = 1\n", err: `:1: unknown key "lissen" (the keys are the flags of d serve: see --help, and the tables notify)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr, _, _ := runSections(t, tc.in, tc.check)
			if code != 2 || !strings.HasPrefix(stderr, tc.err) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.err)
			}
		})
	}

	t.Run("not in a JSON file", func(t *testing.T) {
		file := writeFile(t, t.TempDir(), "d.json", `{"listen": "x", "notify": {"quiet": true}}`)
		cf := ConfigFile{LegacyJSON: func([]byte) error { return nil },
			Sections: map[string]func(*Section) error{"notify": func(*Section) error { return nil }}}
		code, stderr, _ := runDaemon(t, cf, "--config", file)
		if want := `d: bad config file: ` + file + `: "notify": a JSON config file cannot hold tables`; code != 2 || !strings.HasPrefix(stderr, want) {
			t.Errorf("exit %d, %q; want 2 and %q", code, stderr, want)
		}
	})

	var n int
	if err := (&Section{Name: "x"}).Decode(&n); err == nil || errors.As(err, new(UsageError)) {
		t.Errorf("Decode into an int: %v, want a bug, not a usage error", err)
	}
}

// TestKeyLines: the line of each key, also of the elements of arrays of
// tables, of dotted keys' tables and of arrays' elements, past strings
// and comments that look like keys.
func TestKeyLines(t *testing.T) {
	doc := `# [[not.a.table]]
a = """
b = 1
[c]
"""   # x = 1
'q.k' = 'it"s' # ''
"e\u0078" = "\"[x]\""
[[t.u]]
v = [1, [2,
  3], {w = 4}]
[[t.u]]
v.x = '''
'''''
[t.u.s]
y = {z = { zz = 1 }, "o.p" = 2,
}
[[t.u.n]]
[[t.u]]
[t . "sp ace"]
`
	got := keyLines([]byte(doc))
	want := map[string]int{
		"a": 2, `"q.k"`: 6, "ex": 7, "t": 8, "t.u": 8, "t.u[0]": 8, "t.u[0].v": 9, "t.u[0].v[0]": 9, "t.u[0].v[1]": 9,
		"t.u[0].v[1][0]": 9, "t.u[0].v[1][1]": 10, "t.u[0].v[2]": 10, "t.u[0].v[2].w": 10, "t.u[1]": 11, "t.u[1].v": 12,
		"t.u[1].v.x": 12, "t.u[1].s": 14, "t.u[1].s.y": 15, "t.u[1].s.y.z": 15, "t.u[1].s.y.z.zz": 15, `t.u[1].s.y."o.p"`: 15,
		"t.u[1].n": 17, "t.u[1].n[0]": 17, "t.u[2]": 18, `t."sp ace"`: 19,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
	if err := toml.Unmarshal([]byte(doc), new(map[string]any)); err != nil {
		t.Fatalf("the test document is not TOML: %v", err)
	}

	// An array in an array is where its first element is; one with none
	// has no line.
	got = keyLines([]byte("a = [[], [\n[\n2]]]\n"))
	want = map[string]int{"a": 1, "a[1]": 3, "a[1][0]": 3, "a[1][0][0]": 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("arrays in arrays (-want +got):\n%s", diff)
	}
}

// FuzzKeyLines: on any document that decodes, keyLines finds exactly the
// paths of the decoded value (but for arrays with no line, see hollow),
// each on a line of the document, and a path that ends in a bare key on a
// line that holds it (unless the line has an escape, "\u0041" for "A").
func FuzzKeyLines(f *testing.F) {
	for _, s := range []string{
		"", "a = 1\n", "[t]\nx = 'a'\n[[u]]\ny = [1, {z = 2}]\n[[u]]\n", "a.b.c = \"\"\"\nx = 1\n\"\"\"\n",
		"[[a]]\n[[a.b]]\nc = 1\n[[a]]\n[a.d]\ne = 2\n", "x = {a = [1,2], b = {c = 'd'}}\n", "\"a b\".'c.d' = 1\n",
		"s = '''\n'''''\nt = \"\\\"\"\n", "a = [\n# c\n1, # d\n]\n", "[\"x\\u0041\"]\ny = 1\n", "d = 1979-05-27 07:32:00Z\n",
		"a = [[], [[]], [[], 1], [\n[\n2]]]\n", "y = {z = {\n zz = 1 }, # c\n\"o.p\" = 2,\n}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		var v map[string]any
		if toml.Unmarshal(trimBOM(data), &v) != nil {
			return
		}
		want := map[string]bool{}
		valuePaths("", v, want)
		lines := keyLines(data)
		text := bytes.Split(trimBOM(data), []byte("\n"))
		for p, l := range lines {
			if !want[p] {
				t.Fatalf("%s is no path of the value; want %v", p, want)
			}
			if l < 1 || l > len(text) {
				t.Fatalf("%s on line %d of %d", p, l, len(text))
			}
			part := p[strings.LastIndexAny(p, ".]")+1:]
			if bareKey(part) && !bytes.Contains(text[l-1], []byte(part)) && !bytes.Contains(text[l-1], []byte(`\`)) {
				t.Fatalf("%s on line %d: %q", p, l, text[l-1])
			}
		}
		for p := range want {
			if _, ok := lines[p]; !ok {
				t.Fatalf("no line for %s; found %v", p, lines)
			}
		}
	})
}

// valuePaths adds to paths the path (keyPath, elemPath) of every key and
// element below v, a decoded value at path, but for hollow elements.
func valuePaths(path string, v any, paths map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			p := keyPath(path, k)
			paths[p] = true
			valuePaths(p, c, paths)
		}
	case []any:
		for i, c := range x {
			p := elemPath(path, i)
			if !hollow(c) {
				paths[p] = true
			}
			valuePaths(p, c, paths)
		}
	}
}

// hollow reports whether v is an array that keyLines gives no line: its
// first element, or that element's first element and so on, is an empty
// array.
func hollow(v any) bool {
	for {
		a, ok := v.([]any)
		if !ok {
			return false
		}
		if len(a) == 0 {
			return true
		}
		v = a[0]
	}
}
