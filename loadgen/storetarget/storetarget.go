// Package storetarget adapts the execution store (a *store.Store over one
// DSN, or a *router.Router over every shard of a map; anything that
// implements store.ExecutionStore) to loadgen.Target, so the load generator
// drives the store's real code paths: the same Commit, LoadForEvent and
// relay reads that workers use.
package storetarget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pgshard/pgshard/loadgen"
	"github.com/pgshard/pgshard/store"
)

// Target is a loadgen.Target over a store.ExecutionStore.
type Target struct {
	s store.ExecutionStore
}

var _ loadgen.Target = (*Target)(nil)

// New returns the adapter; Close closes s.
func New(s store.ExecutionStore) *Target { return &Target{s: s} }

// context is the workload state as stored in the execution's context.
type stateDoc struct {
	Step    int64              `json:"step"`
	Last    string             `json:"last,omitempty"`
	Op      string             `json:"op,omitempty"`
	Timers  map[string]float64 `json:"timers,omitempty"`
	Payload string             `json:"payload,omitempty"`
}

func fromStore(e *store.Execution) (*loadgen.Execution, error) {
	x := &loadgen.Execution{ID: e.ID, DefinitionID: e.DefinitionID, Version: e.Version}
	if len(e.ActivePath) > 0 {
		x.State.Active = e.ActivePath[0]
	}
	if len(e.Context) > 0 {
		var d stateDoc
		if err := json.Unmarshal(e.Context, &d); err != nil {
			return nil, fmt.Errorf("execution %s: context is not loadgen state: %w", e.ID, err)
		}
		x.State.Step, x.State.Last, x.State.Op, x.State.Timers, x.State.Payload = d.Step, d.Last, d.Op, d.Timers, d.Payload
	}
	return x, nil
}

func toStore(x *loadgen.Execution) (*store.Execution, error) {
	ctx, err := json.Marshal(stateDoc{Step: x.State.Step, Last: x.State.Last, Op: x.State.Op, Timers: x.State.Timers, Payload: x.State.Payload})
	if err != nil {
		return nil, err
	}
	e := &store.Execution{ID: x.ID, DefinitionID: x.DefinitionID, Version: x.Version, Status: "running", Context: ctx}
	if x.State.Active != "" {
		e.ActivePath = []string{x.State.Active}
	}
	return e, nil
}

// LoadForEvent implements loadgen.Target; an absent execution is nil.
func (t *Target) LoadForEvent(ctx context.Context, id, eventID string) (*loadgen.Execution, bool, error) {
	e, done, err := t.s.LoadForEvent(ctx, id, eventID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	x, err := fromStore(e)
	return x, done, err
}

// Commit implements loadgen.Target.
func (t *Target) Commit(ctx context.Context, c *loadgen.Commit) error {
	e, err := toStore(&c.Exe)
	if err != nil {
		return err
	}
	var emits []store.Emit
	for _, em := range c.Emits {
		emits = append(emits, store.Emit{TargetID: em.TargetID, Event: json.RawMessage(em.Event)})
	}
	var timers []store.TimerOp
	for _, op := range c.Timers {
		if op.Cancel {
			timers = append(timers, store.Cancel(op.Path))
		} else {
			timers = append(timers, store.Schedule(op.Path, op.FireAt))
		}
	}
	var spawns []store.Spawn
	for _, s := range c.Spawns {
		spawns = append(spawns, store.Spawn{ChildID: s.ChildID, RootPath: s.RootPath, Context: json.RawMessage(s.Context)})
	}
	var trace json.RawMessage
	if c.Trace != "" {
		trace = json.RawMessage(c.Trace)
	}
	err = t.s.Commit(ctx, e, emits, c.ProcessedEventID, timers, spawns, trace)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrConflict):
		found := -1
		var ce *store.ConflictError
		if errors.As(err, &ce) {
			found = ce.Found
		}
		return &loadgen.ConflictError{Found: found, Err: err}
	case errors.Is(err, store.ErrOutcomeUnknown):
		return fmt.Errorf("%w: %w", loadgen.ErrOutcomeUnknown, err)
	}
	return err
}

// PendingOutbox implements loadgen.Target.
func (t *Target) PendingOutbox(ctx context.Context, limit int) ([]loadgen.OutboxEntry, error) {
	rows, err := t.s.PendingOutbox(ctx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]loadgen.OutboxEntry, len(rows))
	for i, r := range rows {
		out[i] = loadgen.OutboxEntry{Seq: r.Seq, TargetID: r.TargetID, Event: string(r.Event)}
	}
	return out, nil
}

// AckOutbox implements loadgen.Target.
func (t *Target) AckOutbox(ctx context.Context, seq int64) error { return t.s.AckOutbox(ctx, seq) }

// PendingSpawns implements loadgen.Target.
func (t *Target) PendingSpawns(ctx context.Context, limit int) ([]loadgen.SpawnEntry, error) {
	rows, err := t.s.PendingSpawns(ctx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]loadgen.SpawnEntry, len(rows))
	for i, r := range rows {
		out[i] = loadgen.SpawnEntry{Seq: r.Seq, ParentID: r.ParentID, ChildID: r.ChildID}
	}
	return out, nil
}

// AckSpawn implements loadgen.Target.
func (t *Target) AckSpawn(ctx context.Context, seq int64) error { return t.s.AckSpawn(ctx, seq) }

// DueTimers implements loadgen.Target.
func (t *Target) DueTimers(ctx context.Context, now float64, limit int) ([]loadgen.TimerEntry, error) {
	ts, err := t.s.DueTimers(ctx, now, limit)
	if err != nil {
		return nil, err
	}
	out := make([]loadgen.TimerEntry, len(ts))
	for i, tm := range ts {
		out[i] = loadgen.TimerEntry{ExecutionID: tm.ExecutionID, Path: tm.Path, FireAt: tm.FireAt}
	}
	return out, nil
}

// DeleteTimer implements loadgen.Target.
func (t *Target) DeleteTimer(ctx context.Context, id, path string, fireAt float64) (bool, error) {
	return t.s.DeleteTimer(ctx, id, path, fireAt)
}

// Close implements loadgen.Target.
func (t *Target) Close() { t.s.Close() }
