package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/store"
)

// BenchmarkFence measures the fence's cost (migration 0008) on one real
// shard, directly: the fast-path commit (pgshard_commit_cas, whose CAS
// asserts the fence: an index probe, the range lock, a second probe) and
// the keyed point read (Load, whose statement reads the fence's verdict:
// one probe), in three settings side by side in one run:
//
//	none  as before the fence: pgshard_cas without its assert (0007's
//	      body, swapped in for the chunk) and Load's plain point SELECT
//	off   the fence installed and switched off (pgshard_fence_off)
//	on    the fence set from the map (the default after migrate)
//
// The settings alternate in chunks of operations on the same database,
// connections and executions, so all see the same machine; it reports µs
// per operation of each and the ratios on/none and off/none (goal ≤ 1.05).
// With the fence on, the read's alternatives run in the same rounds:
// Load's verdict (bucket computed by the store), the same verdict with
// the bucket computed in SQL, and pgshard_fence_check in the WHERE; each
// is reported as a ratio to the unfenced read. Asserts nothing:
//
//	go test -run '^$' -bench BenchmarkFence -benchtime 4000x ./store/
func BenchmarkFence(b *testing.B) {
	const workers, chunk, executions = 4, 100, 64
	d := freshDB(b, "direct")
	ctx := context.Background()
	s, err := store.Open(ctx, d.dsn(), store.Options{MaxConns: workers, ConnectAttempts: 3})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	exes := make([]*store.Execution, executions)
	for i := range exes {
		exes[i] = &store.Execution{ID: newID(b), DefinitionID: "bench", Status: "running"}
		if err := s.Save(ctx, exes[i]); err != nil {
			b.Fatal(err)
		}
	}
	var fenced string
	if err := s.Pool().QueryRow(ctx, `SELECT pg_get_functiondef('pgshard_cas'::regproc)`).Scan(&fenced); err != nil {
		b.Fatal(err)
	}
	unfenced := strings.Replace(fenced, "PERFORM pgshard_fence_assert(p_id);", "", 1)
	if unfenced == fenced {
		b.Fatal("pgshard_cas does not assert the fence as this benchmark expects")
	}
	const none, off, on = 0, 1, 2
	names := []string{"none", "off", "on"}
	set := func(mode int) {
		q := []string{unfenced + `; SELECT pgshard_fence_off()`, fenced + `; SELECT pgshard_fence_off()`, fenced + `; SELECT pgshard_fence_on()`}[mode]
		if _, err := s.Pool().Exec(ctx, q, pgx.QueryExecModeSimpleProtocol); err != nil {
			b.Fatal(err)
		}
	}
	// run does n operations with workers goroutines, each on its own
	// executions (so commits never conflict), and returns the wall time.
	run := func(n int, op func(e *store.Execution) error) time.Duration {
		start := time.Now()
		var g errgroup.Group
		for w := range workers {
			g.Go(func() error {
				for i := w; i < n; i += workers {
					if err := op(exes[(i/workers)%(executions/workers)*workers+w]); err != nil {
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
	// mixed does n operations with workers goroutines, each taking the
	// operations of ops in turn (operation i of a worker runs ops[(i+w) %
	// len(ops)]), and returns each op's summed time: the alternatives
	// share every moment of the machine, whatever its load does.
	mixed := func(n int, ops []func(e *store.Execution) error) []time.Duration {
		spent := make([][]time.Duration, workers)
		var g errgroup.Group
		for w := range workers {
			spent[w] = make([]time.Duration, len(ops))
			g.Go(func() error {
				for i := w; i < n*len(ops); i += workers {
					k := (i/workers + w) % len(ops)
					start := time.Now()
					if err := ops[k](exes[(i/workers)%(executions/workers)*workers+w]); err != nil {
						return err
					}
					spent[w][k] += time.Since(start)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		out := make([]time.Duration, len(ops))
		for w := range spent {
			for k, d := range spent[w] {
				out[k] += d
			}
		}
		return out
	}
	commit := func(e *store.Execution) error { return fastCommit(ctx, s, e) }
	must := func(found bool, err error) error {
		if err == nil && !found {
			err = fmt.Errorf("execution not found")
		}
		return err
	}
	// The keyed reads: the point SELECT without the fence (baseline), Load
	// (the verdict in a FROM subquery, bucket from the store), the same
	// with the bucket computed in SQL, a plain EXISTS in the WHERE, and
	// pgshard_fence_check in the WHERE (Load's checked form).
	reads := []struct {
		name string
		op   func(e *store.Execution) error
	}{
		{"unfenced", func(e *store.Execution) error { return must(store.LoadUnfenced(ctx, s, e.ID)) }},
		{"load", func(e *store.Execution) error { _, err := s.Load(ctx, e.ID); return err }},
		{"sqlbucket", func(e *store.Execution) error { return must(store.LoadVariant(ctx, s, e.ID, "sql-bucket")) }},
		{"exists", func(e *store.Execution) error { return must(store.LoadVariant(ctx, s, e.ID, "exists")) }},
		{"checkfn", func(e *store.Execution) error { return must(store.LoadVariant(ctx, s, e.ID, "check-fn")) }},
	}
	readOps := make([]func(e *store.Execution) error, len(reads))
	for i, r := range reads {
		readOps[i] = r.op
	}

	var commits [3]time.Duration // by setting
	readsOn := make([]time.Duration, len(reads))
	var readsOff [2]time.Duration // unfenced, load
	ops := 0
	b.ResetTimer()
	for done, round := 0, 0; done < b.N; round++ {
		n := min(chunk, b.N-done)
		for k := range 3 {
			mode := (round + k) % 3 // rotate which setting goes first
			set(mode)
			commits[mode] += run(n, commit)
			switch mode {
			case off:
				for i, d := range mixed(n, readOps[:2]) {
					readsOff[i] += d
				}
			case on:
				for i, d := range mixed(n, readOps) {
					readsOn[i] += d
				}
			}
		}
		ops += n
		done += n
	}
	b.StopTimer()
	set(on)
	perOp := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(ops) }
	var us [3]float64
	for mode := range 3 {
		us[mode] = perOp(commits[mode])
		b.ReportMetric(us[mode], "commit-"+names[mode]+"-µs/op")
	}
	b.ReportMetric(us[on]/us[none], "commit-on/none")
	b.ReportMetric(us[off]/us[none], "commit-off/none")
	b.Logf("commit: none %.1f µs/op, off %.1f, on %.1f; on/none %.3f, off/none %.3f (%d ops each, %d workers)",
		us[none], us[off], us[on], us[on]/us[none], us[off]/us[none], ops, workers)
	base := perOp(readsOn[0])
	line := fmt.Sprintf("keyed read, fence on, µs/op (×unfenced): unfenced %.1f", base)
	for j, r := range reads[1:] {
		v := perOp(readsOn[j+1])
		b.ReportMetric(v/base, "read-"+r.name+"/unfenced")
		line += fmt.Sprintf(", %s %.1f (×%.3f)", r.name, v, v/base)
	}
	b.Logf("%s (%d ops each, %d workers)", line, ops, workers)
	b.ReportMetric(float64(readsOff[1])/float64(readsOff[0]), "read-load-off/unfenced")
	b.Logf("keyed read, fence off: unfenced %.1f µs/op, load %.1f (×%.3f)",
		perOp(readsOff[0]), perOp(readsOff[1]), float64(readsOff[1])/float64(readsOff[0]))
}
