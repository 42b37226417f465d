package manifest

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/nixfleet/nixfleet/internal/fleettest"
	"github.com/nixfleet/nixfleet/trust"
)

// TestEncodingIsAlreadyCanonical: the proto types declare their fields in
// JCS order, so encoding/json's output is canonical and Canonicalize passes
// it through instead of re-serialising it.
func TestEncodingIsAlreadyCanonical(t *testing.T) {
	t.Parallel()
	ms, err := Project(fleettest.Fleet(60), "00")
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
