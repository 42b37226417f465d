package reconciler

// Reason codes. They are stable: the control plane stores them, the CLI
// and API show them, operators grep for them.
const (
	// Rollouts and channels.
	CodeRefMoved          = "ref_moved"          // a channel ref moved: a rollout opens
	CodeRefWaiting        = "ref_waiting"        // a new ref waits for the channel's active rollout
	CodeChannelEdge       = "channel_edge"       // a predecessor channel has a non-terminal rollout
	CodeManifestMismatch  = "manifest_mismatch"  // the channel's manifest is not for its ref
	CodeCompliancePassed  = "compliance_passed"  // static compliance gate passed (or disabled)
	CodeComplianceBlocked = "compliance_blocked" // static compliance gate failed in enforce mode
	CodeComplianceWarning = "compliance_warning" // static compliance failed in permissive mode
	CodeWavePromoted      = "wave_promoted"      // every host of a wave is done
	CodeConverged         = "converged"          // the last wave was promoted
	CodeHealthFailure     = "health_failure"     // more failed hosts than healthGate.maxFailures
	CodeWaveStalled       = "wave_stalled"       // no progress within the readiness deadline
	CodeRevertStalled     = "revert_stalled"     // a revert made no progress within the deadline
	CodeRevertDone        = "reverted"           // every host that moved is back
	CodeSuperseded        = "superseded"         // a newer ref replaced a halted rollout
	CodeOperatorPause     = "operator_pause"     // intents…
	CodeOperatorResume    = "operator_resume"
	CodeOperatorCancel    = "operator_cancel"
	CodeOperatorRollback  = "operator_rollback"
	CodeIllegalIntent     = "illegal_transition"  // an intent the rollout's state does not allow
	CodeUnknownRollout    = "unknown_rollout"     // an intent for a rollout that does not exist
	CodeUnknownIntent     = "unknown_intent"      // an intent kind that does not exist
	CodePartialVisibility = "partial_visibility"  // too much of a channel is silent at once
	CodeVisibilityBack    = "visibility_restored" // a channel's partial visibility ended
	CodeWatchStarted      = "watch_started"       // the control plane's watch over its hosts (re)starts

	// Host transitions.
	CodeDispatched       = "dispatched"
	CodeCatchUp          = "catch_up" // a skipped host came back and gets the current target
	CodeOffline          = "offline"  // skipped: offline when its wave was active
	CodeConfirmed        = "confirmed"
	CodeConfirmTimeout   = "confirm_timeout"
	CodeActivationFailed = "activation_failed"
	CodeManifestRejected = "manifest_rejected"
	CodeAgentRolledBack  = "agent_rolled_back"
	CodeDeferred         = "deferred"
	CodeBootedIntoTarget = "booted_into_target"
	CodeUnhealthy        = "unhealthy"
	CodeOfflineSoaking   = "offline_while_soaking"
	CodeSoaked           = "soaked"
	CodeRollbackStarted  = "rollback_dispatched"
	CodeRolledBack       = "rolled_back"
	CodeRollbackTimeout  = "rollback_timeout"
	// The confirm window closed while the control plane could not hear
	// the host (it was not up, or the channel was in partial visibility):
	// the agent rolls itself back; not a health failure (rule 7).
	CodeConfirmUnheard = "confirm_unheard"

	// Gates, in evaluation order (a host's Blocked.Gate and Blocked.Code).
	GateBusy           = "busy"                    // in flight in another rollout
	GateQuarantine     = "quarantined"             // the target failed on this host recently
	GateChannelEdge    = "channel_edge"            // a predecessor channel is rolling out
	GateWave           = "wave_not_active"         // the host's wave has not started
	GateHostEdge       = "host_edge"               // a predecessor host has not converged
	GateBudget         = "budget"                  // a disruption budget is full
	GateCompliance     = "compliance_earlier_wave" // an earlier wave fails runtime compliance
	GateNoPrevious     = "no_previous_closure"     // a rollback has nowhere to go
	GateRollbackOrder  = "rollback_order"          // hosts it gates are rolled back first
	GateRolloutStopped = "rollout_stopped"         // the rollout is halted or cancelled
	GateVisibility     = "partial_visibility"      // the channel is in partial visibility
	GateUnheard        = "unheard"                 // not heard yet, and the control plane has not watched long enough to call it offline
)
