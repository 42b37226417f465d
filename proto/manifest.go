package proto

import "strings"

// RolloutManifest is releases/rollouts/<rolloutId>.json: the signed,
// per-channel projection of one fleet.resolved that a rollout executes and
// that every agent verifies before it activates anything.
//
// Wire rules beyond the package's: HostSet is sorted by hostname and every
// budget's Hosts list is sorted (JCS sorts member names, not arrays, so the
// producer's order is the canonical order); ChannelRef equals
// Meta.CICommit; the rollout's identifier is "<Channel>@<ChannelRef>".
//
// Fields are declared in JCS member order, so that encoding/json writes
// canonical bytes and manifest.Marshal rarely needs to re-serialise.
type RolloutManifest struct {
	// Channel is the channel this rollout moves.
	Channel string `json:"channel"`
	// ChannelRef is the release's CI commit.
	ChannelRef string `json:"channelRef"`
	// ComplianceFrameworks mirrors the channel's compliance frameworks.
	ComplianceFrameworks []string `json:"complianceFrameworks"`
	// DisruptionBudgets are the fleet's budgets, resolved against the
	// fleet's hosts at projection time and frozen for the rollout's life.
	DisruptionBudgets []RolloutBudget `json:"disruptionBudgets"`
	// FleetResolvedHash is the lowercase hex SHA-256 of the JCS bytes of the
	// fleet.resolved this manifest was projected from.
	FleetResolvedHash string `json:"fleetResolvedHash"`
	// FreshnessWindow is the channel's window, in minutes.
	FreshnessWindow int `json:"freshnessWindow"`
	// HealthGate is the channel policy's health gate.
	HealthGate HealthGate `json:"healthGate"`
	// HostSet lists the channel's hosts that have a closure, by hostname.
	HostSet []HostWave `json:"hostSet"`
	// Meta is copied from the fleet.resolved.
	Meta Meta `json:"meta"`
	// SchemaVersion must be 1.
	SchemaVersion int `json:"schemaVersion"`
}

// HostWave places one host in a rollout.
type HostWave struct {
	Hostname string `json:"hostname"`
	// TargetClosure is the store path basename the host must run.
	TargetClosure string `json:"targetClosure"`
	// WaveIndex is the index, in the channel's wave list, of the first wave
	// that lists the host.
	WaveIndex int `json:"waveIndex"`
}

// RolloutBudget is a disruption budget frozen into a manifest. Budgets of
// concurrent rollouts are the same budget when their selectors are Equal.
type RolloutBudget struct {
	// Hosts are the fleet's hosts matching Selector, sorted.
	Hosts          []string `json:"hosts"`
	MaxInFlight    *int     `json:"maxInFlight,omitempty"`
	MaxInFlightPct *int     `json:"maxInFlightPct,omitempty"`
	// Name is the fleet budget's name; absent when it has none.
	Name     string   `json:"name,omitempty"`
	Selector Selector `json:"selector"`
}

// Label is what people call the budget: its name, or else its selector's
// short form.
func (b RolloutBudget) Label() string { return BudgetLabel(b.Name, b.Selector) }

// RolloutID returns "<channel>@<channelRef>", the identifier of the
// rollout this manifest describes, computed from its fields.
func (m *RolloutManifest) RolloutID() string { return RolloutID(m.Channel, m.ChannelRef) }

// RolloutID formats a rollout identifier.
func RolloutID(channel, ref string) string { return channel + "@" + ref }

// ShortRefDigits is how many of a ref's digits a short rollout id keeps.
const ShortRefDigits = 7

// ShortRolloutID is a rollout id as people type it: the channel and the
// ref's first ShortRefDigits digits, as git abbreviates a commit
// (stable@1111111). The CLI takes it back as the one rollout of the
// channel whose ref begins so (rfcs/0009 §Human output 5). An id that is
// not channel@ref stays as it is.
func ShortRolloutID(id string) string {
	ch, ref, ok := strings.Cut(id, "@")
	if !ok || len(ref) <= ShortRefDigits {
		return id
	}
	return ch + "@" + ref[:ShortRefDigits]
}
