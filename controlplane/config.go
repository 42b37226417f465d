package controlplane

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/notify"
	"github.com/nixfleet/nixfleet/controlplane/prom"
	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/internal/sdnotify"
	"github.com/nixfleet/nixfleet/reconciler"
)

// Config is everything a control plane replica needs. cmd/nixfleet-cp
// fills it from flags, environment variables and a config file.
type Config struct {
	// Listen is the address to serve on, like "127.0.0.1:8443".
	Listen string
	// DB is the store URL: "sqlite:///path/state.db" or "postgres://…".
	DB string
	// Repo is the fleet repository: a local path or a remote URL.
	Repo string
	// StateDir holds the SQLite database by default and the mirror of a
	// remote repository.
	StateDir string
	// TrustFile is trust.json.
	TrustFile string
	// OperatorsFile lists operators (rfcs/0007 §Authentication 2); empty means none.
	OperatorsFile string
	// TLSCert and TLSKey are the server's certificate and key (PEM).
	TLSCert, TLSKey string
	// InsecureDev serves plain HTTP without authentication, on loopback
	// only, for tests and the demo.
	InsecureDev bool
	// WebhookSecret enables POST /v1/hooks/git (HMAC-SHA256 of the body).
	WebhookSecret string

	// ReplicaID names this replica in the leader lease; a random id when
	// empty.
	ReplicaID string
	// TickInterval is the periodic tick (default 30s); Debounce is the
	// window after a tick starts in which triggers wait and become one tick
	// at its end (default 100ms; a trigger outside it ticks at once);
	// LeaseTTL is the leader lease (default 10s).
	TickInterval time.Duration
	Debounce     time.Duration
	LeaseTTL     time.Duration
	// PollInterval is how often git is polled (default 5s).
	PollInterval time.Duration
	// WatchRefs are the refs whose releases are verified ahead of their
	// promotion (rfcs/0006 §Channel source 8): ref names, or prefixes
	// ending in "/*" matching one more level; none when empty or "none".
	// cmd/nixfleet-cp sets DefaultWatchRef.
	WatchRefs []string
	// EventRetention prunes older events and finished rollouts, and
	// forgets hosts that left the fleet unheard this long (default 30
	// days; 0 keeps the default, negative disables pruning).
	EventRetention time.Duration
	// WebSessionTTL is how long a dashboard session lasts after its
	// sign-in (default 8 h; rfcs/0011).
	WebSessionTTL time.Duration
	// Tunables go to the reconciler.
	Tunables reconciler.Tunables
	// ForecastActivation is how long the forecasts assume a host takes to
	// switch (rfcs/0014; default reconciler.DefaultForecastActivation).
	// NoForecasts: the leader makes none.
	ForecastActivation time.Duration
	NoForecasts        bool
	// Prometheus is where canary analyses are measured (rfcs/0006
	// §Canary analysis): the default source, for analyses that name none;
	// no URL: their every measurement is inconclusive.
	Prometheus prom.Config
	// PrometheusSources are the named Prometheus sources analyses may
	// name (proto.Analysis.Source); a measurement of an analysis naming
	// another is inconclusive (analysis_source_unknown).
	PrometheusSources []prom.Source
	// RateLimit bounds how fast each client may call the API (rfcs/0006
	// §Rate limits). The zero value serves without limits; cmd/nixfleet-cp
	// sets the Default… values. --insecure-dev has none.
	RateLimit RateLimit
	// PrefetchConcurrency bounds how many hosts this replica lets fetch
	// their coming closure at once, ahead of their dispatch (rfcs/0006
	// §Prefetch); 0 turns prefetch off. cmd/nixfleet-cp sets
	// DefaultPrefetchConcurrency.
	PrefetchConcurrency int
	// Notifications are the webhook sinks the journal is sent to
	// (rfcs/0006 §Notifications); none when empty.
	Notifications []notify.Sink
	// Version is this build's, in the User-Agent of notifications
	// ("dev" when empty).
	Version string
	// Systemd is told when the replica is ready (the store answers and
	// the first read of the fleet repository ended), kept alive while its
	// loop runs (its watchdog), and told when it stops; nil tells nobody
	// (rfcs/0006 §Processes and configuration).
	Systemd *sdnotify.Notifier

	// Clock is the replica's one seam to time (clock.Real when nil): the
	// time every rule reads, and the tickers and timers of its loops. How
	// long its own work took (metrics, logs) is measured on the monotonic
	// clock instead.
	Clock clock.Clock
}

// DefaultWatchRef is cmd/nixfleet-cp's default Config.WatchRefs: every
// branch but the channels' (refs/heads/channels/… has a level more).
const DefaultWatchRef = "refs/heads/*"

// CheckWatchRefs checks the patterns of Config.WatchRefs, and returns
// them without "none".
func CheckWatchRefs(patterns []string) ([]string, error) {
	var out []string
	for _, p := range patterns {
		if p == "none" {
			continue
		}
		name, wild := strings.CutSuffix(p, "/*")
		if !strings.HasPrefix(p, "refs/") || strings.ContainsAny(name, "*?[\\ ") || strings.Contains(p, "//") ||
			(!wild && strings.HasSuffix(p, "/")) || name == "refs" {
			return nil, fmt.Errorf("controlplane: watch ref %q: want a ref name under refs/, or a prefix of one ending in /* (refs/heads/*)", p)
		}
		out = append(out, p)
	}
	return out, nil
}

func (c *Config) setDefaults() {
	if c.TickInterval <= 0 {
		c.TickInterval = 30 * time.Second
	}
	if c.Debounce <= 0 {
		c.Debounce = 100 * time.Millisecond
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 5 * time.Second
	}
	if c.WebSessionTTL == 0 {
		c.WebSessionTTL = 8 * time.Hour
	}
	if c.EventRetention == 0 {
		c.EventRetention = 30 * 24 * time.Hour
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
}

func (c *Config) check() error {
	if c.Listen == "" {
		return fmt.Errorf("controlplane: no listen address")
	}
	if c.Repo == "" {
		return fmt.Errorf("controlplane: no fleet repository (--repo)")
	}
	if c.TrustFile == "" {
		return fmt.Errorf("controlplane: no trust roots (--trust)")
	}
	if err := c.RateLimit.Check(); err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	if c.ForecastActivation < 0 {
		return fmt.Errorf("controlplane: --forecast-activation %s is negative", c.ForecastActivation)
	}
	if _, err := CheckWatchRefs(c.WatchRefs); err != nil {
		return err
	}
	if c.PrefetchConcurrency < 0 {
		return fmt.Errorf("controlplane: prefetch concurrency %d: want 0 (off) or more", c.PrefetchConcurrency)
	}
	if err := notify.CheckSinks(c.Notifications); err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	if c.InsecureDev {
		host, _, err := net.SplitHostPort(c.Listen)
		if err != nil {
			return fmt.Errorf("controlplane: listen address %q: %w", c.Listen, err)
		}
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("controlplane: --insecure-dev serves without TLS or authentication and refuses to listen on %q; use a loopback address", c.Listen)
		}
		return nil
	}
	if c.TLSCert == "" || c.TLSKey == "" {
		return fmt.Errorf("controlplane: TLS needs --tls-cert and --tls-key (or --insecure-dev on loopback)")
	}
	return nil
}
