package trust_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/cyberphone/json-canonicalization/go/src/webpki.org/jsoncanonicalizer"

	"github.com/nixfleet/nixfleet/trust"
)

func fuzzSeeds(f *testing.F) [][]byte {
	f.Helper()
	fleet := canon(f, baseFleet())
	pretty, _ := json.MarshalIndent(baseFleet(), "", " ")
	m, _ := stableManifest(f, nil)
	return [][]byte{
		fleet, pretty, m,
		[]byte(`{"a":[1,2.5,-0,1e30,"\u20ac\n\ud83d\ude00"],"b":{"\u00e9":null}}`),
		[]byte(`[{"z":true},{"y":false}]`),
		[]byte("{\"\U0001F600\":1,\"\uE000\":2}"),
		[]byte(`{"a":1,"a":2}`),
		[]byte(`{"a":"\ud800"}`),
	}
}

// FuzzCanonicalize: Canonicalize never panics, never returns partial output,
// agrees byte for byte with the reference implementation whenever it
// accepts, and its output is a fixed point.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := trust.Canonicalize(data)
		if err != nil {
			if out != nil {
				t.Fatalf("error %v with output %q", err, out)
			}
			if !errors.Is(err, trust.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		ref, refErr := jsoncanonicalizer.Transform(data)
		if refErr != nil {
			t.Fatalf("accepted %q, which the reference rejects: %v", data, refErr)
		}
		if !bytes.Equal(out, ref) {
			t.Fatalf("input %q\nours      %q\nreference %q", data, out, ref)
		}
		again, err := trust.Canonicalize(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("output %q is not a fixed point: %q, %v", out, again, err)
		}
	})
}

// FuzzVerify: Verify never panics; a correctly signed document is never
// refused for its signature; an accepted document's Canonical re-canonicalizes
// to itself; and changing one byte is accepted only when the change does not
// alter the canonical form.
func FuzzVerify(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, uint(7), byte(1))
	}
	ks := vectorKeys(f)
	roots := rootsOf(f, slot{"current": pk(ks.k1)})
	now := t0.Add(time.Minute)
	f.Fuzz(func(t *testing.T, artifact []byte, pos uint, x byte) {
		canonical, err := trust.Canonicalize(artifact)
		if err != nil {
			if _, err := trust.Verify(artifact, make([]byte, 64), roots, trust.Policy{}, now); err == nil {
				t.Fatal("accepted a document that does not canonicalize")
			}
			return
		}
		sig, err := ks.k1.Sign(canonical)
		if err != nil {
			t.Fatal(err)
		}
		res, err := trust.Verify(artifact, sig, roots, trust.Policy{}, now)
		if errors.Is(err, trust.ErrBadSignature) || errors.Is(err, trust.ErrUnsupportedAlgorithm) || errors.Is(err, trust.ErrNoTrustRoots) {
			t.Fatalf("correctly signed document refused: %v", err)
		}
		if err == nil {
			if !bytes.Equal(res.Canonical, canonical) {
				t.Fatal("result is not the canonical form of the input")
			}
			if again, err := trust.Canonicalize(res.Canonical); err != nil || !bytes.Equal(again, res.Canonical) {
				t.Fatalf("accepted document does not re-canonicalize to itself: %v", err)
			}
		}
		if len(artifact) == 0 || x == 0 {
			return
		}
		changed := bytes.Clone(artifact)
		changed[pos%uint(len(changed))] ^= x
		if _, err := trust.Verify(changed, sig, roots, trust.Policy{}, now); err == nil {
			if c, cerr := trust.Canonicalize(changed); cerr != nil || !bytes.Equal(c, canonical) {
				t.Fatalf("a one-byte change that alters the canonical form was accepted")
			}
		}
	})
}
