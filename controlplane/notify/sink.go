package notify

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"time"

	"github.com/nixfleet/nixfleet/proto"
)

// Format is how a sink's bodies are written (Body).
type Format string

// The formats.
const (
	// FormatJSON is nixfleet's own body: the event and a summary.
	FormatJSON Format = "json"
	// FormatSlack is {"text": summary}, for Slack and Mattermost
	// incoming webhooks.
	FormatSlack Format = "slack"
	// FormatAlertmanager is one alert, for Alertmanager's POST
	// /api/v2/alerts.
	FormatAlertmanager Format = "alertmanager"
)

// Formats lists the formats.
var Formats = []Format{FormatJSON, FormatSlack, FormatAlertmanager}

// Defaults and bounds of a sink's settings.
const (
	DefaultTimeout    = 10 * time.Second
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = 5 * time.Minute
	// MaxTimeout bounds Timeout: a shutting-down control plane waits that
	// long for a POST in flight before it gives its lease up.
	MaxTimeout = time.Minute
	// MaxRetryAfter bounds how long a sink's Retry-After may hold it.
	MaxRetryAfter = time.Hour
)

// Sink is one webhook the journal is sent to.
type Sink struct {
	// Name identifies the sink: its cursor in the store, its metrics'
	// label, X-Nixfleet-Delivery. [a-z0-9][a-z0-9_-]{0,62}.
	Name string
	// URL is where each event is POSTed: http or https.
	URL string
	// Format is the bodies' (FormatJSON when empty).
	Format Format
	// Events are the categories the sink is sent; empty: every one.
	Events []Category
	// Channels are the channels whose events the sink is sent; empty:
	// every channel. An event of no channel is sent either way.
	Channels []string
	// Secret is the key of X-Nixfleet-Signature; nil: no signature.
	Secret []byte
	// Timeout bounds one POST, answer included (DefaultTimeout when 0).
	Timeout time.Duration
	// MinBackoff is the wait before the first retry of an event, doubled
	// after each further failure up to MaxBackoff (DefaultMinBackoff and
	// DefaultMaxBackoff when 0).
	MinBackoff, MaxBackoff time.Duration
	// RootCAs verify an https sink's certificate; nil: the system's.
	RootCAs *x509.CertPool
}

var sinkName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// CheckName says what is wrong with a sink name, if anything.
func CheckName(name string) error {
	if !sinkName.MatchString(name) {
		return fmt.Errorf("sink name %q: want 1 to 63 of a-z, 0-9, _ and -, starting with a letter or digit", name)
	}
	return nil
}

// CheckURL says what is wrong with a sink URL, if anything.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q is not an http or https URL", u.Redacted())
	}
	if u.Fragment != "" {
		return fmt.Errorf("%q has a fragment", u.Redacted())
	}
	return nil
}

// ParseFormat returns the format named s ("" is FormatJSON).
func ParseFormat(s string) (Format, error) {
	if s == "" {
		return FormatJSON, nil
	}
	if f := Format(s); slices.Contains(Formats, f) {
		return f, nil
	}
	return "", fmt.Errorf("unknown format %q (known: json, slack, alertmanager)", s)
}

// withDefaults fills the zero settings.
func (s Sink) withDefaults() Sink {
	if s.Format == "" {
		s.Format = FormatJSON
	}
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	if s.MinBackoff == 0 {
		s.MinBackoff = DefaultMinBackoff
	}
	if s.MaxBackoff == 0 {
		s.MaxBackoff = max(DefaultMaxBackoff, s.MinBackoff)
	}
	return s
}

// Check says what is wrong with a sink, its zero settings taken as their
// defaults.
func (s Sink) Check() error {
	s = s.withDefaults()
	var errs []error
	if err := CheckName(s.Name); err != nil {
		errs = append(errs, err)
	}
	if err := CheckURL(s.URL); err != nil {
		errs = append(errs, fmt.Errorf("url: %w", err))
	}
	if _, err := ParseFormat(string(s.Format)); err != nil {
		errs = append(errs, err)
	}
	for _, c := range s.Events {
		if _, err := ParseCategory(string(c)); err != nil {
			errs = append(errs, err)
		}
	}
	if slices.Contains(s.Channels, "") {
		errs = append(errs, errors.New("an empty channel name"))
	}
	if s.Timeout < 0 || s.Timeout > MaxTimeout {
		errs = append(errs, fmt.Errorf("timeout %s: want more than 0 and at most %s", s.Timeout, MaxTimeout))
	}
	if s.MinBackoff < 0 || s.MaxBackoff < s.MinBackoff {
		errs = append(errs, fmt.Errorf("backoff %s to %s: want more than 0, the first at most the last", s.MinBackoff, s.MaxBackoff))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("notification sink %q: %w", s.Name, err)
	}
	return nil
}

// CheckSinks checks every sink and that their names differ.
func CheckSinks(sinks []Sink) error {
	seen := map[string]bool{}
	for _, s := range sinks {
		if err := s.Check(); err != nil {
			return err
		}
		if seen[s.Name] {
			return fmt.Errorf("notification sink %q: the name is taken", s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}

// Accepts reports whether the sink is sent an event of a category: one of
// its Events (any, when it has none), of one of its Channels (any, when it
// has none, or when the event is of no channel).
func (s Sink) Accepts(c Category, e proto.Event) bool {
	if len(s.Events) > 0 && !slices.Contains(s.Events, c) {
		return false
	}
	return len(s.Channels) == 0 || e.Channel == "" || slices.Contains(s.Channels, e.Channel)
}

// Backoff is how long the sink waits before it tries an event again after
// its attempt-th failure in a row (from 1): MinBackoff, doubled after each
// further failure, at most MaxBackoff; and never less than a Retry-After
// the sink answered (retryAfter), itself at most MaxRetryAfter.
func (s Sink) Backoff(attempt int, retryAfter time.Duration) time.Duration {
	s = s.withDefaults()
	d := s.MinBackoff
	for i := 1; i < attempt && d < s.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, s.MaxBackoff)
	return max(d, min(retryAfter, MaxRetryAfter))
}
