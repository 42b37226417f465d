package demo

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/notify"
)

// notifyLogSink is the name of the demo's notification sink.
const notifyLogSink = "demo-log"

// notificationLog is a webhook sink for the demo's control plane
// (rfcs/0006 §Notifications): it checks each delivery's HMAC signature
// and appends one line per notification (time, category, summary) to
// notifications.log, as a team's chat or pager would show it.
type notificationLog struct {
	secret []byte
	file   *os.File
	mu     sync.Mutex
	srv    *http.Server
	url    string
	wg     sync.WaitGroup
	// secretFile holds the secret, for the printed configuration.
	secretFile string
}

// startNotificationLog writes a fresh secret to dir/notify-secret and
// serves the sink on a free loopback port.
func startNotificationLog(dir string) (*notificationLog, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	n := &notificationLog{secret: []byte(hex.EncodeToString(b[:])), secretFile: dir + "/notify-secret"}
	if err := os.WriteFile(n.secretFile, append(append([]byte{}, n.secret...), '\n'), 0o600); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(dir+"/notifications.log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	n.file = f
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Close()
		return nil, err
	}
	n.url = "http://" + ln.Addr().String() + "/hook"
	n.srv = &http.Server{Handler: http.HandlerFunc(n.receive), ReadHeaderTimeout: 5 * time.Second}
	n.wg.Add(1)
	go func() { defer n.wg.Done(); _ = n.srv.Serve(ln) }()
	return n, nil
}

// sink is the control plane's configuration of this sink.
func (n *notificationLog) sink() notify.Sink {
	return notify.Sink{Name: notifyLogSink, URL: n.url, Format: notify.FormatJSON, Secret: n.secret,
		MinBackoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second}
}

func (n *notificationLog) receive(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "reading the body", http.StatusBadRequest)
		return
	}
	if !hmac.Equal([]byte(r.Header.Get("X-Nixfleet-Signature")), []byte(notify.Signature(n.secret, body))) {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var m notify.Message
	if err := json.Unmarshal(body, &m); err != nil {
		http.Error(w, "not a notification", http.StatusBadRequest)
		return
	}
	n.mu.Lock()
	_, err = fmt.Fprintf(n.file, "%s  %-18s %s\n", m.Event.At.UTC().Format(time.RFC3339), m.Category, m.Summary)
	n.mu.Unlock()
	if err != nil {
		http.Error(w, "writing the log", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// stop stops serving and closes the log.
func (n *notificationLog) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = n.srv.Shutdown(ctx)
	n.wg.Wait()
	n.file.Close()
}

// example is the TOML that configures this sink in a control plane's
// configuration file (rfcs/0006 §Notifications).
func (n *notificationLog) example() string {
	return fmt.Sprintf("[[notifications.webhook]]\n"+
		"name = %q\n"+
		"url = %q\n"+
		"format = \"json\"            # or \"slack\", \"alertmanager\"\n"+
		"secret-file = %q   # X-Nixfleet-Signature: sha256=HMAC of the body\n"+
		"events = [\"rollout_opened\", \"wave_promoted\", \"halted\", \"reverted\", \"converged\",\n"+
		"          \"failed\", \"approval_needed\", \"partial_visibility\", \"release_refused\", \"analysis\"]\n",
		notifyLogSink, n.url, n.secretFile)
}
