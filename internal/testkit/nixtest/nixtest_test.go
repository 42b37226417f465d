package nixtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// unsignedMsg is the part of what Nix 2.8 prints when a substitute lacks a
// trusted signature; the whole output of nix-store --realise is
//
//	these 2 paths will be fetched (0.00 MiB download, 0.00 MiB unpacked):
//	  /nix/store/…-nixos-system-web-1-v3
//	  /nix/store/…-nixos-kernel
//	warning: the substitute for '/nix/store/…-nixos-system-web-1-v3' from 'http://127.0.0.1:PORT' is not signed by any of the keys in 'trusted-public-keys'
//	error: build of '/nix/store/…-nixos-system-web-1-v3' failed
//
// with exit status 1.
const unsignedMsg = "is not signed by any of the keys in 'trusted-public-keys'"

// TestKit drives the kit through what the agent's integration tests do:
// a host running v1 fetches v2 from a signed cache, refuses an unsigned
// closure and switches.
func TestKit(t *testing.T) {
	t.Parallel()
	Require(t)
	start := time.Now()

	cs := Build(t,
		ClosureSpec{Host: "web-1", Version: "v1"},
		ClosureSpec{Host: "web-1", Version: "v2", Kernel: "kernel-2"},
		ClosureSpec{Host: "web-1", Version: "v3", Kernel: "kernel-3", FailSwitch: true},
	)
	v1, v2, v3 := cs[0], cs[1], cs[2]
	t.Logf("built in %v", time.Since(start).Round(time.Millisecond))
	checkClosure(t, v1, "nixos-system-web-1-v1", "kernel-1")
	checkClosure(t, v2, "nixos-system-web-1-v2", "kernel-2")
	checkClosure(t, v3, "nixos-system-web-1-v3", "kernel-3")
	if v1.KernelPath == v2.KernelPath {
		t.Errorf("v1 and v2 share the kernel path %s", v1.KernelPath)
	}

	cache := NewCache(t)
	if !strings.HasPrefix(cache.PublicKey, KeyName+":") || !strings.HasPrefix(cache.URL, "http://127.0.0.1:") {
		t.Fatalf("cache key %q, URL %q", cache.PublicKey, cache.URL)
	}
	cache.Add(t, v2, true)
	cache.Add(t, v3, false)
	for _, p := range v2.Requisites() {
		if sigs := cache.sigs(t, p); len(sigs) != 1 || !strings.HasPrefix(sigs[0], KeyName+":") {
			t.Errorf("signed %s: Sig lines %q", p, sigs)
		}
	}
	for _, p := range v3.Requisites() {
		if sigs := cache.sigs(t, p); len(sigs) != 0 {
			t.Errorf("unsigned %s: Sig lines %q", p, sigs)
		}
	}

	web1 := NewHost(t, "web-1")
	web1.Seed(t, v1)
	if !web1.Valid(t, v1.Path) || !web1.Valid(t, v1.KernelPath) {
		t.Fatal("seeded v1 is not valid on web-1")
	}
	if web1.Valid(t, v2.Path) {
		t.Fatal("v2 is valid on web-1 before it was realised")
	}
	if got := web1.CurrentSystem(t); got != v1.Path {
		t.Errorf("current-system = %q, want %q", got, v1.Path)
	}
	if got := web1.Profile(t); got != v1.Path {
		t.Errorf("system profile = %q, want %q", got, v1.Path)
	}
	if got := web1.BootedSystem(t); got != v1.Path {
		t.Errorf("booted-system = %q, want %q", got, v1.Path)
	}

	t.Run("realise signed", func(t *testing.T) {
		out, stderr, err := realise(t, web1, cache, v2.Path)
		if err != nil {
			t.Fatalf("realise v2: %v\n%s", err, stderr)
		}
		if strings.TrimSpace(out) != v2.Path {
			t.Errorf("realise printed %q, want %q", out, v2.Path)
		}
		for _, p := range v2.Requisites() {
			if !web1.Valid(t, p) {
				t.Errorf("%s is not valid on web-1 after realise", p)
			}
			if _, err := os.Stat(filepath.Join(web1.NixDir, "store", filepath.Base(p))); err != nil {
				t.Errorf("web-1's store dir: %v", err)
			}
		}
		for _, p := range v2.Requisites() {
			narinfo := "GET /" + strings.SplitN(filepath.Base(p), "-", 2)[0] + ".narinfo 200"
			if !slices.Contains(cache.Requests(), narinfo) {
				t.Errorf("cache requests %q lack %q", cache.Requests(), narinfo)
			}
		}

		other := NewHost(t, "web-2")
		if other.Valid(t, v2.Path) {
			t.Error("v2 is valid on web-2, which never realised it")
		}
		if _, err := os.Stat(filepath.Join(other.NixDir, "store", v2.Name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("web-2's store dir has v2: %v", err)
		}
	})

	t.Run("host store is separate from the machine's", func(t *testing.T) {
		// A file with unique content becomes a store path no other test
		// and no earlier run can have made.
		src := filepath.Join(t.TempDir(), "marker")
		if err := os.WriteFile(src, []byte(rand.Text()), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), CommandTimeout)
		defer cancel()
		out, err := web1.Command(ctx, "nix-store", "--add", src).Output()
		if err != nil {
			t.Fatalf("nix-store --add on web-1: %v", err)
		}
		p := strings.TrimSpace(string(out))
		if !web1.Valid(t, p) {
			t.Fatalf("%s is not valid on web-1", p)
		}
		cmd := exec.CommandContext(ctx, "nix-store", "--check-validity", "--print-invalid", p)
		cmd.Env = BaseEnv()
		out, err = cmd.Output()
		if err != nil {
			t.Fatalf("nix-store --check-validity on the machine: %v", err)
		}
		if strings.TrimSpace(string(out)) != p {
			t.Errorf("%s, added on web-1, is valid in the machine's store", p)
		}
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists in the machine's /nix/store: %v", p, err)
		}
	})

	t.Run("realise unsigned", func(t *testing.T) {
		_, stderr, err := realise(t, web1, cache, v3.Path)
		if err == nil {
			t.Fatal("realising an unsigned closure succeeded")
		}
		t.Logf("nix-store --realise of an unsigned closure: %v\n%s", err, stderr)
		if !strings.Contains(stderr, unsignedMsg) {
			t.Errorf("stderr lacks %q:\n%s", unsignedMsg, stderr)
		}
		if web1.Valid(t, v3.Path) {
			t.Error("unsigned v3 became valid on web-1")
		}
	})

	t.Run("switch", func(t *testing.T) {
		runSwitch(t, web1, v2, "switch", 0)
		runSwitch(t, web1, v1, "boot", 0)
		web1.Import(t, v3) // unsigned in the cache; --import does not check
		runSwitch(t, web1, v3, "switch", 1)
		runSwitch(t, web1, v2, "bogus", 1)
		want := []string{"switch " + v2.Path, "boot " + v1.Path, "switch " + v3.Path}
		if diff := cmp.Diff(want, web1.SwitchLog(t)); diff != "" {
			t.Errorf("switch.log (-want +got):\n%s", diff)
		}
		if got := web1.CurrentSystem(t); got != v2.Path {
			t.Errorf("current-system = %q, want v2 %q", got, v2.Path)
		}
		if got := web1.BootedSystem(t); got != v1.Path {
			t.Errorf("booted-system = %q, want v1 %q", got, v1.Path)
		}
	})
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// checkClosure checks the files of a built closure and that its requisites
// are exactly the closure and its kernel.
func checkClosure(t *testing.T, c Closure, name, kernel string) {
	t.Helper()
	if !strings.HasSuffix(c.Name, "-"+name) || c.Path != "/nix/store/"+c.Name {
		t.Errorf("closure %+v: want name <hash>-%s", c, name)
	}
	for _, f := range []string{"kernel", "initrd"} {
		b, err := os.ReadFile(filepath.Join(c.Path, f))
		if err != nil || string(b) != kernel+"\n" {
			t.Errorf("%s/%s = %q, %v; want %q", c.Name, f, b, err, kernel)
		}
	}
	if fi, err := os.Stat(filepath.Join(c.Path, "bin/switch-to-configuration")); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("%s/bin/switch-to-configuration: %v, %v", c.Name, fi, err)
	}
	out := runRoot(t, nil, "nix-store", "--query", "--requisites", c.Path)
	if diff := cmp.Diff(c.Requisites(), strings.Fields(string(out))); diff != "" {
		t.Errorf("requisites of %s (-want +got):\n%s", c.Name, diff)
	}
}

// realise runs nix-store --realise on the host with the cache as the only
// substituter and its key as the only trusted one.
func realise(t *testing.T, h *Host, c *Cache, p string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), CommandTimeout)
	defer cancel()
	cmd := h.Command(ctx, "nix-store", "--realise", p,
		"--option", "substituters", c.URL,
		"--option", "trusted-public-keys", c.PublicKey)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// runSwitch runs the closure's switch-to-configuration on the host and
// checks its exit status.
func runSwitch(t *testing.T, h *Host, c Closure, action string, wantStatus int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), CommandTimeout)
	defer cancel()
	out, err := h.Command(ctx, c.Path+"/bin/switch-to-configuration", action).CombinedOutput()
	status := 0
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		status = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %s: %v", c.Name, action, err)
	}
	if status != wantStatus {
		t.Errorf("%s %s: exit status %d, want %d\n%s", c.Name, action, status, wantStatus, out)
	}
}
