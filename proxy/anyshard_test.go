package proxy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestTablelessReadsSeeEveryObject: a read that touches no sharded table
// runs on the default shard, which holds every object: the catalog reads
// a client's introspection makes (psql's \dt, SQLAlchemy's and an ORM's
// has_table, information_schema), a regclass name lookup and a size of an
// unsharded table see it on every try, in both protocols. They ran on any
// shard in turn, where another shard's catalog lacks it: counts of 0 and
// "relation does not exist" on some tries.
func TestTablelessReadsSeeEveryObject(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	setup := e.connect(t)
	if _, err := setup.Exec(ctx, "CREATE TABLE IF NOT EXISTS tableless_probe (a int)"); err != nil {
		t.Fatal(err)
	}
	reads := []string{
		"SELECT count(*) FROM pg_class WHERE relname = 'tableless_probe'",
		"SELECT count(*) FROM pg_catalog.pg_tables WHERE tablename = 'tableless_probe'",
		"SELECT count(*) FROM information_schema.tables WHERE table_name = 'tableless_probe'",
		"SELECT count(*) FROM pg_attribute WHERE attrelid = 'tableless_probe'::regclass AND attname = 'a'",
		"SELECT (to_regclass('tableless_probe') IS NOT NULL)::int",
		"SELECT (pg_relation_size('tableless_probe') >= 0)::int",
	}
	// A key of another shard than the default (shard 0): a transaction
	// that read it runs there.
	var key string
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("tableless-%d", i); e.db.m.ShardIndexForBucket(e.db.m.Bucket(k)) != 0 {
			key = k
		}
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		conn := e.connect(t, func(c *pgx.ConnConfig) { c.DefaultQueryExecMode = mode })
		for try := 0; try < 2*len(e.db.m.Shards); try++ {
			for _, q := range reads {
				var n int
				if err := conn.QueryRow(ctx, q).Scan(&n); err != nil || n != 1 {
					t.Fatalf("%v, try %d: %s: %d, %v; want 1 (the default shard's catalog)", mode, try, q, n, err)
				}
			}
		}
		// Inside a transaction that runs on another shard: the reads of
		// which objects exist go to the default shard's catalog (in its
		// reader), the transaction's own statements stay where they run.
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var pid, n int
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid(), (SELECT count(*) FROM executions WHERE id = $1)::int", key).Scan(&pid, &n); err != nil {
			t.Fatal(err)
		}
		for _, q := range reads {
			if err := tx.QueryRow(ctx, q).Scan(&n); err != nil || n != 1 {
				t.Fatalf("%v, in a transaction on another shard: %s: %d, %v; want 1 (the default shard's catalog)", mode, q, n, err)
			}
		}
		var again int
		// (Alone, SELECT pg_backend_pid() is the session's PID: compared
		// with the backend's view, it is the backend's.)
		if err := tx.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&again); err != nil || again != pid {
			t.Fatalf("%v: the transaction's backend after the catalog reads: pid %d, %v; want %d", mode, again, err, pid)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
