package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/proto"
)

// grubCfg is the part of a grub.cfg NixOS writes that grubEntry reads.
const grubCfg = `set default=0
menuentry "NixOS - Default" --class nixos --unrestricted {
  search --set=drive1 --fs-uuid 1234
    linux ($drive1)/kernels/aaaa-linux-6.6-bzImage init=` + "/nix/store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-nixos-system-web-1-v1" + `/init loglevel=4
}
submenu "NixOS - All configurations" --class submenu {
menuentry "NixOS - Configuration 2 (2026-11-21 - 24.05)" --class nixos --unrestricted {
    linux ($drive1)/kernels/bbbb-linux-6.12-bzImage init=` + "/nix/store/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-nixos-system-web-1-v2" + `/init loglevel=4
}
menuentry "NixOS - Configuration 1 (2026-11-20 - 24.05)" --class nixos --unrestricted {
    linux ($drive1)/kernels/aaaa-linux-6.6-bzImage init=` + "/nix/store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-nixos-system-web-1-v1" + `/init loglevel=4
}
}
`

func TestGrubEntry(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "grub.cfg")
	if err := os.WriteFile(cfg, []byte(grubCfg), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ system, want string }{
		{v1, "NixOS - Default"},
		{v2, "NixOS - All configurations>NixOS - Configuration 2 (2026-11-21 - 24.05)"},
		{v3, ""},
	} {
		got, err := grubEntry(cfg, tc.system)
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("%s: %q, %v; want %q", filepath.Base(tc.system), got, err, tc.want)
		}
	}
}

// stubs puts commands on PATH that log their arguments to the returned
// file, one line a call; those named in fail exit 1.
func stubs(t *testing.T, fail ...string) string {
	dir := t.TempDir()
	log := filepath.Join(dir, "calls.log")
	for _, name := range []string{"bootctl", "systemctl", "grub-reboot", "grub-editenv"} {
		code := "0"
		for _, f := range fail {
			if f == name {
				code = "1"
			}
		}
		script := "#!/bin/sh\necho \"" + name + " $*\" >>" + log + "\nexit " + code + "\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return log
}

func calls(t *testing.T, log string) []string {
	b, err := os.ReadFile(log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// TestBootLoaders: the commands each loader runs (stubs on PATH; not
// parallel, for PATH).
func TestBootLoaders(t *testing.T) {
	dir := t.TempDir()
	profile := filepath.Join(dir, "system")
	for link, target := range map[string]string{"system-1-link": v1, "system-2-link": v2, "system-3-link": v1, "system": "system-3-link"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	grub := filepath.Join(dir, "grub", "grub.cfg")
	if err := os.MkdirAll(filepath.Dir(grub), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(grub, []byte(grubCfg), 0o644); err != nil {
		t.Fatal(err)
	}
	c := LoaderConfig{Profile: profile, GrubConfig: grub}
	ctx := context.Background()
	do := func(l BootLoader) error {
		if err := l.BootOnce(ctx, v2); err != nil {
			return err
		}
		if err := l.ClearOnce(ctx); err != nil {
			return err
		}
		return l.Reboot(ctx, true)
	}
	for _, tc := range []struct {
		name   string
		loader string
		fail   []string
		want   []string
	}{
		{"systemd-boot, kexec", proto.BootLoaderSystemdBoot, nil,
			[]string{"bootctl set-oneshot nixos-generation-2.conf", "bootctl set-oneshot ", "systemctl kexec"}},
		{"systemd-boot, systemctl kexec fails: a reboot is tried", proto.BootLoaderSystemdBoot, []string{"systemctl"},
			[]string{"bootctl set-oneshot nixos-generation-2.conf", "bootctl set-oneshot ", "systemctl kexec", "systemctl reboot"}},
		{"grub", proto.BootLoaderGrub, nil, []string{
			"grub-reboot --boot-directory " + dir + " NixOS - All configurations>NixOS - Configuration 2 (2026-11-21 - 24.05)",
			"grub-editenv " + filepath.Join(dir, "grub", "grubenv") + " unset next_entry", "systemctl reboot"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := stubs(t, tc.fail...)
			l, err := NewBootLoader(ctx, tc.loader, c)
			if err != nil {
				t.Fatal(err)
			}
			err = do(l)
			if (err != nil) != (tc.fail != nil) {
				t.Errorf("err %v", err)
			}
			if d := cmp.Diff(tc.want, calls(t, log)); d != "" {
				t.Errorf("commands (-want +got):\n%s", d)
			}
		})
	}
	t.Run("none", func(t *testing.T) {
		l, _ := NewBootLoader(ctx, proto.BootLoaderNone, c)
		if err := do(l); !errors.Is(err, ErrBootLoaderUnsupported) {
			t.Errorf("err %v, want ErrBootLoaderUnsupported", err)
		}
		if _, err := NewBootLoader(ctx, "lilo", c); !errors.Is(err, ErrBootLoaderUnsupported) {
			t.Errorf("lilo: %v, want ErrBootLoaderUnsupported", err)
		}
	})
	t.Run("detected", func(t *testing.T) {
		log := stubs(t)
		efi := filepath.Join(dir, "efi")
		for _, tc := range []struct {
			name string
			c    LoaderConfig
			want string
		}{
			{"EFI, bootctl is-installed", LoaderConfig{EFIDir: dir, GrubConfig: grub}, proto.BootLoaderSystemdBoot},
			{"BIOS, grub.cfg", LoaderConfig{EFIDir: efi, GrubConfig: grub}, proto.BootLoaderGrub},
			{"neither", LoaderConfig{EFIDir: efi, GrubConfig: filepath.Join(dir, "none.cfg")}, proto.BootLoaderNone},
		} {
			if got := DetectBootLoader(ctx, tc.c).Name(); got != tc.want {
				t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
			}
		}
		if d := cmp.Diff([]string{"bootctl is-installed --quiet"}, calls(t, log)); d != "" {
			t.Errorf("commands (-want +got):\n%s", d)
		}
	})
}
