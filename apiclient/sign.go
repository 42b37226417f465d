package apiclient

import (
	"time"

	"github.com/nixfleet/nixfleet/intent"
	"github.com/nixfleet/nixfleet/proto"
)

// now is the client's clock: Options.Now, else the system's.
func (c *Client) now() time.Time {
	if c.clock != nil {
		return c.clock()
	}
	return time.Now()
}

// signed returns req with its intent signed by the client's key
// (rfcs/0007 §Signed intents): kind, rollout, wave and comment, the time
// now and a fresh nonce. A client without a key (--insecure-dev) sends it
// unsigned.
func (c *Client) signed(kind, rolloutID string, req proto.IntentRequest) (proto.IntentRequest, error) {
	if c.key == nil {
		return req, nil
	}
	s, err := intent.Sign(c.key, proto.IntentDocument{Kind: kind, RolloutID: rolloutID, Wave: req.Wave, Comment: req.Comment,
		IssuedAt: c.now(), Nonce: intent.NewNonce()})
	if err != nil {
		return req, err
	}
	req.Signed = &s
	return req, nil
}
