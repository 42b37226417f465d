package fleetkit

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
)

// Builder makes a small fleet.resolved one call at a time. Its methods
// return the builder, so that a fleet reads as one chain:
//
//	f := fleetkit.New(t).Channel("prod", 0, 30).Host("a", "prod", 0).Build()
//
// Every host starts at version "v1": its closure is Closure(name, "v1").
type Builder struct {
	t       testing.TB
	f       *proto.FleetResolved
	version string
}

// New returns a builder of an empty fleet; t receives the failures of
// Build.
func New(t testing.TB) *Builder {
	return &Builder{t: t, version: "v1", f: &proto.FleetResolved{
		SchemaVersion: proto.SchemaVersion, Hosts: map[string]proto.Host{}, Channels: map[string]proto.Channel{},
		RolloutPolicies: map[string]proto.RolloutPolicy{}, Waves: map[string][]proto.Wave{},
		Edges: []proto.Edge{}, ChannelEdges: []proto.ChannelEdge{}, DisruptionBudgets: []proto.DisruptionBudget{},
	}}
}

// Channel adds a channel with a staged policy of its own name: one wave
// per soak time given (minutes), each selecting every host, and a halt on
// the first health failure. Compliance is disabled.
func (b *Builder) Channel(name string, soaks ...int) *Builder {
	b.f.Channels[name] = proto.Channel{RolloutPolicy: name, FreshnessWindow: 1440, SigningIntervalMinutes: 60,
		ReconcileIntervalMinutes: 5, Compliance: proto.Compliance{Frameworks: []string{}, Mode: proto.ComplianceDisabled}}
	p := proto.RolloutPolicy{Strategy: "staged", OnHealthFailure: proto.OnHealthFailureHalt}
	waves := []proto.Wave{}
	for _, s := range soaks {
		p.Waves = append(p.Waves, proto.PolicyWave{Selector: proto.Selector{All: true}, SoakMinutes: s})
		waves = append(waves, proto.Wave{Hosts: []string{}, SoakMinutes: s})
	}
	b.f.RolloutPolicies[name] = p
	b.f.Waves[name] = waves
	return b
}

// Policy changes the rollout policy of a channel added with Channel.
func (b *Builder) Policy(channel string, edit func(*proto.RolloutPolicy)) *Builder {
	p := b.f.RolloutPolicies[channel]
	edit(&p)
	b.f.RolloutPolicies[channel] = p
	return b
}

// Compliance sets a channel's compliance mode and frameworks.
func (b *Builder) Compliance(channel, mode string, frameworks ...string) *Builder {
	c := b.f.Channels[channel]
	c.Compliance = proto.Compliance{Mode: mode, Frameworks: append([]string{}, frameworks...)}
	b.f.Channels[channel] = c
	return b
}

// Host adds a host with tags to wave number wave (from 0) of a channel;
// its closure is Closure(name, the current version).
func (b *Builder) Host(name, channel string, wave int, tags ...string) *Builder {
	c := Closure(name, b.version)
	b.f.Hosts[name] = proto.Host{System: "x86_64-linux", Tags: append([]string{}, tags...), Channel: channel, ClosureHash: &c}
	w := b.f.Waves[channel]
	w[wave].Hosts = append(w[wave].Hosts, name)
	return b
}

// AllAtOnce adds a channel whose policy has strategy "all-at-once" and no
// waves: its waves.<channel> is an empty list, as the Nix library writes
// it (rfcs/0001 §4.1). Add its hosts with Member.
func (b *Builder) AllAtOnce(name string) *Builder {
	return b.Channel(name).Policy(name, func(p *proto.RolloutPolicy) {
		p.Strategy, p.Waves = "all-at-once", []proto.PolicyWave{}
	})
}

// Member adds a host with tags to a channel added with AllAtOnce: no wave
// lists it.
func (b *Builder) Member(name, channel string, tags ...string) *Builder {
	c := Closure(name, b.version)
	b.f.Hosts[name] = proto.Host{System: "x86_64-linux", Tags: append([]string{}, tags...), Channel: channel, ClosureHash: &c}
	return b
}

// Edge makes host gates go before host gated.
func (b *Builder) Edge(gates, gated string) *Builder {
	b.f.Edges = append(b.f.Edges, proto.Edge{Gates: gates, Gated: gated})
	return b
}

// ChannelEdge makes channel gates go before channel gated.
func (b *Builder) ChannelEdge(gates, gated string) *Builder {
	b.f.ChannelEdges = append(b.f.ChannelEdges, proto.ChannelEdge{Gates: gates, Gated: gated})
	return b
}

// Budget adds a disruption budget over sel; a limit of 0 is left unset.
func (b *Builder) Budget(sel proto.Selector, maxInFlight, pct int) *Builder {
	d := proto.DisruptionBudget{Selector: sel}
	if maxInFlight > 0 {
		d.MaxInFlight = &maxInFlight
	}
	if pct > 0 {
		d.MaxInFlightPct = &pct
	}
	b.f.DisruptionBudgets = append(b.f.DisruptionBudgets, d)
	return b
}

// NamedBudget adds a disruption budget like Budget, with a name.
func (b *Builder) NamedBudget(name string, sel proto.Selector, maxInFlight, pct int) *Builder {
	b.Budget(sel, maxInFlight, pct)
	b.f.DisruptionBudgets[len(b.f.DisruptionBudgets)-1].Name = name
	return b
}

// WaveNames names the waves of a channel added with Channel, in order,
// in its policy and in waves.<channel>, as the Nix library writes them.
func (b *Builder) WaveNames(channel string, names ...string) *Builder {
	p, ws := b.f.RolloutPolicies[channel], b.f.Waves[channel]
	for i, n := range names {
		p.Waves[i].Name, ws[i].Name = n, n
	}
	b.f.RolloutPolicies[channel] = p
	return b
}

// Bump moves the fleet to a new version: every host gets
// Closure(name, version), as a release that changes them all would, and
// hosts added later start at that version.
func (b *Builder) Bump(version string) *Builder {
	b.version = version
	for name := range b.f.Hosts {
		b.BumpHost(name, version)
	}
	return b
}

// BumpHost gives one host Closure(name, version), as a release that
// changes only that host would.
func (b *Builder) BumpHost(name, version string) *Builder {
	h := b.f.Hosts[name]
	c := Closure(name, version)
	h.ClosureHash = &c
	b.f.Hosts[name] = h
	return b
}

// Build returns a deep copy of the fleet (a JSON round trip through
// proto.DecodeFleetResolved), so that the builder may go on changing. The
// test fails if the fleet does not decode or manifest.ValidateFleet
// refuses it.
func (b *Builder) Build() *proto.FleetResolved {
	b.t.Helper()
	raw, err := json.Marshal(b.f)
	if err != nil {
		b.t.Fatal(err)
	}
	f, err := proto.DecodeFleetResolved(raw)
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := manifest.ValidateFleet(f); err != nil {
		b.t.Fatalf("test fleet is invalid: %v", err)
	}
	return f
}

// Closure is a valid Nix store path basename for a host at a version,
// derived from both by SHA-256.
func Closure(host, version string) string {
	sum := sha256.Sum256([]byte(host + "/" + version))
	const alphabet = "0123456789abcdfghijklmnpqrsvwxyz"
	h := make([]byte, 32)
	for i := range h {
		h[i] = alphabet[int(sum[i])%32]
	}
	return string(h) + "-nixos-system-" + host + "-" + version
}

// Commit is the 40-hex-digit git commit id that tests use for release
// number n: n in hexadecimal, padded with zeros.
func Commit(n int) string { return fmt.Sprintf("%07x%033d", n, 0) }
