// Package manifest gives a fleet.resolved its meaning: it validates a fleet
// (the rules the Nix library checks at evaluation time, enforced again on
// the Go side), projects it into one rollout manifest per channel, and
// verifies a signed manifest for the party that is about to act on it.
//
//  1. ValidateFleet: every problem at once, plus warnings.
//  2. Project: fleet.resolved → []RolloutManifest, deterministic; Marshal
//     gives a manifest's canonical bytes (what is signed and hashed).
//     AllAtOnce tells a channel whose wave list is empty: one wave, 0,
//     holding every host of the channel.
//  3. Verify: trust.Verify, then the rollout id recomputed from the
//     manifest's fields, the content hash when one is expected, and the
//     host's (hostname, waveIndex, targetClosure) membership.
//
// The rules are written down in rfcs/0001-fleet-artifacts.md.
package manifest
