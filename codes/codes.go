package codes

import (
	"slices"
	"strings"
)

// Code is a stable machine-readable code (see the package comment).
type Code string

// Info is what the registry knows about a code.
type Info struct {
	Code Code
	// HTTP is the status of an HTTP answer that carries the code as its
	// error: an error body's code, or the reason of a refused intent
	// (rfcs/0007 §Error codes). 0 when no handler answers with it. The
	// statuses are written as numbers: this package does not import
	// net/http, so that the pure reconciler does not link it.
	HTTP int
	// Exit is the exit status of the nixfleet commands when they end with
	// the code: 1 for a refusal or a failure, 2 for a mistake of the
	// caller (usage, unreadable input, bad settings), 0 when no command
	// fails with it (rfcs/0009 §Exit codes and error codes).
	Exit int
	// Meaning says in one line what the code means.
	Meaning string
}

// statusInternal is HTTP's 500 Internal Server Error.
const statusInternal = 500

// Exit statuses of the CLI.
const (
	exitNone    = 0
	exitFailed  = 1
	exitMistake = 2
)

// Rollouts and channels: reasons the reconciler records.
const (
	RefMoved           = "ref_moved"
	RefWaiting         = "ref_waiting"
	ChannelEdge        = "channel_edge"
	ManifestMismatch   = "manifest_mismatch"
	CompliancePassed   = "compliance_passed"
	ComplianceBlocked  = "compliance_blocked"
	ComplianceWarning  = "compliance_warning"
	WavePromoted       = "wave_promoted"
	Converged          = "converged"
	HealthFailure      = "health_failure"
	WaveStalled        = "wave_stalled"
	WaveUnprovable     = "wave_unprovable"
	RevertStalled      = "revert_stalled"
	Reverted           = "reverted"
	Superseded         = "superseded"
	OperatorPause      = "operator_pause"
	OperatorResume     = "operator_resume"
	OperatorCancel     = "operator_cancel"
	OperatorRollback   = "operator_rollback"
	OperatorApprove    = "operator_approve"
	FreezeBroken       = "freeze_broken"
	NotApprovable      = "not_approvable"
	NotFrozen          = "not_frozen"
	AlreadyInState     = "already_in_state"
	IllegalTransition  = "illegal_transition"
	UnknownRollout     = "unknown_rollout"
	UnknownIntent      = "unknown_intent"
	PartialVisibility  = "partial_visibility"
	VisibilityRestored = "visibility_restored"
	WatchStarted       = "watch_started"
	// Canary analysis (rule 16): a run's verdict, and one measurement's.
	AnalysisSuccessful      = "analysis_successful"
	AnalysisFailed          = "analysis_failed"
	AnalysisInconclusive    = "analysis_inconclusive"
	MeasurementSuccessful   = "measurement_successful"
	MeasurementFailed       = "measurement_failed"
	MeasurementInconclusive = "measurement_inconclusive"
	AnalysisSourceUnknown   = "analysis_source_unknown"
	// Forecasts (rfcs/0014), journalled by the control plane.
	ForecastMade    = "forecast_made"
	ForecastMoved   = "forecast_moved"
	ForecastOutcome = "forecast_outcome"
)

// Host transitions: reasons the reconciler records for a host.
const (
	Dispatched          = "dispatched"
	CatchUp             = "catch_up"
	Offline             = "offline"
	Confirmed           = "confirmed"
	ConfirmTimeout      = "confirm_timeout"
	ActivationFailed    = "activation_failed"
	ManifestRejected    = "manifest_rejected"
	AgentRolledBack     = "agent_rolled_back"
	Deferred            = "deferred"
	BootedIntoTarget    = "booted_into_target"
	RebootDispatched    = "reboot_dispatched"
	RebootNotAllowed    = "reboot_not_allowed"
	BootTimeout         = "boot_timeout"
	RebootUnheard       = "reboot_unheard"
	StagedTargetLost    = "staged_target_lost"
	Unhealthy           = "unhealthy"
	OfflineWhileSoaking = "offline_while_soaking"
	Soaked              = "soaked"
	RollbackDispatched  = "rollback_dispatched"
	RolledBack          = "rolled_back"
	RollbackTimeout     = "rollback_timeout"
	ConfirmUnheard      = "confirm_unheard"
	ConfirmInferred     = "confirm_inferred"
)

// Gates, in the reconciler's evaluation order (a host's Blocked.Gate and
// Blocked.Code), besides ChannelEdge and PartialVisibility above.
const (
	Busy                  = "busy"
	Quarantined           = "quarantined"
	WaveNotActive         = "wave_not_active"
	HostEdge              = "host_edge"
	Budget                = "budget"
	ComplianceEarlierWave = "compliance_earlier_wave"
	NoPreviousClosure     = "no_previous_closure"
	RollbackOrder         = "rollback_order"
	RolloutStopped        = "rollout_stopped"
	Unheard               = "unheard"
	Window                = "window"
	Freeze                = "freeze"
	Approval              = "approval"
)

// Answers to an agent or an operator that no tick recorded.
const (
	NotInRollout = "not_in_rollout"
	Waiting      = "waiting"
)

// Error codes of the HTTP API.
const (
	BadRequest         = "bad_request"
	BodyTooLarge       = "body_too_large"
	RateLimited        = "rate_limited"
	MalformedJSON      = "malformed_json"
	Unauthenticated    = "unauthenticated"
	UnknownClient      = "unknown_client"
	UnknownHost        = "unknown_host"
	HostMismatch       = "host_mismatch"
	Forbidden          = "forbidden"
	NotFound           = "not_found"
	MethodNotAllowed   = "method_not_allowed"
	ConfirmRejected    = "confirm_rejected"
	WebhookDisabled    = "webhook_disabled"
	Unavailable        = "unavailable"
	UnsignedIntent     = "unsigned_intent"
	BadIntentSignature = "bad_intent_signature"
	IntentMismatch     = "intent_mismatch"
	StaleIntent        = "stale_intent"
	ReplayedIntent     = "replayed_intent"
	AuditFailed        = "audit_failed"
	SignInRequired     = "sign_in_required"
	LoginLinkInvalid   = "login_link_invalid"
	CsrfRefused        = "csrf_refused"
	Internal           = "internal"
)

// Release refusals of the channel source, besides the trust codes.
const (
	MissingArtifact   = "missing_artifact"
	NotAFile          = "not_a_file"
	NotACommit        = "not_a_commit"
	FleetHashMismatch = "fleet_hash_mismatch"
	ReplayedRelease   = "replayed_release"
	ReusedCiCommit    = "reused_ci_commit"
	UnknownChannel    = "unknown_channel"
	InvalidFleet      = "invalid_fleet"
	StoreUnavailable  = "store_unavailable"
)

// Trust verdicts (package trust, rfcs/0002), in pipeline order.
const (
	NoTrustRoots         = "no_trust_roots"
	Malformed            = "malformed"
	BadSignature         = "bad_signature"
	UnsupportedAlgorithm = "unsupported_algorithm"
	UnsupportedSchema    = "unsupported_schema"
	NotSigned            = "not_signed"
	RejectedBefore       = "rejected_before"
	Stale                = "stale"
	FutureDated          = "future_dated"
	RolloutIDMismatch    = "rollout_id_mismatch"
	ManifestHashMismatch = "manifest_hash_mismatch"
	HostNotInManifest    = "host_not_in_manifest"
	InvalidTrustRoots    = "invalid_trust_roots"
	InvalidKey           = "invalid_key"
)

// The agent's failure codes (a report's code, a rollback's why).
const (
	ManifestUnavailable   = "manifest_unavailable"
	ConfirmFailed         = "confirm_failed"
	RealiseFailed         = "realise_failed"
	ClosureUnsigned       = "closure_unsigned"
	RealiseMismatch       = "realise_mismatch"
	ProfileFailed         = "profile_failed"
	BootFailed            = "boot_failed"
	BootFellBack          = "boot_fell_back"
	RebootFailed          = "reboot_failed"
	BootLoaderUnsupported = "boot_loader_unsupported"
	SwitchFailed          = "switch_failed"
	SwitchIncomplete      = "switch_incomplete"
	NoPreviousSystem      = "no_previous_system"
	UnknownRollbackTarget = "unknown_rollback_target"
	UnknownTargetKind     = "unknown_target_kind"
	RollbackRequested     = "rollback_requested"
	Interrupted           = "interrupted"
)

// The commands' own codes (nixfleet, nixfleet-demo).
const (
	OK              = "ok"
	Usage           = "usage"
	IOError         = "io_error"
	BadConfig       = "bad_config"
	BadKey          = "bad_key"
	BadCA           = "bad_ca"
	BadInput        = "bad_input"
	BadOutDir       = "bad_out_dir"
	BadResponse     = "bad_response"
	Exists          = "exists"
	SignerFailed    = "signer_failed"
	SetupFailed     = "setup_failed"
	Timeout         = "timeout"
	UnexpectedState = "unexpected_state"
)

// registry is every code, one row each, in the order of the constants.
var registry = []Info{
	{RefMoved, 0, exitNone, "a channel's ref moved: a rollout opens"},
	{RefWaiting, 0, exitNone, "a new ref waits for the channel's active rollout to end"},
	{ChannelEdge, 0, exitNone, "a predecessor channel has a rollout that is not terminal (a reason, and the gate holding a host)"},
	{ManifestMismatch, 0, exitNone, "the channel's manifest is not the one for its ref"},
	{CompliancePassed, 0, exitNone, "the static compliance gate passed, or is disabled"},
	{ComplianceBlocked, 0, exitNone, "the static compliance gate failed in enforce mode"},
	{ComplianceWarning, 0, exitNone, "the static compliance gate failed in permissive mode"},
	{WavePromoted, 0, exitNone, "every host of a wave is done: the next wave starts"},
	{Converged, 0, exitNone, "the last wave was promoted; for a host, it runs its target"},
	{HealthFailure, 0, exitNone, "more hosts failed than the health gate's maxFailures"},
	{WaveStalled, 0, exitNone, "a wave made no progress within the readiness deadline"},
	{WaveUnprovable, 0, exitNone, "a wave lacks evidence that none of its hosts can bring any more (rule 11)"},
	{RevertStalled, 0, exitNone, "a revert made no progress within the deadline"},
	{Reverted, 0, exitNone, "every host that moved is back on its previous closure"},
	{Superseded, 0, exitNone, "a newer ref replaced a halted rollout"},
	{OperatorPause, 0, exitNone, "an operator paused the rollout"},
	{OperatorResume, 0, exitNone, "an operator resumed the rollout"},
	{OperatorCancel, 0, exitNone, "an operator cancelled the rollout"},
	{OperatorRollback, 0, exitNone, "an operator asked for the rollout to be rolled back"},
	{OperatorApprove, 0, exitNone, "an approver approved a wave of the rollout (rule 15)"},
	{FreezeBroken, 0, exitNone, "an approver let the rollout through its channel's freezes (rule 14)"},
	{NotApprovable, 409, exitFailed, "an approval for a wave that needs none, does not exist, or of a rollout that is over"},
	{NotFrozen, 409, exitFailed, "a break-freeze for a rollout whose channel no freeze holds, or that cannot open now"},
	{AlreadyInState, 0, exitNone, "an intent whose outcome already holds (pause of a Halted rollout, …): accepted, nothing moves"},
	{IllegalTransition, 409, exitFailed, "an intent the rollout's state does not allow"},
	{UnknownRollout, 409, exitFailed, "an intent for a rollout that does not exist"},
	{UnknownIntent, 409, exitFailed, "an intent of a kind that does not exist"},
	{PartialVisibility, 0, exitNone, "too much of a channel is late at once (a reason, and the gate holding a host)"},
	{VisibilityRestored, 0, exitNone, "a channel's partial visibility ended"},
	{WatchStarted, 0, exitNone, "the control plane's watch over its hosts (re)starts"},
	{AnalysisSuccessful, 0, exitNone, "a wave's analysis counted its measurements without passing its limits (rule 16)"},
	{AnalysisFailed, 0, exitNone, "a wave's analysis counted more failed measurements than its failureLimit: onHealthFailure applies"},
	{AnalysisInconclusive, 0, exitNone, "a wave's analysis counted more inconclusive measurements than its inconclusiveLimit: the rollout halts for an operator"},
	{MeasurementSuccessful, 0, exitNone, "an analysis query's result met its successCondition"},
	{MeasurementFailed, 0, exitNone, "an analysis query's result met its failureCondition, or missed its successCondition"},
	{MeasurementInconclusive, 0, exitNone, "an analysis query gave no usable result (no data, an error, Prometheus unreachable)"},
	{AnalysisSourceUnknown, 0, exitNone, "an analysis names a Prometheus source the control plane does not have: its measurements are inconclusive"},
	{ForecastMade, 0, exitNone, "a rollout's first forecast: when it is expected to end, or what it waits for"},
	{ForecastMoved, 0, exitNone, "a rollout's forecast end moved by more than a tenth of what remained (at least 5 minutes), or it stopped or started to end"},
	{ForecastOutcome, 0, exitNone, "a rollout ended: how far from its first forecast"},

	{Dispatched, 0, exitNone, "the host was given its target"},
	{CatchUp, 0, exitNone, "a skipped host came back and is given the current target"},
	{Offline, 0, exitNone, "the host was skipped: offline while its wave was active"},
	{Confirmed, 0, exitNone, "the agent confirmed the activation"},
	{ConfirmTimeout, 0, exitNone, "the confirm window closed without a confirm"},
	{ActivationFailed, 0, exitNone, "the agent reported that the activation failed"},
	{ManifestRejected, 0, exitNone, "the agent refused the rollout's manifest"},
	{AgentRolledBack, 0, exitNone, "the agent rolled itself back"},
	{Deferred, 0, exitNone, "the target is staged for the host's next boot"},
	{BootedIntoTarget, 0, exitNone, "the host booted into its staged target"},
	{RebootDispatched, 0, exitNone, "the host was told to reboot once into its staged target (rule 17)"},
	{RebootNotAllowed, 0, exitNone, "a staged host waits for someone to reboot it: its policy does not let the control plane"},
	{StagedTargetLost, 0, exitNone, "a staged host said, since it staged, that nothing is staged any more (its agent dropped the target): Reverted, no failure"},
	{BootTimeout, 0, exitNone, "a rebooted host did not check in on its new boot within bootTimeout: a failed boot"},
	{RebootUnheard, 0, exitNone, "bootTimeout passed while the control plane could not hear the host, which says its target is still staged: Deferred again, no failure"},
	{Unhealthy, 0, exitNone, "the host's probes or units failed after the switch"},
	{OfflineWhileSoaking, 0, exitNone, "the host went silent while it soaked"},
	{Soaked, 0, exitNone, "the host stayed healthy for the soak time"},
	{RollbackDispatched, 0, exitNone, "the host was told to roll back"},
	{RolledBack, 0, exitNone, "the host is back on its previous closure"},
	{RollbackTimeout, 0, exitNone, "a rollback was not confirmed in time"},
	{ConfirmUnheard, 0, exitNone, "the confirm window closed while the control plane could not hear the host"},
	{ConfirmInferred, 0, exitNone, "no confirm on record, but the host ran its target well after the window closed: the store lost the confirm"},

	{Busy, 0, exitNone, "gate: the host is in flight in another rollout"},
	{Quarantined, 0, exitNone, "gate: the target failed on this host recently (also the agent's refusal to activate it)"},
	{WaveNotActive, 0, exitNone, "gate: the host's wave has not started"},
	{HostEdge, 0, exitNone, "gate: a predecessor host has not converged"},
	{Budget, 0, exitNone, "gate: a disruption budget is full"},
	{ComplianceEarlierWave, 0, exitNone, "gate: an earlier wave fails runtime compliance"},
	{NoPreviousClosure, 0, exitNone, "gate: a rollback has nowhere to go"},
	{RollbackOrder, 0, exitNone, "gate: the hosts this one gates are rolled back first"},
	{RolloutStopped, 0, exitNone, "gate: the rollout is halted or cancelled"},
	{Unheard, 0, exitNone, "gate: not heard yet, and not watched long enough to call it offline"},
	{Window, 0, exitNone, "gate: outside the host's maintenance window (rollbacks are not held)"},
	{Freeze, 0, exitNone, "gate and deferral: a freeze holds the channel; nothing opens or is dispatched"},
	{Approval, 0, exitNone, "gate: the wave waits for its approvals"},

	{NotInRollout, 0, exitNone, "no rollout includes the host"},
	{Waiting, 0, exitNone, "the host is pending and no gate holds it yet"},

	{BadRequest, 400, exitFailed, "the request is missing something or has a value out of range"},
	{BodyTooLarge, 413, exitFailed, "the request body is over its cap"},
	{RateLimited, 429, exitFailed, "the client's rate limit is spent; Retry-After says for how long"},
	{MalformedJSON, 400, exitFailed, "the request body is not strict JSON of the expected shape"},
	{Unauthenticated, 401, exitFailed, "no client certificate"},
	{UnknownClient, 401, exitFailed, "the client key is no host's and no operator's"},
	{UnknownHost, 403, exitFailed, "the hostname has no key in the fleet"},
	{HostMismatch, 403, exitFailed, "the hostname is another host of the fleet"},
	{Forbidden, 403, exitFailed, "the caller's kind or role may not use the endpoint"},
	{NotFound, 404, exitFailed, "no such endpoint, rollout, host or action"},
	{MethodNotAllowed, 405, exitFailed, "a known path with the wrong method"},
	{ConfirmRejected, 410, exitFailed, "a confirm not for the current activation, or too late (also why an agent rolls back)"},
	{WebhookDisabled, 404, exitFailed, "the forge webhook has no secret"},
	{Unavailable, 503, exitFailed, "the control plane is not ready or cannot be reached"},
	{UnsignedIntent, 400, exitFailed, "an intent without the operator's signature (rfcs/0007 §Signed intents)"},
	{BadIntentSignature, 403, exitFailed, "an intent whose signature does not verify with the requester's key, or that names another key"},
	{IntentMismatch, 400, exitFailed, "a signed intent that says another kind, rollout, wave or comment than its request"},
	{StaleIntent, 400, exitFailed, "a signed intent issued more than 5 minutes from the control plane's clock"},
	{ReplayedIntent, 409, exitFailed, "a signed intent whose nonce was used already"},
	{AuditFailed, 0, exitFailed, "nixfleet audit verify found an intent, approval or freeze break no operator signed"},
	{SignInRequired, 401, exitFailed, "dashboard: no live session (none, expired, signed out, or its operator left the operators file)"},
	{LoginLinkInvalid, 401, exitFailed, "dashboard: the one-time sign-in link is unknown, expired or already used"},
	{CsrfRefused, 403, exitFailed, "dashboard: a state-changing request without this session's CSRF token or from another site"},
	{Internal, 500, exitFailed, "an error nothing more specific describes; details in the log"},

	{MissingArtifact, 0, exitNone, "release refused: the commit, an artifact or its .sig cannot be read"},
	{NotAFile, 0, exitNone, "release refused: an artifact path is a symlink, directory or submodule"},
	{NotACommit, 0, exitNone, "release refused: the ref names a tree or a blob, not a commit"},
	{FleetHashMismatch, 0, exitNone, "release refused: the manifest was projected from another fleet"},
	{ReplayedRelease, 0, exitNone, "release refused: not signed after the channel's current release"},
	{ReusedCiCommit, 0, exitNone, "release refused: its meta.ciCommit names a rollout the channel opened before"},
	{UnknownChannel, 0, exitNone, "release refused: the signed fleet lacks the channel"},
	{InvalidFleet, 0, exitFailed, "the fleet fails validation (rfcs/0001)"},
	{StoreUnavailable, 0, exitNone, "the store failed while a release was kept; the ref is read again"},

	{NoTrustRoots, 0, exitFailed, "trust: no key is active at the verification time"},
	{Malformed, 0, exitFailed, "trust: not canonicalizable JSON or not a well-formed artifact (also an oversized git object)"},
	{BadSignature, 403, exitFailed, "trust: no active key verifies the signature (403 for a report; a webhook's HMAC answers 401)"},
	{UnsupportedAlgorithm, 0, exitFailed, "trust: no active key has an algorithm this build supports"},
	{UnsupportedSchema, 0, exitFailed, "trust: the schemaVersion is not 1"},
	{NotSigned, 0, exitFailed, "trust: meta.signedAt is missing"},
	{RejectedBefore, 0, exitFailed, "trust: signed before the trust roots' rejectBefore"},
	{Stale, 0, exitFailed, "trust: signed longer ago than the freshness window allows"},
	{FutureDated, 0, exitFailed, "trust: signed further in the future than the clock skew allows"},
	{RolloutIDMismatch, 0, exitFailed, "trust: a manifest's rollout id is not the expected one"},
	{ManifestHashMismatch, 0, exitFailed, "trust: a manifest's content hash is not the adopted one"},
	{HostNotInManifest, 0, exitFailed, "trust: the host, at its wave and target, is not in the manifest"},
	{InvalidTrustRoots, 0, exitMistake, "trust: trust.json is unusable"},
	{InvalidKey, 0, exitFailed, "trust: a private or public key cannot be used"},

	{ManifestUnavailable, 0, exitNone, "agent: the rollout's manifest could not be fetched"},
	{ConfirmFailed, 0, exitNone, "agent: the confirm could not be delivered or was refused"},
	{RealiseFailed, 0, exitNone, "agent: nix-store --realise failed"},
	{ClosureUnsigned, 0, exitNone, "agent: the closure's substitute is not signed by a trusted cache key"},
	{RealiseMismatch, 0, exitNone, "agent: nix-store --realise printed another path"},
	{ProfileFailed, 0, exitNone, "agent: setting the system profile failed"},
	{BootFailed, 0, exitNone, "agent: switch-to-configuration boot failed"},
	{BootFellBack, 0, exitNone, "agent: the host came up on its previous default entry, not the one it booted once into"},
	{RebootFailed, 0, exitNone, "agent: the boot loader's once-only entry or the reboot itself could not be ordered"},
	{BootLoaderUnsupported, 0, exitNone, "agent: the host's boot loader cannot boot once into an entry (only systemd-boot and GRUB can)"},
	{SwitchFailed, 0, exitNone, "agent: switch-to-configuration switch failed"},
	{SwitchIncomplete, 0, exitNone, "agent: the host did not run the target by the confirm deadline"},
	{NoPreviousSystem, 0, exitNone, "agent: a rollback has no previous system to go to"},
	{UnknownRollbackTarget, 0, exitNone, "agent: a rollback to a system the host never ran"},
	{UnknownTargetKind, 0, exitNone, "agent: a target of a kind this agent does not know"},
	{RollbackRequested, 0, exitNone, "agent: the control plane asked for a rollback"},
	{Interrupted, 0, exitFailed, "a signal or a cancelled context stopped the work"},

	{OK, 0, exitNone, "the CLI accepted the input (verify --json)"},
	{Usage, 0, exitMistake, "bad flags or arguments"},
	{IOError, 0, exitMistake, "a file cannot be read or written"},
	{BadConfig, 0, exitMistake, "the CLI's config file is malformed"},
	{BadKey, 0, exitMistake, "the operator key is not an unencrypted ed25519 private key"},
	{BadCA, 0, exitMistake, "the CA file holds no PEM certificate"},
	{BadInput, 0, exitFailed, "an input of the CLI is not what the command reads"},
	{BadOutDir, 0, exitFailed, "the output directory holds something that is not part of a release"},
	{BadResponse, 0, exitFailed, "the control plane's answer is not the JSON expected"},
	{Exists, 0, exitFailed, "a file the command would write exists already"},
	{SignerFailed, 0, exitFailed, "the external signing command failed"},
	{SetupFailed, 0, exitFailed, "demo: it could not set itself up"},
	{Timeout, 0, exitFailed, "demo: the time ran out before the story ended"},
	{UnexpectedState, 0, exitFailed, "demo: a rollout took a state the story does not expect"},
}

var index = func() map[Code]int {
	m := make(map[Code]int, len(registry))
	for i, in := range registry {
		m[in.Code] = i
	}
	return m
}()

// Lookup returns what the registry knows about c.
func Lookup(c Code) (Info, bool) {
	i, ok := index[c]
	if !ok {
		return Info{}, false
	}
	return registry[i], true
}

// Registered reports whether c is in the registry.
func Registered(c Code) bool {
	_, ok := index[c]
	return ok
}

// All returns every registered code, sorted by code.
func All() []Info {
	out := slices.Clone(registry)
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(string(a.Code), string(b.Code)) })
	return out
}

// HTTPStatus is the status an HTTP handler answers c with: Info.HTTP, or
// 500 for a code that no handler is meant to answer with.
func HTTPStatus(c Code) int {
	if in, ok := Lookup(c); ok && in.HTTP != 0 {
		return in.HTTP
	}
	return statusInternal
}

// Exit is the CLI's exit status for an error with code c: Info.Exit, or 1
// for a code the registry does not know or gives no status (a code of a
// newer control plane, http_<status>).
func Exit(c Code) int {
	if in, ok := Lookup(c); ok && in.Exit != exitNone {
		return in.Exit
	}
	return exitFailed
}
