package reconciler

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
)

// What a host's agent is told at check-in follows from the host's record
// in the rollout that drives it and nothing else: it is decided here,
// beside the tick that wrote the record, and the control plane's handler
// only encodes it. What an operator is told is in situation.go.

// Assignment is a host's record in the rollout that drives it: the
// rollout where it is in flight, else the latest rollout that lists it.
type Assignment struct {
	RolloutID    string
	Channel      string
	RolloutState RolloutState
	ManifestHash string
	Host         RolloutHost
	// Soak is the soak of the host's wave (Rollout.WaveSoak).
	Soak time.Duration
	// Reboot is the reboot step of the host's wave (Rollout.RebootOf).
	Reboot RebootSpec
}

// SoakEnd is when the host's soak ends, while it is Soaking: its first
// check-in from then on is one a tick needs (EndsWait).
func (a Assignment) SoakEnd() time.Time { return a.Host.Since.Add(a.Soak) }

// Token identifies an activation: the host's dispatch in a rollout at a
// time. A confirm must echo it, so that an old confirm cannot be replayed
// against a later activation of the same closure.
func (a Assignment) Token() string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s\x00%d", a.RolloutID, a.Host.Hostname, a.Host.Target, a.Host.Since.UnixMicro()))
	return hex.EncodeToString(sum[:12])
}

// ConfirmBy is when the confirm window of the host's current activation
// closes; for a reboot, when its boot timeout ends (rule 17).
func (a Assignment) ConfirmBy(tu Tunables) time.Time {
	if a.Host.State == HostRebooting {
		return a.Reboot.BootBy(a.Host.Since, tu)
	}
	return a.Host.Since.Add(tu.confirm())
}

// How often an agent is asked to check in, in seconds: rarely when there
// is nothing to do, often while it switches or rolls back (its confirm
// window is short), in between while it soaks.
const (
	IdleCheckinSeconds      = 30
	SwitchingCheckinSeconds = 5
	SoakingCheckinSeconds   = 10
)

// AgentAnswer is what a host's agent is told at check-in: the closure to
// switch to (dispatch) or back to (rollback) with the token its confirm
// echoes, or why it has nothing to do. a is nil for a host no rollout
// lists.
func AgentAnswer(a *Assignment, tu Tunables) proto.CheckinResponse {
	resp := proto.CheckinResponse{NextCheckinSeconds: IdleCheckinSeconds}
	if a == nil {
		resp.Reason = proto.Reason{Code: codes.NotInRollout, Message: "no rollout includes this host yet"}
		return resp
	}
	h := a.Host
	target := func(kind, closure string) *proto.Target {
		return &proto.Target{Kind: kind, RolloutID: a.RolloutID, Closure: closure, WaveIndex: h.Wave,
			ManifestHash: a.ManifestHash, Token: a.Token(), ConfirmBy: a.ConfirmBy(tu).UTC().Format(time.RFC3339)}
	}
	switch h.State {
	case HostActivating:
		resp.Target = target(proto.TargetDispatch, h.Target)
		resp.Target.ManagedReboot = a.Reboot.Managed
		resp.Reason = proto.Reason{Code: h.Reason.Code, Message: h.Reason.Message}
		resp.NextCheckinSeconds = SwitchingCheckinSeconds
	case HostRebooting:
		resp.Target = target(proto.TargetReboot, h.Target)
		resp.Target.Kexec = a.Reboot.Kexec
		resp.Reason = proto.Reason{Code: h.Reason.Code, Message: h.Reason.Message}
		resp.NextCheckinSeconds = SwitchingCheckinSeconds
	case HostRollingBack:
		resp.Target = target(proto.TargetRollback, h.Previous)
		resp.Reason = proto.Reason{Code: h.Reason.Code, Message: h.Reason.Message}
		resp.NextCheckinSeconds = SwitchingCheckinSeconds
	case HostPending, HostSkipped:
		switch {
		case a.stopped():
			resp.Reason = proto.Reason{Code: codes.RolloutStopped, Message: fmt.Sprintf("rollout %s is %s", a.RolloutID, a.RolloutState)}
		case h.Blocked.Code != "":
			resp.Reason = proto.Reason{Code: h.Blocked.Code, Message: h.Blocked.Message}
		default:
			resp.Reason = proto.Reason{Code: codes.Waiting, Message: fmt.Sprintf("waiting in %s (%s)", a.RolloutID, h.State)}
		}
	default:
		resp.Reason = proto.Reason{Code: h.Reason.Code, Message: fmt.Sprintf("%s in %s: %s", h.State, a.RolloutID, h.Reason.Message)}
		if h.State == HostSoaking {
			resp.NextCheckinSeconds = SoakingCheckinSeconds
		}
	}
	return resp
}

// Coming is the closure a host's agent may hold realised ahead of its
// dispatch (rfcs/0006 §Prefetch): the target of a host that is Pending or
// Skipped in an Active rollout, when the host does not run it (current)
// and has not failed it here lately (a host the quarantine gate holds
// would not activate it). ok is false for every other host, a is nil for
// a host no rollout lists. Nothing the reconciler decides depends on it.
func Coming(a *Assignment, current string) (proto.PrefetchTarget, bool) {
	if a == nil || a.RolloutState != RolloutActive {
		return proto.PrefetchTarget{}, false
	}
	h := a.Host
	switch {
	case h.State != HostPending && h.State != HostSkipped,
		h.Target == "", h.Target == current,
		h.Blocked.Gate == codes.Quarantined || h.Blocked.Code == codes.Quarantined:
		return proto.PrefetchTarget{}, false
	}
	return proto.PrefetchTarget{RolloutID: a.RolloutID, Closure: h.Target, WaveIndex: h.Wave, ManifestHash: a.ManifestHash}, true
}

// PrefetchFor is what a host may fetch now, ahead of its dispatch: its
// coming closure (Coming), unless it holds that one prefetched already
// (prefetched, as its agent reports). This is the host that needs one of
// the control plane's fetch slots; ok is false for every other.
func PrefetchFor(a *Assignment, current, prefetched string) (proto.PrefetchTarget, bool) {
	t, ok := Coming(a, current)
	if !ok || t.Closure == prefetched {
		return proto.PrefetchTarget{}, false
	}
	return t, true
}

// stopped reports whether the host's rollout dispatches no more.
func (a Assignment) stopped() bool {
	return a.RolloutState == RolloutHalted || a.RolloutState == RolloutCancelled
}

// Late reports whether a host last seen at lastSeen is late at now: it
// has not checked in within LateAfter, or never did (rule 6). A late
// host counts toward its channel's silent share; its next check-in is one
// a tick needs at once (CheckinUrgent).
func (t Tunables) Late(lastSeen, now time.Time) bool {
	return lastSeen.IsZero() || now.Sub(lastSeen) > t.LateAfter()
}

// EndsWait reports whether a check-in at now from a host that runs
// current ends what its record waits for (rule 8): the first check-in at
// or after the end of its soak (SoakEnd), or, rolling back, one that runs
// its previous closure. a is nil for a host no rollout lists.
func EndsWait(a *Assignment, current string, now time.Time) bool {
	switch {
	case a == nil:
		return false
	case a.Host.State == HostSoaking:
		return !now.Before(a.SoakEnd())
	case a.Host.State == HostRollingBack:
		return current == a.Host.Previous
	case a.Host.State == HostRebooting:
		return current == a.Host.Target
	}
	return false
}

// CheckinUrgent reports whether a check-in must reach a tick at once,
// with the time it was seen, rather than in the next batch of last-seen
// times: the host was late (lastSeen is its previous check-in), or the
// check-in ends what its record waits for (ends: EndsWait, the first time
// the control plane sees it). A status that changed always does.
func (t Tunables) CheckinUrgent(lastSeen, now time.Time, ends bool) bool {
	return t.Late(lastSeen, now) || ends
}

// Heard reports whether a host last seen at lastSeen counts as heard at
// now: it checked in within the offline threshold. A host never seen is
// not heard.
func (t Tunables) Heard(lastSeen, now time.Time) bool {
	return !lastSeen.IsZero() && now.Sub(lastSeen) <= t.offline()
}
