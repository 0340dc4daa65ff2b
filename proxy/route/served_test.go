package route_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/proxy/route"
)

// TestServedSQL: the served form reads every keyed table — at any depth,
// under its alias and column aliases, schema-qualified — through a
// filter on the buckets the shard serves (text keys through
// pgshard_fence_bucket, int8 keys through hashint8extended), leaves a CTE
// that shadows a table's name, catalogs, global and unsharded tables
// alone, and has none for a text that reads no keyed table; COPY of a
// table (with a column list) or a query becomes COPY (the filtered read).
// Checked, the served set is pgshard_fence_served_by with the map's epoch
// and ranges (the test map: four shards, 1024 buckets each).
func TestServedSQL(t *testing.T) {
	for _, checked := range []bool{false, true} {
		served := "<@ COALESCE((SELECT s.served FROM pgshard_fence_served() s), '{[0,)}'::pg_catalog.int4multirange)"
		if checked {
			served = "<@ COALESCE((SELECT pgshard_fence_served_by(1, '{0,1024,2048,3072}'::int[], '{1023,2047,3071,4095}'::int[], '{s0,s1,s2,s3}'::pg_catalog.text[])), '{[0,)}'::pg_catalog.int4multirange)"
		}
		testServedSQL(t, served, checked)
	}
}

func testServedSQL(t *testing.T, served string, checked bool) {
	// The test map's 4096 buckets: mask 4095, 5305509591434766563 & 4095 = 2275.
	filtered := func(table, col string) string {
		return "(SELECT * FROM " + table + " WHERE (((pg_catalog.hashtextextended(" + table + "." + col + "::text, 8816678312871386365) & 4095) + 2275) & 4095)::int4 " + served + ")"
	}
	for _, c := range []struct {
		schema, sql string
		want        []string // substrings, in order
		none        bool
	}{
		{sql: "SELECT count(*) FROM executions", want: []string{"SELECT count(*) FROM " + filtered("executions", "id") + " executions"}},
		{sql: "SELECT e.id FROM executions e JOIN timers t ON t.execution_id = e.id WHERE e.version > $1",
			want: []string{filtered("executions", "id") + " e JOIN " + filtered("timers", "execution_id") + " t ON", "$1"}},
		{sql: "SELECT x.a FROM public.executions AS x (a, b)", want: []string{"(SELECT * FROM public.executions WHERE (((pg_catalog.hashtextextended(executions.id::text", ") x(a, b)"}},
		{sql: "SELECT id FROM executions WHERE EXISTS (SELECT 1 FROM trace r WHERE r.execution_id = executions.id)",
			want: []string{filtered("executions", "id") + " executions", filtered("trace", "execution_id") + " r"}},
		{sql: "WITH executions AS (SELECT 1 AS id) SELECT id FROM executions", none: true},
		{sql: "WITH c AS (SELECT id FROM executions) SELECT count(*) FROM c", want: []string{"FROM " + filtered("executions", "id") + " executions"}},
		{sql: "SELECT e.id, d.body FROM executions e JOIN definitions d ON d.id = e.definition_id", want: []string{filtered("executions", "id") + " e JOIN definitions d"}},
		{sql: "SELECT relname FROM pg_class", none: true},
		{sql: "SELECT * FROM app_settings", none: true},
		{sql: "COPY executions (id, version) TO STDOUT (FORMAT csv, HEADER)",
			want: []string{"COPY (SELECT id, version FROM " + filtered("executions", "id") + " executions) TO STDOUT WITH (FORMAT CSV, HEADER)"}},
		{sql: "COPY (SELECT id FROM executions WHERE version > 1) TO STDOUT", want: []string{"COPY (SELECT id FROM " + filtered("executions", "id") + " executions WHERE version > 1) TO STDOUT"}},
		{schema: "int8", sql: "SELECT sum(k) FROM accounts", want: []string{`pg_catalog.hashint8extended(accounts.k::int8, 8816678312871386365)`, served + ") accounts"}},
	} {
		r := newRouter(t, c.schema)
		st, err := r.Analyze(c.sql)
		if err != nil {
			t.Fatalf("%s: %v", c.sql, err)
		}
		got, err := r.ServedSQL(st, st.SQL, checked)
		if err != nil {
			t.Fatalf("%s: %v", c.sql, err)
		}
		if c.none {
			if got != "" {
				t.Errorf("%s: want no served form, got %s", c.sql, got)
			}
			continue
		}
		rest := got
		for _, w := range c.want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Errorf("%s:\n got  %s\n want %s (in order)", c.sql, got, w)
				break
			}
			rest = rest[i+len(w):]
		}
		if again, _ := r.ServedSQL(st, st.SQL, checked); again != got {
			t.Errorf("%s: a second call gave another text", c.sql)
		}
		if other, _ := r.ServedSQL(st, st.SQL, !checked); other == got {
			t.Errorf("%s: checked and unchecked forms are the same text", c.sql)
		}
	}
}

// TestServedSQLUnwritable: a read of keyed tables whose served form
// cannot be written is refused (0A000), never run as it is (it could
// read a moving range on two shards); a statement that reads no keyed
// table has no served form and no error.
func TestServedSQLUnwritable(t *testing.T) {
	r := newRouter(t, "")
	// The name of deparse's own marker in a literal beside an operator
	// under an operator: the text cannot be written back faithfully.
	st, err := r.Analyze("SELECT id, 'pgshard_paren_0_x' FROM executions WHERE (version > 1 OR version < 0) IS NOT NULL")
	if err != nil {
		t.Fatal(err)
	}
	sv, err := r.ServedSQL(st, st.SQL, true)
	var ref *route.Refusal
	if sv != "" || !errors.As(err, &ref) || ref.SQLState != "0A000" {
		t.Fatalf("served form %q, %v: want a 0A000 refusal", sv, err)
	}
	st, err = r.Analyze("SELECT 'pgshard_paren_0_x', (1 > 0 OR 2 < 1) IS NOT NULL")
	if err != nil {
		t.Fatal(err)
	}
	if sv, err := r.ServedSQL(st, st.SQL, true); sv != "" || err != nil {
		t.Fatalf("a read of no keyed table: %q, %v", sv, err)
	}
}
