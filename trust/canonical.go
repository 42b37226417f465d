package trust

import (
	"bytes"
	"fmt"

	"github.com/cyberphone/json-canonicalization/go/src/webpki.org/jsoncanonicalizer"

	"github.com/nixfleet/nixfleet/internal/jsonscan"
	"github.com/nixfleet/nixfleet/proto"
)

// Canonicalize returns the RFC 8785 (JCS) serialization of a JSON object or
// array. Input is first checked strictly (see package jsonscan): invalid
// UTF-8, unpaired surrogates, duplicate member names, numbers that overflow
// a double, nesting deeper than proto.MaxDepth, more than proto.MaxBytes and
// trailing data are errors wrapping ErrMalformed, and no partial output is
// ever returned.
//
// Input that is already canonical is returned as is (the same slice; do not
// modify it). Anything else is serialized by the cyberphone reference
// implementation.
func Canonicalize(data []byte) ([]byte, error) {
	return canonicalize(data, "")
}

// canonicalize is Canonicalize with the member-name schema of an artifact
// kind; a kind also requires a top-level object.
func canonicalize(data []byte, kind proto.Kind) ([]byte, error) {
	if len(data) > proto.MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrMalformed, len(data), proto.MaxBytes)
	}
	canonical, err := jsonscan.ScanSchema(data, proto.MaxDepth, proto.SchemaFor(kind))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	switch t := bytes.TrimLeft(data, " \t\r\n"); {
	case t[0] == '{':
	case t[0] == '[' && kind == "":
	default:
		return nil, fmt.Errorf("%w: top-level value must be an object", ErrMalformed)
	}
	if canonical {
		return data, nil
	}
	out, err := jsoncanonicalizer.Transform(data)
	if err != nil {
		// The scan accepts only what Transform accepts; reaching this is a
		// bug, and the partial output must not escape.
		return nil, fmt.Errorf("%w: canonicalizer: %w", ErrMalformed, err)
	}
	return out, nil
}
