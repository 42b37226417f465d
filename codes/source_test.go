package codes

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// codeNames are the names of fields, variables and parameters that hold a
// code: a string literal there is a code written outside the registry.
var codeNames = map[string]bool{"Code": true, "code": true, "Gate": true, "gate": true, "Why": true, "why": true}

// checkSource scans the non-test Go files under root, but those of this
// package, of test rigs (packages named …test, like storetest, which craft
// codes on purpose), testdata and hidden directories, and reports
// file:line for every string literal that reads like a code (one
// lowercase snake_case word; prose has spaces) in a code's place:
//
//   - the value of a Code, Gate or Why field in a composite literal, by key
//     or by position ({err, "code"} in a slice of anonymous structs, or
//     verifyError{"code", err} of a struct type of the module);
//   - assigned to, compared with, or switched on a name in codeNames;
//   - an argument for a parameter named code, gate or why of any function
//     or method of the module with the called name;
//
// and every constant named Code…, code… or Gate… with a string value: a
// vocabulary of its own.
func checkSource(t *testing.T, root string) []string {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			skip := strings.HasPrefix(name, ".") || name == "testdata" || strings.HasSuffix(name, "test") ||
				name == "codes" && filepath.Dir(path) == filepath.Clean(root)
			if path != root && skip {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Which parameters of each function name hold a code.
	params := map[string]map[int]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			i := 0
			for _, field := range fd.Type.Params.List {
				for _, n := range field.Names {
					if codeNames[n.Name] {
						if params[fd.Name.Name] == nil {
							params[fd.Name.Name] = map[int]bool{}
						}
						params[fd.Name.Name][i] = true
					}
					i++
				}
				if len(field.Names) == 0 {
					i++
				}
			}
		}
	}

	// Which members of each struct type hold a code, by position.
	structs := map[string][]int{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					structs[ts.Name.Name] = append(structs[ts.Name.Name], codeFields(st)...)
				}
			}
			return true
		})
	}

	var out []string
	report := func(e ast.Expr, what string) {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return
		}
		if v, err := strconv.Unquote(lit.Value); err == nil && snakeCase.MatchString(v) {
			out = append(out, fset.Position(lit.Pos()).String()+": "+lit.Value+" "+what+": use a constant of package codes")
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && codeNames[k.Name] {
					report(n.Value, "as "+k.Name)
				}
			case *ast.CompositeLit:
				if arr, ok := n.Type.(*ast.ArrayType); ok {
					if st, ok := arr.Elt.(*ast.StructType); ok {
						for _, e := range n.Elts {
							checkPositional(e, codeFields(st), report)
						}
					}
				}
				checkPositional(n, structs[lastName(n.Type)], report)
			case *ast.AssignStmt:
				for i, lhs := range n.Lhs {
					if codeNames[lastName(lhs)] && i < len(n.Rhs) {
						report(n.Rhs[i], "assigned to "+lastName(lhs))
					}
				}
			case *ast.BinaryExpr:
				if n.Op == token.EQL || n.Op == token.NEQ {
					if codeNames[lastName(n.X)] {
						report(n.Y, "compared with "+lastName(n.X))
					}
					if codeNames[lastName(n.Y)] {
						report(n.X, "compared with "+lastName(n.Y))
					}
				}
			case *ast.SwitchStmt:
				if n.Tag != nil && codeNames[lastName(n.Tag)] {
					for _, s := range n.Body.List {
						for _, e := range s.(*ast.CaseClause).List {
							report(e, "as a case of "+lastName(n.Tag))
						}
					}
				}
			case *ast.CallExpr:
				for i := range params[lastName(n.Fun)] {
					if i < len(n.Args) {
						report(n.Args[i], "as an argument of "+lastName(n.Fun))
					}
				}
			case *ast.GenDecl:
				if n.Tok != token.CONST {
					return true
				}
				for _, s := range n.Specs {
					vs := s.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if isCodeConstName(name.Name) && i < len(vs.Values) {
							report(vs.Values[i], "declared as "+name.Name)
						}
					}
				}
			}
			return true
		})
	}
	return out
}

// codeFields returns the positions of a struct's members that hold a
// code.
func codeFields(st *ast.StructType) []int {
	var at []int
	i := 0
	for _, field := range st.Fields.List {
		for _, name := range field.Names {
			if codeNames[name.Name] {
				at = append(at, i)
			}
			i++
		}
		if len(field.Names) == 0 {
			i++
		}
	}
	return at
}

// checkPositional reports the code members of a composite literal written
// without keys, like {ErrStale, "stale"}; at are their positions.
func checkPositional(e ast.Expr, at []int, report func(ast.Expr, string)) {
	row, ok := e.(*ast.CompositeLit)
	if !ok || len(at) == 0 {
		return
	}
	for _, i := range at {
		if i < len(row.Elts) {
			if _, keyed := row.Elts[i].(*ast.KeyValueExpr); !keyed {
				report(row.Elts[i], "as a code member")
			}
		}
	}
}

// lastName is the identifier an expression ends with: x for x, Sel for
// a.b.Sel, f for f(…) or a.f(…)'s function.
func lastName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

// isCodeConstName: Code, CodeX, code, codeX, GateX.
func isCodeConstName(name string) bool {
	for _, prefix := range []string{"Code", "code", "Gate"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok && (rest == "" && prefix != "Gate" || rest != "" && unicode.IsUpper(rune(rest[0]))) {
			return true
		}
	}
	return false
}

// TestSourceUsesConstants fails on a code written in the module's Go
// source other than as a constant of this package.
func TestSourceUsesConstants(t *testing.T) {
	t.Parallel()
	for _, p := range checkSource(t, "..") {
		t.Error(p)
	}
}

// TestSourceCheck shows that the scan catches each way of writing a code.
func TestSourceCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := `package x

const CodeNew = "brand_new"

type result struct{ Code string }

type failure struct {
	err  error
	code string
}

var table = []struct {
	err  error
	code string
}{{nil, "positional"}}

func report(kind, code string) {}

func f(r result, code string) {
	_ = result{Code: "keyed"}
	r.Code = "assigned"
	if r.Code == "compared" {
	}
	switch code {
	case "switched":
	}
	report("kind", "argument")
	_ = result{Code: ""}
	_ = &failure{nil, "by_position"}
	r.Code = "a sentence, not a code"
}
`
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(checkSource(t, dir), "\n")
	for _, want := range []string{`"brand_new" declared as CodeNew`, `"positional" as a code member`, `"keyed" as Code`,
		`"assigned" assigned to Code`, `"compared" compared with Code`, `"switched" as a case of code`, `"argument" as an argument of report`, `"by_position" as a code member`} {
		if !strings.Contains(got, want) {
			t.Errorf("the scan missed %s; it reported:\n%s", want, got)
		}
	}
	if strings.Contains(got, `"kind"`) || strings.Contains(got, `""`) || strings.Contains(got, "sentence") {
		t.Errorf("the scan reported a string that is no code:\n%s", got)
	}
}
