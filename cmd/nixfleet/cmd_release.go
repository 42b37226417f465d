package main

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/release"
	"github.com/nixfleet/nixfleet/trust"
)

func releaseCommand() *cli.Command {
	return &cli.Command{
		Name:  "release",
		Usage: "CI's release step",
		Subcommands: []*cli.Command{{
			Name:  "sign",
			Usage: "validate, stamp and sign a fleet.resolved and its rollout manifests",
			Description: "Validates the unsigned fleet.resolved (every problem is reported), stamps\n" +
				"meta.signedAt, meta.ciCommit and meta.signatureAlgorithm, and writes\n" +
				"DIR/fleet.resolved.json and DIR/rollouts/<rolloutId>.json (canonical bytes),\n" +
				"each with a .sig holding the raw 64-byte signature. DIR is replaced\n" +
				"atomically; on any error it is left as it was.\n\n" +
				"--sign-cmd runs CMD under sh -c once per artifact, with the canonical bytes\n" +
				"on stdin; it must print the raw signature on stdout and exit 0.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "fleet", Usage: "the unsigned fleet.resolved.json `FILE`"},
				&cli.StringFlag{Name: "key", Usage: "sign with this private key `FILE` (PKCS#8 PEM or OpenSSH)"},
				&cli.StringFlag{Name: "sign-cmd", Usage: "sign with this external `CMD` (HSM, hardware token)"},
				&cli.StringFlag{Name: "sign-algorithm", Value: proto.AlgorithmEd25519, Usage: "algorithm of the --sign-cmd key: ed25519 or ecdsa-p256"},
				&cli.StringFlag{Name: "public", Usage: "check every signature against this public key `FILE` ({\"algorithm\",\"public\"})"},
				&cli.StringFlag{Name: "out", Usage: "the release `DIR` to write (e.g. releases)"},
				&cli.StringFlag{Name: "commit", Usage: "CI commit `SHA` to stamp (default: git rev-parse HEAD)"},
				nowFlag,
				jsonFlag,
			},
			Action: releaseSign,
		}, releasePlanCommand()},
	}
}

func releaseSign(c *cli.Context) error {
	if c.NArg() > 0 {
		return usage(c, "unexpected argument %q", c.Args().First())
	}
	if err := requireFlags(c, "fleet", "out"); err != nil {
		return err
	}
	now, err := parseNow(c)
	if err != nil {
		return err
	}
	var signer trust.Signer
	switch key, cmd := c.String("key"), c.String("sign-cmd"); {
	case (key == "") == (cmd == ""):
		return usage(c, "give exactly one of --key and --sign-cmd")
	case key != "":
		data, err := os.ReadFile(key)
		if err != nil {
			return ioError(c, err)
		}
		k, err := trust.ParsePrivateKey(data)
		if err != nil {
			return failed(c, fmt.Errorf("%s: %w", key, err), "")
		}
		signer = k
	default:
		alg := c.String("sign-algorithm")
		if alg != proto.AlgorithmEd25519 && alg != proto.AlgorithmECDSAP256 {
			return usage(c, "--sign-algorithm %q is not ed25519 or ecdsa-p256", alg)
		}
		signer = &release.CommandSigner{Command: cmd, SignAlgorithm: alg, Ctx: c.Context}
		if c.String("public") == "" {
			fmt.Fprintln(c.App.ErrWriter, "warning: the --sign-cmd signatures are not checked; pass --public with the signer's public key to check them before anything is written")
		}
	}
	var pub *trust.PublicKey
	if p := c.String("public"); p != "" {
		if pub, err = readPublicKey(p); err != nil {
			return failed(c, err, "")
		}
		if pub.Algorithm() != signer.Algorithm() {
			return usage(c, "--public is an %s key but the signer produces %s signatures", pub.Algorithm(), signer.Algorithm())
		}
	}
	commit := c.String("commit")
	if commit == "" {
		out, err := exec.CommandContext(c.Context, "git", "rev-parse", "HEAD").Output()
		if err != nil {
			return usage(c, "cannot determine the CI commit with 'git rev-parse HEAD' (%v); pass --commit", err)
		}
		commit = strings.TrimSpace(string(out))
	}
	unsigned, err := readInput(c, c.String("fleet"))
	if err != nil {
		return ioError(c, err)
	}
	bundle, err := release.Sign(unsigned, release.Options{Signer: signer, PublicKey: pub, Commit: commit, Now: now})
	if err != nil {
		return failed(c, err, wavesHint(unsigned))
	}
	for _, w := range bundle.Warnings {
		fmt.Fprintf(c.App.ErrWriter, "warning: %s\n", w)
	}
	out := c.String("out")
	if err := release.WriteDir(out, bundle); err != nil {
		return failed(c, err, "")
	}
	if c.Bool("json") {
		files := []string{}
		for _, a := range bundle.Artifacts() {
			p := filepath.Join(out, filepath.FromSlash(a.Path))
			files = append(files, p, p+release.SigSuffix)
		}
		rollouts := bundle.RolloutIDs
		if rollouts == nil {
			rollouts = []string{}
		}
		return writeJSON(c.App.Writer, map[string]any{
			"fleetResolvedHash": bundle.FleetResolvedHash,
			"ciCommit":          commit,
			"rollouts":          rollouts,
			"files":             files,
			"warnings":          append([]string{}, bundle.Warnings...),
		})
	}
	fmt.Fprintf(c.App.Writer, "signed release %s (fleet.resolved sha256 %s) into %s\n", commit, bundle.FleetResolvedHash, out)
	for _, id := range bundle.RolloutIDs {
		fmt.Fprintf(c.App.Writer, "  rollout %s\n", id)
	}
	return nil
}

func readPublicKey(path string) (*trust.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if _, err := proto.CheckSyntax(data, ""); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", trust.ErrInvalidKey, path, err)
	}
	var k proto.PublicKey
	if err := proto.DecodeChecked(data, &k); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", trust.ErrInvalidKey, path, err)
	}
	pk, err := trust.ParsePublicKey(k)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return pk, nil
}

// wavesHint says how to write the waves of a channel that has hosts to
// roll out and no waves.<channel> (absent or null): the mistake of a fleet
// written by hand that ValidateFleet reports host by host. Empty when
// there is none, or the fleet cannot be read.
func wavesHint(unsigned []byte) string {
	f, err := proto.DecodeFleetResolved(unsigned)
	if err != nil {
		return ""
	}
	first := map[string]string{} // channel without waves -> a host of it
	for _, name := range slices.Sorted(maps.Keys(f.Hosts)) {
		h := f.Hosts[name]
		if _, known := f.Channels[h.Channel]; known && h.ClosureHash != nil && f.Waves[h.Channel] == nil && first[h.Channel] == "" {
			first[h.Channel] = name
		}
	}
	if len(first) == 0 {
		return ""
	}
	var parts []string
	for _, ch := range slices.Sorted(maps.Keys(first)) {
		parts = append(parts, fmt.Sprintf(`waves.%s = [{"hosts": [%q, …]}, …]`, ch, first[ch]))
	}
	return "list each channel's hosts in its waves, in order: " + strings.Join(parts, "; ") +
		" (an empty list, [], rolls a channel out all at once; rfcs/0001 §2)"
}
