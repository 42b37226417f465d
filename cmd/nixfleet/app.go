package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/release"
	"github.com/nixfleet/nixfleet/trust"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1 // refused or failed; the error carries a code
	exitUsage   = 2 // usage or I/O error
	programName = "nixfleet"
)

// run is the whole command: tests call it directly.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := newApp(stdin, stdout, stderr)
	err := app.RunContext(ctx, args)
	if err == nil || errors.Is(err, errVersionShown) {
		return exitOK
	}
	var ce *cliError
	if !errors.As(err, &ce) {
		ce = &cliError{exit: exitUsage, code: codes.Usage, err: err, hint: "run 'nixfleet help' for usage"}
	}
	ce.report(stderr)
	return ce.exit
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:            programName,
		Usage:           "GitOps rollouts for fleets of NixOS hosts",
		Reader:          stdin,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		Suggest:         true,
		ExitErrHandler:  func(*cli.Context, error) {}, // run decides the exit code
		OnUsageError:    onUsageError,
		Commands: []*cli.Command{
			canonicalizeCommand(),
			keygenCommand(),
			releaseCommand(),
			verifyCommand(),
			reconcileCommand(),
			demoCommand(),
			statusCommand(),
			rolloutCommand(),
			analysisCommand(),
			releasesCommand(),
			eventsCommand(),
			hostCommand(),
			uiCommand(),
			auditCommand(),
			versionCommand(),
			completionCommand(),
			manCommand(),
		},
		// The operator commands' connection, also accepted before the
		// command; --version (the app's own, so that --json applies).
		Flags:                append(connFlags(), versionFlag, hiddenJSONFlag),
		HideVersion:          true,
		Before:               showVersion,
		EnableBashCompletion: true,
	}
	app.Action = func(c *cli.Context) error {
		if c.NArg() == 0 {
			cli.ShowAppHelp(c) //nolint:errcheck // best effort before the usage error
			return &cliError{exit: exitUsage, code: codes.Usage, err: errors.New("no command given")}
		}
		return &cliError{exit: exitUsage, code: codes.Usage, err: fmt.Errorf("unknown command %q", c.Args().First()),
			hint: "run 'nixfleet help' for the list of commands"}
	}
	setUsageErrors(app.Commands)
	return app
}

// setUsageErrors makes every command report flag errors as usage errors,
// in one line with a hint, instead of printing its whole help.
func setUsageErrors(cmds []*cli.Command) {
	for _, c := range cmds {
		c.OnUsageError = onUsageError
		setUsageErrors(c.Subcommands)
	}
}

func onUsageError(c *cli.Context, err error, _ bool) error {
	return &cliError{exit: exitUsage, cmd: cmdName(c), code: codes.Usage, err: err,
		hint: fmt.Sprintf("run 'nixfleet %s --help' for usage", cmdName(c))}
}

// cliError is every error that leaves the process: an exit code, a stable
// machine-readable code, the cause and an optional hint.
type cliError struct {
	exit int
	cmd  string
	code string
	err  error
	hint string
	// rejected marks a verdict on an input ("rejected (code): …") rather
	// than a failure of the command.
	rejected bool
}

func (e *cliError) Error() string { return e.code + ": " + e.err.Error() }
func (e *cliError) Unwrap() error { return e.err }

// report writes the error to stderr: one line per problem, each naming the
// code, then the hint.
func (e *cliError) report(w io.Writer) {
	prefix := programName
	if e.cmd != "" {
		prefix += " " + e.cmd
	}
	var verr *manifest.ValidationError
	if errors.As(e.err, &verr) {
		for _, p := range verr.Problems {
			fmt.Fprintf(w, "%s: %s: %s\n", prefix, e.code, p)
		}
	} else if e.rejected {
		fmt.Fprintf(w, "%s: rejected (%s): %s\n", prefix, e.code, oneLine(e.err.Error()))
	} else {
		fmt.Fprintf(w, "%s: %s: %s\n", prefix, e.code, oneLine(e.err.Error()))
	}
	if e.hint != "" {
		fmt.Fprintf(w, "hint: %s\n", e.hint)
	}
}

// cmdName is the command path of a context, like "release sign".
func cmdName(c *cli.Context) string {
	if c == nil {
		return ""
	}
	var names []string
	for _, l := range c.Lineage() {
		if l.Command != nil && l.Command.Name != "" && l.Command.Name != programName {
			names = append([]string{l.Command.Name}, names...)
		}
	}
	return strings.Join(names, " ")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// errorCodes maps errors to the CLI's stable codes; walked in order, first
// match wins. Codes of the trust package come first.
var errorCodes = []struct {
	err  error
	code string
}{
	{manifest.ErrInvalidFleet, codes.InvalidFleet},
	{release.ErrSigner, codes.SignerFailed},
	{release.ErrOutDir, codes.BadOutDir},
	{errBadInput, codes.BadInput},
	{fs.ErrExist, codes.Exists},
}

func codeOf(err error) string {
	if c := trust.Code(err); c != codes.Internal {
		return c
	}
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return codes.IOError
	}
	return codes.Internal
}

// failed is a refusal or failure (exit 1).
func failed(c *cli.Context, err error, hint string) *cliError {
	return &cliError{exit: exitFailed, cmd: cmdName(c), code: codeOf(err), err: err, hint: hint}
}

// usage is a usage error (exit 2).
func usage(c *cli.Context, format string, args ...any) *cliError {
	return &cliError{exit: exitUsage, cmd: cmdName(c), code: codes.Usage, err: fmt.Errorf(format, args...),
		hint: fmt.Sprintf("run 'nixfleet %s --help' for usage", cmdName(c))}
}

// ioError is an I/O error on the command's inputs (exit 2).
func ioError(c *cli.Context, err error) *cliError {
	return &cliError{exit: exitUsage, cmd: cmdName(c), code: codes.IOError, err: err}
}

// readInput reads a file, or stdin for "" and "-", refusing more than
// proto.MaxBytes+1 bytes (the decoders then report the size).
func readInput(c *cli.Context, name string) ([]byte, error) {
	var r io.Reader = c.App.Reader
	if name != "" && name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	return io.ReadAll(io.LimitReader(r, proto.MaxBytes+1))
}

// parseNow reads a --now flag: RFC 3339, or the current time when empty.
func parseNow(c *cli.Context) (time.Time, error) {
	s := c.String("now")
	if s == "" {
		return time.Now(), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usage(c, "--now %q is not an RFC 3339 time (like 2026-11-21T10:00:00Z)", s)
	}
	return t, nil
}

// requireFlags reports the first missing required flag as a usage error.
// (urfave/cli's own Required prints the whole help on stdout.)
func requireFlags(c *cli.Context, names ...string) error {
	for _, n := range names {
		if !c.IsSet(n) || c.String(n) == "" {
			return usage(c, "--%s is required", n)
		}
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

var nowFlag = &cli.StringFlag{Name: "now", Usage: "evaluate at this RFC 3339 `TIME` instead of the clock"}
var jsonFlag = &cli.BoolFlag{Name: "json", Usage: "print one JSON document on stdout"}
