package route

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// normalized renders what the normalizer makes of sql, placeholders as
// "?", and the literals' classes; "" when it declines the text.
func normalized(sql string) (text, classes string) {
	n := new(normalizer)
	if !n.run(sql) {
		return "", ""
	}
	out := string(n.key[:n.normLen])
	for k := len(n.lits); k >= 1; k-- { // longest numbers first
		out = strings.ReplaceAll(out, "$"+strconv.Itoa(slotBase+k), "?")
	}
	return out, string(n.classes)
}

// TestNormalizeRules pins which constants become placeholders and which
// stay, and which texts are not normalized at all ("").
func TestNormalizeRules(t *testing.T) {
	for _, c := range []struct{ sql, want, classes string }{
		// pgbench -M simple.
		{"SELECT abalance FROM pgbench_accounts WHERE aid = 48213;", "SELECT abalance FROM pgbench_accounts WHERE aid = ?;", "i"},
		{"UPDATE pgbench_accounts SET abalance = abalance + -4321 WHERE aid = 7", "UPDATE pgbench_accounts SET abalance = abalance + ? WHERE aid = ?", "ni"},
		{"INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (5, 1, 42, -123, CURRENT_TIMESTAMP)",
			"INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (?, ?, ?, ?, CURRENT_TIMESTAMP)", "iiin"},
		// Classes: string, integer ≥ 0 within int64, any other number.
		{"SELECT * FROM t WHERE a = 'x''y' AND b = 1.5 AND c = .5 AND d = 5. AND e = 99999999999999999999 AND f = 007",
			"SELECT * FROM t WHERE a = ? AND b = ? AND c = ? AND d = ? AND e = ? AND f = ?", "snnnni"},
		// Positions: ORDER BY / GROUP BY / DISTINCT ON constants stay.
		{"SELECT a, b FROM t WHERE c = 1 GROUP BY 1 ORDER BY 2 LIMIT 3", "SELECT a, b FROM t WHERE c = ? GROUP BY 1 ORDER BY 2 LIMIT ?", "ii"},
		{"SELECT string_agg(a, ',' ORDER BY 1) FROM t WHERE b = 2", "SELECT string_agg(a, ? ORDER BY 1) FROM t WHERE b = ?", "si"},
		{"SELECT a FROM t ORDER BY a <-> 'x' OFFSET 5", "SELECT a FROM t ORDER BY a <-> 'x' OFFSET ?", "i"},
		{"SELECT DISTINCT ON (1) a FROM t WHERE b = 2 ORDER BY 1", "SELECT DISTINCT ON (1) a FROM t WHERE b = ? ORDER BY 1", "i"},
		{"SELECT a FROM t GROUP BY a HAVING count(*) > 1", "SELECT a FROM t GROUP BY a HAVING count(*) > ?", "i"},
		{"SELECT a FROM t WHERE b = 1 ORDER BY t.limit, 2", "SELECT a FROM t WHERE b = ? ORDER BY t.limit, 2", "i"}, // a name, not LIMIT
		{"SELECT t.select 5, t.from 'x' FROM t", "", ""},
		// Type modifiers and typed literals stay; a cast keeps its type.
		{"SELECT 'a'::varchar(10), CAST(b AS numeric(10, 2)), c::character varying(5), d::pg_catalog.numeric(3) FROM t WHERE e = 3",
			"SELECT ?::varchar(10), CAST(b AS numeric(10, 2)), c::character varying(5), d::pg_catalog.numeric(3) FROM t WHERE e = ?", "si"},
		{"SELECT interval '1' day, date '2024-01-01', int8 '5', timestamp with time zone 'x' FROM t WHERE a = 1",
			"SELECT interval '1' day, date '2024-01-01', int8 '5', timestamp with time zone ? FROM t WHERE a = ?", "si"}, // pg_query: TIME ZONE $1 is the same cast
		{"SELECT * FROM f(1) AS t(a numeric(10,2)) WHERE a = 5", "SELECT * FROM f(?) AS t(a numeric(10,2)) WHERE a = ?", "ii"},
		{"WITH x AS MATERIALIZED (SELECT * FROM t WHERE a = 1) SELECT * FROM x", "WITH x AS MATERIALIZED (SELECT * FROM t WHERE a = ?) SELECT * FROM x", "i"},
		{"SELECT count(*) AS n FROM (SELECT 1 FROM t WHERE a = 'b') s", "SELECT count(*) AS n FROM (SELECT ? FROM t WHERE a = ?) s", "is"},
		{"SELECT numeric(10,2) '5' FROM t WHERE a = 1", "", ""},
		// pg_query reads `date $1` and EXTRACT($1 FROM x), not `date 1.5` or EXTRACT(5 FROM x).
		{"SELECT date 1.5 FROM t", "", ""},
		{"SELECT extract(5 FROM x), extract('year' FROM y) FROM t WHERE a = 1", "SELECT extract(5 FROM x), extract('year' FROM y) FROM t WHERE a = ?", "i"},
		// Unary minus: folded into -N when the grammar does; else N stays.
		{"SELECT -5, - 5, x -5, x - 5, -(5), - -5, 1 + -5, -5::text, -5.5, a[-1], -(-1) FROM t",
			"SELECT ?, - 5, x -5, x - 5, -(5), - -5, ? + ?, -5::text, ?, a[?], -(-1) FROM t", "ninnn"},
		{"SELECT * FROM t WHERE a = -0 OR a = -9223372036854775808", "SELECT * FROM t WHERE a = ? OR a = ?", "in"},
		// Other constants stay.
		{"SELECT 1.5e3, 0x1F, 1_000, 0o17, 0b101, B'101', X'1F', N'n', E'\\x41', $$x$$, true, false, NULL FROM t WHERE a = 'b'",
			"SELECT 1.5e3, 0x1F, 1_000, 0o17, 0b101, B'101', X'1F', N'n', E'\\x41', $$x$$, true, false, NULL FROM t WHERE a = ?", "s"},
		{"SELECT 'x'.a, '{1,2}'[1], ('(1,2)'::point)[0] FROM t", "SELECT 'x'.a, '{1,2}'[?], (?::point)[?] FROM t", "isi"},
		{"SELECT 1 FROM t WHERE a = U&'\\0041'", "", ""},
		{"SELECT 1 FROM t WHERE a = 'b'\n'c'", "", ""},
		{"SELECT 1 FROM t WHERE a = '\x80' AND b = 'c'", "SELECT ? FROM t WHERE a = '\x80' AND b = ?", "is"}, // invalid UTF-8 is the parser's error
		// Statements that are not queries keep their constants.
		{"SET statement_timeout = 5", "", ""},
		{"SET LOCAL pgshard.key = 'abc'", "", ""},
		{"CREATE TABLE t (a varchar(10) DEFAULT 'x')", "", ""},
		{"COPY t TO STDOUT (FORMAT csv, DELIMITER ';')", "", ""},
		{"EXPLAIN SELECT 1 FROM t WHERE a = 5", "", ""},
		{"EXECUTE p('a', 5)", "", ""},
		{"BEGIN; UPDATE t SET a = 1 WHERE b = 'x'; SET y = 5; COMMIT", "BEGIN; UPDATE t SET a = ? WHERE b = ?; SET y = 5; COMMIT", "is"},
		{"(SELECT 1) UNION (SELECT 2)", "(SELECT ?) UNION (SELECT ?)", "ii"},
		{"VALUES (1, 'a')", "VALUES (?, ?)", "is"},
		{"CALL p('a', 2)", "CALL p(?, ?)", "si"},
		// Hints are comments, kept.
		{"/* pgshard:key=abc */ SELECT 1 FROM t WHERE a = 'b' -- 'c'", "/* pgshard:key=abc */ SELECT ? FROM t WHERE a = ? -- 'c'", "is"},
		// Placeholders never run into neighbouring words.
		{"SELECT'x'FROM t", "SELECT ? FROM t", "s"},
		{"SELECT 0\xec\xab\x8f, 1$ FROM t WHERE a = 'x'", "SELECT 0\xec\xab\x8f, 1$ FROM t WHERE a = ?", "s"}, // trailing junk stays an error
		{"SELECT * FROM t WHERE a = $2 AND b = 'x'", "SELECT * FROM t WHERE a = $2 AND b = ?", "s"},
		// Declined: no literal, unbalanced, too large a $n, unterminated.
		{"SELECT * FROM t WHERE a = $1", "", ""},
		{"SELECT (1", "", ""},
		{"SELECT 1)", "", ""},
		{"SELECT $99999999 + 1", "", ""},
		{"SELECT 'abc", "", ""},
	} {
		got, classes := normalized(c.sql)
		if got != c.want || classes != c.classes {
			t.Errorf("%q:\n got  %q %q\n want %q %q", c.sql, got, classes, c.want, c.classes)
		}
	}
}

// TestLiteralValues: a literal's value is what constVal reads from the
// parser's constant, and it renders as exprText renders that constant.
func TestLiteralValues(t *testing.T) {
	for _, lit := range []string{"0", "7", "007", "2147483647", "2147483648", "-2147483648", "-2147483649",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
		"99999999999999999999", "00000000000000000000000000000042", "1.5", "-1.5", ".5", "5.", "-0", "-0.0", "1.50",
		"'abc'", "'it''s'", "''", "' 42 '", "'ключ'", "'" + strings.Repeat("x", 60) + "'", "'" + strings.Repeat("é", 30) + "'"} {
		sql := "SELECT " + lit
		n := new(normalizer)
		if !n.run(sql) || len(n.lits) != 1 {
			t.Fatalf("%q: not normalized to one literal", sql)
		}
		res, err := pg.Parse(sql)
		if err != nil {
			t.Fatal(err)
		}
		c := res.Stmts[0].Stmt.GetSelectStmt().TargetList[0].GetResTarget().Val
		want, _ := constVal(c.GetAConst())
		got := n.lits[0].v
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: literal %+v, parser %+v", lit, got, want)
		}
		if r := string(appendConstExpr(nil, got)); r != exprText(c) {
			t.Errorf("%s: renders %q, exprText %q", lit, r, exprText(c))
		}
		if (n.lits[0].class == litString) != (want.kind == kText) || (n.lits[0].class == litInt) != (want.kind == kInt && want.i >= 0) {
			t.Errorf("%s: class %c for %+v", lit, n.lits[0].class, want)
		}
	}
}

// TestNormalizeAllocs: normalizing a text, and routing a repeated literal
// text, allocate nothing once warm.
func TestNormalizeAllocs(t *testing.T) {
	sql := "UPDATE pgbench_accounts SET abalance = abalance + -4321 WHERE aid = 48213"
	n := new(normalizer)
	n.run(sql)
	if a := testing.AllocsPerRun(100, func() { n.run(sql) }); a != 0 {
		t.Errorf("normalizing allocates %.1f times", a)
	}
	r, err := New(testMapInternal(t), DefaultSchema(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	q := "SELECT data FROM executions WHERE id = 'abc'"
	if st, _ := r.Analyze(q); st.lit == nil {
		t.Fatal("not normalized")
	}
	if a := testing.AllocsPerRun(100, func() {
		st, _ := r.Analyze(q)
		r.Route(st, nil, nil, nil)
	}); a != 0 {
		t.Errorf("a repeated literal text allocates %.1f times", a)
	}
}

// TestCacheGetBytes: a key looked up in bytes finds what was stored under
// the same text, in whichever shard it landed.
func TestCacheGetBytes(t *testing.T) {
	c := newCache[*shape](64)
	for i := 0; i < 200; i++ {
		k := fmt.Sprintf("SELECT $%d\x00s", i)
		sh := &shape{why: k}
		c.put(k, sh)
		if got := c.getBytes([]byte(k)); got != sh && c.get(k) == sh {
			t.Fatalf("%q: getBytes misses what get finds", k)
		}
	}
	if c.getBytes([]byte("absent")) != nil {
		t.Error("getBytes found an absent key")
	}
}

// TestKeywordTable: keyword finds every keyword of the table in any case,
// and nothing else (a prefix, a longer word, a word with a digit).
func TestKeywordTable(t *testing.T) {
	seen := map[string]bool{}
	for k := kwNone + 1; k < kwCount; k++ {
		name := kwNames[k]
		if name == "" || seen[name] {
			t.Fatalf("keyword %d: name %q missing or repeated", k, name)
		}
		seen[name] = true
		for _, s := range []string{name, strings.ToUpper(name), strings.ToUpper(name[:1]) + name[1:]} {
			if got := keyword(s); got != k {
				t.Errorf("keyword(%q) = %d, want %d", s, got, k)
			}
		}
		for _, s := range []string{name[:len(name)-1], name + "s", name + "1", "_" + name} {
			if got := keyword(s); got != kwNone && kwNames[got] != strings.ToLower(s) {
				t.Errorf("keyword(%q) = %d (%q), want kwNone", s, got, kwNames[got])
			}
		}
	}
	for _, s := range []string{"", "a", "x", "executions", "selectselect", "Ünion", "9select"} {
		if got := keyword(s); got != kwNone {
			t.Errorf("keyword(%q) = %d, want kwNone", s, got)
		}
	}
}
