package storetest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
)

// fleetBuilder makes small, valid fleets.
type fleetBuilder struct {
	f       *proto.FleetResolved
	version string
}

func newFleet() *fleetBuilder {
	return &fleetBuilder{version: "v1", f: &proto.FleetResolved{
		SchemaVersion: proto.SchemaVersion, Hosts: map[string]proto.Host{}, Channels: map[string]proto.Channel{},
		RolloutPolicies: map[string]proto.RolloutPolicy{}, Waves: map[string][]proto.Wave{},
		Edges: []proto.Edge{}, ChannelEdges: []proto.ChannelEdge{}, DisruptionBudgets: []proto.DisruptionBudget{},
	}}
}

// channel adds a channel with one wave per soak time (minutes); its
// policy halts on the first failure.
func (b *fleetBuilder) channel(name string, soaks ...int) *fleetBuilder {
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

// host adds a host to a channel's wave.
func (b *fleetBuilder) host(name, channel string, wave int, tags ...string) *fleetBuilder {
	c := Closure(name, b.version)
	b.f.Hosts[name] = proto.Host{System: "x86_64-linux", Tags: append([]string{}, tags...), Channel: channel, ClosureHash: &c}
	b.f.Waves[channel][wave].Hosts = append(b.f.Waves[channel][wave].Hosts, name)
	return b
}

func (b *fleetBuilder) edge(gates, gated string) *fleetBuilder {
	b.f.Edges = append(b.f.Edges, proto.Edge{Gates: gates, Gated: gated})
	return b
}

func (b *fleetBuilder) channelEdge(gates, gated string) *fleetBuilder {
	b.f.ChannelEdges = append(b.f.ChannelEdges, proto.ChannelEdge{Gates: gates, Gated: gated})
	return b
}

// budget adds a disruption budget; 0 leaves a limit unset.
func (b *fleetBuilder) budget(sel proto.Selector, maxInFlight, pct int) *fleetBuilder {
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

// bump gives every host a new closure, as a new release would.
func (b *fleetBuilder) bump(version string) *fleetBuilder {
	b.version = version
	for name, h := range b.f.Hosts {
		c := Closure(name, version)
		h.ClosureHash = &c
		b.f.Hosts[name] = h
	}
	return b
}

// build returns a deep copy of the fleet, checked with ValidateFleet.
func (b *fleetBuilder) build(t testing.TB) *proto.FleetResolved {
	t.Helper()
	raw, err := json.Marshal(b.f)
	if err != nil {
		t.Fatal(err)
	}
	f, err := proto.DecodeFleetResolved(raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := manifest.ValidateFleet(f); err != nil {
		t.Fatalf("test fleet is invalid: %v", err)
	}
	return f
}

// Closure is a valid Nix store path basename for a host and a version.
func Closure(host, version string) string {
	sum := sha256.Sum256([]byte(host + "/" + version))
	const alphabet = "0123456789abcdfghijklmnpqrsvwxyz"
	h := make([]byte, 32)
	for i := range h {
		h[i] = alphabet[int(sum[i])%32]
	}
	return string(h) + "-nixos-system-" + host + "-" + version
}

// Commit is a 40-hex-digit commit id for n.
func Commit(n int) string { return fmt.Sprintf("%07x%033d", n, 0) }

// Releases returns one store.Release per channel of f (of the named
// channels only, when channels are given), as CI would publish them at ref
// signed at signedAt: f with meta.ciCommit and meta.signedAt set, its
// manifests projected and marshalled canonically. The signatures are
// placeholders: the store keeps bytes, it does not verify them. f is not
// modified.
func Releases(t testing.TB, f *proto.FleetResolved, ref string, signedAt time.Time, channels ...string) []store.Release {
	t.Helper()
	raw, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	g, err := proto.DecodeFleetResolved(raw)
	if err != nil {
		t.Fatal(err)
	}
	signed := signedAt.UTC().Format(time.RFC3339)
	g.Meta.CICommit, g.Meta.SignedAt = &ref, &signed
	body, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	fleetHash := sha256hex(body)
	ms, err := manifest.Project(g, fleetHash)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Release
	for _, m := range ms {
		if len(channels) > 0 && !slices.Contains(channels, m.Channel) {
			continue
		}
		mb, err := manifest.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, store.Release{
			Channel: m.Channel, Ref: ref, SourceCommit: "src-" + ref, SignedAt: signedAt,
			FleetBody: body, FleetSig: fakeSig("fleet" + ref), FleetHash: fleetHash,
			ManifestBody: mb, ManifestSig: fakeSig(m.Channel + ref), ManifestHash: sha256hex(mb),
			VerifiedAt: signedAt.Add(time.Minute),
		})
	}
	return out
}

func sha256hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// fakeSig is 64 bytes that stand for a signature.
func fakeSig(seed string) []byte {
	a := sha256.Sum256([]byte(seed))
	b := sha256.Sum256(a[:])
	return append(a[:], b[:]...)
}
