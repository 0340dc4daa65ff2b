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
//	fanout    a read of every shard (a count of the 64 executions): on,
//	          each shard's part reads the table through the served
//	          form, its served set checked against the map
//	          (route/served.go, migration 0015); off, the table as is
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
// Both measurements run in fenceReps repetitions one after the other,
// each printed as its own on/off ratio beside the machine's load
// average at its start, so the noise of the figures is in sight.
// Asserts nothing:
//
//	go test -run '^$' -bench BenchmarkProxyFence -benchtime 2000x ./proxy/
func BenchmarkProxyFence(b *testing.B) {
	const workers, executions = fenceWorkers, 64
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
	const fanoutSQL = `SELECT count(*) FROM executions WHERE definition_id = 'bench'`
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
		{"fanout", func(mode, w int, e *store.Execution) error {
			var n int
			if err := conns[mode][w].QueryRow(ctx, fanoutSQL).Scan(&n); err != nil {
				return err
			}
			if n != executions {
				return fmt.Errorf("%s: %d rows, want %d", fanoutSQL, n, executions)
			}
			return nil
		}},
	}
	// The operations run in reps repetitions, one after the other (the
	// machine's load, read from /proc/loadavg at each, drifts between
	// them): the spread of the per-repetition ratios is the noise.
	reps := min(fenceReps, max(1, b.N/(2*workers)))
	b.ResetTimer()
	lat := make([][][workers][2][]time.Duration, reps) // [rep][path][worker][mode]
	loads := make([]string, reps)
	for r := range reps {
		loads[r] = loadAvg()
		lat[r] = fenceLatencies(b, r*b.N/reps, (r+1)*b.N/reps, len(paths), func(j, mode, w, x int) error {
			if err := paths[j].op(mode, w, exes[mode][x]); err != nil {
				return fmt.Errorf("%s, fence %s: %w", paths[j].name, names[mode], err)
			}
			return nil
		})
	}
	b.StopTimer()
	line := ""
	for j, p := range paths {
		var all [2][]time.Duration
		var reprat []string
		for r := range reps {
			var one [2][]time.Duration
			for mode := range 2 {
				for w := range workers {
					one[mode] = append(one[mode], lat[r][j][w][mode]...)
				}
				all[mode] = append(all[mode], one[mode]...)
			}
			_, m0 := meanMedian(one[off])
			_, m1 := meanMedian(one[on])
			reprat = append(reprat, fmt.Sprintf("%.2f", m1/m0))
		}
		var us, med [2]float64
		for mode := range 2 {
			us[mode], med[mode] = meanMedian(all[mode])
			b.ReportMetric(us[mode], p.name+"-"+names[mode]+"-µs/op")
		}
		b.ReportMetric(us[on]/us[off], p.name+"-on/off")
		b.ReportMetric(med[on]/med[off], p.name+"-p50-on/off")
		line += fmt.Sprintf("\n  %-8s off %7.1f µs/op, on %7.1f; on/off %.3f (p50 off %.0f µs, on %.0f; on/off %.3f); p50 on/off by repetition: %s",
			p.name, us[off], us[on], us[on]/us[off], med[off], med[on], med[on]/med[off], strings.Join(reprat, " "))
	}
	b.Logf("fence through the proxy (PgBouncer, %d shards, %d ops each, %d workers, %d repetitions; load average (1, 5, 15 min) at each: %s), latency:%s",
		shards, b.N, workers, reps, strings.Join(loads, " | "), line)

	// CPU: chunks of each path and setting, workers goroutines each,
	// summed per repetition.
	spent, ops, loads := fenceCPU(b, reps, len(paths), cpu, func(j, mode, w, x int) error {
		if err := paths[j].op(mode, w, exes[mode][x]); err != nil {
			return fmt.Errorf("%s, fence %s: %w", paths[j].name, names[mode], err)
		}
		return nil
	})
	line = ""
	for j, p := range paths {
		var tot [2]time.Duration
		var reprat []string
		for r := range reps {
			for mode := range 2 {
				tot[mode] += spent[r][j][mode]
			}
			reprat = append(reprat, fmt.Sprintf("%.2f", float64(spent[r][j][on])/float64(spent[r][j][off])))
		}
		var us [2]float64
		for mode := range 2 {
			us[mode] = float64(tot[mode].Microseconds()) / float64(ops)
			b.ReportMetric(us[mode], p.name+"-"+names[mode]+"-cpu-µs/op")
		}
		b.ReportMetric(us[on]/us[off], p.name+"-cpu-on/off")
		line += fmt.Sprintf("\n  %-8s off %7.1f CPU µs/op, on %7.1f; on/off %.3f; by repetition: %s",
			p.name, us[off], us[on], us[on]/us[off], strings.Join(reprat, " "))
	}
	b.Logf("fence through the proxy, CPU of the cluster, PgBouncer, proxy and clients (%d ops each, %d repetitions; load average at each: %s):%s",
		ops, reps, strings.Join(loads, " | "), line)
}

// fenceReps is how many repetitions BenchmarkProxyFence splits its
// operations into (fewer when b.N is small).
const fenceReps = 5

// fenceWorkers is BenchmarkProxyFence's number of client goroutines.
const fenceWorkers = 4

// fenceLatencies runs operations [from, to) over fenceWorkers
// goroutines, worker w taking i = from+w, from+w+workers, ...: for each,
// every path with the fence off and on, which goes first alternating
// by operation and path, so both settings share every moment of the
// machine. op(path, mode, worker, execution) runs one; x, the
// execution's index, is the worker's own (commits never conflict). It
// returns the latencies by path, worker and mode.
func fenceLatencies(b *testing.B, from, to, paths int, op func(j, mode, w, x int) error) [][fenceWorkers][2][]time.Duration {
	const workers, executions = fenceWorkers, 64
	lat := make([][workers][2][]time.Duration, paths)
	var g errgroup.Group
	for w := range workers {
		g.Go(func() error {
			for i := from + w; i < to; i += workers {
				x := (i/workers)%(executions/workers)*workers + w
				for j := range paths {
					for k := range 2 {
						mode := (i/workers + j + k) % 2
						start := time.Now()
						if err := op(j, mode, w, x); err != nil {
							return err
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
	return lat
}

// fenceCPU runs b.N operations of each path and setting in reps
// repetitions of chunks (each chunk fenceWorkers goroutines of one path
// and one setting; on and off alternate, which goes first rotating) and
// returns the CPU cpu measured during each, summed by repetition, path
// and mode; the operations done per path and setting; and the load
// average at each repetition's start.
func fenceCPU(b *testing.B, reps, paths int, cpu func(*cpuReading) *cpuReading, op func(j, mode, w, x int) error) ([][][2]time.Duration, int, []string) {
	const workers, executions, chunk = fenceWorkers, 64, 100
	spent := make([][][2]time.Duration, reps)
	loads := make([]string, reps)
	ops := 0
	for r := range reps {
		spent[r] = make([][2]time.Duration, paths)
		loads[r] = loadAvg()
		from, to := r*b.N/reps, (r+1)*b.N/reps
		for done, round := from, 0; done < to; round++ {
			n := min(chunk, to-done)
			for j := range paths {
				for k := range 2 {
					mode := (round + k) % 2
					before := cpu(nil)
					var g errgroup.Group
					for w := range workers {
						g.Go(func() error {
							for i := w; i < n; i += workers {
								if err := op(j, mode, w, (i/workers)%(executions/workers)*workers+w); err != nil {
									return err
								}
							}
							return nil
						})
					}
					if err := g.Wait(); err != nil {
						b.Fatal(err)
					}
					spent[r][j][mode] += cpu(before).spent
				}
			}
			ops += n
			done += n
		}
	}
	return spent, ops, loads
}

// meanMedian returns the mean and the median of d in µs (0 for none);
// it sorts d.
func meanMedian(d []time.Duration) (mean, median float64) {
	if len(d) == 0 {
		return 0, 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	slices.Sort(d)
	return float64(sum.Microseconds()) / float64(len(d)), float64(d[len(d)/2].Microseconds())
}

// loadAvg is the machine's load average over 1, 5 and 15 minutes
// (/proc/loadavg), "?" when unreadable.
func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(raw)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
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
