package route_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/pgshard/pgshard/proxy/route"
)

const pointSelect = "SELECT id, data, version FROM executions WHERE id = $1"

var pointParams = [][]byte{[]byte("0123456789abcdef0123456789abcdef")}

// BenchmarkAnalyzeCached: the cache hit of a Parse of the hot statement.
func BenchmarkAnalyzeCached(b *testing.B) {
	r := newRouter(b, "default")
	if _, err := r.Analyze(pointSelect); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Analyze(pointSelect); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRoute: cached analysis + Route of a point SELECT by $1 — the
// proxy's per-query routing work.
func BenchmarkRoute(b *testing.B) {
	r := newRouter(b, "default")
	b.ReportAllocs()
	for b.Loop() {
		st, _ := r.Analyze(pointSelect)
		if d := r.Route(st, pointParams, nil, nil); d.Kind != route.DestShard {
			b.Fatal(d)
		}
	}
}

// BenchmarkRouteKinds: Route alone for other common shapes.
func BenchmarkRouteKinds(b *testing.B) {
	for _, c := range []struct {
		name, sql string
		params    [][]byte
		formats   []int16
	}{
		{"cas-binary", "SELECT harel_commit_cas($1, $2, $3, $4, $5)",
			[][]byte{pointParams[0], []byte("def"), []byte("{}"), {0, 0, 0, 3}, []byte("")}, []int16{0, 0, 0, 1, 0}},
		{"update-and-chain", "UPDATE executions SET data = $3, version = $2 + 1 WHERE id = $1 AND version = $2",
			[][]byte{pointParams[0], []byte("3"), []byte("{}")}, nil},
		{"constant-key", "SELECT data FROM executions WHERE id = 'abc'", nil, nil},
		{"ack-by-seq", "DELETE FROM outbox WHERE seq = $1", [][]byte{[]byte("1026")}, nil},
		{"fanout-limit-param", "SELECT id FROM executions ORDER BY id LIMIT $1", [][]byte{[]byte("50")}, nil},
		{"begin", "BEGIN", nil, nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := newRouter(b, "default")
			st, err := r.Analyze(c.sql)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if d := r.Route(st, c.params, c.formats, nil); d.Kind == route.DestRefuse {
					b.Fatal(d.Why())
				}
			}
		})
	}
}

// BenchmarkParseVsCached measures, side by side, a cache miss (a full
// parse and analysis by Postgres's grammar) and a cache hit of the same
// statement, and reports their ratio: what the statement cache saves per
// query. Timings are noisy on a shared machine; the ratio is the point.
func BenchmarkParseVsCached(b *testing.B) {
	miss, err := route.New(testMap(b), testSchema(b, "default"), route.Options{CacheSize: -1})
	if err != nil {
		b.Fatal(err)
	}
	hit := newRouter(b, "default")
	texts := []string{pointSelect,
		"WITH x AS (UPDATE executions SET data = $2, version = version + 1 WHERE id = $1 AND version = $3 RETURNING id) INSERT INTO outbox (target_id, event) SELECT $4, $5 FROM x"}
	for i, q := range texts {
		b.Run(fmt.Sprintf("stmt%d", i), func(b *testing.B) {
			var tMiss, tHit time.Duration
			n := 0
			for b.Loop() {
				t0 := time.Now()
				if _, err := miss.Analyze(q); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, err := hit.Analyze(q); err != nil {
					b.Fatal(err)
				}
				tHit += time.Since(t1)
				tMiss += t1.Sub(t0)
				n++
			}
			b.ReportMetric(float64(tMiss.Nanoseconds())/float64(n), "ns-parse/op")
			b.ReportMetric(float64(tHit.Nanoseconds())/float64(n), "ns-cached/op")
			if tHit > 0 {
				b.ReportMetric(float64(tMiss)/float64(tHit), "parse/cached")
			}
		})
	}
}

// BenchmarkAnalyzeParallel: cache hits from many goroutines at once.
func BenchmarkAnalyzeParallel(b *testing.B) {
	r := newRouter(b, "default")
	var texts []string
	for i := 0; i < 64; i++ {
		texts = append(texts, fmt.Sprintf("SELECT data FROM executions WHERE id = $1 AND version = %d", i))
	}
	for _, q := range texts {
		if _, err := r.Analyze(q); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			st, _ := r.Analyze(texts[i%len(texts)])
			r.Route(st, pointParams, nil, nil)
			i++
		}
	})
}

// BenchmarkAnalyzeDistinctLiterals: what a simple-protocol client that
// inlines its values costs — every iteration Splits and Routes a text
// never seen before (a cycle of 1<<16 texts, far more than the cache
// holds). "full" parses each text (KeepLiterals, as before literal
// normalization); "normalized" shares one analysis per statement shape.
// "repeat" is one literal text over and over (a per-text cache hit).
func BenchmarkAnalyzeDistinctLiterals(b *testing.B) {
	schema := route.DefaultSchema()
	schema.Tables = append(schema.Tables, route.TableKey{Table: "pgbench_accounts", Column: "aid", Type: route.KeyInt8, Position: 1})
	const n = 1 << 16
	shapes := []struct {
		name string
		text func(i int) string
	}{
		{"pgbench-select", func(i int) string {
			return fmt.Sprintf("SELECT abalance FROM pgbench_accounts WHERE aid = %d;", i+1)
		}},
		{"pgbench-update", func(i int) string {
			return fmt.Sprintf("UPDATE pgbench_accounts SET abalance = abalance + %d WHERE aid = %d;", i%10001-5000, i+1)
		}},
		{"store-load", func(i int) string {
			return fmt.Sprintf("SELECT id, data, version FROM executions WHERE id = '%032x'", uint64(i)*0x9e3779b97f4a7c15)
		}},
	}
	for _, sh := range shapes {
		texts := make([]string, n)
		for i := range texts {
			texts[i] = sh.text(i)
		}
		for _, mode := range []string{"full", "normalized", "repeat"} {
			b.Run(sh.name+"/"+mode, func(b *testing.B) {
				r, err := route.New(testMap(b), schema, route.Options{KeepLiterals: mode == "full"})
				if err != nil {
					b.Fatal(err)
				}
				i := 0
				b.ReportAllocs()
				for b.Loop() {
					q := texts[i%n]
					if mode != "repeat" {
						i++
					}
					sts, err := r.Split(q)
					if err != nil {
						b.Fatal(err)
					}
					if d := r.Route(sts[0], nil, nil, nil); d.Kind != route.DestShard {
						b.Fatal(d.Why())
					}
				}
			})
		}
	}
}
