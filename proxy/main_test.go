package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// TestMain: clustertest.Main also fails the run on leaked goroutines.
func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

// testSchema is the store's schema plus the test tables keyed by integers.
func testSchema() route.Schema {
	s := route.DefaultSchema()
	s.Tables = append(s.Tables,
		route.TableKey{Table: "accounts", Column: "aid", Type: route.KeyInt8, Position: 1},
		route.TableKey{Table: "pgbench_accounts", Column: "aid", Type: route.KeyInt8, Position: 1},
		route.TableKey{Table: "kinds", Column: "id", Type: route.KeyInt8, Position: 1},
		route.TableKey{Table: "relabel_t", Column: "id", Type: route.KeyInt8, Position: 1},
		route.TableKey{Table: "relabel_v", Column: "id", Type: route.KeyInt8, Position: 1},
	)
	return s
}

// testTables are created on every shard of the test database.
const testTables = `
CREATE TABLE IF NOT EXISTS accounts (aid int8 PRIMARY KEY, abalance int NOT NULL DEFAULT 0, version int NOT NULL DEFAULT 1, note text);
CREATE TABLE IF NOT EXISTS pgbench_accounts (aid int8 PRIMARY KEY, bid int, abalance int NOT NULL DEFAULT 0, filler char(84));
CREATE TABLE IF NOT EXISTS kinds (id int8 PRIMARY KEY, t text, n numeric, f float8, ts timestamptz, b bytea, j jsonb);
`

// oidDivergence makes shard i number the test tables unlike the other
// shards, as a production cluster's shards do once their histories
// differ (an unsharded table on the default shard alone, a shard added
// later): it spends a different number of OIDs on each shard first, and
// on odd shards accounts gets a column dropped before its last one, so
// that note's attribute number differs too. Every test then runs with
// shards whose OIDs and attnums are not the default shard's.
func oidDivergence(i int) string {
	sql := fmt.Sprintf(`DO $$BEGIN FOR k IN 1..%d LOOP
  CREATE TABLE pgshard_oid_pad (); DROP TABLE pgshard_oid_pad;
END LOOP; END$$;
`, 2*i+1)
	if i%2 == 1 {
		sql += `CREATE TABLE IF NOT EXISTS accounts (aid int8 PRIMARY KEY, abalance int NOT NULL DEFAULT 0, version int NOT NULL DEFAULT 1, pgshard_pad int, note text);
ALTER TABLE accounts DROP COLUMN IF EXISTS pgshard_pad;
`
	}
	return sql
}

// testDB is a database on the shared cluster with the schema migrated and
// the test tables created, shared by the package's tests (each test uses
// its own keys or tables).
type testDB struct {
	c    *cluster.Cluster
	name string
	m    *shardmap.Map
}

var (
	sharedOnce sync.Once
	shared     *testDB
	sharedErr  error
)

// db returns the shared test database (created on first use; the
// cluster, and with it the database, is removed after the package's tests).
func db(t *testing.T) *testDB {
	t.Helper()
	c := clustertest.Get(t)
	sharedOnce.Do(func() { shared, sharedErr = newTestDB(c, fmt.Sprintf("proxytest_%d", os.Getpid())) })
	if sharedErr != nil {
		t.Fatalf("test database: %v", sharedErr)
	}
	return shared
}

func newTestDB(c *cluster.Cluster, name string) (*testDB, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.CreateDatabase(ctx, name); err != nil {
		return nil, err
	}
	m, err := c.MapFor(name, shardmap.DefaultBuckets)
	if err != nil {
		return nil, err
	}
	if _, err := migrations.Apply(ctx, m, migrations.Options{}); err != nil {
		return nil, err
	}
	for i, s := range m.Shards {
		if err := execDirect(ctx, s.DSN, oidDivergence(i)+testTables); err != nil {
			return nil, err
		}
	}
	return &testDB{c: c, name: name, m: m}, nil
}

func execDirect(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// shardConn connects directly to shard i of d.
func (d *testDB) shardConn(t *testing.T, i int) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.m.Shards[i].DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// proxyEnv is a running proxy in front of a test database.
type proxyEnv struct {
	db   *testDB
	srv  *proxy.Server
	addr string
	// dsn connects as the trusted user "postgres".
	dsn string
	an  *route.Table
}

type envOpt func(*proxy.Config)

func direct() envOpt        { return func(c *proxy.Config) { c.UsePooler = false } }
func poolSize(n int) envOpt { return func(c *proxy.Config) { c.PoolSize = n } }
func withUsers(u ...proxy.User) envOpt {
	return func(c *proxy.Config) { c.Users = append(c.Users, u...) }
}

// startProxy runs a proxy for the shared database (through PgBouncer unless
// direct()) until the test ends.
func startProxy(t *testing.T, opts ...envOpt) *proxyEnv {
	t.Helper()
	return startProxyFor(t, db(t), opts...)
}

func startProxyFor(t *testing.T, d *testDB, opts ...envOpt) *proxyEnv {
	t.Helper()
	an, err := route.New(d.m, testSchema(), route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := proxy.Config{
		Map:            d.m,
		Analyzer:       an,
		UsePooler:      true,
		Users:          []proxy.User{{Name: "postgres", Trust: true}},
		VerifyIdentity: true,
		ConnectTimeout: 5 * time.Second,
		PoolTimeout:    20 * time.Second,
		Logger:         slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveProxy(t, srv)
	return &proxyEnv{db: d, srv: srv, addr: addr, an: an,
		dsn: fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", addr, d.name)}
}

// testWriter sends log lines to t.Log (and nowhere after the test ended).
// serveProxy verifies srv against its shards and serves it on a loopback
// listener until the test or benchmark ends; it returns the listener's
// address. At the end it checks that srv stopped within 30s and that no
// backend connection went back to its pool unclean (a transaction open or
// replies unread).
func serveProxy(tb testing.TB, srv *proxy.Server) string {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := srv.Verify(ctx); err != nil {
		cancel()
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("proxy: %v", err)
			}
			if n := metricSum(tb, srv, "pgshard_proxy_backend_errors_total", "kind", "unclean"); n > 0 {
				tb.Errorf("proxy: %v backend connections were returned to their pool not idle (a transaction open or replies unread)", n)
			}
		case <-time.After(30 * time.Second):
			tb.Errorf("proxy did not stop within 30s")
		}
	})
	return ln.Addr().String()
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // logging after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// connect opens a pgx connection to the proxy.
func (e *proxyEnv) connect(t *testing.T, mut ...func(*pgx.ConnConfig)) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mut {
		m(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// keysOn returns n int8 keys whose bucket is owned by shard i.
func (d *testDB) keysOn(i int, n int, from int64) []int64 {
	var out []int64
	for k := from; len(out) < n; k++ {
		if d.m.ShardIndexForBucket(d.m.BucketInt8(k)) == i {
			out = append(out, k)
		}
	}
	return out
}

// textKeysOn returns n text keys owned by shard i.
func (d *testDB) textKeysOn(i, n int, prefix string) []string {
	var out []string
	for k := 0; len(out) < n; k++ {
		key := fmt.Sprintf("%s%08d", prefix, k)
		if d.m.ShardIndexForBucket(d.m.Bucket(key)) == i {
			out = append(out, key)
		}
	}
	return out
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// pgCode returns the SQLSTATE of err ("" if none).
func pgCode(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}

var _ = io.Discard

// metricSum sums the proxy's metric name (a counter or gauge's value, a
// histogram's sum of samples) over its series carrying every label
// name/value pair given.
func metricSum(t testing.TB, srv *proxy.Server, name string, labels ...string) float64 {
	mfs, err := srv.Registry().Gather()
	if err != nil {
		t.Errorf("metrics: %v", err)
		return 0
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
					return l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}) {
					continue series
				}
			}
			n += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetHistogram().GetSampleSum()
		}
	}
	return n
}

// forEachPath runs f as two subtests, "pgbouncer" and "direct": with a
// proxy reaching the shards through their PgBouncers, then straight to
// Postgres.
func forEachPath(t *testing.T, f func(t *testing.T, via string, e *proxyEnv)) {
	for _, via := range []string{"pgbouncer", "direct"} {
		t.Run(via, func(t *testing.T) {
			var opts []envOpt
			if via == "direct" {
				opts = append(opts, direct())
			}
			f(t, via, startProxy(t, opts...))
		})
	}
}

// lineDiff is a line where two transcripts differ (1-based; "" past one's end).
type lineDiff struct {
	line      int
	got, want string
}

// differingLines compares two transcripts line by line.
func differingLines(got, want []string) []lineDiff {
	var out []lineDiff
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			out = append(out, lineDiff{i + 1, g, w})
		}
	}
	return out
}
