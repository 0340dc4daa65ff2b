package layering

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The engine boundary inside package proxy (issue 19, ARCHITECTURE.md §3):
// a client session and its planner reach the rest of the proxy only
// through generationEnv and hostEnv (proxy/sessionenv.go), never through
// a *Server (one configuration generation) or a *core (the server). Until
// the session moves to a package of its own, where the import rules will
// say it, this source check keeps the boundary: no method of an engine
// type and no field of one names Server or core, or selects a field srv
// or core.

// boundaryPackage is the package whose engine types are checked.
const boundaryPackage = "proxy"

// engineTypes are the receivers on the session's side of the boundary.
var engineTypes = []string{"Session", "planner"}

// boundaryDenied are the identifiers an engine type must not name: the
// generation and the server behind the boundary.
var boundaryDenied = []string{"Server", "core"}

// boundaryDeniedFields are the fields an engine type must not select.
var boundaryDeniedFields = []string{"srv", "core"}

// boundaryBreak is one use of the server behind the boundary.
type boundaryBreak struct {
	pos  string // file:line
	in   string // Recv.Method or the type
	what string
}

func (b boundaryBreak) String() string {
	return fmt.Sprintf("%s: %s names %s: the engine boundary (ARCHITECTURE.md §3) is broken: a session reaches the proxy through generationEnv and hostEnv (proxy/sessionenv.go) only", b.pos, b.in, b.what)
}

// boundaryBreaks returns the uses of boundaryDenied and
// boundaryDeniedFields in the engine types' methods and struct types of
// the Go source file src (named name for positions).
func boundaryBreaks(fset *token.FileSet, name string, src any) ([]boundaryBreak, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	isEngine := func(n string) bool {
		for _, e := range engineTypes {
			if e == n {
				return true
			}
		}
		return false
	}
	var out []boundaryBreak
	var scan func(in string, root ast.Node)
	scan = func(in string, root ast.Node) {
		ast.Inspect(root, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.SelectorExpr:
				for _, d := range boundaryDeniedFields {
					if x.Sel.Name == d {
						out = append(out, boundaryBreak{pos: fmt.Sprintf("%s:%d", name, fset.Position(x.Sel.Pos()).Line), in: in, what: "field ." + d})
					}
				}
				scan(in, x.X) // the operand; the selected name is no identifier of ours
				return false
			case *ast.Ident:
				for _, d := range boundaryDenied {
					if x.Name == d {
						out = append(out, boundaryBreak{pos: fmt.Sprintf("%s:%d", name, fset.Position(x.Pos()).Line), in: in, what: d})
					}
				}
			}
			return true
		})
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil || len(d.Recv.List) != 1 || !isEngine(recvName(d.Recv.List[0].Type)) || d.Body == nil {
				continue
			}
			in := recvName(d.Recv.List[0].Type) + "." + d.Name.Name
			scan(in, d.Type)
			scan(in, d.Body)
		case *ast.GenDecl:
			for _, sp := range d.Specs {
				if ts, ok := sp.(*ast.TypeSpec); ok && isEngine(ts.Name.Name) {
					scan("type "+ts.Name.Name, ts.Type)
				}
			}
		}
	}
	return out, nil
}

// TestEngineBoundary fails naming every method or field of a session or
// planner that reaches a Server or a core directly.
func TestEngineBoundary(t *testing.T) {
	root := moduleRoot(t)
	files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(boundaryPackage), "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	seen := map[string]bool{}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		rel, _ := filepath.Rel(root, file)
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", rel, err)
		}
		for _, d := range f.Decls {
			if ts, ok := d.(*ast.GenDecl); ok {
				for _, sp := range ts.Specs {
					if s, ok := sp.(*ast.TypeSpec); ok {
						seen[s.Name.Name] = true
					}
				}
			}
		}
		bs, err := boundaryBreaks(fset, filepath.ToSlash(rel), src)
		if err != nil {
			t.Fatalf("parse %s: %v", rel, err)
		}
		for _, b := range bs {
			t.Error(b)
		}
	}
	for _, e := range engineTypes {
		if !seen[e] {
			t.Fatalf("package %s has no type %s: update engineTypes (or replace this check by an import rule once the session has a package of its own)", boundaryPackage, e)
		}
	}
}

// TestBoundaryBreaksFound checks the checker on a deliberate break: a
// session method selecting s.srv, a planner naming *core, a session field
// of type *Server; a method of another type may.
func TestBoundaryBreaksFound(t *testing.T) {
	src := `package p

type Session struct {
	gen *generationEnv
	srv *Server
}

type planner struct{ s *Session }

func (s *Session) ok() int { return s.gen.cfg.PoolSize }

func (s *Session) bad() int { return s.srv.cfg.PoolSize }

func (p *planner) bad(c *core) {}

func (s *Server) fine() *core { return s.core }
`
	bs, err := boundaryBreaks(token.NewFileSet(), "p.go", src)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range bs {
		got = append(got, fmt.Sprintf("%s %s %s", b.pos, b.in, b.what))
	}
	want := "p.go:5 type Session Server; p.go:12 Session.bad field .srv; p.go:14 planner.bad core"
	if strings.Join(got, "; ") != want {
		t.Fatalf("boundaryBreaks = %q, want %q", strings.Join(got, "; "), want)
	}
	if !strings.Contains(bs[0].String(), "engine boundary") {
		t.Errorf("a break's message does not name the rule: %s", bs[0])
	}
}
