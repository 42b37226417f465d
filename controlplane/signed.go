package controlplane

import (
	"crypto/rand"
	"encoding/hex"
	"errors"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/intent"
	"github.com/nixfleet/nixfleet/proto"
)

// Signed intents (rfcs/0007 §Signed intents): every intent an operator
// files through the API carries the document the operator's key signed.
// The control plane checks it, files the intent with the document's nonce
// as its id, and keeps the signed bytes, so that an audit with the
// operators' public keys alone can tell who asked for what, and a
// control plane cannot make up an approval.

// checkSigned checks the signed intent of a request for kind on
// rolloutID, takes its comment and wave into req, and returns the id to
// file it under (its nonce). Under --insecure-dev nobody is
// authenticated, so nothing is signed: the id is random.
func (s *Server) checkSigned(c client, kind, rolloutID string, req *proto.IntentRequest) (string, *codes.Error) {
	if c.dev && req.Signed == nil {
		var b [16]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:]), nil
	}
	if req.Signed == nil {
		return "", codes.Errorf(codes.UnsignedIntent, "an intent must be signed with the operator's key (nixfleet signs them; an older nixfleet does not)")
	}
	d, err := intent.Verify(c.key, *req.Signed)
	switch {
	case errors.Is(err, intent.ErrSignature):
		return "", codes.Errorf(codes.BadIntentSignature, "the intent's signature does not verify with your key: %v", err)
	case err != nil:
		return "", codes.Errorf(codes.BadRequest, "the signed intent: %v", err)
	}
	mismatch := func(what string) *codes.Error {
		return codes.Errorf(codes.IntentMismatch, "the signed intent's %s is not the request's", what)
	}
	switch {
	case d.Kind != kind:
		return "", mismatch("kind")
	case d.RolloutID != rolloutID:
		return "", mismatch("rollout")
	case req.Comment != "" && req.Comment != d.Comment:
		return "", mismatch("comment")
	case req.Wave != nil && (d.Wave == nil || *d.Wave != *req.Wave):
		return "", mismatch("wave")
	}
	if !intent.Fresh(d, s.cfg.Clock.Now()) {
		return "", codes.Errorf(codes.StaleIntent, "the intent was signed at %s, more than %s from the control plane's clock (%s); check the clocks, and sign it again",
			d.IssuedAt.UTC().Format("2006-01-02T15:04:05Z"), proto.MaxIntentSkew, s.cfg.Clock.Now().UTC().Format("2006-01-02T15:04:05Z"))
	}
	req.Comment, req.Wave = d.Comment, d.Wave
	return d.Nonce, nil
}
