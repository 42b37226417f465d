package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TickParams are the inputs of a tick that do not come from the store.
type TickParams struct {
	// Lease is the caller's tick lease.
	Lease Lease
	// Clock is read once, after the tick lock is taken: the tick's now.
	Clock func() time.Time
	// Tunables go to the reconciler.
	Tunables reconciler.Tunables
	// MaxGap is the longest time between two committed ticks that does
	// not break the control plane's watch over its hosts; a longer gap (a
	// restart, a lost database, a store restored from a backup) starts a
	// new one. Zero means half the offline threshold.
	MaxGap time.Duration
}

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
//     and has not expired at now, holding the lease row until commit
//     (else ErrNotLeader, before decide is called);
//  4. keep the watch: the previous committed tick must be at most MaxGap
//     old, else a new watch starts now and a watch_started event says so
//     (Input.WatchingSince);
//  5. load the Input: tunables, every channel's release (artifacts
//     decoded once per hash and cached), the live rollouts with their
//     hosts (see liveness.live), every observed host, the unconsumed
//     intents, the deferrals and the channels in partial visibility;
//  6. call decide;
//  7. apply its Output as reconciler.Apply does, relative to the loaded
//     Input, and commit.
//
// An error from decide, or from applying, rolls everything back (the
// watch too). decide runs inside the transaction: it must not call the
// store (on SQLite it would wait for the writer it holds), and must not
// modify what the Input points to (decoded artifacts and frozen rollout
// parts are shared with later ticks).
func (s *db) Tick(ctx context.Context, p TickParams, decide func(reconciler.Input) (reconciler.Output, error)) (reconciler.Output, error) {
	var out reconciler.Output
	err := s.write(ctx, func(tx *txn) error {
		if err := tx.lockTick(ctx); err != nil {
			return err
		}
		now := utcMicro(p.Clock())
		if err := checkLease(ctx, tx, p.Lease, now); err != nil {
			return err
		}
		in := reconciler.Input{Now: now, Tunables: p.Tunables}
		gap := p.MaxGap
		if gap <= 0 {
			gap = p.Tunables.OfflineThreshold() / 2
		}
		started, err := keepWatch(ctx, tx, &in, gap)
		if err != nil {
			return err
		}
		if err := s.loadInput(ctx, tx, &in); err != nil {
			return err
		}
		o, err := decide(in)
		if err != nil {
			return fmt.Errorf("store: tick: %w", err)
		}
		if started != nil {
			o.Events = append([]reconciler.Event{*started}, o.Events...)
		}
		if err := s.apply(ctx, tx, &in, &o, now); err != nil {
			return fmt.Errorf("store: tick: apply: %w", err)
		}
		out = o
		return nil
	})
	if err != nil {
		return reconciler.Output{}, err
	}
	return out, nil
}

// keepWatch reads the watch, starts a new one when the previous committed
// tick is more than gap before now (or after it: a clock that went back,
// a store restored from elsewhere), sets in.WatchingSince, and records this
// tick as the latest. A new watch comes with the event that reports it.
func keepWatch(ctx context.Context, tx *txn, in *reconciler.Input, gap time.Duration) (*reconciler.Event, error) {
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
	if alive < 0 || now-alive > gap.Microseconds() || alive-now > time.Minute.Microseconds() {
		why := "the control plane starts watching its hosts"
		if alive >= 0 {
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

// checkLease locks the tick lease's row and checks that l holds it at now.
func checkLease(ctx context.Context, tx *txn, l Lease, now time.Time) error {
	if l.Name != TickLease {
		return fmt.Errorf("%w: lease %q is not the tick lease", ErrNotLeader, l.Name)
	}
	var (
		holder         string
		epoch, expires int64
	)
	err := tx.queryRow(ctx, "SELECT holder, epoch, expires_at FROM leases WHERE name = ? FOR UPDATE", TickLease).
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
// load are ignored, as Apply ignores them.
func (s *db) apply(ctx context.Context, tx *txn, in *reconciler.Input, out *reconciler.Output, now time.Time) error {
	enc := newEncoder()
	// Which hosts each known rollout has, computed when first needed.
	known := make(map[string][]reconciler.RolloutHost, len(in.Rollouts)+len(out.Rollouts))
	for _, r := range in.Rollouts {
		known[r.ID] = r.Hosts
	}
	members := map[string]map[string]bool{}

	// 1. Rollouts, in order: new ones with their hosts and their channel's
	// manifest; changed headers of known ones (hosts stay).
	for i := range out.Rollouts {
		u := &out.Rollouts[i]
		r := &u.Rollout
		args, err := rolloutArgs(r)
		if err != nil {
			return err
		}
		if u.New {
			if _, err := tx.exec(ctx, "INSERT INTO rollouts ("+rolloutCols+") VALUES ("+placeholders(len(args))+")", args...); err != nil {
				return fmt.Errorf("open rollout %s: %w", r.ID, err)
			}
			rows := make([]hostRow, len(r.Hosts))
			for j := range r.Hosts {
				rows[j] = hostRow{r.ID, &r.Hosts[j]}
			}
			if err := tx.insertHosts(ctx, enc, rows); err != nil {
				return fmt.Errorf("open rollout %s: hosts: %w", r.ID, err)
			}
			n, err := tx.exec(ctx, `INSERT INTO rollout_manifests (rollout_id, body, sig, hash)
				SELECT ?, manifest_body, manifest_sig, manifest_hash FROM channels WHERE channel = ? AND manifest_hash = ?`,
				r.ID, r.Channel, r.ManifestHash)
			if err != nil {
				return fmt.Errorf("open rollout %s: manifest: %w", r.ID, err)
			}
			if n == 0 {
				return fmt.Errorf("open rollout %s: channel %q has no release with manifest hash %q", r.ID, r.Channel, r.ManifestHash)
			}
			known[r.ID] = r.Hosts
			delete(members, r.ID)
			continue
		}
		if _, ok := known[r.ID]; !ok {
			continue
		}
		if _, err := tx.exec(ctx, "UPDATE rollouts SET "+setList(rolloutCols)+" WHERE id = ?", append(args[1:], r.ID)...); err != nil {
			return fmt.Errorf("update rollout %s: %w", r.ID, err)
		}
	}

	// 2. Hosts: the last update of each known host wins.
	if len(out.Hosts) > 0 {
		type key struct{ rollout, host string }
		last := make(map[key]int, len(out.Hosts))
		for i, u := range out.Hosts {
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
		for i := range out.Hosts {
			u := &out.Hosts[i]
			if j, ok := last[key{u.RolloutID, u.Host.Hostname}]; ok && j == i {
				rows = append(rows, hostRow{u.RolloutID, &u.Host})
			}
		}
		if err := tx.updateHosts(ctx, enc, rows); err != nil {
			return fmt.Errorf("update hosts: %w", err)
		}
	}

	// 3. Channels' last rolled refs.
	for _, u := range out.Channels {
		for _, c := range in.Channels {
			if c.Name != u.Name {
				continue
			}
			if _, err := tx.exec(ctx, "UPDATE channels SET last_rolled_ref = ? WHERE channel = ?", u.LastRolledRef, u.Name); err != nil {
				return fmt.Errorf("channel %s: %w", u.Name, err)
			}
			break
		}
	}

	// 4. Deferrals and the channels in partial visibility: the complete
	// current sets (the latter rewritten only when it changed).
	if !slices.EqualFunc(in.Visibility, out.Visibility, sameVisibility) {
		if _, err := tx.exec(ctx, "DELETE FROM visibility"); err != nil {
			return fmt.Errorf("visibility: %w", err)
		}
		vargs := make([]any, 0, 5*len(out.Visibility))
		for _, v := range out.Visibility {
			ended := int64(0)
			if !v.Ended.IsZero() {
				ended = micros(v.Ended)
			}
			vargs = append(vargs, v.Channel, micros(v.Since), ended, v.Silent, v.Total)
		}
		if err := tx.insertRows(ctx, "INSERT INTO visibility (channel, since, ended, silent, total)", "", 5, vargs); err != nil {
			return fmt.Errorf("visibility: %w", err)
		}
	}
	if _, err := tx.exec(ctx, "DELETE FROM deferrals"); err != nil {
		return fmt.Errorf("deferrals: %w", err)
	}
	dargs := make([]any, 0, 4*len(out.Deferrals))
	for i, d := range out.Deferrals {
		dargs = append(dargs, i, d.Channel, d.Ref, d.BlockedBy)
	}
	if err := tx.insertRows(ctx, "INSERT INTO deferrals (seq, channel, ref, blocked_by)", "", 4, dargs); err != nil {
		return fmt.Errorf("deferrals: %w", err)
	}

	// 5. Operator intents consumed, with their results.
	for _, r := range out.IntentResults {
		res, err := marshal(r)
		if err != nil {
			return err
		}
		if _, err := tx.exec(ctx, "UPDATE intents SET consumed = 1, result = ? WHERE id = ? AND consumed = 0", res, r.IntentID); err != nil {
			return fmt.Errorf("intent %s: %w", r.IntentID, err)
		}
	}

	// 6. Events, stamped now, in order.
	if err := tx.insertEvents(ctx, enc, now, out.Events); err != nil {
		return fmt.Errorf("events: %w", err)
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
