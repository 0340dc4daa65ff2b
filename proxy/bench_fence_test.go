package proxy_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// BenchmarkProxyFence measures the shard fence's cost (migration 0008,
// issue 20) as a client of the proxy sees it, on a real migrated
// cluster through PgBouncer, fence on vs off side by side in one run:
//
//	simple    keyed point SELECT, simple protocol (one Query)
//	extended  the same, extended protocol (Bind/Execute/Sync of a
//	          prepared statement)
//	commit    the store's fast-path commit (pgshard_commit_cas)
//	load      the store's keyed read (Load: the fence's verdict in SQL)
//
// Off: every shard's fence switched off (pgshard_fence_off) and the
// clients on a proxy with Config.Fence off (no assert attached). On:
// every shard's fence on and the clients on a proxy with Config.Fence
// on (each keyed transaction asserts its key: fence.go). The settings
// alternate in chunks of operations (which goes first rotates), on the
// same database and rows, so both see the same machine whatever its
// load; it reports µs per operation of each and the ratio on/off (goal
// ≤ 1.05). Asserts nothing:
//
//	go test -run '^$' -bench BenchmarkProxyFence -benchtime 2000x ./proxy/
func BenchmarkProxyFence(b *testing.B) {
	const workers, chunk, executions = 4, 100, 64
	ctx := context.Background()
	c := clustertest.Get(b)
	m := clustertest.MigratedMap(b, c)
	dsns := [2]string{}
	for mode, fm := range []proxy.FenceMode{proxy.FenceOff, proxy.FenceOn} {
		dsns[mode] = benchProxy(b, m, fm)
	}
	const off, on = 0, 1
	names := [2]string{"off", "on"}

	// Per setting: a store and workers connections on its proxy.
	var stores [2]*store.Store
	var conns [2][]*pgx.Conn
	for mode := range 2 {
		s, err := store.Open(ctx, dsns[mode], store.Options{MaxConns: workers, ConnectAttempts: 3})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		stores[mode] = s
		for range workers {
			cn, err := pgx.Connect(ctx, dsns[mode])
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cn.Close(context.Background()) })
			conns[mode] = append(conns[mode], cn)
		}
	}
	exes := make([]*store.Execution, executions)
	for i := range exes {
		exes[i] = &store.Execution{ID: fmt.Sprintf("fence-bench-%04d", i), DefinitionID: "bench", Status: "running"}
		if err := stores[off].Save(ctx, exes[i]); err != nil {
			b.Fatal(err)
		}
	}
	// set switches every shard's fence.
	set := func(mode int) {
		q := [2]string{`SELECT pgshard_fence_off()`, `SELECT pgshard_fence_on()`}[mode]
		for _, sh := range m.Shards {
			cn, err := pgx.Connect(ctx, sh.DSN)
			if err != nil {
				b.Fatal(err)
			}
			_, err = cn.Exec(ctx, q)
			cn.Close(ctx)
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	const pointSQL = `SELECT data FROM executions WHERE id = $1`
	type path struct {
		name string
		op   func(mode, w int, e *store.Execution) error
	}
	paths := []path{
		{"simple", func(mode, w int, e *store.Execution) error {
			var data []byte
			return conns[mode][w].QueryRow(ctx, pointSQL, pgx.QueryExecModeSimpleProtocol, e.ID).Scan(&data)
		}},
		{"extended", func(mode, w int, e *store.Execution) error {
			var data []byte
			return conns[mode][w].QueryRow(ctx, pointSQL, e.ID).Scan(&data)
		}},
		{"commit", func(mode, w int, e *store.Execution) error {
			return stores[mode].Commit(ctx, e, nil, fmt.Sprintf("ev%d", e.Version), nil, nil, nil)
		}},
		{"load", func(mode, w int, e *store.Execution) error {
			_, err := stores[mode].Load(ctx, e.ID)
			return err
		}},
	}
	// run does n operations of op with workers goroutines, each on its
	// own executions (commits never conflict), and returns the wall time.
	run := func(n, mode int, op func(mode, w int, e *store.Execution) error) time.Duration {
		start := time.Now()
		var g errgroup.Group
		for w := range workers {
			g.Go(func() error {
				for i := w; i < n; i += workers {
					if err := op(mode, w, exes[(i/workers)%(executions/workers)*workers+w]); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	spent := make([][2]time.Duration, len(paths))
	ops := 0
	b.ResetTimer()
	for done, round := 0, 0; done < b.N; round++ {
		n := min(chunk, b.N-done)
		for k := range 2 {
			mode := (round + k) % 2 // rotate which setting goes first
			set(mode)
			for j, p := range paths {
				spent[j][mode] += run(n, mode, p.op)
			}
		}
		ops += n
		done += n
	}
	b.StopTimer()
	set(on)
	perOp := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(ops) }
	line := ""
	for j, p := range paths {
		us := [2]float64{perOp(spent[j][off]), perOp(spent[j][on])}
		for mode := range 2 {
			b.ReportMetric(us[mode], p.name+"-"+names[mode]+"-µs/op")
		}
		b.ReportMetric(us[on]/us[off], p.name+"-on/off")
		line += fmt.Sprintf("\n  %-8s off %7.1f µs/op, on %7.1f; on/off %.3f", p.name, us[off], us[on], us[on]/us[off])
	}
	b.Logf("fence through the proxy (PgBouncer, %d shards, %d ops each, %d workers):%s", len(m.Shards), ops, workers, line)
}

// benchProxy runs a proxy for m through PgBouncer with fence mode fm
// until the benchmark ends and returns its DSN.
func benchProxy(b *testing.B, m *shardmap.Map, fm proxy.FenceMode) string {
	b.Helper()
	an, err := route.New(m, route.DefaultSchema(), route.Options{})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := proxy.New(proxy.Config{
		Map:            m,
		Analyzer:       an,
		UsePooler:      true,
		Users:          []proxy.User{{Name: "postgres", Trust: true}},
		VerifyIdentity: true,
		ConnectTimeout: 5 * time.Second,
		PoolTimeout:    20 * time.Second,
		Fence:          fm,
		Logger:         slog.New(slog.NewTextHandler(testWriter{b}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := srv.Verify(ctx); err != nil {
		cancel()
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	b.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				b.Errorf("proxy: %v", err)
			}
		case <-time.After(30 * time.Second):
			b.Errorf("proxy did not stop within 30s")
		}
	})
	pc, err := pgx.ParseConfig(m.Shards[0].DSN)
	if err != nil {
		b.Fatal(err)
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", ln.Addr(), pc.Database)
}
