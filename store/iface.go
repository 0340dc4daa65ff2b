package store

import (
	"context"
	"encoding/json"
)

// ExecutionStore is the execution store's operations, the seed's API with a
// context first. *Store (one database) and *router.Router (every shard of a
// map) implement it; workers, the load generator and the chaos suite use
// it without knowing which.
type ExecutionStore interface {
	// Commit persists exe and a step's side effects atomically; see
	// (*Store).Commit for the exact semantics.
	Commit(ctx context.Context, exe *Execution, emits []Emit, processedEventID string,
		timers []TimerOp, spawns []Spawn, trace json.RawMessage) error
	// Save is Commit without side effects.
	Save(ctx context.Context, exe *Execution) error
	// Load returns an execution, or an error matching ErrNotFound.
	Load(ctx context.Context, id string) (*Execution, error)
	// LoadForEvent returns an execution and whether it processed eventID,
	// in one query.
	LoadForEvent(ctx context.Context, id, eventID string) (*Execution, bool, error)
	// IsProcessed reports whether execution id processed eventID.
	IsProcessed(ctx context.Context, id, eventID string) (bool, error)
	// PendingOutbox returns up to limit outbox rows (limit <= 0: all),
	// each shard's rows oldest first by seq. Over several shards
	// (*router.Router) the limit is shared fairly among the shards and no
	// order across shards is promised.
	PendingOutbox(ctx context.Context, limit int) ([]OutboxRow, error)
	// AckOutbox deletes outbox row seq.
	AckOutbox(ctx context.Context, seq int64) error
	// PendingSpawns returns up to limit spawn intents (limit <= 0: all),
	// in the order PendingOutbox promises for outbox rows.
	PendingSpawns(ctx context.Context, limit int) ([]SpawnRow, error)
	// AckSpawn deletes spawn intent seq.
	AckSpawn(ctx context.Context, seq int64) error
	// DueTimers returns up to limit timers with fire_at <= now by fire_at
	// (limit <= 0: all).
	DueTimers(ctx context.Context, now float64, limit int) ([]Timer, error)
	// DeleteTimer deletes a timer only if it still fires at fireAt.
	DeleteTimer(ctx context.Context, id, path string, fireAt float64) (bool, error)
	// AppendTrace appends an entry to an execution's trace ring.
	AppendTrace(ctx context.Context, id string, entry json.RawMessage) error
	// ReadTrace returns an execution's trace ring with durable indexes.
	ReadTrace(ctx context.Context, id string) ([]TraceEntry, error)
	// ListExecutions returns one page of executions ordered by id.
	ListExecutions(ctx context.Context, o ListOptions) (Page, error)
	// Close releases the store's connections.
	Close()
}
