package fleetkit

import (
	"testing"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
)

func TestSyntheticIsValid(t *testing.T) {
	t.Parallel()
	for _, n := range []int{30, 1000} {
		f := Synthetic(n)
		if len(f.Hosts) != n {
			t.Fatalf("hosts = %d, want %d", len(f.Hosts), n)
		}
		if _, err := manifest.ValidateFleet(f); err != nil {
			t.Fatalf("Synthetic(%d) is invalid: %v", n, err)
		}
	}
}

func TestBuilderBumps(t *testing.T) {
	t.Parallel()
	b := New(t).Channel("prod", 0, 10).Host("a", "prod", 0).Host("b", "prod", 1)
	b.Bump("v2").Host("c", "prod", 1).BumpHost("a", "v3")
	f := b.Build()
	for host, want := range map[string]string{"a": "v3", "b": "v2", "c": "v2"} {
		if got := *f.Hosts[host].ClosureHash; got != Closure(host, want) {
			t.Errorf("%s's closure is %s, want the one of %s", host, got, want)
		}
	}
	if got := f.Waves["prod"][1].Hosts; len(got) != 2 {
		t.Errorf("wave 1 is %q, want b and c", got)
	}
	if f.SchemaVersion != proto.SchemaVersion {
		t.Errorf("schema version %d", f.SchemaVersion)
	}
}
