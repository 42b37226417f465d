// Command nixfleet-agent is the nixfleet agent (rfcs/0008-agent.md).
package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/agent"
	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/internal/cliapp"
	"github.com/nixfleet/nixfleet/internal/sshkey"
	"github.com/nixfleet/nixfleet/trust"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// env names the environment variable that mirrors a flag.
func env(flag string) []string { return cliapp.Env("NIXFLEET_AGENT", flag) }

// run is the whole command: tests call it directly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := &cli.App{Name: "nixfleet-agent", Usage: "the nixfleet agent",
		Description: "The agent of one host: it checks in with the control plane, verifies what it\n" +
			"is told to run, switches to it, confirms, and rolls itself back when it cannot\n" +
			"confirm (rfcs/0008). Run it with `run`.",
		Commands: []*cli.Command{runCommand(), cliapp.ManCommand(8)}}
	return cliapp.Run(ctx, app, args, stdout, stderr)
}

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "check in with the control plane and apply what it says, verified",
		Description: "Every flag has an environment variable (NIXFLEET_AGENT_<FLAG>, like\n" +
			"NIXFLEET_AGENT_CP) and a key in the --config file, a TOML file whose keys are\n" +
			"the flag names (cp = \"https://…\", wait = \"30s\", substituter = [\"…\"]).\n" +
			"Flags win over the environment, which wins over the file.\n" +
			"The host key is the SSH ed25519 host key: the mutual-TLS identity and the\n" +
			"key that signs reports; the control plane admits it only if CI signed it\n" +
			"as this host's pubkey.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", EnvVars: env("config"), Usage: "TOML config `FILE`: keys are flag names (rfcs/0008)"},
			&cli.StringFlag{Name: "cp", EnvVars: env("cp"), Usage: "control plane `URL` (https://…)"},
			&cli.StringFlag{Name: "hostname", EnvVars: env("hostname"), Usage: "this host's `NAME` in the fleet (default: the kernel's)"},
			&cli.StringFlag{Name: "host-key", Value: "/etc/ssh/ssh_host_ed25519_key", EnvVars: env("host-key"), Usage: "SSH ed25519 host key `FILE`"},
			&cli.StringFlag{Name: "trust", Value: "/etc/nixfleet/trust.json", EnvVars: env("trust"), Usage: "trust.json `FILE`"},
			&cli.StringFlag{Name: "cp-ca", EnvVars: env("cp-ca"), Usage: "PEM `FILE` of the CA that signs the control plane's certificate (default: system roots)"},
			&cli.StringFlag{Name: "state-dir", Value: "/var/lib/nixfleet-agent", EnvVars: env("state-dir"), Usage: "state `DIR`"},
			&cli.StringFlag{Name: "probes", EnvVars: env("probes"), Usage: "health probes `FILE` (JSON)"},
			&cli.StringFlag{Name: "profile", Value: agent.SystemProfile, EnvVars: env("profile"), Usage: "system profile `PATH`"},
			&cli.StringSliceFlag{Name: "substituter", EnvVars: env("substituter"), Usage: "binary cache `URL` (repeatable)"},
			&cli.StringFlag{Name: "store-dir", Value: "/nix/store", EnvVars: env("store-dir")},
			&cli.StringFlag{Name: "current-system", Value: "/run/current-system", EnvVars: env("current-system")},
			&cli.StringFlag{Name: "booted-system", Value: "/run/booted-system", EnvVars: env("booted-system")},
			&cli.StringFlag{Name: "boot-id-file", Value: "/proc/sys/kernel/random/boot_id", EnvVars: env("boot-id-file"),
				Usage: "`FILE` holding the kernel's boot id, which tells a reboot"},
			&cli.StringFlag{Name: "boot-loader", Value: "auto", EnvVars: env("boot-loader"),
				Usage: "`LOADER` for reboots the control plane orders: systemd-boot, grub, none (refuse them) or auto (systemd-boot " +
					"on EFI when bootctl is-installed, else grub when /boot/grub/grub.cfg exists, else none)"},
			&cli.StringFlag{Name: "detach", Value: "systemd-run --collect --quiet --wait --unit=nixfleet-switch-{n} --", EnvVars: env("detach"),
				Usage: "`COMMAND` prefix that runs the switch outside the agent; \"\" runs it as a child"},
			&cli.DurationFlag{Name: "wait", Value: 30 * time.Second, EnvVars: env("wait"), Usage: "long-poll of a check-in"},
			&cli.DurationFlag{Name: "quarantine", Value: agent.DefaultQuarantine, EnvVars: env("quarantine"), Usage: "hold a failed closure back this long"},
			&cli.StringFlag{Name: "metrics-file", EnvVars: env("metrics-file"),
				Usage: "node-exporter textfile `FILE` (NAME.prom) the agent rewrites, atomically, after each check-in and activation outcome; \"\" writes none"},
			&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: env("log-level"), Usage: "debug, info, warn or error"},
			&cli.StringFlag{Name: "log-format", Value: "json", EnvVars: env("log-format"), Usage: "text (key=value lines) or json"},
		},
		Action: runAgent,
	}
}

func runAgent(c *cli.Context) error {
	if _, err := cliapp.Configure(c, cliapp.ConfigFile{Path: c.String("config")}); err != nil {
		return err
	}
	log, err := cliapp.Logger(c.App.ErrWriter, c.String("log-level"), c.String("log-format"))
	if err != nil {
		return err
	}
	if c.String("cp") == "" {
		return cliapp.Usage(errors.New("--cp is required"))
	}
	hostname := c.String("hostname")
	if hostname == "" {
		h, err := os.Hostname()
		if err != nil {
			return err
		}
		hostname = h
	}
	key, err := sshkey.Read(c.String("host-key"))
	if err != nil {
		return err
	}
	tb, err := os.ReadFile(c.String("trust"))
	if err != nil {
		return err
	}
	roots, err := trust.ParseRoots(tb)
	if err != nil {
		return fmt.Errorf("%s: %w", c.String("trust"), err)
	}
	opts := apiclient.Options{Key: key, Name: hostname}
	if f := c.String("cp-ca"); f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		opts.ServerCAs = x509.NewCertPool()
		if !opts.ServerCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s: no PEM certificate", f)
		}
	}
	api, err := apiclient.New(c.String("cp"), opts)
	if err != nil {
		return cliapp.Usage(err)
	}
	if err := os.MkdirAll(c.String("state-dir"), 0o700); err != nil {
		return err
	}
	exe := agent.NewNixExecutor(agent.NixConfig{StoreDir: c.String("store-dir"), Profile: c.String("profile"),
		CurrentSystem: c.String("current-system"), BootedSystem: c.String("booted-system"), BootIDFile: c.String("boot-id-file"),
		Substituters: c.StringSlice("substituter"), TrustedKeys: roots.CacheKeys(),
		Detach: strings.Fields(c.String("detach")), DetachSet: true})
	loader, err := agent.NewBootLoader(c.Context, c.String("boot-loader"), agent.LoaderConfig{Profile: c.String("profile")})
	if err != nil {
		return cliapp.Usage(err)
	}
	cfg := agent.Config{Policy: agent.Policy{Hostname: hostname, StoreDir: c.String("store-dir"), QuarantineFor: c.Duration("quarantine")},
		API: api, Roots: roots, StateDir: c.String("state-dir"), Exec: exe, Loader: loader, Wait: c.Duration("wait"), Log: log,
		MetricsFile: c.String("metrics-file")}
	if err := addProbes(c.Context, &cfg, c.String("probes")); err != nil {
		return err
	}
	a, err := agent.New(cfg)
	if err != nil {
		return err
	}
	log.Info("agent running", "hostname", hostname, "cp", c.String("cp"), "stateDir", c.String("state-dir"), "phase", a.State().Phase,
		"bootLoader", loader.Name())
	return a.Run(c.Context)
}
