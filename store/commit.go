package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
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
// path, pgshard_commit_cas, on pgshard_cas (harel_commit_cas's CAS under
// pgshard's own name). Any other commit
// is one call of pgshard_commit, which runs the same CAS and, only if it
// won, the side effects. Either returns a lost CAS as data with the version
// it found, so a conflict costs the same one round trip.
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
	sql, args := fastSQL, c.casArgs()
	if !c.stateOnly() {
		sql, args = commitSQL, c.args()
	}
	b := s.newBatch()
	b.Queue(sql, args...)
	read := func(br pgx.BatchResults) error {
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
	if len(exe.ID) > MaxIDLength {
		return fmt.Errorf("commit execution %.40q…: the id is %d bytes, at most %d are allowed", exe.ID, len(exe.ID), MaxIDLength)
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

// commitSQL is any other commit: the CAS and every side effect in one
// server-side function (migration 0005), whose statements' plans the
// server session caches.
const commitSQL = `SELECT committed, found_version FROM pgshard_commit($1::text, $2::text, $3::text, $4::int, $5::text,
    $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::float8[], $13::text[], $14::text, $15::int)`

// Standalone trace appends (AppendTrace); a commit's entry is appended by
// pgshard_commit the same way.
const (
	// traceSQL appends one entry with idx computed inline.
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

// args returns commitSQL's arguments: each collection as parallel arrays
// (never NULL; a NULL element of the targets is an emit without target),
// the timer ops reduced to their net effect, a missing trace entry as NULL.
func (c *commitArgs) args() []any {
	targets := make([]pgtype.Text, len(c.emits)) // not Valid: NULL, no target
	events := make([]string, len(c.emits))
	for i, e := range c.emits {
		targets[i] = pgtype.Text{String: e.TargetID, Valid: e.TargetID != "" || e.HasTarget}
		events[i] = string(e.Event)
	}
	children := make([]string, len(c.spawns))
	roots := make([]string, len(c.spawns))
	contexts := make([]string, len(c.spawns))
	for i, sp := range c.spawns {
		children[i], roots[i], contexts[i] = sp.ChildID, sp.RootPath, string(sp.Context)
		if len(sp.Context) == 0 {
			contexts[i] = "{}"
		}
	}
	sched, cancels := collapseTimers(c.timers)
	paths := make([]string, len(sched))
	at := make([]float64, len(sched))
	for i, t := range sched {
		paths[i], at[i] = t.Path, t.FireAt
	}
	if cancels == nil {
		cancels = []string{}
	}
	var trace any
	if len(c.trace) > 0 {
		trace = string(c.trace)
	}
	return append(c.casArgs(), targets, events, children, roots, contexts, paths, at, cancels, trace, c.traceMax)
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
