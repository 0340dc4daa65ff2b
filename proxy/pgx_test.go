package proxy_test

import (
	"bytes"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

var execModes = []pgx.QueryExecMode{
	pgx.QueryExecModeCacheStatement,
	pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeExec,
	pgx.QueryExecModeSimpleProtocol,
}

// TestPgxExecModes runs keyed reads, writes and transactions through the
// proxy with pgx in every QueryExecMode, through PgBouncer and directly,
// with text and binary parameters and results of several types.
func TestPgxExecModes(t *testing.T) {
	forEachPath(t, func(t *testing.T, via string, e *proxyEnv) {
		for mi, mode := range execModes {
			t.Run(mode.String(), func(t *testing.T) {
				ctx := ctxT(t, 2*time.Minute)
				conn := e.connect(t, func(c *pgx.ConnConfig) { c.DefaultQueryExecMode = mode })
				base := int64(1_000_000 + 10_000*mi)
				if via == "direct" {
					base += 500_000
				}
				// Two keys on each shard.
				var keys []int64
				for s := range e.db.m.Shards {
					keys = append(keys, e.db.keysOn(s, 2, base+int64(s)*1000)...)
				}
				for _, k := range keys {
					tag, err := conn.Exec(ctx, "INSERT INTO accounts (aid, abalance, note) VALUES ($1, $2, $3)", k, int32(k%1000), fmt.Sprintf("note-%d", k))
					if err != nil {
						t.Fatalf("insert %d: %v", k, err)
					}
					if tag.RowsAffected() != 1 {
						t.Fatalf("insert %d: %s", k, tag)
					}
				}
				// Repeated point reads (statement caches kick in) and
				// version-checked updates.
				for it := 0; it < 12; it++ {
					for _, k := range keys {
						var aid int64
						var bal int32
						var note string
						if err := conn.QueryRow(ctx, "SELECT aid, abalance, note FROM accounts WHERE aid = $1", k).Scan(&aid, &bal, &note); err != nil {
							t.Fatalf("select %d (iteration %d): %v", k, it, err)
						}
						if aid != k || bal != int32(k%1000)+int32(it) || note != fmt.Sprintf("note-%d", k) {
							t.Fatalf("select %d: got (%d, %d, %q)", k, aid, bal, note)
						}
						tag, err := conn.Exec(ctx, "UPDATE accounts SET abalance = abalance + 1, version = version + 1 WHERE aid = $1 AND version = $2", k, int32(it+1))
						if err != nil {
							t.Fatalf("update %d: %v", k, err)
						}
						if tag.RowsAffected() != 1 {
							t.Fatalf("update %d at version %d: %s (the update did not update)", k, it+1, tag)
						}
					}
				}
				// A transaction on one shard, committed and rolled back.
				// Both on the last shard (not the default one, where key-less
				// statements go): a Describe before the first key must not
				// pin the transaction elsewhere.
				k0, k1 := keys[len(keys)-2], keys[len(keys)-1]
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, "UPDATE accounts SET note = $2 WHERE aid = $1", k0, "tx"); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, "UPDATE accounts SET note = $2 WHERE aid = $1", k1, "tx"); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				tx, err = conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, "UPDATE accounts SET note = 'rolled back' WHERE aid = $1", k0); err != nil {
					t.Fatal(err)
				}
				if err := tx.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
				var n0, n1 string
				if err := conn.QueryRow(ctx, "SELECT note FROM accounts WHERE aid = $1", k0).Scan(&n0); err != nil {
					t.Fatal(err)
				}
				if err := conn.QueryRow(ctx, "SELECT note FROM accounts WHERE aid = $1", k1).Scan(&n1); err != nil {
					t.Fatal(err)
				}
				if n0 != "tx" || n1 != "tx" {
					t.Fatalf("after commit + rollback: notes %q, %q; want tx, tx", n0, n1)
				}
				checkTypes(t, conn, base+999)
				// Batches (pipelines) of keyed statements on one shard.
				b := &pgx.Batch{}
				for _, k := range e.db.keysOn(2, 5, base+5000) {
					b.Queue("INSERT INTO accounts (aid, note) VALUES ($1, 'batch')", k)
				}
				b.Queue("SELECT count(*) FROM accounts WHERE aid = $1 AND note = 'batch'", e.db.keysOn(2, 1, base+5000)[0])
				br := conn.SendBatch(ctx, b)
				for i := 0; i < 5; i++ {
					if _, err := br.Exec(); err != nil {
						t.Fatalf("batch insert %d: %v", i, err)
					}
				}
				var cnt int64
				if err := br.QueryRow().Scan(&cnt); err != nil || cnt != 1 {
					t.Fatalf("batch select: %d, %v", cnt, err)
				}
				if err := br.Close(); err != nil {
					t.Fatal(err)
				}
			})
		}
	})
}

// checkTypes writes and reads values of several types (binary formats in
// the modes that use them) and compares them exactly.
func checkTypes(t *testing.T, conn *pgx.Conn, id int64) {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	num := pgtype.Numeric{Int: big.NewInt(-123456789012345), Exp: -4, Valid: true}
	ts := time.Date(2024, 3, 31, 1, 30, 0, 123456000, time.UTC)
	bin := []byte{0, 1, 2, 254, 255}
	js := `{"a": 1, "b": "x"}`
	if _, err := conn.Exec(ctx, "INSERT INTO kinds (id, t, n, f, ts, b, j) VALUES ($1, $2, $3, $4, $5, $6, $7::text::jsonb)",
		id, "tëxt", num, 3.25, ts, bin, js); err != nil {
		t.Fatalf("insert kinds: %v", err)
	}
	var (
		gt  string
		gn  pgtype.Numeric
		gf  float64
		gts time.Time
		gb  []byte
		gj  map[string]any
	)
	for i := 0; i < 7; i++ {
		if err := conn.QueryRow(ctx, "SELECT t, n, f, ts, b, j FROM kinds WHERE id = $1", id).Scan(&gt, &gn, &gf, &gts, &gb, &gj); err != nil {
			t.Fatalf("select kinds: %v", err)
		}
		gv, _ := gn.Value()
		wv, _ := num.Value()
		if gt != "tëxt" || gv != wv || gf != 3.25 || !gts.Equal(ts) || !bytes.Equal(gb, bin) || gj["b"] != "x" || gj["a"] != float64(1) {
			t.Fatalf("kinds round trip: got %q %v %v %v %v %v", gt, gv, gf, gts, gb, gj)
		}
	}
}
