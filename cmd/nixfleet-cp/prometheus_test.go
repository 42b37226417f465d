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

// TestPrometheusSourceSettings: the --config file's [[prometheus.source]]
// tables become the replica's named Prometheus sources, with the
// settings and the checks of the --prometheus-* flags and
// ${CREDENTIALS_DIRECTORY} expanded in file names; a mistake in one is a
// usage error naming the file, the line and the key, also in the second
// table.
func TestPrometheusSourceSettings(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"password", "token"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("CREDENTIALS_DIRECTORY", dir)
	sources := func(body string) ([]prom.Source, int, string) {
		t.Helper()
		cfg, code, out := configuredFrom(t, body)
		return cfg.PrometheusSources, code, out
	}

	got, code, out := sources(`prometheus-url = "http://127.0.0.1:9090"

[[prometheus.source]]
name = "team-a"
url = "https://mimir.example.org/prometheus"
basic-auth-user = "team-a"
basic-auth-password-file = "${CREDENTIALS_DIRECTORY}/password"
header = ["X-Scope-OrgID: team-a"]
timeout = "5s"

[[prometheus.source]]
name = "thanos_eu-1"
url = "http://thanos.example.org:10902"
bearer-token-file = "` + filepath.Join(dir, "token") + `"
proxy-url = "http://proxy.example.org:3128"
`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	want := []prom.Source{
		{Name: "team-a", Config: prom.Config{URL: "https://mimir.example.org/prometheus", BasicAuthUser: "team-a",
			BasicAuthPasswordFile: filepath.Join(dir, "password"), Headers: http.Header{"X-Scope-Orgid": {"team-a"}}, Timeout: 5 * time.Second}},
		{Name: "thanos_eu-1", Config: prom.Config{URL: "http://thanos.example.org:10902", BearerTokenFile: filepath.Join(dir, "token"),
			ProxyURL: "http://proxy.example.org:3128"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sources (-want +got):\n%s", diff)
	}

	const ok = "[[prometheus.source]]\nname = \"a\"\nurl = \"https://a.example\"\n"
	for _, tc := range []struct{ name, in, err string }{
		{"unknown key", ok + "password = \"x\"\n",
			`:4: unknown key "prometheus.source[0].password" (known in [prometheus.source]: name, url, ca, cert, key, bearer-token-file, basic-auth-user, basic-auth-password-file, header, proxy-url, timeout)`},
		{"no name", "[[prometheus.source]]\nurl = \"https://a.example\"\n", `:1: "prometheus.source[0]" has no name`},
		{"bad name", ok + "[[prometheus.source]]\nname = \"Team A\"\n", `:5: "prometheus.source[1].name" is "Team A"; want 1 to 63 of a-z, 0-9, _ and -`},
		{"the default's name", "[[prometheus.source]]\nname = \"default\"\n", `:2: "prometheus.source[0].name" is "default", which names the --prometheus-* source`},
		{"same name", ok + ok, `:5: "prometheus.source[1].name" is "a", the name of prometheus.source[0] too: names must differ`},
		{"no url", ok + "[[prometheus.source]]\nname = \"b\"\n", `:4: "prometheus.source[1]" has no url`},
		{"not a URL", "[[prometheus.source]]\nname = \"a\"\nurl = \"prometheus:9090\"\n", `:1: "prometheus.source[0]" cannot be used: "prometheus:9090" is not an http or https URL`},
		{"Authorization as a header", ok + "header = [\"X-Scope-OrgID: a\", \"authorization: Bearer x\"]\n",
			`:4: "prometheus.source[0].header[1]" is "authorization: Bearer x": the authentication settings set the Authorization header: use bearer-token-file, or basic-auth-user and basic-auth-password-file`},
		{"a header without a colon", ok + "header = [\"X-Scope-OrgID a\"]\n", `:4: "prometheus.source[0].header[0]" is "X-Scope-OrgID a": want 'Name: value'`},
		{"basic auth and a bearer token", ok + "basic-auth-user = \"u\"\nbearer-token-file = \"${CREDENTIALS_DIRECTORY}/token\"\n",
			`:1: "prometheus.source[0]" cannot be used: basic auth and a bearer token together: give one`},
		{"a missing password file", ok + "basic-auth-user = \"u\"\nbasic-auth-password-file = \"${CREDENTIALS_DIRECTORY}/none\"\n",
			`:1: "prometheus.source[0]" cannot be used: basic auth password: open ` + filepath.Join(dir, "none")},
		{"a zero timeout", ok + "timeout = \"0s\"\n", `:4: "prometheus.source[0].timeout" is 0s; want more than 0`},
		{"not an array of tables", "[prometheus.source]\nname = \"a\"\n", `:1: "prometheus.source" is a table; want an array of tables`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, code, out := sources(tc.in); code != 2 || !strings.HasPrefix(out, tc.err) {
				t.Errorf("exit %d (want 2), output:\n%s\nwant the prefix\n%s", code, out, tc.err)
			}
		})
	}

	t.Setenv("CREDENTIALS_DIRECTORY", "")
	if _, code, out := sources(ok + "bearer-token-file = \"${CREDENTIALS_DIRECTORY}/token\"\n"); code != 2 ||
		!strings.Contains(out, `:4: "prometheus.source[0].bearer-token-file" cannot be used: ${CREDENTIALS_DIRECTORY} is not set`) {
		t.Errorf("without a credentials directory: exit %d, %s", code, out)
	}
}
