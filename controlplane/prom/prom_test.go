package prom_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
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
}
