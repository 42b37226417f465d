package rfcref

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/rogpeppe/go-internal/txtar"
)

// wantRefs is the number of references in testdata/grammar.txtar's
// src.go: 20 that hold, 15 broken.
const wantRefs = 35

// TestGrammar runs the grammar of doc.go on testdata/grammar.txtar: sample
// RFCs, a source file with references that hold and broken ones, and the
// problems Check must report.
func TestGrammar(t *testing.T) {
	t.Parallel()
	a, err := txtar.ParseFile(filepath.Join("testdata", "grammar.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{}
	for _, f := range a.Files {
		fsys[f.Name] = &fstest.MapFile{Data: f.Data}
	}
	set, err := Load(fsys, "rfcs")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	refs, problems := set.Check("src.go", fsys["src.go"].Data)
	for _, p := range problems {
		got = append(got, p.String())
	}
	if refs != wantRefs {
		t.Errorf("read %d references in src.go, want %d", refs, wantRefs)
	}
	want := strings.Split(strings.TrimSpace(string(fsys["want"].Data)), "\n")
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("problems (-want +got):\n%s", d)
	}
}

// TestRepositoryReferences checks every reference to rfcs/ in the
// repository's Go files (not under testdata/ or a hidden directory): each
// names an RFC, heading, item or rule that exists (doc.go).
func TestRepositoryReferences(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the repository root: %v", err)
	}
	fsys := os.DirFS(root)
	set, err := Load(fsys, "rfcs")
	if err != nil {
		t.Fatal(err)
	}
	if len(set.byNum) == 0 {
		t.Fatal("no RFCs in rfcs/")
	}
	files, refs := 0, 0
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != "." && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		src, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		files++
		n, problems := set.Check(p, src)
		refs += n
		for _, pr := range problems {
			t.Errorf("%s", pr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The repository has some 200 Go files and over a hundred references:
	// far fewer means the walk or the scanner went wrong.
	if files < 100 || refs < 50 {
		t.Errorf("read %d references in %d Go files; the walk or the scanner missed the repository", refs, files)
	}
	t.Logf("%d references in %d Go files", refs, files)
}
