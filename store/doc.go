// Package store is the execution store of a durable statechart engine on
// one PostgreSQL database, over pgx/pgxpool, with the exact semantics of
// ARCHITECTURE.md §1: a version compare-and-swap commit that also writes the
// step's outbox events, dedupe record, spawn intents, timer changes and
// trace entry atomically, and the reads workers need (load, dedupe checks,
// pending outbox and spawns, due timers, trace, listings).
//
// # One round trip per operation
//
// Every operation is one transaction sent as one pipeline — its statements'
// Parse/Bind/Describe/Execute messages and a single Sync, in one write —
// and its replies read back: one round trip, counted on the wire (see
// Stats). The statements run in the implicit transaction the protocol
// opens at the first message and closes at the Sync: Postgres commits it
// there if every statement succeeded and rolls it back if any failed. No
// BEGIN/COMMIT is sent: an explicit BEGIN would leave the session in an
// aborted transaction after an error, needing a second round trip for
// ROLLBACK (and pinning a PgBouncer server connection until then).
//
// A commit is one of
//
//	state-only:  [set_config timeout]  SELECT … FROM pgshard_commit_cas(id, def, data, old, event)   Sync
//	any other:   [set_config timeout]  SELECT … FROM pgshard_commit(id, def, data, old, event,
//	                                        emit arrays, spawn arrays, timer arrays, trace, trace_max)  Sync
//
// Both functions (migrations 0005-0007) call pgshard_cas (0007), the one
// definition of the CAS with its insert on first save — harel_commit_cas,
// which the seed's clients call and may re-create at start-up, is only a
// wrapper of it, so a seed client cannot change pgshard's commits — and
// return a lost CAS as data — committed = false and the version found,
// read after the CAS failed, i.e. the winner's — so a conflict costs the
// same one round trip and leaves the transaction clean. pgshard_commit then writes the side
// effects only if the CAS won: the outbox rows, spawn intents and timer
// upserts from parallel arrays (one statement per collection, whatever its
// length), and the trace entry with idx = max(idx)+1 under the CAS's row
// lock, cutting the ring to TraceMax.
//
// Why a function and not the side-effect statements pipelined after the
// CAS: measured on the 4-shard test cluster (BenchmarkCommitComplex*), a
// pipeline of one unnamed statement per side effect — also one round trip —
// spent about twice the server time of the function call, because every
// unnamed statement is parsed and planned again on every commit (named
// prepared statements being unsafe behind PgBouncer), while PL/pgSQL caches
// its statements' plans in the server session, which is invisible to
// clients and therefore safe behind a transaction pooler.
//
// # Safe behind PgBouncer in transaction mode
//
// The store keeps no session state: the statement timeout is set with
// set_config(…, true), SET LOCAL's function form, inside each transaction;
// the only advisory locks are the fence's, transaction-level, taken by
// pgshard_fence_assert inside the commit functions; no LISTEN, no temporary
// tables. Statements
// are sent in pgx's QueryExecModeExec: the unnamed prepared statement,
// parameters in text with types inferred by the server (every parameter in
// the SQL carries an explicit cast), one round trip per batch. Named
// prepared statements (QueryExecModeCacheStatement, pgx's default) would
// live on one server session that a transaction pooler then hands to other
// clients — pgbench -M prepared was measured silently running another
// statement through PgBouncer 1.18 — and the Describe modes cost an extra
// round trip. QueryExecModeSimpleProtocol would also be safe (a batch is
// then one multi-statement Query message, also one implicit transaction)
// but interpolates parameters on the client.
//
// # The fence
//
// Every keyed operation is checked against the shard's fence (migration
// 0008, ARCHITECTURE.md §6) without an extra round trip: the commit
// functions assert it themselves; keyed reads read the fence's verdict on
// the key's bucket (computed here, from the identity's bucket count) in
// their one statement, with the rows' snapshot, whether or not a row
// exists, and only when it does not serve run their checked form
// (pgshard_fence_check in the WHERE), which raises the refusal, so that a
// key without a row is refused too; keyed standalone writes send pgshard_fence_assert as
// their batch's first statement; scans over all rows filter to the buckets
// the shard serves and return that served set from the same statement
// (served.go), for the router's check that a fan-out covered every bucket
// exactly once. A refusal (SQLSTATE PS001) is a *FenceError (fence.go):
// nothing of the operation was applied.
//
// # Outcomes
//
// A commit error is a *ConflictError (nothing applied; errors.Is(err,
// ErrConflict)), matches ErrOutcomeUnknown (the transaction had been
// written to the connection when it failed without a server ERROR, so it
// may have committed), or is anything else (nothing applied). The in-memory
// Execution's Version is restored on every failure.
package store
