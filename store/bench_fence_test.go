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
// the keyed point read (Load, whose statement checks it: one probe), in
// three settings side by side in one run:
//
//	none  as before the fence: pgshard_cas without its assert (0007's
//	      body, swapped in for the chunk) and Load's plain point SELECT
//	off   the fence installed and switched off (pgshard_fence_off)
//	on    the fence set from the map (the default after migrate)
//
// The settings alternate in chunks of operations on the same database,
// connections and executions, so all see the same machine; it reports µs
// per operation of each and the ratios on/none and off/none (goal ≤ 1.05).
// Asserts nothing:
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
	commit := func(e *store.Execution) error { return fastCommit(ctx, s, e) }
	load := func(e *store.Execution) error { _, err := s.Load(ctx, e.ID); return err }
	loadUnfenced := func(e *store.Execution) error {
		found, err := store.LoadUnfenced(ctx, s, e.ID)
		if err == nil && !found {
			err = fmt.Errorf("execution %s not found", e.ID)
		}
		return err
	}

	var spent [2][3]time.Duration // [commit, load][none, off, on]
	ops := 0
	b.ResetTimer()
	for done, round := 0, 0; done < b.N; round++ {
		n := min(chunk, b.N-done)
		for k := range 3 {
			mode := (round + k) % 3 // rotate which setting goes first
			set(mode)
			spent[0][mode] += run(n, commit)
			if mode == none {
				spent[1][mode] += run(n, loadUnfenced)
			} else {
				spent[1][mode] += run(n, load)
			}
		}
		ops += n
		done += n
	}
	b.StopTimer()
	set(on)
	for i, what := range []string{"commit", "load"} {
		var us [3]float64
		for mode := range 3 {
			us[mode] = float64(spent[i][mode].Microseconds()) / float64(ops)
			b.ReportMetric(us[mode], what+"-"+names[mode]+"-µs/op")
		}
		b.ReportMetric(us[on]/us[none], what+"-on/none")
		b.ReportMetric(us[off]/us[none], what+"-off/none")
		b.Logf("%s: none %.1f µs/op, off %.1f, on %.1f; on/none %.3f, off/none %.3f (%d ops each, %d workers)",
			what, us[none], us[off], us[on], us[on]/us[none], us[off]/us[none], ops, workers)
	}
}
