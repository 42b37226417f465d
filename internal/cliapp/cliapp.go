package cliapp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"
)

// UsageError marks an error as the caller's mistake: exit status 2.
type UsageError struct{ Err error }

func (u UsageError) Error() string { return u.Err.Error() }
func (u UsageError) Unwrap() error { return u.Err }

// Usage wraps err as a UsageError.
func Usage(err error) error { return UsageError{Err: err} }

// Run runs app with args, writing to stdout and stderr, and returns the
// exit status; an error is printed as "<name>: <error>". An app without a
// Version gets [Version], and with it urfave/cli's --version flag.
func Run(ctx context.Context, app *cli.App, args []string, stdout, stderr io.Writer) int {
	app.Writer, app.ErrWriter = stdout, stderr
	if app.Version == "" {
		app.Version = Version()
	}
	app.HideHelpCommand = true
	app.ExitErrHandler = func(*cli.Context, error) {}
	if err := app.RunContext(ctx, args); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", app.Name, err)
		var u UsageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	return 0
}

// Env returns the environment variable that mirrors a flag:
// <prefix>_<FLAG>, upper case, with "-" as "_".
func Env(prefix, flag string) []string {
	return []string{prefix + "_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}
