package apiclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/apiclient"
)

func newClient(t *testing.T, h http.Handler, timeout time.Duration) *apiclient.Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := apiclient.New(srv.URL, apiclient.Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFollowOutlivesTimeout: a stream that lasts longer than the client's
// request timeout is not cut.
func TestFollowOutlivesTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 50 * time.Millisecond
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.URL.Query().Get("follow"); got != "1" {
			t.Errorf("follow=%q", got)
		}
		if got := r.URL.Query().Get("after"); got != "7" {
			t.Errorf("after=%q", got)
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		for id := 8; id <= 10; id++ {
			fmt.Fprintf(w, "{\"id\":%d}\n", id)
			w.(http.Flusher).Flush()
			// Each pause is longer than the whole timeout.
			select {
			case <-time.After(3 * timeout):
			case <-r.Context().Done():
				return
			}
		}
	}), timeout)
	var got []string
	err := c.Follow(context.Background(), "stable@1", 7, func(m json.RawMessage) error {
		got = append(got, string(m))
		return nil
	})
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	if diff := cmp.Diff([]string{`{"id":8}`, `{"id":9}`, `{"id":10}`}, got); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

// TestFollowHeaderTimeout: a server that never answers is still given up
// on after the timeout.
func TestFollowHeaderTimeout(t *testing.T) {
	t.Parallel()
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}), 50*time.Millisecond)
	err := c.Follow(context.Background(), "stable@1", 0, func(json.RawMessage) error { return nil })
	if err == nil {
		t.Fatal("Follow returned without an error")
	}
}

func TestFollowErrorAnswer(t *testing.T) {
	t.Parallel()
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintln(w, `{"code":"not_found","message":"no rollout \"x\""}`)
	}), time.Second)
	err := c.Follow(context.Background(), "x", 0, func(json.RawMessage) error { return nil })
	if !apiclient.IsCode(err, "not_found") {
		t.Fatalf("Follow: %v, want not_found", err)
	}
}

// TestAct: an intent's answer is decoded whatever the verdict, and a
// refusal carries the server's own code.
func TestAct(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		status   int
		body     string
		wantCode string // "" for success
		wantOut  bool
	}{
		{name: "accepted", status: 200, wantOut: true,
			body: `{"intent":{"id":"i1"},"result":{"intentId":"i1","accepted":true,"reason":{"code":"operator_pause"}}}`},
		{name: "queued", status: 202, wantOut: true, body: `{"intent":{"id":"i1"},"result":null}`},
		{name: "refused", status: 409, wantOut: true, wantCode: "illegal_transition",
			body: `{"intent":{"id":"i1"},"result":{"intentId":"i1","accepted":false,"reason":{"code":"illegal_transition","message":"a Converged rollout cannot resume"}}}`},
		{name: "conflict error body", status: 409, wantCode: "busy", body: `{"code":"busy","message":"later"}`},
		{name: "forbidden", status: 403, wantCode: "forbidden", body: `{"code":"forbidden","message":"viewers may not act"}`},
		{name: "no code", status: 502, wantCode: "http_502", body: `bad gateway`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost || r.URL.Path != "/v1/rollouts/stable@1/pause" {
					t.Errorf("%s %s", r.Method, r.URL.Path)
				}
				var req map[string]string
				if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req["comment"] != "why" {
					t.Errorf("body %v (%v)", req, err)
				}
				w.WriteHeader(tc.status)
				fmt.Fprintln(w, tc.body)
			}), time.Second)
			var out struct {
				Intent struct {
					ID string `json:"id"`
				} `json:"intent"`
			}
			err := c.Act(context.Background(), "stable@1", "pause", "why", &out)
			if tc.wantCode == "" {
				if err != nil {
					t.Fatalf("Act: %v", err)
				}
			} else {
				var e *apiclient.Error
				if !errors.As(err, &e) || e.Code != tc.wantCode || e.Status != tc.status {
					t.Fatalf("Act: %#v, want code %s and status %d", err, tc.wantCode, tc.status)
				}
			}
			if got := out.Intent.ID == "i1"; got != tc.wantOut {
				t.Fatalf("answer decoded: %v, want %v", got, tc.wantOut)
			}
		})
	}
}
