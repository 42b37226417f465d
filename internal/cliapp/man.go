package cliapp

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// ManCommand is a daemon's `man` command: its manual page in roff, in the
// given section (8 for daemons), made from its commands and flags by
// urfave/cli and go-md2man, on stdout (`nixfleet-cp man | man -l -`). The
// flake's packages install it.
func ManCommand(section int) *cli.Command {
	return &cli.Command{
		Name:  "man",
		Usage: fmt.Sprintf("print the manual page, section %d (roff)", section),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return Usage(fmt.Errorf("unexpected argument %q", c.Args().First()))
			}
			page, err := c.App.ToManWithSection(section)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(c.App.Writer, page)
			return err
		},
	}
}
