package proto_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/internal/fleetrepo"
	"github.com/nixfleet/nixfleet/internal/testkit/schematest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/release"
	"github.com/nixfleet/nixfleet/trust"
)

// The JSON Schemas in schema/ are the artifacts' contract for other
// implementations (mkFleet, the Rust reference, a forge). These tests hold
// them to the Go types both ways, validate real artifacts against them
// with a maintained validator, and show that they refuse what the Go side
// refuses.

// schemaFiles maps each schema to the Go type of the document it describes.
var schemaFiles = []struct {
	file string
	root reflect.Type
	// open lists the Go types whose schema objects accept members the
	// type does not declare (fleet.resolved's meta is CI's provenance).
	open []reflect.Type
	// requiredByAlias lists fields not in "required" because an
	// alternative spelling may stand for them (a oneOf in the schema).
	requiredByAlias map[reflect.Type][]string
	// nonNull lists pointer fields the schema does not let be null (a
	// manifest is always signed, so its meta is always stamped).
	nonNull map[reflect.Type][]string
}{
	{
		file: "fleet.resolved.schema.json", root: reflect.TypeFor[proto.FleetResolved](),
		open:            []reflect.Type{reflect.TypeFor[proto.Meta]()},
		requiredByAlias: map[reflect.Type][]string{reflect.TypeFor[proto.ChannelEdge](): {"gates", "gated"}},
	},
	{
		file: "rollout-manifest.schema.json", root: reflect.TypeFor[proto.RolloutManifest](),
		nonNull: map[reflect.Type][]string{reflect.TypeFor[proto.Meta](): {"ciCommit", "signedAt"}},
	},
	{file: "trust.schema.json", root: reflect.TypeFor[proto.TrustFile]()},
	{file: "operators.schema.json", root: reflect.TypeFor[[]controlplane.Operator]()},
}

const schemaDir = "../schema"

func readSchemaDoc(t *testing.T, file string) map[string]any {
	t.Helper()
	return schematest.Read(t, schemaDir, file)
}

// schemaSet compiles the schema files, for one test.
type schemaSet struct{ *schematest.Set }

func compileAll(t *testing.T) schemaSet {
	t.Helper()
	s := schemaSet{schematest.NewSet(t, schemaDir)}
	for _, f := range schemaFiles {
		s.Schema(f.file)
	}
	return s
}

// schemaCheck validates a document, given as bytes, against a schema.
var schemaCheck = schematest.Validate

func (s schemaSet) fleet() *jsonschema.Schema     { return s.Schema("fleet.resolved.schema.json") }
func (s schemaSet) manifest() *jsonschema.Schema  { return s.Schema("rollout-manifest.schema.json") }
func (s schemaSet) trust() *jsonschema.Schema     { return s.Schema("trust.schema.json") }
func (s schemaSet) operators() *jsonschema.Schema { return s.Schema("operators.schema.json") }

// TestSchemaMatchesGoTypes walks each schema and its Go type in parallel
// from the root: every JSON field of every struct reached (through
// pointers, slices and maps) is a property of the matching schema object,
// with a description and a JSON type that fits the Go type; it is in
// "required" when it is not omitempty/omitzero and never when it is (a
// pointer field, absent or null, may be either); every property is a
// field; objects refuse members they do not declare.
func TestSchemaMatchesGoTypes(t *testing.T) {
	t.Parallel()
	for _, f := range schemaFiles {
		t.Run(f.file, func(t *testing.T) {
			t.Parallel()
			doc := readSchemaDoc(t, f.file)
			if got := doc["$schema"]; got != "https://json-schema.org/draft/2020-12/schema" {
				t.Errorf("$schema = %v, want draft 2020-12", got)
			}
			desc, _ := doc["description"].(string)
			if !strings.Contains(desc, "Go") {
				t.Errorf("top-level description does not say the Go code checks more: %q", desc)
			}
			schematest.CheckType(t, schemaDir, f.file, f.root, schematest.Options{
				Open: f.open, RequiredByAlias: f.requiredByAlias, NonNull: f.nonNull, AbsentIsNull: true,
			})
		})
	}
}

// TestSchemaDocumentation checks what the parallel walk cannot: every
// property anywhere has a description, every definition is used, and the
// definitions the rollout manifest shares with fleet.resolved are the
// same text in both files.
func TestSchemaDocumentation(t *testing.T) {
	t.Parallel()
	for _, f := range schemaFiles {
		raw, err := os.ReadFile(filepath.Join(schemaDir, f.file))
		if err != nil {
			t.Fatal(err)
		}
		doc := readSchemaDoc(t, f.file)
		var walk func(v any, where string)
		walk = func(v any, where string) {
			switch x := v.(type) {
			case map[string]any:
				if props, ok := x["properties"].(map[string]any); ok {
					for name, p := range props {
						if d, _ := p.(map[string]any)["description"].(string); strings.TrimSpace(d) == "" {
							t.Errorf("%s: %s/properties/%s has no description", f.file, where, name)
						}
					}
				}
				for k, c := range x {
					walk(c, where+"/"+k)
				}
			case []any:
				for _, c := range x {
					walk(c, where+"/[]")
				}
			}
		}
		walk(doc, "#")
		defs, _ := doc["$defs"].(map[string]any)
		for name, d := range defs {
			if s, _ := d.(map[string]any)["description"].(string); s == "" {
				t.Errorf("%s: $defs/%s has no description", f.file, name)
			}
			if !bytes.Contains(raw, []byte(`"#/$defs/`+name+`"`)) {
				t.Errorf("%s: $defs/%s is never referenced", f.file, name)
			}
		}
	}
	fleetDefs := readSchemaDoc(t, "fleet.resolved.schema.json")["$defs"].(map[string]any)
	shared := 0
	for name, d := range readSchemaDoc(t, "rollout-manifest.schema.json")["$defs"].(map[string]any) {
		fd, ok := fleetDefs[name]
		if !ok || name == "Meta" { // the manifest's meta is closed and always signed
			continue
		}
		shared++
		if diff := cmp.Diff(fd, d); diff != "" {
			t.Errorf("$defs/%s differs between fleet.resolved and rollout-manifest (-fleet +manifest):\n%s", name, diff)
		}
	}
	if shared < 10 {
		t.Errorf("only %d definitions shared by fleet.resolved and rollout-manifest", shared)
	}
}

// richSpec is a test fleet that uses every optional part of the format:
// two staged channels and one rolled out all at once, budgets (named and
// not), a channel edge, maintenance windows, a freeze, an approval gate and
// a canary analysis.
func richSpec() fleetrepo.Spec {
	stable, edge := "stable", "edge"
	pct := 50
	one := 1
	return fleetrepo.Spec{
		Channels: map[string][]int{"stable": {10, 30}, "edge": {0}, "lab": nil},
		Hosts: []fleetrepo.Host{
			fleetrepo.NewHost("canary-01", "stable", 0, "canary", "web"),
			fleetrepo.NewHost("web-01", "stable", 1, "web"),
			fleetrepo.NewHost("web-02", "stable", 1, "web"),
			fleetrepo.NewHost("edge-01", "edge", 0, "edge"),
			fleetrepo.NewHost("lab-01", "lab", 0, "lab"),
			fleetrepo.NewHost("lab-02", "lab", 0, "lab"),
		},
		Budgets: []proto.DisruptionBudget{
			{Name: "web", Selector: proto.Selector{Tags: []string{"web"}}, MaxInFlight: &one},
			{Selector: proto.Selector{Channel: &stable}, MaxInFlightPct: &pct},
			{Selector: proto.Selector{All: true}, MaxInFlight: &one, MaxInFlightPct: &pct},
		},
		ChannelEdges: []proto.ChannelEdge{{Gates: edge, Gated: stable, Reason: "edge first"}},
		Windows:      []proto.Window{{Days: []string{"mon", "tue", "wed"}, Start: "02:30", DurationMinutes: 180, TimeZone: "Europe/Berlin"}},
		Freezes: []proto.Freeze{{From: time.Date(2026, 12, 20, 0, 0, 0, 0, time.UTC), Until: time.Date(2027, 1, 2, 0, 0, 0, 0, time.UTC),
			Reason: "year end", Channels: []string{"stable"}}},
		Approvals: map[string]map[int]proto.Approval{"stable": {1: {Required: true, Approvers: 2}}},
		Analysis: []proto.Analysis{{Name: "error-rate", Query: `sum(rate(errors_total{host=~"{{ .HostsRegex }}"}[2m]))`,
			SuccessCondition: "result < 0.01", FailureCondition: "result > 0.05", Interval: "1m", Count: 5, InconclusiveLimit: 1, Source: "team-a"},
			{Name: "vs-baseline", Query: `max(errors{host=~"{{ .HostsRegex }}"})`, SuccessCondition: "result < 0.5", Interval: "5m", Count: 3,
				Compare: &proto.Comparison{Worse: proto.WorseHigher, Effect: "0.01", Confidence: "0.95", MinSamples: 10, Window: "10m", Step: "30s"}}},
	}
}

type signedRelease struct {
	fleet     []byte
	manifests map[string][]byte
	trust     []byte
}

// makeRelease signs a spec's fleet as CI does (fleetrepo, which runs
// release.Sign and release.WriteDir, the library behind `nixfleet release
// sign`) and reads back what it wrote.
func makeRelease(t *testing.T, spec fleetrepo.Spec, algorithm string, commits ...string) []signedRelease {
	t.Helper()
	repo, err := fleetrepo.Init(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if repo.Key, err = trust.GenerateKey(algorithm); err != nil {
		t.Fatal(err)
	}
	var out []signedRelease
	for i, commit := range commits {
		unsigned, err := spec.Fleet("v" + commit[:4])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := repo.Release(unsigned, commit, time.Date(2026, 11, 1, 12, i, 0, 0, time.UTC)); err != nil {
			t.Fatal(err)
		}
		r := signedRelease{manifests: map[string][]byte{}, trust: repo.TrustJSON()}
		if r.fleet, err = os.ReadFile(filepath.Join(repo.Dir, "releases", release.FleetFile)); err != nil {
			t.Fatal(err)
		}
		paths, err := filepath.Glob(filepath.Join(repo.Dir, "releases", release.RolloutsDir, "*.json"))
		if err != nil || len(paths) == 0 {
			t.Fatalf("no manifests written: %v", err)
		}
		for _, p := range paths {
			if r.manifests[filepath.Base(p)], err = os.ReadFile(p); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, r)
	}
	return out
}

// TestSchemaRealArtifacts validates what the repository really produces
// and holds: releases signed by the release step (ed25519 and ecdsa-p256),
// their manifests and trust.json, the fixtures, mkFleet's golden outputs,
// the trust vectors, a rotation trust.json and operators files.
func TestSchemaRealArtifacts(t *testing.T) {
	t.Parallel()
	s := compileAll(t)

	t.Run("signed releases", func(t *testing.T) {
		t.Parallel()
		rels := makeRelease(t, richSpec(), proto.AlgorithmEd25519, "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222")
		rels = append(rels, makeRelease(t, fleetrepo.Spec{
			Channels: map[string][]int{"prod": {5}},
			Hosts:    []fleetrepo.Host{fleetrepo.NewHost("db-1", "prod", 0, "db")},
		}, proto.AlgorithmECDSAP256, "3333333")...)
		manifests := 0
		for _, r := range rels {
			if err := schemaCheck(s.fleet(), r.fleet); err != nil {
				t.Errorf("signed fleet.resolved: %v", err)
			}
			f, err := proto.DecodeFleetResolved(r.fleet)
			if err != nil || f.Meta.SignedAt == nil {
				t.Fatalf("signed fleet.resolved does not decode as signed: %v", err)
			}
			for name, m := range r.manifests {
				manifests++
				if err := schemaCheck(s.manifest(), m); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
			if err := schemaCheck(s.trust(), r.trust); err != nil {
				t.Errorf("trust.json: %v", err)
			}
		}
		if manifests != 3+3+1 {
			t.Errorf("validated %d manifests, want 7", manifests)
		}
		// The rich fleet really carries the optional parts.
		for _, part := range []string{`"freezes"`, `"windows"`, `"approval"`, `"analysis"`, `"channelEdges":[{`, `"maxInFlightPct"`, `"name":"web"`} {
			if !bytes.Contains(rels[0].fleet, []byte(part)) {
				t.Errorf("the signed rich fleet lacks %s", part)
			}
		}
	})

	t.Run("fixtures and mkFleet outputs", func(t *testing.T) {
		t.Parallel()
		paths, _ := filepath.Glob("../testdata/fleets/*.json")
		nix, _ := filepath.Glob("../testdata/nix/fleets/*.resolved.json")
		nixTests, _ := filepath.Glob("../nix/tests/fleets/*.resolved.json")
		paths = slices.Concat(paths, nix, nixTests)
		if len(paths) < 8 {
			t.Fatalf("found %d fleet fixtures", len(paths))
		}
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := proto.DecodeFleetResolved(data); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if err := schemaCheck(s.fleet(), data); err != nil {
				t.Errorf("%s: %v", p, err)
			}
		}
	})

	t.Run("trust vectors", func(t *testing.T) {
		t.Parallel()
		paths, _ := filepath.Glob("../testdata/trust/vectors/*.json")
		counts := map[string]int{}
		for _, p := range paths {
			var v struct {
				Kind         proto.Kind      `json:"kind"`
				Trust        json.RawMessage `json:"trust"`
				Artifact     string          `json:"artifact"`
				ExpectedCode string          `json:"expectedCode"`
			}
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &v); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if v.ExpectedCode != "ok" {
				continue
			}
			if err := schemaCheck(s.trust(), v.Trust); err != nil {
				t.Errorf("%s: trust: %v", p, err)
			}
			sch := s.fleet()
			if v.Kind == proto.KindRolloutManifest {
				sch = s.manifest()
			}
			// A verifier accepts members it does not know; the schema, a
			// producer's contract, accepts only extensions. The two agree
			// on every other member.
			unknown, err := proto.UnknownMembers([]byte(v.Artifact), v.Kind)
			if err != nil {
				t.Fatal(err)
			}
			extensions := len(unknown)
			unknown = slices.DeleteFunc(unknown, func(path []string) bool { return isExtension(v.Kind, path) })
			extensions -= len(unknown)
			err = schemaCheck(sch, []byte(v.Artifact))
			switch {
			case len(unknown) == 0 && err != nil:
				t.Errorf("%s: %s: %v", p, v.Kind, err)
			case len(unknown) > 0 && err == nil:
				t.Errorf("%s: the schema accepts members %v the format does not define", p, unknown)
			case len(unknown) > 0:
				counts["unknown members refused"]++
			default:
				counts[string(v.Kind)]++
				if extensions > 0 {
					counts["extensions accepted"]++
				}
			}
		}
		if counts[string(proto.KindFleetResolved)] < 10 || counts[string(proto.KindRolloutManifest)] < 2 || counts["extensions accepted"] < 1 {
			t.Errorf("too few vectors checked: %v", counts)
		}
	})

	t.Run("rotation trust.json", func(t *testing.T) {
		t.Parallel()
		key := func() *proto.PublicKey {
			k, err := trust.GenerateKey(proto.AlgorithmEd25519)
			if err != nil {
				t.Fatal(err)
			}
			p := k.Public().Proto()
			return &p
		}
		p256, err := trust.GenerateKey(proto.AlgorithmECDSAP256)
		if err != nil {
			t.Fatal(err)
		}
		prev := p256.Public().Proto()
		retire, reject := "2026-12-01T00:00:00Z", "2026-01-01T00:00:00+01:00"
		tf := proto.TrustFile{SchemaVersion: 1, CacheKeys: []string{"cache.example.org-1:" + base64.StdEncoding.EncodeToString(make([]byte, 32))},
			CIReleaseKey: proto.KeySlot{Current: key(), Previous: &prev, Successor: key(), RetireAt: &retire, RejectBefore: &reject}}
		data, err := json.Marshal(tf)
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := proto.DecodeTrustFile(data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := trust.NewRoots(decoded); err != nil {
			t.Fatal(err)
		}
		if err := schemaCheck(s.trust(), data); err != nil {
			t.Error(err)
		}
	})

	t.Run("operators", func(t *testing.T) {
		t.Parallel()
		pub1, _, _ := ed25519.GenerateKey(nil)
		pub2, _, _ := ed25519.GenerateKey(nil)
		ops := []map[string]any{
			{"name": "olga", "role": "operator", "key": trust.SSHEd25519Line(pub1) + " olga@laptop"},
			{"name": "avi", "role": "approver", "key": map[string]string{"algorithm": "ed25519", "public": base64.StdEncoding.EncodeToString(pub2)}},
			{"name": "vera", "role": "viewer", "key": trust.SSHEd25519Line(pub2)},
		}
		data := loadOperators(t, ops)
		if err := schemaCheck(s.operators(), data); err != nil {
			t.Error(err)
		}
	})
}

// loadOperators writes an operators file and checks the control plane
// loads it.
func loadOperators(t *testing.T, ops any) []byte {
	t.Helper()
	data, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "operators.json")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.LoadOperators(p); err != nil {
		t.Fatal(err)
	}
	return data
}

// isExtension is release.Sign's rule for a member a producer may add: one
// named "x-…", or, in a fleet.resolved, one in meta.
func isExtension(k proto.Kind, path []string) bool {
	return strings.HasPrefix(path[len(path)-1], "x-") || k == proto.KindFleetResolved && path[0] == "meta" && len(path) > 1
}

// mutate decodes a document, lets edit change it and encodes it again.
func mutate(t *testing.T, data []byte, edit func(doc map[string]any)) []byte {
	t.Helper()
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	edit(doc)
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func obj(doc map[string]any, path ...string) map[string]any {
	for _, p := range path {
		doc = doc[p].(map[string]any)
	}
	return doc
}

// TestSchemaRefusesBrokenDocuments breaks real documents one way at a time
// and checks the schema refuses each, and that the Go side agrees: the
// strict decoder refuses a wrong type and a member spelled in the wrong
// case; release.Sign (the producer's gate) refuses an unknown member and a
// missing required one, which a verifier's decoder tolerates by design
// (rfcs/0001 §1 rules 5 and 6).
func TestSchemaRefusesBrokenDocuments(t *testing.T) {
	t.Parallel()
	s := compileAll(t)
	unsigned, err := richSpec().Fleet("v1")
	if err != nil {
		t.Fatal(err)
	}
	key, err := trust.GenerateKey(proto.AlgorithmEd25519)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(doc []byte) error {
		_, err := release.Sign(doc, release.Options{Signer: key, Commit: "abcdef0", Now: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)})
		return err
	}
	if err := schemaCheck(s.fleet(), unsigned); err != nil {
		t.Fatalf("the unbroken fleet: %v", err)
	}
	if err := sign(unsigned); err != nil {
		t.Fatalf("the unbroken fleet: %v", err)
	}

	type goVerdict int
	const (
		decoderRefuses goVerdict = iota // proto.DecodeFleetResolved, and so release.Sign
		signRefuses                     // release.Sign only; a verifier tolerates it
		bothAccept                      // an extension
	)
	fleetCases := []struct {
		name string
		edit func(doc map[string]any)
		want goVerdict
	}{
		{"unknown host member", func(d map[string]any) { obj(d, "hosts", "web-01")["tagz"] = []any{"web"} }, signRefuses},
		{"unknown top-level member", func(d map[string]any) { d["budgets"] = []any{} }, signRefuses},
		{"unknown analysis member", func(d map[string]any) {
			obj(d, "rolloutPolicies", "stable", "healthGate")["analysis"].([]any)[0].(map[string]any)["treshold"] = json.Number("1")
		}, signRefuses},
		{"missing freshnessWindow", func(d map[string]any) { delete(obj(d, "channels", "stable"), "freshnessWindow") }, signRefuses},
		{"missing schemaVersion", func(d map[string]any) { delete(d, "schemaVersion") }, signRefuses},
		{"missing channel edge end", func(d map[string]any) { delete(d["channelEdges"].([]any)[0].(map[string]any), "gated") }, signRefuses},
		{"wrong type: tags a string", func(d map[string]any) { obj(d, "hosts", "web-01")["tags"] = "web" }, decoderRefuses},
		{"wrong type: soakMinutes a string", func(d map[string]any) {
			d["waves"].(map[string]any)["stable"].([]any)[0].(map[string]any)["soakMinutes"] = "10"
		}, decoderRefuses},
		{"wrong type: freshnessWindow a boolean", func(d map[string]any) { obj(d, "channels", "stable")["freshnessWindow"] = true }, decoderRefuses},
		{"member in the wrong case", func(d map[string]any) { obj(d, "hosts", "web-01")["ClosureHash"] = nil }, decoderRefuses},
		{"bootTimeoutMinutes past a day", func(d map[string]any) {
			obj(d, "rolloutPolicies", "stable")["reboot"] = map[string]any{"allowed": true, "bootTimeoutMinutes": json.Number("1441")}
		}, signRefuses},
		{"unknown reboot member", func(d map[string]any) {
			obj(d, "rolloutPolicies", "stable")["reboot"] = map[string]any{"allowed": true, "bootTimeoutMinutes": json.Number("15"), "timeout": json.Number("15")}
		}, signRefuses},
		{"unknown boot loader", func(d map[string]any) { obj(d, "hosts", "web-01")["bootLoader"] = "lilo" }, signRefuses},
		{"a reboot step, a wave that opts out and boot loaders", func(d map[string]any) {
			obj(d, "rolloutPolicies", "stable")["reboot"] = map[string]any{"allowed": true, "bootTimeoutMinutes": json.Number("15"), "kexec": true}
			obj(d, "rolloutPolicies", "stable")["waves"].([]any)[0].(map[string]any)["reboot"] = false
			d["waves"].(map[string]any)["stable"].([]any)[0].(map[string]any)["reboot"] = false
			obj(d, "hosts", "web-01")["bootLoader"] = "grub"
			obj(d, "hosts", "lab-01")["bootLoader"] = "none"
		}, bothAccept},
		{"extension member", func(d map[string]any) { obj(d, "hosts", "web-01")["x-rack"] = "r12" }, bothAccept},
		{"legacy channel edge spelling", func(d map[string]any) {
			e := d["channelEdges"].([]any)[0].(map[string]any)
			e["before"], e["after"] = e["gates"], e["gated"]
			delete(e, "gates")
			delete(e, "gated")
		}, bothAccept},
	}
	for _, tc := range fleetCases {
		t.Run("fleet/"+tc.name, func(t *testing.T) {
			t.Parallel()
			doc := mutate(t, unsigned, tc.edit)
			schemaErr := schemaCheck(s.fleet(), doc)
			_, decodeErr := proto.DecodeFleetResolved(doc)
			signErr := sign(doc)
			var ve *jsonschema.ValidationError
			switch tc.want {
			case bothAccept:
				if schemaErr != nil || decodeErr != nil || signErr != nil {
					t.Fatalf("want accepted: schema %v; decoder %v; release.Sign %v", schemaErr, decodeErr, signErr)
				}
				return
			case decoderRefuses:
				if !errors.Is(decodeErr, proto.ErrMalformed) {
					t.Errorf("the decoder accepts it: %v", decodeErr)
				}
			case signRefuses:
				if decodeErr != nil {
					t.Errorf("the decoder refuses it, want it tolerated: %v", decodeErr)
				}
			}
			if signErr == nil {
				t.Error("release.Sign accepts it")
			}
			if !errors.As(schemaErr, &ve) {
				t.Errorf("the schema accepts it: %v", schemaErr)
			}
		})
	}

	rel := makeRelease(t, richSpec(), proto.AlgorithmEd25519, "4444444444444444444444444444444444444444")[0]
	m := rel.manifests["stable@4444444444444444444444444444444444444444.json"]
	if m == nil {
		t.Fatalf("no stable manifest among %v", slices.Sorted(maps.Keys(rel.manifests)))
	}
	other := []brokenDoc{
		{"manifest/wrong type: waveIndex a string", s.manifest(),
			mutate(t, m, func(d map[string]any) { d["hostSet"].([]any)[0].(map[string]any)["waveIndex"] = "0" }), decodeManifest, false},
		{"manifest/member in the wrong case", s.manifest(),
			mutate(t, m, func(d map[string]any) { d["FleetResolvedHash"] = d["fleetResolvedHash"] }), decodeManifest, false},
		{"manifest/unknown member", s.manifest(),
			mutate(t, m, func(d map[string]any) { d["hostSett"] = []any{} }), decodeManifest, true},
		{"manifest/missing required hostSet", s.manifest(),
			mutate(t, m, func(d map[string]any) { delete(d, "hostSet") }), decodeManifest, true},
		{"manifest/hash not hex", s.manifest(),
			mutate(t, m, func(d map[string]any) { d["fleetResolvedHash"] = "sha256:abc" }), decodeManifest, true},
		{"trust/wrong type: schemaVersion a string", s.trust(),
			mutate(t, rel.trust, func(d map[string]any) { d["schemaVersion"] = "1" }), trustRoots, false},
		{"trust/missing required schemaVersion", s.trust(),
			mutate(t, rel.trust, func(d map[string]any) { delete(d, "schemaVersion") }), trustRoots, false},
		{"trust/bad time", s.trust(),
			mutate(t, rel.trust, func(d map[string]any) { obj(d, "ciReleaseKey")["rejectBefore"] = "2026-01-01 00:00" }), trustRoots, false},
		{"trust/unknown member", s.trust(),
			mutate(t, rel.trust, func(d map[string]any) { obj(d, "ciReleaseKey")["rejectBefor"] = "2026-01-01T00:00:00Z" }), trustRoots, true},
	}
	pub, _, _ := ed25519.GenerateKey(nil)
	line := trust.SSHEd25519Line(pub)
	for _, c := range []struct {
		name string
		op   map[string]any
	}{
		{"unknown role", map[string]any{"name": "olga", "role": "admin", "key": line}},
		{"missing key", map[string]any{"name": "olga", "role": "viewer"}},
		{"wrong type: name a number", map[string]any{"name": 7, "role": "viewer", "key": line}},
		{"key of another algorithm", map[string]any{"name": "olga", "role": "viewer", "key": map[string]any{"algorithm": "ecdsa-p256", "public": base64.StdEncoding.EncodeToString(pub)}}},
	} {
		doc, err := json.Marshal([]any{c.op})
		if err != nil {
			t.Fatal(err)
		}
		other = append(other, brokenDoc{"operators/" + c.name, s.operators(), doc, loadOperatorsErr, false})
	}
	for _, tc := range other {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var ve *jsonschema.ValidationError
			if err := schemaCheck(tc.schema, tc.doc); !errors.As(err, &ve) {
				t.Errorf("the schema accepts it: %v", err)
			}
			switch err := tc.goCheck(t, tc.doc); {
			case tc.goTolerates && err != nil:
				t.Errorf("the Go side refuses it, want it tolerated (and the schema documented as stricter): %v", err)
			case !tc.goTolerates && err == nil:
				t.Error("the Go side accepts it")
			}
		})
	}
}

// brokenDoc is a document the schema must refuse, with the Go side's
// check of the same document. goTolerates marks what a verifier accepts
// by design (rfcs/0001 §1 rules 5 and 6) and the schema, a producer's
// contract, does not.
type brokenDoc struct {
	name        string
	schema      *jsonschema.Schema
	doc         []byte
	goCheck     func(t *testing.T, doc []byte) error
	goTolerates bool
}

// decodeManifest is the strict decoder's verdict; its errors must wrap
// proto.ErrMalformed.
func decodeManifest(t *testing.T, doc []byte) error {
	_, err := proto.DecodeRolloutManifest(doc)
	if err != nil && !errors.Is(err, proto.ErrMalformed) {
		t.Errorf("the decoder's error does not wrap ErrMalformed: %v", err)
	}
	return err
}

// trustRoots is what a control plane or agent does with trust.json.
func trustRoots(_ *testing.T, doc []byte) error {
	tf, err := proto.DecodeTrustFile(doc)
	if err != nil {
		return err
	}
	_, err = trust.NewRoots(tf)
	return err
}

func loadOperatorsErr(t *testing.T, doc []byte) error {
	p := filepath.Join(t.TempDir(), "operators.json")
	if err := os.WriteFile(p, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := controlplane.LoadOperators(p)
	return err
}
