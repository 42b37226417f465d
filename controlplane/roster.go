package controlplane

import (
	"slices"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/proto"
)

// A roster is the hosts of the signed fleet the host keys come from (the
// newest fleet any channel verified, auth.go), by name: what GET
// /v1/hosts lists besides the hosts the store knows, so that a host of a
// channel whose release waits (on a channel edge, on the channel's
// rollout) is listed before any rollout includes it (rfcs/0012 §Hosts).
//
// It is built once per fleet, while the source stores the release, and
// never modified afterwards: requests share it without a lock. At 100,000
// hosts it holds each name twice (in names and in its channel's list)
// and once as a key of hosts.
type roster struct {
	names     []string                   // every host, in byte order
	byChannel map[string][]string        // each channel's hosts, in byte order
	hosts     map[string]store.FleetHost // by name
}

// newRoster is the roster of f: prev itself when f has the same hosts in
// the same channels, built or not alike (a release that changes closures
// only costs a pass over the fleet, not a sort).
func newRoster(f *proto.FleetResolved, prev *roster) *roster {
	if prev.same(f) {
		return prev
	}
	r := &roster{names: make([]string, 0, len(f.Hosts)), byChannel: map[string][]string{},
		hosts: make(map[string]store.FleetHost, len(f.Hosts))}
	for name, h := range f.Hosts {
		r.names = append(r.names, name)
		r.byChannel[h.Channel] = append(r.byChannel[h.Channel], name)
		r.hosts[name] = fleetHost(h)
	}
	slices.Sort(r.names)
	for _, names := range r.byChannel {
		slices.Sort(names)
	}
	return r
}

func fleetHost(h proto.Host) store.FleetHost {
	return store.FleetHost{Channel: h.Channel, Built: h.ClosureHash != nil}
}

// same reports whether r lists the hosts of f as f does.
func (r *roster) same(f *proto.FleetResolved) bool {
	if r == nil || len(r.hosts) != len(f.Hosts) {
		return false
	}
	for name, h := range f.Hosts {
		if got, ok := r.hosts[name]; !ok || got != fleetHost(h) {
			return false
		}
	}
	return true
}

// After returns the first n hosts whose names sort after after, in byte
// order: of channel only, when it is not "". The slice is the roster's:
// callers must not modify it.
func (r *roster) After(channel, after string, n int) []string {
	names := r.names
	if channel != "" {
		names = r.byChannel[channel]
	}
	i, found := slices.BinarySearch(names, after)
	if found {
		i++
	}
	j := min(len(names), i+max(n, 0))
	return names[i:j:j]
}

// Host returns a host of the fleet.
func (r *roster) Host(name string) (store.FleetHost, bool) {
	h, ok := r.hosts[name]
	return h, ok
}
