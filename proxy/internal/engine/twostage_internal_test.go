package engine

import (
	"strings"
	"testing"

	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// TestStageSQL checks stage 2's text and parameters: the inner rows as a
// VALUES list of parameters numbered after the client's, typed by the
// rows' OIDs; an empty result as one row of NULLs WHERE false; columns
// with a type modifier cast back to it.
func TestStageSQL(t *testing.T) {
	sg := &route.Stages{Outer: "SELECT d.a FROM (" + route.StageMarker(0) + ") d JOIN (" + route.StageMarker(1) + ") e ON true WHERE d.a > $1"}
	rows := &stageRows{fields: []pgvalue.Field{{Name: "a", OID: 20, Typmod: -1}, {Name: `b"x`, OID: 25, Typmod: -1}},
		rows: [][][]byte{{[]byte("1"), nil}, {[]byte("2"), []byte("t")}}}
	empty := &stageRows{fields: []pgvalue.Field{{Name: "c", OID: 1700, Typmod: -1}}}
	repl, types, vals, fail := stageValues([]uint32{23}, []*stageRows{rows, empty})
	if fail != nil {
		t.Fatalf("refused: %q", fail)
	}
	sql := stageText(sg.Outer, repl)
	want := `SELECT d.a FROM (SELECT * FROM (VALUES ($2, $3), ($4, $5)) AS pgshard_v("a", "b""x")) d JOIN (SELECT * FROM (VALUES ($6)) AS pgshard_v("c") WHERE false) e ON true WHERE d.a > $1`
	if sql != want {
		t.Errorf("stage 2:\n got %s\nwant %s", sql, want)
	}
	if got := len(types); got != 6 || types[0] != 23 || types[1] != 20 || types[2] != 25 || types[5] != 1700 {
		t.Errorf("types %v", types)
	}
	if len(vals) != 5 || string(vals[0]) != "1" || vals[1] != nil || vals[4] != nil {
		t.Errorf("values %q", vals)
	}
	// Columns with a type modifier are cast back to it, each column by
	// its position (two may have one name), named as the subquery names
	// them; a modifier pgvalue.TypeName cannot write is refused.
	mod := &stageRows{fields: []pgvalue.Field{{Name: "v", OID: 1043, Typmod: 14}, {Name: "v", OID: 20, Typmod: -1}, {Name: "n", OID: 1700, Typmod: 655366}},
		rows: [][][]byte{{[]byte("a"), []byte("1"), []byte("2.50")}}}
	mrepl, _, _, fail := stageValues(nil, []*stageRows{mod})
	if want := `SELECT c1::varchar(10) AS "v", c2 AS "v", c3::numeric(10,2) AS "n" FROM (VALUES ($1, $2, $3)) AS pgshard_v(c1, c2, c3)`; fail != nil || len(mrepl) != 1 || mrepl[0] != want {
		t.Errorf("type modifiers: got %q, %q\nwant %s", mrepl, fail, want)
	}
	interval := &stageRows{fields: []pgvalue.Field{{Name: "i", OID: 1186, Typmod: 2147418118}}}
	if _, _, _, fail := stageValues(nil, []*stageRows{interval}); fail == nil || !strings.Contains(string(fail), "type modifier") {
		t.Errorf("a modifier pgshard cannot restore: got %q", fail)
	}
	// A marker missing from a shard's text is no text; one there twice (a
	// merge's hidden sort column) is replaced twice, by the same
	// parameters.
	if got := stageText("SELECT 1", repl); got != "" {
		t.Errorf("no marker: got %q", got)
	}
	twice := stageText("SELECT ("+route.StageMarker(0)+"), ("+route.StageMarker(1)+") ORDER BY ("+route.StageMarker(0)+")", repl)
	if strings.Count(twice, "($2, $3), ($4, $5)") != 2 || strings.Contains(twice, "pgshard_stage_") {
		t.Errorf("a marker twice: got %q", twice)
	}
}

// TestCorrelatedBudget checks the bound on a subquery that refers to the
// row (the correlated plan): stage 2 runs it once per row over the rows
// stage 1 read for it, so their product with the other rows read is
// bounded; within it, no refusal.
func TestCorrelatedBudget(t *testing.T) {
	m, err := shardmap.Even(64, []shardmap.Shard{{Name: "a", Ordinal: 0, DSN: "postgres://x@127.0.0.1:1/d"}, {Name: "b", Ordinal: 1, DSN: "postgres://x@127.0.0.1:2/d"}})
	if err != nil {
		t.Fatal(err)
	}
	an, err := route.New(m, route.DefaultSchema(), route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := an.Analyze("SELECT a.id, (SELECT count(*) FROM outbox b WHERE b.target_id = a.id AND b.seq > 2) FROM executions a")
	if err != nil {
		t.Fatal(err)
	}
	d := an.Route(st, nil, nil, nil)
	if d.Merge == nil || d.Merge.Stages == nil || len(d.Merge.Stages.Inner) != 2 {
		t.Fatalf("want the correlated plan, got %s", d.Why())
	}
	sg := d.Merge.Stages
	if !sg.Correlated(0) || sg.Correlated(1) {
		t.Fatalf("correlated inner statements: %v %v (%s; %s)", sg.Correlated(0), sg.Correlated(1), sg.Inner[0].SQL, sg.Inner[1].SQL)
	}
	rowsOf := func(n int) *stageRows { return &stageRows{rows: make([][][]byte, n)} }
	for _, c := range []struct {
		corr, outer int
		refused     bool
	}{
		{0, 50000, false}, {2000, 1999, false}, {2000, 2000, true}, {route.CorrelatedBudget, 0, false}, {route.CorrelatedBudget + 1, 0, true}, {3, 2_000_000, true},
	} {
		fail := correlatedBudget(sg, []*stageRows{rowsOf(c.corr), rowsOf(c.outer)})
		if got := fail != nil; got != c.refused {
			t.Errorf("%d rows for the subquery, %d others: refused %v, want %v", c.corr, c.outer, got, c.refused)
		}
		if fail != nil && (!strings.Contains(string(fail), "54000") || !strings.Contains(string(fail), "refers to the row")) {
			t.Errorf("refusal %q", fail)
		}
	}
	// A plan without a correlated subquery is never bounded so.
	plain := &route.Stages{Inner: sg.Inner}
	if fail := correlatedBudget(plain, []*stageRows{rowsOf(9000), rowsOf(9000)}); fail != nil {
		t.Errorf("no correlated subquery: %q", fail)
	}
}
