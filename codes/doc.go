// Package codes is nixfleet's one vocabulary of stable, machine-readable
// codes: the reasons the reconciler records, the gates that hold a host,
// the error codes of the HTTP API, the release refusals of the channel
// source, the trust verdicts, the agent's failure codes and the CLI's
// error codes. It imports the standard library only, so that every package
// (the pure reconciler included) may use it.
//
// The contract:
//
//  1. A code is a lowercase snake_case word that never changes once it has
//     shipped: the control plane stores it, the API and the CLI print it,
//     operators grep for it. One code has one meaning wherever it appears
//     (channel_edge is both the reason a rollout waits and the gate that
//     holds its hosts).
//  2. Every code is a constant of this package, named by its value in
//     CamelCase (ref_moved is RefMoved, rollout_id_mismatch is
//     RolloutIDMismatch), and one row of the registry: its meaning, the
//     HTTP status it is answered with, the exit status of the CLI. The
//     constants are untyped so that they fit the string fields of the wire
//     types; Code is the type of the registry's keys.
//  3. Code outside this package writes codes only through these constants:
//     TestSourceUsesConstants scans the module's non-test Go files (test
//     rigs like storetest excepted) and fails on a snake_case string
//     literal where a code goes (a Code, Gate or Why member, by key or by
//     position; a variable or parameter named code, gate or why; a
//     comparison or switch on one), and on a Code…/Gate… constant declared
//     anywhere else.
//  4. The registry is published in rfcs/0007-protocol.md §Code registry,
//     between generated markers: `go generate ./codes` (which runs
//     `go test ./codes -run TestRFCTable -update`) rewrites it, and the
//     test fails while the document differs. The codes that the RFCs'
//     code tables name must be registered.
//
// Codes that are built at run time are not registered: apiclient's
// http_<status> for an error answer without a code.
package codes

//go:generate go test -run TestRFCTable -update
