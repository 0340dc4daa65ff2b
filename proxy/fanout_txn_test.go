package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/proxy"
)

// inUse is the number of backend connections the proxy holds that are
// not idle in a pool.
func inUse(t *testing.T, e *proxyEnv) float64 {
	return metricSum(t, e.srv, "pgshard_proxy_backend_connections") - metricSum(t, e.srv, "pgshard_proxy_backend_connections_idle")
}

// waitIdle waits until every backend connection is back in its pool.
func waitIdle(t *testing.T, e *proxyEnv) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for inUse(t, e) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%v backend connections still in use after the transactions ended", inUse(t, e))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFanoutInTransaction: key-less reads inside transactions run on every
// shard in backend transactions of their own (readers), see the
// transaction's own writes on its shard, end with the transaction, and
// fail it as one database would; REPEATABLE READ and SERIALIZABLE are
// refused; a transaction reads any shards and writes one.
func TestFanoutInTransaction(t *testing.T) {
	for _, via := range []string{"pgbouncer", "direct"} {
		t.Run(via, func(t *testing.T) {
			var opts []envOpt
			base := int64(12_000_000)
			if via == "direct" {
				opts, base = append(opts, direct()), 12_500_000
			}
			e := startProxy(t, opts...)
			ctx := ctxT(t, 2*time.Minute)
			conn := e.connect(t)
			note := fmt.Sprintf("txn-%s", via)
			var keys [][]int64
			for s := range e.db.m.Shards {
				ks := e.db.keysOn(s, 3, base)
				keys = append(keys, ks)
				for _, k := range ks {
					if _, err := conn.Exec(ctx, "INSERT INTO accounts (aid, abalance, note) VALUES ($1, 10, $2)", k, note); err != nil {
						t.Fatal(err)
					}
				}
			}
			total := int64(3 * len(keys))
			count := func(q pgx.Tx) (int64, error) {
				var n int64
				err := q.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE note = $1", note).Scan(&n)
				return n, err
			}

			t.Run("reads every shard, sees its own writes, ends readers", func(t *testing.T) {
				for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
					tx, err := conn.BeginTx(ctx, pgx.TxOptions{})
					if err != nil {
						t.Fatal(err)
					}
					if n, err := count(tx); err != nil || n != total {
						t.Fatalf("%s: count in a transaction: %d, %v (want %d)", mode, n, err, total)
					}
					// A write binds the transaction to its shard; its rows are
					// seen by the next read of every shard.
					if _, err := tx.Exec(ctx, "UPDATE accounts SET note = 'moved' WHERE aid = $1", mode, keys[1][0]); err != nil {
						t.Fatal(err)
					}
					if n, err := count(tx); err != nil || n != total-1 {
						t.Fatalf("%s: count after an uncommitted update: %d, %v (want %d)", mode, n, err, total-1)
					}
					if err := tx.Rollback(ctx); err != nil {
						t.Fatal(err)
					}
					waitIdle(t, e)
				}
				var n int64
				if err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE note = $1", note).Scan(&n); err != nil || n != total {
					t.Fatalf("after ROLLBACK: %d, %v", n, err)
				}
			})

			t.Run("the transaction's settings reach every shard", func(t *testing.T) {
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, q := range []string{"SET LOCAL application_name = 'txn-reader'", "SAVEPOINT a", "SET LOCAL statement_timeout = '9s'"} {
					if _, err := tx.Exec(ctx, q); err != nil {
						t.Fatal(err)
					}
				}
				rows, err := tx.Query(ctx, "SELECT DISTINCT current_setting('application_name') || ' ' || current_setting('statement_timeout') FROM accounts WHERE note = $1", note)
				if err != nil {
					t.Fatal(err)
				}
				got, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil || len(got) != 1 || got[0] != "txn-reader 9s" {
					t.Fatalf("settings seen by the shards: %q, %v", got, err)
				}
				if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT a"); err != nil {
					t.Fatal(err)
				}
				if n, err := count(tx); err != nil || n != total {
					t.Fatalf("count after ROLLBACK TO: %d, %v", n, err)
				}
				// The keyed statement takes the reader of its shard.
				var bal int
				if err := tx.QueryRow(ctx, "SELECT abalance FROM accounts WHERE aid = $1", keys[2][0]).Scan(&bal); err != nil || bal != 10 {
					t.Fatalf("keyed read after the fan-out: %d, %v", bal, err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				waitIdle(t, e)
			})

			t.Run("REPEATABLE READ and SERIALIZABLE are refused", func(t *testing.T) {
				for _, begin := range []string{"BEGIN ISOLATION LEVEL REPEATABLE READ", "BEGIN ISOLATION LEVEL SERIALIZABLE",
					"BEGIN; SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"} {
					for _, q := range strings.Split(begin, "; ") {
						if _, err := conn.Exec(ctx, q); err != nil {
							t.Fatalf("%s: %v", q, err)
						}
					}
					_, err := conn.Exec(ctx, "SELECT count(*) FROM accounts WHERE note = $1", note)
					var pe *pgconn.PgError
					if !errors.As(err, &pe) || pe.Code != "0A000" || !strings.Contains(pe.Message, "no snapshot spans shards") {
						t.Fatalf("%s: fan-out: %v, want 0A000 (no snapshot spans shards)", begin, err)
					}
					if _, err := conn.Exec(ctx, "SELECT 1"); pgCode(err) != "25P02" {
						t.Fatalf("%s: after the refusal: %v, want 25P02", begin, err)
					}
					if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
						t.Fatal(err)
					}
					waitIdle(t, e)
				}
				// A bound REPEATABLE READ transaction too.
				tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, "SELECT abalance FROM accounts WHERE aid = $1", keys[0][0]); err != nil {
					t.Fatal(err)
				}
				if _, err := count(tx); pgCode(err) != "0A000" {
					t.Fatalf("fan-out in a bound REPEATABLE READ transaction: %v, want 0A000", err)
				}
				_ = tx.Rollback(ctx)
				// ... and a keyed read of a second shard.
				tx, err = conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, "SELECT abalance FROM accounts WHERE aid = $1", keys[0][0]); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, "SELECT abalance FROM accounts WHERE aid = $1", keys[1][0]); pgCode(err) != "0A000" {
					t.Fatalf("a second shard in a SERIALIZABLE transaction: %v, want 0A000", err)
				}
				_ = tx.Rollback(ctx)
				waitIdle(t, e)
			})

			t.Run("a failed read fails the transaction on every shard", func(t *testing.T) {
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, "UPDATE accounts SET abalance = 11 WHERE aid = $1", keys[0][1]); err != nil {
					t.Fatal(err)
				}
				// Division by zero on the shard that holds keys[3][0] only.
				_, err = tx.Exec(ctx, "SELECT 1 / (aid - $1) FROM accounts WHERE note = $2", keys[3][0], note)
				if pgCode(err) != "22012" {
					t.Fatalf("a read failing on one shard: %v, want 22012", err)
				}
				if _, err := tx.Exec(ctx, "SELECT abalance FROM accounts WHERE aid = $1", keys[0][1]); pgCode(err) != "25P02" {
					t.Fatalf("the transaction's own shard after the failed read: %v, want 25P02", err)
				}
				if err := tx.Commit(ctx); !errors.Is(err, pgx.ErrTxCommitRollback) {
					t.Fatalf("COMMIT after the failed read: %v, want a rollback", err)
				}
				var bal int
				if err := conn.QueryRow(ctx, "SELECT abalance FROM accounts WHERE aid = $1", keys[0][1]).Scan(&bal); err != nil || bal != 10 {
					t.Fatalf("the update of the failed transaction: balance %d, %v (want 10: rolled back)", bal, err)
				}
				waitIdle(t, e)
			})

			t.Run("reads any shards, writes one", func(t *testing.T) {
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var bal int
				for s := range keys {
					if err := tx.QueryRow(ctx, "SELECT abalance FROM accounts WHERE aid = $1", keys[s][2]).Scan(&bal); err != nil {
						t.Fatalf("keyed read of shard %d: %v", s, err)
					}
				}
				// The first write may go to any shard: the transaction's
				// backend has only read so far.
				if _, err := tx.Exec(ctx, "UPDATE accounts SET abalance = 12 WHERE aid = $1", keys[2][2]); err != nil {
					t.Fatalf("write after reads of every shard: %v", err)
				}
				if err := tx.QueryRow(ctx, "SELECT abalance FROM accounts WHERE aid = $1", keys[0][2]).Scan(&bal); err != nil || bal != 10 {
					t.Fatalf("read of another shard after the write: %d, %v", bal, err)
				}
				_, err = tx.Exec(ctx, "UPDATE accounts SET abalance = 13 WHERE aid = $1", keys[1][2])
				var pe *pgconn.PgError
				if !errors.As(err, &pe) || pe.Code != "0A000" {
					t.Fatalf("a write for a second shard: %v, want 0A000", err)
				}
				_ = tx.Rollback(ctx)
				// Committed: the write of the one shard it wrote.
				tx, err = conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := tx.QueryRow(ctx, "SELECT abalance FROM accounts WHERE aid = $1", keys[0][2]).Scan(&bal); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, "UPDATE accounts SET abalance = 14 WHERE aid = $1", keys[3][2]); err != nil {
					t.Fatal(err)
				}
				if n, err := count(tx); err != nil || n != total {
					t.Fatalf("fan-out after the moved write: %d, %v", n, err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				if err := conn.QueryRow(ctx, "SELECT abalance FROM accounts WHERE aid = $1", keys[3][2]).Scan(&bal); err != nil || bal != 14 {
					t.Fatalf("after COMMIT: %d, %v (want 14)", bal, err)
				}
				waitIdle(t, e)
			})

			t.Run("pipelines and simple query strings", func(t *testing.T) {
				// BEGIN and the read in one pipeline (what JDBC sends with
				// autocommit off), then COMMIT.
				batch := &pgx.Batch{}
				batch.Queue("BEGIN")
				batch.Queue("SELECT count(*) FROM accounts WHERE note = $1", note)
				batch.Queue("COMMIT")
				br := conn.SendBatch(ctx, batch)
				if _, err := br.Exec(); err != nil {
					t.Fatal(err)
				}
				var n int64
				if err := br.QueryRow().Scan(&n); err != nil || n != total {
					t.Fatalf("fan-out after BEGIN in one pipeline: %d, %v", n, err)
				}
				if _, err := br.Exec(); err != nil {
					t.Fatal(err)
				}
				if err := br.Close(); err != nil {
					t.Fatal(err)
				}
				// A read of every shard after a keyed read of the same
				// pipeline ends a part of its own (internal/engine/pipecut.go);
				// after a keyed write it is refused: the pipeline's implicit
				// transaction runs on one shard.
				batch = &pgx.Batch{}
				batch.Queue("SELECT abalance FROM accounts WHERE aid = $1", keys[0][0])
				batch.Queue("SELECT count(*) FROM accounts WHERE note = $1", note)
				br = conn.SendBatch(ctx, batch)
				if _, err := br.Exec(); err != nil {
					t.Fatal(err)
				}
				if err := br.QueryRow().Scan(&n); err != nil || n != total {
					t.Fatalf("keyed read + fan-out in one pipeline: %d, %v", n, err)
				}
				if err := br.Close(); err != nil {
					t.Fatal(err)
				}
				batch = &pgx.Batch{}
				batch.Queue("UPDATE accounts SET abalance = abalance WHERE aid = $1", keys[0][0])
				batch.Queue("SELECT count(*) FROM accounts WHERE note = $1", note)
				if err := conn.SendBatch(ctx, batch).Close(); pgCode(err) != "0A000" {
					t.Fatalf("keyed write + fan-out in one pipeline: %v, want 0A000", err)
				}
				waitIdle(t, e)
			})
		})
	}
}

var _ = context.Background

// TestMergeGroupLimit: a merged GROUP BY ordered by an aggregate buffers
// its groups, at most MergeGroupLimit (54000 beyond); ordered by its keys
// it streams, whatever the number of groups.
func TestMergeGroupLimit(t *testing.T) {
	e := startProxy(t, func(c *proxy.Config) { c.MergeGroupLimit = 3 })
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t)
	for s := range e.db.m.Shards {
		for i, k := range e.db.keysOn(s, 4, 9_800_000) {
			if _, err := conn.Exec(ctx, "INSERT INTO accounts (aid, abalance, note) VALUES ($1, $2, 'groups')", k, i); err != nil {
				t.Fatal(err)
			}
		}
	}
	var n int
	rows, err := conn.Query(ctx, "SELECT abalance, count(*) FROM accounts WHERE note = 'groups' GROUP BY abalance ORDER BY abalance")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var b, c int64
		err := r.Scan(&b, &c)
		return fmt.Sprintf("%d:%d", b, c), err
	})
	want := "[0:4 1:4 2:4 3:4]"
	if err != nil || fmt.Sprint(got) != want {
		t.Fatalf("4 groups ordered by their key (streamed): %v, %v (want %s)", got, err, want)
	}
	_, err = conn.Exec(ctx, "SELECT abalance, count(*) FROM accounts WHERE note = 'groups' GROUP BY abalance ORDER BY count(*) DESC, 1")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "54000" || !strings.Contains(pe.Message, "more than 3 groups") {
		t.Fatalf("4 groups ordered by an aggregate with a limit of 3: %v, want 54000", err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE note = 'groups'").Scan(&n); err != nil || n != 16 {
		t.Fatalf("the session after the limit: %d, %v", n, err)
	}
	waitIdle(t, e)
}

// TestFanoutCancel: a cancel request reaches every shard of a running
// fan-out, inside and outside a transaction; the connections go back to
// their pools.
func TestFanoutCancel(t *testing.T) {
	e := startProxy(t, direct())
	ctx := ctxT(t, 2*time.Minute)
	conn := e.connect(t)
	for s := range e.db.m.Shards {
		if _, err := conn.Exec(ctx, "INSERT INTO accounts (aid, note) VALUES ($1, 'cancel-fan') ON CONFLICT DO NOTHING", e.db.keysOn(s, 1, 13_000_000)[0]); err != nil {
			t.Fatal(err)
		}
	}
	// Slow on every shard, and cancellable (a function scan of a huge
	// generate_series is not: Postgres materializes it without checking
	// for interrupts).
	slow := "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 300000000) SELECT count(*) FROM accounts a, r WHERE a.note = 'cancel-fan'"
	for _, inTxn := range []bool{false, true} {
		if inTxn {
			if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
		}
		errc := make(chan error, 1)
		go func() {
			_, err := conn.Exec(ctx, slow)
			errc <- err
		}()
		// Wait until it runs on every shard.
		deadline := time.Now().Add(15 * time.Second)
		for s := range e.db.m.Shards {
			sh := e.db.shardConn(t, s)
			for {
				var n int
				if err := sh.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%n < 300000000%' AND state = 'active' AND pid <> pg_backend_pid()").Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the slow fan-out never started on shard %d", s)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		start := time.Now()
		if err := conn.PgConn().CancelRequest(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if pgCode(err) != "57014" {
				t.Fatalf("cancelled fan-out (in a transaction: %v): %v, want 57014", inTxn, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("the cancelled fan-out did not end within 20s (in a transaction: %v)", inTxn)
		}
		t.Logf("in a transaction: %v: cancelled in %s", inTxn, time.Since(start).Round(time.Millisecond))
		if inTxn {
			if _, err := conn.Exec(ctx, "SELECT 1"); pgCode(err) != "25P02" {
				t.Fatalf("after the cancelled read: %v, want 25P02", err)
			}
			if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
		}
		waitIdle(t, e)
		var n int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE note = 'cancel-fan'").Scan(&n); err != nil || n != int64(len(e.db.m.Shards)) {
			t.Fatalf("the session after the cancel: %d, %v", n, err)
		}
	}
}
