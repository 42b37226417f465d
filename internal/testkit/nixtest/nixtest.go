// Package nixtest is a kit for integration tests that drive real Nix (the
// nix-store, nix-build, nix and nix-env commands of Debian's nix-bin) as the
// nixfleet agent does on a host.
//
// A test using the kit:
//
//  1. calls Require, which fails the test (never skips it) when Nix,
//     unshare or root are missing;
//  2. builds tiny system closures with Build, in the machine's own /nix
//     store (the only change the kit makes to that store);
//  3. publishes some of them in a binary cache served on 127.0.0.1 with
//     NewCache and Cache.Add, signed or deliberately unsigned;
//  4. gives every simulated machine its own store with NewHost: the host's
//     nix/ directory is bind-mounted over /nix in a private mount namespace
//     for each command made by Host.Command, so Nix inside it sees only
//     that host's store, and Host.Seed makes the host "run" a closure.
//
// Every Nix command the kit starts, and every command made by
// Host.Command, gets NixConfig in NIX_CONFIG, never talks to a Nix daemon
// and never reaches the network beyond 127.0.0.1. Each command is bounded
// by CommandTimeout.
package nixtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// NixConfig is the NIX_CONFIG given to every Nix command: no substituters
// (Nix is offline; a test names its cache with --option substituters), the
// nix command enabled, no build sandbox, builds as root without build
// users (Debian's nix-bin alone creates no nixbld group), and no reuse of cached narinfo
// lookups, because a loopback port, and so a cache URL, can be reused by a
// later test.
const NixConfig = "substituters =\n" +
	"experimental-features = nix-command\n" +
	"sandbox = false\n" +
	"build-users-group =\n" +
	"narinfo-cache-negative-ttl = 0\n" +
	"narinfo-cache-positive-ttl = 0\n"

// CommandTimeout bounds every command the kit runs itself.
const CommandTimeout = 2 * time.Minute

// Environment variables read by a closure's bin/switch-to-configuration.
const (
	// EnvSwitchLog names the file the script appends "<action> <closure>"
	// to.
	EnvSwitchLog = "NIXFLEET_SWITCH_LOG"
	// EnvCurrentSystem names the symlink the script points at its closure
	// on "switch" and "test", as NixOS activation does with
	// /run/current-system.
	EnvCurrentSystem = "NIXFLEET_CURRENT_SYSTEM"
)

// KeyName is the name of the signing keys made by NewCache.
const KeyName = "nixfleet-test-1"

// requiredCommands are the programs the kit runs.
var requiredCommands = []string{"nix", "nix-store", "nix-build", "nix-env", "unshare", "mount"}

// Require fails the test (with t.Fatal, never t.Skip) unless the process
// runs as root, /nix exists and the Nix commands, unshare and mount are on
// PATH. Every other function of the kit calls it first.
func Require(t testing.TB) {
	t.Helper()
	var problems []string
	for _, name := range requiredCommands {
		if _, err := exec.LookPath(name); err != nil {
			problems = append(problems, name+" is not on PATH")
		}
	}
	if os.Geteuid() != 0 {
		problems = append(problems, "the test is not running as root (bind-mounting host stores over /nix needs it)")
	}
	if fi, err := os.Stat("/nix"); err != nil || !fi.IsDir() {
		problems = append(problems, "/nix is not a directory (host stores are bind-mounted over it)")
	}
	if len(problems) > 0 {
		t.Fatalf("nixtest: real Nix is required: %s; run .ci/run as root, which installs nix-bin and util-linux",
			strings.Join(problems, "; "))
	}
}

// ClosureSpec describes a fake NixOS system closure.
type ClosureSpec struct {
	// Host and Version name the closure "nixos-system-<Host>-<Version>".
	// Both are required and may hold only characters allowed in store
	// path names.
	Host    string
	Version string
	// Kernel is the content of the closure's kernel and initrd files;
	// empty means "kernel-1". The kernel is a separate store path, so two
	// specs with different Kernel values have different kernel paths.
	Kernel string
	// FailSwitch makes bin/switch-to-configuration log its action and
	// then exit 1 without touching the current-system link.
	FailSwitch bool
}

// Closure is a system closure built by Build.
type Closure struct {
	Spec ClosureSpec
	// Path is the closure's full store path, /nix/store/<hash>-<Name>.
	Path string
	// Name is the base name of Path.
	Name string
	// KernelPath is the store path of the kernel the closure depends on;
	// Path/kernel is a symlink to KernelPath/bzImage.
	KernelPath string
}

// Requisites returns the closure's store paths, the dependency first: the
// order nix-store --export and --import want.
func (c Closure) Requisites() []string { return []string{c.KernelPath, c.Path} }

// closureExpr builds one closure per element of the JSON list specs; the
// shell scripts come in as strings so that nothing needs Nix escaping.
const closureExpr = `{ specs, kernelBuilder, closureBuilder, switchScript }:
map (s:
  let
    kernel = derivation {
      name = "nixos-kernel";
      system = builtins.currentSystem;
      builder = "/bin/sh";
      args = [ "-c" kernelBuilder ];
      PATH = "/usr/bin:/bin";
      kernelText = s.kernel;
    };
  in derivation {
    name = s.name;
    system = builtins.currentSystem;
    builder = "/bin/sh";
    args = [ "-c" closureBuilder ];
    PATH = "/usr/bin:/bin";
    inherit kernel switchScript;
    kernelText = s.kernel;
    version = s.version;
    fail = if s.fail then "1" else "0";
  }) (builtins.fromJSON specs)
`

const kernelBuilder = `set -e
mkdir -p "$out"
printf '%s\n' "$kernelText" >"$out/bzImage"
`

const closureBuilder = `set -e
mkdir -p "$out/bin"
ln -s "$kernel/bzImage" "$out/kernel"
printf '%s\n' "$kernelText" >"$out/initrd"
printf '%s\n' "$version" >"$out/nixos-version"
printf '%s' "$switchScript" | sed -e "s|@out@|$out|g" -e "s|@fail@|$fail|g" >"$out/bin/switch-to-configuration"
chmod 0555 "$out/bin/switch-to-configuration"
`

// switchScript stands in for NixOS's switch-to-configuration; @out@ and
// @fail@ are replaced when the closure is built.
const switchScript = `#!/bin/sh
# switch-to-configuration of a nixtest closure.
case "$1" in
switch | boot | test | dry-activate) ;;
*)
	echo "usage: $0 [switch|boot|test|dry-activate]" >&2
	exit 1
	;;
esac
if [ -n "$NIXFLEET_SWITCH_LOG" ]; then
	printf '%s %s\n' "$1" "@out@" >>"$NIXFLEET_SWITCH_LOG" || exit 2
fi
if [ "@fail@" = 1 ]; then
	echo "switch-to-configuration: activation of @out@ failed (FailSwitch)" >&2
	exit 1
fi
case "$1" in
switch | test)
	if [ -n "$NIXFLEET_CURRENT_SYSTEM" ]; then
		ln -sfn "@out@" "$NIXFLEET_CURRENT_SYSTEM" || exit 2
	fi
	;;
esac
exit 0
`

// storeName matches the characters Nix allows in a store path name.
var storeName = regexp.MustCompile(`^[A-Za-z0-9+._?=-]+$`)

// Build builds the closures of specs in the machine's /nix store with one
// nix-build and returns them in the order of specs. Each closure's output
// holds bin/switch-to-configuration, kernel (a symlink into the kernel
// dependency), initrd and nixos-version. The same spec always gives the
// same store path, so building is cheap after the first time. No GC root
// is made; nothing in the test suite collects garbage.
func Build(t testing.TB, specs ...ClosureSpec) []Closure {
	t.Helper()
	Require(t)
	type jsonSpec struct {
		Name    string `json:"name"`
		Version string `json:"version"`
		Kernel  string `json:"kernel"`
		Fail    bool   `json:"fail"`
	}
	specs = slices.Clone(specs) // defaults are filled in below
	js := make([]jsonSpec, len(specs))
	for i := range specs {
		s := &specs[i]
		if s.Kernel == "" {
			s.Kernel = "kernel-1"
		}
		if !storeName.MatchString(s.Host) || !storeName.MatchString(s.Version) {
			t.Fatalf("nixtest: closure spec %+v: Host and Version must be non-empty store path names", *s)
		}
		js[i] = jsonSpec{Name: "nixos-system-" + s.Host + "-" + s.Version, Version: s.Version, Kernel: s.Kernel, Fail: s.FailSwitch}
	}
	if len(specs) == 0 {
		return nil
	}
	specsJSON, err := json.Marshal(js)
	if err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	out := runRoot(t, nil, "nix-build", "--no-out-link", "-E", closureExpr,
		"--argstr", "specs", string(specsJSON),
		"--argstr", "kernelBuilder", kernelBuilder,
		"--argstr", "closureBuilder", closureBuilder,
		"--argstr", "switchScript", switchScript)
	paths := strings.Fields(string(out))
	if len(paths) != len(specs) {
		t.Fatalf("nixtest: nix-build printed %d paths for %d specs: %q", len(paths), len(specs), out)
	}
	closures := make([]Closure, len(specs))
	for i, p := range paths {
		name := filepath.Base(p)
		if !strings.HasPrefix(p, "/nix/store/") || !strings.HasSuffix(name, "-"+js[i].Name) {
			t.Fatalf("nixtest: nix-build printed %q for closure %s", p, js[i].Name)
		}
		bz, err := os.Readlink(filepath.Join(p, "kernel"))
		if err != nil {
			t.Fatalf("nixtest: %v", err)
		}
		closures[i] = Closure{Spec: specs[i], Path: p, Name: name, KernelPath: filepath.Dir(bz)}
	}
	return closures
}

// Cache is a file:// binary cache served over HTTP on 127.0.0.1.
type Cache struct {
	// URL is the cache's http://127.0.0.1:<port> address, for Nix's
	// substituters.
	URL string
	// PublicKey is the "nixfleet-test-1:<base64>" line that verifies the
	// cache's signatures: what trust.json cacheKeys and Nix's
	// trusted-public-keys hold.
	PublicKey string
	// Dir is the directory served, with nix-cache-info, <hash>.narinfo
	// files and nar/.
	Dir string

	secretKey string // path of the secret key file, outside Dir
	xdgCache  string // Nix's narinfo disk cache for the kit's commands

	mu       sync.Mutex // serialises Add
	reqMu    sync.Mutex
	requests []string

	// NAR downloads (GET /nar/…): the delay before each is served, how
	// many are being served now, and the most at once so far.
	narDelay    time.Duration
	narInFlight int
	narPeak     int
}

// NewCache makes an empty binary cache with a fresh signing key named
// KeyName and serves it on 127.0.0.1 until the test ends.
func NewCache(t testing.TB) *Cache {
	t.Helper()
	return NewCacheOn(t, "127.0.0.1:0")
}

// NewCacheOn is NewCache served on addr: a loopback address, or the
// gateway of a Net (Net.Addr) for hosts in network namespaces.
func NewCacheOn(t testing.TB, addr string) *Cache {
	t.Helper()
	Require(t)
	base := t.TempDir()
	c := &Cache{
		Dir:       filepath.Join(base, "cache"),
		secretKey: filepath.Join(base, "secret-key"),
		xdgCache:  filepath.Join(base, "xdg-cache"),
	}
	for _, d := range []string{c.Dir, c.xdgCache} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("nixtest: %v", err)
		}
	}
	sk := runRoot(t, nil, "nix", "key", "generate-secret", "--key-name", KeyName)
	if err := os.WriteFile(c.secretKey, sk, 0o600); err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	c.PublicKey = strings.TrimSpace(string(runRoot(t, sk, "nix", "key", "convert-secret-to-public")))
	if !strings.HasPrefix(c.PublicKey, KeyName+":") {
		t.Fatalf("nixtest: unexpected public key %q", c.PublicKey)
	}
	// Write nix-cache-info now, so that an empty cache is a valid one.
	if err := os.WriteFile(filepath.Join(c.Dir, "nix-cache-info"), []byte("StoreDir: /nix/store\n"), 0o644); err != nil {
		t.Fatalf("nixtest: %v", err)
	}

	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	files := http.FileServer(http.Dir(c.Dir))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		if strings.HasPrefix(r.URL.Path, "/nar/") && r.Method == http.MethodGet {
			done := c.narStarts(r.Context())
			defer done()
		}
		files.ServeHTTP(rec, r)
		c.reqMu.Lock()
		c.requests = append(c.requests, fmt.Sprintf("%s %s %d", r.Method, r.URL.Path, rec.status))
		c.reqMu.Unlock()
	}))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

// SlowNARs delays every NAR download (GET /nar/…) the cache serves from
// now on by d, so that downloads that would overlap do.
func (c *Cache) SlowNARs(d time.Duration) {
	c.reqMu.Lock()
	defer c.reqMu.Unlock()
	c.narDelay = d
}

// NARPeak returns the most NAR downloads the cache served at once so far.
func (c *Cache) NARPeak() int {
	c.reqMu.Lock()
	defer c.reqMu.Unlock()
	return c.narPeak
}

// narStarts counts a NAR download that starts, waits the delay, and
// returns the function that counts its end.
func (c *Cache) narStarts(ctx context.Context) func() {
	c.reqMu.Lock()
	c.narInFlight++
	c.narPeak = max(c.narPeak, c.narInFlight)
	d := c.narDelay
	c.reqMu.Unlock()
	if d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	return func() {
		c.reqMu.Lock()
		c.narInFlight--
		c.reqMu.Unlock()
	}
}

// NARPath returns the path the cache serves store path p's NAR at
// ("/nar/….nar.xz"), from its narinfo's URL.
func (c *Cache) NARPath(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(c.narinfo(p))
	if err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "URL: "); ok {
			return "/" + strings.TrimSpace(v)
		}
	}
	t.Fatalf("nixtest: %s has no URL", c.narinfo(p))
	return ""
}

// Requests returns the requests the cache has served so far, oldest
// first, as "GET /path 200".
func (c *Cache) Requests() []string {
	c.reqMu.Lock()
	defer c.reqMu.Unlock()
	return slices.Clone(c.requests)
}

// Add copies closure cl and its dependency into the cache, and makes every
// one of their narinfo files carry exactly one signature by the cache's key
// when signed is true, and none when it is false:
//
//  1. nix copy --to file://Dir PATH (a no-op for paths already there);
//  2. the Sig lines of the paths' narinfo files are deleted, since nix copy
//     also publishes signatures the machine's store holds for them;
//  3. if signed, nix store sign --store file://Dir --key-file KEY
//     --recursive PATH signs the narinfo files in the cache.
//
// Signing happens in the cache, never in the machine's store, so parallel
// tests sharing a closure cannot see each other's signatures. A path shared
// by closures added with different signed values keeps the last Add's.
func (c *Cache) Add(t testing.TB, cl Closure, signed bool) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	store := "file://" + c.Dir
	env := []string{"XDG_CACHE_HOME=" + c.xdgCache}
	runRootEnv(t, env, nil, "nix", "copy", "--to", store, cl.Path)
	for _, p := range cl.Requisites() {
		stripSigs(t, c.narinfo(p))
	}
	if signed {
		runRootEnv(t, env, nil, "nix", "store", "sign", "--store", store, "--key-file", c.secretKey, "--recursive", cl.Path)
	}
	want := 0
	if signed {
		want = 1
	}
	for _, p := range cl.Requisites() {
		if got := len(c.sigs(t, p)); got != want {
			t.Fatalf("nixtest: %s has %d signatures in the cache after Add(signed=%v)", p, got, signed)
		}
	}
}

// narinfo returns the cache file describing store path p.
func (c *Cache) narinfo(p string) string {
	hash, _, _ := strings.Cut(filepath.Base(p), "-")
	return filepath.Join(c.Dir, hash+".narinfo")
}

// sigs returns the Sig values of store path p's narinfo in the cache.
func (c *Cache) sigs(t testing.TB, p string) []string {
	t.Helper()
	b, err := os.ReadFile(c.narinfo(p))
	if err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	var sigs []string
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Sig: "); ok {
			sigs = append(sigs, strings.TrimSpace(v))
		}
	}
	return sigs
}

func stripSigs(t testing.TB, narinfo string) {
	t.Helper()
	b, err := os.ReadFile(narinfo)
	if err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	var kept strings.Builder
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, "Sig:") {
			kept.WriteString(line)
		}
	}
	if err := os.WriteFile(narinfo, []byte(kept.String()), 0o644); err != nil {
		t.Fatalf("nixtest: %v", err)
	}
}

// Host is a simulated machine with its own Nix store. Its directory holds:
//
//	nix/         bind-mounted over /nix by Command (nix/store, nix/var/nix/db)
//	run/         current-system and booted-system symlinks
//	switch.log   the actions switch-to-configuration ran, one per line
//	xdg-cache/   Nix's narinfo disk cache for commands on this host
type Host struct {
	Name string
	// Dir is the host's directory, unique to the test.
	Dir string
	// NixDir is Dir/nix, the host's /nix.
	NixDir string
	// RunDir is Dir/run, the host's /run.
	RunDir string
	// SwitchLogPath is Dir/switch.log.
	SwitchLogPath string
	// NetNS, when set (Net.Attach), is the network namespace that
	// Command runs in.
	NetNS string
}

// NewHost makes a host with an empty store. The store itself is created by
// the first Nix command run on the host. The directory is made writable
// again before t.TempDir removes it, since Nix makes store paths read-only.
func NewHost(t testing.TB, name string) *Host {
	t.Helper()
	Require(t)
	if !storeName.MatchString(name) {
		t.Fatalf("nixtest: host name %q: use letters, digits and -._", name)
	}
	dir := filepath.Join(t.TempDir(), name)
	h := &Host{
		Name:          name,
		Dir:           dir,
		NixDir:        filepath.Join(dir, "nix"),
		RunDir:        filepath.Join(dir, "run"),
		SwitchLogPath: filepath.Join(dir, "switch.log"),
	}
	// Registered after t.TempDir, so it runs before the removal.
	t.Cleanup(func() { makeWritable(dir) })
	for _, d := range []string{h.NixDir, h.RunDir, h.xdgCache()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("nixtest: %v", err)
		}
	}
	if err := os.WriteFile(h.SwitchLogPath, nil, 0o644); err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	return h
}

func (h *Host) xdgCache() string { return filepath.Join(h.Dir, "xdg-cache") }

// CurrentSystemLink is the host's run/current-system symlink.
func (h *Host) CurrentSystemLink() string { return filepath.Join(h.RunDir, "current-system") }

// BootedSystemLink is the host's run/booted-system symlink.
func (h *Host) BootedSystemLink() string { return filepath.Join(h.RunDir, "booted-system") }

// Env returns the environment of commands on the host: the test's own,
// without Nix, proxy and NIXFLEET_ variables, plus NIX_CONFIG=NixConfig,
// NIXFLEET_SWITCH_LOG, NIXFLEET_CURRENT_SYSTEM and a private
// XDG_CACHE_HOME.
func (h *Host) Env() []string {
	return append(BaseEnv(),
		EnvSwitchLog+"="+h.SwitchLogPath,
		EnvCurrentSystem+"="+h.CurrentSystemLink(),
		"XDG_CACHE_HOME="+h.xdgCache(),
	)
}

// Command returns a command that runs name with args in a private mount
// namespace where the host's nix/ directory is bind-mounted over /nix:
//
//	unshare --mount --propagation private -- \
//	    /bin/sh -c 'mount --bind "$1" /nix && shift && exec "$@"' sh NIXDIR name args...
//
// prefixed with "ip netns exec NETNS" when the host is attached to a Net.
// ip, unshare and sh exec, so the command's process is name itself and
// cancelling ctx kills it. Its Env is h.Env(); WaitDelay is 10s. The mount
// never propagates to the test's namespace.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := append([]string{"unshare",
		"--mount", "--propagation", "private", "--",
		"/bin/sh", "-c", `mount --bind "$1" /nix && shift && exec "$@"`, "sh", h.NixDir, name,
	}, args...)
	if h.NetNS != "" {
		argv = append([]string{"ip", "netns", "exec", h.NetNS}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = h.Env()
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// Import makes closure c (with its dependency) valid in the host's store
// without changing its links: nix-store --export of the closure's
// requisites in the test's namespace, piped into nix-store --import on the
// host. --import does not check signatures.
func (h *Host) Import(t testing.TB, c Closure) {
	t.Helper()
	reqs := strings.Fields(string(runRoot(t, nil, "nix-store", "--query", "--requisites", c.Path)))
	nar := runRoot(t, nil, "nix-store", append([]string{"--export"}, reqs...)...)
	h.run(t, nar, "nix-store", "--import")
}

// Seed imports closure c into the host's store, makes it the system
// profile's generation (as installing NixOS does) and points
// run/current-system and run/booted-system at it: the host now runs c.
func (h *Host) Seed(t testing.TB, c Closure) {
	t.Helper()
	h.Import(t, c)
	h.run(t, nil, "nix-env", "--profile", "/nix/var/nix/profiles/system", "--set", c.Path)
	for _, link := range []string{h.CurrentSystemLink(), h.BootedSystemLink()} {
		tmp := link + ".tmp"
		_ = os.Remove(tmp)
		if err := os.Symlink(c.Path, tmp); err != nil {
			t.Fatalf("nixtest: %v", err)
		}
		if err := os.Rename(tmp, link); err != nil {
			t.Fatalf("nixtest: %v", err)
		}
	}
}

// Valid reports whether store path p is valid in the host's store.
func (h *Host) Valid(t testing.TB, p string) bool {
	t.Helper()
	out := strings.TrimSpace(string(h.run(t, nil, "nix-store", "--check-validity", "--print-invalid", p)))
	switch out {
	case "":
		return true
	case p:
		return false
	}
	t.Fatalf("nixtest: nix-store --check-validity --print-invalid %s printed %q", p, out)
	return false
}

// CurrentSystem returns the target of run/current-system, or "" if there
// is none.
func (h *Host) CurrentSystem(t testing.TB) string {
	t.Helper()
	return readLink(t, h.CurrentSystemLink())
}

// Profile returns the store path the host's system profile
// (/nix/var/nix/profiles/system) points at, through its generation link;
// "" when there is none.
func (h *Host) Profile(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(h.NixDir, "var", "nix", "profiles")
	gen, err := os.Readlink(filepath.Join(dir, "system"))
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	// nix-env writes the generation link relative to the profile's
	// directory; an absolute one is in /nix terms, under NixDir here.
	if filepath.IsAbs(gen) {
		gen = filepath.Join(h.NixDir, strings.TrimPrefix(gen, "/nix"))
	} else {
		gen = filepath.Join(dir, gen)
	}
	p, err := os.Readlink(gen)
	if err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	return p
}

// BootedSystem returns the target of run/booted-system, or "" if there is
// none.
func (h *Host) BootedSystem(t testing.TB) string {
	t.Helper()
	return readLink(t, h.BootedSystemLink())
}

// SwitchLog returns the lines of the host's switch.log: one
// "<action> <closure path>" per run of switch-to-configuration.
func (h *Host) SwitchLog(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(h.SwitchLogPath)
	if err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// run runs a command on the host and returns its stdout; it fails the test
// when the command fails.
func (h *Host) run(t testing.TB, stdin []byte, name string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), CommandTimeout)
	defer cancel()
	return runCmd(t, h.Command(ctx, name, args...), stdin)
}

func readLink(t testing.TB, link string) string {
	t.Helper()
	target, err := os.Readlink(link)
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	return target
}

// runRoot runs a Nix command in the test's own namespace, on the machine's
// store, and returns its stdout.
func runRoot(t testing.TB, stdin []byte, name string, args ...string) []byte {
	t.Helper()
	return runRootEnv(t, nil, stdin, name, args...)
}

func runRootEnv(t testing.TB, env []string, stdin []byte, name string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), CommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(BaseEnv(), env...)
	cmd.WaitDelay = 10 * time.Second
	return runCmd(t, cmd, stdin)
}

func runCmd(t testing.TB, cmd *exec.Cmd, stdin []byte) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("nixtest: %s: %v (after %v)\nstderr:\n%s", strings.Join(cmd.Args, " "), err,
			time.Since(start).Round(time.Millisecond), stderr.Bytes())
	}
	return stdout.Bytes()
}

// droppedEnv are variables that would point Nix at a daemon, another store
// or configuration, a proxy, or leak a switch log from the test's own
// environment.
var droppedEnv = []string{
	"NIX_REMOTE", "NIX_CONFIG", "NIX_CONF_DIR", "NIX_USER_CONF_FILES", "NIX_PATH", "NIX_STORE_DIR", "NIX_STORE",
	"NIX_STATE_DIR", "NIX_LOG_DIR", "NIX_DAEMON_SOCKET_PATH", "XDG_CACHE_HOME",
	"http_proxy", "https_proxy", "all_proxy", "no_proxy", "ftp_proxy",
	"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY",
	EnvSwitchLog, EnvCurrentSystem,
}

// BaseEnv is the environment of every Nix command the kit runs: the
// test's own without droppedEnv, plus NIX_CONFIG=NixConfig.
func BaseEnv() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(droppedEnv, k)
	})
	return append(env, "NIX_CONFIG="+NixConfig)
}

// makeWritable adds owner write permission to every directory under dir
// (chmod -R u+w, without following symlinks), so that it can be removed.
func makeWritable(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if fi, err := d.Info(); err == nil && fi.Mode().Perm()&0o200 == 0 {
			_ = os.Chmod(p, fi.Mode().Perm()|0o200)
		}
		return nil
	})
}
