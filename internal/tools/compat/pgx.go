package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// pgxPackages are pgx's packages whose tests use PGX_TEST_DATABASE.
var pgxPackages = []string{"", "/pgconn", "/pgproto3", "/pgtype", "/pgtype/zeronull", "/pgxpool", "/stdlib", "/tracelog"}

// pgxCrashesPgBouncer is the test that crashes PgBouncer 1.18 (left out
// where the endpoint is PgBouncer itself).
const pgxCrashesPgBouncer = "TestCancelRequestContextWatcherHandler"

// pgxModule is a throwaway module requiring pgx at a version, whose
// test packages `go test` runs from the module cache.
type pgxModule struct {
	dir  string
	pkgs []string
	// list is every top-level test and example per package.
	list map[string][]string
}

func preparePgx(ctx context.Context, o options) (*pgxModule, error) {
	dir := filepath.Join(o.out, "pgxmod")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	root := "github.com/jackc/pgx/v5"
	gomod := "module pgshard.compat/pgxsuite\n\ngo 1.26\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "deps.go"), []byte("package pgxsuite\n\nimport _ \"github.com/jackc/pgx/v5\"\n"), 0o644); err != nil {
		return nil, err
	}
	m := &pgxModule{dir: dir, list: map[string][]string{}}
	for _, p := range pgxPackages {
		m.pkgs = append(m.pkgs, root+p)
	}
	logf("fetching pgx %s and its test dependencies", o.pgxVersion)
	args := append([]string{"get", "-t"}, suffix(m.pkgs, "@"+o.pgxVersion)...)
	if out, err := goCmd(ctx, dir, 10*time.Minute, nil, args...); err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	logf("building pgx's tests")
	args = append([]string{"test", "-count=1", "-run", "^$", "-json"}, m.pkgs...)
	if out, err := goCmd(ctx, dir, 15*time.Minute, nil, args...); err != nil {
		return nil, fmt.Errorf("building pgx's tests: %w\n%s", err, tail(out, 40))
	}
	args = append([]string{"test", "-list", ".", "-json"}, m.pkgs...)
	out, err := goCmd(ctx, dir, 10*time.Minute, nil, args...)
	if err != nil {
		return nil, fmt.Errorf("listing pgx's tests: %w\n%s", err, tail(out, 40))
	}
	for _, ev := range parseEvents(bytes.NewReader(out)) {
		if ev.Action == "output" && ev.Test == "" {
			name := strings.TrimSpace(ev.Output)
			if isTopLevel(name) {
				m.list[ev.Package] = append(m.list[ev.Package], name)
			}
		}
	}
	n := 0
	for _, l := range m.list {
		n += len(l)
	}
	logf("pgx %s: %d packages, %d top-level tests and examples", o.pgxVersion, len(m.pkgs), n)
	return m, nil
}

var topLevelRe = regexp.MustCompile(`^(Test|Example|Fuzz)\w*$`)

func isTopLevel(name string) bool {
	return topLevelRe.MatchString(name) && !strings.HasPrefix(name, "TestMain")
}

func suffix(ss []string, s string) []string {
	out := make([]string, len(ss))
	for i, x := range ss {
		out[i] = x + s
	}
	return out
}

// goCmd runs go in dir, bounded by d; it returns stdout+stderr.
func goCmd(ctx context.Context, dir string, d time.Duration, env []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off"), env...)
	cmd.WaitDelay = 10 * time.Second
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.Bytes(), err
}

// goCmdTo is goCmd writing its output to a file as it goes (a run's
// progress can be followed there).
func goCmdTo(ctx context.Context, dir string, d time.Duration, env []string, path string, args ...string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off"), env...)
	cmd.WaitDelay = 10 * time.Second
	cmd.Stdout, cmd.Stderr = f, f
	return cmd.Run()
}

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func parseEvents(r io.Reader) []event {
	var out []event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev event
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Action != "" {
			out = append(out, ev)
		}
	}
	return out
}

// runPgx runs pgx's suite against t.
func runPgx(ctx context.Context, o options, m *pgxModule, t target) *result {
	r := newResult("pgx", t.name)
	start := time.Now()
	// Each package's binary is bounded (a hang there costs that bound, and
	// the next packages still run); the whole run by -pgx-timeout.
	args := []string{"test", "-json", "-count=1", "-p", "1", "-timeout", min(o.pgxPackageTimeout, o.pgxTimeout-30*time.Second).String()}
	if t.viaBouncer && !t.proxy {
		args = append(args, "-skip", "^"+pgxCrashesPgBouncer+"$")
		r.note = pgxCrashesPgBouncer + " left out (it crashes PgBouncer 1.18)"
	}
	args = append(args, m.pkgs...)
	// The TCP variable enables the tests that need a TCP endpoint (ping,
	// custom lookup, an invalid user): every target here is one.
	env := []string{"PGX_TEST_DATABASE=" + t.dsn("pgx_test"), "PGX_TEST_TCP_CONN_STRING=" + t.dsn("pgx_test")}
	logf("pgx %s: go test (PGX_TEST_DATABASE=%s)", t.name, t.dsn("pgx_test"))
	path := filepath.Join(o.out, "pgx-"+t.name+".json")
	err := goCmdTo(ctx, m.dir, o.pgxTimeout, env, path, args...)
	r.duration = time.Since(start)
	out, _ := os.ReadFile(path)
	scorePgx(r, m.list, parseEvents(bytes.NewReader(out)), t.viaBouncer && !t.proxy)
	if err != nil && ctx.Err() == nil && r.total() == 0 {
		r.err = fmt.Sprintf("go test: %v: %s", err, tail(out, 5))
	}
	return r
}

// scorePgx turns go test events into per-test outcomes: pass, fail, skip,
// or not reached (listed, never finished: the package binary crashed or
// timed out before it; a test that was running then counts as failed).
func scorePgx(r *result, list map[string][]string, evs []event, skipCrasher bool) {
	type key struct{ pkg, test string }
	outcome := map[key]string{}
	started := map[key]bool{}
	output := map[key]*strings.Builder{}
	for _, ev := range evs {
		if ev.Test == "" {
			continue
		}
		top := ev.Test
		if i := strings.IndexByte(top, '/'); i >= 0 {
			top = top[:i]
		}
		k := key{ev.Package, top}
		switch ev.Action {
		case "run":
			if top == ev.Test {
				started[k] = true
			}
		case "output":
			b := output[k]
			if b == nil {
				b = &strings.Builder{}
				output[k] = b
			}
			if b.Len() < 64<<10 {
				b.WriteString(ev.Output)
			}
		case "pass", "fail", "skip":
			if top == ev.Test {
				outcome[k] = ev.Action
			}
		}
	}
	var pkgs []string
	for p := range list {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		short := strings.TrimPrefix(strings.TrimPrefix(p, "github.com/jackc/pgx/v5"), "/")
		for _, name := range list[p] {
			k := key{p, name}
			id := name
			if short != "" {
				id = short + "." + name
			}
			if skipCrasher && name == pgxCrashesPgBouncer {
				r.add(id, "skip", "left out: it crashes PgBouncer 1.18")
				continue
			}
			o, ok := outcome[k]
			switch {
			case ok:
				reason := ""
				if o != "pass" {
					reason = failReason(output[k])
				}
				r.add(id, o, reason)
			case started[k]:
				r.add(id, "fail", "did not finish: the test binary timed out or crashed while it ran ("+failReason(output[k])+")")
			default:
				r.add(id, "notrun", "not reached (the package's test binary ended before it)")
			}
		}
	}
}

var (
	sqlstateRe = regexp.MustCompile(`\(SQLSTATE [0-9A-Z]{5}\)`)
	fileLineRe = regexp.MustCompile(`^\s*[\w./-]+\.go:\d+:\s*`)
)

// failReason is one line saying why a test failed or skipped: the first
// Postgres error in its output, else its first error line.
func failReason(b *strings.Builder) string {
	if b == nil {
		return ""
	}
	lines := strings.Split(b.String(), "\n")
	clean := func(l string) string {
		l = strings.TrimSpace(fileLineRe.ReplaceAllString(l, ""))
		l = strings.TrimPrefix(l, "Error:")
		l = strings.TrimSpace(l)
		if len(l) > 300 {
			l = l[:300] + "…"
		}
		return l
	}
	for _, l := range lines {
		if sqlstateRe.MatchString(l) {
			return clean(l)
		}
	}
	for _, want := range []string{"panic:", "Error:", "Error Trace", "error", "expected", "--- SKIP", "skip"} {
		for i, l := range lines {
			if strings.Contains(l, want) && !strings.HasPrefix(strings.TrimSpace(l), "=== ") {
				if want == "Error Trace" && i+2 < len(lines) {
					continue
				}
				if c := clean(l); c != "" && !strings.HasPrefix(c, "--- FAIL") {
					return c
				}
			}
		}
	}
	for _, l := range lines {
		if c := clean(l); c != "" && !strings.HasPrefix(c, "=== ") && !strings.HasPrefix(c, "--- ") {
			return c
		}
	}
	return ""
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
