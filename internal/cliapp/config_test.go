package cliapp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/urfave/cli/v2"
)

// The tests run urfave/cli apps one at a time: apps share urfave/cli's
// global help flag, which each run writes.

// settings is what a test command read: each flag's value and where it
// came from.
type settings struct {
	Values  map[string]string
	From    map[string]string
	Warning []string
}

// testEnv is the prefix of the test daemon's environment variables.
const testEnv = "CLIAPP_TEST"

// daemonFlags are a daemon's flags, one of each type, with EnvVars.
func daemonFlags() []cli.Flag {
	env := func(f string) []string { return Env(testEnv, f) }
	return []cli.Flag{
		&cli.StringFlag{Name: "config", EnvVars: env("config")},
		&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8443", EnvVars: env("listen")},
		&cli.StringFlag{Name: "detach", Value: "systemd-run", EnvVars: env("detach")},
		&cli.PathFlag{Name: "state-dir", Value: "/var/lib/x", EnvVars: env("state-dir")},
		&cli.DurationFlag{Name: "tick-interval", Value: 30 * time.Second, EnvVars: env("tick-interval")},
		&cli.IntFlag{Name: "min-hosts", Value: 2, EnvVars: env("min-hosts")},
		&cli.UintFlag{Name: "workers", Value: 4, EnvVars: env("workers")},
		&cli.Float64Flag{Name: "rate", Value: 10, EnvVars: env("rate")},
		&cli.BoolFlag{Name: "insecure-dev", EnvVars: env("insecure-dev")},
		&cli.StringSliceFlag{Name: "substituter", EnvVars: env("substituter")},
	}
}

var daemonSettings = []string{"listen", "detach", "state-dir", "tick-interval", "min-hosts", "workers", "rate", "insecure-dev", "substituter"}

// runDaemon runs "d serve ARGS…" whose action calls Configure with the
// --config file, and returns the exit status, stderr and the settings.
func runDaemon(t *testing.T, cf ConfigFile, args ...string) (int, string, settings) {
	t.Helper()
	var got settings
	app := &cli.App{Name: "d", Commands: []*cli.Command{{
		Name: "serve", Flags: daemonFlags(),
		Action: func(c *cli.Context) error {
			cf := cf
			cf.Path = c.String("config")
			src, err := Configure(c, cf)
			got = snapshot(c, src, daemonSettings)
			return err
		},
	}}}
	var stdout, stderr bytes.Buffer
	code := Run(context.Background(), app, append([]string{"d", "serve"}, args...), &stdout, &stderr)
	return code, stderr.String(), got
}

func snapshot(c *cli.Context, src *Sources, names []string) settings {
	s := settings{Values: map[string]string{}, From: map[string]string{}, Warning: src.Warnings}
	for _, n := range names {
		v := c.Value(n)
		switch x := v.(type) {
		case cli.StringSlice:
			v = x.Value()
		case string:
			if lv, ok := LocalString(c, n); ok {
				v = lv
			}
		}
		s.Values[n] = fmt.Sprint(v)
		if f := src.Of(n); f != "" {
			s.From[n] = f
		}
	}
	return s
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

var defaults = map[string]string{
	"listen": "127.0.0.1:8443", "detach": "systemd-run", "state-dir": "/var/lib/x", "tick-interval": "30s",
	"min-hosts": "2", "workers": "4", "rate": "10", "insecure-dev": "false", "substituter": "[]",
}

func with(over map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range defaults {
		m[k] = v
	}
	for k, v := range over {
		m[k] = v
	}
	return m
}

// TestConfigurePrecedence: a flag wins over its environment variable,
// which wins over the file, which wins over the default; for every type.
func TestConfigurePrecedence(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "d.toml", `# every setting
listen = "127.0.0.1:1"
detach = ""
state-dir = "state"
tick-interval = "1m30s"
min-hosts = 5
workers = 8
rate = 0.5
insecure-dev = true
substituter = ["https://a", "https://b"]
`)
	fromFile := map[string]string{
		"listen": "127.0.0.1:1", "detach": "", "state-dir": "state", "tick-interval": "1m30s",
		"min-hosts": "5", "workers": "8", "rate": "0.5", "insecure-dev": "true", "substituter": "[https://a https://b]",
	}
	fileFrom := map[string]string{}
	for i, n := range daemonSettings {
		fileFrom[n] = fmt.Sprintf("%s:%d", file, i+2)
	}
	fromEnv := map[string]string{
		"listen": "127.0.0.1:2", "detach": "env", "state-dir": "/env", "tick-interval": "2m0s",
		"min-hosts": "6", "workers": "9", "rate": "1.5", "insecure-dev": "false", "substituter": "[https://env]",
	}
	flagArgs := []string{"--listen", "127.0.0.1:3", "--detach", "flag", "--state-dir", "/flag", "--tick-interval", "3m",
		"--min-hosts", "7", "--workers", "10", "--rate", "2.5", "--insecure-dev=true", "--substituter", "https://flag"}
	fromFlags := map[string]string{
		"listen": "127.0.0.1:3", "detach": "flag", "state-dir": "/flag", "tick-interval": "3m0s",
		"min-hosts": "7", "workers": "10", "rate": "2.5", "insecure-dev": "true", "substituter": "[https://flag]",
	}
	setFlags := map[string]string{}
	for _, n := range daemonSettings {
		setFlags[n] = "--" + n
	}

	tests := []struct {
		name     string
		env      bool
		args     []string
		want     map[string]string
		wantFrom map[string]string
	}{
		{name: "defaults", want: defaults, wantFrom: map[string]string{}},
		{name: "the file", args: []string{"--config", file}, want: fromFile, wantFrom: fileFrom},
		{name: "the environment over the file", env: true, args: []string{"--config", file}, want: fromEnv, wantFrom: setFlags},
		{name: "flags over the environment", env: true, args: append([]string{"--config", file}, flagArgs...), want: fromFlags, wantFrom: setFlags},
		{name: "flags over the file", args: append([]string{"--config", file}, flagArgs...), want: fromFlags, wantFrom: setFlags},
		{name: "the file named by the environment", args: nil, want: fromFile, wantFrom: fileFrom},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env {
				for n, v := range map[string]string{
					"listen": "127.0.0.1:2", "detach": "env", "state-dir": "/env", "tick-interval": "2m",
					"min-hosts": "6", "workers": "9", "rate": "1.5", "insecure-dev": "false", "substituter": "https://env",
				} {
					t.Setenv(Env(testEnv, n)[0], v)
				}
			}
			if tc.args == nil && tc.name != "defaults" {
				t.Setenv(testEnv+"_CONFIG", file)
			}
			code, stderr, got := runDaemon(t, ConfigFile{}, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if diff := cmp.Diff(tc.want, got.Values); diff != "" {
				t.Errorf("values (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantFrom, got.From); diff != "" {
				t.Errorf("sources (-want +got):\n%s", diff)
			}
		})
	}
}

// TestConfigureTypes: each value must have its flag's TOML type; a wrong
// one is a usage error naming the file, the line and the key.
func TestConfigureTypes(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want map[string]string // the values that differ from the defaults
		err  string            // else a part of the error, after "FILE:"
	}{
		{name: "duration", in: `tick-interval = "1h30m"`, want: map[string]string{"tick-interval": "1h30m0s"}},
		{name: "duration as an integer", in: "\ntick-interval = 30", err: `2: "tick-interval" is an integer; want a duration string like "30s"`},
		{name: "duration without a unit", in: `tick-interval = "30"`, err: `1: "tick-interval" is not a duration: time: missing unit in duration "30"`},
		{name: "int", in: `min-hosts = -3`, want: map[string]string{"min-hosts": "-3"}},
		{name: "int in hex", in: `min-hosts = 0x10`, want: map[string]string{"min-hosts": "16"}},
		{name: "int as a string", in: `min-hosts = "3"`, err: `1: "min-hosts" is a string; want an integer`},
		{name: "int as a float", in: `min-hosts = 3.0`, err: `1: "min-hosts" is a float; want an integer`},
		{name: "int out of range", in: `min-hosts = 9223372036854775808`, err: `1: decimal number is too large to fit in a 64-bit signed integer`},
		{name: "negative uint", in: `workers = -1`, err: `1: "workers" is an integer; want a non-negative integer`},
		{name: "float", in: `rate = 1e-1`, want: map[string]string{"rate": "0.1"}},
		{name: "float from an int", in: `rate = 3`, want: map[string]string{"rate": "3"}},
		{name: "float as a string", in: `rate = "3"`, err: `1: "rate" is a string; want a number`},
		{name: "bool", in: `insecure-dev = false`, want: map[string]string{"insecure-dev": "false"}},
		{name: "bool as a string", in: `insecure-dev = "true"`, err: `1: "insecure-dev" is a string; want a boolean (true or false)`},
		{name: "list", in: "substituter = [\n  \"https://a\",\n  'https://b',\n]", want: map[string]string{"substituter": "[https://a https://b]"}},
		{name: "empty list", in: `substituter = []`, want: map[string]string{}},
		{name: "list as a string", in: `substituter = "https://a"`, err: `1: "substituter" is a string; want an array of strings`},
		{name: "list of numbers", in: `substituter = ["a", 1]`, err: `1: "substituter" holds an integer; want an array of strings`},
		{name: "string", in: `listen = '0.0.0.0:1' # literal`, want: map[string]string{"listen": "0.0.0.0:1"}},
		{name: "TOML 1.1 escapes after a byte order mark", in: "\uFEFFlisten = \"\\x41\\e\"", want: map[string]string{"listen": "A\x1b"}},
		{name: "multi-line string", in: "detach = \"\"\"\nsystemd-run --wait\"\"\"", want: map[string]string{"detach": "systemd-run --wait"}},
		{name: "string as an integer", in: `listen = 8443`, err: `1: "listen" is an integer; want a string`},
		{name: "string as a table", in: "[listen]\nhost = \"x\"", err: `1: "listen" is a table; want a string`},
		{name: "string as a date", in: `listen = 1979-05-27`, err: `1: "listen" is a date; want a string`},
		{name: "string as a time", in: `listen = 07:32`, err: `1: "listen" is a time; want a string`},
		{name: "string as a date-time", in: `listen = 1979-05-27T07:32:00`, err: `1: "listen" is a date-time; want a string`},
		{name: "string as a dotted key", in: "\n\nlisten.host = \"x\"", err: `3: "listen" is a table; want a string`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := writeFile(t, t.TempDir(), "d.toml", tc.in)
			code, stderr, got := runDaemon(t, ConfigFile{}, "--config", file)
			if tc.err != "" {
				want := "d: bad config file: " + file + ":" + tc.err
				if code != 2 || !strings.HasPrefix(stderr, want) {
					t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, want)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if diff := cmp.Diff(with(tc.want), got.Values); diff != "" {
				t.Errorf("values (-want +got):\n%s", diff)
			}
		})
	}
}

// TestConfigureFileErrors: a file that is not TOML, or holds a key the
// command does not know, is a usage error naming the file and the line; a
// named file that cannot be read is a usage error with the read's error.
func TestConfigureFileErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		err  string // after "FILE"
	}{
		{name: "unknown key", in: "listen = \"x\"\n\nlissen = \"y\"", err: `:3: unknown key "lissen" (the keys are the flags of d serve: see --help)`},
		{name: "config is no key", in: `config = "other.toml"`, err: `:1: unknown key "config"`},
		{name: "help is no key", in: `help = true`, err: `:1: unknown key "help"`},
		{name: "unknown table", in: "# x\n[server]\nlisten = \"x\"", err: `:2: unknown key "server"`},
		{name: "unknown dotted key", in: "\nserver.listen = \"x\"", err: `:2: unknown key "server"`},
		{name: "duplicate key", in: "listen = \"x\"\nlisten = \"y\"", err: `:2: key listen is already defined`},
		{name: "bare word", in: "state-dir = ~/x", err: `:1: unexpected character U+007E '~' at start of value`},
		{name: "garbage after a value", in: "\nlisten = \"x\" y", err: `:2: expected newline but got U+0079 'y'`},
		{name: "unterminated string", in: `listen = "x`, err: `:1: unterminated basic string`},
		{name: "invalid UTF-8", in: "listen = \"\xff\"", err: `:1: invalid UTF-8 character in basic string`},
		{name: "control character", in: "# \x01", err: `:1: control characters are not allowed in comments`},
		{name: "JSON without LegacyJSON", in: `{"listen": "x"}`, err: `:1: `},
		{name: "too large", in: "# " + strings.Repeat("x", MaxConfigBytes), err: fmt.Sprintf(": larger than %d bytes", MaxConfigBytes)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := writeFile(t, t.TempDir(), "d.toml", tc.in)
			code, stderr, _ := runDaemon(t, ConfigFile{}, "--config", file)
			want := "d: bad config file: " + file + tc.err
			if code != 2 || !strings.HasPrefix(stderr, want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, want)
			}
		})
	}

	t.Run("missing", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "missing.toml")
		code, stderr, _ := runDaemon(t, ConfigFile{}, "--config", file)
		if want := "d: open " + file + ": no such file or directory\n"; code != 2 || stderr != want {
			t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, want)
		}
		code, stderr, got := runDaemon(t, ConfigFile{Optional: true}, "--config", file)
		if code != 0 || !cmp.Equal(got.Values, defaults) {
			t.Fatalf("a missing optional file: exit %d, %s, values %v", code, stderr, got.Values)
		}
	})
}

// TestConfigureErrorKinds: Configure's errors are usage errors; those about
// the file's contents are ConfigErrors and ErrBadConfig, the others not.
func TestConfigureErrorKinds(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		path string
		bad  bool
	}{
		"unknown key": {path: writeFile(t, dir, "bad.toml", `x = 1`), bad: true},
		"missing":     {path: filepath.Join(dir, "missing.toml")},
	} {
		var err error
		app := &cli.App{Name: "d", Commands: []*cli.Command{{Name: "serve", Flags: daemonFlags(),
			Action: func(c *cli.Context) error { _, err = Configure(c, ConfigFile{Path: tc.path}); return nil }}}}
		if e := app.Run([]string{"d", "serve"}); e != nil {
			t.Fatal(e)
		}
		var u UsageError
		var ce *ConfigError
		if !errors.As(err, &u) || errors.Is(err, ErrBadConfig) != tc.bad || errors.As(err, &ce) != tc.bad {
			t.Errorf("%s: %#v: usage %v, ErrBadConfig %v, ConfigError %v", name, err, errors.As(err, &u), errors.Is(err, ErrBadConfig), errors.As(err, &ce))
		}
		if !tc.bad && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v is not fs.ErrNotExist", name, err)
		}
	}
}

// TestConfigureLegacyJSON: with LegacyJSON, a file that starts with "{" is
// read as nixfleet-cp's old JSON format (values as text), with a warning;
// a TOML file is read as TOML.
func TestConfigureLegacyJSON(t *testing.T) {
	dir := t.TempDir()
	checked := 0
	cf := ConfigFile{LegacyJSON: func(data []byte) error {
		checked++
		if bytes.Contains(data, []byte(`"listen":"a","listen"`)) {
			return errors.New("duplicate member")
		}
		return nil
	}}

	file := writeFile(t, dir, "cp.conf", ` {"listen": "127.0.0.1:1", "tick-interval": "1m", "min-hosts": 3, "rate": 0.5, "insecure-dev": true}`)
	code, stderr, got := runDaemon(t, cf, "--config", file, "--min-hosts", "4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := with(map[string]string{"listen": "127.0.0.1:1", "tick-interval": "1m0s", "min-hosts": "4", "rate": "0.5", "insecure-dev": "true"})
	if diff := cmp.Diff(want, got.Values); diff != "" {
		t.Errorf("values (-want +got):\n%s", diff)
	}
	if got.From["listen"] != file || got.From["min-hosts"] != "--min-hosts" {
		t.Errorf("sources %v", got.From)
	}
	if len(got.Warning) != 1 || !strings.Contains(got.Warning[0], file+": a JSON config file is deprecated") {
		t.Errorf("warnings %q", got.Warning)
	}

	for name, tc := range map[string]struct{ in, err string }{
		"unknown key": {`{"lissen": "x"}`, `: unknown key "lissen"`},
		"bad value":   {`{"tick-interval": 30}`, `: "tick-interval": invalid value "30": parse error`},
		"malformed":   {`{"listen":`, `: unexpected end of JSON input`},
		"checked":     {`{"listen":"a","listen":"b"}`, `: duplicate member`},
	} {
		file := writeFile(t, dir, "bad.json", tc.in)
		code, stderr, _ := runDaemon(t, cf, "--config", file)
		if want := "d: bad config file: " + file + tc.err; code != 2 || !strings.HasPrefix(stderr, want) {
			t.Errorf("%s: exit %d, stderr %q; want 2 and %q", name, code, stderr, want)
		}
	}

	file = writeFile(t, dir, "cp.toml", "listen = \"127.0.0.1:5\"\n")
	code, stderr, got = runDaemon(t, cf, "--config", file)
	if code != 0 || got.Values["listen"] != "127.0.0.1:5" || len(got.Warning) != 0 {
		t.Errorf("TOML with LegacyJSON: exit %d, %s, %v, warnings %q", code, stderr, got.Values, got.Warning)
	}
}

// TestConfigureOperator: the operator CLI's way: its own keys, flags at
// every level (the innermost given wins), environment variables read by
// Configure (a flag at any level beats them), empty values unset, and file
// names relative to the file.
func TestConfigureOperator(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "config.toml", "cp_url = \"https://file\"\nkey = \"op_key\"\nca = \"~/ca.pem\"\nname = \"\"\n")
	conn := func() []cli.Flag {
		return []cli.Flag{&cli.StringFlag{Name: "cp"}, &cli.StringFlag{Name: "key"}, &cli.StringFlag{Name: "ca"}, &cli.StringFlag{Name: "name"}}
	}
	run := func(env map[string]string, args ...string) (int, string, settings) {
		var got settings
		cf := ConfigFile{
			Path:         file,
			Keys:         []Key{{"cp_url", "cp"}, {"key", "key"}, {"name", "name"}, {"ca", "ca"}},
			Env:          map[string]string{"cp": "OP_CP_URL", "key": "OP_KEY", "name": "OP_NAME", "ca": "OP_CA"},
			Paths:        []string{"key", "ca"},
			EmptyIsUnset: true,
			Getenv:       func(k string) string { return env[k] },
		}
		leaf := &cli.Command{Name: "list", Flags: conn(), Action: func(c *cli.Context) error {
			src, err := Configure(c, cf)
			got = snapshot(c, src, []string{"cp", "key", "name", "ca"})
			return err
		}}
		app := &cli.App{Name: "op", Flags: conn(), Commands: []*cli.Command{{Name: "rollout", Flags: conn(), Subcommands: []*cli.Command{leaf}}}}
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), app, append([]string{"op"}, args...), &stdout, &stderr)
		return code, stderr.String(), got
	}
	home := map[string]string{"HOME": "/home/op"}
	withEnv := map[string]string{"HOME": "/home/op", "OP_CP_URL": "https://env", "OP_KEY": "", "OP_NAME": "env-name"}

	tests := []struct {
		name       string
		env        map[string]string
		args       []string
		cp, key    string
		name_, ca  string
		from       map[string]string
		errContain string
	}{
		{name: "the file", env: home, args: []string{"rollout", "list"},
			cp: "https://file", key: filepath.Join(dir, "op_key"), ca: "/home/op/ca.pem",
			from: map[string]string{"cp": file + ":1", "key": file + ":2", "ca": file + ":3"}},
		{name: "the environment over the file, empty unset", env: withEnv, args: []string{"rollout", "list"},
			cp: "https://env", key: filepath.Join(dir, "op_key"), name_: "env-name", ca: "/home/op/ca.pem",
			from: map[string]string{"cp": "OP_CP_URL", "key": file + ":2", "name": "OP_NAME", "ca": file + ":3"}},
		{name: "a flag before the command over the environment", env: withEnv, args: []string{"--cp", "https://top", "rollout", "list", "--key", "k"},
			cp: "https://top", key: "k", name_: "env-name", ca: "/home/op/ca.pem",
			from: map[string]string{"cp": "--cp", "key": "--key", "name": "OP_NAME", "ca": file + ":3"}},
		{name: "the innermost flag", env: withEnv, args: []string{"--cp", "https://top", "rollout", "--cp", "https://mid", "list"},
			cp: "https://mid", key: filepath.Join(dir, "op_key"), name_: "env-name", ca: "/home/op/ca.pem",
			from: map[string]string{"cp": "--cp", "key": file + ":2", "name": "OP_NAME", "ca": file + ":3"}},
		{name: "an empty flag is unset", env: withEnv, args: []string{"rollout", "list", "--cp", ""},
			cp: "https://env", key: filepath.Join(dir, "op_key"), name_: "env-name", ca: "/home/op/ca.pem",
			from: map[string]string{"cp": "OP_CP_URL", "key": file + ":2", "name": "OP_NAME", "ca": file + ":3"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr, got := run(tc.env, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			want := map[string]string{"cp": tc.cp, "key": tc.key, "name": tc.name_, "ca": tc.ca}
			if diff := cmp.Diff(want, got.Values); diff != "" {
				t.Errorf("values (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.from, got.From); diff != "" {
				t.Errorf("sources (-want +got):\n%s", diff)
			}
		})
	}

	bad := writeFile(t, dir, "bad.toml", "cp_url = \"x\"\ncp = \"y\"\n")
	var stderr bytes.Buffer
	app := &cli.App{Name: "op", Flags: conn(), Action: func(c *cli.Context) error {
		_, err := Configure(c, ConfigFile{Path: bad, Keys: []Key{{"cp_url", "cp"}, {"key", "key"}}})
		return err
	}}
	if code := Run(context.Background(), app, []string{"op"}, &bytes.Buffer{}, &stderr); code != 2 ||
		stderr.String() != "op: bad config file: "+bad+":2: unknown key \"cp\" (known: cp_url, key)\n" {
		t.Errorf("unknown key: exit %d, %q", code, stderr.String())
	}
}

// TestConfigureAliases: an alias sets its key's flag and is listed in no
// message; a file that gives one setting under two names is refused at the
// second, naming the first and its line.
func TestConfigureAliases(t *testing.T) {
	dir := t.TempDir()
	cf := ConfigFile{Keys: []Key{{"cp", "cp"}, {"key", "key"}}, Aliases: []Key{{"cp_url", "cp"}}}
	run := func(file string) (int, string, settings) {
		var got settings
		app := &cli.App{Name: "op", Flags: []cli.Flag{&cli.StringFlag{Name: "cp"}, &cli.StringFlag{Name: "key"}},
			Action: func(c *cli.Context) error {
				cf := cf
				cf.Path = file
				src, err := Configure(c, cf)
				got = snapshot(c, src, []string{"cp", "key"})
				return err
			}}
		var stderr bytes.Buffer
		code := Run(context.Background(), app, []string{"op"}, &bytes.Buffer{}, &stderr)
		return code, stderr.String(), got
	}
	for _, tc := range []struct {
		name, in, cp, from string
	}{
		{name: "the key", in: "key = \"k\"\ncp = \"https://new\"\n", cp: "https://new", from: ":2"},
		{name: "the alias", in: "cp_url = \"https://old\"\n", cp: "https://old", from: ":1"},
	} {
		file := writeFile(t, dir, "ok.toml", tc.in)
		code, stderr, got := run(file)
		if code != 0 || got.Values["cp"] != tc.cp || got.From["cp"] != file+tc.from {
			t.Errorf("%s: exit %d (%s), cp %q from %q; want %q from %q", tc.name, code, stderr, got.Values["cp"], got.From["cp"], tc.cp, file+tc.from)
		}
	}
	for _, tc := range []struct {
		name, in, msg string
	}{
		{name: "alias then key", in: "cp_url = \"a\"\n# x\ncp = \"b\"\n", msg: `:3: "cp" and "cp_url" (line 1) are the same setting: keep one, "cp"`},
		{name: "key then alias", in: "cp = \"a\"\ncp_url = \"b\"\n", msg: `:2: "cp_url" and "cp" (line 1) are the same setting: keep one, "cp"`},
		{name: "empty values count", in: "cp = \"\"\ncp_url = \"\"\n", msg: `:2: "cp_url" and "cp" (line 1)`},
		{name: "unknown key lists no alias", in: "url = \"a\"\n", msg: `:1: unknown key "url" (known: cp, key)`},
	} {
		file := writeFile(t, dir, "bad.toml", tc.in)
		code, stderr, _ := run(file)
		if want := "op: bad config file: " + file + tc.msg; code != 2 || !strings.HasPrefix(stderr, want) {
			t.Errorf("%s: exit %d, %q; want 2 and %q", tc.name, code, stderr, want)
		}
	}
}

// FuzzDecodeTOML: decoding never panics; an error names the file; every
// key that decodes appears once, in the order of its lines, each within the
// file.
func FuzzDecodeTOML(f *testing.F) {
	for _, s := range []string{
		"", "# c\n", `cp_url = "https://x"`, "a = 'b' # c\r\n", "a.b.c = 1\n[t]\nx = [1, 2]\n", "[[a]]\nb = 1\n",
		"a = \"\"\"\nx\"\"\"\nb = {c = 1}", "a = 1\na = 2", "a = \"\x01\"", "\uFEFFa = 1979-05-27T07:32:00Z",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return // large inputs only slow the fuzzer
		}
		entries, _, err := decodeTOML("f.toml", data)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Path != "f.toml" {
				t.Fatalf("error without the file: %v", err)
			}
			return
		}
		lines := bytes.Count(data, []byte("\n")) + 1
		seen := map[string]bool{}
		for i, e := range entries {
			if seen[e.key] {
				t.Fatalf("key %q twice", e.key)
			}
			seen[e.key] = true
			if e.line < 1 || e.line > lines {
				t.Fatalf("key %q on line %d of a %d-line file", e.key, e.line, lines)
			}
			if i > 0 && e.line <= entries[i-1].line {
				t.Fatalf("key %q on line %d after %q on line %d", e.key, e.line, entries[i-1].key, entries[i-1].line)
			}
		}
	})
}
