package controlplane

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// SignatureHeader carries a report's signature: standard base64 of the
// host key's ed25519 signature over the exact body bytes.
const SignatureHeader = "X-Nixfleet-Signature"

// defaultNextCheckin is how often an idle agent checks in.
const defaultNextCheckin = 30

// checkin is POST /v1/agent/checkin.
func (s *Server) checkin(w http.ResponseWriter, r *http.Request, c client) *apiError {
	start := time.Now()
	var req proto.CheckinRequest
	if _, e := readJSON(w, r, maxAgentBody, &req); e != nil {
		return e
	}
	if e := s.ids.asHost(c, req.Hostname); e != nil {
		return e
	}
	if req.Wait < 0 || req.Wait > maxFollowWait {
		return errorf(http.StatusBadRequest, CodeBadRequest, "wait must be between 0 and %d seconds", maxFollowWait)
	}
	now := s.cfg.Now()
	if prev := s.hub.touch(req.Hostname, now); prev.IsZero() || now.Sub(prev) > s.offlineThreshold()/2 {
		// A host coming (back) online is a change the reconciler must see
		// at once: write its last-seen time now, not in the next batch.
		if err := s.st.TouchHosts(r.Context(), map[string]time.Time{req.Hostname: now}); err != nil {
			return s.internal("recording a check-in", err)
		}
		s.ticker.kick()
	}
	st := store.HostStatus{Current: req.Current, Booted: req.Booted, BootID: req.BootID, Probes: req.Probes,
		FailedUnits: req.FailedUnits, Compliance: req.Compliance, Deferred: req.Deferred, Quarantine: req.Quarantine}
	if digest := statusDigest(st); s.statusCache.get(req.Hostname, now) != digest {
		// Written only when it changed: most check-ins cost no write.
		changed, err := s.st.RecordStatus(r.Context(), req.Hostname, st)
		if err != nil {
			return s.internal("recording a status", err)
		}
		s.statusCache.put(req.Hostname, digest, now)
		if changed {
			s.ticker.kick()
		}
	}
	a, ok := s.hub.get(req.Hostname)
	resp := s.targetFor(a, ok)
	s.m.checkin.Observe(time.Since(start).Seconds())
	if req.Wait > 0 && sameTarget(resp.Target, req.Known) {
		s.hub.wait(r.Context(), req.Hostname, activationKey(a, ok), time.Duration(req.Wait)*time.Second)
		a, ok = s.hub.get(req.Hostname)
		resp = s.targetFor(a, ok)
	}
	resp.ServerTime = s.cfg.Now().UTC().Format(time.RFC3339)
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// statusDigest fingerprints a status for the in-memory change check.
func statusDigest(st store.HostStatus) [32]byte {
	b, _ := json.Marshal(st)
	return sha256.Sum256(b)
}

// digests remembers each host's last status digest on this replica, for
// digestTTL: another replica may have recorded a different status since,
// so an old entry is checked against the store again.
type digests struct {
	mu sync.Mutex
	m  map[string]digestEntry
}

type digestEntry struct {
	sum [32]byte
	at  time.Time
}

const digestTTL = 30 * time.Second

func (d *digests) get(host string, now time.Time) [32]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.m[host]
	if now.Sub(e.at) > digestTTL {
		return [32]byte{}
	}
	return e.sum
}

func (d *digests) put(host string, v [32]byte, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]digestEntry{}
	}
	d.m[host] = digestEntry{v, now}
}

// sameTarget reports whether the target the server has is the one the
// agent knows.
func sameTarget(t *proto.Target, known *proto.TargetRef) bool {
	if t == nil || known == nil {
		return t == nil && known == nil
	}
	return t.RolloutID == known.RolloutID && t.Closure == known.Closure && t.Token == known.Token
}

// targetFor turns a host's assignment into what its agent must do.
func (s *Server) targetFor(a store.Assignment, ok bool) proto.CheckinResponse {
	resp := proto.CheckinResponse{NextCheckinSeconds: defaultNextCheckin}
	if !ok {
		resp.Reason = proto.Reason{Code: "not_in_rollout", Message: "no rollout includes this host yet"}
		return resp
	}
	h := a.Host
	confirmBy := h.Since.Add(confirmWindow(s.cfg.Tunables)).UTC().Format(time.RFC3339)
	switch h.State {
	case reconciler.HostActivating:
		resp.Target = &proto.Target{Kind: proto.TargetDispatch, RolloutID: a.RolloutID, Closure: h.Target, WaveIndex: h.Wave,
			ManifestHash: a.ManifestHash, Token: token(a), ConfirmBy: confirmBy}
		resp.Reason = proto.Reason{Code: h.Reason.Code, Message: h.Reason.Message}
		resp.NextCheckinSeconds = 5
	case reconciler.HostRollingBack:
		resp.Target = &proto.Target{Kind: proto.TargetRollback, RolloutID: a.RolloutID, Closure: h.Previous, WaveIndex: h.Wave,
			ManifestHash: a.ManifestHash, Token: token(a), ConfirmBy: confirmBy}
		resp.Reason = proto.Reason{Code: h.Reason.Code, Message: h.Reason.Message}
		resp.NextCheckinSeconds = 5
	case reconciler.HostPending, reconciler.HostSkipped:
		switch {
		case a.RolloutState == reconciler.RolloutHalted || a.RolloutState == reconciler.RolloutCancelled:
			resp.Reason = proto.Reason{Code: reconciler.GateRolloutStopped, Message: fmt.Sprintf("rollout %s is %s", a.RolloutID, a.RolloutState)}
		case h.Blocked.Code != "":
			resp.Reason = proto.Reason{Code: h.Blocked.Code, Message: h.Blocked.Message}
		default:
			resp.Reason = proto.Reason{Code: "waiting", Message: fmt.Sprintf("waiting in %s (%s)", a.RolloutID, h.State)}
		}
	default:
		resp.Reason = proto.Reason{Code: h.Reason.Code, Message: fmt.Sprintf("%s in %s: %s", h.State, a.RolloutID, h.Reason.Message)}
		if h.State == reconciler.HostSoaking {
			resp.NextCheckinSeconds = 10
		}
	}
	return resp
}

func (s *Server) offlineThreshold() time.Duration {
	if t := s.cfg.Tunables.OfflineThresholdSeconds; t > 0 {
		return time.Duration(t) * time.Second
	}
	return reconciler.DefaultOfflineThreshold
}

func confirmWindow(t reconciler.Tunables) time.Duration {
	if t.ConfirmWindowSeconds > 0 {
		return time.Duration(t.ConfirmWindowSeconds) * time.Second
	}
	return reconciler.DefaultConfirmWindow
}

// confirm is POST /v1/agent/confirm. A confirm is accepted only for the
// host's current activation (rollout, closure and token), inside the
// confirm window; a retry of an accepted confirm is accepted again. Any
// other is refused with 410 and changes nothing: the agent rolls back.
func (s *Server) confirm(w http.ResponseWriter, r *http.Request, c client) *apiError {
	var req proto.ConfirmRequest
	if _, e := readJSON(w, r, maxSmallBody, &req); e != nil {
		return e
	}
	if e := s.ids.asHost(c, req.Hostname); e != nil {
		return e
	}
	rec, err := s.st.Host(r.Context(), req.Hostname)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return s.internal("reading a host", err)
	}
	a := rec.Assignment
	now := s.cfg.Now()
	gone := func(format string, args ...any) *apiError {
		return errorf(http.StatusGone, CodeConfirmRejected, format, args...)
	}
	switch {
	case a == nil:
		return gone("%s is in no rollout", req.Hostname)
	case a.RolloutID != req.RolloutID || a.Host.Target != req.Closure:
		return gone("%s's current activation is %s in %s, not %s in %s", req.Hostname, a.Host.Target, a.RolloutID, req.Closure, req.RolloutID)
	case token(*a) != req.Token:
		return gone("the token is not the current activation's (a replayed or outdated confirm)")
	}
	switch a.Host.State {
	case reconciler.HostActivating:
		deadline := a.Host.Since.Add(confirmWindow(s.cfg.Tunables))
		if now.After(deadline) {
			return gone("the confirm window closed at %s", deadline.UTC().Format(time.RFC3339))
		}
		act := reconciler.Activation{RolloutID: a.RolloutID, Closure: a.Host.Target, Outcome: reconciler.OutcomeConfirmed, At: now}
		if e := s.alive(r.Context(), req.Hostname, now); e != nil {
			return e
		}
		if err := s.st.RecordActivation(r.Context(), req.Hostname, act); err != nil {
			return s.internal("recording a confirm", err)
		}
		s.ticker.kick()
	case reconciler.HostSoaking, reconciler.HostConverged:
		// Confirmed already: the agent retries after a lost response.
	default:
		return gone("%s is %s in %s", req.Hostname, a.Host.State, a.RolloutID)
	}
	writeJSON(w, http.StatusOK, proto.ConfirmResponse{Confirmed: true})
	return nil
}

// alive records, before an activation outcome, that the host was seen
// now: the tick that reads the outcome must not find the host's last
// check-in older than it (a soak with no minutes ends at the confirm).
func (s *Server) alive(ctx context.Context, host string, now time.Time) *apiError {
	s.hub.touch(host, now)
	if err := s.st.TouchHosts(ctx, map[string]time.Time{host: now}); err != nil {
		return s.internal("recording a sign of life", err)
	}
	return nil
}

// reportOutcomes maps report kinds to activation outcomes.
var reportOutcomes = map[string]string{
	proto.ReportActivationStarted: reconciler.OutcomeStarted,
	proto.ReportActivationFailed:  reconciler.OutcomeFailed,
	proto.ReportDeferred:          reconciler.OutcomeDeferred,
	proto.ReportRolledBack:        reconciler.OutcomeRolledBack,
	proto.ReportManifestRejected:  reconciler.OutcomeManifestRejected,
}

// report is POST /v1/agent/report: an activation outcome, signed by the
// host key.
func (s *Server) report(w http.ResponseWriter, r *http.Request, c client) *apiError {
	var req proto.ReportRequest
	body, e := readJSON(w, r, maxSmallBody, &req)
	if e != nil {
		return e
	}
	if e := s.ids.asHost(c, req.Hostname); e != nil {
		return e
	}
	if !c.dev {
		key, ok := s.ids.hostKey(req.Hostname)
		sig, err := base64.StdEncoding.DecodeString(r.Header.Get(SignatureHeader))
		if !ok || err != nil || !ed25519.Verify(key, body, sig) {
			return errorf(http.StatusForbidden, CodeBadSignature, "the report is not signed by %s's host key (header %s)", req.Hostname, SignatureHeader)
		}
	}
	outcome, ok := reportOutcomes[req.Kind]
	if !ok {
		return errorf(http.StatusBadRequest, CodeBadRequest, "unknown report kind %q", req.Kind)
	}
	if req.RolloutID == "" || req.Closure == "" {
		return errorf(http.StatusBadRequest, CodeBadRequest, "a report needs rolloutId and closure")
	}
	detail := req.Detail
	if req.Code != "" {
		detail = req.Code + ": " + detail
	}
	now := s.cfg.Now()
	if e := s.alive(r.Context(), req.Hostname, now); e != nil {
		return e
	}
	act := reconciler.Activation{RolloutID: req.RolloutID, Closure: req.Closure, Outcome: outcome, At: now, Detail: detail}
	if err := s.st.RecordActivation(r.Context(), req.Hostname, act); err != nil {
		return s.internal("recording a report", err)
	}
	s.ticker.kick()
	writeJSON(w, http.StatusOK, proto.ReportResponse{Recorded: true})
	return nil
}

// manifestFile is GET /v1/rollouts/{id}/manifest and …/manifest.sig: the
// bytes exactly as signed, for hosts and operators.
func (s *Server) manifestFile(sig bool) handler {
	return func(w http.ResponseWriter, r *http.Request, c client) *apiError {
		if c.host == "" && c.operator == nil && !c.dev {
			return errorf(http.StatusForbidden, CodeForbidden, "manifests are for hosts and operators")
		}
		m, err := s.st.Manifest(r.Context(), r.PathValue("id"))
		if errors.Is(err, store.ErrNotFound) {
			return errorf(http.StatusNotFound, CodeNotFound, "no rollout %q", r.PathValue("id"))
		}
		if err != nil {
			return s.internal("reading a manifest", err)
		}
		body, ctype := m.Body, "application/json"
		if sig {
			body, ctype = m.Sig, "application/octet-stream"
		}
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("X-Nixfleet-Manifest-Hash", m.Hash)
		_, _ = w.Write(body)
		return nil
	}
}

// internal logs an unexpected error and answers 500 (503 when the
// request's context ended).
func (s *Server) internal(what string, err error) *apiError {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "%s: %v", what, err)
	}
	s.log.Error(what, "err", err)
	return errorf(http.StatusInternalServerError, CodeInternal, "%s failed; see the control plane's log", what)
}
