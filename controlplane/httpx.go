package controlplane

import (
	"encoding/json"
	"errors"
	"fmt"
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

// apiError is an error on its way to the client.
type apiError struct {
	status int
	code   codes.Code
	msg    string
}

func (e *apiError) Error() string { return string(e.code) + ": " + e.msg }

// errorf is an error answered with the code's status in the registry of
// package codes (rfcs/0007 §Error codes). Every error body's code is a
// constant of that package.
func errorf(code codes.Code, format string, args ...any) *apiError {
	return &apiError{status: codes.HTTPStatus(code), code: code, msg: fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client may be gone; nothing to do about it
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, proto.Error{Code: string(e.code), Message: e.msg})
}

// readBody reads a request body up to max bytes.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, *apiError) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, errorf(codes.BodyTooLarge, "request body exceeds %d bytes", max)
	case err != nil:
		return nil, errorf(codes.BadRequest, "reading the request body: %v", err)
	}
	return data, nil
}

// decodeJSON decodes a body strictly: the syntax rules of package proto
// (duplicate members, invalid UTF-8, trailing data, member names that
// differ from a field only in letter case…), then the types. Unknown
// members are tolerated, as in every nixfleet document.
func decodeJSON(data []byte, v any) *apiError {
	if err := proto.Decode(data, v); err != nil {
		return errorf(codes.MalformedJSON, "%v", err)
	}
	return nil
}

// readJSON is readBody then decodeJSON.
func readJSON(w http.ResponseWriter, r *http.Request, max int64, v any) ([]byte, *apiError) {
	data, e := readBody(w, r, max)
	if e != nil {
		return nil, e
	}
	return data, decodeJSON(data, v)
}

// readOptionalJSON decodes a small request body into v, when there is one:
// an empty body leaves v as it is.
func readOptionalJSON(w http.ResponseWriter, r *http.Request, v any) *apiError {
	body, e := readBody(w, r, maxSmallBody)
	if e != nil || len(body) == 0 {
		return e
	}
	return decodeJSON(body, v)
}
