package trust_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

type benchFleet struct {
	canonical, pretty, sig []byte
	roots                  *trust.Roots
	now                    time.Time
}

// signedFleet returns a signed fleet.resolved of n hosts, canonical and
// pretty-printed.
func signedFleet(b testing.TB, n int) benchFleet {
	b.Helper()
	f := fleetkit.Synthetic(n)
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	at := now.Format(time.RFC3339)
	f.Meta.SignedAt = &at
	raw, err := json.Marshal(f)
	if err != nil {
		b.Fatal(err)
	}
	canonical, err := trust.Canonicalize(raw)
	if err != nil {
		b.Fatal(err)
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, canonical, "", "  "); err != nil {
		b.Fatal(err)
	}
	ks := vectorKeys(b)
	return benchFleet{canonical: canonical, pretty: pretty.Bytes(), sig: sign(b, ks.k1, canonical),
		roots: rootsOf(b, slot{"current": pk(ks.k1)}), now: now}
}

// BenchmarkDecodePlain is the baseline: encoding/json decoding the same
// bytes into the same type, with no checks at all.
func BenchmarkDecodePlain(b *testing.B) {
	fx := signedFleet(b, 10000)
	b.SetBytes(int64(len(fx.canonical)))
	b.ReportAllocs()
	for b.Loop() {
		var f proto.FleetResolved
		if err := json.Unmarshal(fx.canonical, &f); err != nil {
			b.Fatal(err)
		}
	}
}

// forInputs runs fn as a sub-benchmark on the canonical and on the
// pretty-printed fleet.
func forInputs(b *testing.B, fx benchFleet, fn func(b *testing.B, in []byte)) {
	for _, c := range []struct {
		name string
		in   []byte
	}{{"canonical-10000", fx.canonical}, {"pretty-10000", fx.pretty}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.in)))
			b.ReportAllocs()
			fn(b, c.in)
		})
	}
}

// BenchmarkCanonicalize: the canonical input CI writes (checked, passed
// through) and a pretty-printed one (compacted, checked again).
func BenchmarkCanonicalize(b *testing.B) {
	forInputs(b, signedFleet(b, 10000), func(b *testing.B, in []byte) {
		for b.Loop() {
			if _, err := trust.Canonicalize(in); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkVerify is the whole pipeline on a 10,000-host fleet.resolved:
// strict scan, canonical form, signature, typed decode, freshness.
func BenchmarkVerify(b *testing.B) {
	fx := signedFleet(b, 10000)
	forInputs(b, fx, func(b *testing.B, in []byte) {
		for b.Loop() {
			if _, err := trust.Verify(in, fx.sig, fx.roots, trust.Policy{Kind: proto.KindFleetResolved}, fx.now); err != nil {
				b.Fatal(err)
			}
		}
	})
}
