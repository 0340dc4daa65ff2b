package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/cluster"
	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/proxy"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
	"github.com/pgshard/pgshard/store"
)

// BenchmarkProxyFence measures the shard fence's cost (migration 0008,
// issue 20) as a client of the proxy sees it, on a real cluster through
// PgBouncer, fence on vs off side by side in one run:
//
//	simple    keyed point SELECT, simple protocol (one Query)
//	extended  the same, extended protocol (Bind/Execute/Sync of a
//	          prepared statement)
//	commit    the store's fast-path commit (pgshard_commit_cas)
//	load      the store's keyed read (Load: the fence's verdict in SQL)
//
// On: a migrated database (its fence set from the map) behind a proxy
// with Config.Fence on (each keyed transaction asserts its key:
// internal/engine/fence.go). Off: a second migrated database on the same servers with
// every shard's fence switched off (pgshard_fence_off), behind a proxy
// with Config.Fence off (no assert attached). Each worker alternates
// on and off operation by operation (which goes first alternates too),
// so both share every moment of the machine whatever its load does; it
// reports µs per operation (mean latency) of each and the ratio on/off
// (goal ≤ 1.05), and the ratio of the medians (less moved by the
// scheduling stalls of a loaded machine). Then, as latency on a loaded
// machine is mostly waiting for a core, it measures CPU time: each
// path runs in chunks, on and off alternating (which goes first
// rotates), and the CPU the cluster's processes (postmasters, their
// backends, PgBouncers: /proc) and this process (proxy and clients)
// spent during each chunk is summed per path and setting: CPU µs per
// operation and on/off, which the machine's load moves much less.
// Asserts nothing:
//
//	go test -run '^$' -bench BenchmarkProxyFence -benchtime 2000x ./proxy/
func BenchmarkProxyFence(b *testing.B) {
	const workers, executions = 4, 64
	const off, on = 0, 1
	names := [2]string{"off", "on"}
	ctx := context.Background()
	c := clustertest.Get(b)
	cpu := clusterCPU(c)
	var stores [2]*store.Store
	var conns [2][]*pgx.Conn
	var shards int
	for mode, fm := range []proxy.FenceMode{proxy.FenceOff, proxy.FenceOn} {
		m := clustertest.MigratedMap(b, c)
		shards = len(m.Shards)
		if mode == off {
			for _, sh := range m.Shards {
				cn, err := pgx.Connect(ctx, sh.DSN)
				if err != nil {
					b.Fatal(err)
				}
				_, err = cn.Exec(ctx, `SELECT pgshard_fence_off()`)
				cn.Close(ctx)
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		dsn := benchProxy(b, m, fm)
		s, err := store.Open(ctx, dsn, store.Options{MaxConns: workers, ConnectAttempts: 3})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		stores[mode] = s
		for range workers {
			cn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cn.Close(context.Background()) })
			conns[mode] = append(conns[mode], cn)
		}
	}
	// The same executions in both databases (a copy each: commits
	// advance their versions).
	var exes [2][]*store.Execution
	for mode := range 2 {
		for i := range executions {
			e := &store.Execution{ID: fmt.Sprintf("fence-bench-%04d", i), DefinitionID: "bench", Status: "running"}
			if err := stores[mode].Save(ctx, e); err != nil {
				b.Fatal(err)
			}
			exes[mode] = append(exes[mode], e)
		}
	}
	const pointSQL = `SELECT data FROM executions WHERE id = $1`
	paths := []struct {
		name string
		op   func(mode, w int, e *store.Execution) error
	}{
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
	// Worker w does operations i = w, w+workers, ... < b.N, each on its
	// own executions (commits never conflict): every path, on and off.
	lat := make([][workers][2][]time.Duration, len(paths)) // latencies
	for j := range lat {
		for w := range workers {
			for mode := range 2 {
				lat[j][w][mode] = make([]time.Duration, 0, b.N/workers+1)
			}
		}
	}
	b.ResetTimer()
	var g errgroup.Group
	for w := range workers {
		g.Go(func() error {
			for i := w; i < b.N; i += workers {
				x := (i/workers)%(executions/workers)*workers + w
				for j, p := range paths {
					for k := range 2 {
						mode := (i/workers + j + k) % 2
						start := time.Now()
						if err := p.op(mode, w, exes[mode][x]); err != nil {
							return fmt.Errorf("%s, fence %s: %w", p.name, names[mode], err)
						}
						lat[j][w][mode] = append(lat[j][w][mode], time.Since(start))
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	line := ""
	for j, p := range paths {
		var us, med [2]float64
		for mode := range 2 {
			var all []time.Duration
			var d time.Duration
			for w := range workers {
				all = append(all, lat[j][w][mode]...)
			}
			for _, x := range all {
				d += x
			}
			slices.Sort(all)
			us[mode] = float64(d.Microseconds()) / float64(len(all))
			med[mode] = float64(all[len(all)/2].Microseconds())
			b.ReportMetric(us[mode], p.name+"-"+names[mode]+"-µs/op")
		}
		b.ReportMetric(us[on]/us[off], p.name+"-on/off")
		b.ReportMetric(med[on]/med[off], p.name+"-p50-on/off")
		line += fmt.Sprintf("\n  %-8s off %7.1f µs/op, on %7.1f; on/off %.3f (p50 off %.0f µs, on %.0f; on/off %.3f)",
			p.name, us[off], us[on], us[on]/us[off], med[off], med[on], med[on]/med[off])
	}
	b.Logf("fence through the proxy (PgBouncer, %d shards, %d ops each, %d workers), latency:%s", shards, b.N, workers, line)

	// CPU: chunks of each path and setting, workers goroutines each.
	const chunk = 100
	spent := make([][2]time.Duration, len(paths))
	ops := 0
	for done, round := 0, 0; done < b.N; round++ {
		n := min(chunk, b.N-done)
		for j, p := range paths {
			for k := range 2 {
				mode := (round + k) % 2
				before := cpu(nil)
				var g errgroup.Group
				for w := range workers {
					g.Go(func() error {
						for i := w; i < n; i += workers {
							x := (i/workers)%(executions/workers)*workers + w
							if err := p.op(mode, w, exes[mode][x]); err != nil {
								return fmt.Errorf("%s, fence %s: %w", p.name, names[mode], err)
							}
						}
						return nil
					})
				}
				if err := g.Wait(); err != nil {
					b.Fatal(err)
				}
				spent[j][mode] += cpu(before).spent
			}
		}
		ops += n
		done += n
	}
	line = ""
	for j, p := range paths {
		var us [2]float64
		for mode := range 2 {
			us[mode] = float64(spent[j][mode].Microseconds()) / float64(ops)
			b.ReportMetric(us[mode], p.name+"-"+names[mode]+"-cpu-µs/op")
		}
		b.ReportMetric(us[on]/us[off], p.name+"-cpu-on/off")
		line += fmt.Sprintf("\n  %-8s off %7.1f CPU µs/op, on %7.1f; on/off %.3f", p.name, us[off], us[on], us[on]/us[off])
	}
	b.Logf("fence through the proxy, CPU of the cluster, PgBouncer, proxy and clients (%d ops each):%s", ops, line)
}

// cpuReading is CPU time read at one moment: per process of the
// cluster (ns) and this process's own.
type cpuReading struct {
	ns   map[int]int64
	self time.Duration
	// spent is the CPU time since the reading it was compared with.
	spent time.Duration
}

// clusterCPU returns a function reading the CPU time spent by c's
// processes (each postmaster and its children, each PgBouncer: their
// time on a CPU from /proc/PID/schedstat, in ns) and by this process
// (the proxy and the clients); given an earlier reading, it sets spent
// to the time since: a process's ticks since then (all of them for one
// that started since), and none of one that ended (its last moment is
// lost). /proc unreadable counts as nothing.
func clusterCPU(c *cluster.Cluster) func(since *cpuReading) *cpuReading {
	return func(since *cpuReading) *cpuReading {
		roots := map[int]bool{}
		for _, sh := range c.Shards {
			if sh.PID > 0 {
				roots[sh.PID] = true
			}
			if sh.PoolerPID > 0 {
				roots[sh.PoolerPID] = true
			}
		}
		r := &cpuReading{ns: map[int]int64{}}
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			// pid (comm) state ppid ...: the fields after the command's
			// closing parenthesis.
			i := bytes.LastIndexByte(raw, ')')
			if i < 0 {
				continue
			}
			f := strings.Fields(string(raw[i+1:]))
			if len(f) < 2 {
				continue
			}
			ppid, _ := strconv.Atoi(f[1])
			if !roots[pid] && !roots[ppid] {
				continue
			}
			// schedstat: time on a CPU (ns), waiting, timeslices.
			sched, err := os.ReadFile("/proc/" + e.Name() + "/schedstat")
			if err != nil {
				continue
			}
			if g := strings.Fields(string(sched)); len(g) > 0 {
				r.ns[pid], _ = strconv.ParseInt(g[0], 10, 64)
			}
		}
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		r.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		if since != nil {
			var ns int64
			for pid, t := range r.ns {
				ns += max(0, t-since.ns[pid])
			}
			r.spent = time.Duration(ns) + r.self - since.self
		}
		return r
	}
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
	addr := serveProxy(b, srv)
	pc, err := pgx.ParseConfig(m.Shards[0].DSN)
	if err != nil {
		b.Fatal(err)
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", addr, pc.Database)
}
