package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/urfave/cli/v2"
)

// The operator commands' connection settings (rfcs/0009 §Configuration):
// each comes from a flag, else an environment variable, else a key of the
// config file.
var connSettings = []struct {
	flag, env, key, usage string
}{
	{"cp", "NIXFLEET_CP_URL", "cp_url", "control plane `URL`: https://…, or http://… for nixfleet-cp --insecure-dev"},
	{"key", "NIXFLEET_KEY", "key", "the operator's OpenSSH ed25519 private key `FILE`"},
	{"name", "NIXFLEET_NAME", "name", "operator `NAME` put in the client certificate (informational)"},
	{"ca", "NIXFLEET_CA", "ca", "PEM `FILE` of the CA that signs the control plane's certificate (default: system roots)"},
}

// configEnv names the config file when --config is not given.
const configEnv = "NIXFLEET_CONFIG"

// errBadConfig marks a config file that is not the TOML subset we read, or
// has a key we do not know.
var errBadConfig = errors.New("bad config file")

// connFlags are the connection flags, fresh for each command that takes
// them (urfave/cli keeps state in flag values).
func connFlags() []cli.Flag {
	fl := make([]cli.Flag, 0, len(connSettings)+1)
	for _, s := range connSettings {
		fl = append(fl, &cli.StringFlag{Name: s.flag, Category: "connection",
			Usage: fmt.Sprintf("%s (env %s, config %s)", s.usage, s.env, s.key)})
	}
	return append(fl, &cli.StringFlag{Name: "config", Category: "connection",
		Usage: "config `FILE` (env " + configEnv + "; default $XDG_CONFIG_HOME/nixfleet/config.toml, else ~/.config/nixfleet/config.toml)"})
}

// connection is where and as whom the operator commands connect.
type connection struct {
	URL, Key, Name, CA string
	// from says where each non-empty setting came from, by flag name, for
	// messages: "--cp", "NIXFLEET_CP_URL", "/path/config.toml:3".
	from map[string]string
}

// localFlag returns a flag's value from the innermost command that was
// given it, so that "nixfleet --cp X rollout list" and "nixfleet rollout
// list --cp X" both work and the latter wins.
func localFlag(c *cli.Context, name string) (string, bool) {
	for _, l := range c.Lineage() {
		if l == nil || l.Command == nil {
			continue
		}
		if slices.Contains(l.LocalFlagNames(), name) {
			return l.String(name), true
		}
	}
	return "", false
}

// resolveConnection reads the connection settings: flags, then the
// environment, then the config file.
func resolveConnection(c *cli.Context, getenv func(string) string) (connection, error) {
	conn := connection{from: map[string]string{}}
	file, err := loadConfig(c, getenv)
	if err != nil {
		return conn, err
	}
	for _, s := range connSettings {
		var v, from string
		if fv, ok := localFlag(c, s.flag); ok && fv != "" {
			v, from = fv, "--"+s.flag
		} else if ev := getenv(s.env); ev != "" {
			v, from = ev, s.env
		} else if e, ok := file.values[s.key]; ok {
			v, from = e.value, fmt.Sprintf("%s:%d", file.path, e.line)
			if s.flag == "key" || s.flag == "ca" {
				v = file.resolvePath(v, getenv)
			}
		}
		if v == "" {
			continue
		}
		conn.from[s.flag] = from
		switch s.flag {
		case "cp":
			conn.URL = v
		case "key":
			conn.Key = v
		case "name":
			conn.Name = v
		case "ca":
			conn.CA = v
		}
	}
	return conn, nil
}

// configFile is a read config file: its path ("" when there is none) and
// its values.
type configFile struct {
	path   string
	values map[string]configEntry
}

// resolvePath makes a file name from the config file absolute: "~/" is the
// home directory, and a relative name is relative to the file's directory.
func (f configFile) resolvePath(p string, getenv func(string) string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home := getenv("HOME"); home != "" {
			return filepath.Join(home, rest)
		}
	}
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(f.path), p)
}

// defaultConfigPath is $XDG_CONFIG_HOME/nixfleet/config.toml, else
// ~/.config/nixfleet/config.toml; "" when neither is known.
func defaultConfigPath(getenv func(string) string) string {
	if x := getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "nixfleet", "config.toml")
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".config", "nixfleet", "config.toml")
	}
	return ""
}

// loadConfig reads the config file: --config, else $NIXFLEET_CONFIG, else
// the default path. A missing default file is no file; a missing file that
// was named is an error.
func loadConfig(c *cli.Context, getenv func(string) string) (configFile, error) {
	path, explicit := localFlag(c, "config")
	if !explicit || path == "" {
		path, explicit = getenv(configEnv), true
	}
	if path == "" {
		path, explicit = defaultConfigPath(getenv), false
	}
	if path == "" {
		return configFile{}, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return configFile{}, nil
	}
	if err != nil {
		return configFile{}, err
	}
	entries, err := parseConfig(data)
	if err != nil {
		return configFile{}, fmt.Errorf("%w: %s:%w", errBadConfig, path, err)
	}
	f := configFile{path: path, values: map[string]configEntry{}}
	for _, e := range entries {
		if !knownConfigKey(e.key) {
			return configFile{}, fmt.Errorf("%w: %s:%d: unknown key %q (known: cp_url, key, name, ca)", errBadConfig, path, e.line, e.key)
		}
		f.values[e.key] = e
	}
	return f, nil
}

func knownConfigKey(k string) bool {
	for _, s := range connSettings {
		if s.key == k {
			return true
		}
	}
	return false
}

// configEntry is one "key = value" line of a config file.
type configEntry struct {
	key, value string
	line       int
}

// configLineError is a problem on one line of a config file.
type configLineError struct {
	line int
	msg  string
}

func (e *configLineError) Error() string { return fmt.Sprintf("%d: %s", e.line, e.msg) }

// parseConfig reads the subset of TOML (v1.0) the config file uses: blank
// lines, comments from # to the end of a line, and top-level lines
// `key = "string"` (a bare key; a basic string with TOML's escapes, or a
// 'literal string'), optionally followed by a comment. Anything else —
// tables, arrays, numbers, booleans, multi-line strings, dotted or quoted
// keys — is an error naming the line, as is a key given twice. Entries are
// returned in file order.
func parseConfig(data []byte) ([]configEntry, error) {
	text, _ := strings.CutPrefix(string(data), "\uFEFF") // a UTF-8 byte order mark
	var out []configEntry
	first := map[string]int{}
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		line = strings.TrimSuffix(line, "\r")
		if !utf8.ValidString(line) {
			return nil, &configLineError{n, "not valid UTF-8"}
		}
		e, ok, msg := parseConfigLine(line)
		if msg != "" {
			return nil, &configLineError{n, msg}
		}
		if !ok {
			continue
		}
		if prev, dup := first[e.key]; dup {
			return nil, &configLineError{n, fmt.Sprintf("key %q is already set on line %d", e.key, prev)}
		}
		first[e.key] = n
		e.line = n
		out = append(out, e)
	}
	return out, nil
}

// parseConfigLine parses one line: ok is false for a blank or comment
// line, msg says what is wrong.
func parseConfigLine(line string) (e configEntry, ok bool, msg string) {
	rest := strings.TrimLeft(line, " \t")
	if rest == "" || rest[0] == '#' {
		return e, false, checkComment(rest)
	}
	switch rest[0] {
	case '[':
		return e, false, "tables are not supported: only top-level key = \"string\" lines"
	case '"', '\'':
		return e, false, "quoted keys are not supported: use a bare key (letters, digits, _ and -)"
	}
	k := 0
	for k < len(rest) && isBareKeyByte(rest[k]) {
		k++
	}
	if k == 0 {
		return e, false, fmt.Sprintf("expected a key, found %q", firstRune(rest))
	}
	e.key, rest = rest[:k], strings.TrimLeft(rest[k:], " \t")
	switch {
	case rest == "":
		return e, false, fmt.Sprintf("expected = after key %q", e.key)
	case rest[0] == '.':
		return e, false, "dotted keys are not supported: only top-level key = \"string\" lines"
	case rest[0] != '=':
		return e, false, fmt.Sprintf("expected = after key %q, found %q", e.key, firstRune(rest))
	}
	rest = strings.TrimLeft(rest[1:], " \t")
	var err string
	switch {
	case strings.HasPrefix(rest, `"""`) || strings.HasPrefix(rest, `'''`):
		return e, false, "multi-line strings are not supported"
	case strings.HasPrefix(rest, `"`):
		e.value, rest, err = basicString(rest[1:])
	case strings.HasPrefix(rest, `'`):
		e.value, rest, err = literalString(rest[1:])
	case rest == "":
		return e, false, fmt.Sprintf("key %q has no value", e.key)
	default:
		return e, false, fmt.Sprintf("the value of %q must be a string in double quotes, like %s = \"…\"", e.key, e.key)
	}
	if err != "" {
		return e, false, err
	}
	rest = strings.TrimLeft(rest, " \t")
	if rest != "" && rest[0] != '#' {
		return e, false, fmt.Sprintf("unexpected %q after the value of %q", firstRune(rest), e.key)
	}
	if m := checkComment(rest); m != "" {
		return e, false, m
	}
	return e, true, ""
}

func isBareKeyByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-'
}

func firstRune(s string) string {
	r, _ := utf8.DecodeRuneInString(s)
	return string(r)
}

// checkComment refuses control characters other than tab in a comment, as
// TOML does.
func checkComment(s string) string {
	for _, r := range s {
		if isControl(r) {
			return fmt.Sprintf("control character %U in a comment", r)
		}
	}
	return ""
}

func isControl(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f }

// basicString reads a "…" string whose opening quote is consumed, and
// returns its value and what follows the closing quote.
func basicString(s string) (val, rest, msg string) {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"':
			return b.String(), s[i+1:], ""
		case r == '\\':
			if i+1 >= len(s) {
				return "", "", "unterminated string"
			}
			esc := s[i+1]
			i += 2
			switch esc {
			case 'b':
				b.WriteByte('\b')
			case 't':
				b.WriteByte('\t')
			case 'n':
				b.WriteByte('\n')
			case 'f':
				b.WriteByte('\f')
			case 'r':
				b.WriteByte('\r')
			case '"':
				b.WriteByte('"')
			case '\\':
				b.WriteByte('\\')
			case 'u', 'U':
				n := 4
				if esc == 'U' {
					n = 8
				}
				if i+n > len(s) {
					return "", "", fmt.Sprintf("\\%c needs %d hex digits", esc, n)
				}
				code, err := strconv.ParseUint(s[i:i+n], 16, 32)
				if err != nil || !utf8.ValidRune(rune(code)) {
					return "", "", fmt.Sprintf("\\%c%s is not a Unicode scalar value", esc, s[i:i+n])
				}
				b.WriteRune(rune(code))
				i += n
			default:
				return "", "", fmt.Sprintf("unknown escape \\%s", firstRune(s[i-1:]))
			}
			continue
		case isControl(r):
			return "", "", fmt.Sprintf("control character %U in a string (escape it)", r)
		}
		b.WriteRune(r)
		i += size
	}
	return "", "", "unterminated string"
}

// literalString reads a '…' string (no escapes) whose opening quote is
// consumed.
func literalString(s string) (val, rest, msg string) {
	end := strings.IndexByte(s, '\'')
	if end < 0 {
		return "", "", "unterminated string"
	}
	for _, r := range s[:end] {
		if isControl(r) {
			return "", "", fmt.Sprintf("control character %U in a string", r)
		}
	}
	return s[:end], s[end+1:], ""
}
