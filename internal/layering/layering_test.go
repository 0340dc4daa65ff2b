package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
)

// rule is one dependency rule of ARCHITECTURE.md §3: the packages under pkg (the
// package and its subtree, paths relative to the module) may depend on the
// module's packages under allow and on their own subtree, nothing else of
// ours. except exempts subtrees of pkg that have a rule of their own.
type rule struct {
	name   string
	pkg    string
	except []string
	allow  []string
}

// rules encodes ARCHITECTURE.md §3 (see doc.go for the table).
var rules = []rule{
	{name: "shardmap imports nothing of ours", pkg: "shardmap"},
	{name: "migrations build on shardmap only", pkg: "migrations", allow: []string{"shardmap"}},
	{name: "catalog builds on shardmap only (the map's store in Postgres; router and proxy may import it, not the reverse)", pkg: "catalog", allow: []string{"shardmap"}},
	{name: "reshard (the mover) builds on catalog, migrations and shardmap only (never store, router, proxy)", pkg: "reshard", allow: []string{"catalog", "migrations", "shardmap"}},
	{name: "store knows nothing of router, proxy, loadgen (store builds on shardmap only)", pkg: "store", allow: []string{"shardmap"}},
	{name: "router depends only on what is below it (store, shardmap, migrations)", pkg: "router", allow: []string{"store", "shardmap", "migrations"}},
	{name: "cluster knows no core logic (shardmap only)", pkg: "cluster", except: []string{"cluster/clustertest"}, allow: []string{"shardmap"}},
	{name: "clustertest builds test clusters from cluster, shardmap and migrations only", pkg: "cluster/clustertest", allow: []string{"cluster", "shardmap", "migrations"}},
	{name: "proxy sits on router, store, shardmap, migrations (never loadgen, chaos, verify, cli)", pkg: "proxy", allow: []string{"router", "store", "shardmap", "migrations"}},
	{name: "loadgen drives a store (router, store, shardmap, migrations; never proxy, chaos, verify, cli)", pkg: "loadgen", allow: []string{"router", "store", "shardmap", "migrations"}},
	{name: "chaos may import cluster, shardmap, store, router, loadgen, migrations, catalog, reshard only", pkg: "chaos", allow: []string{"cluster", "shardmap", "store", "router", "loadgen", "migrations", "catalog", "reshard"}},
	{name: "verify imports neither store, router nor loadgen: a checker must not share the code it checks (shardmap only)", pkg: "verify", allow: []string{"shardmap"}},
	{name: "internal/config is configuration only (shardmap, proxy/route)", pkg: "internal/config", allow: []string{"shardmap", "proxy/route"}},
	{name: "internal/sqlver, the versioned-SQL loader, imports nothing of ours", pkg: "internal/sqlver"},
	{name: "internal/ctxtime, the sleep bounded by a context, imports nothing of ours", pkg: "internal/ctxtime"},
	// Inside the proxy (issue 19): the layers under proxy/internal import
	// only downward; the proxy package on top may use them all.
	{name: "proxy/route, the analyzer, knows no wire, value codec or session (shardmap only)", pkg: "proxy/route", allow: []string{"shardmap"}},
	{name: "proxy/internal/pgwire, the wire protocol, imports nothing of ours", pkg: "proxy/internal/pgwire"},
	{name: "proxy/internal/pgvalue, the value codec, builds on pgwire only", pkg: "proxy/internal/pgvalue", allow: []string{"proxy/internal/pgwire"}},
	{name: "proxy/internal/auth, client authentication, uses pgwire at most", pkg: "proxy/internal/auth", allow: []string{"proxy/internal/pgwire"}},
	{name: "proxy/internal/backend, the backend pools, builds on pgwire, shardmap and migrations (never the proxy, the analyzer or the value codec)", pkg: "proxy/internal/backend", allow: []string{"proxy/internal/pgwire", "shardmap", "migrations"}},
	{name: "proxy/internal/merge, the fan-out merge executor, builds on the analyzer's plans, pgvalue and pgwire (never a session, the pools or the proxy)", pkg: "proxy/internal/merge", allow: []string{"proxy/route", "proxy/internal/pgvalue", "proxy/internal/pgwire", "shardmap"}},
	{name: "proxy/internal/obs, the metric handles the server and its sessions share, imports nothing of ours", pkg: "proxy/internal/obs"},
	// The engine (the client sessions, the planner, fan-out, pinning) sits
	// on the lower layers and reaches the server only through the
	// environments it is handed (engine.GenerationEnv, engine.HostEnv):
	// never package proxy, never the console.
	{name: "proxy/internal/engine, the client sessions and their planner, builds on the proxy's lower layers (never package proxy or the console: it sees GenerationEnv and HostEnv)", pkg: "proxy/internal/engine",
		allow: []string{"proxy/route", "proxy/internal/pgwire", "proxy/internal/pgvalue", "proxy/internal/auth", "proxy/internal/backend", "proxy/internal/merge", "proxy/internal/obs", "shardmap", "store", "migrations"}},
	// The console formats plain snapshots (admin.Host) as PgBouncer's text
	// columns and speaks the wire: pgwire only. It needs no value codec
	// (its values are Go integers, strings and times, not Postgres
	// values), and it must not see a session, a pool, the analyzer or the
	// merge: what it shows comes through admin.Host.
	{name: "proxy/internal/admin, the console, builds on pgwire only (never a session, the pools, the analyzer or the proxy: it sees admin.Host)", pkg: "proxy/internal/admin", allow: []string{"proxy/internal/pgwire"}},
}

// importRules allow a package to be imported directly only by the listed
// packages (exactly, not their subtrees); a package importing one of those
// still reaches it, as it should. Go's internal/ rule lets the whole proxy
// tree import proxy/internal/...; these narrow it.
var importRules = []struct {
	name      string
	pkg       string
	importers []string
}{
	{name: "only package proxy imports proxy/internal/admin (the console is driven by the proxy's sessions, nothing below them)", pkg: "proxy/internal/admin", importers: []string{"proxy"}},
}

// foundations are leaf packages every package may use: each imports
// nothing of ours (a rule above says so), so using one adds no edge
// between the layers.
var foundations = []string{"internal/sqlver", "internal/ctxtime"}

// globalRules forbid some packages to every package outside the listed
// exceptions.
var globalRules = []struct {
	name    string
	denied  string
	allowed []string // packages (subtrees) that may depend on denied
}{
	{name: "only cmd/pgshard uses internal/cli (dependencies flow cmd → cli → the rest)", denied: "internal/cli", allowed: []string{"cmd", "internal/cli"}},
	{name: "nothing imports a command", denied: "cmd", allowed: []string{"cmd"}},
	{name: "nothing imports the build tools", denied: "internal/tools", allowed: []string{"internal/tools"}},
}

// under reports whether path is p or inside p's subtree.
func under(path, p string) bool { return path == p || strings.HasPrefix(path, p+"/") }

// pkgInfo is one package of the module: its direct imports and transitive
// dependencies, paths relative to the module, ours only.
type pkgInfo struct {
	imports []string
	deps    []string
}

// graph is the module's production import graph.
type graph map[string]pkgInfo

// violation is one broken rule.
type violation struct {
	rule  string
	pkg   string
	dep   string
	chain []string
}

func (v violation) String() string {
	return fmt.Sprintf("layering rule %q (ARCHITECTURE.md §3) is broken: %s depends on %s (%s)",
		v.rule, v.pkg, v.dep, strings.Join(v.chain, " → "))
}

// check returns every violation of rules and globalRules in g, and the
// rules skipped because their package does not exist.
func check(g graph) (vs []violation, skipped []string) {
	pkgs := slices.Sorted(func(yield func(string) bool) {
		for p := range g {
			if !yield(p) {
				return
			}
		}
	})
	for _, r := range rules {
		matched := false
		for _, p := range pkgs {
			if !under(p, r.pkg) || slices.ContainsFunc(r.except, func(e string) bool { return under(p, e) }) {
				continue
			}
			matched = true
			for _, d := range g[p].deps {
				if under(d, r.pkg) || slices.ContainsFunc(r.allow, func(a string) bool { return under(d, a) }) ||
					(slices.Contains(foundations, d) && !slices.Contains(foundations, r.pkg)) {
					continue
				}
				vs = append(vs, violation{rule: r.name, pkg: p, dep: d, chain: g.chain(p, d)})
			}
		}
		if !matched {
			skipped = append(skipped, r.pkg)
		}
	}
	for _, gr := range globalRules {
		for _, p := range pkgs {
			if slices.ContainsFunc(gr.allowed, func(a string) bool { return under(p, a) }) {
				continue
			}
			for _, d := range g[p].deps {
				if under(d, gr.denied) {
					vs = append(vs, violation{rule: gr.name, pkg: p, dep: d, chain: g.chain(p, d)})
				}
			}
		}
	}
	for _, ir := range importRules {
		for _, p := range pkgs {
			if under(p, ir.pkg) || slices.Contains(ir.importers, p) {
				continue
			}
			for _, d := range g[p].imports {
				if under(d, ir.pkg) {
					vs = append(vs, violation{rule: ir.name, pkg: p, dep: d, chain: []string{p, d}})
				}
			}
		}
	}
	return vs, skipped
}

// chain returns a shortest import chain from one package to another
// (breadth-first over direct imports).
func (g graph) chain(from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var out []string
			for q := to; q != ""; q = prev[q] {
				out = append(out, q)
			}
			slices.Reverse(out)
			return out
		}
		for _, i := range g[p].imports {
			if _, seen := prev[i]; !seen {
				prev[i] = p
				queue = append(queue, i)
			}
		}
	}
	return []string{from, "…", to}
}

// goTool returns the go command that built this test.
func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// loadGraph lists the module's packages with `go list`.
func loadGraph(t *testing.T) graph {
	t.Helper()
	root := moduleRoot(t)
	cmd := exec.Command(goTool(), "list", "-e", "-json=ImportPath,Module,Imports,Deps,Error", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./... in %s: %v\n%s", root, err, stderr.String())
	}
	type listed struct {
		ImportPath string
		Module     *struct{ Path string }
		Imports    []string
		Deps       []string
		Error      *struct{ Err string }
	}
	var all []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list: package %s: %s", p.ImportPath, p.Error.Err)
		}
		all = append(all, p)
	}
	if len(all) == 0 || all[0].Module == nil {
		t.Fatal("go list found no package of a module")
	}
	mod := all[0].Module.Path
	ours := func(paths []string) []string {
		var r []string
		for _, p := range paths {
			if p == mod {
				r = append(r, ".")
			} else if rel, ok := strings.CutPrefix(p, mod+"/"); ok {
				r = append(r, rel)
			}
		}
		sort.Strings(r)
		return r
	}
	g := graph{}
	for _, p := range all {
		rel := ours([]string{p.ImportPath})
		if len(rel) == 0 {
			continue
		}
		g[rel[0]] = pkgInfo{imports: ours(p.Imports), deps: ours(p.Deps)}
	}
	return g
}

// TestLayering checks the module's import graph against ARCHITECTURE.md §3.
func TestLayering(t *testing.T) {
	g := loadGraph(t)
	if _, ok := g["store"]; !ok {
		t.Fatalf("go list did not find package store (got %d packages): is the test run inside the pgshard module?", len(g))
	}
	vs, skipped := check(g)
	for _, s := range skipped {
		t.Logf("no package %s yet: its rule is skipped", s)
	}
	for _, v := range vs {
		t.Error(v)
	}
}

// TestCheckerCatchesBackEdges feeds the checker graphs with one back edge
// each: a checker that cannot fail would prove nothing.
func TestCheckerCatchesBackEdges(t *testing.T) {
	base := graph{
		"shardmap":            {},
		"migrations":          {imports: []string{"internal/sqlver", "shardmap"}, deps: []string{"internal/sqlver", "shardmap"}},
		"internal/sqlver":     {},
		"store":               {},
		"router":              {imports: []string{"migrations", "shardmap", "store"}, deps: []string{"migrations", "shardmap", "store"}},
		"cluster":             {imports: []string{"shardmap"}, deps: []string{"shardmap"}},
		"cluster/clustertest": {imports: []string{"cluster", "migrations"}, deps: []string{"cluster", "migrations", "shardmap"}},
		"internal/cli":        {imports: []string{"router"}, deps: []string{"migrations", "router", "shardmap", "store"}},
		"cmd/pgshard":         {imports: []string{"internal/cli"}, deps: []string{"internal/cli", "migrations", "router", "shardmap", "store"}},
		// The proxy's layers.
		"proxy/internal/pgwire":  {},
		"proxy/internal/pgvalue": {imports: []string{"proxy/internal/pgwire"}, deps: []string{"proxy/internal/pgwire"}},
		"proxy/internal/auth":    {},
		"proxy/internal/backend": {imports: []string{"migrations", "proxy/internal/pgwire", "shardmap"}, deps: []string{"migrations", "proxy/internal/pgwire", "shardmap"}},
		"proxy/route":            {imports: []string{"shardmap"}, deps: []string{"shardmap"}},
		"proxy/internal/merge": {imports: []string{"proxy/internal/pgvalue", "proxy/internal/pgwire", "proxy/route"},
			deps: []string{"proxy/internal/pgvalue", "proxy/internal/pgwire", "proxy/route", "shardmap"}},
		"proxy/internal/admin": {imports: []string{"proxy/internal/pgwire"}, deps: []string{"proxy/internal/pgwire"}},
		"proxy/internal/obs":   {},
		"proxy/internal/engine": {imports: []string{"proxy/internal/auth", "proxy/internal/backend", "proxy/internal/merge", "proxy/internal/obs", "proxy/internal/pgvalue", "proxy/internal/pgwire", "proxy/route", "shardmap", "store"},
			deps: []string{"migrations", "proxy/internal/auth", "proxy/internal/backend", "proxy/internal/merge", "proxy/internal/obs", "proxy/internal/pgvalue", "proxy/internal/pgwire", "proxy/route", "shardmap", "store"}},
		"proxy": {imports: []string{"proxy/internal/admin", "proxy/internal/auth", "proxy/internal/backend", "proxy/internal/merge", "proxy/internal/pgvalue", "proxy/internal/pgwire", "proxy/route", "router"},
			deps: []string{"migrations", "proxy/internal/admin", "proxy/internal/auth", "proxy/internal/backend", "proxy/internal/merge", "proxy/internal/pgvalue", "proxy/internal/pgwire", "proxy/route", "router", "shardmap", "store"}},
	}
	if vs, _ := check(base); len(vs) != 0 {
		t.Fatalf("the clean graph has violations: %v", vs)
	}
	tests := []struct {
		name      string
		pkg, dep  string // the added edge (direct import; deps extended transitively)
		wantRule  string
		wantChain string
	}{
		{"store imports router", "store", "router", "store knows nothing of router", "store → router"},
		{"shardmap imports store", "shardmap", "store", "shardmap imports nothing of ours", "shardmap → store"},
		{"verify imports store", "verify", "store", "verify imports neither store, router nor loadgen", "verify → store"},
		{"verify reaches router through a helper", "verify", "router", "verify imports neither store", "verify → router"},
		{"chaos imports proxy", "chaos", "proxy", "chaos may import", "chaos → proxy"},
		{"cluster imports store", "cluster", "store", "cluster knows no core logic", "cluster → store"},
		{"router imports internal/cli", "router", "internal/cli", "only cmd/pgshard uses internal/cli", "router → internal/cli"},
		{"migrations import the cluster", "migrations", "cluster", "migrations build on shardmap only", "migrations → cluster"},
		// Back edges inside the proxy: each lower layer that reaches up.
		{"pgwire imports the value codec", "proxy/internal/pgwire", "proxy/internal/pgvalue", "pgwire, the wire protocol, imports nothing of ours", "proxy/internal/pgwire → proxy/internal/pgvalue"},
		{"pgvalue imports the proxy", "proxy/internal/pgvalue", "proxy", "pgvalue, the value codec, builds on pgwire only", "proxy/internal/pgvalue → proxy"},
		{"auth imports the value codec", "proxy/internal/auth", "proxy/internal/pgvalue", "auth, client authentication, uses pgwire at most", "proxy/internal/auth → proxy/internal/pgvalue"},
		{"the pools reach back into the proxy", "proxy/internal/backend", "proxy", "proxy/internal/backend, the backend pools, builds on pgwire, shardmap and migrations", "proxy/internal/backend → proxy"},
		{"the pools import the value codec", "proxy/internal/backend", "proxy/internal/pgvalue", "proxy/internal/backend, the backend pools", "proxy/internal/backend → proxy/internal/pgvalue"},
		{"the wire imports the pools", "proxy/internal/pgwire", "proxy/internal/backend", "pgwire, the wire protocol, imports nothing of ours", "proxy/internal/pgwire → proxy/internal/backend"},
		{"the analyzer imports the wire", "proxy/route", "proxy/internal/pgwire", "proxy/route, the analyzer, knows no wire", "proxy/route → proxy/internal/pgwire"},
		{"the merge reaches back into the proxy", "proxy/internal/merge", "proxy", "proxy/internal/merge, the fan-out merge executor", "proxy/internal/merge → proxy"},
		{"the merge imports the pools", "proxy/internal/merge", "proxy/internal/backend", "proxy/internal/merge, the fan-out merge executor", "proxy/internal/merge → proxy/internal/backend"},
		{"the value codec imports the merge", "proxy/internal/pgvalue", "proxy/internal/merge", "pgvalue, the value codec, builds on pgwire only", "proxy/internal/pgvalue → proxy/internal/merge"},
		{"the analyzer imports the merge", "proxy/route", "proxy/internal/merge", "proxy/route, the analyzer, knows no wire", "proxy/route → proxy/internal/merge"},
		{"pgwire reaches store through the proxy", "proxy/internal/pgwire", "proxy", "pgwire, the wire protocol, imports nothing of ours", "proxy/internal/pgwire → proxy"},
		{"the console reaches back into the proxy", "proxy/internal/admin", "proxy", "proxy/internal/admin, the console, builds on pgwire only", "proxy/internal/admin → proxy"},
		{"the console imports the pools", "proxy/internal/admin", "proxy/internal/backend", "proxy/internal/admin, the console, builds on pgwire only", "proxy/internal/admin → proxy/internal/backend"},
		{"the console imports the value codec", "proxy/internal/admin", "proxy/internal/pgvalue", "proxy/internal/admin, the console, builds on pgwire only", "proxy/internal/admin → proxy/internal/pgvalue"},
		{"the merge imports the console", "proxy/internal/merge", "proxy/internal/admin", "only package proxy imports proxy/internal/admin", "proxy/internal/merge → proxy/internal/admin"},
		{"the analyzer imports the console", "proxy/route", "proxy/internal/admin", "only package proxy imports proxy/internal/admin", "proxy/route → proxy/internal/admin"},
		{"the CLI imports the console", "internal/cli", "proxy/internal/admin", "only package proxy imports proxy/internal/admin", "internal/cli → proxy/internal/admin"},
		{"the engine reaches back into the proxy", "proxy/internal/engine", "proxy", "proxy/internal/engine, the client sessions and their planner", "proxy/internal/engine → proxy"},
		{"the engine imports the console", "proxy/internal/engine", "proxy/internal/admin", "proxy/internal/engine, the client sessions and their planner", "proxy/internal/engine → proxy/internal/admin"},
		{"the engine imports the console, the import rule", "proxy/internal/engine", "proxy/internal/admin", "only package proxy imports proxy/internal/admin", "proxy/internal/engine → proxy/internal/admin"},
		{"the engine imports the router", "proxy/internal/engine", "router", "proxy/internal/engine, the client sessions and their planner", "proxy/internal/engine → router"},
		{"the pools import the engine", "proxy/internal/backend", "proxy/internal/engine", "proxy/internal/backend, the backend pools", "proxy/internal/backend → proxy/internal/engine"},
		{"the merge imports the engine", "proxy/internal/merge", "proxy/internal/engine", "proxy/internal/merge, the fan-out merge executor", "proxy/internal/merge → proxy/internal/engine"},
		{"the metric handles import the wire", "proxy/internal/obs", "proxy/internal/pgwire", "proxy/internal/obs, the metric handles", "proxy/internal/obs → proxy/internal/pgwire"},
		{"catalog imports the store", "catalog", "store", "catalog builds on shardmap only", "catalog → store"},
		{"the SQL loader imports the map", "internal/sqlver", "shardmap", "internal/sqlver, the versioned-SQL loader, imports nothing of ours", "internal/sqlver → shardmap"},
		{"catalog imports the router", "catalog", "router", "catalog builds on shardmap only", "catalog → router"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := graph{}
			for k, v := range base {
				g[k] = pkgInfo{imports: slices.Clone(v.imports), deps: slices.Clone(v.deps)}
			}
			if _, ok := g[tt.dep]; !ok {
				g[tt.dep] = pkgInfo{}
			}
			p := g[tt.pkg]
			p.imports = append(p.imports, tt.dep)
			p.deps = append(p.deps, tt.dep)
			p.deps = append(p.deps, g[tt.dep].deps...)
			g[tt.pkg] = p
			vs, _ := check(g)
			var msgs []string
			found := false
			for _, v := range vs {
				msgs = append(msgs, v.String())
				if strings.Contains(v.String(), tt.wantRule) && strings.Contains(v.String(), tt.wantChain) {
					found = true
				}
			}
			if !found {
				t.Errorf("a %s → %s edge: want a violation of %q naming %q, got %q", tt.pkg, tt.dep, tt.wantRule, tt.wantChain, msgs)
			}
		})
	}
	// A rule for a package that does not exist is skipped, not failed.
	if _, skipped := check(base); !slices.Contains(skipped, "verify") || !slices.Contains(skipped, "chaos") {
		t.Errorf("skipped = %v, want verify and chaos (absent from the graph)", skipped)
	}
}

// TestProxyBackEdgeOnTheRealGraph adds one back edge inside the proxy to
// the module's real import graph: the rules must name it, so a rule whose
// package was renamed or moved (and is then silently skipped) fails here.
func TestProxyBackEdgeOnTheRealGraph(t *testing.T) {
	g := loadGraph(t)
	for _, p := range []string{"proxy", "proxy/route", "proxy/internal/pgwire", "proxy/internal/pgvalue", "proxy/internal/auth", "proxy/internal/backend", "proxy/internal/merge", "proxy/internal/admin", "proxy/internal/engine", "proxy/internal/obs"} {
		if _, ok := g[p]; !ok {
			t.Fatalf("package %s is not in the module: update the proxy's layering rules", p)
		}
	}
	if vs, _ := check(g); len(vs) != 0 {
		t.Fatalf("the real graph already has violations: %v", vs)
	}
	edges := []struct{ pkg, dep, wantRule string }{
		{"proxy/internal/pgwire", "proxy/internal/pgvalue", "pgwire, the wire protocol, imports nothing of ours"},
		{"proxy/internal/pgvalue", "proxy", "pgvalue, the value codec, builds on pgwire only"},
		{"proxy/internal/auth", "proxy", "auth, client authentication, uses pgwire at most"},
		{"proxy/internal/backend", "proxy", "proxy/internal/backend, the backend pools"},
		{"proxy/route", "proxy/internal/pgvalue", "proxy/route, the analyzer"},
		{"proxy/internal/merge", "proxy", "proxy/internal/merge, the fan-out merge executor"},
		{"proxy/internal/merge", "proxy/internal/backend", "proxy/internal/merge, the fan-out merge executor"},
		{"proxy/internal/admin", "proxy", "proxy/internal/admin, the console"},
		{"proxy/internal/admin", "proxy/internal/backend", "proxy/internal/admin, the console"},
		{"proxy/internal/merge", "proxy/internal/admin", "only package proxy imports proxy/internal/admin"},
		{"proxy/route", "proxy/internal/admin", "only package proxy imports proxy/internal/admin"},
		{"proxy/internal/engine", "proxy", "proxy/internal/engine, the client sessions and their planner"},
		{"proxy/internal/engine", "proxy/internal/admin", "proxy/internal/engine, the client sessions and their planner"},
		{"proxy/internal/backend", "proxy/internal/engine", "proxy/internal/backend, the backend pools"},
		{"proxy/internal/obs", "proxy", "proxy/internal/obs, the metric handles"},
	}
	for _, e := range edges {
		h := graph{}
		for k, v := range g {
			h[k] = pkgInfo{imports: slices.Clone(v.imports), deps: slices.Clone(v.deps)}
		}
		p := h[e.pkg]
		p.imports = append(p.imports, e.dep)
		p.deps = append(append(p.deps, e.dep), h[e.dep].deps...)
		h[e.pkg] = p
		vs, _ := check(h)
		found := false
		for _, v := range vs {
			if strings.Contains(v.String(), e.wantRule) && strings.Contains(v.String(), e.pkg+" → "+e.dep) {
				found = true
			}
		}
		if !found {
			t.Errorf("a %s → %s edge on the real graph: want a violation of %q, got %v", e.pkg, e.dep, e.wantRule, vs)
		}
	}
}
