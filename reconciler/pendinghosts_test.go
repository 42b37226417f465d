package reconciler_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/nixfleet/nixfleet/proto"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// TestPendingHostsIsPendingHost: the records a rollout opens with
// (PendingHosts, which merges sorted lists) are PendingHost's for each
// host, for sorted and unsorted host sets and budget lists, duplicates
// and hosts in no budget included.
func TestPendingHostsIsPendingHost(t *testing.T) {
	since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rapid.Check(t, func(t *rapid.T) {
		names := rapid.SliceOfN(rapid.IntRange(0, 40), 0, 60).Draw(t, "hosts")
		name := func(i int) string { return fmt.Sprintf("h%02d", i) }
		set := make([]proto.HostWave, len(names))
		for i, n := range names {
			set[i] = proto.HostWave{Hostname: name(n), WaveIndex: n % 3, TargetClosure: "c-" + name(n)}
		}
		if rapid.Bool().Draw(t, "sortSet") {
			slices.SortFunc(set, func(a, b proto.HostWave) int { return strings.Compare(a.Hostname, b.Hostname) })
		}
		budgets := make([]proto.RolloutBudget, rapid.IntRange(0, 4).Draw(t, "budgets"))
		for bi := range budgets {
			members := rapid.SliceOfN(rapid.IntRange(0, 45), 0, 30).Draw(t, fmt.Sprintf("budget%d", bi))
			for _, m := range members {
				budgets[bi].Hosts = append(budgets[bi].Hosts, name(m))
			}
			if rapid.IntRange(0, 4).Draw(t, fmt.Sprintf("sort%d", bi)) > 0 {
				slices.Sort(budgets[bi].Hosts)
			}
		}
		want := make([]rc.RolloutHost, len(set))
		for i, hw := range set {
			want[i] = rc.PendingHost(hw, budgets, since)
		}
		got := rc.PendingHosts(set, budgets, since)
		if d := cmp.Diff(want, got, cmp.Comparer(func(a, b []int) bool { return slices.Equal(a, b) })); d != "" {
			t.Fatalf("PendingHosts differs from PendingHost (-PendingHost +PendingHosts):\n%s", d)
		}
		// A host's budget list is its own: appending to it leaves the
		// next host's alone.
		for i := range got {
			if len(got[i].Budgets) > 0 && i+1 < len(got) {
				next := slices.Clone(got[i+1].Budgets)
				_ = append(got[i].Budgets, 99)
				if !slices.Equal(next, got[i+1].Budgets) {
					t.Fatalf("appending to host %d's budgets changed host %d's", i, i+1)
				}
			}
		}
	})
}
