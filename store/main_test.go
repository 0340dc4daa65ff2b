package store_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// TestMain runs the tests on the package's shared cluster, then checks that
// no goroutine outlived them (a pool left open, a racer not waited for).
func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// modes are the two ways the store reaches a shard.
var modes = []string{"direct", "pgbouncer"}

// testDB is a migrated database on shard 0 of the shared cluster.
type testDB struct {
	shard shardmap.Shard
	mode  string
}

func (d testDB) dsn() string {
	if d.mode == "pgbouncer" {
		return d.shard.PoolerDSN
	}
	return d.shard.DSN
}

// freshDB creates and migrates a database for the test (one shard: the
// store knows nothing of maps).
func freshDB(t testing.TB, mode string) testDB {
	t.Helper()
	m := clustertest.MigratedOneShard(t, clustertest.Get(t))
	return testDB{shard: m.Shards[0], mode: mode}
}

// open opens a store on d, closed when the test ends.
func (d testDB) open(t *testing.T, opts store.Options) *store.Store {
	t.Helper()
	opts.BehindPooler = d.mode == "pgbouncer"
	if opts.ConnectAttempts == 0 {
		opts.ConnectAttempts = 3
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := store.Open(ctx, d.dsn(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// eachMode runs f once directly and once through PgBouncer, each on a fresh
// database with a store opened with opts.
func eachMode(t *testing.T, opts store.Options, f func(t *testing.T, s *store.Store, d testDB)) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			d := freshDB(t, mode)
			f(t, d.open(t, opts), d)
		})
	}
}

// ctxT returns a context that ends with a deadline well inside the test's.
func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newID returns a fresh execution id: lowercase uuid hex.
func newID(t testing.TB) string {
	t.Helper()
	var b [16]byte
	if _, err := randRead(b[:]); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}
