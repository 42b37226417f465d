package release_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/release"
	"github.com/nixfleet/nixfleet/trust"
)

// node is one entry of a directory tree snapshot.
type node struct {
	// Mode is the fs.FileMode in ls form ("drwxr-xr-x").
	Mode string
	// Data is a regular file's content or a symlink's target.
	Data string
}

// snapshot records every entry under root (root itself is "."), by
// slash-separated relative path, without following symlinks. A missing root
// yields an empty snapshot.
func snapshot(t *testing.T, root string) map[string]node {
	t.Helper()
	tree := map[string]node{}
	if _, err := os.Lstat(root); errors.Is(err, fs.ErrNotExist) {
		return tree
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		n := node{Mode: info.Mode().String()}
		switch {
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			n.Data = string(b)
		case info.Mode()&fs.ModeSymlink != 0:
			if n.Data, err = os.Readlink(p); err != nil {
				return err
			}
		}
		tree[filepath.ToSlash(rel)] = n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

const (
	dirMode  = "drwxr-xr-x"
	fileMode = "-rw-r--r--"
)

// releaseTree is the snapshot of a release directory holding exactly b.
func releaseTree(b *release.Bundle) map[string]node {
	tree := map[string]node{".": {Mode: dirMode}, "rollouts": {Mode: dirMode}}
	for _, a := range b.Artifacts() {
		tree[a.Path] = node{Mode: fileMode, Data: string(a.Body)}
		tree[a.Path+".sig"] = node{Mode: fileMode, Data: string(a.Sig)}
	}
	return tree
}

// prefixed re-roots a snapshot under dir, for comparing a parent directory.
func prefixed(dir string, tree map[string]node) map[string]node {
	out := map[string]node{}
	for p, n := range tree {
		if p == "." {
			out[dir] = n
		} else {
			out[dir+"/"+p] = n
		}
	}
	return out
}

// bundles returns a two-channel release and a one-channel release signed
// with one key.
func bundles(t *testing.T) (key *trust.PrivateKey, two, one *release.Bundle) {
	t.Helper()
	key = generateKey(t, proto.AlgorithmEd25519)
	two = signFleet(t, key, readFleet(t), testCommit)
	one = signFleet(t, key, oneChannelFleet(t), otherCommit)
	if len(two.Rollouts) != 2 || len(one.Rollouts) != 1 {
		t.Fatalf("fixtures have %d and %d rollouts, want 2 and 1", len(two.Rollouts), len(one.Rollouts))
	}
	return key, two, one
}

func writeDir(t *testing.T, dir string, b *release.Bundle) {
	t.Helper()
	if err := release.WriteDir(dir, b); err != nil {
		t.Fatalf("WriteDir(%s): %v", dir, err)
	}
}

func TestWriteDirNew(t *testing.T) {
	t.Parallel()
	key, b, _ := bundles(t)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "a", "b", "release")
	writeDir(t, dir, b)

	want := releaseTree(b)
	if diff := cmp.Diff(want, snapshot(t, dir)); diff != "" {
		t.Errorf("release directory (-want +got):\n%s", diff)
	}
	// The missing parents were created, and nothing else is left next to
	// the release (no staging directory).
	wantTmp := prefixed("a/b/release", want)
	wantTmp["."] = node{Mode: snapshot(t, tmp)["."].Mode}
	wantTmp["a"] = node{Mode: dirMode}
	wantTmp["a/b"] = node{Mode: dirMode}
	if diff := cmp.Diff(wantTmp, snapshot(t, tmp)); diff != "" {
		t.Errorf("parent directories (-want +got):\n%s", diff)
	}

	// The files as written verify, each with its .sig.
	wantFiles := []string{
		"fleet.resolved.json", "fleet.resolved.json.sig",
		"rollouts/edge@" + testCommit + ".json", "rollouts/edge@" + testCommit + ".json.sig",
		"rollouts/stable@" + testCommit + ".json", "rollouts/stable@" + testCommit + ".json.sig",
	}
	for _, f := range wantFiles {
		if _, ok := want[f]; !ok {
			t.Errorf("the release lacks %s", f)
		}
	}
	read := func(p string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	roots := rootsFor(t, key.Public())
	sig := read(release.FleetFile + release.SigSuffix)
	if len(sig) != trust.SignatureSize {
		t.Errorf("%s%s holds %d bytes, want the raw %d-byte signature", release.FleetFile, release.SigSuffix, len(sig), trust.SignatureSize)
	}
	if _, err := trust.Verify(read(release.FleetFile), sig, roots, trust.Policy{Kind: proto.KindFleetResolved}, testNow); err != nil {
		t.Errorf("written fleet: %v", err)
	}
	for i, id := range b.RolloutIDs {
		p := release.RolloutsDir + "/" + id + ".json"
		if p != b.Rollouts[i].Path {
			t.Errorf("rollout %s is written as %s", id, b.Rollouts[i].Path)
		}
		if _, err := manifest.Verify(read(p), read(p+release.SigSuffix), roots, manifest.Expect{RolloutID: id}, testNow); err != nil {
			t.Errorf("written %s: %v", p, err)
		}
	}
}

func TestWriteDirReplace(t *testing.T) {
	t.Parallel()
	_, two, one := bundles(t)
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		write *release.Bundle
	}{
		{
			// The old channel's rollouts must not survive.
			name:  "release with fewer channels",
			setup: func(t *testing.T, dir string) { writeDir(t, dir, two) },
			write: one,
		},
		{
			name:  "release with more channels",
			setup: func(t *testing.T, dir string) { writeDir(t, dir, one) },
			write: two,
		},
		{
			name:  "same release again",
			setup: func(t *testing.T, dir string) { writeDir(t, dir, two) },
			write: two,
		},
		{
			name: "empty directory",
			setup: func(t *testing.T, dir string) {
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
			},
			write: two,
		},
		{
			name: "only an empty rollouts directory",
			setup: func(t *testing.T, dir string) {
				if err := os.MkdirAll(filepath.Join(dir, "rollouts"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			write: one,
		},
		{
			name: "release files only, in other modes",
			setup: func(t *testing.T, dir string) {
				writeDir(t, dir, two)
				if err := os.Chmod(filepath.Join(dir, release.FleetFile), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, 0o700); err != nil {
					t.Fatal(err)
				}
			},
			write: one,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			parent := t.TempDir()
			dir := filepath.Join(parent, "release")
			tt.setup(t, dir)
			writeDir(t, dir, tt.write)

			want := prefixed("release", releaseTree(tt.write))
			want["."] = node{Mode: snapshot(t, parent)["."].Mode}
			if diff := cmp.Diff(want, snapshot(t, parent)); diff != "" {
				t.Errorf("parent after replacing (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteDirRefuses(t *testing.T) {
	t.Parallel()
	_, two, one := bundles(t)
	write := func(t *testing.T, p, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		// wantOutDir: the error wraps ErrOutDir (otherwise any error).
		wantOutDir bool
	}{
		{
			name: "unrelated file",
			setup: func(t *testing.T, dir string) {
				writeDir(t, dir, two)
				write(t, filepath.Join(dir, "notes.txt"), "do not lose me")
			},
			wantOutDir: true,
		},
		{
			name:       "unrelated file only",
			setup:      func(t *testing.T, dir string) { write(t, filepath.Join(dir, "thesis.tex"), "years of work") },
			wantOutDir: true,
		},
		{
			name: "hidden file",
			setup: func(t *testing.T, dir string) {
				writeDir(t, dir, two)
				write(t, filepath.Join(dir, ".git", "HEAD"), "ref: refs/heads/main\n")
			},
			wantOutDir: true,
		},
		{
			name: "unrelated file in rollouts",
			setup: func(t *testing.T, dir string) {
				writeDir(t, dir, two)
				write(t, filepath.Join(dir, "rollouts", "README.md"), "hello")
			},
			wantOutDir: true,
		},
		{
			name: "directory in rollouts",
			setup: func(t *testing.T, dir string) {
				writeDir(t, dir, two)
				write(t, filepath.Join(dir, "rollouts", "old.json", "x.json"), "{}")
			},
			wantOutDir: true,
		},
		{
			name: "symlink in rollouts",
			setup: func(t *testing.T, dir string) {
				writeDir(t, dir, two)
				if err := os.Symlink("/etc/passwd", filepath.Join(dir, "rollouts", "x.json")); err != nil {
					t.Fatal(err)
				}
			},
			wantOutDir: true,
		},
		{
			name: "fleet.resolved.json is a directory",
			setup: func(t *testing.T, dir string) {
				write(t, filepath.Join(dir, "fleet.resolved.json", "data"), "x")
			},
			wantOutDir: true,
		},
		{
			name:       "rollouts is a file",
			setup:      func(t *testing.T, dir string) { write(t, filepath.Join(dir, "rollouts"), "x") },
			wantOutDir: true,
		},
		{
			name:       "path is a regular file",
			setup:      func(t *testing.T, dir string) { write(t, dir, "a file, not a release") },
			wantOutDir: true,
		},
		{
			name: "path is a symlink to a release",
			setup: func(t *testing.T, dir string) {
				real := filepath.Join(filepath.Dir(dir), "real")
				writeDir(t, real, two)
				if err := os.Symlink("real", dir); err != nil {
					t.Fatal(err)
				}
			},
			wantOutDir: true,
		},
		{
			name: "parent is a regular file",
			setup: func(t *testing.T, dir string) {
				write(t, filepath.Dir(dir), "not a directory")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			dir := filepath.Join(root, "parent", "release")
			tt.setup(t, dir)
			before := snapshot(t, root)

			err := release.WriteDir(dir, one)
			if err == nil {
				t.Fatal("WriteDir succeeded")
			}
			if tt.wantOutDir && !errors.Is(err, release.ErrOutDir) {
				t.Errorf("WriteDir error = %v, want one wrapping ErrOutDir", err)
			}
			if diff := cmp.Diff(before, snapshot(t, root)); diff != "" {
				t.Errorf("WriteDir changed the file system although it failed (-before +after):\n%s", diff)
			}
		})
	}
}

// TestWriteDirFailureMidway: when writing the new release fails, the old
// release is left exactly as it was and no staging directory remains.
func TestWriteDirFailureMidway(t *testing.T) {
	t.Parallel()
	_, two, one := bundles(t)
	// broken returns one with extra artifacts appended, so that the
	// failure comes after the valid files have been written.
	broken := func(extra ...release.Artifact) *release.Bundle {
		b := *one
		b.Rollouts = append(slices.Clone(one.Rollouts), extra...)
		b.RolloutIDs = append(slices.Clone(one.RolloutIDs), "broken")
		return &b
	}
	junk := release.Artifact{Body: []byte("{}"), Sig: make([]byte, 64)}
	with := func(p string) release.Artifact { a := junk; a.Path = p; return a }
	tests := []struct {
		name string
		b    *release.Bundle
	}{
		{name: "rollout in a missing subdirectory", b: broken(with("rollouts/nested/x.json"))},
		{name: "duplicate rollout path", b: broken(one.Rollouts[0])},
		{name: "rollout path is the fleet's", b: broken(with(release.FleetFile))},
		{name: "rollout path is the rollouts directory", b: broken(with(release.RolloutsDir))},
		{name: "rollout path is another rollout's signature", b: broken(with(one.Rollouts[0].Path + release.SigSuffix))},
		{name: "rollout path escapes the directory", b: broken(with("rollouts/../../escape.json"))},
		{name: "rollout path outside rollouts", b: broken(with("../escape.json"))},
		{name: "hidden rollout file", b: broken(with("rollouts/.x.json"))},
	}
	for _, tt := range tests {
		for _, existing := range []bool{true, false} {
			name := tt.name + "/new"
			if existing {
				name = tt.name + "/replacing"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				parent := t.TempDir()
				dir := filepath.Join(parent, "release")
				if existing {
					writeDir(t, dir, two)
				}
				before := snapshot(t, parent)
				if err := release.WriteDir(dir, tt.b); err == nil {
					t.Fatal("WriteDir succeeded")
				}
				if diff := cmp.Diff(before, snapshot(t, parent)); diff != "" {
					t.Errorf("WriteDir changed the parent although it failed (-before +after):\n%s", diff)
				}
			})
		}
	}
}
