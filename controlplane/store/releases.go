package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/proto"
)

// PutRelease records a channel's verified release, replacing the current
// one, under the tick lock so a tick sees one release or the other. Its
// bodies are named by content (blobs.go): those staged already are not
// written again. A release whose SignedAt (to the microsecond) is not
// after the current one's returns ErrStaleRelease and writes nothing but,
// for the current release met at another commit, its push in the release
// log (logCurrent). A release whose ref names a rollout the channel opened
// before, other than its last rolled ref, returns ErrReusedRef and writes
// nothing: the tick would open that rollout id again. The channel's last
// rolled ref is kept. The release log records the release, and a previous
// ref that had not opened as superseded (see logRelease).
func (s *db) PutRelease(ctx context.Context, r Release) error {
	errs, err := s.PutReleases(ctx, []Release{r})
	if err != nil {
		return err
	}
	return errs[0]
}

// PutReleases is PutRelease for several releases in one transaction.
func (s *db) PutReleases(ctx context.Context, rs []Release) ([]error, error) {
	var errs []error
	err := s.write(ctx, func(tx *txn) error {
		errs = make([]error, len(rs)) // the transaction may be retried
		if err := tx.lockTick(ctx); err != nil {
			return err
		}
		stored := false
		for i, r := range rs {
			ok, err := putRelease(ctx, tx, r)
			switch {
			case errors.Is(err, ErrStaleRelease) || errors.Is(err, ErrReusedRef) || errors.Is(err, errIncompleteRelease):
				errs[i] = err
			case err != nil:
				return err
			}
			stored = stored || ok
		}
		if !stored {
			return nil
		}
		// What the channels named before, and what was staged for
		// releases since refused, is named no more.
		if err := dropUnnamedBlobs(ctx, tx); err != nil {
			return fmt.Errorf("store: put release: %w", err)
		}
		return tx.bumpChanges(ctx)
	})
	if err != nil {
		return nil, err
	}
	s.cache.seed(rs, errs)
	return errs, nil
}

var errIncompleteRelease = errors.New("store: put release: channel, ref, fleet hash and manifest hash are required")

// putRelease stores one release in a transaction that holds the tick
// lock, and reports whether it did.
func putRelease(ctx context.Context, tx *txn, r Release) (bool, error) {
	if r.Channel == "" || r.Ref == "" || r.FleetHash == "" || r.ManifestHash == "" {
		return false, errIncompleteRelease
	}
	signed := micros(r.SignedAt)
	var cur int64
	var curRef, rolled, fleetHash, manifestHash string
	err := tx.queryRow(ctx, "SELECT signed_at, ref, last_rolled_ref, fleet_hash, manifest_hash FROM channels WHERE channel = ? FOR UPDATE", r.Channel).
		Scan(&cur, &curRef, &rolled, &fleetHash, &manifestHash)
	switch {
	case errors.Is(err, errNoRows):
	case err != nil:
		return false, fmt.Errorf("store: put release: %w", err)
	case signed <= cur:
		if r.FleetHash == fleetHash && r.ManifestHash == manifestHash {
			if err := logCurrent(ctx, tx, r, r.VerifiedAt); err != nil {
				return false, fmt.Errorf("store: put release: %w", err)
			}
		}
		return false, fmt.Errorf("%w: channel %s: release %s signed at %s, current %s signed at %s", ErrStaleRelease, r.Channel,
			r.Ref, fromMicros(signed).Format(time.RFC3339Nano), curRef, fromMicros(cur).Format(time.RFC3339Nano))
	case rolled != "" && r.Ref != rolled:
		// A rollout id opens once: CI re-signed a ciCommit whose rollout
		// the channel had, and which is not the one it rolled last.
		id := proto.RolloutID(r.Channel, r.Ref)
		var one int
		err := tx.queryRow(ctx, "SELECT 1 FROM rollouts WHERE id = ?", id).Scan(&one)
		switch {
		case err == nil:
			return false, fmt.Errorf("%w: channel %s: rollout %s exists, and the channel rolled %s since", ErrReusedRef, r.Channel, id, rolled)
		case !errors.Is(err, errNoRows):
			return false, fmt.Errorf("store: put release: %w", err)
		}
	}
	fleetBlob, err := putBlob(ctx, tx, r.FleetBody, r.VerifiedAt)
	if err != nil {
		return false, fmt.Errorf("store: put release: fleet.resolved: %w", err)
	}
	manifestBlob, err := putBlob(ctx, tx, r.ManifestBody, r.VerifiedAt)
	if err != nil {
		return false, fmt.Errorf("store: put release: manifest: %w", err)
	}
	_, err = tx.exec(ctx, `INSERT INTO channels (channel, ref, source_commit, signed_at, fleet_blob, fleet_sig, fleet_hash,
			manifest_blob, manifest_sig, manifest_hash, verified_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (channel) DO UPDATE SET ref = excluded.ref, source_commit = excluded.source_commit,
			signed_at = excluded.signed_at, fleet_blob = excluded.fleet_blob, fleet_sig = excluded.fleet_sig,
			fleet_hash = excluded.fleet_hash, manifest_blob = excluded.manifest_blob,
			manifest_sig = excluded.manifest_sig, manifest_hash = excluded.manifest_hash,
			verified_at = excluded.verified_at`,
		r.Channel, r.Ref, r.SourceCommit, signed, fleetBlob, bytesOrEmpty(r.FleetSig), r.FleetHash,
		manifestBlob, bytesOrEmpty(r.ManifestSig), r.ManifestHash, micros(r.VerifiedAt))
	if err != nil {
		return false, fmt.Errorf("store: put release: %w", err)
	}
	if err := logRelease(ctx, tx, r, curRef, r.VerifiedAt); err != nil {
		return false, fmt.Errorf("store: put release: %w", err)
	}
	return true, nil
}

// Releases returns the current release of every channel, by channel name.
func (s *db) Releases(ctx context.Context) ([]Release, error) {
	var out []Release
	err := s.read(ctx, func(tx *txn) error {
		// Bodies kept in parts are joined once the rows are read.
		type parted struct {
			row      int // in out
			manifest bool
			id       string
			parts    int
		}
		var later []parted
		rows := 0
		var err error
		out, err = collect(ctx, tx, out, func(rs row) (Release, error) {
			rows++
			var r Release
			var signed, verified int64
			var fleetBlob, manifestBlob string
			var missing, fleetParts, manifestParts int
			err := rs.Scan(&r.Channel, &r.Ref, &r.SourceCommit, &signed, &r.FleetBody, &r.FleetSig, &r.FleetHash,
				&r.ManifestBody, &r.ManifestSig, &r.ManifestHash, &verified, &fleetBlob, &manifestBlob, &missing,
				&fleetParts, &manifestParts)
			r.SignedAt, r.VerifiedAt = fromMicros(signed), fromMicros(verified)
			if err == nil && missing > 0 {
				// Never a channel without its release: say what is wrong.
				err = fmt.Errorf("channel %s: %d of its release's bodies (%s, %s) is not in release_blobs", r.Channel, missing, fleetBlob, manifestBlob)
			}
			if fleetParts > 0 {
				later = append(later, parted{row: rows - 1, id: fleetBlob, parts: fleetParts})
			}
			if manifestParts > 0 {
				later = append(later, parted{row: rows - 1, manifest: true, id: manifestBlob, parts: manifestParts})
			}
			return r, err
		}, `SELECT c.channel, c.ref, c.source_commit, c.signed_at, coalesce(f.body, ?), c.fleet_sig, c.fleet_hash,
			coalesce(m.body, ?), c.manifest_sig, c.manifest_hash, c.verified_at, c.fleet_blob, c.manifest_blob,
			(CASE WHEN f.id IS NULL THEN 1 ELSE 0 END) + (CASE WHEN m.id IS NULL THEN 1 ELSE 0 END),
			coalesce(f.parts, 0), coalesce(m.parts, 0)
			FROM channels c LEFT JOIN release_blobs f ON f.id = c.fleet_blob LEFT JOIN release_blobs m ON m.id = c.manifest_blob`,
			[]byte{}, []byte{})
		if err != nil {
			return err
		}
		for _, p := range later {
			body, err := readParts(ctx, tx, p.id, p.parts)
			if err != nil {
				return err
			}
			if p.manifest {
				out[p.row].ManifestBody = body
			} else {
				out[p.row].FleetBody = body
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: releases: %w", err)
	}
	slices.SortFunc(out, func(a, b Release) int { return strings.Compare(a.Channel, b.Channel) })
	return out, nil
}

// Manifest returns the manifest a rollout serves (ErrNotFound).
func (s *db) Manifest(ctx context.Context, rolloutID string) (Manifest, error) {
	m := Manifest{RolloutID: rolloutID}
	err := s.read(ctx, func(tx *txn) error {
		return tx.queryRow(ctx, "SELECT body, sig, hash FROM rollout_manifests WHERE rollout_id = ?", rolloutID).
			Scan(&m.Body, &m.Sig, &m.Hash)
	})
	if errors.Is(err, errNoRows) {
		return Manifest{}, fmt.Errorf("%w: manifest of rollout %q", ErrNotFound, rolloutID)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("store: manifest: %w", err)
	}
	return m, nil
}

// ReplaceManifest swaps the manifest a rollout serves and the rollout's
// manifest hash, under the tick lock so that no tick writes the old hash
// back (ErrNotFound).
func (s *db) ReplaceManifest(ctx context.Context, m Manifest) error {
	return s.write(ctx, func(tx *txn) error {
		if err := tx.lockTick(ctx); err != nil {
			return err
		}
		n, err := tx.exec(ctx, "UPDATE rollout_manifests SET body = ?, sig = ?, hash = ? WHERE rollout_id = ?",
			bytesOrEmpty(m.Body), bytesOrEmpty(m.Sig), m.Hash, m.RolloutID)
		if err != nil {
			return fmt.Errorf("store: replace manifest: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("%w: manifest of rollout %q", ErrNotFound, m.RolloutID)
		}
		if _, err := tx.exec(ctx, "UPDATE rollouts SET manifest_hash = ? WHERE id = ?", m.Hash, m.RolloutID); err != nil {
			return fmt.Errorf("store: replace manifest: %w", err)
		}
		return tx.bumpEpoch(ctx)
	})
}
