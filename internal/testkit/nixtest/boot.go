package nixtest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A host's boot, for tests of reboots (rfcs/0008 §Reboots). Its boot/
// directory holds:
//
//	boot_id      the kernel's boot id, a new one at each PowerCycle
//	oneshot      the systemd-boot entry the next boot boots once, as the
//	             bootctl stub's set-oneshot wrote it (absent: none)
//	reboots.log  one line per "systemctl reboot" or "systemctl kexec"
//	bin/         the bootctl and systemctl stubs (LoaderStubs)
//
// The stubs only record; the test powers the host off (kills its agent)
// and on again with PowerCycle.

func (h *Host) bootDir() string { return filepath.Join(h.Dir, "boot") }

// BootIDFile is the file holding the host's boot id: what the agent's
// --boot-id-file reads instead of /proc/sys/kernel/random/boot_id.
func (h *Host) BootIDFile() string { return filepath.Join(h.bootDir(), "boot_id") }

// bootctlStub and systemctlStub stand in for systemd's commands on a
// host whose loader is systemd-boot; @boot@ is the host's boot/.
const bootctlStub = `#!/bin/sh
# bootctl of a nixtest host: set-oneshot records the entry, "" removes it.
case "$1" in
set-oneshot)
	if [ -n "$2" ]; then printf '%s\n' "$2" >"@boot@/oneshot"; else rm -f "@boot@/oneshot"; fi
	;;
is-installed) ;;
*)
	echo "bootctl (nixtest stub): $* is not supported" >&2
	exit 1
	;;
esac
`

const systemctlStub = `#!/bin/sh
# systemctl of a nixtest host: reboot and kexec are recorded; the test
# powers the host off and on.
case "$1" in
reboot | kexec) printf '%s\n' "$1" >>"@boot@/reboots.log" ;;
*)
	echo "systemctl (nixtest stub): $* is not supported" >&2
	exit 1
	;;
esac
`

// LoaderStubs writes the host's bootctl and systemctl stubs, and its
// first boot id if it has none, and returns the directory to put first on
// the agent's PATH.
func (h *Host) LoaderStubs(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(h.bootDir(), "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	for name, script := range map[string]string{"bootctl": bootctlStub, "systemctl": systemctlStub} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(strings.ReplaceAll(script, "@boot@", h.bootDir())), 0o755); err != nil {
			t.Fatalf("nixtest: %v", err)
		}
	}
	if _, err := os.Stat(h.BootIDFile()); errors.Is(err, fs.ErrNotExist) {
		h.writeBootID(t, 1)
	}
	return bin
}

func (h *Host) writeBootID(t testing.TB, n int) {
	t.Helper()
	if err := os.WriteFile(h.BootIDFile(), []byte(fmt.Sprintf("%s-boot-%d\n", h.Name, n)), 0o644); err != nil {
		t.Fatalf("nixtest: %v", err)
	}
}

// BootID returns the host's boot id ("" before LoaderStubs).
func (h *Host) BootID(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(h.BootIDFile())
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// OneShot returns the entry the next boot boots once ("" when none).
func (h *Host) OneShot(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.bootDir(), "oneshot"))
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// Reboots returns the reboots ordered so far: "reboot" or "kexec".
func (h *Host) Reboots(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.bootDir(), "reboots.log"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	return strings.Fields(string(b))
}

// Generation returns the store path generation n of the host's system
// profile links to ("" when there is none).
func (h *Host) Generation(t testing.TB, n int) string {
	t.Helper()
	return readLink(t, filepath.Join(h.NixDir, "var", "nix", "profiles", "system-"+strconv.Itoa(n)+"-link"))
}

// PowerCycle boots the host again, its agent stopped: into the one-shot
// entry's generation (nixos-generation-<n>.conf), which it consumes, as
// systemd-boot does; into the default entry (the system profile) when
// there is none or intoDefault, as when the one-shot boot fails. It
// points run/booted-system and run/current-system at the system booted,
// writes a new boot id and returns the system.
func (h *Host) PowerCycle(t testing.TB, intoDefault bool) string {
	t.Helper()
	system := h.Profile(t)
	if once := h.OneShot(t); once != "" {
		if !intoDefault {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(once, "nixos-generation-"), ".conf"))
			if err != nil {
				t.Fatalf("nixtest: one-shot entry %q is not a generation's", once)
			}
			if system = h.Generation(t, n); system == "" {
				t.Fatalf("nixtest: one-shot entry %q: the profile has no generation %d", once, n)
			}
		}
		if err := os.Remove(filepath.Join(h.bootDir(), "oneshot")); err != nil {
			t.Fatalf("nixtest: %v", err)
		}
	}
	for _, link := range []string{h.CurrentSystemLink(), h.BootedSystemLink()} {
		tmp := link + ".tmp"
		_ = os.Remove(tmp)
		if err := os.Symlink(system, tmp); err != nil {
			t.Fatalf("nixtest: %v", err)
		}
		if err := os.Rename(tmp, link); err != nil {
			t.Fatalf("nixtest: %v", err)
		}
	}
	id := h.BootID(t)
	n, _ := strconv.Atoi(id[strings.LastIndexByte(id, '-')+1:])
	h.writeBootID(t, n+1)
	return system
}
