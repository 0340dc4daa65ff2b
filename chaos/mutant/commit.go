package mutant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/store"
)

// The reference commit's statements, one per step of ARCHITECTURE.md §1.
const (
	casSQL = `UPDATE executions SET data = $2::text, version = $3::int + 1 WHERE id = $1::text AND version = $3::int`
	// casNoVersionSQL is CASWithoutVersion's CAS: no version predicate.
	casNoVersionSQL = `UPDATE executions SET data = $2::text, version = $3::int + 1 WHERE id = $1::text`
	firstSaveSQL    = `INSERT INTO executions (id, definition_id, data, version) VALUES ($1::text, $2::text, $3::text, 1)
ON CONFLICT (id) DO NOTHING`
	foundSQL    = `SELECT version FROM executions WHERE id = $1::text`
	outboxSQL   = `INSERT INTO outbox (target_id, event) VALUES (CASE WHEN $3::bool THEN $1::text ELSE NULLIF($1::text, '') END, $2::text)`
	dedupeSQL   = `INSERT INTO processed_events (execution_id, event_id) VALUES ($1::text, $2::text) ON CONFLICT DO NOTHING`
	spawnSQL    = `INSERT INTO spawns (parent_id, child_id, root_path, context) VALUES ($1::text, $2::text, $3::text, $4::text)`
	scheduleSQL = `INSERT INTO timers (execution_id, path, fire_at) VALUES ($1::text, $2::text, $3::float8)
ON CONFLICT (execution_id, path) DO UPDATE SET fire_at = EXCLUDED.fire_at`
	cancelSQL = `DELETE FROM timers WHERE execution_id = $1::text AND path = $2::text`
	traceSQL  = `INSERT INTO trace (execution_id, idx, entry)
SELECT $1::text, COALESCE(max(idx), -1) + 1, $2::text FROM trace WHERE execution_id = $1::text`
	// trimSQL keeps the ring's newest $2 entries; it runs after the
	// append, in the same transaction, so max(idx) is the new entry's.
	trimSQL = `DELETE FROM trace WHERE execution_id = $1::text
AND idx <= (SELECT max(idx) FROM trace WHERE execution_id = $1::text) - $2::int`
)

// Commit is store.Store.Commit's semantics as an explicit transaction on
// exe's shard:
//
//	BEGIN
//	[set_config statement_timeout]
//	UPDATE executions … WHERE id AND version = old      (CAS)
//	[INSERT executions … ON CONFLICT DO NOTHING]        (first save, old = 0)
//	  no row: SELECT version → ROLLBACK, *store.ConflictError
//	pipelined: dedupe INSERT, outbox INSERTs, spawn INSERTs,
//	           timer upserts/DELETEs in order, trace append + ring cut
//	COMMIT
//
// On success exe.Version is the new version (the committed JSON carries
// it); on any failure it is restored. An error matches
// store.ErrOutcomeUnknown when the COMMIT had been handed to the
// connection and the failure is not a clean server ERROR (of a class
// other than 08 and 57P): only then can the transaction have committed.
// Every other error, conflicts included, means nothing was applied —
// except for the bugs that write outside the transaction.
func (s *refStore) Commit(ctx context.Context, exe *store.Execution, emits []store.Emit, processedEventID string,
	timers []store.TimerOp, spawns []store.Spawn, trace json.RawMessage) (err error) {
	if err := checkCommit(exe, emits, timers, spawns, trace); err != nil {
		return err
	}
	old := exe.Version
	exe.Version = old + 1
	defer func() {
		if err != nil {
			exe.Version = old
			if !errors.Is(err, store.ErrConflict) {
				err = fmt.Errorf("commit execution %s (version %d→%d): %w", exe.ID, old, old+1, err)
			}
		}
	}()
	data, err := json.Marshal(exe)
	if err != nil {
		return err
	}
	sh := s.forKey(exe.ID)

	// The bugs that write part of the commit before, and outside of, its
	// transaction.
	if s.bug == OutboxOutsideTx && len(emits) > 0 {
		if err := s.inTx(ctx, sh, func(tx pgx.Tx) error { return s.sideEffects(ctx, tx, exe.ID, emits, "", nil, nil, nil) }); err != nil {
			return err
		}
		emits = nil
	}
	if s.bug == DedupeOutsideTx && processedEventID != "" {
		if err := s.inTx(ctx, sh, func(tx pgx.Tx) error { return s.sideEffects(ctx, tx, exe.ID, nil, processedEventID, nil, nil, nil) }); err != nil {
			return err
		}
		processedEventID = ""
	}

	return s.inTx(ctx, sh, func(tx pgx.Tx) error {
		if err := s.cas(ctx, tx, exe.ID, exe.DefinitionID, string(data), old); err != nil {
			return err
		}
		return s.sideEffects(ctx, tx, exe.ID, emits, processedEventID, timers, spawns, trace)
	})
}

// Save is Commit without side effects.
func (s *refStore) Save(ctx context.Context, exe *store.Execution) error {
	return s.Commit(ctx, exe, nil, "", nil, nil, nil)
}

// inTx runs body in one explicit transaction on sh and commits it if body
// succeeded; see Commit for what its errors mean.
func (s *refStore) inTx(ctx context.Context, sh *shard, body func(pgx.Tx) error) error {
	ctx, done := s.watch(ctx, sh)
	err := s.runTx(ctx, sh, body)
	if errors.Is(err, store.ErrConflict) {
		done(nil)
		return err
	}
	return done(err)
}

// runTx is inTx without the stall check.
func (s *refStore) runTx(ctx context.Context, sh *shard, body func(pgx.Tx) error) error {
	tx, err := sh.pool.Begin(ctx)
	if err != nil {
		return onShard(sh, err)
	}
	// After a failed COMMIT, or once ctx ended, Rollback only releases (or
	// closes) the connection; the server rolls back whatever did not commit.
	defer func() { _ = tx.Rollback(ctx) }()
	if s.timeout != "" {
		if _, err := tx.Exec(ctx, setTimeoutSQL, s.timeout); err != nil {
			return onShard(sh, err)
		}
	}
	if err := body(tx); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return err
		}
		return onShard(sh, err)
	}
	// The commit point: from here on the transaction may have committed
	// whatever the client sees.
	if err := tx.Commit(ctx); err != nil {
		return onShard(sh, classify(err))
	}
	return nil
}

// classify marks a failed COMMIT's error as an unknown outcome unless the
// server answered it with an ERROR that is not of class 08 (connection
// exception) or 57P (operator intervention): such an ERROR rolled the
// transaction back. A broken connection, an ended context, a FATAL or a
// PANIC may have come after the server committed.
func classify(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Severity == "ERROR" &&
		!strings.HasPrefix(pe.Code, "08") && !strings.HasPrefix(pe.Code, "57P") {
		return err
	}
	return fmt.Errorf("%w (the COMMIT was sent; it may have been applied): %w", store.ErrOutcomeUnknown, err)
}

// cas is the compare-and-swap: update at version old, or insert on first
// save; a lost CAS is a *store.ConflictError with the version found.
func (s *refStore) cas(ctx context.Context, tx pgx.Tx, id, def, data string, old int) error {
	sql := casSQL
	if s.bug == CASWithoutVersion {
		sql = casNoVersionSQL
	}
	tag, err := tx.Exec(ctx, sql, id, data, old)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 && old == 0 {
		// A concurrent first save waits for the other transaction, then
		// inserts nothing: a conflict, not an error.
		if tag, err = tx.Exec(ctx, firstSaveSQL, id, def, data); err != nil {
			return err
		}
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	// A new statement, so a new snapshot: the winner's version.
	found := 0
	if err := tx.QueryRow(ctx, foundSQL, id).Scan(&found); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	return &store.ConflictError{ID: id, Expected: old, Found: found}
}

// sideEffects writes a won commit's side effects, pipelined in one round
// trip, in ARCHITECTURE.md §1's order.
func (s *refStore) sideEffects(ctx context.Context, tx pgx.Tx, id string, emits []store.Emit, eventID string,
	timers []store.TimerOp, spawns []store.Spawn, trace json.RawMessage) error {
	b := &pgx.Batch{}
	for _, e := range emits {
		b.Queue(outboxSQL, e.TargetID, string(e.Event), e.HasTarget)
	}
	if eventID != "" {
		b.Queue(dedupeSQL, id, eventID)
	}
	for _, sp := range spawns {
		c := string(sp.Context)
		if len(sp.Context) == 0 {
			c = "{}"
		}
		b.Queue(spawnSQL, id, sp.ChildID, sp.RootPath, c)
	}
	for _, t := range timers {
		switch {
		case t.Action == store.TimerSchedule:
			b.Queue(scheduleSQL, id, t.Path, t.FireAt)
		case s.bug == CancelDoesNotDelete:
			// The bug: the cancel is dropped.
		default:
			b.Queue(cancelSQL, id, t.Path)
		}
	}
	if len(trace) > 0 {
		b.Queue(traceSQL, id, string(trace))
		if s.traceMax > 0 {
			keep := s.traceMax
			if s.bug == TraceTrimOffByOne {
				keep++
			}
			b.Queue(trimSQL, id, keep)
		}
	}
	if b.Len() == 0 {
		return nil
	}
	br := tx.SendBatch(ctx, b)
	for range b.Len() {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return err
		}
	}
	return br.Close()
}

// checkCommit rejects, before anything is sent or exe is touched, what the
// production store rejects up front.
func checkCommit(exe *store.Execution, emits []store.Emit, timers []store.TimerOp, spawns []store.Spawn, trace json.RawMessage) error {
	if exe == nil {
		return errors.New("commit: nil execution")
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("commit execution %q: "+format, append([]any{exe.ID}, args...)...)
	}
	switch {
	case exe.ID == "":
		return fail("the execution has no id")
	case exe.Version < 0 || exe.Version >= math.MaxInt32:
		return fail("version %d is outside 0..%d", exe.Version, math.MaxInt32-1)
	}
	for i, e := range emits {
		if len(e.Event) == 0 || !json.Valid(e.Event) {
			return fail("emits[%d]: the event is not valid JSON", i)
		}
	}
	for i, t := range timers {
		switch {
		case t.Action == store.TimerSchedule && (math.IsNaN(t.FireAt) || math.IsInf(t.FireAt, 0)):
			return fail("timers[%d] (%s %q): fire_at %v is not a finite number", i, t.Action, t.Path, t.FireAt)
		case t.Action != store.TimerSchedule && t.Action != store.TimerCancel:
			return fail("timers[%d]: unknown action %v", i, t.Action)
		}
	}
	for i, sp := range spawns {
		if sp.ChildID == "" {
			return fail("spawns[%d]: the child has no id", i)
		}
		if len(sp.Context) > 0 && !json.Valid(sp.Context) {
			return fail("spawns[%d] (child %s): the context is not valid JSON", i, sp.ChildID)
		}
	}
	if len(trace) > 0 && !json.Valid(trace) {
		return fail("the trace entry is not valid JSON")
	}
	return nil
}
