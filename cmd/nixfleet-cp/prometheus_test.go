package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/controlplane/prom"
)

// TestPrometheusSettings: the --prometheus-* flags, like every setting,
// come from the flag, NIXFLEET_CP_PROMETHEUS_* or the --config file, and
// become the client's configuration; --prometheus-header is repeatable
// (an array in the file) and refuses Authorization; prom.New's refusals
// (basic auth with a bearer token, a password without a user, a file it
// cannot read) are usage errors at start, naming what is wrong.
func TestPrometheusSettings(t *testing.T) {
	dir := t.TempDir()
	password := filepath.Join(dir, "password")
	token := filepath.Join(dir, "token")
	for _, f := range []string{password, token} {
		if err := os.WriteFile(f, []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	settings := func(args ...string) (prom.Config, int, string) {
		t.Helper()
		cfg, code, stderr := configured(t, args...)
		return cfg.Prometheus, code, stderr
	}
	file := filepath.Join(dir, "config.toml")
	conf := `prometheus-url = "https://prometheus.example.org"
prometheus-basic-auth-user = "nixfleet"
prometheus-basic-auth-password-file = "` + password + `"
prometheus-header = ["X-Scope-OrgID: team-a", "X-Extra: 1"]
prometheus-proxy-url = "http://proxy.example.org:3128"
`
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile := prom.Config{URL: "https://prometheus.example.org", BasicAuthUser: "nixfleet", BasicAuthPasswordFile: password,
		Headers: http.Header{"X-Scope-Orgid": {"team-a"}, "X-Extra": {"1"}}, ProxyURL: "http://proxy.example.org:3128", Timeout: 10 * time.Second}

	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want prom.Config
	}{
		{name: "none", want: prom.Config{Timeout: 10 * time.Second}},
		{name: "flags", args: []string{"--prometheus-url", "http://127.0.0.1:9090", "--prometheus-basic-auth-user", "nixfleet",
			"--prometheus-basic-auth-password-file", password, "--prometheus-header", "X-Scope-OrgID: team-a",
			"--prometheus-header", "X-Scope-OrgID:team-b", "--prometheus-proxy-url", "http://127.0.0.1:3128", "--prometheus-timeout", "3s"},
			want: prom.Config{URL: "http://127.0.0.1:9090", BasicAuthUser: "nixfleet", BasicAuthPasswordFile: password,
				Headers: http.Header{"X-Scope-Orgid": {"team-a", "team-b"}}, ProxyURL: "http://127.0.0.1:3128", Timeout: 3 * time.Second}},
		{name: "the file", args: []string{"--config", file}, want: fromFile},
		{name: "the environment over the file", env: map[string]string{"NIXFLEET_CP_PROMETHEUS_HEADER": "X-Scope-OrgID: team-c"},
			args: []string{"--config", file}, want: func() prom.Config {
				c := fromFile
				c.Headers = http.Header{"X-Scope-Orgid": {"team-c"}}
				return c
			}()},
		{name: "a bearer token", args: []string{"--prometheus-url", "https://p", "--prometheus-bearer-token-file", token},
			want: prom.Config{URL: "https://p", BearerTokenFile: token, Timeout: 10 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			got, code, out := settings(tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, out)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("prom.Config (-want +got):\n%s", diff)
			}
		})
	}

	base := []string{"--prometheus-url", "https://prometheus.example.org"}
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"Authorization as a header", []string{"--prometheus-header", "authorization: Bearer x"},
			"--prometheus-header authorization: use --prometheus-bearer-token-file or --prometheus-basic-auth-user"},
		{"a header without a colon", []string{"--prometheus-header", "X-Scope-OrgID team-a"}, `--prometheus-header "X-Scope-OrgID team-a": want 'Name: value'`},
		{"basic auth and a bearer token", []string{"--prometheus-basic-auth-user", "u", "--prometheus-bearer-token-file", token},
			"--prometheus-*: prom: basic auth and a bearer token together"},
		{"a password without a user", []string{"--prometheus-basic-auth-password-file", password}, "a basic auth password file needs a user"},
		{"an unreadable password file", []string{"--prometheus-basic-auth-user", "u", "--prometheus-basic-auth-password-file", filepath.Join(dir, "none")},
			filepath.Join(dir, "none")},
		{"a proxy that is not a URL", []string{"--prometheus-proxy-url", "proxy:3128"}, `proxy "proxy:3128" is not a URL`},
	} {
		if _, code, out := settings(append(base, tc.args...)...); code != 2 || !strings.Contains(out, tc.msg) {
			t.Errorf("%s: exit %d (want 2), output: %s; want it to say %q", tc.name, code, out, tc.msg)
		}
	}
}
