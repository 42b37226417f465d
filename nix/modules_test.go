package nix

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/crypto/ssh"

	"github.com/nixfleet/nixfleet/agent/probe"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/internal/devcert"
	"github.com/nixfleet/nixfleet/internal/testkit/testbin"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// moduleEval is what nix/tests/modules/eval.nix returns.
type moduleEval struct {
	Name   string `json:"name"`
	Config struct {
		Systemd struct {
			Services map[string]unit `json:"services"`
		} `json:"systemd"`
		Services struct {
			Grafana *struct {
				Provision struct {
					Dashboards struct {
						Settings struct {
							Providers []struct {
								Name    string `json:"name"`
								Type    string `json:"type"`
								Options struct {
									Path string `json:"path"`
								} `json:"options"`
							} `json:"providers"`
						} `json:"settings"`
					} `json:"dashboards"`
				} `json:"provision"`
			} `json:"grafana"`
			Prometheus *struct {
				RuleFiles []string `json:"ruleFiles"`
			} `json:"prometheus"`
			PostgreSQL *struct {
				Enable          bool     `json:"enable"`
				EnsureDatabases []string `json:"ensureDatabases"`
				EnsureUsers     []struct {
					Name              string `json:"name"`
					EnsureDBOwnership bool   `json:"ensureDBOwnership"`
				} `json:"ensureUsers"`
			} `json:"postgresql"`
		} `json:"services"`
		Users struct {
			Users map[string]struct {
				IsSystemUser bool   `json:"isSystemUser"`
				Group        string `json:"group"`
			} `json:"users"`
		} `json:"users"`
		Boot struct {
			Kernel struct {
				Sysctl map[string]any `json:"sysctl"`
			} `json:"kernel"`
		} `json:"boot"`
		Networking struct {
			Firewall struct {
				AllowedTCPPorts []int `json:"allowedTCPPorts"`
			} `json:"firewall"`
		} `json:"networking"`
	} `json:"config"`
	FailedAssertions []string          `json:"failedAssertions"`
	Warnings         []string          `json:"warnings"`
	Undocumented     []string          `json:"undocumented"`
	Files            map[string]string `json:"files"`
}

type unit struct {
	WantedBy      []string       `json:"wantedBy"`
	Wants         []string       `json:"wants"`
	After         []string       `json:"after"`
	Requires      []string       `json:"requires"`
	Path          []string       `json:"path"`
	StopIfChanged *bool          `json:"stopIfChanged"`
	UnitConfig    map[string]any `json:"unitConfig"`
	ServiceConfig map[string]any `json:"serviceConfig"`
}

// evalModule evaluates a module of nix/modules with the stub lib for the
// given option values (JSON) and the rest of the configuration.
func evalModule(t *testing.T, module string, settings, config any) moduleEval {
	t.Helper()
	s, err := json.Marshal(settings)
	if err != nil {
		t.Fatal(err)
	}
	c, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	out := mustNix(t, "nix-instantiate", "--eval", "--strict", "--json", "nix/tests/modules/eval.nix",
		"--arg", "module", "./nix/modules/"+module, "--argstr", "settingsJSON", string(s), "--argstr", "configJSON", string(c))
	var e moduleEval
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatal(err)
	}
	if len(e.Undocumented) > 0 {
		t.Errorf("options without a type or a description: %v", e.Undocumented)
	}
	return e
}

func (e moduleEval) unit(t *testing.T, name string) unit {
	t.Helper()
	u, ok := e.Config.Systemd.Services[name]
	if !ok {
		t.Fatalf("the module defines no %s unit; it has %v", name, sortedKeys(e.Config.Systemd.Services))
	}
	return u
}

// execStart splits a unit's ExecStart as systemd does for the quoting the
// modules use (every word a double-quoted C-style string) and resolves
// the specifiers and variables in it: %% and $$ are literal, %d is the
// credentials directory; anything else fails the test.
func execStart(t *testing.T, u unit, credentials string) []string {
	t.Helper()
	line, ok := u.ServiceConfig["ExecStart"].(string)
	if !ok {
		t.Fatalf("ExecStart is %v", u.ServiceConfig["ExecStart"])
	}
	dec := json.NewDecoder(strings.NewReader(line))
	var argv []string
	for {
		var w string
		err := dec.Decode(&w)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("ExecStart %q: not a list of double-quoted words: %v", line, err)
		}
		var b strings.Builder
		for i := 0; i < len(w); i++ {
			c := w[i]
			if c != '%' && c != '$' {
				b.WriteByte(c)
				continue
			}
			if i+1 == len(w) {
				t.Fatalf("ExecStart word %q ends in %c", w, c)
			}
			i++
			switch n := w[i]; {
			case n == c:
				b.WriteByte(c)
			case c == '%' && n == 'd':
				b.WriteString(credentials)
			default:
				t.Fatalf("ExecStart word %q: systemd would expand %c%c", w, c, n)
			}
		}
		argv = append(argv, b.String())
	}
	return argv
}

// flagValues returns the values of each --flag in args (args alternate
// flags and values, as the modules write them).
func flagValues(t *testing.T, args []string) map[string][]string {
	t.Helper()
	if len(args)%2 != 0 {
		t.Fatalf("arguments are not flag/value pairs: %q", args)
	}
	m := map[string][]string{}
	for i := 0; i < len(args); i += 2 {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			t.Fatalf("argument %d is %q, not a flag", i, args[i])
		}
		m[name] = append(m[name], args[i+1])
	}
	return m
}

func setFlag(args []string, flag, value string) {
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == "--"+flag {
			args[i+1] = value
		}
	}
}

// unitPaths decodes a path list setting of a unit (ReadOnlyPaths=,
// RequiresMountsFor=) as systemd reads the quoting the modules use: each
// entry one double-quoted C-style string, after an optional "-" (ignore
// a missing path), in which %% is a literal %; any other specifier fails
// the test. It returns the paths and whether each had the "-".
func unitPaths(t *testing.T, setting any) (paths []string, optional []bool) {
	t.Helper()
	entries, ok := setting.([]any)
	if !ok {
		t.Fatalf("path list %v is not a list", setting)
	}
	for _, e := range entries {
		s, ok := e.(string)
		if !ok {
			t.Fatalf("path list entry %v is not a string", e)
		}
		rest, dash := strings.CutPrefix(s, "-")
		var w string
		if err := json.Unmarshal([]byte(rest), &w); err != nil || !strings.HasPrefix(rest, `"`) {
			t.Fatalf("path list entry %q is not one double-quoted word: %v", s, err)
		}
		var b strings.Builder
		for i := 0; i < len(w); i++ {
			if w[i] != '%' {
				b.WriteByte(w[i])
				continue
			}
			if i+1 == len(w) || w[i+1] != '%' {
				t.Fatalf("path list entry %q: systemd would expand a specifier", s)
			}
			b.WriteByte('%')
			i++
		}
		paths = append(paths, b.String())
		optional = append(optional, dash)
	}
	return paths, optional
}

// storeFile checks that path is the stub store path of text (its hash
// part is the text's SHA-256, see stub-pkgs.nix) and writes text into a
// file of dir, whose path it returns.
func storeFile(t *testing.T, dir, path, text string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(text))
	base := filepath.Base(path)
	if !strings.HasPrefix(path, "/nix/store/") || !strings.HasPrefix(base, hex.EncodeToString(sum[:])[:32]+"-") {
		t.Errorf("%s is not the file the module writes from these options:\n%s", path, text)
	}
	f := filepath.Join(dir, base)
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

var (
	binsOnce sync.Once
	bins     map[string]string
	binsErr  error
	binsDir  string
)

// binary builds the daemons once per test process.
func binary(t *testing.T, name string) string {
	t.Helper()
	binsOnce.Do(func() {
		binsDir, binsErr = os.MkdirTemp("", "nixfleet-nix-test-bin-")
		if binsErr != nil {
			return
		}
		var paths []string
		paths, binsErr = testbin.Build(binsDir, "github.com/nixfleet/nixfleet/cmd/nixfleet-agent", "github.com/nixfleet/nixfleet/cmd/nixfleet-cp",
			"github.com/nixfleet/nixfleet/cmd/nixfleet")
		if binsErr == nil {
			bins = map[string]string{"nixfleet-agent": paths[0], "nixfleet-cp": paths[1], "nixfleet": paths[2]}
		}
	})
	if binsErr != nil {
		t.Fatal(binsErr)
	}
	return bins[name]
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binsDir != "" {
		os.RemoveAll(binsDir)
	}
	os.Exit(code)
}

// runUntil starts argv and waits until a line of its stderr contains
// want; the process is then stopped. It fails the test if the process
// exits first or nothing comes within a minute.
func runUntil(t *testing.T, argv []string, want string) {
	t.Helper()
	runUntilEnv(t, argv, nil, want)
}

// runUntilEnv is runUntil with more environment variables (KEY=value).
func runUntilEnv(t *testing.T, argv, env []string, want string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(testbin.Env(os.Environ()), env...)
	cmd.WaitDelay = 10 * time.Second
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found := make(chan struct{})
	var lines []string
	var mu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		signalled := false
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			if !signalled && strings.Contains(sc.Text(), want) {
				close(found)
				signalled = true
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	output := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(lines, "\n")
	}
	select {
	case <-found:
		cancel()
		<-exited
	case err := <-exited:
		t.Fatalf("%s exited (%v) before logging %q:\n%s", filepath.Base(argv[0]), err, want, output())
	case <-time.After(time.Minute):
		cancel()
		<-exited
		t.Fatalf("%s did not log %q within a minute:\n%s", filepath.Base(argv[0]), want, output())
	}
}

func sshHostKey(t *testing.T, dir string) (path, public string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "ssh_host_ed25519_key")
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, trust.SSHEd25519Line(pub)
}

func ciKey(t *testing.T) proto.PublicKey {
	t.Helper()
	return newKey(t).Public().Proto()
}

const (
	agentPackage = "/nix/store/00000000000000000000000000000000-nixfleet-agent"
	cpPackage    = "/nix/store/11111111111111111111111111111111-nixfleet-cp"
)

// TestAgentModule: services.nixfleet-agent, with every option set, runs
// `nixfleet-agent run` from its package with a flag for each option,
// flags the real agent accepts: started with that command line (files
// and directories moved to the test's), it loads its host key, the trust
// roots and the probes and starts checking in, its metrics file counting
// the check-in that failed. The unit restarts always,
// keeps its state in the directory it passes, and is restarted, not
// stopped, by a switch.
func TestAgentModule(t *testing.T) {
	t.Parallel()
	requireNix(t)
	dir := t.TempDir()
	key := ciKey(t)
	next := ciKey(t)
	settings := map[string]any{
		"enable":       true,
		"package":      map[string]string{"outPath": agentPackage},
		"controlPlane": map[string]any{"url": "https://127.0.0.1:1", "caFile": "/etc/nixfleet/cp-ca.pem"},
		"trust": map[string]any{
			"ciReleaseKey": map[string]any{"current": key, "successor": next, "retireAt": "2030-01-01T00:00:00Z"},
			"cacheKeys":    []string{"cache.example.org-1:6NCHdD59X431o0gWypbMrAURkbJ16ZPMQFGspcDShjY="},
		},
		"substituters": []string{"https://cache.example.org", "https://cache2.example.org"},
		"failedUnits":  map[string]any{"ignore": []string{"nixfleet-switch-*"}, "interval": "1m", "timeout": "10s"},
		"probes": []map[string]any{
			{"name": "web", "type": "http", "url": "http://127.0.0.1:1/healthz", "expectStatus": 204, "interval": "10s"},
			{"name": "db", "type": "tcp", "address": "127.0.0.1:1"},
			{"name": "true", "type": "exec", "command": []string{"true"}, "timeout": "2s"},
		},
		"checkinWait": "20s",
		"quarantine":  "2h",
		"metricsFile": "/var/lib/prometheus-node-exporter-text-files/nixfleet-agent.prom",
		"logLevel":    "debug",
		"logFormat":   "text",
		"restartSec":  "10s",
	}
	config := map[string]any{
		"networking": map[string]any{"hostName": "web-01"},
		"services":   map[string]any{"openssh": map[string]any{"enable": true}},
		"nix":        map[string]any{"package": map[string]string{"outPath": "/nix/store/22222222222222222222222222222222-nix"}},
	}
	e := evalModule(t, "agent.nix", settings, config)
	if e.Name != "nixfleet-agent" {
		t.Errorf("options under services.%s", e.Name)
	}
	if len(e.FailedAssertions)+len(e.Warnings) > 0 {
		t.Errorf("assertions %q, warnings %q", e.FailedAssertions, e.Warnings)
	}
	u := e.unit(t, "nixfleet-agent")
	for k, want := range map[string]any{"Restart": "always", "RestartSec": "10s", "StateDirectory": "nixfleet-agent", "StateDirectoryMode": "0700"} {
		if got := u.ServiceConfig[k]; got != want {
			t.Errorf("serviceConfig.%s = %v, want %v", k, got, want)
		}
	}
	if !slices.Contains(u.WantedBy, "multi-user.target") || !slices.Contains(u.After, "network-online.target") {
		t.Errorf("wantedBy %v, after %v", u.WantedBy, u.After)
	}
	if u.StopIfChanged == nil || *u.StopIfChanged {
		t.Error("a switch would stop the agent (stopIfChanged is not false)")
	}
	if !slices.Contains(u.Path, "/nix/store/22222222222222222222222222222222-nix") {
		t.Errorf("path %v lacks config.nix.package", u.Path)
	}

	argv := execStart(t, u, "/no-credentials")
	if len(argv) < 2 || argv[0] != agentPackage+"/bin/nixfleet-agent" || argv[1] != "run" {
		t.Fatalf("ExecStart %q does not run `nixfleet-agent run` from the package", argv)
	}
	args := argv[2:]
	flags := flagValues(t, args)
	want := map[string][]string{
		"cp": {"https://127.0.0.1:1"}, "cp-ca": {"/etc/nixfleet/cp-ca.pem"}, "hostname": {"web-01"},
		"host-key": {"/etc/ssh/ssh_host_ed25519_key"}, "trust": flags["trust"], "probes": flags["probes"],
		"state-dir":   {"/var/lib/" + u.ServiceConfig["StateDirectory"].(string)},
		"substituter": {"https://cache.example.org", "https://cache2.example.org"},
		"wait":        {"20s"}, "quarantine": {"2h"}, "log-level": {"debug"}, "log-format": {"text"},
		"metrics-file": {"/var/lib/prometheus-node-exporter-text-files/nixfleet-agent.prom"},
	}
	if diff := cmp.Diff(want, flags); diff != "" {
		t.Errorf("flags (-want +got):\n%s", diff)
	}

	roots, err := trust.ParseRoots([]byte(e.Files["trust"]))
	if err != nil {
		t.Fatalf("the trust.json the module writes: %v\n%s", err, e.Files["trust"])
	}
	if diff := cmp.Diff(settings["trust"].(map[string]any)["cacheKeys"], roots.CacheKeys()); diff != "" {
		t.Errorf("cache keys (-options +trust.json):\n%s", diff)
	}
	probes, err := probe.Parse([]byte(e.Files["probes"]))
	if err != nil {
		t.Fatalf("the probes file the module writes: %v\n%s", err, e.Files["probes"])
	}
	if len(probes.Probes) != 3 || probes.Probes[0].ExpectStatus != 204 || probes.FailedUnits.Interval != time.Minute ||
		!slices.Equal(probes.FailedUnits.Ignore, []string{"nixfleet-switch-*"}) {
		t.Errorf("probes file parsed as %+v", probes)
	}

	// The real agent, with the test's files and directories.
	hostKey, _ := sshHostKey(t, dir)
	setFlag(args, "trust", storeFile(t, dir, flags["trust"][0], e.Files["trust"]))
	setFlag(args, "probes", storeFile(t, dir, flags["probes"][0], e.Files["probes"]))
	setFlag(args, "host-key", hostKey)
	setFlag(args, "state-dir", filepath.Join(dir, "state"))
	caFiles, err := devcert.Write(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	setFlag(args, "cp-ca", caFiles.CertFile)
	metricsFile := filepath.Join(dir, "nixfleet-agent.prom")
	setFlag(args, "metrics-file", metricsFile)
	// The control plane is not there: the first check-in fails, and the
	// metrics file says so.
	runUntil(t, append([]string{binary(t, "nixfleet-agent"), "run"}, args...), `level=WARN msg="check-in failed"`)
	metrics, err := os.ReadFile(metricsFile)
	if err != nil || !strings.Contains(string(metrics), "\nnixfleet_agent_checkin_failures_total 1\n") {
		t.Errorf("the metrics file after a failed check-in: %v\n%s", err, metrics)
	}
}

// TestAgentModuleDefaults: with only what it needs, the agent module
// takes the hostname from networking.hostName, leaves optional flags
// out, and warns when OpenSSH (which makes the default host key) is off;
// without a CI key it fails an assertion; trustFile and probesFile are
// passed as they are.
func TestAgentModuleDefaults(t *testing.T) {
	t.Parallel()
	requireNix(t)
	config := map[string]any{
		"networking": map[string]any{"hostName": "db-01"},
		"services":   map[string]any{"openssh": map[string]any{"enable": false}},
		"nix":        map[string]any{"package": map[string]string{"outPath": "/nix/store/22222222222222222222222222222222-nix"}},
	}
	base := map[string]any{
		"enable":       true,
		"package":      map[string]string{"outPath": agentPackage},
		"controlPlane": map[string]any{"url": "https://cp.example.org:8443"},
	}
	with := func(extra map[string]any) map[string]any {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}

	e := evalModule(t, "agent.nix", with(map[string]any{"trustFile": "/etc/nixfleet/trust.json", "probesFile": "/etc/nixfleet/probes.json"}), config)
	flags := flagValues(t, execStart(t, e.unit(t, "nixfleet-agent"), "")[2:])
	want := map[string][]string{
		"cp": {"https://cp.example.org:8443"}, "hostname": {"db-01"}, "host-key": {"/etc/ssh/ssh_host_ed25519_key"},
		"trust": {"/etc/nixfleet/trust.json"}, "probes": {"/etc/nixfleet/probes.json"}, "state-dir": {"/var/lib/nixfleet-agent"},
		"wait": {"30s"}, "log-level": {"info"}, "log-format": {"json"},
	}
	if diff := cmp.Diff(want, flags); diff != "" {
		t.Errorf("flags (-want +got):\n%s", diff)
	}
	if len(e.Warnings) != 1 || !strings.Contains(e.Warnings[0], "services.openssh is disabled") {
		t.Errorf("warnings %q, want one about OpenSSH", e.Warnings)
	}
	if len(e.FailedAssertions) > 0 {
		t.Errorf("failed assertions %q", e.FailedAssertions)
	}

	e = evalModule(t, "agent.nix", base, config)
	if len(e.FailedAssertions) != 1 || !strings.Contains(e.FailedAssertions[0], "trust.ciReleaseKey.current") {
		t.Errorf("failed assertions %q, want the missing CI key", e.FailedAssertions)
	}
	// Default probes: the failed-units check alone.
	p, err := probe.Parse([]byte(e.Files["probes"]))
	if err != nil || !p.FailedUnits.Enabled || len(p.Probes) != 0 {
		t.Errorf("default probes file %s: %+v, %v", e.Files["probes"], p, err)
	}
}

// TestAgentModuleHostname: the agent checks in under hostname, which
// defaults to networking.hostName. An empty name (networking.hostName
// left to DHCP) fails an assertion; "nixos", NixOS's default that every
// unnamed host shares, is warned about; the hostname option wins over
// networking.hostName either way.
func TestAgentModuleHostname(t *testing.T) {
	t.Parallel()
	requireNix(t)
	for _, tc := range []struct {
		name, hostName string
		hostname       any // the option; nil leaves it unset
		want           string
		assertion      string
		warning        string
	}{
		{name: "networking.hostName", hostName: "web-01", want: "web-01"},
		{name: "option wins", hostName: "web-01", hostname: "web-01.fleet", want: "web-01.fleet"},
		{name: "empty networking.hostName", hostName: "", want: "", assertion: "hostname is empty"},
		{name: "empty option", hostName: "web-01", hostname: "", want: "", assertion: "hostname is empty"},
		{name: "networking.hostName default", hostName: "nixos", want: "nixos", warning: `hostname is "nixos", networking.hostName's default`},
		{name: "option over the default", hostName: "nixos", hostname: "web-01", want: "web-01"},
		{name: "option nixos", hostName: "web-01", hostname: "nixos", want: "nixos", warning: `hostname is "nixos"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			settings := map[string]any{
				"enable":       true,
				"package":      map[string]string{"outPath": agentPackage},
				"controlPlane": map[string]any{"url": "https://cp.example.org:8443"},
				"trustFile":    "/etc/nixfleet/trust.json",
			}
			if tc.hostname != nil {
				settings["hostname"] = tc.hostname
			}
			config := map[string]any{
				"networking": map[string]any{"hostName": tc.hostName},
				"services":   map[string]any{"openssh": map[string]any{"enable": true}},
				"nix":        map[string]any{"package": map[string]string{"outPath": "/nix/store/22222222222222222222222222222222-nix"}},
			}
			e := evalModule(t, "agent.nix", settings, config)
			if got := flagValues(t, execStart(t, e.unit(t, "nixfleet-agent"), "")[2:])["hostname"]; !slices.Equal(got, []string{tc.want}) {
				t.Errorf("--hostname %q, want %q", got, tc.want)
			}
			for _, c := range []struct {
				kind string
				got  []string
				want string
			}{{"failed assertions", e.FailedAssertions, tc.assertion}, {"warnings", e.Warnings, tc.warning}} {
				switch {
				case c.want == "" && len(c.got) > 0:
					t.Errorf("%s %q, want none", c.kind, c.got)
				case c.want != "" && (len(c.got) != 1 || !strings.Contains(c.got[0], c.want)):
					t.Errorf("%s %q, want one saying %q", c.kind, c.got, c.want)
				}
			}
		})
	}
}

// TestControlPlaneModule: services.nixfleet-control-plane, with every
// option set, runs `nixfleet-cp serve` as its own user with flags the
// real control plane accepts: started with that command line (the
// secrets handed over as systemd credentials, files and directories moved
// to the test's), it loads the trust roots and the operators, opens its
// SQLite store and the repository, and serves TLS.
func TestControlPlaneModule(t *testing.T) {
	t.Parallel()
	requireNix(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "fleet.git")
	if _, err := git.PlainInit(repo, true); err != nil {
		t.Fatal(err)
	}
	certs, err := devcert.Write(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "webhook-secret")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	promToken := filepath.Join(dir, "prometheus-token")
	if err := os.WriteFile(promToken, []byte("t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, alice := sshHostKey(t, t.TempDir())
	bob := ciKey(t)
	prometheus := map[string]any{"url": "https://prometheus.example.org", "caFile": certs.CertFile, "bearerTokenFile": promToken, "timeout": "5s",
		"headers": map[string]string{"X-Scope-OrgID": "team-a"}, "proxyUrl": "http://proxy.example.org:3128"}
	settings := map[string]any{
		"enable":     true,
		"package":    map[string]string{"outPath": cpPackage},
		"listen":     "127.0.0.1:0",
		"repository": repo,
		"trust":      map[string]any{"ciReleaseKey": map[string]any{"current": ciKey(t), "rejectBefore": "2026-01-01T00:00:00Z"}},
		"operators": []map[string]any{
			{"name": "alice", "key": alice, "role": "operator"},
			{"name": "bob", "key": bob, "role": "viewer"},
			{"name": "carol", "key": ciKey(t), "role": "approver"},
		},
		"tls":               map[string]any{"certFile": certs.CertFile, "keyFile": certs.KeyFile},
		"webhookSecretFile": secret,
		"prometheus":        prometheus,
		"replicaId":         "cp-1",
		"tickInterval":      "15s",
		"pollInterval":      "2s",
		"watchRefs":         []string{"refs/heads/main", "refs/heads/release/*"},
		"retention":         "1440h",
		"logLevel":          "debug",
		"logFormat":         "text",
		"environmentFile":   "/run/secrets/nixfleet-cp.env",
		"extraArgs":         []string{"--confirm-window", "10m"},
	}
	e := evalModule(t, "control-plane.nix", settings, map[string]any{})
	if len(e.FailedAssertions)+len(e.Warnings) > 0 {
		t.Errorf("assertions %q, warnings %q", e.FailedAssertions, e.Warnings)
	}
	u := e.unit(t, "nixfleet-control-plane")
	for k, want := range map[string]any{"User": "nixfleet-cp", "Group": "nixfleet-cp", "StateDirectory": "nixfleet-cp", "Restart": "on-failure",
		"LimitNOFILE": float64(1 << 20)} {
		if got := u.ServiceConfig[k]; got != want {
			t.Errorf("serviceConfig.%s = %v, want %v", k, got, want)
		}
	}
	// After a restart every agent reconnects at once: the accept backlog
	// is raised above the kernel's 4096.
	for _, k := range []string{"net.core.somaxconn", "net.ipv4.tcp_max_syn_backlog"} {
		if got := e.Config.Boot.Kernel.Sysctl[k]; got != float64(65535) {
			t.Errorf("boot.kernel.sysctl.%q = %v, want 65535", k, got)
		}
	}
	if usr, ok := e.Config.Users.Users["nixfleet-cp"]; !ok || !usr.IsSystemUser || usr.Group != "nixfleet-cp" {
		t.Errorf("users.users.nixfleet-cp = %+v", e.Config.Users.Users)
	}
	if got := fmt.Sprint(u.ServiceConfig["EnvironmentFile"]); got != "[/run/secrets/nixfleet-cp.env]" {
		t.Errorf("EnvironmentFile = %s", got)
	}
	if e.Config.Services.PostgreSQL != nil {
		t.Errorf("PostgreSQL set up without postgresql.enable: %+v", e.Config.Services.PostgreSQL)
	}
	if ro, _ := unitPaths(t, u.ServiceConfig["ReadOnlyPaths"]); !slices.Equal(ro, []string{repo}) {
		t.Errorf("ReadOnlyPaths %q, want the repository %q", ro, repo)
	}

	// systemd hands each LoadCredential file over in $CREDENTIALS_DIRECTORY
	// (%d).
	creds := filepath.Join(dir, "credentials")
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	var loaded []string
	for _, c := range u.ServiceConfig["LoadCredential"].([]any) {
		name, src, _ := strings.Cut(c.(string), ":")
		loaded = append(loaded, name)
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(creds, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(loaded, []string{"tls-key", "webhook-secret", "prometheus-token"}) {
		t.Errorf("credentials %q, want tls-key, webhook-secret and prometheus-token", loaded)
	}

	argv := execStart(t, u, creds)
	if len(argv) < 2 || argv[0] != cpPackage+"/bin/nixfleet-cp" || argv[1] != "serve" {
		t.Fatalf("ExecStart %q does not run `nixfleet-cp serve` from the package", argv)
	}
	args := argv[2:]
	flags := flagValues(t, args)
	want := map[string][]string{
		"listen": {"127.0.0.1:0"}, "state-dir": {"/var/lib/nixfleet-cp"}, "repo": {repo},
		"trust": flags["trust"], "operators": flags["operators"], "log-level": {"debug"}, "log-format": {"text"},
		"tls-cert": {certs.CertFile}, "tls-key": {filepath.Join(creds, "tls-key")},
		"webhook-secret-file": {filepath.Join(creds, "webhook-secret")}, "replica-id": {"cp-1"},
		"tick-interval": {"15s"}, "poll-interval": {"2s"}, "retention": {"1440h"}, "confirm-window": {"10m"},
		"watch-ref":      {"refs/heads/main", "refs/heads/release/*"},
		"prometheus-url": {"https://prometheus.example.org"}, "prometheus-ca": {certs.CertFile},
		"prometheus-bearer-token-file": {filepath.Join(creds, "prometheus-token")}, "prometheus-timeout": {"5s"},
		"prometheus-header": {"X-Scope-OrgID: team-a"}, "prometheus-proxy-url": {"http://proxy.example.org:3128"},
	}
	if diff := cmp.Diff(want, flags); diff != "" {
		t.Errorf("flags (-want +got):\n%s", diff)
	}
	if _, err := trust.ParseRoots([]byte(e.Files["trust"])); err != nil {
		t.Errorf("the trust.json the module writes: %v\n%s", err, e.Files["trust"])
	}

	setFlag(args, "trust", storeFile(t, dir, flags["trust"][0], e.Files["trust"]))
	ops := storeFile(t, dir, flags["operators"][0], e.Files["operators"])
	setFlag(args, "operators", ops)
	if got, err := controlplane.LoadOperators(ops); err != nil || len(got) != 3 {
		t.Errorf("the operators file the module writes: %v, %v\n%s", got, err, e.Files["operators"])
	}
	setFlag(args, "state-dir", filepath.Join(dir, "state"))
	if err := os.Mkdir(filepath.Join(dir, "state"), 0o750); err != nil {
		t.Fatal(err)
	}
	runUntil(t, append([]string{binary(t, "nixfleet-cp"), "serve"}, args...), `level=INFO msg="control plane serving"`)

	// Basic auth instead of the bearer token: the password is the
	// credential prometheus-password; both at once, a password without a
	// user, or an Authorization header fail assertions.
	promPassword := filepath.Join(dir, "prometheus-password")
	if err := os.WriteFile(promPassword, []byte("pa55word\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	settings["prometheus"] = map[string]any{"url": "https://prometheus.example.org", "basicAuth": map[string]any{"user": "nixfleet", "passwordFile": promPassword}}
	e = evalModule(t, "control-plane.nix", settings, map[string]any{})
	if len(e.FailedAssertions)+len(e.Warnings) > 0 {
		t.Errorf("basic auth: assertions %q, warnings %q", e.FailedAssertions, e.Warnings)
	}
	u = e.unit(t, "nixfleet-control-plane")
	if got := fmt.Sprint(u.ServiceConfig["LoadCredential"]); got != "[tls-key:"+certs.KeyFile+" webhook-secret:"+secret+" prometheus-password:"+promPassword+"]" {
		t.Errorf("basic auth: LoadCredential = %s, want tls-key, webhook-secret and prometheus-password", got)
	}
	flags = flagValues(t, execStart(t, u, creds)[2:])
	for k, want := range map[string][]string{"prometheus-basic-auth-user": {"nixfleet"},
		"prometheus-basic-auth-password-file": {filepath.Join(creds, "prometheus-password")}, "prometheus-bearer-token-file": nil, "prometheus-header": nil} {
		if !slices.Equal(flags[k], want) {
			t.Errorf("basic auth: --%s %q, want %q", k, flags[k], want)
		}
	}
	for name, p := range map[string]map[string]any{
		"basic auth and a bearer token": {"url": "https://p", "basicAuth": map[string]any{"user": "u", "passwordFile": promPassword}, "bearerTokenFile": promToken},
		"a password without a user":     {"url": "https://p", "basicAuth": map[string]any{"passwordFile": promPassword}},
		"an Authorization header":       {"url": "https://p", "headers": map[string]string{"authorization": "Basic eA=="}},
	} {
		settings["prometheus"] = p
		if e := evalModule(t, "control-plane.nix", settings, map[string]any{}); len(e.FailedAssertions) != 1 || !strings.Contains(e.FailedAssertions[0], "prometheus.") {
			t.Errorf("%s: failed assertions %q, want one about prometheus", name, e.FailedAssertions)
		}
	}
}

// postgresqlUnits is what the control plane module reads of the rest of
// the configuration with postgresql.enable: the units nixpkgs' postgresql
// module defines once services.postgresql.enable is set, as each nixpkgs
// has them (the stub has no postgresql module), and the unit that has
// created the database and its owner when it is active.
var postgresqlUnits = []struct {
	nixpkgs string
	config  map[string]any
	ready   string
}{
	{
		// NixOS 25.11: ensureDatabases and ensureUsers run in
		// postgresql-setup.service, which postgresql.target requires and
		// follows.
		"current", map[string]any{"systemd": map[string]any{
			"services": map[string]any{"postgresql": map[string]any{}, "postgresql-setup": map[string]any{}},
			"targets":  map[string]any{"postgresql": map[string]any{}},
		}}, "postgresql.target",
	},
	{
		// The setup unit without the target.
		"setup unit only", map[string]any{"systemd": map[string]any{
			"services": map[string]any{"postgresql": map[string]any{}, "postgresql-setup": map[string]any{}},
			"targets":  map[string]any{},
		}}, "postgresql-setup.service",
	},
	{
		// NixOS 25.05 and older: postgresql.service's postStart runs them.
		"older", map[string]any{"systemd": map[string]any{
			"services": map[string]any{"postgresql": map[string]any{}},
			"targets":  map[string]any{},
		}}, "postgresql.service",
	},
}

// TestControlPlaneModulePostgreSQL: postgresql.enable sets up a local
// PostgreSQL with a database owned by the service's user and points --db
// at it over the socket; the unit requires and follows the unit that has
// created that database on the nixpkgs it is evaluated with; the firewall
// opens the listen port on request; conflicting or missing settings fail
// assertions.
func TestControlPlaneModulePostgreSQL(t *testing.T) {
	t.Parallel()
	requireNix(t)
	base := func() map[string]any {
		return map[string]any{
			"enable":     true,
			"package":    map[string]string{"outPath": cpPackage},
			"repository": "/srv/git/fleet.git",
			"trustFile":  "/etc/nixfleet/trust.json",
			"tls":        map[string]any{"certFile": "/var/lib/acme/cp/cert.pem", "keyFile": "/var/lib/acme/cp/key.pem"},
		}
	}
	for _, pu := range postgresqlUnits {
		t.Run("nixpkgs "+pu.nixpkgs, func(t *testing.T) {
			t.Parallel()
			s := base()
			s["postgresql"] = map[string]any{"enable": true}
			u := evalModule(t, "control-plane.nix", s, pu.config).unit(t, "nixfleet-control-plane")
			if diff := cmp.Diff([]string{"network-online.target", pu.ready}, u.After); diff != "" {
				t.Errorf("after (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{pu.ready}, u.Requires); diff != "" {
				t.Errorf("requires (-want +got):\n%s", diff)
			}
			// Without the local database, no PostgreSQL unit at all.
			u = evalModule(t, "control-plane.nix", base(), pu.config).unit(t, "nixfleet-control-plane")
			if len(u.Requires) > 0 || !slices.Equal(u.After, []string{"network-online.target"}) {
				t.Errorf("without postgresql.enable: after %v, requires %v", u.After, u.Requires)
			}
		})
	}

	current := postgresqlUnits[0].config
	s := base()
	s["postgresql"] = map[string]any{"enable": true}
	s["listen"] = "0.0.0.0:8443"
	s["openFirewall"] = true
	e := evalModule(t, "control-plane.nix", s, current)
	if len(e.FailedAssertions) > 0 {
		t.Errorf("failed assertions %q", e.FailedAssertions)
	}
	u := e.unit(t, "nixfleet-control-plane")
	pg := e.Config.Services.PostgreSQL
	if pg == nil || !pg.Enable || !slices.Equal(pg.EnsureDatabases, []string{"nixfleet-cp"}) ||
		len(pg.EnsureUsers) != 1 || pg.EnsureUsers[0].Name != u.ServiceConfig["User"] || !pg.EnsureUsers[0].EnsureDBOwnership {
		t.Errorf("services.postgresql = %+v", pg)
	}
	flags := flagValues(t, execStart(t, u, "")[2:])
	db := flags["db"]
	if len(db) != 1 {
		t.Fatalf("--db %q", db)
	}
	pc, err := pgconn.ParseConfig(db[0])
	if err != nil {
		t.Fatalf("--db %q: %v", db[0], err)
	}
	if pc.Host != "/run/postgresql" || pc.Database != "nixfleet-cp" || pc.User != u.ServiceConfig["User"] {
		t.Errorf("--db %q: host %q, database %q, user %q", db[0], pc.Host, pc.Database, pc.User)
	}
	if diff := cmp.Diff([]int{8443}, e.Config.Networking.Firewall.AllowedTCPPorts); diff != "" {
		t.Errorf("firewall (-want +got):\n%s", diff)
	}
	if caps := u.ServiceConfig["AmbientCapabilities"]; fmt.Sprint(caps) != "[]" {
		t.Errorf("AmbientCapabilities = %v for port 8443", caps)
	}

	for _, tc := range []struct {
		name   string
		change func(map[string]any)
		want   []string
	}{
		{"no TLS", func(s map[string]any) { delete(s, "tls") }, []string{"set tls.certFile and tls.keyFile"}},
		{"half TLS", func(s map[string]any) { s["tls"] = map[string]any{"certFile": "/c.pem"} }, []string{"set both tls.certFile and tls.keyFile"}},
		{"insecure dev", func(s map[string]any) { delete(s, "tls"); s["extraArgs"] = []string{"--insecure-dev"} }, nil},
		{"two databases", func(s map[string]any) {
			s["postgresql"] = map[string]any{"enable": true}
			s["database"] = map[string]any{"url": "postgres://db/x"}
		}, []string{"postgresql.enable sets the database"}},
		{"no trust", func(s map[string]any) { delete(s, "trustFile") }, []string{"trust.ciReleaseKey.current"}},
		{"no port", func(s map[string]any) { s["listen"] = "localhost" }, []string{"listen must be host:port"}},
		{"relative repository", func(s map[string]any) { s["repository"] = "fleet.git" }, []string{"repository must be a URL or an absolute path"}},
		{"operators twice", func(s map[string]any) {
			s["operatorsFile"] = "/etc/ops.json"
			s["operators"] = []map[string]any{{"name": "a", "key": "ssh-ed25519 AAAA", "role": "viewer"}}
		}, []string{"set operators or operatorsFile"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := base()
			tc.change(s)
			e := evalModule(t, "control-plane.nix", s, current)
			if len(e.FailedAssertions) != len(tc.want) {
				t.Fatalf("failed assertions %q, want %d", e.FailedAssertions, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(e.FailedAssertions[i], w) {
					t.Errorf("assertion %q does not say %q", e.FailedAssertions[i], w)
				}
			}
		})
	}
}

// TestControlPlaneModuleRepository: a local repository, which the control
// plane reads in place and never writes, is in the unit's ReadOnlyPaths
// (with "-": a missing one is the control plane's error to report) and
// RequiresMountsFor, quoted so that systemd reads the path unchanged; a
// URL, mirrored into the state directory, is in neither.
func TestControlPlaneModuleRepository(t *testing.T) {
	t.Parallel()
	requireNix(t)
	for _, tc := range []struct {
		repository string
		local      bool
	}{
		{"/srv/git/fleet.git", true},
		{"/srv/git/the fleet %d $HOME \"x\".git", true},
		{"/home/git/fleet", true},
		{"https://git.example.org/fleet.git", false},
		{"ssh://git@git.example.org/fleet.git", false},
		{"git@git.example.org:fleet.git", false},
		{"file:///srv/git/fleet.git", false},
	} {
		t.Run(tc.repository, func(t *testing.T) {
			t.Parallel()
			e := evalModule(t, "control-plane.nix", map[string]any{
				"enable": true, "package": map[string]string{"outPath": cpPackage},
				"repository": tc.repository, "trustFile": "/etc/nixfleet/trust.json",
				"tls": map[string]any{"certFile": "/c.pem", "keyFile": "/k.pem"},
			}, map[string]any{})
			if len(e.FailedAssertions) > 0 {
				t.Errorf("failed assertions %q", e.FailedAssertions)
			}
			u := e.unit(t, "nixfleet-control-plane")
			if got := flagValues(t, execStart(t, u, "")[2:])["repo"]; !slices.Equal(got, []string{tc.repository}) {
				t.Errorf("--repo %q", got)
			}
			var want []string
			if tc.local {
				want = []string{tc.repository}
			}
			ro, optional := unitPaths(t, u.ServiceConfig["ReadOnlyPaths"])
			if diff := cmp.Diff(want, ro); diff != "" {
				t.Errorf("ReadOnlyPaths (-want +got):\n%s", diff)
			}
			if slices.Contains(optional, false) {
				t.Errorf("ReadOnlyPaths %v: a missing repository would fail the unit's namespace", u.ServiceConfig["ReadOnlyPaths"])
			}
			mounts, optional := unitPaths(t, u.UnitConfig["RequiresMountsFor"])
			if diff := cmp.Diff(want, mounts); diff != "" {
				t.Errorf("RequiresMountsFor (-want +got):\n%s", diff)
			}
			if slices.Contains(optional, true) {
				t.Errorf("RequiresMountsFor %v takes no \"-\"", u.UnitConfig["RequiresMountsFor"])
			}
			// The sandbox stays: read-only everywhere but the state directory.
			if u.ServiceConfig["ProtectSystem"] != "strict" || u.ServiceConfig["ReadWritePaths"] != nil {
				t.Errorf("ProtectSystem %v, ReadWritePaths %v", u.ServiceConfig["ProtectSystem"], u.ServiceConfig["ReadWritePaths"])
			}
		})
	}
}

// TestModuleOptionTypes: the stub checks values against the declared
// types, so a mistyped setting is refused, naming the option.
func TestModuleOptionTypes(t *testing.T) {
	t.Parallel()
	requireNix(t)
	base := map[string]map[string]any{
		"agent.nix": {
			"enable": true, "package": map[string]string{"outPath": agentPackage},
			"controlPlane": map[string]any{"url": "https://cp:8443"}, "trustFile": "/etc/trust.json",
		},
		"control-plane.nix": {
			"enable": true, "package": map[string]string{"outPath": cpPackage},
			"repository": "/srv/fleet.git", "trustFile": "/etc/trust.json",
		},
	}
	config := map[string]any{
		"networking": map[string]any{"hostName": "h"},
		"services":   map[string]any{"openssh": map[string]any{"enable": true}},
		"nix":        map[string]any{"package": map[string]string{"outPath": "/nix/store/22222222222222222222222222222222-nix"}},
	}
	for _, tc := range []struct {
		module, option string
		value          any
		want           string
	}{
		{"agent.nix", "checkinWait", "soon", "services.nixfleet-agent.checkinWait"},
		{"agent.nix", "probes", []map[string]any{{"name": "a b", "type": "http"}}, "services.nixfleet-agent.probes.*.name"},
		{"agent.nix", "logLevel", "loud", "services.nixfleet-agent.logLevel"},
		{"agent.nix", "metricsFile", "/var/lib/node-exporter/nixfleet-agent.txt", "services.nixfleet-agent.metricsFile"},
		{"control-plane.nix", "logFormat", "logfmt", "services.nixfleet-control-plane.logFormat"},
		{"control-plane.nix", "operators", []map[string]any{{"name": "x", "key": "k", "role": "admin"}}, "services.nixfleet-control-plane.operators.*.role"},
		{"control-plane.nix", "listn", "0.0.0.0:1", "services.nixfleet-control-plane.listn does not exist"},
		{"control-plane.nix", "notifications", map[string]any{"webhooks": []map[string]any{{"name": "ops", "url": "https://h/x", "events": []string{"halt"}}}},
			"services.nixfleet-control-plane.notifications.webhooks.*.events"},
		{"control-plane.nix", "notifications", map[string]any{"webhooks": []map[string]any{{"name": "Ops", "url": "https://h/x"}}},
			"services.nixfleet-control-plane.notifications.webhooks.*.name"},
	} {
		t.Run(tc.option, func(t *testing.T) {
			t.Parallel()
			settings := map[string]any{tc.option: tc.value}
			for k, v := range base[tc.module] {
				settings[k] = v
			}
			s, _ := json.Marshal(settings)
			c, _ := json.Marshal(config)
			r := runNix(t, "nix-instantiate", "--eval", "--strict", "--json", "nix/tests/modules/eval.nix",
				"--arg", "module", "./nix/modules/"+tc.module, "--argstr", "settingsJSON", string(s), "--argstr", "configJSON", string(c), "-A", "config")
			if r.err == nil || !strings.Contains(string(r.stderr), "stub: ") || !strings.Contains(string(r.stderr), tc.want) {
				t.Errorf("%s: %v, want an error about %s\n%s", s, r.err, tc.want, r.stderr)
			}
		})
	}
}

// TestControlPlaneModuleNotifications: notifications.webhooks become the
// [[notifications.webhook]] tables of a TOML file passed with --config,
// each secretFile a credential notify-<name> the file names through
// ${CREDENTIALS_DIRECTORY}: started with that command line and
// credentials directory, the real control plane reads them and sends; a
// name used twice, or a --config of extraArgs beside them, fails an
// assertion.
func TestControlPlaneModuleNotifications(t *testing.T) {
	t.Parallel()
	requireNix(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "fleet.git")
	if _, err := git.PlainInit(repo, true); err != nil {
		t.Fatal(err)
	}
	certs, err := devcert.Write(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "ops-secret")
	if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	webhooks := []map[string]any{
		{"name": "ops", "url": "https://hooks.example.org/nixfleet", "events": []string{"halted", "release_refused"},
			"channels": []string{"prod"}, "secretFile": secret, "timeout": "5s", "minBackoff": "2s", "maxBackoff": "1m", "ca": certs.CertFile},
		{"name": "chat", "url": "http://127.0.0.1:1/hooks/x", "format": "slack"},
	}
	settings := func(extra map[string]any) map[string]any {
		s := map[string]any{
			"enable": true, "package": map[string]string{"outPath": cpPackage},
			"listen": "127.0.0.1:0", "repository": repo,
			"trust":         map[string]any{"ciReleaseKey": map[string]any{"current": ciKey(t)}},
			"tls":           map[string]any{"certFile": certs.CertFile, "keyFile": certs.KeyFile},
			"notifications": map[string]any{"webhooks": webhooks},
		}
		for k, v := range extra {
			s[k] = v
		}
		return s
	}
	e := evalModule(t, "control-plane.nix", settings(nil), map[string]any{})
	if len(e.FailedAssertions)+len(e.Warnings) > 0 {
		t.Errorf("assertions %q, warnings %q", e.FailedAssertions, e.Warnings)
	}
	u := e.unit(t, "nixfleet-control-plane")
	creds := filepath.Join(dir, "credentials")
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	var loaded []string
	for _, c := range u.ServiceConfig["LoadCredential"].([]any) {
		name, src, _ := strings.Cut(c.(string), ":")
		loaded = append(loaded, name)
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(creds, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(loaded, []string{"tls-key", "notify-ops"}) {
		t.Errorf("credentials %q, want tls-key and notify-ops", loaded)
	}
	wantTOML := `[[notifications.webhook]]
name = "ops"
url = "https://hooks.example.org/nixfleet"
format = "json"
events = ["halted","release_refused"]
channels = ["prod"]
secret-file = "${CREDENTIALS_DIRECTORY}/notify-ops"
timeout = "5s"
min-backoff = "2s"
max-backoff = "1m"
ca = "` + certs.CertFile + `"

[[notifications.webhook]]
name = "chat"
url = "http://127.0.0.1:1/hooks/x"
format = "slack"
`
	if d := cmp.Diff(wantTOML, e.Files["notifications"]); d != "" {
		t.Errorf("the notifications file (-want +got):\n%s", d)
	}

	args := execStart(t, u, creds)[2:]
	flags := flagValues(t, args)
	if len(flags["config"]) != 1 {
		t.Fatalf("--config %q, want the notifications file", flags["config"])
	}
	setFlag(args, "config", storeFile(t, dir, flags["config"][0], e.Files["notifications"]))
	setFlag(args, "trust", storeFile(t, dir, flags["trust"][0], e.Files["trust"]))
	setFlag(args, "state-dir", filepath.Join(dir, "state"))
	if err := os.Mkdir(filepath.Join(dir, "state"), 0o750); err != nil {
		t.Fatal(err)
	}
	// The replica leads, and starts sending to its sinks.
	runUntilEnv(t, append([]string{binary(t, "nixfleet-cp"), "serve"}, args...), []string{"CREDENTIALS_DIRECTORY=" + creds},
		`"msg":"sending notifications","sink":"ops"`)

	without := evalModule(t, "control-plane.nix", settings(map[string]any{"notifications": map[string]any{"webhooks": []any{}}}), map[string]any{})
	if got := flagValues(t, execStart(t, without.unit(t, "nixfleet-control-plane"), "")[2:])["config"]; got != nil {
		t.Errorf("--config %q without webhooks", got)
	}

	for name, extra := range map[string]map[string]any{
		"a name twice":     {"notifications": map[string]any{"webhooks": []map[string]any{webhooks[1], webhooks[1]}}},
		"another --config": {"extraArgs": []string{"--config", "/etc/nixfleet/cp.toml"}},
	} {
		if bad := evalModule(t, "control-plane.nix", settings(extra), map[string]any{}); len(bad.FailedAssertions) != 1 {
			t.Errorf("%s: failed assertions %q, want one", name, bad.FailedAssertions)
		}
	}
}

// TestControlPlaneModuleHardening: the control plane's unit is a
// Type=notify service with a watchdog, sandboxed as nixpkgs hardens a
// network daemon, and systemd's own judge agrees: the unit rendered from
// the module, checked by systemd-analyze security offline, is exposed at
// most 2.0 of 10 ("OK"), with a port under 1024 too (which keeps only
// CAP_NET_BIND_SERVICE).
func TestControlPlaneModuleHardening(t *testing.T) {
	t.Parallel()
	requireNix(t)
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is not installed: run .ci/run as root, which installs Debian's systemd package")
	}
	for _, listen := range []string{"0.0.0.0:8443", "0.0.0.0:443"} {
		t.Run(listen, func(t *testing.T) {
			t.Parallel()
			e := evalModule(t, "control-plane.nix", map[string]any{
				"enable": true, "package": map[string]string{"outPath": cpPackage}, "listen": listen,
				"repository": "/srv/git/fleet.git", "trustFile": "/etc/nixfleet/trust.json",
				"tls": map[string]any{"certFile": "/c.pem", "keyFile": "/k.pem"},
			}, map[string]any{})
			u := e.unit(t, "nixfleet-control-plane")
			for key, want := range map[string]any{"Type": "notify", "NotifyAccess": "main", "WatchdogSec": "2min",
				"PrivateDevices": true, "ProtectKernelModules": true, "ProtectKernelLogs": true, "ProtectClock": true,
				"ProtectHostname": true, "ProtectProc": "invisible", "RestrictNamespaces": true,
				"SystemCallArchitectures": "native", "UMask": "0077"} {
				if got := u.ServiceConfig[key]; got != want {
					t.Errorf("%s = %v, want %v", key, got, want)
				}
			}
			caps := fmt.Sprint(u.ServiceConfig["CapabilityBoundingSet"])
			if low := listen == "0.0.0.0:443"; (low && caps != "[CAP_NET_BIND_SERVICE]") || (!low && caps != "[]") {
				t.Errorf("CapabilityBoundingSet %s for %s", caps, listen)
			}

			file := filepath.Join(t.TempDir(), "nixfleet-control-plane.service")
			if err := os.WriteFile(file, []byte(renderUnit(t, u)), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(analyze, "security", "--offline=true", "--no-pager", file).CombinedOutput()
			if err != nil {
				t.Fatalf("systemd-analyze security: %v\n%s", err, out)
			}
			m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+) (\S+)`).FindSubmatch(out)
			if m == nil {
				t.Fatalf("no overall exposure level in:\n%s", out)
			}
			score, _ := strconv.ParseFloat(string(m[1]), 64)
			t.Logf("systemd-analyze security, listening on %s: %s %s", listen, m[1], m[2])
			if score > 2.0 {
				t.Errorf("exposure %s %s, want at most 2.0:\n%s", m[1], m[2], out)
			}
		})
	}
}

// renderUnit writes a unit's [Unit] and [Service] sections as NixOS does:
// booleans as true/false, a list as one line of its words (an empty one
// as a key with no value), anything else as it is.
func renderUnit(t *testing.T, u unit) string {
	t.Helper()
	var b strings.Builder
	section := func(name string, cfg map[string]any) {
		fmt.Fprintf(&b, "[%s]\n", name)
		for _, k := range sortedKeys(cfg) {
			switch v := cfg[k].(type) {
			case bool:
				fmt.Fprintf(&b, "%s=%t\n", k, v)
			case []any:
				words := make([]string, len(v))
				for i, w := range v {
					words[i] = fmt.Sprint(w)
				}
				fmt.Fprintf(&b, "%s=%s\n", k, strings.TrimSpace(strings.Join(words, " ")))
			case float64:
				fmt.Fprintf(&b, "%s=%s\n", k, strconv.FormatFloat(v, 'f', -1, 64))
			default:
				fmt.Fprintf(&b, "%s=%v\n", k, v)
			}
		}
	}
	section("Unit", map[string]any{"Description": "nixfleet control plane"})
	section("Service", u.ServiceConfig)
	return b.String()
}

// TestControlPlaneModuleMonitoring: asked, the module provisions the
// dashboard of monitoring/ into the machine's Grafana (a file provider
// whose directory holds dashboard.json alone) and the alerting rules into
// its Prometheus; not asked, it adds neither. The store paths are the
// ones Nix gives those files (nix store add-path --dry-run).
func TestControlPlaneModuleMonitoring(t *testing.T) {
	t.Parallel()
	requireNix(t)
	settings := func(on bool) map[string]any {
		return map[string]any{
			"enable": true, "package": map[string]string{"outPath": cpPackage},
			"repository": "/srv/git/fleet.git", "trustFile": "/etc/nixfleet/trust.json",
			"tls":        map[string]any{"certFile": "/c.pem", "keyFile": "/k.pem"},
			"monitoring": map[string]any{"grafanaDashboard": on, "prometheusRules": on},
		}
	}
	off := evalModule(t, "control-plane.nix", settings(false), map[string]any{})
	if g := off.Config.Services.Grafana; g != nil && len(g.Provision.Dashboards.Settings.Providers) > 0 {
		t.Errorf("not asked, the module provisions %+v", g.Provision.Dashboards.Settings.Providers)
	}
	if p := off.Config.Services.Prometheus; p != nil && len(p.RuleFiles) > 0 {
		t.Errorf("not asked, the module loads the rules %q", p.RuleFiles)
	}
	on := evalModule(t, "control-plane.nix", settings(true), map[string]any{})
	g, p := on.Config.Services.Grafana, on.Config.Services.Prometheus
	if g == nil || len(g.Provision.Dashboards.Settings.Providers) != 1 || p == nil || len(p.RuleFiles) != 1 {
		t.Fatalf("asked, the module set Grafana %+v, Prometheus %+v", g, p)
	}
	dir := t.TempDir()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "monitoring", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dashboard.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	dashboards := strings.TrimSpace(string(mustNix(t, "nix", "store", "add-path", "--dry-run", "--name", "nixfleet-dashboards", dir)))
	rules := strings.TrimSpace(string(mustNix(t, "nix", "store", "add-path", "--dry-run", filepath.Join("monitoring", "alerts.yml"))))
	if prov := g.Provision.Dashboards.Settings.Providers[0]; prov.Type != "file" || prov.Options.Path != dashboards {
		t.Errorf("the provider %+v, want type file reading %s (dashboard.json alone)", prov, dashboards)
	}
	if p.RuleFiles[0] != rules {
		t.Errorf("the rule file %s, want monitoring/alerts.yml, %s", p.RuleFiles[0], rules)
	}
}
