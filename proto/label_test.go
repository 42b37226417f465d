package proto_test

import (
	"strings"
	"testing"

	"github.com/nixfleet/nixfleet/proto"
)

// TestSelectorShort: the short form names a budget without a name; it
// does not depend on the order or repetition of a selector's lists.
func TestSelectorShort(t *testing.T) {
	t.Parallel()
	ch := "prod"
	long := strings.Repeat("x", 30)
	tests := []struct {
		name string
		sel  proto.Selector
		want string
	}{
		{"empty", proto.Selector{}, "none"},
		{"all", proto.Selector{All: true}, "all"},
		{"tags", proto.Selector{Tags: []string{"web"}}, "tags=web"},
		{"hosts sorted and unique", proto.Selector{Hosts: []string{"db-2", "db-1", "db-2"}}, "hosts=db-1,db-2"},
		{"a long list shows three and a count", proto.Selector{Hosts: []string{"e", "d", "c", "b", "a"}}, "hosts=a,b,c,+2"},
		{"rules in a fixed order", proto.Selector{TagsAny: []string{"b", "a"}, Channel: &ch, Tags: []string{"web"}},
			"channel=prod;tags=web;tagsAny=a,b"},
		{"an empty channel is no rule", proto.Selector{Channel: new(string), Tags: []string{"web"}}, "tags=web"},
		{"cut at 48 bytes", proto.Selector{Tags: []string{long + "b", long + "a"}}, "tags=" + long + "a," + long[:11] + "…"},
		{"never inside a character", proto.Selector{Tags: []string{strings.Repeat("é", 30)}}, "tags=" + strings.Repeat("é", 21) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.sel.Short(); got != tt.want {
				t.Errorf("Short() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestBudgetLabel: a name wins over the short form.
func TestBudgetLabel(t *testing.T) {
	t.Parallel()
	web := proto.Selector{Tags: []string{"web"}}
	if got := (proto.DisruptionBudget{Name: "front", Selector: web}).Label(); got != "front" {
		t.Errorf("named: %q", got)
	}
	if got := (proto.RolloutBudget{Selector: web}).Label(); got != "tags=web" {
		t.Errorf("unnamed: %q", got)
	}
}
