package route_test

import (
	"strings"
	"testing"

	"github.com/pgshard/pgshard/proxy/route"
)

// TestStagesLearn checks the plans learned from a shard's 42703 for a
// subquery that names a column of the statement's row without a
// qualifier: each step's stages, and where there is nothing to learn.
func TestStagesLearn(t *testing.T) {
	r := newRouter(t, "")
	type step struct {
		at    int      // the inner statement that failed
		msg   string   // the 42703 message the previous plan's stage 1 got
		inner []string // nil: Learn finds no plan
		outer string
	}
	cases := []struct {
		sql   string
		first []string // the statement's own plan's inner statements
		steps []step
	}{
		{ // an anti-join off the keys: decorrelated once the row's column is known
			sql:   "SELECT seq FROM outbox WHERE NOT EXISTS (SELECT 1 FROM executions WHERE id = target_id) ORDER BY seq",
			first: []string{"SELECT 1 FROM executions WHERE id = target_id LIMIT 1"},
			steps: []step{
				{msg: `column "target_id" does not exist`,
					inner: []string{"SELECT DISTINCT executions.id FROM executions LIMIT 10001"},
					outer: "SELECT seq FROM outbox WHERE NOT COALESCE(outbox.target_id IN (SELECT * FROM pgshard_stage_1_), false) ORDER BY seq"},
				{msg: `column "target_id" does not exist`}, // learned already
			},
		},
		{ // tied by the key: the statement routed as it is, no stage 1
			sql:   "SELECT e.id FROM executions e WHERE EXISTS (SELECT 1 FROM timers WHERE execution_id = id AND fire_at > version)",
			first: []string{"SELECT 1 FROM timers WHERE execution_id = id AND fire_at > version LIMIT 1"},
			steps: []step{
				{msg: `column "id" does not exist`, inner: []string{},
					outer: "SELECT e.id FROM executions e WHERE EXISTS (SELECT 1 FROM timers WHERE execution_id = e.id AND fire_at > version)"},
			},
		},
		{ // a second column of the row learned from the qualified plan's stage 1
			sql:   "SELECT o.seq FROM outbox o WHERE EXISTS (SELECT 1 FROM executions WHERE id = target_id AND version > seq)",
			first: []string{"SELECT 1 FROM executions WHERE id = target_id AND version > seq LIMIT 1"},
			steps: []step{
				{msg: `column "target_id" does not exist`,
					inner: []string{"SELECT DISTINCT executions.id FROM executions WHERE executions.version > executions.seq LIMIT 10001"},
					outer: "SELECT o.seq FROM outbox o WHERE COALESCE(o.target_id IN (SELECT * FROM pgshard_stage_1_), false)"},
				{msg: `column executions.seq does not exist`}, // still tied to the row off the keys: refused
			},
		},
		{ // learned for the subquery that failed only: the other one has
			// a column of that name, which stays its own
			sql:   "SELECT s.seq FROM spawns s WHERE EXISTS (SELECT 1 FROM executions WHERE version = seq) AND EXISTS (SELECT 1 FROM outbox WHERE seq > 5)",
			first: []string{"SELECT 1 FROM executions WHERE version = seq LIMIT 1", "SELECT 1 FROM outbox WHERE seq > 5 LIMIT 1"},
			steps: []step{
				{msg: `column "seq" does not exist`,
					inner: []string{"SELECT DISTINCT executions.version FROM executions LIMIT 10001", "SELECT 1 FROM outbox WHERE seq > 5 LIMIT 1"},
					outer: "SELECT s.seq FROM spawns s WHERE COALESCE(s.seq IN (SELECT * FROM pgshard_stage_1_), false) AND EXISTS (SELECT * FROM pgshard_stage_2_)"},
				// were the other subquery's seq the row's, it would be tied
				// to the row by no equality: left correlated, no plan
				{at: 1, msg: `column "seq" does not exist`},
			},
		},
		{ // a subquery qualified by its own relation that is not
			// decorrelated (a scalar max) would stay in stage 2 with its
			// other columns unverified: no plan
			sql:   "SELECT id, (SELECT max(fire_at) FROM timers WHERE execution_id = id) FROM executions WHERE version > (SELECT avg(version) FROM executions)",
			first: []string{"SELECT avg(version) FROM executions", "SELECT max(fire_at) FROM timers WHERE execution_id = id"},
			steps: []step{{at: 1, msg: `column "id" does not exist`}},
		},
		{ // nothing to learn: the statement reads two tables; the subquery
			// reads a join; the subquery's table is the statement's
			sql:   "SELECT o.seq FROM outbox o, spawns s WHERE s.seq = o.seq AND EXISTS (SELECT 1 FROM executions WHERE id = target_id)",
			first: []string{"SELECT 1 FROM executions WHERE id = target_id LIMIT 1"},
			steps: []step{{msg: `column "target_id" does not exist`}},
		},
		{
			sql:   "SELECT seq FROM outbox WHERE EXISTS (SELECT 1 FROM executions JOIN timers ON execution_id = id WHERE id = target_id)",
			first: []string{"SELECT 1 FROM executions JOIN timers ON execution_id = id WHERE id = target_id LIMIT 1"},
			steps: []step{{msg: `column "target_id" does not exist`}},
		},
		{ // not a column's message
			sql:   "SELECT seq FROM outbox WHERE EXISTS (SELECT 1 FROM executions WHERE id = target_id)",
			first: []string{"SELECT 1 FROM executions WHERE id = target_id LIMIT 1"},
			steps: []step{{msg: `relation "x" does not exist`}},
		},
	}
	for _, c := range cases {
		st, err := r.Analyze(c.sql)
		if err != nil {
			t.Fatal(err)
		}
		d := r.Route(st, nil, nil, nil)
		if d.Kind != route.DestAll || d.Merge == nil || d.Merge.Stages == nil {
			t.Errorf("%s: want two stages, got %v %s", c.sql, d.Kind, d.Why())
			continue
		}
		sg := d.Merge.Stages
		if got := innerSQL(sg); strings.Join(got, "; ") != strings.Join(c.first, "; ") {
			t.Errorf("%s: inner %q, want %q", c.sql, got, c.first)
		}
		for i, s := range c.steps {
			next := sg.Learn(s.at, s.msg)
			if s.inner == nil {
				if next != nil {
					t.Errorf("%s: step %d (%s): want no plan, got inner %q outer %q", c.sql, i, s.msg, innerSQL(next), next.Outer)
				}
				break
			}
			if next == nil {
				t.Errorf("%s: step %d (%s): no plan", c.sql, i, s.msg)
				break
			}
			if got := innerSQL(next); strings.Join(got, "; ") != strings.Join(s.inner, "; ") || next.Outer != s.outer || !next.Spread || next.Query() != c.sql {
				t.Errorf("%s: step %d (%s):\n got inner %q outer %q\nwant inner %q outer %q", c.sql, i, s.msg, got, next.Outer, s.inner, s.outer)
			}
			if again := sg.Learn(s.at, s.msg); again != next {
				t.Errorf("%s: step %d: a second Learn planned again", c.sql, i)
			}
			sg = next
		}
	}
}

func innerSQL(sg *route.Stages) []string {
	out := []string{}
	for _, in := range sg.Inner {
		out = append(out, in.SQL)
	}
	return out
}
