package reconciler_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/nixfleet/nixfleet/reconciler"
)

// TestPropertyQuietUntil: a tick's QuietUntil holds (rfcs/0003 §Quiet
// ticks). After every chaotic tick, the state it leaves is reconciled
// again at the same time (which decides nothing, rule 12); that idle
// tick's QuietUntil is then checked at a drawn time before it: a tick
// there, on the same input, must decide nothing either. A caller that
// skips the ticks before QuietUntil while its input does not change
// therefore misses no decision. An idle tick that names no time must
// stay idle hours later. (A tick that decided something says its own
// time: the next one must look.)
func TestPropertyQuietUntil(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		runChaos(t, checkQuietUntil)
	})
}

func checkQuietUntil(t *rapid.T, c tickCase) []string {
	var problems []string
	if !decidesNothing(c.out) && !c.out.QuietUntil.Equal(c.in.Now) {
		problems = append(problems, fmt.Sprintf("a tick that decided something says quiet until %s, not its own time", c.out.QuietUntil))
	}
	idle := reconciler.Reconcile(c.next)
	if !decidesNothing(idle) {
		return append(problems, "the tick after it at the same time decided something (rule 12)")
	}
	// WakeAt may come early, never late: the state the tick left is quiet
	// at least until it.
	if !idle.QuietUntil.IsZero() && (c.out.WakeAt.IsZero() || c.out.WakeAt.After(idle.QuietUntil)) {
		problems = append(problems, fmt.Sprintf("the tick says wake at %s, but the state it left changes by time at %s",
			c.out.WakeAt.Format(time.RFC3339Nano), idle.QuietUntil.Format(time.RFC3339Nano)))
	}
	if !idle.WakeAt.Equal(idle.QuietUntil) {
		problems = append(problems, "an idle tick's WakeAt is not its QuietUntil")
	}
	horizon := idle.QuietUntil
	if horizon.IsZero() {
		horizon = c.in.Now.Add(6 * time.Hour)
	}
	if !horizon.After(c.in.Now) {
		return append(problems, fmt.Sprintf("an idle tick says quiet until %s, not after its time %s", horizon, c.in.Now))
	}
	span := horizon.Sub(c.in.Now)
	// Just before the horizon, and somewhere before it.
	for _, d := range []time.Duration{span - time.Nanosecond, time.Duration(rapid.Int64Range(0, int64(span-time.Nanosecond)).Draw(t, "quietAt"))} {
		if d <= 0 {
			continue
		}
		later := c.next
		later.Now = c.in.Now.Add(d)
		if out := reconciler.Reconcile(later); !decidesNothing(out) {
			problems = append(problems, fmt.Sprintf("quiet until %s, but a tick at %s on the same input decided:\n%s",
				horizon.Format(time.RFC3339Nano), later.Now.Format(time.RFC3339Nano), describeDecisions(out)))
			break
		}
	}
	return problems
}
