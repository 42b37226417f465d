package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/reconciler"
)

// A leading replica keeps the reconciler's Input between its ticks
// (rfcs/0006 §Tick loop 3): the resident input. A tick then reads only
// what changed since the previous one, and writes what it decided to the
// store and to the resident input alike:
//
//  1. The first tick under a lease (holder and epoch), a tick after the
//     watermark's epoch moved (a manifest replaced, rollouts or hosts
//     pruned), a tick after one that failed, and a tick whose caller asks
//     for it (TickParams.Full) load everything, as a cold start does.
//  2. Any other tick reads the watermark's counters, then the host
//     statuses stamped with a changes value above the last one read and
//     not above the current one, and the last-seen times likewise with
//     the seen counter (bumpStamp: stamps follow commit order, so none is
//     missed); the channels, the unconsumed intents and the measurements
//     of running waves, which are few, in full; and a rollout an intent
//     names that the input does not hold (it becomes live).
//  3. After the tick commits, its Output is applied to the resident input
//     as reconciler.Apply does, and the rollouts that stopped being live
//     (liveness.live) leave it: it is again what a cold load would read.
//     A tick that fails leaves no resident input.
//  4. VerifyKept compares a copy of the resident input with a cold load
//     from one snapshot, beside the ticks; TickParams.Verify does the same
//     in the tick's transaction. The resident input must equal a cold
//     load, but for the hosts written after the resident input's marks,
//     which the cold load may already see (compareInputs).
type resident struct {
	holder string
	lease  int64 // the lease's epoch
	// marks are the watermark's counters the input is current with.
	marks marks
	heads map[string]head // every rollout, live or not
	live  map[string]*reconciler.Rollout
	// inFlight counts, per live rollout, its hosts in flight.
	inFlight   map[string]int
	byHost     map[string][]hostSlot // host -> where the live rollouts list it
	obs        map[string]reconciler.ObservedHost
	deferrals  []reconciler.Deferral
	visibility []reconciler.Visibility
}

// hostSlot is where a live rollout lists a host: the rollout, and the
// host's index in its host list (sorted by name when the rollout opened,
// never reordered: a tick replaces a host's record in place).
type hostSlot struct {
	ro *reconciler.Rollout
	i  int
}

// marks are the watermark's counters.
type marks struct{ changes, seen, epoch int64 }

func readMarks(ctx context.Context, tx *txn) (marks, error) {
	var m marks
	err := tx.queryRow(ctx, "SELECT changes, seen, epoch FROM watermark WHERE id = 1").Scan(&m.changes, &m.seen, &m.epoch)
	if err != nil {
		return m, fmt.Errorf("store: watermark: %w", err)
	}
	return m, nil
}

// TickReport says what a tick did, for its caller (TickParams.Report).
type TickReport struct {
	// Full: the tick loaded its input in full (a cold load).
	Full bool
	// Skipped: nothing the reconciler reads had changed and the previous
	// tick's quiet time had not passed (TickParams.SkipBefore), so decide
	// was not called and nothing but the watch was written.
	Skipped bool
	// Changed: something a tick must see was written since the previous
	// tick (a status, an activation, an intent, a release, a
	// measurement); with Full, always set.
	Changed bool
	// More: more statuses changed than the tick read
	// (TickParams.MaxStatuses); the next tick reads on, and should come at
	// once.
	More bool
	// Diverged: TickParams.Verify found the resident input different from
	// a cold load (which was used); Divergence says where.
	Diverged   bool
	Divergence string
	// Assignments are the hosts whose assignment (reconciler.Assignment:
	// their record in the rollout that drives them) the tick changed, with
	// the new one (nil: the host is in no live rollout any more); with
	// Full, every host's.
	Assignments map[string]*reconciler.Assignment
	// Early: this report comes first, with the assignments of the hosts
	// whose activation the tick may have started (those it updated, and
	// those a rollout it opened dispatched to), and is not Full; a second
	// report, with the tick's flags, follows with the rest of the
	// assignments it changed (with Full, every host's). A tick that opens
	// a rollout of 100,000 hosts changes every host's assignment, which
	// takes a while to work out: the hosts to wake learn theirs first.
	Early bool
}

// errReload: the resident input cannot follow; load everything.
var errReload = errors.New("store: the resident input must be loaded again")

// newResident keeps a cold load, made at marks m under lease l.
func newResident(l Lease, m marks, lv *liveness, in *reconciler.Input) *resident {
	r := &resident{holder: l.Holder, lease: l.Epoch, marks: m, heads: map[string]head{}, live: map[string]*reconciler.Rollout{},
		inFlight: map[string]int{}, byHost: map[string][]hostSlot{}, obs: in.Hosts,
		deferrals: slices.Clone(in.Deferrals), visibility: slices.Clone(in.Visibility)}
	for _, h := range lv.heads {
		r.heads[h.id] = h
	}
	for i := range in.Rollouts {
		ro := in.Rollouts[i]
		r.add(&ro)
	}
	if r.obs == nil {
		r.obs = map[string]reconciler.ObservedHost{}
	}
	return r
}

// add makes a rollout live in the input.
func (r *resident) add(ro *reconciler.Rollout) {
	r.live[ro.ID] = ro
	n := 0
	for i, h := range ro.Hosts {
		r.byHost[h.Hostname] = append(r.byHost[h.Hostname], hostSlot{ro, i})
		if h.State.InFlight() {
			n++
		}
	}
	r.inFlight[ro.ID] = n
}

// drop takes a rollout out of the input.
func (r *resident) drop(id string) {
	ro := r.live[id]
	if ro == nil {
		return
	}
	for _, h := range ro.Hosts {
		slots := slices.DeleteFunc(r.byHost[h.Hostname], func(s hostSlot) bool { return s.ro == ro })
		if len(slots) == 0 {
			delete(r.byHost, h.Hostname)
		} else {
			r.byHost[h.Hostname] = slots
		}
	}
	delete(r.live, id)
	delete(r.inFlight, id)
}

// input fills the Input's resident parts: the live rollouts (oldest
// first; their host lists are the input's own, which decide must not
// modify), the observed hosts, the deferrals and the visibility records.
func (r *resident) input(in *reconciler.Input) {
	in.Rollouts = make([]reconciler.Rollout, 0, len(r.live))
	for _, ro := range r.live {
		in.Rollouts = append(in.Rollouts, *ro)
	}
	slices.SortFunc(in.Rollouts, func(a, b reconciler.Rollout) int {
		return cmp.Or(a.OpenedAt.Compare(b.OpenedAt), strings.Compare(a.ID, b.ID))
	})
	in.Hosts = r.obs
	in.Deferrals = slices.Clone(r.deferrals)
	if in.Deferrals == nil {
		in.Deferrals = []reconciler.Deferral{}
	}
	in.Visibility = slices.Clone(r.visibility)
	if in.Visibility == nil {
		in.Visibility = []reconciler.Visibility{}
	}
}

// catchUp reads what changed since the resident input's marks: statuses,
// last-seen times, and the rollouts the unconsumed intents name that it
// does not hold. It reports whether anything a tick must see changed, and
// whether more statuses changed than it read (errReload when the input
// cannot follow). At most limit statuses are read (0: every one), in the
// order of their stamps and never part of one stamp's: the rest are the
// next tick's, as if they were written after this one.
func (s *db) catchUp(ctx context.Context, tx *txn, r *resident, intents []reconciler.Intent, limit int) (changed, more bool, err error) {
	m, err := readMarks(ctx, tx)
	if err != nil {
		return false, false, err
	}
	if m.epoch != r.marks.epoch || m.changes < r.marks.changes || m.seen < r.marks.seen {
		return false, false, errReload
	}
	changed = m.changes != r.marks.changes
	if changed {
		rows, err := changedStatuses(ctx, tx, r.marks.changes, m.changes, limit)
		if err != nil {
			return false, false, err
		}
		if limit > 0 && len(rows) > limit {
			// Stop before the stamp of the first row past the limit; when
			// one stamp holds more than the limit, read that stamp whole.
			cut := rows[limit].seq
			keep := 0
			for keep < len(rows) && rows[keep].seq < cut {
				keep++
			}
			if keep == 0 {
				if rows, err = changedStatuses(ctx, tx, r.marks.changes, cut, 0); err != nil {
					return false, false, err
				}
				keep, cut = len(rows), cut+1
			}
			rows, m.changes, more = rows[:keep], cut-1, cut <= m.changes
		}
		for _, c := range rows {
			st, err := decodeStatus(c.body)
			if err != nil {
				return false, false, fmt.Errorf("store: load changed statuses: host %s: %w", c.name, err)
			}
			r.obs[c.name] = observed(st, r.obs[c.name])
		}
	}
	// A last-seen time is written after the status it goes with: while
	// statuses wait for the next tick, so do the times, lest a tick see a
	// host heard after a status it has not read.
	if more {
		m.seen = r.marks.seen
	}
	if m.seen != r.marks.seen {
		err := eachRow(ctx, tx, func(rs row) error {
			var name string
			var at, saidAt int64
			if err := rs.Scan(&name, &at, &saidAt); err != nil {
				return err
			}
			o := r.obs[name]
			seenTimes(&o, at, saidAt)
			r.obs[name] = o
			return nil
		}, "SELECT hostname, last_seen, said_at FROM host_seen WHERE seq > ? AND seq <= ?", r.marks.seen, m.seen)
		if err != nil {
			return false, false, fmt.Errorf("store: load last-seen times: %w", err)
		}
	}
	r.marks = m
	// A rollout an unconsumed intent names is live (liveness.live): one
	// the input does not hold is loaded, as a cold load would.
	var missing []string
	for _, it := range intents {
		if _, ok := r.live[it.RolloutID]; !ok {
			if _, known := r.heads[it.RolloutID]; known && !slices.Contains(missing, it.RolloutID) {
				missing = append(missing, it.RolloutID)
			}
		}
	}
	if len(missing) > 0 {
		rs, err := s.loadRollouts(ctx, tx, missing, true, planCached)
		if err != nil {
			return false, false, err
		}
		for i := range rs {
			r.add(&rs[i])
		}
	}
	return changed, more, nil
}

// changedStatus is a status row stamped after the resident input's mark.
type changedStatus struct {
	name, body string
	seq        int64
}

// changedStatuses reads the statuses stamped in (after, upto], in stamp
// order: limit+1 of them when limit is set (one more, to tell where a
// stamp ends), else all.
func changedStatuses(ctx context.Context, tx *txn, after, upto int64, limit int) ([]changedStatus, error) {
	q := "SELECT hostname, status, seq FROM host_status WHERE seq > ? AND seq <= ? ORDER BY seq"
	args := []any{after, upto}
	if limit > 0 {
		q += " LIMIT ?"
		args = append(args, limit+1)
	}
	var out []changedStatus
	err := eachRow(ctx, tx, func(rs row) error {
		var c changedStatus
		if err := rs.Scan(&c.name, &c.body, &c.seq); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	}, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store: load changed statuses: %w", err)
	}
	return out, nil
}

// changes are the hosts whose assignment a committed tick may have
// changed (resident.apply).
type changes struct {
	// urgent may have started an activation: the hosts the tick
	// updated, and those a rollout it opened holds past Pending (the
	// dispatches of its first wave).
	urgent []string
	// rollouts had every host's assignment touched: opened, changed
	// state (every assignment carries it), or left the input.
	rollouts []*reconciler.Rollout
}

// apply applies a committed tick's Output to the resident input (as
// reconciler.Apply does), lets the rollouts that are no longer live leave
// it, and returns the hosts whose assignment the tick may have changed.
func (r *resident) apply(in *reconciler.Input, out *reconciler.Output) changes {
	var ch changes
	for i := range out.Rollouts {
		u := &out.Rollouts[i]
		if u.New {
			ro := u.Rollout
			r.add(&ro)
			r.heads[ro.ID] = headOf(&ro)
			ch.rollouts = append(ch.rollouts, &ro)
			for _, h := range ro.Hosts {
				if h.State != reconciler.HostPending {
					ch.urgent = append(ch.urgent, h.Hostname)
				}
			}
			continue
		}
		cur := r.live[u.Rollout.ID]
		if cur == nil {
			continue
		}
		hosts := cur.Hosts
		state := cur.State
		*cur = u.Rollout
		cur.Hosts = hosts
		r.heads[cur.ID] = headOf(cur)
		if cur.State != state {
			ch.rollouts = append(ch.rollouts, cur)
		}
	}
	for i := range out.Hosts {
		u := &out.Hosts[i]
		cur := r.live[u.RolloutID]
		if cur == nil {
			continue
		}
		j := r.index(u.Host.Hostname, cur)
		if j < 0 {
			continue
		}
		if cur.Hosts[j].State.InFlight() {
			r.inFlight[cur.ID]--
		}
		if u.Host.State.InFlight() {
			r.inFlight[cur.ID]++
		}
		cur.Hosts[j] = u.Host
		ch.urgent = append(ch.urgent, u.Host.Hostname)
	}
	r.deferrals = slices.Clone(out.Deferrals)
	r.visibility = slices.Clone(out.Visibility)

	// Liveness, as a cold load judges it.
	consumed := map[string]bool{}
	for _, res := range out.IntentResults {
		consumed[res.IntentID] = true
	}
	l := &liveness{latest: map[string]string{}, inFlight: map[string]bool{}, intended: map[string]bool{}}
	for _, h := range r.heads {
		if cur, ok := l.latest[h.channel]; !ok || h.newer(r.heads[cur]) {
			l.latest[h.channel] = h.id
		}
	}
	for id, n := range r.inFlight {
		if n > 0 {
			l.inFlight[id] = true
		}
	}
	for _, it := range in.Intents {
		if !consumed[it.ID] {
			l.intended[it.RolloutID] = true
		}
	}
	for id := range r.live {
		if !l.live(r.heads[id]) {
			ch.rollouts = append(ch.rollouts, r.live[id])
			r.drop(id)
		}
	}
	return ch
}

// changedAssignments are the assignments of every host in ch but those
// in skip (reported already).
func (r *resident) changedAssignments(ch changes, skip map[string]*reconciler.Assignment) map[string]*reconciler.Assignment {
	n := len(ch.urgent)
	for _, ro := range ch.rollouts {
		n += len(ro.Hosts)
	}
	assign := make(map[string]*reconciler.Assignment, n)
	add := func(h string) {
		if _, ok := skip[h]; ok {
			return
		}
		if _, ok := assign[h]; !ok {
			assign[h] = r.assignment(h)
		}
	}
	for _, h := range ch.urgent {
		add(h)
	}
	for _, ro := range ch.rollouts {
		for _, h := range ro.Hosts {
			add(h.Hostname)
		}
	}
	return assign
}

// assignment picks a host's record in the rollout that drives it
// (reconciler.Drives), as assignments does (nil when none).
func (r *resident) assignment(host string) *reconciler.Assignment {
	var best *reconciler.Assignment
	var bestOpened time.Time
	for _, s := range r.byHost[host] {
		ro := s.ro
		h := ro.Hosts[s.i]
		a := reconciler.Assignment{RolloutID: ro.ID, Channel: ro.Channel, RolloutState: ro.State, ManifestHash: ro.ManifestHash,
			Host: h, Soak: ro.WaveSoak(h.Wave)}
		// Compared as stored, to the microsecond, as a cold load does.
		opened := utcMicro(ro.OpenedAt)
		if best == nil || reconciler.Drives(a, opened, *best, bestOpened) {
			best, bestOpened = &a, opened
		}
	}
	return best
}

// index is the index of host in live rollout ro's host list, -1 when ro
// does not list it.
func (r *resident) index(host string, ro *reconciler.Rollout) int {
	for _, s := range r.byHost[host] {
		if s.ro == ro {
			return s.i
		}
	}
	return -1
}

// assignments is every host's assignment.
func (r *resident) assignments() map[string]*reconciler.Assignment {
	out := make(map[string]*reconciler.Assignment, len(r.byHost))
	for host := range r.byHost {
		if a := r.assignment(host); a != nil {
			out[host] = a
		}
	}
	return out
}

// headOf is what liveness needs of a kept rollout (its waves' soaks are
// read from the rollout itself: resident.assignment).
func headOf(r *reconciler.Rollout) head {
	return head{id: r.ID, channel: r.Channel, state: r.State, opened: micros(r.OpenedAt), updated: micros(r.UpdatedAt),
		manifestHash: r.ManifestHash}
}

// compareInputs says where two Inputs differ, "" when they do not: the
// resident input against a cold load (TickParams.Verify, VerifyKept).
// What the cold load may hold that the resident input cannot does not
// count:
//   - of a host that late reports written after the marks the resident
//     input is current with, its status when its status row is stamped
//     after them, its last-seen time when its last-seen row is (a check-in
//     the next tick reads; stamps only grow, so a row stamped before them
//     is what the resident input read), and the host whole when the
//     resident input does not hold it yet;
//   - a rollout the resident input does not hold that only an unconsumed
//     intent keeps live (lv, the cold load's liveness): the intent may
//     have been added after the resident input read the intents, and the
//     next tick loads the rollout;
//   - the intents, which a tick reads in full, keeping none.
func compareInputs(resident, cold *reconciler.Input, lv *liveness, late func(names []string) (map[string]lateRows, error)) (string, error) {
	if names := differingHosts(resident.Hosts, cold.Hosts); len(names) > 0 {
		lateOf, err := late(names)
		if err != nil {
			return "", err
		}
		for _, name := range names {
			a, inA := resident.Hosts[name]
			b, inB := cold.Hosts[name]
			l := lateOf[name]
			switch {
			case !inA && (l.status || l.seen):
				continue
			case !inA:
				return fmt.Sprintf("host %s: only the cold load has it: %+v", name, b), nil
			case !inB:
				return fmt.Sprintf("host %s: only the resident input has it: %+v", name, a), nil
			}
			if l.status {
				seen, said := a.LastSeen, a.StatusAt
				a = b
				a.LastSeen, a.StatusAt = seen, said
			}
			if l.seen {
				a.LastSeen, a.StatusAt = b.LastSeen, b.StatusAt
			}
			if !reflect.DeepEqual(a, b) {
				return fmt.Sprintf("host %s: resident %+v, cold %+v", name, resident.Hosts[name], b), nil
			}
		}
	}
	held := make(map[string]bool, len(resident.Rollouts))
	for i := range resident.Rollouts {
		held[resident.Rollouts[i].ID] = true
	}
	onlyIntended := map[string]bool{}
	if lv != nil {
		without := *lv
		without.intended = nil
		for _, h := range lv.heads {
			if !held[h.id] && lv.intended[h.id] && !without.live(h) {
				onlyIntended[h.id] = true
			}
		}
	}
	norm := func(in *reconciler.Input) reconciler.Input {
		c := *in
		c.Measurements = nil // loaded in full by both
		c.Hosts, c.Intents = nil, nil
		c.Rollouts = slices.DeleteFunc(slices.Clone(c.Rollouts), func(r reconciler.Rollout) bool { return onlyIntended[r.ID] })
		return c
	}
	a, b := norm(resident), norm(cold)
	if len(a.Rollouts) != len(b.Rollouts) {
		return fmt.Sprintf("rollouts: resident has %d, cold %d", len(a.Rollouts), len(b.Rollouts)), nil
	}
	for i := range a.Rollouts {
		if !reflect.DeepEqual(a.Rollouts[i], b.Rollouts[i]) {
			return fmt.Sprintf("rollout %s differs from the cold load's %s", a.Rollouts[i].ID, b.Rollouts[i].ID), nil
		}
	}
	if !reflect.DeepEqual(a, b) {
		return "the deferrals, visibility or channels differ", nil
	}
	return "", nil
}

// differingHosts names the hosts whose observed state differs between a
// and b, or that only one of them holds, sorted.
func differingHosts(a, b map[string]reconciler.ObservedHost) []string {
	var out []string
	for name, o := range b {
		if p, ok := a[name]; !ok || !reflect.DeepEqual(p, o) {
			out = append(out, name)
		}
	}
	for name := range a {
		if _, ok := b[name]; !ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// lateRows says which of a host's rows are stamped after the marks.
type lateRows struct{ status, seen bool }

// lateHosts reports, of names, the hosts with a status stamped after m's
// changes or a last-seen time stamped after m's seen: written after the
// resident input read its marks, in a transaction that committed before
// the cold load read them (PostgreSQL's READ COMMITTED lets each of a
// tick's statements see those; a snapshot taken after the marks were read
// holds them). Stamps only grow, so a row not among them was not written
// since, and a cold load read what the resident input holds.
func lateHosts(ctx context.Context, tx *txn, names []string, m marks) (map[string]lateRows, error) {
	late := map[string]lateRows{}
	err := inChunks(names, idChunk, func(chunk []string) error {
		in := placeholders(len(chunk))
		return eachRow(ctx, tx, func(rs row) error {
			var name string
			var seen int64
			if err := rs.Scan(&name, &seen); err != nil {
				return err
			}
			l := late[name]
			if seen == 1 {
				l.seen = true
			} else {
				l.status = true
			}
			late[name] = l
			return nil
		}, "SELECT hostname, 0 FROM host_status WHERE seq > ? AND hostname IN ("+in+")"+
			" UNION ALL SELECT hostname, 1 FROM host_seen WHERE seq > ? AND hostname IN ("+in+")",
			slices.Concat([]any{m.changes}, anys(chunk), []any{m.seen}, anys(chunk))...)
	})
	if err != nil {
		return nil, fmt.Errorf("store: hosts written during the tick: %w", err)
	}
	return late, nil
}
