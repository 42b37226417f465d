package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// Project derives one rollout manifest per channel, in channel-name order,
// from a validated fleet.resolved whose canonical bytes hash to
// fleetResolvedHash:
//
//  1. hostSet: the channel's hosts that have a closureHash, sorted by
//     hostname; waveIndex is the index of the first wave in the channel's
//     wave list that names the host (wave lists are filtered to the
//     channel's own hosts, without renumbering), or 0 for every host of a
//     channel rolled out all at once (see AllAtOnce);
//  2. healthGate from the channel's policy, complianceFrameworks and
//     freshnessWindow from the channel;
//  3. disruptionBudgets: every fleet budget with its name, its selector
//     normalized and resolved against all of the fleet's hosts, host lists
//     sorted, frozen;
//  4. channelRef = meta.ciCommit, meta copied, fleetResolvedHash set.
//
// The rollout id of each manifest is "<channel>@<meta.ciCommit>".
func Project(f *proto.FleetResolved, fleetResolvedHash string) ([]*proto.RolloutManifest, error) {
	if f.Meta.CICommit == nil || *f.Meta.CICommit == "" {
		return nil, errors.New("manifest: fleet has no meta.ciCommit, so rollouts have no channelRef")
	}
	budgets := make([]proto.RolloutBudget, 0, len(f.DisruptionBudgets))
	for _, b := range f.DisruptionBudgets {
		budgets = append(budgets, proto.RolloutBudget{
			Name:           b.Name,
			Selector:       b.Selector.Normalized(),
			Hosts:          b.Selector.Resolve(f.Hosts),
			MaxInFlight:    clonePtr(b.MaxInFlight),
			MaxInFlightPct: clonePtr(b.MaxInFlightPct),
		})
	}
	hosts := sortedKeys(f.Hosts)
	out := make([]*proto.RolloutManifest, 0, len(f.Channels))
	for _, name := range sortedKeys(f.Channels) {
		ch := f.Channels[name]
		policy, ok := f.RolloutPolicies[ch.RolloutPolicy]
		if !ok {
			return nil, fmt.Errorf("manifest: channel %q: rollout policy %q does not exist", name, ch.RolloutPolicy)
		}
		first := hostWaves(f, name)
		hostSet := []proto.HostWave{}
		for _, host := range hosts {
			h := f.Hosts[host]
			if h.Channel != name || h.ClosureHash == nil {
				continue
			}
			idx, ok := first[host]
			if !ok {
				return nil, fmt.Errorf("manifest: host %q: no wave of channel %q lists it", host, name)
			}
			hostSet = append(hostSet, proto.HostWave{Hostname: host, WaveIndex: idx, TargetClosure: *h.ClosureHash})
		}
		frameworks := slices.Clone(ch.Compliance.Frameworks)
		if frameworks == nil {
			frameworks = []string{}
		}
		out = append(out, &proto.RolloutManifest{
			SchemaVersion:        proto.SchemaVersion,
			Channel:              name,
			ChannelRef:           *f.Meta.CICommit,
			FleetResolvedHash:    fleetResolvedHash,
			HostSet:              hostSet,
			HealthGate:           cloneHealthGate(policy.HealthGate),
			ComplianceFrameworks: frameworks,
			FreshnessWindow:      ch.FreshnessWindow,
			DisruptionBudgets:    cloneBudgets(budgets),
			Meta: proto.Meta{
				SchemaVersion:      clonePtr(f.Meta.SchemaVersion),
				SignedAt:           clonePtr(f.Meta.SignedAt),
				CICommit:           clonePtr(f.Meta.CICommit),
				SignatureAlgorithm: f.Meta.SignatureAlgorithm,
			},
		})
	}
	return out, nil
}

// The manifests share nothing with the fleet or with each other, so a
// caller may change one without changing another.

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func cloneHealthGate(g proto.HealthGate) proto.HealthGate {
	return proto.HealthGate{
		SystemdFailedUnits: clonePtr(g.SystemdFailedUnits),
		ComplianceProbes:   clonePtr(g.ComplianceProbes),
		MaxFailures:        clonePtr(g.MaxFailures),
		MinConverged:       clonePtr(g.MinConverged),
		MinConvergedPct:    clonePtr(g.MinConvergedPct),
		Analysis:           slices.Clone(g.Analysis),
	}
}

func cloneBudgets(bs []proto.RolloutBudget) []proto.RolloutBudget {
	out := make([]proto.RolloutBudget, len(bs))
	for i, b := range bs {
		sel := b.Selector.Normalized()
		out[i] = proto.RolloutBudget{Name: b.Name, Selector: sel, Hosts: slices.Clone(b.Hosts),
			MaxInFlight: clonePtr(b.MaxInFlight), MaxInFlightPct: clonePtr(b.MaxInFlightPct)}
	}
	return out
}

// AllAtOnce reports whether a channel is rolled out all at once: its
// waves.<channel> is present and an empty list, as the reference Nix
// library writes for a policy with strategy "all-at-once" and no waves.
// Such a channel has one wave, index 0, holding every host of the
// channel. An absent or null waves.<channel> is not an empty list: the
// channel has no waves, and its hosts with a closure are an error
// (ValidateFleet).
func AllAtOnce(f *proto.FleetResolved, channel string) bool {
	ws, ok := f.Waves[channel]
	return ok && ws != nil && len(ws) == 0
}

// hostWaves maps the hosts a wave of channel places to its index: the
// first wave of waves.<channel> naming them (firstWaves), or 0 for every
// host of a channel rolled out all at once.
func hostWaves(f *proto.FleetResolved, channel string) map[string]int {
	if !AllAtOnce(f, channel) {
		return firstWaves(f.Waves[channel])
	}
	all := map[string]int{}
	for name, h := range f.Hosts {
		if h.Channel == channel {
			all[name] = 0
		}
	}
	return all
}

// firstWaves maps every host named in a channel's wave list to the index of
// the first wave naming it. Wave lists may name hosts of other channels;
// callers look up only the channel's own hosts, which filters them out.
func firstWaves(waves []proto.Wave) map[string]int {
	first := map[string]int{}
	for i, w := range waves {
		for _, h := range w.Hosts {
			if _, seen := first[h]; !seen {
				first[h] = i
			}
		}
	}
	return first
}

// Marshal returns the canonical (JCS) bytes of a manifest: the bytes that
// are signed and whose SHA-256 is the manifest's content hash. The proto
// types declare their fields in JCS order, so encoding/json usually writes
// canonical bytes already and Canonicalize only checks them.
func Marshal(m *proto.RolloutManifest) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return trust.Canonicalize(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}
