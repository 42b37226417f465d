package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/pelletier/go-toml/v2"
	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/controlplane/notify"
	"github.com/nixfleet/nixfleet/internal/cliapp"
	"github.com/nixfleet/nixfleet/internal/devcert"
	"github.com/nixfleet/nixfleet/internal/testkit/logtest"
)

// TestConfigSources: a setting comes from the flag, else the environment
// (NIXFLEET_CP_<FLAG>), else the --config file (TOML; a file in the former
// JSON format is still read, with a deprecation warning); an unknown key,
// a malformed file or a value of the wrong type is a usage error. Shown with --insecure-dev, which refuses any address
// but loopback, and the address the replica logs when it serves.
func TestConfigSources(t *testing.T) {
	f := newGitFleet(t, twoWaveSpec())
	f.Release("v0")
	dir := t.TempDir()
	writeConfig := func(settings map[string]any) string {
		t.Helper()
		var b bytes.Buffer
		if err := toml.NewEncoder(&b).Encode(settings); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "config.toml")
		if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	base := map[string]any{"repo": f.Bare, "trust": f.TrustFile, "state-dir": dir, "insecure-dev": true}
	serve := func(args ...string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var stdout bytes.Buffer
		stderr := &logtest.CancelOn{Msg: "control plane serving", Cancel: cancel}
		code := run(ctx, append([]string{"nixfleet-cp", "serve"}, args...), &stdout, stderr)
		return code, stderr.String()
	}
	listening := func(log string) string {
		for _, line := range strings.Split(log, "\n") {
			var rec struct{ Msg, Listen string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "control plane serving" {
				return rec.Listen
			}
		}
		return ""
	}

	// The file alone: its listen address is not loopback, and its
	// insecure-dev applies, so the replica refuses to start.
	withFile := func(listen string) string {
		s := map[string]any{"listen": listen}
		for k, v := range base {
			s[k] = v
		}
		return writeConfig(s)
	}
	code, log := serve("--config", withFile("0.0.0.0:0"))
	if code != 1 || !strings.Contains(log, "use a loopback address") {
		t.Fatalf("insecure-dev on 0.0.0.0 from the file: exit %d, log:\n%s", code, log)
	}

	// The environment wins over the file.
	t.Setenv("NIXFLEET_CP_LISTEN", "127.0.0.1:0")
	code, log = serve("--config", withFile("0.0.0.0:0"))
	if code != 0 || !strings.HasPrefix(listening(log), "127.0.0.1:") {
		t.Fatalf("listen from the environment over the file: exit %d, serving on %q, log:\n%s", code, listening(log), log)
	}
	if !strings.Contains(log, "INSECURE DEV MODE") {
		t.Errorf("insecure-dev from the file did not say so loudly:\n%s", log)
	}

	// The flag wins over the environment.
	t.Setenv("NIXFLEET_CP_LISTEN", "0.0.0.0:0")
	code, log = serve("--config", withFile("0.0.0.0:0"), "--listen", "127.0.0.2:0")
	if l := listening(log); code != 0 || !strings.HasPrefix(l, "127.0.0.2:") {
		t.Fatalf("listen from the flag over the environment: exit %d, serving on %q, log:\n%s", code, l, log)
	}

	// An unknown key is a usage error naming the file and the line, and so
	// are a malformed file and a value of the wrong type.
	for name, tc := range map[string]struct{ file, body, msg string }{
		"unknown key":     {"bad.toml", "listen = \"127.0.0.1:0\"\nlissen = \"127.0.0.1:1\"\n", `:2: unknown key "lissen"`},
		"malformed":       {"bad.toml", "listen =\n", `:1: `},
		"not a duration":  {"bad.toml", "\ntick-interval = 30\n", `:2: "tick-interval" is an integer; want a duration string like "30s"`},
		"not an integer":  {"bad.toml", "partial-visibility-pct = \"50\"\n", `:1: "partial-visibility-pct" is a string; want an integer`},
		"not a boolean":   {"bad.toml", "insecure-dev = \"yes\"\n", `:1: "insecure-dev" is a string; want a boolean`},
		"JSON, unknown":   {"bad.json", `{"listen":"127.0.0.1:0","lissen":"127.0.0.1:1"}`, `: unknown key "lissen"`},
		"JSON, malformed": {"bad.json", `{"listen":`, `: `},
	} {
		path := filepath.Join(dir, tc.file)
		if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, log := serve("--config", path); code != 2 || !strings.HasPrefix(log, "nixfleet-cp: bad config file: "+path+tc.msg) {
			t.Errorf("%s config: exit %d (want 2), output:\n%s", name, code, log)
		}
	}

	// The former JSON format (keys are flag names, values as text) is still
	// read, by its first character, and the replica warns that it is
	// deprecated.
	legacy := map[string]any{"listen": "127.0.0.1:0", "tick-interval": "1m", "partial-visibility-min-hosts": 3}
	for k, v := range base {
		legacy[k] = v
	}
	b, err := json.Marshal(legacy)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cp.conf")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Unsetenv("NIXFLEET_CP_LISTEN") // t.Setenv restores it
	code, log = serve("--config", path)
	if code != 0 || !strings.HasPrefix(listening(log), "127.0.0.1:") || !strings.Contains(log, "a JSON config file is deprecated") {
		t.Errorf("legacy JSON: exit %d, serving on %q, log:\n%s", code, listening(log), log)
	}

	// Partial visibility needs a percentage and a floor that mean something,
	// and a tick's bound is a number of hosts or none.
	for _, args := range [][]string{
		{"--partial-visibility-pct", "0"}, {"--partial-visibility-pct", "101"}, {"--partial-visibility-min-hosts", "0"},
		{"--tick-max-host-moves", "0"}, {"--tick-max-host-moves", "-2"},
	} {
		if code, log := serve(append([]string{"--config", withFile("127.0.0.1:0")}, args...)...); code != 2 || !strings.Contains(log, args[0]) {
			t.Errorf("%v: exit %d (want 2), output:\n%s", args, code, log)
		}
	}
}

// TestLogFormat: --log-format text writes key=value lines (level=INFO
// msg=…) for the journal, json (the default) JSON objects; like every
// setting it comes from the flag, NIXFLEET_CP_LOG_FORMAT or the --config
// file; another value is a usage error naming the flag and the values it
// takes. The last case is a replica that serves, its own lines as text.
func TestLogFormat(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	textFile, badFile := write("text.toml", "log-format = \"text\"\n"), write("bad.toml", "\nlog-format = \"logfmt\"\n")
	// configured runs serve up to its configuration, then logs one line.
	configured := func(args ...string) (int, string) {
		t.Helper()
		cmd := serveCommand()
		cmd.Action = func(c *cli.Context) error {
			_, log, err := configure(c)
			if err == nil {
				log.Info("configured", "listen", c.String("listen"))
			}
			return err
		}
		app := &cli.App{Name: "nixfleet-cp", Commands: []*cli.Command{cmd}}
		var stdout, stderr bytes.Buffer
		code := cliapp.Run(context.Background(), app, append([]string{"nixfleet-cp", "serve"}, args...), &stdout, &stderr)
		return code, stderr.String()
	}
	const textLine = "level=INFO msg=configured listen=127.0.0.1:8443\n"
	jsonLine := func(log string) bool {
		var rec struct{ Level, Msg, Listen string }
		return json.Unmarshal([]byte(log), &rec) == nil && rec == struct{ Level, Msg, Listen string }{"INFO", "configured", "127.0.0.1:8443"}
	}

	for _, tc := range []struct {
		name string
		env  string // NIXFLEET_CP_LOG_FORMAT
		args []string
		json bool
	}{
		{name: "default", json: true},
		{name: "flag text", args: []string{"--log-format", "text"}},
		{name: "flag json", args: []string{"--log-format", "json"}, json: true},
		{name: "environment", env: "text"},
		{name: "the file", args: []string{"--config", textFile}},
		{name: "the flag over the file", args: []string{"--config", textFile, "--log-format", "json"}, json: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("NIXFLEET_CP_LOG_FORMAT", tc.env)
			}
			code, log := configured(tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, log)
			}
			if tc.json && !jsonLine(log) {
				t.Errorf("want one JSON object, got %q", log)
			}
			if !tc.json && (!strings.HasPrefix(log, "time=") || !strings.HasSuffix(log, " "+textLine) || strings.Count(log, "\n") != 1) {
				t.Errorf("want one text line ending %q, got %q", textLine, log)
			}
		})
	}

	for _, tc := range []struct {
		args  []string
		value string
	}{
		{[]string{"--log-format", "xml"}, "xml"},
		{[]string{"--log-format", "Text"}, "Text"},
		{[]string{"--config", badFile}, "logfmt"},
	} {
		want := `nixfleet-cp: --log-format "` + tc.value + `": want text or json` + "\n"
		if code, log := configured(tc.args...); code != 2 || log != want {
			t.Errorf("%v: exit %d (want 2), output %q, want %q", tc.args, code, log, want)
		}
	}

	// A replica that serves writes its own lines as text.
	f := newGitFleet(t, twoWaveSpec())
	f.Release("v0")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stdout bytes.Buffer
	stderr := &logtest.CancelOn{Msg: "control plane serving", Cancel: cancel}
	code := run(ctx, []string{"nixfleet-cp", "serve", "--repo", f.Bare, "--trust", f.TrustFile, "--state-dir", dir,
		"--insecure-dev", "--listen", "127.0.0.1:0", "--log-format", "text"}, &stdout, stderr)
	log := stderr.String()
	if code != 0 || !strings.Contains(log, ` level=INFO msg="control plane serving" listen=127.0.0.1:`) ||
		!strings.Contains(log, ` level=WARN msg="INSECURE DEV MODE: plain HTTP, no authentication; loopback only"`) {
		t.Errorf("exit %d, log:\n%s", code, log)
	}
	for _, line := range strings.Split(strings.TrimSuffix(log, "\n"), "\n") {
		if !strings.HasPrefix(line, "time=") {
			t.Errorf("not a text line: %s", line)
		}
	}
}

// configured runs the configuration step of nixfleet-cp serve with args
// (not the replica) and returns what it made, the exit status and stderr.
func configured(t *testing.T, args ...string) (controlplane.Config, int, string) {
	t.Helper()
	cmd := serveCommand()
	var got controlplane.Config
	cmd.Action = func(c *cli.Context) error {
		cfg, _, err := configure(c)
		got = cfg
		return err
	}
	app := &cli.App{Name: "nixfleet-cp", Commands: []*cli.Command{cmd}}
	var stdout, stderr bytes.Buffer
	code := cliapp.Run(context.Background(), app, append([]string{"nixfleet-cp", "serve"}, args...), &stdout, &stderr)
	return got, code, stderr.String()
}

// configuredFrom is configured with a --config file holding body; its
// output loses the "bad config file: FILE" prefix, so that an error reads
// from the file's ":line".
func configuredFrom(t *testing.T, body string) (controlplane.Config, int, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "cp.toml")
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, code, out := configured(t, "--config", file)
	return cfg, code, strings.TrimPrefix(out, "nixfleet-cp: bad config file: "+file)
}

// TestRateLimitSettings: the rate limits default to controlplane's
// Default… values, come from the flag, the environment or the --config
// file like every setting, 0 turns one off, and nonsense is a usage error.
func TestRateLimitSettings(t *testing.T) {
	dir := t.TempDir()
	settings := func(args ...string) (controlplane.RateLimit, int, string) {
		t.Helper()
		cfg, code, stderr := configured(t, args...)
		return cfg.RateLimit, code, stderr
	}
	file := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(file, []byte("rate-limit-per-host = 0.5\nrate-limit-burst = 7\nrate-limit-per-address = 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want controlplane.RateLimit
	}{
		{name: "defaults", want: controlplane.RateLimit{PerHost: controlplane.DefaultRatePerHost, HostBurst: controlplane.DefaultRateHostBurst,
			PerAddress: controlplane.DefaultRatePerAddress, AddressBurst: controlplane.DefaultRateAddressBurst}},
		{name: "flags", args: []string{"--rate-limit-per-host", "2.5", "--rate-limit-burst", "30", "--rate-limit-per-address", "1", "--rate-limit-address-burst", "4"},
			want: controlplane.RateLimit{PerHost: 2.5, HostBurst: 30, PerAddress: 1, AddressBurst: 4}},
		{name: "off", args: []string{"--rate-limit-per-host", "0", "--rate-limit-per-address", "0"},
			want: controlplane.RateLimit{HostBurst: controlplane.DefaultRateHostBurst, AddressBurst: controlplane.DefaultRateAddressBurst}},
		{name: "the file", args: []string{"--config", file},
			want: controlplane.RateLimit{PerHost: 0.5, HostBurst: 7, AddressBurst: controlplane.DefaultRateAddressBurst}},
		{name: "the environment over the file", env: map[string]string{"NIXFLEET_CP_RATE_LIMIT_BURST": "9", "NIXFLEET_CP_RATE_LIMIT_ADDRESS_BURST": "3"},
			args: []string{"--config", file}, want: controlplane.RateLimit{PerHost: 0.5, HostBurst: 9, AddressBurst: 3}},
		{name: "the flag over the environment", env: map[string]string{"NIXFLEET_CP_RATE_LIMIT_PER_HOST": "3"},
			args: []string{"--config", file, "--rate-limit-per-host", "4"}, want: controlplane.RateLimit{PerHost: 4, HostBurst: 7, AddressBurst: controlplane.DefaultRateAddressBurst}},
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
				t.Errorf("rate limits %+v, want %+v", got, tc.want)
			}
		})
	}
	for _, args := range [][]string{
		{"--rate-limit-per-host", "-1"}, {"--rate-limit-burst", "0"}, {"--rate-limit-address-burst", "0"}, {"--rate-limit-per-host", "NaN"},
	} {
		if _, code, out := settings(args...); code != 2 || !strings.Contains(out, "rate") {
			t.Errorf("%v: exit %d (want 2), output: %s", args, code, out)
		}
	}
}

// TestNotificationSettings: the --config file's [[notifications.webhook]]
// tables become the replica's sinks, their secret (trimmed) and CA files
// read, ${CREDENTIALS_DIRECTORY} expanded; a mistake in one is a usage
// error naming the file, the line and the key, also in the second table.
func TestNotificationSettings(t *testing.T) {
	dir := t.TempDir()
	cert, err := devcert.Write(dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("  s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "empty"), []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CREDENTIALS_DIRECTORY", dir)
	sinks := func(body string) ([]notify.Sink, int, string) {
		t.Helper()
		cfg, code, out := configuredFrom(t, body)
		return cfg.Notifications, code, out
	}

	got, code, out := sinks(`listen = "127.0.0.1:0"

[[notifications.webhook]]
name = "ops"
url = "https://hooks.example.org/nixfleet"
events = ["halted", "reverted"]
channels = ["prod"]
secret-file = "${CREDENTIALS_DIRECTORY}/secret"
timeout = "5s"
max-backoff = "1m"
ca = "` + cert.CertFile + `"

[[notifications.webhook]]
name = "chat"
url = "http://127.0.0.1:8065/hooks/x"
format = "slack"
min-backoff = "250ms"
`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	if len(got) != 2 || got[0].RootCAs == nil || got[1].RootCAs != nil {
		t.Fatalf("sinks %+v", got)
	}
	got[0].RootCAs = nil
	want := []notify.Sink{
		{Name: "ops", URL: "https://hooks.example.org/nixfleet", Format: notify.FormatJSON,
			Events: []notify.Category{notify.CategoryHalted, notify.CategoryReverted}, Channels: []string{"prod"},
			Secret: []byte("s3cret"), Timeout: 5 * time.Second, MaxBackoff: time.Minute},
		{Name: "chat", URL: "http://127.0.0.1:8065/hooks/x", Format: notify.FormatSlack, MinBackoff: 250 * time.Millisecond},
	}
	if d := cmp.Diff(want, got, cmpopts.IgnoreUnexported(x509.CertPool{})); d != "" {
		t.Errorf("sinks (-want +got):\n%s", d)
	}

	const ok = "[[notifications.webhook]]\nname = \"a\"\nurl = \"https://a.example/x\"\n"
	for _, tc := range []struct{ name, in, err string }{
		{"unknown key", ok + "secret = \"x\"\n",
			`:4: unknown key "notifications.webhook[0].secret" (known in [notifications.webhook]: name, url, format, events, channels, secret-file, timeout, min-backoff, max-backoff, ca)`},
		{"unknown table key", "[notifications]\nemail = \"ops@example.org\"\n", `:2: unknown key "notifications.email" (known in [notifications]: webhook)`},
		{"no name", "[[notifications.webhook]]\nurl = \"https://a.example/x\"\n", `:1: "notifications.webhook[0]" has no name`},
		{"bad name", ok + "[[notifications.webhook]]\nname = \"Ops Team\"\n", `:5: "notifications.webhook[1].name" is "Ops Team"; want 1 to 63 of a-z`},
		{"same name", ok + ok, `:5: "notifications.webhook[1].name" is "a", the name of notifications.webhook[0] too`},
		{"no url", "[[notifications.webhook]]\nname = \"a\"\n", `:1: "notifications.webhook[0]" has no url`},
		{"not http", "[[notifications.webhook]]\nname = \"a\"\nurl = \"smtp://mail.example\"\n",
			`:3: "notifications.webhook[0].url" cannot be used: "smtp://mail.example" is not an http or https URL`},
		{"format", ok + "format = \"teams\"\n", `:4: "notifications.webhook[0].format" is "teams"; want json, slack or alertmanager`},
		{"category", ok + "events = [\n  \"halted\",\n  \"halt\",\n]\n",
			`:6: "notifications.webhook[0].events[1]" is "halt", not an event category (known: rollout_opened, wave_promoted, halted, reverted, converged, failed, approval_needed, partial_visibility, release_refused, analysis, forecast)`},
		{"events not a list", ok + "events = \"halted\"\n", `:4: "notifications.webhook[0].events" is a string; want an array of strings`},
		{"empty channel", ok + "channels = [\"\"]\n", `:4: "notifications.webhook[0].channels[0]" is empty`},
		{"timeout not a duration", ok + "timeout = 10\n", `:4: "notifications.webhook[0].timeout" is an integer; want a duration string like "30s"`},
		{"timeout too long", ok + "timeout = \"2m\"\n", `:4: "notifications.webhook[0].timeout" is 2m0s; want more than 0 and at most 1m0s`},
		{"zero backoff", ok + "max-backoff = \"0s\"\n", `:4: "notifications.webhook[0].max-backoff" is 0s; want more than 0`},
		{"backoffs crossed", ok + "min-backoff = \"1m\"\nmax-backoff = \"1s\"\n", `:5: "notifications.webhook[0].max-backoff" is 1s, less than min-backoff 1m0s`},
		{"missing secret", ok + "secret-file = \"" + filepath.Join(dir, "nope") + "\"\n", `:4: "notifications.webhook[0].secret-file" cannot be read: open `},
		{"empty secret", ok + "secret-file = \"${CREDENTIALS_DIRECTORY}/empty\"\n", `:4: "notifications.webhook[0].secret-file" names an empty file`},
		{"ca for http", "[[notifications.webhook]]\nname = \"a\"\nurl = \"http://a.example/x\"\nca = \"" + cert.CertFile + "\"\n",
			`:4: "notifications.webhook[0].ca" is set for an http url`},
		{"ca not PEM", ok + "ca = \"${CREDENTIALS_DIRECTORY}/secret\"\n", `:4: "notifications.webhook[0].ca" holds no PEM certificate`},
		{"not an array of tables", "[notifications.webhook]\nname = \"a\"\n", `:1: "notifications.webhook" is a table; want an array of tables`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, code, out := sinks(tc.in); code != 2 || !strings.HasPrefix(out, tc.err) {
				t.Errorf("exit %d (want 2), output:\n%s\nwant the prefix\n%s", code, out, tc.err)
			}
		})
	}

	t.Setenv("CREDENTIALS_DIRECTORY", "")
	if _, code, out := sinks(ok + "secret-file = \"${CREDENTIALS_DIRECTORY}/secret\"\n"); code != 2 ||
		!strings.Contains(out, "${CREDENTIALS_DIRECTORY} is not set") {
		t.Errorf("without a credentials directory: exit %d, %s", code, out)
	}
}
