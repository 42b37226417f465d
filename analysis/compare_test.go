package analysis

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/nixfleet/nixfleet/proto"
)

func within(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// TestMannWhitneyExample is the example of SciPy's mannwhitneyu
// documentation (ages of male and female staff).
//
// U: each x is above this many y values: 19 > 11, 12, 17 (3); 22 > all (4);
// 16 > 11, 12 (2); 29 > all (4); 24 > all (4): U = 17 of 5*4 = 20.
//
// p: U >= 17 means y's statistic 20 - U is at most 3, that is, at most 3
// (y, x) pairs with the y above. Reading the 9 values in order, an
// arrangement is fixed by how many x values lie below each of the 4 y
// values, and y's statistic is the sum of those 4 counts (each 0 to 5), a
// partition of it into at most 4 parts of at most 5. Partitions of 0: {};
// of 1: {1}; of 2: {2}, {1,1}; of 3: {3}, {2,1}, {1,1,1}: 7 arrangements of
// C(9, 4) = 126, p = 7/126 = 0.0556 (SciPy's two-sided 0.111, halved).
func TestMannWhitneyExample(t *testing.T) {
	t.Parallel()
	u, p := MannWhitney([]float64{19, 22, 16, 29, 24}, []float64{20, 11, 17, 12})
	if u != 17 || !within(p, 7.0/126, 1e-14) {
		t.Errorf("U, p = %v, %v; want 17, 7/126 = %v", u, p, 7.0/126)
	}
	// The other way round: U = 20 - 17 = 3, and U >= 3 leaves out only
	// the arrangements with U of 0, 1 or 2 (1, 1 and 2 of them, as above):
	// p = 1 - 4/126.
	u, p = MannWhitney([]float64{20, 11, 17, 12}, []float64{19, 22, 16, 29, 24})
	if u != 3 || !within(p, 122.0/126, 1e-14) {
		t.Errorf("reversed: U, p = %v, %v; want 3, 122/126 = %v", u, p, 122.0/126)
	}
}

// TestMannWhitneySeparation: every x above every y, 5 and 5 values: U =
// 25, and only one of the C(10, 5) = 252 arrangements (all of y below all
// of x) reaches it.
func TestMannWhitneySeparation(t *testing.T) {
	t.Parallel()
	x, y := []float64{6, 7, 8, 9, 10}, []float64{1, 2, 3, 4, 5}
	if u, p := MannWhitney(x, y); u != 25 || !within(p, 1.0/252, 1e-15) {
		t.Errorf("U, p = %v, %v; want 25, 1/252", u, p)
	}
	// Every x below every y: U = 0, and every arrangement has U >= 0.
	if u, p := MannWhitney(y, x); u != 0 || p != 1 {
		t.Errorf("reversed: U, p = %v, %v; want 0, 1", u, p)
	}
}

// TestMannWhitneyTies: with ties, the normal approximation.
//
// x = 3 5 5 7 8 9, y = 1 2 3 5 6 (n1 = 6, n2 = 5, N = 11).
// U: 3 is above 1, 2 and ties 3 (2.5); each 5 is above 1, 2, 3 and ties 5
// (3.5 twice); 7, 8, 9 are above all 5: U = 2.5 + 7 + 15 = 24.5.
// Mean n1*n2/2 = 15. Ties: 3 twice (2³-2 = 6), 5 three times (3³-3 = 24):
// Σ = 30. Variance 30/12 * ((11+1) - 30/(11*10)) = 2.5 * 11.72727 =
// 29.318182, σ = 5.414627. z = (24.5 - 15 - 0.5)/σ = 1.662164, and the
// standard normal's upper tail there is erfc(z/√2)/2 = 0.0482399.
func TestMannWhitneyTies(t *testing.T) {
	t.Parallel()
	u, p := MannWhitney([]float64{3, 5, 5, 7, 8, 9}, []float64{1, 2, 3, 5, 6})
	if u != 24.5 || !within(p, 0.0482399, 1e-6) {
		t.Errorf("U, p = %v, %v; want 24.5, 0.0482399", u, p)
	}
}

func TestMannWhitneyNoEvidence(t *testing.T) {
	t.Parallel()
	// Identical groups: U is n1*n2/2 = 50 (each value ties its twin, and
	// the rest split evenly); z = -0.5/σ is below 0, so p > 0.5.
	x := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if u, p := MannWhitney(x, x); u != 50 || p <= 0.5 || p > 1 {
		t.Errorf("identical: U, p = %v, %v; want 50, above 0.5", u, p)
	}
	// Every value the same: no variance, p = 1.
	same := []float64{4, 4, 4, 4}
	if u, p := MannWhitney(same, same[:3]); u != 6 || p != 1 {
		t.Errorf("all equal: U, p = %v, %v; want 6, 1", u, p)
	}
	for _, tc := range [][2][]float64{{nil, x}, {x, nil}, {nil, nil}} {
		if u, p := MannWhitney(tc[0], tc[1]); u != 0 || p != 1 {
			t.Errorf("empty %v vs %v: U, p = %v, %v; want 0, 1", tc[0], tc[1], u, p)
		}
	}
}

// TestExactUpperTail checks the recurrence against counting: every choice
// of x's ranks among n1+n2 gives one U (the number of y ranks below each x
// rank, summed), and P(U >= u) is the share of choices with U >= u.
func TestExactUpperTail(t *testing.T) {
	t.Parallel()
	for n1 := 1; n1 <= 7; n1++ {
		for n2 := 1; n2 <= 7; n2++ {
			n := n1 + n2
			counts := make([]float64, n1*n2+1)
			var all float64
			for set := 0; set < 1<<n; set++ {
				if bits.OnesCount(uint(set)) != n1 {
					continue
				}
				u, ys := 0, 0
				for r := 0; r < n; r++ {
					if set&(1<<r) != 0 {
						u += ys
					} else {
						ys++
					}
				}
				counts[u]++
				all++
			}
			var tail float64
			for u := n1 * n2; u >= 0; u-- {
				tail += counts[u]
				if got := exactUpperTail(n1, n2, u); !within(got, tail/all, 1e-13) {
					t.Errorf("n1 %d, n2 %d: P(U >= %d) = %v, counted %v", n1, n2, u, got, tail/all)
				}
			}
		}
	}
}

// TestExactUpperTailRecurrence checks the Gaussian binomial against
// another way to the same distribution, up to the exact method's bound:
// the largest of i+j values is one of x's with probability i/(i+j), and
// then above all j of y's, or one of y's and above nothing, so
//
//	P(i, j, u) = i/(i+j) P(i-1, j, u-j) + j/(i+j) P(i, j-1, u)
//
// with P(0, j, 0) = P(i, 0, 0) = 1, every term positive.
func TestExactUpperTailRecurrence(t *testing.T) {
	t.Parallel()
	for _, n := range [][2]int{{1, 2500}, {2, 1250}, {3, 17}, {8, 8}, {10, 30}, {30, 30}, {13, 40}, {50, 50}, {49, 51}} {
		n1, n2 := n[0], n[1]
		// prev[j] is P(i-1, j, ·), cur[j] is P(i, j, ·).
		prev, cur := make([][]float64, n2+1), make([][]float64, n2+1)
		for j := range prev {
			prev[j], cur[j] = make([]float64, n1*j+1), make([]float64, n1*j+1)
			prev[j][0] = 1
		}
		cur[0][0] = 1
		for i := 1; i <= n1; i++ {
			for j := 1; j <= n2; j++ {
				for u := 0; u <= i*j; u++ {
					var p float64
					if u >= j && u-j <= (i-1)*j {
						p += float64(i) / float64(i+j) * prev[j][u-j]
					}
					if u <= i*(j-1) {
						p += float64(j) / float64(i+j) * cur[j-1][u]
					}
					cur[j][u] = p
				}
			}
			prev, cur = cur, prev
		}
		// Every u of the upper 30, and about 80 more spread evenly.
		var tail float64
		for u := n1 * n2; u >= 0; u-- {
			tail += prev[n2][u]
			if u < n1*n2-30 && u%max(1, n1*n2/80) != 0 {
				continue
			}
			got := exactUpperTail(n1, n2, u)
			// Absolutely to 1e-12, and small tails relatively to 1e-9.
			if !within(got, tail, 1e-12) || tail < 1e-3 && !within(got, tail, 1e-9*tail) {
				t.Errorf("n1 %d, n2 %d: P(U >= %d) = %v, by the recurrence %v", n1, n2, u, got, tail)
			}
		}
	}
}

func goodComparison() proto.Comparison {
	return proto.Comparison{Confidence: "0.95", Effect: "0.01", MinSamples: 5, Step: "1m", Window: "10m", Worse: proto.WorseHigher}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	nan, inf := math.NaN(), math.Inf(1)
	// Separated groups of 5: U = 25, p = 1/252 = 0.003968.
	high := []float64{0.05, 0.06, 0.07, 0.08, 0.09}
	low := []float64{0.01, 0.02, 0.03, 0.04, 0.045}
	for _, tc := range []struct {
		name             string
		change           func(*proto.Comparison)
		canary, baseline []float64
		want             Verdict
	}{
		{"worse", nil, high, low, Verdict{Outcome: Failed, CanaryMedian: 0.07, BaselineMedian: 0.03, Effect: 0.04, U: 25, P: 1.0 / 252,
			Canary: 5, Baseline: 5,
			Message: "canary median 0.07 vs baseline 0.03 (5 and 5 values): 0.04 worse, at least the effect 0.01 that matters, p = 0.003968 < 0.05: worse"}},
		{"better", nil, low, high, Verdict{Outcome: Successful, CanaryMedian: 0.03, BaselineMedian: 0.07, Effect: -0.04, U: 0, P: 1,
			Canary: 5, Baseline: 5,
			Message: "canary median 0.03 vs baseline 0.07 (5 and 5 values): 0.04 better, p = 1 ≥ 0.05: not shown worse"}},
		// The example of TestMannWhitneyExample: p = 7/126 = 0.0556.
		{"not shown worse", func(c *proto.Comparison) { c.MinSamples = 4 },
			[]float64{19, 22, 16, 29, 24}, []float64{20, 11, 17, 12},
			Verdict{Outcome: Successful, CanaryMedian: 22, BaselineMedian: 14.5, Effect: 7.5, U: 17, P: 7.0 / 126, Canary: 5, Baseline: 4,
				Message: "canary median 22 vs baseline 14.5 (5 and 4 values): 7.5 worse, at least the effect 0.01 that matters, p = 0.05556 ≥ 0.05: not shown worse"}},
		{"worse, by less than the effect", func(c *proto.Comparison) { c.Effect = "0.05" }, high, low,
			Verdict{Outcome: Successful, CanaryMedian: 0.07, BaselineMedian: 0.03, Effect: 0.04, U: 25, P: 1.0 / 252, Canary: 5, Baseline: 5,
				Message: "canary median 0.07 vs baseline 0.03 (5 and 5 values): p = 0.003968 < 0.05 but 0.04 worse, less than the effect 0.05: no worse than matters"}},
		{"effect exactly met", func(c *proto.Comparison) { c.Effect = "4" }, []float64{5, 6, 7, 8, 9}, []float64{1, 2, 3, 4, 4.5},
			Verdict{Outcome: Failed, CanaryMedian: 7, BaselineMedian: 3, Effect: 4, U: 25, P: 1.0 / 252, Canary: 5, Baseline: 5,
				Message: "canary median 7 vs baseline 3 (5 and 5 values): 4 worse, at least the effect 4 that matters, p = 0.003968 < 0.05: worse"}},
		// Medians equal, but the canary's upper half is above the
		// baseline's: U = 5*6.5 (each 5 above 1-4, tying five 5s) + 4*9
		// = 68.5 of 81. Ten 5s tie: Σ(t³-t) = 990; variance 81/12 *
		// (19 - 990/(18*17)) = 106.41, σ = 10.316, z = (68.5 - 40.5 -
		// 0.5)/σ = 2.6659, p = 0.003840. Effect "0" fails only a worse
		// median.
		{"medians equal", func(c *proto.Comparison) { c.Effect = "0" },
			[]float64{5, 5, 5, 5, 5, 6, 7, 8, 9}, []float64{1, 2, 3, 4, 5, 5, 5, 5, 5},
			Verdict{Outcome: Successful, CanaryMedian: 5, BaselineMedian: 5, Effect: 0, U: 68.5, P: 0.0038395, Canary: 9, Baseline: 9,
				Message: "canary median 5 vs baseline 5 (9 and 9 values): p = 0.00384 < 0.05 but medians equal: not worse"}},
		{"worse lower", func(c *proto.Comparison) { c.Worse = proto.WorseLower }, low, high,
			Verdict{Outcome: Failed, CanaryMedian: 0.03, BaselineMedian: 0.07, Effect: 0.04, U: 25, P: 1.0 / 252, Canary: 5, Baseline: 5,
				Message: "canary median 0.03 vs baseline 0.07 (5 and 5 values): 0.04 worse, at least the effect 0.01 that matters, p = 0.003968 < 0.05: worse"}},
		{"higher is better when worse is lower", func(c *proto.Comparison) { c.Worse = proto.WorseLower }, high, low,
			Verdict{Outcome: Successful, CanaryMedian: 0.07, BaselineMedian: 0.03, Effect: -0.04, U: 0, P: 1, Canary: 5, Baseline: 5,
				Message: "canary median 0.07 vs baseline 0.03 (5 and 5 values): 0.04 better, p = 1 ≥ 0.05: not shown worse"}},
		{"not finite values left out", nil, append([]float64{nan, inf}, high...), append([]float64{-inf}, low...),
			Verdict{Outcome: Failed, CanaryMedian: 0.07, BaselineMedian: 0.03, Effect: 0.04, U: 25, P: 1.0 / 252, Canary: 5, Baseline: 5, Dropped: 3,
				Message: "canary median 0.07 vs baseline 0.03 (5 and 5 values, 3 not finite left out): 0.04 worse, at least the effect 0.01 that matters, p = 0.003968 < 0.05: worse"}},
		{"too few canary samples", nil, high[:4], low,
			Verdict{Outcome: Inconclusive, Canary: 4, Baseline: 5, Message: "too few samples: canary 4, baseline 5, need 5 each"}},
		{"too few once NaN is left out", nil, high, append([]float64{nan}, low[:4]...),
			Verdict{Outcome: Inconclusive, Canary: 5, Baseline: 4, Dropped: 1,
				Message: "too few samples: canary 5, baseline 4, need 5 each (1 value not finite left out)"}},
		{"no baseline", nil, high, nil, Verdict{Outcome: Inconclusive, Canary: 5, Message: "no baseline: the baseline group has no values"}},
		{"no canary", nil, nil, low, Verdict{Outcome: Inconclusive, Baseline: 5, Message: "too few samples: canary 0, baseline 5, need 5 each"}},
		{"invalid", func(c *proto.Comparison) {
			*c = proto.Comparison{Confidence: "95%", Effect: "-0.5", MinSamples: 2, Step: "1m", Window: "10m", Worse: "up"}
		}, high, low,
			Verdict{Outcome: Inconclusive, Canary: 5, Baseline: 5,
				Message: `invalid comparison: compare.confidence "95%" must be a decimal number from 0.5 to 0.999; compare.effect "-0.5" must be a decimal number of at least 0; compare.minSamples 2 must be between 3 and 10000; compare.worse "up" must be "higher" or "lower"`}},
		{"confidence out of range", func(c *proto.Comparison) { c.Confidence = "0.9999" }, high, low,
			Verdict{Outcome: Inconclusive, Canary: 5, Baseline: 5, Message: `invalid comparison: compare.confidence "0.9999" must be a decimal number from 0.5 to 0.999`}},
		{"not a decimal", func(c *proto.Comparison) { c.Effect = "NaN" }, high, low,
			Verdict{Outcome: Inconclusive, Canary: 5, Baseline: 5, Message: `invalid comparison: compare.effect "NaN" must be a decimal number of at least 0`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := goodComparison()
			if tc.change != nil {
				tc.change(&c)
			}
			got := Compare(c, tc.canary, tc.baseline)
			// The medians and effect are differences of decimals, P from
			// a recurrence or erfc: to 4 significant digits, as messages
			// write them.
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b float64) bool {
				return within(a, b, 5e-5*math.Max(math.Abs(a), math.Abs(b))+1e-15)
			})); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCompareDoesNotModify: Compare leaves its arguments as they were.
func TestCompareDoesNotModify(t *testing.T) {
	t.Parallel()
	canary, baseline := []float64{3, 1, math.NaN(), 2, 5, 4}, []float64{9, 7, 8, 6, 5}
	c := goodComparison()
	c.Worse = proto.WorseLower
	Compare(c, canary, baseline)
	if diff := cmp.Diff([]float64{3, 1, math.NaN(), 2, 5, 4}, canary, cmp.Comparer(func(a, b float64) bool {
		return a == b || math.IsNaN(a) && math.IsNaN(b)
	})); diff != "" {
		t.Errorf("canary (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]float64{9, 7, 8, 6, 5}, baseline); diff != "" {
		t.Errorf("baseline (-want +got):\n%s", diff)
	}
}

// drawValues draws a group: small whole numbers, so that ties are common and
// adding or scaling keeps their order exactly.
func drawValues(t *rapid.T, label string, minLen, maxLen int) []float64 {
	ints := rapid.SliceOfN(rapid.IntRange(-1000, 1000), minLen, maxLen).Draw(t, label)
	if rapid.Bool().Draw(t, label+"-narrow") {
		for i := range ints {
			ints[i] %= 5 // many ties
		}
	}
	out := make([]float64, len(ints))
	for i, v := range ints {
		out[i] = float64(v)
	}
	return out
}

// anyFloat draws any float64, the awkward ones often.
func anyFloat() *rapid.Generator[float64] {
	return rapid.OneOf(rapid.Float64(), rapid.SampledFrom([]float64{math.NaN(), math.Inf(1), math.Inf(-1),
		math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, 0, math.Copysign(0, -1)}))
}

func drawComparison(t *rapid.T, effect string) proto.Comparison {
	return proto.Comparison{
		Confidence: rapid.SampledFrom([]string{"0.5", "0.9", "0.95", "0.99", "0.999"}).Draw(t, "confidence"),
		Effect:     effect,
		MinSamples: rapid.IntRange(proto.MinComparisonSamples, 8).Draw(t, "minSamples"),
		Step:       "30s",
		Window:     "10m",
		Worse:      rapid.SampledFrom([]string{proto.WorseHigher, proto.WorseLower}).Draw(t, "worse"),
	}
}

// TestPropertyMannWhitneyBounds: U is from 0 to n1*n2 and x's and y's
// statistics add up to it; p is from 0 to 1; both finite, whatever the
// values.
func TestPropertyMannWhitneyBounds(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		var x, y []float64
		if rapid.Bool().Draw(t, "floats") {
			notNaN := anyFloat().Filter(func(v float64) bool { return !math.IsNaN(v) })
			x = rapid.SliceOfN(notNaN, 0, 60).Draw(t, "x")
			y = rapid.SliceOfN(notNaN, 0, 60).Draw(t, "y")
		} else {
			x, y = drawValues(t, "x", 0, 80), drawValues(t, "y", 0, 80)
		}
		pairs := float64(len(x) * len(y))
		ux, px := MannWhitney(x, y)
		uy, py := MannWhitney(y, x)
		for _, v := range []float64{ux, px, uy, py} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("not finite: U %v, p %v; reversed U %v, p %v", ux, px, uy, py)
			}
		}
		if ux < 0 || ux > pairs || ux+uy != pairs {
			t.Fatalf("U %v and reversed %v, %v pairs", ux, uy, pairs)
		}
		if px < 0 || px > 1 || py < 0 || py > 1 {
			t.Fatalf("p %v, reversed %v", px, py)
		}
	})
}

// TestPropertyVerdictFinite: every number of a verdict is finite, and the
// counts add up, whatever the values.
func TestPropertyVerdictFinite(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		canary := rapid.SliceOfN(anyFloat(), 0, 40).Draw(t, "canary")
		baseline := rapid.SliceOfN(anyFloat(), 0, 40).Draw(t, "baseline")
		v := Compare(drawComparison(t, "0"), canary, baseline)
		for _, f := range []float64{v.CanaryMedian, v.BaselineMedian, v.Effect, v.U, v.P} {
			if math.IsNaN(f) || math.IsInf(f, 0) {
				t.Fatalf("not finite: %+v", v)
			}
		}
		if v.Canary+v.Baseline+v.Dropped != len(canary)+len(baseline) {
			t.Fatalf("counts %+v of %d and %d values", v, len(canary), len(baseline))
		}
	})
}

// TestPropertyIdenticalNeverFails: a canary whose values are the
// baseline's, in any order, is never worse: U is n²/2 and p above one half.
func TestPropertyIdenticalNeverFails(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		baseline := drawValues(t, "baseline", proto.MinComparisonSamples, 80)
		canary := rapid.Permutation(baseline).Draw(t, "canary")
		v := Compare(drawComparison(t, rapid.SampledFrom([]string{"0", "0.5", "10"}).Draw(t, "effect")), canary, baseline)
		n := float64(len(baseline))
		if v.Outcome == Failed || v.Outcome == Successful && (v.U != n*n/2 || v.P <= 0.5) {
			t.Fatalf("%+v", v)
		}
	})
}

// TestPropertyShiftAndScale: adding a constant to both groups, or scaling
// both by a positive factor, keeps the order of the values, so U, p and,
// with an effect of 0, the outcome.
func TestPropertyShiftAndScale(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		canary, baseline := drawValues(t, "canary", 0, 70), drawValues(t, "baseline", 0, 70)
		c := drawComparison(t, "0")
		before := Compare(c, canary, baseline)
		shift := float64(rapid.IntRange(-1_000_000, 1_000_000).Draw(t, "shift"))
		factor := rapid.Float64Range(0.001, 1000).Draw(t, "factor")
		for name, f := range map[string]func(float64) float64{
			"shift": func(v float64) float64 { return v + shift },
			"scale": func(v float64) float64 { return v * factor },
		} {
			after := Compare(c, mapValues(canary, f), mapValues(baseline, f))
			if after.Outcome != before.Outcome || after.U != before.U || after.P != before.P {
				t.Fatalf("%s: %+v, before %+v", name, after, before)
			}
		}
	})
}

func mapValues(values []float64, f func(float64) float64) []float64 {
	out := make([]float64, len(values))
	for i, v := range values {
		out[i] = f(v)
	}
	return out
}

// TestPropertySeparatedFails: a canary with at least 8 values, every one
// worse than every baseline value by more than the effect, fails at 0.95.
// The medians are further apart than the effect, and U is n1*n2, the
// largest: without ties p is exactly 1/C(n1+n2, n1), at most 1/C(16, 8) =
// 1/12870; with ties the normal approximation's variance is smaller than
// without, so z is at least (32 - 0.5)/√(64*17/12) = 3.308 and p at most
// 0.00047 (n1 = n2 = 8; z grows with either sample).
func TestPropertySeparatedFails(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		baseline := drawValues(t, "baseline", 8, 60)
		effect := rapid.IntRange(0, 100).Draw(t, "effect")
		gaps := rapid.SliceOfN(rapid.IntRange(1, 1000), 8, 60).Draw(t, "gaps")
		c := drawComparison(t, strconv.Itoa(effect))
		c.Confidence = "0.95"
		canary := make([]float64, len(gaps))
		for i, g := range gaps {
			if c.Worse == proto.WorseHigher {
				canary[i] = slices.Max(baseline) + float64(effect+g)
			} else {
				canary[i] = slices.Min(baseline) - float64(effect+g)
			}
		}
		if v := Compare(c, canary, baseline); v.Outcome != Failed || v.P > 0.00047 {
			t.Fatalf("effect %d: %+v", effect, v)
		}
	})
}

// TestMonteCarlo draws 2000 measurements of 30 canary and 30 baseline
// values from normal distributions, with a fixed seed so the figures do
// not change, and judges them at confidence 0.95 with an effect of 0.
//
//   - Same distribution: the exact test fails at most 5% of them (a little
//     less, as U is discrete), less the few whose canary median is not
//     above the baseline's: about 0.05, and with 2000 draws its standard
//     error is 0.005; the test allows 0.06. (This seed: 101 of 2000.)
//   - The canary's mean one standard deviation higher: the one-sided
//     t test's power at d = 1 and 30 each is Φ(√15 - 1.671) = 0.986; the
//     Mann–Whitney test's efficiency of 3/π on normal data makes that
//     Φ(√(15*3/π) - 1.671) = 0.98 (0.96 to 0.97 is the two-sided figure).
//     The test asks for 0.9. (This seed: 1960 of 2000.)
func TestMonteCarlo(t *testing.T) {
	t.Parallel()
	c := proto.Comparison{Confidence: "0.95", Effect: "0", MinSamples: 30, Step: "30s", Window: "10m", Worse: proto.WorseHigher}
	for _, tc := range []struct {
		name     string
		shift    float64
		min, max float64
	}{
		{"no shift", 0, 0, 0.06},
		{"shift of one standard deviation", 1, 0.9, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(2024, 16))
			const trials = 2000
			canary, baseline := make([]float64, 30), make([]float64, 30)
			failed := 0
			for range trials {
				for i := range canary {
					canary[i] = r.NormFloat64() + tc.shift
					baseline[i] = r.NormFloat64()
				}
				if Compare(c, canary, baseline).Outcome == Failed {
					failed++
				}
			}
			rate := float64(failed) / trials
			t.Logf("failure rate %.4f (%d of %d)", rate, failed, trials)
			if rate < tc.min || rate > tc.max {
				t.Errorf("failure rate %.4f, want %v to %v", rate, tc.min, tc.max)
			}
		})
	}
}
