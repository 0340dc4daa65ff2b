package mutant_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/cluster/clustertest"
	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/loadgen/loadgentest"
	"github.com/pgshard/pgshard/loadgen/storetarget"
	"github.com/pgshard/pgshard/store"
)

// TestWorkloadOnControl drives loadgen's workload (workers, outbox relay,
// timer sweeper, redeliveries) through storetarget over the control, on
// the 4-shard cluster, directly and through PgBouncer: no errors, no
// dedupe miss, the relays deliver and fire, every ok operation is a
// stored version step and every execution sits on its bucket's shard.
func TestWorkloadOnControl(t *testing.T) {
	c := clustertest.Get(t)
	for _, pooler := range []bool{false, true} {
		name := map[bool]string{false: "direct", true: "pgbouncer"}[pooler]
		t.Run(name, func(t *testing.T) {
			m := clustertest.MigratedMap(t, c)
			s := openStore(t, m, pooler, "", store.Options{MaxConns: 4, TraceMax: 4})
			o := loadgen.DefaultOptions()
			o.Target = "mutant-control"
			o.Workload.Executions = 200
			o.Workload.TimerDelay = 50 * time.Millisecond
			o.Concurrency = 4
			o.Warmup = 200 * time.Millisecond
			o.Duration = 2 * time.Second
			o.RelayInterval = 10 * time.Millisecond
			o.DrainTimeout = 3 * time.Second
			// At least 2 s, then on until every kind was measured (a
			// redelivery recognised, an outbox row delivered, a timer
			// fired), at most a minute: a loaded machine ran 2 s through
			// PgBouncer at 19 ops/s and fired no timer.
			loadgentest.AttachEveryKind(&o, time.Minute)
			res, err := loadgen.Run(ctxT(t), storetarget.New(s), loadgen.MapLocator(m), o)
			if err != nil {
				t.Fatal(err)
			}
			if res.ErrorCount() != 0 {
				t.Fatalf("errors %v: %v", res.Errors, res.ErrorSamples)
			}
			if res.Outcomes[loadgen.OutcomeDedupeHit] == 0 || res.Outcomes[loadgen.OutcomeDedupeMiss] != 0 {
				t.Errorf("dedupe: %v", res.Outcomes)
			}
			if res.Relays.OutboxDelivered == 0 || res.Relays.TimersFired == 0 {
				t.Errorf("relays: %+v", res.Relays)
			}
			// Every committed transition is one version step, and every
			// execution is where the map puts it.
			steps := countAll(t, m, `SELECT coalesce(sum(version - 1), 0)::int FROM executions WHERE definition_id = 'loadgen'`)
			if int64(steps) < res.Outcomes[loadgen.OutcomeOK] {
				t.Errorf("%d version steps stored, fewer than the %d ok operations", steps, res.Outcomes[loadgen.OutcomeOK])
			}
			for i, sh := range m.Shards {
				rows, err := shardConn(t, m, i).Query(ctxT(t), `SELECT id FROM executions`)
				if err != nil {
					t.Fatal(err)
				}
				ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					t.Fatal(err)
				}
				for _, id := range ids {
					if owner := m.Lookup(id).Name; owner != sh.Name {
						t.Fatalf("execution %s is on %s, its bucket's owner is %s", id, sh.Name, owner)
					}
				}
			}
			t.Logf("%s: %.0f ops/s, %.0f commits/s, relays %+v, outcomes %v", name, res.Throughput, res.CommitRate, res.Relays, res.Outcomes)
		})
	}
}
