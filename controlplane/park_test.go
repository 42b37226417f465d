package controlplane_test

import (
	"bytes"
	"context"
	"net/http/httptrace"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/proto"
)

const parkedGauge = "nixfleet_long_polls_parked"

// serving counts this process's goroutines in a frame matching fn.
func serving(t *testing.T, fn string) int {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, fn) {
			n++
		}
	}
	return n
}

// awaitParked waits until n long-polls are parked.
func awaitParked(t *testing.T, e *env, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.metrics()[parkedGauge] != float64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v, want %d", parkedGauge, e.metrics()[parkedGauge], n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestParkedLongPolls: a long-poll that waits is parked (park.go): no
// goroutine serves its connection while it waits; it is answered when its
// host's activation changes (and not when only the reason it waits
// changes), or when its wait runs out, on the same
// connection, which then serves the host's next request; a request that
// asks to close its connection waits as before; and at shutdown every
// parked long-poll is answered at once, and every answered connection
// waiting idle for its next request is closed.
func TestParkedLongPolls(t *testing.T) {
	for _, backend := range backends {
		// Not in parallel: the test counts this process's goroutines.
		t.Run(backend, func(t *testing.T) {
			e := newEnv(t, backend, smallSpec(), nil)
			e.onboard(e.hosts())
			ctx := context.Background()
			clients := map[string]*apiclient.Client{}
			for _, h := range e.spec.Hosts {
				clients[h.Name] = e.client(h.Key, h.Name)
			}
			checkin := func(c *apiclient.Client, name, version string, wait int, known *proto.TargetRef, reused *bool) (proto.CheckinResponse, error) {
				ctx := ctx
				if reused != nil {
					ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { *reused = i.Reused }})
				}
				cur := fleetrepo.Closure(name, version)
				return c.Checkin(ctx, proto.CheckinRequest{Hostname: name, Current: cur, Booted: cur,
					Probes: proto.ProbeSummary{Total: 1, Failed: []string{}}, FailedUnits: []string{}, Wait: wait, Known: known})
			}
			type answer struct {
				resp proto.CheckinResponse
				err  error
				took time.Duration
			}
			poll := func(name string, wait int) <-chan answer {
				out := make(chan answer, 1)
				go func() {
					began := time.Now()
					resp, err := checkin(clients[name], name, "v0", wait, nil, nil)
					out <- answer{resp, err, time.Since(began)}
				}()
				return out
			}
			parked := func(n int) {
				t.Helper()
				awaitParked(t, e, n)
			}
			// A first check-in of each host opens its connection.
			for _, h := range e.spec.Hosts {
				if _, err := checkin(clients[h.Name], h.Name, "v0", 0, nil, nil); err != nil {
					t.Fatal(err)
				}
			}
			serveBefore := serving(t, "net/http.(*conn).serve")

			// Four long-polls park: no goroutine waits for them.
			canary := poll("canary", 30)
			web1 := poll("web-1", 1)
			web2, web3 := poll("web-2", 15), poll("web-3", 15)
			parked(4)
			if n := serving(t, "controlplane.(*hub).wait"); n != 0 {
				t.Errorf("%d goroutines wait in the hub", n)
			}
			if n := serving(t, "net/http.(*conn).serve"); n > serveBefore {
				t.Errorf("%d goroutines serve connections with four long-polls parked, %d before", n, serveBefore)
			}

			// web-1's wait runs out: answered, nothing new.
			a := <-web1
			if a.err != nil || a.resp.Target != nil || a.resp.StatusTag == "" || a.resp.ServerTime == "" {
				t.Fatalf("web-1's long-poll ran out: %+v, %v", a.resp, a.err)
			}
			if a.took < time.Second {
				t.Errorf("web-1's 1 s long-poll was answered after %s", a.took)
			}
			parked(3)

			// A release: the canary's activation changes, and its parked
			// long-poll is answered with its target at once. web-2 and
			// web-3 now wait in the new rollout, with nothing to do: they
			// stay parked.
			e.release("v1", 2)
			a = <-canary
			if a.err != nil || a.resp.Target == nil || a.resp.Target.Closure != fleetrepo.Closure("canary", "v1") {
				t.Fatalf("the canary's long-poll: %+v, %v", a.resp, a.err)
			}
			parked(2)
			// Its connection serves its next request.
			var reused bool
			tgt := a.resp.Target
			if _, err := checkin(clients["canary"], "canary", "v0", 0, &proto.TargetRef{RolloutID: tgt.RolloutID, Closure: tgt.Closure, Token: tgt.Token}, &reused); err != nil {
				t.Fatal(err)
			}
			if !reused {
				t.Error("the canary's next check-in did not reuse the connection its long-poll was answered on")
			}

			// A request that closes its connection is not parked: it waits
			// on its goroutine.
			closing, err := apiclient.New(e.url, apiclient.Options{Key: e.spec.Hosts[1].Key, Name: "web-1", ServerCAs: e.cert.Pool,
				Timeout: 20 * time.Second, DisableKeepAlives: true})
			if err != nil {
				t.Fatal(err)
			}
			clients["web-1"] = closing
			web1 = poll("web-1", 2)
			deadline := time.Now().Add(10 * time.Second)
			for serving(t, "controlplane.(*hub).wait") != 1 {
				if time.Now().After(deadline) {
					t.Fatal("web-1's long-poll on a closing connection does not wait in the hub")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if g := e.metrics()[parkedGauge]; g != 2 {
				t.Errorf("%s is %v with a closing long-poll waiting, want 2", parkedGauge, g)
			}
			if a := <-web1; a.err != nil || a.took < 2*time.Second {
				t.Errorf("web-1's closing long-poll: %v after %s", a.err, a.took)
			}

			// web-1's first connection, its long-poll answered, waits idle
			// for a next request that does not come.
			if n := serving(t, "controlplane.(*lot).await"); n != 1 {
				t.Errorf("%d answered connections wait idle, want 1 (web-1's)", n)
			}

			// Shutdown answers the parked long-polls at once, and closes
			// the connection waiting idle.
			stopped := time.Now()
			e.stop()
			if n := serving(t, "controlplane.(*lot).await"); n != 0 {
				t.Errorf("%d goroutines wait on idle connections after shutdown", n)
			}
			for name, c := range map[string]<-chan answer{"web-2": web2, "web-3": web3} {
				a := <-c
				if a.err != nil || a.resp.StatusTag == "" {
					t.Errorf("%s's long-poll at shutdown: %+v, %v", name, a.resp, a.err)
				}
			}
			if took := time.Since(stopped); took > 10*time.Second {
				t.Errorf("shutting down took %s with long-polls parked", took)
			}
		})
	}
}

// TestKeptConnectionIdles: the connection a long-poll was answered on
// stays open while its agent pauses before the next request, as any kept
// connection may (up to the HTTP server's IdleTimeout, 2 min), and not
// only for its ReadHeaderTimeout (10 s): the next check-in, a minute
// later, goes over the same connection, with no new TLS handshake.
func TestKeptConnectionIdles(t *testing.T) {
	t.Parallel() // it sleeps a minute
	// One backend: the store plays no part in how a connection is kept.
	e := newEnv(t, "sqlite", smallSpec(), nil)
	e.onboard(e.hosts())
	h := e.spec.Hosts[1]
	c := e.client(h.Key, h.Name)
	// conn is how a check-in went: over a kept connection or not, from
	// which local address, after how many TLS handshakes.
	type conn struct {
		reused     bool
		local      string
		handshakes int
	}
	checkin := func(wait int) (conn, error) {
		var mu sync.Mutex
		var got conn
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			TLSHandshakeStart: func() { mu.Lock(); got.handshakes++; mu.Unlock() },
			GotConn: func(i httptrace.GotConnInfo) {
				mu.Lock()
				got.reused, got.local = i.Reused, i.Conn.LocalAddr().String()
				mu.Unlock()
			},
		})
		cur := fleetrepo.Closure(h.Name, "v0")
		_, err := c.Checkin(ctx, proto.CheckinRequest{Hostname: h.Name, Current: cur, Booted: cur,
			Probes: proto.ProbeSummary{Total: 1, Failed: []string{}}, FailedUnits: []string{}, Wait: wait})
		mu.Lock()
		defer mu.Unlock()
		return got, err
	}

	// A check-in opens the connection; a long-poll parks on it and is
	// answered when its wait runs out.
	first, err := checkin(0)
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan error, 1)
	var poll conn
	go func() {
		var err error
		poll, err = checkin(1)
		polled <- err
	}()
	awaitParked(t, e, 1)
	if err := <-polled; err != nil {
		t.Fatal(err)
	}
	if !poll.reused || poll.local != first.local {
		t.Fatalf("the long-poll went over %+v, the first check-in over %+v", poll, first)
	}

	// The agent pauses a minute, then checks in again.
	time.Sleep(61 * time.Second)
	next, err := checkin(0)
	if err != nil {
		t.Fatal(err)
	}
	if !next.reused || next.local != first.local || next.handshakes != 0 {
		t.Errorf("a minute after its long-poll was answered, a check-in went over %+v, want the kept connection from %s",
			next, first.local)
	}
}
