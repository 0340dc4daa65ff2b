package router_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// TestMain runs the tests on the package's shared cluster, then checks that
// no goroutine outlived them (fan-out readers, pools).
func TestMain(m *testing.M) {
	code := clustertest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var modes = []string{"direct", "pgbouncer"}

// ctxT returns a context that ends well inside the test's deadline.
func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newID(t testing.TB) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// migratedMap creates a fresh database on every shard of c, migrates it
// and returns its map.
func migratedMap(t testing.TB, c *cluster.Cluster) *shardmap.Map {
	t.Helper()
	db := clustertest.FreshDatabase(t, c)
	m, err := c.MapFor(db, shardmap.DefaultBuckets)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctxT(t), m, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	return m
}

// openRouter opens a router on m, closed when the test ends.
func openRouter(t testing.TB, m *shardmap.Map, mode string, so store.Options) *router.Router {
	t.Helper()
	if so.ConnectAttempts == 0 {
		so.ConnectAttempts = 3
	}
	r, err := router.Open(ctxT(t), m, router.Options{UsePooler: mode == "pgbouncer", Store: so})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// eachMode runs f on a fresh migrated database of the shared cluster,
// through a router connected directly and through PgBouncer.
func eachMode(t *testing.T, so store.Options, f func(t *testing.T, r *router.Router)) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			c := clustertest.Get(t)
			f(t, openRouter(t, migratedMap(t, c), mode, so))
		})
	}
}

// shardStore returns the router's store of shard name.
func shardStore(t testing.TB, r *router.Router, name string) *store.Store {
	t.Helper()
	s, err := r.Store(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// count runs a count query on one shard.
func count(t testing.TB, s *store.Store, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(ctxT(t), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
