package route

import (
	"strings"
	"testing"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// scannerComments returns the block comments Postgres's own scanner finds.
func scannerComments(t testing.TB, sql string) ([]string, bool) {
	res, err := pg.Scan(sql)
	if err != nil {
		return nil, false
	}
	var out []string
	for _, tok := range res.Tokens {
		if tok.Token == pg.Token_C_COMMENT {
			c := sql[tok.Start:tok.End]
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(c, "/*"), "*/"))
		}
	}
	return out, true
}

func lexComments(sql string) ([]string, bool) {
	lr := lex(sql, false, 0)
	if lr.bad {
		return nil, false
	}
	var out []string
	for _, c := range lr.comments {
		out = append(out, c.body)
	}
	return out, true
}

var lexCases = []string{
	"SELECT 1",
	"/* pgshard:key=abc */ SELECT 1",
	"SELECT '/* not a comment */' /* a comment */",
	"SELECT E'\\' /* still a string */' /* real */",
	"SELECT $$ /* in dollars */ $$, $tag$ $$ /* x */ $tag$ /* out */",
	`SELECT "/* ident */" /* c */`,
	"SELECT 1 -- line /* not block */\n /* block */",
	"SELECT /* outer /* nested */ still outer */ 1",
	"SELECT a$b /* c */ FROM t",
	"SELECT $1 /* p */, $2",
	"SELECT U&'\\0041' /* u */, X'1F' /* x */, B'01' /* b */, N'n' /* n */",
	"SELECT 1.5e-3 /* num */ ::text",
	"SELECT 'it''s' /* q */",
	"SELECT 1 */* strange */ 2",
	"/**/SELECT/***/1",
	"SELECT 'a'\n'b' /* continued string */",
}

// TestLexComments: the lexer finds exactly the block comments Postgres's
// scanner finds (hints must never be read from inside a string).
func TestLexComments(t *testing.T) {
	for _, sql := range lexCases {
		want, ok := scannerComments(t, sql)
		if !ok {
			t.Fatalf("scanner rejects %q", sql)
		}
		got, ok := lexComments(sql)
		if !ok {
			t.Fatalf("lexer rejects %q", sql)
		}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%q: lexer comments %q, scanner %q", sql, got, want)
		}
	}
}

// FuzzLex: on any text the scanner accepts, the lexer finds the same block
// comments; it never panics.
func FuzzLex(f *testing.F) {
	for _, c := range lexCases {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		if strings.IndexByte(sql, 0) >= 0 {
			return
		}
		got, gok := lexComments(sql)
		want, wok := scannerComments(t, sql)
		if !wok || !gok {
			return // an unterminated token: the parser reports it
		}
		if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
			t.Fatalf("%q: lexer comments %q, scanner %q", sql, got, want)
		}
	})
}

// TestFastPath: every statement the fast path recognises is classified the
// same by the full parser.
func TestFastPath(t *testing.T) {
	m := testMapInternal(t)
	r, err := New(m, DefaultSchema(), Options{CacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		sql  string
		kind Kind
		fast bool
	}{
		{"BEGIN", KindBegin, true},
		{"begin;", KindBegin, true},
		{"  BEGIN WORK ; ", KindBegin, true},
		{"Begin Transaction", KindBegin, true},
		{"START TRANSACTION", KindBegin, true},
		{"COMMIT", KindCommit, true},
		{"commit work", KindCommit, true},
		{"END", KindCommit, true},
		{"end transaction;", KindCommit, true},
		{"ROLLBACK", KindRollback, true},
		{"abort", KindRollback, true},
		{"-- a comment\nROLLBACK", KindRollback, true},
		{"SET LOCAL pgshard.key = 'abc'", KindSetLocal, true},
		{"set local pgshard.key to abc", KindSetLocal, true},
		{"SET LOCAL pgshard.key = 42", KindSetLocal, true},
		{"SET LOCAL pgshard.key = 'it''s'", KindSetLocal, true},
		{"BEGIN ISOLATION LEVEL SERIALIZABLE", KindBegin, false},
		{"COMMIT AND CHAIN", KindCommit, false},
		{"ROLLBACK TO SAVEPOINT a", KindSavepoint, false},
		{"BEGIN; SELECT 1", KindBegin, false},
		{"/* pgshard:key=a */ BEGIN", KindBegin, false},
		{"SET LOCAL pgshard.key = DEFAULT", KindUnsupported, false},
		{"SET LOCAL pgshard.key = E'a\\'b'", KindSetLocal, false},
	}
	for _, c := range cases {
		st := fastPath(c.sql)
		if (st != nil) != c.fast {
			t.Errorf("%q: fast path = %v, want %v", c.sql, st != nil, c.fast)
		}
		res, err := pg.Parse(c.sql)
		if err != nil {
			t.Fatalf("%q: %v", c.sql, err)
		}
		full := r.stmts.analyzeStmt(c.sql, res.Stmts[0].Stmt)
		if full.Kind != c.kind {
			t.Errorf("%q: parser kind %s, want %s", c.sql, full.Kind, c.kind)
		}
		if st == nil {
			continue
		}
		if st.Kind != full.Kind || st.SetName != full.SetName || st.SetValue != full.SetValue || st.Chain != full.Chain {
			t.Errorf("%q: fast path %s %q=%q, parser %s %q=%q", c.sql, st.Kind, st.SetName, st.SetValue, full.Kind, full.SetName, full.SetValue)
		}
	}
}
