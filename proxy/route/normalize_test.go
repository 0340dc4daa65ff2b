package route_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/pgshard/pgshard/proxy/route"
)

// A literal substitution: the constants Postgres's own scanner finds in a
// text, replaced by other values (of the same kind, mostly).
var (
	intLits = []string{"0", "1", "2", "3", "7", "42", "1026", "1027", "65536", "2147483647", "2147483648",
		"9223372036854775807", "9223372036854775808", "99999999999999999999", "007"}
	numLits = []string{"1.5", "42.000", ".5", "5.", "0.0", "1e3", "-1", "-42", "-0", "-1.5",
		"-2147483648", "-9223372036854775808", "-9223372036854775809"}
	strLits = []string{"'a'", "'b'", "'c'", "'x'", "'z'", "'abc'", "'k1'", "'k2'", "''", "' '", "'it''s'",
		"'42'", "' 42 '", "'-7'", "'9223372036854775808'", "'ключ'", "'" + strings.Repeat("y", 50) + "'",
		"'0123456789abcdef0123456789abcdef'", "'{01234567-89AB-cdef-0123-456789abcdef}'", "'NULL'",
		"'$1'", "'1.5'", "'t'", "'f'", "'true'", "'s1'"}
)

// substitute replaces the literal constants of sql (as pg.Scan finds them)
// with random values; false if sql has none or does not scan.
func substitute(sql string, rng *rand.Rand) (string, bool) {
	res, err := pg.Scan(sql)
	if err != nil {
		return "", false
	}
	var b strings.Builder
	prev, n := 0, 0
	for _, tok := range res.Tokens {
		start, end := int(tok.Start), int(tok.End)
		if start < prev || end > len(sql) || start >= end {
			continue
		}
		var pool []string
		switch tok.Token {
		case pg.Token_ICONST:
			pool = intLits
		case pg.Token_FCONST:
			pool = numLits
		case pg.Token_SCONST:
			if sql[start] != '\'' {
				continue // E'', $$...$$, N'': kept
			}
			pool = strLits
		default:
			continue
		}
		switch rng.IntN(8) { // sometimes another kind of constant
		case 0:
			pool = strLits
		case 1:
			pool = intLits
		case 2:
			pool = numLits
		}
		v := pool[rng.IntN(len(pool))]
		b.WriteString(sql[prev:start])
		if v[0] == '-' {
			b.WriteByte(' ') // never "--"
		}
		b.WriteString(v)
		prev = end
		n++
	}
	b.WriteString(sql[prev:])
	return b.String(), n > 0
}

// routers returns a router that analyzes every text in full and one that
// normalizes literals, for a schema.
func routers(t testing.TB, schema string) (full, norm *route.Table) {
	t.Helper()
	var err error
	if full, err = route.New(testMap(t), testSchema(t, schema), route.Options{KeepLiterals: true}); err != nil {
		t.Fatal(err)
	}
	if norm, err = route.New(testMap(t), testSchema(t, schema), route.Options{}); err != nil {
		t.Fatal(err)
	}
	return full, norm
}

func sameStatement(a, b *route.Statement) string {
	switch {
	case a.SQL != b.SQL:
		return fmt.Sprintf("SQL %q / %q", a.SQL, b.SQL)
	case a.Kind != b.Kind || a.Reason != b.Reason:
		return fmt.Sprintf("kind %s %q / %s %q", a.Kind, a.Reason, b.Kind, b.Reason)
	case a.NumParams != b.NumParams || a.ReadOnly != b.ReadOnly || a.Chain != b.Chain:
		return fmt.Sprintf("params %d ro %v chain %v / %d %v %v", a.NumParams, a.ReadOnly, a.Chain, b.NumParams, b.ReadOnly, b.Chain)
	case a.SetName != b.SetName || a.SetValue != b.SetValue || a.SetLocalSQL != b.SetLocalSQL || a.PrepareName != b.PrepareName:
		return fmt.Sprintf("settings %q=%q %q %q / %q=%q %q %q", a.SetName, a.SetValue, a.SetLocalSQL, a.PrepareName, b.SetName, b.SetValue, b.SetLocalSQL, b.PrepareName)
	case a.ParseError != b.ParseError:
		return fmt.Sprintf("parse error %q / %q", a.ParseError, b.ParseError)
	case !slices.Equal(a.Tables, b.Tables) || !slices.Equal(a.PrepareTypes, b.PrepareTypes) ||
		fmt.Sprint(a.ExecuteArgs) != fmt.Sprint(b.ExecuteArgs) || (a.Prepared == nil) != (b.Prepared == nil):
		return fmt.Sprintf("tables %v types %v args %q / %v %v %q", a.Tables, a.PrepareTypes, a.ExecuteArgs, b.Tables, b.PrepareTypes, b.ExecuteArgs)
	}
	return ""
}

// bindCase is one Bind to route a statement with.
type bindCase struct {
	params  [][]byte
	formats []int16
	oids    []uint32
}

// equivalent analyzes sql with both routers, as a simple Query (Split) and
// as a Parse (Analyze), and fails unless every statement and every
// decision (reasons, refusals, merge plans, Explain's steps) are the same.
// It returns how many of the normalizing router's statements were
// analyzed through their normalized text.
func equivalent(t testing.TB, full, norm *route.Table, sql string, binds ...bindCase) int {
	t.Helper()
	a, errA := full.Split(sql)
	b, errB := norm.Split(sql)
	if (errA == nil) != (errB == nil) {
		t.Fatalf("%q: Split errors differ: %v / %v", sql, errA, errB)
	}
	if errA != nil {
		return 0
	}
	if len(a) != len(b) {
		t.Fatalf("%q: %d / %d statements", sql, len(a), len(b))
	}
	oneA, _ := full.Analyze(sql)
	oneB, _ := norm.Analyze(sql)
	normalized := 0
	binds = append(binds, bindCase{})
	check := func(x, y *route.Statement) {
		t.Helper()
		if why := sameStatement(x, y); why != "" {
			t.Fatalf("%q: statements differ: %s", sql, why)
		}
		if route.Normalized(y) {
			normalized++
		}
		for _, bc := range binds {
			ex := full.Explain(x, bc.params, bc.formats, bc.oids)
			ey := norm.Explain(y, bc.params, bc.formats, bc.oids)
			if !sameDest(ex.Dest, ey.Dest) || !slices.Equal(ex.Steps, ey.Steps) {
				t.Fatalf("%q (normalized %v, params %q): decisions differ:\nfull:       %+v\n            %q\nnormalized: %+v\n            %q",
					y.SQL, route.Normalized(y), bc.params, ex.Dest, ex.Steps, ey.Dest, ey.Steps)
			}
			if d := norm.Route(y, bc.params, bc.formats, bc.oids); !sameDest(d, ey.Dest) {
				t.Fatalf("%q: Route and Explain differ: %+v / %+v", y.SQL, d, ey.Dest)
			}
			checkInvariants(t, norm.Map(), y, ey.Dest)
		}
	}
	for i := range a {
		check(a[i], b[i])
	}
	check(oneA, oneB)
	return normalized
}

// TestNormalizeEquivalence: for every corpus case, and for variations of
// it with other literal values, the normalizing router analyzes and routes
// exactly as the router that parses every text in full. The variations of
// a case share shapes, so most are routed by an analysis made from
// another text's literals.
func TestNormalizeEquivalence(t *testing.T) {
	cases := loadCorpus(t)
	type pair struct{ full, norm *route.Table }
	rs := map[string]pair{}
	for _, s := range []string{"default", "int8"} {
		f, n := routers(t, s)
		rs[s] = pair{f, n}
	}
	rng := rand.New(rand.NewPCG(7, 11))
	var normalized, texts, withLits int
	var fallbacks []string
	for _, c := range cases {
		schema := c.Schema
		if schema == "" {
			schema = "default"
		}
		p := rs[schema]
		params, formats, err := encodeParams(c.Params)
		if err != nil {
			t.Fatal(err)
		}
		bind := bindCase{params, formats, c.OIDs}
		n := equivalent(t, p.full, p.norm, c.SQL, bind)
		if lits, why := p.norm.ShapeOf(c.SQL); lits {
			withLits++
			if n > 0 {
				normalized++
			} else {
				fallbacks = append(fallbacks, fmt.Sprintf("%s: %s", c.Name, why))
			}
		}
		texts++
		for i := 0; i < 12; i++ {
			v, ok := substitute(c.SQL, rng)
			if !ok {
				break
			}
			equivalent(t, p.full, p.norm, v, bind)
			texts++
		}
	}
	t.Logf("%d texts; %d corpus cases with literals to replace, %d of them normalized; analyzed in full:\n%s",
		texts, withLits, normalized, strings.Join(fallbacks, "\n"))
	// The equivalence above proves nothing if nothing was normalized.
	if withLits < 60 || normalized < withLits*3/4 {
		t.Errorf("only %d of %d corpus cases with literals were normalized", normalized, withLits)
	}
}

// TestNormalizeShares: texts that differ only in their constants share one
// analysis, route by their own constants, and a repeated text is one
// cache hit.
func TestNormalizeShares(t *testing.T) {
	_, r := routers(t, "int8")
	m := r.Map()
	var first *route.Statement
	for i := int64(1); i <= 200; i++ {
		sql := fmt.Sprintf("SELECT * FROM accounts WHERE k = %d", i)
		st, err := r.Analyze(sql)
		if err != nil {
			t.Fatal(err)
		}
		if !route.Normalized(st) || st.SQL != sql {
			t.Fatalf("%q: normalized %v, SQL %q", sql, route.Normalized(st), st.SQL)
		}
		if d := r.Route(st, nil, nil, nil); d.Kind != route.DestShard || d.Shard != m.ShardIndexForBucket(m.BucketInt8(i)) || d.KeyText() != fmt.Sprint(i) {
			t.Fatalf("%q: %+v", sql, d)
		}
		if again, _ := r.Analyze(sql); again != st {
			t.Fatalf("%q: a repeated text was analyzed again", sql)
		}
		if first == nil {
			first = st
		}
	}
	if n := r.ShapeCount(); n != 1 {
		t.Errorf("%d shapes for one statement with 200 values", n)
	}
	if n := r.CacheLen(); n != 200 {
		t.Errorf("CacheLen = %d, want 200 texts", n)
	}
}

// TestNormalizeContexts: every kind of literal in many grammatical
// positions — where it is a key, a value, a position, a type modifier, a
// typed literal's string, under a unary minus, before an indirection —
// analyzes and routes as the full parse does.
func TestNormalizeContexts(t *testing.T) {
	contexts := []string{
		"SELECT %s", "SELECT %s FROM executions WHERE id = 'a'", "SELECT * FROM executions WHERE id = %s",
		"SELECT * FROM executions WHERE %s = id", "SELECT id FROM executions WHERE id IN (%s, 'b')",
		"SELECT id FROM executions WHERE id = ANY(ARRAY[%s, 'x'])", "SELECT id FROM executions WHERE (id, version) = (%s, 1)",
		"INSERT INTO executions (id, definition_id, data, version) VALUES (%s, 'd', '{}', 1)",
		"UPDATE executions SET version = %s WHERE id = 'a'", "UPDATE executions SET id = %s WHERE id = 'a'",
		"DELETE FROM outbox WHERE seq = %s", "SELECT harel_commit_cas(%s, 'd', '{}', 0, '')", "CALL pgshard_commit(%s)",
		"SELECT id FROM executions ORDER BY id LIMIT %s", "SELECT id FROM executions ORDER BY id LIMIT 5 OFFSET %s",
		"SELECT id FROM executions ORDER BY %s", "SELECT definition_id, count(*) FROM executions GROUP BY %s",
		"SELECT date %s", "SELECT int8 %s FROM executions WHERE id = 'a'", "SELECT t.limit %s FROM executions t",
		"SELECT interval %s", "SELECT interval %s day", "SELECT x::numeric(%s) FROM executions", "SELECT %s::int2",
		"SELECT -%s", "SELECT - %s", "SELECT -(%s)", "SELECT 1 -%s", "SELECT 1 + -%s", "SELECT %s.x", "SELECT %s[1]",
		"SELECT extract(%s FROM now())", "SELECT %s COLLATE \"C\"", "SELECT * FROM executions WHERE id = %s COLLATE \"C\"",
		"SELECT * FROM executions WHERE id = %s::text", "SELECT * FROM executions WHERE id = %s::uuid::text",
		"SELECT * FROM executions WHERE id = CAST(%s AS varchar(3))", "SELECT * FROM executions WHERE id BETWEEN %s AND 'z'",
		"SELECT * FROM executions WHERE data LIKE %s ESCAPE '!'", "SELECT CASE WHEN %s THEN 1 ELSE %s END",
		"SELECT * FROM executions WHERE id = 'a' AND version = %s FOR UPDATE", "SELECT %s AS x, %s AS x FROM executions ORDER BY x",
		"SELECT * FROM executions e JOIN timers t ON t.execution_id = e.id AND t.execution_id = %s",
		"SELECT * FROM executions WHERE id = (SELECT %s)", "WITH x AS (SELECT %s AS id) SELECT * FROM executions WHERE id IN (SELECT id FROM x)",
		"SELECT set_config('a', 'b', %s)", "SELECT 1 FROM executions WHERE id = 'a' FETCH FIRST %s ROWS ONLY",
		"SELECT count(*) FROM executions HAVING count(*) > %s",
	}
	vals := append(append(append([]string{}, intLits...), numLits...), strLits...)
	vals = append(vals, "- 5", "-(5)", "true", "NULL", "E'a'", "$$a$$", "B'1'", "'a'\n'b'", "0x1F", "1_000", "'\x80'")
	type pair struct{ full, norm *route.Table }
	var rs []pair
	for _, s := range []string{"default", "int8"} {
		f, n := routers(t, s)
		rs = append(rs, pair{f, n})
	}
	texts, normalized := 0, 0
	for _, c := range contexts {
		for _, v := range vals {
			sql := strings.ReplaceAll(c, "%s", v)
			for _, p := range rs {
				if equivalent(t, p.full, p.norm, sql) > 0 {
					normalized++
				}
				texts++
			}
		}
	}
	t.Logf("%d texts, %d analyzed through their normalized text", texts, normalized)
	if normalized < texts/3 {
		t.Errorf("only %d of %d texts were normalized", normalized, texts)
	}
}

// FuzzNormalize: for any text, and for random substitutions of its
// literal constants, the normalizing router analyzes and routes exactly as
// the router that parses every text in full; it never panics.
func FuzzNormalize(f *testing.F) {
	for _, c := range loadCorpus(f) {
		f.Add(c.SQL, uint64(len(c.SQL)))
	}
	for _, s := range normalizeSeeds {
		f.Add(s, uint64(1))
	}
	full, norm := routers(f, "default")
	fullI, normI := routers(f, "int8")
	binds := []bindCase{{params: [][]byte{[]byte("abc"), []byte("42"), nil, []byte("x")}}}
	f.Fuzz(func(t *testing.T, sql string, seed uint64) {
		if strings.IndexByte(sql, 0) >= 0 || len(sql) > 4096 {
			return
		}
		equivalent(t, full, norm, sql, binds...)
		equivalent(t, fullI, normI, sql, binds...)
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		for i := 0; i < 3; i++ {
			v, ok := substitute(sql, rng)
			if !ok {
				return
			}
			equivalent(t, full, norm, v, binds...)
			equivalent(t, fullI, normI, v, binds...)
		}
	})
}

// normalizeSeeds are texts whose literals must not (all) become
// placeholders, for the fuzzer to start from.
var normalizeSeeds = []string{
	"SELECT id, data FROM executions ORDER BY 2 LIMIT 5",
	"SELECT definition_id, count(*) FROM executions GROUP BY 1",
	"SELECT id FROM executions WHERE id = 'a'::varchar(10)",
	"SELECT id FROM executions WHERE id = CAST('a' AS character varying(10)) AND version = 3",
	"SELECT 1 FROM executions WHERE id = 'x' AND version::numeric(10,2) = 5",
	"SELECT interval '1' day, date '2024-01-01', int8 '5' FROM executions WHERE id = 'abc'",
	"SELECT numeric(10,2) '5' FROM executions WHERE id = 'abc'",
	"SET statement_timeout = 5",
	"SET LOCAL pgshard.key = 'abc'",
	"CREATE TABLE t (a varchar(10) DEFAULT 'x', b numeric(10,2) CHECK (b > 5))",
	"COPY executions TO STDOUT WITH (FORMAT csv, DELIMITER ';')",
	"/* pgshard:key=abc */ UPDATE executions SET version = 5 WHERE id = 'abc'",
	"SELECT * FROM accounts WHERE k = -5",
	"SELECT * FROM accounts WHERE k = - 5 OR k = -(5) OR k = - -5",
	"SELECT * FROM accounts WHERE k = -5::int8",
	"UPDATE accounts SET k = k WHERE k = 1 + -2",
	"SELECT 1.5e3, 0x1F, 0o17, 0b101, 1_000, 5., .5 FROM accounts WHERE k = 1.0",
	"SELECT B'101', X'1F', N'n', E'\\x41', U&'\\0041', $$x$$ FROM executions WHERE id = E'ab\\'c'",
	"SELECT true, false, NULL FROM executions WHERE id = 'a' AND version IS NOT NULL",
	"SELECT 'a'\n'b' FROM executions WHERE id = 'a'\n'bc'",
	"SELECT DISTINCT ON (1) id FROM executions WHERE id IN ('a', 'b') ORDER BY 1",
	"SELECT id FROM executions WHERE id = ('(1,2)'::text) LIMIT 10 OFFSET 5",
	"SELECT id FROM executions ORDER BY id LIMIT 10",
	"SELECT id FROM executions ORDER BY id LIMIT 10 OFFSET 20",
	"SELECT id FROM executions WHERE id = 'x' ORDER BY id LIMIT 10 OFFSET 20",
	"SELECT id FROM executions OFFSET 0",
	"SELECT id FROM executions LIMIT 0 OFFSET 0",
	"SELECT id FROM executions LIMIT $1 OFFSET 3",
	"SELECT set_config('a', 'b', 'true') FROM executions WHERE id = 'x'",
	"SELECT 'a' AS x, 'a' AS x FROM executions ORDER BY x",
	"SELECT id || 'x' AS k FROM executions ORDER BY id || 'x'",
	"BEGIN; UPDATE executions SET version = 2 WHERE id = 'abc'; SELECT 1; COMMIT",
	"SELECT 1; SELEC 2",
	"EXECUTE p('abc', 5)",
	"PREPARE p AS SELECT * FROM executions WHERE id = 'abc'",
	"EXPLAIN SELECT * FROM executions WHERE id = 'abc'",
	"SELECT harel_commit_cas('abc', 'def', '{}', 0, '')",
	"INSERT INTO executions (id, definition_id, data, version) VALUES ('a' || 'b', 'd', '{}', 1)",
	"UPDATE executions SET id = id || 'x' WHERE id = 'a'",
	"SELECT * FROM executions WHERE id = $1 AND version = 5",
	"SELECT * FROM executions e JOIN timers t ON t.execution_id = e.id WHERE e.id = 'k1' AND t.fire_at < 5.5",
	"WITH x AS MATERIALIZED (SELECT * FROM executions WHERE id = 'a') SELECT * FROM x",
	"SELECT * FROM json_to_record('{}') AS t(a numeric(10,2)) WHERE a = 5",
	"SELECT * FROM executions WHERE id = 'x' FETCH FIRST 3 ROWS ONLY",
	"SELECT id FROM executions WHERE id = 'a''b' AND 'c' = id",
	"SELECT count(*) FROM executions WHERE id IN ('a', 'b', 'c') HAVING count(*) > 1",
	"SELECT abalance FROM pgbench_accounts WHERE aid = 48213;",
}
