//go:build !race

package main

// raceEnabled: the tests run without -race, and so do the binaries they build.
const raceEnabled = false
