package trust

import (
	"bytes"
	"fmt"
	"strconv"

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
// modify it); input that is canonical once insignificant whitespace is
// removed is returned compacted. Anything else is serialized by the
// cyberphone reference implementation, whose member sort is quadratic in
// the size of an object: fine for hand-edited files, slow for a 10,000-host
// object written out of order (BENCHMARKS.md). The fuzz test checks that
// the shortcuts agree with the reference byte for byte.
func Canonicalize(data []byte) ([]byte, error) {
	return canonicalize(data, "")
}

// canonicalNumber reports whether a JSON number literal is spelled exactly
// as JCS serialises its value (the reference's ES6 formatting).
func canonicalNumber(lit []byte) bool {
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		return false
	}
	s, err := jsoncanonicalizer.NumberToJSON(f)
	return err == nil && s == string(lit)
}

// canonicalize is Canonicalize with the member-name schema of an artifact
// kind; a kind also requires a top-level object.
func canonicalize(data []byte, kind proto.Kind) ([]byte, error) {
	if len(data) > proto.MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrMalformed, len(data), proto.MaxBytes)
	}
	opts := jsonscan.Options{MaxDepth: proto.MaxDepth, Schema: proto.SchemaFor(kind), CanonicalNumber: canonicalNumber}
	canonical, err := jsonscan.Check(data, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	switch t := bytes.TrimLeft(data, " \t\r\n"); {
	case t[0] == '{':
	case t[0] == '[' && kind == "":
	case kind == "":
		return nil, fmt.Errorf("%w: top-level value must be an object or an array", ErrMalformed)
	default:
		return nil, fmt.Errorf("%w: top-level value must be an object", ErrMalformed)
	}
	if canonical {
		return data, nil
	}
	// Pretty-printed canonical JSON (the common case for a file a person
	// looked at) differs only in whitespace: drop it and check again.
	compact := jsonscan.Compact(make([]byte, 0, len(data)), data)
	if canonical, err := jsonscan.Check(compact, jsonscan.Options{MaxDepth: proto.MaxDepth, CanonicalNumber: canonicalNumber}); err == nil && canonical {
		return compact, nil
	}
	out, err := jsoncanonicalizer.Transform(data)
	if err != nil {
		// The scan accepts only what Transform accepts; reaching this is a
		// bug, and the partial output must not escape.
		return nil, fmt.Errorf("%w: canonicalizer: %w", ErrMalformed, err)
	}
	return out, nil
}
