package store_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgshard/pgshard/store"
)

// TestExecModes: the store's semantics hold in every exec mode it accepts;
// the modes without a describe step (exec, the default, and simple
// protocol) keep every commit at one round trip.
func TestExecModes(t *testing.T) {
	d := freshDB(t, "direct")
	for _, tt := range []struct {
		mode pgx.QueryExecMode
		rt   uint64 // round trips of a warm commit, 0: not asserted
	}{
		{pgx.QueryExecModeExec, 1},
		{pgx.QueryExecModeSimpleProtocol, 1},
		{pgx.QueryExecModeCacheDescribe, 0},
		{pgx.QueryExecModeCacheStatement, 0},
		{pgx.QueryExecModeDescribeExec, 2},
	} {
		t.Run(tt.mode.String(), func(t *testing.T) {
			s := d.open(t, store.Options{ExecMode: tt.mode, PingAfterIdle: -1, MaxConns: 1, TraceMax: 3})
			ctx := ctxT(t)
			e := &store.Execution{ID: newID(t), DefinitionID: "d", Context: json.RawMessage(`{"quote":"it's"}`)}
			step := newTypicalStep(e.ID, 1)
			for i := 0; i < 3; i++ { // warm any statement cache
				before := s.Stats().RoundTrips
				if err := s.Commit(ctx, e, step.emits, "ev", step.timers, []store.Spawn{{ChildID: "c'1", RootPath: "r"}}, step.trace); err != nil {
					t.Fatal(err)
				}
				if got := s.Stats().RoundTrips - before; i == 2 && tt.rt != 0 && got != tt.rt {
					t.Errorf("complex commit: %d round trips, want %d", got, tt.rt)
				}
			}
			if err := s.Save(ctx, e); err != nil {
				t.Fatal(err)
			}
			stale := &store.Execution{ID: e.ID, Version: 1}
			var ce *store.ConflictError
			if err := s.Commit(ctx, stale, step.emits, "", nil, nil, nil); !errors.As(err, &ce) || ce.Found != 4 {
				t.Fatalf("conflict: %v", err)
			}
			got, err := s.Load(ctx, e.ID)
			if err != nil || got.Version != 4 || string(got.Context) != `{"quote":"it's"}` {
				t.Fatalf("load: %+v, %v", got, err)
			}
			if n := countRows(t, s, `SELECT count(*) FROM outbox WHERE target_id = $1`, e.ID); n != 3 {
				t.Errorf("%d outbox rows, want 3", n)
			}
			tr, err := s.ReadTrace(ctx, e.ID)
			if err != nil || len(tr) != 3 || tr[2].Index != 2 {
				t.Errorf("trace: %+v, %v", tr, err)
			}
			if _, err := s.ListExecutions(ctx, store.ListOptions{Statuses: []string{"x", "y"}, RootsOnly: true}); err != nil {
				t.Errorf("list: %v", err)
			}
		})
	}
}

// TestCommitFunctionRejectsRaggedArrays: pgshard_commit refuses parallel
// arrays of different lengths (which unnest would pad with NULLs) before
// it touches anything.
func TestCommitFunctionRejectsRaggedArrays(t *testing.T) {
	d := freshDB(t, "direct")
	s := d.open(t, store.Options{})
	_, err := s.Pool().Exec(ctxT(t), `SELECT pgshard_commit('x', 'd', '{}', 0, '', ARRAY['a','b'], ARRAY['{}'],
		'{}', '{}', '{}', '{}', '{}', '{}', NULL, 0)`)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "22023" {
		t.Fatalf("error %v, want 22023", err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM executions WHERE id = 'x'`); n != 0 {
		t.Errorf("the rejected commit saved the execution")
	}
}
