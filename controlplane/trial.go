package controlplane

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// maxTrialBody bounds a trial's request: 16 analyses of 4 KiB queries.
const maxTrialBody = 128 << 10

// analysisTrial is POST /v1/analysis/trials (nixfleet analysis run,
// rfcs/0006 §Canary analysis): it measures analyses once, now, for a wave
// of a channel's latest rollout, on the control plane's Prometheus
// sources, and judges each as a rollout's tick would (a comparison
// between the wave's hosts and the later waves' hosts heard now), so that
// an operator can tune a policy before a release. It records nothing. It
// sends queries with the control plane's credentials: operators and
// approvers only.
func (s *Server) analysisTrial(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
	if e := may(c, true); e != nil {
		return e
	}
	var req proto.AnalysisTrialRequest
	if _, e := readJSON(w, r, maxTrialBody, &req); e != nil {
		return e
	}
	if len(req.Analyses) > proto.MaxTrialAnalyses {
		return codes.Errorf(codes.BadRequest, "%d analyses, at most %d", len(req.Analyses), proto.MaxTrialAnalyses)
	}
	if problems := manifest.AnalysesProblems(req.Analyses); len(problems) > 0 {
		return codes.Errorf(codes.BadRequest, "the analyses are not valid (rfcs/0001 §2.3): %s", strings.Join(problems, "; "))
	}
	latest, err := s.st.LatestRollouts(r.Context())
	if err != nil {
		return s.internal("reading the latest rollouts", err)
	}
	id, ok := latest[req.Channel]
	if !ok {
		return codes.Errorf(codes.NotFound, "channel %q has no rollout: a trial measures the hosts of a channel's latest rollout", req.Channel)
	}
	ro, err := s.st.Rollout(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return codes.Errorf(codes.NotFound, "rollout %s is gone", id)
	}
	if err != nil {
		return s.internal("reading a rollout", err)
	}
	if req.Wave < 0 || req.Wave >= len(ro.Waves) {
		return codes.Errorf(codes.BadRequest, "wave %d: rollout %s has waves 0 to %d", req.Wave, id, len(ro.Waves)-1)
	}
	specs := req.Analyses
	if len(specs) == 0 {
		specs = ro.HealthGate.Analysis
	}
	if len(specs) == 0 {
		return codes.Errorf(codes.BadRequest, "channel %q's policy has no analysis: give the analyses to measure", req.Channel)
	}
	now := s.cfg.Clock.Now().UTC()
	var names []string
	for _, h := range ro.Hosts {
		if h.Wave > req.Wave {
			names = append(names, h.Hostname)
		}
	}
	seen, err := s.st.LastSeen(r.Context(), names)
	if err != nil {
		return s.internal("reading when hosts were seen", err)
	}
	var fleet *proto.FleetResolved // the channel's, for baselineTags; read when one asks
	out := proto.AnalysisTrial{Channel: req.Channel, RolloutID: ro.ID, Wave: req.Wave, At: now, Results: []proto.TrialResult{}}
	for _, spec := range specs {
		mr := reconciler.MeasureRequest{RolloutID: ro.ID, Wave: req.Wave, Analysis: spec.Name, Seq: 1}
		if spec.Compare != nil {
			tags := spec.Compare.BaselineTags
			if len(tags) > 0 && fleet == nil {
				f, e := s.channelFleet(r, req.Channel)
				if e != nil {
					return e
				}
				fleet = f
			}
			mr.Canary, mr.Baseline = reconciler.TrialGroups(&ro, req.Wave, func(h string) bool {
				return !s.cfg.Tunables.Late(seen[h], now) && (len(tags) == 0 || reconciler.HasTags(fleet, h, tags))
			})
		}
		var m reconciler.Measurement
		if client, ok := s.analyze.prom.Client(spec.Source); ok {
			m = takeMeasurement(r.Context(), client, &ro, mr, spec, now, time.Time{})
			if r.Context().Err() != nil {
				return codes.Errorf(codes.Unavailable, "the trial was cut short: %v", r.Context().Err())
			}
		} else {
			m = reconciler.Measurement{Query: reconciler.AnalysisQuery(&ro, req.Wave, spec),
				Error: reconciler.SourceUnknownError(unknownSource(spec, s.analyze.prom.Names()))}
		}
		outcome, msg := reconciler.JudgeMeasurement(spec, m)
		res := proto.TrialResult{Analysis: spec.Name, Outcome: string(outcome), Message: msg, Query: m.Query,
			Canary: mr.Canary, Baseline: mr.Baseline}
		if m.Compared != nil {
			res.CanaryValues, res.BaselineValues = m.Compared.Canary, m.Compared.Baseline
		}
		out.Results = append(out.Results, res)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// channelFleet is the fleet of a channel's current release.
func (s *Server) channelFleet(r *http.Request, channel string) (*proto.FleetResolved, *codes.Error) {
	rs, err := s.st.Releases(r.Context())
	if err != nil {
		return nil, s.internal("reading the releases", err)
	}
	for _, rel := range rs {
		if rel.Channel != channel {
			continue
		}
		if rel.Fleet != nil {
			return rel.Fleet, nil
		}
		f, err := proto.DecodeFleetResolved(rel.FleetBody)
		if err != nil {
			return nil, s.internal("decoding a channel's fleet", err)
		}
		return f, nil
	}
	return nil, codes.Errorf(codes.NotFound, "channel %q has no release", channel)
}
