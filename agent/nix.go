package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/nixfleet/nixfleet/codes"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Executor does what the steps say to the host. NixExecutor is the real
// one.
type Executor interface {
	// Current, Booted and Profile resolve /run/current-system,
	// /run/booted-system and the system profile to store paths ("" when
	// missing).
	Current() string
	Booted() string
	Profile() string
	// BootID is the kernel's boot id ("" when unknown).
	BootID() string
	// Realise makes path valid in the store from the substituters.
	Realise(ctx context.Context, path string) Result
	// Activate sets the profile to path and switches to it (or stages it
	// for the next boot, Result.Deferred, when a switch inhibitor
	// changes), then waits until the host runs it, at most until
	// deadline. With keepDefault, a staged path gets a boot entry that
	// is not the default: the profile and the default entry stay on the
	// system they were (a managed reboot, rfcs/0008 §Reboots).
	Activate(ctx context.Context, path string, deadline time.Time, keepDefault bool) Result
	// MakeDefault sets the profile to path and makes it the default boot
	// entry (switch-to-configuration boot), without switching.
	MakeDefault(ctx context.Context, path string) Result
	// SwitchTo sets the profile to path and switches to it: a rollback.
	// When a switch inhibitor changes (the host booted into a target with
	// another kernel), it makes path the default boot entry instead,
	// Result.Deferred, and the agent reboots into it.
	SwitchTo(ctx context.Context, path string, deadline time.Time) Result
	// Wait waits until the host runs path, at most until deadline.
	Wait(ctx context.Context, path string, deadline time.Time) Result
}

// NixConfig configures a NixExecutor. Zero fields take the NixOS paths.
type NixConfig struct {
	// StoreDir is the Nix store (/nix/store).
	StoreDir string
	// Profile is the system profile (/nix/var/nix/profiles/system).
	Profile string
	// CurrentSystem and BootedSystem are the links NixOS keeps
	// (/run/current-system, /run/booted-system).
	CurrentSystem, BootedSystem string
	// BootIDFile holds the boot id (/proc/sys/kernel/random/boot_id).
	BootIDFile string
	// Substituters are the binary caches to realise from.
	Substituters []string
	// TrustedKeys are the cache keys Nix accepts (trust.json cacheKeys).
	TrustedKeys []string
	// Detach prefixes the switch command so that it outlives the agent
	// (default: systemd-run --collect --quiet --wait --unit=<unique> --).
	// Empty runs the switch as a child of the agent.
	Detach []string
	// DetachSet makes an empty Detach mean "no detach" rather than the
	// default.
	DetachSet bool
	// Env is added to every command's environment.
	Env []string
	// Poll is how often Wait looks at the current system (100ms).
	Poll time.Duration
}

// NixExecutor runs nix-store, nix-env and the closures'
// switch-to-configuration.
type NixExecutor struct {
	c     NixConfig
	units atomic.Int64
}

// SystemProfile is NixOS's system profile, the default of NixConfig and
// LoaderConfig.
const SystemProfile = "/nix/var/nix/profiles/system"

// NewNixExecutor returns the real executor.
func NewNixExecutor(c NixConfig) *NixExecutor {
	if c.StoreDir == "" {
		c.StoreDir = "/nix/store"
	}
	if c.Profile == "" {
		c.Profile = SystemProfile
	}
	if c.CurrentSystem == "" {
		c.CurrentSystem = "/run/current-system"
	}
	if c.BootedSystem == "" {
		c.BootedSystem = "/run/booted-system"
	}
	if c.BootIDFile == "" {
		c.BootIDFile = "/proc/sys/kernel/random/boot_id"
	}
	if c.Detach == nil && !c.DetachSet {
		c.Detach = []string{"systemd-run", "--collect", "--quiet", "--wait", "--unit=nixfleet-switch-{n}", "--"}
	}
	if c.Poll <= 0 {
		c.Poll = 100 * time.Millisecond
	}
	return &NixExecutor{c: c}
}

// resolve follows a link to its store path ("" when it does not resolve).
func resolve(link string) string {
	p, err := filepath.EvalSymlinks(link)
	if err != nil {
		return ""
	}
	return p
}

func (n *NixExecutor) Current() string { return resolve(n.c.CurrentSystem) }
func (n *NixExecutor) Booted() string  { return resolve(n.c.BootedSystem) }
func (n *NixExecutor) Profile() string { return resolve(n.c.Profile) }

func (n *NixExecutor) BootID() string {
	b, err := os.ReadFile(n.c.BootIDFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// commandWaitDelay bounds the wait for a killed command's output.
const commandWaitDelay = 5 * time.Second

// run runs a command and returns its stdout; an error carries the last
// lines of stderr.
func (n *NixExecutor) run(ctx context.Context, name string, args ...string) (string, error) {
	return runCommand(ctx, n.c.Env, name, args...)
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// Realise runs nix-store --realise with the configured substituters and
// trusted keys, signatures required. Nix refusing a path for its
// signature is closure_unsigned; any other failure realise_failed; a
// realised path that is not the one asked for (never expected)
// realise_mismatch.
func (n *NixExecutor) Realise(ctx context.Context, path string) Result {
	args := []string{"--realise", path,
		"--option", "substituters", strings.Join(n.c.Substituters, " "),
		"--option", "trusted-public-keys", strings.Join(n.c.TrustedKeys, " "),
		"--option", "require-sigs", "true"}
	out, err := n.run(ctx, "nix-store", args...)
	if err != nil {
		return Result{Err: err, Code: realiseCode(err)}
	}
	lines := strings.Fields(out)
	if len(lines) == 0 || lines[len(lines)-1] != path {
		return Result{Err: fmt.Errorf("nix-store --realise %s printed %q", path, strings.TrimSpace(out)), Code: codes.RealiseMismatch}
	}
	return Result{}
}

// realiseCode classifies a failed nix-store --realise: Nix refusing a
// path for its signature is closure_unsigned (Nix 2.8: "the substitute
// for '…' from '…' is not signed by any of the keys in
// 'trusted-public-keys'"), anything else realise_failed.
func realiseCode(err error) string {
	if msg := err.Error(); strings.Contains(msg, "not signed by") || strings.Contains(msg, "signature") {
		return codes.ClosureUnsigned
	}
	return codes.RealiseFailed
}

// Fetch realises path as Realise does, and makes root an indirect GC root
// of it in the same command (nix-store --realise --add-root), so that no
// garbage collection can take the path between the two: a prefetch
// (rfcs/0008 §Prefetch). Nix prints the root; it must then point at path.
func (n *NixExecutor) Fetch(ctx context.Context, path, root string) Result {
	args := []string{"--realise", path, "--add-root", root,
		"--option", "substituters", strings.Join(n.c.Substituters, " "),
		"--option", "trusted-public-keys", strings.Join(n.c.TrustedKeys, " "),
		"--option", "require-sigs", "true"}
	out, err := n.run(ctx, "nix-store", args...)
	if err != nil {
		return Result{Err: err, Code: realiseCode(err)}
	}
	lines := strings.Fields(out)
	if len(lines) == 0 || lines[len(lines)-1] != root {
		return Result{Err: fmt.Errorf("nix-store --realise %s --add-root %s printed %q", path, root, strings.TrimSpace(out)), Code: codes.RealiseMismatch}
	}
	if got, err := os.Readlink(root); err != nil || got != path {
		return Result{Err: fmt.Errorf("the GC root %s points at %q, not %s (%v)", root, got, path, err), Code: codes.RealiseMismatch}
	}
	return Result{}
}

// Holds reports whether root points at path and Nix holds path valid
// (nix-store --check-validity).
func (n *NixExecutor) Holds(ctx context.Context, path, root string) bool {
	if got, err := os.Readlink(root); err != nil || got != path {
		return false
	}
	_, err := n.run(ctx, "nix-store", "--check-validity", path)
	return err == nil
}

// Unroot removes a GC root made by Fetch; Nix forgets its registration
// (a dangling link in gcroots/auto) at its next collection.
func (n *NixExecutor) Unroot(root string) error {
	if err := os.Remove(root); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// inhibitors are the parts of a system that a live switch cannot replace:
// a change in any of them stages the system for the next boot.
var inhibitors = []string{"kernel", "initrd", "systemd", "sw/bin/dbus-daemon"}

// changedInhibitors names the inhibitors that differ between two systems
// (none when the host runs no system yet).
func changedInhibitors(from, to string) []string {
	if from == "" {
		return nil
	}
	var out []string
	for _, name := range inhibitors {
		if !sameContent(resolve(filepath.Join(from, name)), resolve(filepath.Join(to, name))) {
			out = append(out, name)
		}
	}
	return out
}

// sameContent compares two resolved paths: equal paths, or two regular
// files with the same bytes (a store path is immutable, so equal paths
// suffice in a real system; tests may copy files).
func sameContent(a, b string) bool {
	if a == b {
		return true // both missing, or the same store path
	}
	if a == "" || b == "" {
		return false
	}
	x, err1 := os.ReadFile(a)
	y, err2 := os.ReadFile(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// setProfile points the system profile at path.
func (n *NixExecutor) setProfile(ctx context.Context, path string) error {
	_, err := n.run(ctx, "nix-env", "--profile", n.c.Profile, "--set", path)
	return err
}

// switchCmd runs path's switch-to-configuration action, detached when
// configured.
func (n *NixExecutor) switchCmd(ctx context.Context, path, action string) error {
	argv := []string{filepath.Join(path, "bin", "switch-to-configuration"), action}
	if action == "switch" && len(n.c.Detach) > 0 {
		unit := strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatInt(n.units.Add(1), 10)
		var pre []string
		for _, a := range n.c.Detach {
			pre = append(pre, strings.ReplaceAll(a, "{n}", unit))
		}
		argv = append(pre, argv...)
	}
	_, err := n.run(ctx, argv[0], argv[1:]...)
	return err
}

func (n *NixExecutor) Activate(ctx context.Context, path string, deadline time.Time, keepDefault bool) Result {
	changed := changedInhibitors(n.Current(), path)
	if len(changed) > 0 && keepDefault && n.Profile() != "" {
		return n.stageNotDefault(ctx, path)
	}
	if err := n.setProfile(ctx, path); err != nil {
		return Result{Err: err, Code: codes.ProfileFailed}
	}
	if len(changed) > 0 {
		if err := n.switchCmd(ctx, path, "boot"); err != nil {
			return Result{Err: err, Code: codes.BootFailed}
		}
		return Result{Deferred: true}
	}
	if err := n.switchCmd(ctx, path, "switch"); err != nil {
		return Result{Err: err, Code: codes.SwitchFailed}
	}
	return n.Wait(ctx, path, deadline)
}

// stageNotDefault gives path a boot entry that is not the default: the
// profile gets a generation of path (nix-env --set), is set back to the
// generation it was on (--switch-generation), and that generation's
// system installs the boot loader again (switch-to-configuration boot),
// which writes an entry for every generation and keeps its own the
// default. Each command can be run again: a restart stages once more.
func (n *NixExecutor) stageNotDefault(ctx context.Context, path string) Result {
	def := n.Profile()
	gen, err := n.generation()
	if err != nil {
		return Result{Err: err, Code: codes.ProfileFailed}
	}
	if err := n.setProfile(ctx, path); err != nil {
		return Result{Err: err, Code: codes.ProfileFailed}
	}
	if _, err := n.run(ctx, "nix-env", "--profile", n.c.Profile, "--switch-generation", strconv.Itoa(gen)); err != nil {
		return Result{Err: err, Code: codes.ProfileFailed}
	}
	if err := n.switchCmd(ctx, def, "boot"); err != nil {
		return Result{Err: err, Code: codes.BootFailed}
	}
	return Result{Deferred: true}
}

// generation is the number of the profile's generation (its link names
// <profile>-<n>-link).
func (n *NixExecutor) generation() (int, error) {
	link, err := os.Readlink(n.c.Profile)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(link), filepath.Base(n.c.Profile)+"-"), "-link")
	g, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("the profile %s links to %s, not a generation", n.c.Profile, link)
	}
	return g, nil
}

func (n *NixExecutor) MakeDefault(ctx context.Context, path string) Result {
	if err := n.setProfile(ctx, path); err != nil {
		return Result{Err: err, Code: codes.ProfileFailed}
	}
	if err := n.switchCmd(ctx, path, "boot"); err != nil {
		return Result{Err: err, Code: codes.BootFailed}
	}
	return Result{}
}

func (n *NixExecutor) SwitchTo(ctx context.Context, path string, deadline time.Time) Result {
	changed := changedInhibitors(n.Current(), path)
	if err := n.setProfile(ctx, path); err != nil {
		return Result{Err: err, Code: codes.ProfileFailed}
	}
	if len(changed) > 0 {
		if err := n.switchCmd(ctx, path, "boot"); err != nil {
			return Result{Err: err, Code: codes.BootFailed}
		}
		return Result{Deferred: true}
	}
	if err := n.switchCmd(ctx, path, "switch"); err != nil {
		return Result{Err: err, Code: codes.SwitchFailed}
	}
	return n.Wait(ctx, path, deadline)
}

// errNotRunning: the host did not come to run the system in time.
var errNotRunning = errors.New("the host does not run the system")

func (n *NixExecutor) Wait(ctx context.Context, path string, deadline time.Time) Result {
	t := time.NewTicker(n.c.Poll)
	defer t.Stop()
	for {
		if n.Current() == path {
			return Result{}
		}
		if !time.Now().Before(deadline) {
			return Result{Err: fmt.Errorf("%w: %s is %q at the deadline", errNotRunning, n.c.CurrentSystem, n.Current()), Code: codes.SwitchIncomplete}
		}
		select {
		case <-ctx.Done():
			return Result{Err: ctx.Err(), Code: codes.Interrupted}
		case <-t.C:
		}
	}
}
