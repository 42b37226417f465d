//go:build race

package testbin

// RaceEnabled: this build has the race detector, and so do the binaries
// Build makes.
const RaceEnabled = true
