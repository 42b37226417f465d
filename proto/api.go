package proto

import "time"

// The control plane's HTTP API bodies (rfcs/0007-protocol.md). Bodies are
// JSON, decoded with the rules of this package (duplicate members and type
// errors refused, unknown members tolerated), and size-capped by the
// server.

// Error is every error the API returns: a stable, machine-readable code
// and a message for people.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ProbeSummary is the result of a host's health probes at check-in.
type ProbeSummary struct {
	// Total is how many probes ran.
	Total int `json:"total"`
	// Failed names the probes that failed.
	Failed []string `json:"failed"`
}

// ComplianceResult is one compliance control's result about a closure.
type ComplianceResult struct {
	Control   string `json:"control"`
	Framework string `json:"framework,omitempty"`
	// Type is "static", "runtime" or "both".
	Type string `json:"type"`
	// Closure is the store path basename the result is about.
	Closure string `json:"closure"`
	Passed  bool   `json:"passed"`
	Detail  string `json:"detail,omitempty"`
}

// Quarantine holds a closure back from a host until a time.
type Quarantine struct {
	Closure string    `json:"closure"`
	Until   time.Time `json:"until"`
}

// CheckinRequest is POST /v1/agent/checkin: what a host runs and how it is.
type CheckinRequest struct {
	// Hostname must be the host the client certificate's key belongs to.
	Hostname string `json:"hostname"`
	// Current and Booted are the store path basenames of
	// /run/current-system and /run/booted-system.
	Current string `json:"current"`
	Booted  string `json:"booted"`
	BootID  string `json:"bootId,omitempty"`
	// Probes and FailedUnits are the latest health results.
	Probes      ProbeSummary       `json:"probes"`
	FailedUnits []string           `json:"failedUnits"`
	Compliance  []ComplianceResult `json:"compliance"`
	// Deferred is set while a target is staged for the next boot.
	Deferred bool `json:"deferred"`
	// Quarantine lists closures the agent will not activate again yet.
	Quarantine []Quarantine `json:"quarantine"`
	// Known is the target the agent holds (from an earlier response), if
	// any. With Wait, the server answers as soon as its target differs.
	Known *TargetRef `json:"known,omitempty"`
	// Wait asks the server to hold the response up to this many seconds
	// (at most 60) until the host's target changes.
	Wait int `json:"wait,omitempty"`
	// StatusTag echoes the statusTag of the last answer the agent got (a
	// check-in, or a probe_results report), and is left out after any
	// request that failed. When this status is the one the tag names, the
	// server writes nothing.
	StatusTag string `json:"statusTag,omitempty"`
	// Prefetched is the store path basename of the closure the agent
	// holds realised (and rooted) for an activation to come, not
	// activated yet; "" when none (rfcs/0008 §Prefetch). It is part of
	// the host's status.
	Prefetched string `json:"prefetched,omitempty"`
}

// TargetRef names one activation of a host.
type TargetRef struct {
	RolloutID string `json:"rolloutId"`
	Closure   string `json:"closure"`
	Token     string `json:"token"`
}

// Target kinds.
const (
	TargetDispatch = "dispatch"
	TargetRollback = "rollback"
	// TargetReboot: boot once into Closure, the target the agent staged
	// for the next boot, and confirm from the new boot by ConfirmBy (the
	// boot timeout); the entry becomes the default only after the
	// confirm (rfcs/0008 §Reboots).
	TargetReboot = "reboot"
)

// Target tells an agent to switch.
type Target struct {
	// Kind is "dispatch" (activate Closure, the rollout's target) or
	// "rollback" (return to Closure, the closure the host ran before).
	Kind      string `json:"kind"`
	RolloutID string `json:"rolloutId"`
	Closure   string `json:"closure"`
	WaveIndex int    `json:"waveIndex"`
	// ManifestHash is the content hash of the manifest the agent must
	// fetch (GET /v1/rollouts/{id}/manifest) and verify.
	ManifestHash string `json:"manifestHash"`
	// Token identifies this activation; the confirm must echo it.
	Token string `json:"token"`
	// ConfirmBy (RFC 3339) is when the confirm window closes.
	ConfirmBy string `json:"confirmBy"`
	// ManagedReboot, on a dispatch, says that the control plane orders the
	// reboot a staged target needs: the agent stages it as a boot entry
	// that is not the default (rfcs/0008 §Reboots). Without it a staged
	// target becomes the default entry at once, for whoever reboots.
	ManagedReboot bool `json:"managedReboot,omitempty"`
	// Kexec, on a reboot target, asks for a kexec into the new kernel
	// where the host supports it.
	Kexec bool `json:"kexec,omitempty"`
}

// Reason explains a decision.
type Reason struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// CheckinResponse answers a check-in.
type CheckinResponse struct {
	// Target is what the host must do now; null when nothing.
	Target *Target `json:"target"`
	// Reason says why there is no target (the gate that holds the host,
	// or that it converged), or why this one.
	Reason Reason `json:"reason"`
	// NextCheckinSeconds is when to check in again at the latest.
	NextCheckinSeconds int `json:"nextCheckinSeconds"`
	// ServerTime (RFC 3339) lets the agent notice clock skew.
	ServerTime string `json:"serverTime"`
	// StatusTag names the status the server now holds for the host, to
	// echo in the next check-in.
	StatusTag string `json:"statusTag"`
	// Prefetch, when set, is the host's coming target, which it may fetch
	// now, ahead of its dispatch, or holds already (its prefetched
	// closure): rfcs/0007 §Prefetch. Absent when the host has nothing to
	// fetch ahead, when the control plane has no fetch slot free for it
	// now, or when prefetch is off.
	Prefetch *PrefetchTarget `json:"prefetch,omitempty"`
}

// PrefetchTarget names a closure a host may realise before its dispatch:
// its target in a rollout where it waits. It is no order to activate
// anything: the agent verifies the rollout's manifest (signature, rollout
// id, ManifestHash when set, and its own hostname, WaveIndex and Closure)
// before it fetches, exactly as for a dispatch.
type PrefetchTarget struct {
	RolloutID string `json:"rolloutId"`
	Closure   string `json:"closure"`
	WaveIndex int    `json:"waveIndex"`
	// ManifestHash is the content hash of the rollout's manifest, as in a
	// Target.
	ManifestHash string `json:"manifestHash,omitempty"`
}

// ConfirmRequest is POST /v1/agent/confirm: the host runs the target and
// can reach the control plane.
type ConfirmRequest struct {
	Hostname  string `json:"hostname"`
	RolloutID string `json:"rolloutId"`
	Closure   string `json:"closure"`
	Token     string `json:"token"`
}

// ConfirmResponse accepts a confirm. A refused confirm is an Error with
// HTTP 410: the agent must roll back.
type ConfirmResponse struct {
	Confirmed bool `json:"confirmed"`
}

// Report kinds an agent sends.
const (
	ReportActivationStarted = "activation_started"
	ReportActivationFailed  = "activation_failed"
	ReportDeferred          = "deferred"
	ReportRolledBack        = "rolled_back"
	ReportManifestRejected  = "manifest_rejected"
	// ReportBootFailed: a reboot target did not come up (the host booted
	// its previous default again, or never rebooted); Code says which.
	ReportBootFailed = "boot_failed"
	// ReportProbeResults carries health results that changed between
	// check-ins (probes and failedUnits; no rolloutId or closure).
	ReportProbeResults = "probe_results"
)

// Activation outcomes: what a control plane records of an activation, from
// an agent's reports and an accepted confirm.
const (
	OutcomeStarted          = "started"
	OutcomeConfirmed        = "confirmed"
	OutcomeFailed           = "failed"
	OutcomeDeferred         = "deferred"
	OutcomeRolledBack       = "rolled_back"
	OutcomeManifestRejected = "manifest_rejected"
	OutcomeBootFailed       = "boot_failed"
)

// ReportOutcome is the activation outcome a report of a kind records, ""
// for a kind that records none (probe results, or one unknown).
func ReportOutcome(kind string) string {
	switch kind {
	case ReportActivationStarted:
		return OutcomeStarted
	case ReportActivationFailed:
		return OutcomeFailed
	case ReportDeferred:
		return OutcomeDeferred
	case ReportRolledBack:
		return OutcomeRolledBack
	case ReportManifestRejected:
		return OutcomeManifestRejected
	case ReportBootFailed:
		return OutcomeBootFailed
	}
	return ""
}

// ReportRequest is POST /v1/agent/report. The body is signed with the
// host's SSH ed25519 key: header X-Nixfleet-Signature carries the standard
// base64 of the 64-byte signature over the exact body bytes.
type ReportRequest struct {
	Hostname  string `json:"hostname"`
	Kind      string `json:"kind"`
	RolloutID string `json:"rolloutId"`
	Closure   string `json:"closure"`
	// Code is a stable code for failures (a trust code for a rejected
	// manifest, a realise or switch failure code).
	Code   string `json:"code,omitempty"`
	Detail string `json:"detail,omitempty"`
	// At (RFC 3339) is when it happened on the host.
	At string `json:"at"`
	// Probes and FailedUnits are the health results of a probe_results
	// report.
	Probes      *ProbeSummary `json:"probes,omitempty"`
	FailedUnits []string      `json:"failedUnits,omitempty"`
}

// ReportResponse acknowledges a report.
type ReportResponse struct {
	Recorded bool `json:"recorded"`
	// StatusTag answers a probe_results report: the status the server now
	// holds, to echo in the next check-in.
	StatusTag string `json:"statusTag,omitempty"`
}

// IntentRequest is POST /v1/rollouts/{id}/{pause|resume|cancel|rollback|approve|break-freeze}.
// The body may be empty, except for approve and break-freeze.
type IntentRequest struct {
	// Comment is kept with the intent and written into the reason of its
	// intent_accepted or intent_refused event: at most MaxCommentBytes of
	// UTF-8 without control characters. Approve and break-freeze need one
	// that is not blank.
	Comment string `json:"comment,omitempty"`
	// Wave is the wave an approve approves (0 is the first), required
	// there; the other kinds name none.
	Wave *int `json:"wave,omitempty"`
	// Signed is the intent as the operator signed it (rfcs/0007 §Signed
	// intents); required but under --insecure-dev. Its comment is the
	// intent's comment.
	Signed *SignedIntent `json:"signed,omitempty"`
}

// MaxCommentBytes bounds an intent's comment.
const MaxCommentBytes = 500

// WebLoginRequest is POST /v1/web/logins: an operator's CLI asks for a
// one-time dashboard sign-in link (rfcs/0011). The body may be empty.
type WebLoginRequest struct {
	// ValidSeconds is how long the link may be opened, 1 to 3600 (absent:
	// 120). The session it becomes lasts the control plane's session
	// lifetime.
	ValidSeconds *int `json:"validSeconds,omitempty"`
}

// WebLogin answers POST /v1/web/logins.
type WebLogin struct {
	// Path is the link's path and query, to append to the control plane's
	// URL: it signs in whoever opens it first, once.
	Path     string    `json:"path"`
	Operator string    `json:"operator"`
	Role     string    `json:"role"`
	Expires  time.Time `json:"expires"`
}

// IntentDocument is what an operator signs to file an intent (rfcs/0007
// §Signed intents): its JCS bytes, signed with the operator's ed25519 key,
// travel with the request and are kept verbatim, so that anyone with the
// operators' public keys can check later who asked for what.
type IntentDocument struct {
	// Kind is pause, resume, cancel, rollback, approve or break-freeze.
	Kind      string `json:"kind"`
	RolloutID string `json:"rolloutId"`
	// Wave is the wave an approve names.
	Wave    *int   `json:"wave,omitempty"`
	Comment string `json:"comment,omitempty"`
	// Key is the signer's ed25519 public key, base64 of its 32 bytes:
	// the operators file names its owner.
	Key string `json:"key"`
	// IssuedAt is when the operator signed it; the control plane takes it
	// within MaxIntentSkew of its own clock.
	IssuedAt time.Time `json:"issuedAt"`
	// Nonce is 32 lowercase hex digits, random; it becomes the intent's
	// id, so a replayed document is refused.
	Nonce string `json:"nonce"`
}

// SignedIntent is an IntentDocument as signed: Document holds its JCS
// text exactly, as a JSON string (so that no re-encoding of the envelope,
// indenting or escaping, can change a byte of it), Signature the base64
// ed25519 signature of IntentSigningContext followed by it.
type SignedIntent struct {
	Document  string `json:"document"`
	Signature string `json:"signature"`
}

// IntentSigningContext separates intent signatures from every other use
// of an operator's key.
const IntentSigningContext = "nixfleet intent v1\n"

// MaxIntentSkew is how far an intent's issuedAt may be from the control
// plane's clock, either way.
const MaxIntentSkew = 5 * time.Minute
