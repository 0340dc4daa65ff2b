package chaos

import (
	"bytes"
	"context"
	"io"
	"os"
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

// poolerGuard serializes what stops and starts one shard's PgBouncer:
// the pgbouncer-kill fault (held while its PgBouncer is down by design)
// and the watch.
type poolerGuard struct {
	mu   sync.Mutex
	held map[int]bool // by cluster shard index
	// Restarts counts the watch's restarts (read after the watch ended).
	restarts int
}

// lock takes the guard of cluster shard ci; the returned func releases it.
func (g *poolerGuard) lock() func() {
	g.mu.Lock()
	return g.mu.Unlock
}

// watchPoolers runs until ctx is done: every poolerWatchEvery, each
// shard's PgBouncer that is not running and not held down by a fault is
// started again. It returns how many it restarted.
func watchPoolers(ctx context.Context, env *Env) int {
	if env == nil || env.Cluster == nil || !env.Cluster.Spec.PgBouncer || env.Cluster.Provider != "local" || env.Map == nil {
		return 0
	}
	g := env.poolers
	if g == nil {
		return 0
	}
	t := time.NewTicker(poolerWatchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			unlock := g.lock()
			n := g.restarts
			unlock()
			return n
		case <-t.C:
		}
		for i := range env.Map.Shards {
			if ctx.Err() != nil {
				break
			}
			ci, err := env.clusterShard(i)
			if err != nil {
				continue
			}
			env.restartPoolerIfDead(ctx, g, i, ci)
		}
	}
}

// restartPoolerIfDead starts shard i's (cluster shard ci's) PgBouncer again
// when it exited and no fault holds it down.
func (env *Env) restartPoolerIfDead(ctx context.Context, g *poolerGuard, i, ci int) {
	unlock := g.lock()
	defer unlock()
	if g.held[ci] || env.Cluster.PoolerRunning(ci) {
		return
	}
	sh := env.Cluster.Shard(ci)
	env.logf("chaos: %s's PgBouncer (pid %d) exited on its own (%s): starting it again, as its supervisor would",
		env.shardName(i), sh.PoolerPID, lastFatal(sh.PoolerLogPath()))
	// Bounded by the cluster's start timeout; ctx ends it with the faults.
	if err := env.Cluster.StartPooler(ctx, ci); err != nil {
		env.logf("chaos: %s's PgBouncer: restart failed (the next look tries again): %v", env.shardName(i), err)
		return
	}
	g.restarts++
}

// newPoolerGuard is a guard with no PgBouncer held.
func newPoolerGuard() *poolerGuard { return &poolerGuard{held: map[int]bool{}} }

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
	unlock := g.lock()
	defer unlock()
	if held {
		g.held[ci] = true
	} else {
		delete(g.held, ci)
	}
	return f()
}

// lastFatal returns the last line of PgBouncer's log at path holding
// "FATAL" (read from its last 16 KiB), or a note that there is none.
func lastFatal(path string) string {
	if path == "" {
		return "no log"
	}
	f, err := os.Open(path)
	if err != nil {
		return "log: " + err.Error()
	}
	defer f.Close()
	const tail = 16 << 10
	if st, err := f.Stat(); err == nil && st.Size() > tail {
		if _, err := f.Seek(st.Size()-tail, io.SeekStart); err != nil {
			return "log: " + err.Error()
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, tail))
	if err != nil {
		return "log: " + err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	for j := len(lines) - 1; j >= 0; j-- {
		if bytes.Contains(lines[j], []byte("FATAL")) {
			return "its log: " + string(bytes.TrimSpace(lines[j]))
		}
	}
	return "no FATAL line in its log"
}
