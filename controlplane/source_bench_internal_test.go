package controlplane

import (
	"crypto/ed25519"
	"fmt"
	"testing"

	"github.com/nixfleet/nixfleet/internal/fleetrepo"
)

// BenchmarkSourceVerify measures the first part of push→dispatch, for a
// fleet of one channel of 10,000 and 100,000 hosts in two waves, as
// BenchmarkScale signs it: full, reading a release from git and verifying
// it (fleet.resolved's signature and decode, its validation, the channel's
// manifest); kept, judging a channel's move to a commit verified before
// (verdicts.go: the rechecks alone):
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
			src, _, commit := releasedSource(b, dir, spec, nil)
			for _, how := range []string{verifiedFull, verifiedKept} {
				b.Run(how, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if how == verifiedFull {
							src.verdicts = verdicts{}
						}
						rel, _, got, err := src.verify("stable", commit, nil)
						if err != nil {
							b.Fatal(err)
						}
						if got != how {
							b.Fatalf("verified %s, want %s", got, how)
						}
						b.ReportMetric(float64(len(rel.FleetBody)+len(rel.ManifestBody))/(1<<20), "MiB")
					}
				})
			}
		})
	}
}
