package controlplane_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/nixfleet/nixfleet/analysis"
	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// Comparisons against a real Prometheus (proto.Comparison, rfcs/0003
// rule 16): the canary's error ratio is judged against a baseline drawn
// from the hosts of wave 1, still on v0, over the last 6 seconds of
// scrapes. Wave 1, the last, has no baseline left: its coarse condition,
// under 50%, judges it.

// versusBaseline is error-ratio as a comparison: worse when higher by at
// least 3 points at 99%, from at least 5 values a group.
func versusBaseline(minSamples int) proto.Analysis {
	a := errorRatio
	a.Name, a.SuccessCondition, a.InconclusiveLimit = "vs-baseline", "result < 0.5", 0
	a.Compare = &proto.Comparison{Worse: proto.WorseHigher, Effect: "0.03", Confidence: "0.99", MinSamples: minSamples, Window: "6s", Step: "1s"}
	return a
}

// noisy sets every host's error ratio to a value drawn between 2% and 8%
// every 200 ms until the test ends: a fleet whose errors come and go at
// the same level everywhere.
func noisy(t *testing.T, f *analysisFixture) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	rng := rand.New(rand.NewPCG(1, 2))
	names := make([]string, 0, len(f.hosts))
	for n := range f.hosts {
		names = append(names, n)
	}
	slices.Sort(names)
	wg.Go(func() {
		for ctx.Err() == nil {
			for _, n := range names {
				f.exp.Set("app_error_ratio", "host", n, 0.02+0.06*rng.Float64())
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
}

// measured returns the messages of a rollout's analysis_measured events of
// a wave with a code.
func measured(evs []proto.Event, wave int, code string) []string {
	var out []string
	for _, e := range evs {
		if e.Kind == reconciler.EventAnalysisMeasured && e.Wave == wave && e.Reason.Code == code {
			out = append(out, e.Reason.Message)
		}
	}
	return out
}

// TestComparisonFailsAWorseCanary: the canary's error ratio is 30%, its
// baseline's 1%: the first measurement fails, with both medians, the
// effect and p in the journal, and onHealthFailure rollback-and-halt
// reverts the rollout; no host of wave 1 is dispatched.
func TestComparisonFailsAWorseCanary(t *testing.T) {
	t.Parallel()
	f := newAnalysisFixtureOf(t, "sqlite", proto.OnHealthFailureRollbackAndHalt, []proto.Analysis{versusBaseline(5)}, nil)
	f.exp.Set("app_error_ratio", "host", "canary", 0.3)
	f.prom.WaitScraped(`app_error_ratio{host="canary"} > 0.2`)
	id := f.push()
	f.until("the rollout is reverted", func(r proto.Rollout) bool { return r.State == string(reconciler.RolloutReverted) })
	failed := measured(f.events(id), 0, codes.MeasurementFailed)
	t.Logf("measured: %q", measured(f.events(id), 0, codes.MeasurementSuccessful))
	t.Logf("failed: %q", failed)
	if len(failed) != 1 || !strings.Contains(failed[0], "canary median 0.3 vs baseline 0.01") || !strings.Contains(failed[0], "p = ") ||
		!strings.Contains(failed[0], "worse, at least the effect 0.03 that matters") {
		t.Fatalf("failed measurements: %q", failed)
	}
	for _, e := range f.events(id) {
		if e.Wave == 1 && e.To == string(reconciler.HostActivating) {
			t.Errorf("%s of wave 1 was dispatched", e.Host)
		}
	}

	// The rollout page shows both groups' values on one axis, and the
	// verdict.
	ctx := chromium(t)
	login, _, err := f.client(f.opKey.priv, "alice").WebLogin(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "opening the rollout", chromedp.Navigate(f.url+login.Path), chromedp.WaitVisible(chromedp.CSS("section.channel")),
		chromedp.Navigate(f.url+"/ui/rollouts/"+id), chromedp.WaitVisible(chromedp.CSS("figure.comparison")))
	caption := text(t, ctx, "figure.comparison figcaption")
	caption += text(t, ctx, "figure.comparison")
	for _, want := range []string{"vs-baseline, measurement 1", "canary median 0.3", "baseline median 0.01"} {
		if !strings.Contains(caption, want) {
			t.Errorf("the comparison's caption lacks %q: %s", want, caption)
		}
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('figure.comparison rect.canary-value').length`); n < 5 {
		t.Errorf("%d canary values drawn", n)
	}
	screenshot(t, ctx, "rollout-comparison")
}

// TestComparisonPromotesANoisyEqual: every host's error ratio wanders
// between 2% and 8%. Compared with its baseline, the canary is no worse:
// wave 0 is promoted, wave 1 is judged by its coarse condition, and the
// rollout converges. The same fleet judged by a threshold, the worst
// error ratio of the wave under 5%, halts on the noise.
func TestComparisonPromotesANoisyEqual(t *testing.T) {
	t.Parallel()
	t.Run("compared", func(t *testing.T) {
		t.Parallel()
		f := newAnalysisFixtureOf(t, "sqlite", proto.OnHealthFailureHalt, []proto.Analysis{versusBaseline(5)}, nil)
		noisy(t, f)
		id := f.push()
		r := f.until("the rollout converges", func(r proto.Rollout) bool {
			return r.State == string(reconciler.RolloutConverged) || r.State == string(reconciler.RolloutHalted)
		})
		if r.State != string(reconciler.RolloutConverged) {
			t.Fatalf("the rollout is %s (%s)", r.State, r.Reason.Message)
		}
		evs := f.events(id)
		ok0, ok1 := measured(evs, 0, codes.MeasurementSuccessful), measured(evs, 1, codes.MeasurementSuccessful)
		t.Logf("wave 0: %q\nwave 1: %q", ok0, ok1)
		if len(ok0) != 3 || !strings.Contains(ok0[0], "canary median") || len(ok1) != 3 || !strings.Contains(ok1[0], "no baseline left") {
			t.Errorf("wave 0's measurements %q; wave 1's %q", ok0, ok1)
		}
	})
	t.Run("threshold", func(t *testing.T) {
		t.Parallel()
		f := newAnalysisFixtureOf(t, "sqlite", proto.OnHealthFailureHalt, []proto.Analysis{errorRatio}, nil)
		noisy(t, f)
		f.push()
		r := f.until("the rollout halts", func(r proto.Rollout) bool {
			return r.State == string(reconciler.RolloutHalted) || r.State == string(reconciler.RolloutConverged)
		})
		if r.State != string(reconciler.RolloutHalted) || r.Reason.Code != codes.AnalysisFailed {
			t.Fatalf("the rollout is %s (%s %s); want Halted on the analysis", r.State, r.Reason.Code, r.Reason.Message)
		}
	})
}

// TestComparisonTooFewSamplesHolds: the comparison wants 50 values a
// group, and 6 seconds of scrapes give about 7: the measurement is
// inconclusive, and the rollout halts for an operator, saying why.
func TestComparisonTooFewSamplesHolds(t *testing.T) {
	t.Parallel()
	f := newAnalysisFixtureOf(t, "sqlite", proto.OnHealthFailureRollbackAndHalt, []proto.Analysis{versusBaseline(50)}, nil)
	id := f.push()
	r := f.until("the rollout halts", func(r proto.Rollout) bool { return r.State == string(reconciler.RolloutHalted) })
	if r.Reason.Code != codes.AnalysisInconclusive || !strings.Contains(r.Reason.Message, "too few samples") {
		t.Fatalf("halted with %s (%s)", r.Reason.Code, r.Reason.Message)
	}
	if len(r.Analyses) != 1 || r.Analyses[0].Outcome != string(analysis.Inconclusive) {
		t.Errorf("analysis runs %+v", r.Analyses)
	}
	t.Logf("%s", r.Reason.Message)
	if n := len(measured(f.events(id), 0, codes.MeasurementInconclusive)); n != 1 {
		t.Errorf("%d inconclusive measurements journalled, want 1", n)
	}
}

// TestAnalysisTrial: POST /v1/analysis/trials measures a policy's analyses
// once, now, for a wave of the channel's latest rollout, and records
// nothing: with every host at 1%, the comparison of the canary with a
// host of wave 1 passes and so does the threshold; with the canary at
// 30%, both fail, saying why. A viewer may not send queries with the
// control plane's credentials; an invalid analysis is refused.
func TestAnalysisTrial(t *testing.T) {
	t.Parallel()
	f := newAnalysisFixtureOf(t, "sqlite", proto.OnHealthFailureHalt, []proto.Analysis{errorRatio}, nil)
	ctx := context.Background()
	op := f.client(f.opKey.priv, "alice")
	trial := func(analyses ...proto.Analysis) proto.AnalysisTrial {
		t.Helper()
		out, _, err := op.AnalysisTrial(ctx, proto.AnalysisTrialRequest{Channel: "stable", Wave: 0, Analyses: analyses})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	time.Sleep(6 * time.Second) // a window's worth of scrapes
	before := len(f.events(rolloutID("stable", 1)))
	got := trial(versusBaseline(5), errorRatio)
	if len(got.Results) != 2 || got.RolloutID != rolloutID("stable", 1) {
		t.Fatalf("trial: %+v", got)
	}
	vs, worst := got.Results[0], got.Results[1]
	if vs.Outcome != string(analysis.Successful) || !slices.Equal(vs.Canary, []string{"canary"}) || len(vs.Baseline) != 1 ||
		!strings.HasPrefix(vs.Baseline[0], "web-") || len(vs.CanaryValues) < 5 || len(vs.BaselineValues) < 5 {
		t.Errorf("the comparison: %+v", vs)
	}
	if worst.Outcome != string(analysis.Successful) || worst.Canary != nil || !strings.Contains(worst.Query, `host=~"canary"`) {
		t.Errorf("the threshold: %+v", worst)
	}

	f.exp.Set("app_error_ratio", "host", "canary", 0.3)
	f.prom.WaitScraped(`app_error_ratio{host="canary"} > 0.2`)
	time.Sleep(6 * time.Second)
	got = trial(versusBaseline(5), errorRatio)
	for _, r := range got.Results {
		if r.Outcome != string(analysis.Failed) {
			t.Errorf("%s with the canary at 30%%: %s (%s)", r.Analysis, r.Outcome, r.Message)
		}
	}
	t.Logf("%s", got.Results[0].Message)
	if after := len(f.events(rolloutID("stable", 1))); after != before {
		t.Errorf("the rollout's journal went from %d to %d events: a trial was recorded", before, after)
	}

	var ae *apiclient.Error
	_, _, err := f.client(f.viewKey.priv, "victor").AnalysisTrial(ctx, proto.AnalysisTrialRequest{Channel: "stable"})
	if !errors.As(err, &ae) || ae.Code != codes.Forbidden {
		t.Errorf("a viewer's trial: %v", err)
	}
	bad := versusBaseline(5)
	bad.Compare.Worse = "sideways"
	_, _, err = op.AnalysisTrial(ctx, proto.AnalysisTrialRequest{Channel: "stable", Analyses: []proto.Analysis{bad}})
	if !errors.As(err, &ae) || ae.Code != codes.BadRequest || !strings.Contains(ae.Message, `compare.worse "sideways"`) {
		t.Errorf("an invalid analysis: %v", err)
	}
}
