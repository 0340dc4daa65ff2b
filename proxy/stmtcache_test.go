package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/proxy"
)

// stmtCacheEnv is a proxy with direct connections and one backend
// connection per shard (so every transaction of a client meets the same
// statement cache), in front of a database of its own (the test changes
// its schema).
type stmtCacheEnv struct {
	t    *testing.T
	env  *proxyEnv
	conn *pgx.Conn
	key  int64
}

func newStmtCacheEnv(t *testing.T, name string, opts ...envOpt) *stmtCacheEnv {
	t.Helper()
	d, err := newTestDB(clustertest.Get(t), fmt.Sprintf("%s_%d", name, os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	env := startProxyFor(t, d, append([]envOpt{direct(), poolSize(1)}, opts...)...)
	conn := env.connect(t)
	key := d.keysOn(0, 1, 1)[0]
	ctx := ctxT(t, 30*time.Second)
	if _, err := conn.Exec(ctx, "INSERT INTO accounts (aid, abalance, note) VALUES ($1, 5, 'x')", key); err != nil {
		t.Fatal(err)
	}
	return &stmtCacheEnv{t: t, env: env, conn: conn, key: key}
}

// unnamed runs sql with the key as its one parameter as an unnamed
// statement (Parse "", Bind, Describe, Execute, Sync) and returns the
// number of result columns.
func (e *stmtCacheEnv) unnamed(ctx context.Context, sql string) (int, error) {
	rr := e.conn.PgConn().ExecParams(ctx, sql, [][]byte{[]byte(strconv.FormatInt(e.key, 10))}, nil, nil, nil)
	rows := 0
	for rr.NextRow() {
		rows++
	}
	cols := len(rr.FieldDescriptions())
	if _, err := rr.Close(); err != nil {
		return 0, err
	}
	if rows != 1 {
		return 0, fmt.Errorf("%d rows, want 1", rows)
	}
	return cols, nil
}

// prepared returns the texts prepared by the proxy on the backend that
// runs the client's transactions on the key's shard.
func (e *stmtCacheEnv) prepared(ctx context.Context) []string {
	e.t.Helper()
	// Simple protocol: the inspection itself prepares nothing.
	tx, err := e.conn.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, fmt.Sprintf("SELECT 1 FROM accounts WHERE aid = %d", e.key), pgx.QueryExecModeSimpleProtocol); err != nil {
		e.t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `SELECT statement FROM pg_prepared_statements WHERE name LIKE 'pgshard\_%' ORDER BY statement`, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		e.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

const stmtCacheQuery = "SELECT * FROM accounts WHERE aid = $1"

// TestUnnamedStatementCache: on a direct connection an unnamed statement
// is served from the connection's statement cache from its text's second
// use (not its first), inside and outside transactions, with the same
// results; UnnamedPassThrough sends it as it is.
func TestUnnamedStatementCache(t *testing.T) {
	t.Parallel()
	e := newStmtCacheEnv(t, "stmtcache")
	ctx := ctxT(t, time.Minute)
	once := "SELECT abalance FROM accounts WHERE aid = $1"
	if _, err := e.unnamed(ctx, once); err != nil {
		t.Fatal(err)
	}
	if got := e.prepared(ctx); slices.Contains(got, once) {
		t.Fatalf("a text used once was prepared: %q", got)
	}
	for i := range 3 {
		cols, err := e.unnamed(ctx, stmtCacheQuery)
		if err != nil || cols != 4 {
			t.Fatalf("run %d: %d columns, %v", i, cols, err)
		}
	}
	if got := e.prepared(ctx); !slices.Contains(got, stmtCacheQuery) || slices.Contains(got, once) {
		t.Fatalf("prepared statements %q, want the repeated text and not the one used once", got)
	}
	// Inside a transaction, on its backend.
	tx, err := e.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE accounts SET abalance = abalance + 1 WHERE aid = $1", e.key); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if cols, err := e.unnamed(ctx, stmtCacheQuery); err != nil || cols != 4 {
			t.Fatalf("in transaction, run %d: %d columns, %v", i, cols, err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var bal int
	if err := e.conn.QueryRow(ctx, "SELECT abalance FROM accounts WHERE aid = $1", e.key).Scan(&bal); err != nil || bal != 5 {
		t.Fatalf("abalance %d, %v; want 5 (the update was rolled back)", bal, err)
	}

	pass := newStmtCacheEnv(t, "stmtpass", func(c *proxy.Config) { c.UnnamedStatements = proxy.UnnamedPassThrough })
	for range 3 {
		if _, err := pass.unnamed(ctx, stmtCacheQuery); err != nil {
			t.Fatal(err)
		}
	}
	if got := pass.prepared(ctx); slices.Contains(got, stmtCacheQuery) {
		t.Fatalf("UnnamedPassThrough prepared %q", got)
	}
}

// TestStatementCacheSchemaChange: a schema change made behind the proxy's
// back that changes a cached statement's result columns fails that
// statement once (Postgres's 0A000, as for a client's own prepared
// statement), and the next run prepares it afresh; a schema change made
// through the proxy fails nothing.
func TestStatementCacheSchemaChange(t *testing.T) {
	t.Parallel()
	e := newStmtCacheEnv(t, "stmtddl")
	ctx := ctxT(t, time.Minute)
	for range 3 {
		if _, err := e.unnamed(ctx, stmtCacheQuery); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.env.db.shardConn(t, 0).Exec(ctx, "ALTER TABLE accounts ADD COLUMN extra1 int DEFAULT 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.unnamed(ctx, stmtCacheQuery); pgCode(err) != "0A000" {
		t.Fatalf("first run after a change behind the proxy: %v, want 0A000 (cached plan must not change result type)", err)
	}
	if cols, err := e.unnamed(ctx, stmtCacheQuery); err != nil || cols != 5 {
		t.Fatalf("second run: %d columns, %v; want 5", cols, err)
	}
	if _, err := e.conn.Exec(ctx, "ALTER TABLE accounts ADD COLUMN extra2 int DEFAULT 2"); err != nil {
		t.Fatal(err)
	}
	if cols, err := e.unnamed(ctx, stmtCacheQuery); err != nil || cols != 6 {
		t.Fatalf("after DDL through the proxy: %d columns, %v; want 6 and no error", cols, err)
	}
}

// TestPreparedStatementAfterDDL: a client's prepared statement whose
// result columns a schema change made through the proxy altered fails
// once with Postgres's 0A000 "cached plan must not change result type"
// (not the 08P01 format-count error of the proxy's fresh parse), as on a
// direct connection; the client prepares it again and it runs (pgx's
// statement cache: TestStmtCacheInvalidation* of pgx's suite).
func TestPreparedStatementAfterDDL(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	conn := e.connect(t)
	for _, q := range []string{"DROP TABLE IF EXISTS public.ddl_cols", "CREATE TABLE public.ddl_cols (id int PRIMARY KEY, f1 int, f2 int)",
		"INSERT INTO public.ddl_cols VALUES (1, 2, 3)"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { _, _ = e.connect(t).Exec(context.Background(), "DROP TABLE IF EXISTS public.ddl_cols") })
	const q = "SELECT * FROM public.ddl_cols WHERE id = $1"
	count := func() (int, error) {
		rows, err := conn.Query(ctx, q, 1)
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			n = len(rows.RawValues())
		}
		return n, rows.Err()
	}
	if n, err := count(); err != nil || n != 3 {
		t.Fatalf("before: %d columns, %v", n, err)
	}
	if _, err := conn.Exec(ctx, "ALTER TABLE public.ddl_cols DROP COLUMN f1"); err != nil {
		t.Fatal(err)
	}
	_, err := count()
	if pgCode(err) != "0A000" || !strings.Contains(err.Error(), "cached plan must not change result type") {
		t.Fatalf("first run after the change: %v, want 0A000 cached plan must not change result type", err)
	}
	if n, err := count(); err != nil || n != 2 {
		t.Fatalf("prepared again: %d columns, %v; want 2", n, err)
	}
}

// TestPreparedStatementResultChange: a client's prepared statement whose
// result columns a schema change made through the proxy altered — a
// column's type, or a column dropped and another of the same type added
// (the values would shift silently) — is refused with Postgres's 0A000
// "cached plan must not change result type" at every run until the client
// prepares it again, where the proxy parses its text afresh on each
// backend (through PgBouncer) as on its own statements (direct); one
// whose columns did not change runs. Each step is compared with the same
// statements on a direct connection to the shard.
func TestPreparedStatementResultChange(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []envOpt
	}{{"pgbouncer", nil}, {"direct", []envOpt{direct()}}} {
		t.Run(mode.name, func(t *testing.T) {
			e := startProxy(t, mode.opts...)
			ctx := ctxT(t, time.Minute)
			table := "public.ddl_result_" + mode.name
			via := e.connect(t).PgConn()
			ref := e.db.shardConn(t, 0).PgConn() // the default shard, where unsharded tables are
			setup := []string{"DROP TABLE IF EXISTS " + table, "CREATE TABLE " + table + " (a int PRIMARY KEY, b int, c int)",
				"INSERT INTO " + table + " VALUES (1, 2, 3)"}
			for _, q := range setup {
				if err := via.Exec(ctx, q).Close(); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			t.Cleanup(func() { _ = e.connect(t).PgConn().Exec(context.Background(), "DROP TABLE IF EXISTS "+table).Close() })
			stmts := map[string]string{
				"typed":   "SELECT b, c FROM " + table + " WHERE a = $1",
				"same":    "SELECT c FROM " + table + " WHERE a = $1",
				"shifted": "SELECT * FROM " + table + " WHERE a = $1",
			}
			for name, q := range stmts {
				for _, c := range []*pgconn.PgConn{via, ref} {
					if _, err := c.Prepare(ctx, name, q, nil); err != nil {
						t.Fatalf("prepare %s: %v", name, err)
					}
				}
			}
			run := func(c *pgconn.PgConn, name string) (string, error) {
				res := c.ExecPrepared(ctx, name, [][]byte{[]byte("1")}, nil, nil).Read()
				var vals []string
				for _, r := range res.Rows {
					for _, v := range r {
						vals = append(vals, string(v))
					}
				}
				return strings.Join(vals, ","), res.Err
			}
			step := func(what string, want map[string]string) {
				t.Helper()
				for name, w := range want {
					got, err := run(via, name)
					exp, rerr := run(ref, name)
					if err != nil {
						got = "error " + pgCode(err)
					}
					if rerr != nil {
						exp = "error " + pgCode(rerr)
					}
					if got != w || exp != w {
						t.Fatalf("%s, %s: through the proxy %q (%v), directly %q; want %q", what, name, got, err, exp, w)
					}
				}
			}
			step("before", map[string]string{"typed": "2,3", "same": "3", "shifted": "1,2,3"})
			for _, q := range []string{"ALTER TABLE " + table + " ALTER COLUMN b TYPE text", "ALTER TABLE " + table + " DROP COLUMN c",
				"ALTER TABLE " + table + " ADD COLUMN c int", "UPDATE " + table + " SET c = 4"} {
				if err := via.Exec(ctx, q).Close(); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			step("after the schema change", map[string]string{"typed": "error 0A000", "same": "4", "shifted": "error 0A000"})
			step("again", map[string]string{"typed": "error 0A000", "same": "4", "shifted": "error 0A000"})
			// As Postgres's: drivers tell it by its routine (asyncpg).
			_, err := run(via, "typed")
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Routine != "RevalidateCachedQuery" || pe.File != "plancache.c" {
				t.Fatalf("the refusal: %v, want routine RevalidateCachedQuery of plancache.c", err)
			}
			// First in a transaction block, as outside one.
			for _, c := range []*pgconn.PgConn{via, ref} {
				if err := c.Exec(ctx, "ALTER TABLE "+table+" ALTER COLUMN c TYPE text").Close(); c == via && err != nil {
					t.Fatal(err)
				}
				if err := c.Exec(ctx, "BEGIN").Close(); err != nil {
					t.Fatal(err)
				}
			}
			step("first in a transaction", map[string]string{"same": "error 0A000"})
			for _, c := range []*pgconn.PgConn{via, ref} {
				if err := c.Exec(ctx, "ROLLBACK").Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
