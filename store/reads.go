package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// decodeExecution builds an Execution from a row: the JSON document, with
// id, definition id and version taken from their columns (the CAS token is
// the column).
func decodeExecution(id, definitionID string, version int, data []byte) (*Execution, error) {
	e, ok := decodeKnown(data) // the usual document, decoded once (decode.go)
	if !ok {
		if err := json.Unmarshal(data, &e); err != nil {
			return nil, fmt.Errorf("execution %s: stored data: %w", id, err)
		}
	}
	e.ID, e.DefinitionID, e.Version = id, definitionID, version
	return &e, nil
}

// Load returns the execution id, or an error matching ErrNotFound. The
// shard's fence is checked in the same statement, whether or not the row
// exists: a key of a bucket the shard does not serve is a *FenceError,
// never "not found".
func (s *Store) Load(ctx context.Context, id string) (*Execution, error) {
	var exe *Execution
	err := s.query(ctx, loadSQL, []any{id},
		func(r pgx.Rows) error {
			var def string
			var version int
			var data []byte
			if err := r.Scan(&def, &version, &data); err != nil {
				return err
			}
			var err error
			exe, err = decodeExecution(id, def, version, data)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("load execution %s: %w", id, err)
	}
	if exe == nil {
		return nil, fmt.Errorf("load execution %s: %w", id, ErrNotFound)
	}
	return exe, nil
}

// The keyed reads are one statement each whose WHERE calls the fence's
// check (pgshard_fence_check, migration 0008) on the key alone: a
// condition without columns, which Postgres evaluates once, as the plan's
// One-Time Filter, before it scans — so the check runs whether or not a
// row exists, with the statement's snapshot (tested: a moved key without a
// row is refused). It cost a third less than the check as a function
// scan joined to the rows (BenchmarkFence).
const (
	loadSQL = `SELECT definition_id, version, data FROM executions
WHERE id = $1::text AND pgshard_fence_check($1::text)`

	loadForEventSQL = `SELECT e.definition_id, e.version, e.data,
       EXISTS (SELECT 1 FROM processed_events p WHERE p.execution_id = $1::text AND p.event_id = $2::text)
FROM executions e WHERE e.id = $1::text AND pgshard_fence_check($1::text)`

	isProcessedSQL = `SELECT EXISTS (SELECT 1 FROM processed_events WHERE execution_id = $1::text AND event_id = $2::text)
WHERE pgshard_fence_check($1::text)`

	readTraceSQL = `SELECT idx, entry FROM trace
WHERE execution_id = $1::text AND pgshard_fence_check($1::text)
ORDER BY idx`
)

// LoadForEvent returns the execution id and whether eventID was already
// processed by it, in one query. An absent execution is an error matching
// ErrNotFound. The fence is checked as in Load.
func (s *Store) LoadForEvent(ctx context.Context, id, eventID string) (*Execution, bool, error) {
	var exe *Execution
	var processed bool
	err := s.query(ctx, loadForEventSQL, []any{id, eventID},
		func(r pgx.Rows) error {
			var def string
			var version int
			var data []byte
			if err := r.Scan(&def, &version, &data, &processed); err != nil {
				return err
			}
			var err error
			exe, err = decodeExecution(id, def, version, data)
			return err
		})
	if err != nil {
		return nil, false, fmt.Errorf("load execution %s for event %s: %w", id, eventID, err)
	}
	if exe == nil {
		return nil, false, fmt.Errorf("load execution %s for event %s: %w", id, eventID, ErrNotFound)
	}
	return exe, processed, nil
}

// IsProcessed reports whether execution id has processed eventID.
func (s *Store) IsProcessed(ctx context.Context, id, eventID string) (bool, error) {
	var ok bool
	err := s.query(ctx, isProcessedSQL, []any{id, eventID}, func(r pgx.Rows) error { return r.Scan(&ok) })
	if err != nil {
		return false, fmt.Errorf("is event %s processed by %s: %w", eventID, id, err)
	}
	return ok, nil
}

// limitArg turns a limit into the LIMIT parameter: NULL (no limit) for
// limit <= 0.
func limitArg(limit int) any {
	if limit <= 0 {
		return nil
	}
	return int64(limit)
}

// PendingOutbox returns up to limit outbox rows (all for limit <= 0),
// ordered by seq.
func (s *Store) PendingOutbox(ctx context.Context, limit int) ([]OutboxRow, error) {
	var out []OutboxRow
	err := s.query(ctx, `SELECT seq, target_id, event FROM outbox ORDER BY seq LIMIT $1::bigint`,
		[]any{limitArg(limit)}, func(r pgx.Rows) error {
			var o OutboxRow
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
	if err != nil {
		return nil, fmt.Errorf("pending outbox: %w", err)
	}
	return out, nil
}

// AckOutbox deletes the outbox row seq (delivered). A missing row is not an
// error: acks are idempotent.
func (s *Store) AckOutbox(ctx context.Context, seq int64) error {
	if _, err := s.exec(ctx, `DELETE FROM outbox WHERE seq = $1::bigint`, seq); err != nil {
		return fmt.Errorf("ack outbox seq %d: %w", seq, err)
	}
	return nil
}

// PendingSpawns returns up to limit spawn intents (all for limit <= 0),
// ordered by seq.
func (s *Store) PendingSpawns(ctx context.Context, limit int) ([]SpawnRow, error) {
	var out []SpawnRow
	err := s.query(ctx, `SELECT seq, parent_id, child_id, root_path, context FROM spawns `+fenceServedJoin+`
WHERE `+fenceServes("parent_id")+` ORDER BY seq LIMIT $1::bigint`,
		[]any{limitArg(limit)}, func(r pgx.Rows) error {
			var sp SpawnRow
			var ctxt []byte
			if err := r.Scan(&sp.Seq, &sp.ParentID, &sp.ChildID, &sp.RootPath, &ctxt); err != nil {
				return err
			}
			sp.Context = ctxt
			out = append(out, sp)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("pending spawns: %w", err)
	}
	return out, nil
}

// AckSpawn deletes the spawn intent seq (the child was started). A missing
// row is not an error.
func (s *Store) AckSpawn(ctx context.Context, seq int64) error {
	if _, err := s.exec(ctx, `DELETE FROM spawns WHERE seq = $1::bigint`, seq); err != nil {
		return fmt.Errorf("ack spawn seq %d: %w", seq, err)
	}
	return nil
}

// DueTimers returns up to limit timers (all for limit <= 0) with fire_at <=
// now, ordered by fire_at, then execution id and path (bytewise).
func (s *Store) DueTimers(ctx context.Context, now float64, limit int) ([]Timer, error) {
	var out []Timer
	err := s.query(ctx, `SELECT execution_id, path, fire_at FROM timers `+fenceServedJoin+`
WHERE fire_at <= $1::float8 AND `+fenceServes("execution_id")+`
ORDER BY fire_at, execution_id COLLATE "C", path COLLATE "C" LIMIT $2::bigint`,
		[]any{now, limitArg(limit)}, func(r pgx.Rows) error {
			var t Timer
			if err := r.Scan(&t.ExecutionID, &t.Path, &t.FireAt); err != nil {
				return err
			}
			out = append(out, t)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("due timers at %v: %w", now, err)
	}
	return out, nil
}

// DeleteTimer deletes execution id's timer on path only if it still fires
// at fireAt, so that a sweep of a stale due timer never removes a timer
// that was re-armed meanwhile. It reports whether a row was deleted.
func (s *Store) DeleteTimer(ctx context.Context, id, path string, fireAt float64) (bool, error) {
	n, err := s.execFenced(ctx, id, `DELETE FROM timers WHERE execution_id = $1::text AND path = $2::text AND fire_at = $3::float8`,
		id, path, fireAt)
	if err != nil {
		return false, fmt.Errorf("delete timer %s %q at %v: %w", id, path, fireAt, err)
	}
	return n > 0, nil
}

// lockExecutionSQL serializes a standalone trace append with commits of the
// same execution (whose CAS holds the same row lock). No row, no lock: an
// execution that does not exist yet has no concurrent commits.
const lockExecutionSQL = `SELECT 1 FROM executions WHERE id = $1::text FOR NO KEY UPDATE`

// AppendTrace appends entry (JSON) to execution id's trace ring outside a
// commit, with the next idx, cutting the ring to Options.TraceMax entries.
func (s *Store) AppendTrace(ctx context.Context, id string, entry json.RawMessage) error {
	if len(entry) == 0 || !json.Valid(entry) {
		return fmt.Errorf("append trace to %s: the entry is not valid JSON", id)
	}
	b := s.newBatch()
	b.Queue(fenceAssertSQL, id)
	b.Queue(lockExecutionSQL, id)
	if s.opts.TraceMax > 0 {
		b.Queue(traceCappedSQL, id, string(entry), s.opts.TraceMax)
	} else {
		b.Queue(traceSQL, id, string(entry))
	}
	_, err := s.run(ctx, b, func(br pgx.BatchResults) error {
		for range 3 {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("append trace to %s: %w", id, err)
	}
	return nil
}

// ReadTrace returns execution id's trace ring, oldest first, each entry with
// its durable idx.
func (s *Store) ReadTrace(ctx context.Context, id string) ([]TraceEntry, error) {
	var out []TraceEntry
	err := s.query(ctx, readTraceSQL, []any{id},
		func(r pgx.Rows) error {
			var t TraceEntry
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
