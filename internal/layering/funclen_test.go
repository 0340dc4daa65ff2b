package layering

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines bounds a function of the packages in funcLenPackages
// (issue 19): from its func keyword to its closing brace, both lines
// counted, doc comment not.
const maxFuncLines = 100

// funcLenPackages are the packages (relative to the module) whose
// functions maxFuncLines bounds: the proxy's top-level package (the
// server, its lifecycle and console host), its analyzer, and every
// package under proxy/internal (the engine — sessions, planner, response
// engine —, the backend pools, the merge executor, the console, the wire
// and value layers, authentication and observability).
var funcLenPackages = []string{
	"proxy", "proxy/route",
	"proxy/internal/admin", "proxy/internal/auth", "proxy/internal/backend", "proxy/internal/engine",
	"proxy/internal/merge", "proxy/internal/obs", "proxy/internal/pgvalue", "proxy/internal/pgwire",
}

// longFunc is a function over maxFuncLines.
type longFunc struct {
	pos   string // file:line
	name  string // Recv.Name or Name
	lines int
}

func (f longFunc) String() string {
	return fmt.Sprintf("%s: %s has %d lines (at most %d: split it into helpers of one concern each)", f.pos, f.name, f.lines, maxFuncLines)
}

// longFuncs returns the functions of the Go source file (named name for
// positions) over max lines.
func longFuncs(fset *token.FileSet, name string, src any, max int) ([]longFunc, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var long []longFunc
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
		n := end.Line - start.Line + 1
		if n <= max {
			continue
		}
		fn := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) == 1 {
			fn = recvName(fd.Recv.List[0].Type) + "." + fn
		}
		long = append(long, longFunc{pos: fmt.Sprintf("%s:%d", name, start.Line), name: fn, lines: n})
	}
	return long, nil
}

// recvName is the type name of a method's receiver (T of *T, T[K]).
func recvName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return recvName(t.X)
	case *ast.IndexExpr:
		return recvName(t.X)
	case *ast.IndexListExpr:
		return recvName(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}

// moduleRoot is the directory of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(goTool(), "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("not inside a Go module")
	}
	return filepath.Dir(gomod)
}

// TestNoLongFunctions fails naming every function of funcLenPackages
// (their non-test files) over maxFuncLines lines.
func TestNoLongFunctions(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	for _, pkg := range funcLenPackages {
		files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pkg), "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			n++
			rel, _ := filepath.Rel(root, file)
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			long, err := longFuncs(fset, filepath.ToSlash(rel), src, maxFuncLines)
			if err != nil {
				t.Fatalf("parse %s: %v", rel, err)
			}
			for _, f := range long {
				t.Error(f)
			}
		}
		if n == 0 {
			t.Fatalf("package %s has no Go file: update funcLenPackages", pkg)
		}
	}
}

// TestLongFuncsCounts checks the checker: a function is counted from its
// func line to its closing brace, methods are named with their receiver.
func TestLongFuncsCounts(t *testing.T) {
	body := func(lines int) string { // lines of the function, both braces' lines included
		return strings.Repeat("\t_ = 0\n", lines-2)
	}
	src := "package p\n\n" +
		"// ok is exactly at the limit.\nfunc ok() {\n" + body(5) + "}\n\n" +
		"type T[K any] struct{}\n\n" +
		"func (t *T[K]) over() {\n" + body(6) + "}\n\n" +
		"func over2() {\n" + body(7) + "}\n"
	long, err := longFuncs(token.NewFileSet(), "p.go", src, 5)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range long {
		got = append(got, fmt.Sprintf("%s %s %d", f.pos, f.name, f.lines))
	}
	want := "p.go:12 T.over 6; p.go:19 over2 7"
	if strings.Join(got, "; ") != want {
		t.Fatalf("longFuncs = %q, want %q", strings.Join(got, "; "), want)
	}
}

// TestFuncLenCoversProxy: every package of the proxy's tree is bounded —
// a new one must be added to funcLenPackages (or say here why not).
func TestFuncLenCoversProxy(t *testing.T) {
	root := moduleRoot(t)
	listed := map[string]bool{}
	for _, p := range funcLenPackages {
		listed[p] = true
	}
	err := filepath.WalkDir(filepath.Join(root, "proxy"), func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" {
			return filepath.SkipDir
		}
		files, err := filepath.Glob(filepath.Join(path, "*.go"))
		if err != nil {
			return err
		}
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				rel, _ := filepath.Rel(root, path)
				if !listed[filepath.ToSlash(rel)] {
					t.Errorf("package %s is not in funcLenPackages", filepath.ToSlash(rel))
				}
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
