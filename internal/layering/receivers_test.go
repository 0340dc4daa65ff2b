package layering

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxMethods bounds the methods declared on one type (on T and *T
// together) in a package of funcLenPackages (issue 19: each type owns its
// state, and none grows into a god object).
const maxMethods = 25

// embedAllowed are the embeddings, "package.Outer embeds Inner", of a
// struct type of the same package that has methods, kept on purpose: the
// embedded type's methods are promoted into the outer type's method set,
// so an embedding not listed here fails (the bound on methods could
// otherwise be dodged by embedding). Each entry says why.
var embedAllowed = map[string]string{}

// srcFile is one Go source file: its name (for positions) and text.
type srcFile struct {
	name string
	src  any
}

// receiverFindings are what receiverChecks finds in one package.
type receiverFindings struct {
	counts map[string]int // methods per receiver type (T and *T together)
	embeds []string       // "Outer embeds Inner" (Inner: a struct of the package with methods), sorted
}

// receiverChecks parses a package's files and counts the methods per
// receiver type and lists the struct embeddings of the package's own
// struct types that have methods (embedded as T or *T, at any depth of
// the outer struct's literal).
func receiverChecks(fset *token.FileSet, files []srcFile) (receiverFindings, error) {
	rf := receiverFindings{counts: map[string]int{}}
	structs := map[string]*ast.StructType{}
	for _, sf := range files {
		f, err := parser.ParseFile(fset, sf.name, sf.src, parser.SkipObjectResolution)
		if err != nil {
			return rf, err
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil && len(d.Recv.List) == 1 {
					rf.counts[recvName(d.Recv.List[0].Type)]++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						if st, ok := ts.Type.(*ast.StructType); ok {
							structs[ts.Name.Name] = st
						}
					}
				}
			}
		}
	}
	for outer, st := range structs {
		ast.Inspect(st, func(n ast.Node) bool {
			s, ok := n.(*ast.StructType)
			if !ok {
				return true
			}
			for _, fld := range s.Fields.List {
				if len(fld.Names) > 0 {
					continue
				}
				inner := recvName(fld.Type) // "?" for another package's type
				if _, own := structs[inner]; own && rf.counts[inner] > 0 {
					rf.embeds = append(rf.embeds, outer+" embeds "+inner)
				}
			}
			return true
		})
	}
	sort.Strings(rf.embeds)
	return rf, nil
}

// packageFiles returns a package's non-test Go files.
func packageFiles(t *testing.T, root, pkg string) []srcFile {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pkg), "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []srcFile
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, name)
		files = append(files, srcFile{name: filepath.ToSlash(rel), src: src})
	}
	if len(files) == 0 {
		t.Fatalf("package %s has no Go file: update funcLenPackages", pkg)
	}
	return files
}

// TestReceiversBounded fails naming every type of funcLenPackages with
// more than maxMethods methods, and every embedding of a same-package
// struct type with methods that embedAllowed does not list (and every
// entry of embedAllowed that no longer matches).
func TestReceiversBounded(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	used := map[string]bool{}
	for _, pkg := range funcLenPackages {
		rf, err := receiverChecks(fset, packageFiles(t, root, pkg))
		if err != nil {
			t.Fatalf("parse %s: %v", pkg, err)
		}
		for typ, n := range rf.counts {
			if n > maxMethods {
				t.Errorf("%s: type %s has %d methods (at most %d: move a concern's state and methods into a type of its own)", pkg, typ, n, maxMethods)
			}
		}
		for _, e := range rf.embeds {
			key := pkg + "." + e
			if _, ok := embedAllowed[key]; ok {
				used[key] = true
				continue
			}
			t.Errorf("%s: its methods are promoted into the outer type's method set; make it a named field (or list it in embedAllowed with the reason)", key)
		}
	}
	for key := range embedAllowed {
		if !used[key] {
			t.Errorf("embedAllowed lists %q, which no longer occurs: remove it", key)
		}
	}
}

// TestReceiverChecks checks the checker: methods on T and *T (and on a
// generic T[K]) count together; an embedding counts only of a struct type
// of the same package with methods, as T or *T, also inside a nested
// struct literal — not an unnamed parameter, not an interface, not
// another package's type, not a struct without methods.
func TestReceiverChecks(t *testing.T) {
	a := "package p\n\nimport \"sync\"\n\n" +
		"type T[K any] struct{ n int }\n\n" +
		"func (t T[K]) a() {}\nfunc (t *T[K]) b() {}\n\n" +
		"type E struct{}\n\nfunc (E) m() {}\n\n" +
		"type plain struct{ x int }\n\n" +
		"type I interface{ m() }\n"
	b := "package p\n\n" +
		"func (t *T[K]) c(func(int) error) {}\n\n" +
		"type S struct {\n\tE\n\tplain\n\tI\n\tsync.Mutex\n\tf func(E, int)\n}\n\n" +
		"type U struct {\n\tin struct{ *E }\n}\n\n" +
		"type V struct{ *T[int] }\n"
	rf, err := receiverChecks(token.NewFileSet(), []srcFile{{"a.go", a}, {"b.go", b}})
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("T=%d E=%d S=%d; %s", rf.counts["T"], rf.counts["E"], rf.counts["S"], strings.Join(rf.embeds, "; "))
	want := "T=3 E=1 S=0; S embeds E; U embeds E; V embeds T"
	if got != want {
		t.Fatalf("receiverChecks = %q, want %q", got, want)
	}
}
