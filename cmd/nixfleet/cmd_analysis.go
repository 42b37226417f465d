package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

func analysisCommand() *cli.Command {
	return &cli.Command{
		Name:  "analysis",
		Usage: "try a policy's canary analyses against the live fleet",
		Flags: connFlags(),
		Subcommands: []*cli.Command{
			opCommand(&cli.Command{
				Name:  "run",
				Usage: "measure a policy's analyses once, now, for a wave, and print the verdicts",
				Description: "Asks the control plane to measure the analyses for wave N of the channel's\n" +
					"latest rollout on its Prometheus sources (POST /v1/analysis/trials) and judges\n" +
					"them as a rollout would: a threshold on the wave's hosts, a comparison between\n" +
					"the wave's hosts and the later waves' hosts heard now. Nothing is recorded and\n" +
					"nothing moves, so a policy can be tuned before a release: with --fleet and\n" +
					"--policy the analyses are the policy's in that (unsigned) fleet.resolved, the\n" +
					"channel one that uses it; without, the channel's latest rollout's.",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "channel", Usage: "the `CHANNEL` whose hosts are measured (default: the first channel that uses --policy)"},
					&cli.IntFlag{Name: "wave", Usage: "the wave `N` measured (0 is the first)"},
					&cli.StringFlag{Name: "policy", Usage: "the rollout policy `NAME` of --fleet whose analyses are tried"},
					&cli.StringFlag{Name: "fleet", Usage: "the fleet.resolved.json `FILE` --policy is read from (- for stdin)"},
				},
			}, nil, runAnalysisRun),
		},
	}
}

// runAnalysisRun is "nixfleet analysis run".
func runAnalysisRun(c *cli.Context, o *operator, _ []string) error {
	if !c.IsSet("wave") {
		return usage(c, "--wave is required")
	}
	req := proto.AnalysisTrialRequest{Channel: c.String("channel"), Wave: c.Int("wave")}
	switch policy, file := c.String("policy"), c.String("fleet"); {
	case (policy == "") != (file == ""):
		return usage(c, "--policy and --fleet go together: the policy is read from the fleet")
	case policy != "":
		data, err := readInput(c, file)
		if err != nil {
			return ioError(c, err)
		}
		fleet, err := proto.DecodeFleetResolved(data)
		if err != nil {
			return failed(c, fmt.Errorf("%w: %w", trust.ErrMalformed, err), "")
		}
		p, ok := fleet.RolloutPolicies[policy]
		if !ok {
			return usage(c, "%s has no rollout policy %q (it has: %s)", file, policy, strings.Join(slices.Sorted(maps.Keys(fleet.RolloutPolicies)), ", "))
		}
		req.Analyses = p.HealthGate.Analysis
		if len(req.Analyses) == 0 {
			return usage(c, "rollout policy %q has no analysis", policy)
		}
		if req.Channel == "" {
			for _, name := range slices.Sorted(maps.Keys(fleet.Channels)) {
				if fleet.Channels[name].RolloutPolicy == policy {
					req.Channel = name
					break
				}
			}
		}
	}
	if req.Channel == "" {
		return usage(c, "--channel is required (no channel of --fleet uses --policy)")
	}
	trial, raw, err := o.api.AnalysisTrial(c.Context, req)
	if err != nil {
		return o.fail(c, err, notFoundHint(err, "a trial measures the hosts of the channel's latest rollout: see 'nixfleet rollout list --channel "+req.Channel+"'"))
	}
	if c.Bool("json") {
		return writeRaw(c.App.Writer, raw)
	}
	writeTrial(c.App.Writer, trial)
	return nil
}

// writeTrial prints a trial's verdicts for people.
func writeTrial(w io.Writer, t proto.AnalysisTrial) {
	fs := &fields{}
	fs.add("channel", t.Channel)
	fs.add("rollout", t.RolloutID+" (its hosts and waves)")
	fs.add("wave", strconv.Itoa(t.Wave))
	fs.add("at", when(t.At))
	fs.write(w)
	for _, r := range t.Results {
		fmt.Fprintf(w, "\n%s: %s\n  %s\n  query: %s\n", r.Analysis, strings.ToUpper(r.Outcome), r.Message, r.Query)
		if len(r.Canary) > 0 {
			fmt.Fprintf(w, "  canary: %s (%d values)\n  baseline: %s (%d values)\n", strings.Join(r.Canary, " "), len(r.CanaryValues),
				dash(strings.Join(r.Baseline, " ")), len(r.BaselineValues))
		}
	}
}
