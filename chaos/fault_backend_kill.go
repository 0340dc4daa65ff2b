package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/pgshard/pgshard/internal/ctxtime"
)

var backendKillInfo = kindInfo{
	needs:    NeedsProcessControl,
	instant:  true,
	resource: "proc",
	settle:   3 * time.Second,
	new:      func() Fault { return &backendKill{} },
}

// recoveryWait bounds how long a heal waits for a shard to accept
// connections after a crash.
const recoveryWait = 2 * time.Minute

// backendKill is KindBackendKill.
type backendKill struct {
	mu      sync.Mutex
	pid     int
	logPath string
	offset  int64
}

func (*backendKill) Kind() Kind   { return KindBackendKill }
func (*backendKill) Needs() Needs { return backendKillInfo.needs }

// Inject SIGKILLs one client backend of the workload on the shard, chosen
// with rng among the busy ones (active, idle in transaction), else among
// all of the workload's. It checks that the PID is a child of the shard's
// postmaster first. Evidence: pid, state; landed when one was killed.
func (f *backendKill) Inject(ctx context.Context, env *Env, shard int, _ Params, rng *rand.Rand) (Evidence, error) {
	ci, err := env.clusterShard(shard)
	if err != nil {
		return Evidence{}, err
	}
	db, err := env.database()
	if err != nil {
		return Evidence{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	conn, err := adminConnect(ctx, env, shard)
	if err != nil {
		return Evidence{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	cands, err := workloadBackends(ctx, conn, db, false)
	if err == nil && len(cands) == 0 {
		cands, err = workloadBackends(ctx, conn, db, true)
	}
	if err != nil {
		return Evidence{}, fmt.Errorf("backend-kill on %s: list backends: %w", env.shardName(shard), err)
	}
	if len(cands) == 0 {
		return Evidence{Fields: map[string]any{"pid": 0}}, nil
	}
	b := cands[rng.IntN(len(cands))]
	s := env.Cluster.Shard(ci)
	if pp := parentPID(b.PID); pp != s.PID || s.PID == 0 {
		return Evidence{Fields: map[string]any{"pid": 0}}, fmt.Errorf("backend-kill on %s: pid %d is not a child of the postmaster %d (parent %d)", s.Name, b.PID, s.PID, pp)
	}
	f.mu.Lock()
	f.logPath, f.offset = s.LogPath(), fileSize(s.LogPath())
	f.mu.Unlock()
	if err := syscall.Kill(b.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return Evidence{Fields: map[string]any{"pid": 0}}, fmt.Errorf("backend-kill on %s: kill %d: %w", s.Name, b.PID, err)
	}
	f.mu.Lock()
	f.pid = b.PID
	f.mu.Unlock()
	return Evidence{Landed: true, Fields: map[string]any{"pid": b.PID, "state": b.State}}, nil
}

// Heal waits (bounded) until the shard accepts connections again after the
// postmaster's reinitialization. Evidence: pid, recovery (the server log's
// lines since Inject); landed when they show this backend killed by
// signal 9.
func (f *backendKill) Heal(ctx context.Context, env *Env, shard int) (Evidence, error) {
	f.mu.Lock()
	pid, path, off := f.pid, f.logPath, f.offset
	f.mu.Unlock()
	if pid == 0 {
		return Evidence{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, recoveryWait)
	defer cancel()
	killed := "(PID " + strconv.Itoa(pid) + ") was terminated by signal 9"
	// The postmaster notices the death at once; until it has, the shard
	// still accepts connections, so wait for its reaction first.
	waitLog(ctx, path, off, killed, logWait)
	err := waitAccepting(ctx, env, shard)
	if err == nil {
		waitLog(ctx, path, off, "database system is ready to accept connections", logWait)
	}
	lines := logLines(path, off, recoveryPatterns)
	if lines == nil {
		lines = []string{}
	}
	ev := Evidence{Landed: anyContains(lines, killed), Fields: map[string]any{"pid": pid, "recovery": lines}}
	if err != nil {
		return ev, fmt.Errorf("backend-kill: %w", err)
	}
	return ev, nil
}

// logWait bounds a wait for a server log line.
const logWait = 10 * time.Second

// waitLog polls the log from offset until a line contains s, d passes or
// ctx ends; it reports whether the line came.
func waitLog(ctx context.Context, path string, offset int64, s string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if anyContains(logLines(path, offset, []string{s}), s) {
			return true
		}
		if time.Now().After(deadline) || ctxtime.Sleep(ctx, 20*time.Millisecond) != nil {
			return false
		}
	}
}
