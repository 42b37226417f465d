// Package prom queries a Prometheus server's HTTP API for the control
// plane's canary analyses (rfcs/0006 §Canary analysis): one instant query
// at a given time, answered as the series of its result.
//
// It speaks the API's stable v1 endpoint directly (POST /api/v1/query,
// form-encoded, so that a long query with a wave's host names does not
// meet a URL length limit), with a request timeout, an optional bearer
// token and CA, and a cap on what it reads:
//
//  1. an answer larger than MaxBody, a result of more than MaxSeries
//     series, or a result that is neither an instant vector nor a scalar
//     is an error (an analysis query aggregates);
//  2. an answer with status "error" is an error naming its errorType and
//     error, whatever its HTTP status; any other non-2xx status is an
//     error with the status and the start of the body;
//  3. every error says what failed: the reconciler records it as the
//     reason of an inconclusive measurement.
package prom

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

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

// Config says how to reach Prometheus.
type Config struct {
	// URL is the server's base URL ("http://prometheus:9090", or with a
	// path prefix); the API's paths are appended to it.
	URL string
	// CAFile is a PEM bundle of CAs to trust for an https URL, besides the
	// system's; empty for the system's only.
	CAFile string
	// CertFile and KeyFile are a client certificate and key (PEM), for a
	// Prometheus behind mutual TLS; both or neither.
	CertFile, KeyFile string
	// BearerTokenFile holds a token sent as "Authorization: Bearer …"
	// (surrounding white space trimmed); read once, at New.
	BearerTokenFile string
	// Timeout bounds one query, answer included (default 10 s).
	Timeout time.Duration
}

// Client queries one Prometheus server. A nil *Client answers every query
// with ErrNotConfigured.
type Client struct {
	base   *url.URL
	http   *http.Client
	bearer string
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
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("prom: CA: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("prom: CA: %s holds no PEM certificate", cfg.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, fmt.Errorf("prom: a client certificate needs both a certificate and a key file")
	}
	if cfg.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("prom: client certificate: %w", err)
		}
		tlsCfg.Certificates = []tls.Certificate{cert}
	}
	c := &Client{base: u, http: &http.Client{Timeout: cfg.Timeout,
		Transport: &http.Transport{TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment, MaxIdleConns: 4,
			IdleConnTimeout: time.Minute, ResponseHeaderTimeout: cfg.Timeout}}}
	if cfg.BearerTokenFile != "" {
		b, err := os.ReadFile(cfg.BearerTokenFile)
		if err != nil {
			return nil, fmt.Errorf("prom: bearer token: %w", err)
		}
		if c.bearer = strings.TrimSpace(string(b)); c.bearer == "" {
			return nil, fmt.Errorf("prom: bearer token file %s is empty", cfg.BearerTokenFile)
		}
	}
	return c, nil
}

// URL is the server's base URL, for messages ("" for a nil client).
func (c *Client) URL() string {
	if c == nil {
		return ""
	}
	return c.base.String()
}

// answer is the API's envelope.
type answer struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

type queryData struct {
	ResultType string          `json:"resultType"`
	Result     json.RawMessage `json:"result"`
}

type vectorSample struct {
	Metric map[string]string `json:"metric"`
	Value  []json.RawMessage `json:"value"`
}

// Query evaluates an instant query at a time and returns its series,
// sorted by their labels.
func (c *Client) Query(ctx context.Context, query string, at time.Time) ([]proto.MetricSample, error) {
	if c == nil {
		return nil, ErrNotConfigured
	}
	form := url.Values{"query": {query}, "time": {strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)}}
	endpoint := c.base.JoinPath("api", "v1", "query")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("prom: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("prom: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("prom: reading the answer: %w", err)
	}
	if len(body) > MaxBody {
		return nil, fmt.Errorf("prom: the answer is larger than %d bytes", MaxBody)
	}
	var a answer
	if err := json.Unmarshal(body, &a); err != nil || (a.Status != "success" && a.Status != "error") {
		return nil, fmt.Errorf("prom: HTTP %d from %s, not the query API's answer: %s", resp.StatusCode, endpoint.Redacted(), snippet(body))
	}
	if a.Status == "error" {
		return nil, fmt.Errorf("prom: %s: %s", a.ErrorType, a.Error)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("prom: HTTP %d: %s", resp.StatusCode, snippet(body))
	}
	return decodeResult(a.Data)
}

// decodeResult reads an instant vector or a scalar.
func decodeResult(data json.RawMessage) ([]proto.MetricSample, error) {
	var d queryData
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("prom: the answer's data: %w", err)
	}
	switch d.ResultType {
	case "scalar":
		var pair []json.RawMessage
		if err := json.Unmarshal(d.Result, &pair); err != nil {
			return nil, fmt.Errorf("prom: a scalar result: %w", err)
		}
		v, err := value(pair)
		if err != nil {
			return nil, err
		}
		return []proto.MetricSample{{Value: v}}, nil
	case "vector":
		var vs []vectorSample
		if err := json.Unmarshal(d.Result, &vs); err != nil {
			return nil, fmt.Errorf("prom: a vector result: %w", err)
		}
		if len(vs) > MaxSeries {
			return nil, fmt.Errorf("prom: the query returned %d series, more than %d: an analysis query must aggregate (sum, max, …)", len(vs), MaxSeries)
		}
		out := make([]proto.MetricSample, 0, len(vs))
		for _, s := range vs {
			v, err := value(s.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, proto.MetricSample{Metric: labels(s.Metric), Value: v})
		}
		slices.SortFunc(out, func(a, b proto.MetricSample) int { return strings.Compare(a.Metric, b.Metric) })
		return out, nil
	}
	return nil, fmt.Errorf("prom: the result is a %s: an analysis query must return an instant vector or a scalar", cmp.Or(d.ResultType, "nothing"))
}

// value reads a [time, "value"] pair's value, as Prometheus wrote it.
func value(pair []json.RawMessage) (string, error) {
	var v string
	if len(pair) != 2 || json.Unmarshal(pair[1], &v) != nil {
		return "", fmt.Errorf("prom: a sample is not [time, \"value\"]")
	}
	return v, nil
}

// labels writes a series' labels as PromQL does: name{a="1", b="2"}.
func labels(m map[string]string) string {
	name := m["__name__"]
	var keys []string
	for k := range m {
		if k != "__name__" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	if len(keys) == 0 {
		return name
	}
	var b bytes.Buffer
	b.WriteString(name)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(m[k]))
	}
	b.WriteByte('}')
	return b.String()
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strconv.Quote(s)
}
