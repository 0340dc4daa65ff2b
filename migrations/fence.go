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
//
// A shard in the middle of a move (a range incoming or frozen, or a change
// capture running: the mover's states, migration 0009) is refused: setting
// its fence from a map would undo the move's fence states under the mover
// (a frozen source serving writes its last catch-up misses). The error
// says to finish or roll back the move first.
func SetFence(ctx context.Context, q Execer, m *shardmap.Map) (string, error) {
	if err := refuseMidMove(ctx, q); err != nil {
		return "", err
	}
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

// MidMoveError means a shard has a move under way: SetFence refuses it.
type MidMoveError struct {
	Shard  string // the shard's identity name
	Ranges string // "lo-hi state, ..." of the ranges incoming or frozen
	Moves  string // the move ids with a change capture running on it
}

func (e *MidMoveError) Error() string {
	what := e.Ranges
	if e.Moves != "" {
		if what != "" {
			what += "; "
		}
		what += "change capture for move " + e.Moves
	}
	return fmt.Sprintf("shard %q has a bucket-range move under way (%s): finish it with `pgshard reshard apply` or roll it back with `pgshard reshard abort` before setting its fence from a map", e.Shard, what)
}

// refuseMidMove returns a *MidMoveError when the shard q reaches has a
// range incoming or frozen or a change capture running (its table exists
// from migration 0009 on).
func refuseMidMove(ctx context.Context, q Execer) error {
	var e MidMoveError
	var capture bool
	err := q.QueryRow(ctx, `SELECT (SELECT shard_name FROM pgshard_identity),
       coalesce((SELECT string_agg(lo || '-' || hi || ' ' || state, ', ' ORDER BY lo)
                 FROM pgshard_fence WHERE state IN ('incoming', 'frozen')), ''),
       to_regclass('pgshard_move_capture') IS NOT NULL`).Scan(&e.Shard, &e.Ranges, &capture)
	if err == nil && capture {
		err = q.QueryRow(ctx, `SELECT coalesce(string_agg(move_id::text, ', ' ORDER BY move_id), '')
FROM pgshard_move_capture`).Scan(&e.Moves)
	}
	if err != nil {
		return fmt.Errorf("read the shard's move state: %w", err)
	}
	if e.Ranges != "" || e.Moves != "" {
		return &e
	}
	return nil
}
