package store_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/store"
)

// Benchmarks on the live cluster (go test -bench . ./store): the fast
// path, the pipelined complex commit and the seed's statement-by-statement
// complex commit, directly and through PgBouncer, at 1 and 16 goroutines.
// Each reports rt/op, round trips per commit counted on the wire.
// BenchmarkCommitComplexRatio runs the two complex paths interleaved, so
// that both see the same machine, and reports their ratio.

const benchTraceMax = 100

// benchEnv is one migrated database reached one way.
type benchEnv struct {
	mode string
	s    *store.Store
}

func benchEnvs(b *testing.B) []benchEnv {
	b.Helper()
	var envs []benchEnv
	for _, mode := range modes {
		d := freshDB(b, mode)
		s, err := store.Open(context.Background(), d.dsn(), store.Options{
			MaxConns: 16, TraceMax: benchTraceMax, BehindPooler: mode == "pgbouncer", ConnectAttempts: 3,
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		envs = append(envs, benchEnv{mode, s})
	}
	return envs
}

// commitFunc commits the next version of e.
type commitFunc func(ctx context.Context, s *store.Store, e *store.Execution) error

func fastCommit(ctx context.Context, s *store.Store, e *store.Execution) error {
	return s.Commit(ctx, e, nil, fmt.Sprintf("ev%d", e.Version), nil, nil, nil)
}

func pipelinedCommit(ctx context.Context, s *store.Store, e *store.Execution) error {
	st := newTypicalStep(e.ID, e.Version+1)
	return s.Commit(ctx, e, st.emits, fmt.Sprintf("ev%d", e.Version), st.timers, nil, st.trace)
}

func statementsComplexCommit(ctx context.Context, s *store.Store, e *store.Execution) error {
	st := newTypicalStep(e.ID, e.Version+1)
	return statementsCommit(ctx, s, e, st.emits, fmt.Sprintf("ev%d", e.Version), st.timers, st.trace, benchTraceMax)
}

func seedComplexCommit(ctx context.Context, s *store.Store, e *store.Execution) error {
	st := newTypicalStep(e.ID, e.Version+1)
	return seedCommit(ctx, s, e, st.emits, fmt.Sprintf("ev%d", e.Version), st.timers, nil, st.trace, benchTraceMax)
}

// runCommits runs b.N commits spread over g goroutines, each advancing its
// own execution (no conflicts: the benchmark measures commit cost, not
// contention), and reports round trips per commit.
func runCommits(b *testing.B, s *store.Store, g int, commit commitFunc) {
	ctx := context.Background()
	exes := make([]*store.Execution, g)
	for i := range exes {
		exes[i] = &store.Execution{ID: newID(b), DefinitionID: "bench", Status: "running"}
		if err := s.Save(ctx, exes[i]); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	rt0 := s.Stats().RoundTrips
	b.ResetTimer()
	var eg errgroup.Group
	for w := 0; w < g; w++ {
		eg.Go(func() error {
			for next.Add(1) <= int64(b.N) {
				if err := commit(ctx, s, exes[w]); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(s.Stats().RoundTrips-rt0)/float64(b.N), "rt/op")
}

func benchCommits(b *testing.B, commit commitFunc) {
	for _, env := range benchEnvs(b) {
		for _, g := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/g=%d", env.mode, g), func(b *testing.B) { runCommits(b, env.s, g, commit) })
		}
	}
}

// BenchmarkCommitFast: state-only commits (+ dedupe record), one statement.
func BenchmarkCommitFast(b *testing.B) { benchCommits(b, fastCommit) }

// BenchmarkCommitComplexPipelined: two emits, a dedupe record, a timer and
// a trace entry in one round trip, the store's way: one pgshard_commit
// call (with its optional statement-timeout prefix, pipelined).
func BenchmarkCommitComplexPipelined(b *testing.B) { benchCommits(b, pipelinedCommit) }

// BenchmarkCommitComplexStatements: the same commit in one round trip as a
// pipeline of one unnamed statement per side effect (the design the store
// did not take; see the package documentation).
func BenchmarkCommitComplexStatements(b *testing.B) { benchCommits(b, statementsComplexCommit) }

// BenchmarkCommitComplexSeed: the same commit the seed's way, one round
// trip per statement.
func BenchmarkCommitComplexSeed(b *testing.B) { benchCommits(b, seedComplexCommit) }

// BenchmarkCommitComplexRatio alternates the seed's commit, the pipelined
// statements and the store's commit, all of the same content on the same
// pool, g goroutines each running all three in rotating order, and reports
// each path's mean latency and the speedups over the seed — measured side
// by side, so that the machine's noise hits all three alike.
func BenchmarkCommitComplexRatio(b *testing.B) {
	paths := []struct {
		name   string
		commit commitFunc
	}{{"seed", seedComplexCommit}, {"statements", statementsComplexCommit}, {"store", pipelinedCommit}}
	for _, env := range benchEnvs(b) {
		for _, g := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/g=%d", env.mode, g), func(b *testing.B) {
				ctx := context.Background()
				ns := make([]atomic.Int64, len(paths))
				var next atomic.Int64
				b.ResetTimer()
				var eg errgroup.Group
				for w := 0; w < g; w++ {
					eg.Go(func() error {
						e := &store.Execution{ID: newID(b), DefinitionID: "bench"}
						if err := env.s.Save(ctx, e); err != nil {
							return err
						}
						for i := 0; next.Add(1) <= int64(b.N); i++ {
							for k := range paths {
								// Rotate the order, so that no path always
								// runs first on a just-used connection.
								p := (i + k) % len(paths)
								start := time.Now()
								if err := paths[p].commit(ctx, env.s, e); err != nil {
									return err
								}
								ns[p].Add(int64(time.Since(start)))
							}
						}
						return nil
					})
				}
				if err := eg.Wait(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				mean := make([]float64, len(paths))
				for p := range paths {
					mean[p] = float64(ns[p].Load()) / float64(b.N)
					b.ReportMetric(mean[p], paths[p].name+"-ns/commit")
				}
				b.ReportMetric(mean[0]/mean[2], "speedup-store/seed")
				b.ReportMetric(mean[0]/mean[1], "speedup-statements/seed")
			})
		}
	}
}
