package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []configEntry
	}{
		{name: "empty", in: "", want: nil},
		{name: "comments and blank lines", in: "# a comment\n\n   \t\n  # indented\n", want: nil},
		{name: "basic", in: `cp_url = "https://cp:8443"`,
			want: []configEntry{{key: "cp_url", value: "https://cp:8443", line: 1}}},
		{name: "spacing", in: "\tkey=\"a\"\nname   =   \"b\"   \n",
			want: []configEntry{{key: "key", value: "a", line: 1}, {key: "name", value: "b", line: 2}}},
		{name: "trailing comment", in: `ca = "/etc/ca.pem" # the CA, "quoted"`,
			want: []configEntry{{key: "ca", value: "/etc/ca.pem", line: 1}}},
		{name: "hash inside a string", in: `name = "ops #1"`,
			want: []configEntry{{key: "name", value: "ops #1", line: 1}}},
		{name: "escapes", in: `name = "a\"b\\c\td\ne\u00e9\U0001F600\b\f\r"`,
			want: []configEntry{{key: "name", value: "a\"b\\c\td\neé😀\b\f\r", line: 1}}},
		{name: "literal string", in: `key = 'C:\keys\op' # no escapes`,
			want: []configEntry{{key: "key", value: `C:\keys\op`, line: 1}}},
		{name: "empty string", in: `name = ""`, want: []configEntry{{key: "name", value: "", line: 1}}},
		{name: "crlf and a byte order mark", in: "\uFEFF# x\r\ncp_url = \"u\"\r\n",
			want: []configEntry{{key: "cp_url", value: "u", line: 2}}},
		{name: "any bare key", in: "Some-key_2 = \"v\"", want: []configEntry{{key: "Some-key_2", value: "v", line: 1}}},
		{name: "tab in a string and a comment", in: "name = \"a\tb\" #\tc", want: []configEntry{{key: "name", value: "a\tb", line: 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseConfig([]byte(tc.in))
			if err != nil {
				t.Fatalf("parseConfig: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(configEntry{})); diff != "" {
				t.Fatalf("entries (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		line int
		msg  string // a part of the message
	}{
		{name: "table", in: "# x\n[server]\n", line: 2, msg: "tables are not supported"},
		{name: "array table", in: "[[x]]", line: 1, msg: "tables are not supported"},
		{name: "quoted key", in: `"cp_url" = "x"`, line: 1, msg: "quoted keys"},
		{name: "dotted key", in: `cp.url = "x"`, line: 1, msg: "dotted keys"},
		{name: "no equals", in: `cp_url "x"`, line: 1, msg: "expected = after key \"cp_url\""},
		{name: "key alone", in: "\n\ncp_url", line: 3, msg: "expected = after key"},
		{name: "no key", in: `= "x"`, line: 1, msg: "expected a key"},
		{name: "no value", in: `cp_url =`, line: 1, msg: "has no value"},
		{name: "number", in: `cp_url = 8443`, line: 1, msg: "must be a string"},
		{name: "boolean", in: `cp_url = true`, line: 1, msg: "must be a string"},
		{name: "array", in: `cp_url = ["a"]`, line: 1, msg: "must be a string"},
		{name: "inline table", in: `cp_url = {a = "b"}`, line: 1, msg: "must be a string"},
		{name: "bare word", in: `key = ~/.ssh/id`, line: 1, msg: "must be a string"},
		{name: "multi-line basic", in: `name = """a"""`, line: 1, msg: "multi-line"},
		{name: "multi-line literal", in: `name = '''a'''`, line: 1, msg: "multi-line"},
		{name: "unterminated", in: `name = "abc`, line: 1, msg: "unterminated string"},
		{name: "unterminated escape", in: `name = "abc\`, line: 1, msg: "unterminated string"},
		{name: "unterminated literal", in: `name = 'abc`, line: 1, msg: "unterminated string"},
		{name: "unknown escape", in: `name = "a\x41"`, line: 1, msg: `unknown escape \x`},
		{name: "short unicode escape", in: `name = "\u00e"`, line: 1, msg: `\u00e"`},
		{name: "surrogate", in: `name = "\uD800"`, line: 1, msg: "not a Unicode scalar value"},
		{name: "out of range", in: `name = "\U00110000"`, line: 1, msg: "not a Unicode scalar value"},
		{name: "garbage after", in: `name = "a" b`, line: 1, msg: `unexpected "b" after the value`},
		{name: "two values", in: `name = "a" "b"`, line: 1, msg: "unexpected"},
		{name: "duplicate", in: "name = \"a\"\n# x\nname = \"b\"\n", line: 3, msg: `key "name" is already set on line 1`},
		{name: "control character", in: "name = \"a\x01b\"", line: 1, msg: "control character U+0001"},
		{name: "control in a literal", in: "name = 'a\x7fb'", line: 1, msg: "control character U+007F"},
		{name: "control in a comment", in: "# a\x00b", line: 1, msg: "control character U+0000"},
		{name: "bad UTF-8", in: "name = \"a\"\nca = \"\xff\"", line: 2, msg: "not valid UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseConfig([]byte(tc.in))
			var le *configLineError
			if !errors.As(err, &le) {
				t.Fatalf("parseConfig: %v, want a line error", err)
			}
			if le.line != tc.line || !strings.Contains(le.msg, tc.msg) {
				t.Fatalf("error %q on line %d, want line %d with %q", le.msg, le.line, tc.line, tc.msg)
			}
		})
	}
}

// canonicalConfig writes entries back as the parser reads them.
func canonicalConfig(entries []configEntry) string {
	var b strings.Builder
	for _, e := range entries {
		fmt.Fprintf(&b, "%s = \"", e.key)
		for _, r := range e.value {
			switch {
			case r == '"' || r == '\\':
				b.WriteString(`\` + string(r))
			case isControl(r):
				fmt.Fprintf(&b, `\u%04X`, r)
			default:
				b.WriteRune(r)
			}
		}
		b.WriteString("\"\n")
	}
	return b.String()
}

// FuzzParseConfig: parsing never panics, and what parses has one meaning:
// written back canonically it parses to the same keys and values.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"", "# c\n", `cp_url = "https://x"`, "a = 'b' # c\r\n", `n = "\u00e9\U0001F600\"\\"`, "[t]", `a = "b" c`, "a = \"\x01\"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := parseConfig(data)
		if err != nil {
			var le *configLineError
			if !errors.As(err, &le) || le.line < 1 {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		again, err := parseConfig([]byte(canonicalConfig(entries)))
		if err != nil {
			t.Fatalf("the canonical form %q does not parse: %v", canonicalConfig(entries), err)
		}
		if len(again) != len(entries) {
			t.Fatalf("%d entries, then %d", len(entries), len(again))
		}
		for i := range entries {
			if again[i].key != entries[i].key || again[i].value != entries[i].value {
				t.Fatalf("entry %d: %s=%s, then %s=%s", i, entries[i].key, strconv.Quote(entries[i].value),
					again[i].key, strconv.Quote(again[i].value))
			}
		}
	})
}

func TestDefaultConfigPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{name: "xdg", env: map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, want: "/x/nixfleet/config.toml"},
		{name: "relative xdg is ignored", env: map[string]string{"XDG_CONFIG_HOME": "x", "HOME": "/h"}, want: "/h/.config/nixfleet/config.toml"},
		{name: "home", env: map[string]string{"HOME": "/h"}, want: "/h/.config/nixfleet/config.toml"},
		{name: "neither", env: map[string]string{}, want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := defaultConfigPath(func(k string) string { return tc.env[k] }); got != tc.want {
				t.Fatalf("defaultConfigPath = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestConfigResolvePath(t *testing.T) {
	t.Parallel()
	f := configFile{path: "/etc/nixfleet/config.toml"}
	env := func(k string) string { return map[string]string{"HOME": "/home/op"}[k] }
	for in, want := range map[string]string{
		"op_ed25519":      "/etc/nixfleet/op_ed25519",
		"keys/op":         "/etc/nixfleet/keys/op",
		"/abs/op":         "/abs/op",
		"~/.ssh/id":       "/home/op/.ssh/id",
		"../shared/ca.pm": "/etc/shared/ca.pm",
	} {
		if got := f.resolvePath(in, env); got != want {
			t.Errorf("resolvePath(%q) = %q, want %q", in, got, want)
		}
	}
}
