package controlplane_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"net/http/httptrace"
	"sync"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/proto"
)

// TestResumedSessionKeepsIdentity: a client that opens a connection per
// request resumes its TLS session from the second on (no certificate is
// sent again), and a resumed connection is the same client as the one
// that began the session: a host's check-ins are accepted, a stranger's
// refused as on its first handshake. The control plane counts both kinds
// of handshake.
func TestResumedSessionKeepsIdentity(t *testing.T) {
	e := newEnv(t, "sqlite", smallSpec(), nil)
	e.onboard(e.hosts())
	_, strangerKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h := e.spec.Hosts[1]
	before := e.metrics()
	for _, tc := range []struct {
		name string
		key  ed25519.PrivateKey
		want string // the error code, "" for none
	}{
		{h.Name, h.Key, ""},
		{"stranger", strangerKey, codes.UnknownClient},
	} {
		c, err := apiclient.New(e.url, apiclient.Options{Key: tc.key, Name: tc.name, ServerCAs: e.cert.Pool,
			Timeout: 20 * time.Second, DisableKeepAlives: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			var mu sync.Mutex
			var resumed []bool
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				TLSHandshakeDone: func(cs tls.ConnectionState, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err == nil {
						resumed = append(resumed, cs.DidResume)
					}
				},
			})
			cur := fleetrepo.Closure(h.Name, "v0")
			_, err := c.Checkin(ctx, proto.CheckinRequest{Hostname: h.Name, Current: cur, Booted: cur,
				Probes: proto.ProbeSummary{Total: 1, Failed: []string{}}, FailedUnits: []string{}})
			var ae *apiclient.Error
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%s's check-in %d: %v", tc.name, i, err)
			case tc.want != "" && (!errors.As(err, &ae) || ae.Code != tc.want):
				t.Errorf("%s's check-in %d: %v, want %s", tc.name, i, err, tc.want)
			}
			mu.Lock()
			// The first connection makes a full handshake, the next ones
			// resume the session its ticket began.
			if want := i > 0; len(resumed) != 1 || resumed[0] != want {
				t.Errorf("%s's check-in %d: handshakes resumed %v, want [%v]", tc.name, i, resumed, want)
			}
			mu.Unlock()
		}
	}
	// The second read of the metrics makes a full handshake of its own.
	after := e.metrics()
	for label, want := range map[string]float64{"false": 2 + 1, "true": 4} {
		name := `nixfleet_tls_handshakes_total{resumed="` + label + `"}`
		if got := after[name] - before[name]; got != want {
			t.Errorf("%s grew by %v, want %v", name, got, want)
		}
	}
}
