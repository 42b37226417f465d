package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nixfleet/nixfleet/proto"
)

// ErrBootLoaderUnsupported is returned by a BootLoader that cannot boot
// once into an entry (NoBootLoader), and by NewBootLoader for a name it
// does not know.
var ErrBootLoaderUnsupported = errors.New("agent: the boot loader cannot boot once into an entry")

// BootLoader is what a reboot into a staged target needs of the host's
// boot loader (rfcs/0008 §Reboots). The entries themselves are written
// by switch-to-configuration boot (Executor.Activate, MakeDefault), which
// runs the loader's NixOS installer; a BootLoader only picks the entry of
// the next boot and reboots.
type BootLoader interface {
	// Name is the loader's name: proto.BootLoaderSystemdBoot,
	// proto.BootLoaderGrub or proto.BootLoaderNone (Policy.BootLoader).
	Name() string
	// BootOnce makes the next boot, and only it, boot system's entry (a
	// full store path the profile has a generation of).
	BootOnce(ctx context.Context, system string) error
	// ClearOnce removes a once-only entry not booted yet: the next boot
	// is the default entry's.
	ClearOnce(ctx context.Context) error
	// Reboot orders the reboot, with kexec when asked and the host can;
	// it returns once the reboot is ordered, and the agent is stopped
	// soon after.
	Reboot(ctx context.Context, kexec bool) error
}

// LoaderConfig configures the boot loaders. Zero fields take the NixOS
// paths.
type LoaderConfig struct {
	// Profile is the system profile (/nix/var/nix/profiles/system): its
	// generation n is systemd-boot's entry nixos-generation-<n>.conf.
	Profile string
	// GrubConfig is grub.cfg (/boot/grub/grub.cfg); grubenv is beside it.
	GrubConfig string
	// EFIDir tells an EFI boot (/sys/firmware/efi), for DetectBootLoader.
	EFIDir string
	// Env is added to every command's environment.
	Env []string
}

func (c LoaderConfig) withDefaults() LoaderConfig {
	if c.Profile == "" {
		c.Profile = SystemProfile
	}
	if c.GrubConfig == "" {
		c.GrubConfig = "/boot/grub/grub.cfg"
	}
	if c.EFIDir == "" {
		c.EFIDir = "/sys/firmware/efi"
	}
	return c
}

// NewBootLoader returns the loader called name: "systemd-boot", "grub",
// "none", or "auto" (or ""), which detects it (DetectBootLoader).
func NewBootLoader(ctx context.Context, name string, c LoaderConfig) (BootLoader, error) {
	c = c.withDefaults()
	switch name {
	case "", "auto":
		return DetectBootLoader(ctx, c), nil
	case proto.BootLoaderSystemdBoot:
		return SystemdBoot{c}, nil
	case proto.BootLoaderGrub:
		return Grub{c}, nil
	case proto.BootLoaderNone:
		return NoBootLoader{c}, nil
	}
	return nil, fmt.Errorf("%w: unknown boot loader %q (systemd-boot, grub, none or auto)", ErrBootLoaderUnsupported, name)
}

// DetectBootLoader finds the host's loader: systemd-boot on an EFI boot
// where bootctl is-installed says so, else GRUB where grub.cfg exists,
// else none.
func DetectBootLoader(ctx context.Context, c LoaderConfig) BootLoader {
	c = c.withDefaults()
	if _, err := os.Stat(c.EFIDir); err == nil {
		if _, err := runCommand(ctx, c.Env, "bootctl", "is-installed", "--quiet"); err == nil {
			return SystemdBoot{c}
		}
	}
	if _, err := os.Stat(c.GrubConfig); err == nil {
		return Grub{c}
	}
	return NoBootLoader{c}
}

// SystemdBoot is systemd-boot: the one-shot entry is the EFI variable
// LoaderEntryOneShot (bootctl set-oneshot), which the loader removes when
// it boots it.
type SystemdBoot struct{ c LoaderConfig }

func (SystemdBoot) Name() string { return proto.BootLoaderSystemdBoot }

// BootOnce: bootctl set-oneshot nixos-generation-<n>.conf, n the newest
// generation of the profile that is system.
func (s SystemdBoot) BootOnce(ctx context.Context, system string) error {
	n, err := generationOf(s.c.Profile, system)
	if err != nil {
		return err
	}
	_, err = runCommand(ctx, s.c.Env, "bootctl", "set-oneshot", fmt.Sprintf("nixos-generation-%d.conf", n))
	return err
}

// ClearOnce: bootctl set-oneshot "" removes the variable.
func (s SystemdBoot) ClearOnce(ctx context.Context) error {
	_, err := runCommand(ctx, s.c.Env, "bootctl", "set-oneshot", "")
	return err
}

// Reboot: systemctl kexec when asked, which loads the kernel of the
// one-shot entry (or the default one) from the boot loader's entries;
// where it fails (no kexec support, kexec_load_disabled), systemctl
// reboot.
func (s SystemdBoot) Reboot(ctx context.Context, kexec bool) error {
	if kexec {
		if _, err := runCommand(ctx, s.c.Env, "systemctl", "kexec"); err == nil {
			return nil
		}
	}
	_, err := runCommand(ctx, s.c.Env, "systemctl", "reboot")
	return err
}

// Grub is GRUB: the one-shot entry is next_entry in grubenv (grub-reboot),
// which the grub.cfg NixOS writes boots once and clears, whatever
// boot.loader.grub.default says.
type Grub struct{ c LoaderConfig }

func (Grub) Name() string { return proto.BootLoaderGrub }

// BootOnce: grub-reboot with the menu path ("submenu>entry") of the entry
// of grub.cfg whose kernel command line has init=<system>/init.
func (g Grub) BootOnce(ctx context.Context, system string) error {
	entry, err := grubEntry(g.c.GrubConfig, system)
	if err != nil {
		return err
	}
	_, err = runCommand(ctx, g.c.Env, "grub-reboot", "--boot-directory", filepath.Dir(filepath.Dir(g.c.GrubConfig)), entry)
	return err
}

// ClearOnce: grub-editenv <grubenv> unset next_entry.
func (g Grub) ClearOnce(ctx context.Context) error {
	_, err := runCommand(ctx, g.c.Env, "grub-editenv", filepath.Join(filepath.Dir(g.c.GrubConfig), "grubenv"), "unset", "next_entry")
	return err
}

// Reboot: systemctl reboot; never kexec, which would load the default
// entry's kernel rather than GRUB's next entry.
func (g Grub) Reboot(ctx context.Context, _ bool) error {
	_, err := runCommand(ctx, g.c.Env, "systemctl", "reboot")
	return err
}

// NoBootLoader is a host whose loader cannot boot once into an entry (a
// container, or a loader other than systemd-boot and GRUB): every reboot
// target is refused. It still reboots into the default entry, which a
// rollback across a kernel change needs.
type NoBootLoader struct{ c LoaderConfig }

func (NoBootLoader) Name() string                           { return proto.BootLoaderNone }
func (NoBootLoader) BootOnce(context.Context, string) error { return ErrBootLoaderUnsupported }
func (NoBootLoader) ClearOnce(context.Context) error        { return nil }

// Reboot: systemctl reboot; never kexec.
func (l NoBootLoader) Reboot(ctx context.Context, _ bool) error {
	_, err := runCommand(ctx, l.c.Env, "systemctl", "reboot")
	return err
}

// generationOf returns the newest generation of profile that links to
// system: its links are <profile>-<n>-link beside it.
func generationOf(profile, system string) (int, error) {
	links, err := filepath.Glob(profile + "-*-link")
	if err != nil {
		return 0, err
	}
	best := -1
	for _, l := range links {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(l, profile+"-"), "-link"))
		if err != nil || n <= best {
			continue
		}
		if target, err := os.Readlink(l); err == nil && target == system {
			best = n
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("no generation of %s is %s", profile, system)
	}
	return best, nil
}

// grubEntry returns the menu path of the first entry of a grub.cfg whose
// body boots system (init=<system>/init), as grub-reboot takes it:
// titles, submenus first, joined by ">".
func grubEntry(cfg, system string) (string, error) {
	f, err := os.Open(cfg)
	if err != nil {
		return "", err
	}
	defer f.Close()
	type block struct {
		title string
		depth int // brace depth inside the block
	}
	var stack []block
	depth := 0
	want := "init=" + system + "/init"
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if kw, rest, ok := strings.Cut(line, " "); ok && (kw == "menuentry" || kw == "submenu") {
			stack = append(stack, block{title: grubTitle(rest), depth: depth})
		} else if strings.Contains(line, want) {
			var titles []string
			for _, b := range stack {
				titles = append(titles, b.title)
			}
			return strings.Join(titles, ">"), nil
		}
		depth += strings.Count(line, "{") - strings.Count(line, "}")
		for len(stack) > 0 && depth <= stack[len(stack)-1].depth {
			stack = stack[:len(stack)-1]
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no entry of %s boots %s", cfg, system)
}

// grubTitle is the quoted title that opens a menuentry or submenu line.
func grubTitle(rest string) string {
	rest = strings.TrimSpace(rest)
	if len(rest) > 0 && (rest[0] == '"' || rest[0] == '\'') {
		if end := strings.IndexByte(rest[1:], rest[0]); end >= 0 {
			return rest[1 : 1+end]
		}
	}
	title, _, _ := strings.Cut(rest, " ")
	return title
}

// runCommand runs a command and returns its stdout; an error carries the
// last lines of stderr.
func runCommand(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = commandWaitDelay
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", filepath.Base(name), strings.Join(args, " "), err, tail(stderr.String(), 600))
	}
	return stdout.String(), nil
}
