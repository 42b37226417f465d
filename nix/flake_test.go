package nix

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// flakeEval is what nix/tests/flake/eval.nix returns.
type flakeEval struct {
	Packages map[string]map[string]struct {
		Name string `json:"name"`
		Args struct {
			Pname         string            `json:"pname"`
			Name          string            `json:"name"`
			VendorHash    string            `json:"vendorHash"`
			SubPackages   []string          `json:"subPackages"`
			Src           string            `json:"src"`
			Env           map[string]string `json:"env"`
			DoCheck       *bool             `json:"doCheck"`
			Text          string            `json:"text"`
			PostInstall   string            `json:"postInstall"`
			RuntimeInputs []string          `json:"runtimeInputs"`
			Meta          struct {
				MainProgram string `json:"mainProgram"`
			} `json:"meta"`
		} `json:"args"`
	} `json:"packages"`
	Apps map[string]map[string]struct {
		Type    string `json:"type"`
		Program string `json:"program"`
	} `json:"apps"`
	Modules struct {
		Agent        flakeModule `json:"agent"`
		ControlPlane flakeModule `json:"control-plane"`
		Default      []string    `json:"default"`
	} `json:"modules"`
	Checks     map[string][]string `json:"checks"`
	LibMkFleet map[string][]struct {
		Hosts []string `json:"hosts"`
	} `json:"libMkFleet"`
}

// flakeModule is one of the flake's NixOS modules, called with a stub
// lib and pkgs.
type flakeModule struct {
	Imports  []string                     `json:"imports"`
	Services map[string]map[string]string `json:"services"`
}

// TestFlakeOutputs: against a stub nixpkgs, the flake has, for each
// system, one buildGoModule package per command (its subPackage exists),
// the ci-release script, apps running them, checks running the Nix-side
// tests and the modules, NixOS modules that import nix/modules and
// default their package to the flake's, and lib.mkFleet.
func TestFlakeOutputs(t *testing.T) {
	t.Parallel()
	requireNix(t)
	var f flakeEval
	if err := json.Unmarshal(mustNix(t, "nix-instantiate", "--eval", "--strict", "--json", "nix/tests/flake/eval.nix"), &f); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(repoRoot, "nix", "ci-release.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, system := range []string{"x86_64-linux", "aarch64-linux"} {
		ps := f.Packages[system]
		for _, cmdName := range []string{"nixfleet", "nixfleet-cp", "nixfleet-agent"} {
			p, ok := ps[cmdName]
			if !ok {
				t.Errorf("packages.%s.%s is missing", system, cmdName)
				continue
			}
			a := p.Args
			if a.Pname != cmdName || !slices.Equal(a.SubPackages, []string{"cmd/" + cmdName}) || a.Meta.MainProgram != cmdName {
				t.Errorf("packages.%s.%s: pname %q, subPackages %q, mainProgram %q", system, cmdName, a.Pname, a.SubPackages, a.Meta.MainProgram)
			}
			if _, err := os.Stat(filepath.Join(repoRoot, "cmd", cmdName, "main.go")); err != nil {
				t.Errorf("packages.%s.%s: %v", system, cmdName, err)
			}
			page := cmdName + ".8"
			if cmdName == "nixfleet" {
				page = cmdName + ".1"
			}
			if !strings.Contains(a.PostInstall, "$out/bin/"+cmdName+" man > "+page) || !strings.Contains(a.PostInstall, "installManPage "+page) {
				t.Errorf("packages.%s.%s does not install its manual page %s: postInstall %q", system, cmdName, page, a.PostInstall)
			}
			if a.Src != root || a.VendorHash == "" || a.Env["CGO_ENABLED"] != "0" || a.DoCheck == nil || *a.DoCheck {
				t.Errorf("packages.%s.%s: src %q, vendorHash %q, env %v, doCheck %v", system, cmdName, a.Src, a.VendorHash, a.Env, a.DoCheck)
			}
		}
		ci := ps["ci-release"]
		if ci.Args.Text != string(script) || len(ci.Args.RuntimeInputs) == 0 || !strings.HasSuffix(ci.Args.RuntimeInputs[0], "-nixfleet") {
			t.Errorf("packages.%s.ci-release is not nix/ci-release.sh with nixfleet on PATH: inputs %q", system, ci.Args.RuntimeInputs)
		}
		for app, want := range map[string]string{"nixfleet": "/bin/nixfleet", "default": "/bin/nixfleet", "ci-release": "/bin/nixfleet-ci-release"} {
			a := f.Apps[system][app]
			if a.Type != "app" || !strings.HasSuffix(a.Program, want) {
				t.Errorf("apps.%s.%s = %+v, want a program ending in %s", system, app, a, want)
			}
		}
		for _, check := range []string{"mkfleet", "modules", "nixfleet", "nixfleet-cp", "nixfleet-agent"} {
			if !slices.Contains(f.Checks[system], check) {
				t.Errorf("checks.%s.%s is missing (have %q)", system, check, f.Checks[system])
			}
		}
	}
	hashes := map[string]bool{}
	for _, ps := range f.Packages {
		for name, p := range ps {
			if name != "ci-release" {
				hashes[p.Args.VendorHash] = true
			}
		}
	}
	if len(hashes) != 1 {
		t.Errorf("the packages disagree on vendorHash: %v", hashes)
	}

	if diff := cmp.Diff([]string{filepath.Join(root, "nix/modules/agent.nix")}, f.Modules.Agent.Imports); diff != "" {
		t.Errorf("nixosModules.agent imports (-want +got):\n%s", diff)
	}
	if got := f.Modules.Agent.Services["nixfleet-agent"]["package"]; got != "nixfleet-agent" {
		t.Errorf("nixosModules.agent: package %q", got)
	}
	if diff := cmp.Diff([]string{filepath.Join(root, "nix/modules/control-plane.nix")}, f.Modules.ControlPlane.Imports); diff != "" {
		t.Errorf("nixosModules.control-plane imports (-want +got):\n%s", diff)
	}
	if got := f.Modules.ControlPlane.Services["nixfleet-control-plane"]["package"]; got != "nixfleet-cp" {
		t.Errorf("nixosModules.control-plane: package %q", got)
	}
	if len(f.Modules.Default) != 2 {
		t.Errorf("nixosModules.default imports %q, want both modules", f.Modules.Default)
	}
	if len(f.LibMkFleet["c"]) != 1 || !slices.Equal(f.LibMkFleet["c"][0].Hosts, []string{"h"}) {
		t.Errorf("lib.mkFleet through the flake: waves %+v", f.LibMkFleet)
	}
}

// TestFlakeVendorHash: the flake's vendorHash is the NAR hash of the
// directory `go mod vendor` writes for go.mod and go.sum, which is what
// buildGoModule's goModules derivation hashes. A dependency change makes
// this fail until flake.nix is updated (the message says how).
func TestFlakeVendorHash(t *testing.T) {
	t.Parallel()
	requireNix(t)
	var f flakeEval
	if err := json.Unmarshal(mustNix(t, "nix-instantiate", "--eval", "--strict", "--json", "nix/tests/flake/eval.nix"), &f); err != nil {
		t.Fatal(err)
	}
	pinned := f.Packages["x86_64-linux"]["nixfleet"].Args.VendorHash

	vendor := filepath.Join(t.TempDir(), "vendor")
	cmd := exec.CommandContext(t.Context(), "go", "mod", "vendor", "-o", vendor)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go mod vendor (it needs every module of go.sum, for every platform, in the module cache or from GOPROXY): %v\n%s", err, out)
	}
	got := strings.TrimSpace(string(mustNix(t, "nix", "hash", "path", vendor)))
	if got != pinned {
		t.Errorf("flake.nix pins vendorHash %s, but `go mod vendor` gives %s: set vendorHash = %q in flake.nix", pinned, got, got)
	}
}
