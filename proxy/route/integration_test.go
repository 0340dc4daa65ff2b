package route_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// TestRoutesAgreeWithShards routes a few hundred text and int8 keys —
// given in SQL, as text parameters and as binary parameters — stores each
// row on the shard the router chose, and asks every shard whether
// pgshard_bucket() puts each of its rows in its own bucket ranges. It also
// checks that a sequence value generated on a shard routes back to it.
func TestRoutesAgreeWithShards(t *testing.T) {
	c := clustertest.Get(t)
	db := clustertest.FreshDatabase(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := c.MapFor(db, shardmap.DefaultBuckets)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := migrations.Apply(ctx, m, migrations.Options{}); err != nil {
		t.Fatal(err)
	} else if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	conns := make([]*pgx.Conn, len(m.Shards))
	for i, s := range m.Shards {
		conn, err := pgx.Connect(ctx, s.DSN)
		if err != nil {
			t.Fatalf("shard %s: %v", s.Name, err)
		}
		defer conn.Close(context.Background())
		conns[i] = conn
		if _, err := conn.Exec(ctx, "CREATE TABLE accounts (k BIGINT PRIMARY KEY)"); err != nil {
			t.Fatalf("shard %s: %v", s.Name, err)
		}
	}
	schema := route.DefaultSchema()
	schema.Tables = append(schema.Tables, route.TableKey{Table: "accounts", Column: "k", Type: route.KeyInt8, Position: 1})
	r, err := route.New(m, schema, route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))

	// Text keys: uuid hex as the store writes them, plus awkward ones.
	textKeys := []string{"", " ", "a'b", "ключ", "😀", strings.Repeat("x", 300), "ABC", "abc"}
	for len(textKeys) < 300 {
		textKeys = append(textKeys, fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64()))
	}
	byParamText, _ := r.Analyze("SELECT data FROM executions WHERE id = $1")
	byParamCast, _ := r.Analyze("SELECT data FROM executions WHERE id = $1::text")
	insert, _ := r.Analyze("INSERT INTO executions (id, definition_id, data, version) VALUES ($1, 'd', '{}', 1)")
	for i, k := range textKeys {
		var ds []route.Dest
		ds = append(ds,
			r.Route(byParamText, [][]byte{[]byte(k)}, nil, nil),
			r.Route(byParamText, [][]byte{[]byte(k)}, []int16{1}, []uint32{25}),
			r.Route(byParamCast, [][]byte{[]byte(k)}, []int16{1}, nil),
			r.Route(insert, [][]byte{[]byte(k)}, nil, nil),
		)
		lit, err := r.Analyze("SELECT data FROM executions WHERE id = '" + strings.ReplaceAll(k, "'", "''") + "'")
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, r.Route(lit, nil, nil, nil))
		for j, d := range ds {
			if d.Kind != route.DestShard || d.Shard != ds[0].Shard || d.Bucket != ds[0].Bucket {
				t.Fatalf("key %q: route %d = %+v, route 0 = %+v", k, j, d, ds[0])
			}
		}
		d := ds[0]
		// The server computes the same bucket...
		var b int
		if err := conns[d.Shard].QueryRow(ctx, "SELECT pgshard_bucket($1::text)", k).Scan(&b); err != nil {
			t.Fatal(err)
		}
		if b != d.Bucket {
			t.Fatalf("key %q: router bucket %d, server pgshard_bucket %d", k, d.Bucket, b)
		}
		// ... and the row is stored where the router sent it.
		if _, err := conns[d.Shard].Exec(ctx, "INSERT INTO executions (id, definition_id, data, version) VALUES ($1, 'd', '{}', $2)", k, i); err != nil {
			t.Fatal(err)
		}
	}

	// int8 keys in text and binary (int2/int4/int8) parameters.
	intKeys := []int64{0, 1, -1, 42, math.MaxInt64, math.MinInt64, math.MaxInt32, math.MinInt32, 1 << 32, -(1 << 32)}
	for len(intKeys) < 300 {
		intKeys = append(intKeys, int64(rng.Uint64()))
	}
	byKey, _ := r.Analyze("SELECT k FROM accounts WHERE k = $1")
	for _, k := range intKeys {
		var b8 [8]byte
		binary.BigEndian.PutUint64(b8[:], uint64(k))
		ds := []route.Dest{
			r.Route(byKey, [][]byte{[]byte(fmt.Sprint(k))}, nil, nil),
			r.Route(byKey, [][]byte{b8[:]}, []int16{1}, nil),
			r.Route(byKey, [][]byte{b8[:]}, []int16{1}, []uint32{20}),
		}
		if k == int64(int32(k)) {
			var b4 [4]byte
			binary.BigEndian.PutUint32(b4[:], uint32(k))
			ds = append(ds, r.Route(byKey, [][]byte{b4[:]}, []int16{1}, []uint32{23}))
		}
		if k == int64(int16(k)) {
			ds = append(ds, r.Route(byKey, [][]byte{{byte(uint16(k) >> 8), byte(k)}}, []int16{1}, []uint32{21}))
		}
		for j, d := range ds {
			if d.Kind != route.DestShard || d.Shard != ds[0].Shard || d.Bucket != ds[0].Bucket {
				t.Fatalf("key %d: route %d = %+v, route 0 = %+v", k, j, d, ds[0])
			}
		}
		d := ds[0]
		var b int
		if err := conns[d.Shard].QueryRow(ctx, "SELECT pgshard_bucket($1::int8)", k).Scan(&b); err != nil {
			t.Fatal(err)
		}
		if b != d.Bucket {
			t.Fatalf("key %d: router bucket %d, server pgshard_bucket %d", k, d.Bucket, b)
		}
		if _, err := conns[d.Shard].Exec(ctx, "INSERT INTO accounts (k) VALUES ($1)", k); err != nil {
			t.Fatal(err)
		}
	}

	// Every shard holds only rows of its own buckets, and all of them.
	total := 0
	for i, s := range m.Shards {
		var conds []string
		for _, rg := range m.RangesOf(s.Name) {
			conds = append(conds, fmt.Sprintf("b BETWEEN %d AND %d", rg.Lo, rg.Hi))
		}
		own := strings.Join(conds, " OR ")
		var misplaced, n int
		q := fmt.Sprintf(`SELECT count(*) FILTER (WHERE NOT (%s)), count(*) FROM (
			SELECT pgshard_bucket(id) AS b FROM executions UNION ALL SELECT pgshard_bucket(k) FROM accounts) x`, own)
		if err := conns[i].QueryRow(ctx, q).Scan(&misplaced, &n); err != nil {
			t.Fatal(err)
		}
		if misplaced != 0 {
			t.Errorf("shard %s: %d of %d rows are outside its buckets", s.Name, misplaced, n)
		}
		total += n
	}
	if want := len(textKeys) + len(intKeys); total != want {
		t.Errorf("%d rows stored, want %d", total, want)
	}

	// Sequence values name the shard that generated them.
	ack, _ := r.Analyze("DELETE FROM outbox WHERE seq = $1")
	for i, s := range m.Shards {
		for j := 0; j < 3; j++ {
			var seq int64
			if err := conns[i].QueryRow(ctx, "INSERT INTO outbox (target_id, event) VALUES ('t', 'e') RETURNING seq").Scan(&seq); err != nil {
				t.Fatal(err)
			}
			var b8 [8]byte
			binary.BigEndian.PutUint64(b8[:], uint64(seq))
			for _, d := range []route.Dest{
				r.Route(ack, [][]byte{[]byte(fmt.Sprint(seq))}, nil, nil),
				r.Route(ack, [][]byte{b8[:]}, []int16{1}, []uint32{20}),
			} {
				if d.Kind != route.DestShard || d.Shard != i {
					t.Errorf("shard %s generated seq %d; the router sends it to %+v", s.Name, seq, d)
				}
			}
		}
	}
}

// TestMergePlansAgreeWithOneDatabase runs key-less reads on every shard as
// their merge plans say (per-shard SQL, then order/limit/offset or
// aggregate combination, done here as the engine would) and compares the
// result with the same statement on one database that holds all the rows.
func TestMergePlansAgreeWithOneDatabase(t *testing.T) {
	c := clustertest.Get(t)
	sharded := clustertest.FreshDatabase(t, c)
	single := clustertest.FreshDatabase(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := c.MapFor(sharded, shardmap.DefaultBuckets)
	if err != nil {
		t.Fatal(err)
	}
	om, err := c.MapFor(single, shardmap.DefaultBuckets)
	if err != nil {
		t.Fatal(err)
	}
	const ddl = "CREATE TABLE items (k BIGINT PRIMARY KEY, g INT NOT NULL, v INT)"
	oracle, err := pgx.Connect(ctx, om.Shards[0].DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer oracle.Close(context.Background())
	if _, err := oracle.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	conns := make([]*pgx.Conn, len(m.Shards))
	for i, s := range m.Shards {
		if conns[i], err = pgx.Connect(ctx, s.DSN); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close(context.Background())
		if _, err := conns[i].Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	r, err := route.New(m, route.Schema{Tables: []route.TableKey{{Table: "items", Column: "k", Type: route.KeyInt8, Position: 1}}}, route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ins, _ := r.Analyze("INSERT INTO items (k, g, v) VALUES ($1, $2, $3)")
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 200; i++ {
		k, g := int64(rng.IntN(100000)-50000), i%5
		var v any = rng.IntN(50) // duplicates on purpose: ties are broken by k
		if i%17 == 0 {
			v = nil
		}
		d := r.Route(ins, [][]byte{[]byte(fmt.Sprint(k)), []byte(fmt.Sprint(g)), nil}, nil, nil)
		if d.Kind != route.DestShard {
			t.Fatalf("insert routes %+v", d)
		}
		if _, err := conns[d.Shard].Exec(ctx, "INSERT INTO items (k, g, v) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING", k, g, v); err != nil {
			t.Fatal(err)
		}
		if _, err := oracle.Exec(ctx, "INSERT INTO items (k, g, v) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING", k, g, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		sql    string
		params []any
	}{
		{"SELECT k, v FROM items ORDER BY v DESC, k LIMIT 7 OFFSET 3", nil},
		{"SELECT k, v FROM items ORDER BY v NULLS FIRST, k LIMIT 9", nil},
		{"SELECT k, v FROM items ORDER BY 2, 1 LIMIT $1 OFFSET $2", []any{int64(5), int64(11)}},
		{"SELECT v AS val, k FROM items WHERE g = $1 ORDER BY val DESC NULLS LAST, k DESC OFFSET 4", []any{int64(2)}},
		{"SELECT k FROM items ORDER BY k FETCH FIRST 6 ROWS ONLY", nil},
		{"SELECT count(*), sum(v), min(v), max(k), count(v) FROM items WHERE g = 2", nil},
		{"SELECT count(*), 7 FROM items WHERE k IN (1, 2, 3) AND v > 100", nil},
		{"SELECT k, count(*), max(v) FROM items GROUP BY k HAVING count(*) > 0 ORDER BY 3 DESC NULLS LAST, k LIMIT 5", nil},
		{"SELECT DISTINCT k, g FROM items ORDER BY k LIMIT 10 OFFSET 2", nil},
		{"SELECT k, g FROM items WHERE v IS NULL ORDER BY k", nil},
	} {
		t.Run(c.sql, func(t *testing.T) {
			st, err := r.Analyze(c.sql)
			if err != nil {
				t.Fatal(err)
			}
			var params [][]byte
			for _, p := range c.params {
				params = append(params, []byte(fmt.Sprint(p)))
			}
			d := r.Route(st, params, nil, nil)
			if d.Kind != route.DestAll || d.Merge == nil {
				t.Fatalf("not a fan-out: %+v", d)
			}
			want := queryRows(ctx, t, oracle, c.sql, c.params)
			sql := c.sql
			if d.Merge.SQL != "" {
				sql = d.Merge.SQL
			}
			var got [][]any
			var per [][][]any
			for i := range conns {
				rows := queryRows(ctx, t, conns[i], sql, c.params)
				per = append(per, rows)
				got = append(got, rows...)
			}
			got = mergeRows(t, d.Merge, per, got)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("merged %v\none database %v", got, want)
			}
		})
	}
}

func queryRows(ctx context.Context, t *testing.T, conn *pgx.Conn, sql string, params []any) [][]any {
	t.Helper()
	rows, err := conn.Query(ctx, sql, params...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// mergeRows does what the session engine does with a Merge (for the
// integer and NULL values of this test).
func mergeRows(t *testing.T, mg *route.Merge, per [][][]any, all [][]any) [][]any {
	t.Helper()
	if len(mg.Aggregates) > 0 {
		out := make([]any, len(mg.Aggregates))
		for _, rows := range per {
			if len(rows) != 1 {
				t.Fatalf("aggregate shard returned %d rows", len(rows))
			}
			for i, a := range mg.Aggregates {
				v := rows[0][i]
				if v == nil {
					continue
				}
				n := toInt(v)
				switch {
				case out[i] == nil:
					out[i] = n
				case a == route.AggSum:
					out[i] = out[i].(int64) + n
				case a == route.AggMin:
					out[i] = min(out[i].(int64), n)
				case a == route.AggMax:
					out[i] = max(out[i].(int64), n)
				case a == route.AggNone:
					out[i] = n
				}
			}
		}
		all = [][]any{out}
	}
	cmp := func(a, b []any) int {
		for _, k := range mg.OrderBy {
			x, y := a[k.Column], b[k.Column]
			switch {
			case x == nil && y == nil:
				continue
			case x == nil || y == nil:
				// NULL placement is given by NullsFirst, whatever the direction.
				if (x == nil) == k.NullsFirst {
					return -1
				}
				return 1
			}
			c := 0
			if xi, yi := toInt(x), toInt(y); xi < yi {
				c = -1
			} else if xi > yi {
				c = 1
			}
			if k.Desc {
				c = -c
			}
			if c != 0 {
				return c
			}
		}
		return 0
	}
	if len(mg.OrderBy) > 0 {
		sortStable(all, cmp)
	}
	if mg.Offset > 0 {
		all = all[min(int(mg.Offset), len(all)):]
	}
	if mg.Limit >= 0 && int(mg.Limit) < len(all) {
		all = all[:mg.Limit]
	}
	return all
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case int32:
		return int64(x)
	case int16:
		return int64(x)
	}
	panic(fmt.Sprintf("not an integer: %T", v))
}

func sortStable(rows [][]any, cmp func(a, b []any) int) {
	for i := 1; i < len(rows); i++ {
		for j := i; j > 0 && cmp(rows[j-1], rows[j]) > 0; j-- {
			rows[j-1], rows[j] = rows[j], rows[j-1]
		}
	}
}

// TestSetLocalSQLRuns: the SET LOCAL statements Analyze offers for
// replaying session settings are accepted by the server inside a
// transaction.
func TestSetLocalSQLRuns(t *testing.T) {
	c := clustertest.Get(t)
	db := clustertest.FreshDatabase(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := c.MapFor(db, shardmap.DefaultBuckets)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, m.Shards[0].DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE ROLE pgshard_test_role"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "DROP ROLE pgshard_test_role")
	r := newRouter(t, "default")
	for _, sql := range []string{
		"SET search_path = public, 'my schema'",
		"SET TIME ZONE 'Europe/Paris'",
		"SET TIME ZONE LOCAL",
		"SET TIME ZONE INTERVAL '+02:00' HOUR TO MINUTE",
		"SET statement_timeout = '5s'",
		"SET statement_timeout TO 5000",
		"SET work_mem TO DEFAULT",
		"RESET work_mem",
		"SET application_name = 'it''s mine'",
		"SET extra_float_digits = 3",
		"SET enable_seqscan = off",
		"SET myapp.user_id = 7",
		"SET ROLE pgshard_test_role",
		"SET datestyle = iso, mdy",
		"SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ",
		"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY, DEFERRABLE",
		"SET client_min_messages FROM CURRENT",
	} {
		st, err := r.Analyze(sql)
		if err != nil {
			t.Fatal(err)
		}
		if st.Kind != route.KindSetSession || st.SetLocalSQL == "" {
			t.Errorf("%q: %s, SetLocalSQL %q", sql, st.Kind, st.SetLocalSQL)
			continue
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, st.SetLocalSQL); err != nil {
			t.Errorf("%q replayed as %q: %v", sql, st.SetLocalSQL, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
