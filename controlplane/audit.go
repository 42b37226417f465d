package controlplane

import (
	"net/http"

	"github.com/nixfleet/nixfleet/codes"

	"github.com/nixfleet/nixfleet/proto"
)

// listIntents is GET /v1/intents[?rollout=ID]: every intent (or a
// rollout's), oldest first, with its result and the signed document it
// came with, for `nixfleet audit` (rfcs/0007 §Signed intents).
func (s *Server) listIntents(w http.ResponseWriter, r *http.Request, c client) *codes.Error {
	if e := may(c, false); e != nil {
		return e
	}
	id := r.URL.Query().Get("rollout")
	if !proto.Nameable(id) {
		return codes.Errorf(codes.BadRequest, "rollout %q has a control character or is not UTF-8", id)
	}
	recs, err := s.st.Intents(r.Context(), id)
	if err != nil {
		return s.internal("listing intents", err)
	}
	out := proto.IntentList{Intents: make([]proto.IntentEntry, len(recs))}
	for i, rec := range recs {
		out.Intents[i] = proto.IntentEntry{Intent: proto.Intent(rec.Intent), Result: wireIntentResult(rec.Result), Signed: rec.Signed}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
