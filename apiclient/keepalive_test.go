package apiclient_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
)

// TestDisableKeepAlives: a client keeps one connection for its requests,
// unless DisableKeepAlives is set: then each request has its own, closed
// after the answer.
func TestDisableKeepAlives(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		disable   bool
		wantConns int64
	}{
		{"keep-alive", false, 1},
		{"one connection a request", true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var opened atomic.Int64
			closed := make(chan struct{}, 16)
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"status":"ok"}`))
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				switch s {
				case http.StateNew:
					opened.Add(1)
				case http.StateClosed:
					closed <- struct{}{}
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			c, err := apiclient.New(srv.URL, apiclient.Options{Timeout: 10 * time.Second, DisableKeepAlives: tc.disable})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				var out map[string]string
				if err := c.Get(context.Background(), "/healthz", &out); err != nil {
					t.Fatal(err)
				}
			}
			if got := opened.Load(); got != tc.wantConns {
				t.Errorf("%d connections for 3 requests, want %d", got, tc.wantConns)
			}
			if tc.disable {
				// The server closes each connection after its answer
				// (Connection: close); the state change may trail the
				// answer by a moment.
				limit := time.After(10 * time.Second)
				for i := range tc.wantConns {
					select {
					case <-closed:
					case <-limit:
						t.Fatalf("%d of %d connections closed after their answers", i, tc.wantConns)
					}
				}
			}
		})
	}
}
