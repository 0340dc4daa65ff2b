package engine

import "testing"

// TestIndexTablesSQL: each name is quoted part by part as an identifier,
// then as a literal (an escape string when it holds a backslash), so a
// name of any spelling reaches to_regclass as the parser read it.
func TestIndexTablesSQL(t *testing.T) {
	got := indexTablesSQL([]string{"a_idx", `s.Mixed "q"`, `it's\x`})
	want := `SELECT DISTINCT c.relname FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indrelid WHERE i.indexrelid = ANY (ARRAY[` +
		`to_regclass('"a_idx"')::oid, to_regclass('"s"."Mixed ""q"""')::oid, to_regclass(E'"it''s\\x"')::oid])`
	if got != want {
		t.Fatalf("indexTablesSQL:\n got %s\nwant %s", got, want)
	}
}
