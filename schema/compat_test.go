package schema

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nixfleet/nixfleet/internal/apicompat"
)

var update = flag.Bool("update", false, "record openapi.json as the accepted /v1 contract (compat/openapi-v1.json)")

const (
	currentFile  = "openapi.json"
	acceptedFile = "compat/openapi-v1.json"
	notesFile    = "API-CHANGES.md"
)

// TestOpenAPICompatible refuses a change to /v1 that breaks its clients
// unless a version note declares it, and a compatible one until it is
// recorded (API-CHANGES.md says how).
func TestOpenAPICompatible(t *testing.T) {
	accepted, current, notes := read(t, acceptedFile), read(t, currentFile), read(t, notesFile)
	changes, err := checkCompat(accepted, current, string(notes))
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(acceptedFile, current, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !sameJSON(t, accepted, current) {
		var b strings.Builder
		for _, c := range changes {
			fmt.Fprintf(&b, "\n  %s", c.Key)
		}
		if len(changes) == 0 {
			b.WriteString("\n  (descriptions and other text only)")
		}
		t.Errorf("%s differs from the accepted %s by changes that break no client:%s\nrecord them: go test ./schema -run TestOpenAPICompatible -update",
			currentFile, acceptedFile, b.String())
	}
}

// checkCompat returns the changes from accepted to current, or an error
// when one breaks clients and notes do not declare it under a new
// info.version, or when notes have no section for current's version.
func checkCompat(accepted, current []byte, notes string) ([]apicompat.Change, error) {
	changes, err := apicompat.Diff(accepted, current)
	if err != nil {
		return nil, err
	}
	version := apicompat.Version(current)
	section, ok := noteSection(notes, version)
	if !ok {
		return nil, fmt.Errorf("%s has no section %q for %s's info.version", notesFile, "## "+version, currentFile)
	}
	raised := version != apicompat.Version(accepted)
	var undeclared []string
	for _, c := range changes {
		if c.Breaking && (!raised || !strings.Contains(section, "`"+c.Key+"`")) {
			undeclared = append(undeclared, c.Key)
		}
	}
	if len(undeclared) == 0 {
		return changes, nil
	}
	msg := fmt.Sprintf("%d change(s) to /v1 break clients of the accepted contract:\n  %s\n",
		len(undeclared), strings.Join(undeclared, "\n  "))
	if !raised {
		msg += "keep them compatible, or raise info.version in " + currentFile + " and list each, in backquotes, in " + notesFile + " under its section"
	} else {
		msg += "list each, in backquotes, in " + notesFile + " under \"## " + version + "\""
	}
	return nil, errors.New(msg)
}

var heading = regexp.MustCompile(`(?m)^## +(\S+)\s*$`)

// noteSection is the text of a notes section "## <version>", up to the
// next heading of its level.
func noteSection(notes, version string) (string, bool) {
	idx := heading.FindAllStringSubmatchIndex(notes, -1)
	for i, m := range idx {
		if notes[m[2]:m[3]] != version {
			continue
		}
		end := len(notes)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		return notes[m[1]:end], true
	}
	return "", false
}

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

// The check itself on the real documents: a member removed from a
// response fails it, the same change declared under a raised version
// passes, and an addition passes without a note.
func TestCheckCompatRefusesUndeclaredBreaks(t *testing.T) {
	accepted, notes := read(t, acceptedFile), string(read(t, notesFile))
	var doc map[string]any
	if err := json.Unmarshal(accepted, &doc); err != nil {
		t.Fatal(err)
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	status := schemas["Status"].(map[string]any)["properties"].(map[string]any)
	names := slices.Sorted(maps.Keys(status))
	for _, name := range names {
		kept := status[name]
		delete(status, name)
		broken, _ := json.Marshal(doc)
		status[name] = kept
		key := "Status." + name + ": response member removed"
		if _, err := checkCompat(accepted, broken, notes); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("removing Status.%s: err = %v, want it to name %q", name, err, key)
		}
	}
	removed := names[0]
	kept := status[removed]
	delete(status, removed)
	broken, _ := json.Marshal(doc)
	key := "Status." + removed + ": response member removed"

	// Listed, but under the version clients already have: refused.
	if _, err := checkCompat(accepted, broken, notes+"\n- `"+key+"`\n"); err == nil || !strings.Contains(err.Error(), "raise info.version") {
		t.Errorf("a break listed without a raised version: err = %v", err)
	}

	doc["info"].(map[string]any)["version"] = "2.0.0"
	bumped, _ := json.Marshal(doc)
	if _, err := checkCompat(accepted, bumped, notes); err == nil || !strings.Contains(err.Error(), `no section "## 2.0.0"`) {
		t.Errorf("a raised version without its section: err = %v", err)
	}
	if _, err := checkCompat(accepted, bumped, notes+"\n## 2.0.0\n\n- nothing of note\n"); err == nil || !strings.Contains(err.Error(), key) {
		t.Errorf("a section that does not list the change: err = %v", err)
	}
	if _, err := checkCompat(accepted, bumped, notes+"\n## 2.0.0\n\n- `"+key+"`: no client read it.\n"); err != nil {
		t.Errorf("a declared break under a raised version: %v", err)
	}

	// An addition needs no note.
	status[removed] = kept
	status["addedForTheTest"] = map[string]any{"type": "string"}
	doc["info"].(map[string]any)["version"] = apicompat.Version(accepted)
	added, _ := json.Marshal(doc)
	changes, err := checkCompat(accepted, added, notes)
	if err != nil {
		t.Fatalf("an added response member: %v", err)
	}
	if len(changes) == 0 {
		t.Error("an added response member is not a change")
	}
}
