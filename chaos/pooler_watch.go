package chaos

import (
	"context"
	"strings"
	"sync"
	"time"
)

// PgBouncer 1.18 can exit on its own under the faults a run makes: a
// server connection that gets data while PgBouncer is still sending a
// cancel request for it ends the process with "FATAL … server_proto:
// server in bad state: 11" (pgbouncer/pgbouncer#822, fixed in 1.21 by
// #927; pgx sends a CancelRequest whenever it closes a connection
// interrupted mid-query, which op timeouts, resets and terminations
// cause all the time). In production a supervisor (systemd's
// Restart=on-failure) starts it again; nothing did here, and a CI run's
// shard stayed behind a dead PgBouncer for the rest of its load (every
// connection reset, a mutant run with 2,647 commits in 60 s and none of
// the timers its mutant breaks: missed, VACUOUS). The watch below is that
// supervisor: while the faults run, a PgBouncer that exited without a
// pgbouncer-kill fault holding it down is started again and the run's
// log says so, with PgBouncer's own last FATAL line. The invariants never
// depended on it — a dead PgBouncer only fails operations — but the
// run's coverage did.

// poolerWatchEvery is how often the watch looks at each PgBouncer.
const poolerWatchEvery = 200 * time.Millisecond

// poolerGuard serializes what stops and starts the PgBouncers: the
// pgbouncer-kill fault (its PgBouncer held while down by design) and the
// watch. One lock for every shard: a restart is rare and short.
type poolerGuard struct {
	mu   sync.Mutex
	held map[int]bool // by cluster shard index
}

// newPoolerGuard is a guard with no PgBouncer held.
func newPoolerGuard() *poolerGuard { return &poolerGuard{held: map[int]bool{}} }

// watchPoolers runs until ctx is done: every poolerWatchEvery, each
// shard's PgBouncer that is not running and not held down by a fault is
// started again. It returns how many it restarted.
func watchPoolers(ctx context.Context, env *Env) int {
	if env == nil || env.poolers == nil || env.Cluster == nil || !env.Cluster.Spec.PgBouncer ||
		env.Cluster.Provider != "local" || env.Map == nil {
		return 0
	}
	t := time.NewTicker(poolerWatchEvery)
	defer t.Stop()
	restarts := 0
	for {
		select {
		case <-ctx.Done():
			return restarts
		case <-t.C:
		}
		restarts += lookAtPoolers(ctx, env)
	}
}

// lookAtPoolers is one look of the watch at every shard's PgBouncer; it
// returns how many it started again.
func lookAtPoolers(ctx context.Context, env *Env) int {
	n := 0
	for i := range env.Map.Shards {
		if ci, err := env.clusterShard(i); err == nil && ctx.Err() == nil && env.restartPoolerIfDead(ctx, i, ci) {
			n++
		}
	}
	return n
}

// restartPoolerIfDead starts shard i's (cluster shard ci's) PgBouncer again
// when it exited and no fault holds it down; it reports whether it did.
func (env *Env) restartPoolerIfDead(ctx context.Context, i, ci int) bool {
	g := env.poolers
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held[ci] || env.Cluster.PoolerRunning(ci) {
		return false
	}
	sh := env.Cluster.Shard(ci)
	env.logf("chaos: %s's PgBouncer (pid %d) exited on its own (%s): starting it again, as its supervisor would",
		env.shardName(i), sh.PoolerPID, lastFatal(sh.PoolerLogPath()))
	// Bounded by the cluster's start timeout; ctx ends it with the faults.
	if err := env.Cluster.StartPooler(ctx, ci); err != nil {
		env.logf("chaos: %s's PgBouncer: restart failed (the next look tries again): %v", env.shardName(i), err)
		return false
	}
	return true
}

// holdPooler marks cluster shard ci's PgBouncer as down by a fault's
// design (the watch leaves it alone) and runs stop under the guard.
func (env *Env) holdPooler(ci int, stop func() error) error { return env.guardPooler(ci, true, stop) }

// releasePooler runs start under the guard and hands cluster shard ci's
// PgBouncer back to the watch.
func (env *Env) releasePooler(ci int, start func() error) error {
	return env.guardPooler(ci, false, start)
}

// guardPooler marks cluster shard ci's PgBouncer held (or not) and runs f,
// both under the guard; without a guard (outside a run) it only runs f.
func (env *Env) guardPooler(ci int, held bool, f func() error) error {
	g := env.poolers
	if g == nil {
		return f()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if held {
		g.held[ci] = true
	} else {
		delete(g.held, ci)
	}
	return f()
}

// lastFatal returns the last FATAL line in the last 16 KiB of PgBouncer's
// log at path, or a note that there is none.
func lastFatal(path string) string {
	if path == "" {
		return "no log"
	}
	lines := logLines(path, max(0, fileSize(path)-16<<10), []string{"FATAL"})
	if len(lines) == 0 {
		return "no FATAL line in its log"
	}
	return "its log: " + strings.TrimSpace(lines[len(lines)-1])
}
