// Package scriptkit holds what the testscript suites of the commands
// share: a command run in-process that records its exit status, the
// status command that checks it, and jsonindent.
package scriptkit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/rogpeppe/go-internal/testscript"
)

// statusEnv names the file in which a command of the scripts records its
// exit status, for the status command to check.
const statusEnv = "NIXFLEET_TEST_STATUS_FILE"

// Command wraps a command's run function for testscript.Main: it runs,
// records its exit status for Status, and exits with it.
func Command(name string, run func() int) func() {
	return func() {
		code := run()
		if f := os.Getenv(statusEnv); f != "" {
			if err := os.WriteFile(f, []byte(strconv.Itoa(code)), 0o644); err != nil {
				fmt.Fprintf(os.Stderr, "%s test wrapper: recording the exit code: %v\n", name, err)
				os.Exit(125)
			}
		}
		os.Exit(code)
	}
}

// Setup points the scripts' commands at their status file; call it from
// testscript.Params.Setup.
func Setup(env *testscript.Env, name string) {
	env.Setenv(statusEnv, filepath.Join(env.WorkDir, ".tmp", name+"-status"))
}

// Status is the script command "status CODE": the last command that ran
// exited with CODE. The status is forgotten, so that each status line
// checks a command of its own.
func Status(name string) func(ts *testscript.TestScript, neg bool, args []string) {
	return func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) != 1 {
			ts.Fatalf("usage: status CODE")
		}
		want, err := strconv.Atoi(args[0])
		ts.Check(err)
		f := ts.Getenv(statusEnv)
		data, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			ts.Fatalf("no %s command ran since the last status check", name)
		}
		ts.Check(err)
		ts.Check(os.Remove(f))
		if got, _ := strconv.Atoi(string(data)); got != want {
			ts.Fatalf("%s exited with %d, want %d", name, got, want)
		}
	}
}

// JSONIndent is the script command "jsonindent SRC DST": the JSON of SRC
// re-indented into DST, its tokens unchanged.
func JSONIndent(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: jsonindent SRC DST")
	}
	data, err := os.ReadFile(ts.MkAbs(args[0]))
	ts.Check(err)
	var out bytes.Buffer
	ts.Check(json.Indent(&out, data, "", "    "))
	out.WriteByte('\n')
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), out.Bytes(), 0o644))
}
