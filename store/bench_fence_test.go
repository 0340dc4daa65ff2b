package store_test

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/store"
)

// BenchmarkFence measures the fence's cost (migration 0008) on one real
// shard, directly: the fast-path commit (pgshard_commit_cas, whose CAS
// asserts the fence: range lock, two lookups) and the keyed point read
// (Load, whose statement checks it), with the fence on and off side by
// side in one run. The two settings alternate in chunks of operations on
// the same database, connections and executions, so both see the same
// machine; it reports µs per operation of each and the on/off ratios
// (goal ≤ 1.05). Asserts nothing:
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
	setFence := func(on bool) {
		q := `SELECT pgshard_fence_off()`
		if on {
			q = `SELECT pgshard_fence_on()`
		}
		if _, err := s.Pool().Exec(ctx, q); err != nil {
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

	var spent [2][2]time.Duration // [commit, load][off, on]
	var ops [2]int
	b.ResetTimer()
	for done, round := 0, 0; done < b.N; round++ {
		n := min(chunk, b.N-done)
		for k := range 2 {
			on := (round+k)%2 == 0 // alternate which setting goes first
			setFence(on)
			idx := 0
			if on {
				idx = 1
			}
			spent[0][idx] += run(n, commit)
			spent[1][idx] += run(n, load)
		}
		ops[0] += n
		ops[1] += n
		done += n
	}
	b.StopTimer()
	setFence(true)
	for i, what := range []string{"commit", "load"} {
		off := float64(spent[i][0].Microseconds()) / float64(ops[i])
		on := float64(spent[i][1].Microseconds()) / float64(ops[i])
		b.ReportMetric(off, what+"-off-µs/op")
		b.ReportMetric(on, what+"-on-µs/op")
		b.ReportMetric(on/off, what+"-on/off")
		b.Logf("%s: fence off %.1f µs/op, on %.1f µs/op, on/off %.3f (%d ops each, %d workers)", what, off, on, on/off, ops[i], workers)
	}
}
