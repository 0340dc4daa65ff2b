package proxy_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/proxy"
)

// TestProxyFenceInlineSimple: with the fence on, a keyed simple Query
// carries the assert first in its own query string (internal/engine/fence.go,
// appendClientQuery) on real Postgres: the client gets its statements'
// answers only, an error's position points into its own string as on
// a direct connection, and a query string of several statements runs
// as one implicit transaction (a later failure undoes the earlier ones).
func TestProxyFenceInlineSimple(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	e := startProxy(t, func(c *proxy.Config) { c.Fence = proxy.FenceOn })
	conn := e.connect(t, func(c *pgx.ConnConfig) { c.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol })
	id := "inline-" + t.Name()
	if _, err := conn.Exec(ctx, `INSERT INTO executions (id, definition_id, data, version) VALUES ($1, 'inline', '{}', 1)`, id); err != nil {
		t.Fatal(err)
	}
	var version int
	if err := conn.QueryRow(ctx, `SELECT version FROM executions WHERE id = $1`, id).Scan(&version); err != nil || version != 1 {
		t.Fatalf("keyed read: version %d, %v", version, err)
	}

	const bad = `SELECT nope FROM executions WHERE id = 'inline-x'`
	want := pgErrorOf(t, func() error {
		_, err := e.db.shardConn(t, 0).Exec(ctx, bad, pgx.QueryExecModeSimpleProtocol)
		return err
	})
	got := pgErrorOf(t, func() error { _, err := conn.Exec(ctx, bad); return err })
	if got.Code != want.Code || got.Position != want.Position || got.Position == 0 {
		t.Fatalf("through the proxy: %s at %d, want %s at %d (as directly)", got.Code, got.Position, want.Code, want.Position)
	}

	// Several statements of one key: one implicit transaction.
	multi := `UPDATE executions SET version = 2 WHERE id = '` + id + `'; SELECT 1/0 FROM executions WHERE id = '` + id + `'`
	if err := pgErrorOf(t, func() error { _, err := conn.Exec(ctx, multi); return err }); err.Code != "22012" {
		t.Fatalf("multi: %s, want 22012", err.Code)
	}
	if err := conn.QueryRow(ctx, `SELECT version FROM executions WHERE id = $1`, id).Scan(&version); err != nil || version != 1 {
		t.Fatalf("after a failed query string: version %d, %v; want 1 (its UPDATE undone)", version, err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM executions WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
}

// pgErrorOf runs f and returns its *pgconn.PgError (failing the test
// when it returns none).
func pgErrorOf(t *testing.T, f func() error) *pgconn.PgError {
	t.Helper()
	var pe *pgconn.PgError
	if err := f(); !errors.As(err, &pe) {
		t.Fatalf("want a Postgres error, got %v", err)
	}
	return pe
}

// TestProxyFenceReadOnlyTxn: with the fence on, a READ ONLY transaction
// block at every isolation level reads a key through the proxy, which
// asserts the key at the block's start, in the simple and the extended
// protocol (the assert must not lock a row: Postgres refuses row locks in
// a read-only transaction, 25006).
func TestProxyFenceReadOnlyTxn(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	e := startProxy(t, func(c *proxy.Config) { c.Fence = proxy.FenceOn })
	id := "readonly-" + t.Name()
	setup := e.connect(t)
	if _, err := setup.Exec(ctx, `INSERT INTO executions (id, definition_id, data, version) VALUES ($1, 'ro', '{}', 1)`, id); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		conn := e.connect(t, func(c *pgx.ConnConfig) { c.DefaultQueryExecMode = mode })
		for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
			tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso, AccessMode: pgx.ReadOnly})
			if err != nil {
				t.Fatal(err)
			}
			var version int
			if err := tx.QueryRow(ctx, `SELECT version FROM executions WHERE id = $1`, id).Scan(&version); err != nil || version != 1 {
				t.Errorf("%v, %s read only: version %d, %v", mode, iso, version, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Errorf("%v, %s read only: commit: %v", mode, iso, err)
			}
		}
	}
}
