package route

import (
	"regexp"
	"strings"
	"testing"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// deparseParents and deparseChildren are expressions with a hole (x) and
// what fills it: operator-like parents and operator-like children (and a
// few plain ones), every pairing a text whose parentheses matter.
var (
	deparseParents = []string{"(x) IS NULL", "(x) IS NOT NULL", "(x) IS TRUE", "(x) IS NOT FALSE", "(x) IS UNKNOWN",
		"(x) IS DISTINCT FROM c", "c IS DISTINCT FROM (x)", "(x) IS NOT DISTINCT FROM c", "NOT (x)", "(x) = c", "c = (x)",
		"(x) < c", "(x) AND c", "c AND (x)", "(x) OR c", "c OR (x)", "-(x)", "(x)::int", "(x) IN (1)", "(x) NOT IN (1)",
		"(x) BETWEEN 1 AND 2", "1 BETWEEN (x) AND 2", "1 BETWEEN 0 AND (x)", "(x) LIKE 'a'", "(x) COLLATE \"C\"",
		"(x) AT TIME ZONE 'UTC'", "(x) + 1", "1 + (x)", "1 - (x)", "(x) * 2", "2 * (x)", "(x) ->> 'a'", "(x)[1]",
		"((x)).f", "ARRAY[(x)]", "CASE WHEN (x) THEN 1 END", "CASE (x) WHEN 1 THEN 2 END", "(x) IS DOCUMENT", "(x) ISNULL",
		"(x) = ANY(ARRAY[1])", "(x) < ALL(ARRAY[1])", "(x) ^ 2", "2 ^ (x)", "(x) || 'a'", "'a' || (x)", "(x) ~ 'a'",
		"(x) SIMILAR TO 'a'", "(x) IS NOT DISTINCT FROM (x)", "f((x))", "~ (x)", "(x) !~~ 'a'", "@ (x)",
		"(x) OPERATOR(pg_catalog.+) 1", "1 OPERATOR(pg_catalog.-) (x)", "(x) IN (SELECT 1)", "EXISTS (SELECT (x))",
		"(x) IS NORMALIZED", "coalesce((x), c)", "(x)::text IS NULL"}
	deparseChildren = []string{"a OR b", "a AND b", "NOT a", "a IS NULL", "a IS NOT NULL", "a IS DISTINCT FROM b",
		"a IS NOT DISTINCT FROM b", "a = b", "a < b", "a <> b", "a + b", "a - b", "a * b", "a BETWEEN 1 AND 2",
		"a NOT BETWEEN 1 AND 2", "a BETWEEN SYMMETRIC 1 AND 2", "a IN (1,2)", "a NOT IN (1,2)", "a LIKE 'x'",
		"a NOT LIKE 'x'", "a ILIKE 'x'", "a SIMILAR TO 'x'", "a IS TRUE", "a IS NOT UNKNOWN", "-a", "a::int",
		"a COLLATE \"C\"", "a AT TIME ZONE 'UTC'", "a ->> 'x'", "a = ANY(ARRAY[1])", "a < ALL(ARRAY[1])", "a ^ b",
		"a || b", "a IS DOCUMENT", "a ~ b", "a !~ b", "CASE WHEN a THEN b END", "a OPERATOR(pg_catalog.+) b",
		"a ISNULL", "a NOTNULL", "~ a", "@ a", "a IN (SELECT 1)", "a = (SELECT 1)", "ROW(a, b)", "(a, b)", "a[1]",
		"1", "-1", "-1.5", "'x'", "NULL", "true", "a IS NORMALIZED", "a NOT BETWEEN SYMMETRIC 1 AND 2", "a % b",
		"a / b", "a = b = c", "a IS JSON", "f(a)", "a.b"}
)

var locationRe = regexp.MustCompile(`"[a-z_]*location":-?[0-9]+,?`)

// parsedJSON is sql's parse tree as JSON without locations: a comparison
// of trees that shares no code with sameStatement.
func parsedJSON(t *testing.T, sql string) (string, bool) {
	t.Helper()
	j, err := pg.ParseToJSON(sql)
	if err != nil {
		return "", false
	}
	return locationRe.ReplaceAllString(j, ""), true
}

// TestDeparseParens renders every pairing of a parent with a child: each
// must come back as SQL that parses to the tree it was written from
// (checked here on the parser's JSON, independently of proveRendered).
// It logs how many pg_query's deparser alone writes with another meaning
// or that do not parse (the premise: 0 would mean pg_query fixed it).
func TestDeparseParens(t *testing.T) {
	pairs, rawWrong := 0, 0
	for _, p := range deparseParents {
		for _, c := range deparseChildren {
			sql := "SELECT " + strings.ReplaceAll(p, "x", c)
			want, ok := parsedJSON(t, sql)
			if !ok {
				continue // not SQL (x IS NORMALIZED of a row, ...)
			}
			pairs++
			res, err := pg.Parse(sql)
			if err != nil {
				t.Fatal(err)
			}
			n := res.Stmts[0].Stmt
			if raw, err := rawDeparse(n); err == nil {
				if got, ok := parsedJSON(t, raw); !ok || got != want {
					rawWrong++
				}
			}
			out, err := deparse(n)
			if err != nil {
				t.Errorf("%s: %v", sql, err)
				continue
			}
			if got, ok := parsedJSON(t, out); !ok || got != want {
				t.Errorf("%s\n  rendered as %s: another tree", sql, out)
			}
		}
	}
	if pairs < 3000 {
		t.Fatalf("only %d pairings parse: the table lost its cases", pairs)
	}
	t.Logf("%d pairings: pg_query's deparser alone wrote %d with another meaning or not SQL; deparse wrote every one faithfully", pairs, rawWrong)
}

// TestDeparseProof: the proof refuses a text of another meaning and one
// that does not parse, and takes the faithful one; a tree built with
// fields left unset (enums, a LIMIT option without LIMIT) and COPY's
// booleans written another way are the same statement, a COPY option of
// another value is not.
func TestDeparseProof(t *testing.T) {
	tree := func(sql string) *pg.Node {
		res, err := pg.Parse(sql)
		if err != nil {
			t.Fatal(err)
		}
		return res.Stmts[0].Stmt
	}
	n := tree("SELECT (a OR b) IS NULL")
	for _, bad := range []string{"SELECT a OR b IS NULL", "SELECT (a OR b) IS NOT NULL", "SELECT (a OR b IS NULL", "SELECT 1; SELECT 2"} {
		if err := proveRendered(n, bad); err == nil {
			t.Errorf("%q passed as SELECT (a OR b) IS NULL", bad)
		}
	}
	if err := proveRendered(n, "SELECT ((a) OR b) IS NULL"); err != nil {
		t.Errorf("a faithful text refused: %v", err)
	}

	built := &pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: &pg.SelectStmt{
		TargetList:  []*pg.Node{pg.MakeResTargetNodeWithVal(pg.MakeAConstIntNode(1, -1), -1)},
		LimitOption: pg.LimitOption_LIMIT_OPTION_COUNT, // no LIMIT: none
	}}}
	if out, err := deparse(built); err != nil || out != "SELECT 1" {
		t.Errorf("a built SELECT 1: %q, %v", out, err)
	}

	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"COPY t TO STDOUT (FORMAT csv, HEADER 1)", "COPY t TO STDOUT (FORMAT csv, HEADER)", true},
		{"COPY t TO STDOUT (FORMAT csv, HEADER on)", "COPY t TO STDOUT (FORMAT csv, HEADER true)", true},
		{"COPY t TO STDOUT WITH CSV HEADER", "COPY t TO STDOUT (FORMAT csv, HEADER true)", true},
		{"COPY t TO STDOUT (FORMAT csv, HEADER 0)", "COPY t TO STDOUT (FORMAT csv, HEADER)", false},
		{"COPY t TO STDOUT (FORMAT csv, HEADER match)", "COPY t TO STDOUT (FORMAT csv, HEADER)", false},
		{"COPY t TO STDOUT (FORMAT csv, NULL 'on')", "COPY t TO STDOUT (FORMAT csv, NULL 'true')", false},
	} {
		if got := sameStatement(tree(c.a), tree(c.b)); got != c.same {
			t.Errorf("%s vs %s: same %v, want %v", c.a, c.b, got, c.same)
		}
	}
}

// FuzzDeparse renders any one statement that parses: deparse must not
// panic, and what it returns must parse back to the statement.
func FuzzDeparse(f *testing.F) {
	for _, p := range deparseParents[:20] {
		for _, c := range deparseChildren[:20] {
			f.Add("SELECT " + strings.ReplaceAll(p, "x", c))
		}
	}
	f.Add("COPY (SELECT a FROM t WHERE (a IS NULL) IS NOT TRUE) TO STDOUT (FORMAT csv, HEADER 1)")
	f.Add("SELECT pgshard_paren_0_x FROM t WHERE (a OR b) IS NULL")
	f.Fuzz(func(t *testing.T, sql string) {
		res, err := pg.Parse(sql)
		if err != nil || len(res.Stmts) != 1 {
			return
		}
		n := res.Stmts[0].Stmt
		out, err := deparse(n)
		if err != nil {
			return
		}
		again, err := pg.Parse(out)
		if err != nil || len(again.Stmts) != 1 || !sameStatement(n, again.Stmts[0].Stmt) {
			t.Fatalf("%q rendered as %q: another statement (%v)", sql, out, err)
		}
	})
}
