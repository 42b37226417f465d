package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"
)

// Release blobs (0013_release_blobs): the bytes of a release's artifacts,
// named by their SHA-256, which channels name. A large release's bytes
// take long to reach the database (≈100 MB/s here: a third of a second at
// 100,000 hosts), so the control plane's source writes them while it
// verifies them (StageReleaseBodies) and PutReleases then only names them.
//
// Invariant: a channel names only blobs that exist and hold the bytes of
// its release. PutReleases writes, in its own transaction and under the
// tick lock, every body it does not find, and it alone deletes blobs (those
// no channel names, after its releases are in), so a blob it found or
// wrote cannot vanish before it commits. Staging is an optimisation only:
// nothing depends on a staged blob arriving, and what is staged for a
// release that is then refused stays unnamed, is never read, and is
// bounded (maxLooseBlobs).

// maxLooseBlobs bounds the blobs no channel names: staging writes nothing
// while this many exist, so refused pushes cannot fill the database
// between two stored releases (at most 8 × proto.MaxBytes). Stagings run
// one at a time, across replicas too (an advisory lock on PostgreSQL, the
// one writer on SQLite), so the count they read is exact.
const maxLooseBlobs = 8

// unnamedBlob selects the blobs no channel names.
const unnamedBlob = "id NOT IN (SELECT fleet_blob FROM channels) AND id NOT IN (SELECT manifest_blob FROM channels)"

// blobID names a body by its content.
func blobID(body []byte) string {
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// StageReleaseBodies writes bodies as release blobs ahead of the
// PutReleases that will name them, in a transaction of their own; a body
// already kept is not written again. It reports how many it wrote: none
// when maxLooseBlobs blobs no channel names exist (PutReleases then writes
// the bodies itself).
func (s *db) StageReleaseBodies(ctx context.Context, now time.Time, bodies ...[]byte) (int, error) {
	ids := make([]string, len(bodies))
	for i, b := range bodies {
		ids[i] = blobID(b)
	}
	var staged int
	err := s.write(ctx, func(tx *txn) error {
		staged = 0
		if tx.dialect == dialectPostgres {
			if _, err := tx.exec(ctx, "SELECT pg_advisory_xact_lock(?)", stageLockKey); err != nil {
				return err
			}
		}
		var loose int
		if err := tx.queryRow(ctx, "SELECT count(*) FROM release_blobs WHERE "+unnamedBlob).Scan(&loose); err != nil {
			return err
		}
		for i, b := range bodies {
			if loose >= maxLooseBlobs {
				break
			}
			n, err := insertBlob(ctx, tx, ids[i], b, now)
			if err != nil {
				return err
			}
			staged += int(n)
			loose += int(n)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: stage release bodies: %w", err)
	}
	return staged, nil
}

// putBlob names body in a transaction holding the tick lock, writing it
// unless a blob of the same content exists.
func putBlob(ctx context.Context, tx *txn, body []byte, now time.Time) (string, error) {
	id := blobID(body)
	var one int
	err := tx.queryRow(ctx, "SELECT 1 FROM release_blobs WHERE id = ?", id).Scan(&one)
	switch {
	case err == nil:
		return id, nil
	case !errors.Is(err, errNoRows):
		return "", err
	}
	// A blob being staged meanwhile is waited for, and kept.
	_, err = tx.exec(ctx, "INSERT INTO release_blobs (id, body, staged_at) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING",
		id, bytesOrEmpty(body), micros(now))
	return id, err
}

// insertBlob writes a blob unless one of that id is kept, and reports how
// many it wrote (0 or 1). On PostgreSQL a body that is not kept is
// streamed with COPY (copyBlob); a blob of the same id written meanwhile
// by another transaction (PutReleases' putBlob, another replica's staging)
// then fails the COPY on the primary key: the staging fails, which costs
// only time.
func insertBlob(ctx context.Context, tx *txn, id string, body []byte, now time.Time) (int64, error) {
	if tx.dialect != dialectPostgres {
		return tx.exec(ctx, "INSERT INTO release_blobs (id, body, staged_at) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING",
			id, bytesOrEmpty(body), micros(now))
	}
	var one int
	switch err := tx.queryRow(ctx, "SELECT 1 FROM release_blobs WHERE id = ?", id).Scan(&one); {
	case err == nil:
		return 0, nil
	case !errors.Is(err, errNoRows):
		return 0, err
	}
	return copyBlob(ctx, tx, id, body, now)
}

// copyBlob writes one release_blobs row with COPY in binary format,
// reading the body from its slice as it is sent. A body passed as a
// parameter is copied whole twice before the first byte leaves (pgx's
// encoding, then its Bind message: 70 MB moved and allocated per release at
// 100,000 hosts), and PostgreSQL starts on it only when all has arrived.
func copyBlob(ctx context.Context, tx *txn, id string, body []byte, now time.Time) (int64, error) {
	// The binary COPY format: signature, flags, header extension length;
	// one tuple (field count, then each field's length and bytes); the
	// trailer. Fields: id (text), body (bytea), staged_at (bigint).
	head := make([]byte, 0, 64+len(id))
	head = append(head, "PGCOPY\n\xff\r\n\x00"...)
	head = binary.BigEndian.AppendUint32(head, 0)
	head = binary.BigEndian.AppendUint32(head, 0)
	head = binary.BigEndian.AppendUint16(head, 3)
	head = binary.BigEndian.AppendUint32(head, uint32(len(id)))
	head = append(head, id...)
	head = binary.BigEndian.AppendUint32(head, uint32(len(body)))
	tail := make([]byte, 0, 14)
	tail = binary.BigEndian.AppendUint32(tail, 8)
	tail = binary.BigEndian.AppendUint64(tail, uint64(micros(now)))
	tail = binary.BigEndian.AppendUint16(tail, 0xffff) // -1: no more tuples
	r := io.MultiReader(bytes.NewReader(head), bytes.NewReader(body), bytes.NewReader(tail))
	tag, err := tx.pg.Conn().PgConn().CopyFrom(ctx, r, "COPY release_blobs (id, body, staged_at) FROM STDIN (FORMAT binary)")
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// dropUnnamedBlobs deletes the blobs no channel names, in a transaction
// holding the tick lock.
func dropUnnamedBlobs(ctx context.Context, tx *txn) error {
	_, err := tx.exec(ctx, "DELETE FROM release_blobs WHERE "+unnamedBlob)
	return err
}
