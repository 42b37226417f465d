package controlplane

import (
	"crypto/ed25519"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
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

// TestHostKeysReuseTheirParse: host keys taken from the fleet before
// (parseHostKeys with prev) are what a fresh parse gives, whatever
// changed between the two fleets (a key, a host added or gone, a key
// removed, added or unparsable); a fleet with the same hosts and lines
// reuses prev whole, and prev is never written to.
func TestHostKeysReuseTheirParse(t *testing.T) {
	line := func() *string {
		pub, _, err := ed25519.GenerateKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		l := trust.SSHEd25519Line(pub)
		return &l
	}
	bad := "ssh-ed25519 not-base64"
	base := &proto.FleetResolved{Hosts: map[string]proto.Host{"a": {Pubkey: line()}, "b": {Pubkey: line()}, "c": {}, "d": {Pubkey: &bad}}}
	prev := parseHostKeys(base, hostKeys{})
	snapshot := func(k hostKeys) string { return fmt.Sprint(k.hosts, k.keys, k.fleet, k.raw) }
	before := snapshot(prev)
	// (A key line that does not parse is parsed again each time.)
	good := &proto.FleetResolved{Hosts: maps.Clone(base.Hosts)}
	delete(good.Hosts, "d")
	goodKeys := parseHostKeys(good, prev)
	same := parseHostKeys(&proto.FleetResolved{Hosts: maps.Clone(good.Hosts)}, goodKeys)
	if reflect.ValueOf(same.keys).Pointer() != reflect.ValueOf(goodKeys.keys).Pointer() {
		t.Error("a fleet with the same host keys parsed them again")
	}
	for name, change := range map[string]func(h map[string]proto.Host){
		"key changed":    func(h map[string]proto.Host) { h["a"] = proto.Host{Pubkey: line()} },
		"host added":     func(h map[string]proto.Host) { h["e"] = proto.Host{Pubkey: line()} },
		"host gone":      func(h map[string]proto.Host) { delete(h, "b") },
		"key removed":    func(h map[string]proto.Host) { h["a"] = proto.Host{} },
		"key added":      func(h map[string]proto.Host) { h["c"] = proto.Host{Pubkey: line()} },
		"key unparsable": func(h map[string]proto.Host) { h["b"] = proto.Host{Pubkey: &bad} },
		"key repaired":   func(h map[string]proto.Host) { h["d"] = proto.Host{Pubkey: line()} },
		"renamed":        func(h map[string]proto.Host) { h["z"] = h["a"]; delete(h, "a") },
	} {
		for _, from := range []struct {
			fleet *proto.FleetResolved
			keys  hostKeys
		}{{base, prev}, {good, goodKeys}} {
			hosts := maps.Clone(from.fleet.Hosts)
			change(hosts)
			f := &proto.FleetResolved{Hosts: hosts}
			if got, want := snapshot(parseHostKeys(f, from.keys)), snapshot(parseHostKeys(f, hostKeys{})); got != want {
				t.Errorf("%s: reusing the previous parse gave %s, a fresh parse %s", name, got, want)
			}
		}
	}
	// Two hosts with one key (a fleet's mistake): both keep it, and the
	// key names one of them, as a fresh parse does.
	dup := maps.Clone(good.Hosts)
	dup["b"] = dup["a"]
	k := parseHostKeys(&proto.FleetResolved{Hosts: dup}, goodKeys)
	if owner := k.hosts[string(k.keys["a"])]; !k.keys["a"].Equal(k.keys["b"]) || owner != "a" && owner != "b" {
		t.Errorf("a key two hosts share: keys %x %x, owner %q", k.keys["a"], k.keys["b"], owner)
	}
	if snapshot(prev) != before {
		t.Error("parsing a fleet wrote to the previous fleet's keys")
	}
}

// BenchmarkParseHostKeys measures taking a 100,000-host fleet's host keys
// after a release, which the tick waits for on a busy machine: fresh (no
// fleet before, or every key new), and from the fleet before when one
// host's key changed or none did:
//
//	go test ./controlplane -run '^$' -bench ParseHostKeys
func BenchmarkParseHostKeys(b *testing.B) {
	f := &proto.FleetResolved{Hosts: map[string]proto.Host{}}
	for i := range 100000 {
		pub, _, err := ed25519.GenerateKey(nil)
		if err != nil {
			b.Fatal(err)
		}
		line := trust.SSHEd25519Line(pub)
		f.Hosts[fmt.Sprintf("host-%06d", i)] = proto.Host{Pubkey: &line}
	}
	prev := parseHostKeys(f, hostKeys{})
	oneNew := &proto.FleetResolved{Hosts: maps.Clone(f.Hosts)}
	pub, _, _ := ed25519.GenerateKey(nil)
	line := trust.SSHEd25519Line(pub)
	oneNew.Hosts["host-000042"] = proto.Host{Pubkey: &line}
	for _, c := range []struct {
		name string
		f    *proto.FleetResolved
		prev hostKeys
	}{{"fresh", f, hostKeys{}}, {"one-changed", oneNew, prev}, {"unchanged", f, prev}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				parseHostKeys(c.f, c.prev)
			}
		})
	}
}

// TestMayFile: viewers file nothing; operators pause, resume, cancel and
// roll back; approvers do that too, and approve and break freezes;
// --insecure-dev files everything.
func TestMayFile(t *testing.T) {
	kinds := []string{reconciler.IntentPause, reconciler.IntentResume, reconciler.IntentCancel, reconciler.IntentRollback,
		reconciler.IntentApprove, reconciler.IntentBreakFreeze}
	may := map[string]map[string]bool{
		RoleViewer:   {},
		RoleOperator: {reconciler.IntentPause: true, reconciler.IntentResume: true, reconciler.IntentCancel: true, reconciler.IntentRollback: true},
		RoleApprover: {reconciler.IntentPause: true, reconciler.IntentResume: true, reconciler.IntentCancel: true, reconciler.IntentRollback: true,
			reconciler.IntentApprove: true, reconciler.IntentBreakFreeze: true},
	}
	for role, allowed := range may {
		for _, kind := range kinds {
			e := mayFile("x", role, false, kind)
			if allowed[kind] != (e == nil) {
				t.Errorf("role %s, %s: %v, want allowed %v", role, kind, e, allowed[kind])
			}
			if e != nil && (e.Code != codes.Forbidden || !strings.Contains(e.Message, "has role "+role)) {
				t.Errorf("role %s, %s: %v", role, kind, e)
			}
			if e := mayFile("", "", true, kind); e != nil {
				t.Errorf("--insecure-dev, %s: %v", kind, e)
			}
		}
	}
	for role, want := range map[string][2]bool{RoleViewer: {false, false}, RoleOperator: {true, false}, RoleApprover: {true, true}} {
		if got := [2]bool{roleActs(role), roleApproves(role)}; got != want {
			t.Errorf("role %s: acts and approves %v, want %v", role, got, want)
		}
	}
}
