package reconciler

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The reconciler must be a pure function: these are the only packages its
// non-test files may import, and these selectors may not appear. A hash
// is pure: an activation's token is derived from its record.
var (
	allowedImports = map[string]bool{
		"cmp": true, "crypto/sha256": true, "encoding/hex": true, "encoding/json": true, "errors": true, "fmt": true, "maps": true, "math": true,
		"slices": true, "sort": true, "strconv": true, "strings": true, "time": true,
		"github.com/nixfleet/nixfleet/codes": true, "github.com/nixfleet/nixfleet/proto": true,
		"github.com/nixfleet/nixfleet/schedule": true, "github.com/nixfleet/nixfleet/analysis": true,
	}
	// Reading the clock, sleeping, timers, and printing.
	forbiddenCalls = map[string]bool{
		"time.Now": true, "time.Since": true, "time.Until": true, "time.Sleep": true, "time.After": true,
		"time.AfterFunc": true, "time.Tick": true, "time.NewTimer": true, "time.NewTicker": true,
		"fmt.Print": true, "fmt.Printf": true, "fmt.Println": true, "fmt.Fprint": true, "fmt.Fprintf": true,
		"fmt.Fprintln": true, "fmt.Scan": true, "fmt.Scanf": true, "fmt.Scanln": true, "fmt.Sscan": true,
	}
)

// TestPurity fails if the reconciler imports anything that does I/O, reads
// the clock or uses randomness, and checks proto and codes, its module
// dependencies, the same way for I/O and randomness.
func TestPurity(t *testing.T) {
	t.Parallel()
	protoAllowed := map[string]bool{"encoding/json": true, "errors": true, "fmt": true, "reflect": true, "slices": true, "strconv": true, "time": true,
		"strings": true, "sync": true, "bytes": true, "unicode": true, "unicode/utf8": true, "github.com/nixfleet/nixfleet/internal/jsonscan": true}
	scanAllowed := map[string]bool{"bytes": true, "errors": true, "fmt": true, "math": true,
		"slices": true, "strconv": true, "unicode/utf16": true, "unicode/utf8": true}
	// codes formats the message of its Error, as the reconciler formats
	// its reasons.
	codesAllowed := map[string]bool{"fmt": true, "slices": true, "strings": true}
	// schedule reads the time zone database (the system's, else the one
	// embedded in the binary) and nothing else: windows depend on the
	// rules of their zones, as they should, and never on the clock.
	scheduleAllowed := map[string]bool{"cmp": true, "errors": true, "fmt": true, "slices": true, "strings": true, "sync": true, "time": true,
		"time/tzdata": true, "github.com/nixfleet/nixfleet/proto": true}
	// analysis judges results and fills in queries; it reads nothing.
	analysisAllowed := map[string]bool{"cmp": true, "fmt": true, "math": true, "regexp": true, "slices": true, "strconv": true, "strings": true,
		"time": true, "github.com/nixfleet/nixfleet/proto": true}
	for _, p := range append(append(append(append(append(checkPure(t, ".", allowedImports, forbiddenCalls),
		checkPure(t, "../analysis", analysisAllowed, forbiddenCalls)...),
		checkPure(t, "../proto", protoAllowed, forbiddenCalls)...),
		checkPure(t, "../internal/jsonscan", scanAllowed, forbiddenCalls)...),
		checkPure(t, "../codes", codesAllowed, forbiddenCalls)...),
		checkPure(t, "../schedule", scheduleAllowed, forbiddenCalls)...) {
		t.Error(p)
	}
}

// TestPurityCheck shows the check catches what it is for.
func TestPurityCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := "package x\n\nimport (\n\t\"os\"\n\tclock \"time\"\n\t\"math/rand\"\n)\n\n" +
		"func f() { _ = os.Args; _ = clock.Now(); _ = rand.Int() }\n"
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(checkPure(t, dir, allowedImports, forbiddenCalls), "\n")
	for _, want := range []string{`imports "os"`, `imports "math/rand"`, "uses time.Now"} {
		if !strings.Contains(got, want) {
			t.Errorf("the check missed %s; it said:\n%s", want, got)
		}
	}
}

// checkPure returns the violations in a directory's non-test Go files.
func checkPure(t *testing.T, dir string, allowed, forbidden map[string]bool) []string {
	t.Helper()
	var problems []string
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		local := map[string]string{}
		for _, imp := range file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowed[path] {
				problems = append(problems, fmt.Sprintf("%s imports %q, which a pure package may not", f, path))
			}
			name := path[strings.LastIndexByte(path, '/')+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			local[name] = path
		}
		full, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(full, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok {
				if path, ok := local[id.Name]; ok && forbidden[path+"."+sel.Sel.Name] {
					problems = append(problems, fmt.Sprintf("%s: uses %s.%s", fset.Position(sel.Pos()), path, sel.Sel.Name))
				}
			}
			return true
		})
	}
	return problems
}
