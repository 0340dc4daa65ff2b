package route_test

import (
	"testing"

	"github.com/pgshard/pgshard/proxy/route"
)

// TestCursorStatements: DECLARE, FETCH, MOVE and CLOSE carry what the
// proxy needs to keep a cursor over every shard itself: the name, the
// DECLARE's query analysed as a statement of its own (merged when
// key-less), BINARY and WITH HOLD, and for FETCH/MOVE the forward count
// (-1 for ALL) or that the direction is another.
func TestCursorStatements(t *testing.T) {
	r := newRouter(t, "default")
	cases := []struct {
		sql     string
		verb    route.CursorVerb
		name    string
		count   int64
		forward bool
	}{
		{"FETCH FORWARD 100 FROM _psql_cursor", route.CursorFetch, "_psql_cursor", 100, true},
		{`FETCH FORWARD 5 FROM "Srv"`, route.CursorFetch, "Srv", 5, true},
		{"FETCH NEXT FROM c", route.CursorFetch, "c", 1, true},
		{"FETCH c", route.CursorFetch, "c", 1, true},
		{"FETCH 7 IN c", route.CursorFetch, "c", 7, true},
		{"FETCH ALL FROM c", route.CursorFetch, "c", -1, true},
		{"FETCH FORWARD ALL FROM c", route.CursorFetch, "c", -1, true},
		{"FETCH FORWARD 0 FROM c", route.CursorFetch, "c", 0, false},
		{"FETCH -2 FROM c", route.CursorFetch, "c", -2, false},
		{"FETCH BACKWARD 1 FROM c", route.CursorFetch, "c", 1, false},
		{"FETCH PRIOR FROM c", route.CursorFetch, "c", 1, false},
		{"FETCH FIRST FROM c", route.CursorFetch, "c", 1, false},
		{"FETCH ABSOLUTE 3 FROM c", route.CursorFetch, "c", 3, false},
		{"FETCH RELATIVE 2 FROM c", route.CursorFetch, "c", 2, false},
		{"MOVE FORWARD 3 IN c", route.CursorMove, "c", 3, true},
		{"MOVE ALL IN c", route.CursorMove, "c", -1, true},
		{"CLOSE c", route.CursorClose, "c", 0, false},
		{"CLOSE ALL", route.CursorClose, "", 0, false},
	}
	for _, c := range cases {
		st, err := r.Analyze(c.sql)
		if err != nil {
			t.Fatalf("%s: %v", c.sql, err)
		}
		cur := st.Cursor
		if cur == nil || cur.Verb != c.verb || cur.Name != c.name || cur.Count != c.count || cur.Forward != c.forward {
			t.Errorf("%s: %+v, want verb %d name %q count %d forward %v", c.sql, cur, c.verb, c.name, c.count, c.forward)
		}
	}
	for _, c := range []struct {
		sql          string
		binary, hold bool
		merged, sel  bool
	}{
		{"DECLARE c NO SCROLL CURSOR FOR SELECT id FROM executions ORDER BY id", false, false, true, true},
		{"DECLARE c BINARY CURSOR WITHOUT HOLD FOR SELECT count(*) FROM executions", true, false, true, true},
		{"DECLARE c CURSOR WITH HOLD FOR SELECT 1", false, true, false, true},
		{"DECLARE c CURSOR FOR SELECT * FROM executions WHERE id = 'k'", false, false, false, true},
	} {
		st, err := r.Analyze(c.sql)
		if err != nil {
			t.Fatalf("%s: %v", c.sql, err)
		}
		cur := st.Cursor
		if cur == nil || cur.Verb != route.CursorDeclare || cur.Name != "c" || cur.Binary != c.binary || cur.Hold != c.hold || cur.Query == nil || cur.Query.Select != c.sel {
			t.Fatalf("%s: %+v", c.sql, cur)
		}
		d := r.Route(cur.Query, nil, nil, nil)
		if merged := d.Kind == route.DestAll && d.Merge != nil; merged != c.merged {
			t.Errorf("%s: the query's route %+v, merged across shards %v, want %v", c.sql, d, merged, c.merged)
		}
	}
	if st, _ := r.Analyze("SELECT 1"); st.Cursor != nil {
		t.Errorf("SELECT 1 has a Cursor")
	}
}
