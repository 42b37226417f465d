package proto_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/proto"
)

// sameAsStdlib checks the fleet shortcut against encoding/json on data:
// when the shortcut answers, encoding/json accepts data and decodes the
// same value. It reports whether the shortcut answered.
func sameAsStdlib(t *testing.T, data []byte) bool {
	t.Helper()
	return agreesWithStdlib(t, data, proto.DecodeFleetFast)
}

// agreesWithStdlib is sameAsStdlib for any shortcut.
func agreesWithStdlib[T any](t *testing.T, data []byte, shortcut func([]byte, *T) bool) bool {
	t.Helper()
	var fast, zero T
	if !shortcut(data, &fast) {
		if !reflect.DeepEqual(fast, zero) {
			t.Fatalf("the shortcut gave up but left %+v behind", fast)
		}
		return false
	}
	var std T
	if err := json.Unmarshal(data, &std); err != nil {
		t.Fatalf("the shortcut decoded what encoding/json refuses (%v): %.200s", err, data)
	}
	if !reflect.DeepEqual(fast, std) {
		t.Fatalf("the shortcut and encoding/json disagree (-shortcut +stdlib):\n%s", cmp.Diff(fast, std))
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

// TestFastManifestDecode: the shortcut that decodes a manifest's hostSet
// agrees with encoding/json where it answers, answers on what CI signs,
// and leaves to encoding/json what it is not sure about.
func TestFastManifestDecode(t *testing.T) {
	doc := func(set string) []byte {
		return []byte(`{"channel":"stable","channelRef":"abc","complianceFrameworks":[],"disruptionBudgets":[{"hosts":["a","b"],"maxInFlight":1,"selector":{"all":true}}],` +
			`"fleetResolvedHash":"ff","freshnessWindow":60,"healthGate":{},"hostSet":` + set + `,"meta":{"ciCommit":"abc"},"schemaVersion":1}`)
	}
	for _, c := range []struct {
		name   string
		doc    []byte
		answer bool
	}{
		{"plain", doc(`[{"hostname":"a","targetClosure":"x","waveIndex":0},{"hostname":"b","targetClosure":"y","waveIndex":12}]`), true},
		{"escapes", doc(`[{"hostname":"h\u00e9\"1","targetClosure":"c\n","waveIndex":-3}]`), true},
		{"nulls", doc(`[null,{"hostname":null,"targetClosure":null,"waveIndex":null}]`), true},
		{"empty", doc(`[]`), true},
		{"null set", doc(`null`), true},
		{"unknown members", doc(`[{"extra":{"x":[1,{"y":"}"}]},"hostname":"a","more":-1.5e3}]`), true},
		{"white space", doc("[ { \"hostname\" : \"a\" , \"waveIndex\" : 2 } \n]"), true},
		{"duplicate field", doc(`[{"waveIndex":1,"waveIndex":2,"hostname":"a","hostname":null}]`), true},
		{"fraction", doc(`[{"waveIndex":1.0}]`), false},
		{"exponent", doc(`[{"waveIndex":1e2}]`), false},
		{"long number", doc(`[{"waveIndex":12345678901234567890}]`), false},
		{"string for a number", doc(`[{"waveIndex":"1"}]`), false},
		{"number for a string", doc(`[{"hostname":5}]`), false},
		{"folded field", doc(`[{"HostName":"a"}]`), false},
		{"folded hostSet", bytes.Replace(doc(`[]`), []byte(`"hostSet"`), []byte(`"HostSet"`), 1), false},
		{"object set", doc(`{}`), false},
		{"array entry", doc(`[[]]`), false},
		{"bad rest", bytes.Replace(doc(`[]`), []byte(`"freshnessWindow":60`), []byte(`"freshnessWindow":"60"`), 1), false},
		{"twice", bytes.Replace(doc(`[]`), []byte(`"meta"`), []byte(`"hostSet":[],"meta"`), 1), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := agreesWithStdlib(t, c.doc, proto.DecodeManifestFast); got != c.answer {
				t.Errorf("the shortcut answered %v, want %v", got, c.answer)
			}
		})
	}
	t.Run("large", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("[")
		for i := range 2000 {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"hostname":"host-%04d","targetClosure":"%032d-nixos-system-host-%04d","waveIndex":%d}`, i, i, i, i%3)
		}
		b.WriteString("]")
		d := doc(b.String())
		if len(d) < 64<<10 {
			t.Fatalf("the large manifest is only %d bytes", len(d))
		}
		if !agreesWithStdlib(t, d, proto.DecodeManifestFast) {
			t.Fatal("the shortcut gave up on a plain manifest")
		}
		var m proto.RolloutManifest
		if err := proto.DecodeChecked(d, &m); err != nil {
			t.Fatal(err)
		}
		if len(m.HostSet) != 2000 || m.HostSet[5].WaveIndex != 2 {
			t.Errorf("decoded %d hosts, the sixth %+v", len(m.HostSet), m.HostSet[5])
		}
	})
}
