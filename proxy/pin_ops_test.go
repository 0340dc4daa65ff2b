package proxy_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// TestPinnedSessionsAcrossReload: a pinned session is reported by the
// admin console (SHOW CLIENTS pinned and remote_pid, SHOW POOLS cl_pinned,
// SHOW LISTS pinned_clients) and by the metrics; a RELOAD leaves it on its
// backend with its session state (a temporary table), and leaves sessions
// on an extra database working; the pin then ends as usual and the
// session moves to the new generation.
func TestPinnedSessionsAcrossReload(t *testing.T) {
	d := db(t)
	sh := d.m.Shards[1]
	xm := &shardmap.Map{Epoch: 1, Buckets: d.m.Buckets, Shards: []shardmap.Shard{{Name: "db", DSN: sh.DSN, PoolerDSN: sh.PoolerDSN}},
		Ranges: []shardmap.Range{{Lo: 0, Hi: d.m.Buckets - 1, Shard: "db"}}}
	xan, err := route.New(xm, testSchema(), route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	src := &reloadSource{}
	e := adminEnv(t, func(c *proxy.Config) {
		c.ExtraDatabases = []proxy.Database{{Name: "passthru", Config: proxy.Config{Map: xm, Analyzer: xan, UsePooler: true}}}
		src.base = *c
		c.Reload = src.load
	})
	ctx := ctxT(t, 2*time.Minute)
	dsn := e.adminDSN("postgres")

	conn := e.connect(t)
	if _, err := conn.Exec(ctx, "CREATE TEMP TABLE pinops_t (a int)"); err != nil {
		t.Fatal(err)
	}
	var bpid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&bpid); err != nil {
		t.Fatal(err)
	}
	xconn := e.connect(t, func(c *pgx.ConnConfig) { c.Database = "passthru" })
	if _, err := xconn.Exec(ctx, "CREATE TEMP TABLE pinops_x (a int)"); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 2)

	cols, rows := psqlTable(t, dsn, "SHOW CLIENTS")
	var found bool
	for _, r := range rows {
		if db := col(t, cols, r, "database"); db == "passthru" || db == "pgshard" || col(t, cols, r, "pinned") == "" {
			continue
		}
		found = true
		if got := colInt(t, cols, r, "remote_pid"); got != int64(bpid) {
			t.Errorf("SHOW CLIENTS remote_pid = %d, want the pinned backend's %d (row %v)", got, bpid, r)
		}
	}
	if !found {
		t.Fatalf("SHOW CLIENTS: no pinned client of the main database: %v %v", cols, rows)
	}
	cols, rows = psqlTable(t, dsn, "SHOW POOLS")
	def := d.m.Shards[0].Name
	if got := colInt(t, cols, rowFor(t, rows, def), "cl_pinned"); got != 1 {
		t.Errorf("SHOW POOLS %s cl_pinned = %d, want 1", def, got)
	}
	cols, rows = psqlTable(t, dsn, "SHOW LISTS")
	if got := col(t, cols, rowFor(t, rows, "pinned_clients"), "items"); got != "2" {
		t.Errorf("SHOW LISTS pinned_clients = %s, want 2", got)
	}

	// RELOAD (the same shards at epoch 2): both pinned sessions keep their
	// backends and temporary tables.
	src.set(func(c proxy.Config) (proxy.Config, error) { return withMap(c, epoch(d.m, 2)) })
	admin := e.connectAdmin(t)
	if _, err := admin.Exec(ctx, "RELOAD"); err != nil {
		t.Fatalf("RELOAD: %v", err)
	}
	for _, c := range []struct {
		conn  *pgx.Conn
		table string
	}{{conn, "pinops_t"}, {xconn, "pinops_x"}} {
		if _, err := c.conn.Exec(ctx, "INSERT INTO "+c.table+" VALUES (1)"); err != nil {
			t.Fatalf("%s after RELOAD: %v", c.table, err)
		}
	}
	var again int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&again); err != nil || again != bpid {
		t.Fatalf("backend after RELOAD: %d (%v), want %d", again, err, bpid)
	}
	// The pins end; both sessions go on working on pooled backends.
	for _, c := range []*pgx.Conn{conn, xconn} {
		if _, err := c.Exec(ctx, "DISCARD TEMP"); err != nil {
			t.Fatal(err)
		}
	}
	waitMetric(t, e.srv, "pgshard_proxy_pinned_sessions", 0)
	k1 := d.keysOn(1, 1, 47_000_000)[0]
	if _, err := conn.Exec(ctx, "SELECT abalance FROM accounts WHERE aid = $1", k1); err != nil {
		t.Fatalf("another shard's key after the pin ended: %v", err)
	}
	var n int64
	if err := xconn.QueryRow(ctx, "SELECT count(*) FROM accounts").Scan(&n); err != nil {
		t.Fatalf("extra database after the pin ended: %v", err)
	}
}

// slowFailSource is a COPY source whose third row breaks a NOT NULL
// constraint, then goes on slowly (pgx's failSource).
type slowFailSource struct{ n int }

func (s *slowFailSource) Next() bool {
	time.Sleep(40 * time.Millisecond)
	s.n++
	return s.n < 500 // at least 20 s in all: far above the bound below
}

func (s *slowFailSource) Values() ([]any, error) {
	if s.n == 3 {
		return []any{nil}, nil
	}
	return []any{make([]byte, 100_000)}, nil
}

func (s *slowFailSource) Err() error { return nil }

// TestCopyFromFailsFast: a COPY FROM STDIN the server fails midway ends at
// once, as on a direct connection: the client hears the error while it is
// still sending (it stops), in a pinned session and through PgBouncer.
func TestCopyFromFailsFast(t *testing.T) {
	e := startProxy(t)
	ctx := ctxT(t, time.Minute)
	for _, c := range []struct{ name, create, table string }{
		{"pinned", "CREATE TEMP TABLE copyfail_t (a bytea NOT NULL)", "copyfail_t"},
		{"pooled", "CREATE TABLE IF NOT EXISTS public.copyfail_p (a bytea NOT NULL)", "copyfail_p"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := e.connect(t)
			if _, err := conn.Exec(ctx, c.create); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			n, err := conn.CopyFrom(ctx, pgx.Identifier{c.table}, []string{"a"}, &slowFailSource{})
			took := time.Since(start)
			if pgCode(err) != "23502" || n != 0 {
				t.Fatalf("CopyFrom = %d, %v; want 0 rows and 23502", n, err)
			}
			if took > 10*time.Second { // the whole source takes at least 20s
				t.Fatalf("the failed COPY took %v: the error reached the client only at the end", took)
			}
			var cnt int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+c.table).Scan(&cnt); err != nil || cnt != 0 {
				t.Fatalf("after the failed COPY: count %d, %v", cnt, err)
			}
		})
	}
	_, _ = e.connect(t).Exec(ctx, "DROP TABLE IF EXISTS public.copyfail_p")
}
