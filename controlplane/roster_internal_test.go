package controlplane

import (
	"fmt"
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/proto"
)

// TestRoster: a roster lists a fleet's hosts by name in byte order, all
// or one channel's, after a name, a page at a time; it knows each host's
// channel and whether the fleet built it; a fleet with the same hosts in
// the same channels, built alike, reuses the roster before it.
func TestRoster(t *testing.T) {
	t.Parallel()
	closure := "x-nixos-system"
	f := &proto.FleetResolved{Hosts: map[string]proto.Host{
		"web-2": {Channel: "stable", ClosureHash: &closure}, "web-10": {Channel: "stable", ClosureHash: &closure},
		"Db": {Channel: "prod", ClosureHash: &closure}, "db-1": {Channel: "prod"}, "edge": {Channel: "edge", ClosureHash: &closure},
	}}
	r := newRoster(f, nil)
	for _, tc := range []struct {
		name, channel, after string
		n                    int
		want                 []string
	}{
		{"every host", "", "", 10, []string{"Db", "db-1", "edge", "web-10", "web-2"}},
		{"a page", "", "", 2, []string{"Db", "db-1"}},
		{"after a host", "", "db-1", 2, []string{"edge", "web-10"}},
		{"after a name that is no host's", "", "e", 10, []string{"edge", "web-10", "web-2"}},
		{"after the last", "", "web-2", 10, []string{}},
		{"a channel", "prod", "", 10, []string{"Db", "db-1"}},
		{"a channel after a host of another", "stable", "edge", 1, []string{"web-10"}},
		{"an unknown channel", "nope", "", 10, []string{}},
		{"none", "", "", 0, []string{}},
	} {
		got := r.After(tc.channel, tc.after, tc.n)
		if len(got) == 0 {
			got = []string{}
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
	if h, ok := r.Host("db-1"); !ok || h != (store.FleetHost{Channel: "prod"}) {
		t.Errorf("Host(db-1) = %+v, %v", h, ok)
	}
	if h, ok := r.Host("web-2"); !ok || h != (store.FleetHost{Channel: "stable", Built: true}) {
		t.Errorf("Host(web-2) = %+v, %v", h, ok)
	}
	if _, ok := r.Host("nobody"); ok {
		t.Error("Host(nobody) found a host")
	}

	other := "y-nixos-system"
	same := &proto.FleetResolved{Hosts: maps.Clone(f.Hosts)}
	same.Hosts["edge"] = proto.Host{Channel: "edge", ClosureHash: &other} // another closure only
	if newRoster(same, r) != r {
		t.Error("a fleet whose hosts differ only in closures built a new roster")
	}
	for name, change := range map[string]func(map[string]proto.Host){
		"channel moved": func(h map[string]proto.Host) { h["edge"] = proto.Host{Channel: "stable", ClosureHash: &closure} },
		"built":         func(h map[string]proto.Host) { h["db-1"] = proto.Host{Channel: "prod", ClosureHash: &closure} },
		"host added":    func(h map[string]proto.Host) { h["new"] = proto.Host{Channel: "edge"} },
		"host gone":     func(h map[string]proto.Host) { delete(h, "Db") },
		"renamed":       func(h map[string]proto.Host) { h["edge-1"] = h["edge"]; delete(h, "edge") },
	} {
		hosts := maps.Clone(f.Hosts)
		change(hosts)
		g := &proto.FleetResolved{Hosts: hosts}
		got, fresh := newRoster(g, r), newRoster(g, nil)
		if got == r {
			t.Errorf("%s: the roster before was reused", name)
		}
		if d := cmp.Diff(fresh, got, cmp.AllowUnexported(roster{})); d != "" {
			t.Errorf("%s: from the roster before (-fresh +got):\n%s", name, d)
		}
	}
	if got := r.After("", "", 10); len(got) != 5 || got[0] != "Db" {
		t.Errorf("building other rosters changed this one: %v", got)
	}
}

// BenchmarkRoster measures listing a 100,000-host fleet by name after a
// release (beside parsing its keys, BenchmarkParseHostKeys): fresh, and
// from the roster before when only closures changed (reused):
//
//	go test ./controlplane -run '^$' -bench Roster
func BenchmarkRoster(b *testing.B) {
	closure := "x-nixos-system"
	f := &proto.FleetResolved{Hosts: map[string]proto.Host{}}
	for i := range 100000 {
		f.Hosts[fmt.Sprintf("host-%06d", (i*7919)%100000)] = proto.Host{Channel: fmt.Sprintf("ch%d", i%10), ClosureHash: &closure}
	}
	prev := newRoster(f, nil)
	b.Run("fresh", func(b *testing.B) {
		for b.Loop() {
			newRoster(f, nil)
		}
	})
	b.Run("reused", func(b *testing.B) {
		for b.Loop() {
			newRoster(f, prev)
		}
	})
	b.Run("after", func(b *testing.B) {
		for b.Loop() {
			prev.After("ch3", "host-050000", 501)
		}
	})
}
