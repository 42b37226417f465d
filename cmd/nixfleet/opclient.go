package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/internal/sshkey"
)

// opTimeout bounds each request of an operator command (an intent waits
// up to 5 s for its tick on the server). Event streams have no limit.
const opTimeout = 30 * time.Second

// operator is an operator command's connection to the control plane.
type operator struct {
	api  *apiclient.Client
	conn connection
	st   style
}

// dial resolves the connection settings (flags, environment, config file)
// and makes an API client. Its errors are usage and setup errors: exit 2.
func dial(c *cli.Context) (*operator, error) {
	conn, err := resolveConnection(c, os.Getenv)
	switch {
	case errors.Is(err, errBadConfig):
		return nil, &cliError{exit: exitUsage, cmd: cmdName(c), code: codes.BadConfig, err: err,
			hint: "the config file is TOML, lines key = \"string\"; keys: " + configKeys() + " (rfcs/0009)"}
	case err != nil:
		return nil, &cliError{exit: exitUsage, cmd: cmdName(c), code: codes.IOError, err: fmt.Errorf("config file: %w", err)}
	}
	if conn.URL == "" {
		return nil, &cliError{exit: exitUsage, cmd: cmdName(c), code: codes.Usage, err: errors.New("no control plane to talk to"),
			hint: "pass --cp URL, set NIXFLEET_CP_URL, or set cp in " + configHint()}
	}
	opts := apiclient.Options{Name: conn.Name, Timeout: opTimeout}
	if conn.Key != "" {
		if opts.Key, err = sshkey.Read(conn.Key); err != nil {
			return nil, setupError(c, "key", codes.BadKey, conn, err,
				"the key is an unencrypted ed25519 private key: ssh-keygen -t ed25519 -N '' -f FILE, or nixfleet keygen")
		}
	}
	if conn.CA != "" {
		pem, err := os.ReadFile(conn.CA)
		if err != nil {
			return nil, setupError(c, "ca", codes.BadCA, conn, err, "")
		}
		opts.ServerCAs = x509.NewCertPool()
		if !opts.ServerCAs.AppendCertsFromPEM(pem) {
			return nil, setupError(c, "ca", codes.BadCA, conn, fmt.Errorf("%s: no PEM certificate", conn.CA), "the CA file holds PEM certificates")
		}
	}
	api, err := apiclient.New(conn.URL, opts)
	if err != nil {
		return nil, &cliError{exit: exitUsage, cmd: cmdName(c), code: codes.Usage, err: fmt.Errorf("%w (from %s)", err, conn.from["cp"]),
			hint: "the control plane URL is https://HOST:PORT, or http://… for nixfleet-cp --insecure-dev"}
	}
	return &operator{api: api, conn: conn, st: styleFor(c.App.Writer, os.Getenv)}, nil
}

func configHint() string {
	if p := defaultConfigPath(os.Getenv); p != "" {
		return p
	}
	return "the config file"
}

// setupError is a key or CA file that cannot be used (exit 2): io_error
// when it cannot be read, else code (bad_key or bad_ca).
func setupError(c *cli.Context, setting, code string, conn connection, err error, hint string) *cliError {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		code, hint = codes.IOError, ""
	}
	return &cliError{exit: exitUsage, cmd: cmdName(c), code: code, err: fmt.Errorf("%w (from %s)", err, conn.from[setting]), hint: hint}
}

// remoteError is an error answer of the control plane, shown as its
// message; its code is the cliError's.
type remoteError struct{ e *apiclient.Error }

func (r remoteError) Error() string { return fmt.Sprintf("%s (HTTP %d)", r.e.Message, r.e.Status) }
func (r remoteError) Unwrap() error { return r.e }

// fail turns an error of a call to the control plane into the command's
// error (exit 1) with a stable code: the server's own code for an error
// answer, "unavailable" when the control plane cannot be reached,
// "bad_response" for an answer that is not the control plane API's (then
// with a hint that --cp may name something else, and never the body).
// With --json, the error is also printed on stdout as {"error": {"code",
// "message", "status"?}} (on one line when following a stream of JSON
// lines).
func (o *operator) fail(c *cli.Context, err error, hint string) error {
	ce := &cliError{exit: exitFailed, cmd: cmdName(c), err: err, hint: hint}
	status := 0
	var ae *apiclient.Error
	var ue *url.Error
	var ne net.Error
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, apiclient.ErrBadResponse), errors.As(err, &se), errors.As(err, &te):
		// Not the control plane's API: say so, and never print the body.
		ce.code = codes.BadResponse
		ce.err = fmt.Errorf("%s did not answer as a nixfleet control plane: %w", o.conn.URL, err)
		if errors.As(err, &ae) {
			status = ae.Status
		}
		if hint == "" {
			ce.hint = fmt.Sprintf("is --cp a nixfleet control plane? (the URL came from %s)", o.conn.from["cp"])
			if ae != nil && ae.Status == http.StatusBadRequest && strings.HasPrefix(o.conn.URL, "http://") {
				// Go's HTTPS server answers plain HTTP with a bare 400.
				ce.hint = fmt.Sprintf("the control plane serves HTTPS: use --cp https://%s (the URL came from %s)",
					strings.TrimPrefix(o.conn.URL, "http://"), o.conn.from["cp"])
			}
		}
	case errors.As(err, &ae):
		ce.code, ce.err, status = ae.Code, remoteError{ae}, ae.Status
		if hint == "" {
			ce.hint = apiHint(ae.Code, shortID(c.Args().First()))
		}
	case errors.Is(err, context.Canceled):
		ce.code, ce.hint = codes.Interrupted, ""
	case errors.As(err, &ue), errors.As(err, &ne), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		ce.code = codes.Unavailable
		ce.err = fmt.Errorf("cannot reach the control plane at %s: %w", o.conn.URL, err)
		if hint == "" {
			ce.hint = fmt.Sprintf("is the control plane running, and is the URL right? (it came from %s)", o.conn.from["cp"])
		}
		var ua x509.UnknownAuthorityError
		var cv *tls.CertificateVerificationError
		var he x509.HostnameError
		if errors.As(err, &ua) || errors.As(err, &cv) || errors.As(err, &he) {
			ce.hint = "the control plane's certificate is not trusted: pass its CA with --ca (NIXFLEET_CA, config ca)"
		}
	default:
		ce.code = codes.Internal
	}
	if c.Bool("json") {
		doc := map[string]any{"code": ce.code, "message": ce.err.Error()}
		if status != 0 {
			doc["status"] = status
		}
		if c.Bool("follow") { // one more JSON line of the stream
			b, _ := json.Marshal(map[string]any{"error": doc})
			fmt.Fprintf(c.App.Writer, "%s\n", b)
		} else {
			_ = writeJSON(c.App.Writer, map[string]any{"error": doc})
		}
	}
	return ce
}

// apiHint is the hint for an error code of the control plane, about the
// rollout id (none: "").
func apiHint(code, id string) string {
	switch code {
	case codes.Unauthenticated:
		return "the control plane wants an operator key: pass --key FILE (NIXFLEET_KEY, config key)"
	case codes.UnknownClient:
		return "this key is not in the control plane's operators file (nixfleet-cp --operators)"
	case codes.Forbidden:
		return "use the key of an operator whose role is operator or approver (--key, NIXFLEET_KEY, config key)"
	case codes.IllegalTransition:
		if id == "" {
			return "the rollout's state does not allow it: 'nixfleet rollout list' shows the rollouts' states"
		}
		return fmt.Sprintf("the rollout's state does not allow it: see 'nixfleet rollout show %s'", id)
	}
	return ""
}

// writeRaw prints a JSON answer of the server as it is, indented.
func writeRaw(w io.Writer, raw json.RawMessage) error {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

// commandArgs returns the command's positional arguments, which must be
// exactly the ones named, after setting the flags that follow them:
// "nixfleet rollout show ID --json" works as "nixfleet rollout show --json
// ID" does. "--" ends the flags.
func commandArgs(c *cli.Context, names ...string) ([]string, error) {
	var pos []string
	args := c.Args().Slice()
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "help" || name == "h" {
			cli.HelpPrinter(c.App.Writer, cli.CommandHelpTemplate, c.Command)
			return nil, errHelpShown
		}
		f := commandFlag(c.Command, name)
		if f == nil {
			return nil, usage(c, "flag provided but not defined: %s", a)
		}
		if _, isBool := f.(*cli.BoolFlag); isBool {
			if !hasValue {
				value = "true"
			}
		} else if !hasValue {
			if i+1 >= len(args) {
				return nil, usage(c, "flag needs an argument: %s", a)
			}
			i++
			value = args[i]
		}
		if err := c.Set(name, value); err != nil {
			return nil, usage(c, "invalid value %q for flag %s: %v", value, a, err)
		}
	}
	if len(pos) < len(names) {
		return nil, usage(c, "missing %s", strings.Join(names[len(pos):], " "))
	}
	if len(pos) > len(names) {
		return nil, usage(c, "unexpected argument %q", pos[len(names)])
	}
	return pos, nil
}

// errHelpShown ends a command whose trailing flags asked for help.
var errHelpShown = errors.New("help shown")

func commandFlag(cmd *cli.Command, name string) cli.Flag {
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}
