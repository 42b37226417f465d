package reconciler_test

// The bound on a tick's work (Tunables.MaxHostMoves, rfcs/0003 §The tick):
// ticks cut short at the same time, each applied, end where one tick
// without the bound ends.

import (
	"fmt"
	"iter"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/nixfleet/nixfleet/analysis"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestPropertyBoundedTicksEndAlike: at every tick of a chaotic run, the
// same input is decided again under a drawn bound of 1 to 8 host moves,
// tick after tick at the same time, each applied, until one no longer says
// More. Each of those ticks changes at most the bound's host records and
// dispatches at most as many, and keeps every safety invariant
// (safetyChecks) on its own; the last is a fixpoint; and the rollouts,
// host by host, and the channels end exactly as one unbounded tick leaves
// them. A bound only spreads a tick's work: it decides nothing another
// tick would not.
func TestPropertyBoundedTicksEndAlike(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		bound := uniformIntGen(1, 8).Draw(t, "bound")
		runChaosWith(t, fleetGenOpts{maxHosts: 40, changeControl: rapid.Bool().Draw(t, "changeControl"),
			analysis: rapid.Bool().Draw(t, "analysis")}, func(t *rapid.T, c tickCase) []string {
			return checkBounded(t, c, bound)
		})
	})
}

func checkBounded(t *rapid.T, c tickCase, bound int) []string {
	if c.out.More {
		return []string{"a tick under the default bound said More"}
	}
	in := c.in
	in.Tunables.MaxHostMoves = bound
	hosts := 0
	for _, r := range in.Rollouts {
		hosts += len(r.Hosts)
	}
	// Every bounded tick but the last moves a host; a host moves through a
	// few states at most, and a release opens a rollout of every host.
	limit := 8*(hosts+len(in.Channels)*40) + 8
	for n := 1; ; n++ {
		out := reconciler.Reconcile(in)
		if len(out.Hosts) > bound || len(out.Actions) > bound {
			return []string{fmt.Sprintf("bounded tick %d under a bound of %d changed %d host records and moved %d hosts:\n%s",
				n, bound, len(out.Hosts), len(out.Actions), describeDecisions(out))}
		}
		before := in
		in = reconciler.Apply(in, out)
		// The control plane commits each bounded tick before it ticks
		// again, so each must keep the safety invariants by itself: that
		// the last one ends where one tick ends does not show that none on
		// the way broke a budget or an edge.
		if problems := checkSafety(t, tickCase{c.tick, before, out, in, c.sim}); len(problems) > 0 {
			for i, p := range problems {
				problems[i] = fmt.Sprintf("bounded tick %d under a bound of %d: %s", n, bound, p)
			}
			return append(problems, fmt.Sprintf("bounded tick %d decided:\n%s", n, describeDecisions(out)))
		}
		if !out.More {
			break
		}
		if n == limit {
			return []string{fmt.Sprintf("bounded ticks under a bound of %d still said More after %d ticks", bound, n)}
		}
	}
	if again := reconciler.Reconcile(in); !decidesNothing(again) {
		return []string{fmt.Sprintf("the last bounded tick (bound %d) is not a fixpoint; a tick at the same time decides:\n%s",
			bound, describeDecisions(again))}
	}
	// The Input's order of rollouts means nothing (Reconcile sorts them);
	// Apply appends those a tick opens.
	// A bounded tick judges the failures it observed (a converged rollout
	// judges only those new to the tick), and may halt a rollout before it
	// observed every host: the health failure's message counts the
	// failures seen then, and an analysis run the one tick started just
	// before halting is never started.
	byID := func(a, b reconciler.Rollout) int { return strings.Compare(a.ID, b.ID) }
	counted := func(r reconciler.Rollout) reconciler.Rollout {
		if r.Reason.Code == codes.HealthFailure {
			r.Reason.Message = ""
			r.Analyses = slices.DeleteFunc(slices.Clone(r.Analyses), func(a reconciler.AnalysisRun) bool {
				return a.Outcome == analysis.Running && a.StartedAt.Equal(c.in.Now)
			})
			if len(r.Analyses) == 0 {
				r.Analyses = nil
			}
		}
		return r
	}
	one := slices.SortedFunc(slices.Values(slices.Collect(mapSeq(c.next.Rollouts, counted))), byID)
	bounded := slices.SortedFunc(slices.Values(slices.Collect(mapSeq(in.Rollouts, counted))), byID)
	if d := cmp.Diff(one, bounded); d != "" {
		return []string{fmt.Sprintf("bounded ticks (bound %d) left the rollouts otherwise than one tick (-one +bounded):\n%s", bound, d)}
	}
	if d := cmp.Diff(c.next.Channels, in.Channels); d != "" {
		return []string{fmt.Sprintf("bounded ticks (bound %d) left the channels otherwise than one tick (-one +bounded):\n%s", bound, d)}
	}
	if d := cmp.Diff(c.next.Deferrals, in.Deferrals); d != "" {
		return []string{fmt.Sprintf("bounded ticks (bound %d) left the deferrals otherwise than one tick (-one +bounded):\n%s", bound, d)}
	}
	return nil
}

// mapSeq yields f of each element of s.
func mapSeq[T any](s []T, f func(T) T) iter.Seq[T] {
	return func(yield func(T) bool) {
		for _, v := range s {
			if !yield(f(v)) {
				return
			}
		}
	}
}
