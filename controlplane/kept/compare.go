package kept

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/nixfleet/nixfleet/reconciler"
)

// Late says which of a host's rows the store stamped after an Input's
// Marks: its status, its last-seen time.
type Late struct{ Status, Seen bool }

// Compare says where a kept input and a cold load differ, "" when they do
// not. What the cold load may hold that the kept input cannot does not
// count:
//   - of a host that late (asked with the hosts that differ) says was
//     written after the kept input's Marks, its status when its status row
//     is, its last-seen time when its last-seen row is (a check-in the
//     next tick reads), and the host whole when the kept input does not
//     hold it yet;
//   - a rollout the kept input does not hold that only an unconsumed
//     intent keeps live (onlyIntended): the intent may have been added
//     after the kept input read the intents, and the next tick loads the
//     rollout;
//   - the intents and measurements, which a tick reads in full, keeping
//     none.
func Compare(kept, cold *reconciler.Input, onlyIntended func(id string) bool, late func(names []string) (map[string]Late, error)) (string, error) {
	if names := differingHosts(kept.Hosts, cold.Hosts); len(names) > 0 {
		lateOf, err := late(names)
		if err != nil {
			return "", err
		}
		for _, name := range names {
			a, inA := kept.Hosts[name]
			b, inB := cold.Hosts[name]
			l := lateOf[name]
			switch {
			case !inA && (l.Status || l.Seen):
				continue
			case !inA:
				return fmt.Sprintf("host %s: only the cold load has it: %+v", name, b), nil
			case !inB:
				return fmt.Sprintf("host %s: only the kept input has it: %+v", name, a), nil
			}
			if l.Status {
				seen, said := a.LastSeen, a.StatusAt
				a = b
				a.LastSeen, a.StatusAt = seen, said
			}
			if l.Seen {
				a.LastSeen, a.StatusAt = b.LastSeen, b.StatusAt
			}
			if !reflect.DeepEqual(a, b) {
				return fmt.Sprintf("host %s: kept %+v, cold %+v", name, kept.Hosts[name], b), nil
			}
		}
	}
	held := make(map[string]bool, len(kept.Rollouts))
	for i := range kept.Rollouts {
		held[kept.Rollouts[i].ID] = true
	}
	norm := func(in *reconciler.Input) reconciler.Input {
		c := *in
		c.Measurements = nil
		c.Hosts, c.Intents = nil, nil
		c.Rollouts = slices.DeleteFunc(slices.Clone(c.Rollouts), func(r reconciler.Rollout) bool {
			return !held[r.ID] && onlyIntended != nil && onlyIntended(r.ID)
		})
		return c
	}
	a, b := norm(kept), norm(cold)
	if len(a.Rollouts) != len(b.Rollouts) {
		return fmt.Sprintf("rollouts: kept %d, cold %d", len(a.Rollouts), len(b.Rollouts)), nil
	}
	for i := range a.Rollouts {
		if !reflect.DeepEqual(a.Rollouts[i], b.Rollouts[i]) {
			return fmt.Sprintf("rollout %s differs from the cold load's %s", a.Rollouts[i].ID, b.Rollouts[i].ID), nil
		}
	}
	if !reflect.DeepEqual(a, b) {
		return "the deferrals, visibility or channels differ", nil
	}
	return "", nil
}

// differingHosts names the hosts whose observed state differs between a
// and b, or that only one of them holds, sorted.
func differingHosts(a, b map[string]reconciler.ObservedHost) []string {
	var out []string
	for name, o := range b {
		if p, ok := a[name]; !ok || !reflect.DeepEqual(p, o) {
			out = append(out, name)
		}
	}
	for name := range a {
		if _, ok := b[name]; !ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
