package release_test

import (
	"bytes"
	"encoding/json"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/release"
	"github.com/nixfleet/nixfleet/trust"
)

// TestMain pins the umask so that the file modes WriteDir produces are the
// same on every machine.
func TestMain(m *testing.M) {
	syscall.Umask(0o022)
	os.Exit(m.Run())
}

const (
	testCommit  = "0123456789abcdef0123456789abcdef01234567"
	otherCommit = "fedcba9876543210fedcba9876543210fedcba98"
	// wantSignedAt is testNow in UTC, truncated to the second.
	wantSignedAt = "2025-03-04T04:06:07Z"
)

// testNow is deliberately not UTC and not a whole second, and far from the
// wall clock, so a release that verifies "at Now" proves Now was used.
var testNow = time.Date(2025, time.March, 4, 5, 6, 7, 891_000_000, time.FixedZone("CET", 60*60))

var algorithms = []string{proto.AlgorithmEd25519, proto.AlgorithmECDSAP256}

func ptr[T any](v T) *T { return &v }

// readFleet returns the unsigned two-channel sample fleet.
func readFleet(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../testdata/fleets/two-channels.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func generateKey(t *testing.T, alg string) *trust.PrivateKey {
	t.Helper()
	k, err := trust.GenerateKey(alg)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// rootsFor returns trust roots whose only key is pub, as "current".
func rootsFor(t *testing.T, pub *trust.PublicKey) *trust.Roots {
	t.Helper()
	k := pub.Proto()
	roots, err := trust.NewRoots(&proto.TrustFile{SchemaVersion: proto.SchemaVersion, CIReleaseKey: proto.KeySlot{Current: &k}})
	if err != nil {
		t.Fatal(err)
	}
	return roots
}

// decodeJSON decodes a document into generic values, numbers as written.
func decodeJSON(t *testing.T, data []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("decoding %q: %v", data, err)
	}
	return doc
}

// editFleet applies edit to a decoded copy of a fleet document and encodes
// it again. Numbers keep their literal spelling (json.Number).
func editFleet(t *testing.T, data []byte, edit func(doc map[string]any)) []byte {
	t.Helper()
	doc := decodeJSON(t, data)
	edit(doc)
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// member walks nested objects of a generic document.
func member(t *testing.T, doc map[string]any, path ...string) map[string]any {
	t.Helper()
	cur := doc
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			t.Fatalf("%v: %q is not an object in %v", path, p, cur)
		}
		cur = next
	}
	return cur
}

// signFleet signs unsigned with key at testNow.
func signFleet(t *testing.T, key *trust.PrivateKey, unsigned []byte, commit string) *release.Bundle {
	t.Helper()
	b, err := release.Sign(unsigned, release.Options{Signer: key, Commit: commit, Now: testNow})
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return b
}

// oneChannelFleet is the sample fleet with its "edge" channel removed (its
// hosts move to "stable", whose last wave already lists them).
func oneChannelFleet(t *testing.T) []byte {
	t.Helper()
	return editFleet(t, readFleet(t), func(doc map[string]any) {
		delete(member(t, doc, "channels"), "edge")
		delete(member(t, doc, "waves"), "edge")
		member(t, doc, "hosts", "edge-01")["channel"] = "stable"
		member(t, doc, "hosts", "edge-02")["channel"] = "stable"
		doc["channelEdges"] = []any{}
	})
}
