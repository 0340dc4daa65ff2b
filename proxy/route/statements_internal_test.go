package route

import (
	"fmt"
	"testing"
)

// newTestStatements is a statements of its own (no Table) over the
// default schema and a four-shard map.
func newTestStatements(t *testing.T, opts Options) (*statements, *placer) {
	t.Helper()
	pl := newPlacer(testMapInternal(t))
	if opts.MaxCachedSQL == 0 {
		opts.MaxCachedSQL = DefaultMaxCachedSQL
	}
	s := newStatements(compile(DefaultSchema()), &pl, opts)
	return &s, &pl
}

// TestStatementsShareShape: texts that differ only in a literal are two
// cached texts over one cached shape: their statements share the plan and
// each carries its own SQL and literal, decided by its own key.
func TestStatementsShareShape(t *testing.T) {
	s, pl := newTestStatements(t, Options{CacheSize: 64})
	var sts [2]*Statement
	for i, k := range []string{"k1", "k2"} {
		sql := "SELECT data FROM executions WHERE id = '" + k + "'"
		st, err := s.analyze(sql)
		if err != nil {
			t.Fatal(err)
		}
		if st.SQL != sql || st.lit == nil || len(st.lit.lits) != 1 || !st.lit.decided {
			t.Fatalf("%s: SQL %q, binding %+v", sql, st.SQL, st.lit)
		}
		want := pl.routeKey(k, KeyText)
		if d := st.lit.dest; d.Kind != DestShard || d.Shard != want.Shard || d.KeyText() != k {
			t.Errorf("%s: decided %+v, want shard %d key %s", sql, d, want.Shard, k)
		}
		if again := s.cachedBytes([]byte(sql)); again == nil || again.one != st {
			t.Errorf("%s: not cached as itself", sql)
		}
		sts[i] = st
	}
	if sts[0] == sts[1] || sts[0].plan != sts[1].plan {
		t.Error("the two texts do not share one plan through distinct statements")
	}
	if s.len() != 2 || s.shapes.len() != 1 {
		t.Errorf("%d texts over %d shapes, want 2 over 1", s.len(), s.shapes.len())
	}
}

// TestStatementsBounded: both caches hold at most CacheSize entries; with
// KeepLiterals there is no shape cache, and a negative size caches nothing.
func TestStatementsBounded(t *testing.T) {
	const size = 64
	s, _ := newTestStatements(t, Options{CacheSize: size})
	for i := 0; i < 10*size; i++ {
		// Every alias is a shape of its own.
		if _, err := s.analyze(fmt.Sprintf("SELECT data AS c%d FROM executions WHERE id = 'k'", i)); err != nil {
			t.Fatal(err)
		}
		if s.len() > size || s.shapes.len() > size {
			t.Fatalf("after %d texts: %d texts, %d shapes cached (bound %d)", i+1, s.len(), s.shapes.len(), size)
		}
	}
	if s.shapes.len() == 0 {
		t.Error("no shape was cached")
	}
	kept, _ := newTestStatements(t, Options{CacheSize: size, KeepLiterals: true})
	if st, _ := kept.analyze("SELECT data FROM executions WHERE id = 'k'"); kept.shapes != nil || st.lit != nil {
		t.Error("KeepLiterals normalized a text")
	}
	off, _ := newTestStatements(t, Options{CacheSize: -1})
	sql := "SELECT data FROM executions WHERE id = $1"
	a, _ := off.analyze(sql)
	b, _ := off.analyze(sql)
	if a == b || off.len() != 0 || off.shapes != nil || off.cachedBytes([]byte(sql)) != nil {
		t.Error("a disabled cache cached")
	}
}
