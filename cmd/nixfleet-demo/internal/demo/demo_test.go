package demo

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
)

// testRollout is what the test reads of a rollout in the report.
type testRollout struct {
	ID      string         `json:"id"`
	Channel string         `json:"channel"`
	Release string         `json:"release"`
	Role    string         `json:"role"`
	State   string         `json:"state"`
	Hosts   int            `json:"hosts"`
	Counts  map[string]int `json:"counts"`
}

// TestDemo runs the demo and checks its one JSON document:
// both rollouts of the good release converged on every host, the bad one
// was rolled back at its canary on staging only, and the temporary
// directory is gone.
func TestDemo(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // the demo's directory goes there
	t.Setenv("NO_COLOR", "1")

	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), Options{Hosts: 6, JSON: true, Timeout: 2 * time.Minute}, &stdout, &stderr); err != nil {
		t.Fatalf("Run: %v; stderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
	}
	var rep struct {
		OK       bool          `json:"ok"`
		Hosts    int           `json:"hosts"`
		Rollouts []testRollout `json:"rollouts"`
	}
	dec := json.NewDecoder(bytes.NewReader(stdout.Bytes()))
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("stdout is not a JSON document: %v\n%s", err, stdout.String())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Fatalf("stdout holds more than one JSON document (%v):\n%s", err, stdout.String())
	}
	if !rep.OK || rep.Hosts != 6 {
		t.Errorf("ok %v, hosts %d; want true, 6", rep.OK, rep.Hosts)
	}

	idRE := regexp.MustCompile(`^(staging|prod)@[0-9a-f]{7,64}$`)
	byRelease := map[string]testRollout{}
	seen := map[string]bool{}
	for _, r := range rep.Rollouts {
		if !idRE.MatchString(r.ID) || !strings.HasPrefix(r.ID, r.Channel+"@") {
			t.Errorf("rollout id %q (channel %q) is not <channel>@<commit>", r.ID, r.Channel)
		}
		if seen[r.ID] {
			t.Errorf("rollout %s is listed twice", r.ID)
		}
		seen[r.ID] = true
		byRelease[r.Channel+" "+r.Release] = r
	}
	tests := []struct {
		name, key, state string
		counts           func(r testRollout) map[string]int
	}{
		{"baseline staging", "staging v0", "Converged", allConverged},
		{"baseline prod", "prod v0", "Converged", allConverged},
		{"good release on staging", "staging v1", "Converged", allConverged},
		{"good release on prod", "prod v1", "Converged", allConverged},
		// Only the canary moved, failed its health gate and came back;
		// the rest of staging never left v1.
		{"bad release on staging", "staging v2", "Reverted", func(r testRollout) map[string]int {
			return map[string]int{"Reverted": 1, "Pending": r.Hosts - 1}
		}},
	}
	hosts := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := byRelease[tt.key]
			if !ok {
				t.Fatalf("no rollout of %s in %+v", tt.key, rep.Rollouts)
			}
			if r.State != tt.state {
				t.Errorf("%s is %s, want %s", r.ID, r.State, tt.state)
			}
			if want := tt.counts(r); !equalCounts(r.Counts, want) {
				t.Errorf("%s hosts %v, want %v", r.ID, r.Counts, want)
			}
		})
		if strings.HasSuffix(tt.key, " v1") {
			hosts += byRelease[tt.key].Hosts
		}
	}
	if hosts != 6 {
		t.Errorf("the good release's rollouts have %d hosts, want all 6", hosts)
	}
	if len(rep.Rollouts) != len(tests) {
		t.Errorf("%d rollouts, want %d (the bad release must not reach prod): %+v", len(rep.Rollouts), len(tests), rep.Rollouts)
	}

	// The story is told on stderr.
	for _, want := range []string{"Active → Reverting", "health_failure", "Reverting → Reverted", "budget",
		// staging's second wave is rebooted into its new kernel (rfcs/0003
		// rule 17).
		"Deferred → Rebooting", "reboot_dispatched", "Rebooting → Soaking",
		// Each wave of the good release is judged by its services too:
		// the staging canary's analysis (rfcs/0003 rule 16).
		`analysis error-ratio of wave 0 (canary), measurement 1 of 1: successful: 0.004 meets result < 0.02; query: max(demo_http_error_ratio{host=~"stg-web-01"})`,
		"analysis error-ratio of wave 0 (canary) ended successful"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not mention %q:\n%s", want, stderr.String())
		}
	}
	if strings.Contains(stderr.String(), "\x1b[") {
		t.Error("colour codes on a stream that is not a terminal")
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left behind in TMPDIR: %s", e.Name())
	}
}

func allConverged(r testRollout) map[string]int { return map[string]int{"Converged": r.Hosts} }

func equalCounts(got, want map[string]int) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	for k, v := range got {
		if want[k] != v {
			return false
		}
	}
	return true
}

// TestDemoFleet checks the fleet the demo signs, for every size it takes:
// it validates, every host is in exactly one wave of its channel, each
// channel has a canary wave first, and host edges never point backwards
// across waves (a web host waits for its database only in the same or a
// later wave).
func TestDemoFleet(t *testing.T) {
	t.Parallel()
	for _, n := range []int{MinHosts, 5, 8, 9, 10, 20, 39, 40, 50, 99, 100, MaxHosts} {
		f, err := newFleet(n)
		if err != nil {
			t.Fatalf("%d hosts: %v", n, err)
		}
		if len(f.hosts) != n {
			t.Errorf("%d hosts: the fleet has %d", n, len(f.hosts))
		}
		unsigned, err := f.unsigned(v1)
		if err != nil {
			t.Fatal(err)
		}
		fleet, err := proto.DecodeFleetResolved(unsigned)
		if err != nil {
			t.Fatalf("%d hosts: %v", n, err)
		}
		if _, err := manifest.ValidateFleet(fleet); err != nil {
			t.Errorf("%d hosts: %v", n, err)
		}
		for _, c := range f.channels {
			if len(c.waves[0].hosts) != 1 || c.waves[0].hosts[0] != c.canary || c.canary == "" {
				t.Errorf("%d hosts: %s's first wave is %v, want its canary %q alone", n, c.name, c.waves[0].hosts, c.canary)
			}
			listed := 0
			for _, w := range c.waves {
				if len(w.hosts) == 0 {
					t.Errorf("%d hosts: %s wave %s is empty", n, c.name, w.name)
				}
				listed += len(w.hosts)
			}
			if listed != len(c.hosts) {
				t.Errorf("%d hosts: %s's waves list %d hosts, it has %d", n, c.name, listed, len(c.hosts))
			}
		}
		for _, e := range f.edges {
			if f.byName[e.Gates].wave > f.byName[e.Gated].wave {
				t.Errorf("%d hosts: %s (wave %d) gates %s of an earlier wave", n, e.Gates, f.byName[e.Gates].wave, e.Gated)
			}
		}
	}
}

// TestRunRefusesBadOptions: options out of range are refused before
// anything starts.
func TestRunRefusesBadOptions(t *testing.T) {
	t.Parallel()
	for _, opts := range []Options{
		{Hosts: MinHosts - 1, Timeout: time.Minute},
		{Hosts: MaxHosts + 1, Timeout: time.Minute},
		{Hosts: DefaultHosts},
	} {
		var out bytes.Buffer
		err := Run(context.Background(), opts, &out, &out)
		var e *Error
		if !errors.As(err, &e) || e.Code != "usage" || out.Len() != 0 {
			t.Errorf("%+v: %v, output %q; want a usage error and no output", opts, err, out.String())
		}
	}
}

// syncBuffer is a buffer written by one goroutine and read by another.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDemoKeepDashboard: with --keep the report carries a link that signs
// the demo's operator in to the dashboard, once, while the control plane
// keeps running.
func TestDemoKeepDashboard(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("NO_COLOR", "1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Hosts: 4, JSON: true, Keep: true, Timeout: 2 * time.Minute}, &stdout, &stderr)
	}()
	var rep struct {
		OK        bool   `json:"ok"`
		Dir       string `json:"dir"`
		Dashboard string `json:"dashboard"`
	}
	deadline := time.Now().Add(2 * time.Minute)
	for json.Unmarshal([]byte(stdout.String()), &rep) != nil {
		select {
		case err := <-done:
			t.Fatalf("the demo ended: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no report; stderr:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !rep.OK || !strings.Contains(rep.Dashboard, "/ui/login?token=") {
		t.Fatalf("report ok %v, dashboard %q", rep.OK, rep.Dashboard)
	}
	pem, err := os.ReadFile(filepath.Join(rep.Dir, "cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	res, err := hc.Get(rep.Dashboard)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "Signed in as <strong>demo-operator</strong>") ||
		!strings.Contains(string(body), "Channel prod") {
		t.Fatalf("opening the link: %d\n%s", res.StatusCode, body)
	}
	if !strings.Contains(stderr.String(), rep.Dashboard) {
		t.Errorf("the explanation does not print the dashboard link:\n%s", stderr.String())
	}
	// The explanation shows a notification sink's configuration, and the
	// demo's own sink received the story, signed (rfcs/0006
	// §Notifications): the bad release's revert is in its log.
	if !strings.Contains(stderr.String(), "[[notifications.webhook]]") || !strings.Contains(stderr.String(), "notifications.log") {
		t.Errorf("the explanation shows no notification sink:\n%s", stderr.String())
	}
	logged := func() string {
		b, _ := os.ReadFile(filepath.Join(rep.Dir, "notifications.log"))
		return string(b)
	}
	for !strings.Contains(logged(), "reverted           staging@") {
		if time.Now().After(deadline) {
			t.Fatalf("the sink's log has no revert:\n%s", logged())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("stopping: %v", err)
	}
	os.RemoveAll(rep.Dir)
}
