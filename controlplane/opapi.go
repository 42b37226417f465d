package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// summarize is a rollout read whole as the dashboard's rollout page
// (with its hosts, each with its situation) and /v1/status (without)
// show it: its hosts counted by state and wave, those that wait for a
// gate the fleet clears by itself counted by gate, the next step of a
// halted rollout, and when its current wave's soak ends (totals). latest
// says whether it is its channel's latest rollout.
func (s *Server) summarize(ctx context.Context, r reconciler.Rollout, withHosts, latest bool) (proto.Rollout, error) {
	out := wireRollout(r, withHosts)
	out.Next = reconciler.NextStep(r)
	now := s.cfg.Clock.Now()
	s.totals(&out, r, latest, groupHosts(r.Hosts), now)
	if !withHosts || r.Hosts == nil {
		return out, nil
	}
	return out, s.situateHosts(ctx, &out, r, latest, now)
}

// latestIDs returns the id of each channel's latest rollout.
func (s *Server) latestIDs(r *http.Request) (map[string]string, *codes.Error) {
	out, err := s.st.LatestRollouts(r.Context())
	if err != nil {
		return nil, s.internal("listing rollouts", err)
	}
	return out, nil
}

// rolloutView is a rollout with its hosts, each with its situation, as
// the dashboard's rollout page shows it, and whether it is its channel's
// latest.
func (s *Server) rolloutView(r *http.Request, ro reconciler.Rollout) (proto.Rollout, bool, *codes.Error) {
	latestIDs, e := s.latestIDs(r)
	if e != nil {
		return proto.Rollout{}, false, e
	}
	latest := latestIDs[ro.Channel] == ro.ID
	sum, err := s.summarize(r.Context(), ro, true, latest)
	if err != nil {
		return sum, latest, s.internal("reading hosts", err)
	}
	return sum, latest, nil
}

// rollout reads the rollout the path names, with its hosts.
func (s *Server) rollout(r *http.Request) (reconciler.Rollout, *codes.Error) {
	return s.readRollout(r, s.st.Rollout)
}

// rolloutHead reads the header of the rollout the path names: enough to
// know that it exists, its channel and its state.
func (s *Server) rolloutHead(r *http.Request) (reconciler.Rollout, *codes.Error) {
	return s.readRollout(r, s.st.RolloutHeader)
}

func (s *Server) readRollout(r *http.Request, read func(context.Context, string) (reconciler.Rollout, error)) (reconciler.Rollout, *codes.Error) {
	id := r.PathValue("id")
	if !proto.Nameable(id) {
		return reconciler.Rollout{}, codes.Errorf(codes.NotFound, "no rollout %q", id)
	}
	ro, err := read(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return ro, codes.Errorf(codes.NotFound, "no rollout %q", id)
	}
	if err != nil {
		return ro, s.internal("reading a rollout", err)
	}
	return ro, nil
}

// rolloutEvents is GET /v1/rollouts/{id}/events[?after=ID&host=H&limit=N&follow=1].
// With follow, events stream as JSON lines until the rollout is terminal
// and nothing new came for a second, or the client goes away. The id may
// also be that of a ref the release log holds that has not opened (or
// never will): its events are served, and a stream of them ends as a
// terminal rollout's does.
func (s *Server) rolloutEvents(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
	if e := may(c, false); e != nil {
		return e
	}
	ro, e := s.rolloutHead(r)
	if e != nil && e.Code == codes.NotFound {
		// A ref that never opened (superseded, waiting, refused as a
		// replay) has events under its rollout id too: serve them, with a
		// stream that ends as a terminal rollout's does.
		if seen, err := s.st.ReleaseLog(r.Context(), store.ReleaseQuery{RolloutID: r.PathValue("id")}); err == nil && len(seen) > 0 {
			ro, e = reconciler.Rollout{ID: r.PathValue("id")}, nil
		}
	}
	if e != nil {
		return e
	}
	q, e := eventQuery(r)
	if e != nil {
		return e
	}
	q.RolloutID = ro.ID
	until := r.URL.Query().Get("until")
	if until != "" && until != "terminal" {
		return codes.Errorf(codes.BadRequest, "until must be terminal or absent")
	}
	return s.serveEvents(w, r, q, func() bool {
		// The header says it all: a follower reads no host.
		cur, err := s.st.RolloutHeader(r.Context(), ro.ID)
		if err != nil || until == "terminal" || !cur.State.Terminal() {
			return err != nil || cur.State.Terminal()
		}
		// Terminal, but a rollback or a catch-up's failure may reopen the
		// channel's latest rollout: follow it until a newer one opens.
		latest, e := s.latestIDs(r)
		return e != nil || cur.State.Over(latest[cur.Channel] == cur.ID)
	})
}

// fleetEvents is GET /v1/events[?rollout=ID&channel=C&host=H&after=ID&limit=N&follow=1]:
// the whole journal, including what belongs to no rollout (a release
// refused by verification). With follow, it streams until the client goes
// away.
func (s *Server) fleetEvents(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
	if e := may(c, false); e != nil {
		return e
	}
	q, e := eventQuery(r)
	if e != nil {
		return e
	}
	q.RolloutID, q.Channel = r.URL.Query().Get("rollout"), r.URL.Query().Get("channel")
	return s.serveEvents(w, r, q, func() bool { return false })
}

// eventQuery reads the query parameters both event endpoints share.
func eventQuery(r *http.Request) (proto.EventQuery, *codes.Error) {
	q := proto.EventQuery{Host: r.URL.Query().Get("host")}
	for _, k := range []string{"host", "rollout", "channel"} {
		if v := r.URL.Query().Get(k); !proto.Nameable(v) {
			return q, codes.Errorf(codes.BadRequest, "%s %q has a control character or is not UTF-8", k, v)
		}
	}
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return q, codes.Errorf(codes.BadRequest, "after must be an event id")
		}
		q.AfterID = n
	}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return q, codes.Errorf(codes.BadRequest, "limit must be between 1 and 10000")
		}
		q.Limit = n
	}
	if v := r.URL.Query().Get("follow"); v != "" && v != "1" {
		return q, codes.Errorf(codes.BadRequest, "follow must be 1 or absent")
	}
	return q, nil
}

// serveEvents answers the events of q as {"events": […]}, or, with
// follow=1, streams them as JSON lines: new events are sent as they are
// written (by any replica), and the stream ends when over() says so after
// a quiet second, or when the client goes away. A stream reads the
// journal only when the hub has seen events past its last read (the
// hub's event mark), or to make sure of the end: a quiet stream costs
// over() once a second, and no read of the journal.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request, q proto.EventQuery, over func() bool) *codes.Error {
	if r.URL.Query().Get("follow") != "1" {
		evs, err := s.st.Events(r.Context(), q)
		if err != nil {
			return s.internal("reading events", err)
		}
		if evs == nil {
			evs = []proto.Event{}
		}
		writeJSON(w, http.StatusOK, proto.EventList{Events: evs})
		return nil
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	quiet := 0
	read := int64(-1) // the hub's event mark at the last read of the journal
	for r.Context().Err() == nil {
		signal := s.hub.followSignal()
		mark := s.hub.eventMark()
		// Whether the stream may end is judged before the read: the
		// events of the tick that ended the rollout were committed with
		// it, so a read after the judgement has them. That read is made
		// even when the mark has not moved: the hub may not have seen
		// those events yet.
		done := quiet > 0 && over()
		var evs []proto.Event
		if mark != read || done {
			read = mark
			var err error
			if evs, err = s.st.Events(r.Context(), q); err != nil {
				return nil // the status line is sent; end the stream
			}
		}
		for _, ev := range evs {
			if enc.Encode(ev) != nil {
				return nil
			}
			q.AfterID = ev.ID
		}
		if flusher != nil {
			flusher.Flush() // the status line too, before any event
		}
		if len(evs) > 0 {
			quiet = 0
			if len(evs) >= eventBatch(q) {
				read = -1 // a full batch: more may be there already
			}
			continue
		}
		if done {
			return nil
		}
		quiet++
		t := s.cfg.Clock.NewTimer(time.Second)
		select {
		case <-signal:
		case <-t.C():
		case <-r.Context().Done():
		case <-s.stopping:
			t.Stop()
			return nil
		}
		t.Stop()
	}
	return nil
}

// eventBatch is the most events one read of q returns.
func eventBatch(q proto.EventQuery) int {
	if q.Limit <= 0 {
		return store.DefaultEventLimit
	}
	return min(q.Limit, store.MaxEventLimit)
}

// act is POST /v1/rollouts/{id}/{action}: an operator intent, recorded with
// its actor. The reply waits up to a few seconds for the tick that decides
// it (200 with the result), else says it is pending (202). Checks, in
// order: the caller's role may act at all, the action, the role may file
// it, the body, the rollout. (A viewer's approve or break-freeze is refused
// by the third check, whose message names the role it needs.)
func (s *Server) act(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
	kind := r.PathValue("action")
	if e := may(c, !reconciler.ForApprovers(kind)); e != nil {
		return e
	}
	if e := checkIntentKind(kind); e != nil {
		return e
	}
	var name, role string
	if c.operator != nil {
		name, role = c.operator.Name, c.operator.Role
	}
	if e := mayFile(name, role, c.dev, kind); e != nil {
		return e
	}
	var req proto.IntentRequest
	if e := readOptionalJSON(w, r, &req); e != nil {
		return e
	}
	ro, e := s.intentRollout(r, kind)
	if e != nil {
		return e
	}
	// An unsigned body is judged as it is first, so that its mistakes are
	// named; a signed document, checked, gives the comment and the wave.
	if req.Signed == nil {
		if e := checkIntentBody(kind, req.Wave, req.Comment); e != nil {
			return e
		}
	}
	id, e := s.checkSigned(c, kind, ro.ID, &req)
	if e != nil {
		return e
	}
	if e := checkIntentBody(kind, req.Wave, req.Comment); e != nil {
		return e
	}
	sent, status, e := s.fileIntent(r, ro, filing{kind: kind, actor: c.actor(), comment: req.Comment, wave: req.Wave, id: id, signed: req.Signed})
	if e == nil && sent {
		writeJSON(w, status.code, status.resp)
	}
	return e
}

// intentRollout reads the header of the rollout an intent names (its
// hosts are not needed). A break-freeze may also
// name a rollout that has not opened: a ref the release log holds as
// pending, waiting or deferred (a freeze defers an opening, rfcs/0003 rule
// 14), which the tick may open through the freeze. Its Rollout has the id
// and channel only.
func (s *Server) intentRollout(r *http.Request, kind string) (reconciler.Rollout, *codes.Error) {
	ro, e := s.rolloutHead(r)
	if e == nil || e.Code != codes.NotFound || kind != reconciler.IntentBreakFreeze {
		return ro, e
	}
	id := r.PathValue("id")
	if !proto.Nameable(id) {
		return ro, e
	}
	rels, err := s.st.ReleaseLog(r.Context(), store.ReleaseQuery{RolloutID: id})
	if err != nil {
		return ro, s.internal("reading the release log", err)
	}
	for _, rel := range rels {
		switch rel.Fate {
		case proto.FatePending, proto.FateWaiting, proto.FateDeferred:
			return reconciler.Rollout{ID: id, Channel: rel.Channel}, nil
		}
	}
	return ro, e
}

// filing is an intent to file: its kind, who files it, their comment, the
// wave it names, and, for a signed one, its id (the nonce) and the signed
// document (rfcs/0007 §Signed intents).
type filing struct {
	kind, actor, comment string
	wave                 *int
	id                   string
	signed               *proto.SignedIntent
}

// intentAnswer is what filing an intent answers: 200 with the result, 409
// when the tick refused it, 202 when no tick took it in time.
type intentAnswer struct {
	code int
	resp proto.IntentResponse
}

// fileIntent records an operator intent on a rollout (wave: the wave an
// approve approves, else nil) and waits up to intentWait for the tick that
// decides it. sent is false when the client went away before an answer.
func (s *Server) fileIntent(r *http.Request, ro reconciler.Rollout, f filing) (sent bool, ans intentAnswer, e *codes.Error) {
	kind, comment, wave := f.kind, f.comment, f.wave
	if f.id == "" {
		var idb [12]byte
		_, _ = rand.Read(idb[:])
		f.id = hex.EncodeToString(idb[:])
	}
	in := reconciler.Intent{ID: f.id, RolloutID: ro.ID, Kind: kind, Actor: f.actor, At: s.cfg.Clock.Now(), Comment: comment, Wave: wave}
	err := s.st.AddSignedIntent(r.Context(), in, f.signed)
	if errors.Is(err, store.ErrDuplicate) {
		return false, ans, codes.Errorf(codes.ReplayedIntent, "intent %s was filed already: a signed intent is filed once", f.id)
	}
	if err != nil {
		return false, ans, s.internal("recording an intent", err)
	}
	attrs := []any{"actor", in.Actor, "kind", kind, "rollout", ro.ID, "intent", in.ID, "comment", comment}
	if wave != nil {
		attrs = append(attrs, "wave", *wave)
	}
	s.log.Info("operator intent", attrs...)
	s.board.post(wakeTick)
	// The tick that takes the intent signals the hub (this replica's tick
	// at once, another replica's when the hub sees its events): read the
	// intent after each signal, taken before the read so none is missed.
	wait := s.cfg.Clock.NewTimer(intentWait)
	defer wait.Stop()
	for {
		signal := s.hub.followSignal()
		rec, err := s.st.Intent(r.Context(), in.ID)
		if err != nil {
			return false, ans, s.internal("reading an intent", err)
		}
		if rec.Result != nil {
			status := http.StatusOK
			if !rec.Result.Accepted {
				status = http.StatusConflict
			}
			return true, intentAnswer{status, proto.IntentResponse{Intent: proto.Intent(in), Result: wireIntentResult(rec.Result)}}, nil
		}
		select {
		case <-r.Context().Done():
			return false, ans, nil
		case <-signal:
		case <-wait.C():
			return true, intentAnswer{http.StatusAccepted, proto.IntentResponse{Intent: proto.Intent(in)}}, nil
		}
	}
}

// checkIntentKind refuses an action that is no operator intent.
func checkIntentKind(kind string) *codes.Error {
	switch kind {
	case reconciler.IntentPause, reconciler.IntentResume, reconciler.IntentCancel, reconciler.IntentRollback,
		reconciler.IntentApprove, reconciler.IntentBreakFreeze:
		return nil
	}
	return codes.Errorf(codes.NotFound, "no action %q (pause, resume, cancel, rollback, approve, break-freeze)", kind)
}

// maxWave bounds the wave an approve names: what the stores keep (a
// PostgreSQL integer). Whether the rollout has that wave, and whether it
// needs approvals, the tick decides (not_approvable).
const maxWave = 1<<31 - 1

// checkIntentBody checks what an intent of a kind carries: approve names
// its wave (0 or more; no other kind names one); approve and break-freeze
// need a comment that is not blank, as a record of why the gate was
// passed; every comment is within checkComment's bounds.
func checkIntentBody(kind string, wave *int, comment string) *codes.Error {
	switch {
	case kind == reconciler.IntentApprove && wave == nil:
		return codes.Errorf(codes.BadRequest, "approve needs the wave it approves: {\"wave\": N} (the first wave is 0)")
	case kind == reconciler.IntentApprove && (*wave < 0 || *wave > maxWave):
		return codes.Errorf(codes.BadRequest, "wave %d is out of range: waves count from 0", *wave)
	case kind != reconciler.IntentApprove && wave != nil:
		return codes.Errorf(codes.BadRequest, "%s names no wave; only approve does", kind)
	}
	if e := checkComment(comment); e != nil {
		return e
	}
	if reconciler.ForApprovers(kind) && strings.TrimSpace(comment) == "" {
		return codes.Errorf(codes.BadRequest, "%s needs a comment saying why: it goes into the journal with your name", kind)
	}
	return nil
}

// intentWait is how long an operator action waits for its tick.
const intentWait = 5 * time.Second

// checkComment refuses an intent's comment that the journal should not
// hold: over proto.MaxCommentBytes, not UTF-8, or with a control
// character (a newline too: the comment ends up in one-line reasons).
func checkComment(c string) *codes.Error {
	switch {
	case len(c) > proto.MaxCommentBytes:
		return codes.Errorf(codes.BadRequest, "the comment is %d bytes, over the %d-byte limit", len(c), proto.MaxCommentBytes)
	case !proto.Nameable(c):
		return codes.Errorf(codes.BadRequest, "the comment has a control character (a newline, a tab, …) or is not UTF-8")
	}
	return nil
}

// listReleases is GET /v1/releases[?channel=C]: every channel ref the
// control plane saw and its fate, newest first (rfcs/0012 §Releases).
func (s *Server) listReleases(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
	if e := may(c, false); e != nil {
		return e
	}
	ch := r.URL.Query().Get("channel")
	if !proto.Nameable(ch) {
		return codes.Errorf(codes.BadRequest, "channel %q has a control character or is not UTF-8", ch)
	}
	rels, err := s.st.ReleaseLog(r.Context(), store.ReleaseQuery{Channel: ch})
	if err != nil {
		return s.internal("reading the release log", err)
	}
	writeJSON(w, http.StatusOK, proto.ReleaseList{Releases: rels})
	return nil
}

// rolloutHeads are the rollouts without their hosts, by id, and the id of
// each channel's latest: what a host's situation needs besides its record;
// and for the hosts of the fleet in no rollout, the release of their
// channel that waits to open one.
type rolloutHeads struct {
	byID   map[string]reconciler.Rollout
	latest map[string]string
	// waits is, by channel, its newest release that has not opened a
	// rollout (pending, waiting, deferred); nil for none.
	waits map[string]*proto.Release
}

// heads reads what the views of recs need besides them: the rollouts
// that drive them, without their hosts; each channel's latest rollout;
// and the release that waits in each channel of a host of the fleet that
// no rollout drives (from the release log, a channel at a time).
func (s *Server) heads(r *http.Request, recs ...store.HostRecord) (rolloutHeads, *codes.Error) {
	latest, e := s.latestIDs(r)
	if e != nil {
		return rolloutHeads{}, e
	}
	var ids, channels []string
	for _, rec := range recs {
		switch a, f := rec.Assignment, rec.Fleet; {
		case a != nil && !slices.Contains(ids, a.RolloutID):
			ids = append(ids, a.RolloutID)
		case a == nil && f != nil && f.Built && !slices.Contains(channels, f.Channel):
			channels = append(channels, f.Channel)
		}
	}
	hd := rolloutHeads{byID: make(map[string]reconciler.Rollout, len(ids)), latest: latest, waits: map[string]*proto.Release{}}
	if len(ids) > 0 {
		rs, err := s.st.RolloutsByID(r.Context(), ids)
		if err != nil {
			return rolloutHeads{}, s.internal("reading rollouts", err)
		}
		for _, ro := range rs {
			hd.byID[ro.ID] = ro
		}
	}
	for _, ch := range channels {
		rels, err := s.st.ReleaseLog(r.Context(), store.ReleaseQuery{Channel: ch})
		if err != nil {
			return rolloutHeads{}, s.internal("reading the release log", err)
		}
		for i, rel := range rels { // newest first
			if rel.Fate == proto.FatePending || rel.Fate == proto.FateWaiting || rel.Fate == proto.FateDeferred {
				hd.waits[ch] = &rels[i]
				break
			}
		}
	}
	return hd, nil
}

// hostView is a host as the operator API shows it, with its situation.
func (s *Server) hostView(rec store.HostRecord, hd rolloutHeads, now time.Time) proto.HostView {
	v := proto.HostView{Hostname: rec.Hostname, Seen: rec.Seen, Observed: wireObserved(rec.Observed)}
	v.Online = rec.Seen && s.cfg.Tunables.Heard(rec.Observed.LastSeen, now)
	a := rec.Assignment
	if a == nil {
		v.Explain = proto.Situation{Code: codes.NotInRollout, Message: "no rollout includes this host"}
		if f := rec.Fleet; f != nil {
			v.Channel = f.Channel
			if f.Built {
				v.Release = hd.waits[f.Channel]
			}
			v.Explain.Message = noRolloutYet(*f, v.Release, hd.latest[f.Channel])
		}
		return v
	}
	h := wireRolloutHost(a.Host)
	v.Rollout, v.Channel, v.RolloutState, v.Host = a.RolloutID, a.Channel, string(a.RolloutState), &h
	ro, ok := hd.byID[a.RolloutID]
	if !ok { // opened after the heads were read: its state is the assignment's
		ro = reconciler.Rollout{ID: a.RolloutID, Channel: a.Channel, State: a.RolloutState}
	}
	ro.State = a.RolloutState
	p := reconciler.Place{Rollout: ro, Latest: hd.latest[a.Channel] == a.RolloutID || !ok, Host: a.Host, Online: v.Online,
		Prefetched: rec.Observed.Prefetched}
	v.Explain = wireSituation(reconciler.Situate(p, now, s.cfg.Tunables))
	for _, run := range ro.Analyses {
		if run.Wave == a.Host.Wave {
			v.Analysis = append(v.Analysis, wireAnalysisRun(run))
		}
	}
	return v
}

// getHost is GET /v1/hosts/{name}.
func (s *Server) getHost(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
	if e := may(c, false); e != nil {
		return e
	}
	rec, e := s.hostRecord(r, r.PathValue("name"))
	if e != nil {
		return e
	}
	hd, e := s.heads(r, rec)
	if e != nil {
		return e
	}
	v := s.hostView(rec, hd, s.cfg.Clock.Now())
	v.Expected = s.expectation(r, v)
	writeJSON(w, http.StatusOK, v)
	return nil
}

// hostRecord reads the named host, with its place in the signed fleet (404
// when it neither checked in, nor is in a rollout, nor is in the fleet).
func (s *Server) hostRecord(r *http.Request, name string) (store.HostRecord, *codes.Error) {
	if !proto.Nameable(name) {
		return store.HostRecord{}, codes.Errorf(codes.NotFound, "no host %q is in the fleet, has checked in or is in a rollout", name)
	}
	var fleet *store.FleetHost
	if ros := s.ids.fleetRoster(); ros != nil {
		if h, ok := ros.Host(name); ok {
			fleet = &h
		}
	}
	rec, err := s.st.Host(r.Context(), name)
	switch {
	case errors.Is(err, store.ErrNotFound) && fleet != nil:
		rec = store.HostRecord{Hostname: name}
	case errors.Is(err, store.ErrNotFound):
		return rec, codes.Errorf(codes.NotFound, "no host %q is in the fleet, has checked in or is in a rollout", name)
	case err != nil:
		return rec, s.internal("reading a host", err)
	}
	rec.Fleet = fleet
	return rec, nil
}

// noRolloutYet says why a host of the signed fleet (f) is in no rollout:
// the fleet has no closure for it, a release of its channel waits (rel:
// its fate and the reason of it), its channel has opened none, or its
// channel's latest rollout (latest) opened without it.
func noRolloutYet(f store.FleetHost, rel *proto.Release, latest string) string {
	switch {
	case !f.Built:
		return "no rollout yet: the fleet has no closure for this host (CI has not built it)"
	case rel == nil && latest != "":
		return fmt.Sprintf("no rollout yet: %s, the latest rollout of channel %s, does not include this host", latest, f.Channel)
	case rel == nil:
		return fmt.Sprintf("no rollout yet: channel %s has opened none", f.Channel)
	}
	why := rel.Reason.Message
	if why == "" {
		switch rel.Fate {
		case proto.FatePending:
			why = "no tick has decided about it yet"
		case proto.FateWaiting:
			why = "it waits for rollout " + rel.By + " to end"
		default:
			why = "held by " + rel.By
		}
	}
	return fmt.Sprintf("no rollout yet: release %s is %s: %s", rel.RolloutID, rel.Fate, why)
}

// status is GET /v1/status: every channel, its release and its latest
// rollout.
func (s *Server) status(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
	if e := may(c, false); e != nil {
		return e
	}
	st, _, e := s.statusView(r)
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// statusView is every channel, its release and its latest rollout, as
// GET /v1/status and the dashboard's overview show them, and the latest
// rollouts it read, without their hosts, by channel.
func (s *Server) statusView(r *http.Request) (proto.Status, map[string]reconciler.Rollout, *codes.Error) {
	var st proto.Status
	heads := map[string]reconciler.Rollout{}
	now := s.cfg.Clock.Now()
	rels, err := s.st.Releases(r.Context())
	if err != nil {
		return st, nil, s.internal("reading releases", err)
	}
	latest, e := s.latestIDs(r)
	if e != nil {
		return st, nil, e
	}
	sight, err := s.st.Sight(r.Context())
	if err != nil {
		return st, nil, s.internal("reading the watch", err)
	}
	_, fails := s.src.status()
	_, leader := s.ticker.isLeader()
	st = proto.Status{Replica: s.replica, Leader: leader, InsecureDev: s.cfg.InsecureDev, Channels: []proto.ChannelStatus{}}
	if !sight.WatchingSince.IsZero() {
		from := sight.WatchingSince.Add(s.cfg.Tunables.OfflineThreshold())
		st.Watch = &proto.Watch{Since: sight.WatchingSince, JudgesSilenceFrom: from, WarmingUp: now.Before(from), LastTick: sight.LastTick}
	}
	partial := map[string]*proto.Visibility{}
	for _, v := range sight.Visibility {
		pv := proto.Visibility(v)
		partial[v.Channel] = &pv
	}
	for _, rel := range rels {
		cs := proto.ChannelStatus{Name: rel.Channel, Ref: rel.Ref, SourceCommit: rel.SourceCommit, SignedAt: rel.SignedAt,
			Visibility: partial[rel.Channel]}
		if id, ok := latest[rel.Channel]; ok {
			// Its hosts counted in the store, not read: an overview costs
			// the same whether the rollout has ten hosts or 100,000.
			v, err := s.st.RolloutView(r.Context(), id, "", -1)
			if err != nil && !errors.Is(err, store.ErrNotFound) { // pruned since: none
				return st, nil, s.internal("reading a rollout", err)
			}
			if err == nil {
				sum := wireRollout(v.Rollout, false)
				sum.Next = reconciler.NextStep(v.Rollout)
				s.totals(&sum, v.Rollout, true, v.Groups, now)
				cs.Rollout, heads[rel.Channel] = &sum, v.Rollout
			}
		}
		cs.Pending = cs.Rollout == nil || cs.Rollout.Ref != rel.Ref
		if f, ok := fails[rel.Channel]; ok {
			cs.LastFailure = &f
		}
		st.Channels = append(st.Channels, cs)
	}
	return st, heads, nil
}
