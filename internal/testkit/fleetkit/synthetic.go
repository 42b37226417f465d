package fleetkit

import (
	"fmt"

	"github.com/nixfleet/nixfleet/proto"
)

// SyntheticChannels are the channels of a Synthetic fleet, in order; host
// i is on SyntheticChannels[i%3].
var SyntheticChannels = []string{"edge", "stable", "lts"}

// Synthetic returns a valid, unsigned fleet of n hosts spread over three
// channels, each with a canary, a 10% and a rest wave, a host-edge chain per
// rack, a channel-edge chain and three disruption budgets. Host names sort
// in numeric order ("host-00001", …). Meta carries ciCommit but no
// signedAt.
func Synthetic(n int) *proto.FleetResolved {
	f := &proto.FleetResolved{
		SchemaVersion:   proto.SchemaVersion,
		Hosts:           make(map[string]proto.Host, n),
		Channels:        map[string]proto.Channel{},
		RolloutPolicies: map[string]proto.RolloutPolicy{},
		Waves:           map[string][]proto.Wave{},
		Edges:           []proto.Edge{},
		ChannelEdges: []proto.ChannelEdge{
			{Gates: "edge", Gated: "stable", Reason: "edge first"},
			{Gates: "stable", Gated: "lts", Reason: "lts last"},
		},
	}
	one, three, twenty, maxFail := 1, 3, 20, 2
	f.RolloutPolicies["staged"] = proto.RolloutPolicy{
		Strategy: "staged",
		Waves: []proto.PolicyWave{
			{Selector: proto.Selector{Tags: []string{"canary"}}, SoakMinutes: 10},
			{Selector: proto.Selector{TagsAny: []string{"wave1"}}, SoakMinutes: 10},
			{Selector: proto.Selector{All: true}, SoakMinutes: 0},
		},
		HealthGate:      proto.HealthGate{SystemdFailedUnits: &proto.SystemdFailedUnits{Max: 0}, MaxFailures: &maxFail},
		OnHealthFailure: proto.OnHealthFailureRollbackAndHalt,
	}
	waves := map[string][3][]string{}
	for _, ch := range SyntheticChannels {
		f.Channels[ch] = proto.Channel{RolloutPolicy: "staged", FreshnessWindow: 1440, SigningIntervalMinutes: 60,
			ReconcileIntervalMinutes: 5, Compliance: proto.Compliance{Frameworks: []string{"nis2"}, Mode: proto.CompliancePermissive}}
	}
	prevInRack := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("host-%05d", i)
		ch := SyntheticChannels[i%len(SyntheticChannels)]
		rack := fmt.Sprintf("rack-%03d", i/40)
		tags := []string{rack, "role-" + []string{"web", "db", "cache", "batch"}[i%4]}
		w := 2
		switch {
		case i < 3*len(SyntheticChannels):
			tags, w = append(tags, "canary"), 0
		case i%10 == 0:
			tags, w = append(tags, "wave1"), 1
		}
		closure := fmt.Sprintf("%032d-nixos-system-%s-24.11", i, name)
		for j := range 32 {
			closure = closure[:j] + string("0123456789abcdfghijklmnpqrsvwxyz"[(i+j*7)%32]) + closure[j+1:]
		}
		key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIErcRFfSOKgAXPymcx6pk1zCVMOuNHVBadh+EDfRaxn2"
		f.Hosts[name] = proto.Host{System: "x86_64-linux", Tags: tags, Channel: ch, ClosureHash: &closure, Pubkey: &key}
		ws := waves[ch]
		ws[w] = append(ws[w], name)
		waves[ch] = ws
		if w == 2 && i%5 == 0 {
			k := ch + rack
			if prev, ok := prevInRack[k]; ok {
				f.Edges = append(f.Edges, proto.Edge{Gates: prev, Gated: name, Reason: "rack order"})
			}
			prevInRack[k] = name
		}
	}
	for _, ch := range SyntheticChannels {
		ws := waves[ch]
		f.Waves[ch] = []proto.Wave{{Hosts: ws[0], SoakMinutes: 10}, {Hosts: ws[1], SoakMinutes: 10}, {Hosts: ws[2], SoakMinutes: 0}}
	}
	f.DisruptionBudgets = []proto.DisruptionBudget{
		{Selector: proto.Selector{Tags: []string{"role-db"}}, MaxInFlight: &three},
		{Selector: proto.Selector{All: true}, MaxInFlightPct: &twenty},
		{Selector: proto.Selector{TagsAny: []string{"rack-000", "rack-001"}}, MaxInFlight: &one, MaxInFlightPct: &twenty},
	}
	commit := "0123456789abcdef0123456789abcdef01234567"
	v := proto.SchemaVersion
	f.Meta = proto.Meta{SchemaVersion: &v, CICommit: &commit}
	return f
}
