package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/store"
)

// faultTriggers installs, in the test's database only, triggers that let a
// test break a commit part-way: an outbox event containing "boom" violates
// a constraint-like check, and a trace entry containing "sleep" holds the
// transaction (after the CAS, outbox, spawns and timers ran) for up to 30 s.
const faultTriggers = `
CREATE FUNCTION test_outbox_boom() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.event LIKE '%boom%' THEN
        RAISE EXCEPTION 'injected failure' USING ERRCODE = '23514';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_outbox_boom BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION test_outbox_boom();
CREATE FUNCTION test_trace_sleep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.entry LIKE '%sleep%' THEN
        PERFORM pg_sleep(30);
    END IF;
    IF NEW.entry LIKE '%nap%' THEN
        PERFORM pg_sleep(1.5);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_trace_sleep BEFORE INSERT ON trace FOR EACH ROW EXECUTE FUNCTION test_trace_sleep();
`

func installFaults(t *testing.T, s *store.Store) {
	t.Helper()
	if _, err := s.Pool().Exec(ctxT(t), faultTriggers); err != nil {
		t.Fatal(err)
	}
}

// leftovers counts what a commit of id with event eventID may have left.
type leftovers struct {
	version, outbox, dedupe, timers, spawns, trace int
}

func countLeftovers(t *testing.T, s *store.Store, id, eventID string) leftovers {
	t.Helper()
	var l leftovers
	l.version = countRows(t, s, `SELECT COALESCE(max(version), 0) FROM executions WHERE id = $1`, id)
	l.outbox = countRows(t, s, `SELECT count(*) FROM outbox WHERE target_id = $1`, id)
	l.dedupe = countRows(t, s, `SELECT count(*) FROM processed_events WHERE execution_id = $1 AND event_id = $2`, id, eventID)
	l.timers = countRows(t, s, `SELECT count(*) FROM timers WHERE execution_id = $1`, id)
	l.spawns = countRows(t, s, `SELECT count(*) FROM spawns WHERE parent_id = $1`, id)
	l.trace = countRows(t, s, `SELECT count(*) FROM trace WHERE execution_id = $1`, id)
	return l
}

// complexCommit commits e with every kind of side effect; trace decides
// how the commit ends (see faultTriggers).
func complexCommit(ctx context.Context, s *store.Store, e *store.Execution, eventID, event, trace string) error {
	return s.Commit(ctx, e,
		[]store.Emit{{TargetID: e.ID, Event: json.RawMessage(`{"n":1}`)}, {TargetID: e.ID, Event: json.RawMessage(event)}},
		eventID,
		[]store.TimerOp{store.Schedule("wait", 1e9)},
		[]store.Spawn{{ChildID: "child-of-" + e.ID, RootPath: "r"}},
		json.RawMessage(trace))
}

// TestAtomicityInjectedFailure: a statement failing in the middle of the
// pipelined batch leaves nothing behind — no outbox row (not even the
// ones inserted before the failure), no dedupe row, no timer, no spawn, no
// trace, no version bump — and the error is a definite failure.
func TestAtomicityInjectedFailure(t *testing.T) {
	eachMode(t, store.Options{}, func(t *testing.T, s *store.Store, _ testDB) {
		installFaults(t, s)
		ctx := ctxT(t)
		for _, first := range []bool{true, false} {
			name := map[bool]string{true: "first save", false: "update"}[first]
			t.Run(name, func(t *testing.T) {
				id := newID(t)
				e := &store.Execution{ID: id, DefinitionID: "d"}
				want := leftovers{}
				if !first {
					if err := s.Save(ctx, e); err != nil {
						t.Fatal(err)
					}
					want.version = 1
				}
				before := e.Version
				err := complexCommit(ctx, s, e, "ev1", `{"boom":true}`, `{"step":1}`)
				var pe *pgconn.PgError
				if !errors.As(err, &pe) || pe.Code != "23514" {
					t.Fatalf("error %v, want the injected 23514", err)
				}
				if errors.Is(err, store.ErrOutcomeUnknown) || errors.Is(err, store.ErrConflict) {
					t.Errorf("error %v: a server error is a definite failure", err)
				}
				if !strings.Contains(err.Error(), id) {
					t.Errorf("error %q does not name the execution", err)
				}
				if e.Version != before {
					t.Errorf("in-memory version %d, want it restored to %d", e.Version, before)
				}
				if got := countLeftovers(t, s, id, "ev1"); got != want {
					t.Errorf("left behind %+v, want %+v", got, want)
				}
				// The connection is clean: the same commit without the fault succeeds.
				if err := complexCommit(ctx, s, e, "ev1", `{"ok":true}`, `{"step":1}`); err != nil {
					t.Fatal(err)
				}
				want = leftovers{version: before + 1, outbox: 2, dedupe: 1, timers: 1, spawns: 1, trace: 1}
				if got := countLeftovers(t, s, id, "ev1"); got != want {
					t.Errorf("after a clean commit: %+v, want %+v", got, want)
				}
			})
		}
	})
}

// TestAtomicityTerminatedBackend: the backend running a complex commit is
// killed with pg_terminate_backend while the transaction is open (held in a
// trigger after the CAS, outbox, spawns and timers ran). Nothing is left
// behind, and the error says the outcome is unknown (the transaction had
// been sent), which the store cannot rule out from the client side.
func TestAtomicityTerminatedBackend(t *testing.T) {
	eachMode(t, store.Options{}, func(t *testing.T, s *store.Store, d testDB) {
		installFaults(t, s)
		ctx := ctxT(t)
		id := newID(t)
		e := &store.Execution{ID: id, DefinitionID: "d"}
		if err := s.Save(ctx, e); err != nil {
			t.Fatal(err)
		}
		// A separate admin store on the direct DSN finds and kills the backend.
		admin := testDB{shard: d.shard, mode: "direct"}.open(t, store.Options{})
		done := make(chan error, 1)
		go func() { done <- complexCommit(ctx, s, e, "ev1", `{"n":2}`, `{"sleep":true}`) }()
		var pid int
		deadline := time.Now().Add(20 * time.Second)
		for pid == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the commit's backend never showed up in pg_stat_activity")
			}
			err := admin.Pool().QueryRow(ctx, `SELECT COALESCE(max(pid), 0) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'
				AND query LIKE '%pgshard_commit(%'`).Scan(&pid)
			if err != nil {
				t.Fatal(err)
			}
			if pid == 0 {
				time.Sleep(20 * time.Millisecond) // polling interval, bounded by the deadline
			}
		}
		// The transaction is open and has written its outbox rows: visible to itself only.
		if n := countRows(t, admin, `SELECT count(*) FROM outbox WHERE target_id = $1`, id); n != 0 {
			t.Fatalf("%d uncommitted outbox rows visible to another session", n)
		}
		var killed bool
		if err := admin.Pool().QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed); err != nil || !killed {
			t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, killed, err)
		}
		var err error
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the commit did not return after its backend was terminated")
		}
		if err == nil {
			t.Fatal("the commit succeeded although its backend was terminated")
		}
		t.Logf("commit error: %v", err)
		if !errors.Is(err, store.ErrOutcomeUnknown) {
			t.Errorf("error %v does not match ErrOutcomeUnknown", err)
		}
		if e.Version != 1 {
			t.Errorf("in-memory version %d, want it restored to 1", e.Version)
		}
		if got, want := countLeftovers(t, admin, id, "ev1"), (leftovers{version: 1}); got != want {
			t.Errorf("left behind %+v, want %+v", got, want)
		}
		// The store recovers: the next commit runs on a healthy connection.
		if err := s.Commit(ctx, e, []store.Emit{{TargetID: id, Event: json.RawMessage(`{}`)}}, "", nil, nil, nil); err != nil {
			t.Fatalf("commit after the kill: %v", err)
		}
	})
}

// TestStatementTimeout: with StatementTimeout set, a statement that runs
// too long (a trigger holding the trace insert) fails with 57014, the
// commit leaves nothing, and the timeout does not leak into later
// transactions on the same server connections (no session state).
func TestStatementTimeout(t *testing.T) {
	eachMode(t, store.Options{StatementTimeout: 300 * time.Millisecond, MaxConns: 2}, func(t *testing.T, s *store.Store, _ testDB) {
		installFaults(t, s)
		ctx := ctxT(t)
		id := newID(t)
		e := &store.Execution{ID: id, DefinitionID: "d"}
		if err := s.Save(ctx, e); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err := complexCommit(ctx, s, e, "ev1", `{"n":2}`, `{"sleep":true}`)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "57014" {
			t.Fatalf("error %v, want statement timeout 57014", err)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("the timeout fired after %v (the trigger sleeps 30 s)", took)
		}
		if errors.Is(err, store.ErrOutcomeUnknown) {
			t.Error("a statement timeout is a server ERROR: a definite failure")
		}
		if got, want := countLeftovers(t, s, id, "ev1"), (leftovers{version: 1}); got != want {
			t.Errorf("left behind %+v, want %+v", got, want)
		}
		for i := 0; i < 6; i++ {
			var v string
			if err := s.Pool().QueryRow(ctx, `SHOW statement_timeout`).Scan(&v); err != nil {
				t.Fatal(err)
			}
			if v != "0" {
				t.Fatalf("statement_timeout is %q outside the store's transactions: session state leaked", v)
			}
		}
		// Fast commits and reads carry the timeout too and work.
		if err := s.Save(ctx, e); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Load(ctx, id); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStallCheckSparesSlowOperations: an operation that runs long on a
// healthy server is checked (every 200 ms here) but never cancelled: the
// checks find the server answering.
func TestStallCheckSparesSlowOperations(t *testing.T) {
	eachMode(t, store.Options{StallCheck: 200 * time.Millisecond}, func(t *testing.T, s *store.Store, _ testDB) {
		installFaults(t, s)
		ctx := ctxT(t)
		e := &store.Execution{ID: newID(t), DefinitionID: "d"}
		start := time.Now()
		if err := complexCommit(ctx, s, e, "ev1", `{"n":1}`, `{"nap":true}`); err != nil {
			t.Fatalf("a slow commit on a healthy server failed: %v", err)
		}
		if took := time.Since(start); took < 1500*time.Millisecond {
			t.Fatalf("the commit took %v: the trigger did not hold it, the test proves nothing", took)
		}
		if got, want := countLeftovers(t, s, e.ID, "ev1"), (leftovers{version: 1, outbox: 2, dedupe: 1, timers: 1, spawns: 1, trace: 1}); got != want {
			t.Errorf("committed %+v, want %+v", got, want)
		}
	})
}
