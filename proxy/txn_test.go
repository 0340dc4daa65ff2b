package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"
)

// TestCrossShardRefused: a statement for another shard than its
// transaction's fails with 0A000 naming both shards, the transaction is
// aborted (a COMMIT commits nothing), and the session goes on.
func TestCrossShardRefused(t *testing.T) {
	for _, via := range []string{"pgbouncer", "direct"} {
		t.Run(via, func(t *testing.T) {
			var opts []envOpt
			base := int64(4_000_000)
			if via == "direct" {
				opts, base = append(opts, direct()), 4_500_000
			}
			e := startProxy(t, opts...)
			ctx := ctxT(t, time.Minute)
			conn := e.connect(t)
			a := e.db.keysOn(0, 1, base)[0]
			b := e.db.keysOn(3, 1, base)[0]
			for _, k := range []int64{a, b} {
				if _, err := conn.Exec(ctx, "INSERT INTO accounts (aid, abalance) VALUES ($1, 1)", k); err != nil {
					t.Fatal(err)
				}
			}
			for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, "UPDATE accounts SET abalance = 100 WHERE aid = $1", mode, a); err != nil {
					t.Fatal(err)
				}
				_, err = tx.Exec(ctx, "UPDATE accounts SET abalance = 100 WHERE aid = $1", mode, b)
				var pe *pgconn.PgError
				if !errors.As(err, &pe) || pe.Code != "0A000" || !strings.Contains(pe.Message, `shard "shard3"`) || !strings.Contains(pe.Message, `shard "shard0"`) {
					t.Fatalf("cross-shard statement: %v; want 0A000 naming shard3 and shard0", err)
				}
				// The transaction is aborted: further statements fail with 25P02.
				_, err = tx.Exec(ctx, "SELECT 1", mode)
				if pgCode(err) != "25P02" {
					t.Fatalf("statement after the refusal: %v, want 25P02", err)
				}
				// COMMIT of an aborted transaction rolls back (pgx reports it).
				if err := tx.Commit(ctx); !errors.Is(err, pgx.ErrTxCommitRollback) {
					t.Fatalf("commit after refusal: %v, want ErrTxCommitRollback", err)
				}
				var bal int
				if err := conn.QueryRow(ctx, "SELECT abalance FROM accounts WHERE aid = $1", a).Scan(&bal); err != nil || bal != 1 {
					t.Fatalf("after the refused transaction: balance %d, %v (want 1: nothing committed)", bal, err)
				}
			}
			// A deferred transaction with SET LOCAL and SAVEPOINT replays them on its shard.
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"SET LOCAL statement_timeout = '7s'", "SAVEPOINT s1", "SET LOCAL application_name = 'in-tx'"} {
				if _, err := tx.Exec(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			var st, app string
			var got int
			if err := tx.QueryRow(ctx, "SELECT current_setting('statement_timeout'), current_setting('application_name'), abalance FROM accounts WHERE aid = $1", b).Scan(&st, &app, &got); err != nil {
				t.Fatal(err)
			}
			if st != "7s" || app != "in-tx" || got != 1 {
				t.Fatalf("replayed settings: %q %q %d", st, app, got)
			}
			if _, err := tx.Exec(ctx, "UPDATE accounts SET abalance = 5 WHERE aid = $1", b); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s1"); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := conn.QueryRow(ctx, "SELECT abalance FROM accounts WHERE aid = $1", b).Scan(&got); err != nil || got != 1 {
				t.Fatalf("after ROLLBACK TO SAVEPOINT: %d, %v", got, err)
			}
			// Hints: SET LOCAL pgshard.key binds the transaction; a statement for
			// another shard is refused even before any table was touched.
			tx, err = conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL pgshard.key = '%d'", a)); err == nil {
				// an int8 table: the hint type of the test schema is text, so
				// the key above names some shard; check it is consistent.
				_ = tx.Rollback(ctx)
			} else {
				t.Fatalf("SET LOCAL pgshard.key: %v", err)
			}
			// Shard hint in a comment.
			var shardName string
			if err := conn.QueryRow(ctx, "/* pgshard:shard=shard2 */ SELECT shard_name FROM pgshard_identity").Scan(&shardName); err != nil || shardName != "shard2" {
				t.Fatalf("shard hint: %q %v", shardName, err)
			}
			// An implicit transaction (one pipeline) across shards is refused too.
			batch := &pgx.Batch{}
			batch.Queue("UPDATE accounts SET abalance = 7 WHERE aid = $1", a)
			batch.Queue("UPDATE accounts SET abalance = 7 WHERE aid = $1", b)
			err = conn.SendBatch(ctx, batch).Close()
			if pgCode(err) != "0A000" {
				t.Fatalf("cross-shard pipeline: %v, want 0A000", err)
			}
			if err := conn.QueryRow(ctx, "SELECT abalance FROM accounts WHERE aid = $1", a).Scan(&got); err != nil || got != 1 {
				t.Fatalf("after the refused pipeline: %d, %v (the first update must have been rolled back)", got, err)
			}
		})
	}
}

// TestSoftTransactionMoves: table-less reads in a transaction before its
// first key do not pin it to a shard.
func TestSoftTransactionMoves(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t)
	for s := 0; s < len(e.db.m.Shards); s++ {
		k := e.db.keysOn(s, 1, 4_700_000)[0]
		if _, err := conn.Exec(ctx, "INSERT INTO accounts (aid, abalance) VALUES ($1, 0)", k); err != nil {
			t.Fatal(err)
		}
		for round := 0; round < 3; round++ {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var one int
			if err := tx.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SET LOCAL application_name = 'soft'"); err != nil {
				t.Fatal(err)
			}
			var app, shard string
			if err := tx.QueryRow(ctx, "SELECT current_setting('application_name'), (SELECT shard_name FROM pgshard_identity) FROM accounts WHERE aid = $1", k).Scan(&app, &shard); err != nil {
				t.Fatalf("keyed statement after a soft start: %v", err)
			}
			if app != "soft" || shard != e.db.m.Shards[s].Name {
				t.Fatalf("after moving: application_name %q on %s, want soft on %s", app, shard, e.db.m.Shards[s].Name)
			}
			if _, err := tx.Exec(ctx, "UPDATE accounts SET abalance = abalance + 1 WHERE aid = $1", k); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var bal int
		if err := conn.QueryRow(ctx, "SELECT abalance FROM accounts WHERE aid = $1", k).Scan(&bal); err != nil || bal != 3 {
			t.Fatalf("balance %d, %v; want 3", bal, err)
		}
		// A shard hint after a soft start moves the transaction too.
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var one int
		if err := tx.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SET LOCAL pgshard.shard = '"+e.db.m.Shards[s].Name+"'"); err != nil {
			t.Fatal(err)
		}
		var shard string
		if err := tx.QueryRow(ctx, "SELECT shard_name FROM pgshard_identity").Scan(&shard); err != nil || shard != e.db.m.Shards[s].Name {
			t.Fatalf("after a hint in a soft transaction: %q %v", shard, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCASRace: goroutines race harel_commit_cas on the same executions
// through the proxy; every version has exactly one winner.
func TestCASRace(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, 2*time.Minute)
	const workers, rounds = 6, 25
	var ids []string
	for s := range e.db.m.Shards {
		ids = append(ids, e.db.textKeysOn(s, 1, fmt.Sprintf("cas%d-", s))...)
	}
	type win struct {
		id  string
		ver int
	}
	var mu sync.Mutex
	wins := map[win]int{}
	g, gctx := errgroup.WithContext(ctx)
	for w := 0; w < workers; w++ {
		conn := e.connect(t)
		g.Go(func() error {
			for r := 0; r < rounds; r++ {
				for _, id := range ids {
					var ver int
					err := conn.QueryRow(gctx, "SELECT version FROM executions WHERE id = $1", id).Scan(&ver)
					if errors.Is(err, pgx.ErrNoRows) {
						ver = 0
					} else if err != nil {
						return err
					}
					var ok bool
					if err := conn.QueryRow(gctx, "SELECT harel_commit_cas($1, 'def', $2, $3, '')", id, fmt.Sprintf(`{"by":%d}`, w), ver).Scan(&ok); err != nil {
						return err
					}
					if ok {
						mu.Lock()
						wins[win{id, ver + 1}]++
						mu.Unlock()
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	conn := e.connect(t)
	for _, id := range ids {
		var ver int
		if err := conn.QueryRow(ctx, "SELECT version FROM executions WHERE id = $1", id).Scan(&ver); err != nil {
			t.Fatal(err)
		}
		if ver < rounds {
			t.Errorf("%s: version %d after %d rounds of %d workers (at least one win per round expected)", id, ver, rounds, workers)
		}
		for v := 1; v <= ver; v++ {
			if n := wins[win{id, v}]; n != 1 {
				t.Errorf("%s: version %d has %d winners, want exactly 1", id, v, n)
			}
		}
		if n := wins[win{id, ver + 1}]; n != 0 {
			t.Errorf("%s: a winner reported version %d beyond the stored %d", id, ver+1, ver)
		}
	}
}

// TestCancel: a cancel request stops the client's own query on its
// backend; other clients are not affected.
func TestCancel(t *testing.T) {
	forEachPath(t, func(t *testing.T, via string, e *proxyEnv) {
		ctx := ctxT(t, time.Minute)
		victim := e.connect(t)
		other := e.connect(t)
		k := e.db.keysOn(1, 1, 4_800_000)[0]
		start := time.Now()
		errc := make(chan error, 1)
		go func() {
			_, err := victim.Exec(ctx, "SELECT pg_sleep(20) FROM accounts WHERE aid = $1 UNION ALL SELECT pg_sleep(20)", k)
			errc <- err
		}()
		// Wait until the query runs on a backend (poll pg_stat_activity).
		sh := e.db.shardConn(t, 1)
		deadline := time.Now().Add(10 * time.Second)
		for {
			var n int
			if err := sh.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(20)%' AND state = 'active'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the sleeping query never started")
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Another client is served meanwhile, including on the same shard.
		var one int
		if err := other.QueryRow(ctx, "SELECT 1 FROM pgshard_identity WHERE shard_name = 'shard1' /* pgshard:shard=shard1 */").Scan(&one); err != nil || one != 1 {
			t.Fatalf("other client: %d %v", one, err)
		}
		if err := victim.PgConn().CancelRequest(ctx); err != nil {
			t.Fatal(err)
		}
		var err error
		select {
		case err = <-errc:
		case <-time.After(15 * time.Second):
			t.Fatal("the cancelled query did not end within 15s")
		}
		if pgCode(err) != "57014" {
			t.Fatalf("cancelled query: %v, want 57014", err)
		}
		if time.Since(start) > 15*time.Second {
			t.Fatalf("cancel took %v", time.Since(start))
		}
		// Both sessions go on.
		for _, c := range []*pgx.Conn{victim, other} {
			if err := c.QueryRow(ctx, "SELECT 2").Scan(&one); err != nil || one != 2 {
				t.Fatalf("after cancel: %d %v", one, err)
			}
		}
	})
}

// TestBackendKilled: the backend of an open transaction is terminated; the
// client gets an error, rolls back, and the next transaction works.
func TestBackendKilled(t *testing.T) {
	for _, via := range []string{"pgbouncer", "direct"} {
		t.Run(via, func(t *testing.T) {
			var opts []envOpt
			base := int64(4_900_000)
			if via == "direct" {
				opts, base = append(opts, direct()), 4_950_000
			}
			e := startProxy(t, append(opts, poolSize(2))...)
			ctx := ctxT(t, time.Minute)
			conn := e.connect(t)
			k := e.db.keysOn(2, 1, base)[0]
			if _, err := conn.Exec(ctx, "INSERT INTO accounts (aid, abalance) VALUES ($1, 0)", k); err != nil {
				t.Fatal(err)
			}
			for round := 0; round < 2; round++ {
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var pid int
				if err := tx.QueryRow(ctx, "SELECT pg_backend_pid() FROM accounts WHERE aid = $1", k).Scan(&pid); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, "UPDATE accounts SET abalance = 99 WHERE aid = $1", k); err != nil {
					t.Fatal(err)
				}
				sh := e.db.shardConn(t, 2)
				var ok bool
				if err := sh.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
					t.Fatalf("terminate %d: %v %v", pid, ok, err)
				}
				_, err = tx.Exec(ctx, "UPDATE accounts SET abalance = 98 WHERE aid = $1", k)
				if err == nil {
					t.Fatal("statement on a terminated backend succeeded")
				}
				if code := pgCode(err); code != "57P01" && code != "08006" {
					t.Fatalf("statement on a terminated backend: %v (want 57P01 or 08006)", err)
				}
				_ = tx.Rollback(ctx)
				var bal int
				if err := conn.QueryRow(ctx, "SELECT abalance FROM accounts WHERE aid = $1", k).Scan(&bal); err != nil || bal != 0 {
					t.Fatalf("after the killed transaction: %d, %v (want 0)", bal, err)
				}
			}
			// The pool recovered: every connection of the small pool works.
			g, gctx := errgroup.WithContext(ctx)
			for i := 0; i < 4; i++ {
				c := e.connect(t)
				g.Go(func() error {
					var n int
					return c.QueryRow(gctx, "SELECT count(*) FROM accounts WHERE aid = $1", k).Scan(&n)
				})
			}
			if err := g.Wait(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSettingsNoLeak: one client's startup parameters and SETs are in
// effect for its own transactions only — also after ROLLBACK — with both
// clients sharing one backend connection (pool size 1).
func TestSettingsNoLeak(t *testing.T) {
	for _, via := range []string{"pgbouncer", "direct"} {
		t.Run(via, func(t *testing.T) {
			opts := []envOpt{poolSize(1)}
			if via == "direct" {
				opts = append(opts, direct())
			}
			e := startProxy(t, opts...)
			ctx := ctxT(t, time.Minute)
			custom := e.connect(t, func(c *pgx.ConnConfig) {
				c.RuntimeParams["extra_float_digits"] = "0"
				c.RuntimeParams["IntervalStyle"] = "iso_8601"
				c.RuntimeParams["search_path"] = "public, pg_catalog"
			})
			plain := e.connect(t)
			show := func(c *pgx.Conn, tx bool) (efd, istyle, sp string) {
				t.Helper()
				q := "SELECT current_setting('extra_float_digits'), current_setting('IntervalStyle'), current_setting('search_path')"
				if tx {
					q += " /* pgshard:shard=shard0 */"
				}
				if err := c.QueryRow(ctx, q).Scan(&efd, &istyle, &sp); err != nil {
					t.Fatal(err)
				}
				return
			}
			check := func(when string) {
				t.Helper()
				if a, b, c := show(custom, false); a != "0" || b != "iso_8601" || c != "public, pg_catalog" {
					t.Fatalf("%s: custom client sees %q %q %q", when, a, b, c)
				}
				if a, b, c := show(plain, false); a != "1" || b != "postgres" || c != `"$user", public` {
					t.Fatalf("%s: plain client sees %q %q %q (leaked)", when, a, b, c)
				}
			}
			check("start")
			// In a transaction, with a SET LOCAL, rolled back.
			tx, err := custom.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SET LOCAL extra_float_digits = 2"); err != nil {
				t.Fatal(err)
			}
			var efd string
			if err := tx.QueryRow(ctx, "SELECT current_setting('extra_float_digits') /* pgshard:shard=shard0 */").Scan(&efd); err != nil || efd != "2" {
				t.Fatalf("SET LOCAL in the transaction: %q %v", efd, err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			check("after ROLLBACK")
			// Session SET and RESET.
			if _, err := custom.Exec(ctx, "SET extra_float_digits = 3"); err != nil {
				t.Fatal(err)
			}
			if a, _, _ := show(custom, false); a != "3" {
				t.Fatalf("after SET: %q", a)
			}
			if a, _, _ := show(plain, false); a != "1" {
				t.Fatalf("plain client after the other's SET: %q (leaked)", a)
			}
			if _, err := custom.Exec(ctx, "RESET extra_float_digits"); err != nil {
				t.Fatal(err)
			}
			check("after RESET")
			// Same backend: through one pool slot, the backend pid is shared.
			var p1, p2 int
			if err := custom.QueryRow(ctx, "SELECT pg_backend_pid() /* pgshard:shard=shard0 */").Scan(&p1); err != nil {
				t.Fatal(err)
			}
			if err := plain.QueryRow(ctx, "SELECT pg_backend_pid() /* pgshard:shard=shard0 */").Scan(&p2); err != nil {
				t.Fatal(err)
			}
			t.Logf("backend pids: custom %d, plain %d", p1, p2)
			// Invalid startup parameters are refused like Postgres does.
			cfg, _ := pgx.ParseConfig(e.dsn)
			cfg.RuntimeParams["extra_float_digits"] = "many"
			_, err = pgx.ConnectConfig(ctx, cfg)
			if pgCode(err) != "22023" {
				t.Fatalf("invalid startup parameter: %v, want 22023", err)
			}
			cfg, _ = pgx.ParseConfig(e.dsn)
			cfg.RuntimeParams["no_such_setting"] = "1"
			_, err = pgx.ConnectConfig(ctx, cfg)
			if pgCode(err) != "42704" {
				t.Fatalf("unknown startup parameter: %v, want 42704", err)
			}
		})
	}
}

// TestFanout: key-less reads are merged across shards; key-less DDL that
// names no unsharded table (a schema, a composite type) runs on every
// shard.
func TestFanout(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS fan_ddl"); err != nil {
		t.Fatal(err)
	}
	for i := range e.db.m.Shards {
		var n int
		if err := e.db.shardConn(t, i).QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = 'fan_ddl'").Scan(&n); err != nil || n != 1 {
			t.Fatalf("DDL on shard %d: %d %v", i, n, err)
		}
	}
	// A DDL that fails alike on every shard changed nothing anywhere: the
	// error is Postgres's as is (no Detail of pgshard's, as directly).
	_, err := conn.Exec(ctx, "CREATE SCHEMA fan_ddl")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42P06" || pe.Detail != "" {
		t.Fatalf("DDL failing on every shard: %v (detail %q), want 42P06 without a detail", err, detailOf(pe))
	}
	// One that failed on some shards and ran on others names both.
	if _, err := e.db.shardConn(t, 1).Exec(ctx, "DROP SCHEMA fan_ddl"); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, "CREATE SCHEMA fan_ddl")
	if !errors.As(err, &pe) || pe.Code != "42P06" || !strings.Contains(pe.Detail, "succeeded on "+e.db.m.Shards[1].Name) {
		t.Fatalf("DDL failing on some shards: %v (detail %q), want 42P06 naming where it ran", err, detailOf(pe))
	}
	// A composite type is a type like any other: created, altered and
	// dropped on every shard (it went to the default shard alone, so its
	// DROP TYPE, which every type's goes everywhere, failed elsewhere).
	for _, q := range []string{"DROP TYPE IF EXISTS fan_pair", "CREATE TYPE fan_pair AS (a int, b text)", "ALTER TYPE fan_pair ADD ATTRIBUTE c int"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for i := range e.db.m.Shards {
		var n int
		if err := e.db.shardConn(t, i).QueryRow(ctx, "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass('fan_pair') AND attnum > 0").Scan(&n); err != nil || n != 3 {
			t.Fatalf("composite type on shard %d: %d attributes, %v; want 3", i, n, err)
		}
	}
	if _, err := conn.Exec(ctx, "DROP TYPE fan_pair"); err != nil {
		t.Fatalf("DROP TYPE of a composite type: %v", err)
	}
	// An index named alone (DROP / ALTER / COMMENT ON / REINDEX INDEX)
	// changes where its table is: every shard for a keyed table's (it
	// went to the default shard alone, the others kept it), the default
	// shard for an unsharded table's — inside a transaction block too.
	indexOn := func(name string) []int {
		var n []int
		for i := range e.db.m.Shards {
			var c int
			if err := e.db.shardConn(t, i).QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relname = $1 AND relkind = 'i'", name).Scan(&c); err != nil {
				t.Fatal(err)
			}
			n = append(n, c)
		}
		return n
	}
	every, none := []int{1, 1, 1, 1}[:len(e.db.m.Shards)], make([]int, len(e.db.m.Shards))
	onDefault := slices.Clone(none)
	onDefault[0] = 1
	for _, st := range []struct {
		sql, index string
		want       []int
		extended   bool
	}{
		{"DROP TABLE IF EXISTS fan_local", "", nil, false},
		{"CREATE INDEX fan_idx ON accounts (note)", "fan_idx", every, false},
		{"ALTER INDEX fan_idx RENAME TO fan_idx2", "fan_idx2", every, false},
		{"COMMENT ON INDEX public.fan_idx2 IS 'note'", "", nil, false},
		{"ALTER INDEX fan_idx2 SET (fillfactor = 80)", "", nil, true},
		{"REINDEX INDEX fan_idx2", "", nil, false},
		{"DROP INDEX fan_idx2", "fan_idx2", none, true},
		{"CREATE TABLE fan_local (a int)", "", nil, false},
		{"CREATE INDEX fan_local_idx ON fan_local (a)", "fan_local_idx", onDefault, false},
		{"ALTER INDEX fan_local_idx RENAME TO fan_local_idx2", "fan_local_idx2", onDefault, false},
		{"DROP INDEX fan_local_idx2", "fan_local_idx2", none, false},
		{"DROP TABLE fan_local", "", nil, false},
	} {
		var err error
		if st.extended {
			err = conn.PgConn().ExecParams(ctx, st.sql, nil, nil, nil, nil).Read().Err
		} else {
			_, err = conn.Exec(ctx, st.sql)
		}
		if err != nil {
			t.Fatalf("%s: %v", st.sql, err)
		}
		if st.index != "" {
			if got := indexOn(st.index); !slices.Equal(got, st.want) {
				t.Fatalf("after %s: index %s on the shards %v, want %v", st.sql, st.index, got, st.want)
			}
		}
	}
	if _, err := conn.Exec(ctx, "CREATE INDEX fan_idx3 ON accounts (note)"); err != nil {
		t.Fatal(err)
	}
	itx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := itx.Exec(ctx, "DROP INDEX fan_idx3"); pgCode(err) != "0A000" {
		t.Fatalf("DROP INDEX of a keyed table's index in a transaction block: %v, want 0A000 (every shard's schema)", err)
	}
	_ = itx.Rollback(ctx)
	// In a query string with other statements: refused, nothing changed
	// (a string is routed by the analyzer alone); an unsharded table's
	// index there runs as before.
	if _, err := conn.Exec(ctx, "SELECT 1; DROP INDEX fan_idx3"); pgCode(err) != "0A000" || !slices.Equal(indexOn("fan_idx3"), every) {
		t.Fatalf("DROP INDEX of a keyed table's index in a query string: %v, on the shards %v; want 0A000 and %v", err, indexOn("fan_idx3"), every)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE fan_local2 (a int); CREATE INDEX fan_local2_idx ON fan_local2 (a); DROP INDEX fan_local2_idx; DROP TABLE fan_local2"); err != nil {
		t.Fatalf("DROP INDEX of an unsharded table's index in a query string: %v", err)
	}
	if _, err := conn.Exec(ctx, "DROP INDEX fan_idx3"); err != nil || !slices.Equal(indexOn("fan_idx3"), none) {
		t.Fatalf("DROP INDEX fan_idx3: %v, on the shards %v", err, indexOn("fan_idx3"))
	}
	// Rows on every shard.
	var want []int64
	for s := range e.db.m.Shards {
		for _, k := range e.db.keysOn(s, 3, 5_000_000) {
			if _, err := conn.Exec(ctx, "INSERT INTO accounts (aid, abalance, note) VALUES ($1, $2, 'fan')", k, int32(k%97)); err != nil {
				t.Fatal(err)
			}
			want = append(want, k)
		}
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		var cnt, sum int64
		var mn, mx int64
		if err := conn.QueryRow(ctx, "SELECT count(*), sum(abalance), min(aid), max(aid) FROM accounts WHERE note = 'fan'", mode).Scan(&cnt, &sum, &mn, &mx); err != nil {
			t.Fatalf("%s aggregates: %v", mode, err)
		}
		var wsum int64
		wmin, wmax := want[0], want[0]
		for _, k := range want {
			wsum += k % 97
			wmin, wmax = min(wmin, k), max(wmax, k)
		}
		if cnt != int64(len(want)) || sum != wsum || mn != wmin || mx != wmax {
			t.Fatalf("%s aggregates: %d %d %d %d, want %d %d %d %d", mode, cnt, sum, mn, mx, len(want), wsum, wmin, wmax)
		}
		rows, err := conn.Query(ctx, "SELECT aid FROM accounts WHERE note = 'fan' ORDER BY aid DESC LIMIT 5 OFFSET 2", mode)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatalf("%s ordered: %v", mode, err)
		}
		sorted := append([]int64(nil), want...)
		for i := range sorted {
			for j := i + 1; j < len(sorted); j++ {
				if sorted[j] > sorted[i] {
					sorted[i], sorted[j] = sorted[j], sorted[i]
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(sorted[2:7]) {
			t.Fatalf("%s ORDER BY aid DESC LIMIT 5 OFFSET 2: %v, want %v", mode, got, sorted[2:7])
		}
	}
	// Inside a transaction a fan-out reads every shard, each in a backend
	// transaction of its own; under REPEATABLE READ it is refused.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE note = 'fan'").Scan(&n); err != nil || n != int64(len(want)) {
		t.Fatalf("fan-out in a transaction: %d, %v (want %d)", n, err, len(want))
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "SELECT count(*) FROM accounts")
	var pe2 *pgconn.PgError
	if !errors.As(err, &pe2) || pe2.Code != "0A000" || !strings.Contains(pe2.Message, "REPEATABLE READ") {
		t.Fatalf("fan-out in a REPEATABLE READ transaction: %v, want 0A000 naming the isolation", err)
	}
	_ = tx.Rollback(ctx)
}

var _ = context.Background

// TestOutboxSeqRouting: an outbox row written in a transaction on an
// execution's shard gets a seq of that shard's stride, and a later
// statement keyed only by that seq (ack_outbox) goes back to that shard.
func TestOutboxSeqRouting(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t)
	for s := range e.db.m.Shards {
		id := e.db.textKeysOn(s, 1, fmt.Sprintf("outbox%d-", s))[0]
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ok bool
		if err := tx.QueryRow(ctx, "SELECT harel_commit_cas($1, 'def', '{}', 0, '')", id).Scan(&ok); err != nil || !ok {
			t.Fatalf("commit cas: %v %v", ok, err)
		}
		var seq int64
		if err := tx.QueryRow(ctx, "INSERT INTO outbox (target_id, event) VALUES ($1, 'ping') RETURNING seq", id).Scan(&seq); err != nil {
			t.Fatalf("outbox insert: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if ord := int((seq - 1) % 1024); ord != e.db.m.Shards[s].Ordinal {
			t.Fatalf("seq %d has ordinal %d, want shard %d's %d", seq, ord, s, e.db.m.Shards[s].Ordinal)
		}
		tag, err := conn.Exec(ctx, "DELETE FROM outbox WHERE seq = $1", seq)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("ack outbox seq %d: %v %v", seq, tag, err)
		}
	}
}

// TestHints: SET LOCAL pgshard.key / pgshard.shard choose the transaction's
// shard before any table is touched; a key-less statement then runs there.
func TestHints(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t)
	shardOf := func(tx pgx.Tx) string {
		t.Helper()
		var name string
		if err := tx.QueryRow(ctx, "SELECT shard_name FROM pgshard_identity").Scan(&name); err != nil {
			t.Fatal(err)
		}
		return name
	}
	for i := 0; i < 8; i++ {
		key := fmt.Sprintf("hint-key-%d", i)
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SET LOCAL pgshard.key = '"+key+"'"); err != nil {
			t.Fatal(err)
		}
		if got, want := shardOf(tx), e.db.m.Lookup(key).Name; got != want {
			t.Fatalf("pgshard.key %q: ran on %s, want %s", key, got, want)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL pgshard.shard = 'shard2'"); err != nil {
		t.Fatal(err)
	}
	if got := shardOf(tx); got != "shard2" {
		t.Fatalf("pgshard.shard: ran on %s", got)
	}
	// A key of another shard is refused in this transaction, and a
	// key-less read reads the hinted shard only.
	other := e.db.keysOn(1, 1, 9_500_000)[0]
	if _, err := tx.Exec(ctx, "SELECT 1 FROM accounts WHERE aid = $1", other); pgCode(err) != "0A000" {
		t.Fatalf("other shard's key after the hint: %v", err)
	}
	_ = tx.Rollback(ctx)
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL pgshard.shard = 'shard3'"); err != nil {
		t.Fatal(err)
	}
	var name string
	var n int64
	if err := tx.QueryRow(ctx, "SELECT (SELECT shard_name FROM pgshard_identity), count(*) FROM accounts").Scan(&name, &n); err != nil || name != "shard3" {
		t.Fatalf("a key-less read in a transaction hinted to shard3 read shard %q (%d rows), %v", name, n, err)
	}
	var want int64
	if err := e.db.shardConn(t, 3).QueryRow(ctx, "SELECT count(*) FROM accounts").Scan(&want); err != nil || n != want {
		t.Fatalf("a key-less read in a transaction hinted to shard3 counted %d rows, shard3 has %d (%v)", n, want, err)
	}
	_ = tx.Rollback(ctx)
	if _, err := conn.Exec(ctx, "SET pgshard.key = 'x'"); pgCode(err) != "0A000" {
		t.Fatalf("session SET pgshard.key: %v, want 0A000", err)
	}
}

// detailOf is an error's Detail ("" for no error).
func detailOf(pe *pgconn.PgError) string {
	if pe == nil {
		return ""
	}
	return pe.Detail
}
