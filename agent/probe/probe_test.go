package probe

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/proto"
)

// bound is the generous upper bound for anything the tests wait for.
const bound = 10 * time.Second

// notified reports whether a change notification is pending,
// consuming it.
func notified(r *Runner) bool {
	select {
	case <-r.Changed():
		return true
	default:
		return false
	}
}

// failedNames returns Summary's failed probe names.
func failedNames(r *Runner) []string {
	s, _ := r.Summary()
	return s.Failed
}

// noUnits is a failed-units config that is off.
var noUnits = FailedUnits{Enabled: false}

// healthServer is an httptest server whose health toggles.
func healthServer(t *testing.T) (*httptest.Server, *atomic.Bool) {
	t.Helper()
	var healthy atomic.Bool
	healthy.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/redirect":
			http.Redirect(w, r, "/health", http.StatusFound)
		case !healthy.Load():
			http.Error(w, "down", http.StatusServiceUnavailable)
		case r.URL.Path == "/created":
			w.WriteHeader(http.StatusCreated)
		default:
			_, _ = w.Write([]byte(strings.Repeat("x", 200<<10))) // more than the drain cap
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &healthy
}

func TestHTTPFlipsAndNotifies(t *testing.T) {
	t.Parallel()
	srv, healthy := healthServer(t)
	r := NewRunner(Config{FailedUnits: noUnits, Probes: []Spec{
		{Name: "web", Type: HTTP, URL: srv.URL + "/health", Interval: time.Second, Timeout: time.Second},
	}})
	ctx := t.Context()

	// Not run yet counts as passing.
	if s, units := r.Summary(); s.Total != 1 || len(s.Failed) != 0 || s.Failed == nil || units == nil || len(units) != 0 {
		t.Fatalf("before any run: Summary() = %+v, %q; want Total 1 and empty non-nil lists", s, units)
	}
	if got := r.Details()["web"]; got != "not run yet" {
		t.Errorf("Details()[web] before any run = %q", got)
	}

	r.RunOnce(ctx)
	if got := failedNames(r); len(got) != 0 {
		t.Fatalf("healthy: Failed = %q", got)
	}
	if notified(r) {
		t.Error("healthy first run notified a change; the summary did not change")
	}
	if got := r.Details()["web"]; got != "ok" {
		t.Errorf("Details()[web] = %q, want ok", got)
	}

	healthy.Store(false)
	r.RunOnce(ctx)
	if diff := cmp.Diff([]string{"web"}, failedNames(r)); diff != "" {
		t.Fatalf("unhealthy: Failed (-want +got):\n%s", diff)
	}
	if !notified(r) {
		t.Error("flip to failing did not notify")
	}
	if got := r.Details()["web"]; !strings.Contains(got, "503") {
		t.Errorf("Details()[web] = %q, want the status", got)
	}

	r.RunOnce(ctx)
	if notified(r) {
		t.Error("a second failing run notified; nothing changed")
	}

	healthy.Store(true)
	r.RunOnce(ctx)
	if got := failedNames(r); len(got) != 0 {
		t.Fatalf("recovered: Failed = %q", got)
	}
	if !notified(r) {
		t.Error("flip to passing did not notify")
	}
	res := r.Results()
	if len(res) != 1 || !res[0].Ran || !res[0].Passed || res[0].Name != "web" {
		t.Errorf("Results() = %+v", res)
	}
}

func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	srv, _ := healthServer(t)
	tests := []struct {
		name   string
		path   string
		expect int
		pass   bool
		reason string
	}{
		{name: "any 2xx accepts 200", path: "/health", pass: true},
		{name: "any 2xx accepts 201", path: "/created", pass: true},
		{name: "exact 201", path: "/created", expect: 201, pass: true},
		{name: "exact 200 refuses 201", path: "/created", expect: 200, reason: "status 201 (want 200)"},
		{name: "redirect not followed", path: "/redirect", reason: "status 302 (want 2xx)"},
		{name: "redirect expected", path: "/redirect", expect: 302, pass: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := NewRunner(Config{FailedUnits: noUnits, Probes: []Spec{
				{Name: "p", Type: HTTP, URL: srv.URL + tt.path, ExpectStatus: tt.expect, Interval: time.Second, Timeout: time.Second},
			}})
			r.RunOnce(t.Context())
			res := r.Results()[0]
			if res.Passed != tt.pass || (tt.reason != "" && res.Reason != tt.reason) {
				t.Errorf("result = %+v, want passed %v reason %q", res, tt.pass, tt.reason)
			}
		})
	}
}

func TestHTTPTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	r := NewRunner(Config{FailedUnits: noUnits, Probes: []Spec{
		{Name: "slow", Type: HTTP, URL: srv.URL, Interval: time.Second, Timeout: 200 * time.Millisecond},
	}})
	r.RunOnce(t.Context())
	if diff := cmp.Diff([]string{"slow"}, failedNames(r)); diff != "" {
		t.Fatalf("Failed (-want +got):\n%s", diff)
	}
	if got := r.Details()["slow"]; got != "timed out after 200ms" {
		t.Errorf("reason = %q", got)
	}
}

func TestTCP(t *testing.T) {
	t.Parallel()
	// A socket this test holds on a privileged port: listening, then shut
	// down (still bound, so connections are refused and nothing else can
	// take the port). A port outside the ephemeral range also rules out a
	// connect that meets itself (TCP self-connect) once nothing listens.
	fd, addr := holdLowPort(t)
	if err := syscall.Listen(fd, 16); err != nil {
		t.Fatal(err)
	}
	r := NewRunner(Config{FailedUnits: noUnits, Probes: []Spec{
		{Name: "db", Type: TCP, Address: addr, Interval: time.Second, Timeout: time.Second},
	}})
	r.RunOnce(t.Context())
	if got := failedNames(r); len(got) != 0 {
		t.Fatalf("open listener: Failed = %q (%v)", got, r.Details())
	}

	if err := syscall.Shutdown(fd, syscall.SHUT_RDWR); err != nil {
		t.Fatal(err)
	}
	r.RunOnce(t.Context())
	if diff := cmp.Diff([]string{"db"}, failedNames(r)); diff != "" {
		t.Fatalf("closed listener: Failed (-want +got):\n%s", diff)
	}
	if !notified(r) {
		t.Error("flip to failing did not notify")
	}
	if got := r.Details()["db"]; !strings.Contains(got, "refused") {
		t.Errorf("reason = %q, want connection refused", got)
	}
}

func TestExec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		command []string
		pass    bool
		reason  string // substring
	}{
		{name: "true", command: []string{"/bin/true"}, pass: true, reason: "ok"},
		{name: "false", command: []string{"/bin/false"}, reason: "exit status 1"},
		{name: "stderr in reason", command: []string{"/bin/sh", "-c", "echo first >&2; echo 'disk full' >&2; exit 3"}, reason: "exit status 3: disk full"},
		{name: "missing program", command: []string{"/nonexistent/probe"}, reason: "no such file"},
		{name: "sleep killed", command: []string{"/bin/sleep", "5"}, reason: "timed out after 200ms"},
		// sh forks sleep: the whole process group must go.
		{name: "forked sleep killed", command: []string{"/bin/sh", "-c", "/bin/sleep 5; true"}, reason: "timed out after 200ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := NewRunner(Config{FailedUnits: noUnits, Probes: []Spec{
				{Name: "x", Type: Exec, Command: tt.command, Interval: time.Second, Timeout: 200 * time.Millisecond},
			}})
			start := time.Now()
			r.RunOnce(t.Context())
			// Generous: only that the 5s sleeps did not run to the end.
			if took := time.Since(start); took > 4*time.Second {
				t.Errorf("RunOnce took %s; the command was not killed", took)
			}
			res := r.Results()[0]
			if res.Passed != tt.pass || !strings.Contains(res.Reason, tt.reason) {
				t.Errorf("result = %+v, want passed %v reason containing %q", res, tt.pass, tt.reason)
			}
		})
	}
}

// script writes a shell script and returns the command that runs it
// (through /bin/sh, so it is never executed while still open for writing).
func script(t *testing.T, body string) []string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "probe.sh")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"/bin/sh", p}
}

const systemctlOutput = `cat <<'EOF'
● nginx.service             loaded failed failed A high performance web server
  user@1000.service         loaded failed failed User Manager for UID 1000
backup.timer                loaded failed failed Nightly backup.

  sys-fs-fuse.mount         loaded failed failed FUSE Control File System
nginx.service               loaded failed failed duplicate line
EOF
`

func TestFailedUnits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		fu     FailedUnits
		units  []string
		reason string // substring of Details()[DetailFailedUnits]
	}{
		{
			name:   "parsed and ignored",
			fu:     FailedUnits{Enabled: true, Command: script(t, systemctlOutput), Ignore: []string{"user@*.service", "*.mount"}},
			units:  []string{"backup.timer", "nginx.service"},
			reason: "ok: 2 failed units (2 more ignored)",
		},
		{
			name:   "none failed",
			fu:     FailedUnits{Enabled: true, Command: []string{"/bin/true"}},
			units:  []string{},
			reason: "ok: 0 failed units",
		},
		{
			name:   "command fails",
			fu:     FailedUnits{Enabled: true, Command: script(t, "echo 'Failed to connect to bus' >&2; exit 1\n")},
			units:  []string{ErrorFailedUnits},
			reason: "Failed to connect to bus",
		},
		{
			name:   "command missing",
			fu:     FailedUnits{Enabled: true, Command: []string{"/nonexistent/systemctl"}},
			units:  []string{ErrorFailedUnits},
			reason: "failed-units command",
		},
		{
			name:   "command hangs",
			fu:     FailedUnits{Enabled: true, Command: []string{"/bin/sleep", "5"}, Interval: time.Second, Timeout: 200 * time.Millisecond},
			units:  []string{ErrorFailedUnits},
			reason: "timed out after 200ms",
		},
		{
			name:   "disabled",
			fu:     FailedUnits{Enabled: false, Command: []string{"/nonexistent/systemctl"}},
			units:  []string{},
			reason: "disabled",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := NewRunner(Config{FailedUnits: tt.fu})
			r.RunOnce(t.Context())
			s, units := r.Summary()
			if s.Total != 0 || len(s.Failed) != 0 {
				t.Errorf("probe summary = %+v, want empty", s)
			}
			if diff := cmp.Diff(tt.units, units); diff != "" {
				t.Errorf("failed units (-want +got):\n%s", diff)
			}
			if got := r.Details()[DetailFailedUnits]; !strings.Contains(got, tt.reason) {
				t.Errorf("reason = %q, want it to contain %q", got, tt.reason)
			}
			if want := len(tt.units) > 0; notified(r) != want {
				t.Errorf("notified = %v, want %v", !want, want)
			}
		})
	}
}

func TestParseFailedUnits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		out  string
		want []string
	}{
		{name: "empty", out: "", want: []string{}},
		{name: "plain", out: "a.service loaded failed failed A\nb.socket loaded failed failed B\n", want: []string{"a.service", "b.socket"}},
		{name: "bullet", out: "● a.service loaded failed failed A\n", want: []string{"a.service"}},
		{name: "no trailing newline", out: "a.service loaded failed failed A", want: []string{"a.service"}},
		{name: "escaped name", out: "systemd-fsck@dev-disk-by\\x2duuid-1.service loaded failed failed x\n", want: []string{"systemd-fsck@dev-disk-by\\x2duuid-1.service"}},
		{
			name: "legend lines skipped",
			out: "  UNIT          LOAD   ACTIVE SUB    DESCRIPTION\n" +
				"● a.service     loaded failed failed A\n\n" +
				"LOAD   = Reflects whether the unit definition was properly loaded.\n" +
				"1 loaded units listed.\n",
			want: []string{"a.service"},
		},
		{name: "duplicates", out: "b.mount x\na.service x\nb.mount y\n", want: []string{"a.service", "b.mount"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, ParseFailedUnits([]byte(tt.out))); diff != "" {
				t.Errorf("ParseFailedUnits (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	data := `{
	  "failedUnits": {"enabled": true, "command": ["/run/current-system/sw/bin/systemctl", "--failed"],
	                  "ignore": ["user@*.service"], "interval": "1m"},
	  "probes": [
	    {"name": "web", "type": "http", "url": "http://127.0.0.1:8080/health", "expectStatus": 200, "interval": "10s", "timeout": "2s"},
	    {"name": "db", "type": "tcp", "address": "127.0.0.1:5432"},
	    {"name": "disk", "type": "exec", "command": ["/usr/bin/test", "-w", "/var"], "futureMember": true}
	  ]
	}`
	got, err := Parse([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		FailedUnits: FailedUnits{
			Enabled: true, Command: []string{"/run/current-system/sw/bin/systemctl", "--failed"},
			Ignore: []string{"user@*.service"}, Interval: time.Minute, Timeout: DefaultTimeout,
		},
		Probes: []Spec{
			{Name: "web", Type: HTTP, URL: "http://127.0.0.1:8080/health", ExpectStatus: 200, Interval: 10 * time.Second, Timeout: 2 * time.Second},
			{Name: "db", Type: TCP, Address: "127.0.0.1:5432", Interval: DefaultInterval, Timeout: DefaultTimeout},
			{Name: "disk", Type: Exec, Command: []string{"/usr/bin/test", "-w", "/var"}, Interval: DefaultInterval, Timeout: DefaultTimeout},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}

	for _, tt := range []struct {
		name string
		data string
		want Config
	}{
		{name: "empty object", data: `{}`, want: DefaultConfig()},
		{name: "failed units off", data: `{"failedUnits": {"enabled": false}}`, want: func() Config {
			c := DefaultConfig()
			c.FailedUnits.Enabled = false
			return c
		}()},
		{name: "failed units defaults", data: `{"failedUnits": {"ignore": ["a.service"]}, "probes": null}`, want: func() Config {
			c := DefaultConfig()
			c.FailedUnits.Ignore = []string{"a.service"}
			return c
		}()},
	} {
		got, err := Parse([]byte(tt.data))
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: Parse (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data string
		// want are substrings of the error.
		want      []string
		malformed bool // a decoding error rather than a validation error
	}{
		{name: "not an object", data: `[]`, malformed: true},
		{name: "duplicate member", data: `{"probes": [{"name": "a", "name": "b", "type": "tcp", "address": "h:1"}]}`, malformed: true, want: []string{"duplicate"}},
		{name: "wrong case member", data: `{"probes": [{"name": "a", "type": "http", "URL": "http://h/"}]}`, malformed: true, want: []string{"URL"}},
		{name: "type error", data: `{"probes": [{"name": "a", "type": "http", "url": "http://h/", "expectStatus": "200"}]}`, malformed: true, want: []string{"expectStatus"}},
		{name: "float status", data: `{"probes": [{"name": "a", "type": "http", "url": "http://h/", "expectStatus": 200.5}]}`, malformed: true},
		{name: "empty name", data: `{"probes": [{"type": "tcp", "address": "h:1"}]}`, want: []string{"probes[0]", "name: empty"}},
		{name: "bad name", data: `{"probes": [{"name": "web probe", "type": "tcp", "address": "h:1"}]}`, want: []string{`probe "web probe"`, "name"}},
		{name: "name with at", data: `{"probes": [{"name": "@failed-units", "type": "tcp", "address": "h:1"}]}`, want: []string{"name"}},
		{name: "duplicate name", data: `{"probes": [{"name": "a", "type": "tcp", "address": "h:1"}, {"name": "a", "type": "tcp", "address": "h:2"}]}`, want: []string{`probe "a"`, "duplicate name"}},
		{name: "no type", data: `{"probes": [{"name": "a"}]}`, want: []string{`probe "a"`, "type: required"}},
		{name: "unknown type", data: `{"probes": [{"name": "a", "type": "icmp"}]}`, want: []string{`probe "a"`, `unknown "icmp"`}},
		{name: "http without url", data: `{"probes": [{"name": "a", "type": "http"}]}`, want: []string{`probe "a"`, "url: required"}},
		{name: "http bad scheme", data: `{"probes": [{"name": "a", "type": "http", "url": "ftp://h/"}]}`, want: []string{`probe "a"`, "url", "ftp"}},
		{name: "http no host", data: `{"probes": [{"name": "a", "type": "http", "url": "http:///x"}]}`, want: []string{`probe "a"`, "url: no host"}},
		{name: "http unparsable url", data: `{"probes": [{"name": "a", "type": "http", "url": "http://h:x/"}]}`, want: []string{`probe "a"`, "url"}},
		{name: "http bad status", data: `{"probes": [{"name": "a", "type": "http", "url": "http://h/", "expectStatus": 99}]}`, want: []string{`probe "a"`, "expectStatus"}},
		{name: "tcp without address", data: `{"probes": [{"name": "a", "type": "tcp"}]}`, want: []string{`probe "a"`, "address: required"}},
		{name: "tcp without port", data: `{"probes": [{"name": "a", "type": "tcp", "address": "127.0.0.1"}]}`, want: []string{`probe "a"`, "address"}},
		{name: "tcp without host", data: `{"probes": [{"name": "a", "type": "tcp", "address": ":80"}]}`, want: []string{`probe "a"`, "address"}},
		{name: "exec without command", data: `{"probes": [{"name": "a", "type": "exec", "command": []}]}`, want: []string{`probe "a"`, "command: required"}},
		{name: "exec empty program", data: `{"probes": [{"name": "a", "type": "exec", "command": [""]}]}`, want: []string{`probe "a"`, "command: empty"}},
		{name: "field of another type", data: `{"probes": [{"name": "a", "type": "tcp", "address": "h:1", "url": "http://h/"}]}`, want: []string{`probe "a"`, "url: only for http"}},
		{name: "bad interval", data: `{"probes": [{"name": "a", "type": "tcp", "address": "h:1", "interval": "often"}]}`, want: []string{`probe "a"`, "interval"}},
		{name: "bad timeout", data: `{"probes": [{"name": "a", "type": "tcp", "address": "h:1", "timeout": "5"}]}`, want: []string{`probe "a"`, "timeout"}},
		{name: "interval too short", data: `{"probes": [{"name": "a", "type": "tcp", "address": "h:1", "interval": "500ms", "timeout": "100ms"}]}`, want: []string{`probe "a"`, "interval: 500ms is below"}},
		{name: "timeout over interval", data: `{"probes": [{"name": "a", "type": "tcp", "address": "h:1", "interval": "2s", "timeout": "3s"}]}`, want: []string{`probe "a"`, "timeout: 3s exceeds interval 2s"}},
		{name: "default timeout over interval", data: `{"probes": [{"name": "a", "type": "tcp", "address": "h:1", "interval": "2s"}]}`, want: []string{`probe "a"`, "timeout: 5s exceeds"}},
		{name: "zero timeout", data: `{"probes": [{"name": "a", "type": "tcp", "address": "h:1", "timeout": "0s"}]}`, want: []string{`probe "a"`, "timeout: 0s"}},
		{name: "failed units bad glob", data: `{"failedUnits": {"ignore": ["[a-"]}}`, want: []string{"failedUnits", "ignore pattern"}},
		{name: "failed units bad interval", data: `{"failedUnits": {"interval": "100ms"}}`, want: []string{"failedUnits", "interval"}},
		{name: "failed units empty program", data: `{"failedUnits": {"command": [""]}}`, want: []string{"failedUnits", "command"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.data))
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			if tt.malformed && !errors.Is(err, proto.ErrMalformed) {
				t.Errorf("error %q does not wrap proto.ErrMalformed", err)
			}
			if !tt.malformed && !errors.Is(err, ErrConfig) {
				t.Errorf("error %q does not wrap ErrConfig", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	cfg, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(DefaultConfig(), cfg); diff != "" {
		t.Errorf("Load(\"\") (-want +got):\n%s", diff)
	}
	if !cfg.FailedUnits.Enabled || len(cfg.Probes) != 0 {
		t.Errorf("default config = %+v", cfg)
	}

	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: err = %v, want fs.ErrNotExist", err)
	}

	good := filepath.Join(dir, "probes.json")
	if err := os.WriteFile(good, []byte(`{"probes": [{"name": "db", "type": "tcp", "address": "127.0.0.1:5432"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = Load(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Probes) != 1 || cfg.Probes[0].Name != "db" || !cfg.FailedUnits.Enabled {
		t.Errorf("Load = %+v", cfg)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"probes": [{"name": "db", "type": "tcp"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad file: err = %v, want ErrConfig naming the file", err)
	}
}

// TestRunFollowsFlips runs probes on a short interval and waits
// (bounded) for flips to show up, without asserting any timing.
func TestRunFollowsFlips(t *testing.T) {
	t.Parallel()
	srv, healthy := healthServer(t)
	units := script(t, `cat "$(dirname "$0")/units"`+"\n")
	unitsFile := filepath.Join(filepath.Dir(units[1]), "units")
	if err := os.WriteFile(unitsFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := NewRunner(Config{
		FailedUnits: FailedUnits{Enabled: true, Command: units, Interval: 50 * time.Millisecond, Timeout: 2 * time.Second},
		Probes: []Spec{
			{Name: "web", Type: HTTP, URL: srv.URL, Interval: 50 * time.Millisecond, Timeout: 2 * time.Second},
			{Name: "ok", Type: Exec, Command: []string{"/bin/true"}, Interval: 50 * time.Millisecond, Timeout: 2 * time.Second},
		},
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(bound):
			t.Error("Run did not return after its context ended")
		}
	})

	// waitFor waits on Changed until the summary matches.
	waitFor := func(failed, units []string) {
		t.Helper()
		deadline := time.After(bound)
		for {
			s, u := r.Summary()
			if cmp.Equal(failed, s.Failed) && cmp.Equal(units, u) {
				return
			}
			select {
			case <-r.Changed():
			case <-deadline:
				t.Fatalf("summary stayed %+v, %q; want failed %q, units %q (details %v)", s, u, failed, units, r.Details())
			}
		}
	}

	healthy.Store(false)
	waitFor([]string{"web"}, []string{})
	if err := os.WriteFile(unitsFile, []byte("● nginx.service loaded failed failed nginx\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor([]string{"web"}, []string{"nginx.service"})
	healthy.Store(true)
	if err := os.WriteFile(unitsFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor([]string{}, []string{})
	if s, _ := r.Summary(); s.Total != 2 {
		t.Errorf("Total = %d, want 2", s.Total)
	}
}

// TestStopDiscardsInterrupted checks that ending the context while a
// probe runs neither records a failure nor notifies.
func TestStopDiscardsInterrupted(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "started")
	r := NewRunner(Config{FailedUnits: noUnits, Probes: []Spec{
		{Name: "slow", Type: Exec, Command: []string{"/bin/sh", "-c", `: > "$0"; exec /bin/sleep 5`, marker}, Interval: 10 * time.Second, Timeout: 10 * time.Second},
	}})
	for _, run := range []struct {
		name string
		fn   func(context.Context)
	}{{"RunOnce", r.RunOnce}, {"Run", r.Run}} {
		_ = os.Remove(marker)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			run.fn(ctx)
		}()
		deadline := time.Now().Add(bound)
		for {
			if _, err := os.Stat(marker); err == nil {
				break
			}
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("%s: the probe never started", run.name)
			}
			time.Sleep(5 * time.Millisecond) // polling a file the child writes
		}
		cancel()
		select {
		case <-done:
		case <-time.After(4 * time.Second):
			t.Fatalf("%s did not return before the 5s sleep would have", run.name)
		}
		if res := r.Results()[0]; res.Ran || !res.Passed {
			t.Errorf("%s: interrupted run recorded: %+v", run.name, res)
		}
		if notified(r) {
			t.Errorf("%s: interrupted run notified a change", run.name)
		}
	}
}

// TestConcurrentReaders exercises the accessors against running
// probes (Run and RunOnce overlapping), for the race detector.
func TestConcurrentReaders(t *testing.T) {
	t.Parallel()
	const every = 20 * time.Millisecond
	r := NewRunner(Config{
		FailedUnits: FailedUnits{Enabled: true, Command: []string{"/bin/false"}, Interval: every, Timeout: 2 * time.Second},
		Probes: []Spec{
			{Name: "a", Type: Exec, Command: []string{"/bin/true"}, Interval: every, Timeout: 2 * time.Second},
			{Name: "b", Type: Exec, Command: []string{"/bin/false"}, Interval: every, Timeout: 2 * time.Second},
		},
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	r.RunOnce(ctx)
	// Read while Run goes on, until it has recorded a few more runs of "a".
	deadline := time.Now().Add(bound)
	var last time.Time
	for runs := 0; runs < 3 && time.Now().Before(deadline); {
		_, _ = r.Summary()
		_ = r.Details()
		if a := r.Results()[0]; !a.Finished.Equal(last) {
			last, runs = a.Finished, runs+1
		}
		runtime.Gosched()
	}
	cancel()
	<-done
	s, units := r.Summary()
	if diff := cmp.Diff(proto.ProbeSummary{Total: 2, Failed: []string{"b"}}, s); diff != "" {
		t.Errorf("Summary (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{ErrorFailedUnits}, units); diff != "" {
		t.Errorf("failed units (-want +got):\n%s", diff)
	}
	if !notified(r) {
		t.Error("no change notified")
	}
}

// holdLowPort binds a free port below 1024 on 127.0.0.1 (the tests run as
// root) without listening, until the test ends.
func holdLowPort(t *testing.T) (int, string) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	for port := 1; port < 1024; port++ {
		if syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}) == nil {
			return fd, fmt.Sprintf("127.0.0.1:%d", port)
		}
	}
	t.Fatal("no free port below 1024 on 127.0.0.1 (are the tests running as root?)")
	return 0, ""
}
