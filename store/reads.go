package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgshard/pgshard/shardmap"
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
	row := func(served **bool) func(pgx.Rows) error {
		return func(r pgx.Rows) error {
			var def *string
			var version *int
			var data []byte
			dest := []any{&def, &version, &data}
			if served != nil {
				dest = append([]any{served}, dest...)
			}
			if err := r.Scan(dest...); err != nil {
				return err
			}
			if def == nil || version == nil {
				return nil
			}
			var err error
			exe, err = decodeExecution(id, *def, *version, data)
			return err
		}
	}
	err := s.fencedRead(ctx,
		func(served **bool) error { return s.query(ctx, loadSQL, []any{id, s.bucket(id)}, row(served)) },
		func() error { exe = nil; return s.query(ctx, loadCheckedSQL, []any{id}, row(nil)) })
	if err != nil {
		return nil, fmt.Errorf("load execution %s: %w", id, err)
	}
	if exe == nil {
		return nil, fmt.Errorf("load execution %s: %w", id, ErrNotFound)
	}
	return exe, nil
}

// The keyed reads are one statement each that reads the fence's verdict
// on the key's bucket — the range of pgshard_fence holding it, one index
// probe, plain SQL — in a subquery LEFT JOINed to the rows it reads only
// when the verdict serves (the range is owned or frozen here, or the
// fence is off): the verdict comes back whether or not a row exists, and
// the verdict and the rows are read with the statement's one snapshot (a
// read whose snapshot predates a move's flip reads the range as it was,
// entirely; one that follows it is refused). The store computes the
// bucket (shardmap's hash with its identity's bucket count, read at
// Open). Any other verdict — a range not served here, no range holding
// the bucket, a fence never set — sends the read to its checked form:
// the same read with pgshard_fence_check (migration 0008) in its WHERE, a
// condition without columns that Postgres evaluates once before it scans,
// which serves it (a fence that is off, or one that changed meanwhile) or
// raises the fence's error naming range, state, epoch and owner. A moved
// key is refused, never "not found". The statements are unnamed (planned
// on every run): BenchmarkFence compares this with the checked form
// alone and with other plain-SQL forms.
const (
	fenceVerdictFrom = `(SELECT x.hi >= $2::int AND (NOT x.enabled OR x.state IN ('owned', 'frozen')) AS ok
        FROM pgshard_fence x WHERE x.lo <= $2::int ORDER BY x.lo DESC LIMIT 1) f`

	loadSQL = `SELECT f.ok, e.definition_id, e.version, e.data
FROM ` + fenceVerdictFrom + `
LEFT JOIN executions e ON f.ok AND e.id = $1::text`

	loadCheckedSQL = `SELECT definition_id, version, data FROM executions
WHERE id = $1::text AND pgshard_fence_check($1::text)`

	loadForEventSQL = `SELECT f.ok, e.definition_id, e.version, e.data,
       f.ok AND EXISTS (SELECT 1 FROM processed_events p WHERE p.execution_id = $1::text AND p.event_id = $3::text)
FROM ` + fenceVerdictFrom + `
LEFT JOIN executions e ON f.ok AND e.id = $1::text`

	loadForEventCheckedSQL = `SELECT e.definition_id, e.version, e.data,
       EXISTS (SELECT 1 FROM processed_events p WHERE p.execution_id = $1::text AND p.event_id = $2::text)
FROM executions e WHERE e.id = $1::text AND pgshard_fence_check($1::text)`

	isProcessedSQL = `SELECT f.ok, f.ok AND EXISTS (SELECT 1 FROM processed_events WHERE execution_id = $1::text AND event_id = $3::text)
FROM ` + fenceVerdictFrom

	isProcessedCheckedSQL = `SELECT EXISTS (SELECT 1 FROM processed_events WHERE execution_id = $1::text AND event_id = $2::text)
WHERE pgshard_fence_check($1::text)`

	readTraceSQL = `SELECT idx, entry FROM trace
WHERE execution_id = $1::text AND pgshard_fence_check($1::text)
ORDER BY idx`
)

// bucket is key's bucket on this shard (shardmap's hash, which matches the
// shard's pgshard_fence_bucket: tested).
func (s *Store) bucket(key string) int { return shardmap.BucketText(key, s.buckets) }

// fencedRead runs fast, a read that scans the fence's verdict into its
// argument with the rows; unless the verdict serves, it runs checked, the
// read's checked form, whose answer (rows or the fence's error) stands.
// checked must reset what fast's rows set.
func (s *Store) fencedRead(ctx context.Context, fast func(served **bool) error, checked func() error) error {
	var verdict *bool
	if err := fast(&verdict); err != nil {
		return err
	}
	if verdict != nil && *verdict {
		return nil
	}
	return checked()
}

// LoadForEvent returns the execution id and whether eventID was already
// processed by it, in one query. An absent execution is an error matching
// ErrNotFound. The fence is checked as in Load.
func (s *Store) LoadForEvent(ctx context.Context, id, eventID string) (*Execution, bool, error) {
	var exe *Execution
	var processed bool
	row := func(served **bool) func(pgx.Rows) error {
		return func(r pgx.Rows) error {
			var def *string
			var version *int
			var data []byte
			var p *bool
			dest := []any{&def, &version, &data, &p}
			if served != nil {
				dest = append([]any{served}, dest...)
			}
			if err := r.Scan(dest...); err != nil {
				return err
			}
			if def == nil || version == nil {
				return nil
			}
			processed = p != nil && *p
			var err error
			exe, err = decodeExecution(id, *def, *version, data)
			return err
		}
	}
	err := s.fencedRead(ctx,
		func(served **bool) error {
			return s.query(ctx, loadForEventSQL, []any{id, s.bucket(id), eventID}, row(served))
		},
		func() error {
			exe, processed = nil, false
			return s.query(ctx, loadForEventCheckedSQL, []any{id, eventID}, row(nil))
		})
	if err != nil {
		return nil, false, fmt.Errorf("load execution %s for event %s: %w", id, eventID, err)
	}
	if exe == nil {
		return nil, false, fmt.Errorf("load execution %s for event %s: %w", id, eventID, ErrNotFound)
	}
	return exe, processed, nil
}

// IsProcessed reports whether execution id has processed eventID. The
// fence is checked as in Load.
func (s *Store) IsProcessed(ctx context.Context, id, eventID string) (bool, error) {
	var ok bool
	row := func(served **bool) func(pgx.Rows) error {
		return func(r pgx.Rows) error {
			var p *bool
			dest := []any{&p}
			if served != nil {
				dest = append([]any{served}, dest...)
			}
			if err := r.Scan(dest...); err != nil {
				return err
			}
			ok = p != nil && *p
			return nil
		}
	}
	err := s.fencedRead(ctx,
		func(served **bool) error {
			return s.query(ctx, isProcessedSQL, []any{id, s.bucket(id), eventID}, row(served))
		},
		func() error { ok = false; return s.query(ctx, isProcessedCheckedSQL, []any{id, eventID}, row(nil)) })
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
	out, _, err := s.pendingSpawns(ctx, limit, false)
	return out, err
}

// PendingSpawnsServed is PendingSpawns with the served set its scan was
// filtered by, read in the scan's own snapshot (served.go).
func (s *Store) PendingSpawnsServed(ctx context.Context, limit int) ([]SpawnRow, Served, error) {
	return s.pendingSpawns(ctx, limit, true)
}

// pendingSpawnsSQL: the spawn intents of the buckets the fence serves.
var pendingSpawnsSQL = newScan(`seq, parent_id, child_id, root_path, context`,
	`spawns`, fenceServes("parent_id"), `seq`, `$1::bigint`)

func (s *Store) pendingSpawns(ctx context.Context, limit int, served bool) ([]SpawnRow, Served, error) {
	var out []SpawnRow
	var seq *int64
	var parent, child, root *string
	var ctxt []byte // pgx scans each row's text into a new slice
	sv, err := s.scan(ctx, pendingSpawnsSQL, served, []any{limitArg(limit)}, []any{&seq, &parent, &child, &root, &ctxt},
		func() error {
			if seq == nil || parent == nil || child == nil || root == nil {
				return fmt.Errorf("a spawn row with a NULL column")
			}
			out = append(out, SpawnRow{Seq: *seq, ParentID: *parent, ChildID: *child, RootPath: *root, Context: ctxt})
			return nil
		})
	if err != nil {
		return nil, Served{}, fmt.Errorf("pending spawns: %w", err)
	}
	return out, sv, nil
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
	out, _, err := s.dueTimers(ctx, now, limit, false)
	return out, err
}

// DueTimersServed is DueTimers with the served set its scan was filtered
// by, read in the scan's own snapshot (served.go).
func (s *Store) DueTimersServed(ctx context.Context, now float64, limit int) ([]Timer, Served, error) {
	return s.dueTimers(ctx, now, limit, true)
}

// dueTimersSQL: the due timers of the buckets the fence serves.
var dueTimersSQL = newScan(`execution_id, path, fire_at`,
	`timers`, `fire_at <= $1::float8 AND `+fenceServes("execution_id"),
	`fire_at, execution_id COLLATE "C", path COLLATE "C"`, `$2::bigint`)

func (s *Store) dueTimers(ctx context.Context, now float64, limit int, served bool) ([]Timer, Served, error) {
	var out []Timer
	var id, path *string
	var at *float64
	sv, err := s.scan(ctx, dueTimersSQL, served, []any{now, limitArg(limit)}, []any{&id, &path, &at},
		func() error {
			if id == nil || path == nil || at == nil {
				return fmt.Errorf("a timer row with a NULL column")
			}
			out = append(out, Timer{ExecutionID: *id, Path: *path, FireAt: *at})
			return nil
		})
	if err != nil {
		return nil, Served{}, fmt.Errorf("due timers at %v: %w", now, err)
	}
	return out, sv, nil
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
