package proto

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/internal/jsonscan"
)

// SchemaVersion is the only schemaVersion this package decodes.
const SchemaVersion = 1

// FleetResolved is fleet.resolved.json: the whole desired state of a fleet
// as CI evaluated it. CI fills every host's closureHash and stamps meta, then
// signs the canonical bytes (`nixfleet release sign`).
type FleetResolved struct {
	// SchemaVersion must be 1.
	SchemaVersion int `json:"schemaVersion"`
	// Hosts by hostname.
	Hosts map[string]Host `json:"hosts"`
	// Channels by name. A channel is one release train, one git ref.
	Channels map[string]Channel `json:"channels"`
	// RolloutPolicies by name; channels refer to them.
	RolloutPolicies map[string]RolloutPolicy `json:"rolloutPolicies"`
	// Waves per channel, pre-resolved from the channel's policy selectors.
	// A wave list may name hosts of other channels (selectors are resolved
	// fleet-wide); projection keeps only the channel's own hosts.
	Waves map[string][]Wave `json:"waves"`
	// Edges order hosts inside one rollout: Gated waits for Gates.
	Edges []Edge `json:"edges"`
	// ChannelEdges order rollouts across channels.
	ChannelEdges []ChannelEdge `json:"channelEdges"`
	// DisruptionBudgets cap in-flight hosts fleet-wide.
	DisruptionBudgets []DisruptionBudget `json:"disruptionBudgets"`
	// Freezes are periods in which nothing new rolls out (rfcs/0001
	// §2.2): no rollout opens and no host is dispatched on the channels
	// they name. An addition of ours.
	Freezes []Freeze `json:"freezes,omitempty"`
	// Meta is stamped at signing time.
	Meta Meta `json:"meta"`
}

// Host is one machine of the fleet.
type Host struct {
	// System is the Nix system double, e.g. "x86_64-linux".
	System string `json:"system"`
	// Tags select the host in selectors.
	Tags []string `json:"tags"`
	// Channel is the release train the host follows.
	Channel string `json:"channel"`
	// ClosureHash is the basename of the host's system closure in the Nix
	// store ("<32 base32 chars>-<name>"). Null until CI builds the host;
	// hosts without one are not part of any rollout.
	ClosureHash *string `json:"closureHash"`
	// Pubkey is the host's SSH ed25519 host key, "ssh-ed25519 AAAA…";
	// null when the host is not enrolled yet.
	Pubkey *string `json:"pubkey"`
	// Pin is an operator commit pin, informational here; absent when none.
	Pin *Pin `json:"pin,omitempty"`
	// BootLoader is the host's boot loader as its NixOS configuration
	// enables it: "systemd-boot", "grub", or "none" (a container, or a
	// loader the agent cannot boot once into an entry). Absent: not
	// declared; the agent refuses a reboot order when its loader is not
	// supported (rfcs/0008 §Reboots). An addition of ours.
	BootLoader string `json:"bootLoader,omitempty"`
}

// Boot loaders a host may declare; the first two are the ones the agent
// can boot once into an entry (BootLoaders).
const (
	BootLoaderSystemdBoot = "systemd-boot"
	BootLoaderGrub        = "grub"
	BootLoaderNone        = "none"
)

// BootLoaders are the loaders a reboot policy supports.
var BootLoaders = []string{BootLoaderSystemdBoot, BootLoaderGrub}

// Pin records that a host's closure was built from a pinned commit.
type Pin struct {
	Commit    string  `json:"commit"`
	Reason    string  `json:"reason"`
	ExpiresAt *string `json:"expiresAt,omitempty"`
}

// Channel is one release train.
type Channel struct {
	// RolloutPolicy names an entry of FleetResolved.RolloutPolicies.
	RolloutPolicy string `json:"rolloutPolicy"`
	// FreshnessWindow is in MINUTES (the name lacks the suffix for wire
	// compatibility). Required; must be at least twice
	// SigningIntervalMinutes.
	FreshnessWindow int `json:"freshnessWindow"`
	// SigningIntervalMinutes is how often CI re-signs the fleet.
	SigningIntervalMinutes int `json:"signingIntervalMinutes"`
	// ReconcileIntervalMinutes is informational for the control plane.
	ReconcileIntervalMinutes int `json:"reconcileIntervalMinutes"`
	// Compliance configures the compliance gates of this channel.
	Compliance Compliance `json:"compliance"`
}

// Compliance modes.
const (
	ComplianceDisabled   = "disabled"
	CompliancePermissive = "permissive"
	ComplianceEnforce    = "enforce"
)

// Compliance configures compliance gating for a channel.
type Compliance struct {
	Frameworks []string `json:"frameworks"`
	// Mode is "disabled", "permissive" or "enforce"; empty means enforce.
	Mode string `json:"mode"`
}

// What a rollout does when a host fails its health gate.
const (
	OnHealthFailureHalt            = "halt"
	OnHealthFailureRollbackAndHalt = "rollback-and-halt"
)

// RolloutPolicy says how a channel rolls out.
type RolloutPolicy struct {
	// Strategy is descriptive ("canary", "staged", "all-at-once").
	Strategy string `json:"strategy"`
	// Waves are the policy's selector-based waves; Waves of FleetResolved
	// holds their resolution per channel.
	Waves []PolicyWave `json:"waves"`
	// HealthGate is what a host must satisfy to count as healthy.
	HealthGate HealthGate `json:"healthGate"`
	// OnHealthFailure is "halt" or "rollback-and-halt".
	OnHealthFailure string `json:"onHealthFailure"`
	// Windows are the maintenance windows of the channel's hosts: a host
	// is dispatched only inside one (rfcs/0001 §2.2). A wave's
	// own windows, and a host selector's, take precedence. Absent: any
	// time. An addition of ours.
	Windows []Window `json:"windows,omitempty"`
	// HostWindows give the hosts a selector matches their own windows;
	// the first entry that matches a host is its. An addition of ours.
	HostWindows []HostWindows `json:"hostWindows,omitempty"`
	// Reboot says whether the control plane reboots hosts whose target is
	// staged for the next boot, and how (rfcs/0003 rule 17). Absent: it
	// never does; such hosts stay Deferred until someone reboots them. An
	// addition of ours.
	Reboot *Reboot `json:"reboot,omitempty"`
}

// Reboot is a rollout policy's reboot step.
type Reboot struct {
	// Allowed lets the control plane order reboots, under the same gates
	// as a dispatch. A wave's own Reboot takes precedence.
	Allowed bool `json:"allowed"`
	// BootTimeoutMinutes is how long a host may take from the reboot
	// order until it checks in on the new boot (1 to 1440): past it the
	// boot failed.
	BootTimeoutMinutes int `json:"bootTimeoutMinutes"`
	// Kexec asks the agent to load the new kernel with kexec rather than
	// through the firmware where the host supports it.
	Kexec bool `json:"kexec,omitempty"`
}

// RebootAllowed reports whether wave i of a policy may be rebooted: the
// wave's own setting, else the policy's.
func (p *RolloutPolicy) RebootAllowed(i int) bool {
	if i >= 0 && i < len(p.Waves) && p.Waves[i].Reboot != nil {
		return *p.Waves[i].Reboot && p.Reboot != nil
	}
	return p.Reboot != nil && p.Reboot.Allowed
}

// Window is a weekly maintenance window: it opens on each of Days at
// Start, local time in TimeZone, and lasts DurationMinutes.
type Window struct {
	// Days are "mon", "tue", "wed", "thu", "fri", "sat", "sun".
	Days []string `json:"days"`
	// Start is "HH:MM", 24-hour, in TimeZone.
	Start string `json:"start"`
	// DurationMinutes is from 1 to 10080 (a week).
	DurationMinutes int `json:"durationMinutes"`
	// TimeZone is an IANA time zone name ("Europe/Berlin", "UTC"). The
	// binaries embed the time zone database, so hosts and control plane
	// agree without the operating system's.
	TimeZone string `json:"timeZone"`
}

// HostWindows are the windows of the hosts Selector matches.
type HostWindows struct {
	Selector Selector `json:"selector"`
	Windows  []Window `json:"windows"`
}

// Freeze is an absolute period in which nothing new rolls out on the
// channels it names (every channel when Channels is empty).
type Freeze struct {
	From  time.Time `json:"from"`
	Until time.Time `json:"until"`
	// Reason says why, for people (explain shows it).
	Reason   string   `json:"reason"`
	Channels []string `json:"channels,omitempty"`
}

// PolicyWave is one wave of a rollout policy, before resolution.
type PolicyWave struct {
	// Name is an optional label for people, e.g. "canary" (an addition of
	// ours, 0001): events and `rollout show` say "wave 0 (canary)".
	Name        string   `json:"name,omitempty"`
	Selector    Selector `json:"selector"`
	SoakMinutes int      `json:"soakMinutes"`
	// Windows are the wave's hosts' maintenance windows (see
	// RolloutPolicy.Windows). An addition of ours.
	Windows []Window `json:"windows,omitempty"`
	// Approval, when required, holds the wave until approvers approve it
	// (rfcs/0001 §2.2). An addition of ours.
	Approval *Approval `json:"approval,omitempty"`
	// Reboot, when set, overrides the policy's Reboot.Allowed for this
	// wave; true needs the policy's Reboot. An addition of ours.
	Reboot *bool `json:"reboot,omitempty"`
}

// Approval is a wave's approval gate: Approvers distinct approvers (at
// least 1; 0 means 1) must approve each rollout's wave before it starts.
type Approval struct {
	Required  bool `json:"required"`
	Approvers int  `json:"approvers,omitempty"`
}

// Need is how many distinct approvals the gate needs: 0 when it is not
// required.
func (a *Approval) Need() int {
	if a == nil || !a.Required {
		return 0
	}
	return max(a.Approvers, 1)
}

// HealthGate bounds what counts as a healthy host. Absent members impose
// no bound.
type HealthGate struct {
	// Analysis are queries against the fleet's Prometheus that judge each
	// wave by its services while it soaks (rfcs/0001 §2.3): a wave is
	// promoted only when every one succeeded. An addition of ours.
	Analysis         []Analysis        `json:"analysis,omitempty"`
	ComplianceProbes *ComplianceProbes `json:"complianceProbes,omitempty"`
	// MaxFailures is how many hosts may fail before OnHealthFailure acts.
	MaxFailures *int `json:"maxFailures,omitempty"`
	// MinConverged and MinConvergedPct are the evidence a wave needs
	// before the next one starts: at least MinConverged of its hosts, and
	// at least MinConvergedPct percent of them (rounded up), converged on
	// the target, capped at the wave's size. Unset, a wave needs one
	// converged host (rfcs/0003 rule 8). Additions of ours (0001).
	MinConverged       *int                `json:"minConverged,omitempty"`
	MinConvergedPct    *int                `json:"minConvergedPct,omitempty"`
	SystemdFailedUnits *SystemdFailedUnits `json:"systemdFailedUnits,omitempty"`
}

// Analysis is one canary analysis of a health gate: the control plane
// evaluates Query against its Prometheus every Interval, Count times,
// from the moment a wave's first host runs the release, and judges each
// result by SuccessCondition and FailureCondition (rfcs/0001 §2.3,
// rfcs/0003 rule 16). Fields in JCS order.
type Analysis struct {
	// Compare, when set, makes each measurement compare the wave's hosts
	// that run the release (the canary) with hosts of the rollout that do
	// not yet (the baseline) instead of judging the canary by the
	// conditions; a wave with no baseline left is judged by the
	// conditions (rfcs/0001 §2.3).
	Compare *Comparison `json:"compare,omitempty"`
	// Count is how many measurements make a successful run (1 to
	// MaxAnalysisCount).
	Count int `json:"count"`
	// FailureCondition, when set, fails a measurement whose result meets
	// it; a result that meets neither condition is then inconclusive.
	// Without it, a result that does not meet SuccessCondition fails.
	FailureCondition string `json:"failureCondition,omitempty"`
	// FailureLimit is how many failed measurements a run tolerates: one
	// more fails it.
	FailureLimit int `json:"failureLimit"`
	// InconclusiveLimit is how many inconclusive measurements (no data,
	// a query error, Prometheus down) a run tolerates: one more makes it
	// inconclusive, which halts the rollout for an operator.
	InconclusiveLimit int `json:"inconclusiveLimit"`
	// Interval is the time between measurements: whole seconds, minutes
	// or hours ("30s", "5m", "1h"), at most a day.
	Interval string `json:"interval"`
	// Name labels the analysis in events and explanations; unique in its
	// health gate.
	Name string `json:"name"`
	// Query is PromQL with placeholders ({{ .HostsRegex }}, {{ .RolloutID }},
	// {{ .Channel }}, {{ .Wave }}) the control plane fills in for the wave.
	Query string `json:"query"`
	// Source names the Prometheus source of the control plane the query
	// is sent to (a [[prometheus.source]] of its config file, rfcs/0006
	// §Canary analysis); empty: its default one (--prometheus-url). How to
	// reach it and its credentials live on the control plane, never here.
	// ValidSourceName holds its syntax; "default" is reserved.
	Source string `json:"source,omitempty"`
	// SuccessCondition is "result <op> <number>": every sample of the
	// result must meet it.
	SuccessCondition string `json:"successCondition"`
}

// Comparison is how an analysis compares a canary with its baseline
// (rfcs/0001 §2.3, rfcs/0003 rule 16): a measurement evaluates the query
// over Window, every Step, once for each group ({{ .HostsRegex }} standing
// for the group's hosts), and a one-sided Mann–Whitney U test on the two
// groups' values judges it. The canary fails a measurement when the test
// finds it worse at Confidence and its median is worse than the
// baseline's by at least Effect; it is inconclusive when a group has
// fewer than MinSamples values. Numbers are decimal strings, as in the
// conditions, so that the signed document and Nix write them one way.
// Fields in JCS order.
type Comparison struct {
	// BaselineTags, when given, draw the baseline only from hosts that
	// carry every one of these tags (like compared with like: "web" with
	// "web"); at most MaxBaselineTags, none empty. Absent: any host of the
	// rollout's later waves.
	BaselineTags []string `json:"baselineTags,omitempty"`
	// Confidence is the test's confidence level, from 0.5 to 0.999
	// ("0.95": a canary no worse than its baseline fails about one
	// measurement in twenty at most).
	Confidence string `json:"confidence"`
	// Effect is the smallest difference of the groups' medians, in the
	// query's units and in Worse's direction, that fails the canary: at
	// least 0 ("0.01"; "0": any difference the test finds).
	Effect string `json:"effect"`
	// MinSamples is the fewest values each group needs for a verdict
	// (MinComparisonSamples to MaxComparisonSamples).
	MinSamples int `json:"minSamples"`
	// Step is the time between two values of a series, Window how far
	// back a measurement reaches: whole seconds, minutes or hours as
	// Interval writes them, Step at most Window, and Window at most
	// MaxComparisonPoints steps and a day.
	Step   string `json:"step"`
	Window string `json:"window"`
	// Worse is the direction of a worse value: "higher" (error ratios,
	// latencies) or "lower" (success ratios, throughput).
	Worse string `json:"worse"`
}

// Comparison bounds.
const (
	MaxBaselineTags      = 8
	MinComparisonSamples = 3
	MaxComparisonSamples = 10000
	MaxComparisonPoints  = 1000
)

// Comparison directions.
const (
	WorseHigher = "higher"
	WorseLower  = "lower"
)

// MaxAnalysisCount bounds an analysis's measurements.
const MaxAnalysisCount = 1000

// MaxSourceNameLen bounds the name of a Prometheus source.
const MaxSourceNameLen = 63

// DefaultSource is the name no Prometheus source may take: an analysis
// without a Source is measured on the control plane's default one.
const DefaultSource = "default"

// ValidSourceName reports whether s can name a Prometheus source (an
// Analysis's Source, a control plane's [[prometheus.source]]): 1 to
// MaxSourceNameLen of a-z, 0-9, '_' and '-', starting with a letter or a
// digit, and not DefaultSource.
func ValidSourceName(s string) bool {
	if len(s) == 0 || len(s) > MaxSourceNameLen || s == DefaultSource {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// MetricSample is one series of a query's result: its labels, rendered
// as PromQL writes them ({instance="web-01"}, empty for a scalar), and
// its value as Prometheus wrote it ("0.25", "NaN", "+Inf").
type MetricSample struct {
	Metric string `json:"metric,omitempty"`
	Value  string `json:"value"`
}

// SystemdFailedUnits caps the number of failed systemd units.
type SystemdFailedUnits struct {
	Max int `json:"max"`
}

// ComplianceProbes says whether runtime compliance probes must pass.
type ComplianceProbes struct {
	Required bool `json:"required"`
}

// Wave is one resolved wave of a channel: hosts and how long the wave must
// stay healthy before the next one starts.
type Wave struct {
	Hosts []string `json:"hosts"`
	// Name is the policy wave's name, when it has one (an addition of
	// ours, 0001).
	Name        string `json:"name,omitempty"`
	SoakMinutes int    `json:"soakMinutes"`
	// Windows and Approval are copied from the policy wave (additions of
	// ours).
	Windows  []Window  `json:"windows,omitempty"`
	Approval *Approval `json:"approval,omitempty"`
	// Reboot is copied from the policy wave (an addition of ours).
	Reboot *bool `json:"reboot,omitempty"`
}

// Edge orders two hosts of the same channel inside a rollout: Gated is not
// dispatched until Gates has converged.
type Edge struct {
	Gates  string `json:"gates"`
	Gated  string `json:"gated"`
	Reason string `json:"reason,omitempty"`
}

// ChannelEdge orders channels: a rollout on Gated does not open while
// Gates has a rollout that is not terminal. The legacy member names
// "before" (= gates) and "after" (= gated) are accepted on input and folded
// into Gates and Gated by the decoder; giving both spellings of one end is
// an error.
type ChannelEdge struct {
	Gates  string `json:"gates"`
	Gated  string `json:"gated"`
	Reason string `json:"reason,omitempty"`

	// Before and After are the legacy spellings, empty after decoding.
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
}

func (e *ChannelEdge) foldLegacy(i int) error {
	if e.Before != "" {
		if e.Gates != "" {
			return fmt.Errorf("channelEdges[%d] sets both \"gates\" and its legacy alias \"before\"", i)
		}
		e.Gates, e.Before = e.Before, ""
	}
	if e.After != "" {
		if e.Gated != "" {
			return fmt.Errorf("channelEdges[%d] sets both \"gated\" and its legacy alias \"after\"", i)
		}
		e.Gated, e.After = e.After, ""
	}
	return nil
}

// afterDecode folds legacy spellings; the decoders call it.
func (f *FleetResolved) afterDecode() error {
	for i := range f.ChannelEdges {
		if err := f.ChannelEdges[i].foldLegacy(i); err != nil {
			return err
		}
	}
	return nil
}

// DisruptionBudget caps how many hosts matching Selector may be in flight
// (Activating or Soaking) at once, across all rollouts. Both limits apply
// when both are set.
type DisruptionBudget struct {
	// Name is an optional label for people, unique in the fleet (an
	// addition of ours, 0001). Without one, a budget is called by its
	// selector's short form (Selector.Short).
	Name     string   `json:"name,omitempty"`
	Selector Selector `json:"selector"`
	// MaxInFlight is an absolute cap; nil when absent.
	MaxInFlight *int `json:"maxInFlight,omitempty"`
	// MaxInFlightPct is a percentage of the budget's hosts, rounded down;
	// nil when absent.
	MaxInFlightPct *int `json:"maxInFlightPct,omitempty"`
}

// Selector picks hosts. Its non-empty rules OR together: a host matches when
// it has all of Tags, or any of TagsAny, or is named in Hosts, or is on
// Channel, or All is set. A selector with every rule empty matches nothing.
//
// The evaluation-time combinators "and" and "not" of the Nix library are not
// part of the wire format; they are decoded only so validation can refuse a
// document that carries them instead of silently ignoring them.
type Selector struct {
	All     bool            `json:"all,omitempty"`
	And     json.RawMessage `json:"and,omitempty"`
	Channel *string         `json:"channel,omitempty"`
	Hosts   []string        `json:"hosts,omitempty"`
	Not     json.RawMessage `json:"not,omitempty"`
	Tags    []string        `json:"tags,omitempty"`
	TagsAny []string        `json:"tagsAny,omitempty"`
}

// Matches reports whether the host named name matches the selector.
func (s Selector) Matches(name string, h Host) bool {
	if s.All {
		return true
	}
	if s.Channel != nil && *s.Channel != "" && h.Channel == *s.Channel {
		return true
	}
	if slices.Contains(s.Hosts, name) {
		return true
	}
	if len(s.Tags) > 0 {
		all := true
		for _, t := range s.Tags {
			if !slices.Contains(h.Tags, t) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	for _, t := range s.TagsAny {
		if slices.Contains(h.Tags, t) {
			return true
		}
	}
	return false
}

// UsesCombinators reports whether the selector carries an "and" or a
// "not". The Nix library emits "and": [] and "not": null by default; those
// mean nothing and are not combinators. Anything else is, including
// "not": {} (which would match every host).
func (s Selector) UsesCombinators() bool {
	return !rawIs(s.And, "null", "[]") || !rawIs(s.Not, "null")
}

// rawIs reports whether r is absent or, without whitespace, one of the
// given JSON texts. r comes from a document that passed the strict scan.
func rawIs(r json.RawMessage, values ...string) bool {
	if len(r) == 0 {
		return true
	}
	return slices.Contains(values, string(jsonscan.Compact(nil, r)))
}

// IsEmpty reports whether the selector has no rule at all (and so matches
// nothing).
func (s Selector) IsEmpty() bool {
	return !s.All && (s.Channel == nil || *s.Channel == "") &&
		len(s.Hosts) == 0 && len(s.Tags) == 0 && len(s.TagsAny) == 0
}

// Resolve returns the sorted names of the hosts matching the selector. It
// costs one pass over hosts whatever the length of the selector's lists.
func (s Selector) Resolve(hosts map[string]Host) []string {
	out := s.resolve(hosts)
	slices.Sort(out)
	return out
}

// Count returns how many hosts match the selector, without listing them.
func (s Selector) Count(hosts map[string]Host) int { return len(s.resolve(hosts)) }

func (s Selector) resolve(hosts map[string]Host) []string {
	out := []string{}
	if len(s.Hosts) > 0 {
		// Named hosts are looked up, not scanned for every host.
		named := s
		named.Hosts = nil
		seen := make(map[string]bool, len(s.Hosts))
		for _, n := range s.Hosts {
			if _, ok := hosts[n]; ok && !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
		for name, h := range hosts {
			if !seen[name] && named.Matches(name, h) {
				out = append(out, name)
			}
		}
	} else {
		for name, h := range hosts {
			if s.Matches(name, h) {
				out = append(out, name)
			}
		}
	}
	return out
}

// Normalized returns the selector with its lists sorted and de-duplicated
// and empty members cleared, so that two selectors that mean the same
// thing compare equal with Equal and encode to the same bytes.
func (s Selector) Normalized() Selector {
	norm := func(l []string) []string {
		if len(l) == 0 {
			return nil
		}
		l = slices.Clone(l)
		slices.Sort(l)
		return slices.Compact(l)
	}
	out := Selector{Tags: norm(s.Tags), TagsAny: norm(s.TagsAny), Hosts: norm(s.Hosts), All: s.All}
	if s.Channel != nil && *s.Channel != "" {
		ch := *s.Channel
		out.Channel = &ch
	}
	return out
}

// Equal reports whether two selectors mean the same thing. Budgets of
// different rollouts are matched by this equality.
func (s Selector) Equal(o Selector) bool {
	a, b := s.Normalized(), o.Normalized()
	return a.All == b.All && slices.Equal(a.Tags, b.Tags) && slices.Equal(a.TagsAny, b.TagsAny) &&
		slices.Equal(a.Hosts, b.Hosts) && ((a.Channel == nil) == (b.Channel == nil)) &&
		(a.Channel == nil || *a.Channel == *b.Channel)
}

// Short is a compact, stable form of the selector for people: its rules
// after Normalized, in the order all, channel, hosts, tags, tagsAny,
// joined by ";", as in "tags=web", "hosts=db-1,db-2" or
// "channel=prod;tagsAny=a,b". A list shows its first shortListItems
// members and then how many more ("hosts=a,b,c,+7"); the whole is cut at
// shortMaxLen bytes, ending in "…". An empty selector is "none".
func (s Selector) Short() string {
	n := s.Normalized()
	var rules []string
	if n.All {
		rules = append(rules, "all")
	}
	if n.Channel != nil {
		rules = append(rules, "channel="+*n.Channel)
	}
	for _, l := range []struct {
		key  string
		list []string
	}{{"hosts", n.Hosts}, {"tags", n.Tags}, {"tagsAny", n.TagsAny}} {
		if len(l.list) == 0 {
			continue
		}
		shown := l.list[:min(len(l.list), shortListItems)]
		r := l.key + "=" + strings.Join(shown, ",")
		if more := len(l.list) - len(shown); more > 0 {
			r += fmt.Sprintf(",+%d", more)
		}
		rules = append(rules, r)
	}
	if len(rules) == 0 {
		return "none"
	}
	out := strings.Join(rules, ";")
	if len(out) > shortMaxLen {
		cut := 0
		for i := range out { // rune starts: never cut a character in two
			if i > shortMaxLen {
				break
			}
			cut = i
		}
		out = out[:cut] + "…"
	}
	return out
}

// Bounds of Selector.Short.
const (
	shortListItems = 3
	shortMaxLen    = 48
)

// BudgetLabel is what people call a disruption budget: its name, or else
// its selector's short form.
func BudgetLabel(name string, s Selector) string {
	if name != "" {
		return name
	}
	return s.Short()
}

// Label is what people call the budget (BudgetLabel).
func (b DisruptionBudget) Label() string { return BudgetLabel(b.Name, b.Selector) }

// Signature algorithms.
const (
	AlgorithmEd25519   = "ed25519"
	AlgorithmECDSAP256 = "ecdsa-p256"
)

// Meta describes a signed artifact. CI stamps SignedAt, CICommit and
// SignatureAlgorithm at signing time; before that SignedAt and CICommit are
// null.
type Meta struct {
	// CICommit is the commit CI evaluated; it becomes the channelRef of
	// every rollout of this release.
	CICommit *string `json:"ciCommit"`
	// SchemaVersion must be 1 when present.
	SchemaVersion *int `json:"schemaVersion"`
	// SignatureAlgorithm is informational: verifiers take the algorithm
	// from the trusted key, never from the artifact. Absent means ed25519.
	SignatureAlgorithm string `json:"signatureAlgorithm,omitempty"`
	// SignedAt is an RFC 3339 timestamp; nil on unsigned documents.
	SignedAt *string `json:"signedAt"`
}
