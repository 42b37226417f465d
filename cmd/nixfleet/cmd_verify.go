package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// DefaultTrustFile is where the agent and control plane modules install
// trust.json.
const DefaultTrustFile = "/etc/nixfleet/trust.json"

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:      "verify",
		Usage:     "verify a signed fleet.resolved or rollout manifest offline",
		ArgsUsage: "FILE [SIGFILE]",
		Description: "Detects the artifact kind and verifies FILE against SIGFILE (default\n" +
			"FILE.sig) with the keys of --trust, at --now. A fleet.resolved is checked\n" +
			"against each channel's freshness window, a manifest against its own, unless\n" +
			"--freshness-window is given. A manifest's rollout id is also checked against\n" +
			"its file name when that is <channel>@<ref>.json.\n\n" +
			"Exit 0: accepted. Exit 1: rejected, with a stable code. Exit 2: usage or I/O.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "trust", Value: DefaultTrustFile, EnvVars: []string{"NIXFLEET_TRUST"}, Usage: "trust.json `FILE`"},
			nowFlag,
			&cli.IntFlag{Name: "freshness-window", Usage: "accept artifacts signed up to `MINUTES` ago (plus 60s skew)"},
			&cli.StringFlag{Name: "rollout-id", Usage: "manifests: expect this rollout `ID` (default: from the file name)"},
			&cli.StringFlag{Name: "manifest-hash", Usage: "manifests: expect this content `SHA256` (hex)"},
			&cli.StringFlag{Name: "host", Usage: "manifests: expect `HOST` in the host set (with --wave)"},
			&cli.IntFlag{Name: "wave", Value: -1, Usage: "manifests: the wave `INDEX` expected for --host"},
			&cli.StringFlag{Name: "target", Usage: "manifests: the target `CLOSURE` expected for --host"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			rep, err := verify(c)
			if err != nil {
				var ce *cliError
				if !errors.As(err, &ce) {
					ce = failed(c, err, "")
				}
				ce.rejected = ce.exit == exitFailed
				rep.OK, rep.Code, rep.Message = false, ce.code, oneLine(ce.err.Error())
				var rej *trust.RejectedError
				if errors.As(err, &rej) {
					at := rej.SignedAt.UTC().Format(time.RFC3339)
					rep.SignedAt = &at
				}
				err = ce
			}
			if c.Bool("json") {
				if werr := writeJSON(c.App.Writer, rep); werr != nil && err == nil {
					return werr
				}
			} else if err == nil {
				fmt.Fprintf(c.App.Writer, "ok: %s\n", rep.Message)
			}
			return err
		},
	}
}

type verifyReport struct {
	OK        bool    `json:"ok"`
	Code      string  `json:"code"`
	Kind      *string `json:"kind"`
	SignedAt  *string `json:"signedAt"`
	Message   string  `json:"message"`
	RolloutID string  `json:"rolloutId,omitempty"`
	SHA256    string  `json:"sha256,omitempty"`
	Slot      string  `json:"slot,omitempty"`
	Algorithm string  `json:"algorithm,omitempty"`
}

func verify(c *cli.Context) (verifyReport, error) {
	var rep verifyReport
	if c.NArg() < 1 || c.NArg() > 2 {
		ce := usage(c, "expected FILE [SIGFILE], got %d arguments", c.NArg())
		for _, a := range c.Args().Slice()[min(1, c.NArg()):] {
			if strings.HasPrefix(a, "-") {
				ce.hint = "flags go before FILE: nixfleet verify [flags] FILE [SIGFILE]"
			}
		}
		return rep, ce
	}
	file := c.Args().Get(0)
	sigFile := c.Args().Get(1)
	if sigFile == "" {
		sigFile = file + ".sig"
	}
	now, err := parseNow(c)
	if err != nil {
		return rep, err
	}
	var window time.Duration
	if c.IsSet("freshness-window") {
		m := c.Int("freshness-window")
		if m < 1 || m > trust.MaxWindowMinutes {
			return rep, usage(c, "--freshness-window %d is not between 1 and %d minutes", m, trust.MaxWindowMinutes)
		}
		window = time.Duration(m) * time.Minute
	}
	var host *manifest.HostExpect
	if h := c.String("host"); h != "" {
		if c.Int("wave") < 0 {
			return rep, usage(c, "--host needs --wave")
		}
		host = &manifest.HostExpect{Hostname: h, WaveIndex: c.Int("wave"), TargetClosure: c.String("target")}
	}

	trustFile := c.String("trust")
	if trustFile == "" { // NIXFLEET_TRUST set but empty
		trustFile = DefaultTrustFile
	}
	trustData, err := os.ReadFile(trustFile)
	if err != nil {
		return rep, &cliError{exit: exitUsage, cmd: cmdName(c), code: codes.IOError, err: err,
			hint: "point --trust (or NIXFLEET_TRUST) at the trust.json that pins the CI release key"}
	}
	roots, err := trust.ParseRoots(trustData)
	if err != nil {
		return rep, &cliError{exit: exitUsage, cmd: cmdName(c), code: trust.Code(err), err: fmt.Errorf("%s: %w", trustFile, err)}
	}
	artifact, err := readInput(c, file)
	if err != nil {
		return rep, ioError(c, err)
	}
	sig, err := os.ReadFile(sigFile)
	if err != nil {
		return rep, ioError(c, err)
	}

	// Detect the kind; on failure let trust.Verify report the first error in
	// pipeline order (no_trust_roots before malformed).
	kind := proto.Kind("")
	if _, err := proto.CheckSyntax(artifact, ""); err == nil {
		kind, _ = proto.DetectKind(artifact)
	}
	if kind != "" {
		k := string(kind)
		rep.Kind = &k
	}
	var res *trust.Result
	if kind == proto.KindRolloutManifest {
		exp := manifest.Expect{RolloutID: c.String("rollout-id"), ContentHash: c.String("manifest-hash"), Host: host, FreshnessWindow: window}
		if exp.RolloutID == "" {
			if base := filepath.Base(file); strings.HasSuffix(base, ".json") && strings.Contains(base, "@") {
				exp.RolloutID = strings.TrimSuffix(base, ".json")
			}
		}
		res, err = manifest.Verify(artifact, sig, roots, exp, now)
	} else {
		if host != nil || c.String("rollout-id") != "" || c.String("manifest-hash") != "" {
			return rep, usage(c, "--rollout-id, --manifest-hash and --host apply to rollout manifests only")
		}
		res, err = trust.Verify(artifact, sig, roots, trust.Policy{Kind: kind, FreshnessWindow: window}, now)
	}
	if err != nil {
		return rep, err
	}
	k, at := string(res.Kind), res.SignedAt.UTC().Format(time.RFC3339)
	rep.OK, rep.Code, rep.Kind, rep.SignedAt = true, codes.OK, &k, &at
	rep.SHA256, rep.Slot, rep.Algorithm = res.SHA256, res.Slot, res.Algorithm
	what := string(res.Kind)
	if res.Manifest != nil {
		rep.RolloutID = res.Manifest.RolloutID()
		what += " " + rep.RolloutID
	}
	rep.Message = fmt.Sprintf("%s signed %s, verified with the %s key (%s), within a %s freshness window; sha256 %s",
		what, at, res.Slot, res.Algorithm, res.Window, res.SHA256)
	return rep, nil
}
