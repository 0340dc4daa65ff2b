package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/shardmap"
)

// FenceSQLState is the SQLSTATE a shard's fence raises when it refuses a
// key whose bucket it does not own (migration 0008; class PS, which no
// Postgres error uses).
const FenceSQLState = "PS001"

// Execer is what SetFence needs from a connection, a pool or a
// transaction (pgx.Conn, pgxpool.Pool and pgx.Tx all satisfy it).
type Execer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SetFence sets the fence of the shard q reaches from m — the ranges m
// gives the shard (its identity's name) become owned, every other range
// moved with m's owner — and turns it on (pgshard_fence_set, migration
// 0008). A fence set from a newer epoch than m's is refused. Writers in
// flight on a range whose ownership changes finish first. It returns the
// shard's one-line summary.
func SetFence(ctx context.Context, q Execer, m *shardmap.Map) (string, error) {
	los := make([]int32, len(m.Ranges))
	his := make([]int32, len(m.Ranges))
	owners := make([]string, len(m.Ranges))
	for i, r := range m.Ranges {
		los[i], his[i], owners[i] = int32(r.Lo), int32(r.Hi), r.Shard
	}
	var summary string
	err := q.QueryRow(ctx, `SELECT pgshard_fence_set($1::bigint, $2::int[], $3::int[], $4::text[])`,
		int64(m.Epoch), los, his, owners).Scan(&summary)
	if err != nil {
		return "", fmt.Errorf("set the fence from map epoch %d: %w", m.Epoch, err)
	}
	return summary, nil
}

// fenceMigration is the migration that creates the fence.
const fenceMigration = "0008_fence"

// hasFence reports whether ms creates the fence.
func hasFence(ms []Migration) bool {
	for _, m := range ms {
		if m.ID() == fenceMigration {
			return true
		}
	}
	return false
}
