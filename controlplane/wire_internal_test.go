package controlplane

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// fill sets every member of v, recursively, to a value that is not its
// zero, each different: strings "s<n>", numbers n, booleans true, times t0
// plus n seconds, lists and maps of one element, pointers to a value. With
// empty set, lists and maps are empty instead, not nil.
func fill(v reflect.Value, n *int, empty bool) {
	*n++
	switch t := v.Type(); {
	case t == reflect.TypeOf(time.Time{}):
		v.Set(reflect.ValueOf(time.Date(2026, 3, 1, 12, 0, *n, 1000**n, time.UTC)))
	case t == reflect.TypeOf(json.RawMessage{}):
		v.SetBytes([]byte(fmt.Sprintf(`{"raw":%d}`, *n)))
	case t.Kind() == reflect.Pointer:
		v.Set(reflect.New(t.Elem()))
		fill(v.Elem(), n, empty)
	case t.Kind() == reflect.Struct:
		for i := range t.NumField() {
			if t.Field(i).IsExported() {
				fill(v.Field(i), n, empty)
			}
		}
	case t.Kind() == reflect.Slice && empty:
		v.Set(reflect.MakeSlice(t, 0, 0))
	case t.Kind() == reflect.Slice:
		v.Set(reflect.MakeSlice(t, 1, 1))
		fill(v.Index(0), n, empty)
	case t.Kind() == reflect.Map:
		v.Set(reflect.MakeMap(t))
		if !empty {
			k, e := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
			fill(k, n, empty)
			fill(e, n, empty)
			v.SetMapIndex(k, e)
		}
	case t.Kind() == reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case t.Kind() == reflect.Bool:
		v.SetBool(true)
	case v.CanInt():
		v.SetInt(int64(*n))
	case v.CanUint():
		v.SetUint(uint64(*n))
	default:
		panic(fmt.Sprintf("fill: %s", t))
	}
}

// TestWireKeepsEverything: each conversion of a reconciler record into the
// operator API's type encodes to exactly the JSON of the record, whether
// its members are all set, empty (lists and maps) or zero (nil): a member
// the reconciler gains cannot go missing from the API unnoticed.
func TestWireKeepsEverything(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// from is a pointer to a reconciler record; to converts it.
		from any
		to   func(any) any
	}{
		{"rollout", &reconciler.Rollout{}, func(v any) any { return wireRollout(*v.(*reconciler.Rollout), true) }},
		{"rollout host", &reconciler.RolloutHost{}, func(v any) any { return wireRolloutHost(*v.(*reconciler.RolloutHost)) }},
		{"observed host", &reconciler.ObservedHost{}, func(v any) any { return wireObserved(*v.(*reconciler.ObservedHost)) }},
		{"intent result", &reconciler.IntentResult{}, func(v any) any { return wireIntentResult(v.(*reconciler.IntentResult)) }},
		{"reason", &reconciler.Reason{}, func(v any) any { return wireReason(*v.(*reconciler.Reason)) }},
		// Converted as they are, the compiler checks their members, but not
		// their JSON tags.
		{"activation", &reconciler.Activation{}, func(v any) any { return proto.Activation(*v.(*reconciler.Activation)) }},
		{"intent", &reconciler.Intent{}, func(v any) any { return proto.Intent(*v.(*reconciler.Intent)) }},
		{"visibility", &reconciler.Visibility{}, func(v any) any { return proto.Visibility(*v.(*reconciler.Visibility)) }},
		{"wave", &reconciler.WaveSpec{}, func(v any) any { return proto.RolloutWave(*v.(*reconciler.WaveSpec)) }},
	}
	for _, tc := range tests {
		for _, mode := range []string{"set", "empty", "zero"} {
			t.Run(tc.name+", "+mode, func(t *testing.T) {
				from := reflect.New(reflect.TypeOf(tc.from).Elem())
				if mode != "zero" {
					fill(from.Elem(), new(int), mode == "empty")
				}
				want, err := json.Marshal(from.Interface())
				if err != nil {
					t.Fatal(err)
				}
				got, err := json.Marshal(tc.to(from.Interface()))
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(want) {
					t.Errorf("the operator API's JSON differs from the reconciler's\n got: %s\nwant: %s", got, want)
				}
			})
		}
	}
}

// TestWireRolloutWithoutHosts: a rollout listed without its hosts says
// "hosts": null, as a record read without them does.
func TestWireRolloutWithoutHosts(t *testing.T) {
	t.Parallel()
	var r reconciler.Rollout
	fill(reflect.ValueOf(&r).Elem(), new(int), false)
	got, err := json.Marshal(wireRollout(r, false))
	if err != nil {
		t.Fatal(err)
	}
	r.Hosts = nil
	want, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("got: %s\nwant: %s", got, want)
	}
}

// TestWireEvent: the store reads events into proto.Event, which encodes as
// the journal's records always did: id and time, then the reconciler's
// event.
func TestWireEvent(t *testing.T) {
	t.Parallel()
	type record struct {
		ID int64     `json:"id"`
		At time.Time `json:"at"`
		reconciler.Event
	}
	for _, mode := range []string{"set", "zero"} {
		t.Run(mode, func(t *testing.T) {
			var r record
			if mode == "set" {
				fill(reflect.ValueOf(&r).Elem(), new(int), false)
			}
			want, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			var ev proto.Event
			dec := json.NewDecoder(bytes.NewReader(want))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&ev); err != nil {
				t.Fatalf("proto.Event lacks a member of the journal's record: %v", err)
			}
			got, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("got: %s\nwant: %s", got, want)
			}
		})
	}
}
