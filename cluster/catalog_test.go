package cluster_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
)

// TestCatalogServer adds a catalog server to a running 1-shard cluster:
// it runs in DIR/catalog on a port of its own, a database made there is
// reachable there and not on shard0's server, an Up without the option
// keeps it, Down stops it with the shard and the next Up starts it again
// with its data.
func TestCatalogServer(t *testing.T) {
	spec := cluster.Spec{Shards: 1}
	requireLocal(t, spec)
	ctx := ctxFor(t, 4*time.Minute)
	dir := clustertest.Dir(t)
	spec.Log = testLog{t}

	c, err := cluster.Up(ctx, dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	if c.Catalog != nil || c.Spec.CatalogServer {
		t.Fatalf("a cluster without the option has a catalog server: %+v", c.Catalog)
	}
	shard0 := c.Shards[0]

	with := spec
	with.CatalogServer = true
	c, err = cluster.Up(ctx, dir, with)
	if err != nil {
		t.Fatal(err)
	}
	cs := c.Catalog
	if cs == nil || !c.Spec.CatalogServer {
		t.Fatal("Up with CatalogServer: no catalog server")
	}
	if cs.Name != cluster.CatalogServerName || cs.Ordinal != -1 || cs.Dir != filepath.Join(dir, cluster.CatalogServerName) ||
		cs.PID == 0 || cs.Port == 0 || cs.Port == shard0.Port || cs.PoolerPort != 0 {
		t.Errorf("catalog server = %+v (shard0 %+v)", *cs, shard0)
	}
	if c.Shards[0] != shard0 {
		t.Errorf("adding the catalog server changed shard0: %+v, was %+v", c.Shards[0], shard0)
	}
	if got := queryString(ctx, t, cs.DSN("postgres", "postgres"), "SELECT current_setting('data_directory')"); got != filepath.Join(cs.Dir, "data") {
		t.Errorf("catalog server's data directory = %s", got)
	}
	if n := queryInt(ctx, t, cs.DSN("postgres", "postgres"), "SELECT count(*) FROM pg_database WHERE datname = 'pgshard'"); n != 0 {
		t.Errorf("the catalog server has the shards' database")
	}

	// The catalog's database: there, not on shard0's server.
	const db = "catalog_here"
	conn, err := pgx.Connect(ctx, cs.DSN("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+db)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	onCatalog := "SELECT count(*) FROM pg_database WHERE datname = '" + db + "'"
	if n := queryInt(ctx, t, cs.DSN(db, "postgres"), onCatalog); n != 1 {
		t.Errorf("%s on the catalog server: %d", db, n)
	}
	if n := queryInt(ctx, t, shard0.DSN("postgres", "postgres"), onCatalog); n != 0 {
		t.Errorf("%s is on shard0's server too", db)
	}

	// A reused cluster keeps it, whatever the spec says.
	again, err := cluster.Up(ctx, dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	if again.Catalog == nil || *again.Catalog != *cs {
		t.Errorf("Up without the option: catalog server %+v, want %+v (kept)", again.Catalog, *cs)
	}
	loaded, err := cluster.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Catalog == nil || *loaded.Catalog != *cs {
		t.Errorf("Load: catalog server %+v, want %+v", loaded.Catalog, *cs)
	}
	if st, ok := loaded.CatalogStatus(ctx); !ok || !st.Postgres.Alive || !st.Postgres.Ready {
		t.Errorf("CatalogStatus = %+v, %t", st, ok)
	}

	// Down stops it with the shard; Up starts it again, with its data.
	if err := cluster.Down(ctx, dir, false); err != nil {
		t.Fatal(err)
	}
	assertNothingRuns(t, cs.Dir+"/")
	if loaded, err = cluster.Load(dir); err != nil || loaded.Catalog == nil || loaded.Catalog.PID != 0 {
		t.Fatalf("after Down: %+v, %v", loaded, err)
	}
	if st, _ := loaded.CatalogStatus(ctx); st.Postgres.Alive || st.Postgres.Ready {
		t.Errorf("CatalogStatus after Down = %+v", st)
	}
	c, err = cluster.Up(ctx, dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	if c.Catalog == nil || c.Catalog.PID == 0 {
		t.Fatalf("Up after Down: catalog server %+v", c.Catalog)
	}
	if n := queryInt(ctx, t, c.Catalog.DSN(db, "postgres"), onCatalog); n != 1 {
		t.Errorf("%s after a restart: %d", db, n)
	}

	// The fault hooks: StopCatalog crashes it (immediate), the shard runs
	// on; StartCatalog starts it again after crash recovery, with its data.
	before, _ := c.CatalogServer()
	if err := c.StopCatalog(ctx, cluster.Immediate); err != nil {
		t.Fatal(err)
	}
	if s, ok := c.CatalogServer(); !ok || s.PID != 0 {
		t.Errorf("after StopCatalog: %+v, %t", s, ok)
	}
	if st, _ := c.CatalogStatus(ctx); st.Postgres.Alive {
		t.Errorf("CatalogStatus after StopCatalog = %+v", st)
	}
	if n := queryInt(ctx, t, c.Shards[0].DSN("postgres", "postgres"), "SELECT 1"); n != 1 {
		t.Errorf("shard0 after StopCatalog: %d", n)
	}
	if err := c.StartCatalog(ctx); err != nil {
		t.Fatal(err)
	}
	if s, _ := c.CatalogServer(); s.PID == 0 || s.PID == before.PID {
		t.Errorf("after StartCatalog: pid %d (was %d)", s.PID, before.PID)
	}
	if n := queryInt(ctx, t, c.Catalog.DSN(db, "postgres"), onCatalog); n != 1 {
		t.Errorf("%s after a crash: %d", db, n)
	}
	without := &cluster.Cluster{}
	if err := without.StopCatalog(ctx, cluster.Immediate); err == nil {
		t.Error("StopCatalog on a cluster without a catalog server succeeded")
	}
}

func queryString(ctx context.Context, t *testing.T, dsn, sql string) string {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, sql).Scan(&v); err != nil {
		t.Fatalf("%s on %s: %v", sql, dsn, err)
	}
	return v
}
