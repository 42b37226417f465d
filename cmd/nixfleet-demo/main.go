// Command nixfleet-demo runs nixfleet's demo (rfcs/0009 §The demo): a
// control plane and simulated hosts in this process, a good release rolled
// out and a bad one rolled back. It is a command of its own so that the
// operator CLI, nixfleet, does not carry a control plane.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/cmd/nixfleet-demo/internal/demo"
	"github.com/nixfleet/nixfleet/internal/cliapp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const name = "nixfleet-demo"

// run is the whole command: tests call it directly. An error is one line,
// "nixfleet-demo: <code>: <message>", then a hint when one helps; exit
// status 1 when the demo failed, 2 on bad flags or arguments.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var hint string
	usage := func(format string, args ...any) error {
		hint = fmt.Sprintf("run '%s --help' for usage", name)
		return cliapp.Usage(fmt.Errorf("usage: "+format, args...))
	}
	app := &cli.App{
		Name:  name,
		Usage: "watch a fleet of simulated hosts take a good release and refuse a bad one",
		UsageText: name + " [--hosts N] [--json] [--keep] [--timeout DURATION]\n" +
			name + " push [--bad] [--soak MINUTES] [--dir DIR]\n" +
			name + " promote [--dir DIR]",
		Description: "Runs everything in this process, in a temporary directory, on 127.0.0.1 only:\n" +
			"a fleet git repository with a CI key, a control plane (embedded SQLite, TLS)\n" +
			"and simulated agents (mutual TLS with their host keys). It signs and pushes\n" +
			"release v1 to two channels (prod follows staging; canary waves, database hosts\n" +
			"before web hosts, disruption budgets) and shows the rollout live until it\n" +
			"converges; then it pushes v2 to staging, whose canary fails its health probe,\n" +
			"and shows onHealthFailure rollback-and-halt roll it back.\n\n" +
			"Exit status 0 when v1 converged and v2 was rolled back, 1 otherwise (a\n" +
			"timeout, an unexpected state), 2 on bad flags. With --json, stdout is one\n" +
			"JSON document (\"rollouts\": every rollout's id and final state) and the\n" +
			"progress goes to stderr. With --keep, everything keeps running until Ctrl-C,\n" +
			"to explore with the operator commands of nixfleet (NIXFLEET_CONFIG), and\n" +
			"'push' and 'promote' sign and push further releases to it from another terminal.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "hosts", Value: demo.DefaultHosts,
				Usage: fmt.Sprintf("simulate `N` hosts (%d to %d)", demo.MinHosts, demo.MaxHosts)},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON document on stdout"},
			&cli.BoolFlag{Name: "keep", Usage: "afterwards, keep the control plane and agents running until Ctrl-C"},
			&cli.DurationFlag{Name: "timeout", Value: 2 * time.Minute, Usage: "give up after `DURATION`"},
		},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error { return usage("%v", err) },
		Commands:     []*cli.Command{pushCommand(usage, &hint), promoteCommand(usage, &hint)},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usage("unexpected argument %q", c.Args().First())
			}
			opts := demo.Options{Hosts: c.Int("hosts"), JSON: c.Bool("json"), Keep: c.Bool("keep"), Timeout: c.Duration("timeout")}
			if opts.Hosts < demo.MinHosts || opts.Hosts > demo.MaxHosts {
				return usage("--hosts %d is out of range (%d to %d)", opts.Hosts, demo.MinHosts, demo.MaxHosts)
			}
			if opts.Timeout <= 0 {
				return usage("--timeout must be positive")
			}
			return demoError(demo.Run(c.Context, opts, c.App.Writer, c.App.ErrWriter), &hint)
		},
	}
	code := cliapp.Run(ctx, app, args, stdout, stderr)
	if code != 0 && hint != "" {
		fmt.Fprintf(stderr, "hint: %s\n", hint)
	}
	return code
}

// demoError is a *demo.Error as the command prints it: "<code>:
// <message>" on one line, its hint kept for after it.
func demoError(err error, hint *string) error {
	var de *demo.Error
	if errors.As(err, &de) {
		*hint = de.Hint
		return fmt.Errorf("%s: %s", de.Code, strings.Join(strings.Fields(de.Err.Error()), " "))
	}
	return err
}

// Flags of push and promote.
var (
	dirFlag = &cli.StringFlag{Name: "dir", EnvVars: []string{demo.DirEnv},
		Usage: "the directory of the demo to act on (default: the newest demo kept running in $TMPDIR)"}
	waitFlag = &cli.DurationFlag{Name: "wait", Value: time.Minute,
		Usage: "wait at most `DURATION` for the control plane to take the push"}
)

// pushCommand is "push": CI signs the next release and an operator pushes
// it to staging.
func pushCommand(usage func(string, ...any) error, hint *string) *cli.Command {
	return &cli.Command{
		Name:      "push",
		Usage:     "sign the next release as CI does and push it to staging, in a demo kept running",
		UsageText: name + " push [--bad] [--soak MINUTES] [--dir DIR] [--wait DURATION]",
		Description: "Acts on a demo started with --keep, from another terminal. CI signs release v3\n" +
			"(then v4, …) with the demo's CI key: every host's closure is new, every wave soaks\n" +
			"--soak minutes, and prod's wave 1 needs an approver. The demo pushes it to\n" +
			"channels/staging, waits for the control plane to open its rollout and says\n" +
			"what to run next. With --bad, the hosts that take the release fail their\n" +
			"health probe, and staging's policy rolls it back.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "bad", Usage: "a release whose hosts fail their health probe"},
			&cli.IntFlag{Name: "soak", Value: 1, Usage: "every wave soaks `MINUTES` minutes"},
			dirFlag, waitFlag,
		},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error { return usage("%v", err) },
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usage("unexpected argument %q", c.Args().First())
			}
			if c.Int("soak") < 0 || c.Int("soak") > 60 {
				return usage("--soak %d is out of range (0 to 60)", c.Int("soak"))
			}
			opts := demo.PushOptions{Dir: c.String("dir"), Bad: c.Bool("bad"), SoakMinutes: c.Int("soak"), Wait: c.Duration("wait")}
			return demoError(demo.Push(c.Context, opts, c.App.Writer), hint)
		},
	}
}

// promoteCommand is "promote": an operator pushes staging's release to
// prod.
func promoteCommand(usage func(string, ...any) error, hint *string) *cli.Command {
	return &cli.Command{
		Name:      "promote",
		Usage:     "push the release staging runs to prod, in a demo kept running",
		UsageText: name + " promote [--dir DIR] [--wait DURATION]",
		Description: "Acts on a demo started with --keep, from another terminal: moves channels/prod\n" +
			"to the commit of channels/staging. prod follows staging, so its rollout opens\n" +
			"once staging converged on it.",
		Flags:        []cli.Flag{dirFlag, waitFlag},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error { return usage("%v", err) },
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usage("unexpected argument %q", c.Args().First())
			}
			opts := demo.PushOptions{Dir: c.String("dir"), Wait: c.Duration("wait")}
			return demoError(demo.Promote(c.Context, opts, c.App.Writer), hint)
		},
	}
}
