package controlplane

import (
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
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/trust"
)

// Channel refs live under this prefix: refs/heads/channels/<channel>.
const channelRefPrefix = "refs/heads/channels/"

// Paths of the signed artifacts in a release commit's tree.
const (
	releaseDir   = "releases"
	maxArtifact  = proto.MaxBytes
	codeMissing  = "missing_artifact"
	codeMismatch = "fleet_hash_mismatch"
	codeReplay   = "replayed_release"
	codeChannel  = "unknown_channel"
)

// source watches the fleet repository's channel refs and turns every new
// release into a verified store.Release (rfcs/0006 §Channel source):
//
//  1. list refs/heads/channels/*; skip refs whose commit was processed;
//  2. read releases/fleet.resolved.json(.sig) at the commit and verify it
//     against the trust roots (every channel's freshness window);
//  3. read releases/rollouts/<channel>@<ciCommit>.json(.sig) and verify it
//     (rollout id from the ref's channel and the fleet's ciCommit), check
//     that it was projected from this fleet, validate the fleet;
//  4. store it, unless it is not newer than the channel's current release
//     (a replay or a ref moved back): a failure at any step is an event and
//     a metric, and the last verified release stays.
type source struct {
	spec     string
	stateDir string
	roots    *trust.Roots
	st       store.Store
	now      func() time.Time
	log      *slog.Logger
	m        *metrics
	changed  func()                                // a release was stored
	onFleet  func(*proto.FleetResolved, time.Time) // a verified fleet, and when it was signed
	kickCh   chan struct{}
	mu       sync.Mutex
	repo     *git.Repository
	remote   bool
	seen     map[string]plumbing.Hash
	polled   bool
	failures map[string]SourceFailure // by channel, the latest
}

// SourceFailure is the latest verification failure of a channel.
type SourceFailure struct {
	Commit  string    `json:"commit"`
	Code    string    `json:"code"`
	Message string    `json:"message"`
	At      time.Time `json:"at"`
}

func newSource(spec, stateDir string, roots *trust.Roots, st store.Store, now func() time.Time, log *slog.Logger, m *metrics) *source {
	return &source{spec: spec, stateDir: stateDir, roots: roots, st: st, now: now, log: log, m: m,
		kickCh: make(chan struct{}, 1), seen: map[string]plumbing.Hash{}, failures: map[string]SourceFailure{},
		changed: func() {}, onFleet: func(*proto.FleetResolved, time.Time) {}}
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
	if err != nil {
		return fmt.Errorf("mirroring the fleet repository %s: %w", s.spec, err)
	}
	s.repo, s.remote = repo, true
	return nil
}

// kick asks for a poll now (the webhook).
func (s *source) kick() {
	select {
	case s.kickCh <- struct{}{}:
	default:
	}
}

// run polls every interval, and when kicked, until ctx ends.
func (s *source) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := s.poll(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("polling the fleet repository", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kickCh:
		}
	}
}

// poll processes every channel ref that moved since the last poll.
func (s *source) poll(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.remote {
		err := s.repo.FetchContext(ctx, &git.FetchOptions{RemoteName: "origin", Force: true, Prune: true})
		if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
			return fmt.Errorf("fetching %s: %w", s.spec, err)
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
		return err
	}
	type ref struct {
		channel string
		hash    plumbing.Hash
	}
	var todo []ref
	err = refs.ForEach(func(r *plumbing.Reference) error {
		name := r.Name().String()
		if !strings.HasPrefix(name, channelRefPrefix) || r.Type() != plumbing.HashReference {
			return nil
		}
		ch := strings.TrimPrefix(name, channelRefPrefix)
		if s.seen[ch] != r.Hash() {
			todo = append(todo, ref{ch, r.Hash()})
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(todo, func(a, b ref) int { return strings.Compare(a.channel, b.channel) })
	// Verify every new ref, then store the verified releases in one
	// transaction and tell the reconciler once: refs pushed together
	// (staging and prod, say) open their rollouts in one tick, in
	// channel-edge order, whatever the order of their names.
	type verified struct {
		ref
		rel   store.Release
		fleet *proto.FleetResolved
	}
	var batch []verified
	for _, r := range todo {
		rel, fleet, err := s.verify(r.channel, r.hash)
		var ve *verifyError
		switch {
		case errors.As(err, &ve):
			s.fail(ctx, r.channel, r.hash, ve)
			s.seen[r.channel] = r.hash
			continue
		case err != nil:
			return err // not a verdict on the release: retry on the next poll
		}
		batch = append(batch, verified{r, rel, fleet})
	}
	rels := make([]store.Release, len(batch))
	for i, v := range batch {
		rels[i] = v.rel
	}
	errs, err := s.st.PutReleases(ctx, rels)
	if err != nil {
		return err // a store error: retry on the next poll
	}
	stored := false
	defer func() {
		if stored {
			s.changed()
		}
	}()
	for i, v := range batch {
		ok, err := s.stored(ctx, v.channel, v.hash, v.rel, v.fleet, errs[i])
		if err != nil {
			return err
		}
		stored = stored || ok
		s.seen[v.channel] = v.hash
	}
	s.polled = true
	return nil
}

// verifyError is a release that failed verification, with its code.
type verifyError struct {
	code string
	err  error
}

func (e *verifyError) Error() string { return e.err.Error() }

// stored finishes a verified release after the store was asked to keep
// it (putErr is its answer), and reports whether it is new. A replay is
// recorded as a failure; only store errors are returned.
func (s *source) stored(ctx context.Context, channel string, hash plumbing.Hash, rel store.Release, fleet *proto.FleetResolved, putErr error) (bool, error) {
	switch {
	case errors.Is(putErr, store.ErrStaleRelease):
		if cur := s.current(ctx, channel); cur != nil && cur.FleetHash == rel.FleetHash && cur.ManifestHash == rel.ManifestHash {
			return false, nil // the release we already have (a restart, a re-poll)
		}
		s.fail(ctx, channel, hash, &verifyError{codeReplay, fmt.Errorf(
			"the release at %s was signed %s, not after the channel's current release: a replay or a ref moved back is refused",
			hash.String()[:12], rel.SignedAt.UTC().Format(time.RFC3339))})
		return false, nil
	case putErr != nil:
		return false, putErr
	}
	delete(s.failures, channel)
	s.log.Info("release verified", "channel", channel, "ref", rel.Ref, "commit", hash.String(), "signedAt", rel.SignedAt)
	if err := s.refreshManifest(ctx, rel); err != nil {
		return true, err
	}
	s.onFleet(fleet, rel.SignedAt)
	return true, nil
}

func (s *source) current(ctx context.Context, channel string) *store.Release {
	rels, err := s.st.Releases(ctx)
	if err != nil {
		return nil
	}
	for i := range rels {
		if rels[i].Channel == channel {
			return &rels[i]
		}
	}
	return nil
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

// fail records a verification failure: a metric, a log line, an event.
func (s *source) fail(ctx context.Context, channel string, hash plumbing.Hash, ve *verifyError) {
	now := s.now()
	s.failures[channel] = SourceFailure{Commit: hash.String(), Code: ve.code, Message: ve.err.Error(), At: now}
	s.m.verifyFailure.WithLabelValues(ve.code).Inc()
	s.log.Warn("release refused", "channel", channel, "commit", hash.String(), "code", ve.code, "err", ve.err)
	ev := reconciler.Event{Kind: EventReleaseRejected, Channel: channel, Wave: -1,
		Reason: reconciler.Reason{Code: ve.code, Message: fmt.Sprintf("commit %s: %v", hash.String()[:12], ve.err)}}
	if err := s.st.AppendEvents(ctx, now, []reconciler.Event{ev}); err != nil {
		s.log.Error("recording a refused release", "err", err)
	}
}

// EventReleaseRejected is the event kind of a release that failed
// verification; the last verified release stays.
const EventReleaseRejected = "release_rejected"

// verify reads and checks the artifacts at a commit.
func (s *source) verify(channel string, hash plumbing.Hash) (store.Release, *proto.FleetResolved, error) {
	now := s.now()
	commit, err := s.repo.CommitObject(hash)
	if err != nil {
		return store.Release{}, nil, &verifyError{codeMissing, fmt.Errorf("reading commit %s: %w", hash, err)}
	}
	tree, err := commit.Tree()
	if err != nil {
		return store.Release{}, nil, &verifyError{codeMissing, err}
	}
	fleetBody, fleetSig, err := readPair(tree, releaseDir+"/fleet.resolved.json")
	if err != nil {
		return store.Release{}, nil, err
	}
	res, err := trust.Verify(fleetBody, fleetSig, s.roots, trust.Policy{Kind: proto.KindFleetResolved}, now)
	if err != nil {
		return store.Release{}, nil, &verifyError{trust.Code(err), fmt.Errorf("fleet.resolved.json: %w", err)}
	}
	fleet := res.Fleet
	if _, ok := fleet.Channels[channel]; !ok {
		return store.Release{}, nil, &verifyError{codeChannel, fmt.Errorf("the signed fleet has no channel %q", channel)}
	}
	if _, err := manifest.ValidateFleet(fleet); err != nil {
		return store.Release{}, nil, &verifyError{"invalid_fleet", err}
	}
	if fleet.Meta.CICommit == nil || *fleet.Meta.CICommit == "" {
		return store.Release{}, nil, &verifyError{"malformed", errors.New("fleet.resolved.json has no meta.ciCommit: CI did not stamp the release, so it names no rollout")}
	}
	ref := *fleet.Meta.CICommit
	id := proto.RolloutID(channel, ref)
	mBody, mSig, err := readPair(tree, releaseDir+"/rollouts/"+id+".json")
	if err != nil {
		return store.Release{}, nil, err
	}
	mres, err := manifest.Verify(mBody, mSig, s.roots, manifest.Expect{RolloutID: id}, now)
	if err != nil {
		return store.Release{}, nil, &verifyError{trust.Code(err), fmt.Errorf("%s.json: %w", id, err)}
	}
	if mres.Manifest.FleetResolvedHash != res.SHA256 {
		return store.Release{}, nil, &verifyError{codeMismatch, fmt.Errorf("%s.json was projected from fleet %s, not from this release's %s",
			id, mres.Manifest.FleetResolvedHash, res.SHA256)}
	}
	return store.Release{
		Channel: channel, Ref: ref, SourceCommit: hash.String(), SignedAt: res.SignedAt,
		FleetBody: fleetBody, FleetSig: fleetSig, FleetHash: res.SHA256,
		ManifestBody: mBody, ManifestSig: mSig, ManifestHash: mres.SHA256, VerifiedAt: now,
	}, fleet, nil
}

// readPair reads a file and its .sig from a tree.
func readPair(tree *object.Tree, path string) ([]byte, []byte, error) {
	body, err := readFile(tree, path)
	if err != nil {
		return nil, nil, err
	}
	sig, err := readFile(tree, path+".sig")
	if err != nil {
		return nil, nil, err
	}
	return body, sig, nil
}

func readFile(tree *object.Tree, path string) ([]byte, error) {
	f, err := tree.File(path)
	if err != nil {
		return nil, &verifyError{codeMissing, fmt.Errorf("%s: %w", path, err)}
	}
	if f.Size > maxArtifact {
		return nil, &verifyError{"malformed", fmt.Errorf("%s is %d bytes, over the %d-byte limit", path, f.Size, maxArtifact)}
	}
	r, err := f.Reader()
	if err != nil {
		return nil, &verifyError{codeMissing, err}
	}
	defer r.Close()
	return io.ReadAll(io.LimitReader(r, maxArtifact+1))
}

// status returns the latest failure of each channel, for /v1/status.
func (s *source) status() (polled bool, failures map[string]SourceFailure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]SourceFailure, len(s.failures))
	for k, v := range s.failures {
		out[k] = v
	}
	return s.polled, out
}
