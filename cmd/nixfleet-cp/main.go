// Command nixfleet-cp is the nixfleet control plane.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/controlplane/notify"
	"github.com/nixfleet/nixfleet/controlplane/prom"
	"github.com/nixfleet/nixfleet/internal/cliapp"
	"github.com/nixfleet/nixfleet/internal/sdnotify"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command: tests call it directly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := &cli.App{Name: "nixfleet-cp", Usage: "the nixfleet control plane",
		Description: "A replica of the control plane: it verifies the releases CI signed in the fleet\n" +
			"repository and rolls them out to the hosts' agents, wave by wave, under the\n" +
			"rollout policy (rfcs/0006). Run it with `serve`.",
		Commands: []*cli.Command{serveCommand(), cliapp.ManCommand(8)}}
	return cliapp.Run(ctx, app, args, stdout, stderr)
}

// env names the environment variable that mirrors a flag.
func env(flag string) []string { return cliapp.Env("NIXFLEET_CP", flag) }

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run a control plane replica",
		Description: "Every flag has an environment variable (NIXFLEET_CP_<FLAG>, like\n" +
			"NIXFLEET_CP_LISTEN) and a key in the --config file, a TOML file whose keys\n" +
			"are the flag names (listen = \"127.0.0.1:8443\", tick-interval = \"30s\",\n" +
			"insecure-dev = false). Flags win over the environment, which wins over the\n" +
			"file. A file that starts with { is read as the former JSON format, deprecated.\n" +
			"The file may also hold [[notifications.webhook]] tables: the webhooks the\n" +
			"journal is sent to (rfcs/0006 §Notifications); and [[prometheus.source]]\n" +
			"tables: the named Prometheus servers canary analyses may query besides\n" +
			"the --prometheus-* one (rfcs/0006 §Canary analysis).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", EnvVars: env("config"), Usage: "TOML config `FILE`: keys are flag names (rfcs/0006)"},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8443", EnvVars: env("listen"), Usage: "listen `ADDRESS`"},
			&cli.StringFlag{Name: "db", EnvVars: env("db"), Usage: "store `URL`: sqlite:///path or postgres://… (default: SQLite in the state directory)"},
			&cli.StringFlag{Name: "state-dir", Value: "/var/lib/nixfleet-cp", EnvVars: env("state-dir"), Usage: "state `DIR`"},
			&cli.StringFlag{Name: "repo", EnvVars: env("repo"), Usage: "fleet repository `PATH|URL`"},
			&cli.StringFlag{Name: "trust", Value: "/etc/nixfleet/trust.json", EnvVars: env("trust"), Usage: "trust.json `FILE`"},
			&cli.StringFlag{Name: "operators", EnvVars: env("operators"), Usage: "operators `FILE` (JSON)"},
			&cli.StringFlag{Name: "tls-cert", EnvVars: env("tls-cert"), Usage: "server certificate `FILE` (PEM)"},
			&cli.StringFlag{Name: "tls-key", EnvVars: env("tls-key"), Usage: "server key `FILE` (PEM)"},
			&cli.BoolFlag{Name: "insecure-dev", EnvVars: env("insecure-dev"), Usage: "plain HTTP, no authentication, loopback only (tests, demo)"},
			&cli.StringFlag{Name: "webhook-secret-file", EnvVars: env("webhook-secret-file"), Usage: "enable POST /v1/hooks/git with the secret in `FILE`"},
			&cli.StringFlag{Name: "replica-id", EnvVars: env("replica-id"), Usage: "this replica's `NAME` in the leader lease"},
			&cli.DurationFlag{Name: "tick-interval", Value: 30 * time.Second, EnvVars: env("tick-interval"), Usage: "periodic tick"},
			&cli.DurationFlag{Name: "poll-interval", Value: 5 * time.Second, EnvVars: env("poll-interval"), Usage: "git poll"},
			&cli.StringSliceFlag{Name: "watch-ref", Value: cli.NewStringSlice(controlplane.DefaultWatchRef), EnvVars: env("watch-ref"),
				Usage: "verify the releases at `REF` (a ref name, or a prefix ending in /*) ahead of their promotion to a channel (repeatable; none: no ref)"},
			&cli.DurationFlag{Name: "lease-ttl", Value: 10 * time.Second, EnvVars: env("lease-ttl"), Usage: "leader lease"},
			&cli.DurationFlag{Name: "debounce", Value: 100 * time.Millisecond, EnvVars: env("debounce"), Usage: "a trigger ticks at once unless a tick started within this `DURATION`; then the triggers of the window become one tick at its end"},
			&cli.DurationFlag{Name: "web-session-ttl", Value: 8 * time.Hour, EnvVars: env("web-session-ttl"), Usage: "how long a dashboard sign-in lasts (rfcs/0011)"},
			&cli.DurationFlag{Name: "retention", Value: 30 * 24 * time.Hour, EnvVars: env("retention"), Usage: "keep events and finished rollouts this long, and hosts that left the fleet while unheard (negative: keep everything)"},
			&cli.DurationFlag{Name: "offline-threshold", Value: reconciler.DefaultOfflineThreshold, EnvVars: env("offline-threshold"),
				Usage: "a host silent this long is offline: a Pending one is skipped, an in-flight one fails (rfcs/0003 rule 6)"},
			&cli.BoolFlag{Name: "forecasts", Value: true, EnvVars: env("forecasts"),
				Usage: "make forecasts of the live rollouts beside the ticks (rfcs/0014); --forecasts=false saves their CPU on a large fleet"},
			&cli.DurationFlag{Name: "forecast-activation", Value: reconciler.DefaultForecastActivation, EnvVars: env("forecast-activation"),
				Usage: "how long forecasts assume a host takes to switch (rfcs/0014)"},
			&cli.DurationFlag{Name: "confirm-window", Value: reconciler.DefaultConfirmWindow, EnvVars: env("confirm-window"),
				Usage: "how long an agent has to confirm a switch before it rolls itself back and the host fails (rfcs/0008)"},
			&cli.DurationFlag{Name: "readiness-deadline", Value: reconciler.DefaultReadinessDeadline, EnvVars: env("readiness-deadline"),
				Usage: "a wave that makes no progress this long, beyond its soak, halts as stalled (rfcs/0003 rule 11)"},
			&cli.IntFlag{Name: "partial-visibility-pct", Value: reconciler.DefaultPartialVisibilityPct, EnvVars: env("partial-visibility-pct"),
				Usage: "a channel with more than this `PERCENT` of its hosts late (silent for half the offline threshold) at once is in partial visibility (1-100; 100 turns it off)"},
			&cli.IntFlag{Name: "partial-visibility-min-hosts", Value: reconciler.DefaultPartialVisibilityMinHosts, EnvVars: env("partial-visibility-min-hosts"),
				Usage: "and at least this `NUMBER` of them (fewer silent hosts are judged one by one)"},
			&cli.IntFlag{Name: "tick-max-host-moves", Value: reconciler.DefaultMaxHostMoves, EnvVars: env("tick-max-host-moves"),
				Usage: "a tick moves at most this `NUMBER` of hosts (observed, dispatched, rolled back) and the next follows at once; -1: no bound"},
			&cli.Float64Flag{Name: "rate-limit-per-host", Value: controlplane.DefaultRatePerHost, EnvVars: env("rate-limit-per-host"),
				Usage: "requests per second (`RATE`) each host, and each operator, may send in the long run; 0 turns the limit off"},
			&cli.IntFlag{Name: "rate-limit-burst", Value: controlplane.DefaultRateHostBurst, EnvVars: env("rate-limit-burst"),
				Usage: "requests (`NUMBER`) each host, and each operator, may send at once"},
			&cli.Float64Flag{Name: "rate-limit-per-address", Value: controlplane.DefaultRatePerAddress, EnvVars: env("rate-limit-per-address"),
				Usage: "requests per second (`RATE`) from one address (IPv4, IPv6 /64) without a known client key; 0 turns the limit off"},
			&cli.IntFlag{Name: "rate-limit-address-burst", Value: controlplane.DefaultRateAddressBurst, EnvVars: env("rate-limit-address-burst"),
				Usage: "requests (`NUMBER`) one address may send at once without a known client key"},
			&cli.IntFlag{Name: "prefetch-concurrency", Value: controlplane.DefaultPrefetchConcurrency, EnvVars: env("prefetch-concurrency"),
				Usage: "hosts (`NUMBER`) this replica lets fetch their coming closure at once, ahead of their wave (per replica); 0 turns prefetch off"},
			&cli.StringFlag{Name: "prometheus-url", EnvVars: env("prometheus-url"), Usage: "Prometheus `URL` the canary analyses query (rfcs/0006 §Canary analysis)"},
			&cli.StringFlag{Name: "prometheus-ca", EnvVars: env("prometheus-ca"), Usage: "CA `FILE` (PEM) to trust for an https Prometheus, instead of the system's"},
			&cli.StringFlag{Name: "prometheus-cert", EnvVars: env("prometheus-cert"), Usage: "client certificate `FILE` (PEM) for Prometheus"},
			&cli.StringFlag{Name: "prometheus-key", EnvVars: env("prometheus-key"), Usage: "client key `FILE` (PEM) for Prometheus"},
			&cli.StringFlag{Name: "prometheus-bearer-token-file", EnvVars: env("prometheus-bearer-token-file"), Usage: "bearer token `FILE` for Prometheus"},
			&cli.StringFlag{Name: "prometheus-basic-auth-user", EnvVars: env("prometheus-basic-auth-user"), Usage: "basic auth user `NAME` for Prometheus (not with a bearer token)"},
			&cli.StringFlag{Name: "prometheus-basic-auth-password-file", EnvVars: env("prometheus-basic-auth-password-file"), Usage: "basic auth password `FILE` for Prometheus"},
			&cli.StringSliceFlag{Name: "prometheus-header", EnvVars: env("prometheus-header"),
				Usage: "send this header with every query, like a tenant's 'X-Scope-OrgID: team-a' (`'NAME: VALUE'`, repeatable; not Authorization)"},
			&cli.StringFlag{Name: "prometheus-proxy-url", EnvVars: env("prometheus-proxy-url"), Usage: "HTTP proxy `URL` to reach Prometheus through (default: the environment's)"},
			&cli.DurationFlag{Name: "prometheus-timeout", Value: 10 * time.Second, EnvVars: env("prometheus-timeout"), Usage: "how long one analysis query may take"},
			&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: env("log-level"), Usage: "debug, info, warn or error"},
			&cli.StringFlag{Name: "log-format", Value: "json", EnvVars: env("log-format"), Usage: "text (key=value lines) or json"},
		},
		Action: serve,
	}
}

func serve(c *cli.Context) error {
	cfg, log, err := configure(c)
	if err != nil {
		return err
	}
	srv, err := controlplane.New(c.Context, cfg, log)
	if err != nil {
		return err
	}
	return srv.Run(c.Context)
}

// configure builds the replica's configuration and log from the flags,
// the environment and the --config file.
func configure(c *cli.Context) (controlplane.Config, *slog.Logger, error) {
	var cfg controlplane.Config
	var sinks []notify.Sink
	var sources []prom.Source
	src, err := cliapp.Configure(c, cliapp.ConfigFile{Path: c.String("config"), LegacyJSON: checkJSON,
		Sections: map[string]func(*cliapp.Section) error{"notifications": readNotifications(&sinks), "prometheus": readPrometheus(&sources)}})
	if err != nil {
		return cfg, nil, err
	}
	log, err := cliapp.Logger(c.App.ErrWriter, c.String("log-level"), c.String("log-format"))
	if err != nil {
		return cfg, nil, err
	}
	for _, w := range src.Warnings {
		log.Warn(w)
	}
	cfg = controlplane.Config{
		Listen: c.String("listen"), DB: c.String("db"), Repo: c.String("repo"), StateDir: c.String("state-dir"),
		TrustFile: c.String("trust"), OperatorsFile: c.String("operators"),
		TLSCert: c.String("tls-cert"), TLSKey: c.String("tls-key"), InsecureDev: c.Bool("insecure-dev"),
		ReplicaID: c.String("replica-id"), TickInterval: c.Duration("tick-interval"), PollInterval: c.Duration("poll-interval"), WatchRefs: c.StringSlice("watch-ref"),
		LeaseTTL: c.Duration("lease-ttl"), Debounce: c.Duration("debounce"), EventRetention: c.Duration("retention"),
		WebSessionTTL: c.Duration("web-session-ttl"), ForecastActivation: c.Duration("forecast-activation"),
		NoForecasts: !c.Bool("forecasts"),
		Tunables: reconciler.Tunables{
			OfflineThresholdSeconds:   int(c.Duration("offline-threshold") / time.Second),
			ConfirmWindowSeconds:      int(c.Duration("confirm-window") / time.Second),
			ReadinessDeadlineSeconds:  int(c.Duration("readiness-deadline") / time.Second),
			PartialVisibilityPct:      c.Int("partial-visibility-pct"),
			PartialVisibilityMinHosts: c.Int("partial-visibility-min-hosts"),
			MaxHostMoves:              c.Int("tick-max-host-moves"),
		},
		RateLimit: controlplane.RateLimit{
			PerHost: c.Float64("rate-limit-per-host"), HostBurst: c.Int("rate-limit-burst"),
			PerAddress: c.Float64("rate-limit-per-address"), AddressBurst: c.Int("rate-limit-address-burst"),
		},
		Prometheus: prom.Config{URL: c.String("prometheus-url"), CAFile: c.String("prometheus-ca"),
			CertFile: c.String("prometheus-cert"), KeyFile: c.String("prometheus-key"),
			BearerTokenFile: c.String("prometheus-bearer-token-file"), Timeout: c.Duration("prometheus-timeout"),
			BasicAuthUser: c.String("prometheus-basic-auth-user"), BasicAuthPasswordFile: c.String("prometheus-basic-auth-password-file"),
			ProxyURL: c.String("prometheus-proxy-url")},
		// Under systemd (Type=notify): readiness, watchdog and stop.
		Systemd: sdnotify.FromEnv(),
	}
	if cfg.Prometheus.Headers, err = promHeaders(c.StringSlice("prometheus-header")); err != nil {
		return cfg, nil, cliapp.Usage(err)
	}
	if _, err := prom.New(cfg.Prometheus); err != nil {
		return cfg, nil, cliapp.Usage(fmt.Errorf("--prometheus-*: %w", err))
	}
	if p := cfg.Tunables.PartialVisibilityPct; p < 1 || p > 100 {
		return cfg, nil, cliapp.Usage(fmt.Errorf("--partial-visibility-pct %d: want 1 to 100", p))
	}
	if n := cfg.Tunables.PartialVisibilityMinHosts; n < 1 {
		return cfg, nil, cliapp.Usage(fmt.Errorf("--partial-visibility-min-hosts %d: want at least 1", n))
	}
	if n := cfg.Tunables.MaxHostMoves; n == 0 || n < -1 {
		return cfg, nil, cliapp.Usage(fmt.Errorf("--tick-max-host-moves %d: want at least 1, or -1 for no bound", n))
	}
	if err := cfg.RateLimit.Check(); err != nil {
		return cfg, nil, cliapp.Usage(fmt.Errorf("--rate-limit-*: %w", err))
	}
	if cfg.PrefetchConcurrency = c.Int("prefetch-concurrency"); cfg.PrefetchConcurrency < 0 {
		return cfg, nil, cliapp.Usage(fmt.Errorf("--prefetch-concurrency %d: want 0 (off) or more", cfg.PrefetchConcurrency))
	}
	if f := c.String("webhook-secret-file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return cfg, nil, err
		}
		cfg.WebhookSecret = strings.TrimSpace(string(b))
	}
	cfg.Notifications, cfg.PrometheusSources, cfg.Version = sinks, sources, c.App.Version
	return cfg, log, nil
}

// promHeaders reads the --prometheus-header values, "Name: value" each
// (promHeader).
func promHeaders(vals []string) (http.Header, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	h := http.Header{}
	for _, v := range vals {
		name, value, err := promHeader(v)
		switch {
		case errors.Is(err, errAuthorization):
			name, _, _ := strings.Cut(v, ":")
			return nil, fmt.Errorf("--prometheus-header %s: use --prometheus-bearer-token-file or --prometheus-basic-auth-user and -password-file", strings.TrimSpace(name))
		case err != nil:
			return nil, fmt.Errorf("--prometheus-header %q: %w", v, err)
		}
		h.Add(name, value)
	}
	return h, nil
}

// checkJSON applies the strict JSON syntax rules (proto.CheckSyntax:
// duplicate members, size, depth) to a --config file in the deprecated
// JSON format, as nixfleet-cp always has.
func checkJSON(data []byte) error {
	_, err := proto.CheckSyntax(data, "")
	return err
}
