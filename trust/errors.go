package trust

import (
	"errors"

	"github.com/nixfleet/nixfleet/codes"
)

// Verification errors, in pipeline order. Verify and manifest.Verify return
// them wrapped with a one-line reason; test with errors.Is and turn into a
// stable code with Code.
var (
	// ErrNoTrustRoots: no key is active at the verification time.
	ErrNoTrustRoots = errors.New("trust: no active trust roots")
	// ErrMalformed: not canonicalizable JSON, or not a well-formed artifact
	// of the expected kind.
	ErrMalformed = errors.New("trust: malformed artifact")
	// ErrBadSignature: no active key of a supported algorithm verifies the
	// signature over the canonical bytes.
	ErrBadSignature = errors.New("trust: bad signature")
	// ErrUnsupportedAlgorithm: no active key has an algorithm this build
	// supports, so nothing could be checked.
	ErrUnsupportedAlgorithm = errors.New("trust: no active key has a supported algorithm")
	// ErrUnsupportedSchema: the artifact's schemaVersion is not 1.
	ErrUnsupportedSchema = errors.New("trust: unsupported schema version")
	// ErrNotSigned: meta.signedAt is missing or null.
	ErrNotSigned = errors.New("trust: artifact has no meta.signedAt")
	// ErrRejectedBefore: signed before the trust roots' rejectBefore.
	ErrRejectedBefore = errors.New("trust: artifact signed before rejectBefore")
	// ErrStale: signed longer ago than the freshness window plus ClockSkew.
	ErrStale = errors.New("trust: artifact is stale")
	// ErrFutureDated: signed more than ClockSkew in the future.
	ErrFutureDated = errors.New("trust: artifact is dated in the future")
	// ErrRolloutIDMismatch: a manifest's rolloutId, recomputed from its
	// fields, is not the expected one, or its channelRef is not its
	// meta.ciCommit.
	ErrRolloutIDMismatch = errors.New("trust: rollout id mismatch")
	// ErrManifestHashMismatch: a manifest's content hash is not the one
	// recorded when the rollout adopted it.
	ErrManifestHashMismatch = errors.New("trust: manifest hash mismatch")
	// ErrHostNotInManifest: the host, at the expected wave and target, is not
	// in the manifest's hostSet.
	ErrHostNotInManifest = errors.New("trust: host not in manifest")

	// ErrInvalidRoots: trust.json is unusable (bad schema, a key of a
	// supported algorithm that does not parse, an inconsistent rotation).
	// It is a configuration error, not a verdict on an artifact.
	ErrInvalidRoots = errors.New("trust: invalid trust roots")
	// ErrInvalidKey: a private or public key cannot be used.
	ErrInvalidKey = errors.New("trust: invalid key")
)

// errCodes maps errors to stable codes (constants of package codes). It is
// walked in order, so the first match wins; keep verification codes in
// pipeline order.
var errCodes = []struct {
	err  error
	code string
}{
	{ErrNoTrustRoots, codes.NoTrustRoots},
	{ErrMalformed, codes.Malformed},
	{ErrBadSignature, codes.BadSignature},
	{ErrUnsupportedAlgorithm, codes.UnsupportedAlgorithm},
	{ErrUnsupportedSchema, codes.UnsupportedSchema},
	{ErrNotSigned, codes.NotSigned},
	{ErrRejectedBefore, codes.RejectedBefore},
	{ErrStale, codes.Stale},
	{ErrFutureDated, codes.FutureDated},
	{ErrRolloutIDMismatch, codes.RolloutIDMismatch},
	{ErrManifestHashMismatch, codes.ManifestHashMismatch},
	{ErrHostNotInManifest, codes.HostNotInManifest},
	{ErrInvalidRoots, codes.InvalidTrustRoots},
	{ErrInvalidKey, codes.InvalidKey},
}

// Code returns the stable code of an error from this package: "" for nil,
// "internal" for an error it does not know.
func Code(err error) string {
	if err == nil {
		return ""
	}
	for _, c := range errCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return codes.Internal
}

// Codes lists every verification code in pipeline order, for tests and
// documentation.
func Codes() []string {
	out := make([]string, 0, len(errCodes))
	for _, c := range errCodes {
		out = append(out, c.code)
	}
	return out
}
