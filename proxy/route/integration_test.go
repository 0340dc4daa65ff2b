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
