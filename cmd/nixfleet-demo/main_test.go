package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/internal/testkit/scriptkit"
	"github.com/nixfleet/nixfleet/internal/testkit/testbin"

	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"nixfleet-demo": scriptkit.Command("nixfleet-demo", func() int {
			// As main: an interrupt ends a demo kept running.
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return run(ctx, os.Args, os.Stdout, os.Stderr)
		}),
	})
}

// TestScripts runs the scripts of testdata/script. Besides the standard
// testscript commands, scripts can use:
//
//	status CODE          the last nixfleet-demo command exited with CODE
//	jsonindent SRC DST   re-indent the JSON of SRC into DST, tokens unchanged
//	waitdemo DURATION    wait until a demo started with --keep in this
//	                     script is up, and set $DEMO to its directory
//
// The operator CLI, nixfleet, is on PATH too, built for the test.
func TestScripts(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	if _, err := testbin.Build(bin, "github.com/nixfleet/nixfleet/cmd/nixfleet"); err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir:                filepath.Join("testdata", "script"),
		RequireUniqueNames: true,
		ContinueOnError:    true,
		Setup: func(env *testscript.Env) error {
			scriptkit.Setup(env, "nixfleet-demo")
			env.Setenv("PATH", bin+string(os.PathListSeparator)+env.Getenv("PATH"))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"status":     scriptkit.Status("nixfleet-demo"),
			"jsonindent": scriptkit.JSONIndent,
			"waitdemo":   waitDemo,
		},
	})
}

// waitDemo is the script command "waitdemo DURATION".
func waitDemo(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitdemo DURATION")
	}
	d, err := time.ParseDuration(args[0])
	ts.Check(err)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		found, err := filepath.Glob(filepath.Join(ts.Getenv("TMPDIR"), "nixfleet-demo-*", "demo.json"))
		ts.Check(err)
		if len(found) == 1 {
			ts.Setenv("DEMO", filepath.Dir(found[0]))
			return
		}
		if len(found) > 1 {
			ts.Fatalf("more than one demo: %s", strings.Join(found, ", "))
		}
	}
	ts.Fatalf("no demo kept running within %s", d)
}
