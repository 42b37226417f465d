package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/internal/testkit/pgtest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// TestPollSignalsOnce: the refs of one push (prod and staging, prod
// sorting first) are all stored before the reconciler is told once, so
// that the tick sees both releases and opens them in channel-edge order;
// a tick between the two would open prod while staging's new release is
// still unknown, and its channel edge would not hold it.
func TestPollSignalsOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	spec := fleetrepo.Spec{Channels: map[string][]int{"prod": {0}, "staging": {0}},
		Hosts: []fleetrepo.Host{fleetrepo.NewHost("prod-1", "prod", 0), fleetrepo.NewHost("stg-1", "staging", 0)}}
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "cp.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	src, repo, commit := releasedSource(t, dir, spec, st)
	src.board = newBoard()
	for _, ch := range []string{"prod", "staging"} {
		if err := repo.Promote(ch, commit); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if w := src.board.take(); w != wakeTick {
		t.Errorf("after storing releases the source posted %b, want a tick", w)
	}
	rels, err := st.Releases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var chans []string
	for _, r := range rels {
		chans = append(chans, r.Channel)
	}
	slices.Sort(chans)
	if !slices.Equal(chans, []string{"prod", "staging"}) {
		t.Errorf("stored channels %q, want both", chans)
	}
	// A poll that finds nothing new says nothing.
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if w := src.board.take(); w != 0 {
		t.Errorf("a poll with nothing new posted %b", w)
	}
}

// releasedSource makes a fleet repository in dir holding a signed release
// of spec (v1, CI commit 1, not promoted), and an opened source reading it
// into st (nil: it only verifies); it returns them and the release's
// commit.
func releasedSource(tb testing.TB, dir string, spec fleetrepo.Spec, st store.Store) (*source, *fleetrepo.Repo, plumbing.Hash) {
	tb.Helper()
	repo, err := fleetrepo.Init(filepath.Join(dir, "fleet"))
	if err != nil {
		tb.Fatal(err)
	}
	roots, err := trust.ParseRoots(repo.TrustJSON())
	if err != nil {
		tb.Fatal(err)
	}
	src := newSource(repo.Dir, filepath.Join(dir, "state"), roots, st, clock.Real{}, slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics())
	if err := src.open(context.Background()); err != nil {
		tb.Fatal(err)
	}
	unsigned, err := spec.Fleet("v1")
	if err != nil {
		tb.Fatal(err)
	}
	commit, err := repo.Release(unsigned, "0000001000000000000000000000000000000000", time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return src, repo, commit
}

// TestVerifiedArtifactsDecodeAsStored: the fleet and manifest the source
// decoded while verifying a release, which seed the store's cache for the
// tick that opens it (store.Release.Fleet), equal what the store decodes
// from the stored bodies: a tick decides the same whichever it reads.
func TestVerifiedArtifactsDecodeAsStored(t *testing.T) {
	dir := t.TempDir()
	spec := fleetrepo.Spec{Channels: map[string][]int{"prod": {0, 15}},
		Hosts: []fleetrepo.Host{fleetrepo.NewHost("prod-1", "prod", 0), fleetrepo.NewHost("prod-2", "prod", 1), fleetrepo.NewHost("prod-3", "prod", 1)}}
	src, _, commit := releasedSource(t, dir, spec, nil)
	rel, _, _, err := src.verify("prod", commit, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rel.Fleet == nil || rel.Manifest == nil {
		t.Fatalf("the verified release carries fleet %v, manifest %v: want both decoded", rel.Fleet != nil, rel.Manifest != nil)
	}
	f, err := proto.DecodeFleetResolved(rel.FleetBody)
	if err != nil {
		t.Fatal(err)
	}
	m, err := proto.DecodeRolloutManifest(rel.ManifestBody)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(f, rel.Fleet); diff != "" {
		t.Errorf("fleet as the store decodes it (-) and as verified (+):\n%s", diff)
	}
	if diff := cmp.Diff(m, rel.Manifest); diff != "" {
		t.Errorf("manifest as the store decodes it (-) and as verified (+):\n%s", diff)
	}
}

// oneHostFleet is a fleet of one host, prod-1 in channel prod, with its
// repository in dir/fleet and the trust roots of its CI key.
func oneHostFleet(t *testing.T, dir string) (fleetrepo.Spec, *fleetrepo.Repo, *trust.Roots) {
	t.Helper()
	spec := fleetrepo.Spec{Channels: map[string][]int{"prod": {0}}, Hosts: []fleetrepo.Host{fleetrepo.NewHost("prod-1", "prod", 0)}}
	repo, err := fleetrepo.Init(filepath.Join(dir, "fleet"))
	if err != nil {
		t.Fatal(err)
	}
	roots, err := trust.ParseRoots(repo.TrustJSON())
	if err != nil {
		t.Fatal(err)
	}
	return spec, repo, roots
}

// TestRemoteMirror: a --repo URL is mirrored into the state directory and
// read through the same header-first storage as a local repository: a
// release CI pushed to its branch is fetched and verified ahead (the
// watched refs are mirrored too), and, once a channel's ref names it
// behind an annotated tag, stored from the kept verdicts.
func TestRemoteMirror(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	spec, repo, roots := oneHostFleet(t, dir)
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "cp.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	src := newSource("file://"+repo.Dir, filepath.Join(dir, "state"), roots, st, clock.Real{}, slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics())
	if err := src.open(ctx); err != nil {
		t.Fatal(err)
	}
	if !src.remote {
		t.Fatal("a file:// URL was opened in place, not mirrored")
	}
	unsigned, err := spec.Fleet("v1")
	if err != nil {
		t.Fatal(err)
	}
	commit, err := repo.Release(unsigned, "0000001000000000000000000000000000000000", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	src.watch = []string{"refs/heads/*"}
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sample(t, src.m, "nixfleet_releases_verified_ahead_total", "verified"); got != 1 {
		t.Fatalf("CI's branch, mirrored: verified ahead %v times, want 1", got)
	}
	tag, err := repo.Tag("v1", commit, plumbing.CommitObject, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Promote("prod", tag); err != nil {
		t.Fatal(err)
	}
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	rels, err := st.Releases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rels) != 1 || rels[0].SourceCommit != commit.String() {
		t.Errorf("releases %+v, want one from commit %s", rels, commit)
	}
	if kept := verifiedHow(t, src.m, verifiedKept); kept != 1 {
		t.Errorf("the promotion was judged from %v kept verdicts, want 1", kept)
	}
	if _, fails := src.status(); len(fails) != 0 {
		t.Errorf("failures %+v", fails)
	}
}

// failingReleases is a real store whose Releases fails while failures
// are left: the store going away between PutReleases and the read of the
// channel's current release.
type failingReleases struct {
	store.Store
	failures atomic.Int32
}

var errStoreDown = errors.New("test: the store is down")

func (f *failingReleases) Releases(ctx context.Context) ([]store.Release, error) {
	if f.failures.Add(-1) >= 0 {
		return nil, errStoreDown
	}
	return f.Store.Releases(ctx)
}

// TestCurrentReleaseStoreError: when the store cannot say which release
// is current, a release it refused as not newer is neither a replay nor
// the same one: the poll fails with the store error, the channel's last
// failure is store_unavailable, no event is written, the ref is not
// marked seen, and the next poll reads it again and reaches the verdict.
// Two cases: a restarted control plane meeting the channel's current
// release again (which must not be refused), and a ref moved back to an
// older release (a replay, refused once the store answers).
func TestCurrentReleaseStoreError(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			testCurrentReleaseStoreError(t, backend)
		})
	}
}

func testCurrentReleaseStoreError(t *testing.T, backend string) {
	ctx := context.Background()
	dir := t.TempDir()
	spec, repo, roots := oneHostFleet(t, dir)
	url := "sqlite://" + filepath.Join(dir, "cp.db")
	if backend == "postgres" {
		url = pgtest.URL(t)
	}
	real, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	st := &failingReleases{Store: real}
	now := time.Now().UTC().Truncate(time.Second)
	release := func(n int) plumbing.Hash {
		t.Helper()
		unsigned, err := spec.Fleet(fmt.Sprintf("v%d", n))
		if err != nil {
			t.Fatal(err)
		}
		c, err := repo.Release(unsigned, fleetkit.Commit(n), now.Add(time.Duration(n)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	newSrc := func() *source {
		t.Helper()
		src := newSource(repo.Dir, filepath.Join(dir, "state"), roots, st, clock.NewFake(now.Add(time.Hour)),
			slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics())
		if err := src.open(ctx); err != nil {
			t.Fatal(err)
		}
		return src
	}
	promote := func(c plumbing.Hash) {
		t.Helper()
		if err := repo.Promote("prod", c); err != nil {
			t.Fatal(err)
		}
	}
	// current is the channel's stored release's source commit.
	current := func() string {
		t.Helper()
		rels, err := real.Releases(ctx)
		if err != nil || len(rels) != 1 {
			t.Fatalf("releases %v, %v; want one", rels, err)
		}
		return rels[0].SourceCommit
	}
	// rejections are the release_rejected events written so far.
	rejections := func() []string {
		t.Helper()
		evs, err := real.Events(ctx, proto.EventQuery{Channel: "prod"})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ev := range evs {
			if ev.Kind == EventReleaseRejected {
				out = append(out, ev.Reason.Code)
			}
		}
		return out
	}
	// unavailable checks a poll that met the store error.
	unavailable := func(src *source, err error, ref plumbing.Hash, want string) {
		t.Helper()
		if !errors.Is(err, errStoreDown) {
			t.Errorf("the poll returned %v, want the store error", err)
		}
		_, fails := src.status()
		if f := fails["prod"]; f.Code != codes.StoreUnavailable || f.Commit != ref.String() {
			t.Errorf("last failure %+v, want %s for %s", f, codes.StoreUnavailable, ref)
		}
		if src.seen["prod"] == ref {
			t.Error("the ref is marked seen after a store error: it would never be read again")
		}
		if got := current(); got != want {
			t.Errorf("the channel's release is %s, want %s", got, want)
		}
		if r := rejections(); len(r) != 0 {
			t.Errorf("release_rejected events %q after a store error, want none", r)
		}
	}

	c1, c2 := release(1), release(2)
	promote(c2)
	src := newSrc()
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := current(); got != c2.String() {
		t.Fatalf("the channel's release is %s, want %s", got, c2)
	}

	// A restart: the new source meets the current release again.
	src = newSrc()
	st.failures.Store(1)
	unavailable(src, src.poll(ctx), c2, c2.String())
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, fails := src.status(); len(fails) != 0 {
		t.Errorf("failures %+v after the retry found the current release, want none", fails)
	}
	if src.seen["prod"] != c2 {
		t.Error("the retry did not mark the ref seen")
	}
	if r := rejections(); len(r) != 0 {
		t.Errorf("the current release met again was refused: %q", r)
	}

	// A replay: the ref moves back to the older release.
	promote(c1)
	st.failures.Store(1)
	unavailable(src, src.poll(ctx), c1, c2.String())
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if r := rejections(); !slices.Equal(r, []string{codes.ReplayedRelease}) {
		t.Errorf("release_rejected events %q once the store answers, want one %s", r, codes.ReplayedRelease)
	}
	if _, fails := src.status(); fails["prod"].Code != codes.ReplayedRelease {
		t.Errorf("last failure %+v, want %s", fails["prod"], codes.ReplayedRelease)
	} else if m := fails["prod"].Message; !strings.Contains(m, "nixfleet rollout rollback, or") || !strings.Contains(m, "revert the change in the fleet's source") {
		t.Errorf("the refusal %q does not name the ways back", m)
	}
	if src.seen["prod"] != c1 {
		t.Error("the refused ref is not marked seen")
	}
	if got := current(); got != c2.String() {
		t.Errorf("the channel's release is %s after a replay, want %s", got, c2)
	}
}

// prodSource is a source over a fleet of one host on channel prod, whose
// first release is promoted and not yet polled, storing in a SQLite store
// (real) through what wrap makes of it.
func prodSource(t *testing.T, wrap func(store.Store) store.Store) (src *source, repo *fleetrepo.Repo, spec fleetrepo.Spec, real store.Store) {
	t.Helper()
	dir := t.TempDir()
	spec = fleetrepo.Spec{Channels: map[string][]int{"prod": {0}}, Hosts: []fleetrepo.Host{fleetrepo.NewHost("prod-1", "prod", 0)}}
	real, err := store.Open(context.Background(), "sqlite://"+filepath.Join(dir, "cp.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(real.Close)
	src, repo, commit := releasedSource(t, dir, spec, wrap(real))
	src.board = newBoard()
	if err := repo.Promote("prod", commit); err != nil {
		t.Fatal(err)
	}
	return src, repo, spec, real
}

// stagingStore is a real store that records what the source asks of it:
// the bodies staged and the calls in order; fail makes staging fail.
type stagingStore struct {
	store.Store
	fail   bool
	calls  []string
	staged [][]byte
}

func (s *stagingStore) StageReleaseBodies(ctx context.Context, now time.Time, bodies ...[]byte) (int, error) {
	s.calls = append(s.calls, "stage")
	s.staged = append(s.staged, bodies...)
	if s.fail {
		return 0, errStoreDown
	}
	return s.Store.StageReleaseBodies(ctx, now, bodies...)
}

func (s *stagingStore) PutReleases(ctx context.Context, rs []store.Release) ([]error, error) {
	s.calls = append(s.calls, "put")
	return s.Store.PutReleases(ctx, rs)
}

// TestPollStagesBodies: a release's bodies are handed to the store before
// it is verified, and the verified release stored after names the same
// bytes; a release refused for its signature is staged but never named;
// a store that fails to stage loses nothing (the put writes the bodies).
func TestPollStagesBodies(t *testing.T) {
	ctx := context.Background()
	var st *stagingStore
	src, repo, spec, real := prodSource(t, func(s store.Store) store.Store { st = &stagingStore{Store: s}; return st })
	// The ticker is told while the release is read, verified and stored.
	src.reacting = func() func() {
		st.calls = append(st.calls, "begin")
		return func() { st.calls = append(st.calls, "end") }
	}
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	rels, err := real.Releases(ctx)
	if err != nil || len(rels) != 1 {
		t.Fatalf("releases %d, %v", len(rels), err)
	}
	if !slices.Equal(st.calls, []string{"begin", "stage", "stage", "put", "end"}) || len(st.staged) != 2 ||
		string(st.staged[0]) != string(rels[0].FleetBody) || string(st.staged[1]) != string(rels[0].ManifestBody) {
		t.Fatalf("calls %q, %d bodies staged: want the fleet and then the manifest staged, then the release put", st.calls, len(st.staged))
	}
	// Nothing moved: nothing is told, staged or stored.
	st.calls = nil
	if err := src.poll(ctx); err != nil || len(st.calls) != 0 {
		t.Fatalf("a poll with no ref moved: calls %q, %v", st.calls, err)
	}

	// A forged signature: staged (before verification), refused, unnamed.
	if err := repo.WriteFile("releases/fleet.resolved.json.sig", make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	forged, err := repo.Commit("forged", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Promote("prod", forged); err != nil {
		t.Fatal(err)
	}
	st.calls, st.staged = nil, nil
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, fails := src.status(); fails["prod"].Code != codes.BadSignature {
		t.Fatalf("failures after a forged signature: %+v", fails)
	}
	if !slices.Equal(st.calls, []string{"begin", "stage", "stage", "end"}) || len(st.staged) != 2 {
		t.Errorf("calls %q, %d bodies staged for the forged release: want both staged before verification", st.calls, len(st.staged))
	}
	after, err := real.Releases(ctx)
	if err != nil || len(after) != 1 || after[0].Ref != rels[0].Ref || string(after[0].FleetBody) != string(rels[0].FleetBody) {
		t.Fatalf("the forged release changed the channel: %v", err)
	}

	// Staging fails: the next release is stored all the same.
	st.fail = true
	unsigned, err := spec.Fleet("v2")
	if err != nil {
		t.Fatal(err)
	}
	v2, err := repo.Release(unsigned, fleetkit.Commit(2), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Promote("prod", v2); err != nil {
		t.Fatal(err)
	}
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	after, err = real.Releases(ctx)
	if err != nil || len(after) != 1 || after[0].Ref != fleetkit.Commit(2) {
		t.Fatalf("a release whose staging failed was not stored: %+v, %v", after, err)
	}
}

// sweepStore is a real store that reports each SweepBlobParts call.
type sweepStore struct {
	store.Store
	sweeps chan struct{}
}

func (s *sweepStore) SweepBlobParts(ctx context.Context) (int, error) {
	s.sweeps <- struct{}{}
	return s.Store.SweepBlobParts(ctx)
}

// TestRunSweepsOnAQuietPoll: the parts of the blobs a stored release
// deleted are swept on the first poll after it that stores nothing, once,
// and not by the poll that stored it (that sweep would run beside the
// tick the release wakes).
func TestRunSweepsOnAQuietPoll(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var st *sweepStore
	src, _, _, _ := prodSource(t, func(s store.Store) store.Store {
		st = &sweepStore{Store: s, sweeps: make(chan struct{}, 8)}
		return st
	})
	src.clock = clock.NewFake(time.Now()) // no poll but the first and the kicked ones
	done := make(chan struct{})
	go func() { defer close(done); src.run(ctx, time.Hour) }()
	defer func() { cancel(); <-done }()
	polled := func() {
		t.Helper()
		for {
			select {
			case <-src.board.ch:
				if src.board.take()&wakePolled != 0 {
					return
				}
			case <-time.After(time.Minute):
				t.Fatal("no poll ended within a minute")
			}
		}
	}
	polled()
	if src.storesNow() != 1 {
		t.Fatalf("the first poll stored %d releases, want 1", src.storesNow())
	}
	if src.sweeping.Load() || len(st.sweeps) > 0 {
		t.Fatal("the poll that stored the release started a sweep")
	}
	src.kick()
	polled()
	select {
	case <-st.sweeps:
	case <-time.After(time.Minute):
		t.Fatal("the quiet poll after a stored release started no sweep")
	}
	for src.sweeping.Load() {
		time.Sleep(time.Millisecond)
	}
	src.kick()
	polled()
	if src.sweeping.Load() || len(st.sweeps) > 0 {
		t.Error("a second quiet poll swept again with nothing stored since")
	}
}

// TestReleaseLogPushes: the release log has a row per push the source
// reads, not per poll nor per commit: a ref moved back to an earlier
// release is a refused row (replayed_release, naming the ways back) of its
// own; the ref moved forward to the current release again is a row with
// that release's fate; a poll or a restarted source reading an unchanged
// ref adds none.
func TestReleaseLogPushes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	spec, repo, roots := oneHostFleet(t, dir)
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "cp.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC().Truncate(time.Second)
	clk := clock.NewFake(now.Add(time.Hour))
	release := func(n int) plumbing.Hash {
		t.Helper()
		unsigned, err := spec.Fleet(fmt.Sprintf("v%d", n))
		if err != nil {
			t.Fatal(err)
		}
		c, err := repo.Release(unsigned, fleetkit.Commit(n), now.Add(time.Duration(n)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	newSrc := func() *source {
		t.Helper()
		src := newSource(repo.Dir, filepath.Join(dir, "state"), roots, st, clk, slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics())
		src.board = newBoard()
		if err := src.open(ctx); err != nil {
			t.Fatal(err)
		}
		return src
	}
	src := newSrc()
	// poll polls, a second later; push moves the channel's ref to c and
	// polls.
	poll := func() {
		t.Helper()
		clk.Advance(time.Second)
		if err := src.poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	push := func(c plumbing.Hash) {
		t.Helper()
		if err := repo.Promote("prod", c); err != nil {
			t.Fatal(err)
		}
		poll()
	}
	// pushes reads the log as "commit fate code", newest first.
	pushes := func() []string {
		t.Helper()
		rels, err := st.ReleaseLog(ctx, store.ReleaseQuery{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rels {
			out = append(out, r.Commit[:7]+" "+r.Fate+" "+r.Reason.Code)
		}
		return out
	}
	row := func(c plumbing.Hash, fate, code string) string { return c.String()[:7] + " " + fate + " " + code }

	c1, c2 := release(1), release(2)
	push(c1)
	push(c2)
	push(c1) // back to the first release: a replay
	want := []string{
		row(c1, proto.FateRefused, codes.ReplayedRelease),
		row(c2, proto.FatePending, codes.RefMoved),
		row(c1, proto.FateSuperseded, codes.Superseded),
	}
	if d := cmp.Diff(want, pushes()); d != "" {
		t.Fatalf("the log after a push back (-want +got):\n%s", d)
	}
	rels, err := st.ReleaseLog(ctx, store.ReleaseQuery{Channel: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	if m := rels[0].Reason.Message; !strings.Contains(m, "nixfleet rollout rollback, or") || !strings.Contains(m, "revert the change in the fleet's source") {
		t.Errorf("the refused push %q does not name the ways back", m)
	}

	// The same ref, polled again, forgotten and read again, and read by a
	// restarted source: no push.
	poll()
	src.forget()
	poll()
	src = newSrc()
	poll()
	if d := cmp.Diff(want, pushes()); d != "" {
		t.Errorf("reading an unchanged ref again added rows (-want +got):\n%s", d)
	}

	// Forward to the current release again: a push, with its fate; then
	// a restart reads it again.
	push(c2)
	src = newSrc()
	poll()
	want = append([]string{row(c2, proto.FatePending, codes.RefMoved)}, want...)
	if d := cmp.Diff(want, pushes()); d != "" {
		t.Errorf("the log after a push to the current release (-want +got):\n%s", d)
	}
}
