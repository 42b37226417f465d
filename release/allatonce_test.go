package release_test

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/release"
)

// TestSignAllAtOnceFleet: testdata/fleets/field-and-core.json, written in
// the shape the reference Nix library writes (every selector member, null
// limits, fleet-wide wave lists), has a channel rolled out all at once
// (field: waves.field is an empty list) next to a canary channel (core).
// It signs without warnings, every artifact verifies, the signed fleet
// keeps the empty list, and each host verifies its own place: every field
// host in wave 0, core's canary in wave 0 and the rest in wave 1.
func TestSignAllAtOnceFleet(t *testing.T) {
	t.Parallel()
	unsigned, err := os.ReadFile("../testdata/fleets/field-and-core.json")
	if err != nil {
		t.Fatal(err)
	}
	key := generateKey(t, proto.AlgorithmEd25519)
	b, err := release.Sign(unsigned, release.Options{Signer: key, Commit: testCommit, Now: testNow})
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	if len(b.Warnings) != 0 {
		t.Errorf("Warnings = %q, want none", b.Warnings)
	}
	wantIDs := []string{"core@" + testCommit, "field@" + testCommit}
	if diff := cmp.Diff(wantIDs, b.RolloutIDs); diff != "" {
		t.Errorf("RolloutIDs (-want +got):\n%s", diff)
	}
	f, err := proto.DecodeFleetResolved(b.Fleet.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !manifest.AllAtOnce(f, "field") || manifest.AllAtOnce(f, "core") {
		t.Errorf("the signed fleet's waves are %+v, want field all at once and core in waves", f.Waves)
	}

	roots := rootsFor(t, key.Public())
	wantWaves := map[string]map[string]int{
		"core":  {"core-canary": 0, "core-1": 1, "core-2": 1},
		"field": {"field-1": 0, "field-2": 0, "field-3": 0, "field-4": 0},
	}
	for i, a := range b.Rollouts {
		exp := manifest.Expect{RolloutID: wantIDs[i], ContentHash: sha256Hex(a.Body)}
		res, err := manifest.Verify(a.Body, a.Sig, roots, exp, testNow)
		if err != nil {
			t.Fatalf("manifest.Verify(%s): %v", a.Path, err)
		}
		m := res.Manifest
		got := map[string]int{}
		for _, hw := range m.HostSet {
			got[hw.Hostname] = hw.WaveIndex
			if want := *f.Hosts[hw.Hostname].ClosureHash; hw.TargetClosure != want {
				t.Errorf("%s: %s targets %s, want %s", a.Path, hw.Hostname, hw.TargetClosure, want)
			}
			// What an agent checks before it activates anything.
			exp.Host = &manifest.HostExpect{Hostname: hw.Hostname, WaveIndex: wantWaves[m.Channel][hw.Hostname], TargetClosure: hw.TargetClosure}
			if _, err := manifest.Verify(a.Body, a.Sig, roots, exp, testNow); err != nil {
				t.Errorf("%s: host %s: %v", a.Path, hw.Hostname, err)
			}
		}
		if diff := cmp.Diff(wantWaves[m.Channel], got); diff != "" {
			t.Errorf("%s: waves by host (-want +got):\n%s", a.Path, diff)
		}
	}
}

// TestSignRefusesMissingWaveList: an empty wave list rolls a channel out
// all at once; an absent or null one is no wave list at all, and every
// host of the channel that has a closure is reported.
func TestSignRefusesMissingWaveList(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(waves map[string]any)
	}{
		{name: "absent", edit: func(waves map[string]any) { delete(waves, "edge") }},
		{name: "null", edit: func(waves map[string]any) { waves["edge"] = nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			unsigned := editFleet(t, readFleet(t), func(doc map[string]any) { tt.edit(doc["waves"].(map[string]any)) })
			_, err := release.Sign(unsigned, release.Options{Signer: generateKey(t, proto.AlgorithmEd25519), Commit: testCommit, Now: testNow})
			var verr *manifest.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Sign error = %v, want a *manifest.ValidationError", err)
			}
			want := []string{
				`host "edge-01": no wave of channel "edge" lists it, so it would never be rolled out`,
				`host "edge-02": no wave of channel "edge" lists it, so it would never be rolled out`,
			}
			if diff := cmp.Diff(want, verr.Problems); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
	// The same fleet with an empty list signs.
	unsigned := editFleet(t, readFleet(t), func(doc map[string]any) { doc["waves"].(map[string]any)["edge"] = []any{} })
	if _, err := release.Sign(unsigned, release.Options{Signer: generateKey(t, proto.AlgorithmEd25519), Commit: testCommit, Now: testNow}); err != nil {
		t.Errorf("Sign with an empty wave list: %v", err)
	}
}
