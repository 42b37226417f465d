package controlplane

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
)

// Body size caps.
const (
	maxAgentBody  = 256 << 10 // check-ins carry compliance results
	maxSmallBody  = 16 << 10  // confirms, reports, intents
	maxHookBody   = 1 << 20   // forge webhooks
	maxFollowWait = 60        // seconds a long-poll may wait
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client may be gone; nothing to do about it
}

func writeError(w http.ResponseWriter, e *codes.Error) {
	writeJSON(w, e.Status(), proto.Error{Code: string(e.Code), Message: e.Message})
}

// readBody reads a request body up to max bytes.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, *codes.Error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, codes.Errorf(codes.BodyTooLarge, "request body exceeds %d bytes", max)
	case err != nil:
		return nil, codes.Errorf(codes.BadRequest, "reading the request body: %v", err)
	}
	return data, nil
}

// decodeJSON decodes a body strictly: the syntax rules of package proto
// (duplicate members, invalid UTF-8, trailing data, member names that
// differ from a field only in letter case…), then the types. Unknown
// members are tolerated, as in every nixfleet document.
func decodeJSON(data []byte, v any) *codes.Error {
	if err := proto.Decode(data, v); err != nil {
		return codes.Errorf(codes.MalformedJSON, "%v", err)
	}
	return nil
}

// readJSON is readBody then decodeJSON.
func readJSON(w http.ResponseWriter, r *http.Request, max int64, v any) ([]byte, *codes.Error) {
	data, e := readBody(w, r, max)
	if e != nil {
		return nil, e
	}
	return data, decodeJSON(data, v)
}

// readOptionalJSON decodes a small request body into v, when there is one:
// an empty body leaves v as it is.
func readOptionalJSON(w http.ResponseWriter, r *http.Request, v any) *codes.Error {
	body, e := readBody(w, r, maxSmallBody)
	if e != nil || len(body) == 0 {
		return e
	}
	return decodeJSON(body, v)
}
