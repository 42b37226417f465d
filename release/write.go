package release

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrOutDir is wrapped when the output directory cannot be replaced because
// it holds something that is not part of a release.
var ErrOutDir = errors.New("release: output directory is not a release directory")

// WriteDir writes a bundle as the release directory dir, all or nothing:
// the files are written and synced in a staging directory next to dir,
// which then replaces dir in one atomic rename (an exchange, when dir
// exists). On any error dir is left exactly as it was.
//
// An existing dir is replaced only if it holds nothing but release files
// (fleet.resolved.json, its .sig, and rollouts/ with *.json and *.json.sig),
// so a mistyped --out cannot wipe unrelated data.
func WriteDir(dir string, b *Bundle) (err error) {
	for _, a := range b.Artifacts() {
		if !releasePath(a.Path) {
			return fmt.Errorf("release: artifact path %q is not %s or %s/<rolloutId>.json", a.Path, FleetFile, RolloutsDir)
		}
	}
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	exists, err := checkReplaceable(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	staging, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".staging-")
	if err != nil {
		return err
	}
	defer func() {
		// After a successful exchange staging holds the old release.
		os.RemoveAll(staging)
	}()
	if err := os.Chmod(staging, 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(staging, RolloutsDir), 0o755); err != nil {
		return err
	}
	for _, a := range b.Artifacts() {
		p := filepath.Join(staging, filepath.FromSlash(a.Path))
		if err := writeSynced(p, a.Body); err != nil {
			return err
		}
		if err := writeSynced(p+SigSuffix, a.Sig); err != nil {
			return err
		}
	}
	if err := syncDir(filepath.Join(staging, RolloutsDir)); err != nil {
		return err
	}
	if err := syncDir(staging); err != nil {
		return err
	}
	if !exists {
		if err := os.Rename(staging, dir); err != nil {
			return err
		}
		return syncDir(parent)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, staging, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE); err != nil {
		if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
			return fmt.Errorf("replacing %s: %w", dir, err)
		}
		// The file system cannot exchange: move the old release aside,
		// move the new one in, and put the old one back if that fails.
		aside := staging + ".old"
		if err := os.Rename(dir, aside); err != nil {
			return err
		}
		if err := os.Rename(staging, dir); err != nil {
			if rerr := os.Rename(aside, dir); rerr != nil {
				return fmt.Errorf("replacing %s: %w (and restoring it failed: %v; the old release is in %s)", dir, err, rerr, aside)
			}
			return err
		}
		staging = aside
	}
	return syncDir(parent)
}

// releasePath reports whether p is a path WriteDir may create.
func releasePath(p string) bool {
	if p == FleetFile {
		return true
	}
	name, ok := strings.CutPrefix(p, RolloutsDir+"/")
	return ok && strings.HasSuffix(name, ".json") && len(name) > len(".json") &&
		!strings.ContainsAny(name, "/\\") && !strings.HasPrefix(name, ".")
}

// checkReplaceable reports whether dir exists, and refuses a dir holding
// anything but release files.
func checkReplaceable(dir string) (bool, error) {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.IsDir() {
		return false, fmt.Errorf("%w: %s is not a directory", ErrOutDir, dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		switch name := e.Name(); {
		case (name == FleetFile || name == FleetFile+SigSuffix) && e.Type().IsRegular():
		case name == RolloutsDir && e.IsDir():
			sub, err := os.ReadDir(filepath.Join(dir, name))
			if err != nil {
				return false, err
			}
			for _, s := range sub {
				if !s.Type().IsRegular() || !(strings.HasSuffix(s.Name(), ".json") || strings.HasSuffix(s.Name(), ".json"+SigSuffix)) {
					return false, fmt.Errorf("%w: refusing to replace %s: it holds %s, which is not part of a release", ErrOutDir, dir, filepath.Join(name, s.Name()))
				}
			}
		default:
			return false, fmt.Errorf("%w: refusing to replace %s: it holds %s, which is not part of a release", ErrOutDir, dir, name)
		}
	}
	return true, nil
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
