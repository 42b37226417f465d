package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nixfleet/nixfleet/controlplane"
)

// TestPrefetchSetting: --prefetch-concurrency defaults to
// controlplane.DefaultPrefetchConcurrency, comes from the flag, the
// environment or the --config file like every setting, 0 turns prefetch
// off, and a negative number is a usage error.
func TestPrefetchSetting(t *testing.T) {
	dir := t.TempDir()
	settings := func(args ...string) (int, int, string) {
		t.Helper()
		cfg, code, stderr := configured(t, args...)
		return cfg.PrefetchConcurrency, code, stderr
	}
	file := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(file, []byte("prefetch-concurrency = 7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want int
	}{
		{name: "default", want: controlplane.DefaultPrefetchConcurrency},
		{name: "flag", args: []string{"--prefetch-concurrency", "2"}, want: 2},
		{name: "off", args: []string{"--prefetch-concurrency", "0"}, want: 0},
		{name: "the file", args: []string{"--config", file}, want: 7},
		{name: "the environment over the file", env: map[string]string{"NIXFLEET_CP_PREFETCH_CONCURRENCY": "3"}, args: []string{"--config", file}, want: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			got, code, out := settings(tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, out)
			}
			if got != tc.want {
				t.Errorf("prefetch concurrency %d, want %d", got, tc.want)
			}
		})
	}
	if _, code, out := settings("--prefetch-concurrency", "-1"); code != 2 || !strings.Contains(out, "--prefetch-concurrency") {
		t.Errorf("--prefetch-concurrency -1: exit %d (want 2), output: %s", code, out)
	}
}
