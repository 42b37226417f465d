package manifest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
)

// syntheticFleet builds a valid, signed-looking fleet of n hosts shaped like
// mkFleet output:
//
//   - three channels (stable 60 %, beta 30 %, edge 10 % of hosts), each with
//     its own policy of three selector waves (canary tag, five racks, all);
//   - each channel's wave list is those selectors resolved fleet-wide, so
//     it also names the other channels' hosts, as the Nix library emits it;
//   - tags: one of 20 racks, one of three roles, "canary" for 1 host in 50;
//   - about 1 % of hosts have no closure yet;
//   - ordering edges between db hosts of one channel (a forest of chains),
//     two channel edges;
//   - budgets: one per rack, 10 % of the fleet, the db role, the edge
//     channel, and an explicit host list of n/100 hosts.
func syntheticFleet(n int) *proto.FleetResolved { return syntheticFleetListing(n, n/100) }

// syntheticFleetListing is syntheticFleet with a budget whose selector
// names listed hosts explicitly.
func syntheticFleetListing(n, listed int) *proto.FleetResolved {
	channels := []string{"beta", "edge", "stable"}
	channelOf := func(i int) string {
		switch i % 10 {
		case 0:
			return "edge"
		case 1, 2, 3:
			return "beta"
		}
		return "stable"
	}
	roles := []string{"role-web", "role-db", "role-cache"}
	name := func(i int) string { return fmt.Sprintf("host-%05d", i) }

	f := &proto.FleetResolved{
		SchemaVersion:   proto.SchemaVersion,
		Hosts:           make(map[string]proto.Host, n),
		Channels:        map[string]proto.Channel{},
		RolloutPolicies: map[string]proto.RolloutPolicy{},
		Waves:           map[string][]proto.Wave{},
		ChannelEdges: []proto.ChannelEdge{
			{Gates: "edge", Gated: "beta"},
			{Gates: "beta", Gated: "stable"},
		},
		Meta: proto.Meta{SchemaVersion: ptr(1), SignedAt: ptr(testSignedAt), CICommit: ptr(testCommit)},
	}
	for i := range n {
		tags := []string{fmt.Sprintf("rack-%02d", i%20), roles[i%3]}
		if i%50 == 0 {
			tags = append(tags, "canary")
		}
		h := proto.Host{
			System:  "x86_64-linux",
			Tags:    tags,
			Channel: channelOf(i),
			Pubkey:  ptr(sshKeyFor(name(i))),
		}
		if i%97 != 42 {
			h.ClosureHash = ptr(closureFor(name(i)))
		}
		f.Hosts[name(i)] = h
	}
	racks := make([]string, 5)
	for i := range racks {
		racks[i] = fmt.Sprintf("rack-%02d", i)
	}
	policyWaves := []proto.PolicyWave{
		{Selector: proto.Selector{Tags: []string{"canary"}}, SoakMinutes: 30},
		{Selector: proto.Selector{TagsAny: racks}, SoakMinutes: 15},
		{Selector: proto.Selector{All: true}, SoakMinutes: 0},
	}
	for _, ch := range channels {
		policy := "staged-" + ch
		f.Channels[ch] = proto.Channel{
			RolloutPolicy:            policy,
			FreshnessWindow:          1440,
			SigningIntervalMinutes:   60,
			ReconcileIntervalMinutes: 5,
			Compliance:               proto.Compliance{Frameworks: []string{"nis2"}, Mode: proto.CompliancePermissive},
		}
		f.RolloutPolicies[policy] = proto.RolloutPolicy{
			Strategy:        "staged",
			Waves:           policyWaves,
			HealthGate:      proto.HealthGate{SystemdFailedUnits: &proto.SystemdFailedUnits{Max: 0}, MaxFailures: ptr(3)},
			OnHealthFailure: proto.OnHealthFailureRollbackAndHalt,
		}
		waves := make([]proto.Wave, len(policyWaves))
		for i, pw := range policyWaves {
			waves[i] = proto.Wave{Hosts: pw.Selector.Resolve(f.Hosts), SoakMinutes: pw.SoakMinutes}
		}
		f.Waves[ch] = waves
	}
	// waveOf is the first wave of its channel that lists host i: the
	// canaries, then the five racks of wave 1, then the rest.
	waveOf := func(i int) int {
		switch {
		case i%50 == 0:
			return 0
		case i%20 < 5:
			return 1
		}
		return 2
	}
	// Hosts i and i+90 are joined by an edge for one db host in three:
	// i%10, i%3 and i%9 are kept, so both ends share a channel and the
	// edges form chains. The host of the earlier wave gates the other (no
	// host may wait for a later wave); a chain stays acyclic whichever way
	// each of its links points.
	for i := 1; i+90 < n; i += 9 {
		a, b := i, i+90
		if waveOf(a) > waveOf(b) {
			a, b = b, a
		}
		f.Edges = append(f.Edges, proto.Edge{Gates: name(a), Gated: name(b), Reason: "replica order"})
	}
	for r := range 20 {
		f.DisruptionBudgets = append(f.DisruptionBudgets, proto.DisruptionBudget{
			Selector: proto.Selector{Tags: []string{fmt.Sprintf("rack-%02d", r)}}, MaxInFlight: ptr(5),
		})
	}
	names := make([]string, 0, listed)
	for i := range listed {
		names = append(names, name(i*n/max(listed, 1)))
	}
	f.DisruptionBudgets = append(f.DisruptionBudgets,
		proto.DisruptionBudget{Selector: proto.Selector{All: true}, MaxInFlightPct: ptr(10)},
		proto.DisruptionBudget{Selector: proto.Selector{Tags: []string{"role-db"}}, MaxInFlight: ptr(2), MaxInFlightPct: ptr(10)},
		proto.DisruptionBudget{Selector: proto.Selector{Channel: ptr("edge")}, MaxInFlightPct: ptr(25)},
		proto.DisruptionBudget{Selector: proto.Selector{Hosts: names}, MaxInFlight: ptr(3)},
	)
	return f
}

// TestSyntheticFleet checks that the benchmark fleet is valid and projects
// correctly, so the benchmarks measure the real path.
func TestSyntheticFleet(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ n, listed int }{{100, 1}, {1000, 10}, {1000, 1000}} {
		n := tt.n
		f := syntheticFleetListing(n, tt.listed)
		warns, err := manifest.ValidateFleet(f)
		if err != nil {
			t.Fatalf("n=%d: ValidateFleet: %v", n, err)
		}
		for _, w := range warns {
			if !strings.Contains(w, "has no closureHash") {
				t.Errorf("n=%d: unexpected warning %q", n, w)
			}
		}
		if len(warns) == 0 {
			t.Errorf("n=%d: expected warnings about hosts without a closure", n)
		}
		ms := project(t, f)
		checkProjection(t, fmt.Sprintf("n=%d", n), f, ms)
		total := 0
		for _, m := range ms {
			total += len(m.HostSet)
			if len(m.DisruptionBudgets) != 24 {
				t.Errorf("n=%d %s: %d budgets, want 24", n, m.Channel, len(m.DisruptionBudgets))
			}
		}
		if total != n-len(warns) {
			t.Errorf("n=%d: %d hosts in manifests, want %d (all with a closure)", n, total, n-len(warns))
		}
		if len(f.Edges) == 0 {
			t.Errorf("n=%d: no edges", n)
		}
	}
}

// benchFleets are the fleets the benchmarks run on: the synthetic fleet at
// two sizes (a budget names 1 % of the hosts explicitly), and at 10,000
// hosts with a budget that names every host, which shows the cost of
// explicit host lists in selectors.
var benchFleets = []struct {
	name          string
	hosts, listed int
}{
	{"hosts=1000", 1000, 10},
	{"hosts=10000", 10000, 100},
	{"hosts=10000/listed=10000", 10000, 10000},
}

// Reproduce with: go test ./manifest -run '^$' -bench . -benchtime 3x
func BenchmarkProject(b *testing.B) {
	for _, bf := range benchFleets {
		b.Run(bf.name, func(b *testing.B) {
			f := syntheticFleetListing(bf.hosts, bf.listed)
			const hash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
			b.ReportAllocs()
			var size int
			for b.Loop() {
				ms, err := manifest.Project(f, hash)
				if err != nil {
					b.Fatal(err)
				}
				size = 0
				for _, m := range ms {
					out, err := manifest.Marshal(m)
					if err != nil {
						b.Fatal(err)
					}
					size += len(out)
				}
			}
			b.ReportMetric(float64(size), "manifest-bytes")
		})
	}
}

func BenchmarkValidateFleet(b *testing.B) {
	for _, bf := range benchFleets {
		b.Run(bf.name, func(b *testing.B) {
			f := syntheticFleetListing(bf.hosts, bf.listed)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := manifest.ValidateFleet(f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
