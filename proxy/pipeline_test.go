package proxy_test

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// Transaction-local settings ahead of a read of every shard, in one
// implicit transaction (a pipeline up to its Sync, or a query string of
// several statements): the store's own shape with Options.StatementTimeout
// (SELECT set_config('statement_timeout', $1::text, true), then the read,
// one Sync) must reach every shard the read runs on.

// TestStoreStatementTimeoutThroughProxy: pgshard's store, opened on the
// proxy with a statement timeout, reads the relay's batches (pending
// outbox, spawns, due timers) and lists executions over every shard —
// the same answers as the router over the shards themselves — and the
// timeout is in force on every shard, inside the read's implicit
// transaction only. Every relay read used to be refused with 0A000 ("a
// statement that must read every shard must be alone in its pipeline").
func TestStoreStatementTimeoutThroughProxy(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []envOpt
	}{{"pgbouncer", nil}, {"direct", []envOpt{direct()}}} {
		t.Run(tc.name, func(t *testing.T) {
			env := newSeedStoreEnv(t, tc.opts...)
			e := env.e
			m := e.db.m
			ctx := ctxT(t, 2*time.Minute)
			for i := range m.Shards {
				var n int
				if err := e.db.shardConn(t, i).QueryRow(ctx, "SELECT (SELECT count(*) FROM outbox) + (SELECT count(*) FROM spawns) + (SELECT count(*) FROM timers) + (SELECT count(*) FROM executions)").Scan(&n); err != nil || n == 0 {
					t.Fatalf("shard %d holds %d store rows (%v): the test needs rows on every shard", i, n, err)
				}
			}
			ref, err := router.Open(ctx, m, router.Options{Store: store.Options{ConnectAttempts: 1}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ref.Close)
			px, err := store.Open(ctx, e.dsn, store.Options{StatementTimeout: 5 * time.Second, ConnectAttempts: 1, MaxConns: 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(px.Close)

			allOutbox, err := ref.PendingOutbox(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(allOutbox, func(a, b store.OutboxRow) int { return int(a.Seq - b.Seq) })
			allSpawns, err := ref.PendingSpawns(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(allSpawns, func(a, b store.SpawnRow) int { return int(a.Seq - b.Seq) })
			if len(allOutbox) == 0 || len(allSpawns) == 0 {
				t.Fatalf("%d outbox rows, %d spawns: the data set is empty", len(allOutbox), len(allSpawns))
			}
			// One database orders every pending row by seq; the router shares
			// a limited batch among the shards instead, so a limited batch is
			// compared with the first rows of the full, sorted set.
			for _, limit := range []int{0, 1, 7, 1000} {
				got, err := px.PendingOutbox(ctx, limit)
				if err != nil {
					t.Fatalf("PendingOutbox(%d) through the proxy: %v", limit, err)
				}
				want := allOutbox
				if limit > 0 && limit < len(want) {
					want = want[:limit]
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("PendingOutbox(%d): %d rows %v…, the shards hold %d: %v…", limit, len(got), head(got), len(want), head(want))
				}
				gotS, err := px.PendingSpawns(ctx, limit)
				if err != nil {
					t.Fatalf("PendingSpawns(%d) through the proxy: %v", limit, err)
				}
				wantS := allSpawns
				if limit > 0 && limit < len(wantS) {
					wantS = wantS[:limit]
				}
				if !reflect.DeepEqual(gotS, wantS) {
					t.Fatalf("PendingSpawns(%d): %d rows %v…, the shards hold %d: %v…", limit, len(gotS), head(gotS), len(wantS), head(wantS))
				}
			}
			for _, now := range []float64{999, 1020.5, 1050, 1e9} {
				for _, limit := range []int{0, 3, 50} {
					got, err := px.DueTimers(ctx, now, limit)
					if err != nil {
						t.Fatalf("DueTimers(%v, %d) through the proxy: %v", now, limit, err)
					}
					want, err := ref.DueTimers(ctx, now, limit)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
						t.Fatalf("DueTimers(%v, %d): %d timers %v…, the router %d: %v…", now, limit, len(got), head(got), len(want), head(want))
					}
				}
			}
			for _, f := range seedListFilters {
				o := store.ListOptions{DefinitionID: f.def, Statuses: f.statuses, RootsOnly: f.roots, Limit: f.limit}
				for page := 0; ; page++ {
					got, err := px.ListExecutions(ctx, o)
					if err != nil {
						t.Fatalf("ListExecutions %s page %d through the proxy: %v", f.name, page, err)
					}
					want, err := ref.ListExecutions(ctx, o)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got, want) && !(len(got.Items) == 0 && len(want.Items) == 0 && got.NextCursor == want.NextCursor) {
						t.Fatalf("ListExecutions %s page %d: %d items (next %q), the router %d (next %q)", f.name, page, len(got.Items), got.NextCursor, len(want.Items), want.NextCursor)
					}
					if got.NextCursor == "" {
						break
					}
					o.Cursor = got.NextCursor
				}
			}
			// Keyed operations after the same set_config still work.
			if _, err := px.Load(ctx, env.execs[0].id); err != nil {
				t.Fatalf("Load through the proxy: %v", err)
			}

			conn := e.connect(t)
			checkTimeoutOnEveryShard(t, ctx, conn, m)
		})
	}
}

// checkTimeoutOnEveryShard sends the store's shape in one pgx batch
// (set_config, then a read of every shard, one Sync) with a read that
// reports the setting each shard runs it with, and one that each shard's
// timeout cancels.
func checkTimeoutOnEveryShard(t *testing.T, ctx context.Context, conn *pgx.Conn, m *shardmap.Map) {
	t.Helper()
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('statement_timeout', $1::text, true)`, "4500ms")
	b.Queue(`SELECT seq, current_setting('statement_timeout') FROM outbox ORDER BY seq`)
	br := conn.SendBatch(ctx, b)
	var set string
	if err := br.QueryRow().Scan(&set); err != nil || set != "4500ms" {
		t.Fatalf("set_config through the proxy: %q, %v", set, err)
	}
	rows, err := br.Query()
	if err != nil {
		t.Fatal(err)
	}
	ordinals := map[int]bool{}
	n := 0
	for rows.Next() {
		var seq int64
		var st string
		if err := rows.Scan(&seq, &st); err != nil {
			t.Fatal(err)
		}
		ord, err := shardmap.OrdinalForSeq(seq)
		if err != nil {
			t.Fatal(err)
		}
		if st != "4500ms" {
			t.Fatalf("outbox seq %d (shard ordinal %d) was read with statement_timeout %q, want 4500ms", seq, ord, st)
		}
		ordinals[ord] = true
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	if len(ordinals) != len(m.Shards) {
		t.Fatalf("the read returned rows of %d shards (%v), want all %d", len(ordinals), ordinals, len(m.Shards))
	}
	// The setting was the implicit transaction's: gone with it.
	var after string
	if err := conn.QueryRow(ctx, `SELECT current_setting('statement_timeout') FROM outbox ORDER BY seq LIMIT 1`).Scan(&after); err != nil || after == "4500ms" {
		t.Fatalf("statement_timeout after the batch: %q, %v", after, err)
	}
	// And it is enforced: every shard cancels a read that runs longer
	// (without the timeout on some shard this read takes many seconds).
	b = &pgx.Batch{}
	b.Queue(`SELECT set_config('statement_timeout', $1::text, true)`, "50ms")
	b.Queue(`SELECT count(*) FROM outbox CROSS JOIN generate_series(1, 3000000) AS g`)
	start := time.Now()
	br = conn.SendBatch(ctx, b)
	if err := br.QueryRow().Scan(&set); err != nil || set != "50ms" {
		t.Fatalf("set_config 50ms through the proxy: %q, %v", set, err)
	}
	var cnt int64
	err = br.QueryRow().Scan(&cnt)
	if code := pgCode(err); code != "57014" {
		t.Fatalf("a long read after set_config('statement_timeout', '50ms'): %d, %v (%s), want 57014", cnt, err, code)
	}
	_ = br.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the timed-out read took %v: some shard ran it without the timeout", d)
	}
}

// head is the start of a list, for messages.
func head[T any](s []T) []T { return s[:min(len(s), 3)] }
