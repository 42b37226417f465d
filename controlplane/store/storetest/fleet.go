package storetest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
)

// Releases returns one store.Release per channel of f (of the named
// channels only, when channels are given), as CI would publish them at ref
// signed at signedAt: f with meta.ciCommit and meta.signedAt set, its
// manifests projected and marshalled canonically. The signatures are
// placeholders: the store keeps bytes, it does not verify them. f is not
// modified.
func Releases(t testing.TB, f *proto.FleetResolved, ref string, signedAt time.Time, channels ...string) []store.Release {
	t.Helper()
	raw, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	g, err := proto.DecodeFleetResolved(raw)
	if err != nil {
		t.Fatal(err)
	}
	signed := signedAt.UTC().Format(time.RFC3339)
	g.Meta.CICommit, g.Meta.SignedAt = &ref, &signed
	body, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	fleetHash := sha256hex(body)
	ms, err := manifest.Project(g, fleetHash)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Release
	for _, m := range ms {
		if len(channels) > 0 && !slices.Contains(channels, m.Channel) {
			continue
		}
		mb, err := manifest.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, store.Release{
			Channel: m.Channel, Ref: ref, SourceCommit: "src-" + ref, SignedAt: signedAt,
			FleetBody: body, FleetSig: fakeSig("fleet" + ref), FleetHash: fleetHash,
			ManifestBody: mb, ManifestSig: fakeSig(m.Channel + ref), ManifestHash: sha256hex(mb),
			VerifiedAt: signedAt.Add(time.Minute),
		})
	}
	return out
}

func sha256hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// fakeSig is 64 bytes that stand for a signature.
func fakeSig(seed string) []byte {
	a := sha256.Sum256([]byte(seed))
	b := sha256.Sum256(a[:])
	return append(a[:], b[:]...)
}
