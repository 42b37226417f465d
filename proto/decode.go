package proto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/nixfleet/nixfleet/internal/jsonscan"
)

// Decoding limits.
const (
	// MaxBytes caps the size of any document this package decodes. A
	// 100,000-host fleet.resolved is about 30 MiB.
	MaxBytes = 64 << 20
	// MaxDepth caps object and array nesting. Version 1 documents nest at
	// most 7 levels.
	MaxDepth = 32
)

// ErrMalformed is wrapped by every decoding error of this package: the input
// is not a well-formed document of the requested kind.
var ErrMalformed = errors.New("malformed document")

// Kind names an artifact kind.
type Kind string

// Artifact kinds.
const (
	KindFleetResolved   Kind = "fleet-resolved"
	KindRolloutManifest Kind = "rollout-manifest"
)

// CheckSyntax applies the strict syntax rules (size, depth, UTF-8,
// duplicates, number range, trailing data, member names that differ from a
// field of the kind's type only in letter case) and requires a top-level
// object. An empty kind checks syntax only. It reports whether data is
// already canonical JCS (conservatively).
func CheckSyntax(data []byte, kind Kind) (canonical bool, err error) {
	return checkSyntax(data, SchemaFor(kind))
}

func checkSyntax(data []byte, schema jsonscan.Schema) (canonical bool, err error) {
	if len(data) > MaxBytes {
		return false, fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrMalformed, len(data), MaxBytes)
	}
	canonical, err = jsonscan.Check(data, jsonscan.Options{MaxDepth: MaxDepth, Schema: schema})
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return false, fmt.Errorf("%w: top-level value is not an object", ErrMalformed)
	}
	return canonical, nil
}

// DecodeFleetResolved strictly decodes a fleet.resolved document.
func DecodeFleetResolved(data []byte) (*FleetResolved, error) {
	var f FleetResolved
	if err := decode(data, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// DecodeRolloutManifest strictly decodes a rollout manifest.
func DecodeRolloutManifest(data []byte) (*RolloutManifest, error) {
	var m RolloutManifest
	if err := decode(data, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// DecodeTrustFile strictly decodes trust.json. It does not check the keys;
// trust.NewRoots does.
func DecodeTrustFile(data []byte) (*TrustFile, error) {
	var t TrustFile
	if err := decode(data, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// DecodeChecked decodes a document whose syntax the caller has already
// checked with CheckSyntax for the same kind (for instance canonical bytes
// produced by the trust package), skipping a second scan. v must be a
// pointer to one of this package's document types.
func DecodeChecked(data []byte, v any) error {
	fast := false
	if len(data) >= fastFleetMin {
		switch x := v.(type) {
		case *FleetResolved:
			fast = decodeFleetFast(data, x)
		case *RolloutManifest:
			fast = decodeManifestFast(data, x)
		}
	}
	if !fast {
		if err := json.Unmarshal(data, v); err != nil {
			return fmt.Errorf("%w: %s", ErrMalformed, describe(err))
		}
	}
	if a, ok := v.(interface{ afterDecode() error }); ok {
		if err := a.afterDecode(); err != nil {
			return fmt.Errorf("%w: %w", ErrMalformed, err)
		}
	}
	return nil
}

// Decode strictly decodes any document into v, a pointer to one of this
// package's types (an API body, say): the syntax rules of CheckSyntax with
// the member names of v's type, then the types. Unknown members are
// tolerated; a member that differs from a field only in letter case is not.
func Decode(data []byte, v any) error { return decode(data, v) }

func decode(data []byte, v any) error {
	if _, err := checkSyntax(data, schemaOf(reflect.TypeOf(v))); err != nil {
		return err
	}
	return DecodeChecked(data, v)
}

// describe turns encoding/json errors into messages that name the field
// by its JSON path and say what was expected.
func describe(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "document"
		}
		return fmt.Sprintf("%s: cannot use JSON %s as %s", field, te.Value, te.Type)
	}
	return err.Error()
}

// DetectKind reports which artifact kind a document is, from its members:
// a rollout manifest has "hostSet", a fleet.resolved has "hosts". The
// document must pass CheckSyntax (with an empty kind) first.
func DetectKind(data []byte) (Kind, error) {
	var probe struct {
		HostSet json.RawMessage `json:"hostSet"`
		Hosts   json.RawMessage `json:"hosts"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return "", fmt.Errorf("%w: %s", ErrMalformed, describe(err))
	}
	switch {
	case probe.HostSet != nil && probe.Hosts == nil:
		return KindRolloutManifest, nil
	case probe.Hosts != nil && probe.HostSet == nil:
		return KindFleetResolved, nil
	}
	return "", fmt.Errorf("%w: cannot tell the artifact kind (expected exactly one of \"hosts\" or \"hostSet\")", ErrMalformed)
}

// PeekSchemaVersion returns the top-level schemaVersion of a syntactically
// valid document, or ok=false when it is absent or not an integer.
func PeekSchemaVersion(data []byte) (v int, ok bool) {
	var probe struct {
		SchemaVersion *int `json:"schemaVersion"`
	}
	if json.Unmarshal(data, &probe) != nil || probe.SchemaVersion == nil {
		return 0, false
	}
	return *probe.SchemaVersion, true
}
