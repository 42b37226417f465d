//go:build !race

package testbin

// RaceEnabled: this build has no race detector.
const RaceEnabled = false
