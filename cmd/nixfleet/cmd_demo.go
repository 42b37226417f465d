package main

import (
	"errors"
	"strings"

	"github.com/nixfleet/nixfleet/codes"

	"github.com/urfave/cli/v2"
)

// demoCommand is what is left of "nixfleet demo": the demo is its own
// command, nixfleet-demo, so that this one carries no control plane
// (rfcs/0009 §The demo). It says so, with the command to run instead, and
// exits 2. Hidden from the help.
func demoCommand() *cli.Command {
	return &cli.Command{
		Name:            "demo",
		Usage:           "moved: run nixfleet-demo (go run ./cmd/nixfleet-demo)",
		Hidden:          true,
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			again := strings.TrimSpace("go run ./cmd/nixfleet-demo " + strings.Join(c.Args().Slice(), " "))
			return &cliError{exit: exitUsage, cmd: cmdName(c), code: codes.Usage,
				err:  errors.New("the demo is its own command now, nixfleet-demo, with the same flags, so that nixfleet stays small"),
				hint: "in a clone of the repository: " + again + " (or build it once: go build -o nixfleet-demo ./cmd/nixfleet-demo)"}
		},
	}
}
