package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
)

// Commit persists exe and everything the step that changed it produced, as
// ONE transaction in ONE round trip:
//
//   - compare-and-swap on the version: the row is updated only if it is
//     still at exe.Version, and inserted when exe.Version is 0 and there is
//     no row (first save); anything else is a *ConflictError carrying the
//     id, the expected and the found version;
//   - processedEventID, if not "", is recorded for dedupe (ON CONFLICT DO
//     NOTHING);
//   - emits become outbox rows, spawns spawn rows, in order;
//   - timers are applied in order (schedule = upsert replacing fire_at,
//     cancel = delete);
//   - trace, if not empty, is appended to exe's trace ring with the next
//     idx, and the ring is cut to Options.TraceMax entries.
//
// All or nothing. On success exe.Version is the new version, which the
// committed JSON carries too. On any failure exe.Version is restored, and
// the error is a *ConflictError (nothing applied), matches
// ErrOutcomeUnknown (the transaction had been sent when the failure
// happened: it may have committed), or is another error (nothing applied).
//
// A state-only commit (no emits, timers, spawns or trace) takes the fast
// path, one statement: pgshard_commit_cas, which wraps harel_commit_cas.
// Any other commit pipelines its statements behind
// pgshard_commit_cas_or_raise, whose conflict error stops the rest and
// rolls the transaction back within the same round trip.
func (s *Store) Commit(ctx context.Context, exe *Execution, emits []Emit, processedEventID string,
	timers []TimerOp, spawns []Spawn, trace json.RawMessage) (err error) {
	if err := checkCommit(exe, emits, timers, spawns, trace); err != nil {
		return err
	}
	old := exe.Version
	exe.Version = old + 1
	defer func() {
		if err != nil {
			exe.Version = old
		}
	}()
	data, err := json.Marshal(exe)
	if err != nil {
		return fmt.Errorf("commit execution %s: %w", exe.ID, err)
	}
	c := commitArgs{
		id: exe.ID, definitionID: exe.DefinitionID, data: string(data), old: old,
		eventID: processedEventID, emits: emits, timers: timers, spawns: spawns, trace: trace,
		traceMax: s.opts.TraceMax,
	}
	b := s.newBatch()
	var read func(pgx.BatchResults) error
	if c.stateOnly() {
		b.Queue(fastSQL, c.casArgs()...)
		read = func(br pgx.BatchResults) error {
			var committed bool
			var found int
			if err := br.QueryRow().Scan(&committed, &found); err != nil {
				return err
			}
			if !committed {
				return &ConflictError{ID: exe.ID, Expected: old, Found: found}
			}
			return nil
		}
	} else {
		stmts := c.plan()
		for _, st := range stmts {
			b.Queue(st.sql, st.args...)
		}
		read = func(br pgx.BatchResults) error {
			var v int
			if err := br.QueryRow().Scan(&v); err != nil {
				if ce := conflictFromPgError(err, exe.ID, old); ce != nil {
					return ce
				}
				return err
			}
			for range stmts[1:] {
				if _, err := br.Exec(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	sent, err := s.run(ctx, b, read)
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrConflict) {
		return err
	}
	if sent {
		err = classifyCommitError(err)
	}
	return fmt.Errorf("commit execution %s (version %d→%d): %w", exe.ID, old, old+1, err)
}

// Save persists exe alone: Commit without emits, dedupe, timers, spawns or
// trace (the fast path).
func (s *Store) Save(ctx context.Context, exe *Execution) error {
	return s.Commit(ctx, exe, nil, "", nil, nil, nil)
}

// checkCommit rejects arguments Postgres would reject, with messages that
// name the argument, before anything is sent or exe is touched.
func checkCommit(exe *Execution, emits []Emit, timers []TimerOp, spawns []Spawn, trace json.RawMessage) error {
	if exe == nil {
		return errors.New("commit: nil execution")
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("commit execution %q: "+format, append([]any{exe.ID}, args...)...)
	}
	if exe.ID == "" {
		return fail("the execution has no id")
	}
	if exe.Version < 0 || exe.Version >= math.MaxInt32 {
		return fail("version %d is outside 0..%d", exe.Version, math.MaxInt32-1)
	}
	for i, e := range emits {
		if len(e.Event) == 0 || !json.Valid(e.Event) {
			return fail("emits[%d]: the event is not valid JSON", i)
		}
	}
	for i, t := range timers {
		switch t.Action {
		case TimerSchedule:
			if math.IsNaN(t.FireAt) || math.IsInf(t.FireAt, 0) {
				return fail("timers[%d] (%s %q): fire_at %v is not a finite number", i, t.Action, t.Path, t.FireAt)
			}
		case TimerCancel:
		default:
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

// fastSQL is the state-only commit.
const fastSQL = `SELECT committed, found_version FROM pgshard_commit_cas($1::text, $2::text, $3::text, $4::int, $5::text)`

// The statements of a complex commit, in the order they run. Each
// collection is one statement over arrays, whatever its length.
const (
	casOrRaiseSQL = `SELECT pgshard_commit_cas_or_raise($1::text, $2::text, $3::text, $4::int, $5::text)`

	outboxSQL = `INSERT INTO outbox (target_id, event)
SELECT NULLIF(u.target_id, ''), u.event
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(target_id, event, n)
ORDER BY u.n`

	spawnsSQL = `INSERT INTO spawns (parent_id, child_id, root_path, context)
SELECT $1::text, u.child_id, u.root_path, u.context
FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS u(child_id, root_path, context, n)
ORDER BY u.n`

	scheduleSQL = `INSERT INTO timers (execution_id, path, fire_at)
SELECT $1::text, u.path, u.fire_at
FROM unnest($2::text[], $3::float8[]) AS u(path, fire_at)
ON CONFLICT (execution_id, path) DO UPDATE SET fire_at = EXCLUDED.fire_at`

	cancelSQL = `DELETE FROM timers WHERE execution_id = $1::text AND path = ANY($2::text[])`

	// traceSQL appends one entry with idx computed inline. The commit's
	// CAS holds the execution's row lock, so concurrent appends to one
	// ring are serialized.
	traceSQL = `INSERT INTO trace (execution_id, idx, entry)
SELECT $1::text, COALESCE(max(idx), -1) + 1, $2::text FROM trace WHERE execution_id = $1::text`

	// traceCappedSQL appends and cuts the ring to $3 entries in one
	// statement: the DELETE sees the ring before the insert, whose new
	// idx it learns from the CTE.
	traceCappedSQL = `WITH ins AS (
    INSERT INTO trace (execution_id, idx, entry)
    SELECT $1::text, COALESCE(max(idx), -1) + 1, $2::text FROM trace WHERE execution_id = $1::text
    RETURNING idx
)
DELETE FROM trace WHERE execution_id = $1::text AND idx <= (SELECT idx FROM ins) - $3::int`
)

// commitArgs is one commit's input, ready for SQL.
type commitArgs struct {
	id, definitionID, data string
	old                    int
	eventID                string
	emits                  []Emit
	timers                 []TimerOp
	spawns                 []Spawn
	trace                  json.RawMessage
	traceMax               int
}

func (c *commitArgs) stateOnly() bool {
	return len(c.emits) == 0 && len(c.timers) == 0 && len(c.spawns) == 0 && len(c.trace) == 0
}

func (c *commitArgs) casArgs() []any {
	return []any{c.id, c.definitionID, c.data, c.old, c.eventID}
}

// stmt is one statement of a batch.
type stmt struct {
	sql  string
	args []any
}

// plan returns the statements of a complex commit: the raising CAS first
// (it takes the row lock, so everything after it is serialized per
// execution), then one statement per kind of side effect present.
func (c *commitArgs) plan() []stmt {
	out := []stmt{{casOrRaiseSQL, c.casArgs()}}
	if len(c.emits) > 0 {
		targets := make([]string, len(c.emits))
		events := make([]string, len(c.emits))
		for i, e := range c.emits {
			targets[i], events[i] = e.TargetID, string(e.Event)
		}
		out = append(out, stmt{outboxSQL, []any{targets, events}})
	}
	if len(c.spawns) > 0 {
		children := make([]string, len(c.spawns))
		roots := make([]string, len(c.spawns))
		contexts := make([]string, len(c.spawns))
		for i, sp := range c.spawns {
			children[i], roots[i], contexts[i] = sp.ChildID, sp.RootPath, string(sp.Context)
			if len(sp.Context) == 0 {
				contexts[i] = "{}"
			}
		}
		out = append(out, stmt{spawnsSQL, []any{c.id, children, roots, contexts}})
	}
	if len(c.timers) > 0 {
		sched, cancel := collapseTimers(c.timers)
		if len(sched) > 0 {
			paths := make([]string, len(sched))
			at := make([]float64, len(sched))
			for i, t := range sched {
				paths[i], at[i] = t.Path, t.FireAt
			}
			out = append(out, stmt{scheduleSQL, []any{c.id, paths, at}})
		}
		if len(cancel) > 0 {
			out = append(out, stmt{cancelSQL, []any{c.id, cancel}})
		}
	}
	if len(c.trace) > 0 {
		if c.traceMax > 0 {
			out = append(out, stmt{traceCappedSQL, []any{c.id, string(c.trace), c.traceMax}})
		} else {
			out = append(out, stmt{traceSQL, []any{c.id, string(c.trace)}})
		}
	}
	return out
}

// collapseTimers reduces ops applied in order to their net effect: for each
// path only the last op counts (an upsert or a delete of one key leaves the
// state the last one set). It returns the schedules and the cancelled
// paths, each in the order of the paths' first appearance, disjoint.
func collapseTimers(ops []TimerOp) (schedules []TimerOp, cancels []string) {
	last := make(map[string]int, len(ops))
	var order []string
	for i, op := range ops {
		if _, seen := last[op.Path]; !seen {
			order = append(order, op.Path)
		}
		last[op.Path] = i
	}
	for _, p := range order {
		op := ops[last[p]]
		if op.Action == TimerSchedule {
			schedules = append(schedules, op)
		} else {
			cancels = append(cancels, p)
		}
	}
	return schedules, cancels
}
