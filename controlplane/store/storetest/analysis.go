package storetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/analysis"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// testAnalysis: canary analysis through the store (rfcs/0003 rule 16).
// Channel edge's policy measures every wave twice; after every tick the
// measurements it asks for that are due are recorded, and the ticks
// count them from what the store loads: the rollout's runs (kept in its
// record) end successful and it converges, with every measurement
// journalled once. A measurement recorded twice (another leader) is kept
// once and counts as one change; the query is kept cut; a rollout's
// measurements go when Prune deletes it.
func testAnalysis(t *testing.T, s store.Store) {
	m := newSim(t, s)
	fb := testFleet(t).Policy("edge", func(p *proto.RolloutPolicy) {
		p.HealthGate.Analysis = []proto.Analysis{{Name: "errors", Query: `max(errors{host=~"{{ .HostsRegex }}"})`,
			SuccessCondition: "result < 0.05", Interval: "1m", Count: 2}}
	})
	m.checkIn(true, edgeHosts...)
	m.release(fb.Build(), fleetkit.Commit(1), "edge")
	id := proto.RolloutID("edge", fleetkit.Commit(1))
	recorded := 0
	for range 60 {
		out := m.tick()
		for _, req := range out.Measure {
			if req.At.After(m.now) {
				continue
			}
			r := m.rollout(req.RolloutID)
			var spec proto.Analysis
			for _, a := range r.HealthGate.Analysis {
				if a.Name == req.Analysis {
					spec = a
				}
			}
			meas := rc.Measurement{RolloutID: req.RolloutID, Wave: req.Wave, Analysis: req.Analysis, Seq: req.Seq, At: m.now,
				Query: rc.AnalysisQuery(&r, req.Wave, spec), Samples: []proto.MetricSample{{Metric: `{job="web"}`, Value: "0.01"}}}
			before, err := s.Watermark(m.ctx)
			must(t, err)
			fresh, err := s.RecordMeasurement(m.ctx, meas)
			must(t, err)
			again, err := s.RecordMeasurement(m.ctx, meas)
			must(t, err)
			after, err := s.Watermark(m.ctx)
			must(t, err)
			if !fresh || again || after.Changes != before.Changes+1 {
				t.Fatalf("recording %+v: new %v, again %v, changes %d -> %d; want true, false, one more", req, fresh, again, before.Changes, after.Changes)
			}
			recorded++
		}
		if m.state(id) == rc.RolloutConverged && len(out.Events) == 0 {
			break
		}
		m.advance(time.Minute)
	}
	r := m.rollout(id)
	if r.State != rc.RolloutConverged {
		t.Fatalf("%s is %s (%s), want Converged", id, r.State, r.Reason.Message)
	}
	if len(r.Analyses) != 2 {
		t.Fatalf("runs %+v, want one per wave", r.Analyses)
	}
	for _, run := range r.Analyses {
		if run.Outcome != analysis.Successful || run.Measured != 2 || run.Successful != 2 {
			t.Errorf("run %+v: want successful with 2 of 2 measurements", run)
		}
	}
	evs, err := s.Events(m.ctx, proto.EventQuery{RolloutID: id})
	must(t, err)
	measured := 0
	for _, e := range evs {
		if e.Kind == rc.EventAnalysisMeasured {
			measured++
		}
	}
	if measured != recorded || recorded != 4 {
		t.Errorf("%d measurements recorded, %d journalled; want 4 of each", recorded, measured)
	}

	got, err := s.Measurements(m.ctx, id, 1)
	must(t, err)
	if len(got) != 2 || got[0].Seq != 1 || got[1].Seq != 2 || len(got[0].Samples) != 1 || got[0].Samples[0].Metric != `{job="web"}` ||
		!strings.Contains(got[0].Query, `host=~"e3|e4|e5"`) {
		t.Errorf("measurements of wave 1: %+v", got)
	}
	long := rc.Measurement{RolloutID: id, Wave: 5, Analysis: "errors", Seq: 1, At: m.now, Query: strings.Repeat("x", 3*rc.MaxMeasuredQuery), Error: "boom"}
	if _, err := s.RecordMeasurement(m.ctx, long); err != nil {
		t.Fatal(err)
	}
	got, err = s.Measurements(m.ctx, id, 5)
	must(t, err)
	if len(got) != 1 || len(got[0].Query) != rc.MaxMeasuredQuery || got[0].Error != "boom" || got[0].Samples != nil {
		t.Errorf("a long query's measurement: %+v", got)
	}
	// A comparison's measurement keeps both groups' values.
	cmpd := rc.Measurement{RolloutID: id, Wave: 6, Analysis: "errors", Seq: 1, At: m.now, Query: "q",
		Compared: &rc.Compared{Canary: []float64{0.5, 1e-9, -3}, Baseline: []float64{}}}
	if _, err := s.RecordMeasurement(m.ctx, cmpd); err != nil {
		t.Fatal(err)
	}
	got, err = s.Measurements(m.ctx, id, 6)
	must(t, err)
	if len(got) != 1 || got[0].Samples != nil || got[0].Compared == nil || !slices.Equal(got[0].Compared.Canary, cmpd.Compared.Canary) ||
		got[0].Compared.Baseline == nil || len(got[0].Compared.Baseline) != 0 {
		t.Errorf("a comparison's measurement: %+v", got)
	}
	if _, err := s.RecordMeasurement(m.ctx, rc.Measurement{RolloutID: id, Analysis: "errors"}); err == nil {
		t.Error("a measurement without a seq was recorded")
	}

	// The next release supersedes nothing (the rollout converged) and
	// makes it prunable: its measurements go with it.
	m.release(fb.Bump("v2").Build(), fleetkit.Commit(2), "edge")
	m.tick()
	n, err := internals(t, s).CountRows(m.ctx, "analysis_measurements")
	must(t, err)
	if n != 6 {
		t.Fatalf("%d measurement rows before the prune, want 6", n)
	}
	_, pruned, err := s.Prune(m.ctx, m.now.Add(time.Hour))
	must(t, err)
	n, err = internals(t, s).CountRows(m.ctx, "analysis_measurements")
	must(t, err)
	if pruned != 1 || n != 0 {
		t.Errorf("pruned %d rollout(s), %d measurement rows left; want 1 and 0", pruned, n)
	}
}
