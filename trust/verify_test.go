package trust_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

func rootsOf(t testing.TB, ks slot) *trust.Roots {
	t.Helper()
	b, err := json.Marshal(map[string]any{"schemaVersion": 1, "ciReleaseKey": ks})
	if err != nil {
		t.Fatal(err)
	}
	r, err := trust.ParseRoots(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestVerifyResult(t *testing.T) {
	t.Parallel()
	ks := vectorKeys(t)
	fleet := canon(t, baseFleet())
	pretty, _ := json.MarshalIndent(baseFleet(), "", "\t")
	sig := sign(t, ks.k1, fleet)
	roots := rootsOf(t, slot{"current": pk(ks.k2), "previous": pk(ks.k1)})
	res, err := trust.Verify(pretty, sig, roots, trust.Policy{}, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != proto.KindFleetResolved || !bytes.Equal(res.Canonical, fleet) || res.Slot != trust.SlotPrevious ||
		res.Algorithm != proto.AlgorithmEd25519 || !res.SignedAt.Equal(t0) || res.Window != time.Hour || res.Fleet == nil {
		t.Fatalf("unexpected result: kind %s slot %s alg %s signedAt %s window %s", res.Kind, res.Slot, res.Algorithm, res.SignedAt, res.Window)
	}
	if got := res.Fleet.Channels["stable"].FreshnessWindow; got != 60 {
		t.Fatalf("decoded freshnessWindow = %d", got)
	}
	if _, err := trust.Verify(fleet, sig, nil, trust.Policy{}, t0); !errors.Is(err, trust.ErrNoTrustRoots) {
		t.Fatalf("nil roots: %v", err)
	}
	if _, err := trust.Verify(fleet, sig, roots, trust.Policy{Kind: proto.KindRolloutManifest}, t0); !errors.Is(err, trust.ErrMalformed) {
		t.Fatalf("a fleet verified as a manifest: %v", err)
	}
}

// TestVerifyEveryByteMatters flips each byte of a signed canonical fleet,
// and each byte of its signature, in turn: every single change is
// rejected.
func TestVerifyEveryByteMatters(t *testing.T) {
	t.Parallel()
	ks := vectorKeys(t)
	fleet := canon(t, baseFleet())
	sig := sign(t, ks.k1, fleet)
	roots := rootsOf(t, slot{"current": pk(ks.k1)})
	now := t0.Add(time.Minute)
	if _, err := trust.Verify(fleet, sig, roots, trust.Policy{}, now); err != nil {
		t.Fatal(err)
	}
	for i := range fleet {
		for _, x := range []byte{0x01, 0x20, 0x80} {
			b := bytes.Clone(fleet)
			b[i] ^= x
			if _, err := trust.Verify(b, sig, roots, trust.Policy{}, now); err == nil {
				t.Fatalf("byte %d ^ %#x accepted: %q", i, x, b[max(0, i-10):min(len(b), i+10)])
			}
		}
	}
	for i := range sig {
		s := bytes.Clone(sig)
		s[i] ^= 0x01
		if _, err := trust.Verify(fleet, s, roots, trust.Policy{}, now); !errors.Is(err, trust.ErrBadSignature) {
			t.Fatalf("signature byte %d flipped: %v", i, err)
		}
	}
}

// TestVerifyOpenSSLSignature: a signature made by `openssl pkeyutl -sign
// -rawin` over the canonical bytes verifies, and the openssl public key is
// the trust.json key.
func TestVerifyOpenSSLSignature(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	run := func(args ...string) []byte {
		t.Helper()
		out, err := exec.Command("openssl", args...).Output()
		if err != nil {
			t.Fatalf("openssl %v: %v", args, err)
		}
		return out
	}
	run("genpkey", "-algorithm", "ed25519", "-out", p("k.pem"))
	der := run("pkey", "-in", p("k.pem"), "-pubout", "-outform", "DER")
	raw := der[len(der)-32:]
	roots := rootsOf(t, slot{"current": proto.PublicKey{Algorithm: "ed25519", Public: base64.StdEncoding.EncodeToString(raw)}})

	fleet := canon(t, baseFleet())
	if err := os.WriteFile(p("fleet.json"), fleet, 0o644); err != nil {
		t.Fatal(err)
	}
	run("pkeyutl", "-sign", "-rawin", "-inkey", p("k.pem"), "-in", p("fleet.json"), "-out", p("fleet.json.sig"))
	sig, err := os.ReadFile(p("fleet.json.sig"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := trust.Verify(fleet, sig, roots, trust.Policy{}, t0.Add(time.Minute))
	if err != nil {
		t.Fatalf("openssl signature refused: %v", err)
	}
	if res.Slot != trust.SlotCurrent {
		t.Fatalf("slot %s", res.Slot)
	}
	// And the other way round: openssl verifies ours.
	key, err := trust.ParsePrivateKey(mustRead(t, p("k.pem")))
	if err != nil {
		t.Fatal(err)
	}
	ours, err := key.Sign(fleet)
	if err != nil || !bytes.Equal(ours, sig) {
		t.Fatalf("ed25519 is deterministic: our signature differs from openssl's (%v)", err)
	}
	if out := run("pkeyutl", "-verify", "-rawin", "-inkey", p("k.pem"), "-in", p("fleet.json"), "-sigfile", p("fleet.json.sig")); !strings.Contains(string(out), "Success") {
		t.Fatalf("openssl verify: %s", out)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestVerifyLargeArtifact: a fleet large enough that its signature is
// checked beside its decode gets the same verdicts, in the same order, as
// a small one: a good signature verifies and names the hash of the
// canonical bytes; a bad one, or one of the wrong size, is refused; a
// malformed fleet is malformed whatever its signature; an unknown schema
// version with a bad signature is a bad signature (step 3 before step 5).
func TestVerifyLargeArtifact(t *testing.T) {
	t.Parallel()
	fx := signedFleet(t, 1000)
	if len(fx.canonical) < 64<<10 {
		t.Fatalf("the fleet is %d bytes: too small to test the parallel path", len(fx.canonical))
	}
	res, err := trust.Verify(fx.pretty, fx.sig, fx.roots, trust.Policy{Kind: proto.KindFleetResolved}, fx.now)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(fx.canonical)
	if res.SHA256 != hex.EncodeToString(sum[:]) || res.Slot != trust.SlotCurrent || len(res.Fleet.Hosts) != 1000 {
		t.Fatalf("verified as %s by %q with %d hosts", res.SHA256, res.Slot, len(res.Fleet.Hosts))
	}
	// Canonical as received (decoded and its signature checked while the
	// canonical check runs): the same verdict as the pretty-printed bytes.
	same, err := trust.Verify(fx.canonical, fx.sig, fx.roots, trust.Policy{Kind: proto.KindFleetResolved}, fx.now)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res, same) {
		t.Fatalf("canonical bytes verify differently from pretty-printed ones: %s by %q, %d hosts; want %s by %q, %d hosts",
			same.SHA256, same.Slot, len(same.Fleet.Hosts), res.SHA256, res.Slot, len(res.Fleet.Hosts))
	}
	bad := bytes.Clone(fx.sig)
	bad[7] ^= 1
	malformed := bytes.Replace(fx.canonical, []byte(`"system":`), []byte(`"system":5,"zz":`), 1)
	future := bytes.Replace(fx.canonical, []byte(`"schemaVersion":1`), []byte(`"schemaVersion":2`), 1)
	for _, c := range []struct {
		name      string
		body, sig []byte
		want      error
	}{
		{"a flipped signature bit", fx.canonical, bad, trust.ErrBadSignature},
		{"a short signature", fx.canonical, fx.sig[:63], trust.ErrBadSignature},
		{"a malformed host with a bad signature", malformed, bad, trust.ErrMalformed},
		{"a malformed host with its signature", malformed, fx.sig, trust.ErrMalformed},
		{"schemaVersion 2 with a bad signature", future, bad, trust.ErrBadSignature},
	} {
		if _, err := trust.Verify(c.body, c.sig, fx.roots, trust.Policy{Kind: proto.KindFleetResolved}, fx.now); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}
