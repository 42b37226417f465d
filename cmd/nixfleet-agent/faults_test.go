package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/testkit/nixtest"
	"github.com/nixfleet/nixfleet/internal/testkit/realfleet"
	"github.com/nixfleet/nixfleet/internal/testkit/testbin"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/trust"
)

// liar is a compromised control plane in the middle: it holds the
// control plane's TLS key and one host's key, forwards that host's
// requests to the real control plane and changes what the test asks. The
// agent must not be fooled: it trusts only what CI signed.
type liar struct {
	// Checkin may change a check-in's answer.
	Checkin func(*proto.CheckinResponse)
	// Confirm may change a confirm before it is forwarded.
	Confirm func(*proto.ConfirmRequest)
	// CheckinFor, like Checkin, may change a check-in's answer, knowing
	// the request.
	CheckinFor func(proto.CheckinRequest, *proto.CheckinResponse)
	// Answer may answer a request itself, unforwarded: ok, with the
	// status and the JSON of the answer.
	Answer func(path string, body []byte) (status int, answer any, ok bool)
}

// serve starts the liar on the world's network (or loopback) and returns
// its URL.
func (l liar) serve(w *realfleet.Fleet, key ed25519.PrivateKey) string {
	t := w.T
	t.Helper()
	clientCert, err := apiclient.SelfSignedCert(key, "liar", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	upstream := &http.Client{Timeout: 70 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: w.Cert.Pool, Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS13}}}
	serverCert, err := tls.LoadX509KeyPair(w.Cert.CertFile, w.Cert.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		if l.Answer != nil {
			if status, answer, ok := l.Answer(r.URL.Path, body); ok {
				rw.Header().Set("Content-Type", "application/json")
				rw.WriteHeader(status)
				_ = json.NewEncoder(rw).Encode(answer)
				return
			}
		}
		if r.URL.Path == "/v1/agent/confirm" && l.Confirm != nil {
			body = rewrite(t, body, l.Confirm)
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, w.CPURL+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := upstream.Do(req)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadGateway)
			return
		}
		if r.URL.Path == "/v1/agent/checkin" && resp.StatusCode == http.StatusOK && l.Checkin != nil {
			out = rewrite(t, out, l.Checkin)
		}
		if r.URL.Path == "/v1/agent/checkin" && resp.StatusCode == http.StatusOK && l.CheckinFor != nil {
			var req proto.CheckinRequest
			if err := json.Unmarshal(body, &req); err != nil {
				t.Errorf("liar: %v", err)
			}
			out = rewrite(t, out, func(resp *proto.CheckinResponse) { l.CheckinFor(req, resp) })
		}
		for k, v := range resp.Header {
			if k != "Content-Length" {
				rw.Header()[k] = v
			}
		}
		rw.WriteHeader(resp.StatusCode)
		_, _ = rw.Write(out)
	}))
	addr := "127.0.0.1:0"
	if w.Net != nil {
		addr = w.Net.Addr(0)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener.Close()
	srv.Listener = ln
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAnyClientCert, MinVersion: tls.VersionTLS13}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// rewrite decodes a JSON body into T, changes it and encodes it again.
func rewrite[T any](t *testing.T, body []byte, change func(*T)) []byte {
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		t.Errorf("liar: %v", err)
		return body
	}
	change(&v)
	out, err := json.Marshal(v)
	if err != nil {
		t.Errorf("liar: %v", err)
		return body
	}
	return out
}

// TestAgentFaults: the agent against failures, lies and crashes, with
// real Nix and a real nixfleet-cp over mutual TLS; every host is in its
// own network namespace (and mount namespace, with its own /nix) on a
// private subnet guarded by an unreachable route. After onboarding on
// v0, release v1:
//
//   - crash-before: the agent is killed after recording the activation
//     and before setting the profile; restarted, it switches once and
//     confirms;
//   - crash-after: the agent is killed after the switch, before the
//     confirm; restarted, it confirms without switching again;
//   - kernel: v1 has another kernel, so the agent stages it with
//     switch-to-configuration boot and reports Deferred;
//   - liar-host: a lying control plane gives the host another host's
//     closure; the signed manifest says otherwise, nothing is fetched;
//   - liar-wave: a lying control plane puts the host in another wave;
//   - refused: the confirm is refused (410), so the agent rolls back;
//   - untrusted (channel edge): the agent's trust.json pins another CI
//     key, so it refuses the manifest (bad_signature);
//   - impostor (channel edge): the agent has a key CI did not sign for
//     the host, and the control plane refuses it.
//
// What is asserted comes from the hosts' links, profiles, stores and
// switch logs, and from the control plane's journal.
func TestAgentFaults(t *testing.T) {
	network := nixtest.NewNet(t)
	stable := []string{"crash-before", "crash-after", "kernel", "liar-host", "liar-wave", "refused"}
	var hosts []fleetrepo.Host
	for _, n := range stable {
		hosts = append(hosts, fleetrepo.NewHost(n, "stable", 0))
	}
	hosts = append(hosts, fleetrepo.NewHost("untrusted", "edge", 0), fleetrepo.NewHost("impostor", "edge", 0))
	w := realfleet.New(t, realfleet.Options{Bin: bin, Net: network,
		Spec:   fleetrepo.Spec{Hosts: hosts, Channels: map[string][]int{"stable": {0}, "edge": {0}}},
		Change: map[string]map[string]nixtest.ClosureSpec{"v1": {"kernel": {Kernel: "kernel-2"}}}})
	v0, v1 := w.Closures["v0"], w.Closures["v1"]
	key := map[string]ed25519.PrivateKey{}
	for _, h := range hosts {
		key[h.Name] = h.Key
	}

	// A trust.json pinning a CI key that did not sign the releases.
	other, err := trust.GenerateKey(proto.AlgorithmEd25519)
	if err != nil {
		t.Fatal(err)
	}
	otherPub := other.Public().Proto()
	otherTrust := filepath.Join(w.Dir, "other-trust.json")
	realfleet.WriteJSON(t, otherTrust, proto.TrustFile{SchemaVersion: 1, CIReleaseKey: proto.KeySlot{Current: &otherPub}, CacheKeys: []string{w.Cache.PublicKey}})
	_, impostorKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}

	first := w.Release("v0", 1, "stable", "edge")
	crash := func(at string) []string { return []string{"NIXFLEET_AGENT_TEST_CRASH_AT=" + at} }
	crashed := map[string]*realfleet.Proc{
		"crash-before": w.StartAgent("crash-before", realfleet.AgentOptions{Env: crash("before-switch")}),
		"crash-after":  w.StartAgent("crash-after", realfleet.AgentOptions{Env: crash("after-switch")}),
	}
	w.StartAgent("kernel", realfleet.AgentOptions{})
	// The liars lie about v1 only, so that onboarding goes through.
	liarHost := w.StartAgent("liar-host", realfleet.AgentOptions{CP: liar{Checkin: func(r *proto.CheckinResponse) {
		if r.Target != nil && r.Target.Closure == v1["liar-host"].Name {
			r.Target.Closure = v1["crash-before"].Name
		}
	}}.serve(w, key["liar-host"])})
	w.StartAgent("liar-wave", realfleet.AgentOptions{CP: liar{Checkin: func(r *proto.CheckinResponse) {
		if r.Target != nil && r.Target.Closure == v1["liar-wave"].Name {
			r.Target.WaveIndex++
		}
	}}.serve(w, key["liar-wave"])})
	w.StartAgent("refused", realfleet.AgentOptions{CP: liar{Confirm: func(r *proto.ConfirmRequest) {
		if r.Closure == v1["refused"].Name {
			r.Token = strings.Repeat("0", len(r.Token)) // the real control plane answers 410
		}
	}}.serve(w, key["refused"])})
	w.StartAgent("untrusted", realfleet.AgentOptions{Trust: otherTrust})
	impostor := w.StartAgent("impostor", realfleet.AgentOptions{Key: impostorKey})

	// Onboarding: the stable hosts confirm v0, which they run.
	w.LogOnFailure("stable@" + first)
	realfleet.Eventually(t, 60*time.Second, "the stable hosts converge on v0", func() bool {
		r, ok := w.Rollout("stable@" + first)
		return ok && r.Counts[string(reconciler.HostConverged)] == len(stable)
	})

	second := w.Release("v1", 2, "stable", "edge")
	id := "stable@" + second
	w.LogOnFailure(id)
	// The crashing agents kill themselves in the activation; restarted
	// without the fault, they finish it.
	for name, p := range crashed {
		select {
		case <-p.Done():
		case <-time.After(60 * time.Second):
			t.Fatalf("the agent of %s did not crash", name)
		}
		if !strings.Contains(p.String(), "fault injection") {
			t.Fatalf("the agent of %s ended without the injected fault:\n%s", name, p.String())
		}
		w.StartAgent(name, realfleet.AgentOptions{})
	}

	want := map[string][]reconciler.HostState{
		"crash-before": {reconciler.HostSoaking, reconciler.HostConverged},
		"crash-after":  {reconciler.HostSoaking, reconciler.HostConverged},
		"kernel":       {reconciler.HostDeferred},
		// The refusal names the closure the liar gave, so the real control
		// plane cannot match it to the activation it dispatched: the host
		// stays Activating there until the confirm window closes.
		"liar-host": {reconciler.HostActivating, reconciler.HostFailed},
		"liar-wave": {reconciler.HostFailed},
		"refused":   {reconciler.HostReverted, reconciler.HostFailed},
	}
	realfleet.Eventually(t, 120*time.Second, "every host of the v1 rollout is done", func() bool {
		states := w.States(id)
		for n, ok := range want {
			if !slices.Contains(ok, states[n]) {
				return false
			}
		}
		return len(w.Host("refused").SwitchLog(t)) == 2 && strings.Contains(liarHost.String(), `"kind":"manifest_rejected"`)
	})
	realfleet.Eventually(t, 60*time.Second, "untrusted refuses the v1 manifest", func() bool {
		return w.States("edge@" + second)["untrusted"] == reconciler.HostFailed
	})

	// What each host runs, has staged and has in its store.
	type expect struct {
		current, profile string
		switches         []string
	}
	expected := map[string]expect{
		"crash-before": {v1["crash-before"].Path, v1["crash-before"].Path, []string{"switch " + v1["crash-before"].Path}},
		"crash-after":  {v1["crash-after"].Path, v1["crash-after"].Path, []string{"switch " + v1["crash-after"].Path}},
		"kernel":       {v0["kernel"].Path, v1["kernel"].Path, []string{"boot " + v1["kernel"].Path}},
		"liar-host":    {v0["liar-host"].Path, v0["liar-host"].Path, nil},
		"liar-wave":    {v0["liar-wave"].Path, v0["liar-wave"].Path, nil},
		"refused":      {v0["refused"].Path, v0["refused"].Path, []string{"switch " + v1["refused"].Path, "switch " + v0["refused"].Path}},
		"untrusted":    {v0["untrusted"].Path, v0["untrusted"].Path, nil},
		"impostor":     {v0["impostor"].Path, v0["impostor"].Path, nil},
	}
	for name, e := range expected {
		h := w.Host(name)
		if got := h.CurrentSystem(t); got != e.current {
			t.Errorf("%s runs %s, want %s", name, got, e.current)
		}
		if got := h.Profile(t); got != e.profile {
			t.Errorf("%s's system profile is %s, want %s", name, got, e.profile)
		}
		if got := h.SwitchLog(t); !realfleet.Equal(got, e.switches) {
			t.Errorf("%s's switch log: %q, want %q", name, got, e.switches)
		}
	}
	// Refused before anything was fetched.
	for _, name := range []string{"liar-host", "liar-wave", "untrusted", "impostor"} {
		for _, c := range []nixtest.Closure{v1[name], v1["crash-before"]} {
			if w.Host(name).Valid(t, c.Path) {
				t.Errorf("%s fetched %s", name, c.Name)
			}
		}
	}

	w.JournalMentions(id, map[string]string{
		"crash-before": "Soaking confirmed",
		"crash-after":  "Soaking confirmed",
		"kernel":       "Deferred deferred",
		"liar-wave":    "host_not_in_manifest",
		"refused":      "confirm_rejected",
	})
	// liar-host refused and said so, signed, to the control plane it has.
	if out := liarHost.String(); !strings.Contains(out, `"kind":"manifest_rejected"`) || !strings.Contains(out, `"code":"host_not_in_manifest"`) {
		t.Errorf("liar-host did not report host_not_in_manifest:\n%s", out)
	}
	w.JournalMentions("edge@"+second, map[string]string{"untrusted": "bad_signature"})
	// The impostor never got past the handshake's identity check, and
	// backed off.
	if out := impostor.String(); !strings.Contains(out, "unknown_client") {
		t.Errorf("the impostor's agent does not report unknown_client:\n%s", out)
	}
	if st := w.States("edge@" + second)["impostor"]; st == reconciler.HostConverged || st == reconciler.HostSoaking {
		t.Errorf("the impostor's host is %s", st)
	}
}

// TestFaultInjectionNotShipped: the fault injection TestAgentFaults uses
// is in the agent the tests build (-tags faultinject), and not in the
// agent built as it ships.
func TestFaultInjectionNotShipped(t *testing.T) {
	t.Parallel()
	paths, err := testbin.Build(t.TempDir(), "github.com/nixfleet/nixfleet/cmd/nixfleet-agent")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		want       bool
	}{
		{"the shipped agent", paths[0], false},
		{"the tests' agent", bin.Agent, true},
	} {
		b, err := os.ReadFile(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"NIXFLEET_AGENT_TEST_CRASH_AT", "fault injection", "before-switch"} {
			if got := bytes.Contains(b, []byte(s)); got != tc.want {
				t.Errorf("%s holds %q: %v, want %v", tc.name, s, got, tc.want)
			}
		}
	}
}
