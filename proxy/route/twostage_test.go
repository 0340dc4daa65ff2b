package route_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/proxy/route"
)

// TestTwoStage checks which refused reads get a two-stage plan, and the
// texts of their stages.
func TestTwoStage(t *testing.T) {
	r := newRouter(t, "")
	cases := []struct {
		sql    string
		inner  []string // "" = refused
		outer  string
		spread bool // stage 2 routed as any read (Stages.Spread)
		// corr: answered only by the correlated plan (a subquery that
		// refers to the row, its tables read for stage 2 to run it per
		// row: Stages.Correlated); inner and outer not compared
		corr bool
	}{
		{sql: "SELECT d.id, rank() OVER (ORDER BY d.id) FROM (SELECT id FROM executions ORDER BY id LIMIT 3) AS d",
			inner: []string{"SELECT id FROM executions ORDER BY id LIMIT 3"},
			outer: "SELECT d.id, rank() OVER (ORDER BY d.id) FROM (SELECT * FROM pgshard_stage_1_) d"},
		{sql: "WITH c AS (SELECT count(*) AS n FROM timers) SELECT n + 1 FROM c, (SELECT max(version) AS v FROM executions) x",
			inner: []string{"SELECT count(*) AS n FROM timers", "SELECT max(version) AS v FROM executions"},
			outer: "WITH c AS (SELECT * FROM pgshard_stage_1_) SELECT n + 1 FROM c, (SELECT * FROM pgshard_stage_2_) x"},
		{sql: "SELECT x.n FROM (SELECT count(*) AS n FROM executions WHERE version > $1) x WHERE x.n > $2",
			inner: []string{"SELECT count(*) AS n FROM executions WHERE version > $1"},
			outer: "SELECT x.n FROM (SELECT * FROM pgshard_stage_1_) x WHERE x.n > $2"},
		// refused: a sharded table outside the subquery, LATERAL, a CTE
		// read by the inner subquery, COLLATE, a write
		// sharded tables in FROM are read whole (bounded), as inner
		// statements of their own
		{sql: "SELECT e.id FROM executions e JOIN (SELECT execution_id FROM timers LIMIT 2) t ON t.execution_id = e.id",
			inner: []string{"SELECT * FROM executions LIMIT 10001", "SELECT execution_id FROM timers LIMIT 2"},
			outer: "SELECT e.id FROM (SELECT * FROM pgshard_stage_1_) e JOIN (SELECT * FROM pgshard_stage_2_) t ON t.execution_id = e.id"},
		{sql: "SELECT id, rank() OVER (ORDER BY version) FROM executions WHERE version > 2",
			inner: []string{"SELECT * FROM executions WHERE version > 2 LIMIT 10001"},
			outer: "SELECT id, rank() OVER (ORDER BY version) FROM (SELECT * FROM pgshard_stage_1_) executions WHERE version > 2"},
		{sql: "SELECT a.id FROM executions a JOIN outbox b ON b.target_id = a.id",
			inner: []string{"SELECT * FROM executions LIMIT 10001", "SELECT * FROM outbox LIMIT 10001"},
			outer: "SELECT a.id FROM (SELECT * FROM pgshard_stage_1_) a JOIN (SELECT * FROM pgshard_stage_2_) b ON b.target_id = a.id"},
		{sql: "SELECT public.executions.id FROM public.executions, outbox b WHERE b.target_id = public.executions.id"},
		{sql: "SELECT e.ctid FROM executions e, outbox b WHERE b.target_id = e.id"},
		// subqueries of WHERE and the select list that do not refer to
		// the statement's rows: stage 2 keeps its FROM and is routed as
		// any read (every shard merged, or its key's shard)
		{sql: "SELECT e.id FROM executions e WHERE e.id IN (SELECT target_id FROM outbox LIMIT 3)",
			inner:  []string{"SELECT target_id FROM outbox LIMIT 3"},
			outer:  "SELECT e.id FROM executions e WHERE e.id IN (SELECT * FROM pgshard_stage_1_)",
			spread: true},
		{sql: "SELECT count(*), max(t.path) FROM timers t WHERE t.fire_at > (SELECT avg(version) FROM executions) AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event = 'x')",
			inner:  []string{"SELECT avg(version) FROM executions", "SELECT 1 FROM outbox o WHERE o.event = 'x' LIMIT 1"},
			outer:  "SELECT count(*), max(t.path) FROM timers t WHERE t.fire_at > (SELECT * FROM pgshard_stage_1_) AND NOT EXISTS (SELECT * FROM pgshard_stage_2_)",
			spread: true},
		{sql: "SELECT s.seq, (SELECT max(version) FROM executions) FROM spawns s WHERE s.parent_id = $1 AND s.child_id NOT IN (SELECT execution_id FROM processed_events)",
			inner:  []string{"SELECT execution_id FROM processed_events LIMIT 10001", "SELECT max(version) FROM executions"},
			outer:  "SELECT s.seq, (SELECT * FROM pgshard_stage_2_) FROM spawns s WHERE s.parent_id = $1 AND NOT s.child_id IN (SELECT * FROM pgshard_stage_1_)",
			spread: true},
		// an EXISTS tied to the row by one equality of qualified columns
		// is the IN of a subquery that is not (decorrelate.go)
		{sql: "SELECT a.seq FROM outbox a WHERE EXISTS (SELECT 1 FROM executions b WHERE b.id = a.target_id) ORDER BY a.seq",
			inner:  []string{"SELECT DISTINCT b.id FROM executions b LIMIT 10001"},
			outer:  "SELECT a.seq FROM outbox a WHERE COALESCE(a.target_id IN (SELECT * FROM pgshard_stage_1_), false) ORDER BY a.seq",
			spread: true},
		{sql: "SELECT count(*) FROM timers t WHERE NOT EXISTS (SELECT 1 FROM outbox o WHERE o.event = 'x' AND t.execution_id = o.target_id AND o.seq > $1)",
			inner:  []string{"SELECT DISTINCT o.target_id FROM outbox o WHERE o.event = 'x' AND o.seq > $1 LIMIT 10001"},
			outer:  "SELECT count(*) FROM timers t WHERE NOT COALESCE(t.execution_id IN (SELECT * FROM pgshard_stage_1_), false)",
			spread: true},
		// a subquery keyed to another shard than the statement's key
		{sql: "SELECT data FROM executions WHERE id = 'a' AND version > (SELECT max(version) FROM executions WHERE id = 'zz')",
			inner:  []string{"SELECT max(version) FROM executions WHERE id = 'zz'"},
			outer:  "SELECT data FROM executions WHERE id = 'a' AND version > (SELECT * FROM pgshard_stage_1_)",
			spread: true},
		// keys of two shards in the statement itself: each table read on
		// its key's shard (never whole: a key not pushed is refused)
		{sql: "SELECT e.data, t.path FROM executions e, timers t WHERE e.id = 'a' AND t.execution_id = 'zz'",
			inner: []string{"SELECT * FROM executions e WHERE e.id = 'a' LIMIT 10001", "SELECT * FROM timers t WHERE t.execution_id = 'zz' LIMIT 10001"},
			outer: "SELECT e.data, t.path FROM (SELECT * FROM pgshard_stage_1_) e, (SELECT * FROM pgshard_stage_2_) t WHERE e.id = 'a' AND t.execution_id = 'zz'"},
		{sql: "SELECT e.data, t.path FROM executions e JOIN timers t ON t.execution_id = 'zz' AND t.path <> e.data WHERE e.id = 'a'",
			inner: []string{"SELECT * FROM executions e WHERE e.id = 'a' LIMIT 10001", "SELECT * FROM timers t WHERE t.execution_id = 'zz' LIMIT 10001"},
			outer: "SELECT e.data, t.path FROM (SELECT * FROM pgshard_stage_1_) e JOIN (SELECT * FROM pgshard_stage_2_) t ON t.execution_id = 'zz' AND t.path <> e.data WHERE e.id = 'a'"},
		{sql: "SELECT e.data, t.path FROM executions e LEFT JOIN timers t ON t.path <> e.data WHERE e.id = 'a' AND t.execution_id = 'zz'"},
		// ON terms naming one table: pushed into either side of an inner
		// join and the nullable side of an outer one, never its preserved
		// side
		{sql: "SELECT count(*) FROM trace r LEFT JOIN timers t ON t.fire_at > 3 AND r.idx > 2 AND t.path = r.entry JOIN spawns s ON s.seq > $1 AND s.child_id = r.execution_id RIGHT JOIN outbox o ON o.seq > 5 AND o.target_id = s.parent_id AND s.root_path = 'x'",
			inner: []string{"SELECT * FROM trace LIMIT 10001", "SELECT * FROM timers t WHERE t.fire_at > 3 LIMIT 10001", "SELECT * FROM spawns s WHERE s.seq > $1 AND s.root_path = 'x' LIMIT 10001", "SELECT * FROM outbox LIMIT 10001"},
			outer: "SELECT count(*) FROM (SELECT * FROM pgshard_stage_1_) r LEFT JOIN (SELECT * FROM pgshard_stage_2_) t ON t.fire_at > 3 AND r.idx > 2 AND t.path = r.entry JOIN (SELECT * FROM pgshard_stage_3_) s ON s.seq > $1 AND s.child_id = r.execution_id RIGHT JOIN (SELECT * FROM pgshard_stage_4_) o ON o.seq > 5 AND o.target_id = s.parent_id AND s.root_path = 'x'"},
		// not rewritten (answered by the correlated plan): another
		// conjunct names the row; GROUP BY in the subquery; no equality
		// with the row
		{sql: "SELECT a.seq FROM outbox a WHERE EXISTS (SELECT 1 FROM executions b WHERE b.id = a.target_id AND b.version > a.seq)", corr: true},
		{sql: "SELECT a.seq FROM outbox a WHERE EXISTS (SELECT 1 FROM executions b WHERE b.id = a.target_id GROUP BY b.id)", corr: true},
		{sql: "SELECT a.seq FROM outbox a WHERE EXISTS (SELECT 1 FROM executions b WHERE b.version > a.seq)", corr: true},
		// an aggregate or a set-returning function in the select list
		// decides EXISTS itself (count(*) is always one row): kept (the
		// correlated plan)
		{sql: "SELECT a.seq FROM outbox a WHERE EXISTS (SELECT count(*) FROM executions b WHERE b.id = a.target_id)", corr: true},
		{sql: "SELECT a.seq FROM outbox a WHERE EXISTS (SELECT generate_series(1, b.version) FROM executions b WHERE b.id = a.target_id)", corr: true},
		// a subquery naming the statement's relation is correlated: it
		// stays in stage 2, its tables read first (the correlated plan)
		{sql: "SELECT a.id FROM executions a WHERE EXISTS (SELECT 1 FROM outbox b WHERE b.target_id <> a.id)", corr: true},
		{sql: "SELECT a.id FROM executions a WHERE a.version > (SELECT count(*) FROM timers t WHERE t.path = a.data)", corr: true},
		// a bare EXISTS in the select list keeps its column's name
		{sql: "SELECT a.seq, EXISTS (SELECT 1 FROM executions b WHERE b.id = a.target_id) FROM outbox a",
			inner:  []string{"SELECT DISTINCT b.id FROM executions b LIMIT 10001"},
			outer:  `SELECT a.seq, COALESCE(a.target_id IN (SELECT * FROM pgshard_stage_1_), false) AS "exists" FROM outbox a`,
			spread: true},
		// tied by two equalities: a row IN
		{sql: "SELECT a.seq FROM spawns a WHERE NOT EXISTS (SELECT 1 FROM executions b WHERE b.id = a.child_id AND a.root_path = b.definition_id AND b.version > 2)",
			inner:  []string{"SELECT DISTINCT b.id, b.definition_id FROM executions b WHERE b.version > 2 LIMIT 10001"},
			outer:  "SELECT a.seq FROM spawns a WHERE NOT COALESCE((a.child_id, a.root_path) IN (SELECT * FROM pgshard_stage_1_), false)",
			spread: true},
		// LIMIT 1 (or any positive constant) and OFFSET 0 leave an
		// EXISTS its truth value: dropped with the ORDER BY, and the EXISTS
		// decorrelated; LIMIT 0 and OFFSET 1 do not
		{sql: "SELECT a.seq FROM outbox a WHERE EXISTS (SELECT 1 AS a FROM executions b WHERE b.id = a.target_id ORDER BY b.version LIMIT 1 OFFSET 0)",
			inner:  []string{"SELECT DISTINCT b.id FROM executions b LIMIT 10001"},
			outer:  "SELECT a.seq FROM outbox a WHERE COALESCE(a.target_id IN (SELECT * FROM pgshard_stage_1_), false)",
			spread: true},
		{sql: "SELECT a.seq FROM outbox a WHERE EXISTS (SELECT 1 FROM executions b WHERE b.id = a.target_id LIMIT 0)", corr: true},
		{sql: "SELECT a.seq FROM outbox a WHERE EXISTS (SELECT 1 FROM executions b WHERE b.id = a.target_id OFFSET 1)", corr: true},
		{sql: "SELECT a.seq FROM outbox a WHERE EXISTS (SELECT 1 FROM executions b WHERE b.id = a.target_id LIMIT $1)", corr: true},
		// a scalar aggregate tied to the row off the keys: Postgres scans
		// the stage's rows once per row of the statement (the correlated
		// plan, bounded by the engine)
		{sql: "SELECT a.id, (SELECT count(*) FROM outbox b WHERE b.target_id = a.id AND b.seq > $1) FROM executions a", corr: true},
		{sql: "SELECT * FROM executions e, LATERAL (SELECT count(*) FROM timers t WHERE t.fire_at > e.version LIMIT 1) x", corr: true},
		// the deep plan: a subquery reading a CTE of the statement, or no
		// read answered alone (a join off the keys, a window over every
		// shard's rows), stays in stage 2 with its sharded tables read
		// first
		{sql: "WITH c AS (SELECT 1 AS one) SELECT * FROM (SELECT id FROM executions, c LIMIT 2) d",
			inner: []string{"SELECT * FROM executions LIMIT 10001"},
			outer: "WITH c AS (SELECT 1 AS one) SELECT * FROM (SELECT id FROM (SELECT * FROM pgshard_stage_1_) executions, c LIMIT 2) d"},
		{sql: "SELECT d.n FROM (SELECT x.id, count(*) AS n FROM executions x JOIN outbox y ON y.target_id = x.id GROUP BY x.id) d WHERE d.n > $1",
			inner: []string{"SELECT * FROM executions LIMIT 10001", "SELECT * FROM outbox LIMIT 10001"},
			outer: "SELECT d.n FROM (SELECT x.id, count(*) AS n FROM (SELECT * FROM pgshard_stage_1_) x JOIN (SELECT * FROM pgshard_stage_2_) y ON y.target_id = x.id GROUP BY x.id) d WHERE d.n > $1"},
		{sql: "SELECT id FROM executions WHERE id IN (SELECT t.execution_id FROM timers t JOIN trace r ON r.idx = t.fire_at)",
			inner: []string{"SELECT * FROM timers LIMIT 10001", "SELECT * FROM trace LIMIT 10001", "SELECT * FROM executions LIMIT 10001"},
			outer: "SELECT id FROM (SELECT * FROM pgshard_stage_3_) executions WHERE id IN (SELECT t.execution_id FROM (SELECT * FROM pgshard_stage_1_) t JOIN (SELECT * FROM pgshard_stage_2_) r ON r.idx = t.fire_at)"},
		// a window over peers is answered when its window has an ORDER BY
		// (the order of the rows it ties is Postgres's choice on one
		// database too), refused without one
		{sql: "SELECT id, row_number() OVER (ORDER BY version) FROM executions",
			inner: []string{"SELECT * FROM executions LIMIT 10001"},
			outer: "SELECT id, row_number() OVER (ORDER BY version) FROM (SELECT * FROM pgshard_stage_1_) executions"},
		{sql: "SELECT id, lag(id) OVER w FROM executions WINDOW w AS (PARTITION BY version ORDER BY id)",
			inner: []string{"SELECT * FROM executions LIMIT 10001"},
			outer: "SELECT id, lag(id) OVER w FROM (SELECT * FROM pgshard_stage_1_) executions WINDOW w AS (PARTITION BY version ORDER BY id)"},
		// a table read whole is read with the terms of the WHERE that
		// name it alone (pushdown.go): not those of a table on the
		// nullable side of an outer join, an unqualified column, a
		// volatile function, a subquery
		{sql: "SELECT a.id, lag(a.id) OVER (ORDER BY a.id) FROM executions a LEFT JOIN timers t ON t.execution_id = a.data WHERE a.version > $1 AND lower(a.definition_id) = 'd' AND t.path IS NULL AND version < 9 AND a.version < random() AND a.id IN (SELECT 'x') AND (a.id = t.path OR a.id IS NULL)",
			inner: []string{"SELECT * FROM executions a WHERE a.version > $1 AND lower(a.definition_id) = 'd' LIMIT 10001", "SELECT * FROM timers LIMIT 10001"},
			outer: "SELECT a.id, lag(a.id) OVER (ORDER BY a.id) FROM (SELECT * FROM pgshard_stage_1_) a LEFT JOIN (SELECT * FROM pgshard_stage_2_) t ON t.execution_id = a.data WHERE a.version > $1 AND lower(a.definition_id) = 'd' AND t.path IS NULL AND version < 9 AND a.version < random() AND a.id IN (SELECT 'x') AND (a.id = t.path OR a.id IS NULL)"},
		{sql: "SELECT count(*) FROM trace r FULL JOIN (timers t JOIN spawns s ON s.child_id = t.execution_id) ON r.idx = t.fire_at WHERE r.idx > 2 AND t.fire_at > 3 AND s.seq > 4",
			inner: []string{"SELECT * FROM trace LIMIT 10001", "SELECT * FROM timers LIMIT 10001", "SELECT * FROM spawns LIMIT 10001"},
			outer: "SELECT count(*) FROM (SELECT * FROM pgshard_stage_1_) r FULL JOIN ((SELECT * FROM pgshard_stage_2_) t JOIN (SELECT * FROM pgshard_stage_3_) s ON s.child_id = t.execution_id) ON r.idx = t.fire_at WHERE r.idx > 2 AND t.fire_at > 3 AND s.seq > 4"},
		{sql: "SELECT count(*) FROM timers t JOIN spawns s ON s.child_id = t.execution_id RIGHT JOIN trace r ON r.idx = t.fire_at WHERE r.idx > 2 AND t.fire_at > 3 AND s.seq > $1",
			inner: []string{"SELECT * FROM timers LIMIT 10001", "SELECT * FROM spawns LIMIT 10001", "SELECT * FROM trace r WHERE r.idx > 2 LIMIT 10001"},
			outer: "SELECT count(*) FROM (SELECT * FROM pgshard_stage_1_) t JOIN (SELECT * FROM pgshard_stage_2_) s ON s.child_id = t.execution_id RIGHT JOIN (SELECT * FROM pgshard_stage_3_) r ON r.idx = t.fire_at WHERE r.idx > 2 AND t.fire_at > 3 AND s.seq > $1"},
		{sql: "SELECT id, row_number() OVER () FROM executions"},
		{sql: "SELECT id, first_value(id) OVER w FROM executions WINDOW w AS (PARTITION BY version)"},
		{sql: "SELECT id, sum(version) OVER (ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM executions"},
		// a CTE over a sharded table is an inner statement of its own
		{sql: "WITH c AS (SELECT id FROM executions) SELECT * FROM (SELECT id FROM c LIMIT 2) d",
			inner: []string{"SELECT id FROM executions"},
			outer: "WITH c AS (SELECT * FROM pgshard_stage_1_) SELECT * FROM (SELECT id FROM c LIMIT 2) d"},
		{sql: `SELECT d.id FROM (SELECT id COLLATE "C" AS id FROM executions ORDER BY 1 LIMIT 2) d ORDER BY d.id`},
		// a subquery of the select list over a FROM that needs a stage of
		// its own: both inner, stage 2 on the default shard
		{sql: "SELECT (SELECT count(*) FROM executions) + d.n FROM (SELECT count(*) AS n FROM timers) d",
			inner: []string{"SELECT count(*) FROM executions", "SELECT count(*) AS n FROM timers"},
			outer: "SELECT (SELECT * FROM pgshard_stage_1_) + d.n FROM (SELECT * FROM pgshard_stage_2_) d"},
	}
	for _, c := range cases {
		st, err := r.Analyze(c.sql)
		if err != nil {
			t.Fatal(err)
		}
		d := r.Route(st, []([]byte){[]byte("1"), []byte("2")}, nil, nil)
		if c.corr {
			if d.Kind != route.DestAll || d.Merge == nil || d.Merge.Stages == nil || d.Merge.Stages.Spread || !anyCorrelated(d.Merge.Stages) {
				t.Errorf("%s: want the correlated plan, got %v %s", c.sql, d.Kind, d.Why())
			}
			continue
		}
		if c.inner == nil {
			if d.Kind != route.DestRefuse {
				t.Errorf("%s: want refused, got %v %s", c.sql, d.Kind, d.Why())
			}
			continue
		}
		if d.Kind != route.DestAll || d.Merge == nil || d.Merge.Stages == nil {
			t.Errorf("%s: want two stages, got %v %s", c.sql, d.Kind, d.Why())
			continue
		}
		sg := d.Merge.Stages
		var got []string
		for _, in := range sg.Inner {
			got = append(got, in.SQL)
		}
		if strings.Join(got, "; ") != strings.Join(c.inner, "; ") || sg.Outer != c.outer || sg.Spread != c.spread {
			t.Errorf("%s:\n got inner %q outer %q spread %v\nwant inner %q outer %q spread %v", c.sql, got, sg.Outer, sg.Spread, c.inner, c.outer, c.spread)
		}
		// Describe shows the stages' own SQL, never the client's
		// statement as the shards' SQL.
		desc := strings.Join(d.Merge.Describe(), "\n")
		if strings.Contains(desc, "the client's statement") || !strings.Contains(desc, sg.Outer) || !strings.Contains(desc, sg.Inner[0].SQL) {
			t.Errorf("%s: Describe does not show the stages:\n%s", c.sql, desc)
		}
	}
}

// TestTwoStageCopy checks that COPY (query) TO of a read in two stages
// gets the query's stages with the COPY to write (its options read), and
// that options pgshard cannot write keep the refusal.
func TestTwoStageCopy(t *testing.T) {
	r := newRouter(t, "")
	query := "SELECT id FROM executions WHERE version > (SELECT avg(version) FROM executions)"
	st, err := r.Analyze("COPY (" + query + ") TO STDOUT (FORMAT csv, HEADER)")
	if err != nil {
		t.Fatal(err)
	}
	d := r.Route(st, nil, nil, nil)
	if d.Kind != route.DestAll || d.Merge == nil || d.Merge.Stages == nil {
		t.Fatalf("want two stages, got %v %s", d.Kind, d.Why())
	}
	sg, co := d.Merge.Stages, d.Merge.CopyOut
	if sg.Query() != query || !sg.Spread || co == nil || !co.Rows || co.Format != route.CopyCSV || !co.Header {
		t.Errorf("stages of %q (spread %v), copy %+v", sg.Query(), sg.Spread, co)
	}
	// The SELECT itself has stages of its own, without a COPY.
	sel, err := r.Analyze(query)
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Route(sel, nil, nil, nil); d.Merge == nil || d.Merge.Stages == nil || d.Merge.CopyOut != nil {
		t.Errorf("the SELECT: %v %s", d.Kind, d.Why())
	}
	bad, err := r.Analyze("COPY (" + query + ") TO STDOUT (ENCODING 'LATIN1')")
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Route(bad, nil, nil, nil); d.Kind != route.DestRefuse {
		t.Errorf("COPY with ENCODING: want refused, got %v %s", d.Kind, d.Why())
	}
}

// TestUnshardedDefaultShard: a keyed read that also reads an unsharded
// table runs as it is on the default shard the options name, and in two
// stages on any other; a default shard the map lacks is refused.
func TestUnshardedDefaultShard(t *testing.T) {
	if _, err := route.New(testMap(t), testSchema(t, ""), route.Options{DefaultShard: "nope"}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("a default shard the map lacks: %v", err)
	}
	sql := "SELECT data FROM executions WHERE id = 'x4' AND definition_id IN (SELECT k FROM app_settings)" // x4: shard s2
	for _, c := range []struct {
		def  string
		want route.DestKind
	}{{"", route.DestAll}, {"s0", route.DestAll}, {"s2", route.DestShard}} {
		r, err := route.New(testMap(t), testSchema(t, ""), route.Options{DefaultShard: c.def})
		if err != nil {
			t.Fatal(err)
		}
		st, err := r.Analyze(sql)
		if err != nil {
			t.Fatal(err)
		}
		d := r.Route(st, nil, nil, nil)
		if d.Kind != c.want || d.Kind == route.DestShard && d.Shard != 2 || d.Kind == route.DestAll && (d.Merge == nil || d.Merge.Stages == nil || d.OnKeyShard == nil || d.OnKeyShard.Shard != 2) {
			t.Errorf("default shard %q: %s %d (%s)", c.def, d.Kind, d.Shard, d.Why())
		}
	}
}

// anyCorrelated reports whether sg reads an inner statement for a
// subquery that refers to the row (the correlated plan).
func anyCorrelated(sg *route.Stages) bool {
	for i := range sg.Inner {
		if sg.Correlated(i) {
			return true
		}
	}
	return false
}

// TestRouteApart: the plan that runs no subquery alone is found where
// the deep plan takes apart what the flat one made an inner statement,
// and where the two are the same plan (only tables read first); a
// statement Route answers alone has none.
func TestRouteApart(t *testing.T) {
	r := newRouter(t, "")
	for _, c := range []struct {
		sql   string
		inner []string // nil: no such plan
	}{
		{"SELECT id FROM executions e WHERE e.version > (SELECT count(*) FROM timers)",
			[]string{"SELECT * FROM timers LIMIT 10001", "SELECT * FROM executions LIMIT 10001"}},
		{"SELECT id, rank() OVER (ORDER BY version) FROM executions", []string{"SELECT * FROM executions LIMIT 10001"}},
		{"SELECT id FROM executions WHERE id = 'a'", nil},
	} {
		st, err := r.Analyze(c.sql)
		if err != nil {
			t.Fatal(err)
		}
		d := r.RouteApart(st, nil, nil, nil)
		if c.inner == nil {
			if d.Kind != route.DestRefuse {
				t.Errorf("%s: want no plan, got %v %s", c.sql, d.Kind, d.Why())
			}
			continue
		}
		if d.Kind != route.DestAll || d.Merge == nil || d.Merge.Stages == nil || !d.Merge.Stages.Apart() {
			t.Errorf("%s: want the plan taking it apart, got %v %s", c.sql, d.Kind, d.Why())
			continue
		}
		var got []string
		for _, in := range d.Merge.Stages.Inner {
			got = append(got, in.SQL)
		}
		if strings.Join(got, "; ") != strings.Join(c.inner, "; ") {
			t.Errorf("%s: inner %q, want %q", c.sql, got, c.inner)
		}
	}
}

// TestRefusalCause: a refusal says why it refused (Refusal.Cause) where a
// read in two stages may answer it — tables not co-located, no merge,
// an unsharded table beside a read of every shard or a keyed read of
// another shard, keys of two shards — and CauseNone where it may not
// (locks, side effects): the two-stage plan reads the cause, never the
// message.
func TestRefusalCause(t *testing.T) {
	r := newRouter(t, "")
	shardOf := func(key string) int {
		st, err := r.Analyze("SELECT data FROM executions WHERE id = '" + key + "'")
		if err != nil {
			t.Fatal(err)
		}
		return r.Route(st, nil, nil, nil).Shard
	}
	other := ""
	for i := 0; i < 50 && other == ""; i++ {
		if k := fmt.Sprintf("k%d", i); shardOf(k) != shardOf("x4") {
			other = k
		}
	}
	if other == "" {
		t.Fatal("no key of another shard than x4's among 50")
	}
	for _, c := range []struct {
		sql  string
		want route.Cause
	}{
		{"SELECT e.id FROM executions e JOIN timers t ON t.path = e.data", route.CauseApart},
		{"SELECT e.id, (SELECT count(*) FROM outbox o WHERE o.event = e.data) FROM executions e", route.CauseApart},
		{"SELECT json_agg(id) FROM executions", route.CauseMerge},
		{"SELECT e.id FROM executions e, app_settings a WHERE a.k = e.data", route.CauseUnshardedFanOut},
		{"SELECT data FROM executions WHERE id = 'x4' AND definition_id IN (SELECT k FROM app_settings)", route.CauseUnshardedKeyed},
		{"SELECT e.data, t.path FROM executions e, timers t WHERE e.id = 'x4' AND t.execution_id = '" + other + "'", route.CauseTwoShards},
		{"SELECT nextval('s') FROM executions", route.CauseNone},
		{"SELECT id FROM executions FOR UPDATE", route.CauseNone},
	} {
		st, err := r.Analyze(c.sql)
		if err != nil {
			t.Fatal(err)
		}
		d := r.RouteAlone(st)
		if d.Kind != route.DestRefuse || d.Refusal == nil {
			t.Errorf("%s: not refused alone (%v %s)", c.sql, d.Kind, d.Why())
			continue
		}
		if d.Refusal.Cause != c.want {
			t.Errorf("%s: cause %d, want %d (%s)", c.sql, d.Refusal.Cause, c.want, d.Refusal.Message)
		}
	}
}
