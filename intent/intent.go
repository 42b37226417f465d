// Package intent signs and verifies operator intents (rfcs/0007 §Signed
// intents): an operator's CLI signs each intent it files with the
// operator's ed25519 key; the control plane checks the signature against
// the operators file before it files the intent, and keeps the signed
// bytes; an auditor checks them again later with the public keys alone.
package intent

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// NewNonce returns 32 random lowercase hex digits.
func NewNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var nonceRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// KeyString is how a document names its signer's key.
func KeyString(pub ed25519.PublicKey) string { return base64.StdEncoding.EncodeToString(pub) }

// Sign signs a document with an operator's key, which it names.
func Sign(priv ed25519.PrivateKey, d proto.IntentDocument) (proto.SignedIntent, error) {
	d.IssuedAt = d.IssuedAt.UTC()
	d.Key = KeyString(priv.Public().(ed25519.PublicKey))
	raw, err := json.Marshal(d)
	if err != nil {
		return proto.SignedIntent{}, err
	}
	canon, err := trust.Canonicalize(raw)
	if err != nil {
		return proto.SignedIntent{}, err
	}
	sig := ed25519.Sign(priv, append([]byte(proto.IntentSigningContext), canon...))
	return proto.SignedIntent{Document: string(canon), Signature: base64.StdEncoding.EncodeToString(sig)}, nil
}

// Errors of Verify.
var (
	ErrMalformed    = errors.New("intent: malformed signed intent")
	ErrNotCanonical = errors.New("intent: the document is not in canonical (JCS) form")
	ErrSignature    = errors.New("intent: the signature does not verify with the operator's key")
)

// Verify checks a signed intent with the key of the operator who signed
// it and returns its document. The document must be exactly its own JCS
// bytes, so that what is kept is what was signed.
func Verify(pub ed25519.PublicKey, s proto.SignedIntent) (proto.IntentDocument, error) {
	var d proto.IntentDocument
	if len(s.Document) == 0 || s.Signature == "" {
		return d, fmt.Errorf("%w: document and signature are required", ErrMalformed)
	}
	doc := []byte(s.Document)
	canon, err := trust.Canonicalize(doc)
	if err != nil {
		return d, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if !bytes.Equal(canon, doc) {
		return d, ErrNotCanonical
	}
	sig, err := base64.StdEncoding.DecodeString(s.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return d, fmt.Errorf("%w: the signature is not base64 of %d bytes", ErrMalformed, ed25519.SignatureSize)
	}
	if !ed25519.Verify(pub, append([]byte(proto.IntentSigningContext), doc...), sig) {
		return d, ErrSignature
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if d.Kind == "" || d.RolloutID == "" || d.IssuedAt.IsZero() || !nonceRE.MatchString(d.Nonce) {
		return d, fmt.Errorf("%w: kind, rolloutId, issuedAt and a 32-hex-digit nonce are required", ErrMalformed)
	}
	if d.Key != KeyString(pub) {
		return d, fmt.Errorf("%w: the document names another key", ErrSignature)
	}
	return d, nil
}

// Fresh reports whether a document was issued within proto.MaxIntentSkew
// of now.
func Fresh(d proto.IntentDocument, now time.Time) bool {
	skew := now.Sub(d.IssuedAt)
	return skew <= proto.MaxIntentSkew && skew >= -proto.MaxIntentSkew
}
