package loadgen

import (
	"context"
	"errors"
)

// ErrConflict is wrapped by a Target's Commit when the CAS on the
// execution's version failed (another writer committed first).
var ErrConflict = errors.New("loadgen: commit conflict")

// ErrOutcomeUnknown is wrapped by a Target's Commit when the commit may or
// may not have been applied (the connection failed after it was sent).
var ErrOutcomeUnknown = errors.New("loadgen: commit outcome unknown")

// Execution is the part of a stored execution the workload reads and writes.
// Version is the CAS token: a Commit of an Execution with Version v succeeds
// only if the stored version is still v (0 = first save).
type Execution struct {
	ID           string
	DefinitionID string
	Version      int
	// State is the workload's own state (stored in the execution's data).
	State State
}

// State is the deterministic state machine the workload drives. It is
// stored inside the execution's data (context and active path).
type State struct {
	// Step counts applied events.
	Step int64 `json:"step"`
	// Active is the active state's name.
	Active string `json:"active"`
	// Last is the id of the last applied event.
	Last string `json:"last,omitempty"`
	// Op is the id of the commit op that wrote this version (see Observer).
	Op string `json:"op,omitempty"`
	// Timers are the timers armed after this version, by path (fire_at in
	// Unix seconds): what the timers table must hold for the execution.
	Timers map[string]float64 `json:"timers,omitempty"`
	// Payload pads the stored document to a realistic size.
	Payload string `json:"payload,omitempty"`
}

// Emit is one outbox row written by a commit.
type Emit struct {
	// ID is the event's id (also inside Event); targets need not store it.
	ID       string
	TargetID string
	Event    string
}

// TimerOp schedules (upserts) or cancels the timer at Path.
type TimerOp struct {
	Path   string
	FireAt float64 // unix seconds
	Cancel bool
}

// Spawn is one spawn intent written by a commit.
type Spawn struct {
	ChildID  string
	RootPath string
	Context  string
}

// Commit is everything one transition writes, in one transaction.
type Commit struct {
	// Exe carries the new state and, in Version, the version it was loaded
	// at (the CAS token).
	Exe              Execution
	Emits            []Emit
	ProcessedEventID string
	Timers           []TimerOp
	Spawns           []Spawn
	// Trace is one trace entry (JSON), "" for none.
	Trace string
}

// Fast reports whether c is a state-only commit (the store's one-round-trip
// fast path).
func (c *Commit) Fast() bool {
	return len(c.Emits) == 0 && len(c.Timers) == 0 && len(c.Spawns) == 0 && c.Trace == ""
}

// OutboxEntry is one pending outbox row.
type OutboxEntry struct {
	Seq      int64
	TargetID string
	Event    string
}

// SpawnEntry is one pending spawn intent.
type SpawnEntry struct {
	Seq      int64
	ParentID string
	ChildID  string
}

// TimerEntry is one armed timer.
type TimerEntry struct {
	ExecutionID string
	Path        string
	FireAt      float64 // unix seconds
}

// Target is the store under load: the operations of the worker loop and
// the relays. Implementations must be safe for concurrent use. Commit
// returns an error wrapping ErrConflict when the CAS failed; errors carrying
// a SQLSTATE should expose it with a SQLState() string method (as
// *pgconn.PgError does) so outcomes can be counted by class.
type Target interface {
	// LoadForEvent returns the execution (nil, false, nil if it does not
	// exist) and whether eventID was already processed for it, in one query.
	LoadForEvent(ctx context.Context, id, eventID string) (*Execution, bool, error)
	// Commit writes c in one transaction.
	Commit(ctx context.Context, c *Commit) error
	// PendingOutbox returns up to limit pending outbox rows (each shard's
	// oldest first; no order across shards is promised).
	PendingOutbox(ctx context.Context, limit int) ([]OutboxEntry, error)
	// AckOutbox deletes one outbox row.
	AckOutbox(ctx context.Context, seq int64) error
	// PendingSpawns returns up to limit pending spawn intents (each
	// shard's oldest first).
	PendingSpawns(ctx context.Context, limit int) ([]SpawnEntry, error)
	// AckSpawn deletes one spawn intent.
	AckSpawn(ctx context.Context, seq int64) error
	// DueTimers returns up to limit timers with fire_at <= now (unix
	// seconds), by fire_at.
	DueTimers(ctx context.Context, now float64, limit int) ([]TimerEntry, error)
	// DeleteTimer deletes the timer only if its fire_at still matches and
	// reports whether it did.
	DeleteTimer(ctx context.Context, id, path string, fireAt float64) (bool, error)
	// Close releases the target's connections.
	Close()
}

// Locator says on which shard an execution id lives.
type Locator interface {
	// Shards names the shards, by index.
	Shards() []string
	// ShardOf returns the index (into Shards) of the shard owning id.
	ShardOf(id string) int
}

// singleShard is the Locator of a target without a shard map.
type singleShard string

func (s singleShard) Shards() []string   { return []string{string(s)} }
func (s singleShard) ShardOf(string) int { return 0 }

// SingleShard is a Locator that puts every execution on one shard named
// name (used when the target is reached through one DSN and no map is known).
func SingleShard(name string) Locator { return singleShard(name) }
