package manifest_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/nixfleet/nixfleet/internal/testkit/fleetkit"
	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// TestEncodingIsAlreadyCanonical: the proto types declare their fields in
// JCS order, so encoding/json's output is canonical and Canonicalize passes
// it through instead of re-serialising it. The health gate sets every
// member, so each of them is in its place.
func TestEncodingIsAlreadyCanonical(t *testing.T) {
	t.Parallel()
	f := fleetkit.Synthetic(60)
	p := f.RolloutPolicies["staged"]
	two, fifty := 2, 50
	p.HealthGate.ComplianceProbes = &proto.ComplianceProbes{Required: true}
	p.HealthGate.MinConverged, p.HealthGate.MinConvergedPct = &two, &fifty
	f.RolloutPolicies["staged"] = p
	ms, err := manifest.Project(f, "00")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(m); err != nil {
			t.Fatal(err)
		}
		raw := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		out, err := trust.Canonicalize(raw)
		if err != nil {
			t.Fatal(err)
		}
		if &out[0] != &raw[0] {
			t.Fatalf("manifest %s: encoding/json output is not canonical:\n%s\n%s", m.RolloutID(), raw, out)
		}
	}
}
