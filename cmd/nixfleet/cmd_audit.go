package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/intent"
	"github.com/nixfleet/nixfleet/proto"
)

// auditCommand is `nixfleet audit export|verify` (rfcs/0009, rfcs/0007
// §Signed intents): check, with the operators' public keys alone, that
// every intent, approval and freeze break the control plane records was
// signed by the operator it names.
func auditCommand() *cli.Command {
	return &cli.Command{
		Name:  "audit",
		Usage: "check the control plane's record of intents and approvals against the operators' keys",
		Flags: connFlags(),
		Subcommands: []*cli.Command{
			opCommand(&cli.Command{
				Name:  "export",
				Usage: "print every intent (with its signed document) and every rollout (with its approvals), as one JSON document",
			}, nil, runAuditExport),
			{
				Name:      "verify",
				Usage:     "verify every intent's signature, and that every approval and freeze break comes from one",
				ArgsUsage: " ",
				Description: "Reads the record from --from (what `nixfleet audit export` wrote) or else from the\n" +
					"control plane (connection flags as for the other commands), and the operators'\n" +
					"public keys from --operators. Exit 1 (audit_failed) when an intent does not verify\n" +
					"or says something else than the record, or an approval or a freeze break has no\n" +
					"signed intent behind it; unsigned intents (filed through a dashboard session or\n" +
					"under --insecure-dev) are listed, and fail the audit only with --strict.",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "operators", Usage: "the operators `FILE` (JSON: [{name, key, role}])"},
					&cli.StringFlag{Name: "from", Usage: "read the record from `FILE` (an audit export) instead of the control plane"},
					&cli.BoolFlag{Name: "strict", Usage: "unsigned intents fail the audit too"},
					&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
				}, connFlags()...),
				Action: runAuditVerify,
			},
		},
	}
}

// auditRecord reads what the control plane records: intents and rollouts.
func auditRecord(c *cli.Context, o *operator) (proto.AuditExport, error) {
	var ex proto.AuditExport
	ints, _, err := o.api.Intents(c.Context, "")
	if err != nil {
		return ex, o.fail(c, err, "")
	}
	rs, _, err := o.api.Rollouts(c.Context)
	if err != nil {
		return ex, o.fail(c, err, "")
	}
	ex.Intents, ex.Rollouts = ints, rs
	if ex.Intents == nil {
		ex.Intents = []proto.IntentEntry{}
	}
	return ex, nil
}

func runAuditExport(c *cli.Context, o *operator, _ []string) error {
	ex, err := auditRecord(c, o)
	if err != nil {
		return err
	}
	return writeJSON(c.App.Writer, ex)
}

func runAuditVerify(c *cli.Context) error {
	if c.NArg() > 0 {
		return usage(c, "audit verify takes no arguments")
	}
	if err := requireFlags(c, "operators"); err != nil {
		return err
	}
	data, err := os.ReadFile(c.String("operators"))
	if err != nil {
		return &cliError{exit: exitUsage, cmd: cmdName(c), code: codes.IOError, err: err}
	}
	keys, err := intent.OperatorKeys(data)
	if err != nil {
		return &cliError{exit: exitUsage, cmd: cmdName(c), code: codes.BadConfig, err: err}
	}
	var ex proto.AuditExport
	if from := c.String("from"); from != "" {
		raw, err := os.ReadFile(from)
		if err != nil {
			return &cliError{exit: exitUsage, cmd: cmdName(c), code: codes.IOError, err: err}
		}
		if err := json.Unmarshal(raw, &ex); err != nil {
			return &cliError{exit: exitUsage, cmd: cmdName(c), code: codes.MalformedJSON, err: fmt.Errorf("%s: %w", from, err)}
		}
	} else {
		o, err := dial(c)
		if err != nil {
			return err
		}
		if ex, err = auditRecord(c, o); err != nil {
			return err
		}
	}
	rep := intent.Audit(keys, ex)
	unsigned := 0
	for _, f := range rep.Findings {
		if f.Unsigned {
			unsigned++
		}
	}
	if c.Bool("json") {
		if err := writeJSON(c.App.Writer, rep); err != nil {
			return err
		}
	} else {
		w := c.App.Writer
		fmt.Fprintf(w, "%d intent(s): %d verified, %d unsigned, %d forged or altered\n", rep.Intents, rep.Verified, unsigned, len(rep.Findings)-unsigned)
		for _, f := range rep.Findings {
			what := "FORGED"
			if f.Unsigned {
				what = "unsigned"
			}
			fmt.Fprintf(w, "%-8s %s %s: %s\n", what, dash(f.Rollout), dash(f.Intent), f.Problem)
		}
	}
	failing := len(rep.Findings) - unsigned
	if c.Bool("strict") {
		failing = len(rep.Findings)
	}
	if failing > 0 {
		return &cliError{exit: exitFailed, cmd: cmdName(c), code: codes.AuditFailed,
			err: fmt.Errorf("the record holds %d finding(s) no operator's signature accounts for", failing)}
	}
	return nil
}
