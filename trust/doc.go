// Package trust is nixfleet's trust boundary: JCS canonicalization
// (RFC 8785), signing keys, trust roots with rotation, and the verification
// pipeline every consumer of a CI-signed artifact runs before it reads a
// field.
//
// The contract, in order of use:
//
//  1. Canonicalize turns JSON into its one canonical byte sequence, after a
//     strict check; nothing partial ever leaves it.
//  2. A Signer (a local PrivateKey, or an external command in package
//     release) signs those bytes: 64 raw bytes, ed25519 or ecdsa-p256.
//  3. ParseRoots loads trust.json; Roots.Active says which keys count at a
//     given time.
//  4. Verify(artifact, sig, roots, policy, now) re-canonicalizes the bytes
//     received, checks the signature against the active keys, then schema,
//     signing time, rejectBefore and freshness, and returns the artifact
//     decoded from exactly the bytes that were signed. Time is always a
//     parameter. Each failure wraps a sentinel error; Code maps it to the
//     stable code that leaves the process.
//
// Options that weaken a check would be named …Unsafe; there are none.
// See rfcs/0002-trust.md for the rules, including the ed25519 validity rule.
package trust
