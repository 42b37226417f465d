package cliapp

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/urfave/cli/v2"
)

// MaxConfigBytes bounds a configuration file: a larger one is a
// [ConfigError], read no further.
const MaxConfigBytes = 1 << 20

// ErrBadConfig is in the chain of every error [Configure] returns about a
// configuration file's contents (a [ConfigError]), and of no other.
var ErrBadConfig = errors.New("bad config file")

// ConfigError is a configuration file that cannot be used: it is not TOML,
// or holds a key the command does not know or a value of the wrong type.
// Line is the line of the problem, 0 when it is not known.
type ConfigError struct {
	Path string
	Line int
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%v: %s:%d: %s", ErrBadConfig, e.Path, e.Line, e.Msg)
	}
	return fmt.Sprintf("%v: %s: %s", ErrBadConfig, e.Path, e.Msg)
}

// Unwrap makes a ConfigError an [ErrBadConfig].
func (e *ConfigError) Unwrap() error { return ErrBadConfig }

// Key is a key of a configuration file and the flag it sets.
type Key struct{ Name, Flag string }

// ConfigFile says where a command's configuration file is and what it may
// hold. The zero value, with Path set, is the daemons' file: every flag of
// the command (but --config and --help) under its own name, environment
// variables read by urfave/cli (the flags' EnvVars).
type ConfigFile struct {
	// Path is the file; "" for none.
	Path string
	// Optional makes a missing file no file (a default path) rather than
	// an error.
	Optional bool
	// Keys are the keys the file may hold, in the order an unknown key's
	// message lists them. Nil: each flag of the command (but config and
	// help) under its own name.
	Keys []Key
	// Aliases are other names of keys: older spellings the file may still
	// use. Each sets its flag as the key does; no message lists them.
	Aliases []Key
	// Env maps flags whose environment variable Configure reads itself,
	// rather than urfave/cli (EnvVars), to that variable. Such a flag
	// given at any level of the command line wins over the variable, which
	// EnvVars cannot express; an empty variable is unset.
	Env map[string]string
	// Paths are flags whose values in the file are file names: relative
	// to the file's directory, with a leading "~/" as $HOME.
	Paths []string
	// EmptyIsUnset makes an empty string, from a flag, the environment
	// (Env) or the file, count as no value.
	EmptyIsUnset bool
	// LegacyJSON, when set, reads a file whose first non-blank character
	// is "{" as the deprecated JSON format (an object whose keys are flag
	// names, each value set as its text), after this check of its syntax.
	// Such a file adds a deprecation warning to the Sources.
	LegacyJSON func(data []byte) error
	// Getenv reads the environment for Env and "~/"; nil is os.Getenv.
	Getenv func(string) string
	// Sections are the tables the file may hold besides the flags' keys,
	// by their top-level key (which no flag may have), each read by its
	// function ([Section]). Configure calls the function of each table
	// the file holds, in the file's order, after it set the flags; an
	// error it returns ends Configure, as a usage error (a ConfigError at
	// the table's line unless it is one already: Section.Errorf makes
	// them). A legacy JSON file cannot hold them.
	Sections map[string]func(*Section) error
}

// Sources is what [Configure] found: where each setting came from, and
// warnings for the command to log.
type Sources struct {
	from     map[string]string
	Warnings []string
}

// Of says where a flag's value came from: "--NAME" when it was given on
// the command line or, for a flag with EnvVars, by urfave/cli from its
// environment variable; the variable's name for a flag of ConfigFile.Env;
// "PATH:LINE" (or "PATH" for a legacy JSON file) for the file; "" for the
// flag's default.
func (s *Sources) Of(flag string) string {
	if s == nil {
		return ""
	}
	return s.from[flag]
}

// Configure gives the flags of c's command their values from the
// environment (ConfigFile.Env) and the configuration file, each where no
// earlier source set it: flags, then the environment, then the file (see
// the package documentation). It sets them with c.Set, so the command reads
// them as usual. Every error it returns is a [UsageError] (but for a
// ConfigFile whose Keys name a flag the command lacks, a bug); one about
// the file's contents is also a [ConfigError], and a file that cannot be
// read is the read's error.
func Configure(c *cli.Context, cf ConfigFile) (*Sources, error) {
	getenv := cf.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	src := &Sources{from: map[string]string{}}
	keys, err := cf.keys(c)
	if err != nil {
		return src, err
	}
	for _, flag := range slices.Concat(flagsOf(keys), slices.Sorted(maps.Keys(cf.Env))) {
		if given(c, flag, cf.EmptyIsUnset) {
			src.from[flag] = "--" + flag
		}
	}

	for _, flag := range slices.Sorted(maps.Keys(cf.Env)) {
		name := cf.Env[flag]
		v := getenv(name)
		if src.from[flag] != "" || v == "" {
			continue
		}
		if err := c.Set(flag, v); err != nil {
			return src, Usage(fmt.Errorf("%s: invalid value %q: %w", name, v, err))
		}
		src.from[flag] = name
	}

	if cf.Path == "" {
		return src, nil
	}
	data, err := readConfig(cf.Path)
	if errors.Is(err, fs.ErrNotExist) && cf.Optional {
		return src, nil
	}
	if err != nil {
		return src, Usage(err)
	}
	var entries []entry
	var lines map[string]int
	if cf.LegacyJSON != nil && isJSONObject(data) {
		entries, err = decodeJSON(cf.Path, data, cf.LegacyJSON)
		src.Warnings = append(src.Warnings, fmt.Sprintf("%s: a JSON config file is deprecated: write the same keys in TOML (rfcs/0006)", cf.Path))
	} else {
		entries, lines, err = decodeTOML(cf.Path, data)
	}
	if err != nil {
		return src, Usage(err)
	}

	flagOf := map[string]string{}
	for _, k := range slices.Concat(keys, cf.Aliases) {
		flagOf[k.Name] = k.Flag
	}
	var sections []entry
	setBy := map[string]entry{} // by flag: the entry of the file that set it
	for _, e := range entries {
		if _, ok := cf.Sections[e.key]; ok {
			sections = append(sections, e)
			continue
		}
		flag, ok := flagOf[e.key]
		if !ok {
			return src, Usage(&ConfigError{Path: cf.Path, Line: e.line, Msg: cf.unknownKey(c, e.key, keys)})
		}
		if first, twice := setBy[flag]; twice {
			return src, Usage(&ConfigError{Path: cf.Path, Line: e.line, Msg: sameSetting(first, e, keyOf(keys, flag))})
		}
		setBy[flag] = e
		vals, msg := e.text(flagDef(c, flag))
		if msg != "" {
			return src, Usage(&ConfigError{Path: cf.Path, Line: e.line, Msg: fmt.Sprintf("%q %s", e.key, msg)})
		}
		if src.from[flag] != "" || (cf.EmptyIsUnset && len(vals) == 1 && vals[0] == "") {
			continue
		}
		if !e.raw && slices.Contains(cf.Paths, flag) {
			vals[0] = resolvePath(cf.Path, vals[0], getenv)
		}
		for _, v := range vals {
			if err := c.Set(flag, v); err != nil {
				return src, Usage(&ConfigError{Path: cf.Path, Line: e.line, Msg: fmt.Sprintf("%q: invalid value %q: %v", e.key, v, err)})
			}
		}
		src.from[flag] = cf.Path
		if e.line > 0 {
			src.from[flag] = fmt.Sprintf("%s:%d", cf.Path, e.line)
		}
	}
	if err := readSections(cf, lines, sections); err != nil {
		return src, err
	}
	return src, nil
}

// keyOf is the name keys give a flag (its first), "" when none does.
func keyOf(keys []Key, flag string) string {
	for _, k := range keys {
		if k.Flag == flag {
			return k.Name
		}
	}
	return ""
}

// sameSetting says that two keys of a file, first and then e, set one
// flag, whose key is named name.
func sameSetting(first, e entry, name string) string {
	where := ""
	if first.line > 0 {
		where = fmt.Sprintf(" (line %d)", first.line)
	}
	msg := fmt.Sprintf("%q and %q%s are the same setting: keep one", e.key, first.key, where)
	if name != "" {
		msg += fmt.Sprintf(", %q", name)
	}
	return msg
}

// readSections hands each table of ConfigFile.Sections the file holds to
// its function, with the lines of the file's keys (keyLines).
func readSections(cf ConfigFile, lines map[string]int, sections []entry) error {
	for _, e := range sections {
		if e.raw {
			return Usage(&ConfigError{Path: cf.Path, Msg: fmt.Sprintf("%q: a JSON config file cannot hold tables: write the file in TOML", e.key)})
		}
		m, ok := e.value.(map[string]any)
		if !ok {
			return Usage(&ConfigError{Path: cf.Path, Line: e.line, Msg: fmt.Sprintf("%q is %s; want a table", e.key, tomlType(e.value))})
		}
		sec := &Section{Name: e.key, File: cf.Path, value: m, lines: lines}
		if err := cf.Sections[e.key](sec); err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				err = &ConfigError{Path: cf.Path, Line: sec.Line(""), Msg: err.Error()}
			}
			return Usage(err)
		}
	}
	return nil
}

// keys returns cf.Keys, or the default: every flag of the command but
// config and help, under each of its names.
func (cf ConfigFile) keys(c *cli.Context) ([]Key, error) {
	for _, k := range cf.Aliases {
		if flagDef(c, k.Flag) == nil {
			return nil, fmt.Errorf("cliapp: config key %q names no flag --%s", k.Name, k.Flag)
		}
	}
	if cf.Keys != nil {
		for _, k := range cf.Keys {
			if flagDef(c, k.Flag) == nil {
				return nil, fmt.Errorf("cliapp: config key %q names no flag --%s", k.Name, k.Flag)
			}
		}
		return cf.Keys, nil
	}
	var keys []Key
	if c.Command == nil {
		return nil, nil
	}
	for _, f := range c.Command.Flags {
		names := f.Names()
		if slices.Contains(names, "config") || slices.Contains(names, "help") {
			continue
		}
		for _, n := range names {
			keys = append(keys, Key{Name: n, Flag: names[0]})
		}
	}
	return keys, nil
}

func (cf ConfigFile) unknownKey(c *cli.Context, key string, keys []Key) string {
	if cf.Keys == nil {
		name := c.App.Name
		if c.Command != nil && c.Command.Name != "" {
			name += " " + c.Command.Name
		}
		tables := ""
		if len(cf.Sections) > 0 {
			tables = ", and the tables " + strings.Join(slices.Sorted(maps.Keys(cf.Sections)), ", ")
		}
		return fmt.Sprintf("unknown key %q (the keys are the flags of %s: see --help%s)", key, name, tables)
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Name
	}
	return fmt.Sprintf("unknown key %q (known: %s)", key, strings.Join(names, ", "))
}

func flagsOf(keys []Key) []string {
	var out []string
	for _, k := range keys {
		if !slices.Contains(out, k.Flag) {
			out = append(out, k.Flag)
		}
	}
	return out
}

// given reports whether a flag was set before Configure: on the command
// line of c's command or of one above it, or by urfave/cli from the flag's
// EnvVars. With emptyIsUnset, the innermost such value must not be "".
func given(c *cli.Context, name string, emptyIsUnset bool) bool {
	l := innermost(c, name)
	if l == nil {
		return false
	}
	s, ok := l.Value(name).(string)
	return !(ok && emptyIsUnset && s == "")
}

// innermost is the context of the innermost command, c's or one above
// it, whose flag name was set (on the command line, from EnvVars, or by
// Configure); nil when none was.
func innermost(c *cli.Context, name string) *cli.Context {
	for _, l := range c.Lineage() {
		if l == nil || l.Command == nil {
			continue
		}
		if slices.Contains(l.LocalFlagNames(), name) {
			return l
		}
	}
	return nil
}

// LocalString is the value of a string flag that several levels of a
// command define (like the operator's --cp, accepted before the command
// and on it): the innermost set value, so that "app --cp X list --cp Y"
// is Y; set is false when no level was given it.
func LocalString(c *cli.Context, name string) (value string, set bool) {
	if l := innermost(c, name); l != nil {
		return l.String(name), true
	}
	return "", false
}

// flagDef finds the definition of a flag of c's command or of one above
// it, innermost first.
func flagDef(c *cli.Context, name string) cli.Flag {
	for _, l := range c.Lineage() {
		if l == nil || l.Command == nil {
			continue
		}
		for _, f := range l.Command.Flags {
			if slices.Contains(f.Names(), name) {
				return f
			}
		}
	}
	if c.App != nil {
		for _, f := range c.App.Flags {
			if slices.Contains(f.Names(), name) {
				return f
			}
		}
	}
	return nil
}

// readConfig reads a configuration file of at most MaxConfigBytes.
func readConfig(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxConfigBytes {
		return nil, &ConfigError{Path: path, Msg: fmt.Sprintf("larger than %d bytes", MaxConfigBytes)}
	}
	return data, nil
}

// entry is one top-level key of a configuration file and its value, as
// TOML decodes it (string, int64, float64, bool, time.Time, toml.LocalDate,
// toml.LocalTime, toml.LocalDateTime, []any, map[string]any), or as text
// (raw) from a legacy JSON file.
type entry struct {
	key   string
	value any
	raw   bool
	// line is the line of the key (keyLines), 0 when it is not known.
	line int
}

// text is the entry's value as the text(s) c.Set takes for flag f, or a
// message saying what is wrong with it: the TOML type must be the flag's
// (a string for a string or a duration, which must parse; an integer for
// an integer; an integer or a float for a float; a boolean; an array of
// strings for a list, one c.Set each).
func (e entry) text(f cli.Flag) (vals []string, msg string) {
	if e.raw {
		return []string{e.value.(string)}, ""
	}
	want := ""
	switch f.(type) {
	case *cli.StringFlag, *cli.PathFlag:
		if s, ok := e.value.(string); ok {
			return []string{s}, ""
		}
		want = "a string"
	case *cli.DurationFlag:
		if s, ok := e.value.(string); ok {
			if _, err := time.ParseDuration(s); err != nil {
				return nil, fmt.Sprintf("is not a duration: %v (want a string like \"30s\" or \"1h30m\")", err)
			}
			return []string{s}, ""
		}
		want = "a duration string like \"30s\""
	case *cli.BoolFlag:
		if b, ok := e.value.(bool); ok {
			return []string{strconv.FormatBool(b)}, ""
		}
		want = "a boolean (true or false)"
	case *cli.IntFlag, *cli.Int64Flag:
		if i, ok := e.value.(int64); ok {
			return []string{strconv.FormatInt(i, 10)}, ""
		}
		want = "an integer"
	case *cli.UintFlag, *cli.Uint64Flag:
		if i, ok := e.value.(int64); ok && i >= 0 {
			return []string{strconv.FormatInt(i, 10)}, ""
		}
		want = "a non-negative integer"
	case *cli.Float64Flag:
		switch v := e.value.(type) {
		case float64:
			return []string{strconv.FormatFloat(v, 'g', -1, 64)}, ""
		case int64:
			return []string{strconv.FormatInt(v, 10)}, ""
		}
		want = "a number"
	case *cli.StringSliceFlag:
		if a, ok := e.value.([]any); ok {
			vals = make([]string, 0, len(a))
			for _, x := range a {
				s, ok := x.(string)
				if !ok {
					return nil, fmt.Sprintf("holds %s; want an array of strings", tomlType(x))
				}
				vals = append(vals, s)
			}
			return vals, ""
		}
		want = "an array of strings"
	default:
		return nil, fmt.Sprintf("cannot be set in a config file (flag type %T)", f)
	}
	return nil, fmt.Sprintf("is %s; want %s", tomlType(e.value), want)
}

// tomlType names the TOML type of a decoded value.
func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case time.Time, toml.LocalDateTime:
		return "a date-time"
	case toml.LocalDate:
		return "a date"
	case toml.LocalTime:
		return "a time"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a %T", v)
}

// decodeTOML reads a TOML document's top-level keys in file order, and
// the line of every key (keyLines).
func decodeTOML(path string, data []byte) ([]entry, map[string]int, error) {
	var m map[string]any
	if err := toml.Unmarshal(trimBOM(data), &m); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, _ := de.Position()
			return nil, nil, &ConfigError{Path: path, Line: line, Msg: strings.TrimPrefix(de.Error(), "toml: ")}
		}
		return nil, nil, &ConfigError{Path: path, Msg: err.Error()}
	}
	lines := keyLines(data)
	out := make([]entry, 0, len(m))
	for k, v := range m {
		out = append(out, entry{key: k, value: v, line: lines[keyPath("", k)]})
	}
	slices.SortFunc(out, func(a, b entry) int { return cmp.Or(cmp.Compare(a.line, b.line), strings.Compare(a.key, b.key)) })
	return out, lines, nil
}

// isJSONObject reports whether data starts, after white space, with "{":
// a JSON object, which no TOML document starts with.
func isJSONObject(data []byte) bool {
	data = bytes.TrimLeft(data, " \t\r\n")
	return len(data) > 0 && data[0] == '{'
}

// decodeJSON reads a legacy JSON config file, an object, in key order:
// each value as its text (fmt.Sprint), as nixfleet-cp has read it.
func decodeJSON(path string, data []byte, check func([]byte) error) ([]entry, error) {
	if err := check(data); err != nil {
		return nil, &ConfigError{Path: path, Msg: err.Error()}
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, &ConfigError{Path: path, Msg: err.Error()}
	}
	out := make([]entry, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, entry{key: k, value: fmt.Sprint(m[k]), raw: true})
	}
	return out, nil
}

// resolvePath makes a file name from a config file absolute: "~/" is the
// home directory, and a relative name is relative to the file's directory.
func resolvePath(file, p string, getenv func(string) string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home := getenv("HOME"); home != "" {
			return filepath.Join(home, rest)
		}
	}
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(file), p)
}
