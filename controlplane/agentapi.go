package controlplane

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// SignatureHeader carries a report's signature: standard base64 of the
// host key's ed25519 signature over the exact body bytes.
const SignatureHeader = "X-Nixfleet-Signature"

// checkin is POST /v1/agent/checkin (rfcs/0006 §Check-ins at scale). The
// status is compared with the stored one unless the echoed tag is trusted
// (tagTime), and written only if it differs; a status that changed also
// writes the last-seen time at once, in the same transaction, and so does
// a host coming (back) online; other check-ins only note the time,
// written in the next batch.
// Last-seen times are noted after the status is written, never before: a
// tick must not see a host as seen now with the status it had before.
func (s *Server) checkin(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
	start := time.Now()
	var req proto.CheckinRequest
	if _, e := readJSON(w, r, maxAgentBody, &req); e != nil {
		return e
	}
	if e := s.ids.asHost(c, req.Hostname); e != nil {
		return e
	}
	if req.Wait < 0 || req.Wait > maxFollowWait {
		return codes.Errorf(codes.BadRequest, "wait must be between 0 and %d seconds", maxFollowWait)
	}
	now := s.cfg.Clock.Now()
	st := store.HostStatus{Current: req.Current, Booted: req.Booted, BootID: req.BootID, Probes: req.Probes,
		FailedUnits: req.FailedUnits, Compliance: req.Compliance, Deferred: req.Deferred, Quarantine: req.Quarantine,
		Prefetched: req.Prefetched}
	digest := store.StatusDigest(st)
	prev := s.hub.lastSeen(req.Hostname)
	// A trusted tag keeps its time: the answer's tag expires tagTTL after
	// the last check-in that compared the status with the store.
	stamp, trusted := tagTime(req.StatusTag, digest, now)
	// A host whose check-ins carried another status than the store holds
	// compares it now, whatever its tag: the store lost a write.
	trusted = trusted && !s.hub.takeRecheck(req.Hostname)
	a, ok := s.hub.get(req.Hostname)
	// The check-in that ends a soak, or a rollback on the previous closure
	// (whose status need not have changed: a host whose switch failed
	// never left it), is written at once, once per phase; so is one from
	// a late host (reconciler.CheckinUrgent). One transaction writes the
	// status (when it changed) and the time.
	var fresh bool
	if ok {
		fresh = reconciler.EndsWait(&a, req.Current, now) && !s.hub.soakSeen(req.Hostname, a.Host.Since)
	}
	urgent := s.cfg.Tunables.CheckinUrgent(prev, now, fresh)
	if !trusted || urgent {
		var cmp *store.HostStatus
		if !trusted {
			cmp, stamp = &st, now
		}
		res, err := s.statuses.record(r.Context(), store.StatusWrite{Hostname: req.Hostname, Status: cmp, Seen: now, Said: digest, Urgent: urgent})
		if err != nil {
			return s.internal("recording a check-in", err)
		}
		if res.Written {
			if fresh {
				s.hub.noteSoak(req.Hostname, a.Host.Since)
			}
			s.board.post(wakeTick)
		}
	}
	s.hub.touch(req.Hostname, now, digest)
	resp := s.answer(a, ok)
	// A fetch slot, if the host may fetch its coming closure (prefetch.go):
	// given back at once by a host that reports it fetched, and answered
	// at once when it was just taken, from the assignment answered.
	prefetch, taken := s.prefetch.answer(req.Hostname, a, ok, req.Current, req.Prefetched)
	s.m.checkin.Observe(time.Since(start).Seconds())
	finish := func(resp proto.CheckinResponse, prefetch *proto.PrefetchTarget) proto.CheckinResponse {
		resp.Prefetch = prefetch
		resp.ServerTime = s.cfg.Clock.Now().UTC().Format(time.RFC3339)
		resp.StatusTag = makeTag(digest, stamp)
		return resp
	}
	if req.Wait > 0 && sameTarget(resp.Target, req.Known) && !taken {
		// The answer after the wait: the assignment then.
		later := func() proto.CheckinResponse {
			a, ok := s.hub.get(req.Hostname)
			prefetch, _ := s.prefetch.answer(req.Hostname, a, ok, req.Current, req.Prefetched)
			return finish(s.answer(a, ok), prefetch)
		}
		// A long-poll is held for at most the check-in period, so that a
		// connected agent is heard well within the late threshold
		// (rfcs/0003 rule 6) whatever wait it asks for.
		key, d := activationKey(a, ok), min(time.Duration(req.Wait)*time.Second, s.cfg.Tunables.CheckinPeriod())
		if s.lot.park(w, r, func() any { return later() }, func(fire func()) (func(), bool) {
			return s.hub.park(req.Hostname, key, d, fire)
		}) {
			return errParked
		}
		s.hub.wait(r.Context(), req.Hostname, key, d)
		writeJSON(w, http.StatusOK, later())
		return nil
	}
	writeJSON(w, http.StatusOK, finish(resp, prefetch))
	return nil
}

// Status tags: "<unix seconds>.<status digest>" (rfcs/0007 §Status tags).
// A tag names the status the server held for a host when it last compared
// that host's status with the store, and its time is when it did. Only the
// host's own check-ins and probe reports change that part of its status,
// so a host that echoes the tag of its last answer with the same status
// needs no read and no write.
//
// Invariant: every host's status is compared with the store (read under
// the row lock, written if it differs) at least once per tagTTL, however
// often it checks in: no check-in trusts a comparison older than tagTTL,
// and the first one after that compares. A tag is stamped with the
// current time only by a request that compared (a check-in that did not
// trust its tag, a probe report); a check-in whose tag is trusted is
// answered with the tag's own time, so an echoed tag expires tagTTL after
// the last comparison. A status the store lost or got back from an older
// backup is thus put right within tagTTL and one check-in. The bound is on
// one clock: replicas' skew (a tag may be up to a minute in the future)
// adds to it.
const tagTTL = 10 * time.Minute

// tagSkew is how far in the future a tag may be and still be trusted.
const tagSkew = time.Minute

func makeTag(digest string, at time.Time) string {
	return strconv.FormatInt(at.Unix(), 10) + "." + digest
}

// tagTime reports whether a tag is trusted at now (it names digest, and
// its time is at most tagTTL in the past and tagSkew in the future), and
// its time, the time its answer's tag must keep. A tag from the future is
// taken as stamped now, so that its trust ends at most tagTTL from now.
func tagTime(tag, digest string, now time.Time) (time.Time, bool) {
	at, d, ok := strings.Cut(tag, ".")
	if !ok || d != digest || digest == "" {
		return time.Time{}, false
	}
	sec, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	t := time.Unix(sec, 0)
	age := now.Sub(t)
	if age < -tagSkew || age > tagTTL {
		return time.Time{}, false
	}
	if t.After(now) {
		t = now
	}
	return t, true
}

// sameTarget reports whether the target the server has is the one the
// agent knows.
func sameTarget(t *proto.Target, known *proto.TargetRef) bool {
	if t == nil || known == nil {
		return t == nil && known == nil
	}
	return t.RolloutID == known.RolloutID && t.Closure == known.Closure && t.Token == known.Token
}

// answer is what a host's agent is told (reconciler.AgentAnswer).
func (s *Server) answer(a reconciler.Assignment, ok bool) proto.CheckinResponse {
	if !ok {
		return reconciler.AgentAnswer(nil, s.cfg.Tunables)
	}
	return reconciler.AgentAnswer(&a, s.cfg.Tunables)
}

// confirm is POST /v1/agent/confirm. A confirm is accepted only for the
// host's current activation (rollout, closure and token), inside the
// confirm window; a retry of an accepted confirm is accepted again. Any
// other is refused with 410 and changes nothing: the agent rolls back.
func (s *Server) confirm(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
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
	now := s.cfg.Clock.Now()
	gone := func(format string, args ...any) *codes.Error {
		return codes.Errorf(codes.ConfirmRejected, format, args...)
	}
	switch {
	case a == nil:
		return gone("%s is in no rollout", req.Hostname)
	case a.RolloutID != req.RolloutID || a.Host.Target != req.Closure:
		return gone("%s's current activation is %s in %s, not %s in %s", req.Hostname, a.Host.Target, a.RolloutID, req.Closure, req.RolloutID)
	}
	switch a.Host.State {
	case reconciler.HostActivating, reconciler.HostRebooting:
		// A reboot's confirm comes from the new boot, by its boot timeout
		// (rfcs/0003 rule 17).
		if a.Token() != req.Token {
			return gone("the token is not the current activation's (a replayed or outdated confirm)")
		}
		deadline := a.ConfirmBy(s.cfg.Tunables)
		if now.After(deadline) {
			return gone("the confirm window closed at %s", deadline.UTC().Format(time.RFC3339))
		}
		act := reconciler.Activation{RolloutID: a.RolloutID, Closure: a.Host.Target, Outcome: reconciler.OutcomeConfirmed, At: now}
		if _, err := s.statuses.record(r.Context(), store.StatusWrite{Hostname: req.Hostname, Activation: &act}); err != nil {
			return s.internal("recording a confirm", err)
		}
		s.board.post(wakeTick)
	case reconciler.HostSoaking, reconciler.HostConverged:
		// Past the confirm already, on this very target: the agent retries
		// after a lost answer. The tick that moved the host on changed the
		// token, so it is not compared: refusing would make the agent roll
		// back a switch the control plane has accepted. Nothing is written.
	default:
		return gone("%s is %s in %s", req.Hostname, a.Host.State, a.RolloutID)
	}
	writeJSON(w, http.StatusOK, proto.ConfirmResponse{Confirmed: true})
	return nil
}

// report is POST /v1/agent/report: an activation outcome, signed by the
// host key.
func (s *Server) report(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
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
			return codes.Errorf(codes.BadSignature, "the report is not signed by %s's host key (header %s)", req.Hostname, SignatureHeader)
		}
	}
	if req.Kind == proto.ReportProbeResults {
		return s.probeReport(w, r, req)
	}
	outcome := proto.ReportOutcome(req.Kind)
	if outcome == "" {
		return codes.Errorf(codes.BadRequest, "unknown report kind %q", req.Kind)
	}
	if req.RolloutID == "" || req.Closure == "" {
		return codes.Errorf(codes.BadRequest, "a report needs rolloutId and closure")
	}
	detail := req.Detail
	if req.Code != "" {
		detail = req.Code + ": " + detail
	}
	act := reconciler.Activation{RolloutID: req.RolloutID, Closure: req.Closure, Outcome: outcome, At: s.cfg.Clock.Now(),
		Code: req.Code, Detail: detail}
	if _, err := s.statuses.record(r.Context(), store.StatusWrite{Hostname: req.Hostname, Activation: &act}); err != nil {
		return s.internal("recording a report", err)
	}
	s.board.post(wakeTick)
	writeJSON(w, http.StatusOK, proto.ReportResponse{Recorded: true})
	return nil
}

// probeReport records health results that changed between check-ins,
// and answers the tag of the status now held. RecordProbes reads the
// stored status under the row lock, so the tag is stamped now.
func (s *Server) probeReport(w http.ResponseWriter, r *http.Request, req proto.ReportRequest) *codes.Error {
	if req.Probes == nil {
		return codes.Errorf(codes.BadRequest, "a probe_results report needs probes")
	}
	now := s.cfg.Clock.Now()
	st, changed, err := s.st.RecordProbes(r.Context(), req.Hostname, *req.Probes, req.FailedUnits)
	if err != nil {
		return s.internal("recording probe results", err)
	}
	if changed {
		// The report carries part of a status: its time is recorded,
		// not as a time the host said the whole of it.
		if _, err := s.st.TouchHosts(r.Context(), map[string]store.Seen{req.Hostname: {At: now}}); err != nil {
			return s.internal("recording probe results", err)
		}
		s.board.post(wakeTick)
	}
	s.hub.touch(req.Hostname, now, "")
	writeJSON(w, http.StatusOK, proto.ReportResponse{Recorded: true, StatusTag: makeTag(store.StatusDigest(st), now)})
	return nil
}

// manifestFile is GET /v1/rollouts/{id}/manifest and …/manifest.sig: the
// bytes exactly as signed, for hosts and operators.
func (s *Server) manifestFile(sig bool) handler {
	return func(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
		if c.host == "" && c.operator == nil && !c.dev {
			return codes.Errorf(codes.Forbidden, "manifests are for hosts and operators")
		}
		id := r.PathValue("id")
		if !proto.Nameable(id) {
			return codes.Errorf(codes.NotFound, "no rollout %q", id)
		}
		m, err := s.st.Manifest(r.Context(), id)
		if errors.Is(err, store.ErrNotFound) {
			return codes.Errorf(codes.NotFound, "no rollout %q", id)
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
func (s *Server) internal(what string, err error) *codes.Error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return codes.Errorf(codes.Unavailable, "%s: %v", what, err)
	}
	s.log.Error(what, "err", err)
	return codes.Errorf(codes.Internal, "%s failed; see the control plane's log", what)
}
