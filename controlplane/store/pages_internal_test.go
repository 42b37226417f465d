package store

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nixfleet/nixfleet/proto"
)

// jsonNames are the JSON member names of a struct type's fields, those
// of an embedded struct's fields among them (encoding/json promotes them).
func jsonNames(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		if f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag.Get("json") == "" {
			out = append(out, jsonNames(f.Type)...)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// TestSummaryCoversTheFrozenPlan: a rollout summary decodes every member
// of the frozen plan but those it leaves out on purpose, so that a member
// added to frozen is either summarised or left out by a decision; and a
// budget's summary is the frozen budget without its hosts.
func TestSummaryCoversTheFrozenPlan(t *testing.T) {
	want := slices.DeleteFunc(jsonNames(reflect.TypeFor[frozen]()), func(n string) bool { return slices.Contains(summaryLeavesOut, n) })
	if got := jsonNames(reflect.TypeFor[frozenSummary]()); !slices.Equal(got, want) {
		t.Errorf("frozenSummary decodes %v; frozen without %v is %v", got, summaryLeavesOut, want)
	}
	want = slices.DeleteFunc(jsonNames(reflect.TypeFor[proto.RolloutBudget]()), func(n string) bool { return n == "hosts" })
	if got := jsonNames(reflect.TypeFor[budgetSummary]()); !slices.Equal(got, want) {
		t.Errorf("budgetSummary decodes %v; a budget without its hosts is %v", got, want)
	}
}

// TestViewCoversTheFrozenPlan: what a host's view decodes of a rollout's
// plan is every member of the frozen plan but its edges (and, as in a
// summary, the budgets' host lists): a member added to frozen is decoded
// for host views unless left out by a decision here.
func TestViewCoversTheFrozenPlan(t *testing.T) {
	want := slices.DeleteFunc(jsonNames(reflect.TypeFor[frozen]()), func(n string) bool { return n == "edges" })
	if got := jsonNames(reflect.TypeFor[frozenView]()); !slices.Equal(got, want) {
		t.Errorf("frozenView decodes %v; frozen without its edges is %v", got, want)
	}
}
