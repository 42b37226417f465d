package notify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/notify"
	"github.com/nixfleet/nixfleet/internal/clock"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// alertmanagerBinary is Alertmanager: $NIXFLEET_ALERTMANAGER, else
// Debian's prometheus-alertmanager, which .ci/run installs. A machine
// without it fails the test: the format is never left untested.
func alertmanagerBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("NIXFLEET_ALERTMANAGER"); b != "" {
		return b
	}
	for _, name := range []string{"prometheus-alertmanager", "alertmanager"} {
		if b, err := exec.LookPath(name); err == nil {
			return b
		}
	}
	t.Fatal("Alertmanager is not installed: run .ci/run as root, which installs Debian's prometheus-alertmanager package")
	return ""
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startAlertmanager runs Alertmanager on a loopback port, with its own
// storage and no cluster, until the test ends, and returns its URL once
// it is ready.
func startAlertmanager(t *testing.T) string {
	t.Helper()
	bin, dir := alertmanagerBinary(t), t.TempDir()
	conf := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(conf, []byte("route:\n  receiver: \"null\"\nreceivers:\n  - name: \"null\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	out := &lockedBuffer{}
	cmd := exec.Command(bin, "--config.file="+conf, "--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--cluster.listen-address=", "--log.level=warn")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("alertmanager's output:\n%s", out.String())
		}
	})
	url := "http://" + addr
	// An external process: there is no signal to wait on, so poll.
	waitFor(t, 30*time.Second, "Alertmanager is ready", func() bool {
		select {
		case <-exited:
			t.Fatalf("alertmanager exited:\n%s", out.String())
		default:
		}
		resp, err := http.Get(url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return url
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tk := time.NewTicker(50 * time.Millisecond)
	defer tk.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %s", what, d)
		case <-tk.C:
		}
	}
}

// amAlert is an alert as Alertmanager's GET /api/v2/alerts shows it.
type amAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	Status      struct {
		State string `json:"state"`
	} `json:"status"`
}

// TestAlertmanager: a real Alertmanager takes the alertmanager bodies at
// POST /api/v2/alerts: a partial visibility's alert, which its
// visibility_restored resolves, then a halted rollout's, active, with its
// labels, summary and the event's time.
func TestAlertmanager(t *testing.T) {
	t.Parallel()
	am := startAlertmanager(t)
	w := newWorld(t, "sqlite")
	w.clk = clock.NewFake(time.Now().UTC().Truncate(time.Second).Add(-time.Minute)) // Alertmanager judges endsAt by its clock
	if _, err := w.st.StartNotificationCursor(context.Background(), "am", 0, w.clk.Now()); err != nil {
		t.Fatal(err)
	}
	o := w.options(notify.Sink{Name: "am", URL: am + "/api/v2/alerts", Format: notify.FormatAlertmanager})
	o.Metrics = metrics()
	w.start(o)
	w.append(rc.Event{Kind: rc.EventPartialVisibility, Channel: "prod", Wave: -1, Reason: rc.Reason{Code: codes.PartialVisibility, Message: "3 of 4 hosts silent"}})
	w.clk.Advance(10 * time.Second)
	w.append(rc.Event{Kind: rc.EventVisibilityRestored, Channel: "prod", Wave: -1, Reason: rc.Reason{Code: codes.VisibilityRestored, Message: "back"}})
	w.clk.Advance(10 * time.Second)
	halted := ev(rc.EventRolloutTransition, "prod", "Active", "Halted")
	haltedAt := w.clk.Now()
	w.append(halted)

	var alerts []amAlert
	waitFor(t, 30*time.Second, "Alertmanager has the halted rollout's alert", func() bool {
		resp, err := http.Get(am + "/api/v2/alerts")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		alerts = nil
		if json.NewDecoder(resp.Body).Decode(&alerts) != nil || value(t, o.Metrics, "sent", "am") < 3 {
			return false
		}
		// The first alert may be in before the others were sent: wait for
		// the halted rollout's.
		for _, a := range alerts {
			if a.Labels["alertname"] == "NixfleetRolloutHalted" {
				return true
			}
		}
		return false
	})
	if n := value(t, o.Metrics, "sent", "am"); n != 3 {
		t.Errorf("%v alerts sent, want 3", n)
	}
	if len(alerts) != 1 {
		t.Fatalf("Alertmanager has %d alerts, want the halted rollout's alone (the partial visibility's resolved): %+v", len(alerts), alerts)
	}
	a := alerts[0]
	want := map[string]string{"alertname": "NixfleetRolloutHalted", "severity": "critical", "category": "halted",
		"rollout": halted.RolloutID, "channel": "prod"}
	if d := cmp.Diff(want, a.Labels); d != "" {
		t.Errorf("labels (-want +got):\n%s", d)
	}
	if a.Annotations["summary"] != "prod@0123456789ab: Active → Halted [converged] rollout_transition Halted" ||
		!a.StartsAt.Equal(haltedAt) || a.Status.State != "active" {
		t.Errorf("alert %+v, want it active since %s", a, haltedAt)
	}
}
