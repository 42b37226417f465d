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
	"sync/atomic"
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
	if kept, err := hasBlob(ctx, tx, id); kept || err != nil {
		return id, err
	}
	// A blob being staged meanwhile is waited for, and kept.
	_, err := tx.exec(ctx, "INSERT INTO release_blobs (id, body, staged_at) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING",
		id, bytesOrEmpty(body), micros(now))
	return id, err
}

// hasBlob reports whether a blob of that id is kept.
func hasBlob(ctx context.Context, tx *txn, id string) (bool, error) {
	var one int
	switch err := tx.queryRow(ctx, "SELECT 1 FROM release_blobs WHERE id = ?", id).Scan(&one); {
	case err == nil:
		return true, nil
	case errors.Is(err, errNoRows):
		return false, nil
	default:
		return false, err
	}
}

// insertBlob writes a blob unless one of that id is kept, and reports how
// many it wrote (0 or 1). On PostgreSQL a body that is not kept is
// streamed with COPY (copyBlob), in parts when it is large; a blob of the
// same id written meanwhile by another transaction (PutReleases' putBlob,
// another replica's staging) then fails the write on the primary key: the
// staging fails, which costs only time.
func insertBlob(ctx context.Context, tx *txn, id string, body []byte, now time.Time) (int64, error) {
	if tx.dialect != dialectPostgres {
		return tx.exec(ctx, "INSERT INTO release_blobs (id, body, staged_at) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING",
			id, bytesOrEmpty(body), micros(now))
	}
	if kept, err := hasBlob(ctx, tx, id); kept || err != nil {
		return 0, err
	}
	if int64(len(body)) < partedBlob.Load() {
		return copyBlob(ctx, tx, id, body, now)
	}
	// Parts left by a blob of the same content that was deleted, not
	// swept yet (SweepBlobParts).
	if _, err := tx.exec(ctx, "DELETE FROM release_blob_parts WHERE id = ?", id); err != nil {
		return 0, err
	}
	n, err := copyParts(ctx, tx, id, body)
	if err != nil {
		return 0, err
	}
	return tx.exec(ctx, "INSERT INTO release_blobs (id, body, staged_at, parts) VALUES (?, ?, ?, ?)", id, []byte{}, micros(now), n)
}

// Parted blobs (0014_release_blob_parts, PostgreSQL): a body of partedBlob
// bytes or more is kept as rows of partSize bytes, which stay in their
// page (compressed with lz4), instead of one value PostgreSQL cuts into
// 2 KB TOAST chunks, each a row of its own in another table: a 25 MB
// fleet took ≈380 ms of the server's CPU as one value, ≈130 ms in parts.
// A manifest below partedBlob (6 MB at 100,000 hosts) stays whole: the
// opening tick copies it into rollout_manifests inside the server, which
// keeps a TOAST value as it is, but must join parts. The conformance
// suite lowers both sizes, to part every body but the smallest in many.
var partedBlob, partSize atomic.Int64

func init() {
	partedBlob.Store(8 << 20)
	// A part, with its row's header, stays within a page even when it
	// does not compress.
	partSize.Store(7 << 10)
}

// copyBlob writes one release_blobs row with COPY in binary format,
// reading the body from its slice as it is sent. A body passed as a
// parameter is copied whole twice before the first byte leaves (pgx's
// encoding, then its Bind message: 70 MB moved and allocated per release at
// 100,000 hosts), and PostgreSQL starts on it only when all has arrived.
func copyBlob(ctx context.Context, tx *txn, id string, body []byte, now time.Time) (int64, error) {
	// Fields: id (text), body (bytea), staged_at (bigint).
	var c copyWriter
	c.tuple(3)
	c.field([]byte(id))
	c.large(body)
	c.int64Field(micros(now))
	return c.send(ctx, tx, "COPY release_blobs (id, body, staged_at) FROM STDIN (FORMAT binary)")
}

// copyParts writes body as release_blob_parts rows of id, with COPY, and
// returns how many.
func copyParts(ctx context.Context, tx *txn, id string, body []byte) (int, error) {
	var c copyWriter
	n := 0
	size := int(partSize.Load())
	for off := 0; off < len(body); off += size {
		part := body[off:min(off+size, len(body))]
		// Fields: id (text), seq (integer), part (bytea).
		c.tuple(3)
		c.field([]byte(id))
		c.int32Field(int32(n))
		c.large(part)
		n++
	}
	if _, err := c.send(ctx, tx, "COPY release_blob_parts (id, seq, part) FROM STDIN (FORMAT binary)"); err != nil {
		return 0, err
	}
	return n, nil
}

// copyWriter assembles a COPY stream in binary format (signature, flags,
// header extension; tuples; the trailer) as a list of slices: the bodies
// it carries are read where they are, not copied into one buffer.
type copyWriter struct {
	head []byte // framing and small fields not yet in rs
	rs   []io.Reader
}

func (c *copyWriter) tuple(fields int) {
	if c.rs == nil && c.head == nil {
		c.head = append(c.head, "PGCOPY\n\xff\r\n\x00"...)
		c.head = binary.BigEndian.AppendUint32(c.head, 0) // flags
		c.head = binary.BigEndian.AppendUint32(c.head, 0) // header extension length
	}
	c.head = binary.BigEndian.AppendUint16(c.head, uint16(fields))
}

func (c *copyWriter) fieldHead(n int) { c.head = binary.BigEndian.AppendUint32(c.head, uint32(n)) }

// field adds a small field, copied into the framing.
func (c *copyWriter) field(b []byte) {
	c.fieldHead(len(b))
	c.head = append(c.head, b...)
}

func (c *copyWriter) int32Field(v int32) {
	c.fieldHead(4)
	c.head = binary.BigEndian.AppendUint32(c.head, uint32(v))
}

func (c *copyWriter) int64Field(v int64) {
	c.fieldHead(8)
	c.head = binary.BigEndian.AppendUint64(c.head, uint64(v))
}

// large adds a field whose bytes are read where they are when sent.
func (c *copyWriter) large(b []byte) {
	c.fieldHead(len(b))
	c.rs = append(c.rs, bytes.NewReader(c.head), bytes.NewReader(b))
	c.head = nil
}

// send ends the stream and runs the COPY statement with it.
func (c *copyWriter) send(ctx context.Context, tx *txn, statement string) (int64, error) {
	c.head = binary.BigEndian.AppendUint16(c.head, 0xffff) // -1: no more tuples
	c.rs = append(c.rs, bytes.NewReader(c.head))
	tag, err := tx.pg.Conn().PgConn().CopyFrom(ctx, fullReader{io.MultiReader(c.rs...)}, statement)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// fullReader fills every read it can: pgconn sends each read as a message
// of its own, and a tuple's framing alone is a few bytes.
type fullReader struct{ r io.Reader }

func (f fullReader) Read(p []byte) (int, error) {
	n, err := io.ReadFull(f.r, p)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = nil // the end, said by the next read
	}
	return n, err
}

// readBlob reads the body of blob id: whole from release_blobs, or joined
// from its parts. A blob missing, or missing parts, is an error.
func readBlob(ctx context.Context, tx *txn, id string) ([]byte, error) {
	var body []byte
	var parts int
	if err := tx.queryRow(ctx, "SELECT body, parts FROM release_blobs WHERE id = ?", id).Scan(&body, &parts); err != nil {
		return nil, fmt.Errorf("blob %s: %w", id, err)
	}
	if parts == 0 {
		return body, nil
	}
	return readParts(ctx, tx, id, parts)
}

// readParts joins the parts of blob id, which has parts of them.
func readParts(ctx context.Context, tx *txn, id string, parts int) ([]byte, error) {
	body := make([]byte, 0, parts*int(partSize.Load()))
	seen := 0
	err := eachRow(ctx, tx, func(rs row) error {
		var seq int
		var part []byte
		if err := rs.Scan(&seq, &part); err != nil {
			return err
		}
		if seq != seen {
			return fmt.Errorf("blob %s: part %d where part %d was due", id, seq, seen)
		}
		body = append(body, part...)
		seen++
		return nil
	}, "SELECT seq, part FROM release_blob_parts WHERE id = ? ORDER BY seq", id)
	if err == nil && seen != parts {
		err = fmt.Errorf("blob %s: %d of its %d parts are kept", id, seen, parts)
	}
	if err != nil {
		return nil, err
	}
	return body, nil
}

// dropUnnamedBlobs deletes the blobs no channel names, in a transaction
// holding the tick lock. Their parts stay until SweepBlobParts: a part is
// read only through its blob's row, so a part without one is never read.
func dropUnnamedBlobs(ctx context.Context, tx *txn) error {
	_, err := tx.exec(ctx, "DELETE FROM release_blobs WHERE "+unnamedBlob)
	return err
}

// SweepBlobParts deletes the parts whose blob row is gone. A staging
// writes a blob's parts and its row in one transaction, and first deletes
// parts left under the same id; the deletion here checks again, in its
// own statement, that no row names the parts it deletes, so that a blob
// staged again since they were listed keeps its new parts.
func (s *db) SweepBlobParts(ctx context.Context) (int, error) {
	var swept int
	err := s.write(ctx, func(tx *txn) error {
		ids, err := collect(ctx, tx, nil, scanString,
			"SELECT DISTINCT p.id FROM release_blob_parts p WHERE NOT EXISTS (SELECT 1 FROM release_blobs b WHERE b.id = p.id)")
		if err != nil {
			return err
		}
		swept = 0
		for _, id := range ids {
			n, err := tx.exec(ctx, "DELETE FROM release_blob_parts WHERE id = ? AND NOT EXISTS (SELECT 1 FROM release_blobs b WHERE b.id = ?)", id, id)
			if err != nil {
				return err
			}
			if n > 0 {
				swept++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: sweep blob parts: %w", err)
	}
	return swept, nil
}
