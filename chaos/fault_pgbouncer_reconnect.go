package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

var pgbouncerReconnectInfo = kindInfo{
	needs:    NeedsPooler,
	instant:  true,
	resource: "proc",
	settle:   200 * time.Millisecond,
	new:      func() Fault { return &pgbouncerReconnect{} },
}

// pgbouncerReconnect is KindPgBouncerReconnect.
type pgbouncerReconnect struct{}

func (*pgbouncerReconnect) Kind() Kind   { return KindPgBouncerReconnect }
func (*pgbouncerReconnect) Needs() Needs { return pgbouncerReconnectInfo.needs }

// Inject sends RECONNECT for the workload database. Evidence:
// reconnected.
func (*pgbouncerReconnect) Inject(ctx context.Context, env *Env, shard int, _ Params, _ *rand.Rand) (Evidence, error) {
	db, err := env.database()
	if err != nil {
		return Evidence{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	if _, err := consoleRun(ctx, env, shard, "RECONNECT "+consoleIdent(db)); err != nil {
		return Evidence{Fields: map[string]any{"reconnected": false}}, fmt.Errorf("pgbouncer-reconnect: %w", err)
	}
	return Evidence{Landed: true, Fields: map[string]any{"reconnected": true}}, nil
}

// Heal does nothing.
func (*pgbouncerReconnect) Heal(context.Context, *Env, int) (Evidence, error) { return Evidence{}, nil }
