package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nixfleet/nixfleet/internal/testkit/scriptkit"

	"github.com/rogpeppe/go-internal/testscript"
)

var update = flag.Bool("update", false, "rewrite the golden sections of testdata/script/*.txtar that a cmp finds different")

// sampleFleets are the unsigned sample fleets every script finds in its
// work directory, each under its own name: two-channels.json (channels
// edge and stable) and field-and-core.json (field, rolled out all at once,
// next to core's canary).
var sampleFleets = filepath.Join("..", "..", "testdata", "fleets", "*.json")

// sampleTick is a reconciler input every script finds as tick-input.json:
// a golden case in which a disruption budget holds a host.
var sampleTick = filepath.Join("..", "..", "testdata", "reconciler", "rule04-gate-budget", "input.json")

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"nixfleet": scriptkit.Command("nixfleet", func() int {
			return run(context.Background(), os.Args, os.Stdin, os.Stdout, os.Stderr)
		}),
	})
}

// TestScripts runs the CLI scripts of testdata/script. Besides the standard
// testscript commands, scripts can use:
//
//	status CODE              the last nixfleet command exited with CODE
//	filemode FILE MODE       FILE's permission bits are MODE (octal)
//	chomp FILE               remove the one trailing newline of FILE
//	unescape SRC DST         copy SRC to DST, turning each \xHH into that byte
//	jsonindent SRC DST       re-indent the JSON of SRC into DST, tokens unchanged
//	jsonedit SRC DST OP...   edit a JSON document; OP is "set PATH JSON" or "del PATH",
//	                         PATH dot-separated member names and array indexes
//	fleet start [insecure]   start a control plane with a fleet and simulated hosts
//	                         (fleet_test.go), and point NIXFLEET_CP_URL, NIXFLEET_CA
//	                         and NIXFLEET_KEY at it
//	fleet settle ID STATE    check the simulated hosts in until rollout ID is in STATE
//	fleet push VERSION N     sign VERSION as ciCommit N, promote it on every channel, and
//	                         wait until a tick decided about it (sets STABLE<N>, EDGE<N>)
//	fleet follow CH GATES H… from the next push on, add channel CH with hosts H… (no agent
//	                         runs on them), after channel GATES (a channel edge)
//	fleet point CH N         move channel CH back to ciCommit N's commit, and wait until
//	                         the release log lists that push
//	fleet resign VERSION N   sign VERSION as ciCommit N anew, promote it on every channel,
//	                         and wait until the release log lists that push
//	normalize [-ids] SRC DST copy SRC to DST with times, hashes, intent ids (and event ids) replaced
//	webserver KIND VAR       start an HTTP server on 127.0.0.1 that is not a control plane,
//	                         and put its URL in VAR: KIND html (a web page on every path,
//	                         404 under /v1/) or json (another JSON API's answers)
//
// DEAD_CP_URL is an https URL on which nothing listens.
func TestScripts(t *testing.T) {
	t.Parallel()
	fleetFiles, err := filepath.Glob(sampleFleets)
	if err != nil || len(fleetFiles) < 2 {
		t.Fatalf("sample fleets %s: %v, %d found", sampleFleets, err, len(fleetFiles))
	}
	fleets := map[string][]byte{}
	for _, file := range fleetFiles {
		if fleets[filepath.Base(file)], err = os.ReadFile(file); err != nil {
			t.Fatal(err)
		}
	}
	tickInput, err := os.ReadFile(sampleTick)
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir:                filepath.Join("testdata", "script"),
		RequireUniqueNames: true,
		UpdateScripts:      *update,
		// Run every line of a failing script, so that one failure does not
		// hide the state of everything after it.
		ContinueOnError: true,
		Setup: func(env *testscript.Env) error {
			scriptkit.Setup(env, "nixfleet")
			dead, err := deadURL()
			if err != nil {
				return err
			}
			env.Setenv("DEAD_CP_URL", dead) // nothing listens there
			if err := os.WriteFile(filepath.Join(env.WorkDir, "tick-input.json"), tickInput, 0o644); err != nil {
				return err
			}
			for name, fleet := range fleets {
				f, err := os.OpenFile(filepath.Join(env.WorkDir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
				if err != nil {
					return err
				}
				if _, err := f.Write(fleet); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
			}
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"status":     scriptkit.Status("nixfleet"),
			"filemode":   cmdFilemode,
			"chomp":      cmdChomp,
			"unescape":   cmdUnescape,
			"jsonindent": scriptkit.JSONIndent,
			"jsonedit":   cmdJSONEdit,
			"fleet":      cmdFleet,
			"normalize":  cmdNormalize,
			"webserver":  cmdWebserver,
		},
	})
}

func cmdFilemode(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: filemode FILE MODE")
	}
	want, err := strconv.ParseUint(args[1], 8, 32)
	ts.Check(err)
	fi, err := os.Lstat(ts.MkAbs(args[0]))
	ts.Check(err)
	switch got := fi.Mode().Perm(); {
	case !neg && got != fs.FileMode(want):
		ts.Fatalf("%s has mode %#o, want %#o", args[0], got, want)
	case neg && got == fs.FileMode(want):
		ts.Fatalf("%s has mode %#o, want any other", args[0], got)
	}
}

func cmdChomp(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: chomp FILE")
	}
	name := ts.MkAbs(args[0])
	data, err := os.ReadFile(name)
	ts.Check(err)
	trimmed, ok := bytes.CutSuffix(data, []byte("\n"))
	if !ok {
		ts.Fatalf("%s does not end with a newline", args[0])
	}
	ts.Check(os.WriteFile(name, trimmed, 0o644))
}

var hexEscape = regexp.MustCompile(`\\x[0-9a-fA-F]{2}`)

func cmdUnescape(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: unescape SRC DST")
	}
	data, err := os.ReadFile(ts.MkAbs(args[0]))
	ts.Check(err)
	out := hexEscape.ReplaceAllFunc(data, func(esc []byte) []byte {
		b, _ := strconv.ParseUint(string(esc[2:]), 16, 8)
		return []byte{byte(b)}
	})
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), out, 0o644))
}

func cmdJSONEdit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: jsonedit SRC DST [set PATH JSON | del PATH]...")
	}
	doc := decodeJSON(ts, ts.ReadFile(args[0]))
	for ops := args[2:]; len(ops) > 0; {
		switch {
		case ops[0] == "set" && len(ops) >= 3:
			ts.Check(jsonSet(&doc, strings.Split(ops[1], "."), decodeJSON(ts, ops[2]), false))
			ops = ops[3:]
		case ops[0] == "del" && len(ops) >= 2:
			ts.Check(jsonSet(&doc, strings.Split(ops[1], "."), nil, true))
			ops = ops[2:]
		default:
			ts.Fatalf("jsonedit: bad operation %q", ops)
		}
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), append(out, '\n'), 0o644))
}

func decodeJSON(ts *testscript.TestScript, s string) any {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		ts.Fatalf("jsonedit: %q: %v", s, err)
	}
	return v
}

// jsonSet replaces the member or element at path by v, or deletes the
// member when del is set. It must exist, so a mistyped path fails rather
// than add a member; array elements cannot be deleted.
func jsonSet(doc *any, path []string, v any, del bool) error {
	if len(path) == 0 {
		return errors.New("jsonedit: empty path")
	}
	parent := *doc
	for i, seg := range path[:len(path)-1] {
		switch p := parent.(type) {
		case map[string]any:
			next, ok := p[seg]
			if !ok {
				return fmt.Errorf("jsonedit: %s does not exist", strings.Join(path[:i+1], "."))
			}
			parent = next
		case []any:
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 || n >= len(p) {
				return fmt.Errorf("jsonedit: %s does not exist", strings.Join(path[:i+1], "."))
			}
			parent = p[n]
		default:
			return fmt.Errorf("jsonedit: %s is not an object or array", strings.Join(path[:i], "."))
		}
	}
	last := path[len(path)-1]
	switch p := parent.(type) {
	case map[string]any:
		if _, ok := p[last]; !ok {
			return fmt.Errorf("jsonedit: %s does not exist", strings.Join(path, "."))
		}
		if del {
			delete(p, last)
		} else {
			p[last] = v
		}
		return nil
	case []any:
		n, err := strconv.Atoi(last)
		if err != nil || n < 0 || n >= len(p) || del {
			return fmt.Errorf("jsonedit: cannot set or delete %s", strings.Join(path, "."))
		}
		p[n] = v
		return nil
	}
	return fmt.Errorf("jsonedit: %s is not an object or array", strings.Join(path[:len(path)-1], "."))
}

// notOurs is what the webserver script command's servers answer: nothing
// in it may reach an error line of nixfleet.
const notOurs = "body-of-another-server"

func cmdWebserver(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 || (args[0] != "html" && args[0] != "json") {
		ts.Fatalf("usage: webserver html|json VAR")
	}
	kind := args[0]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if kind == "json" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"data": [], "note": %q}`+"\n", notOurs)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			w.WriteHeader(http.StatusNotFound)
		}
		fmt.Fprintf(w, "<!doctype html>\n<html><body><h1>%s</h1></body></html>\n", notOurs)
	}))
	ts.Defer(srv.Close)
	ts.Setenv(args[1], srv.URL)
}
