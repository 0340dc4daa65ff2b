package storetarget_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/loadgen/storetarget"
	"github.com/pgshard/pgshard/store"
)

// fakeStore records what the adapter passes and returns canned answers.
// Unused methods of the interface panic (nil embedded interface).
type fakeStore struct {
	store.ExecutionStore
	exe       *store.Execution
	processed bool
	loadErr   error
	commitErr error

	got struct {
		exe     store.Execution
		emits   []store.Emit
		event   string
		timers  []store.TimerOp
		spawns  []store.Spawn
		trace   json.RawMessage
		closed  bool
		deleted [3]any
	}
}

func (f *fakeStore) LoadForEvent(_ context.Context, id, eventID string) (*store.Execution, bool, error) {
	if f.loadErr != nil {
		return nil, false, f.loadErr
	}
	return f.exe, f.processed, nil
}

func (f *fakeStore) Commit(_ context.Context, exe *store.Execution, emits []store.Emit, ev string, timers []store.TimerOp, spawns []store.Spawn, trace json.RawMessage) error {
	f.got.exe, f.got.emits, f.got.event, f.got.timers, f.got.spawns, f.got.trace = *exe, emits, ev, timers, spawns, trace
	return f.commitErr
}

func (f *fakeStore) PendingOutbox(_ context.Context, limit int) ([]store.OutboxRow, error) {
	return []store.OutboxRow{{Seq: 1025, TargetID: "t", Event: json.RawMessage(`{"id":"e"}`)}}, nil
}

func (f *fakeStore) DueTimers(_ context.Context, now float64, limit int) ([]store.Timer, error) {
	return []store.Timer{{ExecutionID: "x", Path: "t0", FireAt: 12.5}}, nil
}

func (f *fakeStore) DeleteTimer(_ context.Context, id, path string, at float64) (bool, error) {
	f.got.deleted = [3]any{id, path, at}
	return true, nil
}

func (f *fakeStore) Close() { f.got.closed = true }

func TestRoundTripOfState(t *testing.T) {
	f := &fakeStore{}
	tg := storetarget.New(f)
	ctx := context.Background()
	c := &loadgen.Commit{
		Exe:              loadgen.Execution{ID: "abc", DefinitionID: "loadgen", Version: 3, State: loadgen.State{Step: 7, Active: "running", Last: "ev6", Op: "r/w1/3", Timers: map[string]float64{"t0": 100.25}, Payload: "xx"}},
		Emits:            []loadgen.Emit{{TargetID: "def", Event: `{"id":"e1"}`}},
		ProcessedEventID: "ev7",
		Timers:           []loadgen.TimerOp{{Path: "t0", FireAt: 100.25}, {Path: "t1", Cancel: true}},
		Spawns:           []loadgen.Spawn{{ChildID: "kid", RootPath: "child", Context: "{}"}},
		Trace:            `{"step":7}`,
	}
	if err := tg.Commit(ctx, c); err != nil {
		t.Fatal(err)
	}
	g := f.got
	if g.exe.ID != "abc" || g.exe.Version != 3 || g.exe.DefinitionID != "loadgen" || g.event != "ev7" || len(g.exe.ActivePath) != 1 {
		t.Errorf("execution passed as %+v, event %q", g.exe, g.event)
	}
	if len(g.emits) != 1 || g.emits[0].TargetID != "def" || string(g.emits[0].Event) != `{"id":"e1"}` {
		t.Errorf("emits %+v", g.emits)
	}
	if len(g.timers) != 2 || g.timers[0] != store.Schedule("t0", 100.25) || g.timers[1] != store.Cancel("t1") {
		t.Errorf("timers %+v", g.timers)
	}
	if len(g.spawns) != 1 || g.spawns[0].ChildID != "kid" || string(g.trace) != `{"step":7}` {
		t.Errorf("spawns %+v trace %s", g.spawns, g.trace)
	}
	// What was committed loads back as the same state.
	stored := g.exe
	f.exe, f.processed = &stored, true
	x, done, err := tg.LoadForEvent(ctx, "abc", "ev7")
	if err != nil || !done || !reflect.DeepEqual(x.State, c.Exe.State) || x.Version != 3 {
		t.Fatalf("load back: %+v %v %v", x, done, err)
	}
	// A fast commit passes no side effects at all.
	if err := tg.Commit(ctx, &loadgen.Commit{Exe: c.Exe, ProcessedEventID: "ev8"}); err != nil {
		t.Fatal(err)
	}
	if f.got.emits != nil || f.got.timers != nil || f.got.spawns != nil || f.got.trace != nil {
		t.Errorf("fast commit passed side effects: %+v", f.got)
	}
}

func TestErrorsMapToLoadgen(t *testing.T) {
	ctx := context.Background()
	f := &fakeStore{loadErr: fmt.Errorf("load execution x: %w", store.ErrNotFound)}
	tg := storetarget.New(f)
	if x, _, err := tg.LoadForEvent(ctx, "x", "e"); x != nil || err != nil {
		t.Errorf("absent execution: %v, %v; want nil, nil", x, err)
	}
	f.loadErr = errors.New("boom")
	if _, _, err := tg.LoadForEvent(ctx, "x", "e"); err == nil {
		t.Error("load error swallowed")
	}
	f.commitErr = &store.ConflictError{ID: "x", Expected: 1, Found: 2}
	err := tg.Commit(ctx, &loadgen.Commit{Exe: loadgen.Execution{ID: "x", Version: 1}})
	if !errors.Is(err, loadgen.ErrConflict) || !errors.Is(err, store.ErrConflict) {
		t.Errorf("conflict: %v", err)
	}
	pg := &pgconn.PgError{Code: "57P01", Severity: "FATAL", Message: "terminating connection"}
	f.commitErr = fmt.Errorf("%w: %w", store.ErrOutcomeUnknown, pg)
	err = tg.Commit(ctx, &loadgen.Commit{Exe: loadgen.Execution{ID: "x", Version: 1}})
	if !errors.Is(err, loadgen.ErrOutcomeUnknown) || loadgen.ErrorClass(err) != "outcome_unknown" {
		t.Errorf("unknown outcome: %v (class %s)", err, loadgen.ErrorClass(err))
	}
	f.commitErr = pg
	if err := tg.Commit(ctx, &loadgen.Commit{Exe: loadgen.Execution{ID: "x", Version: 1}}); loadgen.ErrorClass(err) != "sqlstate_57" {
		t.Errorf("class of %v = %s", err, loadgen.ErrorClass(err))
	}
	rows, _ := tg.PendingOutbox(ctx, 10)
	due, _ := tg.DueTimers(ctx, 20, 10)
	ok, _ := tg.DeleteTimer(ctx, "x", "t0", 12.5)
	if len(rows) != 1 || rows[0].Seq != 1025 || rows[0].Event != `{"id":"e"}` || len(due) != 1 || due[0].FireAt != 12.5 || !ok || f.got.deleted != [3]any{"x", "t0", 12.5} {
		t.Errorf("relay reads: %+v %+v %v", rows, due, f.got.deleted)
	}
	tg.Close()
	if !f.got.closed {
		t.Error("Close not passed on")
	}
}
