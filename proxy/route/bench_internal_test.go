package route

import "testing"

// benchTexts are statements the lexer and the normalizer see per text:
// pgbench's, the store's, and a longer key-less read with clauses, casts
// and comments.
var benchTexts = []string{
	"SELECT abalance FROM pgbench_accounts WHERE aid = 48213;",
	"UPDATE pgbench_accounts SET abalance = abalance + -4123 WHERE aid = 48213;",
	"SELECT id, data, version FROM executions WHERE id = '9e3779b97f4a7c159e3779b97f4a7c15'",
	`/* pgshard:key=abc */ SELECT e.id, count(*)::int8 AS n, max(t.fire_at) FROM executions e
	 LEFT JOIN timers t ON t.execution_id = e.id -- the timers
	 WHERE e.definition_id IN ('a', 'b', E'c\'d') AND e.version > 3 AND e.data::jsonb ->> 'k' = $1
	 GROUP BY e.id ORDER BY 2 DESC, e.id LIMIT 10 OFFSET 5`,
}

// BenchmarkLex is one pass of the scanner over each text (the hot path of
// every text that is not in the cache).
func BenchmarkLex(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		for _, q := range benchTexts {
			sc := scanner{sql: q}
			for {
				if _, ok := sc.next(); !ok {
					break
				}
			}
		}
	}
}

// BenchmarkNormalize is the normalizer's pass over each text (scanner,
// keywords, literal candidates, the normalized text).
func BenchmarkNormalize(b *testing.B) {
	n := new(normalizer)
	b.ReportAllocs()
	for b.Loop() {
		for _, q := range benchTexts {
			n.run(q)
		}
	}
}
