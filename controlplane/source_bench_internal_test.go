package controlplane

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/trust"
)

// BenchmarkSourceVerify measures the first part of push→dispatch: reading
// a release from git and verifying it (fleet.resolved's signature and
// decode, its validation, the channel's manifest), for a fleet of one
// channel of 10,000 and 100,000 hosts in two waves, as BenchmarkScale
// signs it:
//
//	go test ./controlplane -run '^$' -bench SourceVerify -benchtime 5x
func BenchmarkSourceVerify(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			spec := fleetrepo.Spec{Channels: map[string][]int{"stable": {0, 0}}, Hosts: make([]fleetrepo.Host, n)}
			for i := range spec.Hosts {
				name := fmt.Sprintf("host-%06d", i)
				seed := make([]byte, ed25519.SeedSize)
				copy(seed, name)
				spec.Hosts[i] = fleetrepo.Host{Name: name, Channel: "stable", Wave: min(i, 1), Key: ed25519.NewKeyFromSeed(seed)}
			}
			repo, err := fleetrepo.Init(filepath.Join(dir, "fleet"))
			if err != nil {
				b.Fatal(err)
			}
			roots, err := trust.ParseRoots(repo.TrustJSON())
			if err != nil {
				b.Fatal(err)
			}
			src := newSource(repo.Dir, filepath.Join(dir, "state"), roots, nil, clock.Real{}, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics())
			if err := src.open(context.Background()); err != nil {
				b.Fatal(err)
			}
			unsigned, err := spec.Fleet("v1")
			if err != nil {
				b.Fatal(err)
			}
			commit, err := repo.Release(unsigned, "0000001000000000000000000000000000000000", time.Now())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				rel, _, err := src.verify("stable", commit)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(rel.FleetBody)+len(rel.ManifestBody))/(1<<20), "MiB")
			}
		})
	}
}
