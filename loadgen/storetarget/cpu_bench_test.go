package storetarget_test

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/loadgen/loadgentest"
	"github.com/pgshard/pgshard/loadgen/storetarget"
	"github.com/pgshard/pgshard/store"
)

// cpuGoalUS is the generator's budget: its own CPU per worker operation,
// relays and HDR recording included.
const cpuGoalUS = 50.0

// BenchmarkGeneratorCPU runs the generator as `pgshard loadgen run`
// would (open loop at a fixed rate, default mix, relays on) against one
// real shard for a bounded time and reads the process's own CPU time
// (getrusage: user + system, every goroutine of this process; Postgres
// runs in other processes) from the start of the run's clock to its end.
// It prints µs of CPU per worker operation and the ratio to the 50 µs
// goal; it asserts nothing (speed depends on the machine):
//
//	go test -run '^$' -bench GeneratorCPU -benchtime 1x ./loadgen/storetarget
//
// PGSHARD_BENCH_RATE (ops/s, default 600) and PGSHARD_BENCH_SECONDS
// (default 10) change the run; PGSHARD_BENCH_EXECMODE (exec, the
// default, or cache-statement) the store's pgx exec mode;
// PGSHARD_BENCH_CPUPROFILE names a file for a CPU profile of the same
// interval. It also prints the CPU per target call (every call is at
// least one round trip), which does not move with the relays' backlog.
func BenchmarkGeneratorCPU(b *testing.B) {
	m := clustertest.MigratedOneShard(b, clustertest.Get(b))
	tg := openBenchStore(b, m.Shards[0].DSN)
	rate := envFloat(b, "PGSHARD_BENCH_RATE", 600)
	secs := envFloat(b, "PGSHARD_BENCH_SECONDS", 10)
	rt := roundTripCPU(b, m.Shards[0].DSN)
	for i := 0; i < b.N; i++ {
		o := loadgen.DefaultOptions()
		o.Target = "store"
		o.Model = loadgen.Open
		o.Rate = rate
		o.Workload.Executions = 2000
		o.Warmup = 0 // every operation is counted: ops below are all of them
		o.Duration = time.Duration(secs * float64(time.Second))
		o.SkipSetup = i > 0
		var cpu0 time.Duration
		stopProfile := func() {}
		o.OnStart = func(time.Time) {
			stopProfile = loadgentest.StartCPUProfile(b, "")
			cpu0 = cpuTime()
		}
		ct := &countingTarget{Target: tg}
		res, err := loadgen.Run(context.Background(), ct, loadgen.SingleShard("shard0"), o)
		cpu := cpuTime() - cpu0
		stopProfile()
		if err != nil {
			b.Fatal(err)
		}
		if res.Ops == 0 {
			b.Fatalf("no operation ran: %v %v", res.Outcomes, res.ErrorSamples)
		}
		us := float64(cpu.Microseconds()) / float64(res.Ops)
		b.ReportMetric(us, "cpu-µs/op")
		b.ReportMetric(us/cpuGoalUS, "×goal")
		b.ReportMetric(float64(res.Ops), "ops")
		b.ReportMetric(float64(res.Relays.OutboxDelivered+res.Relays.TimersFired), "relay-ops")
		calls := float64(ct.calls.Load()) / float64(res.Ops)
		b.ReportMetric(calls, "target-calls/op")
		b.ReportMetric(rt, "pgx-round-trip-cpu-µs")
		// CPU per target call divides out the relay backlog, which
		// varies between runs (the relays' deliveries and acks are
		// target calls too) and moves µs/op with it.
		perCall := float64(cpu.Microseconds()) / float64(ct.calls.Load())
		b.ReportMetric(perCall, "cpu-µs/call")
		b.Logf("anchor: a bare pgx round trip (SELECT 1, the store's exec mode, one connection) costs this process %.1f µs of CPU here; %.2f target calls per operation (each at least one round trip) put the floor of a real-database run near %.0f µs/op before the generator does anything; measured %.1f µs per call (%.2f× the bare round trip)",
			rt, calls, rt*calls, perCall, perCall/rt)
		b.Logf("open loop %.0f ops/s for %s: %d worker ops (+%d relay deliveries, %d timer fires), %.2f CPU-s: %.1f µs/op (goal %.0f µs: %.2f×); self-check %.1f µs/op, gen %.0f%% of %d CPUs",
			rate, o.Duration, res.Ops, res.Relays.OutboxDelivered, res.Relays.TimersFired, cpu.Seconds(), us, cpuGoalUS, us/cpuGoalUS,
			res.SelfCheck.GenCPUPerOpUS, 100*res.SelfCheck.GenCPU, res.SelfCheck.CPUs)
	}
}

// openBenchStore opens the store as openStore does, in the exec mode
// PGSHARD_BENCH_EXECMODE names ("exec", the store's default, or
// "cache-statement": named prepared statements, a direct connection only).
func openBenchStore(b *testing.B, dsn string) *storetarget.Target {
	opts := store.Options{MaxConns: 16, ConnectAttempts: 3}
	switch m := os.Getenv("PGSHARD_BENCH_EXECMODE"); m {
	case "", "exec":
	case "cache-statement":
		opts.ExecMode = pgx.QueryExecModeCacheStatement
	default:
		b.Fatalf("PGSHARD_BENCH_EXECMODE=%q: want exec or cache-statement", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := store.Open(ctx, dsn, opts)
	if err != nil {
		b.Fatal(err)
	}
	tg := storetarget.New(s)
	b.Cleanup(tg.Close)
	return tg
}

func envFloat(b *testing.B, name string, def float64) float64 {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		b.Fatalf("%s=%q: want a positive number", name, s)
	}
	return v
}

// roundTripCPU is the CPU this process spends per bare round trip to dsn
// (SELECT 1 in the store's exec mode on one connection): the anchor below
// which no generator that talks to the database through pgx can go.
func roundTripCPU(b *testing.B, dsn string) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	const n = 2000
	var x int
	c0 := cpuTime()
	for i := 0; i < n; i++ {
		if err := conn.QueryRow(ctx, "SELECT 1", pgx.QueryExecModeExec).Scan(&x); err != nil {
			b.Fatal(err)
		}
	}
	return float64((cpuTime() - c0).Microseconds()) / n
}

// countingTarget counts the calls made to the target (each one round trip
// or more to the database): the generator's CPU per operation grows with
// them.
type countingTarget struct {
	loadgen.Target
	calls atomic.Int64
}

func (c *countingTarget) LoadForEvent(ctx context.Context, id, ev string) (*loadgen.Execution, bool, error) {
	c.calls.Add(1)
	return c.Target.LoadForEvent(ctx, id, ev)
}

func (c *countingTarget) Commit(ctx context.Context, cm *loadgen.Commit) error {
	c.calls.Add(1)
	return c.Target.Commit(ctx, cm)
}

func (c *countingTarget) PendingOutbox(ctx context.Context, limit int) ([]loadgen.OutboxEntry, error) {
	c.calls.Add(1)
	return c.Target.PendingOutbox(ctx, limit)
}

func (c *countingTarget) AckOutbox(ctx context.Context, seq int64) error {
	c.calls.Add(1)
	return c.Target.AckOutbox(ctx, seq)
}

func (c *countingTarget) PendingSpawns(ctx context.Context, limit int) ([]loadgen.SpawnEntry, error) {
	c.calls.Add(1)
	return c.Target.PendingSpawns(ctx, limit)
}

func (c *countingTarget) AckSpawn(ctx context.Context, seq int64) error {
	c.calls.Add(1)
	return c.Target.AckSpawn(ctx, seq)
}

func (c *countingTarget) DueTimers(ctx context.Context, now float64, limit int) ([]loadgen.TimerEntry, error) {
	c.calls.Add(1)
	return c.Target.DueTimers(ctx, now, limit)
}

func (c *countingTarget) DeleteTimer(ctx context.Context, id, path string, at float64) (bool, error) {
	c.calls.Add(1)
	return c.Target.DeleteTimer(ctx, id, path, at)
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
