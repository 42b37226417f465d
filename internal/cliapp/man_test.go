package cliapp

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestManCommand: `man` prints the program's page in the section asked,
// with its commands and every flag, as roff that groff renders without a
// warning; an argument is a usage error.
func TestManCommand(t *testing.T) {
	app := func() *cli.App {
		return &cli.App{Name: "demo-daemon", Usage: "a daemon", Description: "It serves.",
			Commands: []*cli.Command{{Name: "serve", Usage: "serve it", Flags: []cli.Flag{
				&cli.StringFlag{Name: "listen", Usage: "listen `ADDRESS`"},
				&cli.DurationFlag{Name: "tick-interval", Usage: "periodic tick"},
			}}, ManCommand(8)}}
	}
	var out, errs bytes.Buffer
	if code := Run(context.Background(), app(), []string{"demo-daemon", "man"}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	page := out.String()
	for _, want := range []string{`.TH demo-daemon 8`, "serve", "--listen", "--tick-interval", "It serves."} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q:\n%s", want, page)
		}
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Fatal("groff is not installed: run .ci/run as root, which installs Debian's groff-base")
	}
	cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = strings.NewReader(page)
	if warnings, err := cmd.CombinedOutput(); err != nil || len(warnings) > 0 {
		t.Errorf("groff: %v\n%s", err, warnings)
	}

	out.Reset()
	errs.Reset()
	if code := Run(context.Background(), app(), []string{"demo-daemon", "man", "extra"}, &out, &errs); code != 2 {
		t.Errorf("man with an argument: exit %d, want 2, a usage error (%s)", code, errs.String())
	}
}
