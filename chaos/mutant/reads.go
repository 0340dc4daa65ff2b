package mutant

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/pgshard/pgshard/store"
)

// setTimeoutSQL is SET LOCAL statement_timeout taking a parameter; its
// effect ends with the transaction (no session state).
const setTimeoutSQL = `SELECT set_config('statement_timeout', $1::text, true)`

// query runs one statement on sh in its own (implicit) transaction, after
// the statement timeout when one is set, and calls scan for each row.
func (s *refStore) query(ctx context.Context, sh *shard, sql string, args []any, scan func(pgx.Rows) error) error {
	b := &pgx.Batch{}
	if s.timeout != "" {
		b.Queue(setTimeoutSQL, s.timeout)
	}
	b.Queue(sql, args...)
	ctx, done := s.watch(ctx, sh)
	br := sh.pool.SendBatch(ctx, b)
	err := func() error {
		if s.timeout != "" {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return onShard(sh, done(err))
}

// exec runs one statement on sh in its own transaction and returns the
// rows it affected.
func (s *refStore) exec(ctx context.Context, sh *shard, sql string, args ...any) (int64, error) {
	var n int64
	b := &pgx.Batch{}
	if s.timeout != "" {
		b.Queue(setTimeoutSQL, s.timeout)
	}
	b.Queue(sql, args...)
	ctx, done := s.watch(ctx, sh)
	br := sh.pool.SendBatch(ctx, b)
	err := func() error {
		if s.timeout != "" {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		tag, err := br.Exec()
		n = tag.RowsAffected()
		return err
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return n, onShard(sh, done(err))
}

// decode builds an Execution from a row, the columns winning over the
// document (as the production store does).
func decode(id, def string, version int, data []byte) (*store.Execution, error) {
	var e store.Execution
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("execution %s: stored data: %w", id, err)
	}
	e.ID, e.DefinitionID, e.Version = id, def, version
	return &e, nil
}

// Load returns execution id, or an error matching store.ErrNotFound.
func (s *refStore) Load(ctx context.Context, id string) (*store.Execution, error) {
	exe, _, err := s.load(ctx, id, "")
	if err != nil {
		return nil, fmt.Errorf("load execution %s: %w", id, err)
	}
	return exe, nil
}

// LoadForEvent returns execution id and whether it processed eventID, in
// one query; an absent execution is an error matching store.ErrNotFound.
func (s *refStore) LoadForEvent(ctx context.Context, id, eventID string) (*store.Execution, bool, error) {
	exe, done, err := s.load(ctx, id, eventID)
	if err != nil {
		return nil, false, fmt.Errorf("load execution %s for event %s: %w", id, eventID, err)
	}
	return exe, done, nil
}

func (s *refStore) load(ctx context.Context, id, eventID string) (*store.Execution, bool, error) {
	var exe *store.Execution
	var done bool
	err := s.query(ctx, s.forKey(id), `SELECT e.definition_id, e.version, e.data,
       EXISTS (SELECT 1 FROM processed_events p WHERE p.execution_id = e.id AND p.event_id = $2::text)
FROM executions e WHERE e.id = $1::text`, []any{id, eventID}, func(r pgx.Rows) error {
		var def string
		var version int
		var data []byte
		if err := r.Scan(&def, &version, &data, &done); err != nil {
			return err
		}
		var err error
		exe, err = decode(id, def, version, data)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	if exe == nil {
		return nil, false, store.ErrNotFound
	}
	return exe, done, nil
}

// IsProcessed reports whether execution id processed eventID.
func (s *refStore) IsProcessed(ctx context.Context, id, eventID string) (bool, error) {
	var ok bool
	err := s.query(ctx, s.forKey(id), `SELECT EXISTS (SELECT 1 FROM processed_events WHERE execution_id = $1::text AND event_id = $2::text)`,
		[]any{id, eventID}, func(r pgx.Rows) error { return r.Scan(&ok) })
	if err != nil {
		return false, fmt.Errorf("is event %s processed by %s: %w", eventID, id, err)
	}
	return ok, nil
}

// ReadTrace returns execution id's trace ring, oldest first.
func (s *refStore) ReadTrace(ctx context.Context, id string) ([]store.TraceEntry, error) {
	var out []store.TraceEntry
	err := s.query(ctx, s.forKey(id), `SELECT idx, entry FROM trace WHERE execution_id = $1::text ORDER BY idx`, []any{id},
		func(r pgx.Rows) error {
			var t store.TraceEntry
			var e []byte
			if err := r.Scan(&t.Index, &e); err != nil {
				return err
			}
			t.Entry = e
			out = append(out, t)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("read trace of %s: %w", id, err)
	}
	return out, nil
}

// limitArg is a LIMIT parameter: NULL (none) for limit <= 0.
func limitArg(limit int) any {
	if limit <= 0 {
		return nil
	}
	return int64(limit)
}

// fanOut runs read on every shard concurrently. Any shard's failure fails
// the whole read (never a partial answer), naming the shards that failed.
func fanOut[T any](ctx context.Context, s *refStore, read func(context.Context, *shard) ([]T, error)) ([]T, error) {
	lists, err := fanOutLists(ctx, s, read)
	if err != nil {
		return nil, err
	}
	return slices.Concat(lists...), nil
}

// fanOutLists is fanOut keeping each shard's rows apart, by shard index.
func fanOutLists[T any](ctx context.Context, s *refStore, read func(context.Context, *shard) ([]T, error)) ([][]T, error) {
	lists := make([][]T, len(s.shards))
	g, gctx := errgroup.WithContext(ctx)
	for i, sh := range s.shards {
		g.Go(func() error {
			l, err := read(gctx, sh)
			lists[i] = l
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return lists, nil
}

// fair shares up to limit rows (all for limit <= 0) among the shards as
// the store promises to relays: one row of each shard in turn, starting
// at shard turn (mod the shard count; the caller moves it on with every
// call), each shard's rows in its own seq order. No rows is an empty
// slice, not nil.
func fair[T any](lists [][]T, turn, limit int) []T {
	out := []T{}
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	if limit <= 0 || limit > n {
		limit = n
	}
	next := make([]int, len(lists))
	for i := turn; len(out) < limit; i++ {
		k := i % len(lists)
		if next[k] < len(lists[k]) {
			out = append(out, lists[k][next[k]])
			next[k]++
		}
	}
	return out
}

// firstN sorts rows by cmp and keeps the first limit (all for limit <= 0):
// each shard returned its first limit rows in this order, so these are the
// first limit rows of all shards. No rows is an empty slice, not nil (as
// the router's merge returns).
func firstN[T any](rows []T, limit int, cmp func(a, b T) int) []T {
	if rows == nil {
		rows = []T{}
	}
	slices.SortStableFunc(rows, cmp)
	if limit > 0 && len(rows) > limit {
		rows = rows[:limit]
	}
	return rows
}

// PendingOutbox returns up to limit outbox rows (all for limit <= 0),
// shared fairly among the shards (see fair).
func (s *refStore) PendingOutbox(ctx context.Context, limit int) ([]store.OutboxRow, error) {
	lists, err := fanOutLists(ctx, s, func(ctx context.Context, sh *shard) ([]store.OutboxRow, error) {
		var out []store.OutboxRow
		err := s.query(ctx, sh, `SELECT seq, target_id, event FROM outbox ORDER BY seq LIMIT $1::bigint`,
			[]any{limitArg(limit)}, func(r pgx.Rows) error {
				var o store.OutboxRow
				var target *string
				var ev []byte
				if err := r.Scan(&o.Seq, &target, &ev); err != nil {
					return err
				}
				if target != nil {
					o.TargetID, o.HasTarget = *target, true
				}
				o.Event = ev
				out = append(out, o)
				return nil
			})
		return out, err
	})
	if err != nil {
		return nil, fmt.Errorf("pending outbox: %w", err)
	}
	return fair(lists, int(s.outboxTurn.Add(1)-1), limit), nil
}

// AckOutbox deletes outbox row seq on the shard its ordinal names; a
// missing row is not an error.
func (s *refStore) AckOutbox(ctx context.Context, seq int64) error {
	sh, err := s.forSeq(seq)
	if err == nil {
		_, err = s.exec(ctx, sh, `DELETE FROM outbox WHERE seq = $1::bigint`, seq)
	}
	if err != nil {
		return fmt.Errorf("ack outbox seq %d: %w", seq, err)
	}
	return nil
}

// PendingSpawns returns up to limit spawn intents (all for limit <= 0),
// shared fairly among the shards (see fair).
func (s *refStore) PendingSpawns(ctx context.Context, limit int) ([]store.SpawnRow, error) {
	lists, err := fanOutLists(ctx, s, func(ctx context.Context, sh *shard) ([]store.SpawnRow, error) {
		var out []store.SpawnRow
		err := s.query(ctx, sh, `SELECT seq, parent_id, child_id, root_path, context FROM spawns ORDER BY seq LIMIT $1::bigint`,
			[]any{limitArg(limit)}, func(r pgx.Rows) error {
				var sp store.SpawnRow
				var c []byte
				if err := r.Scan(&sp.Seq, &sp.ParentID, &sp.ChildID, &sp.RootPath, &c); err != nil {
					return err
				}
				sp.Context = c
				out = append(out, sp)
				return nil
			})
		return out, err
	})
	if err != nil {
		return nil, fmt.Errorf("pending spawns: %w", err)
	}
	return fair(lists, int(s.spawnTurn.Add(1)-1), limit), nil
}

// AckSpawn deletes spawn intent seq on the shard its ordinal names; a
// missing row is not an error.
func (s *refStore) AckSpawn(ctx context.Context, seq int64) error {
	sh, err := s.forSeq(seq)
	if err == nil {
		_, err = s.exec(ctx, sh, `DELETE FROM spawns WHERE seq = $1::bigint`, seq)
	}
	if err != nil {
		return fmt.Errorf("ack spawn seq %d: %w", seq, err)
	}
	return nil
}

// DueTimers returns the limit (all for limit <= 0) earliest timers with
// fire_at <= now over all shards, by fire_at, execution id and path
// (bytewise).
func (s *refStore) DueTimers(ctx context.Context, now float64, limit int) ([]store.Timer, error) {
	rows, err := fanOut(ctx, s, func(ctx context.Context, sh *shard) ([]store.Timer, error) {
		var out []store.Timer
		err := s.query(ctx, sh, `SELECT execution_id, path, fire_at FROM timers WHERE fire_at <= $1::float8
ORDER BY fire_at, execution_id COLLATE "C", path COLLATE "C" LIMIT $2::bigint`,
			[]any{now, limitArg(limit)}, func(r pgx.Rows) error {
				var t store.Timer
				if err := r.Scan(&t.ExecutionID, &t.Path, &t.FireAt); err != nil {
					return err
				}
				out = append(out, t)
				return nil
			})
		return out, err
	})
	if err != nil {
		return nil, fmt.Errorf("due timers at %v: %w", now, err)
	}
	return firstN(rows, limit, func(a, b store.Timer) int {
		return cmp.Or(cmp.Compare(a.FireAt, b.FireAt), cmp.Compare(a.ExecutionID, b.ExecutionID), cmp.Compare(a.Path, b.Path))
	}), nil
}

// DeleteTimer deletes execution id's timer on path only if it still fires
// at fireAt (with TimerDeleteWithoutFireAt: whatever its fire_at) and
// reports whether a row was deleted.
func (s *refStore) DeleteTimer(ctx context.Context, id, path string, fireAt float64) (bool, error) {
	sql, args := `DELETE FROM timers WHERE execution_id = $1::text AND path = $2::text AND fire_at = $3::float8`, []any{id, path, fireAt}
	if s.bug == TimerDeleteWithoutFireAt {
		sql, args = `DELETE FROM timers WHERE execution_id = $1::text AND path = $2::text`, []any{id, path}
	}
	n, err := s.exec(ctx, s.forKey(id), sql, args...)
	if err != nil {
		return false, fmt.Errorf("delete timer %s %q at %v: %w", id, path, fireAt, err)
	}
	return n > 0, nil
}
