package controlplane

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/proto"
)

// sample is the value of a series with one label (a histogram's count).
func sample(t *testing.T, m *metrics, name, label string) float64 {
	t.Helper()
	ms, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range ms {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			if s.GetLabel()[0].GetValue() != label {
				continue
			}
			if h := s.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return s.GetCounter().GetValue()
		}
	}
	return 0
}

// verifiedHow counts the channel releases verified full or kept.
func verifiedHow(t *testing.T, m *metrics, how string) float64 {
	return sample(t, m, "nixfleet_release_verification_seconds", how)
}

// TestVerifyAhead: a release CI commits to a watched branch is verified
// before any channel names it (its fleet and every channel's manifest),
// without a verdict on any channel; a channel's ref moved to it is then
// judged from the kept verdicts, and stores the very release a full
// verification gives; the checks that depend on the time still run at the
// move (a release gone stale is refused); a release that fails ahead is
// counted and logged, and a channel moved to it is verified in full and
// refused with its code, as without the watch.
func TestVerifyAhead(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	spec := fleetrepo.Spec{Channels: map[string][]int{"prod": {0}, "staging": {0}}, FreshnessMinutes: 60,
		Hosts: []fleetrepo.Host{fleetrepo.NewHost("prod-1", "prod", 0), fleetrepo.NewHost("stg-1", "staging", 0)}}
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "cp.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	src, repo, commit := releasedSource(t, dir, spec, st)
	clk := clock.NewFake(time.Now())
	src.board, src.clock, src.watch = newBoard(), clk, []string{"refs/heads/*"}
	ahead := func(outcome string) float64 {
		return sample(t, src.m, "nixfleet_releases_verified_ahead_total", outcome)
	}
	journal := func() []proto.Event {
		t.Helper()
		evs, err := st.Events(ctx, proto.EventQuery{})
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}

	// CI committed to its branch: verified ahead, nothing promoted.
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ahead("verified"); got != 1 {
		t.Fatalf("verified ahead %v times, want 1", got)
	}
	cv := src.verdicts.by[commit]
	if cv == nil || len(cv.manifests) != 2 {
		t.Fatalf("kept for the commit: %+v, want its fleet and both channels' manifests", cv)
	}
	if evs := journal(); len(evs) != 0 {
		t.Errorf("verifying ahead wrote events: %+v", evs)
	}
	if rels, err := st.Releases(ctx); err != nil || len(rels) != 0 {
		t.Fatalf("verifying ahead stored releases %v (%v)", rels, err)
	}
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ahead("verified"); got != 1 {
		t.Errorf("a branch that did not move was verified again (%v)", got)
	}

	// The promotion is judged from the kept verdicts, and stores what a
	// full verification gives.
	if err := repo.Promote("staging", commit); err != nil {
		t.Fatal(err)
	}
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if full, kept := verifiedHow(t, src.m, verifiedFull), verifiedHow(t, src.m, verifiedKept); full != 0 || kept != 1 {
		t.Fatalf("staging's release verified %v full, %v kept: want it kept", full, kept)
	}
	kept, _, how, err := src.verify("staging", commit, nil)
	if err != nil || how != verifiedKept {
		t.Fatalf("kept: %s, %v", how, err)
	}
	src.verdicts = verdicts{}
	full, _, how, err := src.verify("staging", commit, nil)
	if err != nil || how != verifiedFull {
		t.Fatalf("full: %s, %v", how, err)
	}
	if diff := cmp.Diff(full, kept, cmpopts.IgnoreFields(store.Release{}, "Fleet", "Manifest")); diff != "" {
		t.Errorf("the kept verdict's release differs from a full verification's (-full +kept):\n%s", diff)
	}
	if diff := cmp.Diff(full.Manifest, kept.Manifest); diff != "" {
		t.Errorf("the manifests decoded differ (-full +kept):\n%s", diff)
	}
	rels, err := st.Releases(ctx)
	if err != nil || len(rels) != 1 || rels[0].FleetHash != full.FleetHash || rels[0].ManifestHash != full.ManifestHash {
		t.Fatalf("stored %+v (%v), want staging's release", rels, err)
	}
	if _, err := src.verifyAheadOne(commit, nil); err != nil || len(src.verdicts.by[commit].manifests) != 2 {
		t.Fatalf("verifying ahead again: %v", err)
	}

	// Time still counts: the release is stale when prod takes it.
	clk.Advance(2 * time.Hour)
	if err := repo.Promote("prod", commit); err != nil {
		t.Fatal(err)
	}
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if f := src.failures["prod"]; f.Code != codes.Stale || !strings.HasPrefix(f.Message, "fleet.resolved.json: ") {
		t.Fatalf("prod's move to a release gone stale: failure %+v, want %s", f, codes.Stale)
	}
	if kept := verifiedHow(t, src.m, verifiedKept); kept != 2 {
		t.Errorf("prod's refusal came from %v kept verdicts, want 2", kept)
	}

	// A release that fails ahead: counted, no verdict on a channel; a
	// channel moved to it is verified in full and refused.
	clk.Advance(-2 * time.Hour)
	unsigned, err := spec.Fleet("v2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Release(unsigned, "0000002000000000000000000000000000000000", clk.Now()); err != nil {
		t.Fatal(err)
	}
	if err := repo.WriteFile("releases/fleet.resolved.json.sig", make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	bad, err := repo.Commit("tampered", clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	before := len(journal())
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ahead(codes.BadSignature); got != 1 {
		t.Fatalf("refused ahead with bad_signature %v times, want 1", got)
	}
	if n := len(journal()); n != before {
		t.Errorf("a refusal ahead wrote %d events", n-before)
	}
	if err := repo.Promote("staging", bad); err != nil {
		t.Fatal(err)
	}
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if f := src.failures["staging"]; f.Code != codes.BadSignature {
		t.Fatalf("staging moved to the tampered release: failure %+v, want %s", f, codes.BadSignature)
	}
	if full := verifiedHow(t, src.m, verifiedFull); full != 1 {
		t.Errorf("the tampered release was verified in full %v times at its promotion, want 1", full)
	}
}
