package prom_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/controlplane/prom"
	"github.com/nixfleet/nixfleet/internal/devcert"
	"github.com/nixfleet/nixfleet/internal/testkit/promtest"
	"github.com/nixfleet/nixfleet/proto"
)

// TestQueryRealPrometheus asks a real Prometheus, scraping an exporter,
// the kinds of query an analysis sends, and the ones it must refuse.
func TestQueryRealPrometheus(t *testing.T) {
	t.Parallel()
	exp := promtest.NewExporter(t)
	exp.Set("app_error_ratio", "host", "web-01", 0.01)
	exp.Set("app_error_ratio", "host", "web-02.example", 0.25)
	exp.Set("app_error_ratio", "host", "db-01", 0)
	srv := promtest.Start(t, []string{exp.Target()})
	srv.WaitScraped(`app_error_ratio`)
	c, err := prom.New(prom.Config{URL: srv.URL(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, now := context.Background(), time.Now()
	for _, tc := range []struct {
		name, query string
		want        []proto.MetricSample
		err         string
	}{
		{name: "a scalar", query: `scalar(max(app_error_ratio))`, want: []proto.MetricSample{{Value: "0.25"}}},
		{name: "an aggregate", query: `max(app_error_ratio{host=~"web-01|web-02\\.example"})`, want: []proto.MetricSample{{Value: "0.25"}}},
		{name: "series with labels, sorted", query: `app_error_ratio{host=~"db-01|web-01"}`, want: []proto.MetricSample{
			{Metric: `app_error_ratio{host="db-01", instance="` + exp.Target() + `", job="app"}`, Value: "0"},
			{Metric: `app_error_ratio{host="web-01", instance="` + exp.Target() + `", job="app"}`, Value: "0.01"}}},
		{name: "no series", query: `app_error_ratio{host="nobody"}`, want: []proto.MetricSample{}},
		{name: "a regex quoting the dot", query: `max(app_error_ratio{host=~"web-02.example"}) or vector(-1)`, want: []proto.MetricSample{{Value: "0.25"}}},
		{name: "NaN", query: `max(app_error_ratio) / 0 - max(app_error_ratio) / 0`, want: []proto.MetricSample{{Value: "NaN"}}},
		{name: "a syntax error", query: `max(app_error_ratio`, err: "prom: bad_data: "},
		{name: "a range vector", query: `app_error_ratio[1m]`, err: "the result is a matrix: an analysis query must return an instant vector or a scalar"},
		{name: "a string", query: `"text"`, err: "the result is a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.Query(ctx, tc.query, now)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Query(%s) = %v, %v; want an error saying %q", tc.query, got, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Query(%s) (-want +got):\n%s", tc.query, diff)
			}
		})
	}

	// More series than an analysis may judge.
	for i := range prom.MaxSeries + 1 {
		exp.Set("app_many", "i", fmt.Sprint(i), 1)
	}
	srv.WaitScraped(fmt.Sprintf(`app_many{i="%d"}`, prom.MaxSeries))
	if _, err := c.Query(ctx, `app_many`, time.Now()); err == nil || !strings.Contains(err.Error(), "must aggregate") {
		t.Errorf("101 series: %v; want an error asking to aggregate", err)
	}

	// Stopped: the query fails, saying why.
	srv.Stop()
	if _, err := c.Query(ctx, `up`, time.Now()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("a stopped Prometheus: %v; want connection refused", err)
	}
}

// TestQueryOverTLSWithABearerToken: Prometheus serving TLS (its own web
// config) behind a proxy that wants a bearer token, as a production one
// often is; the client trusts the CA it is given and sends the token.
func TestQueryOverTLSWithABearerToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, err := devcert.Write(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	exp := promtest.NewExporter(t)
	exp.Set("app_error_ratio", "host", "web-01", 0.5)
	srv := promtest.StartTLS(t, []string{exp.Target()}, cert)
	srv.WaitScraped(`app_error_ratio`)

	backend, _ := url.Parse("https://" + srv.Addr())
	proxy := httputil.NewSingleHostReverseProxy(backend)
	proxy.Transport = &http.Transport{TLSClientConfig: tlsClient(cert)}
	front := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	frontCA := filepath.Join(dir, "front-ca.pem")
	writePEM(t, frontCA, front)
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	c, err := prom.New(prom.Config{URL: front.URL, CAFile: frontCA, BearerTokenFile: token})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Query(context.Background(), `max(app_error_ratio)`, time.Now())
	if err != nil || len(got) != 1 || got[0].Value != "0.5" {
		t.Fatalf("through TLS and a bearer token: %v, %v", got, err)
	}

	noToken, err := prom.New(prom.Config{URL: front.URL, CAFile: frontCA})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noToken.Query(context.Background(), `up`, time.Now()); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("without the token: %v; want HTTP 401", err)
	}
	untrusted, err := prom.New(prom.Config{URL: front.URL, BearerTokenFile: token})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := untrusted.Query(context.Background(), `up`, time.Now()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v; want a certificate error", err)
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	if c, err := prom.New(prom.Config{}); c != nil || err != nil {
		t.Errorf("no URL: %v, %v; want a nil client", c, err)
	}
	var none *prom.Client
	if _, err := none.Query(context.Background(), "up", time.Now()); err != prom.ErrNotConfigured {
		t.Errorf("a nil client: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]prom.Config{
		"not a URL":        {URL: "prometheus:9090"},
		"another scheme":   {URL: "ftp://prometheus"},
		"missing CA":       {URL: "https://p", CAFile: "/nonexistent"},
		"CA without PEM":   {URL: "https://p", CAFile: empty},
		"cert without key": {URL: "https://p", CertFile: empty},
		"empty token":      {URL: "https://p", BearerTokenFile: empty},
	} {
		if _, err := prom.New(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("t0ken"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  prom.Config
		err  string
	}{
		{"basic auth and a bearer token", prom.Config{URL: "https://p", BasicAuthUser: "u", BasicAuthPasswordFile: token, BearerTokenFile: token},
			"basic auth and a bearer token together"},
		{"a password without a user", prom.Config{URL: "https://p", BasicAuthPasswordFile: token}, "a basic auth password file needs a user"},
		{"a missing password file", prom.Config{URL: "https://p", BasicAuthUser: "u", BasicAuthPasswordFile: "/nonexistent/password"}, "/nonexistent/password"},
		{"an empty password file", prom.Config{URL: "https://p", BasicAuthUser: "u", BasicAuthPasswordFile: empty}, empty + " is empty"},
		{"a missing token file", prom.Config{URL: "https://p", BearerTokenFile: "/nonexistent/token"}, "/nonexistent/token"},
		{"a missing CA file", prom.Config{URL: "https://p", CAFile: "/nonexistent/ca.pem"}, "/nonexistent/ca.pem"},
		{"an Authorization header", prom.Config{URL: "https://p", Headers: http.Header{"Authorization": {"Basic eA=="}}}, `"Authorization" is not allowed`},
		{"a header name with a colon", prom.Config{URL: "https://p", Headers: http.Header{"X-Scope-OrgID:": {"a"}}}, "not a header name"},
		{"a header value with a line break", prom.Config{URL: "https://p", Headers: http.Header{"X-Scope-OrgID": {"a\r\nX-Other: b"}}}, "line break"},
		{"a proxy that is not a URL", prom.Config{URL: "https://p", ProxyURL: "proxy:3128"}, "not a URL"},
	} {
		if _, err := prom.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v; want an error saying %q", tc.name, err, tc.err)
		}
	}
}

// TestQueryWithBasicAuthAHeaderAndAProxy: Prometheus requiring basic auth
// (its own web config), reached through an HTTP proxy that records what
// each request carries, as a Mimir, Cortex or Thanos gateway reads its
// tenant header. The password file is read at each query: a rotated one
// that is wrong is refused with HTTP 401, as is no auth at all.
func TestQueryWithBasicAuthAHeaderAndAProxy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exp := promtest.NewExporter(t)
	exp.Set("app_error_ratio", "host", "web-01", 0.125)
	srv := promtest.StartBasicAuth(t, []string{exp.Target()}, "nixfleet", "pa55 word")
	srv.WaitScraped(`app_error_ratio`)

	type seen struct{ method, contentType, user, password, tenant, target string }
	var mu sync.Mutex
	var requests []seen
	forward := &httputil.ReverseProxy{Rewrite: func(*httputil.ProxyRequest) {}} // a proxy's request names its target
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, password, _ := r.BasicAuth()
		mu.Lock()
		requests = append(requests, seen{r.Method, r.Header.Get("Content-Type"), user, password, r.Header.Get("X-Scope-OrgID"), r.URL.String()})
		mu.Unlock()
		forward.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	last := func() seen {
		mu.Lock()
		defer mu.Unlock()
		if len(requests) == 0 {
			t.Fatal("no request went through the proxy")
		}
		return requests[len(requests)-1]
	}

	password := filepath.Join(dir, "password")
	if err := os.WriteFile(password, []byte("pa55 word\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := prom.New(prom.Config{URL: srv.URL(), BasicAuthUser: "nixfleet", BasicAuthPasswordFile: password,
		Headers: http.Header{"X-Scope-OrgID": {"tenant-1"}}, ProxyURL: proxy.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := c.Query(ctx, `max(app_error_ratio)`, time.Now())
	if err != nil || !cmp.Equal(got, []proto.MetricSample{{Value: "0.125"}}) {
		t.Fatalf("with basic auth and a tenant: %v, %v", got, err)
	}
	want := seen{http.MethodPost, "application/x-www-form-urlencoded", "nixfleet", "pa55 word", "tenant-1", srv.URL() + "/api/v1/query"}
	if diff := cmp.Diff(want, last(), cmp.AllowUnexported(seen{})); diff != "" {
		t.Errorf("the request Prometheus was sent (-want +got):\n%s", diff)
	}

	if err := os.WriteFile(password, []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Query(ctx, `up`, time.Now()); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("a wrong password: %v; want HTTP 401", err)
	}
	if r := last(); r.password != "wrong" {
		t.Errorf("the rotated password file was not read again: sent %q", r.password)
	}

	noAuth, err := prom.New(prom.Config{URL: srv.URL(), Headers: http.Header{"X-Scope-OrgID": {"tenant-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noAuth.Query(ctx, `up`, time.Now()); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("no auth: %v; want HTTP 401", err)
	}
}

// TestQueryCapsTheAnswer: an answer over MaxBody is not read past it.
// The server is a stand-in: a real Prometheus answering 4 MiB for one
// instant query would need a hundred thousand series.
func TestQueryCapsTheAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		size int
		err  string
	}{
		{name: "at the cap", size: prom.MaxBody, err: ""},
		{name: "over the cap", size: prom.MaxBody + 1, err: fmt.Sprintf("the answer is larger than %d bytes", prom.MaxBody)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			head, tail := `{"status":"success","data":{"resultType":"scalar","result":[1,"0.5"]}`, `}`
			pad := strings.Repeat(" ", tc.size-len(head)-len(tail))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, head+pad+tail)
			}))
			defer srv.Close()
			c, err := prom.New(prom.Config{URL: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Query(context.Background(), `scalar(up)`, time.Now())
			if tc.err == "" {
				if err != nil || !cmp.Equal(got, []proto.MetricSample{{Value: "0.5"}}) {
					t.Errorf("%d bytes: %v, %v", tc.size, got, err)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%d bytes: %v, %v; want an error saying %q", tc.size, got, err, tc.err)
			}
		})
	}
}

// TestSources: a control plane's default Prometheus and a named source
// behind a tenant gateway that wants basic auth: each analysis's source
// picks its client, with its own credentials and tenant; an unknown name
// has none. NewSources refuses bad names, a name given twice, a source
// without a URL, and a source's own bad settings, naming it.
func TestSources(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	exp := promtest.NewExporter(t)
	exp.Set("app_error_ratio", "host", "web-01", 0.25)
	def := promtest.Start(t, []string{exp.Target()})
	team := promtest.StartBasicAuth(t, []string{exp.Target()}, "team-a", "s3cret")
	def.WaitScraped(`app_error_ratio`)
	team.WaitScraped(`app_error_ratio`)
	gw := team.NewGateway("team-a")
	password := filepath.Join(dir, "password")
	if err := os.WriteFile(password, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	teamA := prom.Config{URL: gw.URL(), BasicAuthUser: "team-a", BasicAuthPasswordFile: password,
		Headers: http.Header{"X-Scope-Orgid": {"team-a"}}}
	srcs, err := prom.NewSources(prom.Config{URL: def.URL()}, []prom.Source{
		{Name: "team-a", Config: teamA},
		{Name: "team-b", Config: prom.Config{URL: gw.URL(), BasicAuthUser: "team-a", BasicAuthPasswordFile: password,
			Headers: http.Header{"X-Scope-Orgid": {"team-b"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := srcs.Names(); !cmp.Equal(got, []string{"team-a", "team-b"}) {
		t.Errorf("Names() = %q", got)
	}
	ctx := context.Background()
	for _, tc := range []struct{ source, err string }{
		{source: ""}, {source: "team-a"}, {source: "team-b", err: "HTTP 403"},
	} {
		c, ok := srcs.Client(tc.source)
		if !ok {
			t.Fatalf("source %q: none", tc.source)
		}
		got, err := c.Query(ctx, `max(app_error_ratio)`, time.Now())
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("source %q: %v, %v; want an error saying %q", tc.source, got, err, tc.err)
			}
			continue
		}
		if err != nil || !cmp.Equal(got, []proto.MetricSample{{Value: "0.25"}}) {
			t.Errorf("source %q: %v, %v", tc.source, got, err)
		}
	}
	if gw.Forwarded() != 1 {
		t.Errorf("the gateway forwarded %d requests, want team-a's one", gw.Forwarded())
	}
	if c, ok := srcs.Client("team-c"); ok || c != nil {
		t.Errorf("an unknown source: %v, %v", c, ok)
	}
	var none *prom.Sources
	if c, ok := none.Client(""); !ok || c != nil {
		t.Errorf("no sources, the default: %v, %v; want a nil client", c, ok)
	}
	if _, ok := none.Client("team-a"); ok {
		t.Error("no sources: team-a found")
	}

	for _, tc := range []struct {
		name  string
		named []prom.Source
		err   string
	}{
		{"a name in capitals", []prom.Source{{Name: "Team-A", Config: teamA}}, `source "Team-A": want 1 to 63 of a-z`},
		{"the default source by name", []prom.Source{{Name: "default", Config: teamA}}, `source "default": want`},
		{"a name given twice", []prom.Source{{Name: "team-a", Config: teamA}, {Name: "team-a", Config: teamA}}, `source "team-a" is configured twice`},
		{"no URL", []prom.Source{{Name: "team-a"}}, `source "team-a" has no URL`},
		{"an Authorization header", []prom.Source{{Name: "team-a", Config: prom.Config{URL: "https://p", Headers: http.Header{"Authorization": {"Bearer x"}}}}},
			`source "team-a": prom: `},
	} {
		if _, err := prom.NewSources(prom.Config{}, tc.named); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v; want an error saying %q", tc.name, err, tc.err)
		}
	}
}
