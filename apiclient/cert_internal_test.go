package apiclient

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"testing"
	"time"
)

// TestCertCache: a client presents the same certificate for certReuse,
// then a new one valid around the new time; a clock that went back gets
// a new one too. Each is over the client's key.
func TestCertCache(t *testing.T) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cc := &certCache{key: key, name: "web-1"}
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	get := func(now time.Time) *x509.Certificate {
		t.Helper()
		c, err := cc.get(now)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if !leaf.PublicKey.(ed25519.PublicKey).Equal(pub) || now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
			t.Fatalf("at %s: a certificate over another key, or not valid then (%s to %s)", now, leaf.NotBefore, leaf.NotAfter)
		}
		return leaf
	}
	first := get(t0)
	if again := get(t0.Add(certReuse - time.Second)); !again.Equal(first) {
		t.Error("a new certificate within certReuse")
	}
	later := get(t0.Add(certReuse))
	if later.Equal(first) {
		t.Error("the same certificate after certReuse")
	}
	if back := get(t0); back.Equal(later) {
		t.Error("the same certificate after the clock went back")
	}
}
