package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/internal/cliapp"
)

// resolveIn runs "nixfleet ARGS…" with the connection flags before the
// command and on it, and returns the connection resolveConnection makes.
func resolveIn(t *testing.T, env map[string]string, args ...string) (connection, error) {
	t.Helper()
	var conn connection
	var err error
	app := &cli.App{Name: "nixfleet", Flags: connFlags(), Commands: []*cli.Command{{
		Name: "status", Flags: connFlags(),
		Action: func(c *cli.Context) error {
			conn, err = resolveConnection(c, func(k string) string { return env[k] })
			return nil
		},
	}}}
	// Not in parallel: apps share urfave/cli's global help flag, which
	// each run writes.
	if e := app.Run(append([]string{"nixfleet"}, args...)); e != nil {
		t.Fatal(e)
	}
	return conn, err
}

// TestOpConfigFile: the config file is TOML with four string keys, the
// flags' names (cp_url, the old name of cp, still works). What the
// hand-written subset parser accepted means the same; the rest of TOML is
// accepted too; a bad file is a bad_config error naming the file and line.
func TestOpConfigFile(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want connection // from is file line numbers by flag
		line map[string]int
	}{
		{name: "empty", in: "", want: connection{}},
		{name: "comments and blank lines", in: "# a comment\n\n   \t\n  # indented\n", want: connection{}},
		{name: "the example", in: "# ~/.config/nixfleet/config.toml\ncp = \"https://fleet.example.org:8443\"\nkey = \"~/.ssh/nixfleet_ed25519\"\nca = \"ca.pem\"            # next to this file\n",
			want: connection{URL: "https://fleet.example.org:8443", Key: "/home/op/.ssh/nixfleet_ed25519", CA: "@DIR@/ca.pem"},
			line: map[string]int{"cp": 2, "key": 3, "ca": 4}},
		{name: "the old example", in: "# ~/.config/nixfleet/config.toml\ncp_url = \"https://fleet.example.org:8443\"\nkey = \"~/.ssh/nixfleet_ed25519\"\nca = \"ca.pem\"            # next to this file\n",
			want: connection{URL: "https://fleet.example.org:8443", Key: "/home/op/.ssh/nixfleet_ed25519", CA: "@DIR@/ca.pem"},
			line: map[string]int{"cp": 2, "key": 3, "ca": 4}},
		{name: "spacing", in: "\tkey=\"a\"\nname   =   \"b\"   \n",
			want: connection{Key: "@DIR@/a", Name: "b"}, line: map[string]int{"key": 1, "name": 2}},
		{name: "hash inside a string", in: `name = "ops #1" # a "comment"`, want: connection{Name: "ops #1"}, line: map[string]int{"name": 1}},
		{name: "escapes", in: `name = "a\"b\\c\td\ne\u00e9\U0001F600\b\f\r"`,
			want: connection{Name: "a\"b\\c\td\neé😀\b\f\r"}, line: map[string]int{"name": 1}},
		{name: "literal string", in: `key = 'C:\keys\op' # no escapes`, want: connection{Key: `@DIR@/C:\keys\op`}, line: map[string]int{"key": 1}},
		{name: "an empty string is unset", in: `name = ""`, want: connection{}},
		{name: "crlf and a byte order mark", in: "\uFEFF# x\r\ncp_url = \"u\"\r\n", want: connection{URL: "u"}, line: map[string]int{"cp": 2}},
		{name: "a quoted key", in: `"cp" = "u"`, want: connection{URL: "u"}, line: map[string]int{"cp": 1}},
		{name: "a quoted old key", in: `"cp_url" = "u"`, want: connection{URL: "u"}, line: map[string]int{"cp": 1}},
		{name: "a multi-line string", in: "name = '''\nops'''", want: connection{Name: "ops"}, line: map[string]int{"name": 1}},
		{name: "TOML 1.1's \\x escape", in: `name = "a\x41"`, want: connection{Name: "aA"}, line: map[string]int{"name": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "config.toml")
			if err := os.WriteFile(file, []byte(tc.in), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := resolveIn(t, map[string]string{"HOME": "/home/op"}, "status", "--config", file)
			if err != nil {
				t.Fatalf("resolveConnection: %v", err)
			}
			want := tc.want
			want.Key = strings.ReplaceAll(want.Key, "@DIR@", dir)
			want.CA = strings.ReplaceAll(want.CA, "@DIR@", dir)
			want.from = map[string]string{}
			for flag, line := range tc.line {
				want.from[flag] = file + ":" + strconv.Itoa(line)
			}
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(connection{})); diff != "" {
				t.Fatalf("connection (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOpConfigFileErrors: what the subset parser refused and TOML refuses
// too, and what TOML accepts but the operator commands do not (another
// key, another type), is a bad config file naming the file and the line.
func TestOpConfigFileErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		msg  string // after "FILE:"
	}{
		{name: "unknown key", in: "cp = \"x\"\n\ncp-url = \"y\"", msg: `3: unknown key "cp-url" (known: cp, key, name, ca)`},
		{name: "both names of cp", in: "cp_url = \"x\"\n\ncp = \"y\"", msg: `3: "cp" and "cp_url" (line 1) are the same setting: keep one, "cp"`},
		{name: "both names of cp, the old last", in: "cp = \"x\"\ncp_url = \"x\"", msg: `2: "cp_url" and "cp" (line 1) are the same setting: keep one, "cp"`},
		{name: "table", in: "# x\n[server]\n", msg: `2: unknown key "server"`},
		{name: "array table", in: "[[x]]", msg: `1: unknown key "x"`},
		{name: "a known key as a table", in: "[cp]\nhost = \"x\"", msg: `1: "cp" is a table; want a string`},
		{name: "the old key as a table", in: "[cp_url]\nhost = \"x\"", msg: `1: "cp_url" is a table; want a string`},
		{name: "dotted key", in: `cp.url = "x"`, msg: `1: "cp" is a table; want a string`},
		{name: "no equals", in: `cp "x"`, msg: `1: expected '=' after key`},
		{name: "no value", in: "\n\ncp =", msg: `3: expected value, not end of input`},
		{name: "number", in: `cp = 8443`, msg: `1: "cp" is an integer; want a string`},
		{name: "old key, number", in: `cp_url = 8443`, msg: `1: "cp_url" is an integer; want a string`},
		{name: "boolean", in: `cp = true`, msg: `1: "cp" is a boolean; want a string`},
		{name: "array", in: `cp = ["a"]`, msg: `1: "cp" is an array; want a string`},
		{name: "inline table", in: `cp = {a = "b"}`, msg: `1: "cp" is a table; want a string`},
		{name: "bare word", in: `key = ~/.ssh/id`, msg: `1: unexpected character U+007E '~' at start of value`},
		{name: "unterminated", in: `name = "abc`, msg: `1: unterminated basic string`},
		{name: "unknown escape", in: `name = "a\q"`, msg: `1: invalid escape character U+0071 'q'`},
		{name: "surrogate", in: `name = "\uD800"`, msg: `1: `},
		{name: "garbage after", in: `name = "a" b`, msg: `1: expected newline but got U+0062 'b'`},
		{name: "duplicate", in: "name = \"a\"\n# x\nname = \"b\"\n", msg: `3: key name is already defined`},
		{name: "control character", in: "name = \"a\x01b\"", msg: `1: `},
		{name: "control in a comment", in: "# a\x00b", msg: `1: `},
		{name: "bad UTF-8", in: "name = \"a\"\nca = \"\xff\"", msg: `2: invalid UTF-8 character in basic string`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "config.toml")
			if err := os.WriteFile(file, []byte(tc.in), 0o600); err != nil {
				t.Fatal(err)
			}
			// The file is checked even when flags set every setting.
			_, err := resolveIn(t, nil, "--cp", "https://x", "status", "--config", file, "--key", "k", "--name", "n", "--ca", "c")
			want := "bad config file: " + file + ":" + tc.msg
			if !errors.Is(err, errBadConfig) || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("error %v; want a bad config file error starting %q", err, want)
			}
		})
	}
}

// TestOpConfigSources: flags (the innermost first) beat the environment,
// which beats the file; the file is --config, else NIXFLEET_CONFIG, else
// the default path, which need not exist.
func TestOpConfigSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(file, []byte("cp = \"https://file\"\nkey = \"k\"\nname = \"file\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"NIXFLEET_CONFIG": file, "NIXFLEET_CP_URL": "https://env", "NIXFLEET_NAME": ""}
	got, err := resolveIn(t, env, "--key", "top-key", "status")
	if err != nil {
		t.Fatal(err)
	}
	want := connection{URL: "https://env", Key: "top-key", Name: "file",
		from: map[string]string{"cp": "NIXFLEET_CP_URL", "key": "--key", "name": file + ":3"}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(connection{})); diff != "" {
		t.Errorf("connection (-want +got):\n%s", diff)
	}

	got, err = resolveIn(t, env, "--cp", "https://top", "status", "--cp", "https://leaf")
	if err != nil || got.URL != "https://leaf" || got.from["cp"] != "--cp" {
		t.Errorf("innermost flag: %+v, %v", got, err)
	}

	// The default path need not exist; a named file must.
	none := map[string]string{"HOME": filepath.Join(dir, "nohome")}
	if got, err := resolveIn(t, none, "status"); err != nil || got.URL != "" {
		t.Errorf("no default file: %+v, %v", got, err)
	}
	none[configEnv] = filepath.Join(dir, "missing.toml")
	_, err = resolveIn(t, none, "status")
	var u cliapp.UsageError
	if !errors.As(err, &u) || errors.Is(err, errBadConfig) || !os.IsNotExist(errors.Unwrap(err)) {
		t.Errorf("a missing named file: %v", err)
	}
}

func TestOpConfigDefaultPath(t *testing.T) {
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
