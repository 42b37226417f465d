package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/internal/testkit/logtest"
	"github.com/nixfleet/nixfleet/internal/testkit/realfleet"
	"github.com/nixfleet/nixfleet/proto"
)

// TestConfigSources: a setting comes from the flag, else the environment
// (NIXFLEET_AGENT_<FLAG>), else the --config file (TOML, keys are flag
// names), like the control plane's; a bad file is a usage error naming it.
// Shown with --host-key, the first file the agent reads: the error names
// the one it was given.
func TestConfigSources(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	agent := func(args ...string) (int, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"nixfleet-agent", "run"}, args...), &stdout, &stderr)
		return code, stderr.String()
	}
	file := write("agent.toml", `# the agent's settings
cp = "https://cp.example.org:8443"
host-key = "/from/the/file"
wait = "10s"
substituter = ["https://cache.example.org"]
`)

	// Without the file, --cp is missing.
	if code, out := agent(); code != 2 || !strings.Contains(out, "--cp is required") {
		t.Fatalf("no config: exit %d, %s", code, out)
	}
	if code, out := agent("--config", file); code != 1 || !strings.Contains(out, "open /from/the/file:") {
		t.Errorf("the file: exit %d, %s", code, out)
	}
	t.Setenv("NIXFLEET_AGENT_HOST_KEY", "/from/the/env")
	if code, out := agent("--config", file); code != 1 || !strings.Contains(out, "open /from/the/env:") {
		t.Errorf("the environment over the file: exit %d, %s", code, out)
	}
	if code, out := agent("--config", file, "--host-key", "/from/the/flag"); code != 1 || !strings.Contains(out, "open /from/the/flag:") {
		t.Errorf("the flag over the environment: exit %d, %s", code, out)
	}
	t.Setenv("NIXFLEET_AGENT_CONFIG", file)
	if code, out := agent(); code != 1 || !strings.Contains(out, "open /from/the/env:") {
		t.Errorf("the file from NIXFLEET_AGENT_CONFIG: exit %d, %s", code, out)
	}
	os.Unsetenv("NIXFLEET_AGENT_CONFIG") // t.Setenv restores both
	os.Unsetenv("NIXFLEET_AGENT_HOST_KEY")

	for name, tc := range map[string]struct{ body, msg string }{
		"unknown key":    {"cp = \"https://x\"\ncp-url = \"https://y\"\n", `:2: unknown key "cp-url" (the keys are the flags of nixfleet-agent run: see --help)`},
		"malformed":      {"cp = https://x\n", `:1: `},
		"not a duration": {"wait = 30\n", `:1: "wait" is an integer; want a duration string like "30s"`},
		"not a list":     {"substituter = \"https://cache\"\n", `:1: "substituter" is a string; want an array of strings`},
		"bad log level":  {"cp = \"https://x\"\nlog-level = \"loud\"\n", ``},
	} {
		path := write("bad.toml", tc.body)
		code, out := agent("--config", path)
		want := "nixfleet-agent: bad config file: " + path + tc.msg
		if name == "bad log level" {
			want = "nixfleet-agent: --log-level: "
		}
		if code != 2 || !strings.HasPrefix(out, want) {
			t.Errorf("%s: exit %d (want 2), output %q, want %q", name, code, out, want)
		}
	}
	if code, out := agent("--config", filepath.Join(dir, "missing.toml")); code != 2 || !strings.Contains(out, "missing.toml: no such file") {
		t.Errorf("a missing file: exit %d, %s", code, out)
	}
}

// TestLogFormat: --log-format text writes key=value lines (level=INFO
// msg=…) for the journal, json (the default) JSON objects; like every
// setting it comes from the flag, NIXFLEET_AGENT_LOG_FORMAT or the
// --config file; another value is a usage error naming the flag and the
// values it takes. Shown with the agent's "agent running" line, logged
// before its first check-in (to a control plane that is not there).
func TestLogFormat(t *testing.T) {
	dir := t.TempDir()
	pub, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	hostKey := filepath.Join(dir, "ssh_host_ed25519_key")
	realfleet.WriteSSHKey(t, hostKey, key)
	trustFile := filepath.Join(dir, "trust.json")
	ci := proto.PublicKey{Algorithm: "ed25519", Public: base64.StdEncoding.EncodeToString(pub)}
	realfleet.WriteJSON(t, trustFile, proto.TrustFile{SchemaVersion: 1, CIReleaseKey: proto.KeySlot{Current: &ci}})
	probes := filepath.Join(dir, "probes.json")
	if err := os.WriteFile(probes, []byte(`{"failedUnits":{"enabled":false},"probes":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	textFile := filepath.Join(dir, "text.toml")
	if err := os.WriteFile(textFile, []byte("log-format = \"text\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badFile := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(badFile, []byte("log-format = \"logfmt\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agent := func(args ...string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var stdout bytes.Buffer
		stderr := &logtest.CancelOn{Msg: "agent running", Cancel: cancel}
		code := run(ctx, append([]string{"nixfleet-agent", "run", "--cp", "https://127.0.0.1:1", "--hostname", "web-1",
			"--host-key", hostKey, "--trust", trustFile, "--probes", probes, "--state-dir", filepath.Join(dir, "state")}, args...), &stdout, stderr)
		return code, stderr.String()
	}
	// running is the "agent running" line of a log, and whether it is JSON.
	running := func(log string) (line string, isJSON bool) {
		for _, l := range strings.Split(log, "\n") {
			var rec struct{ Level, Msg, Hostname string }
			if json.Unmarshal([]byte(l), &rec) == nil && rec.Level == "INFO" && rec.Msg == "agent running" && rec.Hostname == "web-1" {
				return l, true
			}
			if strings.Contains(l, `level=INFO msg="agent running" hostname=web-1 `) {
				return l, false
			}
		}
		return "", false
	}

	for _, tc := range []struct {
		name string
		env  string // NIXFLEET_AGENT_LOG_FORMAT
		args []string
		json bool
	}{
		{name: "default", json: true},
		{name: "flag text", args: []string{"--log-format", "text"}},
		{name: "flag json", args: []string{"--log-format", "json"}, json: true},
		{name: "environment", env: "text"},
		{name: "the file", args: []string{"--config", textFile}},
		{name: "the flag over the environment", env: "text", args: []string{"--log-format", "json"}, json: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("NIXFLEET_AGENT_LOG_FORMAT", tc.env)
			}
			code, log := agent(tc.args...)
			line, isJSON := running(log)
			if code == 2 || line == "" || isJSON != tc.json {
				t.Fatalf("exit %d, want JSON %v, log:\n%s", code, tc.json, log)
			}
			if !tc.json && strings.Contains(log, "{") {
				t.Errorf("a JSON object in the text log:\n%s", log)
			}
		})
	}

	for _, tc := range []struct {
		args  []string
		value string
	}{
		{[]string{"--log-format", "xml"}, "xml"},
		{[]string{"--log-format", "JSON"}, "JSON"},
		{[]string{"--config", badFile}, "logfmt"},
	} {
		code, log := agent(tc.args...)
		want := `nixfleet-agent: --log-format "` + tc.value + `": want text or json`
		if code != 2 || !strings.HasPrefix(log, want) {
			t.Errorf("%v: exit %d (want 2), output %q, want the prefix %q", tc.args, code, log, want)
		}
	}
}
