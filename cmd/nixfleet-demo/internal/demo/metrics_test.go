package demo

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/analysis"
	"github.com/nixfleet/nixfleet/controlplane/prom"
	"github.com/nixfleet/nixfleet/internal/testkit/promtest"
	"github.com/nixfleet/nixfleet/proto"
)

// TestStandInAnswersAsPrometheus: the demo's stand-in for its services'
// monitoring is a fake of Prometheus's query API, so it must answer the
// demo's analysis query exactly as a real Prometheus does that scrapes
// the stand-in's own /metrics: the same series and values, for the hosts
// of a wave, of several waves, of none, with names a regex must quote.
func TestStandInAnswersAsPrometheus(t *testing.T) {
	t.Parallel()
	ratios := map[string]float64{"stg-web-01": 0.004, "stg-db-01": 0.3, "prod-web-01": 0, "web-02.example": 0.125, "webx02zexample": 0.9}
	var hosts []string
	for h := range ratios {
		hosts = append(hosts, h)
	}
	m, err := startServiceMetrics(hosts, func(h string) float64 { return ratios[h] })
	if err != nil {
		t.Fatal(err)
	}
	defer m.stop()
	real := promtest.Start(t, []string{strings.TrimPrefix(m.url, "http://")})
	real.WaitScraped(ratioMetric + `{host="webx02zexample"}`)
	standIn, err := prom.New(prom.Config{URL: m.url})
	if err != nil {
		t.Fatal(err)
	}
	prometheus, err := prom.New(prom.Config{URL: real.URL()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, wave := range [][]string{{"stg-web-01"}, {"stg-web-01", "stg-db-01"}, {"prod-web-01"}, {"web-02.example"}, {"nobody"}, {}} {
		q := analysis.Render(analysisQuery, analysis.Vars{Hosts: wave})
		now := time.Now()
		want, err := prometheus.Query(ctx, q, now)
		if err != nil {
			t.Fatalf("Prometheus: %s: %v", q, err)
		}
		got, err := standIn.Query(ctx, q, now)
		if err != nil {
			t.Fatalf("the stand-in: %s: %v", q, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-Prometheus +stand-in):\n%s", q, diff)
		}
	}
	// What it cannot answer, it refuses as Prometheus refuses a bad query.
	if _, err := standIn.Query(ctx, `sum(`+ratioMetric+`)`, time.Now()); err == nil || !strings.Contains(err.Error(), "bad_data") {
		t.Errorf("another query: %v; want bad_data", err)
	}
	if got, err := standIn.Query(ctx, analysis.Render(analysisQuery, analysis.Vars{Hosts: []string{"stg-db-01"}}), time.Now()); err != nil ||
		!cmp.Equal(got, []proto.MetricSample{{Value: "0.3"}}) {
		t.Errorf("the bad canary: %v, %v", got, err)
	}
}
