// Package release is CI's signing step: it turns an unsigned
// fleet.resolved into a signed release directory.
//
//  1. Sign stamps meta (signedAt, ciCommit, signatureAlgorithm) into the
//     document without dropping any member, validates the fleet, projects
//     one manifest per channel and signs every artifact's canonical bytes
//     with a trust.Signer: a local key or a CommandSigner (HSM, token).
//     When the public key is known, every signature and the whole
//     verification pipeline are checked before anything is written.
//  2. WriteDir writes the bundle all or nothing: DIR/fleet.resolved.json,
//     DIR/rollouts/<rolloutId>.json, each with a .sig holding the raw
//     64-byte signature.
package release
