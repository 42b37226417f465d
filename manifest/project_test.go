package manifest_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

const goldenDir = "testdata/golden"

// TestProjectGolden pins the canonical bytes of the fixture's manifests.
// Regenerate with: go test ./manifest -run TestProjectGolden -update
func TestProjectGolden(t *testing.T) {
	t.Parallel()
	f := stampedFixture(t)
	ms, err := manifest.Project(f, stampedFixtureHash(t))
	if err != nil {
		t.Fatal(err)
	}
	var channels []string
	for _, m := range ms {
		channels = append(channels, m.Channel)
		got, err := manifest.Marshal(m)
		if err != nil {
			t.Fatalf("Marshal(%s): %v", m.Channel, err)
		}
		path := filepath.Join(goldenDir, m.Channel+".json")
		if *update {
			if err := os.MkdirAll(goldenDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run `go test ./manifest -run TestProjectGolden -update` to create it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: manifest differs from %s (-want +got):\n%s", m.Channel, path, cmp.Diff(indent(t, want), indent(t, got)))
		}
	}
	if diff := cmp.Diff([]string{"edge", "stable"}, channels); diff != "" {
		t.Errorf("channels (-want +got):\n%s", diff)
	}
	// No golden file may outlive its channel.
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var stale []string
	for _, file := range files {
		if !slices.Contains(channels, strings.TrimSuffix(filepath.Base(file), ".json")) {
			stale = append(stale, file)
		}
	}
	if len(stale) > 0 {
		t.Errorf("golden files without a channel: %q", stale)
	}
}

// stampedFixtureHash is the fleetResolvedHash of the fixture stamped like
// stampedFixture, computed from the fixture's own bytes (every member kept),
// as `release sign` computes it, not from a re-encoding of proto types.
func stampedFixtureHash(t *testing.T) string {
	t.Helper()
	data, err := readFixture()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(doc["meta"], &meta); err != nil {
		t.Fatal(err)
	}
	meta["signedAt"], _ = json.Marshal(testSignedAt)
	meta["ciCommit"], _ = json.Marshal(testCommit)
	if doc["meta"], err = json.Marshal(meta); err != nil {
		t.Fatal(err)
	}
	stamped, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	canonical, err := trust.Canonicalize(stamped)
	if err != nil {
		t.Fatal(err)
	}
	return sha256Hex(canonical)
}

func indent(t *testing.T, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return string(b)
	}
	return buf.String()
}

// TestProjectFixture spells out the fixture's projection field by field.
func TestProjectFixture(t *testing.T) {
	t.Parallel()
	f := stampedFixture(t)
	hash := fleetHash(t, f)
	ms, err := manifest.Project(f, hash)
	if err != nil {
		t.Fatal(err)
	}
	meta := proto.Meta{SchemaVersion: ptr(1), SignedAt: ptr(testSignedAt), CICommit: ptr(testCommit)}
	allHosts := []string{"canary-01", "db-01", "edge-01", "edge-02", "web-01", "web-02"}
	budgets := []proto.RolloutBudget{
		{Selector: proto.Selector{Tags: []string{"web"}}, Hosts: []string{"canary-01", "web-01", "web-02"}, MaxInFlight: ptr(1)},
		{Selector: proto.Selector{All: true}, Hosts: allHosts, MaxInFlightPct: ptr(50)},
	}
	closure := func(h string) string { return *f.Hosts[h].ClosureHash }
	want := []*proto.RolloutManifest{
		{
			SchemaVersion:     1,
			Channel:           "edge",
			ChannelRef:        testCommit,
			FleetResolvedHash: hash,
			// The edge wave also lists every stable host; none may leak in.
			HostSet: []proto.HostWave{
				{Hostname: "edge-01", WaveIndex: 0, TargetClosure: closure("edge-01")},
				{Hostname: "edge-02", WaveIndex: 0, TargetClosure: closure("edge-02")},
			},
			HealthGate:           proto.HealthGate{},
			ComplianceFrameworks: []string{},
			FreshnessWindow:      1440,
			DisruptionBudgets:    budgets,
			Meta:                 meta,
		},
		{
			SchemaVersion:     1,
			Channel:           "stable",
			ChannelRef:        testCommit,
			FleetResolvedHash: hash,
			// canary-01 is listed by waves 0, 1 and 2: the first wins.
			HostSet: []proto.HostWave{
				{Hostname: "canary-01", WaveIndex: 0, TargetClosure: closure("canary-01")},
				{Hostname: "db-01", WaveIndex: 2, TargetClosure: closure("db-01")},
				{Hostname: "web-01", WaveIndex: 1, TargetClosure: closure("web-01")},
				{Hostname: "web-02", WaveIndex: 1, TargetClosure: closure("web-02")},
			},
			HealthGate:           proto.HealthGate{SystemdFailedUnits: &proto.SystemdFailedUnits{Max: 0}, MaxFailures: ptr(1)},
			ComplianceFrameworks: []string{"nis2"},
			FreshnessWindow:      180,
			DisruptionBudgets:    budgets,
			Meta:                 meta,
		},
	}
	if diff := cmp.Diff(want, ms); diff != "" {
		t.Fatalf("Project (-want +got):\n%s", diff)
	}
	for _, m := range ms {
		if got, want := m.RolloutID(), m.Channel+"@"+testCommit; got != want {
			t.Errorf("RolloutID() = %q, want %q", got, want)
		}
	}
}

// TestProjectHealthGate: a manifest carries its channel policy's health
// gate, every member of it, minConverged and minConvergedPct included, as
// copies: changing the fleet afterwards does not change the manifest.
func TestProjectHealthGate(t *testing.T) {
	t.Parallel()
	f := stampedFixture(t)
	setPolicy(f, stablePolicy, func(p *proto.RolloutPolicy) {
		p.HealthGate = proto.HealthGate{
			ComplianceProbes:   &proto.ComplianceProbes{Required: true},
			MaxFailures:        ptr(1),
			MinConverged:       ptr(2),
			MinConvergedPct:    ptr(50),
			SystemdFailedUnits: &proto.SystemdFailedUnits{Max: 0},
		}
	})
	setPolicy(f, edgePolicy, func(p *proto.RolloutPolicy) { p.HealthGate = proto.HealthGate{MinConvergedPct: ptr(100)} })
	ms := byChannel(project(t, f))
	want := map[string]proto.HealthGate{
		"stable": {
			ComplianceProbes:   &proto.ComplianceProbes{Required: true},
			MaxFailures:        ptr(1),
			MinConverged:       ptr(2),
			MinConvergedPct:    ptr(50),
			SystemdFailedUnits: &proto.SystemdFailedUnits{Max: 0},
		},
		"edge": {MinConvergedPct: ptr(100)},
	}
	got := map[string]proto.HealthGate{}
	for ch, m := range ms {
		got[ch] = m.HealthGate
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("healthGate by channel (-want +got):\n%s", diff)
	}
	b, err := manifest.Marshal(ms["stable"])
	if err != nil {
		t.Fatal(err)
	}
	const gate = `"healthGate":{"complianceProbes":{"required":true},"maxFailures":1,"minConverged":2,"minConvergedPct":50,"systemdFailedUnits":{"max":0}}`
	if !bytes.Contains(b, []byte(gate)) {
		t.Errorf("the stable manifest does not hold %s:\n%s", gate, b)
	}
	g := f.RolloutPolicies[stablePolicy].HealthGate
	*g.MinConverged, *g.MinConvergedPct = 7, 70
	if got := ms["stable"].HealthGate; *got.MinConverged != 2 || *got.MinConvergedPct != 50 {
		t.Errorf("the manifest shares the fleet's gate: minConverged %d, minConvergedPct %d", *got.MinConverged, *got.MinConvergedPct)
	}
}

// TestProjectHostSet covers which hosts a manifest lists, and at which wave.
func TestProjectHostSet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(f *proto.FleetResolved)
		// want maps channel to "host:wave" entries, in hostSet order.
		want map[string][]string
	}{
		{
			name: "fixture",
			want: map[string][]string{
				"edge":   {"edge-01:0", "edge-02:0"},
				"stable": {"canary-01:0", "db-01:2", "web-01:1", "web-02:1"},
			},
		},
		{
			name: "other channels' hosts are filtered without renumbering",
			mutate: func(f *proto.FleetResolved) {
				f.Waves["edge"] = []proto.Wave{
					{Hosts: []string{"canary-01", "web-01"}},
					{Hosts: []string{"edge-02", "db-01"}},
					{Hosts: []string{"web-02", "edge-01", "edge-02"}},
				}
			},
			want: map[string][]string{
				"edge":   {"edge-01:2", "edge-02:1"},
				"stable": {"canary-01:0", "db-01:2", "web-01:1", "web-02:1"},
			},
		},
		{
			name: "empty leading waves keep their index",
			mutate: func(f *proto.FleetResolved) {
				f.Waves["stable"] = append([]proto.Wave{{Hosts: []string{}}, {Hosts: nil}}, f.Waves["stable"]...)
			},
			want: map[string][]string{
				"edge":   {"edge-01:0", "edge-02:0"},
				"stable": {"canary-01:2", "db-01:4", "web-01:3", "web-02:3"},
			},
		},
		{
			name: "a host listed twice in one wave",
			mutate: func(f *proto.FleetResolved) {
				f.Waves["stable"][1].Hosts = append(f.Waves["stable"][1].Hosts, "web-01", "db-01")
			},
			want: map[string][]string{
				"edge":   {"edge-01:0", "edge-02:0"},
				"stable": {"canary-01:0", "db-01:1", "web-01:1", "web-02:1"},
			},
		},
		{
			name: "hosts without closureHash are excluded",
			mutate: func(f *proto.FleetResolved) {
				setHost(f, "edge-02", func(h *proto.Host) { h.ClosureHash = nil })
				setHost(f, "canary-01", func(h *proto.Host) { h.ClosureHash = nil })
				removeFromWaves(f, "stable", "canary-01")
			},
			want: map[string][]string{
				"edge": {"edge-01:0"},
				// canary-01's removal leaves wave 0 empty; nothing renumbers.
				"stable": {"db-01:2", "web-01:1", "web-02:1"},
			},
		},
		{
			name: "a channel without hosts gets an empty hostSet",
			mutate: func(f *proto.FleetResolved) {
				addChannel(f, "beta")
			},
			want: map[string][]string{
				"beta":   {},
				"edge":   {"edge-01:0", "edge-02:0"},
				"stable": {"canary-01:0", "db-01:2", "web-01:1", "web-02:1"},
			},
		},
		{
			// An empty wave list, as the reference library writes for
			// strategy all-at-once: one wave, 0, holding every host of
			// the channel that has a closure.
			name: "an all-at-once channel puts every host in wave 0",
			mutate: func(f *proto.FleetResolved) {
				f.Waves["stable"] = []proto.Wave{}
				setHost(f, "db-01", func(h *proto.Host) { h.ClosureHash = nil })
			},
			want: map[string][]string{
				"edge":   {"edge-01:0", "edge-02:0"},
				"stable": {"canary-01:0", "web-01:0", "web-02:0"},
			},
		},
		{
			name: "hostSet is sorted by hostname, not by wave or insertion",
			mutate: func(f *proto.FleetResolved) {
				addHost(f, "Zulu", "edge")
				addHost(f, "alpha", "edge")
				addHost(f, "edge-00", "edge")
				f.Waves["edge"] = []proto.Wave{{Hosts: []string{"edge-00"}}, f.Waves["edge"][0]}
			},
			want: map[string][]string{
				"edge":   {"Zulu:1", "alpha:1", "edge-00:0", "edge-01:1", "edge-02:1"},
				"stable": {"canary-01:0", "db-01:2", "web-01:1", "web-02:1"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := stampedFixture(t)
			if tt.mutate != nil {
				tt.mutate(f)
			}
			got := map[string][]string{}
			for _, m := range project(t, f) {
				entries := []string{}
				for _, hw := range m.HostSet {
					entries = append(entries, fmt.Sprintf("%s:%d", hw.Hostname, hw.WaveIndex))
					if want := *f.Hosts[hw.Hostname].ClosureHash; hw.TargetClosure != want {
						t.Errorf("%s: %s targets %q, want %q", m.Channel, hw.Hostname, hw.TargetClosure, want)
					}
				}
				got[m.Channel] = entries
				b, err := manifest.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Contains(b, []byte(`"hostSet":[`)) {
					t.Errorf("%s: hostSet is not encoded as an array: %s", m.Channel, b)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("hostSets (-want +got):\n%s", diff)
			}
		})
	}
}

// TestProjectBudgets covers the frozen disruption budgets.
func TestProjectBudgets(t *testing.T) {
	t.Parallel()
	f := stampedFixture(t)
	setHost(f, "edge-02", func(h *proto.Host) { h.ClosureHash = nil })
	f.DisruptionBudgets = []proto.DisruptionBudget{
		{
			Selector:    proto.Selector{Tags: []string{"web", "canary", "web"}, Hosts: []string{"web-02", "db-01", "web-02"}, Channel: ptr("")},
			MaxInFlight: ptr(2),
		},
		{Selector: proto.Selector{Channel: ptr("edge")}, MaxInFlightPct: ptr(50)},
		{Selector: proto.Selector{TagsAny: []string{"lab", "db"}}, MaxInFlight: ptr(3), MaxInFlightPct: ptr(100)},
		{Selector: proto.Selector{Tags: []string{"nope"}}, MaxInFlight: ptr(1)},
	}
	ms := project(t, f)
	want := []proto.RolloutBudget{
		{
			// Normalized: sorted, de-duplicated, empty channel cleared.
			Selector:    proto.Selector{Tags: []string{"canary", "web"}, Hosts: []string{"db-01", "web-02"}},
			Hosts:       []string{"canary-01", "db-01", "web-02"},
			MaxInFlight: ptr(2),
		},
		{
			// Resolved against all fleet hosts: edge hosts appear in the
			// stable manifest too, and edge-02 counts without a closure.
			Selector:       proto.Selector{Channel: ptr("edge")},
			Hosts:          []string{"edge-01", "edge-02"},
			MaxInFlightPct: ptr(50),
		},
		{
			Selector:       proto.Selector{TagsAny: []string{"db", "lab"}},
			Hosts:          []string{"db-01", "edge-01", "edge-02"},
			MaxInFlight:    ptr(3),
			MaxInFlightPct: ptr(100),
		},
		{
			Selector:    proto.Selector{Tags: []string{"nope"}},
			Hosts:       []string{},
			MaxInFlight: ptr(1),
		},
	}
	var encoded [][]byte
	for _, m := range ms {
		if diff := cmp.Diff(want, m.DisruptionBudgets); diff != "" {
			t.Errorf("%s: budgets (-want +got):\n%s", m.Channel, diff)
		}
		b, err := json.Marshal(m.DisruptionBudgets)
		if err != nil {
			t.Fatal(err)
		}
		encoded = append(encoded, b)
	}
	for i := 1; i < len(encoded); i++ {
		if !bytes.Equal(encoded[0], encoded[i]) {
			t.Errorf("budgets of %s and %s encode differently:\n%s\n%s", ms[0].Channel, ms[i].Channel, encoded[0], encoded[i])
		}
	}
	b, err := manifest.Marshal(ms[0])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`{"hosts":[],"maxInFlight":1,"selector":{"tags":["nope"]}}`)) {
		t.Errorf("an empty budget host list must encode as []: %s", b)
	}

	// Frozen: changing the fleet after projection changes no manifest.
	before, err := manifest.Marshal(ms[1])
	if err != nil {
		t.Fatal(err)
	}
	addHost(f, "web-03", "stable", "web", "canary")
	f.DisruptionBudgets[0].Selector.Tags[0] = "db"
	f.DisruptionBudgets[1].Selector.Channel = ptr("stable")
	f.DisruptionBudgets = append(f.DisruptionBudgets, proto.DisruptionBudget{Selector: proto.Selector{All: true}})
	after, err := manifest.Marshal(ms[1])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("manifest changed when the fleet changed after projection:\n%s\n%s", before, after)
	}
}

func TestProjectNoBudgets(t *testing.T) {
	t.Parallel()
	f := stampedFixture(t)
	f.DisruptionBudgets = nil
	for _, m := range project(t, f) {
		b, err := manifest.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(`"disruptionBudgets":[]`)) {
			t.Errorf("%s: no budgets must encode as []: %s", m.Channel, b)
		}
	}
}

func TestProjectRolloutID(t *testing.T) {
	t.Parallel()
	for _, commit := range []string{testCommit, "abc1234", strings.Repeat("f", 64)} {
		f := loadFixture(t)
		stamp(f, testSignedAt, commit)
		const hash = "5e1f6e2c1b0a9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706"
		ms, err := manifest.Project(f, hash)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.ChannelRef != commit || m.RolloutID() != m.Channel+"@"+commit || m.FleetResolvedHash != hash {
				t.Errorf("channel %s: channelRef %q, rolloutId %q, fleetResolvedHash %q; want ref %q, hash %q",
					m.Channel, m.ChannelRef, m.RolloutID(), m.FleetResolvedHash, commit, hash)
			}
			if m.Meta.CICommit == nil || *m.Meta.CICommit != commit || m.Meta.SignedAt == nil || *m.Meta.SignedAt != testSignedAt {
				t.Errorf("channel %s: meta not copied: %+v", m.Channel, m.Meta)
			}
		}
	}
}

func TestProjectErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(f *proto.FleetResolved)
		wantErr string
	}{
		{
			name:    "no meta.ciCommit",
			mutate:  func(f *proto.FleetResolved) { f.Meta.CICommit = nil },
			wantErr: "fleet has no meta.ciCommit",
		},
		{
			name:    "empty meta.ciCommit",
			mutate:  func(f *proto.FleetResolved) { f.Meta.CICommit = ptr("") },
			wantErr: "fleet has no meta.ciCommit",
		},
		{
			name: "unknown rollout policy",
			mutate: func(f *proto.FleetResolved) {
				setChannel(f, "edge", func(c *proto.Channel) { c.RolloutPolicy = "nope" })
			},
			wantErr: `channel "edge": rollout policy "nope" does not exist`,
		},
		{
			name:    "host in no wave of its channel",
			mutate:  func(f *proto.FleetResolved) { removeFromWaves(f, "edge", "edge-02") },
			wantErr: `host "edge-02": no wave of channel "edge" lists it`,
		},
		{
			// null is an absent member (0001 §1), not an empty list.
			name:    "null wave list",
			mutate:  func(f *proto.FleetResolved) { f.Waves["edge"] = nil },
			wantErr: `host "edge-01": no wave of channel "edge" lists it`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := stampedFixture(t)
			tt.mutate(f)
			ms, err := manifest.Project(f, strings.Repeat("0", 64))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Project error = %v, want one containing %q", err, tt.wantErr)
			}
			if ms != nil {
				t.Errorf("Project returned manifests with its error: %v", ms)
			}
		})
	}
}

// TestProjectDeterministic projects freshly decoded fleets (new maps, new
// iteration orders) and requires identical bytes every time.
func TestProjectDeterministic(t *testing.T) {
	t.Parallel()
	fleets := map[string]func() *proto.FleetResolved{
		"fixture": func() *proto.FleetResolved { return stampedFixture(t) },
		"synthetic": func() *proto.FleetResolved {
			f := syntheticFleet(200)
			// Round-trip through JSON so each run has new maps.
			b, err := json.Marshal(f)
			if err != nil {
				t.Fatal(err)
			}
			g, err := proto.DecodeFleetResolved(b)
			if err != nil {
				t.Fatal(err)
			}
			return g
		},
	}
	for name, fleet := range fleets {
		var first [][]byte
		for run := range 20 {
			f := fleet()
			ms, err := manifest.Project(f, strings.Repeat("a", 64))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var got [][]byte
			for _, m := range ms {
				b, err := manifest.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, b)
			}
			if run == 0 {
				first = got
				continue
			}
			if len(got) != len(first) {
				t.Fatalf("%s run %d: %d manifests, run 0 had %d", name, run, len(got), len(first))
			}
			for i := range got {
				if !bytes.Equal(got[i], first[i]) {
					t.Fatalf("%s run %d: manifest %d differs from run 0", name, run, i)
				}
			}
		}
	}
}

// TestMarshalCanonical checks that Marshal's output is its own JCS form and
// survives a strict decode and re-marshal unchanged.
func TestMarshalCanonical(t *testing.T) {
	t.Parallel()
	f := stampedFixture(t)
	// Characters encoding/json escapes but JCS writes literally.
	setHost(f, "web-01", func(h *proto.Host) { h.Tags = append(h.Tags, "<a&b>\u2028é") })
	f.DisruptionBudgets = append(f.DisruptionBudgets, proto.DisruptionBudget{
		Selector:    proto.Selector{Tags: []string{"<a&b>\u2028é"}},
		MaxInFlight: ptr(1),
	})
	f.Meta.SignatureAlgorithm = proto.AlgorithmEd25519
	ms := project(t, f)
	ms = append(ms, project(t, syntheticFleet(300))...)
	for _, m := range ms {
		b, err := manifest.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		c, err := trust.Canonicalize(b)
		if err != nil {
			t.Fatalf("%s: Canonicalize: %v", m.Channel, err)
		}
		if !bytes.Equal(c, b) {
			t.Errorf("%s: Marshal output is not canonical:\n%s\n%s", m.Channel, b, c)
		}
		canonical, err := proto.CheckSyntax(b, proto.KindRolloutManifest)
		if err != nil || !canonical {
			t.Errorf("%s: CheckSyntax = %v, %v; want canonical", m.Channel, canonical, err)
		}
		back, err := proto.DecodeRolloutManifest(b)
		if err != nil {
			t.Fatalf("%s: strict decode: %v", m.Channel, err)
		}
		again, err := manifest.Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, b) {
			t.Errorf("%s: decode + Marshal changed the bytes:\n%s\n%s", m.Channel, b, again)
		}
	}
	b, err := manifest.Marshal(ms[1])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("\"<a&b>\u2028é\"")) {
		t.Errorf("JCS writes <, &, > and U+2028 literally: %s", b)
	}
}

// TestProjectDoesNotMutate checks that Project leaves the fleet alone.
func TestProjectDoesNotMutate(t *testing.T) {
	t.Parallel()
	f := stampedFixture(t)
	f.DisruptionBudgets[0].Selector.Tags = []string{"web", "canary", "web"}
	before, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	project(t, f)
	after, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(before), string(after)); diff != "" {
		t.Fatalf("Project changed the fleet (-before +after):\n%s", diff)
	}
}

// TestProjectProperties projects seeded random fleets and checks the
// projection rules against a direct reading of them.
func TestProjectProperties(t *testing.T) {
	t.Parallel()
	for seed := range uint64(200) {
		f := randomFleet(rand.New(rand.NewPCG(seed, 0x6e6978)))
		ms, err := manifest.Project(f, strings.Repeat("b", 64))
		if err != nil {
			t.Fatalf("seed %d: Project: %v", seed, err)
		}
		checkProjection(t, fmt.Sprintf("seed %d", seed), f, ms)
	}
}

// checkProjection checks ms against the rules of Project, computed
// naively from f.
func checkProjection(t *testing.T, label string, f *proto.FleetResolved, ms []*proto.RolloutManifest) {
	t.Helper()
	var channels []string
	for name := range f.Channels {
		channels = append(channels, name)
	}
	slices.Sort(channels)
	if len(ms) != len(channels) {
		t.Fatalf("%s: %d manifests for %d channels", label, len(ms), len(channels))
	}
	var wantBudgets []proto.RolloutBudget
	for _, b := range f.DisruptionBudgets {
		hosts := []string{}
		for name, h := range f.Hosts {
			if b.Selector.Matches(name, h) {
				hosts = append(hosts, name)
			}
		}
		slices.Sort(hosts)
		wantBudgets = append(wantBudgets, proto.RolloutBudget{
			Selector: b.Selector.Normalized(), Hosts: hosts, MaxInFlight: b.MaxInFlight, MaxInFlightPct: b.MaxInFlightPct,
		})
	}
	if wantBudgets == nil {
		wantBudgets = []proto.RolloutBudget{}
	}
	for i, m := range ms {
		ch := channels[i]
		if m.Channel != ch {
			t.Fatalf("%s: manifest %d is for %q, want %q (channel-name order)", label, i, m.Channel, ch)
		}
		want := []proto.HostWave{}
		for name, h := range f.Hosts {
			if h.Channel != ch || h.ClosureHash == nil {
				continue
			}
			wave := -1
			for wi := len(f.Waves[ch]) - 1; wi >= 0; wi-- {
				if slices.Contains(f.Waves[ch][wi].Hosts, name) {
					wave = wi
				}
			}
			want = append(want, proto.HostWave{Hostname: name, WaveIndex: wave, TargetClosure: *h.ClosureHash})
		}
		slices.SortFunc(want, func(a, b proto.HostWave) int { return strings.Compare(a.Hostname, b.Hostname) })
		if diff := cmp.Diff(want, m.HostSet); diff != "" {
			t.Fatalf("%s: %s hostSet (-want +got):\n%s", label, ch, diff)
		}
		if diff := cmp.Diff(wantBudgets, m.DisruptionBudgets); diff != "" {
			t.Fatalf("%s: %s budgets (-want +got):\n%s", label, ch, diff)
		}
		if m.ChannelRef != *f.Meta.CICommit || m.RolloutID() != ch+"@"+*f.Meta.CICommit {
			t.Fatalf("%s: %s channelRef %q / rolloutId %q", label, ch, m.ChannelRef, m.RolloutID())
		}
		c := f.Channels[ch]
		if m.FreshnessWindow != c.FreshnessWindow {
			t.Fatalf("%s: %s freshnessWindow %d, want %d", label, ch, m.FreshnessWindow, c.FreshnessWindow)
		}
		wantFw := c.Compliance.Frameworks
		if wantFw == nil {
			wantFw = []string{}
		}
		if diff := cmp.Diff(wantFw, m.ComplianceFrameworks); diff != "" {
			t.Fatalf("%s: %s complianceFrameworks (-want +got):\n%s", label, ch, diff)
		}
		if diff := cmp.Diff(f.RolloutPolicies[c.RolloutPolicy].HealthGate, m.HealthGate); diff != "" {
			t.Fatalf("%s: %s healthGate (-want +got):\n%s", label, ch, diff)
		}
	}
}

// randomFleet builds a small fleet with random hosts, tags, closures,
// fleet-wide wave lists and budgets. Every host with a closure is listed by
// at least one wave of its channel, so it projects without error.
func randomFleet(r *rand.Rand) *proto.FleetResolved {
	tags := []string{"web", "db", "lab", "canary", "gpu"}
	nch := 1 + r.IntN(4)
	f := &proto.FleetResolved{
		SchemaVersion:   1,
		Hosts:           map[string]proto.Host{},
		Channels:        map[string]proto.Channel{},
		RolloutPolicies: map[string]proto.RolloutPolicy{},
		Waves:           map[string][]proto.Wave{},
		Meta:            proto.Meta{SchemaVersion: ptr(1), SignedAt: ptr(testSignedAt), CICommit: ptr(fmt.Sprintf("%040x", r.Uint64()))},
	}
	var channels []string
	for i := range nch {
		name := fmt.Sprintf("ch%d", i)
		channels = append(channels, name)
		policy := fmt.Sprintf("policy-%d", i)
		var frameworks []string
		if r.IntN(2) == 0 {
			frameworks = []string{"nis2", "soc2"}[:r.IntN(3)]
		}
		f.Channels[name] = proto.Channel{RolloutPolicy: policy, FreshnessWindow: 60 + r.IntN(1000), Compliance: proto.Compliance{Frameworks: frameworks}}
		gate := proto.HealthGate{}
		if r.IntN(2) == 0 {
			gate.MaxFailures = ptr(r.IntN(3))
		}
		f.RolloutPolicies[policy] = proto.RolloutPolicy{OnHealthFailure: proto.OnHealthFailureHalt, HealthGate: gate}
		f.Waves[name] = make([]proto.Wave, 1+r.IntN(4))
	}
	nh := r.IntN(40)
	var hosts []string
	for i := range nh {
		name := fmt.Sprintf("h%02d-%c", r.IntN(100), 'a'+rune(i%26))
		if _, dup := f.Hosts[name]; dup {
			continue
		}
		hosts = append(hosts, name)
		var ht []string
		for _, tag := range tags {
			if r.IntN(3) == 0 {
				ht = append(ht, tag)
			}
		}
		h := proto.Host{Tags: ht, Channel: channels[r.IntN(nch)]}
		if r.IntN(8) != 0 {
			h.ClosureHash = ptr(closureFor(name))
		}
		f.Hosts[name] = h
		// Its own channel lists it at least once, if it has a closure.
		if h.ClosureHash != nil {
			w := f.Waves[h.Channel]
			wi := r.IntN(len(w))
			w[wi].Hosts = append(w[wi].Hosts, name)
		}
	}
	// Noise: hosts listed by other channels' waves, and repeats.
	for range r.IntN(30) {
		if len(hosts) == 0 {
			break
		}
		w := f.Waves[channels[r.IntN(nch)]]
		wi := r.IntN(len(w))
		w[wi].Hosts = append(w[wi].Hosts, hosts[r.IntN(len(hosts))])
	}
	for _, w := range f.Waves {
		for i := range w {
			r.Shuffle(len(w[i].Hosts), func(a, b int) { w[i].Hosts[a], w[i].Hosts[b] = w[i].Hosts[b], w[i].Hosts[a] })
		}
	}
	for range r.IntN(5) {
		var sel proto.Selector
		switch r.IntN(5) {
		case 0:
			sel.All = true
		case 1:
			sel.Tags = []string{tags[r.IntN(len(tags))], tags[r.IntN(len(tags))]}
		case 2:
			sel.TagsAny = []string{tags[r.IntN(len(tags))], tags[r.IntN(len(tags))]}
		case 3:
			sel.Channel = ptr(channels[r.IntN(nch)])
		case 4:
			for range r.IntN(4) {
				if len(hosts) > 0 {
					sel.Hosts = append(sel.Hosts, hosts[r.IntN(len(hosts))])
				}
			}
		}
		b := proto.DisruptionBudget{Selector: sel}
		if r.IntN(2) == 0 {
			b.MaxInFlight = ptr(1 + r.IntN(5))
		} else {
			b.MaxInFlightPct = ptr(1 + r.IntN(100))
		}
		f.DisruptionBudgets = append(f.DisruptionBudgets, b)
	}
	return f
}

// TestProjectMinimalFleet checks that a fleet without channels projects to
// no manifest, without error.
func TestProjectMinimalFleet(t *testing.T) {
	t.Parallel()
	f, err := proto.DecodeFleetResolved([]byte(`{"schemaVersion":1,"hosts":{},"channels":{},"meta":{"ciCommit":"abcdef0"}}`))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := manifest.Project(f, strings.Repeat("c", 64))
	if err != nil || len(ms) != 0 {
		t.Fatalf("Project = %v, %v; want no manifest and no error", ms, err)
	}
}
