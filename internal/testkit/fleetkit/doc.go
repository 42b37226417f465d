// Package fleetkit builds the fleet.resolved documents that tests and
// benchmarks feed to the reconciler, the store and the manifest projection.
//
//   - Builder (New) makes a small fleet by hand, channel by channel and
//     host by host; Build checks it with manifest.ValidateFleet.
//   - Synthetic makes a large, regular fleet of n hosts for benchmarks.
//   - Closure and Commit are the made-up store paths and git commit ids
//     that go with both, stable from run to run.
//
// It imports proto and manifest only, so that the tests of the reconciler,
// of the store and manifest's external tests may all use it. It is a test
// kit: no production package imports it.
package fleetkit
