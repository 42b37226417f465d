package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// statusEnv names the file in which the nixfleet-demo command of the
// scripts records its exit code, for the status command to check.
const statusEnv = "NIXFLEET_TEST_STATUS_FILE"

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"nixfleet-demo": func() {
			code := run(context.Background(), os.Args, os.Stdout, os.Stderr)
			if f := os.Getenv(statusEnv); f != "" {
				if err := os.WriteFile(f, []byte(strconv.Itoa(code)), 0o644); err != nil {
					fmt.Fprintf(os.Stderr, "nixfleet-demo test wrapper: recording the exit code: %v\n", err)
					os.Exit(125)
				}
			}
			os.Exit(code)
		},
	})
}

// TestScripts runs the scripts of testdata/script. Besides the standard
// testscript commands, scripts can use:
//
//	status CODE          the last nixfleet-demo command exited with CODE
//	jsonindent SRC DST   re-indent the JSON of SRC into DST, tokens unchanged
func TestScripts(t *testing.T) {
	t.Parallel()
	testscript.Run(t, testscript.Params{
		Dir:                filepath.Join("testdata", "script"),
		RequireUniqueNames: true,
		ContinueOnError:    true,
		Setup: func(env *testscript.Env) error {
			env.Setenv(statusEnv, filepath.Join(env.WorkDir, ".tmp", "nixfleet-demo-status"))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"status":     cmdStatus,
			"jsonindent": cmdJSONIndent,
		},
	})
}

// cmdStatus checks the exit code of the last nixfleet-demo command, and
// forgets it, so that each status line checks a command of its own.
func cmdStatus(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: status CODE")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	f := ts.Getenv(statusEnv)
	data, err := os.ReadFile(f)
	if errors.Is(err, fs.ErrNotExist) {
		ts.Fatalf("no nixfleet-demo command ran since the last status check")
	}
	ts.Check(err)
	ts.Check(os.Remove(f))
	if got, _ := strconv.Atoi(string(data)); got != want {
		ts.Fatalf("nixfleet-demo exited with %d, want %d", got, want)
	}
}

func cmdJSONIndent(ts *testscript.TestScript, neg bool, args []string) {
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
