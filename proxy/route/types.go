package route

// This file is the contract between the SQL analyzer (this package) and the
// proxy's session engine (package proxy). Change it only in agreement.

import (
	"github.com/pgshard/pgshard/shardmap"
)

// KeyType is the type of a sharding key.
type KeyType int

const (
	// KeyText keys hash with hashtextextended (executions.id, ...).
	KeyText KeyType = iota
	// KeyInt8 keys hash with hashint8extended (integer keys).
	KeyInt8
	// KeySeq keys are global sequence values (outbox.seq, spawns.seq): the
	// shard is the one whose ordinal generated them ((seq-1) % 1024).
	KeySeq
)

// TableKey names the sharding column of a table.
type TableKey struct {
	Table  string  // unqualified, lowercase
	Column string  // lowercase
	Type   KeyType //
}

// FuncKey names the argument of a function that carries the key.
type FuncKey struct {
	Function string // unqualified, lowercase
	Arg      int    // 0-based argument position
	Type     KeyType
}

// Schema says where keys live. DefaultSchema is the store's (DESIGN.md §2).
type Schema struct {
	Tables    []TableKey
	Functions []FuncKey
	// Global lists tables that are NOT sharded but exist identically on every
	// shard (reference tables); statements touching only them may run on any
	// shard. Writes to them are refused unless hinted.
	Global []string
}

// DefaultSchema is the execution store's sharding schema: executions.id,
// processed_events.execution_id, timers.execution_id, trace.execution_id,
// spawns.parent_id (text); outbox.seq and spawns.seq (sequence stride);
// harel_commit_cas's first argument.
func DefaultSchema() Schema {
	return Schema{
		Tables: []TableKey{
			{Table: "executions", Column: "id", Type: KeyText},
			{Table: "processed_events", Column: "execution_id", Type: KeyText},
			{Table: "timers", Column: "execution_id", Type: KeyText},
			{Table: "trace", Column: "execution_id", Type: KeyText},
			{Table: "spawns", Column: "parent_id", Type: KeyText},
			{Table: "outbox", Column: "seq", Type: KeySeq},
			{Table: "spawns", Column: "seq", Type: KeySeq},
		},
		Functions: []FuncKey{{Function: "harel_commit_cas", Arg: 0, Type: KeyText}},
	}
}

// Kind classifies a statement for the session engine.
type Kind int

const (
	KindOther       Kind = iota // an ordinary statement (SELECT/INSERT/UPDATE/DELETE/CALL/...)
	KindBegin                   // BEGIN / START TRANSACTION (deferred until the shard is known)
	KindCommit                  // COMMIT / END / COMMIT AND CHAIN (Chain set)
	KindRollback                // ROLLBACK / ABORT
	KindSavepoint               // SAVEPOINT / RELEASE / ROLLBACK TO (deferred like BEGIN when unbound)
	KindSetLocal                // SET LOCAL x = ... (deferred; `SET LOCAL pgshard.key` is a hint, never sent)
	KindSetSession              // session SET x = ... / RESET x / RESET ALL / SET SESSION ...
	KindShow                    // SHOW x
	KindDeallocate              // DEALLOCATE name | DEALLOCATE ALL (handled by the proxy)
	KindDiscard                 // DISCARD ALL / PLANS / SEQUENCES / TEMP (handled by the proxy)
	KindPrepare                 // SQL-level PREPARE name AS ... (virtualized)
	KindExecute                 // SQL-level EXECUTE name(...)
	KindUnsupported             // cannot work behind a transaction pooler (LISTEN, session advisory locks, WITH HOLD cursors, temp tables, ...): Reason says why
	KindDDL                     // schema change without a key: applied to every shard
	KindEmpty                   // empty query string / only comments
)

// DestKind is where a statement must run.
type DestKind int

const (
	DestAny    DestKind = iota // touches no sharded data (SELECT 1, SHOW, now()): any shard will do
	DestShard                  // exactly one shard (Shard)
	DestAll                    // every shard (DDL, key-less read to fan out and merge)
	DestRefuse                 // cannot be routed correctly: the engine answers Refusal
)

// Dest is a routing decision, a value (not an action).
type Dest struct {
	Kind    DestKind
	Shard   int    // index into the map's Shards, for DestShard
	Key     string // the key that decided (text form), for explanations
	Bucket  int    // its bucket, -1 when not from a key
	Reason  string // one line: why ("executions.id = $1 → 'abc…' → bucket 17 → shard1")
	Refusal *Refusal
}

// Refusal is an error the engine sends to the client instead of routing.
type Refusal struct {
	SQLState string // e.g. 0A000 feature_not_supported
	Message  string
	Detail   string
	Hint     string
}

// Merge says how the engine combines a DestAll read's per-shard results.
// Nil for statements that need no merge (DDL) or cannot be merged (then the
// statement is DestRefuse).
type Merge struct {
	// SQL is the statement to send to each shard (e.g. LIMIT n OFFSET m
	// rewritten to LIMIT n+m; AVG split into SUM and COUNT). Empty = unchanged.
	SQL string
	// OrderBy lists result column positions to k-way merge by.
	OrderBy []SortKey
	// Limit / Offset apply after merging; -1 = none.
	Limit, Offset int64
	// Aggregates, when set, combine the single row each shard returns
	// (count/sum → sum, min → min, max → max) column by column.
	Aggregates []Agg
}

// SortKey is one ORDER BY term of a merge.
type SortKey struct {
	Column     int // 0-based result column
	Desc       bool
	NullsFirst bool
}

// Agg combines one result column across shards.
type Agg int

const (
	AggNone Agg = iota // keep (must be equal on every shard, e.g. a constant)
	AggSum             // count(*), count(x), sum(x)
	AggMin
	AggMax
)

// Statement is the cached analysis of one SQL statement text. It is
// immutable and shared between sessions.
type Statement struct {
	SQL  string
	Kind Kind
	// Reason explains KindUnsupported / refusals.
	Reason string
	// NumParams is the highest $n referenced.
	NumParams int
	// ReadOnly is true for statements that change no data (safe to fan out
	// outside a transaction).
	ReadOnly bool
	// Chain is set for COMMIT/ROLLBACK AND CHAIN.
	Chain bool
	// SetName / SetValue for KindSetLocal, KindSetSession, KindShow (lowercase name).
	SetName, SetValue string
	// PrepareName for KindPrepare/KindExecute/KindDeallocate ("" = ALL).
	PrepareName string

	// Unexported: where keys come from (constants, $n params with their
	// cast type, hints), the tables touched, the merge plan. Route uses them.
}

// Analyzer parses statements with Postgres's own grammar and routes them.
// It is safe for concurrent use; analyses are cached per statement text.
type Analyzer interface {
	// Split splits a simple-Query string into its statements, analyzed.
	// An empty or comment-only query yields one KindEmpty statement.
	Split(sql string) ([]*Statement, error)
	// Analyze analyzes one statement (the Parse message's query; a Parse may
	// carry one statement only).
	Analyze(sql string) (*Statement, error)
	// Route decides where st runs given its Bind parameters (nil for simple
	// queries), their format codes (as in Bind: none = all text, one = for
	// all, else per parameter) and the parameter type OIDs the client
	// declared in Parse (0 = unspecified).
	Route(st *Statement, params [][]byte, formats []int16, paramOIDs []uint32) Dest
	// RouteKey routes an explicit key (hints: SET LOCAL pgshard.key).
	RouteKey(key string, t KeyType) Dest
	// Map is the shard map routes refer to.
	Map() *shardmap.Map
}
