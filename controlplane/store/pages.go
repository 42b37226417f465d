package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// Bounded reads for the operator API (rfcs/0007 §Operator endpoints, §Hosts): a
// page of hosts, a page of rollout summaries, one rollout with a page of
// its hosts. Each reads what its page shows and a bounded number of rows
// more, never every host or every rollout's plan: keyset pagination
// (hostname > after, (opened_at, id) < before) on the tables' keys.

// Page limits. A limit of zero or less is the default; one above the
// maximum is the maximum (the API refuses it before it gets here).
const (
	DefaultHostLimit        = 500
	MaxHostLimit            = 5000
	DefaultRolloutLimit     = 100
	MaxRolloutLimit         = 1000
	DefaultRolloutHostLimit = 1000
	MaxRolloutHostLimit     = 5000
)

// hostScanFactor bounds the candidate hosts a page judges, as a multiple
// of its limit, when HostQuery.MaxScan is zero.
const hostScanFactor = 4

func clampLimit(n, def, most int) int {
	if n <= 0 {
		return def
	}
	return min(n, most)
}

// HostQuery selects a page of hosts (Store.HostPage). Zero filters do not
// filter; filters combine, and match a host's assignment: the rollout
// that drives it (Store.Host).
type HostQuery struct {
	// After: only hosts whose name sorts after it.
	After string
	// Limit: at most this many (DefaultHostLimit when zero or less, at
	// most MaxHostLimit).
	Limit int
	// Channel, State, RolloutID: only hosts driven by a rollout of that
	// channel, in that host state, by that rollout.
	Channel   string
	State     reconciler.HostState
	RolloutID string
	// MaxScan bounds the candidate hosts one call judges (hostScanFactor
	// times the limit when zero): a page of a filter that most candidates
	// fail comes back short, with Next to continue.
	MaxScan int
	// Fleet, when set, is the signed fleet: its hosts are candidates too,
	// so that a host of it that neither checked in nor is in a live
	// rollout is listed, and the record of each host of it has its Fleet.
	// Such a host matches a Channel filter by the channel the fleet puts
	// it in, and no State or RolloutID filter.
	Fleet Roster
}

// FleetHost is a host of a signed fleet, as a host page needs it.
type FleetHost struct {
	// Channel is the channel the fleet puts the host in.
	Channel string
	// Built: the fleet has a closure for the host (one without is in no
	// rollout: proto.Host.ClosureHash).
	Built bool
}

// Roster is the hosts of a signed fleet by name (the control plane keeps
// the fleet it accepted last in memory). Names compare as bytes, the
// order HostPage lists in.
type Roster interface {
	// After returns the first n hosts whose names sort after after, in
	// order; only hosts of channel when channel is not "".
	After(channel, after string, n int) []string
	// Host returns a host of the fleet; ok is false for any other name.
	Host(name string) (h FleetHost, ok bool)
}

// HostPage is a page of hosts, by name.
type HostPage struct {
	Hosts []HostRecord
	// Next is the After of the next page; empty when no host follows.
	Next string
}

// HostPage returns the hosts q selects, by name (byte order): every host
// that checked in (it has a last-seen time or a status), is in a live
// rollout, or is a host of q.Fleet, as Hosts would with the fleet, but one
// page of them.
//
//  1. Candidate names come, in byte order after q.After, from the
//     cheapest source for the filters: the rollout's hosts (RolloutID);
//     the live rollouts' hosts in that state (State), or of that
//     channel and the fleet's hosts of that channel (Channel); else
//     host_seen, host_status, the live rollouts' hosts and the fleet's
//     hosts together. The store's names are merged with the fleet's in
//     memory, a batch at a time.
//  2. The page's records (last-seen time, status, assignment among the
//     live rollouts, place in the fleet) are read for those names only.
//  3. A candidate whose assignment does not match the filters (it is
//     listed in an older live rollout, but another drives it) is left
//     out. Candidates are judged in batches until the page is full, none
//     is left, or q.MaxScan were judged; Next is then the last name
//     judged, when more may follow.
func (s *db) HostPage(ctx context.Context, q HostQuery) (HostPage, error) {
	limit := clampLimit(q.Limit, DefaultHostLimit, MaxHostLimit)
	scan := q.MaxScan
	if scan <= 0 {
		scan = hostScanFactor * limit
	}
	out := HostPage{Hosts: []HostRecord{}}
	err := s.read(ctx, func(tx *txn) error {
		l, err := loadLiveness(ctx, tx)
		if err != nil {
			return err
		}
		src, ok := hostSource(l, q)
		if !ok {
			return nil
		}
		if src.byName, err = s.byteOrder(ctx, tx); err != nil {
			return err
		}
		cursor, judged := q.After, 0
		for {
			want := min(limit-len(out.Hosts), scan-judged)
			// One name more than judged tells whether more follow.
			names, err := src.names(ctx, tx, cursor, want+1)
			if err != nil {
				return err
			}
			more := len(names) > want
			names = names[:min(len(names), want)]
			recs, err := hostRecords(ctx, tx, l, names, q.Fleet)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if q.matches(r) {
					out.Hosts = append(out.Hosts, r)
				}
			}
			judged += len(names)
			if len(names) > 0 {
				cursor = names[len(names)-1]
			}
			switch {
			case !more:
				return nil
			case len(out.Hosts) >= limit || judged >= scan:
				out.Next = cursor
				return nil
			}
		}
	})
	if err != nil {
		return HostPage{}, fmt.Errorf("store: host page: %w", err)
	}
	return out, nil
}

// matches reports whether a host's record passes q's filters.
func (q HostQuery) matches(r HostRecord) bool {
	if q.Channel == "" && q.State == "" && q.RolloutID == "" {
		return true
	}
	a := r.Assignment
	if a == nil { // in no rollout: only the channel the fleet gives it can match
		return q.State == "" && q.RolloutID == "" && r.Fleet != nil && r.Fleet.Channel == q.Channel
	}
	return (q.Channel == "" || a.Channel == q.Channel) && (q.State == "" || a.Host.State == q.State) &&
		(q.RolloutID == "" || a.RolloutID == q.RolloutID)
}

// hostCandidates is where a page's candidate names come from: a UNION of
// the store's sources, each read in byte order after the cursor and cut
// at the page's size, so that a page reads at most that many names of
// each, merged with as many names of the fleet.
type hostCandidates struct {
	// rollouts are the live rollouts whose hosts are candidates; state,
	// when set, keeps their hosts in that state only.
	rollouts []string
	state    reconciler.HostState
	// observed adds the hosts with a last-seen time or a status.
	observed bool
	// fleet, when set, adds its hosts (of channel only, when set).
	fleet   Roster
	channel string
	// byName is the SQL that orders and compares hostnames as bytes
	// (db.byteOrder).
	byName string
}

// hostSource picks the candidates of q; ok is false when no host can
// match (the rollout is not live, or not of the channel, and the fleet
// cannot match).
func hostSource(l *liveness, q HostQuery) (hostCandidates, bool) {
	src := hostCandidates{state: q.State, observed: q.Channel == "" && q.State == "" && q.RolloutID == ""}
	for _, h := range l.liveHeads() {
		if (q.RolloutID == "" || h.id == q.RolloutID) && (q.Channel == "" || h.channel == q.Channel) {
			src.rollouts = append(src.rollouts, h.id)
		}
	}
	if q.Fleet != nil && q.State == "" && q.RolloutID == "" {
		src.fleet, src.channel = q.Fleet, q.Channel
	}
	return src, src.observed || len(src.rollouts) > 0 || src.fleet != nil
}

// names returns up to n candidate names after cursor, in byte order.
func (c hostCandidates) names(ctx context.Context, tx *txn, cursor string, n int) ([]string, error) {
	var parts []string
	var args []any
	add := func(sel string, a ...any) {
		parts = append(parts, fmt.Sprintf("SELECT hostname FROM (%s ORDER BY %s LIMIT ?) AS c%d", sel, c.byName, len(parts)))
		args = append(append(args, a...), n)
	}
	after := c.byName + " > ?"
	if c.observed {
		add("SELECT hostname FROM host_seen WHERE "+after, cursor)
		add("SELECT hostname FROM host_status WHERE "+after, cursor)
	}
	for _, id := range c.rollouts {
		if c.state != "" {
			add("SELECT hostname FROM rollout_hosts WHERE rollout_id = ? AND "+after+" AND state = ?", id, cursor, string(c.state))
		} else {
			add("SELECT hostname FROM rollout_hosts WHERE rollout_id = ? AND "+after, id, cursor)
		}
	}
	out := []string{}
	if len(parts) > 0 {
		var err error
		out, err = collect(ctx, tx, out, scanString,
			"SELECT hostname FROM ("+strings.Join(parts, " UNION ")+") AS u ORDER BY "+c.byName+" LIMIT ?", append(args, n)...)
		if err != nil {
			return nil, fmt.Errorf("candidates: %w", err)
		}
	}
	if c.fleet != nil {
		out = mergeNames(out, c.fleet.After(c.channel, cursor, n), n)
	}
	return out, nil
}

// mergeNames merges two lists of names in byte order, without
// duplicates, into the first n of both.
func mergeNames(a, b []string, n int) []string {
	out := make([]string, 0, min(n, len(a)+len(b)))
	for len(out) < n && (len(a) > 0 || len(b) > 0) {
		switch {
		case len(b) == 0 || len(a) > 0 && a[0] < b[0]:
			out, a = append(out, a[0]), a[1:]
		case len(a) == 0 || b[0] < a[0]:
			out, b = append(out, b[0]), b[1:]
		default: // the same name
			out, a, b = append(out, a[0]), a[1:], b[1:]
		}
	}
	return out
}

// byteOrder returns the SQL expression that orders and compares hostnames
// as bytes: the column itself on SQLite (BINARY) and on a PostgreSQL
// database whose collation sorts as bytes (C, C.UTF-8), found out once;
// else the column in the C collation, which costs each page a sort
// instead of an index's order.
func (s *db) byteOrder(ctx context.Context, tx *txn) (string, error) {
	const plain, collated = "hostname", `hostname COLLATE "C"`
	if s.dialect != dialectPostgres {
		return plain, nil
	}
	switch s.hostOrder.Load() {
	case orderBytes:
		return plain, nil
	case orderCollated:
		return collated, nil
	}
	// Pairs whose order as bytes a linguistic collation reverses: case,
	// punctuation, and a letter outside ASCII.
	var bytewise bool
	err := tx.queryRow(ctx, `SELECT 'B' < 'a' AND 'a-b' < 'ab' AND 'a.b' < 'a0' AND 'z' < 'é' AND 'Z' < '_'`).Scan(&bytewise)
	if err != nil {
		return "", fmt.Errorf("collation: %w", err)
	}
	if bytewise {
		s.hostOrder.Store(orderBytes)
		return plain, nil
	}
	s.hostOrder.Store(orderCollated)
	return collated, nil
}

// Values of db.hostOrder: not known yet (0), the database's collation
// sorts as bytes, or it does not.
const (
	orderBytes    int32 = 1
	orderCollated int32 = 2
)

// hostRecords reads the records of the named hosts, in names' order,
// leaving out the names that neither checked in, nor are in a live
// rollout, nor are hosts of fleet.
func hostRecords(ctx context.Context, tx *txn, l *liveness, names []string, fleet Roster) ([]HostRecord, error) {
	if len(names) == 0 {
		return nil, nil
	}
	recs := make(map[string]*HostRecord, len(names))
	for _, n := range names {
		recs[n] = &HostRecord{Hostname: n}
		if fleet != nil {
			if h, ok := fleet.Host(n); ok {
				recs[n].Fleet = &h
			}
		}
	}
	err := inChunks(names, idChunk, func(chunk []string) error {
		in := placeholders(len(chunk))
		err := eachRow(ctx, tx, func(rs row) error {
			var name string
			var at, saidAt int64
			if err := rs.Scan(&name, &at, &saidAt); err != nil {
				return err
			}
			if r := recs[name]; r != nil {
				r.Seen = true
				seenTimes(&r.Observed, at, saidAt)
			}
			return nil
		}, "SELECT hostname, last_seen, said_at FROM host_seen WHERE hostname IN ("+in+")", anys(chunk)...)
		if err != nil {
			return err
		}
		return eachRow(ctx, tx, func(rs row) error {
			var name, body string
			if err := rs.Scan(&name, &body); err != nil {
				return err
			}
			st, err := decodeStatus(body)
			if err != nil {
				return fmt.Errorf("host %s: %w", name, err)
			}
			if r := recs[name]; r != nil {
				r.Seen, r.Observed = true, observed(st, r.Observed)
			}
			return nil
		}, "SELECT hostname, status FROM host_status WHERE hostname IN ("+in+")", anys(chunk)...)
	})
	if err != nil {
		return nil, fmt.Errorf("records: %w", err)
	}
	as, err := assignmentsOf(ctx, tx, l, names)
	if err != nil {
		return nil, err
	}
	out := make([]HostRecord, 0, len(names))
	for _, n := range names {
		r := recs[n]
		if a, ok := as[n]; ok {
			r.Assignment = &a
		}
		if r.Seen || r.Assignment != nil || r.Fleet != nil {
			out = append(out, *r)
		}
	}
	return out, nil
}

// LastSeen returns the last-seen times of the named hosts that have one.
func (s *db) LastSeen(ctx context.Context, names []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(names))
	err := s.read(ctx, func(tx *txn) error {
		return inChunks(names, idChunk, func(chunk []string) error {
			return eachRow(ctx, tx, func(rs row) error {
				var name string
				var at int64
				if err := rs.Scan(&name, &at); err != nil {
					return err
				}
				out[name] = fromMicros(at)
				return nil
			}, "SELECT hostname, last_seen FROM host_seen WHERE hostname IN ("+placeholders(len(chunk))+")", anys(chunk)...)
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: last seen: %w", err)
	}
	return out, nil
}

// ---- rollouts ----

// RolloutCursor is a place in the list of rollouts, newest first: the
// rollouts after it opened before OpenedAt, or then with a smaller id.
type RolloutCursor struct {
	OpenedAt time.Time
	ID       string
}

// RolloutQuery selects a page of rollout summaries (Store.RolloutPage).
type RolloutQuery struct {
	// Before: only rollouts after this place, newest first; nil starts
	// with the newest.
	Before *RolloutCursor
	// Limit: at most this many (DefaultRolloutLimit when zero or less, at
	// most MaxRolloutLimit).
	Limit int
	// Channel, State: only rollouts of that channel, in that state.
	Channel string
	State   reconciler.RolloutState
}

// RolloutSummary is a rollout without what grows with its hosts: its
// header and the parts of its plan that do not (waves, health gate,
// policy, compliance, budgets without their host lists, channel windows,
// approvals, freeze break, analyses). Rollout.Hosts, Edges and HostWindows
// are nil, and each budget's Hosts. Groups counts its hosts by wave and
// state (Blocked and LatestSince are zero).
type RolloutSummary struct {
	Rollout reconciler.Rollout
	Groups  []HostGroup
}

// RolloutPage is a page of rollout summaries, newest first.
type RolloutPage struct {
	Rollouts []RolloutSummary
	// Next is the Before of the next page; nil when no rollout follows.
	Next *RolloutCursor
}

// HostGroup counts the hosts of a rollout that share a wave, a state and
// (in a RolloutView) the gate that last held them.
type HostGroup struct {
	Wave    int
	State   reconciler.HostState
	Blocked reconciler.Reason
	Count   int
	// LatestSince is the latest Since of the group's hosts.
	LatestSince time.Time
}

// frozenSummary is what a summary decodes of a rollout's frozen plan
// (frozen's members; encoding/json skips the others): everything but the
// edges, the host windows and the budgets' host lists.
type frozenSummary struct {
	Waves           []reconciler.WaveSpec    `json:"waves"`
	HealthGate      proto.HealthGate         `json:"healthGate"`
	OnHealthFailure string                   `json:"onHealthFailure"`
	ComplianceMode  string                   `json:"complianceMode"`
	Frameworks      []string                 `json:"complianceFrameworks"`
	Budgets         []budgetSummary          `json:"budgets"`
	Windows         []proto.Window           `json:"windows,omitempty"`
	Approvals       []reconciler.Approval    `json:"approvals,omitempty"`
	FreezeBreak     *reconciler.FreezeBreak  `json:"freezeBreak,omitempty"`
	Analyses        []reconciler.AnalysisRun `json:"analyses,omitempty"`
	Reboot          *proto.Reboot            `json:"reboot,omitempty"`
}

// budgetSummary is a frozen budget without its hosts.
type budgetSummary struct {
	MaxInFlight    *int           `json:"maxInFlight,omitempty"`
	MaxInFlightPct *int           `json:"maxInFlightPct,omitempty"`
	Name           string         `json:"name,omitempty"`
	Selector       proto.Selector `json:"selector"`
}

// frozenView is what a host's view needs of a rollout's frozen plan
// (reconciler.Situate): a summary's members, and the host windows.
type frozenView struct {
	frozenSummary
	HostWindows []reconciler.HostWindowSpec `json:"hostWindows,omitempty"`
}

func (f frozenView) into(r *reconciler.Rollout) {
	f.frozenSummary.into(r)
	r.HostWindows = f.HostWindows
}

// summaryLeavesOut are the members of frozen a summary leaves out.
var summaryLeavesOut = []string{"edges", "hostWindows"}

func (f frozenSummary) into(r *reconciler.Rollout) {
	r.Waves, r.HealthGate, r.OnHealthFailure = f.Waves, f.HealthGate, f.OnHealthFailure
	r.ComplianceMode, r.Frameworks, r.Windows = f.ComplianceMode, f.Frameworks, f.Windows
	r.Approvals, r.FreezeBreak, r.Analyses, r.Reboot = f.Approvals, f.FreezeBreak, f.Analyses, f.Reboot
	if f.Budgets != nil {
		r.Budgets = make([]proto.RolloutBudget, len(f.Budgets))
		for i, b := range f.Budgets {
			r.Budgets[i] = proto.RolloutBudget{MaxInFlight: b.MaxInFlight, MaxInFlightPct: b.MaxInFlightPct, Name: b.Name, Selector: b.Selector}
		}
	}
}

// RolloutPage returns a page of rollout summaries, newest first (by
// opening time, then id, as Rollouts), with their hosts counted by wave
// and state:
//
//  1. the page's headers are read by key, without their plans;
//  2. a rollout that is not live (liveness.live: no tick loads it, so
//     neither its plan nor its hosts change any more) whose summary this
//     store value computed before, for the same header, gets it from
//     s.pages;
//  3. for the others, the plans are read and decoded without what a
//     summary leaves out, and their hosts counted in one grouped query;
//     those not live are kept in s.pages.
//
// A page of history thus costs its headers once its summaries are known,
// and its live rollouts' hosts.
func (s *db) RolloutPage(ctx context.Context, q RolloutQuery) (RolloutPage, error) {
	limit := clampLimit(q.Limit, DefaultRolloutLimit, MaxRolloutLimit)
	where, args := []string{"1 = 1"}, []any{}
	if q.Channel != "" {
		where, args = append(where, "channel = ?"), append(args, q.Channel)
	}
	if q.State != "" {
		where, args = append(where, "state = ?"), append(args, string(q.State))
	}
	if b := q.Before; b != nil {
		at := micros(b.OpenedAt)
		where, args = append(where, "(opened_at < ? OR (opened_at = ? AND id < ?))"), append(args, at, at, b.ID)
	}
	out := RolloutPage{Rollouts: []RolloutSummary{}}
	err := s.read(ctx, func(tx *txn) error {
		err := eachRow(ctx, tx, func(rs row) error {
			r, _, err := scanRollout(rs)
			out.Rollouts = append(out.Rollouts, RolloutSummary{Rollout: r})
			return err
		}, "SELECT "+rolloutHeaderCols+" FROM rollouts WHERE "+strings.Join(where, " AND ")+" ORDER BY opened_at DESC, id DESC LIMIT ?", append(args, limit+1)...)
		if err != nil {
			return err
		}
		if len(out.Rollouts) > limit {
			out.Rollouts = out.Rollouts[:limit]
			last := out.Rollouts[limit-1].Rollout
			out.Next = &RolloutCursor{OpenedAt: last.OpenedAt, ID: last.ID}
		}
		if len(out.Rollouts) == 0 {
			return nil
		}
		l, err := loadLiveness(ctx, tx)
		if err != nil {
			return err
		}
		live := map[string]bool{}
		for _, h := range l.liveHeads() {
			live[h.id] = true
		}
		index := map[string]int{}
		var misses []string
		for i := range out.Rollouts {
			sum := &out.Rollouts[i]
			id := sum.Rollout.ID
			if !live[id] {
				if e, ok := s.pages.get(sum.Rollout); ok {
					e.plan.into(&sum.Rollout)
					sum.Groups = e.groups
					continue
				}
			} else {
				s.pages.drop(id)
			}
			index[id] = i
			misses = append(misses, id)
		}
		if len(misses) == 0 {
			return nil
		}
		plans := make(map[string]frozenSummary, len(misses))
		err = eachRow(ctx, tx, func(rs row) error {
			var id, fz string
			if err := rs.Scan(&id, &fz); err != nil {
				return err
			}
			var f frozenSummary
			if err := unmarshal(fz, &f); err != nil {
				return fmt.Errorf("rollout %s: %w", id, err)
			}
			plans[id] = f
			return nil
		}, "SELECT id, frozen FROM rollouts WHERE id IN ("+placeholders(len(misses))+")", anys(misses)...)
		if err != nil {
			return err
		}
		err = eachRow(ctx, tx, func(rs row) error {
			var (
				id string
				g  HostGroup
			)
			if err := rs.Scan(&id, &g.Wave, (*string)(&g.State), &g.Count); err != nil {
				return err
			}
			if i, ok := index[id]; ok {
				out.Rollouts[i].Groups = append(out.Rollouts[i].Groups, g)
			}
			return nil
		}, "SELECT rollout_id, wave, state, COUNT(*) FROM rollout_hosts WHERE rollout_id IN ("+placeholders(len(misses))+
			") GROUP BY rollout_id, wave, state ORDER BY rollout_id, wave, state", anys(misses)...)
		if err != nil {
			return err
		}
		for _, id := range misses {
			sum := &out.Rollouts[index[id]]
			f := plans[id]
			f.into(&sum.Rollout)
			if !live[id] {
				s.pages.put(sum.Rollout, f, sum.Groups)
			}
		}
		return nil
	})
	if err != nil {
		return RolloutPage{}, fmt.Errorf("store: rollout page: %w", err)
	}
	return out, nil
}

// pageCache keeps the summaries of the rollouts that are not live, by id:
// no tick loads them, so their plans and hosts no longer change. One
// becomes live again only while an intent names it; the tick that judges
// the intent refuses what a rollout that is over cannot take, and a host
// that changes state would move the rollout's progress time (rfcs/0005),
// whichever replica ticks. So an entry is used only for the header it was
// made with (state, last update, last progress), and dropped when its
// rollout is seen live. At most maxPageCache are kept: the cache starts
// over when full.
type pageCache struct {
	mu      sync.Mutex
	entries map[string]pageEntry
}

type pageEntry struct {
	state             reconciler.RolloutState
	updated, progress int64
	plan              frozenSummary
	groups            []HostGroup
}

const maxPageCache = 4 * MaxRolloutLimit

func (c *pageCache) get(r reconciler.Rollout) (pageEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[r.ID]
	return e, ok && e.state == r.State && e.updated == micros(r.UpdatedAt) && e.progress == micros(r.ProgressAt)
}

func (c *pageCache) put(r reconciler.Rollout, plan frozenSummary, groups []HostGroup) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= maxPageCache {
		c.entries = map[string]pageEntry{}
	}
	c.entries[r.ID] = pageEntry{state: r.State, updated: micros(r.UpdatedAt), progress: micros(r.ProgressAt), plan: plan, groups: groups}
}

func (c *pageCache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, id)
}

// RolloutView is one rollout with a page of its hosts.
type RolloutView struct {
	// Rollout has its whole frozen plan, and the page's hosts, by name.
	Rollout reconciler.Rollout
	// Next is the after of the next page of hosts; empty when no host
	// follows.
	Next string
	// Groups counts every host of the rollout by wave, state and the gate
	// that last held it (Blocked), with the latest Since of each group:
	// what the rollout's counts, waiting hosts and soak are computed from
	// without reading every host.
	Groups []HostGroup
}

// RolloutView returns a rollout with its whole frozen plan and the page
// of its hosts after after (limit: DefaultRolloutHostLimit when zero or
// less, at most MaxRolloutHostLimit; negative reads no host), and every
// host counted in Groups (ErrNotFound).
func (s *db) RolloutView(ctx context.Context, id, after string, limit int) (RolloutView, error) {
	var out RolloutView
	err := s.read(ctx, func(tx *txn) error {
		rs, err := s.loadRollouts(ctx, tx, []string{id}, false, planWhole)
		if err != nil {
			return err
		}
		if len(rs) == 0 {
			return fmt.Errorf("%w: rollout %q", ErrNotFound, id)
		}
		out.Rollout = rs[0]
		reasons := reasonDecoder{}
		err = eachRow(ctx, tx, func(rs row) error {
			var (
				g       HostGroup
				blocked string
				since   int64
			)
			if err := rs.Scan(&g.Wave, (*string)(&g.State), &blocked, &g.Count, &since); err != nil {
				return err
			}
			var err error
			if g.Blocked, err = reasons.decode(blocked); err != nil {
				return err
			}
			g.LatestSince = fromMicros(since)
			out.Groups = append(out.Groups, g)
			return nil
		}, "SELECT wave, state, blocked, COUNT(*), MAX(since) FROM rollout_hosts WHERE rollout_id = ? GROUP BY wave, state, blocked", id)
		if err != nil {
			return fmt.Errorf("host groups: %w", err)
		}
		slices.SortFunc(out.Groups, func(a, b HostGroup) int {
			return cmp.Or(cmp.Compare(a.Wave, b.Wave), strings.Compare(string(a.State), string(b.State)),
				strings.Compare(a.Blocked.Gate, b.Blocked.Gate), strings.Compare(a.Blocked.Code, b.Blocked.Code),
				strings.Compare(a.Blocked.Message, b.Blocked.Message))
		})
		if limit < 0 {
			return nil
		}
		limit = clampLimit(limit, DefaultRolloutHostLimit, MaxRolloutHostLimit)
		sc := newHostScanner()
		out.Rollout.Hosts = []reconciler.RolloutHost{}
		err = eachRow(ctx, tx, func(rs row) error {
			_, h, err := sc.scan(rs)
			if err != nil {
				return err
			}
			out.Rollout.Hosts = append(out.Rollout.Hosts, h)
			return nil
		}, "SELECT "+hostCols+" FROM rollout_hosts WHERE rollout_id = ? AND hostname > ? ORDER BY hostname LIMIT ?", id, after, limit+1)
		if err != nil {
			return fmt.Errorf("hosts: %w", err)
		}
		if len(out.Rollout.Hosts) > limit {
			out.Rollout.Hosts = out.Rollout.Hosts[:limit]
			out.Next = out.Rollout.Hosts[limit-1].Hostname
		}
		return nil
	})
	if errors.Is(err, ErrNotFound) {
		return RolloutView{}, err
	}
	if err != nil {
		return RolloutView{}, fmt.Errorf("store: rollout view %s: %w", id, err)
	}
	return out, nil
}

// RolloutHeader returns a rollout's header (ErrNotFound): its id,
// channel, ref, state, wave and phase, times, reason, manifest hash and
// forgiven failures, without its frozen plan and its hosts.
func (s *db) RolloutHeader(ctx context.Context, id string) (reconciler.Rollout, error) {
	var r reconciler.Rollout
	err := s.read(ctx, func(tx *txn) error {
		var err error
		r, _, err = scanRollout(tx.queryRow(ctx, "SELECT "+rolloutHeaderCols+" FROM rollouts WHERE id = ?", id))
		return err
	})
	if errors.Is(err, errNoRows) {
		return reconciler.Rollout{}, fmt.Errorf("%w: rollout %q", ErrNotFound, id)
	}
	if err != nil {
		return reconciler.Rollout{}, fmt.Errorf("store: rollout header %s: %w", id, err)
	}
	return r, nil
}

// rolloutHeaderCols are rolloutCols with an empty text for the frozen
// plan: what scanRollout reads, without reading the plan.
var rolloutHeaderCols = func() string {
	cols := strings.Split(rolloutCols, ", ")
	cols[slices.Index(cols, "frozen")] = "''"
	return strings.Join(cols, ", ")
}()

// RolloutsByID returns the rollouts with these ids that exist, oldest
// first, with their whole frozen plans and without their hosts.
func (s *db) RolloutsByID(ctx context.Context, ids []string) ([]reconciler.Rollout, error) {
	var out []reconciler.Rollout
	err := s.read(ctx, func(tx *txn) error {
		var err error
		out, err = s.loadRollouts(ctx, tx, ids, false, planForView)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: rollouts by id: %w", err)
	}
	return out, nil
}

// LatestRollouts returns each channel's latest rollout (by opening time,
// then id), by channel, from the rollouts' keys alone.
func (s *db) LatestRollouts(ctx context.Context) (map[string]string, error) {
	var out map[string]string
	err := s.read(ctx, func(tx *txn) error {
		var err error
		out, err = latestRollouts(ctx, tx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: latest rollouts: %w", err)
	}
	return out, nil
}

// latestRollouts is LatestRollouts inside a transaction.
func latestRollouts(ctx context.Context, tx *txn) (map[string]string, error) {
	out := map[string]string{}
	latest := map[string]head{}
	err := eachRow(ctx, tx, func(rs row) error {
		var h head
		if err := rs.Scan(&h.channel, &h.opened, &h.id); err != nil {
			return err
		}
		if cur, ok := latest[h.channel]; !ok || h.newer(cur) {
			latest[h.channel], out[h.channel] = h, h.id
		}
		return nil
	}, "SELECT channel, opened_at, id FROM rollouts")
	return out, err
}
