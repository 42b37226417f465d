package proto_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// FuzzDecode: the decoders never panic, a document they accept has a
// canonical form that re-canonicalizes to itself and decodes to the same
// value, and the shortcuts that decode a large fleet's hosts and a large
// manifest's host set agree with encoding/json on every document that
// passes the syntax check.
func FuzzDecode(f *testing.F) {
	fixture, err := os.ReadFile("../testdata/fleets/two-channels.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(fixture)
	f.Add([]byte(`{"schemaVersion":1,"channel":"c","channelRef":"abc1234","hostSet":[{"hostname":"a","waveIndex":0,"targetClosure":"x"}],"meta":{}}`))
	f.Add([]byte(`{"schemaVersion":1,"ciReleaseKey":{"current":{"algorithm":"ed25519","public":"AAAA"}},"cacheKeys":[]}`))
	f.Add([]byte(`{"channelEdges":[{"before":"a","after":"b"}],"hosts":{"h":{"channel":"c"}}}`))
	f.Add([]byte(`{"hosts":{"a":{"tags":[null,"x"],"pin":null,"x":[{"}":1}]},"b":null},"meta":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := proto.CheckSyntax(data, proto.KindFleetResolved); err == nil {
			sameAsStdlib(t, data)
		}
		if _, err := proto.CheckSyntax(data, proto.KindRolloutManifest); err == nil {
			agreesWithStdlib(t, data, proto.DecodeManifestFast)
		}
		if fleet, err := proto.DecodeFleetResolved(data); err == nil {
			roundTrip(t, data, fleet, func(b []byte) (any, error) { return proto.DecodeFleetResolved(b) })
		}
		if m, err := proto.DecodeRolloutManifest(data); err == nil {
			roundTrip(t, data, m, func(b []byte) (any, error) { return proto.DecodeRolloutManifest(b) })
		}
		if tf, err := proto.DecodeTrustFile(data); err == nil {
			roundTrip(t, data, tf, func(b []byte) (any, error) { return proto.DecodeTrustFile(b) })
		}
	})
}

func roundTrip(t *testing.T, data []byte, v any, decode func([]byte) (any, error)) {
	t.Helper()
	c, err := trust.Canonicalize(data)
	if err != nil {
		t.Fatalf("decoded, but does not canonicalize: %v", err)
	}
	if again, err := trust.Canonicalize(c); err != nil || !bytes.Equal(again, c) {
		t.Fatalf("canonical form is not a fixed point: %v", err)
	}
	back, err := decode(c)
	if err != nil {
		t.Fatalf("canonical form does not decode: %v", err)
	}
	// Raw selector combinators keep their original spelling; compare
	// everything else.
	ignoreRaw := cmp.FilterPath(func(p cmp.Path) bool {
		s := p.String()
		return s == "Selector.And" || s == "Selector.Not" || bytes.HasSuffix([]byte(s), []byte(".And")) || bytes.HasSuffix([]byte(s), []byte(".Not"))
	}, cmp.Ignore())
	if diff := cmp.Diff(v, back, ignoreRaw); diff != "" {
		t.Fatalf("canonical form decodes differently (-input +canonical):\n%s", diff)
	}
}
