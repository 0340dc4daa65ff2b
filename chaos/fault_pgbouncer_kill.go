package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/pgshard/pgshard/cluster"
)

var pgbouncerKillInfo = kindInfo{
	needs:    NeedsProcessControl | NeedsPooler,
	resource: "proc",
	settle:   time.Second,
	new:      func() Fault { return &pgbouncerKill{} },
}

// pgbouncerKill is KindPgBouncerKill.
type pgbouncerKill struct {
	mu     sync.Mutex
	oldPID int
}

func (*pgbouncerKill) Kind() Kind   { return KindPgBouncerKill }
func (*pgbouncerKill) Needs() Needs { return pgbouncerKillInfo.needs }

// Inject SIGKILLs the shard's PgBouncer. Evidence: old_pid.
func (f *pgbouncerKill) Inject(ctx context.Context, env *Env, shard int, _ Params, _ *rand.Rand) (Evidence, error) {
	ci, err := env.clusterShard(shard)
	if err != nil {
		return Evidence{}, err
	}
	old := env.Cluster.Shard(ci).PoolerPID
	f.mu.Lock()
	f.oldPID = old
	f.mu.Unlock()
	// Held down until Heal: the watch that restarts a PgBouncer that
	// exited on its own (pooler_watch.go) leaves this one alone.
	if err := env.holdPooler(ci, func() error { return env.Cluster.StopPooler(ctx, ci, cluster.Kill) }); err != nil {
		return Evidence{Fields: map[string]any{"old_pid": old}}, fmt.Errorf("pgbouncer-kill: %w", err)
	}
	return Evidence{Landed: old != 0, Fields: map[string]any{"old_pid": old}}, nil
}

// Heal starts the PgBouncer again and waits until it serves. Evidence:
// old_pid, new_pid.
func (f *pgbouncerKill) Heal(ctx context.Context, env *Env, shard int) (Evidence, error) {
	ci, err := env.clusterShard(shard)
	if err != nil {
		return Evidence{}, err
	}
	f.mu.Lock()
	old := f.oldPID
	f.mu.Unlock()
	err = env.releasePooler(ci, func() error { return env.Cluster.StartPooler(ctx, ci) })
	newPID := env.Cluster.Shard(ci).PoolerPID
	ev := Evidence{Landed: old != 0 && newPID != 0 && newPID != old, Fields: map[string]any{"old_pid": old, "new_pid": newPID}}
	if err != nil {
		return ev, fmt.Errorf("pgbouncer-kill: restart: %w", err)
	}
	return ev, nil
}
