package fleetrepo

import (
	"bufio"
	"bytes"
	"compress/flate"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/adler32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Hostile repositories: objects a channel ref or an artifact path may
// name that CI never writes (symlinks, submodules, tags, huge blobs), for
// the tests of the channel source.

// WriteBlob stores data as a blob object and returns its hash.
func (r *Repo) WriteBlob(data []byte) (plumbing.Hash, error) {
	o := r.git.Storer.NewEncodedObject()
	o.SetType(plumbing.BlobObject)
	w, err := o.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(data); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return r.git.Storer.SetEncodedObject(o)
}

// ZeroBlob is a loose blob object of Size zero bytes written by
// WriteZeroBlob: its hash, and the file holding it (zlib-compressed, so a
// GiB of zeros takes about a MiB).
type ZeroBlob struct {
	Hash plumbing.Hash
	File string
	Size int64
}

// WriteZeroBlob streams a blob of size zero bytes into a loose object file
// under dir, never holding more than a MiB of it in memory. Link it into
// repositories with AddLooseObject.
//
// Deflating a GiB takes a second, and half a minute under the race
// detector, so a MiB of zeros is deflated once, flushed to a byte
// boundary, and that block repeated: each block refers only to bytes of
// its own, so the concatenation is a valid stream, and the zlib checksum
// of zeros has a closed form. Only the SHA-1 reads the whole GiB.
func WriteZeroBlob(dir string, size int64) (ZeroBlob, error) {
	header := fmt.Appendf(nil, "blob %d\x00", size)
	const chunk = 1 << 20
	zeros := make([]byte, chunk)
	deflate := func(data []byte, final bool) ([]byte, error) {
		var b bytes.Buffer
		w, err := flate.NewWriter(&b, flate.BestCompression)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(data); err != nil {
			return nil, err
		}
		if final {
			err = w.Close()
		} else {
			err = w.Flush()
		}
		return b.Bytes(), err
	}
	f, err := os.CreateTemp(dir, "blob-*")
	if err != nil {
		return ZeroBlob{}, err
	}
	defer f.Close()
	bw := bufio.NewWriter(f)
	h := sha1.New()
	h.Write(header)
	// zlib: a header (deflate, 32 KiB window, default level), the
	// deflate stream, and the Adler-32 of the data.
	bw.Write([]byte{0x78, 0x9c})
	head, err := deflate(header, false)
	if err != nil {
		return ZeroBlob{}, err
	}
	bw.Write(head)
	full, err := deflate(zeros, false)
	if err != nil {
		return ZeroBlob{}, err
	}
	for left := size; left > 0; {
		n := min(left, chunk)
		block := full
		if n < chunk {
			if block, err = deflate(zeros[:n], false); err != nil {
				return ZeroBlob{}, err
			}
		}
		bw.Write(block)
		h.Write(zeros[:n])
		left -= n
	}
	end, err := deflate(nil, true)
	if err != nil {
		return ZeroBlob{}, err
	}
	bw.Write(end)
	// Adler-32: zeros leave a as it is and add a to b once each.
	const mod = 65521
	sum := adler32.Checksum(header)
	a, b := uint64(sum&0xffff), uint64(sum>>16)
	b = (b + uint64(size%mod)*a) % mod
	bw.Write(binary.BigEndian.AppendUint32(nil, uint32(b<<16|a)))
	if err := bw.Flush(); err != nil {
		return ZeroBlob{}, err
	}
	if err := f.Close(); err != nil {
		return ZeroBlob{}, err
	}
	return ZeroBlob{Hash: plumbing.NewHash(hex.EncodeToString(h.Sum(nil))), File: f.Name(), Size: size}, nil
}

// AddLooseObject puts a loose object file (from WriteZeroBlob) into the
// repository's object store, as a hard link when it can.
func (r *Repo) AddLooseObject(b ZeroBlob) error {
	id := b.Hash.String()
	dst := filepath.Join(r.Dir, ".git", "objects", id[:2], id[2:])
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if err := os.Link(b.File, dst); err == nil || os.IsExist(err) {
		return nil
	}
	src, err := os.Open(b.File)
	if err != nil {
		return err
	}
	defer src.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// CommitEntry commits, on top of base, base's tree with the entry at path
// (slash-separated) set to mode and hash, creating directories on the
// way: a symlink, a submodule, a directory or a blob written with
// WriteBlob or AddLooseObject. The worktree and HEAD do not move.
func (r *Repo) CommitEntry(base plumbing.Hash, path string, mode filemode.FileMode, hash plumbing.Hash, msg string, now time.Time) (plumbing.Hash, error) {
	c, err := r.git.CommitObject(base)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	root, err := r.setEntry(c.TreeHash, strings.Split(path, "/"), mode, hash)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	sig := object.Signature{Name: "nixfleet CI", Email: "ci@nixfleet.invalid", When: now}
	commit := &object.Commit{Author: sig, Committer: sig, Message: msg, TreeHash: root, ParentHashes: []plumbing.Hash{base}}
	return r.store(commit)
}

// setEntry writes the tree at h (zero: an empty one) with parts set, and
// returns its hash.
func (r *Repo) setEntry(h plumbing.Hash, parts []string, mode filemode.FileMode, hash plumbing.Hash) (plumbing.Hash, error) {
	t := &object.Tree{}
	if !h.IsZero() {
		old, err := r.git.TreeObject(h)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		t.Entries = append(t.Entries, old.Entries...)
	}
	e := object.TreeEntry{Name: parts[0], Mode: mode, Hash: hash}
	i := slices.IndexFunc(t.Entries, func(e object.TreeEntry) bool { return e.Name == parts[0] })
	if len(parts) > 1 {
		sub := plumbing.ZeroHash
		if i >= 0 && t.Entries[i].Mode == filemode.Dir {
			sub = t.Entries[i].Hash
		}
		h, err := r.setEntry(sub, parts[1:], mode, hash)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		e = object.TreeEntry{Name: parts[0], Mode: filemode.Dir, Hash: h}
	}
	if i >= 0 {
		t.Entries[i] = e
	} else {
		t.Entries = append(t.Entries, e)
	}
	// Git's order: by name, a directory's as if it ended in "/".
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(t.Entries, func(a, b int) bool { return key(t.Entries[a]) < key(t.Entries[b]) })
	return r.store(t)
}

// Tag writes an annotated tag object named name pointing at target, an
// object of type typ, and returns the tag object's hash (not a ref).
func (r *Repo) Tag(name string, target plumbing.Hash, typ plumbing.ObjectType, now time.Time) (plumbing.Hash, error) {
	t := &object.Tag{Name: name, Tagger: object.Signature{Name: "nixfleet CI", Email: "ci@nixfleet.invalid", When: now},
		Message: "release " + name + "\n", TargetType: typ, Target: target}
	return r.store(t)
}

// TreeOf returns the root tree of a commit.
func (r *Repo) TreeOf(commit plumbing.Hash) (plumbing.Hash, error) {
	c, err := r.git.CommitObject(commit)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	return c.TreeHash, nil
}

// store encodes an object into the object store.
func (r *Repo) store(o interface {
	Encode(plumbing.EncodedObject) error
}) (plumbing.Hash, error) {
	enc := r.git.Storer.NewEncodedObject()
	if err := o.Encode(enc); err != nil {
		return plumbing.ZeroHash, err
	}
	return r.git.Storer.SetEncodedObject(enc)
}
