package store

import (
	"context"
	"errors"
	"fmt"
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
		n, err = tx.exec(ctx, `INSERT INTO host_status (hostname, status, digest, version) VALUES (?, ?, ?, 1)
			ON CONFLICT (hostname) DO UPDATE SET status = excluded.status, digest = excluded.digest,
				version = host_status.version + 1
			WHERE host_status.digest <> excluded.digest`, hostname, body, digest)
		if err != nil || n == 0 {
			return err
		}
		return tx.bumpChanges(ctx)
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
	_, err := s.mergeStatus(ctx, hostname, func(st HostStatus) HostStatus {
		st.Activation = &a
		return st
	})
	if err != nil {
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
		// The row is created first, so that it can be locked: a status
		// recorded concurrently is then never overwritten.
		if _, err := tx.exec(ctx, `INSERT INTO host_status (hostname, status, digest, version) VALUES (?, '{}', '', 0)
			ON CONFLICT (hostname) DO NOTHING`, hostname); err != nil {
			return err
		}
		var old HostStatus
		var body, digest string
		switch err := tx.queryRow(ctx, "SELECT status, digest FROM host_status WHERE hostname = ? FOR UPDATE", hostname).Scan(&body, &digest); {
		case err == nil:
			if old, err = decodeStatus(body); err != nil {
				return err
			}
		case !errors.Is(err, errNoRows):
			return err
		}
		newBody, newDigest, err := encodeStatus(merge(old))
		if err != nil {
			return err
		}
		if newDigest == digest {
			return nil
		}
		if _, err := tx.exec(ctx, `UPDATE host_status SET status = ?, digest = ?, version = version + 1 WHERE hostname = ?`,
			newBody, newDigest, hostname); err != nil {
			return err
		}
		changed = true
		return tx.bumpChanges(ctx)
	})
	return changed, err
}

// TouchHosts records last-seen times in one transaction; a time older
// than (or equal to) the stored one is ignored. Rows are written in
// hostname order, so concurrent batches cannot deadlock.
func (s *db) TouchHosts(ctx context.Context, seen map[string]time.Time) error {
	if len(seen) == 0 {
		return nil
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		if n == "" {
			return fmt.Errorf("store: touch hosts: empty hostname")
		}
		names = append(names, n)
	}
	slices.Sort(names)
	args := make([]any, 0, 2*len(names))
	for _, n := range names {
		args = append(args, n, micros(seen[n]))
	}
	err := s.write(ctx, func(tx *txn) error {
		return tx.insertRows(ctx, "INSERT INTO host_seen (hostname, last_seen)",
			" ON CONFLICT (hostname) DO UPDATE SET last_seen = excluded.last_seen WHERE excluded.last_seen > host_seen.last_seen",
			2, args)
	})
	if err != nil {
		return fmt.Errorf("store: touch hosts: %w", err)
	}
	return nil
}

// Host returns one host: its observation and its assignment among the
// live rollouts (ErrNotFound when it neither checked in nor is in a live
// rollout).
func (s *db) Host(ctx context.Context, hostname string) (HostRecord, error) {
	rec := HostRecord{Hostname: hostname}
	err := s.read(ctx, func(tx *txn) error {
		var at int64
		switch err := tx.queryRow(ctx, "SELECT last_seen FROM host_seen WHERE hostname = ?", hostname).Scan(&at); {
		case err == nil:
			rec.Seen, rec.Observed.LastSeen = true, fromMicros(at)
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
			rec.Seen, rec.Observed = true, observed(st, rec.Observed.LastSeen)
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
			var at int64
			if err := rs.Scan(&name, &at); err != nil {
				return err
			}
			r := get(name)
			r.Seen, r.Observed.LastSeen = true, fromMicros(at)
			return nil
		}, "SELECT hostname, last_seen FROM host_seen")
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
			r.Seen, r.Observed = true, observed(st, r.Observed.LastSeen)
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
// when it is not empty), its record in the rollout that drives it: the one
// where it is in flight, else the latest (by opening time, then id) that
// lists it. These are the rollouts a tick loads (liveness.live).
func assignments(ctx context.Context, tx *txn, hostname string) (map[string]reconciler.Assignment, error) {
	l, err := loadLiveness(ctx, tx)
	if err != nil {
		return nil, err
	}
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
		cur, ok := out[h.Hostname]
		if ok {
			curFlying, flying := cur.Host.State.InFlight(), h.State.InFlight()
			if curFlying && !flying || curFlying == flying && !hd.newer(heads[h.Hostname]) {
				return
			}
		}
		out[h.Hostname] = reconciler.Assignment{RolloutID: rid, Channel: hd.channel, RolloutState: hd.state,
			ManifestHash: hd.manifestHash, Host: h}
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
	if hostname != "" {
		err = scanAll("SELECT "+hostCols+" FROM rollout_hosts WHERE hostname = ?", hostname)
	} else {
		err = inChunks(ids, idChunk, func(chunk []string) error {
			return scanAll("SELECT "+hostCols+" FROM rollout_hosts WHERE rollout_id IN ("+placeholders(len(chunk))+")", anys(chunk)...)
		})
	}
	if err != nil {
		return nil, fmt.Errorf("store: assignments: %w", err)
	}
	return out, nil
}
