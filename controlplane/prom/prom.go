// Package prom queries a Prometheus server's HTTP API for the control
// plane's canary analyses (rfcs/0006 §Canary analysis): one instant query
// at a given time, answered as the series of its result.
//
// The query goes out through Prometheus's own client (client_golang's
// api/prometheus/v1: a form-encoded POST /api/v1/query, so that a long
// query with a wave's host names meets no URL length limit; the same
// query as a GET only when a server answers the POST 403, 405 or 501),
// over an HTTP client built as Prometheus builds its own
// (prometheus/common/config: basic auth or a bearer token, a CA and a
// client certificate, a proxy, extra headers such as X-Scope-OrgID), with
// a request timeout and a cap on what it reads:
//
//  1. an answer larger than MaxBody, a result of more than MaxSeries
//     series, or a result that is neither an instant vector nor a scalar
//     is an error (an analysis query aggregates);
//  2. an answer with status "error" is an error naming its errorType and
//     error, whatever its HTTP status; any other non-2xx status is an
//     error with the status and the start of the body;
//  3. every error says what failed: the reconciler records it as the
//     reason of an inconclusive measurement. Warnings in an answer are
//     ignored.
//
// A control plane may know several Prometheus servers (Sources): its
// default one and named ones, each with its own address, credentials and
// headers (a Mimir, Cortex or Thanos tenant each); an analysis names the
// one it is measured on (proto.Analysis.Source).
package prom

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/config"
	"github.com/prometheus/common/model"

	"github.com/nixfleet/nixfleet/proto"
)

// Limits on an answer.
const (
	MaxBody   = 4 << 20
	MaxSeries = 100
)

// ErrNotConfigured is returned by Query on a nil *Client: the control
// plane has no --prometheus-url.
var ErrNotConfigured = errors.New("prom: no Prometheus is configured (nixfleet-cp serve --prometheus-url)")

// Config says how to reach Prometheus. The files are checked at New and
// read again as each query needs them, so a rotated secret is picked up.
type Config struct {
	// URL is the server's base URL ("http://prometheus:9090", or with a
	// path prefix); the API's paths are appended to it.
	URL string
	// CAFile is a PEM bundle of the CAs to trust for an https URL, instead
	// of the system's; empty for the system's.
	CAFile string
	// CertFile and KeyFile are a client certificate and key (PEM), for a
	// Prometheus behind mutual TLS; both or neither.
	CertFile, KeyFile string
	// BearerTokenFile holds a token sent as "Authorization: Bearer …"
	// (surrounding white space trimmed).
	BearerTokenFile string
	// BasicAuthUser and BasicAuthPasswordFile are HTTP basic auth (the
	// password's surrounding white space trimmed); not with a bearer token.
	BasicAuthUser, BasicAuthPasswordFile string
	// Headers are sent with every query, like a Mimir, Cortex or Thanos
	// tenant (X-Scope-OrgID); Authorization and the headers HTTP itself
	// sets are refused.
	Headers http.Header
	// ProxyURL is an HTTP proxy to reach Prometheus through; empty for the
	// environment's ($HTTPS_PROXY, $HTTP_PROXY, $NO_PROXY).
	ProxyURL string
	// Timeout bounds one query, answer included (default 10 s).
	Timeout time.Duration
}

// Client queries one Prometheus server. A nil *Client answers every query
// with ErrNotConfigured.
type Client struct {
	base *url.URL
	api  v1.API
}

// New checks cfg and builds a client; an empty URL gives a nil client.
func New(cfg Config) (*Client, error) {
	if cfg.URL == "" {
		return nil, nil
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("prom: %q is not an http or https URL", cfg.URL)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	hc, err := httpConfig(cfg)
	if err != nil {
		return nil, err
	}
	rt, err := config.NewRoundTripperFromConfig(hc, "prometheus")
	if err != nil {
		return nil, fmt.Errorf("prom: %w", err)
	}
	ac, err := api.NewClient(api.Config{Address: u.String(),
		Client: &http.Client{Transport: capBody{rt}, Timeout: cfg.Timeout}})
	if err != nil {
		return nil, fmt.Errorf("prom: %w", err)
	}
	return &Client{base: u, api: v1.NewAPI(statusClient{ac})}, nil
}

// httpConfig checks cfg's authentication, headers and proxy, and states
// them as Prometheus's own HTTP client configuration.
func httpConfig(cfg Config) (config.HTTPClientConfig, error) {
	hc := config.DefaultHTTPClientConfig
	hc.TLSConfig = config.TLSConfig{CAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return hc, errors.New("prom: a client certificate needs both a certificate and a key file")
	}
	switch {
	case cfg.BasicAuthPasswordFile != "" && cfg.BasicAuthUser == "":
		return hc, errors.New("prom: a basic auth password file needs a user")
	case cfg.BasicAuthUser != "" && cfg.BearerTokenFile != "":
		return hc, errors.New("prom: basic auth and a bearer token together: give one")
	}
	if cfg.BearerTokenFile != "" {
		if err := checkSecret("bearer token", cfg.BearerTokenFile); err != nil {
			return hc, err
		}
		hc.Authorization = &config.Authorization{Type: "Bearer", CredentialsFile: cfg.BearerTokenFile}
	}
	if cfg.BasicAuthUser != "" {
		hc.BasicAuth = &config.BasicAuth{Username: cfg.BasicAuthUser, PasswordFile: cfg.BasicAuthPasswordFile}
		if cfg.BasicAuthPasswordFile != "" {
			if err := checkSecret("basic auth password", cfg.BasicAuthPasswordFile); err != nil {
				return hc, err
			}
		}
	}
	if len(cfg.Headers) > 0 {
		hc.HTTPHeaders = &config.Headers{Headers: map[string]config.Header{}}
		for name, values := range cfg.Headers {
			if name == "" || strings.ContainsAny(name, " \t\r\n:") {
				return hc, fmt.Errorf("prom: %q is not a header name", name)
			}
			for _, v := range values {
				if strings.ContainsAny(v, "\r\n") {
					return hc, fmt.Errorf("prom: header %s: a value holds a line break", name)
				}
			}
			hc.HTTPHeaders.Headers[name] = config.Header{Values: values}
		}
	}
	if cfg.ProxyURL != "" {
		p, err := url.Parse(cfg.ProxyURL)
		if err != nil || p.Scheme == "" || p.Host == "" {
			return hc, fmt.Errorf("prom: proxy %q is not a URL", cfg.ProxyURL)
		}
		hc.ProxyURL = config.URL{URL: p}
	} else {
		hc.ProxyFromEnvironment = true
	}
	if err := hc.Validate(); err != nil {
		return hc, fmt.Errorf("prom: %w", err)
	}
	return hc, nil
}

// checkSecret reads a secret's file, which must not be empty.
func checkSecret(what, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("prom: %s: %w", what, err)
	}
	if strings.TrimSpace(string(b)) == "" {
		return fmt.Errorf("prom: %s file %s is empty", what, path)
	}
	return nil
}

// Source is a named Prometheus of the control plane (a
// [[prometheus.source]] of nixfleet-cp's config file).
type Source struct {
	// Name is what analyses call it (proto.ValidSourceName).
	Name string
	Config
}

// Sources are the clients of a control plane's Prometheus servers: the
// default one, which analyses without a source are measured on, and the
// named ones.
type Sources struct {
	def   *Client
	named map[string]*Client
}

// NewSources checks the default configuration and every named source
// (New's checks; a name of proto.ValidSourceName, not repeated; a URL) and
// builds their clients. An error names the source.
func NewSources(def Config, named []Source) (*Sources, error) {
	c, err := New(def)
	if err != nil {
		return nil, err
	}
	s := &Sources{def: c, named: make(map[string]*Client, len(named))}
	for _, src := range named {
		switch {
		case !proto.ValidSourceName(src.Name):
			return nil, fmt.Errorf("prom: source %q: want 1 to %d of a-z, 0-9, _ and -, starting with a letter or digit, not %q",
				src.Name, proto.MaxSourceNameLen, proto.DefaultSource)
		case s.named[src.Name] != nil:
			return nil, fmt.Errorf("prom: source %q is configured twice", src.Name)
		case src.URL == "":
			return nil, fmt.Errorf("prom: source %q has no URL", src.Name)
		}
		c, err := New(src.Config)
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", src.Name, err)
		}
		s.named[src.Name] = c
	}
	return s, nil
}

// Client returns the client of the source an analysis names ("": the
// default one, nil when it has no URL, which answers ErrNotConfigured);
// ok is false when there is no source of that name. A nil *Sources has
// only a default source, without a URL.
func (s *Sources) Client(name string) (c *Client, ok bool) {
	if s == nil {
		return nil, name == ""
	}
	if name == "" {
		return s.def, true
	}
	c, ok = s.named[name]
	return c, ok
}

// Names lists the named sources, sorted.
func (s *Sources) Names() []string {
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.named))
	for n := range s.named {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// URL is the server's base URL, for messages ("" for a nil client).
func (c *Client) URL() string {
	if c == nil {
		return ""
	}
	return c.base.String()
}

// Query evaluates an instant query at a time and returns its series,
// sorted by their labels.
func (c *Client) Query(ctx context.Context, query string, at time.Time) ([]proto.MetricSample, error) {
	if c == nil {
		return nil, ErrNotConfigured
	}
	v, _, _, err := c.api.Query(ctx, query, at)
	var apiErr *v1.Error
	if errors.As(err, &apiErr) && apiErr.Type == v1.ErrBadResponse {
		// v1 decodes only scalars, vectors and matrices.
		if t, ok := strings.CutPrefix(apiErr.Msg, "unexpected value type "); ok {
			return nil, resultErr(strings.Trim(t, `"`))
		}
		return nil, fmt.Errorf("prom: %s did not answer as the query API: %w", c.URL(), err)
	}
	if err != nil {
		return nil, fmt.Errorf("prom: %w", err)
	}
	switch r := v.(type) {
	case *model.Scalar:
		return []proto.MetricSample{{Value: r.Value.String()}}, nil
	case model.Vector:
		if len(r) > MaxSeries {
			return nil, fmt.Errorf("prom: the query returned %d series, more than %d: an analysis query must aggregate (sum, max, …)", len(r), MaxSeries)
		}
		out := make([]proto.MetricSample, 0, len(r))
		for _, s := range r {
			if s.Histogram != nil {
				return nil, resultErr("native histogram")
			}
			out = append(out, proto.MetricSample{Metric: labels(s.Metric), Value: s.Value.String()})
		}
		slices.SortFunc(out, func(a, b proto.MetricSample) int { return strings.Compare(a.Metric, b.Metric) })
		return out, nil
	case nil:
		return nil, resultErr("")
	}
	return nil, resultErr(v.Type().String())
}

// Values evaluates a range query from start to end, every step, and
// returns the finite values of every series of its result (a
// comparison's group, proto.Comparison), series by series in label
// order, in time order; NaN and infinite values are left out (no data
// at that moment). The caps are Query's: MaxBody, MaxSeries.
func (c *Client) Values(ctx context.Context, query string, start, end time.Time, step time.Duration) ([]float64, error) {
	if c == nil {
		return nil, ErrNotConfigured
	}
	v, _, _, err := c.api.QueryRange(ctx, query, v1.Range{Start: start, End: end, Step: step})
	if err != nil {
		return nil, fmt.Errorf("prom: %w", err)
	}
	m, ok := v.(model.Matrix)
	if !ok {
		return nil, fmt.Errorf("prom: the result of a range query is a %s, not a matrix", v.Type())
	}
	if len(m) > MaxSeries {
		return nil, fmt.Errorf("prom: the query returned %d series, more than %d: a comparison's query returns at most a series a host", len(m), MaxSeries)
	}
	slices.SortFunc(m, func(a, b *model.SampleStream) int { return strings.Compare(labels(a.Metric), labels(b.Metric)) })
	var out []float64
	for _, s := range m {
		if len(s.Histograms) > 0 {
			return nil, resultErr("native histogram")
		}
		for _, p := range s.Values {
			if f := float64(p.Value); !math.IsNaN(f) && !math.IsInf(f, 0) {
				out = append(out, f)
			}
		}
	}
	return out, nil
}

func resultErr(kind string) error {
	return fmt.Errorf("prom: the result is a %s: an analysis query must return an instant vector or a scalar", cmp.Or(kind, "nothing"))
}

// labels writes a series' labels as PromQL does: name{a="1", b="2"},
// sorted by name (model.Metric's String sorts the pairs as text instead).
func labels(m model.Metric) string {
	var b strings.Builder
	b.WriteString(string(m[model.MetricNameLabel]))
	names := make([]string, 0, len(m))
	for k := range m {
		if k != model.MetricNameLabel {
			names = append(names, string(k))
		}
	}
	slices.Sort(names)
	for i, k := range names {
		if i == 0 {
			b.WriteByte('{')
		} else {
			b.WriteString(", ")
		}
		b.WriteString(k + "=" + strconv.Quote(string(m[model.LabelName(k)])))
	}
	if len(names) > 0 {
		b.WriteByte('}')
	}
	return b.String()
}

// statusClient turns an answer that is not 2xx into an error with its
// status: v1 keeps the errorType and error of 400 and 422 answers only.
type statusClient struct{ api.Client }

func (c statusClient) Do(ctx context.Context, req *http.Request) (*http.Response, []byte, error) {
	resp, body, err := c.Client.Do(ctx, req)
	if err != nil || resp.StatusCode/100 == 2 {
		return resp, body, err
	}
	var a struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
	}
	if json.Unmarshal(body, &a) == nil && a.Status == "error" {
		return resp, body, fmt.Errorf("%s: %s", a.ErrorType, a.Error)
	}
	return resp, body, fmt.Errorf("HTTP %d: %s", resp.StatusCode, snippet(body))
}

// capBody caps the body of every answer at MaxBody.
type capBody struct{ next http.RoundTripper }

func (c capBody) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err == nil {
		resp.Body = &cappedBody{ReadCloser: resp.Body, left: MaxBody}
	}
	return resp, err
}

type cappedBody struct {
	io.ReadCloser
	left int
}

// Read reads at most one byte past the cap, to tell an answer of exactly
// MaxBody bytes from a larger one.
func (b *cappedBody) Read(p []byte) (int, error) {
	if len(p) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	if n > b.left {
		return b.left, fmt.Errorf("the answer is larger than %d bytes", MaxBody)
	}
	b.left -= n
	return n, err
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strconv.Quote(s)
}
