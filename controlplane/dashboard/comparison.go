package dashboard

import (
	"context"
	"slices"
	"time"

	"github.com/nixfleet/nixfleet/analysis"
	"github.com/nixfleet/nixfleet/reconciler"
)

// comparisonView is the latest comparison an analysis of a wave took
// (rfcs/0003 rule 16): the canary's and the baseline's values on one axis,
// each value a tick at its place (2 to 97 of 100), their medians
// marked. The values are a window's, of every series of a group:
// their spread, not their order in time.
type comparisonView struct {
	Analysis string
	Seq      int
	At       time.Time
	// Low and High label the axis's ends.
	Low, High string
	// Canary and Baseline are the values' places; CanaryMedian and
	// BaselineMedian the medians' places, Medians their values.
	Canary, Baseline             []float64
	CanaryMedian, BaselineMedian float64
	Medians                      [2]string
}

// comparisons are the latest comparison of each analysis of a wave that
// took one; nil when none did, or the store could not say.
func (d *Dashboard) comparisons(ctx context.Context, ro reconciler.Rollout, wave int) []comparisonView {
	ms, err := d.st.Measurements(ctx, ro.ID, wave)
	if err != nil {
		return nil
	}
	latest := map[string]reconciler.Measurement{}
	var names []string
	for _, m := range ms {
		if m.Compared == nil {
			continue
		}
		if _, ok := latest[m.Analysis]; !ok {
			names = append(names, m.Analysis)
		}
		if m.Seq >= latest[m.Analysis].Seq {
			latest[m.Analysis] = m
		}
	}
	var out []comparisonView
	for _, name := range names {
		m := latest[name]
		all := append(slices.Clone(m.Compared.Canary), m.Compared.Baseline...)
		if len(all) == 0 {
			continue
		}
		lo, hi := slices.Min(all), slices.Max(all)
		// 2 to 97: a mark at either end stays inside the axis.
		place := func(v float64) float64 {
			if hi == lo {
				return 50
			}
			return 2 + 95*(v-lo)/(hi-lo)
		}
		places := func(vs []float64) []float64 {
			out := make([]float64, len(vs))
			for i, v := range vs {
				out[i] = place(v)
			}
			return out
		}
		v := comparisonView{Analysis: name, Seq: m.Seq, At: m.At, Low: analysis.Num(lo), High: analysis.Num(hi),
			Canary: places(m.Compared.Canary), Baseline: places(m.Compared.Baseline)}
		if len(m.Compared.Canary) > 0 {
			c := analysis.Median(m.Compared.Canary)
			v.CanaryMedian, v.Medians[0] = place(c), analysis.Num(c)
		}
		if len(m.Compared.Baseline) > 0 {
			b := analysis.Median(m.Compared.Baseline)
			v.BaselineMedian, v.Medians[1] = place(b), analysis.Num(b)
		}
		out = append(out, v)
	}
	return out
}
