package reshard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgshard/pgshard/shardmap"
)

// fenceLockClass is the class of the fence's range locks (migration 0008:
// pg_advisory_xact_lock(1885824627, lo), 'pgfs').
const fenceLockClass = 1885824627

// table is one keyed table of the store (ARCHITECTURE.md §1/§2): key is
// the SQL expression of its rows' key (the execution id whose bucket
// places the row); cols are the columns copied. spawns and outbox leave
// out their seq: the destination numbers a copied row from its own
// sequence, so that the seq names the shard holding the row.
type table struct {
	name string
	key  string
	cols []string // seq tables: all TEXT
	seq  bool     // numbered afresh on the destination (pgshard_move_seqs maps them)
}

var tables = []table{
	{"executions", "id", []string{"id", "definition_id", "data", "version"}, false},
	{"processed_events", "execution_id", []string{"execution_id", "event_id"}, false},
	{"timers", "execution_id", []string{"execution_id", "path", "fire_at"}, false},
	{"trace", "execution_id", []string{"execution_id", "idx", "entry"}, false},
	{"spawns", "parent_id", []string{"parent_id", "child_id", "root_path", "context"}, true},
	{"outbox", "pgshard_move_outbox_from(event)", []string{"target_id", "event"}, true},
}

// shard is the mover's connection to one shard (its direct DSN).
type shard struct {
	name string
	pool *pgxpool.Pool
}

func openShard(ctx context.Context, s shardmap.Shard) (*shard, error) {
	cfg, err := pgxpool.ParseConfig(s.DSN)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", s.Name, err)
	}
	cfg.MaxConns = 6
	cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.ConnConfig.RuntimeParams["application_name"] = "pgshard reshard"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", s.Name, err)
	}
	return &shard{name: s.Name, pool: pool}, nil
}

// setFence sets buckets lo..hi of the shard's fence (pgshard_move_fence,
// migration 0009), provided they are in one of the states from.
func (s *shard) setFence(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, lo, hi int, state, owner string, epoch uint64, from []string, lock bool) error {
	if q == nil {
		q = s.pool
	}
	var summary string
	err := q.QueryRow(ctx, `SELECT pgshard_move_fence($1::int, $2::int, $3::text, $4::text, $5::bigint, $6::text[], $7::bool)`,
		lo, hi, state, owner, int64(epoch), from, lock).Scan(&summary)
	if err != nil {
		return fmt.Errorf("shard %s: fence %d-%d → %s: %w", s.name, lo, hi, state, err)
	}
	return nil
}

// fenceState returns the state of the fence row that holds bucket lo.
func (s *shard) fenceState(ctx context.Context, lo int) (string, error) {
	var st string
	err := s.pool.QueryRow(ctx, `SELECT state FROM pgshard_fence WHERE lo <= $1::int ORDER BY lo DESC LIMIT 1`, lo).Scan(&st)
	if err != nil {
		return "", fmt.Errorf("shard %s: read fence at bucket %d: %w", s.name, lo, err)
	}
	return st, nil
}

// inRange is the WHERE condition "t's key is in buckets $1..$2" ($3 is
// the bucket count).
func inRange(t table) string {
	return fmt.Sprintf("pgshard_fence_bucket(%s, $3::int) BETWEEN $1::int AND $2::int", t.key)
}

// ofKeys is the WHERE condition "t's key is one of $1".
func ofKeys(t table) string { return fmt.Sprintf("%s = ANY($1::text[])", t.key) }

// copyTable deletes on dst the rows of t matching where and copies those
// of src (read in its snapshot) there. It returns the rows copied.
func copyTable(ctx context.Context, src, dst pgx.Tx, t table, where string, args ...any) (int64, error) {
	if _, err := dst.Exec(ctx, "DELETE FROM "+t.name+" WHERE "+where, args...); err != nil {
		return 0, fmt.Errorf("clear %s on the destination: %w", t.name, err)
	}
	rows, err := src.Query(ctx, "SELECT "+strings.Join(t.cols, ", ")+" FROM "+t.name+" WHERE "+where, args...)
	if err != nil {
		return 0, fmt.Errorf("read %s on the source: %w", t.name, err)
	}
	defer rows.Close()
	n, err := dst.CopyFrom(ctx, pgx.Identifier{t.name}, t.cols, pgx.CopyFromFunc(func() ([]any, error) {
		if !rows.Next() {
			return nil, rows.Err()
		}
		return rows.Values()
	}))
	if err != nil {
		return 0, fmt.Errorf("copy %s: %w", t.name, err)
	}
	rows.Close()
	return n, rows.Err()
}

// copySeqTable replaces on dst the copies (made by move) of t's source
// rows matching where — those with seq in srcSeqs, or all of the move's
// when srcSeqs is nil — by fresh copies of src's rows matching where, each
// numbered from dst's sequence and mapped in pgshard_move_seqs.
func copySeqTable(ctx context.Context, src, dst pgx.Tx, t table, move int64, srcSeqs []int64, where string, args ...any) (int64, error) {
	var err error
	if srcSeqs == nil {
		_, err = dst.Exec(ctx, `WITH m AS (DELETE FROM pgshard_move_seqs WHERE move_id = $1::bigint AND tbl = $2::text RETURNING dst_seq)
			DELETE FROM `+t.name+` WHERE seq IN (SELECT dst_seq FROM m)`, move, t.name)
	} else {
		_, err = dst.Exec(ctx, `WITH m AS (DELETE FROM pgshard_move_seqs WHERE move_id = $1::bigint AND tbl = $2::text AND src_seq = ANY($3::bigint[]) RETURNING dst_seq)
			DELETE FROM `+t.name+` WHERE seq IN (SELECT dst_seq FROM m)`, move, t.name, srcSeqs)
	}
	if err != nil {
		return 0, fmt.Errorf("clear %s copies on the destination: %w", t.name, err)
	}
	rows, err := src.Query(ctx, "SELECT seq, "+strings.Join(t.cols, ", ")+" FROM "+t.name+" WHERE "+where, args...)
	if err != nil {
		return 0, fmt.Errorf("read %s on the source: %w", t.name, err)
	}
	seqs := []int64{}
	cols := make([][]*string, len(t.cols))
	for rows.Next() {
		var seq int64
		vals := make([]*string, len(t.cols))
		dest := []any{&seq}
		for i := range vals {
			dest = append(dest, &vals[i])
		}
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return 0, fmt.Errorf("read %s on the source: %w", t.name, err)
		}
		seqs = append(seqs, seq)
		for i := range vals {
			cols[i] = append(cols[i], vals[i])
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read %s on the source: %w", t.name, err)
	}
	if len(seqs) == 0 {
		return 0, nil
	}
	params := []string{"$3::bigint[]"}
	names := []string{"src_seq"}
	args2 := []any{move, t.name, seqs}
	for i, c := range t.cols {
		params = append(params, fmt.Sprintf("$%d::text[]", i+4))
		names = append(names, c)
		args2 = append(args2, cols[i])
	}
	cl := strings.Join(t.cols, ", ")
	_, err = dst.Exec(ctx, `WITH s AS (SELECT * FROM unnest(`+strings.Join(params, ", ")+`) AS s(`+strings.Join(names, ", ")+`)),
		n AS MATERIALIZED (SELECT s.*, nextval(pg_get_serial_sequence('`+t.name+`', 'seq')) AS dst_seq FROM s),
		ins AS (INSERT INTO `+t.name+` (seq, `+cl+`) SELECT dst_seq, `+cl+` FROM n)
		INSERT INTO pgshard_move_seqs (move_id, tbl, src_seq, dst_seq) SELECT $1::bigint, $2::text, src_seq, dst_seq FROM n`, args2...)
	if err != nil {
		return 0, fmt.Errorf("copy %s: %w", t.name, err)
	}
	return int64(len(seqs)), nil
}

// pair runs f with a REPEATABLE READ read-only transaction on src (one
// snapshot for every table) and a transaction on dst, committing dst if
// f succeeds.
func pair(ctx context.Context, src, dst *shard, f func(stx, dtx pgx.Tx) error) error {
	stx, err := src.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("shard %s: %w", src.name, err)
	}
	defer func() { _ = stx.Rollback(context.WithoutCancel(ctx)) }()
	dtx, err := dst.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("shard %s: %w", dst.name, err)
	}
	defer func() { _ = dtx.Rollback(context.WithoutCancel(ctx)) }()
	if err := f(stx, dtx); err != nil {
		return err
	}
	if err := dtx.Commit(ctx); err != nil {
		return fmt.Errorf("shard %s: commit the copy: %w", dst.name, err)
	}
	return nil
}

// copyRange copies every row of buckets lo..hi from src to dst, from one
// snapshot of src, replacing what dst held of them (for outbox and
// spawns: the copies move made). It returns the rows copied.
func copyRange(ctx context.Context, src, dst *shard, move int64, lo, hi, buckets int) (int64, error) {
	var total int64
	err := pair(ctx, src, dst, func(stx, dtx pgx.Tx) error {
		for _, t := range tables {
			var n int64
			var err error
			if t.seq {
				n, err = copySeqTable(ctx, stx, dtx, t, move, nil, inRange(t), lo, hi, buckets)
			} else {
				n, err = copyTable(ctx, stx, dtx, t, inRange(t), lo, hi, buckets)
			}
			if err != nil {
				return err
			}
			total += n
		}
		return nil
	})
	return total, err
}

// catchUp replays up to batch recorded changes of buckets lo..hi: it
// reads them and the rows they name in one snapshot of src — every row of
// a recorded key, and for outbox and spawns the recorded rows by seq (an
// index probe each: the replay costs what changed, not the range's size)
// — replaces those on dst, then deletes the records it replayed. It
// returns the records replayed (0: none were left) and the rows copied.
func catchUp(ctx context.Context, src, dst *shard, move int64, lo, hi, batch int) (int, int64, error) {
	var ids []int64
	var copied int64
	err := pair(ctx, src, dst, func(stx, dtx pgx.Tx) error {
		rows, err := stx.Query(ctx, `SELECT id, key, coalesce(tbl, ''), coalesce(seq, 0) FROM pgshard_move_changes
			WHERE bucket BETWEEN $1::int AND $2::int ORDER BY id LIMIT $3::int`, lo, hi, batch)
		if err != nil {
			return fmt.Errorf("read the changes on %s: %w", src.name, err)
		}
		seen := map[string]bool{}
		var keys []string
		seqs := map[string][]int64{}
		for rows.Next() {
			var id, seq int64
			var k, tbl string
			if err := rows.Scan(&id, &k, &tbl, &seq); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
			if tbl != "" {
				seqs[tbl] = append(seqs[tbl], seq)
			} else if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, t := range tables {
			var n int64
			var err error
			switch {
			case t.seq && len(seqs[t.name]) > 0:
				n, err = copySeqTable(ctx, stx, dtx, t, move, seqs[t.name], "seq = ANY($1::bigint[])", seqs[t.name])
			case !t.seq && len(keys) > 0:
				n, err = copyTable(ctx, stx, dtx, t, ofKeys(t), keys)
			}
			if err != nil {
				return err
			}
			copied += n
		}
		return nil
	})
	if err != nil || len(ids) == 0 {
		return 0, copied, err
	}
	if _, err := src.pool.Exec(ctx, `DELETE FROM pgshard_move_changes WHERE id = ANY($1::bigint[])`, ids); err != nil {
		return 0, copied, fmt.Errorf("shard %s: drop the changes replayed: %w", src.name, err)
	}
	return len(ids), copied, nil
}

// dropSeqMap deletes move's seq map on dst (its copies stay).
func dropSeqMap(ctx context.Context, dst *shard, move int64) error {
	if _, err := dst.pool.Exec(ctx, `DELETE FROM pgshard_move_seqs WHERE move_id = $1::bigint`, move); err != nil {
		return fmt.Errorf("shard %s: drop the seq map of move %d: %w", dst.name, move, err)
	}
	return nil
}

// pending counts the recorded changes of buckets lo..hi not replayed yet.
func pending(ctx context.Context, src *shard, lo, hi int) (int64, error) {
	var n int64
	err := src.pool.QueryRow(ctx, `SELECT count(*) FROM pgshard_move_changes WHERE bucket BETWEEN $1::int AND $2::int`, lo, hi).Scan(&n)
	return n, err
}

// deleteRange deletes every row of buckets lo..hi on s.
func deleteRange(ctx context.Context, s *shard, lo, hi, buckets int) (int64, error) {
	var total int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, t := range tables {
			tag, err := tx.Exec(ctx, "DELETE FROM "+t.name+" WHERE "+inRange(t), lo, hi, buckets)
			if err != nil {
				return fmt.Errorf("delete %s: %w", t.name, err)
			}
			total += tag.RowsAffected()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("shard %s: delete buckets %d-%d: %w", s.name, lo, hi, err)
	}
	return total, nil
}

// withLockTimeout runs f in a transaction on s with lock_timeout d (SET
// LOCAL: nothing outlives the transaction).
func withLockTimeout(ctx context.Context, s *shard, d time.Duration, f func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1::text, true)`, fmt.Sprintf("%dms", max(1, d.Milliseconds()))); err != nil {
			return err
		}
		return f(tx)
	})
}

// isLockTimeout reports whether err is Postgres's lock_not_available
// (55P03), which lock_timeout raises.
func isLockTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "55P03"
}
