// Package sinktest is a notification sink for tests: a real HTTP server
// on loopback that takes the control plane's webhook POSTs (package
// controlplane/notify), checks each one's HMAC signature with its own
// code, keeps every POST, and answers as the test says — failing for a
// while, or holding a request as a slow sink does.
//
// It does not import the control plane, so that the control plane's own
// tests may use it as well as the CLI's.
package sinktest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Delivery is one POST the sink received.
type Delivery struct {
	// ID is X-Nixfleet-Delivery (<sink>/<event id>); EventID is
	// X-Nixfleet-Event-Id.
	ID      string
	EventID int64
	// Body is the body as received, Message its json form (zero for
	// another format).
	Body    []byte
	Message Message
	Header  http.Header
	// Signed: X-Nixfleet-Signature is the body's HMAC-SHA256 with the
	// sink's secret.
	Signed bool
	// Attempt counts the POSTs of this delivery id, this one included.
	Attempt int
	// Status is what the sink answered.
	Status int
}

// Message is the json body of a notification, as a receiver reads it.
type Message struct {
	Version    int    `json:"version"`
	DeliveryID string `json:"deliveryId"`
	Sink       string `json:"sink"`
	Category   string `json:"category"`
	Summary    string `json:"summary"`
	Event      struct {
		ID        int64  `json:"id"`
		Kind      string `json:"kind"`
		RolloutID string `json:"rolloutId"`
		Channel   string `json:"channel"`
		From      string `json:"from"`
		To        string `json:"to"`
	} `json:"event"`
}

// Sink is a webhook receiver.
type Sink struct {
	URL    string
	t      testing.TB
	srv    *httptest.Server
	secret []byte
	answer func(n int, d Delivery) int

	mu    sync.Mutex
	posts []Delivery
	got   chan Delivery
	post  chan struct{} // closed and replaced at every POST received
}

// New starts a sink that checks signatures with secret and answers the
// n-th POST (from 1) with answer's status (nil: 200 to all). answer may
// block: the POST is then in flight until it returns. The sink stops when
// the test ends, after the test's later cleanups.
func New(t testing.TB, secret string, answer func(n int, d Delivery) int) *Sink {
	s := &Sink{t: t, secret: []byte(secret), answer: answer, got: make(chan Delivery, 10000), post: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	t.Cleanup(s.srv.Close)
	return s
}

func (s *Sink) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.t.Errorf("sinktest: reading a POST: %v", err)
	}
	d := Delivery{ID: r.Header.Get("X-Nixfleet-Delivery"), Body: body, Header: r.Header.Clone()}
	d.EventID, _ = strconv.ParseInt(r.Header.Get("X-Nixfleet-Event-Id"), 10, 64)
	mac := hmac.New(sha256.New, s.secret)
	mac.Write(body)
	d.Signed = hmac.Equal([]byte(r.Header.Get("X-Nixfleet-Signature")), []byte("sha256="+hex.EncodeToString(mac.Sum(nil))))
	_ = json.Unmarshal(body, &d.Message)
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
		s.t.Errorf("sinktest: %s with Content-Type %q", r.Method, r.Header.Get("Content-Type"))
	}
	s.mu.Lock()
	for _, p := range s.posts {
		if p.ID == d.ID {
			d.Attempt++
		}
	}
	d.Attempt++
	n := len(s.posts) + 1
	s.posts = append(s.posts, d)
	close(s.post)
	s.post = make(chan struct{})
	s.mu.Unlock()
	d.Status = http.StatusOK
	if s.answer != nil {
		d.Status = s.answer(n, d)
	}
	s.mu.Lock()
	s.posts[n-1].Status = d.Status
	s.mu.Unlock()
	w.WriteHeader(d.Status)
	if d.Status/100 == 2 {
		s.got <- d
	}
}

// Posted returns a channel closed at the next POST the sink receives.
func (s *Sink) Posted() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.post
}

// Receive waits for the next n deliveries the sink answered with a 2xx,
// in the order it answered them; d bounds a test that hangs.
func (s *Sink) Receive(n int, d time.Duration) []Delivery {
	s.t.Helper()
	var out []Delivery
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for len(out) < n {
		select {
		case x := <-s.got:
			out = append(out, x)
		case <-timeout.C:
			s.t.Fatalf("sinktest: %d deliveries of %d within %s; POSTs: %v", len(out), n, d, s.Posts())
		}
	}
	return out
}

// Posts returns every POST received so far.
func (s *Sink) Posts() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.posts...)
}

// Ids lists the event ids of deliveries.
func Ids(ds []Delivery) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.EventID
	}
	return out
}
