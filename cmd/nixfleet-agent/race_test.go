//go:build race

package main

// raceEnabled: the tests run with -race, and so do the binaries they build.
const raceEnabled = true
