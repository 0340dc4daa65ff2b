package storetarget_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/loadgen/loadgentest"
	"github.com/pgshard/pgshard/loadgen/storetarget"
	"github.com/pgshard/pgshard/migrations"
	"github.com/pgshard/pgshard/router"
	"github.com/pgshard/pgshard/store"
)

// TestMain runs the tests on the package's shared cluster, then checks that
// no goroutine outlived them.
func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }

func openStore(t testing.TB, dsn string, maxConns int) *storetarget.Target {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := store.Open(ctx, dsn, store.Options{MaxConns: maxConns, ConnectAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	tg := storetarget.New(s)
	t.Cleanup(tg.Close)
	return tg
}

// execSQL runs statements on dsn.
func execSQL(t *testing.T, dsn string, sqls ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range sqls {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func count(t *testing.T, dsn, sql string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func shortOptions() loadgen.Options {
	o := loadgen.DefaultOptions()
	o.Target = "store"
	o.Workload.Executions = 300
	o.Workload.TimerDelay = 50 * time.Millisecond
	o.Concurrency = 4
	o.Warmup = 300 * time.Millisecond
	o.Duration = 2 * time.Second
	o.RelayInterval = 10 * time.Millisecond
	o.DrainTimeout = 3 * time.Second
	return o
}

// The whole hot path against a real Postgres through one DSN (as through
// the proxy): every operation kind measured, no errors, redeliveries
// deduplicated, relays draining the outbox and timers, and the database
// agreeing with the counts.
func TestRunAgainstOneRealDatabase(t *testing.T) {
	m := clustertest.MigratedOneShard(t, clustertest.Get(t))
	for _, mode := range []string{"direct", "pgbouncer"} {
		t.Run(mode, func(t *testing.T) {
			dsn := m.Shards[0].DSN
			if mode == "pgbouncer" {
				dsn = m.Shards[0].PoolerDSN
			}
			tg := openStore(t, dsn, 8)
			o := shortOptions()
			o.Workload.Seed = uint64(len(mode)) // distinct executions per mode
			// Every kind must be measured: on a loaded machine 2 s may see
			// no redelivery or timer fire yet, so the run goes on (up to a
			// minute) until it saw each.
			loadgentest.AttachEveryKind(&o, time.Minute)
			res, err := loadgen.Run(context.Background(), tg, loadgen.SingleShard("shard0"), o)
			if err != nil {
				t.Fatal(err)
			}
			if res.ErrorCount() != 0 {
				t.Fatalf("errors %v: %v", res.Errors, res.ErrorSamples)
			}
			for _, k := range []string{"op", "load", "fast_commit", "complex_commit", "redelivery", "relay_delivery", "timer_fire"} {
				if res.Kinds[k] == nil || res.Kinds[k].Count == 0 {
					t.Errorf("kind %s not measured", k)
				}
			}
			if res.Outcomes[loadgen.OutcomeDedupeHit] == 0 || res.Outcomes[loadgen.OutcomeDedupeMiss] != 0 {
				t.Errorf("dedupe: %v", res.Outcomes)
			}
			if res.Relays.OutboxDelivered == 0 || res.Relays.TimersFired == 0 {
				t.Errorf("relays: %+v", res.Relays)
			}
			// Every committed transition is one version step of one execution.
			versions := count(t, m.Shards[0].DSN, "SELECT coalesce(sum(version - 1), 0) FROM executions WHERE definition_id = 'loadgen'")
			if versions < res.Outcomes[loadgen.OutcomeOK] {
				t.Errorf("the database holds %d version steps, fewer than the %d measured ok commits", versions, res.Outcomes[loadgen.OutcomeOK])
			}
			t.Logf("%s: %.0f ops/s, commit p50 %.2fms p99 %.2fms", mode, res.Throughput, res.Kinds["commit"].P50, res.Kinds["commit"].P99)
		})
	}
}

const slowTrigger = `CREATE OR REPLACE FUNCTION loadgen_test_slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(%g); RETURN NEW; END $$;
CREATE TRIGGER loadgen_test_slow BEFORE UPDATE ON executions FOR EACH ROW EXECUTE FUNCTION loadgen_test_slow()`

// A server-side delay (pg_sleep in a trigger on the commit's UPDATE) shows
// up in the commit and operation percentiles.
func TestInjectedServerDelayShowsInPercentiles(t *testing.T) {
	m := clustertest.MigratedOneShard(t, clustertest.Get(t))
	dsn := m.Shards[0].DSN
	tg := openStore(t, dsn, 8)
	o := shortOptions()
	o.Relays = false
	o.Duration = 1500 * time.Millisecond
	base, err := loadgen.Run(context.Background(), tg, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	execSQL(t, dsn, fmt.Sprintf(slowTrigger, 0.03))
	o.SkipSetup = true
	slow, err := loadgen.Run(context.Background(), tg, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	b, s := base.Kinds["commit"], slow.Kinds["commit"]
	t.Logf("commit p50/p99: base %.2f/%.2f ms, with pg_sleep(0.03) %.2f/%.2f ms; load p50 %.2f → %.2f ms",
		b.P50, b.P99, s.P50, s.P99, base.Kinds["load"].P50, slow.Kinds["load"].P50)
	if s.P50 < 30 || slow.Kinds["op"].P50 < 30 {
		t.Errorf("a 30ms server-side delay: commit p50 %.2fms, op p50 %.2fms", s.P50, slow.Kinds["op"].P50)
	}
	// The sleep is a lower bound on every commit, whatever the machine.
	// That the baseline and the loads stay below it is speed, not
	// asserted (a loaded machine can take 30ms for anything): logged above.
	if slow.ErrorCount() != 0 || base.ErrorCount() != 0 {
		t.Errorf("errors: %v / %v", base.Errors, slow.Errors)
	}
}

// Against a real database whose capacity is pinned (2 connections, each
// successful commit holding its connection at least 5ms in a trigger's
// pg_sleep: at most 400 commits/s, however fast the machine), an open loop
// through the store target measures each operation from its intended
// start, and counts only what was served. Every bound is one the test
// imposes (a stall, a sleep), so a loaded machine only moves the figures
// away from it:
//   - the generator stalls right after its clock started (its OnStart hook
//     blocks, as if the process were descheduled): the operations meant
//     for the stall start late and their latency includes the wait;
//   - offered 1,000 operations/s, it cannot report more than the 400/s the
//     pool can commit, and no operation is dropped or invented.
//
// (The size of the queueing against a closed loop is speed: see the
// loadgen package's BenchmarkOpenVsClosedLoop.)
func TestOpenLoopOverloadOnRealDatabase(t *testing.T) {
	const (
		conns = 1
		sleep = 10 * time.Millisecond
		stall = 500 * time.Millisecond
	)
	m := clustertest.MigratedOneShard(t, clustertest.Get(t))
	dsn := m.Shards[0].DSN
	execSQL(t, dsn, fmt.Sprintf(slowTrigger, sleep.Seconds()))
	tg := openStore(t, dsn, conns)
	o := shortOptions()
	o.Relays = false
	o.Workload.Redelivery = 0
	o.Workload.Mix.Fast = 1
	o.Model = loadgen.Open
	o.Rate = 300 // 3× the pinned pool's ceiling
	o.Warmup = 0
	o.Duration = time.Second
	o.MaxOutstanding = int(o.Rate*o.Duration.Seconds()) + 100 // above every arrival: no drops
	// The arrivals stop after Duration; the backlog then drains. While
	// arrivals outpace the pool, each operation's commit queues behind
	// newer operations' loads for the one connection, so on a slow
	// machine none may finish before the arrivals stop: the drain is
	// what serves them (a few seconds here, longer on a loaded machine).
	o.DrainTimeout = time.Minute
	o.OnStart = func(time.Time) { time.Sleep(stall) }
	open, err := loadgen.Run(context.Background(), tg, nil, o)
	if err != nil && err != context.Canceled {
		t.Fatal(err)
	}
	op, ol := open.Kinds["op"], open.OpenLoop
	if op == nil {
		t.Fatalf("no op latencies: outcomes %v, open loop %+v, errors %v %v", open.Outcomes, open.OpenLoop, open.Errors, open.ErrorSamples)
	}
	measured := open.MeasuredSeconds
	ceiling := float64(conns) / sleep.Seconds()
	t.Logf("open at %.0f/s: %.0f ops/s (ceiling %.0f), op p50 %.1fms p99 %.1fms max %.1fms; intended %d, started %d, late %d, dropped %d; outcomes %v",
		o.Rate, open.Throughput, ceiling, op.P50, op.P99, op.Max, ol.Intended, ol.Started, ol.Late, ol.Dropped, open.Outcomes)

	// Operation i is meant for i/Rate after the clock started and cannot
	// start before the stall ends; operations are issued in order, so a
	// dispatcher starved by a busy machine issues fewer, but the first
	// ones are those meant for the stall.
	if want := min(ol.Intended, int64(o.Rate*(stall-o.LateThreshold).Seconds())-1); ol.Late < want {
		t.Errorf("%d operations counted late, want at least %d of the %d meant for the stall", ol.Late, want, int64(o.Rate*stall.Seconds()))
	}
	if op.Max < 0.99*float64(stall.Milliseconds()) {
		t.Errorf("op max %.1fms: the first operation waited the whole %s stall", op.Max, stall)
	}
	// The operations meant for the stall's first half (Rate*stall/2 of at
	// most Rate*Duration, or all of them if fewer were issued: far more
	// than 1%) waited at least half of it.
	if op.P99 < 0.99*float64((stall/2).Milliseconds()) {
		t.Errorf("op p99 %.1fms: the operations meant for the stall's first half (a quarter of them) waited at least %s", op.P99, stall/2)
	}
	// The schedule is kept: every arrival started, none dropped or invented.
	if ol.Intended == 0 || ol.Started != ol.Intended || ol.Dropped != 0 || float64(ol.Intended) > o.Rate*measured+1 {
		t.Errorf("open loop did not keep its schedule: %+v", ol)
	}
	// Throughput is what the pool committed in the measured period (at
	// most conns/sleep per second, plus the commits in flight at its
	// start), never what was offered.
	if limit := ceiling + conns/measured; open.Throughput > limit {
		t.Errorf("open loop claims %.0f ops/s, above the %.0f the pinned pool can commit", open.Throughput, limit)
	}
}

// The router targets (direct and through PgBouncer) on the 4-shard
// cluster: the same workload and seed on both, every shard loaded, no
// errors, and every execution on the shard its bucket names.
func TestRouterTargets(t *testing.T) {
	c := clustertest.Get(t)
	db := clustertest.FreshDatabase(t, c)
	m, err := c.MapFor(db, 4096)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	if _, err := migrations.Apply(ctx, m, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	results := map[string]*loadgen.Result{}
	for _, mode := range []string{"direct", "pgbouncer"} {
		rt, err := router.Open(ctx, m, router.Options{Store: store.Options{MaxConns: 4, ConnectAttempts: 3}, UsePooler: mode == "pgbouncer"})
		if err != nil {
			t.Fatal(err)
		}
		o := shortOptions()
		o.Target = mode
		o.Workload.Executions = 400
		// The spread over 4 shards is asserted below: on 17 operations (a
		// 2 s run at load 45) it is noise, on 400 it is not.
		loadgentest.AttachEveryKind(&o, 2*time.Minute)
		loadgentest.AtLeast(&o, 400, 2*time.Minute)
		res, err := loadgen.Run(ctx, storetarget.New(rt), loadgen.MapLocator(m), o)
		rt.Close()
		if err != nil {
			t.Fatal(err)
		}
		results[mode] = res
		if res.ErrorCount() != 0 {
			t.Errorf("%s: errors %v: %v", mode, res.Errors, res.ErrorSamples)
		}
		if len(res.PerShard) != 4 || res.HottestShare > 0.4 {
			t.Errorf("%s: per-shard %+v", mode, res.PerShard)
		}
		for _, s := range res.PerShard {
			if s.Ops == 0 {
				t.Errorf("%s: shard %s got no operations", mode, s.Name)
			}
		}
		if res.Relays.OutboxDelivered == 0 {
			t.Errorf("%s: relays %+v", mode, res.Relays)
		}
		t.Logf("%s: %.0f ops/s, op p50 %.2fms p99 %.2fms, hottest %.1f%%", mode, res.Throughput, res.Kinds["op"].P50, res.Kinds["op"].P99, 100*res.HottestShare)
	}
	// The same seed put the same executions on the same shards.
	loc := loadgen.MapLocator(m)
	want := make([]int64, 4)
	for _, id := range loadgen.ExecutionIDs(shortOptions().Workload.Seed, 400) {
		want[loc.ShardOf(id)]++
	}
	for i, sh := range m.Shards {
		got := count(t, sh.DSN, "SELECT count(*) FROM executions WHERE definition_id = 'loadgen'")
		if got != want[i] {
			t.Errorf("%s holds %d executions, the map places %d there", sh.Name, got, want[i])
		}
	}
}
