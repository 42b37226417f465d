package proto_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/nixfleet/nixfleet/proto"
)

// sameAsStdlib checks the shortcut against encoding/json on data: when
// the shortcut answers, encoding/json accepts data and decodes the same
// value. It reports whether the shortcut answered.
func sameAsStdlib(t *testing.T, data []byte) bool {
	t.Helper()
	var fast proto.FleetResolved
	if !proto.DecodeFleetFast(data, &fast) {
		if !reflect.DeepEqual(fast, proto.FleetResolved{}) {
			t.Fatalf("the shortcut gave up but left %+v behind", fast)
		}
		return false
	}
	var std proto.FleetResolved
	if err := json.Unmarshal(data, &std); err != nil {
		t.Fatalf("the shortcut decoded what encoding/json refuses (%v): %s", err, data)
	}
	for name, h := range std.Hosts {
		if g, ok := fast.Hosts[name]; !ok || !reflect.DeepEqual(g, h) {
			t.Fatalf("host %q: the shortcut decoded %+v (found: %v), encoding/json %+v", name, g, ok, h)
		}
	}
	if !reflect.DeepEqual(fast, std) {
		fast.Hosts, std.Hosts = nil, nil
		t.Fatalf("the shortcut and encoding/json disagree:\nshortcut %+v\nstdlib   %+v", fast, std)
	}
	return true
}

// TestFastFleetDecode: the shortcut that decodes a fleet's hosts agrees
// with encoding/json where it answers, answers on what CI signs, and
// leaves to encoding/json what it is not sure about.
func TestFastFleetDecode(t *testing.T) {
	fixture, err := os.ReadFile("../testdata/fleets/two-channels.json")
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, fixture); err != nil {
		t.Fatal(err)
	}
	// hosts puts a hosts object into the fixture's other members.
	hosts := func(h string) []byte {
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(fixture, &doc); err != nil {
			t.Fatal(err)
		}
		doc["hosts"] = json.RawMessage(h)
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		name   string
		doc    []byte
		answer bool
	}{
		{"pretty", fixture, true},
		{"compact", compact.Bytes(), true},
		{"escapes", hosts(`{"h\u00e9\"1":{"system":"x86\/64","tags":["a\\b","\ud83d\ude00"],"channel":"st\u0061ble","closureHash":"c\n","pubkey":"k\t"}}`), true},
		{"non-ascii", hosts(`{"hé":{"system":"é","tags":["ü"],"channel":"ß"}}`), true},
		{"nulls", hosts(`{"a":null,"b":{"system":null,"tags":null,"channel":null,"closureHash":null,"pubkey":null,"pin":null}}`), true},
		{"null tag", hosts(`{"a":{"tags":[null,"x",null]}}`), true},
		{"empty", hosts(`{"a":{},"b":{"tags":[]}}`), true},
		{"no hosts", hosts(`{}`), true},
		{"hosts null", hosts(`null`), true},
		{"pin", hosts(`{"a":{"pin":{"commit":"c","reason":"r","expiresAt":"2026-01-01T00:00:00Z"}}}`), true},
		{"unknown members", hosts(`{"a":{"extra":{"x":[1,2,{"y":"}"}]},"more":-1.5e3,"flag":true,"system":"s"}}`), true},
		{"white space", hosts("{ \"a\" : { \"tags\" : [ \"x\" , \"y\" ] , \"system\" : \"s\" } \n}"), true},
		{"duplicate host", hosts(`{"a":{"system":"one","tags":["x"]},"a":{"channel":"two"}}`), true},
		{"duplicate field", hosts(`{"a":{"tags":["x","y"],"tags":["z"],"closureHash":"1","closureHash":null}}`), true},
		{"folded field", hosts(`{"a":{"System":"s"}}`), false},
		{"unicode-folded field", hosts(`{"a":{"ſystem":"s"}}`), false},
		{"folded hosts", bytes.Replace(compact.Bytes(), []byte(`"hosts"`), []byte(`"Hosts"`), 1), false},
		{"number for a string", hosts(`{"a":{"system":5}}`), false},
		{"string for tags", hosts(`{"a":{"tags":"x"}}`), false},
		{"number in tags", hosts(`{"a":{"tags":[1]}}`), false},
		{"bad pin", hosts(`{"a":{"pin":{"commit":1}}}`), false},
		{"hosts array", hosts(`[]`), false},
		{"host array", hosts(`{"a":[]}`), false},
		{"truncated", compact.Bytes()[:compact.Len()-1], false},
		{"trailing", append(slicesClone(compact.Bytes()), `{}`...), false},
		{"empty document", []byte(`{}`), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := sameAsStdlib(t, c.doc); got != c.answer {
				t.Errorf("the shortcut answered %v, want %v", got, c.answer)
			}
		})
	}

	t.Run("not zero", func(t *testing.T) {
		f := proto.FleetResolved{SchemaVersion: 7}
		if proto.DecodeFleetFast(compact.Bytes(), &f) || f.SchemaVersion != 7 {
			t.Errorf("the shortcut decoded into a fleet that was not zero: %+v", f)
		}
	})

	// A fleet big enough for DecodeFleetResolved to take the shortcut
	// decodes as encoding/json decodes it.
	t.Run("large", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("{")
		for i := range 2000 {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `"host-%04d":{"channel":"stable","closureHash":"%032d-nixos-system-host-%04d","pubkey":null,"system":"x86_64-linux","tags":["web","t%d"]}`, i, i, i, i%7)
		}
		b.WriteString("}")
		doc := hosts(b.String())
		if len(doc) < 64<<10 {
			t.Fatalf("the large fleet is only %d bytes", len(doc))
		}
		if !sameAsStdlib(t, doc) {
			t.Fatal("the shortcut gave up on a plain fleet")
		}
		f, err := proto.DecodeFleetResolved(doc)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Hosts) != 2000 || f.Hosts["host-0003"].Tags[1] != "t3" {
			t.Errorf("decoded %d hosts, host-0003 %+v", len(f.Hosts), f.Hosts["host-0003"])
		}
	})
}

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }
