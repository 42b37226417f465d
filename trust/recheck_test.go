package trust_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// TestRecheckIsVerifyLater: an artifact verified at one time and rechecked
// at another gets the verdict, error and result Verify would give at the
// second time, across key rotations (a key retired meanwhile, the same key
// in two slots), explicit and artifact windows, and times on both sides of
// every bound (property, seeded).
func TestRecheckIsVerifyLater(t *testing.T) {
	t.Parallel()
	ks := vectorKeys(t)
	fleet := canon(t, baseFleet())
	at := func(d time.Duration) string { return t0.Add(d).Format(time.RFC3339) }
	cases := []struct {
		name   string
		roots  slot
		signer *trust.PrivateKey
		policy trust.Policy
	}{
		{"one key", slot{"current": pk(ks.k1)}, ks.k1, trust.Policy{}},
		{"the signing key retires", slot{"current": pk(ks.k1), "successor": pk(ks.k2), "retireAt": at(20 * time.Minute)}, ks.k1, trust.Policy{}},
		{"signed by the successor", slot{"current": pk(ks.k2), "successor": pk(ks.k1), "retireAt": at(20 * time.Minute)}, ks.k1, trust.Policy{}},
		{"one key in two slots", slot{"current": pk(ks.k1), "successor": pk(ks.k1), "retireAt": at(20 * time.Minute)}, ks.k1, trust.Policy{}},
		{"an explicit window", slot{"current": pk(ks.k3), "previous": pk(ks.k1)}, ks.k1, trust.Policy{FreshnessWindow: 10 * time.Minute}},
		{"rejectBefore passed", slot{"current": pk(ks.k1), "rejectBefore": at(-time.Hour)}, ks.k1, trust.Policy{Kind: proto.KindFleetResolved}},
	}
	// Times around every bound: retireAt, the windows with their skew, the
	// skew ahead of signedAt.
	bounds := []time.Duration{-trust.ClockSkew, 0, 10*time.Minute + trust.ClockSkew, 20 * time.Minute, time.Hour + trust.ClockSkew}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(7, uint64(i))) // one per subtest: they run in parallel
			b, err := json.Marshal(map[string]any{"schemaVersion": 1, "ciReleaseKey": c.roots})
			if err != nil {
				t.Fatal(err)
			}
			roots, err := trust.ParseRoots(b)
			if err != nil {
				t.Fatal(err)
			}
			sig := sign(t, c.signer, fleet)
			var times []time.Duration
			for _, d := range bounds {
				times = append(times, d-time.Second, d, d+time.Second)
			}
			for range 60 {
				times = append(times, time.Duration(rng.Int64N(int64(2*time.Hour)))-5*time.Minute)
			}
			for _, first := range times {
				res, err := trust.Verify(fleet, sig, roots, c.policy, t0.Add(first))
				if err != nil {
					continue // nothing to recheck
				}
				for _, later := range times {
					now := t0.Add(later)
					kept := *res
					got := trust.Recheck(&kept, sig, roots, c.policy, now)
					want, werr := trust.Verify(fleet, sig, roots, c.policy, now)
					if fmt.Sprint(got) != fmt.Sprint(werr) || trust.Code(got) != trust.Code(werr) {
						t.Fatalf("verified at %s, at %s: Recheck says %v, Verify %v", first, later, got, werr)
					}
					if werr == nil && (kept.Slot != want.Slot || kept.Window != want.Window || kept.SHA256 != want.SHA256) {
						t.Fatalf("verified at %s, at %s: Recheck leaves slot %s window %s, Verify %s %s",
							first, later, kept.Slot, kept.Window, want.Slot, want.Window)
					}
				}
			}
		})
	}
}
