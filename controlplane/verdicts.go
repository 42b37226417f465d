package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// Verdicts kept by commit (rfcs/0006 §Channel source 8). Verifying a
// release is the longest part of a push's way to its first dispatch: at
// 100,000 hosts it reads and checks 27.5 MB, 0.3–1.2 s of a core. What
// verifying finds depends on the bytes, the trust roots and the time; a
// commit's bytes never change and the roots are the process's, so the
// source keeps, by commit, the artifacts it verified and their verdicts,
// and a channel ref moved to such a commit is judged by trust.Recheck at
// the time of the move: the checks that depend on the time (a key active,
// rejectBefore, freshness) run again, the others hold for those bytes,
// and nothing is read again. The verdicts come from
//
//   - a channel's release verified in full: its fleet and that channel's
//     manifest (prod promoting staging's commit reads only prod's
//     manifest);
//   - the watched refs (Config.WatchRefs: the branches CI commits its
//     signed releases to): each new commit at one is verified ahead of
//     any promotion, its fleet and every channel's manifest, so moving a
//     channel's ref to it costs only the rechecks. A refusal there is a
//     log line and nixfleet_releases_verified_ahead_total{outcome=code}:
//     no channel's verdict, since nothing was promoted.
//
// Only what verified is kept; a ref moved to a commit whose artifacts
// failed is verified in full again, and refused with its code. At most
// maxVerdicts commits are kept, the least recently used leaving first:
// each holds its bodies (35.5 MiB at 100,000 hosts in one channel) and its
// decoded fleet, which a stored release shares. Two cover the common
// cases: the head of CI's branch, and the commit promoted last, which the
// next channel promotes in turn. Only the polling goroutine uses them (under source.mu).

// maxVerdicts bounds the commits whose verdicts are kept.
const maxVerdicts = 2

// How a channel's release was verified (nixfleet_release_verification_seconds).
const (
	verifiedFull = "full"
	verifiedKept = "kept"
)

// verdicts are the commits whose artifacts verified, least recently used
// first.
type verdicts struct {
	order []plumbing.Hash
	by    map[plumbing.Hash]*commitVerdict
}

// commitVerdict is what verified at a commit: its fleet, and the
// manifests of the channels verified so far, by rollout id.
type commitVerdict struct {
	fleet     signedVerdict
	manifests map[string]signedVerdict
}

// signedVerdict is an artifact, its signature and what verifying it
// returned (its Canonical shares the body when CI wrote canonical bytes).
type signedVerdict struct {
	body, sig []byte
	res       *trust.Result
}

// keepVerdict makes a signedVerdict of what Verify returned, holding one
// copy of the bytes when they were canonical as received.
func keepVerdict(body, sig []byte, res *trust.Result) signedVerdict {
	r := *res
	if bytes.Equal(r.Canonical, body) {
		r.Canonical = body
	}
	return signedVerdict{body: body, sig: sig, res: &r}
}

// get returns the verdict of a commit, nil when none is kept.
func (v *verdicts) get(commit plumbing.Hash) *commitVerdict {
	cv := v.by[commit]
	if cv != nil {
		v.touch(commit)
	}
	return cv
}

// touch makes commit the most recently used.
func (v *verdicts) touch(commit plumbing.Hash) {
	if i := slices.Index(v.order, commit); i >= 0 {
		v.order = slices.Delete(v.order, i, i+1)
	}
	v.order = append(v.order, commit)
}

// keep records what verified at commit, adding to what was kept for it.
func (v *verdicts) keep(commit plumbing.Hash, fleet signedVerdict, id string, m *signedVerdict) {
	if v.by == nil {
		v.by = map[plumbing.Hash]*commitVerdict{}
	}
	cv := v.by[commit]
	if cv == nil {
		cv = &commitVerdict{fleet: fleet, manifests: map[string]signedVerdict{}}
		v.by[commit] = cv
	}
	if m != nil {
		cv.manifests[id] = *m
	}
	v.touch(commit)
	for len(v.order) > maxVerdicts {
		delete(v.by, v.order[0])
		v.order = v.order[1:]
	}
}

// recheck judges a channel's move to a commit whose fleet verified before
// (cv), at now: in verify's order, the fleet's rechecked verdict, the
// channel, and its manifest's (read and verified now when this channel's
// was not yet). It hands the bodies to stage as verify does.
func (s *source) recheck(channel string, commit *object.Commit, cv *commitVerdict, now time.Time, stage func(bodies ...[]byte)) (store.Release, *proto.FleetResolved, error) {
	res := *cv.fleet.res
	if err := trust.Recheck(&res, cv.fleet.sig, s.roots, trust.Policy{Kind: proto.KindFleetResolved}, now); err != nil {
		return store.Release{}, nil, &verifyError{trust.Code(err), fmt.Errorf("fleet.resolved.json: %w", err)}
	}
	if err := hasChannel(res.Fleet, channel); err != nil {
		return store.Release{}, nil, err
	}
	if stage != nil {
		stage(cv.fleet.body)
	}
	fleet := res.Fleet
	ref := *fleet.Meta.CICommit
	id := proto.RolloutID(channel, ref)
	m, ok := cv.manifests[id]
	var err error
	if ok {
		mres := *m.res
		err = manifest.Recheck(&mres, m.sig, s.roots, manifest.Expect{RolloutID: id}, now)
		m.res = &mres
	} else {
		m, err = s.verifyManifest(commit, id, res.SHA256, now, stage)
	}
	if err != nil {
		return store.Release{}, nil, err
	}
	if !ok {
		cv.manifests[id] = m
	}
	return store.Release{
		Channel: channel, Ref: ref, SourceCommit: commit.Hash.String(), SignedAt: res.SignedAt,
		FleetBody: cv.fleet.body, FleetSig: cv.fleet.sig, FleetHash: res.SHA256,
		ManifestBody: m.body, ManifestSig: m.sig, ManifestHash: m.res.SHA256, VerifiedAt: now,
		Fleet: fleet, Manifest: m.res.Manifest,
	}, fleet, nil
}

// verifyManifest reads the manifest of rollout id at commit and verifies
// it, and that it was projected from the fleet whose hash is fleetHash.
func (s *source) verifyManifest(commit *object.Commit, id, fleetHash string, now time.Time, stage func(bodies ...[]byte)) (signedVerdict, error) {
	tree, err := s.tree(commit.TreeHash, "the commit's tree")
	if err != nil {
		return signedVerdict{}, err
	}
	body, sig, err := s.readPair(tree, releaseDir+"/rollouts/"+id+".json")
	if err != nil {
		return signedVerdict{}, err
	}
	if stage != nil {
		stage(body)
	}
	res, err := manifest.Verify(body, sig, s.roots, manifest.Expect{RolloutID: id}, now)
	if err != nil {
		return signedVerdict{}, manifestError(id, err)
	}
	if err := projectedFrom(id, res, fleetHash); err != nil {
		return signedVerdict{}, err
	}
	return keepVerdict(body, sig, res), nil
}

// manifestError is a manifest's refusal.
func manifestError(id string, err error) error {
	return &verifyError{trust.Code(err), fmt.Errorf("%s.json: %w", id, err)}
}

// projectedFrom checks that a verified manifest names the fleet whose
// hash is fleetHash.
func projectedFrom(id string, mres *trust.Result, fleetHash string) error {
	if mres.Manifest.FleetResolvedHash != fleetHash {
		return &verifyError{codes.FleetHashMismatch, fmt.Errorf("%s.json was projected from fleet %s, not from this release's %s",
			id, mres.Manifest.FleetResolvedHash, fleetHash)}
	}
	return nil
}

// watchedRef is a watched ref that moved since the last poll.
type watchedRef struct {
	name string
	hash plumbing.Hash
}

// verifyAhead verifies the release at each watched ref that moved, ahead
// of its promotion: the fleet, then every channel's manifest, keeping what
// verified. A refusal is a log line and a metric; the ref is not read
// again until it moves. Bodies go to stage, so that the store holds them
// before a channel names them.
func (s *source) verifyAhead(ctx context.Context, refs []watchedRef, stage func(bodies ...[]byte)) {
	for _, r := range refs {
		if ctx.Err() != nil {
			return
		}
		began := time.Now()
		ready, err := s.verifyAheadOne(r.hash, stage)
		s.ahead[r.name] = r.hash
		var ve *verifyError
		switch {
		case errors.As(err, &ve):
			s.m.verifiedAhead.WithLabelValues(ve.code).Inc()
			s.log.Warn("a release on a watched branch failed verification ahead of its promotion; a channel moved to it is refused",
				"ref", r.name, "commit", r.hash.String(), "code", ve.code, "err", ve.err)
		case err != nil:
			s.log.Warn("verifying a watched branch's release ahead", "ref", r.name, "commit", r.hash.String(), "err", err)
		case ready != nil:
			s.m.verifiedAhead.WithLabelValues("verified").Inc()
			s.log.Info("release verified ahead of its promotion", "ref", r.name, "commit", r.hash.String(),
				"channels", strings.Join(ready, ","), "verifyMs", time.Since(began).Milliseconds())
		}
	}
}

// verifyAheadOne verifies the release at a commit (or a tag of one) for
// every channel its fleet lists, and returns those whose manifest
// verified (nil when all were kept already). A manifest that fails is
// logged and left out: its channel's promotion verifies it again.
func (s *source) verifyAheadOne(hash plumbing.Hash, stage func(bodies ...[]byte)) ([]string, error) {
	now := s.clock.Now()
	commit, err := s.commitAt(hash)
	if err != nil {
		return nil, err
	}
	cv := s.verdicts.get(commit.Hash)
	if cv == nil {
		tree, err := s.tree(commit.TreeHash, "the commit's tree")
		if err != nil {
			return nil, err
		}
		body, sig, err := s.readPair(tree, releaseDir+"/fleet.resolved.json")
		if err != nil {
			return nil, err
		}
		if stage != nil {
			stage(body)
		}
		res, err := s.checkFleet("", body, sig, now)
		if err != nil {
			return nil, err
		}
		s.verdicts.keep(commit.Hash, keepVerdict(body, sig, res), "", nil)
		cv = s.verdicts.get(commit.Hash)
	}
	fleet := cv.fleet.res.Fleet
	channels := make([]string, 0, len(fleet.Channels))
	for ch := range fleet.Channels {
		channels = append(channels, ch)
	}
	slices.Sort(channels)
	var ready []string
	for _, ch := range channels {
		id := proto.RolloutID(ch, *fleet.Meta.CICommit)
		if _, ok := cv.manifests[id]; ok {
			continue
		}
		m, err := s.verifyManifest(commit, id, cv.fleet.res.SHA256, now, stage)
		if err != nil {
			var ve *verifyError
			if errors.As(err, &ve) {
				s.m.verifiedAhead.WithLabelValues(ve.code).Inc()
			}
			s.log.Warn("a channel's manifest failed verification ahead of its promotion", "commit", commit.Hash.String(), "channel", ch, "err", err)
			continue
		}
		cv.manifests[id] = m
		ready = append(ready, ch)
	}
	return ready, nil
}
