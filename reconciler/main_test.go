package reconciler_test

import (
	"flag"
	"os"
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

// propertyChecks is how many random runs each property test makes, unless
// -rapid.checks or RAPID_CHECKS asks for another number: a third of
// rapid's default of 100, which still finds the bug of every mutation
// tried against the reconciler in every run (rfcs/0003 §Properties
// tested). Every run draws new fleets, so runs after runs search further.
const propertyChecks = 30

func TestMain(m *testing.M) {
	flag.Parse()
	asked := false
	flag.Visit(func(f *flag.Flag) { asked = asked || f.Name == "rapid.checks" })
	if _, env := os.LookupEnv("RAPID_CHECKS"); !asked && !env {
		if err := flag.Set("rapid.checks", strconv.Itoa(propertyChecks)); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

// checkRounds runs a property rounds times propertyChecks random runs, for
// a property whose bugs hide in rarer runs: rapid's count is one for all.
func checkRounds(t *testing.T, rounds int, prop func(*rapid.T)) {
	for i := range rounds {
		t.Run("round-"+strconv.Itoa(i+1), func(t *testing.T) { rapid.Check(t, prop) })
	}
}
