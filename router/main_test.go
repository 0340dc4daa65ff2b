package router_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// TestMain runs the tests on the package's shared cluster, then checks that
// no goroutine outlived them (fan-out readers, pools).
func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

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
			f(t, openRouter(t, clustertest.MigratedMap(t, c), mode, so))
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
