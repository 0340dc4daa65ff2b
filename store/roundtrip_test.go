package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pgshard/pgshard/store"
)

// TestRoundTrips measures, on the wire, how many round trips each
// operation costs: one for every operation, including a complex commit, a
// lost CAS on either path, and everything with a statement timeout set;
// the seed's statement-by-statement commit needs one per statement.
func TestRoundTrips(t *testing.T) {
	for _, timeout := range []time.Duration{0, 5 * time.Second} {
		t.Run(fmt.Sprintf("statement_timeout=%v", timeout), func(t *testing.T) {
			// PingAfterIdle < 0: pgxpool's liveness ping of a connection
			// idle over 1 s would add a round trip to whichever
			// operation got it, on a slow machine.
			eachMode(t, store.Options{StatementTimeout: timeout, PingAfterIdle: -1, MaxConns: 1}, func(t *testing.T, s *store.Store, _ testDB) {
				ctx := ctxT(t)
				id := newID(t)
				e := &store.Execution{ID: id, DefinitionID: "d"}
				if err := s.Save(ctx, e); err != nil { // connects
					t.Fatal(err)
				}
				rt := func(name string, want uint64, op func() error) {
					t.Helper()
					before := s.Stats().RoundTrips
					if err := op(); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if got := s.Stats().RoundTrips - before; got != want {
						t.Errorf("%s: %d round trips, want %d", name, got, want)
					}
				}
				conflict := func(err error) error {
					if errors.Is(err, store.ErrConflict) {
						return nil
					}
					return fmt.Errorf("want a conflict, got %v", err)
				}
				step := newTypicalStep(id, 2)
				rt("fast commit", 1, func() error { return s.Commit(ctx, e, nil, "ev1", nil, nil, nil) })
				rt("first save", 1, func() error { return s.Save(ctx, &store.Execution{ID: newID(t)}) })
				rt("complex commit", 1, func() error {
					return s.Commit(ctx, e, step.emits, "ev2", step.timers,
						[]store.Spawn{{ChildID: newID(t), RootPath: "r"}}, step.trace)
				})
				rt("complex first save", 1, func() error {
					return s.Commit(ctx, &store.Execution{ID: newID(t)}, step.emits, "", nil, nil, nil)
				})
				stale := &store.Execution{ID: id, Version: 1}
				rt("fast conflict", 1, func() error { return conflict(s.Save(ctx, stale)) })
				rt("complex conflict", 1, func() error { return conflict(s.Commit(ctx, stale, step.emits, "", nil, nil, nil)) })
				rt("load", 1, func() error { _, err := s.Load(ctx, id); return err })
				rt("load for event", 1, func() error { _, _, err := s.LoadForEvent(ctx, id, "ev1"); return err })
				rt("is processed", 1, func() error { _, err := s.IsProcessed(ctx, id, "ev1"); return err })
				rt("pending outbox", 1, func() error { _, err := s.PendingOutbox(ctx, 10); return err })
				rt("ack outbox", 1, func() error { return s.AckOutbox(ctx, 1) })
				rt("pending spawns", 1, func() error { _, err := s.PendingSpawns(ctx, 0); return err })
				rt("ack spawn", 1, func() error { return s.AckSpawn(ctx, 1) })
				rt("due timers", 1, func() error { _, err := s.DueTimers(ctx, 2e9, 10); return err })
				rt("delete timer", 1, func() error { _, err := s.DeleteTimer(ctx, id, "x", 1); return err })
				rt("append trace", 1, func() error { return s.AppendTrace(ctx, id, json.RawMessage(`{}`)) })
				rt("read trace", 1, func() error { _, err := s.ReadTrace(ctx, id); return err })
				rt("list executions", 1, func() error { _, err := s.ListExecutions(ctx, store.ListOptions{Limit: 5}); return err })
				if timeout == 0 {
					// BEGIN, UPDATE, 2 outbox INSERTs, dedupe, timer, trace INSERT, COMMIT.
					rt("seed's complex commit", 8, func() error {
						return seedCommit(ctx, s, e, step.emits, "ev3", step.timers, nil, step.trace, 0)
					})
				}
			})
		})
	}
}
