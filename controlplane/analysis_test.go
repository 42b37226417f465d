package controlplane_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/analysis"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/controlplane/prom"
	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/simagent"
	"github.com/nixfleet/nixfleet/internal/testkit/cptest"
	"github.com/nixfleet/nixfleet/internal/testkit/promtest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/trust"
)

// Canary analysis against a real Prometheus (rfcs/0006 §Canary analysis,
// rfcs/0003 rule 16). Each test serves the services' error ratios from an
// exporter that a real Prometheus scrapes every second; the fleet's policy
// asks, every second, three times per wave, that the worst error ratio of
// the wave's hosts stay under 5%. The control plane runs on the real
// clock here: Prometheus keeps its samples at real times.

// errorRatio is the analysis of these tests.
var errorRatio = proto.Analysis{Name: "error-ratio", Query: `max(app_error_ratio{host=~"{{ .HostsRegex }}"})`,
	SuccessCondition: "result < 0.05", Interval: "1s", Count: 3, InconclusiveLimit: 1}

// analysisFixture is a control plane whose fleet's policy has errorRatio,
// a Prometheus scraping an exporter of every host's error ratio (1% to
// begin with), and the simulated hosts, onboarded on v0.
type analysisFixture struct {
	*env
	exp   *promtest.Exporter
	prom  *promtest.Server
	hosts map[string]*simagent.Host
}

func newAnalysisFixture(t *testing.T, backend, onFailure string) *analysisFixture {
	t.Helper()
	return newAnalysisFixtureOf(t, backend, onFailure, []proto.Analysis{errorRatio}, nil)
}

// newAnalysisFixtureOf is newAnalysisFixture with other analyses, and
// tune (when not nil) to change the control plane's configuration, given
// the exporter.
func newAnalysisFixtureOf(t *testing.T, backend, onFailure string, analyses []proto.Analysis,
	tune func(*controlplane.Config, *promtest.Exporter)) *analysisFixture {
	t.Helper()
	exp := promtest.NewExporter(t)
	spec := smallSpec()
	spec.Analysis, spec.OnHealthFailure = analyses, onFailure
	for _, h := range spec.Hosts {
		exp.Set("app_error_ratio", "host", h.Name, 0.01)
	}
	srv := promtest.Start(t, []string{exp.Target()})
	srv.WaitScraped(`app_error_ratio{host="web-3"}`)
	e := newEnv(t, backend, spec, func(c *controlplane.Config) {
		c.Clock = clock.Real{}
		c.Prometheus.URL = srv.URL()
		if tune != nil {
			tune(c, exp)
		}
	})
	roots, err := trust.ParseRoots(e.repo.TrustJSON())
	if err != nil {
		t.Fatal(err)
	}
	hosts := e.hosts()
	for _, h := range hosts {
		h.Roots, h.Now = roots, time.Now
	}
	e.onboard(hosts)
	f := &analysisFixture{env: e, exp: exp, prom: srv, hosts: hosts}
	t.Cleanup(func() {
		if t.Failed() {
			for _, ev := range f.events(rolloutID("stable", 2)) {
				t.Logf("%s %s %s→%s [%s] %s", ev.Kind, ev.Host, ev.From, ev.To, ev.Reason.Code, ev.Reason.Message)
			}
		}
	})
	return f
}

// push releases v1 as commit 2, signed now (the control plane's clock).
func (f *analysisFixture) push() string {
	f.t.Helper()
	if err := cptest.Release(f.repo, f.spec, "v1", 2, time.Now()); err != nil {
		f.t.Fatal(err)
	}
	f.hook()
	return rolloutID("stable", 2)
}

// step lets every host check in and act.
func (f *analysisFixture) step() {
	for _, h := range f.hosts {
		_ = h.Step(context.Background(), 0)
	}
}

func (f *analysisFixture) rollout(id string) proto.Rollout {
	var r proto.Rollout
	_ = f.client(f.viewKey.priv, "victor").Get(context.Background(), "/v1/rollouts/"+id, &r)
	return r
}

func (f *analysisFixture) events(id string) []proto.Event {
	evs, _, _ := f.client(f.viewKey.priv, "victor").RolloutEvents(context.Background(), id, proto.EventQuery{})
	return evs
}

// until steps the hosts each time the control plane moves, until cond.
func (f *analysisFixture) until(what string, cond func(proto.Rollout) bool) proto.Rollout {
	f.t.Helper()
	var r proto.Rollout
	f.await(60*time.Second, what, func() bool {
		f.step()
		r = f.rollout(rolloutID("stable", 2))
		return cond(r)
	})
	return r
}

func count(evs []proto.Event, kind, code string) int {
	n := 0
	for _, e := range evs {
		if e.Kind == kind && e.Reason.Code == code {
			n++
		}
	}
	return n
}

// TestAnalysisPromotes: the error ratio stays at 1%: each wave's analysis
// measures three times, succeeds, and the wave is promoted; the rollout
// converges. Every measurement is journalled with its value and the query
// as sent, naming the wave's hosts.
func TestAnalysisPromotes(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			f := newAnalysisFixture(t, backend, proto.OnHealthFailureRollbackAndHalt)
			id := f.push()
			r := f.until("the rollout converges", func(r proto.Rollout) bool { return r.State == string(reconciler.RolloutConverged) })
			if len(r.Analyses) != 2 {
				t.Fatalf("analysis runs %+v, want one per wave", r.Analyses)
			}
			for _, run := range r.Analyses {
				if run.Outcome != string(analysis.Successful) || run.Successful != 3 {
					t.Errorf("wave %d: %+v, want successful with 3 measurements", run.Wave, run)
				}
			}
			evs := f.events(id)
			if n := count(evs, reconciler.EventAnalysisMeasured, codes.MeasurementSuccessful); n != 6 {
				t.Errorf("%d successful measurements journalled, want 6", n)
			}
			if n := count(evs, reconciler.EventAnalysisCompleted, codes.AnalysisSuccessful); n != 2 {
				t.Errorf("%d successful analyses journalled, want 2", n)
			}
			// Wave 1 started only after wave 0's analysis succeeded.
			done := slices.IndexFunc(evs, func(e proto.Event) bool { return e.Kind == reconciler.EventAnalysisCompleted && e.Wave == 0 })
			promoted := slices.IndexFunc(evs, func(e proto.Event) bool { return e.Kind == reconciler.EventWavePromoted })
			dispatched := slices.IndexFunc(evs, func(e proto.Event) bool { return e.Host == "web-1" && e.To == string(reconciler.HostActivating) })
			if !(done >= 0 && done < promoted && promoted < dispatched) {
				t.Errorf("analysis of wave 0 at %d, promotion at %d, web-1 dispatched at %d: want them in that order", done, promoted, dispatched)
			}
			for _, e := range evs {
				if e.Kind == reconciler.EventAnalysisMeasured && e.Wave == 1 &&
					!strings.Contains(e.Reason.Message, `0.01 meets result < 0.05; query: max(app_error_ratio{host=~"web-1|web-2|web-3"})`) {
					t.Errorf("a measurement of wave 1 says %q", e.Reason.Message)
				}
			}
		})
	}
}

// TestAnalysisFailureRollsBack: the canary's error ratio is 30% once it
// runs v1: the first measurement fails the analysis, onHealthFailure
// rollback-and-halt reverts the rollout, the canary goes back to v0, and
// no host of wave 1 is ever dispatched.
func TestAnalysisFailureRollsBack(t *testing.T) {
	t.Parallel()
	f := newAnalysisFixture(t, "sqlite", proto.OnHealthFailureRollbackAndHalt)
	f.exp.Set("app_error_ratio", "host", "canary", 0.3)
	f.prom.WaitScraped(`app_error_ratio{host="canary"} > 0.2`)
	id := f.push()
	r := f.until("the rollout is reverted", func(r proto.Rollout) bool { return r.State == string(reconciler.RolloutReverted) })
	if len(r.Analyses) != 1 || r.Analyses[0].Outcome != string(analysis.Failed) || !strings.Contains(r.Analyses[0].Last.Message, "0.3 does not meet result < 0.05") {
		t.Errorf("analysis runs %+v, want wave 0's failed on 0.3", r.Analyses)
	}
	evs := f.events(id)
	if !slices.ContainsFunc(evs, func(e proto.Event) bool {
		return e.Kind == reconciler.EventRolloutTransition && e.To == string(reconciler.RolloutReverting) && e.Reason.Code == codes.AnalysisFailed
	}) {
		t.Error("no Active → Reverting transition for the failed analysis")
	}
	for _, e := range evs {
		if e.Wave == 1 && e.To == string(reconciler.HostActivating) {
			t.Errorf("%s of wave 1 was dispatched", e.Host)
		}
	}
	if got := f.hosts["canary"].Current(); got != fleetrepo.Closure("canary", "v0") {
		t.Errorf("the canary runs %s, want v0 back", got)
	}
}

// TestAnalysisInconclusiveHaltsAndResumes: Prometheus stops while wave 0's
// analysis measures: two measurements without a result (the limit is one)
// make it inconclusive and the rollout halts for an operator, saying so.
// Prometheus comes back, the operator resumes, the analysis measures again
// and the rollout converges.
func TestAnalysisInconclusiveHaltsAndResumes(t *testing.T) {
	t.Parallel()
	f := newAnalysisFixture(t, "postgres", proto.OnHealthFailureHalt)
	id := f.push()
	f.until("a first measurement is counted", func(r proto.Rollout) bool {
		return len(r.Analyses) > 0 && r.Analyses[0].Measured > 0
	})
	f.prom.Stop()
	r := f.until("the rollout halts", func(r proto.Rollout) bool { return r.State == string(reconciler.RolloutHalted) })
	if r.Reason.Code != codes.AnalysisInconclusive || !strings.Contains(r.Next, "resume") {
		t.Fatalf("halted with %s (%s), next %q; want analysis_inconclusive and a resume", r.Reason.Code, r.Reason.Message, r.Next)
	}
	if n := count(f.events(id), reconciler.EventAnalysisMeasured, codes.MeasurementInconclusive); n != 2 {
		t.Errorf("%d inconclusive measurements journalled, want 2", n)
	}
	for _, e := range f.events(id) {
		if e.Reason.Code == codes.MeasurementInconclusive && !strings.Contains(e.Reason.Message, "connection refused") {
			t.Errorf("an inconclusive measurement says %q; want it to say why", e.Reason.Message)
		}
	}

	f.prom.Restart()
	f.prom.WaitScraped(`app_error_ratio{host="web-3"}`)
	res, _, err := f.client(f.opKey.priv, "alice").Act(context.Background(), id, "resume", "Prometheus is back")
	if err != nil || res.Result == nil || !res.Result.Accepted {
		t.Fatalf("resume: %+v, %v", res, err)
	}
	r = f.until("the rollout converges", func(r proto.Rollout) bool { return r.State == string(reconciler.RolloutConverged) })
	for _, run := range r.Analyses {
		if run.Outcome != string(analysis.Successful) {
			t.Errorf("wave %d: %+v, want successful", run.Wave, run)
		}
	}
	if r.Analyses[0].Forgiven == 0 {
		t.Errorf("wave 0's run %+v forgave nothing", r.Analyses[0])
	}
}

// TestAnalysisSources: one analysis on the default Prometheus, another
// on source team-a, a Prometheus that wants basic auth behind a
// multi-tenant gateway that wants team-a's X-Scope-OrgID (as Mimir's
// does). Both measure with their own source's credentials and tenant,
// succeed, and the rollout converges.
func TestAnalysisSources(t *testing.T) {
	t.Parallel()
	tenant := errorRatio
	tenant.Name, tenant.Source = "tenant-error-ratio", "team-a"
	var gw *promtest.Gateway
	f := newAnalysisFixtureOf(t, "sqlite", proto.OnHealthFailureHalt, []proto.Analysis{errorRatio, tenant},
		func(c *controlplane.Config, exp *promtest.Exporter) {
			team := promtest.StartBasicAuth(t, []string{exp.Target()}, "team-a", "s3cret")
			team.WaitScraped(`app_error_ratio{host="web-3"}`)
			gw = team.NewGateway("team-a")
			password := filepath.Join(t.TempDir(), "password")
			if err := os.WriteFile(password, []byte("s3cret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			c.PrometheusSources = []prom.Source{{Name: "team-a", Config: prom.Config{URL: gw.URL(),
				BasicAuthUser: "team-a", BasicAuthPasswordFile: password, Headers: http.Header{"X-Scope-Orgid": {"team-a"}}}}}
		})
	f.await(60*time.Second, "the first release's rollout converges", func() bool {
		f.step()
		return f.rollout(rolloutID("stable", 1)).State == string(reconciler.RolloutConverged)
	})
	before := gw.Forwarded() // the first release's analyses
	f.push()
	r := f.until("the rollout converges", func(r proto.Rollout) bool { return r.State == string(reconciler.RolloutConverged) })
	if len(r.Analyses) != 4 {
		t.Fatalf("analysis runs %+v, want two per wave", r.Analyses)
	}
	for _, run := range r.Analyses {
		if run.Outcome != string(analysis.Successful) || run.Successful != 3 {
			t.Errorf("wave %d %s: %+v, want successful with 3 measurements", run.Wave, run.Name, run)
		}
	}
	if n := gw.Forwarded() - before; n != 6 {
		t.Errorf("team-a's gateway forwarded %d queries, want 6 (3 a wave)", n)
	}
}

// TestAnalysisUnknownSourceHolds: the release's analysis names source
// team-z, which the control plane does not have. The release is
// accepted with a warning naming it; the canary's measurements are
// inconclusive (analysis_source_unknown, saying how to configure the
// source) without a query, the run ends inconclusive and the rollout
// halts for an operator: wave 1 is never dispatched.
func TestAnalysisUnknownSourceHolds(t *testing.T) {
	t.Parallel()
	f := newAnalysisFixtureOf(t, "sqlite", proto.OnHealthFailureRollbackAndHalt, []proto.Analysis{errorRatio},
		func(c *controlplane.Config, _ *promtest.Exporter) {
			c.PrometheusSources = []prom.Source{{Name: "team-a", Config: prom.Config{URL: c.Prometheus.URL}}}
		})
	unknown := errorRatio
	unknown.Source = "team-z"
	f.spec.Analysis = []proto.Analysis{unknown}
	id := f.push()
	r := f.until("the rollout halts", func(r proto.Rollout) bool { return r.State == string(reconciler.RolloutHalted) })
	if r.Reason.Code != codes.AnalysisInconclusive || !strings.Contains(r.Next, "resume") {
		t.Fatalf("halted with %s (%s), next %q; want analysis_inconclusive and a resume", r.Reason.Code, r.Reason.Message, r.Next)
	}
	if len(r.Analyses) != 1 || r.Analyses[0].Outcome != string(analysis.Inconclusive) || r.Analyses[0].Last.Code != codes.AnalysisSourceUnknown {
		t.Errorf("analysis runs %+v, want wave 0's inconclusive for its unknown source", r.Analyses)
	}
	evs := f.events(id)
	if n := count(evs, reconciler.EventAnalysisMeasured, codes.AnalysisSourceUnknown); n != 2 {
		t.Errorf("%d measurements of the unknown source journalled, want 2", n)
	}
	for _, e := range evs {
		if e.Reason.Code == codes.AnalysisSourceUnknown &&
			!strings.Contains(e.Reason.Message, `names Prometheus source "team-z", which this control plane does not have (its sources: team-a): add a [[prometheus.source]] table with name = "team-z"`) {
			t.Errorf("a measurement of the unknown source says %q; want it to say which and how to configure it", e.Reason.Message)
		}
		if e.Wave == 1 && e.To == string(reconciler.HostActivating) {
			t.Errorf("%s of wave 1 was dispatched", e.Host)
		}
	}
	f.logMu.Lock()
	logged := f.log.String()
	f.logMu.Unlock()
	if !strings.Contains(logged, "the release's analyses name Prometheus sources this control plane does not have") ||
		!strings.Contains(logged, `"sources":["team-z"]`) {
		t.Error("no warning that the accepted release names an unknown source")
	}
}
