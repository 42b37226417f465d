// Package promtest runs a real Prometheus server (Debian's prometheus
// package, which .ci/run installs) for a test, on a loopback port, with
// its own storage directory, scraping targets the test serves: the
// canary analysis of the control plane is tested against the real query
// API, not an imitation of it.
//
// A test that needs Prometheus and cannot find the binary fails, naming
// the package to install: it is never skipped.
package promtest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/nixfleet/nixfleet/internal/devcert"
)

// Binary is the Prometheus executable: $NIXFLEET_PROMETHEUS, else
// prometheus on PATH.
func Binary(t testing.TB) string {
	t.Helper()
	if b := os.Getenv("NIXFLEET_PROMETHEUS"); b != "" {
		return b
	}
	b, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus is not installed: run .ci/run as root, which installs Debian's prometheus package (apt-get install prometheus)")
	}
	return b
}

// Tool is promtool, which Debian's prometheus package ships beside it:
// $NIXFLEET_PROMTOOL, else promtool next to Binary, else on PATH.
func Tool(t testing.TB) string {
	t.Helper()
	if b := os.Getenv("NIXFLEET_PROMTOOL"); b != "" {
		return b
	}
	if b := filepath.Join(filepath.Dir(Binary(t)), "promtool"); fileExists(b) {
		return b
	}
	b, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: run .ci/run as root, which installs Debian's prometheus package (apt-get install prometheus)")
	}
	return b
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}

// Server is a running Prometheus.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	addr string
	// extra are more command-line flags (the web config).
	extra []string
	// scheme and client reach the server's API (https with StartTLS,
	// with the user and password with StartBasicAuth).
	scheme string
	client *http.Client

	mu  sync.Mutex
	cmd *exec.Cmd
	out *bytes.Buffer
}

// Start starts Prometheus scraping the targets (host:port) every
// second, as job "app", and waits until it is ready. It is stopped when
// the test ends.
func Start(t testing.TB, targets []string) *Server {
	t.Helper()
	return start(t, targets, web{})
}

// StartTLS is Start with Prometheus serving its API over TLS with a
// certificate (its own web configuration).
func StartTLS(t testing.TB, targets []string, cert devcert.Files) *Server {
	t.Helper()
	return start(t, targets, web{cert: &cert})
}

// StartBasicAuth is Start with Prometheus answering only requests with
// HTTP basic auth of the user and password (its own web configuration,
// which holds the password's bcrypt hash); anything else is 401.
func StartBasicAuth(t testing.TB, targets []string, user, password string) *Server {
	t.Helper()
	return start(t, targets, web{user: user, password: password})
}

// web is Prometheus's web configuration (--web.config.file).
type web struct {
	cert           *devcert.Files
	user, password string
}

func start(t testing.TB, targets []string, w web) *Server {
	t.Helper()
	s := &Server{t: t, bin: Binary(t), dir: t.TempDir(), addr: freeAddr(t), scheme: "http", client: &http.Client{Timeout: 5 * time.Second}}
	var conf strings.Builder
	var rt http.RoundTripper = http.DefaultTransport
	if w.cert != nil {
		fmt.Fprintf(&conf, "tls_server_config:\n  cert_file: %s\n  key_file: %s\n", w.cert.CertFile, w.cert.KeyFile)
		s.scheme = "https"
		rt = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: w.cert.Pool, MinVersion: tls.VersionTLS12}}
	}
	if w.user != "" {
		// The lowest cost: Prometheus checks the hash at every request.
		hash, err := bcrypt.GenerateFromPassword([]byte(w.password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&conf, "basic_auth_users:\n  %s: %s\n", strconv.Quote(w.user), strconv.Quote(string(hash)))
		rt = basicAuth{user: w.user, password: w.password, next: rt}
	}
	if conf.Len() > 0 {
		path := filepath.Join(s.dir, "web.yml")
		if err := os.WriteFile(path, []byte(conf.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		s.extra = append(s.extra, "--web.config.file="+path)
		s.client.Transport = rt
	}
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"+
		"  - job_name: app\n    static_configs:\n      - targets: [%s]\n", strings.Join(quoted, ", "))
	if err := os.WriteFile(filepath.Join(s.dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's base URL (https with StartTLS).
func (s *Server) URL() string { return s.scheme + "://" + s.addr }

// Addr is the server's listen address.
func (s *Server) Addr() string { return s.addr }

// Stop stops Prometheus (SIGTERM, then SIGKILL after 10 s); a stopped
// server refuses connections until Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}

// Restart starts Prometheus again on the same address and storage, and
// waits until it is ready.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		s.t.Fatal("promtest: Restart of a running server")
	}
	args := append([]string{"--config.file=" + filepath.Join(s.dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(s.dir, "data"), "--web.listen-address=" + s.addr,
		"--storage.tsdb.retention.time=1d", "--log.level=warn"}, s.extra...)
	cmd := exec.Command(s.bin, args...)
	s.out = &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.t.Fatalf("promtest: starting %s: %v", s.bin, err)
	}
	s.cmd = cmd
	s.mu.Unlock()
	s.waitFor(30*time.Second, "Prometheus is ready", func() bool {
		resp, err := s.client.Get(s.URL() + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// WaitScraped waits until Prometheus has a sample of the query (an
// instant vector that is not empty): the targets were scraped.
func (s *Server) WaitScraped(query string) {
	s.t.Helper()
	s.waitFor(30*time.Second, "Prometheus has scraped "+query, func() bool {
		resp, err := s.client.PostForm(s.URL()+"/api/v1/query", url.Values{"query": {query}})
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var a struct {
			Data struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		return json.NewDecoder(resp.Body).Decode(&a) == nil && len(a.Data.Result) > 0
	})
}

// waitFor polls cond every 100 ms (an external process: there is no
// signal to wait on) until it holds, or fails the test after d with
// Prometheus's output.
func (s *Server) waitFor(d time.Duration, what string, cond func() bool) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tk := time.NewTicker(100 * time.Millisecond)
	defer tk.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			s.mu.Lock()
			out := s.out.String()
			s.mu.Unlock()
			s.t.Fatalf("promtest: %s: not within %s; its output:\n%s", what, d, out)
		case <-tk.C:
		}
	}
}

// Gateway is a multi-tenant front of a Prometheus, as a Mimir, Cortex
// or Thanos gateway is: it answers 401 "no org id" to a request without
// the tenant header X-Scope-OrgID, 403 to one of another tenant, and
// forwards the others to the server, its basic auth and all. It is
// stopped when the test ends.
type Gateway struct {
	srv *httptest.Server
	mu  sync.Mutex
	// tenants are the X-Scope-OrgID of the requests it forwarded.
	tenants []string
}

// NewGateway starts a gateway on loopback for tenant in front of s (an
// http server: not StartTLS's).
func (s *Server) NewGateway(tenant string) *Gateway {
	s.t.Helper()
	target, err := url.Parse(s.URL())
	if err != nil {
		s.t.Fatal(err)
	}
	g := &Gateway{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch org := r.Header.Get("X-Scope-OrgID"); org {
		case "":
			http.Error(w, "no org id", http.StatusUnauthorized)
		case tenant:
			g.mu.Lock()
			g.tenants = append(g.tenants, org)
			g.mu.Unlock()
			proxy.ServeHTTP(w, r)
		default:
			http.Error(w, "unknown tenant "+org, http.StatusForbidden)
		}
	}))
	s.t.Cleanup(g.srv.Close)
	return g
}

// URL is the gateway's base URL.
func (g *Gateway) URL() string { return g.srv.URL }

// Forwarded is how many requests the gateway forwarded.
func (g *Gateway) Forwarded() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.tenants)
}

// basicAuth sets the server's own requests' basic auth.
type basicAuth struct {
	user, password string
	next           http.RoundTripper
}

func (b basicAuth) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.SetBasicAuth(b.user, b.password)
	return b.next.RoundTrip(req)
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// Exporter serves gauges in the Prometheus text format for Prometheus to
// scrape; the test sets their values.
type Exporter struct {
	srv *httptest.Server
	mu  sync.Mutex
	// values by metric name, then by label set as written ({host="a"}).
	values map[string]map[string]float64
}

// NewExporter starts an exporter on loopback, stopped when the test ends.
func NewExporter(t testing.TB) *Exporter {
	e := &Exporter{values: map[string]map[string]float64{}}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.srv.Close)
	return e
}

// Target is the exporter's host:port, for a scrape config.
func (e *Exporter) Target() string { return strings.TrimPrefix(e.srv.URL, "http://") }

// Set sets a gauge: metric{label="value"} v.
func (e *Exporter) Set(metric, label, value string, v float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.values[metric] == nil {
		e.values[metric] = map[string]float64{}
	}
	e.values[metric][fmt.Sprintf("{%s=%q}", label, value)] = v
}

func (e *Exporter) serve(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	metrics := make([]string, 0, len(e.values))
	for m := range e.values {
		metrics = append(metrics, m)
	}
	slices.Sort(metrics)
	for _, m := range metrics {
		fmt.Fprintf(w, "# TYPE %s gauge\n", m)
		series := make([]string, 0, len(e.values[m]))
		for l := range e.values[m] {
			series = append(series, l)
		}
		slices.Sort(series)
		for _, l := range series {
			fmt.Fprintf(w, "%s%s %s\n", m, l, strconv.FormatFloat(e.values[m][l], 'g', -1, 64))
		}
	}
}
