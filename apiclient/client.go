// Package apiclient talks to the control plane's API (rfcs/0007): the
// agent's calls (check-in, confirm, signed reports, manifests) and the
// operator's (rollouts, events, intents, hosts, status).
//
// Identity is the TLS client certificate: a self-signed certificate over
// the caller's ed25519 key (a host's SSH host key, an operator's key); the
// control plane recognises the key, not a CA. The server is verified
// against the CA or certificate the caller pins.
package apiclient

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
)

// Error is an error answer of the API, with its stable code.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter is the wait the answer's Retry-After header asks for (a
	// 429 rate_limited always has one), at most a day; 0 when it has none.
	RetryAfter time.Duration
	// foreign marks an answer whose body is not an error of this API (a
	// web server's page, a proxy's error, another API's JSON): Code is
	// then http_<status>, and the error is also ErrBadResponse.
	foreign bool
}

// ErrBadResponse is an answer that is not the control plane API's: a body
// that is not JSON, JSON of another shape, or an error answer without an
// error code of this API. The client never puts such a body into its
// errors: they describe the answer (status, content type, size) instead.
var ErrBadResponse = errors.New("not an answer of the nixfleet API")

// Unwrap is ErrBadResponse for an answer that is not an error of this API.
func (e *Error) Unwrap() error {
	if e.foreign {
		return ErrBadResponse
	}
	return nil
}

func (e *Error) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("%s (HTTP %d, retry after %s): %s", e.Code, e.Status, e.RetryAfter, e.Message)
	}
	return fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.Status, e.Message)
}

// IsCode reports whether err is an API error with the code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// RetryAfter reports whether err is a rate-limited answer (HTTP 429, from
// the control plane or a proxy before it) and how long the server asked
// the caller to wait before its next request: 0 when it did not say.
func RetryAfter(err error) (time.Duration, bool) {
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusTooManyRequests {
		return 0, false
	}
	return e.RetryAfter, true
}

// maxRetryAfter bounds Error.RetryAfter.
const maxRetryAfter = 24 * time.Hour

// parseRetryAfter reads a Retry-After header: seconds, or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		d = time.Duration(min(secs, uint64(maxRetryAfter/time.Second))) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// SelfSignedCert makes a TLS client certificate for an ed25519 key, valid
// for a day around now.
func SelfSignedCert(key ed25519.PrivateKey, name string, now time.Time) (tls.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-12 * time.Hour), NotAfter: now.Add(12 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// certReuse is how long a client presents the same self-signed
// certificate: well inside its validity (SelfSignedCert), so that a
// session resumed with it (rfcs/0007 §Authentication 6) outlives the
// hour too.
const certReuse = time.Hour

// certCache makes a client's certificate once per certReuse instead of
// at every handshake (a signature and an encoding each); the handshake's
// own signature still proves the key at every one.
type certCache struct {
	key  ed25519.PrivateKey
	name string

	mu   sync.Mutex
	cert *tls.Certificate
	made time.Time
}

func (c *certCache) get(now time.Time) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cert == nil || now.Before(c.made) || now.Sub(c.made) >= certReuse {
		cert, err := SelfSignedCert(c.key, c.name, now)
		if err != nil {
			return nil, err
		}
		c.cert, c.made = &cert, now
	}
	return c.cert, nil
}

// Options configure a Client.
type Options struct {
	// Key is the caller's identity (nil for --insecure-dev servers).
	Key ed25519.PrivateKey
	// Name goes into the client certificate's subject (informational).
	Name string
	// Now is the clock signed intents are dated with (tests give the
	// control plane's fake one); nil is the system's.
	Now func() time.Time
	// ServerCAs verifies the server; nil uses the system roots.
	ServerCAs *x509.CertPool
	// Timeout bounds each request (default 70s, above the longest
	// long-poll). A Follow stream has no overall limit: Timeout bounds only
	// the wait for its headers.
	Timeout time.Duration
	// DisableKeepAlives makes every request open a connection of its own
	// (a TLS handshake each) and close it after the answer, instead of
	// keeping one open between requests. Load tests use it for simulated
	// hosts beyond the connections one process may hold open.
	DisableKeepAlives bool
}

// Client is an API client.
type Client struct {
	base *url.URL
	http *http.Client
	// stream serves Follow: no overall timeout, since a stream lasts as
	// long as its rollout; its transport still bounds dialling, the TLS
	// handshake and the wait for the answer's headers.
	stream *http.Client
	key    ed25519.PrivateKey
	clock  func() time.Time // Options.Now
}

// CloseIdleConnections closes the client's connections that no request
// uses (its next request opens one, resuming its TLS session).
func (c *Client) CloseIdleConnections() {
	c.http.CloseIdleConnections()
	c.stream.CloseIdleConnections()
}

// Link is the control plane's URL with a path (and query) appended, as
// the server names it: what a person opens in a browser.
func (c *Client) Link(pathAndQuery string) string {
	return c.base.String() + pathAndQuery
}

// connectTimeout bounds dialling and the TLS handshake of every request.
const connectTimeout = 10 * time.Second

// sessionCacheSize is how many TLS sessions a client keeps for
// resumption: one per server name, and a client talks to one.
const sessionCacheSize = 4

// New returns a client of the control plane at baseURL (https://… or,
// for --insecure-dev, http://…).
func New(baseURL string, opts Options) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(baseURL, "/"))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("apiclient: %q is not an http(s) URL", baseURL)
	}
	dialer := &net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{Proxy: nil, DialContext: dialer.DialContext, MaxIdleConnsPerHost: 4,
		IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: connectTimeout, DisableKeepAlives: opts.DisableKeepAlives}
	if u.Scheme == "https" {
		// Sessions are resumed (rfcs/0007 §Authentication 6): a host whose
		// connection closed reconnects without the certificates and
		// signatures of a full handshake.
		tc := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: opts.ServerCAs,
			ClientSessionCache: tls.NewLRUClientSessionCache(sessionCacheSize)}
		if opts.Key != nil {
			cc := &certCache{key: opts.Key, name: opts.Name}
			tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				return cc.get(time.Now())
			}
		}
		tr.TLSClientConfig = tc
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = 70 * time.Second
	}
	// Streams get a transport of their own: ResponseHeaderTimeout would cut
	// the check-in's long-poll, whose headers come only after the wait.
	str := tr.Clone()
	str.ResponseHeaderTimeout = timeout
	return &Client{base: u, http: &http.Client{Transport: tr, Timeout: timeout},
		stream: &http.Client{Transport: str}, key: opts.Key, clock: opts.Now}, nil
}

// do sends a request and decodes a JSON answer into out (unless nil).
func (c *Client) do(ctx context.Context, method, path string, body []byte, header http.Header, out any) error {
	resp, data, err := c.fetch(ctx, method, path, body, header)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return apiError(resp, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return badAnswer(method, path, resp, data, err)
	}
	return nil
}

// badAnswer is the error of a successful answer that cannot be read as
// the one expected: ErrBadResponse, described by the answer's status,
// content type and size, and wrapping the decoding error (if any).
func badAnswer(method, path string, resp *http.Response, data []byte, err error) error {
	what := fmt.Sprintf("apiclient: %s %s: the answer (%s)", method, path, describe(resp, data))
	if err == nil {
		return fmt.Errorf("%s: %w", what, ErrBadResponse)
	}
	return fmt.Errorf("%s: %w: %w", what, ErrBadResponse, err)
}

// describe is an answer's status, content type and size, for errors that
// must not quote a body of unknown origin.
func describe(resp *http.Response, data []byte) string {
	ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	return fmt.Sprintf("HTTP %d, %s, %d bytes", resp.StatusCode, cmp.Or(strings.TrimSpace(ct), "no content type"), len(data))
}

// fetch sends a request and reads its answer's body, up to
// proto.MaxBytes+1 bytes (the decoders then report the size).
func (c *Client) fetch(ctx context.Context, method, path string, body []byte, header http.Header) (*http.Response, []byte, error) {
	resp, err := c.send(ctx, method, path, body, header)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, proto.MaxBytes+1))
	if err != nil {
		return nil, nil, err
	}
	return resp, data, nil
}

func (c *Client) send(ctx context.Context, method, path string, body []byte, header http.Header) (*http.Response, error) {
	return c.sendWith(ctx, c.http, method, path, body, header)
}

func (c *Client) sendWith(ctx context.Context, hc *http.Client, method, path string, body []byte, header http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return hc.Do(req)
}

// apiError is the error of an answer with status >= 300: its code and
// message, or for a body that is not an API error, http_<status> with a
// description of the answer (never the body), which is ErrBadResponse too.
func apiError(resp *http.Response, data []byte) error {
	out := &Error{Status: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	var e proto.Error
	switch {
	case (json.Unmarshal(data, &e) != nil || e.Code == "") && gatewayDown(resp.StatusCode):
		// A proxy or load balancer in front of a control plane that is
		// down or restarting answers for it: unavailable, not a foreign
		// server.
		out.Code = codes.Unavailable
		out.Message = "a gateway answered for the control plane (" + describe(resp, data) + "): it is down or restarting"
	case json.Unmarshal(data, &e) != nil || e.Code == "":
		out.Code, out.foreign = "http_"+fmt.Sprint(resp.StatusCode), true
		out.Message = "the answer (" + describe(resp, data) + ") is not an error of the nixfleet API"
	default:
		out.Code, out.Message = e.Code, e.Message
	}
	return out
}

// gatewayDown reports a status a gateway answers with when what is behind
// it does not answer: 502, 503, 504.
func gatewayDown(status int) bool {
	return status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
}

func (c *Client) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, path, body, nil, out)
}

// ---- agents ----

// Checkin reports a host's state and returns what it must do.
func (c *Client) Checkin(ctx context.Context, req proto.CheckinRequest) (proto.CheckinResponse, error) {
	var resp proto.CheckinResponse
	err := c.post(ctx, "/v1/agent/checkin", req, &resp)
	return resp, err
}

// Confirm confirms an activation. A refusal is an *Error with code
// confirm_rejected (HTTP 410): the agent must roll back.
func (c *Client) Confirm(ctx context.Context, req proto.ConfirmRequest) error {
	return c.post(ctx, "/v1/agent/confirm", req, nil)
}

// Report sends an activation outcome, signed with the client's key.
func (c *Client) Report(ctx context.Context, req proto.ReportRequest) error {
	_, err := c.ReportProbes(ctx, req)
	return err
}

// ReportProbes sends a report, signed with the client's key, and returns
// the answer (its statusTag answers a probe_results report).
func (c *Client) ReportProbes(ctx context.Context, req proto.ReportRequest) (proto.ReportResponse, error) {
	var resp proto.ReportResponse
	body, err := json.Marshal(req)
	if err != nil {
		return resp, err
	}
	h := http.Header{}
	if c.key != nil {
		h.Set("X-Nixfleet-Signature", base64.StdEncoding.EncodeToString(ed25519.Sign(c.key, body)))
	}
	err = c.do(ctx, http.MethodPost, "/v1/agent/report", body, h, &resp)
	return resp, err
}

// Manifest fetches a rollout's manifest and signature, bytes as signed.
func (c *Client) Manifest(ctx context.Context, rolloutID string) (body, sig []byte, err error) {
	if body, err = c.raw(ctx, "/v1/rollouts/"+url.PathEscape(rolloutID)+"/manifest"); err != nil {
		return nil, nil, err
	}
	if sig, err = c.raw(ctx, "/v1/rollouts/"+url.PathEscape(rolloutID)+"/manifest.sig"); err != nil {
		return nil, nil, err
	}
	return body, sig, nil
}

func (c *Client) raw(ctx context.Context, path string) ([]byte, error) {
	resp, data, err := c.fetch(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		return nil, apiError(resp, data)
	}
	return data, nil
}

// ---- operators ----

// Get decodes the answer of GET path into out: for the endpoints without a
// call of their own (/healthz, /readyz).
func (c *Client) Get(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, nil, nil, out)
}

// The operator calls return the answer decoded and, for callers that pass
// documents on (the CLI's --json, rfcs/0009 rule 4), as the server sent it:
// members this client does not know are kept there.

// getDoc decodes the answer of GET path, and returns it as sent too. An
// answer that is not a JSON object naming at least one member of T is
// ErrBadResponse: another JSON API's answer would otherwise decode into
// zero values and read as, say, "no rollouts".
func getDoc[T any](ctx context.Context, c *Client, path string) (T, json.RawMessage, error) {
	var out T
	resp, data, err := c.fetch(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return out, nil, err
	}
	if resp.StatusCode >= 300 {
		return out, nil, apiError(resp, data)
	}
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return out, nil, badAnswer(http.MethodGet, path, resp, data, err)
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, raw, badAnswer(http.MethodGet, path, resp, data, err)
	}
	if !namesMemberOf(raw, out) {
		return out, raw, badAnswer(http.MethodGet, path, resp, data, nil)
	}
	return out, raw, nil
}

// namesMemberOf reports whether raw is a JSON object with at least one
// member that v's struct type has (by its json names).
func namesMemberOf(raw json.RawMessage, v any) bool {
	var members map[string]json.RawMessage
	if json.Unmarshal(raw, &members) != nil {
		return false
	}
	t := reflect.TypeOf(v)
	if t.Kind() != reflect.Struct {
		return true
	}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		if _, ok := members[name]; ok && name != "-" {
			return true
		}
	}
	return false
}

// withQuery is path?query, or path when the query is empty.
func withQuery(path string, q url.Values) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// eventValues is the query string of q: each parameter only when set.
func eventValues(q proto.EventQuery) url.Values {
	v := url.Values{}
	for _, p := range []struct{ name, value string }{{"rollout", q.RolloutID}, {"channel", q.Channel}, {"host", q.Host}} {
		if p.value != "" {
			v.Set(p.name, p.value)
		}
	}
	if q.AfterID != 0 {
		v.Set("after", strconv.FormatInt(q.AfterID, 10))
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// hostValues is the query string of q: each parameter only when set.
func hostValues(q proto.HostQuery) url.Values {
	v := url.Values{}
	for _, p := range []struct{ name, value string }{{"channel", q.Channel}, {"state", q.State}, {"rollout", q.Rollout}, {"after", q.After}} {
		if p.value != "" {
			v.Set(p.name, p.value)
		}
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// rolloutValues is the query string of q: each parameter only when set.
func rolloutValues(q proto.RolloutQuery) url.Values {
	v := url.Values{}
	for _, p := range []struct{ name, value string }{{"channel", q.Channel}, {"state", q.State}, {"before", q.Before}} {
		if p.value != "" {
			v.Set(p.name, p.value)
		}
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// eachPage reads pages with get, from the cursor the first call is given
// (by get's closure) on, following each page's next, and calls fn with
// each until fn returns false or no page follows. A next that does not
// move is ErrBadResponse: a server that answered it would be read for
// ever.
func eachPage[T any](get func(cursor string) (T, json.RawMessage, error), next func(T) string, fn func(T, json.RawMessage) bool) error {
	cursor := ""
	for first := true; ; first = false {
		page, raw, err := get(cursor)
		if err != nil {
			return err
		}
		if !fn(page, raw) {
			return nil
		}
		n := next(page)
		if n == "" {
			return nil
		}
		if !first && n == cursor {
			return fmt.Errorf("%w: the page after %q names itself as next", ErrBadResponse, cursor)
		}
		cursor = n
	}
}

// joinPages returns every item of pages of a list document, as the server
// sent them, as one document {member: [...]}.
func joinPages(member string, items []json.RawMessage) json.RawMessage {
	if items == nil {
		items = []json.RawMessage{}
	}
	raw, _ := json.Marshal(map[string][]json.RawMessage{member: items})
	return raw
}

// rawItems returns the items of a list document's member, as sent.
func rawItems(raw json.RawMessage, member string) []json.RawMessage {
	var doc map[string]json.RawMessage
	var items []json.RawMessage
	if json.Unmarshal(raw, &doc) == nil {
		_ = json.Unmarshal(doc[member], &items)
	}
	return items
}

// Status is GET /v1/status: every channel, its release and latest rollout.
func (c *Client) Status(ctx context.Context) (proto.Status, json.RawMessage, error) {
	return getDoc[proto.Status](ctx, c, "/v1/status")
}

// RolloutPage is one page of GET /v1/rollouts: summaries of the rollouts
// q selects (no hosts, edges or budgets' host lists; hosts counted),
// newest first, after q.Before, at most q.Limit; its Next is the Before of
// the next page (empty when none follows). A cursor the server did not
// give is an *Error with code bad_request.
func (c *Client) RolloutPage(ctx context.Context, q proto.RolloutQuery) (proto.RolloutList, json.RawMessage, error) {
	return getDoc[proto.RolloutList](ctx, c, withQuery("/v1/rollouts", rolloutValues(q)))
}

// RolloutPages reads the pages of GET /v1/rollouts that q selects, from
// q.Before on (q.Limit rollouts a request), following next, and calls fn
// with each until fn returns false or none follows.
func (c *Client) RolloutPages(ctx context.Context, q proto.RolloutQuery, fn func(page proto.RolloutList, raw json.RawMessage) bool) error {
	get := func(cursor string) (proto.RolloutList, json.RawMessage, error) {
		if cursor != "" {
			q.Before = cursor
		}
		return c.RolloutPage(ctx, q)
	}
	return eachPage(get, func(p proto.RolloutList) string { return p.Next }, fn)
}

// Rollouts is every rollout not pruned, newest first, as summaries: every
// page of GET /v1/rollouts. raw is {"rollouts": [...]}, the rollouts as
// the server sent them.
func (c *Client) Rollouts(ctx context.Context) ([]proto.Rollout, json.RawMessage, error) {
	var (
		out  []proto.Rollout
		raws []json.RawMessage
	)
	err := c.RolloutPages(ctx, proto.RolloutQuery{}, func(p proto.RolloutList, raw json.RawMessage) bool {
		out, raws = append(out, p.Rollouts...), append(raws, rawItems(raw, "rollouts")...)
		return true
	})
	if err != nil {
		return nil, nil, err
	}
	return out, joinPages("rollouts", raws), nil
}

// Rollout is GET /v1/rollouts/{id}: a rollout with its whole plan, the
// first page of its hosts (the server's default size; HostsNext is set
// when more follow) and its counts over all of them. An unknown id is an
// *Error with code not_found.
func (c *Client) Rollout(ctx context.Context, id string) (proto.Rollout, json.RawMessage, error) {
	return c.RolloutHostPage(ctx, id, "", 0)
}

// RolloutHostPage is GET /v1/rollouts/{id} with the page of its hosts
// after after (hostsAfter), at most limit (hostsLimit; the server's
// default when 0).
func (c *Client) RolloutHostPage(ctx context.Context, id, after string, limit int) (proto.Rollout, json.RawMessage, error) {
	v := url.Values{}
	if after != "" {
		v.Set("hostsAfter", after)
	}
	if limit != 0 {
		v.Set("hostsLimit", strconv.Itoa(limit))
	}
	return getDoc[proto.Rollout](ctx, c, withQuery("/v1/rollouts/"+url.PathEscape(id), v))
}

// Forecast is GET /v1/rollouts/{id}/forecast: the control plane's latest
// forecast of a rollout (rfcs/0014). A rollout without one yet, like an
// unknown one, is an *Error with code not_found.
func (c *Client) Forecast(ctx context.Context, id string) (proto.Forecast, json.RawMessage, error) {
	return getDoc[proto.Forecast](ctx, c, "/v1/rollouts/"+url.PathEscape(id)+"/forecast")
}

// RolloutEvents is one page of GET /v1/rollouts/{id}/events: the events of
// a rollout after q.AfterID, at most q.Limit, of host q.Host if set. The
// path names the rollout: q.RolloutID and q.Channel are not sent. An
// unknown rollout is an *Error with code not_found.
func (c *Client) RolloutEvents(ctx context.Context, id string, q proto.EventQuery) ([]proto.Event, json.RawMessage, error) {
	q.RolloutID, q.Channel = "", ""
	l, raw, err := getDoc[proto.EventList](ctx, c, withQuery("/v1/rollouts/"+url.PathEscape(id)+"/events", eventValues(q)))
	return l.Events, raw, err
}

// Events is one page of GET /v1/events: the whole journal, including what
// belongs to no rollout, filtered by q.
func (c *Client) Events(ctx context.Context, q proto.EventQuery) ([]proto.Event, json.RawMessage, error) {
	l, raw, err := getDoc[proto.EventList](ctx, c, withQuery("/v1/events", eventValues(q)))
	return l.Events, raw, err
}

// Releases is GET /v1/releases: every channel ref the control plane saw
// and what became of it, newest first, of channel q.Channel if set.
func (c *Client) Releases(ctx context.Context, q proto.ReleaseQuery) ([]proto.Release, json.RawMessage, error) {
	v := url.Values{}
	if q.Channel != "" {
		v.Set("channel", q.Channel)
	}
	l, raw, err := getDoc[proto.ReleaseList](ctx, c, withQuery("/v1/releases", v))
	return l.Releases, raw, err
}

// HostPage is one page of GET /v1/hosts: the hosts q selects, by name,
// after q.After, at most q.Limit; its Next is the After of the next page
// (empty when none may follow). A page may hold fewer than q.Limit hosts
// and still have a Next: the server bounds what one request judges. A
// State that is not a host state is an *Error with code bad_request.
func (c *Client) HostPage(ctx context.Context, q proto.HostQuery) (proto.HostList, json.RawMessage, error) {
	return getDoc[proto.HostList](ctx, c, withQuery("/v1/hosts", hostValues(q)))
}

// HostPages reads the pages of GET /v1/hosts that q selects, from q.After
// on (q.Limit hosts a request), following next, and calls fn with each
// until fn returns false or none follows.
func (c *Client) HostPages(ctx context.Context, q proto.HostQuery, fn func(page proto.HostList, raw json.RawMessage) bool) error {
	get := func(cursor string) (proto.HostList, json.RawMessage, error) {
		if cursor != "" {
			q.After = cursor
		}
		return c.HostPage(ctx, q)
	}
	return eachPage(get, func(p proto.HostList) string { return p.Next }, fn)
}

// Hosts is every host that checked in or is in a rollout, by name,
// filtered by q: every page of GET /v1/hosts after q.After. raw is
// {"hosts": [...]}, the hosts as the server sent them.
func (c *Client) Hosts(ctx context.Context, q proto.HostQuery) ([]proto.HostView, json.RawMessage, error) {
	var (
		out  []proto.HostView
		raws []json.RawMessage
	)
	err := c.HostPages(ctx, q, func(p proto.HostList, raw json.RawMessage) bool {
		out, raws = append(out, p.Hosts...), append(raws, rawItems(raw, "hosts")...)
		return true
	})
	if err != nil {
		return nil, nil, err
	}
	return out, joinPages("hosts", raws), nil
}

// Host is GET /v1/hosts/{name}. A host that neither checked in nor is in a
// rollout is an *Error with code not_found.
func (c *Client) Host(ctx context.Context, name string) (proto.HostView, json.RawMessage, error) {
	return getDoc[proto.HostView](ctx, c, "/v1/hosts/"+url.PathEscape(name))
}

// Act files an operator intent that carries a comment alone (pause,
// resume, cancel, rollback, break-freeze): FileIntent with
// proto.IntentRequest{Comment: comment}.
func (c *Client) Act(ctx context.Context, rolloutID, action, comment string) (proto.IntentResponse, json.RawMessage, error) {
	return c.FileIntent(ctx, rolloutID, action, proto.IntentRequest{Comment: comment})
}

// Approve files an approver's approval of a rollout's wave (0 is the
// first); the comment is required. Answers as FileIntent.
func (c *Client) Approve(ctx context.Context, rolloutID string, wave int, comment string) (proto.IntentResponse, json.RawMessage, error) {
	return c.FileIntent(ctx, rolloutID, "approve", proto.IntentRequest{Wave: &wave, Comment: comment})
}

// BreakFreeze files an approver's break of the freezes that hold a
// rollout (or a release the freezes keep from opening); the comment is
// required. Answers as FileIntent.
func (c *Client) BreakFreeze(ctx context.Context, rolloutID, comment string) (proto.IntentResponse, json.RawMessage, error) {
	return c.FileIntent(ctx, rolloutID, "break-freeze", proto.IntentRequest{Comment: comment})
}

// FileIntent files an operator intent, signed with the client's key
// (rfcs/0007 §Signed intents; pause, resume, cancel, rollback,
// approve, break-freeze) with its request, and returns the answer,
// {"intent": …, "result": …}. A result of null (HTTP 202) means no tick
// decided the intent within the server's wait; it stays queued. A refused
// intent (HTTP 409) is returned decoded too, with an *Error whose Code is
// the server's reason for the refusal (result.reason.code:
// illegal_transition, unknown_rollout, not_approvable, …); other failures
// are the server's error codes, with no answer (forbidden for a role that
// may not file the kind, bad_request for a request the kind does not
// take).
func (c *Client) FileIntent(ctx context.Context, rolloutID, action string, req proto.IntentRequest) (proto.IntentResponse, json.RawMessage, error) {
	var out proto.IntentResponse
	req, err := c.signed(action, rolloutID, req)
	if err != nil {
		return out, nil, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return out, nil, err
	}
	path := "/v1/rollouts/" + url.PathEscape(rolloutID) + "/" + url.PathEscape(action)
	resp, data, err := c.fetch(ctx, http.MethodPost, path, body, nil)
	if err != nil {
		return out, nil, err
	}
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusConflict {
		return out, nil, apiError(resp, data)
	}
	var raw json.RawMessage
	if resp.StatusCode == http.StatusConflict {
		// A refusal's body is the answer, or an error body: either way the
		// error says which.
		if json.Unmarshal(data, &raw) == nil && json.Unmarshal(raw, &out) == nil {
			return out, raw, refusal(resp, data)
		}
		return proto.IntentResponse{}, nil, refusal(resp, data)
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return out, nil, badAnswer(http.MethodPost, path, resp, data, err)
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, raw, badAnswer(http.MethodPost, path, resp, data, err)
	}
	if !namesMemberOf(raw, out) {
		return out, raw, badAnswer(http.MethodPost, path, resp, data, nil)
	}
	return out, raw, nil
}

// refusal is the error of a 409 answer to an intent: the code the server
// gave for the refusal, or its error body's code.
func refusal(resp *http.Response, data []byte) error {
	var answer struct {
		Result *proto.IntentResult `json:"result"`
	}
	if json.Unmarshal(data, &answer) == nil && answer.Result != nil && answer.Result.Reason.Code != "" {
		return &Error{Status: http.StatusConflict, Code: answer.Result.Reason.Code, Message: answer.Result.Reason.Message}
	}
	return apiError(resp, data)
}

// WebLogin asks for a one-time dashboard sign-in link
// (POST /v1/web/logins, rfcs/0011), valid for validSeconds (0: the
// server's default). The link is the client's base URL and the answer's
// path.
func (c *Client) WebLogin(ctx context.Context, validSeconds int) (proto.WebLogin, json.RawMessage, error) {
	var out proto.WebLogin
	var raw json.RawMessage
	var req proto.WebLoginRequest
	if validSeconds != 0 {
		req.ValidSeconds = &validSeconds
	}
	if err := c.post(ctx, "/v1/web/logins", req, &raw); err != nil {
		return out, nil, err
	}
	return out, raw, json.Unmarshal(raw, &out)
}

// AnalysisTrial measures analyses once, now, for a wave of a channel's
// latest rollout and returns the verdicts (POST /v1/analysis/trials,
// nixfleet analysis run); nothing is recorded.
func (c *Client) AnalysisTrial(ctx context.Context, req proto.AnalysisTrialRequest) (proto.AnalysisTrial, json.RawMessage, error) {
	var out proto.AnalysisTrial
	var raw json.RawMessage
	if err := c.post(ctx, "/v1/analysis/trials", req, &raw); err != nil {
		return out, nil, err
	}
	return out, raw, json.Unmarshal(raw, &out)
}

// Follow streams a rollout's events after the event id after, calling fn
// with each event decoded and as the server sent it (one JSON line), until
// the server ends the stream (the rollout is over: terminal, and not its
// channel's latest or with no way out, rfcs/0012 §Events), ctx ends, or fn
// returns an error. The stream has no overall timeout (Options.Timeout
// bounds only the wait for its headers); a connection lost mid-stream is
// an error, and the caller resumes with after set to the last id it got.
// A line that is not an event is an error.
func (c *Client) Follow(ctx context.Context, rolloutID string, after int64, fn func(ev proto.Event, raw json.RawMessage) error) error {
	return c.FollowRollout(ctx, rolloutID, after, false, fn)
}

// FollowRollout is Follow; with untilTerminal the server ends the stream
// at the rollout's first terminal state, even one a rollback may reopen.
func (c *Client) FollowRollout(ctx context.Context, rolloutID string, after int64, untilTerminal bool, fn func(ev proto.Event, raw json.RawMessage) error) error {
	path := fmt.Sprintf("/v1/rollouts/%s/events?follow=1&after=%d", url.PathEscape(rolloutID), after)
	if untilTerminal {
		path += "&until=terminal"
	}
	return c.follow(ctx, path, rolloutID, fn)
}

// FollowEvents streams the whole journal (GET /v1/events?follow=1),
// filtered by q, after the event id q.AfterID, as Follow streams a
// rollout's: the server never ends this stream, so it ends when ctx does,
// when fn returns an error, or when the connection is lost (resume with
// q.AfterID set to the last id received). q.Limit is not sent.
func (c *Client) FollowEvents(ctx context.Context, q proto.EventQuery, fn func(ev proto.Event, raw json.RawMessage) error) error {
	q.Limit = 0
	v := eventValues(q)
	v.Set("follow", "1")
	return c.follow(ctx, withQuery("/v1/events", v), "the journal", fn)
}

// follow reads a stream of events, one JSON line each, from GET path;
// what names the stream in errors.
func (c *Client) follow(ctx context.Context, path, what string, fn func(ev proto.Event, raw json.RawMessage) error) error {
	resp, err := c.sendWith(ctx, c.stream, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return apiError(resp, data)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		raw := json.RawMessage(bytes.Clone(sc.Bytes()))
		var ev proto.Event
		if err := json.Unmarshal(raw, &ev); err != nil {
			return fmt.Errorf("apiclient: following %s: a line of %d bytes is not an event: %w: %w", what, len(raw), ErrBadResponse, err)
		}
		if !namesMemberOf(raw, ev) {
			return fmt.Errorf("apiclient: following %s: a line of %d bytes is not an event: %w", what, len(raw), ErrBadResponse)
		}
		if err := fn(ev, raw); err != nil {
			return err
		}
	}
	return sc.Err()
}
