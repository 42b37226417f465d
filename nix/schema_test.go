package nix

import (
	"bytes"
	"path/filepath"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The JSON Schemas of schema/, compiled once for the package's tests.
var (
	schemasOnce sync.Once
	schemas     map[string]*jsonschema.Schema
	schemasErr  error
)

// checkSchema validates a document against one of schema/'s JSON Schemas
// (draft 2020-12, formats asserted): mkFleet's output and what CI signs
// from it are what other implementations read by those schemas.
func checkSchema(t *testing.T, file string, doc []byte) {
	t.Helper()
	schemasOnce.Do(func() {
		schemas = map[string]*jsonschema.Schema{}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		c.AssertFormat()
		for _, f := range []string{"fleet.resolved.schema.json", "rollout-manifest.schema.json"} {
			path, err := filepath.Abs(filepath.Join(repoRoot, "schema", f))
			if err != nil {
				schemasErr = err
				return
			}
			if schemas[f], schemasErr = c.Compile(path); schemasErr != nil {
				return
			}
		}
	})
	if schemasErr != nil {
		t.Fatal(schemasErr)
	}
	s, ok := schemas[file]
	if !ok {
		t.Fatalf("no schema %s", file)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if err := s.Validate(inst); err != nil {
		t.Errorf("the document does not validate against schema/%s: %v", file, err)
	}
}
