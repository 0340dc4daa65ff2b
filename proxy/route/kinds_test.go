package route_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/proxy/route"
)

// TestKinds checks the classification fields the session engine reads.
func TestKinds(t *testing.T) {
	r := newRouter(t, "default")
	cases := []struct {
		sql  string
		want route.Statement // only the fields set here are compared, plus Kind
	}{
		{"SELECT 1", route.Statement{Kind: route.KindOther, ReadOnly: true}},
		{"", route.Statement{Kind: route.KindEmpty, ReadOnly: true}},
		{"  -- only a comment\n /* and another */ ", route.Statement{Kind: route.KindEmpty, ReadOnly: true}},
		{"BEGIN", route.Statement{Kind: route.KindBegin, ReadOnly: true}},
		{"START TRANSACTION READ ONLY", route.Statement{Kind: route.KindBegin, ReadOnly: true}},
		{"COMMIT AND CHAIN", route.Statement{Kind: route.KindCommit, Chain: true, ReadOnly: true}},
		{"END", route.Statement{Kind: route.KindCommit, ReadOnly: true}},
		{"ROLLBACK AND CHAIN", route.Statement{Kind: route.KindRollback, Chain: true, ReadOnly: true}},
		{"ABORT", route.Statement{Kind: route.KindRollback, ReadOnly: true}},
		{"SAVEPOINT sp", route.Statement{Kind: route.KindSavepoint, ReadOnly: true}},
		{"RELEASE SAVEPOINT sp", route.Statement{Kind: route.KindSavepoint, ReadOnly: true}},
		{"ROLLBACK TO sp", route.Statement{Kind: route.KindSavepoint, ReadOnly: true}},
		{"SET LOCAL statement_timeout = '5s'", route.Statement{Kind: route.KindSetLocal, SetName: "statement_timeout", SetValue: "5s", ReadOnly: true}},
		{"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", route.Statement{Kind: route.KindSetLocal, SetName: "transaction", ReadOnly: true}},
		{"SET CONSTRAINTS ALL DEFERRED", route.Statement{Kind: route.KindSetLocal, SetName: "constraints", ReadOnly: true}},
		{"SET LOCAL pgshard.key = 'abc'", route.Statement{Kind: route.KindSetLocal, SetName: "pgshard.key", SetValue: "abc", ReadOnly: true}},
		{"SET LOCAL pgshard.key TO 42", route.Statement{Kind: route.KindSetLocal, SetName: "pgshard.key", SetValue: "42", ReadOnly: true}},
		{"SET LOCAL pgshard.shard = 's1'", route.Statement{Kind: route.KindSetLocal, SetName: "pgshard.shard", SetValue: "s1", ReadOnly: true}},
		{"SET search_path = a, 'b c'", route.Statement{Kind: route.KindSetSession, SetName: "search_path", SetValue: "a, b c",
			SetLocalSQL: "SET LOCAL search_path TO 'a', 'b c'", ReadOnly: true}},
		{"SET TIME ZONE 'UTC'", route.Statement{Kind: route.KindSetSession, SetName: "timezone", SetValue: "UTC",
			SetLocalSQL: "SET LOCAL timezone TO 'UTC'", ReadOnly: true}},
		{"SET TIME ZONE LOCAL", route.Statement{Kind: route.KindSetSession, SetName: "timezone", SetLocalSQL: "SET LOCAL timezone TO DEFAULT", ReadOnly: true}},
		{"SET work_mem TO DEFAULT", route.Statement{Kind: route.KindSetSession, SetName: "work_mem", SetLocalSQL: "SET LOCAL work_mem TO DEFAULT", ReadOnly: true}},
		{"SET extra_float_digits = 3", route.Statement{Kind: route.KindSetSession, SetName: "extra_float_digits", SetValue: "3",
			SetLocalSQL: "SET LOCAL extra_float_digits TO 3", ReadOnly: true}},
		{"SET application_name = 'it''s'", route.Statement{Kind: route.KindSetSession, SetName: "application_name", SetValue: "it's",
			SetLocalSQL: "SET LOCAL application_name TO 'it''s'", ReadOnly: true}},
		{"SET myapp.user_id = 7", route.Statement{Kind: route.KindSetSession, SetName: "myapp.user_id", SetValue: "7",
			SetLocalSQL: "SET LOCAL myapp.user_id TO 7", ReadOnly: true}},
		{"RESET work_mem", route.Statement{Kind: route.KindSetSession, SetName: "work_mem", SetLocalSQL: "SET LOCAL work_mem TO DEFAULT", ReadOnly: true}},
		{"RESET ALL", route.Statement{Kind: route.KindSetSession, SetName: "all", ReadOnly: true}},
		{"SET ROLE app", route.Statement{Kind: route.KindSetSession, SetName: "role", SetValue: "app", SetLocalSQL: "SET LOCAL role TO 'app'", ReadOnly: true}},
		// One mode is SET default_transaction_<mode>, a session setting
		// the proxy keeps; several stay one statement (it pins).
		{"SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ", route.Statement{Kind: route.KindSetSession,
			SetName: "default_transaction_isolation", SetValue: "repeatable read", SetLocalSQL: "SET LOCAL default_transaction_isolation TO 'repeatable read'", ReadOnly: true}},
		{"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", route.Statement{Kind: route.KindSetSession,
			SetName: "default_transaction_read_only", SetValue: "1", SetLocalSQL: "SET LOCAL default_transaction_read_only TO 1", ReadOnly: true}},
		{"SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ ONLY, DEFERRABLE", route.Statement{Kind: route.KindSetSession,
			SetName: "session characteristics", SetLocalSQL: "SET LOCAL transaction_isolation TO 'serializable'; SET LOCAL transaction_read_only TO 1; SET LOCAL transaction_deferrable TO 1", ReadOnly: true}},
		{"SHOW TIME ZONE", route.Statement{Kind: route.KindShow, SetName: "timezone", ReadOnly: true}},
		{"SHOW ALL", route.Statement{Kind: route.KindShow, SetName: "all", ReadOnly: true}},
		{"DEALLOCATE p1", route.Statement{Kind: route.KindDeallocate, PrepareName: "p1", ReadOnly: true}},
		{"DEALLOCATE ALL", route.Statement{Kind: route.KindDeallocate, ReadOnly: true}},
		{"DISCARD ALL", route.Statement{Kind: route.KindDiscard, SetName: "all", ReadOnly: true}},
		{"DISCARD TEMP", route.Statement{Kind: route.KindDiscard, SetName: "temp", ReadOnly: true}},
		{"DISCARD PLANS", route.Statement{Kind: route.KindDiscard, SetName: "plans", ReadOnly: true}},
		{"EXECUTE p1", route.Statement{Kind: route.KindExecute, PrepareName: "p1"}},
		{"CREATE TABLE t (a int)", route.Statement{Kind: route.KindDDL, Tables: []string{"t"}}},
		{"VACUUM", route.Statement{Kind: route.KindDDL}},
		{"GRANT SELECT ON executions TO app", route.Statement{Kind: route.KindDDL}},
		{"LISTEN ch", route.Statement{Kind: route.KindUnsupported}},
		{"LOAD 'auto_explain'", route.Statement{Kind: route.KindUnsupported}},
		{"CREATE TEMP VIEW v AS SELECT 1", route.Statement{Kind: route.KindUnsupported}},
		{"CREATE TEMPORARY SEQUENCE s", route.Statement{Kind: route.KindUnsupported}},
		{"CREATE TABLE pg_temp.t (a int)", route.Statement{Kind: route.KindUnsupported}},
		{"COMMIT PREPARED 'g'", route.Statement{Kind: route.KindUnsupported}},
		{"SELECT pg_try_advisory_lock(1)", route.Statement{Kind: route.KindUnsupported}},
		{"SELECT pg_catalog.pg_advisory_unlock_all()", route.Statement{Kind: route.KindUnsupported}},
		{"SET pgshard.nope = 1", route.Statement{Kind: route.KindUnsupported}},
		{"SELECT * FROM executions WHERE id = $2 AND version = $1", route.Statement{Kind: route.KindOther, NumParams: 2, ReadOnly: true,
			Tables: []string{"executions"}}},
		{"UPDATE executions SET data = $1 FROM timers WHERE timers.execution_id = executions.id AND executions.id = $3",
			route.Statement{Kind: route.KindOther, NumParams: 3, Tables: []string{"executions", "timers"}}},
		{"WITH x AS (SELECT * FROM trace) SELECT * FROM x, definitions", route.Statement{Kind: route.KindOther, ReadOnly: true,
			Tables: []string{"trace", "definitions"}}},
	}
	for _, c := range cases {
		st, err := r.Analyze(c.sql)
		if err != nil {
			t.Fatalf("%q: %v", c.sql, err)
		}
		w := c.want
		if w.Kind == route.KindUnsupported {
			// Only the kind and the refusal matter.
			w.ReadOnly, w.SetName, w.SetValue = st.ReadOnly, st.SetName, st.SetValue
		}
		if st.Kind != w.Kind || st.ReadOnly != w.ReadOnly || st.Chain != w.Chain || st.SetName != w.SetName ||
			st.SetValue != w.SetValue || st.SetLocalSQL != w.SetLocalSQL || st.PrepareName != w.PrepareName ||
			w.NumParams != 0 && st.NumParams != w.NumParams {
			t.Errorf("%q:\n got  kind=%s ro=%v chain=%v set=%q=%q local=%q prep=%q n=%d\n want kind=%s ro=%v chain=%v set=%q=%q local=%q prep=%q n=%d",
				c.sql, st.Kind, st.ReadOnly, st.Chain, st.SetName, st.SetValue, st.SetLocalSQL, st.PrepareName, st.NumParams,
				w.Kind, w.ReadOnly, w.Chain, w.SetName, w.SetValue, w.SetLocalSQL, w.PrepareName, w.NumParams)
		}
		if w.Tables != nil && !slices.Equal(st.Tables, w.Tables) && !(len(w.Tables) == 0 && len(st.Tables) == 0) {
			t.Errorf("%q: Tables = %q, want %q", c.sql, st.Tables, w.Tables)
		}
		if st.Kind == route.KindUnsupported {
			d := r.Route(st, nil, nil, nil)
			if d.Kind != route.DestRefuse || d.Refusal.SQLState != "0A000" || st.Reason == "" || d.Refusal.Message != st.Reason {
				t.Errorf("%q: unsupported routes %+v (reason %q)", c.sql, d, st.Reason)
			}
		}
	}
}

func TestPrepareExecute(t *testing.T) {
	r := newRouter(t, "default")
	st, err := r.Analyze("PREPARE load (text, int8, mytype) AS SELECT data FROM executions WHERE id = $1 AND version = $2")
	if err != nil {
		t.Fatal(err)
	}
	if st.Kind != route.KindPrepare || st.PrepareName != "load" || !slices.Equal(st.PrepareTypes, []uint32{25, 20, 0}) {
		t.Fatalf("PREPARE: %s %q %v", st.Kind, st.PrepareName, st.PrepareTypes)
	}
	in := st.Prepared
	if in == nil || in.Kind != route.KindOther || in.NumParams != 2 || !strings.HasPrefix(in.SQL, "SELECT data FROM executions") {
		t.Fatalf("PREPARE body: %+v", in)
	}
	ex, err := r.Analyze("EXECUTE load('abc', 3)")
	if err != nil {
		t.Fatal(err)
	}
	if ex.Kind != route.KindExecute || ex.PrepareName != "load" || len(ex.ExecuteArgs) != 2 ||
		string(ex.ExecuteArgs[0]) != "abc" || string(ex.ExecuteArgs[1]) != "3" {
		t.Fatalf("EXECUTE: %+v", ex)
	}
	d := r.Route(in, ex.ExecuteArgs, nil, st.PrepareTypes)
	if want := r.Map().ShardIndexForBucket(r.Map().Bucket("abc")); d.Kind != route.DestShard || d.Shard != want {
		t.Fatalf("EXECUTE routes %+v, want shard %d", d, want)
	}
	ex, _ = r.Analyze("EXECUTE load(NULL, 3)")
	if ex.ExecuteArgs[0] != nil {
		t.Errorf("NULL argument = %q", ex.ExecuteArgs[0])
	}
	ex, _ = r.Analyze("EXECUTE load(lower('A'), 3)")
	if ex.ExecuteArgs != nil || !strings.Contains(ex.Reason, "not a constant") {
		t.Errorf("non-constant EXECUTE argument: args %q reason %q", ex.ExecuteArgs, ex.Reason)
	}
}

func TestSplit(t *testing.T) {
	r := newRouter(t, "default")
	sql := "BEGIN; /* pgshard:key=abc */ SELECT 1; UPDATE executions SET version = 1 WHERE id = 'x';COMMIT"
	sts, err := r.Split(sql)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []route.Kind
	var texts []string
	for _, st := range sts {
		kinds = append(kinds, st.Kind)
		texts = append(texts, st.SQL)
	}
	if !slices.Equal(kinds, []route.Kind{route.KindBegin, route.KindOther, route.KindOther, route.KindCommit}) {
		t.Fatalf("kinds %v", kinds)
	}
	if texts[1] != "/* pgshard:key=abc */ SELECT 1" || texts[3] != "COMMIT" {
		t.Fatalf("texts %q", texts)
	}
	m := r.Map()
	if d := r.Route(sts[1], nil, nil, nil); d.Kind != route.DestShard || d.Shard != m.ShardIndexForBucket(m.Bucket("abc")) {
		t.Errorf("hint in the second statement: %+v", d)
	}
	if d := r.Route(sts[2], nil, nil, nil); d.Kind != route.DestShard || d.Shard != m.ShardIndexForBucket(m.Bucket("x")) {
		t.Errorf("third statement: %+v", d)
	}
	// The same text again is the same analysis.
	again, _ := r.Split(sql)
	if &again[0] != &sts[0] || again[2] != sts[2] {
		t.Error("Split of a cached text did not return the cached statements")
	}
	// A Parse message may carry one statement only, as in Postgres.
	st, err := r.Analyze("SELECT 1; SELECT 2")
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Route(st, nil, nil, nil); d.Kind != route.DestRefuse || d.Refusal.SQLState != "42601" {
		t.Errorf("two statements in one Parse: %+v", d)
	}
	// A syntax error anywhere: one statement, sent unchanged.
	sts, _ = r.Split("SELECT 1; SELEC 2")
	if len(sts) != 1 || sts[0].ParseError == "" || sts[0].SQL != "SELECT 1; SELEC 2" {
		t.Errorf("syntax error: %+v", sts)
	}
	if _, err := r.Analyze("SELECT 1\x00; DROP TABLE executions"); !errors.Is(err, route.ErrNUL) {
		t.Errorf("NUL byte: err = %v", err)
	}
}

func TestBound(t *testing.T) {
	r := newRouter(t, "default")
	m := r.Map()
	route1 := func(sql string) route.Dest {
		st, err := r.Analyze(sql)
		if err != nil {
			t.Fatal(err)
		}
		return r.Route(st, nil, nil, nil)
	}
	abc := m.ShardIndexForBucket(m.Bucket("abc"))
	a := m.ShardIndexForBucket(m.Bucket("a"))
	if d := r.Bound(route1("SELECT 1"), abc); d.Kind != route.DestShard || d.Shard != abc {
		t.Errorf("any in a bound transaction: %+v", d)
	}
	if d := r.Bound(route1("SELECT * FROM executions WHERE id = 'abc'"), abc); d.Kind != route.DestShard || d.Shard != abc {
		t.Errorf("same shard: %+v", d)
	}
	d := r.Bound(route1("SELECT * FROM executions WHERE id = 'a'"), abc)
	if d.Kind != route.DestRefuse || d.Refusal.SQLState != "0A000" ||
		!strings.Contains(d.Refusal.Message, m.Shards[a].Name) || !strings.Contains(d.Refusal.Message, m.Shards[abc].Name) {
		t.Errorf("another shard: %+v", d)
	}
	if d := r.Bound(route1("SELECT id FROM executions"), abc); d.Kind != route.DestRefuse {
		t.Errorf("fan-out in a bound transaction: %+v", d)
	}
}

// TestStatementFacts checks the facts the engine reads instead of lexing
// the text itself: transaction-block restrictions, COPY, savepoint verbs
// and names (folded as Postgres folds them), RESET and SET ... DEFAULT.
func TestStatementFacts(t *testing.T) {
	r := newRouter(t, "default")
	type facts struct {
		noTxn, copy      bool
		verb, name       string
		reset, toDefault bool
		sel              bool
	}
	cases := []struct {
		sql  string
		want facts
	}{
		{"SELECT 1", facts{sel: true}},
		{"VALUES (1), (2)", facts{sel: true}},
		{"WITH x AS (SELECT 1) SELECT * FROM x", facts{sel: true}},
		{"SELECT 1 INTO t", facts{}},
		{"DECLARE c CURSOR FOR SELECT 1", facts{}},
		{"VACUUM executions", facts{noTxn: true}},
		{"vacuum (analyze) executions", facts{noTxn: true}},
		{"CREATE DATABASE x", facts{noTxn: true}},
		{"DROP DATABASE x", facts{noTxn: true}},
		{"CREATE INDEX CONCURRENTLY i ON executions (definition_id)", facts{noTxn: true}},
		{"CREATE INDEX i ON executions (definition_id)", facts{}},
		{"DROP INDEX CONCURRENTLY i", facts{noTxn: true}},
		{"DROP INDEX i", facts{}},
		{"REINDEX TABLE CONCURRENTLY executions", facts{noTxn: true}},
		{"ALTER SYSTEM SET work_mem = '8MB'", facts{noTxn: true}},
		{"CREATE TABLESPACE t LOCATION '/x'", facts{noTxn: true}},
		{"REFRESH MATERIALIZED VIEW CONCURRENTLY v", facts{noTxn: true}},
		{"-- CONCURRENTLY in a comment\nSELECT 'CONCURRENTLY'", facts{sel: true}},
		{"COPY executions TO STDOUT", facts{copy: true}},
		{"COPY (SELECT 1) TO STDOUT", facts{copy: true}},
		{"SAVEPOINT sp1", facts{verb: "SAVEPOINT", name: "sp1"}},
		{"savepoint \"Mixed Case\"", facts{verb: "SAVEPOINT", name: "Mixed Case"}},
		{"SAVEPOINT MiXeD", facts{verb: "SAVEPOINT", name: "mixed"}},
		{"RELEASE SAVEPOINT sp1", facts{verb: "RELEASE", name: "sp1"}},
		{"RELEASE sp1", facts{verb: "RELEASE", name: "sp1"}},
		{"ROLLBACK TO SAVEPOINT sp1", facts{verb: "ROLLBACK", name: "sp1"}},
		{"ROLLBACK WORK TO sp1", facts{verb: "ROLLBACK", name: "sp1"}},
		{"/* c */ ROLLBACK TRANSACTION TO SAVEPOINT \"a b\"", facts{verb: "ROLLBACK", name: "a b"}},
		{"RESET work_mem", facts{reset: true, toDefault: true}},
		{"RESET ALL", facts{reset: true, toDefault: true}},
		{"SET work_mem TO DEFAULT", facts{toDefault: true}},
		{"SET work_mem = default", facts{toDefault: true}},
		{"SET TIME ZONE LOCAL", facts{toDefault: true}},
		{"SET application_name = 'DEFAULT'", facts{}},
		{"SET work_mem = '8MB'", facts{}},
	}
	for _, c := range cases {
		st, err := r.Analyze(c.sql)
		if err != nil {
			t.Fatalf("%q: %v", c.sql, err)
		}
		got := facts{st.NoTxnBlock, st.Copy, st.SavepointVerb, st.SavepointName, st.Reset, st.ToDefault, st.Select}
		if got != c.want {
			t.Errorf("%q: got %+v, want %+v", c.sql, got, c.want)
		}
	}
	for sql, want := range map[string]string{"BEGIN": "", "BEGIN ISOLATION LEVEL REPEATABLE READ": "repeatable read",
		"START TRANSACTION READ ONLY, ISOLATION LEVEL SERIALIZABLE": "serializable",
		"SET TRANSACTION ISOLATION LEVEL READ COMMITTED":            "read committed", "begin transaction isolation level read uncommitted": "read uncommitted"} {
		st, err := r.Analyze(sql)
		if err != nil || st.Isolation != want {
			t.Errorf("%q: isolation %q, %v (want %q)", sql, st.Isolation, err, want)
		}
	}
	// A statement text remembers that a client parsed it unnamed.
	st, err := r.Analyze("SELECT data FROM executions WHERE id = $1")
	if err != nil {
		t.Fatal(err)
	}
	if st.MarkUnnamed() {
		t.Fatal("first MarkUnnamed reported an earlier use")
	}
	if !st.MarkUnnamed() {
		t.Fatal("second MarkUnnamed did not report the first")
	}
}

// TestIndexNames: the statements that name an index by its name alone
// list it as written (case folded, quotes removed, schema kept); others
// list none, a table's index statements included (their table says where).
func TestIndexNames(t *testing.T) {
	r := newRouter(t, "default")
	for sql, want := range map[string][]string{
		`DROP INDEX a_idx`: {"a_idx"},
		`DROP INDEX CONCURRENTLY IF EXISTS s.A_idx, "B x"`:    {"s.a_idx", "B x"},
		`ALTER INDEX a_idx RENAME TO b_idx`:                   {"a_idx"},
		`ALTER INDEX s.a_idx SET (fillfactor = 70)`:           {"s.a_idx"},
		`ALTER INDEX a_idx ALTER COLUMN 1 SET STATISTICS 100`: {"a_idx"},
		`ALTER INDEX a_idx ATTACH PARTITION p_idx`:            {"a_idx"},
		`ALTER INDEX a_idx DEPENDS ON EXTENSION hstore`:       {"a_idx"},
		`REINDEX INDEX CONCURRENTLY a_idx`:                    {"a_idx"},
		`COMMENT ON INDEX a_idx IS 'x'`:                       {"a_idx"},
		`CREATE INDEX a_idx ON executions (status)`:           nil,
		`REINDEX TABLE executions`:                            nil,
		`DROP TABLE a_idx`:                                    nil,
		`ALTER TABLE executions RENAME TO e2`:                 nil,
	} {
		st, err := r.Analyze(sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if !slices.Equal(st.IndexNames, want) {
			t.Errorf("%s: IndexNames %q, want %q", sql, st.IndexNames, want)
		}
	}
}
