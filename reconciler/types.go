package reconciler

import (
	"time"

	"github.com/nixfleet/nixfleet/analysis"
	"github.com/nixfleet/nixfleet/proto"
)

// Input is everything one tick decides from. The control plane loads it
// from its store; `nixfleet reconcile --input` reads it from JSON. Slices
// may come in any order and maps are iterated in sorted order: the output
// does not depend on either.
type Input struct {
	// Description is free text for humans (golden cases); ignored.
	Description string `json:"description,omitempty"`
	// Now is the tick's time. The reconciler never reads a clock.
	Now time.Time `json:"now"`
	// Channels: the latest verified release of every channel.
	Channels []Channel `json:"channels"`
	// Rollouts: the live rollouts (Live), with their hosts; Reconcile
	// decides the same from them as from every rollout.
	Rollouts []Rollout `json:"rollouts"`
	// Hosts: what the agents last reported, by hostname.
	Hosts map[string]ObservedHost `json:"hosts"`
	// Intents: operator intents not yet consumed.
	Intents []Intent `json:"intents"`
	// Deferrals: the rollout_deferred records of the previous tick, so a
	// still-blocked channel is reported once, not every tick.
	Deferrals []Deferral `json:"deferrals"`
	// Tunables: zero fields take their defaults.
	Tunables Tunables `json:"tunables"`
	// WatchingSince is when the control plane's current unbroken watch
	// over its hosts began: since then it has been up, with its store,
	// recording what hosts report. Until it has watched for one offline
	// threshold, a host it has not heard from is not judged offline
	// (rfcs/0003 rule 6). Zero means it has always watched.
	WatchingSince time.Time `json:"watchingSince,omitzero"`
	// Visibility: the channels in partial visibility, or recovering from
	// it, after the previous tick, so that its beginning and end are
	// reported once.
	Visibility []Visibility `json:"visibility"`
	// Measurements: the analysis measurements the control plane took for
	// the current waves of running rollouts (rule 16), in any order. The
	// reconciler counts those a run has not counted yet.
	Measurements []Measurement `json:"measurements,omitempty"`
}

// Measurement is one evaluation of an analysis's query for one wave of a
// rollout, as the control plane took it (rule 16).
type Measurement struct {
	RolloutID string `json:"rolloutId"`
	Wave      int    `json:"wave"`
	Analysis  string `json:"analysis"`
	// Seq numbers a run's measurements from 1, as the tick asked for them
	// (Output.Measure).
	Seq int `json:"seq"`
	// At is when the query was evaluated.
	At time.Time `json:"at"`
	// Query is the query sent, placeholders filled in (cut at
	// MaxMeasuredQuery bytes).
	Query string `json:"query"`
	// Samples are the result's series; Error says why there is none (a
	// query error, Prometheus unreachable or not configured, or
	// SourceUnknownError).
	Samples []proto.MetricSample `json:"samples,omitempty"`
	Error   string               `json:"error,omitempty"`
	// Compared is what a measurement that compared a canary with its
	// baseline took (its request named a baseline, rule 16); nil for one
	// judged by the analysis's conditions.
	Compared *Compared `json:"compared,omitempty"`
}

// Compared are the values a comparison measurement took of each group:
// every finite value of its series over the comparison's window, at most
// proto.MaxComparisonSamples (evenly thinned beyond).
type Compared struct {
	Canary   []float64 `json:"canary"`
	Baseline []float64 `json:"baseline"`
}

// MaxMeasuredQuery bounds the query a measurement keeps and an event
// shows: a wave's host regex grows with the wave.
const MaxMeasuredQuery = 2048

// AnalysisRun is where one analysis of a wave stands (rule 16).
type AnalysisRun struct {
	Wave int    `json:"wave"`
	Name string `json:"name"`
	// Outcome is running, successful, failed or inconclusive.
	Outcome analysis.Outcome `json:"outcome"`
	// StartedAt is the tick that saw the wave's first host run the
	// release; EndedAt the tick that ended the run (zero while running).
	StartedAt time.Time `json:"startedAt"`
	EndedAt   time.Time `json:"endedAt,omitzero"`
	// Measured is the Seq of the last measurement counted; measurements
	// up to Forgiven were forgiven by a resume and count no more.
	Measured int `json:"measured"`
	Forgiven int `json:"forgiven,omitempty"`
	// Successful, Failed and Inconclusive count the measurements after
	// Forgiven.
	Successful   int `json:"successful"`
	Failed       int `json:"failed"`
	Inconclusive int `json:"inconclusive"`
	// LastAt is when the last measurement counted was taken (zero before
	// the first); Last says what it came to.
	LastAt time.Time `json:"lastAt,omitzero"`
	Last   Reason    `json:"last"`
}

// MeasureRequest asks the control plane for a measurement: the next one
// of a running analysis, due at At.
type MeasureRequest struct {
	RolloutID string    `json:"rolloutId"`
	Wave      int       `json:"wave"`
	Analysis  string    `json:"analysis"`
	Seq       int       `json:"seq"`
	At        time.Time `json:"at"`
	// Canary and Baseline are the groups a comparison (proto.Comparison)
	// measures, by name: the wave's hosts that run the release, and as
	// many of the rollout's hosts that do not yet (rule 16); at most
	// MaxComparisonHosts each. Baseline is empty when none is left: the
	// analysis's conditions judge the wave then. Both are empty for an
	// analysis that does not compare.
	Canary   []string `json:"canary,omitempty"`
	Baseline []string `json:"baseline,omitempty"`
}

// MaxComparisonHosts bounds each group of a comparison: a query returns a
// series a host, and the control plane takes at most 100 series.
const MaxComparisonHosts = 50

// MeasureKey names one measurement of a run.
type MeasureKey struct {
	RolloutID string
	Wave      int
	Analysis  string
	Seq       int
}

// Key is the measurement a request asks for: the same whatever groups
// later ticks name.
func (r MeasureRequest) Key() MeasureKey {
	return MeasureKey{RolloutID: r.RolloutID, Wave: r.Wave, Analysis: r.Analysis, Seq: r.Seq}
}

// Visibility records a channel in partial visibility: more of its hosts
// are late at once than the tunables allow, so silence there says more
// about what the control plane can see than about the hosts
// (rfcs/0003 rule 6); or one that left it less than an offline threshold
// ago (Ended set).
type Visibility struct {
	Channel string `json:"channel"`
	// Since is when the partial visibility began.
	Since time.Time `json:"since"`
	// Ended is when it ended; for one offline threshold after that the
	// channel still judges no silence (it recovers). Zero while it lasts.
	Ended time.Time `json:"ended,omitzero"`
	// Silent of Total hosts of the channel were late (not heard from
	// within Tunables.LateAfter) at the tick that wrote the record.
	Silent int `json:"silent"`
	Total  int `json:"total"`
}

// Channel is a channel's latest verified release.
type Channel struct {
	Name string `json:"name"`
	// Ref is the channel ref of the latest verified release (its
	// meta.ciCommit); empty when none has been verified.
	Ref string `json:"ref"`
	// Fleet and Manifest are the verified artifacts at Ref.
	Fleet    *proto.FleetResolved   `json:"fleet,omitempty"`
	Manifest *proto.RolloutManifest `json:"manifest,omitempty"`
	// ManifestHash is the manifest's content hash, recorded with the
	// rollout it opens.
	ManifestHash string `json:"manifestHash,omitempty"`
	// LastRolledRef is the ref of the last rollout opened on the channel.
	LastRolledRef string `json:"lastRolledRef,omitempty"`
}

// Tunables are the reconciler's time limits.
type Tunables struct {
	// OfflineThresholdSeconds: a host not seen for longer is offline.
	// Default 300.
	OfflineThresholdSeconds int `json:"offlineThresholdSeconds,omitempty"`
	// ConfirmWindowSeconds: how long an activated host has to confirm, and
	// a rolling-back host to be seen on its previous closure. Default 300.
	ConfirmWindowSeconds int `json:"confirmWindowSeconds,omitempty"`
	// ReadinessDeadlineSeconds: how long a wave may go without progress,
	// beyond its soak time, before the rollout halts. Default 3600.
	ReadinessDeadlineSeconds int `json:"readinessDeadlineSeconds,omitempty"`
	// PartialVisibilityPct: a channel is in partial visibility when more
	// than this percentage of its hosts is late at once (and at least
	// PartialVisibilityMinHosts are). Default 50; 100 turns it off.
	PartialVisibilityPct int `json:"partialVisibilityPct,omitempty"`
	// PartialVisibilityMinHosts is the floor: fewer late hosts than this
	// are judged one by one, so that a channel of one or two hosts still
	// skips a host that is away. Default 2.
	PartialVisibilityMinHosts int `json:"partialVisibilityMinHosts,omitempty"`
	// MaxHostMoves bounds the work of one tick: once it has changed this
	// many host records, it takes no further host through observation,
	// dispatch, a deferred boot or a rollback, and says so
	// (Output.More); the next tick, at once, goes on where it stopped.
	// Default 10,000 (DefaultMaxHostMoves); negative: no bound.
	MaxHostMoves int `json:"maxHostMoves,omitempty"`
}

// Defaults for Tunables.
const (
	DefaultOfflineThreshold          = 5 * time.Minute
	DefaultConfirmWindow             = 5 * time.Minute
	DefaultReadinessDeadline         = 60 * time.Minute
	DefaultPartialVisibilityPct      = 50
	DefaultPartialVisibilityMinHosts = 2
	// DefaultMaxHostMoves is about what a control plane on PostgreSQL
	// decides, journals and writes in about a second on two cores busy
	// with a fleet's check-ins (BENCHMARKS.md, control plane at 100,000
	// hosts: 20,000 took 3 s there while 81,000 hosts onboarded).
	DefaultMaxHostMoves = 10000
)

// OfflineThreshold is how long a host may be silent before it counts as
// offline: from then on its silence may be judged (rfcs/0003 rule 6).
func (t Tunables) OfflineThreshold() time.Duration { return t.offline() }

// LateAfter is how long a host may be silent before it is late: it counts
// toward its channel's silent share (partial visibility), though its
// silence is not judged before the offline threshold. Half the offline
// threshold, so that every host of a partition is late before the first
// of them is offline, as long as each checks in at least every
// CheckinPeriod (rfcs/0003 rule 6).
func (t Tunables) LateAfter() time.Duration { return t.offline() / 2 }

// CheckinPeriod is the longest a control plane holds an agent's long-poll
// (and so, with the agent's pause and a round trip, about how often a
// connected agent is heard): a quarter of the offline threshold, and at
// most MaxCheckinPeriod. It leaves a quarter of the threshold for the
// agent's pause and the round trip before a connected host would look
// late.
func (t Tunables) CheckinPeriod() time.Duration { return min(t.offline()/4, MaxCheckinPeriod) }

// MaxCheckinPeriod bounds CheckinPeriod: an agent asks for a long-poll of
// at most a minute.
const MaxCheckinPeriod = time.Minute

// ConfirmWindow is how long an activated host has to confirm.
func (t Tunables) ConfirmWindow() time.Duration { return t.confirm() }

// ConfirmGrace is how long after its confirm window closed a host that
// still runs its target is taken to have confirmed when no confirm is on
// record (rfcs/0003 rule 7): the confirm window, at most a minute. An
// agent without an accepted confirm rolls back when the window closes by
// its own clock, which may lag the control plane's, and its rollback
// takes a while.
func (t Tunables) ConfirmGrace() time.Duration { return min(t.confirm(), time.Minute) }

func (t Tunables) visibilityPct() int {
	if t.PartialVisibilityPct <= 0 {
		return DefaultPartialVisibilityPct
	}
	return min(t.PartialVisibilityPct, 100)
}

func (t Tunables) visibilityFloor() int {
	if t.PartialVisibilityMinHosts <= 0 {
		return DefaultPartialVisibilityMinHosts
	}
	return t.PartialVisibilityMinHosts
}

func (t Tunables) offline() time.Duration {
	return secondsOr(t.OfflineThresholdSeconds, DefaultOfflineThreshold)
}
func (t Tunables) confirm() time.Duration {
	return secondsOr(t.ConfirmWindowSeconds, DefaultConfirmWindow)
}
func (t Tunables) readiness() time.Duration {
	return secondsOr(t.ReadinessDeadlineSeconds, DefaultReadinessDeadline)
}

// maxHostMoves is MaxHostMoves with its default; 0 means no bound.
func (t Tunables) maxHostMoves() int {
	switch {
	case t.MaxHostMoves < 0:
		return 0
	case t.MaxHostMoves == 0:
		return DefaultMaxHostMoves
	}
	return t.MaxHostMoves
}

func secondsOr(s int, d time.Duration) time.Duration {
	if s <= 0 {
		return d
	}
	return time.Duration(s) * time.Second
}

// WavePhase says where the current wave is.
type WavePhase string

// Wave phases.
const (
	// PhaseDispatching: some host of the wave is still Pending.
	PhaseDispatching WavePhase = "dispatching"
	// PhaseSoaking: every host of the wave was dispatched or set aside;
	// waiting for the soak to finish.
	PhaseSoaking WavePhase = "soaking"
)

// Rollout is one channel moving to one release. Everything a rollout needs
// from the release is frozen into it when it opens.
type Rollout struct {
	// ID is "<channel>@<ref>".
	ID      string       `json:"id"`
	Channel string       `json:"channel"`
	Ref     string       `json:"ref"`
	State   RolloutState `json:"state"`
	// Wave is the current wave index; WavePhase its phase.
	Wave      int       `json:"wave"`
	WavePhase WavePhase `json:"wavePhase"`
	// OpenedAt, WaveStartedAt: when the rollout opened and its current
	// wave became active. UpdatedAt: the last change of state.
	OpenedAt      time.Time `json:"openedAt"`
	WaveStartedAt time.Time `json:"waveStartedAt"`
	UpdatedAt     time.Time `json:"updatedAt"`
	// ProgressAt is the last time any host of the rollout changed state or
	// a wave was promoted; the readiness deadline runs from it.
	ProgressAt time.Time `json:"progressAt"`
	// Reason explains the current state.
	Reason Reason `json:"reason"`
	// ManifestHash is the content hash of the manifest the rollout adopted.
	ManifestHash string `json:"manifestHash"`
	// FailuresForgiven is the number of failed hosts a resume forgave:
	// onHealthFailure counts failures beyond it.
	FailuresForgiven int `json:"failuresForgiven"`

	// Frozen at open.
	Waves           []WaveSpec            `json:"waves"`
	HealthGate      proto.HealthGate      `json:"healthGate"`
	OnHealthFailure string                `json:"onHealthFailure"`
	ComplianceMode  string                `json:"complianceMode"`
	Frameworks      []string              `json:"complianceFrameworks"`
	Edges           []Edge                `json:"edges"`
	Budgets         []proto.RolloutBudget `json:"budgets"`
	// Windows, HostWindows: the maintenance windows frozen at open
	// (rfcs/0003 rule 13): the channel's, and those of host selectors,
	// resolved to the rollout's hosts. A wave's own are in Waves.
	Windows     []proto.Window   `json:"windows,omitempty"`
	HostWindows []HostWindowSpec `json:"hostWindows,omitempty"`
	// Approvals are the approvals the rollout's waves received (rule 15),
	// in the order they were accepted; FreezeBreak, when set, is the
	// approver's break of its channel's freezes (rule 14). Both only grow.
	Approvals   []Approval   `json:"approvals,omitempty"`
	FreezeBreak *FreezeBreak `json:"freezeBreak,omitempty"`
	// Analyses are the analysis runs of its waves (rule 16), in the order
	// they started; they change as measurements come in.
	Analyses []AnalysisRun `json:"analyses,omitempty"`
	// Reboot is the policy's reboot step (rule 17), frozen at open; nil
	// when the control plane reboots nothing. Which waves it applies to
	// is WaveSpec.Reboot.
	Reboot *proto.Reboot `json:"reboot,omitempty"`

	// Hosts of the rollout, sorted by hostname.
	Hosts []RolloutHost `json:"hosts"`
}

// WaveSoak is how long a host of the rollout's wave soaks (rule 8): the
// wave's soakMinutes, zero for a wave the rollout does not have. A
// soaking host's soak ends at its Since plus this.
func (r *Rollout) WaveSoak(wave int) time.Duration {
	if wave < 0 || wave >= len(r.Waves) {
		return 0
	}
	return time.Duration(r.Waves[wave].SoakMinutes) * time.Minute
}

// WaveSpec is one wave of a rollout.
type WaveSpec struct {
	// Name is the policy's name for the wave; empty when it has none.
	Name        string `json:"name,omitempty"`
	SoakMinutes int    `json:"soakMinutes"`
	// Windows are the wave's maintenance windows (rule 13).
	Windows []proto.Window `json:"windows,omitempty"`
	// Approval, when required, is how many distinct approvers must
	// approve the wave before its hosts are dispatched (rule 15).
	Approval *proto.Approval `json:"approval,omitempty"`
	// Reboot: the control plane orders the reboots the wave's staged
	// hosts need (rule 17), under Rollout.Reboot.
	Reboot bool `json:"reboot,omitempty"`
}

// RebootSpec is what a wave's hosts are told about reboots.
type RebootSpec struct {
	// Managed: the control plane orders the reboot a staged target needs,
	// so the agent stages it without making it the default entry.
	Managed bool
	// Timeout is how long a host may take from the reboot order until it
	// checks in on the new boot.
	Timeout time.Duration
	// Kexec asks for a kexec where the host supports it.
	Kexec bool
}

// BootBy is when a host told to reboot at since must be back on its
// target: since plus the timeout, or the confirm window when a spec has
// none (a policy that changed under a host).
func (s RebootSpec) BootBy(since time.Time, tu Tunables) time.Time {
	if s.Timeout > 0 {
		return since.Add(s.Timeout)
	}
	return since.Add(tu.confirm())
}

// RebootOf is the reboot step of a wave: zero when the control plane
// orders no reboot there.
func (r *Rollout) RebootOf(wave int) RebootSpec {
	if r.Reboot == nil || wave < 0 || wave >= len(r.Waves) || !r.Waves[wave].Reboot {
		return RebootSpec{}
	}
	return RebootSpec{Managed: true, Timeout: time.Duration(r.Reboot.BootTimeoutMinutes) * time.Minute, Kexec: r.Reboot.Kexec}
}

// Edge orders two hosts of a rollout: Gated waits until Gates converged.
type Edge struct {
	Gates string `json:"gates"`
	Gated string `json:"gated"`
}

// RolloutHost is a host's place and state in a rollout.
type RolloutHost struct {
	Hostname string    `json:"hostname"`
	Wave     int       `json:"wave"`
	Target   string    `json:"target"`
	State    HostState `json:"state"`
	// Since is when the host entered State.
	Since time.Time `json:"since"`
	// Previous is the closure the host ran when it was dispatched: the
	// rollback target.
	Previous string `json:"previous,omitempty"`
	// Reason explains the current state.
	Reason Reason `json:"reason"`
	// Blocked is why a Pending or Skipped host was not dispatched in the
	// last tick (the first gate that held it); empty when it was not held.
	Blocked Reason `json:"blocked"`
	// Budgets are the indexes, in the rollout's Budgets, of the budgets
	// whose frozen host lists include this host (computed at open).
	Budgets []int `json:"budgets,omitempty"`
}

// ObservedHost is what a host's agent last reported, and when.
type ObservedHost struct {
	// LastSeen is the last check-in; zero when never seen.
	LastSeen time.Time `json:"lastSeen"`
	// StatusAt is the last check-in known to have carried the status held
	// here (Current, Booted, Probes, FailedUnits, Compliance, Deferred,
	// Quarantine): verdicts on the host's status rest on it, never on a
	// later check-in whose status the store may have lost (rfcs/0003
	// rule 8). Zero: LastSeen (the status is the last check-in's).
	StatusAt time.Time `json:"statusAt,omitzero"`
	// Current and Booted are the store path basenames of
	// /run/current-system and /run/booted-system.
	Current string `json:"current"`
	Booted  string `json:"booted"`
	// Probes is the health-probe summary of the last check-in.
	Probes ProbeSummary `json:"probes"`
	// FailedUnits are the failed systemd units.
	FailedUnits []string `json:"failedUnits"`
	// Compliance are the latest compliance control results.
	Compliance []ComplianceResult `json:"compliance"`
	// Deferred is set while the host has a target staged for next boot.
	Deferred bool `json:"deferred"`
	// Activation is the latest activation outcome the agent reported.
	Activation *Activation `json:"activation,omitempty"`
	// Quarantine lists closures that failed on this host and must not be
	// dispatched to it again before Until.
	Quarantine []Quarantine `json:"quarantine"`
	// Prefetched is the closure the agent holds realised for an
	// activation to come ("" when none). Informational: no decision of
	// the reconciler depends on it (explanations mention it).
	Prefetched string `json:"prefetched,omitempty"`
	// AlwaysHeard: a forecast's model hears the host all the time (an
	// agent in its long-poll), so no time to come makes it late or
	// silent, and a tick need not wake for that (Forecast). Never
	// encoded; the control plane never sets it: it hears hosts as they
	// check in.
	AlwaysHeard bool `json:"-"`
}

// Said is when the host last said the status held here: StatusAt, or
// LastSeen when that is zero.
func (o ObservedHost) Said() time.Time {
	if o.StatusAt.IsZero() {
		return o.LastSeen
	}
	return o.StatusAt
}

// ProbeSummary counts health probes (the wire type).
type ProbeSummary = proto.ProbeSummary

// Compliance control types.
const (
	ControlStatic  = "static"
	ControlRuntime = "runtime"
	ControlBoth    = "both"
)

// ComplianceResult is one compliance control's result for a closure (the
// wire type).
type ComplianceResult = proto.ComplianceResult

// Activation outcomes an agent reports (proto.ReportOutcome).
const (
	OutcomeStarted          = proto.OutcomeStarted
	OutcomeConfirmed        = proto.OutcomeConfirmed
	OutcomeFailed           = proto.OutcomeFailed
	OutcomeDeferred         = proto.OutcomeDeferred
	OutcomeBootFailed       = proto.OutcomeBootFailed
	OutcomeRolledBack       = proto.OutcomeRolledBack
	OutcomeManifestRejected = proto.OutcomeManifestRejected
)

// Activation is an agent's latest report about activating a closure.
type Activation struct {
	RolloutID string    `json:"rolloutId"`
	Closure   string    `json:"closure"`
	Outcome   string    `json:"outcome"`
	At        time.Time `json:"at"`
	// Code is the agent's stable code for why (for rolled_back: what
	// made it roll back, e.g. confirm_timeout).
	Code   string `json:"code,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Quarantine holds a closure back from a host (the wire type).
type Quarantine = proto.Quarantine

// Intent kinds.
const (
	IntentPause    = "pause"
	IntentResume   = "resume"
	IntentCancel   = "cancel"
	IntentRollback = "rollback"
	// IntentApprove approves one wave of one rollout (rule 15); it names
	// the wave.
	IntentApprove = "approve"
	// IntentBreakFreeze lets one rollout open and dispatch through the
	// freezes of its channel (rule 14).
	IntentBreakFreeze = "break-freeze"
)

// ForApprovers reports whether an intent kind is an approver's: approving
// a wave and breaking a freeze pass a gate of change control, and must be
// signed with the approver's key (rfcs/0007 §Signed intents).
func ForApprovers(kind string) bool { return kind == IntentApprove || kind == IntentBreakFreeze }

// Intent is an operator's request about a rollout.
type Intent struct {
	ID        string    `json:"id"`
	RolloutID string    `json:"rolloutId"`
	Kind      string    `json:"kind"`
	Actor     string    `json:"actor"`
	At        time.Time `json:"at"`
	// Comment is the operator's words with the intent (bounded by the
	// API); the verdict's reason carries it. Empty when none.
	Comment string `json:"comment,omitempty"`
	// Wave is the wave an approve intent approves; nil for the others.
	Wave *int `json:"wave,omitempty"`
}

// Deferral records that a channel's new ref could not open a rollout
// because of a blocker (a channel edge predecessor).
type Deferral struct {
	Channel   string `json:"channel"`
	Ref       string `json:"ref"`
	BlockedBy string `json:"blockedBy"`
}

// Approval is one approver's approval of one wave (the wire type).
type Approval = proto.WaveApproval

// FreezeBreak records who let a rollout through its channel's freezes
// (the wire type).
type FreezeBreak = proto.FreezeBreak

// HostWindowSpec gives Hosts (sorted) their own maintenance windows.
type HostWindowSpec struct {
	Hosts   []string       `json:"hosts"`
	Windows []proto.Window `json:"windows"`
}

// Reason is the structured explanation every decision carries.
type Reason struct {
	// Code is stable and machine-readable: a constant of package codes.
	Code string `json:"code,omitempty"`
	// Message is for people.
	Message string `json:"message,omitempty"`
	// Gate names the gate that held a host, for blocking reasons (a gate
	// constant of package codes).
	Gate string `json:"gate,omitempty"`
	// Actor is the operator behind an intent.
	Actor string `json:"actor,omitempty"`
}

// Output is what one tick decided, in a deterministic order.
type Output struct {
	// Rollouts: rollouts created or changed, as their complete new
	// records without hosts (New ones carry their hosts).
	Rollouts []RolloutUpdate `json:"rollouts"`
	// Hosts: host records that changed, complete.
	Hosts []HostUpdate `json:"hosts"`
	// Actions: the host moves the tick decided, dispatches and
	// rollbacks, in the order decided (the actions). They are
	// also in Hosts: agents learn them from their host records at
	// check-in (AgentAnswer), so the control plane only counts these;
	// a simulator that drives Reconcile directly acts on them.
	Actions []HostAction `json:"actions"`
	// Events: the journal entries of the tick.
	Events []Event `json:"events"`
	// IntentResults: one per consumed operator intent.
	IntentResults []IntentResult `json:"intentResults"`
	// Deferrals: the complete set of current deferrals, for the next tick.
	Deferrals []Deferral `json:"deferrals"`
	// Channels: channels whose last rolled ref changed.
	Channels []ChannelUpdate `json:"channels"`
	// Visibility: the complete current set of channels in partial
	// visibility, for the next tick.
	Visibility []Visibility `json:"visibility"`
	// Measure: the analysis measurements due, the complete set (rule
	// 16). The control plane takes each at or after its time and records
	// it for the next tick; nothing about it is stored.
	Measure []MeasureRequest `json:"measure,omitempty"`
	// QuietUntil says how long the input, applied with this output and
	// left unchanged, decides nothing (rfcs/0003 §Quiet ticks): a tick
	// that decided nothing gives the first time after now at which time
	// alone may change a decision (a confirm window closing, a soak or a
	// window ending, a host falling silent, …), zero when none will; a
	// tick that decided something gives its own now, as the next one must
	// look again. A caller may skip the ticks before it while nothing it
	// passes in changes.
	QuietUntil time.Time `json:"quietUntil,omitzero"`
	// WakeAt is the earliest time after now at which time alone may
	// change a decision on the state this tick leaves (conservative: it
	// may come early, never late); zero when none will. It equals
	// QuietUntil for a tick that decided nothing; a caller ticks then.
	WakeAt time.Time `json:"wakeAt,omitzero"`
	// More: the tick stopped at its bound (Tunables.MaxHostMoves) with
	// hosts left to observe, dispatch or roll back. The caller ticks again
	// at once; ticks at the same time, each applied, end where one tick
	// without the bound would have ended. A tick with More is not a
	// fixpoint; the last of the sequence is.
	More bool `json:"more,omitempty"`
}

// ChannelUpdate records the ref a channel last opened a rollout for.
type ChannelUpdate struct {
	Name          string `json:"name"`
	LastRolledRef string `json:"lastRolledRef"`
}

// RolloutUpdate is a created or changed rollout.
type RolloutUpdate struct {
	// New is set when the rollout was opened in this tick.
	New bool `json:"new,omitempty"`
	// From is the state before the tick ("" when new).
	From    RolloutState `json:"from,omitempty"`
	Rollout Rollout      `json:"rollout"`
}

// HostUpdate is a changed host record.
type HostUpdate struct {
	RolloutID string `json:"rolloutId"`
	// From is the state before the tick; equal to Host.State when only
	// Blocked changed.
	From HostState   `json:"from"`
	Host RolloutHost `json:"host"`
}

// Host action kinds. An operator's IntentRollback asks for a rollout to
// be rolled back; ActionRollback is one host sent back to its previous
// closure as a result.
const (
	ActionDispatch = "dispatch"
	ActionRollback = "rollback"
	// ActionReboot: boot once into Target, staged on the host already
	// (rule 17).
	ActionReboot = "reboot"
)

// HostAction is one host move a tick decided: what its agent must run.
type HostAction struct {
	Host      string `json:"host"`
	RolloutID string `json:"rolloutId"`
	// Kind is "dispatch" (switch to Target), "rollback" (return to
	// Target, the host's previous closure) or "reboot" (boot once into
	// Target, staged).
	Kind   string `json:"kind"`
	Target string `json:"target"`
	Wave   int    `json:"wave"`
	Reason Reason `json:"reason"`
}

// IntentResult says what became of an operator intent.
type IntentResult struct {
	IntentID string `json:"intentId"`
	Accepted bool   `json:"accepted"`
	Reason   Reason `json:"reason"`
}

// Event kinds.
const (
	EventRolloutOpened     = "rollout_opened"
	EventRolloutTransition = "rollout_transition"
	EventRolloutDeferred   = "rollout_deferred"
	EventWavePromoted      = "wave_promoted"
	EventHostTransition    = "host_transition"
	EventHostWaiting       = "host_waiting"
	EventIntentAccepted    = "intent_accepted"
	EventIntentRefused     = "intent_refused"
	EventComplianceWarning = "compliance_warning"
	EventRefWaiting        = "ref_waiting"
	// A channel's partial visibility began or ended (rule 6).
	EventPartialVisibility  = "partial_visibility"
	EventVisibilityRestored = "visibility_restored"
	// EventWatchStarted: the control plane's watch over its hosts began
	// again (rule 6). The control plane's store writes it, not Reconcile.
	EventWatchStarted = "watch_started"
	// EventRefSuperseded: a newer ref of a channel replaced one that had
	// not opened a rollout yet (rule 1: queue depth one, latest wins), so
	// it never will. The control plane's store writes it when it stores
	// the newer release, not Reconcile: a ref replaced between two ticks
	// never reaches the reconciler.
	EventRefSuperseded = "ref_superseded"
	// EventApprovalNeeded: a wave that needs approvals became the
	// rollout's current wave without them (rule 15); once per wave.
	EventApprovalNeeded = "approval_needed"
	// EventAnalysisMeasured: the reconciler counted one measurement of an
	// analysis of the current wave, with its value and query (rule 16).
	EventAnalysisMeasured = "analysis_measured"
	// EventAnalysisCompleted: an analysis run of a wave ended successful,
	// failed or inconclusive (rule 16).
	EventAnalysisCompleted = "analysis_completed"
)

// Event is one journal entry: what happened, to what, and why.
type Event struct {
	Kind      string `json:"kind"`
	RolloutID string `json:"rolloutId,omitempty"`
	Channel   string `json:"channel,omitempty"`
	// Wave is the wave concerned, -1 when none.
	Wave int    `json:"wave"`
	Host string `json:"host,omitempty"`
	// From and To are the states of a transition.
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
	Reason Reason `json:"reason"`
	// Budgets is the occupancy of the disruption budgets the decision
	// touched (rfcs/0003 rule 5): on a dispatch, and on a deferred host
	// taken back into flight, every limiting budget the host now counts
	// against, after it took its slot; on a host held by the budget gate,
	// the full budget. Absent on other events.
	Budgets []BudgetUse `json:"budgets,omitempty"`
}

// BudgetUse is a disruption budget's occupancy (the wire type).
type BudgetUse = proto.BudgetUse
