package apiclient

import (
	"context"
	"encoding/json"
	"net/url"

	"github.com/nixfleet/nixfleet/proto"
)

// Intents is GET /v1/intents: every intent (or a rollout's, when rolloutID
// is set), oldest first, with results and signed documents.
func (c *Client) Intents(ctx context.Context, rolloutID string) ([]proto.IntentEntry, json.RawMessage, error) {
	v := url.Values{}
	if rolloutID != "" {
		v.Set("rollout", rolloutID)
	}
	l, raw, err := getDoc[proto.IntentList](ctx, c, withQuery("/v1/intents", v))
	return l.Intents, raw, err
}
