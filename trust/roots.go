package trust

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/proto"
)

// Key slots of trust.json's ciReleaseKey.
const (
	SlotCurrent   = "current"
	SlotSuccessor = "successor"
	SlotPrevious  = "previous"
)

// Roots are checked trust roots: the CI release key slot of a trust.json
// and its cache keys.
//
// Keys active at time t, tried in this order:
//
//  1. current, unless a successor is set and t >= retireAt;
//  2. successor, whenever set (pre-staged, so CI may switch to it at any
//     time before retireAt);
//  3. previous, whenever set (the grace key of the last rotation; remove it
//     to end the grace period).
//
// rejectBefore refuses artifacts signed before it, whichever key signed.
type Roots struct {
	slots        []rootKey // current, successor, previous; unset slots omitted
	retireAt     *time.Time
	rejectBefore *time.Time
	cacheKeys    []string
}

type rootKey struct {
	slot      string
	algorithm string
	key       *PublicKey // nil when the algorithm is not supported
}

// ActiveKey is one key active at a given time.
type ActiveKey struct {
	Slot      string
	Algorithm string
	// Key is nil when this build does not support Algorithm.
	Key *PublicKey
}

// ParseRoots decodes and checks a trust.json document.
func ParseRoots(data []byte) (*Roots, error) {
	tf, err := proto.DecodeTrustFile(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRoots, err)
	}
	return NewRoots(tf)
}

// NewRoots checks a decoded trust.json. Keys of an unknown algorithm are
// kept (they make verification fail with ErrUnsupportedAlgorithm rather
// than stop a process from starting); keys of a supported algorithm that do
// not parse, a retireAt without a successor, and malformed timestamps or
// cache keys are errors wrapping ErrInvalidRoots.
func NewRoots(tf *proto.TrustFile) (*Roots, error) {
	if tf.SchemaVersion != proto.SchemaVersion {
		return nil, fmt.Errorf("%w: trust.json schemaVersion %d, want %d", ErrInvalidRoots, tf.SchemaVersion, proto.SchemaVersion)
	}
	r := &Roots{}
	ks := tf.CIReleaseKey
	for _, s := range []struct {
		name string
		key  *proto.PublicKey
	}{{SlotCurrent, ks.Current}, {SlotSuccessor, ks.Successor}, {SlotPrevious, ks.Previous}} {
		if s.key == nil {
			continue
		}
		pk, err := ParsePublicKey(*s.key)
		switch {
		case errors.Is(err, ErrUnsupportedAlgorithm):
			pk = nil
		case err != nil:
			return nil, fmt.Errorf("%w: ciReleaseKey.%s: %w", ErrInvalidRoots, s.name, err)
		}
		r.slots = append(r.slots, rootKey{slot: s.name, algorithm: s.key.Algorithm, key: pk})
	}
	var err error
	if r.retireAt, err = parseOptionalTime("ciReleaseKey.retireAt", ks.RetireAt); err != nil {
		return nil, err
	}
	if r.rejectBefore, err = parseOptionalTime("ciReleaseKey.rejectBefore", ks.RejectBefore); err != nil {
		return nil, err
	}
	if r.retireAt != nil && ks.Successor == nil {
		return nil, fmt.Errorf("%w: ciReleaseKey.retireAt is set but there is no successor to take over from current", ErrInvalidRoots)
	}
	for i, ck := range tf.CacheKeys {
		if err := checkCacheKey(ck); err != nil {
			return nil, fmt.Errorf("%w: cacheKeys[%d]: %w", ErrInvalidRoots, i, err)
		}
	}
	r.cacheKeys = append([]string(nil), tf.CacheKeys...)
	return r, nil
}

func parseOptionalTime(field string, s *string) (*time.Time, error) {
	if s == nil {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, *s)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not an RFC 3339 time: %q", ErrInvalidRoots, field, *s)
	}
	return &t, nil
}

// checkCacheKey checks Nix's "name:base64(32-byte ed25519 key)" format.
func checkCacheKey(k string) error {
	name, b64, ok := strings.Cut(k, ":")
	if !ok || name == "" {
		return fmt.Errorf("%q is not a Nix public key of the form name:base64", k)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 32 {
		return fmt.Errorf("%q: key part must be base64 of 32 bytes", k)
	}
	return nil
}

// Active returns the keys active at now, in the order Verify tries them.
func (r *Roots) Active(now time.Time) []ActiveKey {
	out := make([]ActiveKey, 0, len(r.slots))
	for _, s := range r.slots {
		if s.slot == SlotCurrent && r.retireAt != nil && !now.Before(*r.retireAt) {
			continue
		}
		out = append(out, ActiveKey{Slot: s.slot, Algorithm: s.algorithm, Key: s.key})
	}
	return out
}

// keyOf is the key in slot (nil when the slot is unset or its algorithm
// unsupported).
func (r *Roots) keyOf(slot string) *PublicKey {
	for _, s := range r.slots {
		if s.slot == slot {
			return s.key
		}
	}
	return nil
}

// RejectBefore returns the rejectBefore time, if set.
func (r *Roots) RejectBefore() (time.Time, bool) {
	if r.rejectBefore == nil {
		return time.Time{}, false
	}
	return *r.rejectBefore, true
}

// CacheKeys returns the Nix binary-cache public keys.
func (r *Roots) CacheKeys() []string { return append([]string(nil), r.cacheKeys...) }
