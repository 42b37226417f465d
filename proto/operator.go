package proto

import (
	"fmt"
	"time"
)

// The operator API's bodies (rfcs/0007 §Operator endpoints): what
// GET /v1/status, /v1/rollouts, /v1/rollouts/{id}, the event endpoints,
// /v1/hosts and /v1/hosts/{name} answer, and the answer to an intent.
// The control plane writes these types and apiclient reads them, so the
// operator CLI needs neither the control plane nor its store.
//
// The records a rollout, a host or an event carry mirror the reconciler's
// (reconciler.Rollout, RolloutHost, ObservedHost, Activation, Intent,
// IntentResult, Visibility, Event, Reason): member for member the same
// JSON, with states as their names (rfcs/0004, rfcs/0005). The control
// plane converts them, and its tests check that the conversion leaves out
// nothing the reconciler's records hold.

// DecisionReason is the structured explanation every decision of the
// reconciler carries: of a rollout's or host's state, of the gate holding
// a host, of an event, of an intent's verdict.
type DecisionReason struct {
	// Code is stable and machine-readable (rfcs/0003).
	Code string `json:"code,omitempty"`
	// Message is for people.
	Message string `json:"message,omitempty"`
	// Gate names the gate that held a host, for blocking reasons.
	Gate string `json:"gate,omitempty"`
	// Actor is the operator behind an intent.
	Actor string `json:"actor,omitempty"`
}

// Rollout is a rollout (rfcs/0005): one channel moving to one release. In
// GET /v1/rollouts it is a summary: no hosts ("hosts": null), no edges
// ("edges": null), no host windows, each budget without its host list
// ("hosts": null), with Counts and WaveCounts. GET /v1/rollouts/{id} has
// the whole frozen plan, a page of its hosts (HostsNext continues it),
// and Counts, WaveCounts and Waiting over all of them; GET /v1/status
// Counts, WaveCounts and Waiting, without hosts.
type Rollout struct {
	// ID is "<channel>@<ref>".
	ID      string `json:"id"`
	Channel string `json:"channel"`
	Ref     string `json:"ref"`
	// State is a rollout state of rfcs/0005 (Opening, Active, …).
	State string `json:"state"`
	// Wave is the current wave's index; WavePhase is "dispatching" or
	// "soaking".
	Wave      int    `json:"wave"`
	WavePhase string `json:"wavePhase"`
	// OpenedAt, WaveStartedAt: when the rollout opened and its current
	// wave became active. UpdatedAt: its last change of state.
	OpenedAt      time.Time `json:"openedAt"`
	WaveStartedAt time.Time `json:"waveStartedAt"`
	UpdatedAt     time.Time `json:"updatedAt"`
	// ProgressAt is the last time a host of the rollout changed state or
	// a wave was promoted; the readiness deadline runs from it.
	ProgressAt time.Time `json:"progressAt"`
	// Reason explains the current state.
	Reason DecisionReason `json:"reason"`
	// ManifestHash is the content hash of the manifest the rollout adopted.
	ManifestHash string `json:"manifestHash"`
	// FailuresForgiven is the number of failed hosts a resume forgave.
	FailuresForgiven int `json:"failuresForgiven"`

	// Frozen when the rollout opened.
	Waves           []RolloutWave   `json:"waves"`
	HealthGate      HealthGate      `json:"healthGate"`
	OnHealthFailure string          `json:"onHealthFailure"`
	ComplianceMode  string          `json:"complianceMode"`
	Frameworks      []string        `json:"complianceFrameworks"`
	Edges           []Edge          `json:"edges"`
	Budgets         []RolloutBudget `json:"budgets"`

	// Windows are the channel's maintenance windows the rollout froze, and
	// HostWindows those of host selectors, resolved to its hosts (rfcs/0001
	// §2.2); a wave's own are in Waves.
	Windows     []Window             `json:"windows,omitempty"`
	HostWindows []RolloutHostWindows `json:"hostWindows,omitempty"`
	// Approvals are the approvals its waves received, and FreezeBreak the
	// break of its channel's freezes, when an approver made one.
	Approvals   []WaveApproval `json:"approvals,omitempty"`
	FreezeBreak *FreezeBreak   `json:"freezeBreak,omitempty"`
	// Analyses are the canary analysis runs of its waves (rfcs/0003 rule
	// 16), in the order they started.
	Analyses []AnalysisRun `json:"analyses,omitempty"`
	// Reboot is the policy's reboot step the rollout froze (rfcs/0003
	// rule 17); absent when it orders no reboot. Waves[i].reboot says
	// which waves it applies to.
	Reboot *Reboot `json:"reboot,omitempty"`
	// Hosts of the rollout, by hostname: a page of them in GET
	// /v1/rollouts/{id}; null where a rollout is listed without them.
	Hosts []RolloutHost `json:"hosts"`
	// HostsNext is the hostsAfter of the next page of Hosts; absent when
	// none follows.
	HostsNext string `json:"hostsNext,omitempty"`
	// Counts are the rollout's hosts by state; absent when empty.
	Counts map[string]int `json:"counts,omitempty"`
	// WaveCounts are the rollout's hosts by state, wave by wave (by
	// index, one map per wave); absent when it has no waves.
	WaveCounts []map[string]int `json:"waveCounts,omitempty"`
	// Waiting counts the hosts that wait for a gate the fleet clears by
	// itself, by gate; absent when empty (never for a rollout that
	// dispatches no more).
	Waiting map[string]int `json:"waiting,omitempty"`
	// Next is the operator's next step for a rollout that waits for one
	// (a halted rollout: resume or roll back).
	Next string `json:"next,omitempty"`
	// SoakUntil is when the current wave's last soaking host converges,
	// if it stays healthy; absent when nothing soaks.
	SoakUntil *time.Time `json:"soakUntil,omitempty"`
}

// AnalysisRun is where one canary analysis of a wave stands (rfcs/0003
// rule 16).
type AnalysisRun struct {
	Wave int    `json:"wave"`
	Name string `json:"name"`
	// Outcome is running, successful, failed or inconclusive.
	Outcome   string    `json:"outcome"`
	StartedAt time.Time `json:"startedAt"`
	EndedAt   time.Time `json:"endedAt,omitzero"`
	// Measured is the number of the last measurement counted; those up
	// to Forgiven were forgiven by a resume.
	Measured int `json:"measured"`
	Forgiven int `json:"forgiven,omitempty"`
	// Successful, Failed and Inconclusive count the measurements after
	// Forgiven.
	Successful   int `json:"successful"`
	Failed       int `json:"failed"`
	Inconclusive int `json:"inconclusive"`
	// LastAt is when the last measurement counted was taken; Last what it
	// came to (its code and the value against the conditions).
	LastAt time.Time      `json:"lastAt,omitzero"`
	Last   DecisionReason `json:"last"`
}

// RolloutHostWindows gives Hosts their own maintenance windows.
type RolloutHostWindows struct {
	Hosts   []string `json:"hosts"`
	Windows []Window `json:"windows"`
}

// WaveApproval is one approver's approval of one wave of a rollout.
type WaveApproval struct {
	Wave   int       `json:"wave"`
	Actor  string    `json:"actor"`
	At     time.Time `json:"at"`
	Intent string    `json:"intent"`
}

// FreezeBreak is who let a rollout through its channel's freezes.
type FreezeBreak struct {
	Actor   string    `json:"actor"`
	At      time.Time `json:"at"`
	Intent  string    `json:"intent"`
	Comment string    `json:"comment"`
}

// RolloutWave is one wave of a rollout. (The rollout's Edges are the
// fleet's host edges without their reasons.)
type RolloutWave struct {
	// Name is the policy's name for the wave; absent when it has none.
	Name        string `json:"name,omitempty"`
	SoakMinutes int    `json:"soakMinutes"`
	// Windows are the wave's maintenance windows (rfcs/0001 §2.2), when
	// it has its own; Approval its approval gate, when it has one.
	Windows  []Window  `json:"windows,omitempty"`
	Approval *Approval `json:"approval,omitempty"`
	// Reboot: the control plane orders the reboots the wave's staged
	// hosts need (rfcs/0003 rule 17).
	Reboot bool `json:"reboot,omitempty"`
}

// RolloutHost is a host's place and state in a rollout.
type RolloutHost struct {
	Hostname string `json:"hostname"`
	Wave     int    `json:"wave"`
	Target   string `json:"target"`
	// State is a host state of rfcs/0004 (Pending, Activating, …).
	State string `json:"state"`
	// Since is when the host entered State.
	Since time.Time `json:"since"`
	// Previous is the closure the host ran when it was dispatched: the
	// rollback target.
	Previous string `json:"previous,omitempty"`
	// Reason explains the current state.
	Reason DecisionReason `json:"reason"`
	// Blocked is why a Pending or Skipped host was not dispatched in the
	// last tick (the first gate that held it); empty when it was not held.
	Blocked DecisionReason `json:"blocked"`
	// Budgets are the indexes, in the rollout's Budgets, of the budgets
	// that include this host.
	Budgets []int `json:"budgets,omitempty"`
	// Situation is the host's situation now (GET /v1/rollouts/{id}).
	Situation *Situation `json:"situation,omitempty"`
}

// Situation is a host's situation in an operator's terms (rfcs/0012
// §Hosts): what holds it or where it is, whether that changes without
// anyone, what an operator can do, and when it is expected to end.
type Situation struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Moves is set when the situation changes without an operator.
	Moves bool `json:"moves"`
	// Next is the operator's next step, when one helps.
	Next string `json:"next,omitempty"`
	// Until is when the situation is expected to end (a soak, a confirm
	// window).
	Until *time.Time `json:"until,omitempty"`
}

// ObservedHost is what a host's agent last reported, and when.
type ObservedHost struct {
	// LastSeen is the last check-in; zero when never seen.
	LastSeen time.Time `json:"lastSeen"`
	// StatusAt is the last check-in known to have carried the status
	// shown (rfcs/0003 rule 8); absent: LastSeen.
	StatusAt time.Time `json:"statusAt,omitzero"`
	// Current and Booted are the store path basenames of
	// /run/current-system and /run/booted-system.
	Current     string             `json:"current"`
	Booted      string             `json:"booted"`
	Probes      ProbeSummary       `json:"probes"`
	FailedUnits []string           `json:"failedUnits"`
	Compliance  []ComplianceResult `json:"compliance"`
	// Deferred is set while the host has a target staged for next boot.
	Deferred bool `json:"deferred"`
	// Activation is the latest activation outcome the agent reported.
	Activation *Activation  `json:"activation,omitempty"`
	Quarantine []Quarantine `json:"quarantine"`
	// Prefetched is the closure the agent holds realised for an
	// activation to come, ahead of its dispatch; absent when none.
	Prefetched string `json:"prefetched,omitempty"`
}

// Activation is an agent's latest report about activating a closure.
type Activation struct {
	RolloutID string `json:"rolloutId"`
	Closure   string `json:"closure"`
	// Outcome is started, confirmed, failed, deferred, rolled_back or
	// manifest_rejected.
	Outcome string    `json:"outcome"`
	At      time.Time `json:"at"`
	// Code is the agent's stable code for why.
	Code   string `json:"code,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Intent is an operator's request about a rollout, as the control plane
// recorded it.
type Intent struct {
	ID        string `json:"id"`
	RolloutID string `json:"rolloutId"`
	// Kind is pause, resume, cancel or rollback.
	Kind  string    `json:"kind"`
	Actor string    `json:"actor"`
	At    time.Time `json:"at"`
	// Comment is the operator's words with the intent; absent when none.
	Comment string `json:"comment,omitempty"`
	// Wave is the wave an approve intent approves.
	Wave *int `json:"wave,omitempty"`
}

// IntentResult is what the tick that consumed an intent decided.
type IntentResult struct {
	IntentID string         `json:"intentId"`
	Accepted bool           `json:"accepted"`
	Reason   DecisionReason `json:"reason"`
}

// IntentResponse answers POST /v1/rollouts/{id}/{action}.
type IntentResponse struct {
	Intent Intent `json:"intent"`
	// Result is null while no tick has consumed the intent (HTTP 202).
	Result *IntentResult `json:"result"`
}

// Visibility is a channel in partial visibility (rfcs/0003 rule 6), or
// recovering from it (Ended set).
type Visibility struct {
	Channel string    `json:"channel"`
	Since   time.Time `json:"since"`
	Ended   time.Time `json:"ended,omitzero"`
	// Silent of Total hosts of the channel were not heard from within the
	// offline threshold.
	Silent int `json:"silent"`
	Total  int `json:"total"`
}

// Event is a journal entry (GET /v1/events, GET /v1/rollouts/{id}/events).
type Event struct {
	// ID increases with every event written; use it to page and follow.
	ID int64     `json:"id"`
	At time.Time `json:"at"`
	// Kind is one of rfcs/0003's event kinds, release_rejected,
	// watch_started or forecast (rfcs/0014).
	Kind      string `json:"kind"`
	RolloutID string `json:"rolloutId,omitempty"`
	Channel   string `json:"channel,omitempty"`
	// Wave is the wave concerned, -1 when none.
	Wave int    `json:"wave"`
	Host string `json:"host,omitempty"`
	// From and To are the states of a transition.
	From   string         `json:"from,omitempty"`
	To     string         `json:"to,omitempty"`
	Reason DecisionReason `json:"reason"`
	// Budgets is the occupancy of the disruption budgets the decision
	// touched: after a dispatch, every budget the host now counts against;
	// for a host held by the budget gate, the full budget. Absent
	// otherwise.
	Budgets []BudgetUse `json:"budgets,omitempty"`
}

// BudgetUse is a disruption budget's occupancy when a decision was made:
// Name is its label (its name, or its selector's short form), InFlight
// the hosts in flight against it and Limit how many it allows. String
// gives the compact form "web 3/3".
type BudgetUse struct {
	Name     string `json:"name"`
	InFlight int    `json:"inFlight"`
	Limit    int    `json:"limit"`
}

// String is "<name> <inFlight>/<limit>".
func (u BudgetUse) String() string { return fmt.Sprintf("%s %d/%d", u.Name, u.InFlight, u.Limit) }

// EventQuery selects events: the query parameters rollout, channel, host,
// after and limit of the event endpoints. Zero fields do not filter.
// Results are in id order, at most Limit (the server's default 1,000 when
// zero, at most 10,000).
type EventQuery struct {
	RolloutID string
	Host      string
	Channel   string
	// AfterID: only events after this id.
	AfterID int64
	Limit   int
	// Newest selects the newest Limit events instead of the oldest (still
	// returned in id order): a journal's tail.
	Newest bool
}

// EventList answers the event endpoints without follow.
type EventList struct {
	Events []Event `json:"events"`
}

// RolloutQuery selects a page of GET /v1/rollouts: its query parameters
// channel, state, before and limit. Zero fields do not filter.
type RolloutQuery struct {
	Channel string
	// State is a rollout state of rfcs/0005.
	State string
	// Before is the next of the previous page: only rollouts after it.
	Before string
	// Limit is the page's size (the server's default 100 when zero, at
	// most 1,000).
	Limit int
}

// RolloutList answers GET /v1/rollouts: a page of rollout summaries,
// newest first.
type RolloutList struct {
	Rollouts []Rollout `json:"rollouts"`
	// Next is the before of the next page; absent when none follows.
	Next string `json:"next,omitempty"`
}

// HostView is a host as GET /v1/hosts and /v1/hosts/{name} show it.
type HostView struct {
	Hostname string `json:"hostname"`
	// Online: seen within the offline threshold.
	Online bool `json:"online"`
	// Seen is false for a host that never checked in.
	Seen     bool         `json:"seen"`
	Observed ObservedHost `json:"observed"`
	// Rollout, Channel, RolloutState and Host are its place in the rollout
	// that drives it; absent when none. A host that no rollout drives has
	// the Channel the signed fleet puts it in, when it is a host of it.
	Rollout      string       `json:"rollout,omitempty"`
	Channel      string       `json:"channel,omitempty"`
	RolloutState string       `json:"rolloutState,omitempty"`
	Host         *RolloutHost `json:"host,omitempty"`
	// Release is, for a host of the signed fleet that no rollout drives,
	// the release of its channel that has not opened a rollout yet
	// (pending, waiting or deferred), as GET /v1/releases lists it; absent
	// when none waits.
	Release *Release `json:"release,omitempty"`
	// Explain answers "why is this host not on its target?" as the
	// host's situation now.
	Explain Situation `json:"explain"`
	// Analysis are the canary analysis runs of the host's wave in that
	// rollout (rfcs/0003 rule 16); absent when none.
	Analysis []AnalysisRun `json:"analysis,omitempty"`
	// Expected is what the latest forecast of that rollout expects of the
	// host (rfcs/0014), while it is not converged; absent when there is
	// none.
	Expected *HostExpectation `json:"expected,omitempty"`
}

// HostQuery selects hosts in GET /v1/hosts: its query parameters channel,
// state, rollout, after and limit. Zero fields do not filter.
type HostQuery struct {
	Channel string
	// State is a host state of rfcs/0004.
	State string
	// Rollout keeps the hosts that rollout drives.
	Rollout string
	// After is the next of the previous page: only hosts after it.
	After string
	// Limit is the page's size (the server's default 500 when zero, at
	// most 5,000).
	Limit int
}

// HostList answers GET /v1/hosts: a page of hosts, by name.
type HostList struct {
	Hosts []HostView `json:"hosts"`
	// Next is the after of the next page; absent when none may follow.
	Next string `json:"next,omitempty"`
}

// Status answers GET /v1/status.
type Status struct {
	// Replica is the answering replica's name; Leader, whether it holds
	// the tick lease.
	Replica     string `json:"replica"`
	Leader      bool   `json:"leader"`
	InsecureDev bool   `json:"insecureDev"`
	// Watch is absent before the first tick.
	Watch    *Watch          `json:"watch,omitempty"`
	Channels []ChannelStatus `json:"channels"`
}

// Watch is the control plane's watch over its hosts, as of its last tick.
type Watch struct {
	// Since is when its current unbroken watch began.
	Since time.Time `json:"since"`
	// JudgesSilenceFrom is Since plus the offline threshold: before it, a
	// host it has not heard from is not judged offline.
	JudgesSilenceFrom time.Time `json:"judgesSilenceFrom"`
	// WarmingUp is set while that time has not come.
	WarmingUp bool `json:"warmingUp"`
	// LastTick is its last committed tick.
	LastTick time.Time `json:"lastTick"`
}

// ChannelStatus is one channel in GET /v1/status.
type ChannelStatus struct {
	Name string `json:"name"`
	// Ref, SourceCommit and SignedAt describe the channel's current
	// verified release.
	Ref          string    `json:"ref"`
	SourceCommit string    `json:"sourceCommit"`
	SignedAt     time.Time `json:"signedAt"`
	// Rollout is the channel's latest rollout, with counts and without
	// hosts.
	Rollout *Rollout `json:"rollout,omitempty"`
	// Pending is set while the channel's ref waits to open a rollout.
	Pending bool `json:"pending"`
	// LastFailure is the latest release from git that failed verification.
	LastFailure *SourceFailure `json:"lastFailure,omitempty"`
	// Visibility is set while the channel is in partial visibility, and
	// for an offline threshold after it ended.
	Visibility *Visibility `json:"partialVisibility,omitempty"`
}

// Fates of a channel ref the control plane saw (GET /v1/releases).
const (
	// FatePending: verified and stored; no tick has looked at it yet.
	FatePending = "pending"
	// FateOpened: it opened a rollout (Release.RolloutID).
	FateOpened = "opened"
	// FateWaiting: it waits for the channel's rollout Release.By to end.
	FateWaiting = "waiting"
	// FateDeferred: something else holds it (Release.By): a predecessor
	// channel (channel_edge), or a manifest that names another rollout
	// (manifest_mismatch).
	FateDeferred = "deferred"
	// FateSuperseded: a newer ref of the channel (Release.By) replaced it
	// before it opened; it never will.
	FateSuperseded = "superseded"
	// FateRefused: it failed verification, was a replay, or reused a
	// ciCommit (the reason's code says which).
	FateRefused = "refused"
)

// ReleaseFates lists every fate, in the order a ref may go through them.
var ReleaseFates = []string{FatePending, FateWaiting, FateDeferred, FateOpened, FateSuperseded, FateRefused}

// Release is a push of a channel ref the control plane read, and what
// became of it (rfcs/0012 §Releases).
type Release struct {
	Channel string `json:"channel"`
	// Commit is the git commit the channel ref pointed to; empty for the
	// rollouts recorded before the control plane kept this log.
	Commit string `json:"commit"`
	// Ref is the release's meta.ciCommit and RolloutID the rollout it
	// opens, "<channel>@<ref>"; both absent for a release refused before
	// its ref was known.
	Ref       string `json:"ref,omitempty"`
	RolloutID string `json:"rolloutId,omitempty"`
	// SeenAt is when the control plane saw the ref move there; SignedAt is
	// when CI signed the release (absent when refused unread).
	SeenAt   time.Time `json:"seenAt"`
	SignedAt time.Time `json:"signedAt,omitzero"`
	// Fate is one of ReleaseFates.
	Fate string `json:"fate"`
	// By is what the fate refers to: the rollout a waiting ref waits for,
	// the channel (or "manifest") that defers it, the ref that superseded
	// it. Absent otherwise.
	By string `json:"by,omitempty"`
	// Reason explains the latest change of fate.
	Reason DecisionReason `json:"reason"`
	// UpdatedAt is when the fate last changed.
	UpdatedAt time.Time `json:"updatedAt"`
	// Rollout is how the rollout an opened release opened stands now, or
	// how it ended; absent for the other fates and once it was pruned.
	Rollout *ReleaseRollout `json:"rollout,omitempty"`
}

// ReleaseRollout is the rollout of an opened release in the release log:
// its state and the reason of its last change (who rolled it back, what
// halted it), and whether it is its channel's latest rollout, the one the
// channel's hosts run or move to.
type ReleaseRollout struct {
	State  string         `json:"state"`
	Reason DecisionReason `json:"reason"`
	Latest bool           `json:"latest,omitempty"`
}

// ReleaseQuery selects releases in GET /v1/releases: its query parameter
// channel. Zero fields do not filter.
type ReleaseQuery struct {
	Channel string
}

// ReleaseList answers GET /v1/releases: the refs seen, newest first.
type ReleaseList struct {
	Releases []Release `json:"releases"`
}

// SourceFailure is the latest release of a channel that the control plane
// refused (rfcs/0007 §Release refusal codes).
type SourceFailure struct {
	Commit  string    `json:"commit"`
	Code    string    `json:"code"`
	Message string    `json:"message"`
	At      time.Time `json:"at"`
}

// IntentEntry is one intent as GET /v1/intents lists it: what was filed,
// what the tick decided (null while queued) and the signed document it
// came with (null for an unsigned one: a dashboard session's, or under
// --insecure-dev).
type IntentEntry struct {
	Intent Intent        `json:"intent"`
	Result *IntentResult `json:"result"`
	Signed *SignedIntent `json:"signed"`
}

// IntentList answers GET /v1/intents.
type IntentList struct {
	Intents []IntentEntry `json:"intents"`
}

// AuditExport is what `nixfleet audit export` writes and `nixfleet audit
// verify --from` reads: every intent and every rollout, as the summaries
// of GET /v1/rollouts (with its approvals and freeze break).
type AuditExport struct {
	Intents  []IntentEntry `json:"intents"`
	Rollouts []Rollout     `json:"rollouts"`
}
