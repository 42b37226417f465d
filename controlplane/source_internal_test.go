package controlplane

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
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
	repo, err := fleetrepo.Init(filepath.Join(dir, "fleet"))
	if err != nil {
		t.Fatal(err)
	}
	roots, err := trust.ParseRoots(repo.TrustJSON())
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "cp.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	src := newSource(repo.Dir, filepath.Join(dir, "state"), roots, st, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics())
	if err := src.open(ctx); err != nil {
		t.Fatal(err)
	}
	var signals [][]string // the channels stored at each signal
	src.changed = func() {
		rels, err := st.Releases(ctx)
		if err != nil {
			t.Error(err)
		}
		var chans []string
		for _, r := range rels {
			chans = append(chans, r.Channel)
		}
		slices.Sort(chans)
		signals = append(signals, chans)
	}
	unsigned, err := spec.Fleet("v1")
	if err != nil {
		t.Fatal(err)
	}
	commit, err := repo.Release(unsigned, "0000001000000000000000000000000000000000", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []string{"prod", "staging"} {
		if err := repo.Promote(ch, commit); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if len(signals) != 1 || !slices.Equal(signals[0], []string{"prod", "staging"}) {
		t.Errorf("signals with the channels stored at each: %q, want one, after both", signals)
	}
	// A poll that finds nothing new says nothing.
	if err := src.poll(ctx); err != nil {
		t.Fatal(err)
	}
	if len(signals) != 1 {
		t.Errorf("a poll with nothing new signalled: %q", signals)
	}
}
