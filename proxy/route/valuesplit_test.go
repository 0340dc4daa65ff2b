package route_test

import (
	"strings"
	"testing"

	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// TestSplitValues checks the analyzer's decision on a VALUES list on the
// preserved side of an outer join: split by shard (each shard's statement
// keeps exactly the rows whose key it owns) when the join equates the list's
// column with the sharding key, refused otherwise.
func TestSplitValues(t *testing.T) {
	r := newRouter(t, "")
	m := testMap(t)
	keys := []string{"a1", "b2", "c3", "d4", "e5", "f6"}
	rows := make([]string, len(keys))
	for i, k := range keys {
		rows[i] = "('" + k + "', " + string(rune('0'+i)) + ")"
	}
	values := "(VALUES " + strings.Join(rows, ", ") + ") AS v(k, w)"
	split := []string{
		"SELECT e.version, v.w FROM " + values + " LEFT JOIN executions e ON e.id = v.k",
		"SELECT e.version, v.w FROM " + values + " LEFT JOIN executions e ON v.k = e.id AND e.version > 0 WHERE v.w <> $1",
		"SELECT v.k, count(t.path) FROM " + values + " LEFT JOIN timers t ON t.execution_id = v.k GROUP BY v.k ORDER BY 1",
		"SELECT * FROM " + values + " FULL JOIN trace x ON x.execution_id = v.k ORDER BY x.idx FETCH FIRST 3 ROWS ONLY",
		"SELECT v.w, e.id FROM executions e RIGHT JOIN " + values + " ON e.id = v.k",
		"SELECT v.w, s.seq FROM " + values + " LEFT JOIN spawns s ON s.parent_id = v.k",
		"SELECT v.k, t.path FROM unnest(ARRAY['a1', 'b2', 'c3', 'd4', 'e5', 'f6']) AS v(k) LEFT JOIN timers t ON t.execution_id = v.k",
		"SELECT count(*) FROM unnest(ARRAY['a1', 'b2', 'c3', 'd4', 'e5', 'f6']) AS v(k) FULL JOIN executions e ON e.id = v.k",
	}
	for _, q := range split {
		st, err := r.Analyze(q)
		if err != nil {
			t.Fatal(err)
		}
		d := r.Route(st, [][]byte{[]byte("1")}, nil, nil)
		if d.Kind != route.DestAll || d.Merge == nil || len(d.Merge.ShardSQL) != len(m.Shards) {
			t.Fatalf("%s\n  want a split fan-out, got %v %s %v", q, d.Kind, d.Why(), d.Refusal)
		}
		// Every row goes to exactly one shard: its key's.
		for i, k := range keys {
			own := m.ShardIndexForBucket(shardmap.BucketText(k, m.Buckets))
			for s, sql := range d.Merge.ShardSQL {
				has := strings.Contains(sql, "IN (") && rowIn(sql, i+1)
				if has != (s == own) {
					t.Errorf("%s\n  row %d (key %s, shard %d) on shard %d: %v\n  %s", q, i+1, k, own, s, has, sql)
				}
			}
		}
		if !strings.Contains(d.Why(), "split by its key") {
			t.Errorf("%s: the reason does not say the list is split: %s", q, d.Why())
		}
	}
	refused := []string{
		// Not joined on the key: every shard would produce every row.
		"SELECT e.version, v.w FROM " + values + " LEFT JOIN executions e ON e.definition_id = v.k",
		// The key compared with a non-key expression of the list.
		"SELECT e.version FROM " + values + " LEFT JOIN executions e ON e.id = v.k || 'x'",
		// OR: the equality does not hold for every match.
		"SELECT e.version FROM " + values + " LEFT JOIN executions e ON e.id = v.k OR e.version = v.w",
		// A computed key entry: the proxy does not evaluate it.
		"SELECT e.version FROM (VALUES (lower('A1'), 0)) AS v(k, w) LEFT JOIN executions e ON e.id = v.k",
		// A subquery in the list reads sharded rows.
		"SELECT e.version FROM (VALUES ('a1', (SELECT count(*) FROM timers))) AS v(k, w) LEFT JOIN executions e ON e.id = v.k",
		// generate_series: no key to split by.
		"SELECT e.version FROM generate_series(0, 3) AS v(w) LEFT JOIN executions e ON e.version = v.w",
		// A whole-row reference to a function's alias is its value, not a
		// record: not split.
		"SELECT v FROM unnest(ARRAY['a1', 'b2']) AS v(k) LEFT JOIN executions e ON e.id = v.k",
		// Another function.
		"SELECT e.id FROM jsonb_array_elements_text('[\"a1\"]') AS v(k) LEFT JOIN executions e ON e.id = v.k",
		// A keyed table meeting the list's rows on a non-key column: its
		// rows would meet only the list's rows of their own shard.
		"SELECT e.version FROM " + values + " LEFT JOIN executions e ON e.id = v.k WHERE EXISTS (SELECT 1 FROM timers t WHERE t.path = v.w::text)",
		"SELECT e.version FROM " + values + " LEFT JOIN executions e ON e.id = v.k WHERE v.w < (SELECT count(*) FROM timers)",
		// More than the one join: the list's rows would meet other rows.
		"SELECT e.version FROM " + values + " LEFT JOIN executions e ON e.id = v.k, timers t",
	}
	for _, q := range refused {
		st, err := r.Analyze(q)
		if err != nil {
			t.Fatal(err)
		}
		d := r.Route(st, nil, nil, nil)
		if d.Kind != route.DestRefuse && (d.Merge == nil || d.Merge.Stages == nil) {
			// not split: refused, or answered in two stages (twostage.go)
			t.Errorf("%s\n  want refused or two stages, got %v %s", q, d.Kind, d.Why())
		}
	}
}

// rowIn reports whether the per-shard SQL's row filter keeps row n.
func rowIn(sql string, n int) bool {
	i := strings.LastIndex(sql, " IN (")
	if i < 0 {
		return false
	}
	j := strings.IndexByte(sql[i:], ')')
	for _, f := range strings.Split(sql[i+5:i+j], ",") {
		if strings.TrimSpace(f) == strings.TrimSpace(itoa(n)) {
			return true
		}
	}
	return false
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
