package intent

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/proto"
)

func TestSignVerify(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	wave := 1
	d := proto.IntentDocument{Kind: "approve", RolloutID: "prod@abc", Wave: &wave, Comment: "CAB #4711: ok", IssuedAt: time.Date(2026, 11, 25, 10, 0, 0, 0, time.FixedZone("CET", 3600)), Nonce: NewNonce()}
	s, err := Sign(priv, d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Verify(pub, s)
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != KeyString(pub) || *got.Wave != 1 || !got.IssuedAt.Equal(d.IssuedAt) || got.Nonce != d.Nonce {
		t.Fatalf("verified %+v", got)
	}
	if _, err := Verify(other, s); !errors.Is(err, ErrSignature) {
		t.Errorf("another key: %v", err)
	}
	// Every single changed byte of the document is caught.
	for i := range s.Document {
		bad := s
		b := []byte(s.Document)
		b[i] ^= 0x01
		bad.Document = string(b)
		if _, err := Verify(pub, bad); err == nil {
			t.Fatalf("byte %d changed (%q) still verifies", i, bad.Document)
		}
	}
	// Not canonical (a space), a bad signature encoding, missing fields.
	spaced := s
	spaced.Document = " " + s.Document
	if _, err := Verify(pub, spaced); !errors.Is(err, ErrNotCanonical) && !errors.Is(err, ErrMalformed) {
		t.Errorf("a non-canonical document: %v", err)
	}
	if _, err := Verify(pub, proto.SignedIntent{Document: s.Document, Signature: "%%%"}); !errors.Is(err, ErrMalformed) {
		t.Errorf("a bad signature encoding: %v", err)
	}
	empty, _ := Sign(priv, proto.IntentDocument{Kind: "pause"})
	if _, err := Verify(pub, empty); !errors.Is(err, ErrMalformed) {
		t.Errorf("a document without its fields: %v", err)
	}
	if !Fresh(got, d.IssuedAt.Add(4*time.Minute)) || Fresh(got, d.IssuedAt.Add(6*time.Minute)) || Fresh(got, d.IssuedAt.Add(-6*time.Minute)) {
		t.Error("freshness is not ±5 minutes")
	}
}

// TestSignedIntentSurvivesReencoding: the envelope may be re-encoded
// (stored with HTML escaping, served, exported indented) without changing
// a byte of what was signed.
func TestSignedIntentSurvivesReencoding(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	s, err := Sign(priv, proto.IntentDocument{Kind: "pause", RolloutID: "prod@abc", Comment: `<script>&"quotes" — ünïcode`,
		IssuedAt: time.Now(), Nonce: NewNonce()})
	if err != nil {
		t.Fatal(err)
	}
	escaped, _ := json.Marshal(s) // escapes <, > and &
	var indented bytes.Buffer
	if err := json.Indent(&indented, escaped, "", "    "); err != nil {
		t.Fatal(err)
	}
	var back proto.SignedIntent
	if err := json.Unmarshal(indented.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(pub, back); err != nil {
		t.Fatalf("re-encoded: %v", err)
	}
}
