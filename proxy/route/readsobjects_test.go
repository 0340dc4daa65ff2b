package route_test

import "testing"

// TestReadsObjects: a statement whose answer depends on which schema
// objects exist — a catalog of them, information_schema, a name looked up
// by function or ::regclass cast, an object's definition or size — is
// marked, wherever in the statement it is; reads of a session's or a
// server's state, and of the store's tables, are not.
func TestReadsObjects(t *testing.T) {
	r := newRouter(t, "default")
	for _, c := range []struct {
		sql  string
		want bool
	}{
		{"SELECT count(*) FROM pg_class WHERE relname = 't'", true},
		{"SELECT relname FROM pg_catalog.pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace", true},
		{"SELECT tablename FROM pg_tables WHERE schemaname = 'public'", true},
		{"SELECT table_name FROM information_schema.tables", true},
		{"SELECT column_name FROM information_schema.columns WHERE table_name = 't'", true},
		{"SELECT count(*) FROM pg_attribute WHERE attrelid = 't'::regclass", true},
		{"SELECT 't'::pg_catalog.regclass::oid", true},
		{"SELECT to_regclass('t') IS NOT NULL", true},
		{"SELECT pg_relation_size('t')", true},
		{"SELECT 1 WHERE EXISTS (SELECT 1 FROM pg_class WHERE relname = 't')", true},
		{"SELECT format_type(atttypid, atttypmod) FROM pg_attribute LIMIT 1", true},
		{"SELECT 1", false},
		{"SELECT now(), current_setting('work_mem')", false},
		{"SELECT count(*) FROM pg_locks", false},
		{"SELECT pid FROM pg_stat_activity", false},
		{"SELECT name FROM pg_prepared_statements", false},
		{"SELECT * FROM executions WHERE id = 'k'", false},
		{"SELECT * FROM tables", false}, // not information_schema's: not on the search path
	} {
		st, err := r.Analyze(c.sql)
		if err != nil {
			t.Fatal(err)
		}
		if st.ReadsObjects != c.want || !st.ReadOnly {
			t.Errorf("%s: ReadsObjects = %v, read-only %v; want %v, read-only", c.sql, st.ReadsObjects, st.ReadOnly, c.want)
		}
	}
}
