package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
