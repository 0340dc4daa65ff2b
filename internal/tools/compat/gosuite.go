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
	"strconv"
	"strings"
	"time"
)

// goSuite is a Go driver's own test suite: fetched by `go` at a version
// (never vendored) into a throwaway module and run from the module cache
// against each target, its top-level tests scored one by one.
type goSuite struct {
	name    string // scoreboard name
	module  string
	version string
	pkgs    []string // the module's packages whose tests reach a database ("" = its root)
	// env points the suite at an endpoint.
	env func(t target) []string
	// skips are tests left out of every target (scored as skipped, with
	// the reason): those no target here can pass (they need roles,
	// certificates or files the suite's own CI sets up), those too
	// brittle to score.
	skips []suiteSkip
	// args are more go test flags.
	args []string
	// leftOut is the tests left out on t as skipped (name → why), and a
	// note for the scoreboard.
	leftOut func(t target) (map[string]string, string)
}

// suiteSkip is a go test -skip pattern (an anchored regexp of top-level
// names) and why those tests are left out.
type suiteSkip struct{ re, why string }

// pgxCrashesPgBouncer is the test that crashes PgBouncer 1.18 (left out
// where the endpoint is PgBouncer itself).
const pgxCrashesPgBouncer = "TestCancelRequestContextWatcherHandler"

// pgxSuite is pgx's: the packages whose tests use PGX_TEST_DATABASE.
func pgxSuite(version string) goSuite {
	return goSuite{
		name: "pgx", module: "github.com/jackc/pgx/v5", version: version,
		pkgs: []string{"", "/pgconn", "/pgproto3", "/pgtype", "/pgtype/zeronull", "/pgxpool", "/stdlib", "/tracelog"},
		// The TCP variable enables the tests that need a TCP endpoint
		// (ping, custom lookup, an invalid user): every target here is one.
		env: func(t target) []string {
			return []string{"PGX_TEST_DATABASE=" + t.dsn("pgx_test"), "PGX_TEST_TCP_CONN_STRING=" + t.dsn("pgx_test")}
		},
		leftOut: func(t target) (map[string]string, string) {
			if t.viaBouncer && !t.proxy {
				return map[string]string{pgxCrashesPgBouncer: "left out: it crashes PgBouncer 1.18"}, pgxCrashesPgBouncer + " left out (it crashes PgBouncer 1.18)"
			}
			return nil, ""
		},
	}
}

// libpqSuite is lib/pq's (database/sql's most used Postgres driver
// before pgx, with a protocol implementation of its own), in the pgx_test
// database through libpq's environment variables.
func libpqSuite(version string) goSuite {
	return goSuite{
		name: "libpq", module: "github.com/lib/pq", version: version, pkgs: []string{""},
		env: func(t target) []string {
			return []string{"PGHOST=" + t.host, "PGPORT=" + strconv.Itoa(t.port), "PGUSER=postgres", "PGDATABASE=pgx_test", "PGSSLMODE=disable"}
		},
		skips: []suiteSkip{
			// The examples print what their environment gives (lib/pq's
			// CI's hosts and roles) or dial localhost:5432 themselves.
			{`^(TestSSL\w*|TestAuth|TestService|TestNewConnector|TestStartupParameters|TestConnectMulti|Example\w*)$`,
				"left out: it needs roles, certificates, a service file or hosts of lib/pq's own CI"},
			// Their helper panics when a listener event takes over 100 ms,
			// which ends the test binary (every later test unreached),
			// directly as well, on a loaded 2-core machine. lib/pq's
			// ListenerConn tests, which fail alone, still run.
			{`^TestListener(Listen|Unlisten|UnlistenAll|FailedQuery|Reconnect|Close|Ping)$`,
				"left out: a 100 ms wait in it panics the test binary on a loaded machine (directly too)"},
		},
		// One test at a time: the suite's 100 ms waits hold on 2 cores.
		args: []string{"-parallel", "1"},
	}
}

// goModule is a suite's throwaway module, whose test packages `go test`
// runs from the module cache.
type goModule struct {
	goSuite
	dir  string
	pkgs []string // full import paths
	// list is every top-level test and example per package.
	list map[string][]string
}

// prepareGoSuite fetches su, builds its tests and lists them. Building and
// listing run the test binaries, whose TestMain may reach a database (lib/pq's
// checks for connections left open): they reach ref's.
func prepareGoSuite(ctx context.Context, o options, su goSuite, ref target) (*goModule, error) {
	dir := filepath.Join(o.out, su.name+"mod")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	gomod := "module pgshard.compat/" + su.name + "suite\n\ngo 1.26\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		return nil, err
	}
	deps := "package " + su.name + "suite\n\nimport _ \"" + su.module + "\"\n"
	if err := os.WriteFile(filepath.Join(dir, "deps.go"), []byte(deps), 0o644); err != nil {
		return nil, err
	}
	m := &goModule{goSuite: su, dir: dir, list: map[string][]string{}}
	for _, p := range su.pkgs {
		m.pkgs = append(m.pkgs, su.module+p)
	}
	logf("fetching %s %s and its test dependencies", su.module, su.version)
	args := append([]string{"get", "-t"}, suffix(m.pkgs, "@"+su.version)...)
	if out, err := goCmd(ctx, dir, 10*time.Minute, nil, args...); err != nil {
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	logf("building %s's tests", su.name)
	args = append([]string{"test", "-count=1", "-run", "^$", "-json"}, m.pkgs...)
	if out, err := goCmd(ctx, dir, 15*time.Minute, su.env(ref), args...); err != nil {
		return nil, fmt.Errorf("building %s's tests: %w\n%s", su.name, err, tail(out, 40))
	}
	args = append([]string{"test", "-list", ".", "-json"}, m.pkgs...)
	out, err := goCmd(ctx, dir, 10*time.Minute, su.env(ref), args...)
	if err != nil {
		return nil, fmt.Errorf("listing %s's tests: %w\n%s", su.name, err, tail(out, 40))
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
	logf("%s %s: %d packages, %d top-level tests and examples", su.name, su.version, len(m.pkgs), n)
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
	var b bytes.Buffer
	err := goRun(ctx, dir, d, env, &b, args...)
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
	return goRun(ctx, dir, d, env, f, args...)
}

// goRun runs go in dir, bounded by d, its stdout and stderr to out.
func goRun(ctx context.Context, dir string, d time.Duration, env []string, out io.Writer, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off"), env...)
	cmd.WaitDelay = 10 * time.Second
	cmd.Stdout, cmd.Stderr = out, out
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

// runGoSuite runs m's suite against t.
func runGoSuite(ctx context.Context, o options, m *goModule, t target) *result {
	r := newResult(m.name, t.name)
	start := time.Now()
	// Each package's binary is bounded (a hang there costs that bound, and
	// the next packages still run); the whole run by -pgx-timeout.
	args := []string{"test", "-json", "-count=1", "-p", "1", "-timeout", min(o.pgxPackageTimeout, o.pgxTimeout-30*time.Second).String()}
	skip := map[string]string{}
	if m.leftOut != nil {
		var note string
		skip, note = m.leftOut(t)
		r.note = note
	}
	var pats []string
	for name := range skip {
		pats = append(pats, "^"+regexp.QuoteMeta(name)+"$")
	}
	for _, sk := range m.skips {
		pats = append(pats, sk.re)
	}
	if len(pats) > 0 {
		sort.Strings(pats)
		args = append(args, "-skip", strings.Join(pats, "|"))
	}
	args = append(append(args, m.args...), m.pkgs...)
	env := m.env(t)
	logf("%s %s: go test (%s)", m.name, t.name, strings.Join(env, " "))
	path := filepath.Join(o.out, m.name+"-"+t.name+".json")
	err := goCmdTo(ctx, m.dir, o.pgxTimeout, env, path, args...)
	r.duration = time.Since(start)
	out, _ := os.ReadFile(path)
	m.score(r, parseEvents(bytes.NewReader(out)), skip)
	if err != nil && ctx.Err() == nil && r.total() == 0 {
		r.err = fmt.Sprintf("go test: %v: %s", err, tail(out, 5))
	}
	return r
}

// score turns go test events into per-test outcomes: pass, fail, skip
// (by the test, or left out: m.skips and leftOut, name → why), or not
// reached (listed, never finished: the package binary crashed or timed
// out before it; a test that was running then counts as failed).
func (m *goModule) score(r *result, evs []event, leftOut map[string]string) {
	list := m.list
	skipRes := make([]*regexp.Regexp, len(m.skips))
	for i, sk := range m.skips {
		skipRes[i] = regexp.MustCompile(sk.re)
	}
	skipped := func(name string) (string, bool) {
		for i, re := range skipRes {
			if re.MatchString(name) {
				return m.skips[i].why, true
			}
		}
		return "", false
	}
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
		short := strings.TrimPrefix(strings.TrimPrefix(p, m.module), "/")
		for _, name := range list[p] {
			k := key{p, name}
			id := name
			if short != "" {
				id = short + "." + name
			}
			if why, ok := leftOut[name]; ok {
				r.add(id, "skip", why)
				continue
			}
			if why, ok := skipped(name); ok {
				r.add(id, "skip", why)
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
