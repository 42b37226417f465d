package trust

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"encoding/base64"
	"errors"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nixfleet/nixfleet/proto"
)

func edKey(raw []byte) proto.PublicKey {
	return proto.PublicKey{Algorithm: proto.AlgorithmEd25519, Public: base64.StdEncoding.EncodeToString(raw)}
}

// TestEdwardsArithmetic checks the math/big point code against
// crypto/ed25519: the public key of a seed is [a]B, so decoding it and
// re-encoding must round-trip, and it must lie in the prime-order subgroup.
func TestEdwardsArithmetic(t *testing.T) {
	t.Parallel()
	for i := range 5 {
		priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{byte(i + 1)}, 32))
		pub := priv.Public().(ed25519.PublicKey)
		p, err := edDecode(pub)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if got := edEncode(p); !bytes.Equal(got, pub) {
			t.Fatalf("round trip: %x != %x", got, pub)
		}
		if !edScalarMult(edL, p).isIdentity() {
			t.Fatal("[L]A is not the identity for an honest key")
		}
		if err := checkEd25519PublicKey(pub); err != nil {
			t.Fatalf("honest key refused: %v", err)
		}
	}
}

// TestEd25519KeyRule covers the keys nixfleet refuses in trust roots.
func TestEd25519KeyRule(t *testing.T) {
	t.Parallel()
	honest := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)).Public().(ed25519.PublicKey)
	a, err := edDecode(honest)
	if err != nil {
		t.Fatal(err)
	}
	// The point of order 2 is (0, -1).
	order2 := edPoint{big.NewInt(0), new(big.Int).Sub(edP, big.NewInt(1))}
	// Points of order 4 are (±sqrt(-1), 0).
	order4, err := edDecode(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	if !edScalarMult(big.NewInt(4), order4).isIdentity() || edScalarMult(big.NewInt(2), order4).isIdentity() {
		t.Fatal("(sqrt(-1), 0) does not have order 4")
	}
	// A point of order 8: [L]Q for a point Q with a torsion component.
	var order8 edPoint
	for y := int64(2); ; y++ {
		enc := make([]byte, 32)
		big.NewInt(y).FillBytes(enc)
		for i, j := 0, 31; i < j; i, j = i+1, j-1 {
			enc[i], enc[j] = enc[j], enc[i]
		}
		q, err := edDecode(enc)
		if err != nil {
			continue
		}
		order8 = edScalarMult(edL, q)
		if !edScalarMult(big.NewInt(4), order8).isIdentity() {
			break
		}
	}
	nonCanonical := edEncode(edIdentity())
	nonCanonical[0] += 0xed // y = 1 + p, the identity spelled with y >= p
	nonCanonical[31] |= 0x7f
	for i := 1; i < 31; i++ {
		nonCanonical[i] = 0xff
	}
	tests := []struct {
		name string
		raw  []byte
		want string
	}{
		{name: "identity", raw: edEncode(edIdentity()), want: "identity"},
		{name: "order 2", raw: edEncode(order2), want: "prime-order subgroup"},
		{name: "order 4", raw: edEncode(order4), want: "prime-order subgroup"},
		{name: "order 8", raw: edEncode(order8), want: "prime-order subgroup"},
		{name: "mixed order", raw: edEncode(edAdd(a, order8)), want: "prime-order subgroup"},
		{name: "y not below p", raw: nonCanonical, want: "non-canonical"},
		{name: "x zero with sign bit", raw: append(edEncode(edIdentity())[:31], 0x80), want: "non-canonical"},
		{name: "not on the curve", raw: notOnCurve(t), want: "not a point"},
		{name: "short", raw: honest[:31], want: "31 bytes, want 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParsePublicKey(edKey(tt.raw))
			if !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParsePublicKey = %v, want ErrInvalidKey mentioning %q", err, tt.want)
			}
		})
	}
	if _, err := ParsePublicKey(edKey(honest)); err != nil {
		t.Fatalf("honest key refused: %v", err)
	}
}

func notOnCurve(t *testing.T) []byte {
	t.Helper()
	for y := int64(2); y < 100; y++ {
		enc := make([]byte, 32)
		enc[0] = byte(y)
		if _, err := edDecode(enc); err != nil && strings.Contains(err.Error(), "not a point") {
			return enc
		}
	}
	t.Fatal("no off-curve y below 100")
	return nil
}

// TestEd25519SignatureRule: S must be canonical (S < L); S + L, which a
// lax verifier accepts, is refused.
func TestEd25519SignatureRule(t *testing.T) {
	t.Parallel()
	key := NewEd25519Key(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32)))
	msg := []byte(`{"a":1}`)
	sig, err := key.Sign(msg)
	if err != nil {
		t.Fatal(err)
	}
	if !key.Public().Verify(msg, sig) {
		t.Fatal("valid signature refused")
	}
	if key.Public().Verify(msg, addL(sig)) {
		t.Fatal("signature with S + L accepted")
	}
}

// SPlusL is addL for the external test package (vectors).
var SPlusL = addL

// addL returns sig with its S half replaced by S + L (little-endian).
func addL(sig []byte) []byte {
	out := bytes.Clone(sig)
	le := out[32:]
	be := make([]byte, 32)
	for i := range 32 {
		be[i] = le[31-i]
	}
	s := new(big.Int).SetBytes(be)
	s.Add(s, edL).FillBytes(be)
	for i := range 32 {
		le[i] = be[31-i]
	}
	return out
}

func TestECDSAP256(t *testing.T) {
	t.Parallel()
	key, err := GenerateKey(proto.AlgorithmECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublicKey(key.Public().Proto())
	if err != nil {
		t.Fatalf("own public key does not parse: %v", err)
	}
	n := elliptic.P256().Params().N
	half := new(big.Int).Rsh(n, 1)
	msg := []byte(`{"b":2}`)
	for range 20 {
		sig, err := key.Sign(msg)
		if err != nil {
			t.Fatal(err)
		}
		s := new(big.Int).SetBytes(sig[32:])
		if s.Cmp(half) > 0 {
			t.Fatal("signer produced a high-S signature")
		}
		if !pub.Verify(msg, sig) {
			t.Fatal("valid signature refused")
		}
		high := bytes.Clone(sig)
		new(big.Int).Sub(n, s).FillBytes(high[32:])
		if !pub.Verify(msg, high) {
			t.Fatal("high-S form of a valid signature refused")
		}
		if pub.Verify(append([]byte{' '}, msg...), sig) {
			t.Fatal("signature verifies another message")
		}
	}
	sig, _ := key.Sign(msg)
	for name, mutate := range map[string]func([]byte){
		"r zero": func(b []byte) { clear(b[:32]) },
		"s zero": func(b []byte) { clear(b[32:]) },
		"r = n":  func(b []byte) { n.FillBytes(b[:32]) },
		"s = n":  func(b []byte) { n.FillBytes(b[32:]) },
	} {
		bad := bytes.Clone(sig)
		mutate(bad)
		if pub.Verify(msg, bad) {
			t.Errorf("%s: accepted", name)
		}
	}
	for _, raw := range [][]byte{make([]byte, 64), make([]byte, 65), bytes.Repeat([]byte{0xff}, 64)} {
		k := proto.PublicKey{Algorithm: proto.AlgorithmECDSAP256, Public: base64.StdEncoding.EncodeToString(raw)}
		if _, err := ParsePublicKey(k); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ParsePublicKey(%x) = %v, want ErrInvalidKey", raw[:4], err)
		}
	}
}

func TestParsePublicKeyErrors(t *testing.T) {
	t.Parallel()
	if _, err := ParsePublicKey(proto.PublicKey{Algorithm: "rsa-pss", Public: "AAAA"}); !errors.Is(err, ErrUnsupportedAlgorithm) {
		t.Errorf("unknown algorithm: %v", err)
	}
	if _, err := ParsePublicKey(proto.PublicKey{Algorithm: proto.AlgorithmEd25519, Public: "not base64!"}); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("bad base64: %v", err)
	}
}

// TestParsePrivateKeyFormats reads keys written by the tools operators use:
// openssl genpkey (PKCS#8), openssl ecparam (SEC 1), ssh-keygen (OpenSSH).
func TestParsePrivateKeyFormats(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	run("openssl", "genpkey", "-algorithm", "ed25519", "-out", p("ossl-ed25519.pem"))
	run("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", p("ossl-p256.pem"))
	run("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", p("sec1-p256.pem"))
	run("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384", "-out", p("ossl-p384.pem"))
	run("openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024", "-out", p("rsa.pem"))
	run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", p("ssh-ed25519"))
	run("ssh-keygen", "-q", "-t", "ecdsa", "-b", "256", "-N", "", "-f", p("ssh-p256"))
	run("ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", p("ssh-encrypted"))
	run("openssl", "genpkey", "-algorithm", "ed25519", "-aes-128-cbc", "-pass", "pass:secret", "-out", p("ossl-encrypted.pem"))

	tests := []struct {
		file    string
		alg     string
		wantErr string
	}{
		{file: "ossl-ed25519.pem", alg: proto.AlgorithmEd25519},
		{file: "ossl-p256.pem", alg: proto.AlgorithmECDSAP256},
		{file: "sec1-p256.pem", alg: proto.AlgorithmECDSAP256},
		{file: "ssh-ed25519", alg: proto.AlgorithmEd25519},
		{file: "ssh-p256", alg: proto.AlgorithmECDSAP256},
		{file: "ossl-p384.pem", wantErr: "only P-256"},
		{file: "rsa.pem", wantErr: "not supported"},
		{file: "ssh-encrypted", wantErr: "passphrase-protected"},
		{file: "ossl-encrypted.pem", wantErr: "encrypted PKCS#8"},
		{file: "ssh-ed25519.pub", wantErr: "no PEM block"},
	}
	for _, tt := range tests {
		data, err := os.ReadFile(p(tt.file))
		if err != nil {
			t.Fatal(err)
		}
		key, err := ParsePrivateKey(data)
		if tt.wantErr != "" {
			if !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error = %v, want ErrInvalidKey mentioning %q", tt.file, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.file, err)
			continue
		}
		if key.Algorithm() != tt.alg {
			t.Errorf("%s: algorithm %s, want %s", tt.file, key.Algorithm(), tt.alg)
		}
		msg := []byte(`{"signed":true}`)
		sig, err := key.Sign(msg)
		if err != nil || !key.Public().Verify(msg, sig) {
			t.Errorf("%s: sign/verify round trip failed: %v", tt.file, err)
		}
		if _, err := ParsePublicKey(key.Public().Proto()); err != nil {
			t.Errorf("%s: public key does not parse back: %v", tt.file, err)
		}
	}
}

// TestPKCS8RoundTrip: what keygen writes, ParsePrivateKey and openssl read.
func TestPKCS8RoundTrip(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{proto.AlgorithmEd25519, proto.AlgorithmECDSAP256} {
		key, err := GenerateKey(alg)
		if err != nil {
			t.Fatal(err)
		}
		pemBytes, err := key.MarshalPKCS8PEM()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParsePrivateKey(pemBytes)
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		if back.Public().Proto() != key.Public().Proto() {
			t.Fatalf("%s: public key changed in the round trip", alg)
		}
		path := filepath.Join(t.TempDir(), "k.pem")
		if err := os.WriteFile(path, pemBytes, 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("openssl", "pkey", "-in", path, "-noout").CombinedOutput(); err != nil {
			t.Fatalf("%s: openssl cannot read the key: %v\n%s", alg, err, out)
		}
		if alg == proto.AlgorithmECDSAP256 {
			if _, ok := any(back.ec).(*ecdsa.PrivateKey); !ok {
				t.Fatal("not an ECDSA key")
			}
		}
	}
	if _, err := GenerateKey("rsa"); !errors.Is(err, ErrUnsupportedAlgorithm) {
		t.Fatalf("GenerateKey(rsa) = %v", err)
	}
}

func TestSSHEd25519RoundTrip(t *testing.T) {
	t.Parallel()
	pub := seededKey(4).Public().Proto()
	raw, _ := base64.StdEncoding.DecodeString(pub.Public)
	line := SSHEd25519Line(ed25519.PublicKey(raw))
	back, err := ParseSSHEd25519(line + " host@example")
	if err != nil || !bytes.Equal(back, raw) {
		t.Fatalf("round trip: %v", err)
	}
	// ssh-keygen reads what we write.
	path := filepath.Join(t.TempDir(), "k.pub")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ssh-keygen", "-l", "-f", path).CombinedOutput(); err != nil || !strings.Contains(string(out), "ED25519") {
		t.Fatalf("ssh-keygen -l: %v\n%s", err, out)
	}
}
