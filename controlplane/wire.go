package controlplane

import (
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// The operator API answers with proto's types; these turn the reconciler's
// records into them. Each keeps every member and the difference between a
// nil and an empty list, so that an answer is the JSON the reconciler's
// record would encode to (wire_internal_test.go checks it member by
// member). Records whose members have the same types convert directly,
// and the compiler checks those.

func wireReason(r reconciler.Reason) proto.DecisionReason { return proto.DecisionReason(r) }

// wireRollout is a rollout without its hosts ("hosts": null), or with them.
func wireRollout(r reconciler.Rollout, withHosts bool) proto.Rollout {
	out := proto.Rollout{
		ID: r.ID, Channel: r.Channel, Ref: r.Ref, State: string(r.State), Wave: r.Wave, WavePhase: string(r.WavePhase),
		OpenedAt: r.OpenedAt, WaveStartedAt: r.WaveStartedAt, UpdatedAt: r.UpdatedAt, ProgressAt: r.ProgressAt,
		Reason: wireReason(r.Reason), ManifestHash: r.ManifestHash, FailuresForgiven: r.FailuresForgiven,
		HealthGate: r.HealthGate, OnHealthFailure: r.OnHealthFailure, ComplianceMode: r.ComplianceMode,
		Frameworks: r.Frameworks, Budgets: r.Budgets,
	}
	if r.Waves != nil {
		out.Waves = make([]proto.RolloutWave, len(r.Waves))
		for i, w := range r.Waves {
			out.Waves[i] = proto.RolloutWave(w)
		}
	}
	out.Windows = r.Windows
	for _, hw := range r.HostWindows {
		out.HostWindows = append(out.HostWindows, proto.RolloutHostWindows(hw))
	}
	out.Approvals, out.FreezeBreak, out.Reboot = r.Approvals, r.FreezeBreak, r.Reboot
	for _, a := range r.Analyses {
		out.Analyses = append(out.Analyses, wireAnalysisRun(a))
	}
	if r.Edges != nil {
		out.Edges = make([]proto.Edge, len(r.Edges))
		for i, e := range r.Edges {
			out.Edges[i] = proto.Edge{Gates: e.Gates, Gated: e.Gated}
		}
	}
	if withHosts && r.Hosts != nil {
		out.Hosts = make([]proto.RolloutHost, len(r.Hosts))
		for i, h := range r.Hosts {
			out.Hosts[i] = wireRolloutHost(h)
		}
	}
	return out
}

func wireAnalysisRun(a reconciler.AnalysisRun) proto.AnalysisRun {
	return proto.AnalysisRun{Wave: a.Wave, Name: a.Name, Outcome: string(a.Outcome), StartedAt: a.StartedAt, EndedAt: a.EndedAt,
		Measured: a.Measured, Forgiven: a.Forgiven, Successful: a.Successful, Failed: a.Failed, Inconclusive: a.Inconclusive,
		LastAt: a.LastAt, Last: wireReason(a.Last)}
}

func wireRolloutHost(h reconciler.RolloutHost) proto.RolloutHost {
	return proto.RolloutHost{Hostname: h.Hostname, Wave: h.Wave, Target: h.Target, State: string(h.State), Since: h.Since,
		Previous: h.Previous, Reason: wireReason(h.Reason), Blocked: wireReason(h.Blocked), Budgets: h.Budgets}
}

func wireSituation(s reconciler.Situation) proto.Situation {
	out := proto.Situation{Code: s.Code, Message: s.Message, Moves: s.Moves, Next: s.Next}
	if !s.Until.IsZero() {
		u := s.Until.UTC()
		out.Until = &u
	}
	return out
}

func wireObserved(o reconciler.ObservedHost) proto.ObservedHost {
	out := proto.ObservedHost{LastSeen: o.LastSeen, StatusAt: o.StatusAt, Current: o.Current, Booted: o.Booted, Probes: o.Probes,
		FailedUnits: o.FailedUnits, Compliance: o.Compliance, Deferred: o.Deferred, Quarantine: o.Quarantine,
		Prefetched: o.Prefetched}
	if o.Activation != nil {
		a := proto.Activation(*o.Activation)
		out.Activation = &a
	}
	return out
}

func wireIntentResult(r *reconciler.IntentResult) *proto.IntentResult {
	if r == nil {
		return nil
	}
	return &proto.IntentResult{IntentID: r.IntentID, Accepted: r.Accepted, Reason: wireReason(r.Reason)}
}
