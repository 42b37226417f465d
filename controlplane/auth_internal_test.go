package controlplane

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// TestHostKeysFollowTheNewestFleet: channels move independently, and a
// channel moving to a release signed earlier than another channel's must
// not take away the hosts only the newer fleet knows.
func TestHostKeysFollowTheNewestFleet(t *testing.T) {
	fleetWith := func(names ...string) (*proto.FleetResolved, map[string]ed25519.PublicKey) {
		f := &proto.FleetResolved{Hosts: map[string]proto.Host{}}
		keys := map[string]ed25519.PublicKey{}
		for _, n := range names {
			pub, _, err := ed25519.GenerateKey(nil)
			if err != nil {
				t.Fatal(err)
			}
			line := trust.SSHEd25519Line(pub)
			f.Hosts[n] = proto.Host{Pubkey: &line}
			keys[n] = pub
		}
		return f, keys
	}
	t0 := time.Date(2026, 11, 21, 8, 0, 0, 0, time.UTC)
	id := newIdentities(nil)
	newer, newKeys := fleetWith("web-1", "web-2")
	older, _ := fleetWith("web-1")
	id.setHosts(newer, t0.Add(time.Hour))
	id.setHosts(older, t0)
	for name, want := range newKeys {
		if got, ok := id.hostKey(name); !ok || !got.Equal(want) {
			t.Errorf("%s: key %x (known %v) after an older fleet arrived, want the newer fleet's", name, got, ok)
		}
	}
	// A fleet signed later replaces them, hosts it lacks included.
	latest, latestKeys := fleetWith("web-1")
	id.setHosts(latest, t0.Add(2*time.Hour))
	if got, ok := id.hostKey("web-1"); !ok || !got.Equal(latestKeys["web-1"]) {
		t.Errorf("web-1 keeps an old key after a newer fleet")
	}
	if _, ok := id.hostKey("web-2"); ok {
		t.Errorf("web-2 is still known after a newer fleet without it")
	}
}
