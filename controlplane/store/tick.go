package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/kept"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TickParams are the inputs of a tick that do not come from the store.
type TickParams struct {
	// Lease is the caller's tick lease.
	Lease Lease
	// LeaseTTL: a tick that commits extends Lease to the clock at commit
	// plus LeaseTTL, unless it expires later already (lease.go), so that a
	// tick longer than the TTL does not cost the lease. Zero leaves the
	// expiry alone.
	LeaseTTL time.Duration
	// Clock is read once, after the tick lock is taken: the tick's now;
	// and, when LeaseTTL is set, once more before the commit, for the
	// lease's new expiry.
	Clock func() time.Time
	// Tunables go to the reconciler.
	Tunables reconciler.Tunables
	// MaxGap is the longest time between two committed ticks that does
	// not break the control plane's watch over its hosts; a longer gap (a
	// restart, a lost database, a store restored from a backup) starts a
	// new one. Zero means half the offline threshold.
	MaxGap time.Duration
	// Kept is what the caller keeps between its ticks (package kept): the
	// input of its lease's previous tick and the host rows it still owes.
	// The tick holds its lock throughout. Nil: the tick loads in full,
	// and keeps nothing.
	Kept *kept.Keeper
	// Full makes the tick load its input in full, a cold load, whatever
	// Kept holds.
	Full bool
	// Rewound: the caller saw the store go back in time since its last
	// tick (it lost writes it had acknowledged). The tick starts a new
	// watch (step 4), as it does when it finds the store's counters below
	// the highest ones a tick on p.Kept read (kept.Keeper.High).
	Rewound bool
	// Verify makes the tick compare the input it kept with a cold load in
	// the same transaction, and use the cold load (TickReport.Diverged).
	Verify bool
	// SkipBefore lets the tick skip decide when nothing a tick must see
	// changed since the previous tick of the kept input and now is before
	// it: the previous Output's QuietUntil (rfcs/0003 §Quiet ticks), or
	// zero to always decide.
	SkipBefore time.Time
	// MaxStatuses bounds the changed statuses a tick that follows the
	// kept input reads (0: DefaultMaxStatuses; negative: no bound): the
	// rest wait for the next tick (TickReport.More), so that a tick stays
	// short when thousands of hosts move at once. A cold load, and a tick
	// that verifies, read everything.
	MaxStatuses int
	// Report, when set, is told after the tick committed what it did,
	// before the store writes the host rows the tick deferred (step 8):
	// what it reports may be acted on at once.
	Report func(TickReport)
}

// DefaultMaxStatuses is TickParams.MaxStatuses when unset: about what a
// tick reads, decides and writes in a few hundred milliseconds here
// (BENCHMARKS.md, store tick churn).
const DefaultMaxStatuses = 10000

// At is a Clock that always reads t.
func At(t time.Time) func() time.Time { return func() time.Time { return t } }

// Tick runs one reconcile tick in one write transaction:
//
//  1. take the tick lock (PostgreSQL: a transaction-scoped advisory lock,
//     so the ticks of every replica run one at a time; SQLite: the single
//     writer);
//  2. read the clock: the tick's now (UTC, to the microsecond, as every
//     stored time). Anything committed before the lock is older than now;
//     what PostgreSQL lets the input's statements see of commits made
//     after the clock was read is newer than now, and the reconciler
//     leaves it for the next tick (rfcs/0003 §Input);
//  3. check that the lease is the tick lease's current holder and epoch
//     and has not expired at now, holding the lease row until commit so
//     that no other replica takes it meanwhile, though its holder may
//     renew it (else ErrNotLeader, before decide is called); then write
//     the host rows this lease's previous tick deferred and could not
//     write, and, when the tick loads in full, those of every rollout
//     still marked as owing rows (owed.go);
//  4. keep the watch: the previous committed tick must be at most MaxGap
//     old, and the store must not have lost writes since the caller's
//     last tick (p.Rewound, or its counters below kept.Keeper.High: the
//     last-seen times it lost would make healthy hosts look silent), else
//     a new watch starts now and a watch_started event says so
//     (Input.WatchingSince);
//  5. load the Input: tunables, every channel's release (artifacts
//     decoded once per hash and cached), the live rollouts with their
//     hosts (see liveness.live), every observed host, the unconsumed
//     intents, the deferrals, the channels in partial visibility and the
//     measurements of running waves — from the input p.Kept holds from
//     this lease's previous tick, brought up to date with what changed
//     since (catchup.go), or in full;
//  6. call decide, unless nothing a tick must see changed since the
//     previous tick and now is before p.SkipBefore (the previous Output's
//     QuietUntil): the tick is then skipped, and writes only the watch;
//  7. apply its Output as reconciler.Apply does, relative to the loaded
//     Input, extend the lease by p.LeaseTTL from the clock (lease.go), and
//     commit; then apply it to the kept input too, and tell
//     p.Report what the tick did and which assignments it changed (in
//     two reports when it also changed every host of a rollout: the
//     hosts whose activation it may have started first,
//     TickReport.Early);
//  8. a rollout it opened has its rollout row, and the rows of the hosts
//     it moved, in that commit: the rows of its hosts still Pending
//     follow in a second transaction, under the same lease (owed.go).
//
// An error from decide, or from applying, rolls everything back (the
// watch too); after an error of the store's p.Kept holds no input, and
// the next tick loads in full. decide runs inside the transaction: it must not call the
// store (on SQLite it would wait for the writer it holds), and must not
// modify what the Input points to (decoded artifacts and frozen rollout
// parts are shared with later ticks).
func (s *db) Tick(ctx context.Context, p TickParams, decide func(reconciler.Input) (reconciler.Output, error)) (reconciler.Output, error) {
	k := p.Kept
	if k == nil {
		k = &kept.Keeper{}
	}
	k.Lock()
	defer k.Unlock()
	var (
		out       reconciler.Output
		in        reconciler.Input
		rep       TickReport
		next      *kept.Input
		decideErr bool
		settled   bool       // the rows k.Owed held were written
		deferred  *kept.Owed // rows this tick defers, with their lease
		high      kept.Marks // the store's counters the tick read (kept.Keeper.High)
	)
	err := s.writeTick(ctx, func(tx *txn) error {
		if err := tx.lockTick(ctx); err != nil {
			return err
		}
		now := utcMicro(p.Clock())
		if err := checkLease(ctx, tx, p.Lease, now); err != nil {
			return err
		}
		wrote, repaired, err := settleOwed(ctx, s, tx, k, p.Lease, !keeps(k, p))
		if err != nil {
			return err
		}
		settled = wrote
		if repaired {
			k.Input = nil
		}
		in = reconciler.Input{Now: now, Tunables: p.Tunables}
		gap := p.MaxGap
		if gap <= 0 {
			gap = p.Tunables.OfflineThreshold() / 2
		}
		// The counters are read once: the watch, the catch-up and a cold
		// load's marks all go by them.
		marks, err := readMarks(ctx, tx)
		if err != nil {
			return err
		}
		started, err := keepWatch(ctx, tx, &in, gap, p.Rewound || marks.Below(k.High))
		if err != nil {
			return err
		}
		high = marks
		r, err := s.loadKept(ctx, tx, k.Input, marks, &in, p, &rep)
		if err != nil {
			return err
		}
		next = r
		if !rep.Full && !rep.Changed && started == nil && now.Before(p.SkipBefore) {
			rep.Skipped = true
			return extendTickLease(ctx, tx, p.Lease, p.LeaseTTL, p.Clock)
		}
		o, err := decide(in)
		if err != nil {
			decideErr = true
			return fmt.Errorf("store: tick: %w", err)
		}
		rep.More = rep.More || o.More
		if started != nil {
			o.Events = append([]reconciler.Event{*started}, o.Events...)
		}
		if err := s.apply(ctx, tx, &in, &o, now); err != nil {
			return fmt.Errorf("store: tick: apply: %w", err)
		}
		out = o
		if len(tx.owed) > 0 {
			deferred = &kept.Owed{Lease: keptLease(p.Lease), Rows: tx.owed, IDs: tx.owedIDs}
		}
		return extendTickLease(ctx, tx, p.Lease, p.LeaseTTL, p.Clock)
	})
	if err != nil {
		// A tick the store failed leaves no kept input: the next loads in
		// full. One decide refused wrote nothing the kept input does not
		// know of (it holds only what was committed), and stays.
		if decideErr {
			k.Input = next
		} else {
			k.Input = nil
		}
		return reconciler.Output{}, err
	}
	k.Input = next
	k.High = high
	if settled {
		k.Owed = nil
	}
	if !rep.Skipped {
		ch := next.Apply(&in, &out)
		var early map[string]*reconciler.Assignment
		if p.Report != nil && len(ch.Urgent) > 0 && (rep.Full || len(ch.Rollouts) > 0) {
			// The hosts to wake first (TickReport.Early), then the rest.
			early = next.ChangedAssignments(kept.Changes{Urgent: ch.Urgent}, nil)
			first := TickReport{Changed: rep.Changed, More: rep.More, Early: true, Assignments: early}
			p.Report(first)
		}
		if rep.Full {
			rep.Assignments = next.Assignments()
		} else {
			rep.Assignments = next.ChangedAssignments(ch, early)
		}
	}
	if p.Report != nil {
		p.Report(rep)
	}
	if deferred != nil {
		s.flushOwed(ctx, p, k, deferred)
	}
	return out, nil
}

// keeps reports whether k holds an input p's tick can start from
// (loadKept): one of the same lease, and p does not ask for a full load.
func keeps(k *kept.Keeper, p TickParams) bool {
	return k.Input != nil && k.Input.Lease == keptLease(p.Lease) && !p.Full
}

// keptLease is the holder and epoch of a lease.
func keptLease(l Lease) kept.Lease { return kept.Lease{Holder: l.Holder, Epoch: l.Epoch} }

// loadKept loads the tick's input (step 5): from r, the input kept after
// the previous tick, brought up to date (catchup.go), or in full when
// none is kept for this lease, it cannot follow, or p asks for it; m are
// the counters the tick read, which the input it returns is current with.
// It returns the input to keep after the tick.
func (s *db) loadKept(ctx context.Context, tx *txn, r *kept.Input, m kept.Marks, in *reconciler.Input, p TickParams, rep *TickReport) (*kept.Input, error) {
	if r != nil && (r.Lease != keptLease(p.Lease) || p.Full) {
		r = nil
	}
	if r != nil {
		if err := s.loadChannels(ctx, tx, in); err != nil {
			return nil, err
		}
		intents, err := loadIntents(ctx, tx)
		if err != nil {
			return nil, err
		}
		limit := p.MaxStatuses
		switch {
		case p.Verify || limit < 0:
			limit = 0
		case limit == 0:
			limit = DefaultMaxStatuses
		}
		changed, more, err := s.catchUp(ctx, tx, r, m, intents, limit)
		switch {
		case errors.Is(err, errReload):
			r = nil
		case err != nil:
			return nil, err
		default:
			r.Fill(in)
			in.Intents, rep.Changed, rep.More = intents, changed, more
			if in.Measurements, err = loadMeasured(ctx, tx, in.Rollouts); err != nil {
				return nil, err
			}
		}
	}
	if r != nil && !p.Verify {
		return r, nil
	}
	cold := reconciler.Input{Now: in.Now, Tunables: in.Tunables, WatchingSince: in.WatchingSince}
	lv, err := s.loadInput(ctx, tx, &cold)
	if err != nil {
		return nil, err
	}
	if r != nil {
		d, err := kept.Compare(in, &cold, lv.onlyIntended, func(names []string) (map[string]kept.Late, error) {
			return lateHosts(ctx, tx, names, r.Marks)
		})
		switch {
		case err != nil:
			return nil, err
		case d == "":
			return r, nil
		}
		rep.Diverged, rep.Divergence = true, d
	}
	*in = cold
	rep.Full, rep.Changed = true, true
	return kept.New(keptLease(p.Lease), m, lv.keptHeads(), in), nil
}

// keepWatch reads the watch, starts a new one when the previous committed
// tick is more than gap before now (or after it: a clock that went back,
// a store restored from elsewhere) or the store lost writes (rewound),
// sets in.WatchingSince, and records this tick as the latest. A new watch
// comes with the event that reports it.
func keepWatch(ctx context.Context, tx *txn, in *reconciler.Input, gap time.Duration, rewound bool) (*reconciler.Event, error) {
	now := micros(in.Now)
	var since, alive int64
	err := tx.queryRow(ctx, "SELECT since, alive_at FROM watch WHERE id = 1").Scan(&since, &alive)
	switch {
	case errors.Is(err, errNoRows):
		alive = -1
	case err != nil:
		return nil, fmt.Errorf("store: watch: %w", err)
	}
	var started *reconciler.Event
	if alive < 0 || now-alive > gap.Microseconds() || alive-now > time.Minute.Microseconds() || rewound {
		why := "the control plane starts watching its hosts"
		switch {
		case alive >= 0 && rewound:
			why = "the control plane's watch over its hosts restarts: the store lost writes it had acknowledged " +
				"(a crash of an asynchronous commit, a failover, a restore), last-seen times among them"
		case alive >= 0:
			why = fmt.Sprintf("the control plane's watch over its hosts restarts: its last tick was at %s (a restart, a lost database or a restored store)",
				fromMicros(alive).Format(time.RFC3339))
		}
		since = now
		started = &reconciler.Event{Kind: reconciler.EventWatchStarted, Wave: -1, Reason: reconciler.Reason{
			Code: codes.WatchStarted,
			Message: fmt.Sprintf("%s; a host it has not heard from is not judged offline before %s", why,
				in.Now.Add(in.Tunables.OfflineThreshold()).Format(time.RFC3339))}}
	}
	if _, err := tx.exec(ctx, `INSERT INTO watch (id, since, alive_at) VALUES (1, ?, ?)
		ON CONFLICT (id) DO UPDATE SET since = excluded.since, alive_at = excluded.alive_at`, since, now); err != nil {
		return nil, fmt.Errorf("store: watch: %w", err)
	}
	in.WatchingSince = fromMicros(since)
	return started, nil
}

// checkLease locks the tick lease's row FOR KEY SHARE (lease.go) and
// checks that l holds it at now.
func checkLease(ctx context.Context, tx *txn, l Lease, now time.Time) error {
	if l.Name != TickLease {
		return fmt.Errorf("%w: lease %q is not the tick lease", ErrNotLeader, l.Name)
	}
	var (
		holder         string
		epoch, expires int64
	)
	err := tx.queryRow(ctx, "SELECT holder, epoch, expires_at FROM leases WHERE name = ? FOR KEY SHARE", TickLease).
		Scan(&holder, &epoch, &expires)
	switch {
	case errors.Is(err, errNoRows):
		return fmt.Errorf("%w: the tick lease was never taken", ErrNotLeader)
	case err != nil:
		return fmt.Errorf("store: tick lease: %w", err)
	case holder == "" || holder != l.Holder || epoch != l.Epoch:
		return fmt.Errorf("%w: the tick lease is held by %q at epoch %d, not by %q at epoch %d",
			ErrNotLeader, holder, epoch, l.Holder, l.Epoch)
	case expires <= micros(now):
		return fmt.Errorf("%w: the tick lease of %q expired at %s", ErrNotLeader, holder,
			fromMicros(expires).Format(time.RFC3339Nano))
	}
	return nil
}

// apply persists out as reconciler.Apply(in, out) describes: in is what
// the tick loaded, so updates of rollouts, hosts and channels it did not
// load are ignored, as Apply ignores them. It writes, in this order:
//
//  1. the rollouts (applyRollouts);
//  2. their hosts (applyHosts);
//  3. the channels' last rolled refs (applyChannels);
//  4. the channels in partial visibility and the deferrals
//     (applyVisibility, applyDeferrals);
//  5. the fates of the refs the tick decided about, in the release log
//     (applyReleaseFates);
//  6. the operator intents consumed (applyIntents);
//  7. the events, stamped now.
func (s *db) apply(ctx context.Context, tx *txn, in *reconciler.Input, out *reconciler.Output, now time.Time) error {
	enc := newEncoder()
	// known maps each rollout the tick may write to its hosts: those it
	// loaded, and those it opens.
	known := make(map[string][]reconciler.RolloutHost, len(in.Rollouts)+len(out.Rollouts))
	for _, r := range in.Rollouts {
		known[r.ID] = r.Hosts
	}
	if err := tx.applyRollouts(ctx, enc, known, out.Rollouts); err != nil {
		return err
	}
	if err := tx.applyHosts(ctx, enc, known, out.Hosts); err != nil {
		return err
	}
	if err := tx.applyChannels(ctx, in.Channels, out.Channels); err != nil {
		return err
	}
	if !slices.EqualFunc(in.Visibility, out.Visibility, sameVisibility) {
		if err := tx.applyVisibility(ctx, out.Visibility); err != nil {
			return err
		}
	}
	if err := tx.applyDeferrals(ctx, out.Deferrals); err != nil {
		return err
	}
	if err := tx.applyReleaseFates(ctx, out, now); err != nil {
		return err
	}
	if err := tx.applyIntents(ctx, out.IntentResults); err != nil {
		return err
	}
	if err := tx.insertEvents(ctx, enc, now, out.Events); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	return nil
}

// applyRollouts writes the rollout updates in order: a new rollout with
// its hosts and its channel's current manifest, which becomes known; the
// changed header of a known one (its hosts are left to applyHosts). An
// update of a rollout that is neither is ignored.
func (tx *txn) applyRollouts(ctx context.Context, enc *encoder, known map[string][]reconciler.RolloutHost, updates []reconciler.RolloutUpdate) error {
	for i := range updates {
		u := &updates[i]
		r := &u.Rollout
		args, err := rolloutArgs(r)
		if err != nil {
			return err
		}
		if u.New {
			if err := tx.openRollout(ctx, enc, r, args); err != nil {
				return fmt.Errorf("open rollout %s: %w", r.ID, err)
			}
			known[r.ID] = r.Hosts
			continue
		}
		if _, ok := known[r.ID]; !ok {
			continue
		}
		if _, err := tx.exec(ctx, "UPDATE rollouts SET "+setList(rolloutCols)+" WHERE id = ?", append(args[1:], r.ID)...); err != nil {
			return fmt.Errorf("update rollout %s: %w", r.ID, err)
		}
	}
	return nil
}

// openRollout inserts a new rollout (args are its rolloutArgs), its hosts,
// and a copy of the manifest its channel holds under the rollout's
// manifest hash; that the channel holds none is an error.
func (tx *txn) openRollout(ctx context.Context, enc *encoder, r *reconciler.Rollout, args []any) error {
	reboot, err := rebootText(r)
	if err != nil {
		return err
	}
	args = append(args[:len(args):len(args)], waveSoaksText(r.Waves), reboot)
	if _, err := tx.exec(ctx, "INSERT INTO rollouts ("+rolloutCols+", wave_soaks, reboot) VALUES ("+placeholders(len(args))+")", args...); err != nil {
		return err
	}
	// The hosts still Pending follow in a second transaction (owed.go).
	var now, later []hostRow
	for j := range r.Hosts {
		row := hostRow{RolloutID: r.ID, Host: &r.Hosts[j]}
		if r.Hosts[j].State == reconciler.HostPending {
			later = append(later, row)
		} else {
			now = append(now, row)
		}
	}
	if err := tx.insertHosts(ctx, enc, now); err != nil {
		return fmt.Errorf("hosts: %w", err)
	}
	if len(later) > 0 {
		if err := tx.deferHosts(ctx, r.ID, later); err != nil {
			return fmt.Errorf("hosts: %w", err)
		}
	}
	// The manifest is copied inside the database: a whole body as the
	// value it is kept as; a parted one (PostgreSQL only) joined.
	body := "b.body"
	if tx.dialect == dialectPostgres {
		body = "CASE WHEN b.parts = 0 THEN b.body ELSE (SELECT string_agg(p.part, ''::bytea ORDER BY p.seq) FROM release_blob_parts p WHERE p.id = b.id) END"
	}
	n, err := tx.exec(ctx, `INSERT INTO rollout_manifests (rollout_id, body, sig, hash)
		SELECT ?, `+body+`, c.manifest_sig, c.manifest_hash FROM channels c JOIN release_blobs b ON b.id = c.manifest_blob
		WHERE c.channel = ? AND c.manifest_hash = ? AND (b.parts = 0 OR ?)`,
		r.ID, r.Channel, r.ManifestHash, tx.dialect == dialectPostgres)
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("channel %q has no release with manifest hash %q", r.Channel, r.ManifestHash)
	}
	return nil
}

// applyHosts writes the host updates of known rollouts, for hosts those
// rollouts have; of several updates of one host, the last wins.
func (tx *txn) applyHosts(ctx context.Context, enc *encoder, known map[string][]reconciler.RolloutHost, updates []reconciler.HostUpdate) error {
	if len(updates) == 0 {
		return nil
	}
	type key struct{ rollout, host string }
	// members are the host names of each rollout updated, built when
	// first needed.
	members := map[string]map[string]bool{}
	last := make(map[key]int, len(updates))
	for i, u := range updates {
		hosts, ok := known[u.RolloutID]
		if !ok {
			continue
		}
		set := members[u.RolloutID]
		if set == nil {
			set = make(map[string]bool, len(hosts))
			for _, h := range hosts {
				set[h.Hostname] = true
			}
			members[u.RolloutID] = set
		}
		if set[u.Host.Hostname] {
			last[key{u.RolloutID, u.Host.Hostname}] = i
		}
	}
	rows := make([]hostRow, 0, len(last))
	for i := range updates {
		u := &updates[i]
		if j, ok := last[key{u.RolloutID, u.Host.Hostname}]; ok && j == i {
			rows = append(rows, hostRow{RolloutID: u.RolloutID, Host: &u.Host})
		}
	}
	insert, update := tx.claimOwed(rows)
	if err := tx.insertHosts(ctx, enc, insert); err != nil {
		return fmt.Errorf("insert hosts: %w", err)
	}
	if err := tx.updateHosts(ctx, enc, update); err != nil {
		return fmt.Errorf("update hosts: %w", err)
	}
	return nil
}

// applyChannels writes the last rolled ref of each updated channel that
// the tick loaded.
func (tx *txn) applyChannels(ctx context.Context, loaded []reconciler.Channel, updates []reconciler.ChannelUpdate) error {
	for _, u := range updates {
		if !slices.ContainsFunc(loaded, func(c reconciler.Channel) bool { return c.Name == u.Name }) {
			continue
		}
		if _, err := tx.exec(ctx, "UPDATE channels SET last_rolled_ref = ? WHERE channel = ?", u.LastRolledRef, u.Name); err != nil {
			return fmt.Errorf("channel %s: %w", u.Name, err)
		}
	}
	return nil
}

// applyVisibility replaces the channels in partial visibility with vs.
func (tx *txn) applyVisibility(ctx context.Context, vs []reconciler.Visibility) error {
	args := make([]any, 0, 5*len(vs))
	for _, v := range vs {
		ended := int64(0)
		if !v.Ended.IsZero() {
			ended = micros(v.Ended)
		}
		args = append(args, v.Channel, micros(v.Since), ended, v.Silent, v.Total)
	}
	return tx.replaceAll(ctx, "visibility", []string{"channel", "since", "ended", "silent", "total"}, args)
}

// applyDeferrals replaces the deferrals with ds, numbered in their order.
func (tx *txn) applyDeferrals(ctx context.Context, ds []reconciler.Deferral) error {
	args := make([]any, 0, 4*len(ds))
	for i, d := range ds {
		args = append(args, i, d.Channel, d.Ref, d.BlockedBy)
	}
	return tx.replaceAll(ctx, "deferrals", []string{"seq", "channel", "ref", "blocked_by"}, args)
}

// replaceAll deletes every row of a table and inserts new ones: args holds
// their values, row after row, in the order of cols. Errors name the
// table.
func (tx *txn) replaceAll(ctx context.Context, table string, cols []string, args []any) error {
	if _, err := tx.exec(ctx, "DELETE FROM "+table); err != nil {
		return fmt.Errorf("%s: %w", table, err)
	}
	head := "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ")"
	if err := tx.insertRows(ctx, head, "", len(cols), args); err != nil {
		return fmt.Errorf("%s: %w", table, err)
	}
	return nil
}

// applyIntents marks the operator intents the tick consumed, with their
// results; an intent consumed already is left as it is.
func (tx *txn) applyIntents(ctx context.Context, results []reconciler.IntentResult) error {
	for _, r := range results {
		res, err := marshal(r)
		if err != nil {
			return err
		}
		if _, err := tx.exec(ctx, "UPDATE intents SET consumed = 1, result = ? WHERE id = ? AND consumed = 0", res, r.IntentID); err != nil {
			return fmt.Errorf("intent %s: %w", r.IntentID, err)
		}
	}
	return nil
}

func sameVisibility(a, b reconciler.Visibility) bool {
	return a.Channel == b.Channel && a.Since.Equal(b.Since) && a.Ended.Equal(b.Ended) && a.Silent == b.Silent && a.Total == b.Total
}

// setList turns "id, a, b" into "a = ?, b = ?": the columns after the
// first (the key), for an UPDATE.
func setList(cols string) string {
	names := strings.Split(cols, ", ")[1:]
	for i, n := range names {
		names[i] = n + " = ?"
	}
	return strings.Join(names, ", ")
}
