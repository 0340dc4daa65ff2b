package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/pgshard/pgshard/internal/ctxtime"
)

var terminateInfo = kindInfo{
	instant:  true,
	resource: "proc",
	settle:   500 * time.Millisecond,
	params: map[string]paramCheck{
		"wait":  durationParam(0, time.Minute),
		"count": intParam(0, 1000),
	},
	new: func() Fault { return &terminate{} },
}

// terminate is KindTerminate.
type terminate struct{}

func (*terminate) Kind() Kind   { return KindTerminate }
func (*terminate) Needs() Needs { return 0 }

// Inject terminates the workload's busy sessions, polling up to param wait
// for at least one. Evidence: terminated (pid, state of each), count.
func (*terminate) Inject(ctx context.Context, env *Env, shard int, p Params, rng *rand.Rand) (Evidence, error) {
	wait, err := p.duration("wait", 2*time.Second)
	if err != nil {
		return Evidence{}, err
	}
	limit, err := p.int("count", 0)
	if err != nil {
		return Evidence{}, err
	}
	db, err := env.database()
	if err != nil {
		return Evidence{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, wait+adminTimeout)
	defer cancel()
	conn, err := adminConnect(ctx, env, shard)
	if err != nil {
		return Evidence{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	deadline := time.Now().Add(wait)
	terminated := []map[string]any{}
	for {
		busy, err := workloadBackends(ctx, conn, db, false)
		if err != nil {
			return Evidence{}, fmt.Errorf("terminate on %s: list backends: %w", env.shardName(shard), err)
		}
		if limit > 0 && len(busy) > limit {
			rng.Shuffle(len(busy), func(i, j int) { busy[i], busy[j] = busy[j], busy[i] })
			busy = busy[:limit]
		}
		for _, b := range busy {
			var ok bool
			if err := conn.QueryRow(ctx, "SELECT pg_terminate_backend($1)", b.PID).Scan(&ok); err != nil {
				return Evidence{}, fmt.Errorf("terminate on %s: pg_terminate_backend(%d): %w", env.shardName(shard), b.PID, err)
			}
			if ok {
				terminated = append(terminated, map[string]any{"pid": b.PID, "state": b.State})
			}
		}
		if len(terminated) > 0 || !time.Now().Before(deadline) {
			break
		}
		if err := ctxtime.Sleep(ctx, 10*time.Millisecond); err != nil {
			break
		}
	}
	return Evidence{Landed: len(terminated) > 0, Fields: map[string]any{
		"terminated": terminated, "count": len(terminated),
	}}, nil
}

// Heal does nothing: the sessions are gone.
func (*terminate) Heal(context.Context, *Env, int) (Evidence, error) { return Evidence{}, nil }
