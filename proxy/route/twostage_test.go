package route_test

import (
	"strings"
	"testing"

	"github.com/pgshard/pgshard/proxy/route"
)

// TestTwoStage checks which refused reads get a two-stage plan, and the
// texts of their stages.
func TestTwoStage(t *testing.T) {
	r := newRouter(t, "")
	cases := []struct {
		sql   string
		inner []string // "" = refused
		outer string
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
			inner: []string{"SELECT * FROM executions LIMIT 10001"},
			outer: "SELECT id, rank() OVER (ORDER BY version) FROM (SELECT * FROM pgshard_stage_1_) executions WHERE version > 2"},
		{sql: "SELECT a.id FROM executions a JOIN outbox b ON b.target_id = a.id",
			inner: []string{"SELECT * FROM executions LIMIT 10001", "SELECT * FROM outbox LIMIT 10001"},
			outer: "SELECT a.id FROM (SELECT * FROM pgshard_stage_1_) a JOIN (SELECT * FROM pgshard_stage_2_) b ON b.target_id = a.id"},
		{sql: "SELECT public.executions.id FROM public.executions, outbox b WHERE b.target_id = public.executions.id"},
		{sql: "SELECT e.ctid FROM executions e, outbox b WHERE b.target_id = e.id"},
		{sql: "SELECT e.id FROM executions e WHERE e.id IN (SELECT target_id FROM outbox LIMIT 3)"},
		{sql: "SELECT * FROM executions e, LATERAL (SELECT count(*) FROM timers t WHERE t.fire_at > e.version LIMIT 1) x"},
		{sql: "WITH c AS (SELECT 1 AS one) SELECT * FROM (SELECT id FROM executions, c LIMIT 2) d"},
		// a CTE over a sharded table is an inner statement of its own
		{sql: "WITH c AS (SELECT id FROM executions) SELECT * FROM (SELECT id FROM c LIMIT 2) d",
			inner: []string{"SELECT id FROM executions"},
			outer: "WITH c AS (SELECT * FROM pgshard_stage_1_) SELECT * FROM (SELECT id FROM c LIMIT 2) d"},
		{sql: `SELECT d.id FROM (SELECT id COLLATE "C" AS id FROM executions ORDER BY 1 LIMIT 2) d ORDER BY d.id`},
		{sql: "SELECT (SELECT count(*) FROM executions) + d.n FROM (SELECT count(*) AS n FROM timers) d"},
	}
	for _, c := range cases {
		st, err := r.Analyze(c.sql)
		if err != nil {
			t.Fatal(err)
		}
		d := r.Route(st, []([]byte){[]byte("1"), []byte("2")}, nil, nil)
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
		if strings.Join(got, "; ") != strings.Join(c.inner, "; ") || sg.Outer != c.outer {
			t.Errorf("%s:\n got inner %q outer %q\nwant inner %q outer %q", c.sql, got, sg.Outer, c.inner, c.outer)
		}
		// Describe shows the stages' own SQL, never the client's
		// statement as the shards' SQL.
		desc := strings.Join(d.Merge.Describe(), "\n")
		if strings.Contains(desc, "the client's statement") || !strings.Contains(desc, sg.Outer) || !strings.Contains(desc, sg.Inner[0].SQL) {
			t.Errorf("%s: Describe does not show the stages:\n%s", c.sql, desc)
		}
	}
}
