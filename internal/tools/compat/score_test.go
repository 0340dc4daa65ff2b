package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScoreGoSuite(t *testing.T) {
	const pkg = "github.com/jackc/pgx/v5/pgconn"
	m := &goModule{goSuite: pgxSuite("v0"), list: map[string][]string{pkg: {"TestA", "TestB", "TestC", "TestD", "TestE", pgxCrashesPgBouncer}}}
	evs := []event{
		{Action: "run", Package: pkg, Test: "TestA"},
		{Action: "pass", Package: pkg, Test: "TestA"},
		{Action: "run", Package: pkg, Test: "TestB"},
		{Action: "run", Package: pkg, Test: "TestB/sub"},
		{Action: "output", Package: pkg, Test: "TestB/sub", Output: "    x_test.go:12: \n"},
		{Action: "output", Package: pkg, Test: "TestB/sub", Output: "    x_test.go:12: ERROR: CREATE TEMP TABLE refused (SQLSTATE 0A000)\n"},
		{Action: "fail", Package: pkg, Test: "TestB/sub"},
		{Action: "fail", Package: pkg, Test: "TestB"},
		{Action: "run", Package: pkg, Test: "TestC"},
		{Action: "skip", Package: pkg, Test: "TestC"},
		{Action: "run", Package: pkg, Test: "TestD"},
		{Action: "output", Package: pkg, Test: "TestD", Output: "panic: test timed out after 5m0s\n"},
	}
	r := newResult("pgx", "x")
	leftOut, _ := m.leftOut(target{viaBouncer: true})
	m.score(r, evs, leftOut)
	if r.Passed != 1 || r.Failed != 2 || r.Skipped != 2 || r.NotReached != 1 {
		t.Fatalf("got %+v", r)
	}
	for test, want := range map[string]string{"pgconn.TestA": "pass", "pgconn.TestB": "fail", "pgconn.TestC": "skip", "pgconn.TestD": "fail", "pgconn.TestE": "notrun", "pgconn." + pgxCrashesPgBouncer: "skip"} {
		if got := r.Outcomes[test]; got != want {
			t.Errorf("%s: %s, want %s", test, got, want)
		}
	}
	if got := r.Reasons["pgconn.TestB"]; got != "ERROR: CREATE TEMP TABLE refused (SQLSTATE 0A000)" {
		t.Errorf("reason of TestB: %q", got)
	}
	if got := r.Reasons["pgconn.TestD"]; !strings.Contains(got, "did not finish") || !strings.Contains(got, "timed out") {
		t.Errorf("reason of TestD: %q", got)
	}

	// A suite's own left-out pattern: skipped with its reason on every
	// target, never "not reached"; the root package's tests go by name.
	lq := &goModule{goSuite: libpqSuite("v0"), list: map[string][]string{"github.com/lib/pq": {"TestSSLMode", "TestAuth", "TestAuthX", "TestBytea"}}}
	r = newResult("libpq", "x")
	lq.score(r, []event{{Action: "run", Package: "github.com/lib/pq", Test: "TestBytea"}, {Action: "pass", Package: "github.com/lib/pq", Test: "TestBytea"}}, nil)
	for test, want := range map[string]string{"TestSSLMode": "skip", "TestAuth": "skip", "TestAuthX": "notrun", "TestBytea": "pass"} {
		if got := r.Outcomes[test]; got != want {
			t.Errorf("libpq %s: %s, want %s", test, got, want)
		}
	}
	if got := r.Reasons["TestAuth"]; !strings.Contains(got, "lib/pq's own CI") {
		t.Errorf("reason of TestAuth: %q", got)
	}
}

func TestScoreRegress(t *testing.T) {
	schedule := "# comment\ntest: tablespace\ntest: boolean char name\n\ntest: psql largeobject\n"
	stdout := `test tablespace                   ... ok          318 ms
parallel group (3 tests):  char name boolean
     boolean                      ... ok          100 ms
     char                         ... FAILED      101 ms
     name                         ... failed (ignored)     20 ms
parallel group (2 tests):  psql largeobject
`
	diffs := `diff -U3 /x/expected/char.out /y/results/char.out
--- /x/expected/char.out
+++ /y/results/char.out
@@ -1,3 +1,4 @@
 SELECT 1;
+ERROR:  pgshard refused it
diff -U3 /x/expected/name.out /y/results/name.out
--- /x/expected/name.out
+++ /y/results/name.out
@@ -1 +1 @@
-a
+b
`
	r := newResult("regress", "x")
	scoreRegress(r, schedule, stdout, diffs, true)
	if r.Passed != 2 || r.Failed != 2 || r.NotReached != 2 {
		t.Fatalf("got %+v", r)
	}
	if r.Reasons["char"] != "ERROR:  pgshard refused it" || r.Reasons["name"] != "output differs: b" {
		t.Errorf("reasons %q", r.Reasons)
	}
	if !strings.Contains(r.Reasons["psql"], "time bound") {
		t.Errorf("not reached at the time bound: %q", r.Reasons["psql"])
	}
}

func TestScoreboard(t *testing.T) {
	direct := newResult("pgx", "direct")
	direct.add("A", "pass", "")
	direct.add("B", "pass", "")
	direct.add("C", "skip", "no env")
	other := newResult("pgx", "pgshard-session")
	other.add("A", "pass", "")
	other.add("B", "fail", `ERROR: relation "t1" refused 12 times (SQLSTATE 0A000)`)
	other.add("C", "skip", "no env")
	sb := newScoreboard([]*result{direct, other})
	if len(sb.Differences) != 1 || sb.Differences[0].Test != "B" || sb.Differences[0].Direct != "pass" || sb.Differences[0].Got != "fail" {
		t.Fatalf("differences %+v", sb.Differences)
	}
	if n := sb.Classes["pgx pgshard-session"][`ERROR: relation "…" refused N times (SQLSTATE 0A000)`]; n != 1 {
		t.Errorf("classes %v", sb.Classes)
	}
	text := sb.text()
	for _, want := range []string{"pgshard-session", "Every difference from direct Postgres", "pgx pgshard-session: B: direct pass, here fail"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	dir := t.TempDir()
	if err := sb.write(dir); err != nil {
		t.Fatal(err)
	}
	th := filepath.Join(dir, "th.txt")
	for _, tc := range []struct {
		lines string
		fail  int
		bad   bool
	}{
		{"pgx pgshard-session passed>=1\npgx direct failed<=0\n", 0, false},
		{"# floor\npgx pgshard-session passed>=2\n", 1, false},
		{"pgx pgshard-session failed<=0\n", 1, false},
		{"pgx nowhere passed>=0\n", 1, false},
		{"pgx pgshard-session passed=2\n", 0, true},
	} {
		if err := os.WriteFile(th, []byte(tc.lines), 0o644); err != nil {
			t.Fatal(err)
		}
		failed, err := sb.check(th)
		if (err != nil) != tc.bad || len(failed) != tc.fail {
			t.Errorf("%q: failed %v, err %v", tc.lines, failed, err)
		}
	}
}

func TestFailReason(t *testing.T) {
	for _, tc := range []struct{ out, want string }{
		{"=== RUN TestX\n    conn_test.go:10: \n        \tError Trace:\tconn_test.go:10\n        \tError:      \tReceived unexpected error:\n        \t            \tERROR: boom (SQLSTATE 42P01)\n", "ERROR: boom (SQLSTATE 42P01)"},
		{"    x_test.go:5: expected 1, got 2\n--- FAIL: TestX (0.00s)\n", "expected 1, got 2"},
		{"", ""},
	} {
		var b strings.Builder
		b.WriteString(tc.out)
		if got := failReason(&b); got != tc.want {
			t.Errorf("failReason(%q) = %q, want %q", tc.out, got, tc.want)
		}
	}
}
