package analysis

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/nixfleet/nixfleet/proto"
)

// exactMaxPairs bounds len(x)*len(y) for MannWhitney's exact p-value. The
// exact null distribution costs at most min(len(x), len(y)) *
// len(x)*len(y) additions, 125,000 at this bound.
const exactMaxPairs = 2500

// MannWhitney is the Mann–Whitney U test of whether x's values tend to be
// greater than y's (one-sided): U is x's statistic (the number of pairs
// (xi, yj) with xi > yj, ties counting one half), p the probability of a U
// at least as large if x and y came from one distribution.
//
// p is exact when no value occurs twice in x and y together and
// len(x)*len(y) is at most 2500: the share of the C(n1+n2, n1) orders of
// the values that give a U at least as large. Otherwise p is the normal
// approximation: U's mean n1*n2/2, its variance n1*n2/12 * ((N+1) -
// Σ(t³-t)/(N(N-1))) with N = n1+n2 and t the size of each group of equal
// values, and a continuity correction of one half. When x or y is empty,
// or every value is the same (the variance is zero), there is no evidence
// either way: p is 1. U and p are always finite, p from 0 to 1.
//
// The test assumes every value independent of the others. Values of one
// host over time are not (a slow host is slow all day), so p is
// optimistic: a difference that comes from one odd host looks more
// certain than it is. Compare's Effect guards against judging a
// negligible difference. Values must not be NaN (Compare leaves them
// out); infinities are ranked as the largest and smallest values.
func MannWhitney(x, y []float64) (u, p float64) {
	n1, n2 := len(x), len(y)
	if n1 == 0 || n2 == 0 {
		return 0, 1
	}
	u, ties := rankSum(x, y)
	if ties == 0 && n1*n2 <= exactMaxPairs {
		return u, exactUpperTail(n1, n2, int(math.Round(u)))
	}
	return u, normalUpperTail(n1, n2, u, ties)
}

// rankSum returns x's U and Σ(t³-t) over the groups of t equal values of
// x and y together (0 when no value occurs twice). U is x's rank sum,
// equal values sharing their mean rank, less n1(n1+1)/2.
func rankSum(x, y []float64) (u, ties float64) {
	type value struct {
		v   float64
		inX bool
	}
	all := make([]value, 0, len(x)+len(y))
	for _, v := range x {
		all = append(all, value{v, true})
	}
	for _, v := range y {
		all = append(all, value{v, false})
	}
	slices.SortFunc(all, func(a, b value) int { return cmp.Compare(a.v, b.v) })
	var rx float64 // x's rank sum
	for i := 0; i < len(all); {
		j := i + 1
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		// Ranks i+1 to j (one-based) share their mean.
		mean := float64(i+1+j) / 2
		for _, v := range all[i:j] {
			if v.inX {
				rx += mean
			}
		}
		if t := float64(j - i); t > 1 {
			ties += t*t*t - t
		}
		i = j
	}
	n1 := float64(len(x))
	return rx - n1*(n1+1)/2, ties
}

// exactUpperTail is P(U >= u) for samples of n1 and n2 values without
// ties, when every order of them is equally likely.
//
// The distribution is symmetric about n1*n2/2, so P(U >= u) is P(U <= m)
// with m = n1*n2 - u, which needs the number of orders with U from 0 to m
// only. Reading the values in ascending order, an order is fixed by how
// many of the b values of the larger sample lie below each of the a
// values of the smaller one, and U (of either) is read off those a counts
// (each 0 to b) or their complements: the number of orders with U = v is
// the number of partitions of v into at most a parts of at most b, the
// coefficient of q^v in the Gaussian binomial
//
//	[a+b choose a] = Π_{k=1..a} (1 - q^(b+k)) / (1 - q^k).
//
// Each factor is one pass over the m+1 coefficients: dividing by 1 - q^k
// adds to each coefficient, from the lowest up, the one k below it as
// it now is, and multiplying by
// 1 - q^(b+k) subtracts the one b+k below it, leaving [b+k choose k],
// whose coefficients are counts again. The cost is a*m additions; the
// counts, at most C(100, 50) ≈ 1e29 within exactMaxPairs, fit a float64
// with a relative error of about 1e-16 each, and the subtractions cost at
// most about m*1e-16 of the total: nothing a p-value shows.
func exactUpperTail(n1, n2, u int) float64 {
	total := n1 * n2
	if u <= 0 {
		return 1
	}
	if u > total {
		return 0
	}
	m := total - u
	a, b := min(n1, n2), max(n1, n2)
	c := make([]float64, m+1)
	c[0] = 1 // [b choose 0] = 1
	orders := 1.0
	for k := 1; k <= a; k++ {
		for v := k; v <= m; v++ {
			c[v] += c[v-k]
		}
		for v := m; v >= b+k; v-- {
			c[v] -= c[v-b-k]
		}
		orders = orders * float64(b+k) / float64(k) // C(b+k, k)
	}
	var n float64
	for _, x := range c {
		n += x
	}
	return clamp01(n / orders)
}

// normalUpperTail is P(U >= u) by the normal approximation with the tie
// correction ties = Σ(t³-t) and a continuity correction of one half; 1 when
// the variance is zero (every value the same).
func normalUpperTail(n1, n2 int, u, ties float64) float64 {
	f1, f2 := float64(n1), float64(n2)
	n := f1 + f2
	mean := f1 * f2 / 2
	variance := f1 * f2 / 12 * ((n + 1) - ties/(n*(n-1)))
	if !(variance > 0) {
		return 1
	}
	z := (u - mean - 0.5) / math.Sqrt(variance)
	return clamp01(math.Erfc(z/math.Sqrt2) / 2)
}

func clamp01(p float64) float64 {
	return min(max(p, 0), 1)
}

// Verdict is what one comparison of a canary with its baseline came to.
type Verdict struct {
	Outcome Outcome
	// CanaryMedian and BaselineMedian are the groups' medians; Effect the
	// canary's median minus the baseline's, signed so that positive is worse
	// (for Worse "lower": the baseline's minus the canary's).
	CanaryMedian, BaselineMedian, Effect float64
	// U is the canary's Mann–Whitney statistic in Worse's direction, P the
	// one-sided p-value that the canary is worse.
	U, P float64
	// Canary and Baseline count the values judged (NaN and ±Inf left out),
	// Dropped those left out.
	Canary, Baseline, Dropped int
	// Message says it for people: the medians, the effect, p, the samples,
	// and the verdict with its reason.
	Message string
}

// Compare judges one measurement of a comparison: the canary's values and
// the baseline's, all of a window's values of every series of each group.
// In order:
//
//  1. a comparison that is not valid (a number that is not a decimal as
//     the conditions write one, confidence outside 0.5 to 0.999, a
//     negative effect, minSamples out of bounds, worse neither "higher"
//     nor "lower") is inconclusive; Problems refuses these earlier, this
//     is defence;
//  2. NaN and ±Inf values are left out of both groups (Dropped);
//  3. no baseline value is inconclusive, and so is either group with fewer
//     than MinSamples values;
//  4. MannWhitney asks whether the canary's values tend to be worse than
//     the baseline's (for Worse "lower", both negated);
//  5. the canary fails when P < 1 - Confidence and its median is worse
//     than the baseline's by at least Effect, and by more than nothing; it
//     succeeds otherwise.
//
// P, U, the medians and Effect are zero in an inconclusive Verdict; every
// number of a Verdict is finite.
func Compare(c proto.Comparison, canary, baseline []float64) Verdict {
	canary, droppedC := finite(canary)
	baseline, droppedB := finite(baseline)
	v := Verdict{Canary: len(canary), Baseline: len(baseline), Dropped: droppedC + droppedB}
	confidence, effect, problems := readComparison(c)
	if len(problems) > 0 {
		v.Outcome = Inconclusive
		v.Message = "invalid comparison: " + strings.Join(problems, "; ")
		return v
	}
	if len(baseline) == 0 {
		v.Outcome = Inconclusive
		v.Message = "no baseline: the baseline group has no values" + droppedNote(v.Dropped)
		return v
	}
	if len(canary) < c.MinSamples || len(baseline) < c.MinSamples {
		v.Outcome = Inconclusive
		v.Message = fmt.Sprintf("too few samples: canary %d, baseline %d, need %d each", len(canary), len(baseline), c.MinSamples) + droppedNote(v.Dropped)
		return v
	}

	v.CanaryMedian, v.BaselineMedian = Median(canary), Median(baseline)
	x, y := canary, baseline
	v.Effect = v.CanaryMedian - v.BaselineMedian
	if c.Worse == proto.WorseLower {
		x, y = negated(canary), negated(baseline)
		v.Effect = v.BaselineMedian - v.CanaryMedian
	}
	// The medians of finite values are finite; their difference may not be.
	v.Effect = min(max(v.Effect, -math.MaxFloat64), math.MaxFloat64)
	v.U, v.P = MannWhitney(x, y)

	alpha := 1 - confidence
	head := fmt.Sprintf("canary median %s vs baseline %s (%d and %d values%s): ",
		Num(v.CanaryMedian), Num(v.BaselineMedian), v.Canary, v.Baseline, droppedAside(v.Dropped))
	pIs := "p = " + Num(v.P)
	switch {
	case v.P >= alpha:
		v.Outcome = Successful
		v.Message = head + effectPhrase(v.Effect, effect) + ", " + pIs + " ≥ " + Num(alpha) + ": not shown worse"
	case v.Effect > 0 && v.Effect >= effect:
		v.Outcome = Failed
		v.Message = head + effectPhrase(v.Effect, effect) + ", " + pIs + " < " + Num(alpha) + ": worse"
	case v.Effect > 0:
		v.Outcome = Successful
		v.Message = head + pIs + " < " + Num(alpha) + " but " + Num(v.Effect) + " worse, less than the effect " + Num(effect) + ": no worse than matters"
	default:
		v.Outcome = Successful
		v.Message = head + pIs + " < " + Num(alpha) + " but " + effectPhrase(v.Effect, effect) + ": not worse"
	}
	return v
}

// readComparison reads a comparison's numbers, and what Problems says is
// wrong with it.
func readComparison(c proto.Comparison) (confidence, effect float64, problems []string) {
	confidence, _ = parseNumber(c.Confidence)
	effect, _ = parseNumber(c.Effect)
	return confidence, effect, comparisonProblems(c, "")
}

// finite returns the values that are numbers and not infinite (a new
// slice), and how many it left out.
func finite(values []float64) ([]float64, int) {
	out := make([]float64, 0, len(values))
	for _, v := range values {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			out = append(out, v)
		}
	}
	return out, len(values) - len(out)
}

func negated(values []float64) []float64 {
	out := make([]float64, len(values))
	for i, v := range values {
		out[i] = -v
	}
	return out
}

// median is the middle value, or the mean of the two middle ones, of at
// least one finite value; finite.
// Median is the median of values (the mean of the middle two for an
// even count); 0 for none.
func Median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return s[n/2-1]/2 + s[n/2]/2
}

// effectPhrase says how much worse the canary's median is, and whether
// that is at least the effect that matters.
func effectPhrase(d, effect float64) string {
	switch {
	case d > 0 && d >= effect:
		return Num(d) + " worse, at least the effect " + Num(effect) + " that matters"
	case d > 0:
		return Num(d) + " worse, less than the effect " + Num(effect) + " that matters"
	case d < 0:
		return Num(-d) + " better"
	}
	return "medians equal"
}

func droppedAside(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d not finite left out", n)
}

func droppedNote(n int) string {
	if n == 0 {
		return ""
	}
	if n == 1 {
		return " (1 value not finite left out)"
	}
	return fmt.Sprintf(" (%d values not finite left out)", n)
}

// num writes a number for a message: four significant digits.
// Num writes a value as the verdicts do: four significant digits.
func Num(v float64) string {
	return strconv.FormatFloat(v, 'g', 4, 64)
}
