package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/store"
)

// seedCommit is the seed's complex commit, statement by statement in an
// explicit transaction, each statement waiting for its reply: BEGIN,
// UPDATE … WHERE version, (on zero rows: SELECT version, then INSERT or
// conflict), one INSERT per emit, the dedupe INSERT, one INSERT per spawn,
// one statement per timer op, the trace INSERT and ring DELETE, COMMIT.
// It exists only to measure the pipelined commit against it.
func seedCommit(ctx context.Context, s *store.Store, exe *store.Execution, emits []store.Emit, eventID string,
	timers []store.TimerOp, spawns []store.Spawn, trace json.RawMessage, traceMax int) (err error) {
	old := exe.Version
	exe.Version = old + 1
	defer func() {
		if err != nil {
			exe.Version = old
		}
	}()
	data, err := json.Marshal(exe)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE executions SET data = $1::text, version = $2::int WHERE id = $3::text AND version = $4::int`,
			string(data), exe.Version, exe.ID, old)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			var found int
			err := tx.QueryRow(ctx, `SELECT version FROM executions WHERE id = $1::text`, exe.ID).Scan(&found)
			switch {
			case errors.Is(err, pgx.ErrNoRows) && old == 0:
				if _, err := tx.Exec(ctx, `INSERT INTO executions (id, definition_id, data, version) VALUES ($1::text, $2::text, $3::text, $4::int)`,
					exe.ID, exe.DefinitionID, string(data), exe.Version); err != nil {
					return err
				}
			case errors.Is(err, pgx.ErrNoRows):
				return &store.ConflictError{ID: exe.ID, Expected: old, Found: 0}
			case err != nil:
				return err
			default:
				return &store.ConflictError{ID: exe.ID, Expected: old, Found: found}
			}
		}
		for _, e := range emits {
			if _, err := tx.Exec(ctx, `INSERT INTO outbox (target_id, event) VALUES ($1::text, $2::text)`, targetOf(e), string(e.Event)); err != nil {
				return err
			}
		}
		if eventID != "" {
			if _, err := tx.Exec(ctx, `INSERT INTO processed_events (execution_id, event_id) VALUES ($1::text, $2::text) ON CONFLICT DO NOTHING`, exe.ID, eventID); err != nil {
				return err
			}
		}
		for _, sp := range spawns {
			if _, err := tx.Exec(ctx, `INSERT INTO spawns (parent_id, child_id, root_path, context) VALUES ($1::text, $2::text, $3::text, $4::text)`,
				exe.ID, sp.ChildID, sp.RootPath, string(sp.Context)); err != nil {
				return err
			}
		}
		for _, op := range timers {
			var err error
			if op.Action == store.TimerSchedule {
				_, err = tx.Exec(ctx, `INSERT INTO timers (execution_id, path, fire_at) VALUES ($1::text, $2::text, $3::float8)
ON CONFLICT (execution_id, path) DO UPDATE SET fire_at = EXCLUDED.fire_at`, exe.ID, op.Path, op.FireAt)
			} else {
				_, err = tx.Exec(ctx, `DELETE FROM timers WHERE execution_id = $1::text AND path = $2::text`, exe.ID, op.Path)
			}
			if err != nil {
				return err
			}
		}
		if len(trace) > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO trace (execution_id, idx, entry)
SELECT $1::text, COALESCE((SELECT max(idx) FROM trace WHERE execution_id = $1::text), -1) + 1, $2::text`, exe.ID, string(trace)); err != nil {
				return err
			}
			if traceMax > 0 {
				if _, err := tx.Exec(ctx, `DELETE FROM trace WHERE execution_id = $1::text AND idx <= (SELECT max(idx) FROM trace WHERE execution_id = $1::text) - $2::int`,
					exe.ID, traceMax); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// statementsCommit is the other one-round-trip design, measured against
// pgshard_commit: the CAS, then one pipelined statement per kind of side
// effect, all in the pipeline's implicit transaction. A lost CAS aborts the
// pipeline by a division by zero (good enough for a benchmark, which has no
// conflicts). Every statement is unnamed, so the server parses and plans
// each of them on every commit.
func statementsCommit(ctx context.Context, s *store.Store, exe *store.Execution, emits []store.Emit, eventID string,
	timers []store.TimerOp, trace json.RawMessage, traceMax int) (err error) {
	old := exe.Version
	exe.Version = old + 1
	defer func() {
		if err != nil {
			exe.Version = old
		}
	}()
	data, err := json.Marshal(exe)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT CASE WHEN committed THEN found_version ELSE 1 / (found_version * 0) END
FROM pgshard_commit_cas($1::text, $2::text, $3::text, $4::int, $5::text)`, exe.ID, exe.DefinitionID, string(data), old, eventID)
	targets := make([]pgtype.Text, len(emits))
	events := make([]string, len(emits))
	for i, e := range emits {
		targets[i], events[i] = targetOf(e), string(e.Event)
	}
	b.Queue(`INSERT INTO outbox (target_id, event)
SELECT u.target_id, u.event FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(target_id, event, n) ORDER BY u.n`, targets, events)
	paths := make([]string, len(timers))
	at := make([]float64, len(timers))
	for i, t := range timers {
		paths[i], at[i] = t.Path, t.FireAt
	}
	b.Queue(`INSERT INTO timers (execution_id, path, fire_at)
SELECT $1::text, u.path, u.fire_at FROM unnest($2::text[], $3::float8[]) AS u(path, fire_at)
ON CONFLICT (execution_id, path) DO UPDATE SET fire_at = EXCLUDED.fire_at`, exe.ID, paths, at)
	b.Queue(`WITH ins AS (
    INSERT INTO trace (execution_id, idx, entry)
    SELECT $1::text, COALESCE(max(idx), -1) + 1, $2::text FROM trace WHERE execution_id = $1::text
    RETURNING idx)
DELETE FROM trace WHERE execution_id = $1::text AND idx <= (SELECT idx FROM ins) - $3::int`, exe.ID, string(trace), traceMax)
	return s.Pool().SendBatch(ctx, b).Close()
}

// typicalStep is the complex commit the benchmarks and round-trip tests
// use: two emits, a dedupe record, a timer re-armed, one trace entry — a
// statechart step that sends events and arms a timeout.
type typicalStep struct {
	emits  []store.Emit
	timers []store.TimerOp
	trace  json.RawMessage
}

func newTypicalStep(id string, v int) typicalStep {
	return typicalStep{
		emits: []store.Emit{
			{TargetID: id, Event: json.RawMessage(fmt.Sprintf(`{"kind":"Tick","n":%d}`, v))},
			{Event: json.RawMessage(`{"kind":"Audit"}`)},
		},
		timers: []store.TimerOp{store.Schedule("root.waiting", 1.9e9+float64(v))},
		trace:  json.RawMessage(fmt.Sprintf(`{"event":"Tick","from":"a","to":"b","n":%d}`, v)),
	}
}

// targetOf is an emit's target_id: NULL without a target (as the seed's
// None).
func targetOf(e store.Emit) pgtype.Text {
	return pgtype.Text{String: e.TargetID, Valid: e.TargetID != "" || e.HasTarget}
}
