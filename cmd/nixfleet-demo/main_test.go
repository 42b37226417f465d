package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/nixfleet/nixfleet/internal/testkit/scriptkit"

	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"nixfleet-demo": scriptkit.Command("nixfleet-demo", func() int {
			return run(context.Background(), os.Args, os.Stdout, os.Stderr)
		}),
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
			scriptkit.Setup(env, "nixfleet-demo")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"status":     scriptkit.Status("nixfleet-demo"),
			"jsonindent": scriptkit.JSONIndent,
		},
	})
}
