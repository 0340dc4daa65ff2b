// Package store is the execution store of a durable statechart engine on
// one PostgreSQL database, over pgx/pgxpool, with the exact semantics of
// DESIGN.md §1: a version compare-and-swap commit that also writes the
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
// A commit is either
//
//	state-only:  [set_config timeout] SELECT … FROM pgshard_commit_cas(…)          → Sync
//	complex:     [set_config timeout] SELECT pgshard_commit_cas_or_raise(…)
//	             INSERT outbox … unnest   INSERT spawns … unnest
//	             INSERT timers … ON CONFLICT DO UPDATE   DELETE timers …
//	             INSERT trace … max(idx)+1 [+ ring cut]                            → Sync
//
// pgshard_commit_cas and pgshard_commit_cas_or_raise (migration 0005) wrap
// harel_commit_cas (0002), the one definition of the CAS with its
// insert-on-first-save: the first returns a conflict as data with the
// version it found, the second raises SQLSTATE PS001 carrying it, which
// skips the statements after it and rolls the transaction back — so even a
// lost CAS costs one round trip, and the version found is read after the
// CAS with a fresh snapshot, i.e. it is the winner's.
//
// # Safe behind PgBouncer in transaction mode
//
// The store keeps no session state: the statement timeout is set with
// set_config(…, true), SET LOCAL's function form, inside each transaction;
// there are no advisory locks, no LISTEN, no temporary tables. Statements
// are sent in pgx's QueryExecModeExec: the unnamed prepared statement,
// parameters in text with types inferred by the server (every parameter in
// the SQL carries an explicit cast), one round trip per batch. Named
// prepared statements (QueryExecModeCacheStatement, pgx's default) would
// live on one server session that a transaction pooler then hands to other
// clients — FACTS.md records pgbench -M prepared silently running another
// statement through PgBouncer 1.18 — and the Describe modes cost an extra
// round trip. QueryExecModeSimpleProtocol would also be safe (a batch is
// then one multi-statement Query message, also one implicit transaction)
// but interpolates parameters on the client.
//
// # Outcomes
//
// A commit error is a *ConflictError (nothing applied; errors.Is(err,
// ErrConflict)), matches ErrOutcomeUnknown (the transaction had been
// written to the connection when it failed without a server ERROR, so it
// may have committed), or is anything else (nothing applied). The in-memory
// Execution's Version is restored on every failure.
package store
