package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// errBadInput marks a reconcile input that is not a valid Input document.
var errBadInput = errors.New("invalid reconciler input")

func reconcileCommand() *cli.Command {
	return &cli.Command{
		Name:  "reconcile",
		Usage: "run one reconciler tick on a JSON input and print what it decides",
		Description: "Reads a reconciler Input (rfcs/0003-reconciler.md §Input; the control plane's\n" +
			"state, or a case of testdata/reconciler) and prints the Output of one tick:\n" +
			"host intents, rollout and host changes, events. Nothing is changed anywhere:\n" +
			"this answers \"what would happen now?\".",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "input", Usage: "the Input `FILE` (- for stdin)"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usage(c, "unexpected argument %q", c.Args().First())
			}
			if err := requireFlags(c, "input"); err != nil {
				return err
			}
			data, err := readInput(c, c.String("input"))
			if err != nil {
				return ioError(c, err)
			}
			in, err := decodeReconcileInput(data)
			if err != nil {
				return failed(c, err, "the format is described in rfcs/0003-reconciler.md")
			}
			out := reconciler.Reconcile(in)
			if c.Bool("json") {
				return writeJSON(c.App.Writer, out)
			}
			printTick(c.App.Writer, in, out)
			return nil
		},
	}
}

func decodeReconcileInput(data []byte) (reconciler.Input, error) {
	var in reconciler.Input
	if _, err := proto.CheckSyntax(data, ""); err != nil {
		return in, fmt.Errorf("%w: %w", errBadInput, err)
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return in, fmt.Errorf("%w: %w", errBadInput, err)
	}
	if in.Now.IsZero() {
		return in, fmt.Errorf("%w: \"now\" is required (the reconciler never reads a clock)", errBadInput)
	}
	return in, nil
}

// printTick is the human rendering of an Output.
func printTick(w io.Writer, in reconciler.Input, out reconciler.Output) {
	fmt.Fprintf(w, "tick at %s: %d action(s), %d rollout change(s), %d host change(s), %d event(s)\n",
		in.Now.UTC().Format(time.RFC3339), len(out.Actions), len(out.Rollouts), len(out.Hosts), len(out.Events))
	if len(out.Actions) > 0 {
		fmt.Fprintln(w, "\nactions:")
		for _, it := range out.Actions {
			fmt.Fprintf(w, "  %-8s %-20s %s wave %d -> %s\n", it.Kind, it.Host, it.RolloutID, it.Wave, it.Target)
		}
	}
	if len(out.Rollouts) > 0 {
		fmt.Fprintln(w, "\nrollouts:")
		for _, u := range out.Rollouts {
			from := string(u.From)
			if u.New {
				from = "new"
			}
			fmt.Fprintf(w, "  %s  %s -> %s  wave %d (%s)  %s\n", u.Rollout.ID, from, u.Rollout.State,
				u.Rollout.Wave, u.Rollout.WavePhase, reasonText(u.Rollout.Reason))
		}
	}
	if len(out.Events) > 0 {
		fmt.Fprintln(w, "\nevents:")
		for _, e := range out.Events {
			var b strings.Builder
			fmt.Fprintf(&b, "  %-18s", e.Kind)
			if e.RolloutID != "" {
				fmt.Fprintf(&b, " %s", e.RolloutID)
			}
			if e.Wave >= 0 {
				fmt.Fprintf(&b, " wave %d", e.Wave)
			}
			if e.Host != "" {
				fmt.Fprintf(&b, " host %s", e.Host)
			}
			if e.From != "" || e.To != "" {
				fmt.Fprintf(&b, " %s -> %s", cmpOr(e.From, "·"), cmpOr(e.To, "·"))
			}
			fmt.Fprintf(&b, "  %s%s", reasonText(e.Reason), budgetsText(e.Budgets))
			fmt.Fprintln(w, b.String())
		}
	}
	if len(out.IntentResults) > 0 {
		fmt.Fprintln(w, "\noperator intents:")
		for _, r := range out.IntentResults {
			verdict := "refused"
			if r.Accepted {
				verdict = "accepted"
			}
			fmt.Fprintf(w, "  %s %s  %s\n", r.IntentID, verdict, reasonText(r.Reason))
		}
	}
}

func reasonText(r reconciler.Reason) string {
	if r.Code == "" && r.Message == "" {
		return ""
	}
	return "[" + r.Code + "] " + r.Message
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
