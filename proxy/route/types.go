package route

// This file is the contract between the SQL analyzer (this package) and the
// proxy's session engine (package proxy). Change it only in agreement.

import (
	"strconv"
	"sync/atomic"
	"unsafe"

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

// String returns the key type's name as the sharding schema spells it:
// "text", "int8" or "seq".
func (t KeyType) String() string {
	switch t {
	case KeyText:
		return "text"
	case KeyInt8:
		return "int8"
	case KeySeq:
		return "seq"
	}
	return "KeyType(" + itoa(int64(t)) + ")"
}

// TableKey names the sharding column of a table.
type TableKey struct {
	Table  string  // unqualified, lowercase
	Column string  // lowercase
	Type   KeyType //
	// Position is the column's 1-based position in the table, used for an
	// INSERT without a column list; 0 = unknown (such an INSERT is refused).
	Position int
}

// FuncKey names the argument of a function that carries the key.
type FuncKey struct {
	Function string  // unqualified, lowercase
	Arg      int     // 0-based argument position
	Type     KeyType // the key's type
}

// Schema says where keys live. DefaultSchema is the store's (ARCHITECTURE.md §2).
//
// A table may have one placement key (KeyText or KeyInt8) and any number of
// KeySeq columns; a table with only KeySeq columns (outbox) places a new row
// on the shard of the statement that inserts it.
type Schema struct {
	// Tables are the keyed columns.
	Tables []TableKey
	// Functions are the function arguments that carry a key.
	Functions []FuncKey
	// Global lists tables that are NOT sharded but exist identically on every
	// shard (reference tables); statements touching only them may run on any
	// shard. Writes to them are refused unless hinted. Tables in neither
	// Tables nor Global are treated like Global tables.
	Global []string
	// HintType is the type of keys given by hints (`/* pgshard:key=... */`,
	// `SET LOCAL pgshard.key`) when the statement itself names no keyed
	// table; KeyText unless set.
	HintType KeyType
}

// DefaultSchema is the execution store's sharding schema: executions.id,
// processed_events.execution_id, timers.execution_id, trace.execution_id,
// spawns.parent_id (text); outbox.seq and spawns.seq (sequence stride);
// the first argument of harel_commit_cas, of the store's one-round-trip
// commit functions pgshard_commit_cas and pgshard_commit, and of the
// fence's pgshard_fence_assert and pgshard_fence_check.
func DefaultSchema() Schema {
	return Schema{
		Tables: []TableKey{
			{Table: "executions", Column: "id", Type: KeyText, Position: 1},
			{Table: "processed_events", Column: "execution_id", Type: KeyText, Position: 1},
			{Table: "timers", Column: "execution_id", Type: KeyText, Position: 1},
			{Table: "trace", Column: "execution_id", Type: KeyText, Position: 1},
			{Table: "spawns", Column: "parent_id", Type: KeyText, Position: 2},
			{Table: "outbox", Column: "seq", Type: KeySeq, Position: 1},
			{Table: "spawns", Column: "seq", Type: KeySeq, Position: 1},
		},
		Functions: []FuncKey{
			{Function: "harel_commit_cas", Arg: 0, Type: KeyText},
			{Function: "pgshard_commit_cas", Arg: 0, Type: KeyText},
			{Function: "pgshard_commit", Arg: 0, Type: KeyText},
			// the fence's assert and check on a key (migration 0008): the
			// store's keyed writes begin their batch with the assert
			{Function: "pgshard_fence_assert", Arg: 0, Type: KeyText},
			{Function: "pgshard_fence_check", Arg: 0, Type: KeyText},
		},
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
	KindSetLocal                // SET LOCAL x = ... / SET TRANSACTION ... (deferred; `SET LOCAL pgshard.key` is a hint, never sent)
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

var kindNames = [...]string{"other", "begin", "commit", "rollback", "savepoint", "set-local", "set-session",
	"show", "deallocate", "discard", "prepare", "execute", "unsupported", "ddl", "empty"}

// String returns the kind's lowercase name ("other", "begin", ...).
func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + itoa(int64(k)) + ")"
}

// DestKind is where a statement must run.
type DestKind int

const (
	DestAny    DestKind = iota // touches no sharded data (SELECT 1, SHOW, now()): any shard will do
	DestShard                  // exactly one shard (Shard)
	DestAll                    // every shard (DDL, key-less read to fan out and merge)
	DestRefuse                 // cannot be routed correctly: the engine answers Refusal
)

// String returns "any", "shard", "all" or "refuse".
func (k DestKind) String() string {
	switch k {
	case DestAny:
		return "any"
	case DestShard:
		return "shard"
	case DestAll:
		return "all"
	case DestRefuse:
		return "refuse"
	}
	return "DestKind(" + itoa(int64(k)) + ")"
}

// Dest is a routing decision, a value (not an action).
type Dest struct {
	Kind  DestKind // where: any, one shard, all, or refused
	Shard int      // index into the map's Shards, for DestShard
	// Key is the text key that decided; "" for an integer key, which
	// KeyInt carries (KeyText renders either). A key from a Bind
	// parameter aliases its bytes: valid while they are.
	Key    string
	Bucket int // its bucket, -1 when not from a key
	// Reason is one line: why; "" for a keyed decision, whose text Why
	// builds on demand (the route log samples it, errors and Explain read
	// it) from what the decision keeps in keyed. Read it through Why.
	Reason  string
	Refusal *Refusal // the error to send, for DestRefuse
	// Merge is the fan-out plan of a DestAll read; nil for DestAll DDL
	// (send the statement unchanged to every shard and expect the same
	// command tag from each). Shared: do not modify.
	Merge *Merge
	// Default, with DestAny, says the statement must run on the
	// database's default shard rather than any shard: it touches
	// unsharded objects (tables outside the sharding schema, a function
	// or procedure the schema does not know, a DO block), which live
	// there.
	Default bool
	// OnKeyShard, for a keyed read that also reads unsharded tables on
	// another shard than the default one (answered in two stages, or
	// refused), is the decision its key alone makes: a pinned session
	// whose temporary tables are those "unsharded" tables runs it there.
	OnKeyShard *Dest
	keyed      keyedWhy
}

// keyedWhy is what a keyed decision keeps to build its reason on demand
// (appendWhy): the placed value, its source, how many keyed
// references agree. src is nil for a decision whose Reason is set.
type keyedWhy struct {
	m     *shardmap.Map // not the placer: a Route's evaluator would escape with it
	src   *source
	v     kval
	agree int
}

// Why is the decision's one-line reason ("executions.id = $1 → 'abc…' →
// bucket 17 → shard1"): Reason, or for a keyed decision the text built
// now (an allocation: the hot path never calls it).
func (d *Dest) Why() string {
	if d.keyed.src == nil {
		return d.Reason
	}
	var buf [256]byte
	return string(appendWhy(buf[:0], d.keyed, d.Shard, d.Bucket))
}

// KeyInt is the integer key that decided, if one did.
func (d *Dest) KeyInt() (int64, bool) {
	if d.keyed.src != nil && d.keyed.v.kind == kInt {
		return d.keyed.v.i, true
	}
	return 0, false
}

// KeyText is the key that decided in text form ("" for none): Key, or an
// integer key rendered now.
func (d *Dest) KeyText() string {
	if n, ok := d.KeyInt(); ok {
		return strconv.FormatInt(n, 10)
	}
	return d.Key
}

// Refusal is an error the engine sends to the client instead of routing.
type Refusal struct {
	SQLState string // e.g. 0A000 feature_not_supported
	Message  string // the primary message (one line)
	Detail   string // optional detail
	Hint     string // optional advice: what to change
	// Cause says why a read was refused where a read in two stages may
	// answer it (twostage.go acrossShards); CauseNone for every other
	// refusal. The plan reads it, never the message.
	Cause Cause
}

// Cause is why a read was refused only because it needs several shards'
// rows at once.
type Cause uint8

const (
	// CauseNone: any other refusal (an error of the statement or its
	// parameters, a write, a side effect).
	CauseNone Cause = iota
	// CauseApart: tables, or a subquery's result, not co-located: each
	// shard would see only its own rows of both (evaluator.apart).
	CauseApart
	// CauseMerge: a read of every shard that no merge answers.
	CauseMerge
	// CauseUnshardedFanOut: a read of every shard that also reads a
	// table outside the sharding schema, which lives on the default
	// shard only.
	CauseUnshardedFanOut
	// CauseUnshardedKeyed: a keyed read of another shard than the
	// default one that also reads such a table (unshardedElsewhere).
	CauseUnshardedKeyed
	// CauseTwoShards: the statement's keys name two shards
	// (evaluator.conflict).
	CauseTwoShards
)

// Error makes a Refusal usable as an error: "SQLSTATE: message".
func (r *Refusal) Error() string { return r.SQLState + ": " + r.Message }

// Merge says how the engine combines a DestAll read's per-shard results
// into the answer one database would give. Nil for statements that need
// no merge (DDL) or cannot be merged (then the statement is DestRefuse).
// Shared between sessions: do not modify.
//
// The engine sends SQL (or the client's statement when SQL is empty) with
// the client's parameters to every shard, asking for the client's result
// formats on the client's columns and binary on the Hidden columns, which
// the proxy adds at the end of the select list for its own use (sort keys,
// group keys, partial aggregates, settings) and never shows. Then:
//
//   - Rows (Groups nil): every per-shard row is a client row. Rows are
//     k-way merged by OrderBy (each shard returns its rows in that order;
//     none: concatenated), rows equal in every client column to the one
//     before are dropped when Distinct, and finally Offset rows are
//     skipped and at most Limit returned. Memory: one row per shard.
//   - Groups: every per-shard row is one group's partial result, ordered
//     by the group key (Groups.Keys); rows of equal keys are combined
//     (Groups.Outputs), filtered (Groups.Having), sorted when
//     Groups.SortAfter (buffered, bounded by the engine), then Offset and
//     Limit apply.
type Merge struct {
	// SQL is the statement to send to each shard ("" = the client's).
	SQL string
	// ShardSQL, when set, is the statement to send to each shard instead
	// of SQL, by shard index: a VALUES list split by shard (each shard's
	// statement keeps the VALUES rows whose key it owns).
	ShardSQL []string
	// Hidden is the number of trailing per-shard columns that are not the
	// client's (Rows; in Groups every column index is absolute).
	Hidden int
	// Width is the number of per-shard columns, -1 when the select list
	// has a * (then only Hidden is known).
	Width int
	// OrderBy (Rows) lists per-shard columns to k-way merge by.
	OrderBy []SortKey
	// Distinct (Rows) drops a row equal to the previous one in every
	// client column (SELECT DISTINCT without a sharding key: each shard
	// sorts by every column).
	Distinct bool
	// DistinctOn (Rows, ordered) drops a row equal to the one before on
	// the first DistinctOn OrderBy keys (DISTINCT ON expressions without a
	// sharding key, which are the leading ORDER BY terms: each shard sends
	// its first row of each group, the merge keeps the first of those).
	DistinctOn int
	// Limit / Offset apply after merging; -1 = none.
	Limit, Offset int64
	// WithTies (Rows ordered, or Groups with an OrderBy: the groups that
	// tie with the last one on every Groups.OrderBy term): after Limit
	// rows, the rows that tie with
	// the last one on every OrderBy key follow (FETCH ... WITH TIES; the
	// shards send every row).
	WithTies bool
	// Groups, when set, combines per-shard groups.
	Groups *GroupMerge
	// Stages, when set, is a read answered in two stages (twostage.go):
	// the engine answers it with Stages, not with the fields above.
	Stages *Stages
	// CopyOut, when set, is a COPY ... TO STDOUT: every shard runs the
	// statement as it is and the answer is their COPY outputs one after
	// the other, in shard order (the fields above are unused).
	CopyOut *CopyOut
}

// CopyOut is how the COPY outputs of every shard make one.
type CopyOut struct {
	// Header: each output starts with a header line (HEADER, in text or
	// CSV format); only the first shard's is kept. A binary output's
	// header and trailer are recognised by their bytes.
	Header bool
	// Rows: the query's rows need a merge, so the shards run the query
	// (Merge.SQL) and the engine writes the merged rows as the COPY's
	// output, as the options below say (copyrows.go).
	Rows bool
	// Format, and for text and CSV: the delimiter, the NULL string, and
	// for CSV the quote and escape characters and the columns always
	// quoted (FORCE_QUOTE names, or all).
	Format        CopyFormat
	Delim         byte
	Null          string
	Quote, Escape byte
	ForceQuote    []string
	ForceQuoteAll bool
	// Passthrough, of a binary COPY whose rows need no merge: the plan
	// that sends each shard's COPY output in turn, right but for the type
	// numbers inside a user type's array or composite values, for the
	// engine to take where it cannot write the rows (the extended
	// protocol, a client-only encoding).
	Passthrough *Merge
}

// Stages is a read whose sharded tables all lie in FROM subqueries or
// CTEs that need a merge of their own (LIMIT, aggregates, DISTINCT, ...
// inside), or in subqueries of its WHERE, HAVING or select list that do
// not refer to its rows: stage 1 runs each Inner statement as a
// statement of its own (routed by Route with the client's parameters:
// merged across shards, or on its one shard), collecting its merged
// rows; stage 2 runs Outer with StageMarker(i) replaced by a relation of
// Inner[i]'s rows (a VALUES list of parameters typed by the rows' type
// OIDs): on the default shard, or, when Spread, where Route sends
// OuterStatement (one shard, or every shard merged as any read).
// Shared: do not modify.
type Stages struct {
	Inner []*Statement
	Outer string
	// Spread: Outer keeps the statement's FROM with its sharded tables
	// (only subqueries of its WHERE, HAVING and select list are Inner).
	Spread bool
	sql    string // the SELECT they are the stages of ("" for noStages): Query
	stmt   string // the statement's text (a COPY's, for its query's stages)
	// outer is Outer's analysis (without Spread it touches no sharded
	// table).
	outer *Statement
	// merge is the Merge a Dest of these stages carries.
	merge *Merge
	// learned are the columns learned to be the statement's row's,
	// innerSub the subquery (ordinal among topSublinks, -1 for none) each
	// of Inner comes from, learn the plans learned from this one
	// (learn.go).
	learned  []learnedCol
	innerSub []int
	learn    *stageLearn
	// corr marks the inner statements read for correlated subqueries
	// (Correlated); apart: the deep or correlated plan, whose inner
	// statements are only its tables read whole (RouteApart).
	corr  []bool
	apart bool
	// alt is the plan tried where Route refuses this one for the
	// parameters it is given (nil: none): for a spread plan the one whose
	// stage 2 runs on the default shard, for that one the deep plan
	// (twostage.go plan); for a learned direct plan the one built
	// without it (learn.go).
	alt *Stages
}

// Correlated reports whether inner statement i is read for a subquery
// that refers to the row around it (the correlated plan): stage 2 runs
// that subquery once per row over those rows, which have no index
// there, so the engine bounds the rows it would compare.
func (sg *Stages) Correlated(i int) bool { return i < len(sg.corr) && sg.corr[i] }

// Apart reports whether this is the plan that takes every part apart
// (Table.RouteApart): no subquery runs alone.
func (sg *Stages) Apart() bool { return sg.apart }

// Alt is the plan to try where Route refuses this one (nil: none).
func (sg *Stages) Alt() *Stages { return sg.alt }

// StageMarker is the text standing for the i-th (0-based) inner
// statement's rows in Stages.Outer: a complete SELECT, inside parentheses.
func StageMarker(i int) string { return "SELECT * FROM pgshard_stage_" + itoa(int64(i+1)) + "_" }

// SortKey is one ORDER BY term of a merge.
type SortKey struct {
	// Column is the 0-based column: of the per-shard row (Merge.OrderBy
	// and GroupMerge.Keys; with Hidden, the index among the hidden
	// columns), or of the merged row (GroupMerge.OrderBy, an index into
	// Outputs).
	Column int
	Hidden bool
	Desc   bool // descending
	// NullsFirst: NULLs before other values (Postgres's default for DESC).
	NullsFirst bool
	// Bytewise: the term orders text by bytes (COLLATE "C") whatever the
	// database's collation.
	Bytewise bool
}

// GroupMerge combines per-shard partial groups.
type GroupMerge struct {
	// Keys are the hidden per-shard columns holding the group key, in the
	// order each shard sorts its rows (with these directions). No keys:
	// one group, one row per shard (an aggregate without GROUP BY).
	Keys []SortKey
	// Outputs are the merged row's columns: the first Visible are the
	// client's, the rest feed Having and OrderBy only.
	Outputs []Output
	Visible int
	// Having filters merged groups; nil = none.
	Having *Cond
	// OrderBy sorts merged groups (indexes into Outputs) when SortAfter;
	// else the groups are returned in the order of Keys.
	OrderBy   []SortKey
	SortAfter bool
	// DigitsColumn is the hidden column holding extra_float_digits as in
	// effect on the shard (for float values the proxy prints), -1 if none;
	// StyleColumn, IntervalStyle (for merged interval sums and averages).
	DigitsColumn, StyleColumn int
}

// Output is one column of a merged group.
type Output struct {
	// Agg combines the column across shards; AggNone takes the first
	// shard's value (a group key, a constant).
	Agg Agg
	// Column is the per-shard column of the value (AggNone) or partial
	// (count/sum/min/max: the aggregate; avg: the sum, its count is
	// Column+1); Hidden says it is among the hidden columns.
	Column int
	Hidden bool
	// Cast converts the merged aggregate (count(*)::int), CastNone if none.
	Cast Cast
	// Name is the column's name as Postgres names it, for the
	// RowDescription of a column the proxy computes.
	Name string
	// Bytewise: min/max of x COLLATE "C" (text compares by bytes whatever
	// the database's collation); string_agg ordered by x COLLATE "C".
	Bytewise bool
	// Count: the AggSum of a count(...), which never adds up intervals
	// (no IntervalStyle needed to write it).
	Count bool
	// Sep is string_agg's separator (AggStringAgg); Desc says its values
	// are ordered descending; Distinct is string_agg(DISTINCT ...).
	Sep      string
	Desc     bool
	Distinct bool
}

// Agg combines one column across shards.
type Agg int

const (
	AggNone Agg = iota // keep the first shard's value (a group key, a constant)
	AggSum             // count(...), sum(...): added up; NULL only when every shard's is
	AggMin             // min(x)
	AggMax             // max(x)
	AggAvg             // avg(x) = sum(x) / count(x), computed as Postgres does
	// AggStringAgg is string_agg(x, 'sep' ORDER BY x): each shard sends
	// array_agg(x ORDER BY x) (binary), the merge orders the union of the
	// shards' non-NULL values and joins them with Sep; NULL when none.
	AggStringAgg
	// AggCountDistinct is count(DISTINCT x) of a value that is not a
	// sharding key: each shard sends array_agg(DISTINCT x) (binary), the
	// merge counts the distinct non-NULL values of their union.
	AggCountDistinct
)

var aggNames = [...]string{"none", "sum", "min", "max", "avg", "string_agg", "count_distinct"}

// String returns "none", "sum", "min", "max", "avg", "string_agg" or
// "count_distinct".
func (a Agg) String() string {
	if a >= 0 && int(a) < len(aggNames) {
		return aggNames[a]
	}
	return "Agg(" + itoa(int64(a)) + ")"
}

// Cast is a type conversion the proxy applies to a merged aggregate.
type Cast int

const (
	CastNone Cast = iota
	CastInt2
	CastInt4
	CastInt8
	CastNumeric
	CastFloat4
	CastFloat8
	CastText
)

var castNames = [...]string{"", "int2", "int4", "int8", "numeric", "float4", "float8", "text"}

// String returns the target type's name ("" for CastNone).
func (c Cast) String() string {
	if c >= 0 && int(c) < len(castNames) {
		return castNames[c]
	}
	return "Cast(" + itoa(int64(c)) + ")"
}

// Cond is a HAVING condition over merged groups, in SQL's three-valued
// logic.
type Cond struct {
	Op   CondOp
	Kids []*Cond // CondAnd, CondOr, CondNot
	// Cmp ("=", "<>", "<", "<=", ">", ">=") compares L and R (CondCmp);
	// CondIsNull / CondNotNull test L.
	Cmp  string
	L, R Operand
}

// CondOp is a Cond's operator.
type CondOp int

const (
	CondAnd CondOp = iota
	CondOr
	CondNot
	CondCmp
	CondIsNull
	CondNotNull
)

// Operand is a value in a Cond: a merged column (Output >= 0), a
// constant (Const, the SQL literal's text; Null for NULL), or a Bind
// parameter (Param, 1-based).
type Operand struct {
	Output int
	Const  string
	// ConstKind says how Const reads: "int", "numeric" or "text".
	ConstKind string
	Null      bool
	Param     int
}

// Statement is the cached analysis of one SQL statement text. It is
// shared between sessions and immutable, except for the flag MarkUnnamed
// sets.
// Cursor is a SQL cursor statement: DECLARE name CURSOR FOR query, FETCH
// and MOVE of name, CLOSE name (Name "" for CLOSE ALL).
type Cursor struct {
	Verb CursorVerb
	Name string
	// Query, for DECLARE, is the analysis of the cursor's query as a
	// statement of its own (routed by Analyzer.Route: a read of every
	// shard is merged); Binary: DECLARE BINARY; Hold: WITH HOLD.
	Query        *Statement
	Binary, Hold bool
	// Count, for FETCH and MOVE FORWARD (and NEXT, and a plain FETCH
	// name), is how many rows, -1 for ALL; Forward is false for every
	// other direction (BACKWARD, PRIOR, FIRST, LAST, ABSOLUTE, RELATIVE,
	// FORWARD 0).
	Count   int64
	Forward bool
}

// CursorVerb is a Cursor statement's verb.
type CursorVerb uint8

// The verbs of Cursor statements.
const (
	CursorDeclare CursorVerb = iota + 1
	CursorFetch
	CursorMove
	CursorClose
)

type Statement struct {
	SQL  string // the statement's text
	Kind Kind   // what it is
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
	// SetValue is the plain value (a string constant unquoted, a list
	// joined by ", "), "" for RESET / SET ... TO DEFAULT. RESET ALL and
	// SHOW ALL have SetName "all"; SET TRANSACTION has SetName "transaction";
	// DISCARD has its target ("all", "plans", "sequences", "temp") in SetName.
	SetName, SetValue string
	// Settings, for a statement that only sets transaction-local settings
	// (SELECT set_config(name, value, true), ...; setlocal.go says exactly
	// which), are its settings in order; nil for every other statement.
	// The engine may run such a statement on every shard ahead of a read
	// of every shard in the same implicit transaction.
	Settings []Setting
	// SetLocalSQL, for KindSetSession, is the statement that has the same
	// effect for one transaction ("SET LOCAL timezone TO 'UTC'", "SET LOCAL
	// x TO DEFAULT"): an engine that emulates session settings replays it
	// after each BEGIN. Empty for RESET ALL.
	SetLocalSQL string
	// Terminate, for a call of pg_terminate_backend / pg_cancel_backend
	// in one of the forms terminate.go lists, says what it ends; nil for
	// every other statement.
	Terminate *Terminate
	// PrepareName for KindPrepare/KindExecute/KindDeallocate ("" = ALL).
	PrepareName string
	// Prepared, for KindPrepare, is the analysis of the prepared statement
	// (its SQL is the statement deparsed from PREPARE's body); PrepareTypes
	// are the declared parameter types' OIDs (0 where the type is not a
	// built-in one this package knows: let the server infer it).
	Prepared     *Statement
	PrepareTypes []uint32
	// ExecuteArgs, for KindExecute, are EXECUTE's arguments in text format
	// (nil = NULL), ready for Route; nil with a non-empty Reason when an
	// argument is not a constant.
	ExecuteArgs [][]byte
	// ParseError is set when Postgres's grammar rejects the text: the
	// statement is KindOther and routes DestAny, so that the engine sends it
	// (to the transaction's shard, or any) and the client gets Postgres's
	// own syntax error, SQLSTATE and position unchanged.
	ParseError string
	// Tables lists the tables the statement references, unqualified and
	// lowercase, in order of first appearance.
	Tables []string
	// NoTxnBlock is set for statements Postgres refuses inside a
	// transaction block (VACUUM, CREATE/DROP DATABASE or TABLESPACE, ALTER
	// SYSTEM, CREATE/DROP INDEX CONCURRENTLY, REINDEX ... CONCURRENTLY,
	// subscriptions, CLUSTER, CHECKPOINT): the engine never wraps them.
	NoTxnBlock bool
	// Copy is set for COPY statements.
	Copy bool
	// Isolation is the isolation level a BEGIN / START TRANSACTION / SET
	// TRANSACTION names ("read committed", "repeatable read",
	// "serializable", "read uncommitted"), "" if none.
	Isolation string
	// Select is set for a query that only returns rows (SELECT, VALUES,
	// TABLE; not SELECT INTO, not a cursor).
	Select bool
	// SavepointVerb, for KindSavepoint, is "SAVEPOINT", "RELEASE" or
	// "ROLLBACK" (ROLLBACK TO SAVEPOINT); SavepointName is the savepoint's
	// name as Postgres folds it (lowercase unless quoted).
	SavepointVerb, SavepointName string
	// Reset, for KindSetSession, is set for RESET x / RESET ALL (the
	// command tag is RESET); ToDefault for RESET and SET x TO DEFAULT.
	Reset, ToDefault bool
	// SessionState, for KindUnsupported, names the session state the
	// statement creates or needs, which a pooled server connection cannot
	// keep: "temp" (temporary tables, views, sequences), "hold-cursor",
	// "advisory-lock", "set-config", "listen", "large-object", "load",
	// "session-authorization", "two-phase", "dblink". An engine that can
	// keep the client on one server session (pinning) runs the statement
	// there; "" for statements refused for other reasons (pgshard.*).
	SessionState string
	// SetConfig, for a statement that is nothing but SELECT
	// set_config(name, value, false) (SessionState "set-config";
	// setconfig.go says exactly which), is the session setting it makes:
	// an engine that keeps session settings itself may keep this one
	// instead of pinning, and answer the call's row. nil otherwise.
	SetConfig *SetConfig
	// Releases names the session state the statement ends entirely (in
	// SessionState's terms: "listen" for UNLISTEN *, "hold-cursor" for
	// CLOSE ALL, "advisory-lock" for a call of pg_advisory_unlock_all;
	// release.go), "" for every other statement.
	Releases string
	// Cursor, for DECLARE, FETCH, MOVE and CLOSE of a cursor, is what
	// the proxy needs to keep a cursor over a read of every shard itself
	// (its Route stays that of the statement as Postgres runs it).
	Cursor *Cursor
	// ReadsObjects: the statement's answer depends on which schema objects
	// exist — it reads a catalog of them (pg_class, pg_attribute, pg_tables,
	// information_schema, ...), looks a name up (to_regclass, a ::regclass
	// cast) or reads an object's definition or size. Only the default
	// shard holds every object (the unsharded ones live there alone): an
	// engine runs such a read there rather than on another shard's
	// transaction backend.
	ReadsObjects bool
	// Unsharded lists the tables the statement references that are
	// neither keyed nor global in the sharding schema (lowercase,
	// unqualified): they live on the database's default shard.
	Unsharded []string
	// TempTables, for CREATE TEMP TABLE / VIEW / SEQUENCE, names the
	// object created; for DROP, the objects dropped (an engine that pins
	// a session while it has temporary objects tracks them).
	TempTables []string
	// DropTables lists the relations a DROP statement drops.
	DropTables []string
	// IndexNames lists the indexes a schema change names by their name
	// alone (DROP INDEX, ALTER INDEX, REINDEX INDEX, COMMENT ON INDEX),
	// as written: Route sends it where an unsharded table's index is (the
	// default shard), which is right unless an index belongs to a keyed
	// or global table — an engine asks the database which table each is
	// of (IsPlaced) and runs it on every shard then.
	IndexNames []string

	// unnamedSeen: a client has parsed this text as an unnamed
	// statement (see MarkUnnamed). Mutable, like stages.
	unnamedSeen uint32
	// stages is the statement's two-stage plan (*Stages), set at the
	// first Route that refuses it otherwise; a copy of the Statement for
	// another text carries it too, so it is used only for its own SQL.
	stages unsafe.Pointer
	// served is the served form of a per-shard text (*servedCache:
	// served.go), built on first use.
	served unsafe.Pointer

	// plan holds where keys come from (constants, $n params with their
	// cast type, hints), the tables touched and the merge plan. Route uses
	// it; nil for statements that always route DestAny. A statement
	// analyzed through its literal-normalized text shares its plan with
	// the other texts of that shape.
	plan *plan
	// lit, for such a statement, holds its text's literals (and its
	// decision when it depends on nothing else); nil otherwise.
	lit *litBinding
}

// MarkUnnamed records that a client parsed the statement's text as an
// unnamed statement, and reports whether one had done so before (the
// proxy's statement cache serves unnamed texts from their second use, so
// that one-off texts do not crowd out the ones that repeat). Safe for
// concurrent use.
func (s *Statement) MarkUnnamed() (before bool) {
	return atomic.LoadUint32(&s.unnamedSeen) != 0 || atomic.SwapUint32(&s.unnamedSeen, 1) != 0
}

// Analyzer parses statements with Postgres's own grammar and routes them.
// It is safe for concurrent use; analyses are cached per statement text.
type Analyzer interface {
	// Split splits a simple-Query string into its statements, analyzed.
	// An empty or comment-only query yields one KindEmpty statement.
	// The returned slice is shared: do not modify it.
	Split(sql string) ([]*Statement, error)
	// Analyze analyzes one statement (the Parse message's query; a Parse may
	// carry one statement only).
	Analyze(sql string) (*Statement, error)
	// AnalyzeBytes and SplitBytes are Analyze and Split for a text in a
	// byte slice (a protocol message); a cached text costs no allocation.
	AnalyzeBytes(sql []byte) (*Statement, error)
	SplitBytes(sql []byte) ([]*Statement, error)
	// Route decides where st runs given its Bind parameters (nil for simple
	// queries), their format codes (as in Bind: none = all text, one = for
	// all, else per parameter) and the parameter type OIDs the client
	// declared in Parse (0 = unspecified).
	Route(st *Statement, params [][]byte, formats []int16, paramOIDs []uint32) Dest
	// RouteApart is Route of st's two-stage plan that takes every part
	// apart (no subquery runs alone; Table.RouteApart).
	RouteApart(st *Statement, params [][]byte, formats []int16, paramOIDs []uint32) Dest
	// ServedSQL is the served form of base, a text every shard runs for
	// st's read of every shard (served.go): "" when it has none, an
	// error (0A000) when it reads keyed tables and its form cannot be
	// written; checked, each shard's served set is checked against the
	// map.
	ServedSQL(st *Statement, base string, checked bool) (string, error)
	// RouteKey routes an explicit key (hints: SET LOCAL pgshard.key).
	RouteKey(key string, t KeyType) Dest
	// OnOwnSession is st analyzed as a server session of its own runs it,
	// when st keeps session state (Table.OnOwnSession); nil otherwise.
	OnOwnSession(st *Statement) *Statement
	// Map is the shard map routes refer to.
	Map() *shardmap.Map
	// IsPlaced reports whether the sharding schema places table (an
	// unqualified name as Postgres spells it: a quoted "Executions" is
	// not executions): keyed, or global on every shard.
	IsPlaced(table string) bool
}
