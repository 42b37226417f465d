package fleettest

import (
	"testing"

	"github.com/nixfleet/nixfleet/manifest"
)

func TestFleetIsValid(t *testing.T) {
	t.Parallel()
	for _, n := range []int{30, 1000} {
		f := Fleet(n)
		if len(f.Hosts) != n {
			t.Fatalf("hosts = %d, want %d", len(f.Hosts), n)
		}
		if _, err := manifest.ValidateFleet(f); err != nil {
			t.Fatalf("Fleet(%d) is invalid: %v", n, err)
		}
	}
}
