package mutant_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/chaos/mutant"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// ctxT returns a context that ends well inside the test's deadline.
func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// openStore opens the reference store with bug on m, closed when the test
// ends.
func openStore(t testing.TB, m *shardmap.Map, pooler bool, bug mutant.Kind, o store.Options) store.ExecutionStore {
	t.Helper()
	if o.ConnectAttempts == 0 {
		o.ConnectAttempts = 3
	}
	s, err := mutant.OpenStore(ctxT(t), m, pooler, bug, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// ids returns n execution ids (lowercase uuid hex) drawn from seed.
func ids(seed uint64, n int) []string {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64())
	}
	return out
}

// shardConn connects directly to shard i of m for the test.
func shardConn(t testing.TB, m *shardmap.Map, i int) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctxT(t), m.Shards[i].DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// count runs a count(*) query on shard i.
func count(t testing.TB, m *shardmap.Map, i int, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := shardConn(t, m, i).QueryRow(ctxT(t), sql, args...).Scan(&n); err != nil {
		t.Fatalf("shard %d: %s: %v", i, sql, err)
	}
	return n
}

// countAll sums count over every shard.
func countAll(t testing.TB, m *shardmap.Map, sql string, args ...any) int {
	t.Helper()
	n := 0
	for i := range m.Shards {
		n += count(t, m, i, sql, args...)
	}
	return n
}

// dumpQueries list every row of the store's six tables in key order.
var dumpQueries = []string{
	`SELECT 'executions', id, definition_id, data, version FROM executions ORDER BY id COLLATE "C"`,
	`SELECT 'outbox', seq, target_id, event FROM outbox ORDER BY seq`,
	`SELECT 'processed_events', execution_id, event_id FROM processed_events ORDER BY execution_id COLLATE "C", event_id COLLATE "C"`,
	`SELECT 'timers', execution_id, path, fire_at FROM timers ORDER BY execution_id COLLATE "C", path COLLATE "C"`,
	`SELECT 'spawns', seq, parent_id, child_id, root_path, context FROM spawns ORDER BY seq`,
	`SELECT 'trace', execution_id, idx, entry FROM trace ORDER BY execution_id COLLATE "C", idx`,
}

// dump returns every row of every shard of m, one line per row, prefixed
// by the shard's name.
func dump(t testing.TB, m *shardmap.Map) []string {
	t.Helper()
	var out []string
	for i, sh := range m.Shards {
		c := shardConn(t, m, i)
		for _, q := range dumpQueries {
			rows, err := c.Query(ctxT(t), q, pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				t.Fatalf("%s: %s: %v", sh.Name, q, err)
			}
			for rows.Next() {
				vals, err := rows.Values()
				if err != nil {
					t.Fatal(err)
				}
				f := make([]string, len(vals))
				for j, v := range vals {
					f[j] = fmt.Sprint(v)
				}
				out = append(out, sh.Name+" "+strings.Join(f, " | "))
			}
			if err := rows.Err(); err != nil {
				t.Fatalf("%s: %s: %v", sh.Name, q, err)
			}
		}
	}
	return out
}
