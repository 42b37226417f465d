// Package proto holds nixfleet's wire types: the signed artifacts
// (fleet.resolved.json and rollout manifests), the trust.json that pins
// the keys allowed to sign them, and the bodies of the control plane's
// HTTP API (rfcs/0007): the agents' in api.go, the operators' answers in
// operator.go. It depends on the standard library only.
//
// Wire rules shared by every type here:
//
//  1. JSON, UTF-8, camelCase member names. Version 1 of every document has
//     schemaVersion 1.
//  2. Decoding is strict: invalid UTF-8, unpaired surrogates, duplicate
//     member names (compared after unescaping), numbers that overflow a
//     double, nesting deeper than MaxDepth, documents larger than MaxBytes
//     and any data after the top-level object are errors. A number bound to
//     an integer field must be an integer literal ("3", not "3.0" or "3e0").
//  3. Unknown members are tolerated and ignored by the decoders, so newer
//     producers can add optional fields. They stay inside the signed bytes:
//     signatures cover the canonical form of the bytes received (see trust/),
//     never a re-encoding of these structs.
//  4. Optional members may be absent or null; the Go field is then a nil
//     pointer or an empty value, as each field's comment says.
//
// The decoders check syntax and types only. Semantic validation of a fleet
// (channels exist, edges form a DAG, budgets can admit a host, …) lives in
// manifest.ValidateFleet.
package proto
