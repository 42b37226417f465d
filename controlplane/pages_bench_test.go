package controlplane_test

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// The list endpoints at fleet scale (rfcs/0007 §Operator endpoints, §Hosts): a
// control plane with 10,000 hosts, each with a status and a check-in,
// three channels with a rollout each (fleetkit.Synthetic's shape: three
// waves, three disruption budgets), and 1,000 past rollouts of those
// channels (terminal, 3,333 or 3,334 hosts each, their budgets frozen with
// their host lists).
//
//	go test ./controlplane -run '^$' -bench 'HostPage|RolloutList' -benchtime 10x -timeout 30m
//
// NIXFLEET_BENCH_PAGES=hosts:past sets other sizes (e.g. 100000:100), and
// NIXFLEET_BENCH_BACKEND one backend (sqlite or postgres).
//
// Each sub-benchmark times one GET (client side: TLS, HTTP, reading the
// body) and reports bytes/page and items/page; walk
// reads every page, following next, and reports pages and bytes in all.

const (
	pagesHosts = 10000
	pagesPast  = 1000
)

// pagesSizes is the fleet and the past rollouts of the list benchmarks
// (NIXFLEET_BENCH_PAGES), and the backends they run on.
func pagesSizes(b *testing.B) (hosts, past int, on []string) {
	hosts, past, on = pagesHosts, pagesPast, backends
	if v := os.Getenv("NIXFLEET_BENCH_PAGES"); v != "" {
		h, p, ok := strings.Cut(v, ":")
		var err1, err2 error
		hosts, err1 = strconv.Atoi(h)
		past, err2 = strconv.Atoi(p)
		if !ok || err1 != nil || err2 != nil || hosts < 10 || past < 0 {
			b.Fatalf("NIXFLEET_BENCH_PAGES=%q: want hosts:past, e.g. 100000:100", v)
		}
	}
	if v := os.Getenv("NIXFLEET_BENCH_BACKEND"); v != "" {
		if !slices.Contains(backends, v) {
			b.Fatalf("NIXFLEET_BENCH_BACKEND=%q: want one of %v", v, backends)
		}
		on = []string{v}
	}
	return hosts, past, on
}

// pagesSpec is fleetkit.Synthetic's fleet as a fleetrepo spec: three
// channels with a canary, a 10% and a rest wave, rack and role tags, and
// its three budgets.
func pagesSpec(n int) fleetrepo.Spec {
	s := fleetrepo.Spec{Channels: map[string][]int{"edge": {10, 10, 0}, "stable": {10, 10, 0}, "lts": {10, 10, 0}}}
	chans := []string{"edge", "stable", "lts"}
	for i := range n {
		name := benchHostName(i)
		tags := []string{fmt.Sprintf("rack-%03d", i/40), "role-" + []string{"web", "db", "cache", "batch"}[i%4]}
		w := 2
		switch {
		case i < 3*len(chans):
			tags, w = append(tags, "canary"), 0
		case i%10 == 0:
			tags, w = append(tags, "wave1"), 1
		}
		s.Hosts = append(s.Hosts, fleetrepo.Host{Name: name, Channel: chans[i%len(chans)], Wave: w, Tags: tags, Key: benchKey(name)})
	}
	one, three, twenty := 1, 3, 20
	s.Budgets = []proto.DisruptionBudget{
		{Selector: proto.Selector{Tags: []string{"role-db"}}, MaxInFlight: &three},
		{Selector: proto.Selector{All: true}, MaxInFlightPct: &twenty},
		{Selector: proto.Selector{TagsAny: []string{"rack-000", "rack-001"}}, MaxInFlight: &one, MaxInFlightPct: &twenty},
	}
	return s
}

// pagesEnv is the control plane of the list benchmarks, and a viewer's
// client.
type pagesEnv struct {
	e *env
	// viewer sends victor's certificate; it reads whole answers
	// (apiclient caps them at 64 MiB, which GET /v1/rollouts passed
	// before it was paged).
	viewer *http.Client
	// latest is the stable channel's rollout.
	latest string
}

// newPagesEnv starts a control plane on a fleet of n hosts (pagesSpec),
// each with a status and a check-in, and adds past rollouts.
func newPagesEnv(b testing.TB, backend string, n, past int) *pagesEnv {
	b.Helper()
	ctx := context.Background()
	began := time.Now()
	e := newEnv(b, backend, pagesSpec(n), nil)
	cert, err := apiclient.SelfSignedCert(ed25519.PrivateKey(e.viewKey.priv), "victor", e.clock.Now())
	if err != nil {
		b.Fatal(err)
	}
	pe := &pagesEnv{e: e, latest: rolloutID("stable", 1), viewer: &http.Client{Timeout: time.Minute,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.cert.Pool, Certificates: []tls.Certificate{cert}}}}}
	st, err := store.Open(ctx, e.cfg.DB)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	var bases []reconciler.Rollout
	for _, ch := range []string{"edge", "stable", "lts"} {
		id := rolloutID(ch, 1)
		e.await(2*time.Minute, "rollout "+id+" opens", func() bool {
			_, err := st.Rollout(ctx, id)
			return err == nil
		})
		r, err := st.Rollout(ctx, id)
		if err != nil {
			b.Fatal(err)
		}
		bases = append(bases, r)
	}
	// Every host checked in once and reported a status.
	now := e.clock.Now()
	seen := make(map[string]time.Time, n)
	names := make(chan string)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for name := range names {
				old := fleetrepo.Closure(name, "v-1")
				_, err := st.RecordStatus(ctx, name, store.HostStatus{Current: old, Booted: old, Probes: reconciler.ProbeSummary{Total: 3},
					Compliance: []reconciler.ComplianceResult{{Control: "fw", Framework: "nis2", Type: reconciler.ControlStatic, Closure: old, Passed: true}}})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := range n {
		names <- benchHostName(i)
		seen[benchHostName(i)] = now
	}
	close(names)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if _, err := st.TouchHosts(ctx, store.SeenAt(seen)); err != nil {
		b.Fatal(err)
	}
	// The past rollouts: each channel's first rollout again under other
	// refs, opened before it (so it stays the latest), every host
	// converged. They are written by ticks of the control plane's own
	// lease that open them and decide nothing else.
	lease, err := st.AcquireLease(ctx, store.TickLease, e.cfg.ReplicaID, e.cfg.LeaseTTL, now)
	if err != nil {
		b.Fatal(err)
	}
	const batch = 25
	for start := 0; start < past; start += batch {
		_, err := st.Tick(ctx, store.TickParams{Lease: lease, Clock: e.clock.Now, MaxGap: 1000 * time.Hour}, func(reconciler.Input) (reconciler.Output, error) {
			var out reconciler.Output
			for i := start; i < min(start+batch, past); i++ {
				out.Rollouts = append(out.Rollouts, reconciler.RolloutUpdate{New: true, Rollout: pastRollout(bases[i%len(bases)], i, past)})
			}
			return out, nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	// Ticks until one changes nothing: the statuses let the rollouts
	// dispatch what their budgets allow, and nothing moves after that (no
	// agent answers), so the lists hold still while they are read.
	prev, settled := st2wm(b, st), false
	for range 10 {
		e.tick()
		cur := st2wm(b, st)
		if settled = cur == prev; settled {
			break
		}
		prev = cur
	}
	if !settled {
		b.Fatal("the control plane does not settle")
	}
	b.Logf("%s: %d hosts, %d past rollouts set up in %s", backend, n, past, time.Since(began).Round(time.Millisecond))
	return pe
}

// st2wm reads a store's watermark.
func st2wm(b testing.TB, st store.Store) store.Watermark {
	b.Helper()
	wm, err := st.Watermark(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return wm
}

// pastRollout is base under another ref, the ith of past, opened
// past-i+1 hours before it, converged.
func pastRollout(base reconciler.Rollout, i, past int) reconciler.Rollout {
	r := base
	r.Ref = fmt.Sprintf("%040x", i+1)
	r.ID = proto.RolloutID(r.Channel, r.Ref)
	r.OpenedAt = base.OpenedAt.Add(-time.Duration(past-i+1) * time.Hour)
	r.UpdatedAt, r.ProgressAt, r.WaveStartedAt = r.OpenedAt.Add(time.Hour/2), r.OpenedAt.Add(time.Hour/2), r.OpenedAt.Add(time.Hour/4)
	r.State, r.Wave, r.WavePhase = reconciler.RolloutConverged, len(r.Waves)-1, reconciler.PhaseSoaking
	r.Reason = reconciler.Reason{Code: "converged", Message: fmt.Sprintf("all %d wave(s) promoted", len(r.Waves))}
	r.Hosts = make([]reconciler.RolloutHost, len(base.Hosts))
	for j, h := range base.Hosts {
		h.State, h.Since, h.Blocked = reconciler.HostConverged, r.UpdatedAt, reconciler.Reason{}
		h.Reason = reconciler.Reason{Code: "converged", Message: "soaked"}
		r.Hosts[j] = h
	}
	return r
}

// get times one GET of path and returns its body.
func (pe *pagesEnv) get(b testing.TB, path string) json.RawMessage {
	resp, err := pe.viewer.Get(pe.e.url + path)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %s: %s", path, resp.Status, raw)
	}
	return raw
}

// pageOf reads what a list answer holds: its items and its next cursor.
func pageOf(b testing.TB, raw json.RawMessage, member string) (items int, next string) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		b.Fatal(err)
	}
	var list []json.RawMessage
	if err := json.Unmarshal(doc[member], &list); err != nil {
		b.Fatal(err)
	}
	if n, ok := doc["next"]; ok {
		_ = json.Unmarshal(n, &next)
	}
	return len(list), next
}

// benchList runs the sub-benchmarks of a list endpoint: one GET of each
// path, and a walk over every page of the first.
func (pe *pagesEnv) benchList(b *testing.B, member, cursor string, paths map[string]string) {
	for _, name := range []string{"first", "max", "filtered"} {
		path, ok := paths[name]
		if !ok {
			continue
		}
		b.Run(name, func(b *testing.B) {
			var (
				raw   json.RawMessage
				first time.Duration
			)
			for b.Loop() {
				start := time.Now()
				raw = pe.get(b, path)
				if first == 0 {
					first = time.Since(start)
				}
			}
			n, _ := pageOf(b, raw, member)
			b.ReportMetric(float64(len(raw)), "bytes/page")
			b.ReportMetric(float64(n), member+"/page")
			// The first read of a page of rollouts summarises what the
			// replica has not yet (a cold cache); the others reuse it.
			b.ReportMetric(float64(first.Microseconds())/1000, "first_ms")
		})
	}
	b.Run("walk", func(b *testing.B) {
		var pages, items, size int
		for b.Loop() {
			pages, items, size = 0, 0, 0
			next := ""
			for {
				path := paths["first"]
				if next != "" {
					path += "?" + url.Values{cursor: {next}}.Encode()
				}
				raw := pe.get(b, path)
				n, nx := pageOf(b, raw, member)
				pages, items, size = pages+1, items+n, size+len(raw)
				if nx == "" {
					break
				}
				next = nx
			}
		}
		b.ReportMetric(float64(pages), "pages")
		b.ReportMetric(float64(items), member)
		b.ReportMetric(float64(size), "bytes")
	})
}

// BenchmarkHostPage is GET /v1/hosts: the first page (the default
// limit), a page of the largest limit, a page filtered by state, and every
// page.
func BenchmarkHostPage(b *testing.B) {
	hosts, past, on := pagesSizes(b)
	for _, backend := range on {
		b.Run(backend, func(b *testing.B) {
			pe := newPagesEnv(b, backend, hosts, past)
			pe.benchList(b, "hosts", "after", map[string]string{
				"first":    "/v1/hosts",
				"max":      "/v1/hosts?limit=5000",
				"filtered": "/v1/hosts?state=Pending&channel=stable",
			})
		})
	}
}

// BenchmarkRolloutList is GET /v1/rollouts: the first page (the default
// limit), a page of the largest limit, a page of one channel's, and every
// page; and GET /v1/rollouts/{id} of a 3,334-host rollout (show).
func BenchmarkRolloutList(b *testing.B) {
	hosts, past, on := pagesSizes(b)
	for _, backend := range on {
		b.Run(backend, func(b *testing.B) {
			pe := newPagesEnv(b, backend, hosts, past)
			pe.benchList(b, "rollouts", "before", map[string]string{
				"first":    "/v1/rollouts",
				"max":      "/v1/rollouts?limit=1000",
				"filtered": "/v1/rollouts?channel=stable",
			})
			b.Run("show", func(b *testing.B) {
				var raw json.RawMessage
				for b.Loop() {
					raw = pe.get(b, "/v1/rollouts/"+url.PathEscape(pe.latest))
				}
				var r proto.Rollout
				if err := json.Unmarshal(raw, &r); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(raw)), "bytes/page")
				b.ReportMetric(float64(len(r.Hosts)), "hosts/page")
			})
		})
	}
}

// BenchmarkStatus is GET /v1/status, what the dashboard's overview reads:
// every channel with its latest rollout, its hosts counted.
func BenchmarkStatus(b *testing.B) {
	hosts, past, on := pagesSizes(b)
	for _, backend := range on {
		b.Run(backend, func(b *testing.B) {
			pe := newPagesEnv(b, backend, hosts, past)
			var raw json.RawMessage
			for b.Loop() {
				raw = pe.get(b, "/v1/status")
			}
			var st proto.Status
			if err := json.Unmarshal(raw, &st); err != nil || len(st.Channels) == 0 {
				b.Fatalf("status: %v %s", err, raw)
			}
			b.ReportMetric(float64(len(raw)), "bytes")
		})
	}
}
