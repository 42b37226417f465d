package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/reconciler"
)

// RecordStatus stores a host's status when it differs from the stored
// one, and reports whether it did. Statuses are compared normalized:
// times in UTC to the microsecond, and an empty list equals a missing one.
// A status without an activation keeps the stored activation: check-ins
// carry what a host runs, confirms and reports carry how it got there.
func (s *db) RecordStatus(ctx context.Context, hostname string, st HostStatus) (bool, error) {
	if hostname == "" {
		return false, fmt.Errorf("store: record status: empty hostname")
	}
	if st.Activation != nil {
		return s.putStatus(ctx, hostname, st)
	}
	changed, err := s.mergeStatus(ctx, hostname, func(old HostStatus) HostStatus {
		st.Activation = old.Activation
		return st
	})
	if err != nil {
		return false, fmt.Errorf("store: record status of %s: %w", hostname, err)
	}
	return changed, nil
}

// putStatus writes a whole status in one statement, when its digest
// differs from the stored one.
func (s *db) putStatus(ctx context.Context, hostname string, st HostStatus) (bool, error) {
	body, digest, err := encodeStatus(st)
	if err != nil {
		return false, err
	}
	var n int64
	err = s.write(ctx, func(tx *txn) error {
		var err error
		n, err = tx.exec(ctx, `INSERT INTO host_status (hostname, status, digest, said, version) VALUES (?, ?, ?, ?, 1)
			ON CONFLICT (hostname) DO UPDATE SET status = excluded.status, digest = excluded.digest,
				said = excluded.said, version = host_status.version + 1
			WHERE host_status.digest <> excluded.digest`, hostname, body, digest, StatusDigest(st))
		if err != nil || n == 0 {
			return err
		}
		return tx.stampStatus(ctx, hostname)
	})
	if err != nil {
		return false, fmt.Errorf("store: record status of %s: %w", hostname, err)
	}
	return n > 0, nil
}

// RecordActivation stores the latest activation outcome a host reported,
// leaving the rest of its status alone (a host without a status gets one
// with only the activation). Like RecordStatus, it writes only a change.
func (s *db) RecordActivation(ctx context.Context, hostname string, a reconciler.Activation) error {
	if hostname == "" {
		return fmt.Errorf("store: record activation: empty hostname")
	}
	if _, err := s.RecordStatuses(ctx, []StatusWrite{{Hostname: hostname, Activation: &a}}); err != nil {
		return fmt.Errorf("store: record activation of %s: %w", hostname, err)
	}
	return nil
}

// RecordProbes stores a host's latest health results (probes and failed
// units) apart from a check-in, leaving the rest of its status alone, and
// returns the status as stored.
func (s *db) RecordProbes(ctx context.Context, hostname string, probes reconciler.ProbeSummary, failedUnits []string) (HostStatus, bool, error) {
	if hostname == "" {
		return HostStatus{}, false, fmt.Errorf("store: record probes: empty hostname")
	}
	var merged HostStatus
	changed, err := s.mergeStatus(ctx, hostname, func(st HostStatus) HostStatus {
		st.Probes, st.FailedUnits = probes, failedUnits
		merged = st
		return st
	})
	if err != nil {
		return HostStatus{}, false, fmt.Errorf("store: record probes of %s: %w", hostname, err)
	}
	return normalizeStatus(merged), changed, nil
}

// mergeStatus replaces a host's stored status (the zero status when it has
// none) with merge's result, under a row lock, when that differs.
func (s *db) mergeStatus(ctx context.Context, hostname string, merge func(HostStatus) HostStatus) (bool, error) {
	changed := false
	err := s.write(ctx, func(tx *txn) error {
		var err error
		changed, err = tx.merge(ctx, hostname, merge)
		return err
	})
	return changed, err
}

// lockStatus locks a host's status row, creating it first when missing
// (status {} with an empty digest) so that it can be locked: a status
// recorded concurrently is then never overwritten. It returns the stored
// status, its digest and its said digest (StatusDigest; "" for a row
// written before migration 0015, or a new one).
func (tx *txn) lockStatus(ctx context.Context, hostname string) (st HostStatus, digest, said string, err error) {
	if _, err := tx.exec(ctx, `INSERT INTO host_status (hostname, status, digest, version) VALUES (?, '{}', '', 0)
		ON CONFLICT (hostname) DO NOTHING`, hostname); err != nil {
		return HostStatus{}, "", "", err
	}
	var body string
	if err := tx.queryRow(ctx, "SELECT status, digest, said FROM host_status WHERE hostname = ? FOR UPDATE", hostname).Scan(&body, &digest, &said); err != nil {
		return HostStatus{}, "", "", err
	}
	st, err = decodeStatus(body)
	return st, digest, said, err
}

// merge is mergeStatus in a transaction.
func (tx *txn) merge(ctx context.Context, hostname string, merge func(HostStatus) HostStatus) (bool, error) {
	old, digest, _, err := tx.lockStatus(ctx, hostname)
	if err != nil {
		return false, err
	}
	next := merge(old)
	newBody, newDigest, err := encodeStatus(next)
	if err != nil {
		return false, err
	}
	if newDigest == digest {
		return false, nil
	}
	if _, err := tx.exec(ctx, `UPDATE host_status SET status = ?, digest = ?, said = ?, version = version + 1 WHERE hostname = ?`,
		newBody, newDigest, StatusDigest(next), hostname); err != nil {
		return false, err
	}
	return true, tx.stampStatus(ctx, hostname)
}

// stampStatus counts a host's changed status as a change a tick must see,
// and stamps its row with it (bumpStamp).
func (tx *txn) stampStatus(ctx context.Context, hostname string) error {
	c, _, err := tx.bumpStamp(ctx, true, false)
	if err != nil {
		return err
	}
	_, err = tx.exec(ctx, "UPDATE host_status SET seq = ? WHERE hostname = ?", c, hostname)
	return err
}

// TouchHosts records check-ins in one transaction: each host's last-seen
// time (a time not after the stored one is ignored), and, when the digest
// a check-in carried is the stored status's, that the status was said
// then (rfcs/0003 rule 8). It returns the hosts whose check-in carried
// another status than the one stored: a write of it was lost, or has not
// committed yet, and the caller writes it again. Rows are written in
// hostname order, so concurrent batches cannot deadlock.
func (s *db) TouchHosts(ctx context.Context, seen map[string]Seen) ([]string, error) {
	if len(seen) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		if n == "" {
			return nil, fmt.Errorf("store: touch hosts: empty hostname")
		}
		names = append(names, n)
	}
	slices.Sort(names)
	var unsaid []string
	err := s.write(ctx, func(tx *txn) error {
		_, stamp, err := tx.bumpStamp(ctx, false, true)
		if err != nil {
			return err
		}
		unsaid, err = tx.writeSeen(ctx, names, seen, stamp)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: touch hosts: %w", err)
	}
	return unsaid, nil
}

// writeSeen writes check-ins, names in order, stamped: the last-seen time
// when it is later than the stored one, and the time the stored status was
// last said (host_seen.said_at) when the check-in's digest is the stored
// status's (host_status.said; a row from before migration 0015, whose said
// is empty, takes any). It returns the hosts whose check-in carried a
// digest that is not the stored status's. The comparison and the write
// see the status rows as the statement (PostgreSQL) or the transaction
// (SQLite) does: a status written meanwhile by a later request of the host
// (one agent's requests follow one another) is said later than this
// check-in, and moves said_at past it itself.
func (tx *txn) writeSeen(ctx context.Context, names []string, seen map[string]Seen, stamp int64) ([]string, error) {
	const upsert = ` ON CONFLICT (hostname) DO UPDATE SET
			last_seen = CASE WHEN excluded.last_seen > host_seen.last_seen THEN excluded.last_seen ELSE host_seen.last_seen END,
			said_at = CASE WHEN excluded.said_at > host_seen.said_at THEN excluded.said_at ELSE host_seen.said_at END,
			seq = excluded.seq
		WHERE excluded.last_seen > host_seen.last_seen OR excluded.said_at > host_seen.said_at`
	if tx.dialect == dialectPostgres {
		// One statement for the batch: the status rows joined by key, the
		// upsert, and the hosts whose check-in named another status.
		ats, saids := make([]int64, len(names)), make([]string, len(names))
		for i, n := range names {
			ats[i], saids[i] = micros(seen[n].At), seen[n].Said
		}
		unsaid, err := collect(ctx, tx, []string(nil), scanString, `WITH v AS (
				SELECT v.hostname, v.at,
					CASE WHEN v.said <> '' AND s.said IN (v.said, '') THEN v.at ELSE 0 END AS said_at,
					v.said <> '' AND (s.said IS NULL OR s.said NOT IN (v.said, '')) AS unsaid
				FROM unnest(?::text[], ?::bigint[], ?::text[]) AS v(hostname, at, said)
				LEFT JOIN host_status s ON s.hostname = v.hostname
			), up AS (
				INSERT INTO host_seen (hostname, last_seen, seq, said_at)
				SELECT hostname, at, ?::bigint, said_at FROM v ORDER BY hostname`+upsert+`
			)
			SELECT hostname FROM v WHERE unsaid ORDER BY hostname`, names, ats, saids, stamp)
		return unsaid, err
	}
	stored := make(map[string]string, len(names))
	// (A host with no stored status at all that carried one is named too:
	// the store lost the status of a host it had not written since.)
	err := inChunks(names, idChunk, func(chunk []string) error {
		return eachRow(ctx, tx, func(r row) error {
			var name, said string
			if err := r.Scan(&name, &said); err != nil {
				return err
			}
			stored[name] = said
			return nil
		}, "SELECT hostname, said FROM host_status WHERE hostname IN ("+placeholders(len(chunk))+")", anys(chunk)...)
	})
	if err != nil {
		return nil, err
	}
	var unsaid []string
	args := make([]any, 0, 4*len(names))
	for _, n := range names {
		w := seen[n]
		at, saidAt := micros(w.At), int64(0)
		if st, ok := stored[n]; w.Said != "" {
			if ok && (st == w.Said || st == "") {
				saidAt = at
			} else {
				unsaid = append(unsaid, n)
			}
		}
		args = append(args, n, at, stamp, saidAt)
	}
	return unsaid, tx.insertRows(ctx, "INSERT INTO host_seen (hostname, last_seen, seq, said_at)", upsert, 4, args)
}

// RecordCheckin records, in one transaction, a check-in the reconciler
// may have to see at once (rfcs/0006 §Check-ins at scale): the host's
// status when st is set, written only if it differs from the stored one
// (as RecordStatus: an activation of st is ignored, the stored one kept);
// then, when the status changed or urgent is set, its last-seen time
// seen, as a change a tick must see. It reports whether the status
// changed and whether the check-in was written.
func (s *db) RecordCheckin(ctx context.Context, hostname string, st *HostStatus, seen time.Time, urgent bool) (changed, written bool, err error) {
	if hostname == "" {
		return false, false, fmt.Errorf("store: record check-in: empty hostname")
	}
	res, err := s.RecordStatuses(ctx, []StatusWrite{{Hostname: hostname, Status: st, Seen: seen, Urgent: urgent}})
	if err != nil {
		return false, false, fmt.Errorf("store: record check-in of %s: %w", hostname, err)
	}
	return res[0].Changed, res[0].Written, nil
}

// RecordStatuses records several check-ins and activations in one
// transaction. Locks are taken in one order whatever the batch, so that
// batches and single writes cannot deadlock: the status rows by hostname
// (as merge does), then the watermark row (one bump for the batch: every
// row it changes carries the same stamp), then the last-seen rows by
// hostname (as touch does).
func (s *db) RecordStatuses(ctx context.Context, ws []StatusWrite) ([]StatusResult, error) {
	order := make([]int, len(ws))
	for i, w := range ws {
		if w.Hostname == "" {
			return nil, fmt.Errorf("store: record statuses: empty hostname")
		}
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(ws[a].Hostname, ws[b].Hostname) })
	var res []StatusResult
	err := s.write(ctx, func(tx *txn) error {
		res = make([]StatusResult, len(ws)) // the transaction may be retried
		var changed []string
		seen := map[string]Seen{}
		for k := 0; k < len(order); {
			j := k
			for j < len(order) && ws[order[j]].Hostname == ws[order[k]].Hostname {
				j++
			}
			ch, err := tx.recordHost(ctx, ws, order[k:j], res, seen)
			if err != nil {
				return err
			}
			if ch {
				changed = append(changed, ws[order[k]].Hostname)
			}
			k = j
		}
		if len(changed) == 0 && len(seen) == 0 {
			return nil
		}
		c, sn, err := tx.bumpStamp(ctx, true, len(seen) > 0)
		if err != nil {
			return err
		}
		err = inChunks(changed, idChunk, func(chunk []string) error {
			_, err := tx.exec(ctx, "UPDATE host_status SET seq = ? WHERE hostname IN ("+placeholders(len(chunk))+")",
				append([]any{c}, anys(chunk)...)...)
			return err
		})
		if err != nil || len(seen) == 0 {
			return err
		}
		_, err = tx.writeSeen(ctx, slices.Sorted(maps.Keys(seen)), seen, sn)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: record statuses: %w", err)
	}
	return res, nil
}

// recordHost applies the writes idx of one host, in order, for
// RecordStatuses: it fills their results, writes the status when it
// changed (without stamping it) and reports that, and notes in seen the
// check-in to record, with the digest of the status it carried. The status
// row is locked, and created, only when a write carries a status or an
// activation; a row from before migration 0015 gets its said digest then.
func (tx *txn) recordHost(ctx context.Context, ws []StatusWrite, idx []int, res []StatusResult, seen map[string]Seen) (bool, error) {
	name := ws[idx[0]].Hostname
	var cur HostStatus
	var stored, digest, body, storedSaid string
	locked := false
	for _, i := range idx {
		w := ws[i]
		said := w.Said
		if w.Status != nil || w.Activation != nil {
			if !locked {
				var err error
				if cur, stored, storedSaid, err = tx.lockStatus(ctx, name); err != nil {
					return false, err
				}
				digest, locked = stored, true
			}
			next := cur
			if w.Status != nil {
				next = *w.Status
				next.Activation = cur.Activation
				said = StatusDigest(next)
			}
			if w.Activation != nil {
				a := *w.Activation
				next.Activation = &a
			}
			b, d, err := encodeStatus(next)
			if err != nil {
				return false, err
			}
			if d != digest {
				cur, body, digest, res[i].Changed = next, b, d, true
			}
		}
		if !w.Seen.IsZero() && (res[i].Changed || w.Urgent) {
			// The latest check-in wins, and of two at one time the later
			// that carried a status: its status is the row's after them.
			switch prev, ok := seen[name]; {
			case !ok || w.Seen.After(prev.At):
				seen[name] = Seen{At: w.Seen, Said: said}
			case w.Seen.Equal(prev.At) && said != "":
				seen[name] = Seen{At: w.Seen, Said: said}
			}
			res[i].Written = true
		}
		res[i].Written = res[i].Written || res[i].Changed
	}
	if !locked {
		return false, nil
	}
	if digest == stored {
		if s := StatusDigest(cur); storedSaid != s {
			_, err := tx.exec(ctx, "UPDATE host_status SET said = ? WHERE hostname = ?", s, name)
			return false, err
		}
		return false, nil
	}
	_, err := tx.exec(ctx, "UPDATE host_status SET status = ?, digest = ?, said = ?, version = version + 1 WHERE hostname = ?",
		body, digest, StatusDigest(cur), name)
	return err == nil, err
}

// Host returns one host: its observation and its assignment among the
// live rollouts (ErrNotFound when it neither checked in nor is in a live
// rollout).
func (s *db) Host(ctx context.Context, hostname string) (HostRecord, error) {
	rec := HostRecord{Hostname: hostname}
	err := s.read(ctx, func(tx *txn) error {
		var at, saidAt int64
		switch err := tx.queryRow(ctx, "SELECT last_seen, said_at FROM host_seen WHERE hostname = ?", hostname).Scan(&at, &saidAt); {
		case err == nil:
			rec.Seen = true
			seenTimes(&rec.Observed, at, saidAt)
		case !errors.Is(err, errNoRows):
			return err
		}
		var body string
		switch err := tx.queryRow(ctx, "SELECT status FROM host_status WHERE hostname = ?", hostname).Scan(&body); {
		case err == nil:
			st, err := decodeStatus(body)
			if err != nil {
				return err
			}
			rec.Seen, rec.Observed = true, observed(st, rec.Observed)
		case !errors.Is(err, errNoRows):
			return err
		}
		as, err := assignments(ctx, tx, hostname)
		if err != nil {
			return err
		}
		if a, ok := as[hostname]; ok {
			rec.Assignment = &a
		}
		return nil
	})
	if err != nil {
		return HostRecord{}, fmt.Errorf("store: host %s: %w", hostname, err)
	}
	if !rec.Seen && rec.Assignment == nil {
		return HostRecord{}, fmt.Errorf("%w: host %q", ErrNotFound, hostname)
	}
	return rec, nil
}

// Hosts returns every host that checked in (it has a last-seen time or a
// status) or is in a live rollout, by name.
func (s *db) Hosts(ctx context.Context) ([]HostRecord, error) {
	recs := map[string]*HostRecord{}
	get := func(name string) *HostRecord {
		r := recs[name]
		if r == nil {
			r = &HostRecord{Hostname: name}
			recs[name] = r
		}
		return r
	}
	err := s.read(ctx, func(tx *txn) error {
		err := eachRow(ctx, tx, func(rs row) error {
			var name string
			var at, saidAt int64
			if err := rs.Scan(&name, &at, &saidAt); err != nil {
				return err
			}
			r := get(name)
			r.Seen = true
			seenTimes(&r.Observed, at, saidAt)
			return nil
		}, "SELECT hostname, last_seen, said_at FROM host_seen")
		if err != nil {
			return err
		}
		err = eachRow(ctx, tx, func(rs row) error {
			var name, body string
			if err := rs.Scan(&name, &body); err != nil {
				return err
			}
			st, err := decodeStatus(body)
			if err != nil {
				return fmt.Errorf("host %s: %w", name, err)
			}
			r := get(name)
			r.Seen, r.Observed = true, observed(st, r.Observed)
			return nil
		}, "SELECT hostname, status FROM host_status")
		if err != nil {
			return err
		}
		as, err := assignments(ctx, tx, "")
		if err != nil {
			return err
		}
		for name, a := range as {
			get(name).Assignment = &a
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: hosts: %w", err)
	}
	out := make([]HostRecord, 0, len(recs))
	for _, r := range recs {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b HostRecord) int { return strings.Compare(a.Hostname, b.Hostname) })
	return out, nil
}

// Assignments returns, for every host in a live rollout, its assignment.
func (s *db) Assignments(ctx context.Context) (map[string]reconciler.Assignment, error) {
	var out map[string]reconciler.Assignment
	err := s.read(ctx, func(tx *txn) error {
		var err error
		out, err = assignments(ctx, tx, "")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: assignments: %w", err)
	}
	return out, nil
}

// assignments picks, for each host of the live rollouts (only hostname
// when it is not empty), its record in the rollout that drives it
// (reconciler.Drives). These are the rollouts a tick loads
// (liveness.live).
func assignments(ctx context.Context, tx *txn, hostname string) (map[string]reconciler.Assignment, error) {
	l, err := loadLiveness(ctx, tx)
	if err != nil {
		return nil, err
	}
	var names []string
	if hostname != "" {
		names = []string{hostname}
	}
	return assignmentsOf(ctx, tx, l, names)
}

// assignmentsOf picks the assignments among the live rollouts of l, as
// assignments does, of the named hosts only (of every host when names is
// nil): it reads their rows of the live rollouts by key.
func assignmentsOf(ctx context.Context, tx *txn, l *liveness, names []string) (map[string]reconciler.Assignment, error) {
	var err error
	live := map[string]head{}
	var ids []string
	for _, h := range l.liveHeads() {
		live[h.id] = h
		ids = append(ids, h.id)
	}
	out := map[string]reconciler.Assignment{}
	heads := map[string]head{}
	consider := func(rid string, h reconciler.RolloutHost) {
		hd, ok := live[rid]
		if !ok {
			return
		}
		a := reconciler.Assignment{RolloutID: rid, Channel: hd.channel, RolloutState: hd.state,
			ManifestHash: hd.manifestHash, Host: h, Soak: hd.waveSoak(h.Wave), Reboot: hd.rebootOf(h.Wave)}
		if cur, ok := out[h.Hostname]; ok && !reconciler.Drives(a, fromMicros(hd.opened), cur, fromMicros(heads[h.Hostname].opened)) {
			return
		}
		out[h.Hostname] = a
		heads[h.Hostname] = hd
	}
	sc := newHostScanner()
	scanAll := func(query string, args ...any) error {
		return eachRow(ctx, tx, func(rs row) error {
			rid, h, err := sc.scan(rs)
			if err != nil {
				return err
			}
			consider(rid, h)
			return nil
		}, query, args...)
	}
	switch {
	case len(ids) == 0 || (names != nil && len(names) == 0):
	case names != nil && len(ids) <= idChunk:
		// By key, rollout by rollout, when the live rollouts are few (as
		// they are): a host's rows in past rollouts are not read.
		err = inChunks(names, idChunk, func(chunk []string) error {
			for _, id := range ids {
				err := scanAll("SELECT "+hostCols+" FROM rollout_hosts WHERE rollout_id = ? AND hostname IN ("+placeholders(len(chunk))+")",
					append([]any{id}, anys(chunk)...)...)
				if err != nil {
					return err
				}
			}
			return nil
		})
	case names != nil:
		err = inChunks(names, idChunk, func(chunk []string) error {
			return scanAll("SELECT "+hostCols+" FROM rollout_hosts WHERE hostname IN ("+placeholders(len(chunk))+")", anys(chunk)...)
		})
	default:
		err = inChunks(ids, idChunk, func(chunk []string) error {
			return scanAll("SELECT "+hostCols+" FROM rollout_hosts WHERE rollout_id IN ("+placeholders(len(chunk))+")", anys(chunk)...)
		})
	}
	if err != nil {
		return nil, fmt.Errorf("store: assignments: %w", err)
	}
	return out, nil
}

// PruneHosts forgets the hosts that left the fleet (rfcs/0006 §Store 6):
// it deletes the status, the last-seen time and the activation time
// (rfcs/0014) of every host that inFleet does not name, that no live
// rollout lists, and that was not heard from at or after before. It
// returns the hosts it forgot. A host of the fleet, or one a live rollout
// still drives, keeps them whatever their age. The watermark's epoch
// moves, so the tick's kept input reloads without them.
func (s *db) PruneHosts(ctx context.Context, inFleet func(hostname string) bool, before time.Time) ([]string, error) {
	cut := micros(before)
	var gone []string
	err := s.write(ctx, func(tx *txn) error {
		if err := tx.lockTick(ctx); err != nil {
			return err
		}
		gone = nil
		var candidates []string
		err := eachRow(ctx, tx, func(rs row) error {
			var name string
			if err := rs.Scan(&name); err != nil {
				return err
			}
			if !inFleet(name) {
				candidates = append(candidates, name)
			}
			return nil
		}, `SELECT hostname FROM host_seen WHERE last_seen < ?
			UNION SELECT s.hostname FROM host_status s WHERE NOT EXISTS (SELECT 1 FROM host_seen n WHERE n.hostname = s.hostname)`, cut)
		if err != nil || len(candidates) == 0 {
			return err
		}
		l, err := loadLiveness(ctx, tx)
		if err != nil {
			return err
		}
		live := map[string]bool{}
		for _, h := range l.liveHeads() {
			live[h.id] = true
		}
		driven := map[string]bool{}
		err = inChunks(candidates, idChunk, func(chunk []string) error {
			return eachRow(ctx, tx, func(rs row) error {
				var name, id string
				if err := rs.Scan(&name, &id); err != nil {
					return err
				}
				if live[id] {
					driven[name] = true
				}
				return nil
			}, "SELECT hostname, rollout_id FROM rollout_hosts WHERE hostname IN ("+placeholders(len(chunk))+")", anys(chunk)...)
		})
		if err != nil {
			return err
		}
		for _, name := range candidates {
			if !driven[name] {
				gone = append(gone, name)
			}
		}
		if len(gone) == 0 {
			return nil
		}
		err = inChunks(gone, idChunk, func(chunk []string) error {
			for _, table := range []string{"host_status", "host_seen", "activation_times"} {
				if _, err := tx.exec(ctx, "DELETE FROM "+table+" WHERE hostname IN ("+placeholders(len(chunk))+")", anys(chunk)...); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		return tx.bumpEpoch(ctx)
	})
	if err != nil {
		return nil, fmt.Errorf("store: prune hosts: %w", err)
	}
	slices.Sort(gone)
	return gone, nil
}
