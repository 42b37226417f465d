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
	"maps"
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
	"github.com/pelletier/go-toml/v2"
	"golang.org/x/crypto/ssh"

	"github.com/nixfleet/nixfleet/agent/probe"
	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/internal/devcert"
	"github.com/nixfleet/nixfleet/internal/testkit/testbin"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// cpFixture is what a control plane started from a module's unit needs
// on disk: a directory, a bare fleet repository in it and a TLS
// certificate.
func cpFixture(t *testing.T) (dir, repo string, certs devcert.Files) {
	t.Helper()
	dir = t.TempDir()
	repo = filepath.Join(dir, "fleet.git")
	if _, err := git.PlainInit(repo, true); err != nil {
		t.Fatal(err)
	}
	certs, err := devcert.Write(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return dir, repo, certs
}

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

// unitPaths decodes a path list setting of a unit (ReadOnlyPaths=, ReadWritePaths=,
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

// configFile checks a unit's command line: the daemon from its package
// and its subcommand, `--config FILE`, FILE the module's settings file
// (e.Files["config"], at the stub's store path of that text), then only
// flags (the credentials). It copies the file into dir and returns the
// copy, the file as TOML decodes it, and those flags.
func configFile(t *testing.T, e moduleEval, u unit, bin, credentials, dir string) (path string, settings map[string]any, flags map[string][]string) {
	t.Helper()
	argv := execStart(t, u, credentials)
	if len(argv) < 4 || argv[0] != bin || argv[2] != "--config" {
		t.Fatalf("ExecStart %q does not run %s with --config FILE", argv, bin)
	}
	path = storeFile(t, dir, argv[3], e.Files["config"])
	if err := toml.Unmarshal([]byte(e.Files["config"]), &settings); err != nil {
		t.Fatalf("the --config file is not TOML: %v\n%s", err, e.Files["config"])
	}
	return path, settings, flagValues(t, argv[4:])
}

// exitOf runs argv to its end and returns its exit code and stderr.
func exitOf(t *testing.T, argv ...string) (int, string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), argv[0], argv[1:]...)
	cmd.Env = testbin.Env(os.Environ())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

const (
	agentPackage = "/nix/store/00000000000000000000000000000000-nixfleet-agent"
	cpPackage    = "/nix/store/11111111111111111111111111111111-nixfleet-cp"
	agentBin     = agentPackage + "/bin/nixfleet-agent"
	cpBin        = cpPackage + "/bin/nixfleet-cp"
)

// agentConfig is the rest of the configuration the agent module reads.
func agentConfig(hostName string, openssh bool) map[string]any {
	return map[string]any{
		"networking": map[string]any{"hostName": hostName},
		"services":   map[string]any{"openssh": map[string]any{"enable": openssh}},
		"nix":        map[string]any{"package": map[string]string{"outPath": "/nix/store/22222222222222222222222222222222-nix"}},
	}
}

// TestAgentModule: services.nixfleet-agent runs `nixfleet-agent run
// --config FILE`, FILE the TOML of its settings (typed keys and a
// freeform one) and of the trust and probes files it writes, every key a
// flag of the real agent: started with that file (the files and
// directories in it moved to the test's by flags, which win over the
// file), it loads its host key, the trust roots and the probes and
// starts checking in, its metrics file counting the check-in that
// failed. The unit restarts always, keeps its state in the directory of
// state-dir, and is restarted, not stopped, by a switch.
func TestAgentModule(t *testing.T) {
	t.Parallel()
	requireNix(t)
	dir := t.TempDir()
	key := ciKey(t)
	next := ciKey(t)
	settings := map[string]any{
		"enable":  true,
		"package": map[string]string{"outPath": agentPackage},
		"settings": map[string]any{
			"cp": "https://127.0.0.1:1", "cp-ca": "/etc/nixfleet/cp-ca.pem",
			"substituter": []string{"https://cache.example.org", "https://cache2.example.org"},
			"wait":        "20s", "quarantine": "2h", "log-level": "debug", "log-format": "text",
			"metrics-file": "/var/lib/prometheus-node-exporter-text-files/nixfleet-agent.prom",
			// A flag no option types.
			"current-system": "/run/current-system",
		},
		"trust": map[string]any{
			"ciReleaseKey": map[string]any{"current": key, "successor": next, "retireAt": "2030-01-01T00:00:00Z"},
			"cacheKeys":    []string{"cache.example.org-1:6NCHdD59X431o0gWypbMrAURkbJ16ZPMQFGspcDShjY="},
		},
		"failedUnits": map[string]any{"ignore": []string{"nixfleet-switch-*"}, "interval": "1m", "timeout": "10s"},
		"probes": []map[string]any{
			{"name": "web", "type": "http", "url": "http://127.0.0.1:1/healthz", "expectStatus": 204, "interval": "10s"},
			{"name": "db", "type": "tcp", "address": "127.0.0.1:1"},
			{"name": "true", "type": "exec", "command": []string{"true"}, "timeout": "2s"},
		},
		"restartSec": "10s",
	}
	e := evalModule(t, "agent.nix", settings, agentConfig("web-01", true))
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

	file, got, flags := configFile(t, e, u, agentBin, "/no-credentials", dir)
	if len(flags) > 0 {
		t.Errorf("flags %q besides --config", flags)
	}
	want := map[string]any{
		"cp": "https://127.0.0.1:1", "cp-ca": "/etc/nixfleet/cp-ca.pem", "hostname": "web-01",
		"host-key": "/etc/ssh/ssh_host_ed25519_key", "trust": got["trust"], "probes": got["probes"],
		"state-dir":   "/var/lib/" + u.ServiceConfig["StateDirectory"].(string),
		"substituter": []any{"https://cache.example.org", "https://cache2.example.org"},
		"wait":        "20s", "quarantine": "2h", "log-level": "debug", "log-format": "text",
		"metrics-file":   "/var/lib/prometheus-node-exporter-text-files/nixfleet-agent.prom",
		"current-system": "/run/current-system", "boot-loader": "none",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the --config file (-want +got):\n%s", diff)
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

	// The real agent, with the module's file and the test's files and
	// directories.
	hostKey, _ := sshHostKey(t, dir)
	caFiles, err := devcert.Write(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	metricsFile := filepath.Join(dir, "nixfleet-agent.prom")
	args := []string{"--config", file,
		"--trust", storeFile(t, dir, got["trust"].(string), e.Files["trust"]),
		"--probes", storeFile(t, dir, got["probes"].(string), e.Files["probes"]),
		"--host-key", hostKey, "--state-dir", filepath.Join(dir, "state"), "--cp-ca", caFiles.CertFile, "--metrics-file", metricsFile}
	// The control plane is not there: the first check-in fails, and the
	// metrics file says so.
	runUntil(t, append([]string{binary(t, "nixfleet-agent"), "run"}, args...), `level=WARN msg="check-in failed"`)
	metrics, err := os.ReadFile(metricsFile)
	if err != nil || !strings.Contains(string(metrics), "\nnixfleet_agent_checkin_failures_total 1\n") {
		t.Errorf("the metrics file after a failed check-in: %v\n%s", err, metrics)
	}
}

// TestAgentModuleDefaults: with only what it needs, the agent module
// takes the hostname from networking.hostName, leaves out the keys of
// no default, and warns when OpenSSH (which makes the default host key)
// is off; without a CI key it fails an assertion; trustFile and
// probesFile are passed as they are.
func TestAgentModuleDefaults(t *testing.T) {
	t.Parallel()
	requireNix(t)
	config := agentConfig("db-01", false)
	base := map[string]any{
		"enable":   true,
		"package":  map[string]string{"outPath": agentPackage},
		"settings": map[string]any{"cp": "https://cp.example.org:8443"},
	}
	with := func(extra map[string]any) map[string]any {
		m := maps.Clone(base)
		maps.Copy(m, extra)
		return m
	}

	e := evalModule(t, "agent.nix", with(map[string]any{"trustFile": "/etc/nixfleet/trust.json", "probesFile": "/etc/nixfleet/probes.json"}), config)
	_, got, _ := configFile(t, e, e.unit(t, "nixfleet-agent"), agentBin, "", t.TempDir())
	want := map[string]any{
		"cp": "https://cp.example.org:8443", "hostname": "db-01", "host-key": "/etc/ssh/ssh_host_ed25519_key",
		"trust": "/etc/nixfleet/trust.json", "probes": "/etc/nixfleet/probes.json", "state-dir": "/var/lib/nixfleet-agent",
		"substituter": []any{}, "wait": "30s", "log-level": "info", "log-format": "json", "boot-loader": "none",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the --config file (-want +got):\n%s", diff)
	}
	// The boot loader follows boot.loader (rfcs/0008 §Reboots).
	for loader, enabled := range map[string][]string{"systemd-boot": {"systemd-boot", "grub"}, "grub": {"grub"}} {
		c := maps.Clone(config)
		l := map[string]any{}
		for _, name := range enabled {
			l[name] = map[string]any{"enable": true}
		}
		c["boot"] = map[string]any{"loader": l}
		e := evalModule(t, "agent.nix", with(map[string]any{"trustFile": "/etc/nixfleet/trust.json"}), c)
		if _, got, _ := configFile(t, e, e.unit(t, "nixfleet-agent"), agentBin, "", t.TempDir()); got["boot-loader"] != loader {
			t.Errorf("with boot.loader %v enabled, boot-loader is %v, want %s", enabled, got["boot-loader"], loader)
		}
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

// TestAgentModuleHostname: the agent checks in under settings.hostname,
// which defaults to networking.hostName. An empty name
// (networking.hostName left to DHCP) fails an assertion; "nixos",
// NixOS's default that every unnamed host shares, is warned about; the
// setting wins over networking.hostName either way.
func TestAgentModuleHostname(t *testing.T) {
	t.Parallel()
	requireNix(t)
	for _, tc := range []struct {
		name, hostName string
		hostname       any // the setting; nil leaves it unset
		want           string
		assertion      string
		warning        string
	}{
		{name: "networking.hostName", hostName: "web-01", want: "web-01"},
		{name: "setting wins", hostName: "web-01", hostname: "web-01.fleet", want: "web-01.fleet"},
		{name: "empty networking.hostName", hostName: "", want: "", assertion: "hostname is empty"},
		{name: "empty setting", hostName: "web-01", hostname: "", want: "", assertion: "hostname is empty"},
		{name: "networking.hostName default", hostName: "nixos", want: "nixos", warning: `hostname is "nixos", networking.hostName's default`},
		{name: "setting over the default", hostName: "nixos", hostname: "web-01", want: "web-01"},
		{name: "setting nixos", hostName: "web-01", hostname: "nixos", want: "nixos", warning: `hostname is "nixos"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := map[string]any{"cp": "https://cp.example.org:8443"}
			if tc.hostname != nil {
				s["hostname"] = tc.hostname
			}
			e := evalModule(t, "agent.nix", map[string]any{
				"enable": true, "package": map[string]string{"outPath": agentPackage},
				"settings": s, "trustFile": "/etc/nixfleet/trust.json",
			}, agentConfig(tc.hostName, true))
			if _, got, _ := configFile(t, e, e.unit(t, "nixfleet-agent"), agentBin, "", t.TempDir()); got["hostname"] != tc.want {
				t.Errorf("hostname %q, want %q", got["hostname"], tc.want)
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

// TestAgentModuleHardening: the agent's unit is sandboxed as far as
// what the agent runs itself allows (rfcs/0008 §Sandbox): /usr and /etc
// read-only but /nix, the boot loader's /boot and /efi, and the metrics
// file's directory writable; home directories read-only, Nix's cache
// moved to the unit's CacheDirectory; a mount namespace and @mount for
// Nix's remount of the store; devices, kernel tunables and most
// capabilities left to the boot loader's installer. systemd's own judge
// rates the rendered unit at most 5.0 of 10 (it was 9.6 without the
// sandbox).
func TestAgentModuleHardening(t *testing.T) {
	t.Parallel()
	requireNix(t)
	analyze := requireAnalyze(t)
	e := evalModule(t, "agent.nix", map[string]any{
		"enable": true, "package": map[string]string{"outPath": agentPackage}, "trustFile": "/etc/nixfleet/trust.json",
		"settings": map[string]any{"cp": "https://cp.example.org:8443", "metrics-file": "/var/lib/node-exporter %h/nixfleet-agent.prom"},
	}, agentConfig("web-01", true))
	u := e.unit(t, "nixfleet-agent")
	for key, want := range map[string]any{"ProtectSystem": "full", "ProtectHome": "read-only", "PrivateTmp": true,
		"CapabilityBoundingSet": "~CAP_BLOCK_SUSPEND CAP_BPF CAP_LEASE CAP_MAC_ADMIN CAP_MAC_OVERRIDE CAP_SYS_BOOT CAP_SYS_PACCT CAP_SYS_TTY_CONFIG CAP_WAKE_ALARM",
		"CacheDirectory":        "nixfleet-agent", "RestrictNamespaces": "mnt", "NoNewPrivileges": true, "MemoryDenyWriteExecute": true,
		"SystemCallArchitectures": "native", "UMask": "0022"} {
		if got := u.ServiceConfig[key]; got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
	for _, key := range []string{"PrivateDevices", "ProtectKernelTunables", "PrivateUsers", "User"} {
		if got, ok := u.ServiceConfig[key]; ok {
			t.Errorf("%s = %v: the boot loader's installer or Nix needs it unset", key, got)
		}
	}
	if got := fmt.Sprint(u.ServiceConfig["Environment"]); got != "[XDG_CACHE_HOME=/var/cache/nixfleet-agent]" {
		t.Errorf("Environment = %s, want Nix's cache in the CacheDirectory", got)
	}
	if got := fmt.Sprint(u.ServiceConfig["SystemCallFilter"]); got != "[@system-service @mount]" {
		t.Errorf("SystemCallFilter = %s", got)
	}
	rw, optional := unitPaths(t, u.ServiceConfig["ReadWritePaths"])
	if diff := cmp.Diff([]string{"/boot", "/efi", "/var/lib/node-exporter %h"}, rw); diff != "" {
		t.Errorf("ReadWritePaths (-want +got):\n%s", diff)
	}
	if slices.Contains(optional, false) {
		t.Errorf("ReadWritePaths %v: a missing directory would fail the unit's namespace", u.ServiceConfig["ReadWritePaths"])
	}

	score, level, out := analyzeSecurity(t, analyze, "nixfleet-agent", u)
	t.Logf("systemd-analyze security: %.1f %s", score, level)
	if score > 5.0 {
		t.Errorf("exposure %.1f %s, want at most 5.0:\n%s", score, level, out)
	}
}

// TestControlPlaneModule: services.nixfleet-control-plane runs
// `nixfleet-cp serve --config FILE` as its own user, FILE the TOML of
// its settings and of the files it writes, with flags for the secrets
// alone, systemd credentials: started with that file and those
// credentials (the files and directories in it moved to the test's by
// flags), the real control plane loads the trust roots and the
// operators, opens its SQLite store and the repository, and serves TLS.
func TestControlPlaneModule(t *testing.T) {
	t.Parallel()
	requireNix(t)
	dir, repo, certs := cpFixture(t)
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
	cpSettings := map[string]any{
		"listen": "127.0.0.1:0", "replica-id": "cp-1", "tick-interval": "15s", "poll-interval": "2s",
		"watch-ref": []string{"refs/heads/main", "refs/heads/release/*"}, "retention": "1440h",
		"log-level": "debug", "log-format": "text",
		"prometheus-url": "https://prometheus.example.org", "prometheus-ca": certs.CertFile, "prometheus-timeout": "5s",
		"prometheus-header": []string{"X-Scope-OrgID: team-a"}, "prometheus-proxy-url": "http://proxy.example.org:3128",
		// Flags no option types.
		"confirm-window": "10m", "partial-visibility-pct": 50, "rate-limit-per-host": 2.5,
	}
	settings := map[string]any{
		"enable":     true,
		"package":    map[string]string{"outPath": cpPackage},
		"settings":   cpSettings,
		"repository": repo,
		"trust":      map[string]any{"ciReleaseKey": map[string]any{"current": ciKey(t), "rejectBefore": "2026-01-01T00:00:00Z"}},
		"operators": []map[string]any{
			{"name": "alice", "key": alice, "role": "operator"},
			{"name": "bob", "key": bob, "role": "viewer"},
			{"name": "carol", "key": ciKey(t), "role": "approver"},
		},
		"tls":               map[string]any{"certFile": certs.CertFile, "keyFile": certs.KeyFile},
		"webhookSecretFile": secret,
		"prometheus":        map[string]any{"bearerTokenFile": promToken},
		"environmentFile":   "/run/secrets/nixfleet-cp.env",
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
	creds, loaded := loadCredentials(t, u, dir)
	if !slices.Equal(loaded, []string{"tls-key", "webhook-secret", "prometheus-token"}) {
		t.Errorf("credentials %q, want tls-key, webhook-secret and prometheus-token", loaded)
	}
	cred := func(name string) []string { return []string{filepath.Join(creds, name)} }

	file, got, flags := configFile(t, e, u, cpBin, creds, dir)
	wantFlags := map[string][]string{"tls-key": cred("tls-key"), "webhook-secret-file": cred("webhook-secret"),
		"prometheus-bearer-token-file": cred("prometheus-token")}
	if diff := cmp.Diff(wantFlags, flags); diff != "" {
		t.Errorf("flags besides --config: the credentials (-want +got):\n%s", diff)
	}
	want := map[string]any{
		"listen": "127.0.0.1:0", "state-dir": "/var/lib/nixfleet-cp", "repo": repo,
		"trust": got["trust"], "operators": got["operators"], "log-level": "debug", "log-format": "text",
		"tls-cert": certs.CertFile, "insecure-dev": false, "replica-id": "cp-1",
		"tick-interval": "15s", "poll-interval": "2s", "retention": "1440h",
		"watch-ref":      []any{"refs/heads/main", "refs/heads/release/*"},
		"prometheus-url": "https://prometheus.example.org", "prometheus-ca": certs.CertFile, "prometheus-timeout": "5s",
		"prometheus-header": []any{"X-Scope-OrgID: team-a"}, "prometheus-proxy-url": "http://proxy.example.org:3128",
		"confirm-window": "10m", "partial-visibility-pct": int64(50), "rate-limit-per-host": 2.5,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the --config file (-want +got):\n%s", diff)
	}
	if _, err := trust.ParseRoots([]byte(e.Files["trust"])); err != nil {
		t.Errorf("the trust.json the module writes: %v\n%s", err, e.Files["trust"])
	}
	ops := storeFile(t, dir, got["operators"].(string), e.Files["operators"])
	if got, err := controlplane.LoadOperators(ops); err != nil || len(got) != 3 {
		t.Errorf("the operators file the module writes: %v, %v\n%s", got, err, e.Files["operators"])
	}
	if err := os.Mkdir(filepath.Join(dir, "state"), 0o750); err != nil {
		t.Fatal(err)
	}
	args := append([]string{binary(t, "nixfleet-cp"), "serve", "--config", file,
		"--trust", storeFile(t, dir, got["trust"].(string), e.Files["trust"]), "--operators", ops,
		"--state-dir", filepath.Join(dir, "state")}, execStart(t, u, creds)[4:]...)
	runUntil(t, args, `level=INFO msg="control plane serving"`)

	// Basic auth instead of the bearer token: the password is the
	// credential prometheus-password; both at once, a password without a
	// user, or an Authorization header fail assertions.
	promPassword := filepath.Join(dir, "prometheus-password")
	if err := os.WriteFile(promPassword, []byte("pa55word\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	basic := maps.Clone(cpSettings)
	basic["prometheus-basic-auth-user"] = "nixfleet"
	delete(basic, "prometheus-header")
	settings["settings"] = basic
	settings["prometheus"] = map[string]any{"basicAuth": map[string]any{"passwordFile": promPassword}}
	e = evalModule(t, "control-plane.nix", settings, map[string]any{})
	if len(e.FailedAssertions)+len(e.Warnings) > 0 {
		t.Errorf("basic auth: assertions %q, warnings %q", e.FailedAssertions, e.Warnings)
	}
	u = e.unit(t, "nixfleet-control-plane")
	if got := fmt.Sprint(u.ServiceConfig["LoadCredential"]); got != "[tls-key:"+certs.KeyFile+" webhook-secret:"+secret+" prometheus-password:"+promPassword+"]" {
		t.Errorf("basic auth: LoadCredential = %s, want tls-key, webhook-secret and prometheus-password", got)
	}
	_, got, flags = configFile(t, e, u, cpBin, creds, t.TempDir())
	if got["prometheus-basic-auth-user"] != "nixfleet" || got["prometheus-header"] == nil || len(got["prometheus-header"].([]any)) != 0 {
		t.Errorf("basic auth: the --config file has user %v, headers %v", got["prometheus-basic-auth-user"], got["prometheus-header"])
	}
	if diff := cmp.Diff(cred("prometheus-password"), flags["prometheus-basic-auth-password-file"]); diff != "" || flags["prometheus-bearer-token-file"] != nil {
		t.Errorf("basic auth: flags %q", flags)
	}
	// Without a Prometheus, no credential of its.
	delete(basic, "prometheus-url")
	if e := evalModule(t, "control-plane.nix", settings, map[string]any{}); strings.Contains(fmt.Sprint(e.unit(t, "nixfleet-control-plane").ServiceConfig["LoadCredential"]), "prometheus") {
		t.Errorf("without prometheus-url: LoadCredential = %v", e.unit(t, "nixfleet-control-plane").ServiceConfig["LoadCredential"])
	}
	basic["prometheus-url"] = "https://p"
	for name, tc := range map[string]struct{ prometheus, settings map[string]any }{
		"basic auth and a bearer token": {map[string]any{"basicAuth": map[string]any{"passwordFile": promPassword}, "bearerTokenFile": promToken},
			map[string]any{"prometheus-basic-auth-user": "u"}},
		"a password without a user": {map[string]any{"basicAuth": map[string]any{"passwordFile": promPassword}}, map[string]any{"prometheus-basic-auth-user": nil}},
		"an Authorization header":   {map[string]any{}, map[string]any{"prometheus-basic-auth-user": nil, "prometheus-header": []string{" authorization : Basic eA=="}}},
	} {
		s := maps.Clone(basic)
		for k, v := range tc.settings {
			if v == nil {
				delete(s, k)
			} else {
				s[k] = v
			}
		}
		settings["settings"], settings["prometheus"] = s, tc.prometheus
		if e := evalModule(t, "control-plane.nix", settings, map[string]any{}); len(e.FailedAssertions) != 1 || !strings.Contains(e.FailedAssertions[0], "prometheus") {
			t.Errorf("%s: failed assertions %q, want one about prometheus", name, e.FailedAssertions)
		}
	}
}

// loadCredentials does what systemd does with a unit's LoadCredential:
// it copies each file into a credentials directory under dir, which it
// returns with the credentials' names, in order.
func loadCredentials(t *testing.T, u unit, dir string) (creds string, names []string) {
	t.Helper()
	creds = filepath.Join(dir, "credentials")
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	list, _ := u.ServiceConfig["LoadCredential"].([]any)
	for _, c := range list {
		name, src, _ := strings.Cut(c.(string), ":")
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(creds, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return creds, names
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

// TestControlPlaneModulePostgreSQL: postgresql.enable sets up a local
// PostgreSQL with a database owned by the service's user and points db
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
	s["settings"] = map[string]any{"listen": "0.0.0.0:8443"}
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
	_, got, _ := configFile(t, e, u, cpBin, "", t.TempDir())
	db, _ := got["db"].(string)
	pc, err := pgconn.ParseConfig(db)
	if err != nil {
		t.Fatalf("db %q: %v", db, err)
	}
	if pc.Host != "/run/postgresql" || pc.Database != "nixfleet-cp" || pc.User != u.ServiceConfig["User"] {
		t.Errorf("db %q: host %q, database %q, user %q", db, pc.Host, pc.Database, pc.User)
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
		{"insecure dev", func(s map[string]any) { delete(s, "tls"); s["settings"] = map[string]any{"insecure-dev": true} }, nil},
		{"two databases", func(s map[string]any) {
			s["postgresql"] = map[string]any{"enable": true}
			s["settings"] = map[string]any{"db": "postgres://db/x"}
		}, []string{"postgresql.enable sets the database"}},
		{"no trust", func(s map[string]any) { delete(s, "trustFile") }, []string{"trust.ciReleaseKey.current"}},
		{"no port", func(s map[string]any) { s["settings"] = map[string]any{"listen": "localhost"} }, []string{"listen must be host:port"}},
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
			if _, got, _ := configFile(t, e, u, cpBin, "", t.TempDir()); got["repo"] != tc.repository {
				t.Errorf("repo %q", got["repo"])
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
// types, so a mistyped option, typed setting or freeform setting (null is
// no TOML value) is refused, naming the option.
func TestModuleOptionTypes(t *testing.T) {
	t.Parallel()
	requireNix(t)
	base := map[string]map[string]any{
		"agent.nix": {
			"enable": true, "package": map[string]string{"outPath": agentPackage},
			"settings": map[string]any{"cp": "https://cp:8443"}, "trustFile": "/etc/trust.json",
		},
		"control-plane.nix": {
			"enable": true, "package": map[string]string{"outPath": cpPackage},
			"repository": "/srv/fleet.git", "trustFile": "/etc/trust.json",
		},
	}
	for _, tc := range []struct {
		module, option string
		value          any
		want           string
	}{
		{"agent.nix", "settings", map[string]any{"wait": "soon"}, "services.nixfleet-agent.settings.wait"},
		{"agent.nix", "probes", []map[string]any{{"name": "a b", "type": "http"}}, "services.nixfleet-agent.probes.*.name"},
		{"agent.nix", "settings", map[string]any{"log-level": "loud"}, "services.nixfleet-agent.settings.log-level"},
		{"agent.nix", "settings", map[string]any{"metrics-file": "/var/lib/node-exporter/nixfleet-agent.txt"}, "services.nixfleet-agent.settings.metrics-file"},
		{"agent.nix", "settings", map[string]any{"detach": nil}, "services.nixfleet-agent.settings: {\"detach\":null} is not a TOML value"},
		{"control-plane.nix", "settings", map[string]any{"log-format": "logfmt"}, "services.nixfleet-control-plane.settings.log-format"},
		{"control-plane.nix", "settings", map[string]any{"confirm-window": []any{"10m", nil}}, "services.nixfleet-control-plane.settings: "},
		{"control-plane.nix", "operators", []map[string]any{{"name": "x", "key": "k", "role": "admin"}}, "services.nixfleet-control-plane.operators.*.role"},
		{"control-plane.nix", "listn", "0.0.0.0:1", "services.nixfleet-control-plane.listn does not exist"},
		{"control-plane.nix", "notifications", map[string]any{"webhooks": []map[string]any{{"name": "ops", "url": "https://h/x", "events": []string{"halt"}}}},
			"services.nixfleet-control-plane.notifications.webhooks.*.events"},
		{"control-plane.nix", "notifications", map[string]any{"webhooks": []map[string]any{{"name": "Ops", "url": "https://h/x"}}},
			"services.nixfleet-control-plane.notifications.webhooks.*.name"},
	} {
		t.Run(tc.option, func(t *testing.T) {
			t.Parallel()
			settings := maps.Clone(base[tc.module])
			if v, ok := tc.value.(map[string]any); ok && tc.option == "settings" {
				s, _ := settings["settings"].(map[string]any)
				s = maps.Clone(s)
				if s == nil {
					s = map[string]any{}
				}
				maps.Copy(s, v)
				settings["settings"] = s
			} else {
				settings[tc.option] = tc.value
			}
			s, _ := json.Marshal(settings)
			c, _ := json.Marshal(agentConfig("h", true))
			r := runNix(t, "nix-instantiate", "--eval", "--strict", "--json", "nix/tests/modules/eval.nix",
				"--arg", "module", "./nix/modules/"+tc.module, "--argstr", "settingsJSON", string(s), "--argstr", "configJSON", string(c), "-A", "config")
			if r.err == nil || !strings.Contains(string(r.stderr), "stub: ") || !strings.Contains(string(r.stderr), tc.want) {
				t.Errorf("%s: %v, want an error about %s\n%s", s, r.err, tc.want, r.stderr)
			}
		})
	}
}

// TestModuleSettings: settings holds the daemons' flags by name, typed
// or freeform, TOML tables included, and the real daemon reads the file:
// the control plane started with freeform [[notifications.webhook]]
// tables sends to their sinks, and refuses a key it does not know (exit
// 2), which evaluation lets through. The keys a module sets itself are
// refused in settings, as is an empty detach (which would run the switch
// in the agent's sandbox).
func TestModuleSettings(t *testing.T) {
	t.Parallel()
	requireNix(t)
	dir, repo, certs := cpFixture(t)
	cp := func(settings map[string]any) map[string]any {
		return map[string]any{
			"enable": true, "package": map[string]string{"outPath": cpPackage}, "repository": repo,
			"trust":    map[string]any{"ciReleaseKey": map[string]any{"current": ciKey(t)}},
			"tls":      map[string]any{"certFile": certs.CertFile, "keyFile": certs.KeyFile},
			"settings": settings,
		}
	}
	settings := map[string]any{
		"listen": "127.0.0.1:0", "log-format": "json", "debounce": "250ms", "prefetch-concurrency": 0,
		"notifications": map[string]any{"webhook": []map[string]any{
			{"name": "chat", "url": "http://127.0.0.1:1/hooks/x", "format": "slack", "events": []string{"halted"}},
			{"name": "ops", "url": "http://127.0.0.1:1/hooks/y"},
		}},
	}
	e := evalModule(t, "control-plane.nix", cp(settings), map[string]any{})
	if len(e.FailedAssertions)+len(e.Warnings) > 0 {
		t.Errorf("assertions %q, warnings %q", e.FailedAssertions, e.Warnings)
	}
	u := e.unit(t, "nixfleet-control-plane")
	creds, _ := loadCredentials(t, u, dir)
	file, got, _ := configFile(t, e, u, cpBin, creds, dir)
	want := map[string]any{"webhook": []any{
		map[string]any{"name": "chat", "url": "http://127.0.0.1:1/hooks/x", "format": "slack", "events": []any{"halted"}},
		map[string]any{"name": "ops", "url": "http://127.0.0.1:1/hooks/y"},
	}}
	if diff := cmp.Diff(want, got["notifications"]); diff != "" {
		t.Errorf("notifications in the --config file (-want +got):\n%s", diff)
	}
	if got["debounce"] != "250ms" || got["prefetch-concurrency"] != int64(0) || got["listen"] != "127.0.0.1:0" {
		t.Errorf("the --config file: %v", got)
	}
	if err := os.Mkdir(filepath.Join(dir, "state"), 0o750); err != nil {
		t.Fatal(err)
	}
	args := append([]string{binary(t, "nixfleet-cp"), "serve", "--config", file,
		"--trust", storeFile(t, dir, got["trust"].(string), e.Files["trust"]), "--state-dir", filepath.Join(dir, "state")},
		execStart(t, u, creds)[4:]...)
	runUntil(t, args, `"msg":"sending notifications","sink":"chat"`)

	// A key the control plane does not know passes evaluation (freeform),
	// and the control plane refuses it.
	settings["confirm-windw"] = "10m"
	e = evalModule(t, "control-plane.nix", cp(settings), map[string]any{})
	u = e.unit(t, "nixfleet-control-plane")
	other := t.TempDir()
	file, _, _ = configFile(t, e, u, cpBin, creds, other)
	code, stderr := exitOf(t, binary(t, "nixfleet-cp"), "serve", "--config", file)
	if code != 2 || !strings.Contains(stderr, `unknown key "confirm-windw"`) {
		t.Errorf("nixfleet-cp with an unknown key: exit %d, want 2 and the key\n%s", code, stderr)
	}

	for _, tc := range []struct {
		module   string
		settings map[string]any
		want     string
	}{
		{"agent.nix", map[string]any{"state-dir": "/srv/agent"}, "settings cannot hold `state-dir`"},
		{"agent.nix", map[string]any{"trust": "/etc/trust.json"}, "settings cannot hold `trust`: set trust or trustFile"},
		{"agent.nix", map[string]any{"probes": "/etc/probes.json"}, "settings cannot hold `probes`"},
		{"agent.nix", map[string]any{"config": "/etc/agent.toml"}, "settings cannot hold `config`"},
		{"agent.nix", map[string]any{"detach": ""}, "settings.detach is empty"},
		{"control-plane.nix", map[string]any{"tls-key": "/k.pem"}, "settings cannot hold `tls-key`: set tls.keyFile (a systemd credential)"},
		{"control-plane.nix", map[string]any{"repo": "/srv/other.git"}, "settings cannot hold `repo`: set repository"},
		{"control-plane.nix", map[string]any{"prometheus-bearer-token-file": "/t"}, "settings cannot hold `prometheus-bearer-token-file`"},
	} {
		var s map[string]any
		if tc.module == "agent.nix" {
			s = map[string]any{"enable": true, "package": map[string]string{"outPath": agentPackage}, "trustFile": "/etc/trust.json",
				"settings": maps.Clone(tc.settings)}
			s["settings"].(map[string]any)["cp"] = "https://cp:8443"
		} else {
			s = cp(tc.settings)
		}
		e := evalModule(t, tc.module, s, agentConfig("h", true))
		if len(e.FailedAssertions) != 1 || !strings.Contains(e.FailedAssertions[0], tc.want) {
			t.Errorf("%s %v: failed assertions %q, want one saying %q", tc.module, tc.settings, e.FailedAssertions, tc.want)
		}
	}
}

// TestModuleRenamedOptions: the options that became settings still
// work, as nixpkgs renames options (mkRenamedOptionModule, and
// mkChangedOptionModule for prometheus.headers): the old definitions
// write the same --config file as the new ones, with a warning each;
// extraArgs is removed, and a definition of it fails an assertion saying
// what to do instead.
func TestModuleRenamedOptions(t *testing.T) {
	t.Parallel()
	requireNix(t)
	for _, tc := range []struct {
		module    string
		base      map[string]any
		old, new  map[string]any
		warnings  int
		extraArgs string
	}{
		{
			module: "agent.nix",
			base:   map[string]any{"enable": true, "package": map[string]string{"outPath": agentPackage}, "trustFile": "/etc/trust.json"},
			old: map[string]any{"controlPlane": map[string]any{"url": "https://cp:8443", "caFile": "/etc/ca.pem"}, "hostname": "web-02",
				"hostKeyFile": "/etc/key", "substituters": []string{"https://c"}, "checkinWait": "20s", "quarantine": "1h",
				"metricsFile": "/var/lib/m/a.prom", "logLevel": "warn", "logFormat": "text"},
			new: map[string]any{"settings": map[string]any{"cp": "https://cp:8443", "cp-ca": "/etc/ca.pem", "hostname": "web-02",
				"host-key": "/etc/key", "substituter": []string{"https://c"}, "wait": "20s", "quarantine": "1h",
				"metrics-file": "/var/lib/m/a.prom", "log-level": "warn", "log-format": "text"}},
			warnings:  10,
			extraArgs: "`--quarantine 2h` is `settings.quarantine = \"2h\"`",
		},
		{
			module: "control-plane.nix",
			base: map[string]any{"enable": true, "package": map[string]string{"outPath": cpPackage}, "repository": "/srv/fleet.git",
				"trustFile": "/etc/trust.json", "tls": map[string]any{"certFile": "/c.pem", "keyFile": "/k.pem"}},
			old: map[string]any{"listen": "0.0.0.0:8443", "database": map[string]any{"url": "postgres://db/x"}, "replicaId": "cp-2",
				"tickInterval": "10s", "pollInterval": "1s", "watchRefs": []string{}, "retention": "24h", "logLevel": "warn", "logFormat": "text",
				"prometheus": map[string]any{"url": "https://p", "caFile": "/ca.pem", "basicAuth": map[string]any{"user": "u"},
					"proxyUrl": "http://proxy:3128", "timeout": "3s", "headers": map[string]string{"X-Scope-OrgID": "a"}}},
			new: map[string]any{"settings": map[string]any{"listen": "0.0.0.0:8443", "db": "postgres://db/x", "replica-id": "cp-2",
				"tick-interval": "10s", "poll-interval": "1s", "watch-ref": []string{}, "retention": "24h", "log-level": "warn", "log-format": "text",
				"prometheus-url": "https://p", "prometheus-ca": "/ca.pem", "prometheus-basic-auth-user": "u",
				"prometheus-proxy-url": "http://proxy:3128", "prometheus-timeout": "3s", "prometheus-header": []string{"X-Scope-OrgID: a"}}},
			warnings:  15,
			extraArgs: "`--confirm-window 10m` is `settings.confirm-window = \"10m\"`",
		},
	} {
		t.Run(tc.module, func(t *testing.T) {
			t.Parallel()
			with := func(extra map[string]any) map[string]any {
				m := maps.Clone(tc.base)
				maps.Copy(m, extra)
				return m
			}
			old := evalModule(t, tc.module, with(tc.old), agentConfig("h", true))
			cur := evalModule(t, tc.module, with(tc.new), agentConfig("h", true))
			if len(old.FailedAssertions)+len(cur.FailedAssertions)+len(cur.Warnings) > 0 {
				t.Errorf("assertions %q and %q, warnings %q", old.FailedAssertions, cur.FailedAssertions, cur.Warnings)
			}
			if d := cmp.Diff(cur.Files["config"], old.Files["config"]); d != "" {
				t.Errorf("the --config file of the old options (-new +old):\n%s", d)
			}
			if len(old.Warnings) != tc.warnings {
				t.Errorf("%d warnings, want %d: %q", len(old.Warnings), tc.warnings, old.Warnings)
			}
			for _, w := range old.Warnings {
				if !strings.Contains(w, "has been renamed to `services.") && !strings.Contains(w, "has been changed to `services.") {
					t.Errorf("warning %q", w)
				}
			}
			if tc.module == "control-plane.nix" {
				var got map[string]any
				if err := toml.Unmarshal([]byte(old.Files["config"]), &got); err != nil || fmt.Sprint(got["watch-ref"]) != "[none]" {
					t.Errorf("watchRefs = [ ]: watch-ref %v (%v), want none", got["watch-ref"], err)
				}
			}
			bad := evalModule(t, tc.module, with(map[string]any{"settings": tc.new["settings"], "extraArgs": []string{"--x"}}), agentConfig("h", true))
			if len(bad.FailedAssertions) != 1 || !strings.Contains(bad.FailedAssertions[0], ".extraArgs' in") ||
				!strings.Contains(bad.FailedAssertions[0], "no longer has any effect") || !strings.Contains(bad.FailedAssertions[0], tc.extraArgs) {
				t.Errorf("extraArgs: failed assertions %q", bad.FailedAssertions)
			}
		})
	}
}

// TestControlPlaneModuleNotifications: notifications.webhooks become the
// [[notifications.webhook]] tables of the --config file, each
// secretFile a credential notify-<name> the file names through
// ${CREDENTIALS_DIRECTORY}: started with that file and credentials
// directory, the real control plane reads them and sends; a name used
// twice, or settings.notifications beside them, fails an assertion.
func TestControlPlaneModuleNotifications(t *testing.T) {
	t.Parallel()
	requireNix(t)
	dir, repo, certs := cpFixture(t)
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
			"settings": map[string]any{"listen": "127.0.0.1:0"}, "repository": repo,
			"trust":         map[string]any{"ciReleaseKey": map[string]any{"current": ciKey(t)}},
			"tls":           map[string]any{"certFile": certs.CertFile, "keyFile": certs.KeyFile},
			"notifications": map[string]any{"webhooks": webhooks},
		}
		maps.Copy(s, extra)
		return s
	}
	e := evalModule(t, "control-plane.nix", settings(nil), map[string]any{})
	if len(e.FailedAssertions)+len(e.Warnings) > 0 {
		t.Errorf("assertions %q, warnings %q", e.FailedAssertions, e.Warnings)
	}
	u := e.unit(t, "nixfleet-control-plane")
	creds, loaded := loadCredentials(t, u, dir)
	if !slices.Equal(loaded, []string{"tls-key", "notify-ops"}) {
		t.Errorf("credentials %q, want tls-key and notify-ops", loaded)
	}
	file, got, _ := configFile(t, e, u, cpBin, creds, dir)
	want := map[string]any{"webhook": []any{
		map[string]any{"name": "ops", "url": "https://hooks.example.org/nixfleet", "format": "json", "events": []any{"halted", "release_refused"},
			"channels": []any{"prod"}, "secret-file": "${CREDENTIALS_DIRECTORY}/notify-ops", "timeout": "5s",
			"min-backoff": "2s", "max-backoff": "1m", "ca": certs.CertFile},
		map[string]any{"name": "chat", "url": "http://127.0.0.1:1/hooks/x", "format": "slack"},
	}}
	if d := cmp.Diff(want, got["notifications"]); d != "" {
		t.Errorf("notifications in the --config file (-want +got):\n%s", d)
	}
	if err := os.Mkdir(filepath.Join(dir, "state"), 0o750); err != nil {
		t.Fatal(err)
	}
	args := append([]string{binary(t, "nixfleet-cp"), "serve", "--config", file,
		"--trust", storeFile(t, dir, got["trust"].(string), e.Files["trust"]), "--state-dir", filepath.Join(dir, "state")},
		execStart(t, u, creds)[4:]...)
	// The replica leads, and starts sending to its sinks.
	runUntilEnv(t, args, []string{"CREDENTIALS_DIRECTORY=" + creds}, `"msg":"sending notifications","sink":"ops"`)

	without := evalModule(t, "control-plane.nix", settings(map[string]any{"notifications": map[string]any{"webhooks": []any{}}}), map[string]any{})
	if _, got, _ := configFile(t, without, without.unit(t, "nixfleet-control-plane"), cpBin, "", t.TempDir()); got["notifications"] != nil {
		t.Errorf("notifications %v without webhooks", got["notifications"])
	}

	for name, extra := range map[string]map[string]any{
		"a name twice": {"notifications": map[string]any{"webhooks": []map[string]any{webhooks[1], webhooks[1]}}},
		"settings.notifications beside them": {"settings": map[string]any{"notifications": map[string]any{
			"webhook": []map[string]any{{"name": "x", "url": "https://h/x"}}}}},
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
	analyze := requireAnalyze(t)
	for _, listen := range []string{"0.0.0.0:8443", "0.0.0.0:443"} {
		t.Run(listen, func(t *testing.T) {
			t.Parallel()
			e := evalModule(t, "control-plane.nix", map[string]any{
				"enable": true, "package": map[string]string{"outPath": cpPackage}, "settings": map[string]any{"listen": listen},
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
			score, level, out := analyzeSecurity(t, analyze, "nixfleet-control-plane", u)
			t.Logf("systemd-analyze security, listening on %s: %.1f %s", listen, score, level)
			if score > 2.0 {
				t.Errorf("exposure %.1f %s, want at most 2.0:\n%s", score, level, out)
			}
		})
	}
}

// requireAnalyze finds systemd-analyze.
func requireAnalyze(t *testing.T) string {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is not installed: run .ci/run as root, which installs Debian's systemd package")
	}
	return analyze
}

// analyzeSecurity renders a unit, as NixOS writes it, to name.service and
// rates it with systemd-analyze security offline: the overall exposure
// (0 to 10), its level, and the whole report.
func analyzeSecurity(t *testing.T, analyze, name string, u unit) (score float64, level string, out []byte) {
	t.Helper()
	file := filepath.Join(t.TempDir(), name+".service")
	if err := os.WriteFile(file, []byte(renderUnit(t, name, u)), 0o644); err != nil {
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
	score, err = strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return score, string(m[2]), out
}

// renderUnit writes a unit's [Unit] and [Service] sections as NixOS does
// (attrsToSection in nixos/lib/systemd-lib.nix): booleans as true/false,
// a list as one assignment per element (none for an empty one), anything
// else as it is.
func renderUnit(t *testing.T, description string, u unit) string {
	t.Helper()
	var b strings.Builder
	section := func(name string, cfg map[string]any) {
		fmt.Fprintf(&b, "[%s]\n", name)
		for _, k := range sortedKeys(cfg) {
			switch v := cfg[k].(type) {
			case bool:
				fmt.Fprintf(&b, "%s=%t\n", k, v)
			case []any:
				for _, w := range v {
					fmt.Fprintf(&b, "%s=%v\n", k, w)
				}
			case float64:
				fmt.Fprintf(&b, "%s=%s\n", k, strconv.FormatFloat(v, 'f', -1, 64))
			default:
				fmt.Fprintf(&b, "%s=%v\n", k, v)
			}
		}
	}
	section("Unit", map[string]any{"Description": description})
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
