package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/prom"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/trust"
)

// Channel refs live under this prefix: refs/heads/channels/<channel>.
const channelRefPrefix = "refs/heads/channels/"

// Paths of the signed artifacts in a release commit's tree.
const releaseDir = "releases"

// Limits on what is read from the repository.
const (
	// maxArtifact caps every object read: artifacts, and the trees, tags
	// and commit on the way to them. The size comes from the object's
	// header; an object over it is refused unread.
	maxArtifact = proto.MaxBytes
	// lazyObject: loose objects larger than this are not read when they
	// are looked up, only when their content is (go-git reads a loose
	// object whole to learn its type otherwise).
	lazyObject = 1 << 20
	// maxPeel is how many annotated tags a channel ref may go through to
	// its commit.
	maxPeel = 8
)

// source watches the fleet repository's channel refs and turns every new
// release into a verified store.Release (rfcs/0006 §Channel source):
//
//  1. list refs/heads/channels/*; skip refs whose commit was processed;
//     peel an annotated tag to its commit; a tree or a blob is
//     not_a_commit;
//  2. read releases/fleet.resolved.json(.sig) at the commit and verify it
//     against the trust roots (every channel's freshness window);
//  3. read releases/rollouts/<channel>@<ciCommit>.json(.sig) and verify it
//     (rollout id from the ref's channel and the fleet's ciCommit), check
//     that it was projected from this fleet, validate the fleet;
//  4. store it, unless it is not newer than the channel's current release
//     (a replay or a ref moved back) or names a rollout the channel opened
//     before (an old ciCommit signed anew): a failure at any step is an
//     event, a metric and a row of the release log, and the last verified
//     release stays.
//
// Every object is looked up by its header before any of it is read (see
// lazy and object): nothing over maxArtifact is read, and an artifact
// path must lead through trees to a regular file's blob (not_a_file). A
// store error is no verdict: it is returned, the ref is not marked seen,
// and the channel's failure says store_unavailable until a poll gets
// through.
type source struct {
	spec     string
	stateDir string
	roots    *trust.Roots
	st       store.Store
	log      *slog.Logger
	m        *metrics
	ids      *identities // takes the host keys of each verified fleet; nil in tests that need none
	board    *board      // wakeTick when a release is stored
	// prom are the Prometheus sources of the canary analyses: a new
	// release whose analyses name another is logged (warnUnknownSources).
	prom *prom.Sources
	// reacting, when set, is told when a poll starts reading moved refs
	// and called back when it ends (ticker.releaseBegins).
	reacting func() (end func())
	clock    clock.Clock
	kickCh   chan struct{}
	mu       sync.Mutex
	repo     *git.Repository
	remote   bool
	seen     map[string]plumbing.Hash
	polled   bool
	failures map[string]proto.SourceFailure // by channel, the latest
	// stores counts the polls that stored a release; run sweeps the
	// blob parts they left (store.SweepBlobParts) on the first quiet
	// poll after one, off the next release's path.
	stores, swept int
	sweeping      atomic.Bool
	// forgot: the next poll reads every ref again (forget).
	forgot atomic.Bool
	// watch are the refs whose releases are verified ahead of their
	// promotion (Config.WatchRefs); ahead, the commit each was last read
	// at; verdicts, what verified, by commit (verdicts.go).
	watch    []string
	ahead    map[string]plumbing.Hash
	verdicts verdicts
}

func newSource(spec, stateDir string, roots *trust.Roots, st store.Store, clk clock.Clock, log *slog.Logger, m *metrics) *source {
	return &source{spec: spec, stateDir: stateDir, roots: roots, st: st, clock: clk, log: log, m: m,
		kickCh: make(chan struct{}, 1), seen: map[string]plumbing.Hash{}, ahead: map[string]plumbing.Hash{},
		failures: map[string]proto.SourceFailure{}}
}

// isRemote tells a URL from a local path.
func isRemote(spec string) bool {
	return strings.Contains(spec, "://") || (strings.Contains(spec, "@") && strings.Contains(spec, ":") && !strings.HasPrefix(spec, "/"))
}

// open opens the repository: a local one in place, a remote one as a bare
// mirror under the state directory.
func (s *source) open(ctx context.Context) error {
	if !isRemote(s.spec) {
		// The path itself first: a worktree or a bare repository (as a
		// forge keeps it, and what operators push to). DetectDotGit alone
		// never sees a bare repository: it looks for a .git up the parents,
		// and would open an enclosing worktree instead, or fail.
		repo, err := git.PlainOpen(s.spec)
		if errors.Is(err, git.ErrRepositoryNotExists) {
			repo, err = git.PlainOpenWithOptions(s.spec, &git.PlainOpenOptions{DetectDotGit: true})
		}
		if err == nil {
			repo, err = lazy(repo)
		}
		if err != nil {
			return fmt.Errorf("opening the fleet repository %s: %w", s.spec, err)
		}
		s.repo = repo
		return nil
	}
	dir := filepath.Join(s.stateDir, "repo.git")
	repo, err := git.PlainOpen(dir)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		if err := os.MkdirAll(s.stateDir, 0o700); err != nil {
			return err
		}
		repo, err = git.PlainInit(dir, true)
		if err == nil {
			_, err = repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{s.spec},
				Fetch: []config.RefSpec{"+" + channelRefPrefix + "*:" + channelRefPrefix + "*"}})
		}
	}
	if err == nil {
		repo, err = lazy(repo)
	}
	if err != nil {
		return fmt.Errorf("mirroring the fleet repository %s: %w", s.spec, err)
	}
	s.repo, s.remote = repo, true
	return nil
}

// lazy reopens a repository on the same files with a storage that looks
// objects up from their headers alone: a loose object over lazyObject is
// read only when its content is (a packed one already is), so that the
// type and size of any object are known before any of it is read.
func lazy(repo *git.Repository) (*git.Repository, error) {
	fs, ok := repo.Storer.(*filesystem.Storage)
	if !ok {
		return nil, fmt.Errorf("the repository storage is a %T, not a directory", repo.Storer)
	}
	st := filesystem.NewStorageWithOptions(fs.Filesystem(), cache.NewObjectLRUDefault(),
		filesystem.Options{LargeObjectThreshold: lazyObject})
	return git.Open(st, nil)
}

// kick asks for a poll now (the webhook).
func (s *source) kick() {
	select {
	case s.kickCh <- struct{}{}:
	default:
	}
}

// forget makes the next poll, which it asks for, read every channel ref
// again, also those it read already: the store lost writes it had
// acknowledged, maybe the release of one (hub.rewound). A release the store
// still holds is recognised as such (stored).
func (s *source) forget() {
	s.forgot.Store(true) // not s.mu: a poll may hold it for a while
	s.kick()
}

// run polls every interval, and when kicked, until ctx ends.
func (s *source) run(ctx context.Context, interval time.Duration) {
	t := s.clock.NewTicker(interval)
	defer t.Stop()
	for {
		before := s.storesNow()
		if err := s.poll(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("polling the fleet repository", "err", err)
		}
		if now := s.storesNow(); now == before && now != s.swept && !s.sweeping.Load() {
			s.swept = now
			s.sweeping.Store(true)
			go s.sweep(ctx)
		}
		s.board.post(wakePolled)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-s.kickCh:
		}
	}
}

// storesNow is how many polls stored a release.
func (s *source) storesNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stores
}

// sweep deletes the parts of release blobs that storing a release
// deleted; a failure is a log line (the next store sweeps again).
func (s *source) sweep(ctx context.Context) {
	defer s.sweeping.Store(false)
	began := time.Now()
	n, err := s.st.SweepBlobParts(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("sweeping the parts of deleted release blobs", "err", err)
		}
		return
	}
	s.log.Debug("swept the parts of deleted release blobs", "blobs", n, "ms", time.Since(began).Milliseconds())
}

// poll processes every channel ref that moved since the last poll.
func (s *source) poll(ctx context.Context) error {
	polled := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.forgot.Swap(false) {
		s.seen = map[string]plumbing.Hash{}
	}
	todo, ahead, err := s.newRefs(ctx)
	if err != nil {
		return err
	}
	if len(todo)+len(ahead) > 0 && s.reacting != nil {
		defer s.reacting()()
	}
	// Verify every new ref, then store the verified releases in one
	// transaction and tell the reconciler once: refs pushed together
	// (staging and prod, say) open their rollouts in one tick, in
	// channel-edge order, whatever the order of their names.
	st := s.newStager(ctx)
	defer st.wait()
	batch, err := s.verifyRefs(ctx, todo, polled, st.stage)
	if err != nil {
		return err
	}
	// Nothing to store: no transaction (it would take the tick lock, and
	// on every poll).
	if len(batch) > 0 {
		if err := s.storeVerified(ctx, batch, st); err != nil {
			return err
		}
	}
	s.polled = true
	// The channels first: what was promoted does not wait for what may be.
	s.verifyAhead(ctx, ahead, st.stage)
	return nil
}

// channelRef is a channel's ref as git holds it.
type channelRef struct {
	channel string
	hash    plumbing.Hash
}

// newRefs fetches (a remote source) and returns the channel refs that
// point elsewhere than when last seen, by channel name, and the watched
// refs that do, by name.
func (s *source) newRefs(ctx context.Context) ([]channelRef, []watchedRef, error) {
	if s.remote {
		specs := []config.RefSpec{"+" + channelRefPrefix + "*:" + channelRefPrefix + "*"}
		for _, w := range s.watch {
			specs = append(specs, config.RefSpec("+"+w+":"+w))
		}
		err := s.repo.FetchContext(ctx, &git.FetchOptions{RemoteName: "origin", RefSpecs: specs, Force: true, Prune: true})
		if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
			return nil, nil, fmt.Errorf("fetching %s: %w", s.spec, err)
		}
	}
	// go-git reads the list of packs once; a push kept as a pack, or a git
	// gc, since then would leave new commits unreadable ("object not
	// found") and their release refused. Forget the list on every poll.
	if r, ok := s.repo.Storer.(interface{ Reindex() }); ok {
		r.Reindex()
	}
	refs, err := s.repo.References()
	if err != nil {
		return nil, nil, err
	}
	var (
		todo    []channelRef
		ahead   []watchedRef
		present = map[string]bool{}
	)
	err = refs.ForEach(func(r *plumbing.Reference) error {
		name := r.Name().String()
		switch {
		case r.Type() != plumbing.HashReference:
		case strings.HasPrefix(name, channelRefPrefix):
			ch := strings.TrimPrefix(name, channelRefPrefix)
			if s.seen[ch] != r.Hash() {
				todo = append(todo, channelRef{ch, r.Hash()})
			}
		case watched(s.watch, name):
			present[name] = true
			if s.ahead[name] != r.Hash() {
				ahead = append(ahead, watchedRef{name, r.Hash()})
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for name := range s.ahead {
		if !present[name] {
			delete(s.ahead, name) // a branch deleted
		}
	}
	slices.SortFunc(todo, func(a, b channelRef) int { return strings.Compare(a.channel, b.channel) })
	slices.SortFunc(ahead, func(a, b watchedRef) int { return strings.Compare(a.name, b.name) })
	return todo, ahead, nil
}

// watched reports whether a ref (not a channel's) is one whose releases
// are verified ahead: patterns are whole ref names, or a prefix ending in
// "/*", which matches one more level of the name (CheckWatchRefs).
func watched(patterns []string, ref string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if rest, ok := strings.CutPrefix(ref, prefix); ok && rest != "" && !strings.Contains(rest, "/") {
				return true
			}
		} else if p == ref {
			return true
		}
	}
	return false
}

// verified is a release that passed verification, waiting to be stored.
type verified struct {
	channelRef
	rel   store.Release
	fleet *proto.FleetResolved
	took  time.Duration // reading and verifying it
	wait  time.Duration // from the poll's start until it was read
	how   string        // verifiedFull or verifiedKept
}

// verifyRefs reads and verifies each ref. A release refused is recorded
// as refused (and its ref seen) and left out; an error that is no verdict
// on a release (git, the store) is returned, and the next poll reads the
// refs again.
func (s *source) verifyRefs(ctx context.Context, todo []channelRef, polled time.Time, stage func(bodies ...[]byte)) ([]verified, error) {
	var batch []verified
	for _, r := range todo {
		began := time.Now()
		rel, fleet, how, err := s.verify(r.channel, r.hash, stage)
		s.m.verifying.WithLabelValues(how).Observe(time.Since(began).Seconds())
		var ve *verifyError
		switch {
		case errors.As(err, &ve):
			if err := s.fail(ctx, r.channel, r.hash, nil, ve); err != nil {
				// The refusal is not recorded: no verdict yet, the next
				// poll reads the ref again.
				s.unavailable(r.channel, r.hash, err)
				continue
			}
			s.seen[r.channel] = r.hash
			continue
		case err != nil:
			return nil, err // not a verdict on the release: retry on the next poll
		}
		batch = append(batch, verified{r, rel, fleet, time.Since(began), began.Sub(polled), how})
	}
	return batch, nil
}

// stager sends each release's bodies to the store while it is verified
// (source.stage), one staging at a time and in the order they were read
// (the store serializes stagings: one waiting there would hold a
// connection); storing the verified releases waits for them, and then
// only names them. stage is called from the polling goroutine only.
type stager struct {
	ctx  context.Context
	src  *source
	wg   sync.WaitGroup
	last chan struct{} // closed when the latest staging ended
}

func (s *source) newStager(ctx context.Context) *stager { return &stager{ctx: ctx, src: s} }

func (st *stager) stage(bodies ...[]byte) {
	before, done := st.last, make(chan struct{})
	st.last = done
	st.wg.Go(func() {
		defer close(done)
		if before != nil {
			<-before
		}
		st.src.stage(st.ctx, bodies)
	})
}

// wait returns when every staging has ended.
func (st *stager) wait() { st.wg.Wait() }

// storeVerified stores the verified releases in one transaction, tells
// the tick at once when one is new, then finishes each (stored): its host
// keys, parsed meanwhile, and its fate in the release log. A release not
// finished is not marked seen: the next poll reads it again.
func (s *source) storeVerified(ctx context.Context, batch []verified, st *stager) error {
	rels := make([]store.Release, len(batch))
	for i, v := range batch {
		rels[i] = v.rel
	}
	keysOf := s.parseKeys(batch)
	began := time.Now()
	st.wait()
	t := timing{stageWait: time.Since(began)}
	began = time.Now()
	errs, err := s.st.PutReleases(ctx, rels)
	t.put = time.Since(began)
	if err != nil {
		for _, v := range batch {
			s.unavailable(v.channel, v.hash, err)
		}
		return err // a store error: retry on the next poll
	}
	// A release the store took (no error for it) is new: the tick is told
	// at once, before the host keys and manifests are seen to (which no
	// tick reads).
	for _, err := range errs {
		if err == nil {
			s.board.post(wakeTick)
			s.stores++
			break
		}
	}
	var failed []error
	for i, v := range batch {
		t.verify, t.poll, t.how = v.took, v.wait, v.how
		err := s.stored(ctx, v.channel, v.hash, v.rel, keysOf, errs[i], t)
		if err != nil {
			// No verdict: the ref is not marked seen, and the next poll
			// reads it again.
			s.unavailable(v.channel, v.hash, err)
			failed = append(failed, fmt.Errorf("channel %s: %w", v.channel, err))
			continue
		}
		s.seen[v.channel] = v.hash
		if errs[i] == nil {
			s.warnUnknownSources(v)
		}
		if f, ok := s.failures[v.channel]; ok && f.Code == codes.StoreUnavailable {
			delete(s.failures, v.channel)
		}
	}
	return errors.Join(failed...)
}

// warnUnknownSources logs a warning for a new release whose channel's
// analyses name Prometheus sources this replica does not have: their
// measurements will be inconclusive and hold the rollout when it reaches
// a wave, so an operator should hear of it before.
func (s *source) warnUnknownSources(v verified) {
	if v.fleet == nil {
		return
	}
	if unknown := unknownSources(v.fleet, v.channel, s.prom); len(unknown) > 0 {
		s.log.Warn("the release's analyses name Prometheus sources this control plane does not have: their measurements will be inconclusive and halt the rollout; add [[prometheus.source]] tables to the --config file",
			"channel", v.channel, "ref", v.rel.Ref, "commit", v.hash.String(), "sources", unknown, "known", s.prom.Names(), "code", codes.AnalysisSourceUnknown)
	}
}

// parseKeys starts parsing the host keys of each fleet of the batch, so
// that they are parsed while the store writes; the function it returns
// waits for a fleet's (by its hash).
func (s *source) parseKeys(batch []verified) func(fleetHash string) hostKeys {
	keys := map[string]chan hostKeys{}
	for _, v := range batch {
		if _, ok := keys[v.rel.FleetHash]; !ok && s.ids != nil {
			ch := make(chan hostKeys, 1)
			keys[v.rel.FleetHash] = ch
			go func(f *proto.FleetResolved) { ch <- parseHostKeys(f, s.ids.current()) }(v.fleet)
		}
	}
	parsed := map[string]hostKeys{}
	return func(hash string) hostKeys {
		k, ok := parsed[hash]
		if !ok {
			k = <-keys[hash]
			parsed[hash] = k
		}
		return k
	}
}

// verifyError is a release that failed verification, with its code.
type verifyError struct {
	code string
	err  error
}

func (e *verifyError) Error() string { return e.err.Error() }

// stored finishes a verified release after the store was asked to keep
// it (putErr is its answer; nil: it is new). A replay, and an old
// ciCommit signed anew (store.ErrReusedRef), are recorded as failures;
// only store errors are returned, and they are no verdict on the
// release: a store that cannot say which release is current does not
// make this one a replay. A new release's host keys (keysOf its fleet,
// parsed meanwhile) become the hosts' identities. The log line says how
// long each part took (t).
func (s *source) stored(ctx context.Context, channel string, hash plumbing.Hash, rel store.Release, keysOf func(fleetHash string) hostKeys, putErr error, t timing) error {
	switch {
	case errors.Is(putErr, store.ErrStaleRelease):
		cur, err := s.current(ctx, channel)
		if err != nil {
			return err
		}
		if cur != nil && cur.FleetHash == rel.FleetHash && cur.ManifestHash == rel.ManifestHash {
			// The release we already have: a restart or a re-poll, or the
			// ref moved back to it (the store logged that push).
			return nil
		}
		// The rollback that works is the channel's latest rollout's (the
		// current release may not have opened one).
		latest, err := s.st.LatestRollouts(ctx)
		if err != nil {
			return err
		}
		way := "roll back with nixfleet rollout rollback, or revert the change in the fleet's source so that CI builds and signs it anew"
		if id := latest[channel]; id != "" {
			way = fmt.Sprintf("roll back with nixfleet rollout rollback %s, or revert the change in the fleet's source so that CI builds and signs it anew", id)
		}
		return s.fail(ctx, channel, hash, &rel, &verifyError{codes.ReplayedRelease, fmt.Errorf(
			"the release at %s was signed %s, not after the channel's current release: a replay or a ref moved back is refused; to go back, %s",
			hash.String()[:12], rel.SignedAt.UTC().Format(time.RFC3339), way)})
	case errors.Is(putErr, store.ErrReusedRef):
		id := proto.RolloutID(channel, rel.Ref)
		return s.fail(ctx, channel, hash, &rel, &verifyError{codes.ReusedCiCommit, fmt.Errorf(
			"the release at %s is ciCommit %s signed anew (%s), but %s rolled out before and a rollout id opens once; "+
				"to go back to it, revert the changes since in the fleet's source (git revert) so that CI builds, stamps and signs a new ciCommit",
			hash.String()[:12], rel.Ref, rel.SignedAt.UTC().Format(time.RFC3339), id)})
	case putErr != nil:
		return putErr
	}
	delete(s.failures, channel)
	s.log.Info("release verified", "channel", channel, "ref", rel.Ref, "commit", hash.String(), "signedAt", rel.SignedAt,
		"pollMs", t.poll.Milliseconds(), "verifyMs", t.verify.Milliseconds(), "verified", t.how, "stageWaitMs", t.stageWait.Milliseconds(), "storeMs", t.put.Milliseconds())
	if err := s.refreshManifest(ctx, rel); err != nil {
		return err
	}
	if s.ids != nil {
		s.ids.setKeys(keysOf(rel.FleetHash), rel.SignedAt)
	}
	return nil
}

// current is the channel's current release (nil if it has none).
func (s *source) current(ctx context.Context, channel string) (*store.Release, error) {
	rels, err := s.st.Releases(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the current releases: %w", err)
	}
	for i := range rels {
		if rels[i].Channel == channel {
			return &rels[i], nil
		}
	}
	return nil, nil
}

// refreshManifest lets a live rollout serve a re-signed manifest of the
// same plan (only meta changed), so agents keep getting a fresh one during
// a rollout longer than the freshness window.
func (s *source) refreshManifest(ctx context.Context, rel store.Release) error {
	id := proto.RolloutID(rel.Channel, rel.Ref)
	cur, err := s.st.Manifest(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && cur.Hash == rel.ManifestHash) {
		return nil
	}
	if err != nil {
		return err
	}
	if !samePlan(cur.Body, rel.ManifestBody) {
		return nil
	}
	return s.st.ReplaceManifest(ctx, store.Manifest{RolloutID: id, Body: rel.ManifestBody, Sig: rel.ManifestSig, Hash: rel.ManifestHash})
}

// samePlan reports whether two manifests differ at most in meta.
func samePlan(a, b []byte) bool {
	ma, err1 := proto.DecodeRolloutManifest(a)
	mb, err2 := proto.DecodeRolloutManifest(b)
	if err1 != nil || err2 != nil {
		return false
	}
	ma.Meta, mb.Meta = proto.Meta{}, proto.Meta{}
	x, err1 := manifest.Marshal(ma)
	y, err2 := manifest.Marshal(mb)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// fail records a verification failure: a metric, a log line, the ref in
// the release log, an event. rel is the release when verification got
// that far (a replay), else nil. An error is the release log's: the
// refusal is not recorded, and the caller must not mark the ref seen.
func (s *source) fail(ctx context.Context, channel string, hash plumbing.Hash, rel *store.Release, ve *verifyError) error {
	now := s.clock.Now()
	refused := store.RefusedRelease{Channel: channel, Commit: hash.String(), Code: ve.code, Message: ve.err.Error(), At: now}
	if rel != nil {
		refused.Ref, refused.SignedAt = rel.Ref, rel.SignedAt
	}
	if err := s.st.RefuseRelease(ctx, refused); err != nil {
		return fmt.Errorf("recording a refused release in the release log: %w", err)
	}
	s.failures[channel] = proto.SourceFailure{Commit: hash.String(), Code: ve.code, Message: ve.err.Error(), At: now}
	s.m.verifyFailure.WithLabelValues(ve.code).Inc()
	s.log.Warn("release refused", "channel", channel, "commit", hash.String(), "code", ve.code, "err", ve.err)
	ev := reconciler.Event{Kind: EventReleaseRejected, Channel: channel, Wave: -1,
		Reason: reconciler.Reason{Code: ve.code, Message: fmt.Sprintf("commit %s: %v", hash.String()[:12], ve.err)}}
	if err := s.st.AppendEvents(ctx, now, []reconciler.Event{ev}); err != nil {
		return fmt.Errorf("recording a refused release: %w", err)
	}
	return nil
}

// unavailable records that the store failed while a channel's new ref was
// being kept: the channel's lastFailure says store_unavailable, with a log
// line, and nothing else. It is no verdict on the release, so neither an
// event (the journal is in that store) nor a verification metric; the ref
// is not marked seen, and the next poll reads it again.
func (s *source) unavailable(channel string, hash plumbing.Hash, err error) {
	s.failures[channel] = proto.SourceFailure{Commit: hash.String(), Code: codes.StoreUnavailable,
		Message: fmt.Sprintf("the store failed; the ref is read again on the next poll: %v", err), At: s.clock.Now()}
	s.log.Error("keeping a verified release", "channel", channel, "commit", hash.String(), "code", codes.StoreUnavailable, "err", err)
}

// EventReleaseRejected is the event kind of a release that failed
// verification; the last verified release stays.
const EventReleaseRejected = "release_rejected"

// timing is how long the parts of keeping a release took: from the
// poll's start (a poll running when it was kicked, a fetch, reading the
// refs, the releases verified before it) until it was read, reading and
// verifying it, then waiting for its bodies to be staged (with those of
// the other releases of the poll), then storing the releases.
type timing struct {
	poll, verify, stageWait, put time.Duration
	how                          string // verifiedFull or verifiedKept
}

// stage writes a release's bodies to the store ahead of PutReleases
// (store.StageReleaseBodies). A failure costs only time: PutReleases
// writes what is missing, and says whether the store is up.
func (s *source) stage(ctx context.Context, bodies [][]byte) {
	began := time.Now()
	n, err := s.st.StageReleaseBodies(ctx, s.clock.Now(), bodies...)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("staging a release's bodies; storing it writes them", "err", err)
		}
		return
	}
	s.log.Debug("staged a release's bodies", "written", n, "of", len(bodies), "ms", time.Since(began).Milliseconds())
}

// verify reads and checks the artifacts at what a channel ref names, and
// says how: verifiedKept when the commit's fleet verified before
// (recheck), else verifiedFull. When stage is not nil, the bodies read are
// handed to it before they are verified (they go to the store meanwhile).
func (s *source) verify(channel string, hash plumbing.Hash, stage func(bodies ...[]byte)) (store.Release, *proto.FleetResolved, string, error) {
	now := s.clock.Now()
	commit, err := s.commitAt(hash)
	if err != nil {
		return store.Release{}, nil, verifiedFull, err
	}
	if cv := s.verdicts.get(commit.Hash); cv != nil {
		rel, fleet, err := s.recheck(channel, commit, cv, now, stage)
		return rel, fleet, verifiedKept, err
	}
	rel, fleet, err := s.verifyFull(channel, commit, now, stage)
	return rel, fleet, verifiedFull, err
}

// verifyFull reads and verifies a channel's release at a commit, and
// keeps its verdicts when it verifies.
func (s *source) verifyFull(channel string, commit *object.Commit, now time.Time, stage func(bodies ...[]byte)) (store.Release, *proto.FleetResolved, error) {
	tree, err := s.tree(commit.TreeHash, "the commit's tree")
	if err != nil {
		return store.Release{}, nil, err
	}
	fleetBody, fleetSig, err := s.readPair(tree, releaseDir+"/fleet.resolved.json")
	if err != nil {
		return store.Release{}, nil, err
	}
	if stage != nil {
		stage(fleetBody) // the largest body first, before the manifest is read
	}
	// The fleet is verified and validated on another core while git is
	// read on: the manifest's name comes from the verified fleet, but
	// verifying a large fleet takes long, so the manifest the unverified
	// bytes name is read now and verified on a core of its own, and its
	// verdict used only if the verified fleet names the same one (else it
	// is read and verified again). Git is read from this goroutine only;
	// the verdicts are taken fleet first, so the errors keep their order.
	fleetDone := make(chan error, 1)
	var res *trust.Result
	go func() {
		r, err := s.checkFleet(channel, fleetBody, fleetSig, now)
		res = r // read after fleetDone
		fleetDone <- err
	}()
	spec := s.speculate(tree, channel, fleetBody, now)
	defer spec.wait()
	if stage != nil && spec.body != nil {
		stage(spec.body)
	}
	if err := <-fleetDone; err != nil {
		return store.Release{}, nil, err
	}
	fleet := res.Fleet
	ref := *fleet.Meta.CICommit
	id := proto.RolloutID(channel, ref)
	mBody, mSig := spec.body, spec.sig
	var mres *trust.Result
	if spec.id == id {
		spec.wait()
		mres, err = spec.res, spec.err
	} else {
		if mBody, mSig, err = s.readPair(tree, releaseDir+"/rollouts/"+id+".json"); err != nil {
			return store.Release{}, nil, err
		}
		mres, err = manifest.Verify(mBody, mSig, s.roots, manifest.Expect{RolloutID: id}, now)
	}
	if err != nil {
		return store.Release{}, nil, manifestError(id, err)
	}
	if err := projectedFrom(id, mres, res.SHA256); err != nil {
		return store.Release{}, nil, err
	}
	m := keepVerdict(mBody, mSig, mres)
	s.verdicts.keep(commit.Hash, keepVerdict(fleetBody, fleetSig, res), id, &m)
	return store.Release{
		Channel: channel, Ref: ref, SourceCommit: commit.Hash.String(), SignedAt: res.SignedAt,
		FleetBody: fleetBody, FleetSig: fleetSig, FleetHash: res.SHA256,
		ManifestBody: mBody, ManifestSig: mSig, ManifestHash: mres.SHA256, VerifiedAt: now,
		Fleet: fleet, Manifest: mres.Manifest,
	}, fleet, nil
}

// checkFleet verifies a fleet's signature and validates it, for channel
// when not empty.
func (s *source) checkFleet(channel string, body, sig []byte, now time.Time) (*trust.Result, error) {
	res, err := trust.Verify(body, sig, s.roots, trust.Policy{Kind: proto.KindFleetResolved}, now)
	if err != nil {
		return nil, &verifyError{trust.Code(err), fmt.Errorf("fleet.resolved.json: %w", err)}
	}
	if channel != "" {
		if err := hasChannel(res.Fleet, channel); err != nil {
			return nil, err
		}
	}
	if _, err := manifest.ValidateFleet(res.Fleet); err != nil {
		return nil, &verifyError{codes.InvalidFleet, err}
	}
	if res.Fleet.Meta.CICommit == nil || *res.Fleet.Meta.CICommit == "" {
		return nil, &verifyError{codes.Malformed, errors.New("fleet.resolved.json has no meta.ciCommit: CI did not stamp the release, so it names no rollout")}
	}
	return res, nil
}

// hasChannel checks that a verified fleet lists channel.
func hasChannel(f *proto.FleetResolved, channel string) error {
	if _, ok := f.Channels[channel]; !ok {
		return &verifyError{codes.UnknownChannel, fmt.Errorf("the signed fleet has no channel %q", channel)}
	}
	return nil
}

// speculation is a manifest read before its fleet was verified, and
// verified on a goroutine of its own (source.verify).
type speculation struct {
	id        string // the rollout id the unverified fleet names; "" when none
	body, sig []byte
	res       *trust.Result
	err       error
	done      chan struct{}
}

// wait returns when the verification ended; at once when none started.
func (sp *speculation) wait() {
	if sp.done != nil {
		<-sp.done
	}
}

// speculate reads the manifest that the unverified fleet body names for
// channel (its meta.ciCommit, found by a byte search: a wrong guess costs
// only time) and starts verifying it. Nothing is read when the body names
// none, or reading fails: verify then reads after the fleet verified.
func (s *source) speculate(tree *object.Tree, channel string, fleetBody []byte, now time.Time) *speculation {
	sp := &speculation{}
	const key = `"ciCommit":"`
	i := bytes.LastIndex(fleetBody, []byte(key))
	if i < 0 {
		return sp
	}
	ref, _, ok := bytes.Cut(fleetBody[i+len(key):], []byte(`"`))
	if !ok || len(ref) == 0 || len(ref) > 128 {
		return sp
	}
	id := proto.RolloutID(channel, string(ref))
	body, sig, err := s.readPair(tree, releaseDir+"/rollouts/"+id+".json")
	if err != nil {
		return sp
	}
	sp.id, sp.body, sp.sig, sp.done = id, body, sig, make(chan struct{})
	go func() {
		defer close(sp.done)
		sp.res, sp.err = manifest.Verify(body, sig, s.roots, manifest.Expect{RolloutID: id}, now)
	}()
	return sp
}

// object looks an object up by the header alone (see lazy): its type
// and size are known, none of its content is read. An object over
// maxArtifact is refused: nothing bigger is ever read. what names it in
// errors.
func (s *source) object(h plumbing.Hash, what string) (plumbing.EncodedObject, error) {
	o, err := s.repo.Storer.EncodedObject(plumbing.AnyObject, h)
	if err != nil {
		return nil, &verifyError{codes.MissingArtifact, fmt.Errorf("%s: object %s: %w", what, h, err)}
	}
	if o.Size() > maxArtifact {
		return nil, &verifyError{codes.Malformed, fmt.Errorf("%s is %d bytes, over the %d-byte limit: refused unread", what, o.Size(), maxArtifact)}
	}
	return o, nil
}

// commitAt is the commit a channel ref names: the commit itself, or the
// commit an annotated tag (or a tag of tags, up to maxPeel) points at, as
// git's <ref>^{commit}. A ref naming a tree or a blob, directly or through
// tags, names no release: not_a_commit.
func (s *source) commitAt(h plumbing.Hash) (*object.Commit, error) {
	what := "the ref's object"
	for range maxPeel + 1 {
		o, err := s.object(h, what)
		if err != nil {
			return nil, err
		}
		switch o.Type() {
		case plumbing.CommitObject:
			c, err := object.DecodeCommit(s.repo.Storer, o)
			if err != nil {
				return nil, &verifyError{codes.MissingArtifact, fmt.Errorf("reading commit %s: %w", h, err)}
			}
			return c, nil
		case plumbing.TagObject:
			t, err := object.DecodeTag(s.repo.Storer, o)
			if err != nil {
				return nil, &verifyError{codes.MissingArtifact, fmt.Errorf("reading tag %s: %w", h, err)}
			}
			h, what = t.Target, fmt.Sprintf("the target of tag %q", t.Name)
		default:
			return nil, &verifyError{codes.NotACommit, fmt.Errorf("%s %s is a %s, not a commit or an annotated tag of one", what, h, o.Type())}
		}
	}
	return nil, &verifyError{codes.NotACommit, fmt.Errorf("the ref goes through more than %d annotated tags", maxPeel)}
}

// tree reads a tree object.
func (s *source) tree(h plumbing.Hash, what string) (*object.Tree, error) {
	o, err := s.object(h, what)
	if err != nil {
		return nil, err
	}
	if o.Type() != plumbing.TreeObject {
		return nil, &verifyError{codes.NotAFile, fmt.Errorf("%s is a %s, not a directory", what, o.Type())}
	}
	t, err := object.DecodeTree(s.repo.Storer, o)
	if err != nil {
		return nil, &verifyError{codes.MissingArtifact, fmt.Errorf("reading %s: %w", what, err)}
	}
	return t, nil
}

// readPair reads a file and its .sig from a tree.
func (s *source) readPair(tree *object.Tree, path string) ([]byte, []byte, error) {
	body, err := s.readFile(tree, path)
	if err != nil {
		return nil, nil, err
	}
	sig, err := s.readFile(tree, path+".sig")
	if err != nil {
		return nil, nil, err
	}
	return body, sig, nil
}

// readFile reads a regular file from a tree. Every step is checked before
// anything is read: each directory on the path must be a tree entry, the
// file a regular (or executable) file whose object is a blob (a symlink,
// a directory or a submodule is not_a_file), and its size, from the
// object header, at most maxArtifact.
func (s *source) readFile(tree *object.Tree, path string) ([]byte, error) {
	parts := strings.Split(path, "/")
	for i, name := range parts {
		at := strings.Join(parts[:i+1], "/")
		e, err := entry(tree, name)
		if err != nil {
			return nil, &verifyError{codes.MissingArtifact, fmt.Errorf("%s: %w", at, err)}
		}
		if i < len(parts)-1 {
			if e.Mode != filemode.Dir {
				return nil, &verifyError{codes.NotAFile, fmt.Errorf("%s is %s, not a directory", at, describeMode(e.Mode))}
			}
			if tree, err = s.tree(e.Hash, at); err != nil {
				return nil, err
			}
			continue
		}
		if !e.Mode.IsRegular() && e.Mode != filemode.Executable {
			return nil, &verifyError{codes.NotAFile, fmt.Errorf("%s is %s, not a file", at, describeMode(e.Mode))}
		}
		o, err := s.object(e.Hash, path)
		if err != nil {
			return nil, err
		}
		if o.Type() != plumbing.BlobObject {
			return nil, &verifyError{codes.NotAFile, fmt.Errorf("%s names a %s, not a file's content", path, o.Type())}
		}
		r, err := o.Reader()
		if err != nil {
			return nil, &verifyError{codes.MissingArtifact, fmt.Errorf("%s: %w", path, err)}
		}
		defer r.Close()
		// The header's size is the buffer's (and room for a read that
		// finds the end): a large fleet is not copied as it grows.
		buf := bytes.NewBuffer(make([]byte, 0, o.Size()+bytes.MinRead))
		_, err = buf.ReadFrom(io.LimitReader(r, maxArtifact+1))
		data := buf.Bytes()
		switch {
		case err != nil:
			return nil, &verifyError{codes.MissingArtifact, fmt.Errorf("%s: %w", path, err)}
		case int64(len(data)) > maxArtifact:
			return nil, &verifyError{codes.Malformed, fmt.Errorf("%s is over the %d-byte limit", path, maxArtifact)}
		}
		return data, nil
	}
	return nil, &verifyError{codes.MissingArtifact, fmt.Errorf("%s: empty path", path)}
}

// entry finds a name in a tree, without reading the object it names.
func entry(tree *object.Tree, name string) (*object.TreeEntry, error) {
	for i := range tree.Entries {
		if tree.Entries[i].Name == name {
			return &tree.Entries[i], nil
		}
	}
	return nil, object.ErrEntryNotFound
}

// describeMode names a tree entry's kind for an error.
func describeMode(m filemode.FileMode) string {
	switch m {
	case filemode.Dir:
		return "a directory"
	case filemode.Symlink:
		return "a symbolic link"
	case filemode.Submodule:
		return "a submodule (gitlink)"
	case filemode.Regular, filemode.Deprecated, filemode.Executable:
		return "a file"
	}
	return fmt.Sprintf("an entry of mode %o", uint32(m))
}

// status returns the latest failure of each channel, for /v1/status.
func (s *source) status() (polled bool, failures map[string]proto.SourceFailure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]proto.SourceFailure, len(s.failures))
	for k, v := range s.failures {
		out[k] = v
	}
	return s.polled, out
}
