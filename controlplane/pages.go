package controlplane

import (
	"context"
	"encoding/base64"
	"errors"
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

// Bounded reads (rfcs/0007 §Operator endpoints, §Hosts): GET /v1/hosts and GET
// /v1/rollouts answer a page at a time, by cursor, and GET
// /v1/rollouts/{id} a page of the rollout's hosts, with its counts over
// all of them. No answer grows with the number of hosts or rollouts
// beyond its limit.

// listRollouts is GET /v1/rollouts[?limit=N&before=CURSOR&channel=C&state=S]:
// a page of rollout summaries, newest first, with next when more follow.
func (s *Server) listRollouts(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
	if e := may(c, false); e != nil {
		return e
	}
	q, e := rolloutQuery(r)
	if e != nil {
		return e
	}
	page, err := s.st.RolloutPage(r.Context(), q)
	if err != nil {
		return s.internal("listing rollouts", err)
	}
	out := proto.RolloutList{Rollouts: make([]proto.Rollout, len(page.Rollouts))}
	for i, sum := range page.Rollouts {
		ro := wireRollout(sum.Rollout, false)
		countGroups(&ro, sum.Groups)
		out.Rollouts[i] = ro
	}
	if page.Next != nil {
		out.Next = encodeRolloutCursor(*page.Next)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getRollout is GET /v1/rollouts/{id}[?hostsLimit=N&hostsAfter=NAME]: the
// rollout with its whole frozen plan and a page of its hosts, each with
// its situation; counts, waiting and the soak's end over all its hosts.
func (s *Server) getRollout(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
	if e := may(c, false); e != nil {
		return e
	}
	id := r.PathValue("id")
	if !proto.Nameable(id) {
		return codes.Errorf(codes.NotFound, "no rollout %q", id)
	}
	after := r.URL.Query().Get("hostsAfter")
	if !proto.Nameable(after) {
		return codes.Errorf(codes.BadRequest, "hostsAfter %q has a control character or is not UTF-8", after)
	}
	limit, e := limitParam(r, "hostsLimit", store.MaxRolloutHostLimit)
	if e != nil {
		return e
	}
	v, err := s.st.RolloutView(r.Context(), id, after, limit)
	if errors.Is(err, store.ErrNotFound) {
		return codes.Errorf(codes.NotFound, "no rollout %q", id)
	}
	if err != nil {
		return s.internal("reading a rollout", err)
	}
	latest, e := s.latestIDs(r)
	if e != nil {
		return e
	}
	ro, isLatest, now := v.Rollout, latest[v.Rollout.Channel] == v.Rollout.ID, s.cfg.Clock.Now()
	out := wireRollout(ro, true)
	out.Next, out.HostsNext = reconciler.NextStep(ro), v.Next
	s.totals(&out, ro, isLatest, v.Groups, now)
	if err := s.situateHosts(r.Context(), &out, ro, isLatest, now); err != nil {
		return s.internal("reading hosts", err)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// listHosts is GET /v1/hosts[?limit=N&after=NAME&channel=C&state=S&rollout=ID]:
// a page of host views, by name, with next when more may follow: the
// hosts the store knows and the hosts of the signed fleet (its roster).
func (s *Server) listHosts(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
	if e := may(c, false); e != nil {
		return e
	}
	q, e := hostQuery(r)
	if e != nil {
		return e
	}
	if ros := s.ids.fleetRoster(); ros != nil {
		q.Fleet = ros
	}
	page, err := s.st.HostPage(r.Context(), q)
	if err != nil {
		return s.internal("listing hosts", err)
	}
	hd, e := s.heads(r, page.Hosts...)
	if e != nil {
		return e
	}
	now := s.cfg.Clock.Now()
	out := proto.HostList{Hosts: make([]proto.HostView, 0, len(page.Hosts)), Next: page.Next}
	for _, rec := range page.Hosts {
		out.Hosts = append(out.Hosts, s.hostView(rec, hd, now))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// hostQuery reads GET /v1/hosts' query parameters.
func hostQuery(r *http.Request) (store.HostQuery, *codes.Error) {
	v := r.URL.Query()
	q := store.HostQuery{After: v.Get("after"), Channel: v.Get("channel"), RolloutID: v.Get("rollout"),
		State: reconciler.HostState(v.Get("state"))}
	for _, k := range []string{"after", "channel", "rollout"} {
		if !proto.Nameable(v.Get(k)) {
			return q, codes.Errorf(codes.BadRequest, "%s %q has a control character or is not UTF-8", k, v.Get(k))
		}
	}
	if q.State != "" && !slices.Contains(reconciler.HostStates, q.State) {
		return q, codes.Errorf(codes.BadRequest, "state %q is not one of %v", q.State, reconciler.HostStates)
	}
	var e *codes.Error
	q.Limit, e = limitParam(r, "limit", store.MaxHostLimit)
	return q, e
}

// rolloutQuery reads GET /v1/rollouts' query parameters.
func rolloutQuery(r *http.Request) (store.RolloutQuery, *codes.Error) {
	v := r.URL.Query()
	q := store.RolloutQuery{Channel: v.Get("channel"), State: reconciler.RolloutState(v.Get("state"))}
	if !proto.Nameable(q.Channel) {
		return q, codes.Errorf(codes.BadRequest, "channel %q has a control character or is not UTF-8", q.Channel)
	}
	if q.State != "" && !slices.Contains(reconciler.RolloutStates, q.State) {
		return q, codes.Errorf(codes.BadRequest, "state %q is not one of %v", q.State, reconciler.RolloutStates)
	}
	if b := v.Get("before"); b != "" {
		cur, ok := decodeRolloutCursor(b)
		if !ok {
			return q, codes.Errorf(codes.BadRequest, "before must be the next of a page of GET /v1/rollouts")
		}
		q.Before = &cur
	}
	var e *codes.Error
	q.Limit, e = limitParam(r, "limit", store.MaxRolloutLimit)
	return q, e
}

// limitParam reads a page size: absent is 0 (the store's default), else
// a whole number from 1 to most.
func limitParam(r *http.Request, name string, most int) (int, *codes.Error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, codes.Errorf(codes.BadRequest, "%s must be between 1 and %d", name, most)
	}
	return n, nil
}

// A rollout cursor is opaque to clients: "1:<opened_at µs>:<id>" in
// unpadded base64url. The leading version lets its form change.
const cursorVersion = "1"

func encodeRolloutCursor(c store.RolloutCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorVersion + ":" + strconv.FormatInt(c.OpenedAt.UnixMicro(), 10) + ":" + c.ID))
}

// decodeRolloutCursor reads a cursor encodeRolloutCursor made; ok is
// false for anything else.
func decodeRolloutCursor(s string) (store.RolloutCursor, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return store.RolloutCursor{}, false
	}
	parts := strings.SplitN(string(b), ":", 3)
	if len(parts) != 3 || parts[0] != cursorVersion || parts[2] == "" || !proto.Nameable(parts[2]) {
		return store.RolloutCursor{}, false
	}
	us, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return store.RolloutCursor{}, false
	}
	return store.RolloutCursor{OpenedAt: time.UnixMicro(us).UTC(), ID: parts[2]}, true
}

// countGroups sets a rollout's Counts and WaveCounts from its hosts'
// groups.
func countGroups(out *proto.Rollout, groups []store.HostGroup) {
	out.Counts = map[string]int{}
	if len(out.Waves) > 0 {
		out.WaveCounts = make([]map[string]int, len(out.Waves))
		for i := range out.WaveCounts {
			out.WaveCounts[i] = map[string]int{}
		}
	}
	for _, g := range groups {
		out.Counts[string(g.State)] += g.Count
		if g.Wave >= 0 && g.Wave < len(out.WaveCounts) {
			out.WaveCounts[g.Wave][string(g.State)] += g.Count
		}
	}
}

// totals sets what a rollout's view says of all its hosts, from their
// groups (store.HostGroup: hosts of a wave in a state, held by one gate):
// Counts and WaveCounts; Waiting, the Pending hosts held by a gate the
// fleet clears by itself, by gate; and SoakUntil, when the current wave's
// last soaking host converges (an Active rollout only). The hosts of a
// group share their situation's code and whether it moves (a situation's
// host name and target change only its message and when a window opens),
// so one is judged for each group; the soak ends when that of the group's
// latest soaking host does.
func (s *Server) totals(out *proto.Rollout, r reconciler.Rollout, latest bool, groups []store.HostGroup, now time.Time) {
	countGroups(out, groups)
	out.Waiting = map[string]int{}
	var soak time.Time
	for _, g := range groups {
		h := reconciler.RolloutHost{Wave: g.Wave, State: g.State, Blocked: g.Blocked, Since: g.LatestSince}
		switch {
		case g.State == reconciler.HostPending && g.Blocked.Gate != "":
			sit := reconciler.Situate(reconciler.Place{Rollout: r, Latest: latest, Host: h}, now, s.cfg.Tunables)
			if sit.Moves && sit.Code == g.Blocked.Gate {
				out.Waiting[g.Blocked.Gate] += g.Count
			}
		case g.State == reconciler.HostSoaking && g.Wave == r.Wave:
			sit := reconciler.Situate(reconciler.Place{Rollout: r, Latest: latest, Host: h}, now, s.cfg.Tunables)
			if sit.Until.After(soak) {
				soak = sit.Until
			}
		}
	}
	if !soak.IsZero() && r.State == reconciler.RolloutActive { // only an active rollout promotes
		soak = soak.UTC()
		out.SoakUntil = &soak
	}
}

// groupHosts groups a rollout's hosts as store.RolloutView does.
func groupHosts(hosts []reconciler.RolloutHost) []store.HostGroup {
	type key struct {
		wave    int
		state   reconciler.HostState
		blocked reconciler.Reason
	}
	index := map[key]int{}
	var out []store.HostGroup
	for _, h := range hosts {
		k := key{h.Wave, h.State, h.Blocked}
		i, ok := index[k]
		if !ok {
			i, index[k] = len(out), len(out)
			out = append(out, store.HostGroup{Wave: h.Wave, State: h.State, Blocked: h.Blocked})
		}
		out[i].Count++
		if h.Since.After(out[i].LatestSince) {
			out[i].LatestSince = h.Since
		}
	}
	return out
}

// situateHosts sets the situation of each host of a rollout's view (r's
// hosts, in out.Hosts): a host counts as online when it was heard within
// the offline threshold, as the store recorded it (read only for the
// Skipped hosts: the others' situations do not depend on it).
func (s *Server) situateHosts(ctx context.Context, out *proto.Rollout, r reconciler.Rollout, latest bool, now time.Time) error {
	var skipped []string
	for _, h := range r.Hosts {
		if h.State == reconciler.HostSkipped {
			skipped = append(skipped, h.Hostname)
		}
	}
	var seen map[string]time.Time
	if len(skipped) > 0 {
		var err error
		if seen, err = s.st.LastSeen(ctx, skipped); err != nil {
			return err
		}
	}
	for i, h := range r.Hosts {
		online := s.cfg.Tunables.Heard(seen[h.Hostname], now)
		ws := wireSituation(reconciler.Situate(reconciler.Place{Rollout: r, Latest: latest, Host: h, Online: online}, now, s.cfg.Tunables))
		out.Hosts[i].Situation = &ws
	}
	return nil
}
