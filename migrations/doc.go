// Package migrations holds pgshard's schema as embedded SQL and applies it to
// every shard of a map.
//
// Each migration runs in its own transaction that first takes a
// transaction-level advisory lock, so concurrent migrators serialize and the
// lock never outlives the transaction (safe through PgBouncer in transaction
// mode: there is no session state). Applied migrations are recorded in the
// ledger table pgshard_migrations with a checksum; a migration already in the
// ledger is skipped, an edited one is refused, and a ledger holding migrations
// this build does not know makes Apply refuse to touch the database.
//
// After the schema, Apply writes (or checks) the shard's identity record —
// name, ordinal, bucket count, map epoch and a random database id — and, in
// the same transaction with outbox and spawns locked against writers,
// strides the global sequences so that on ordinal k outbox.seq and
// spawns.seq yield k+1, k+1+1024, k+1+2048, ... Rows written before (after
// the tables existed, before the identity did) whose seq names another
// ordinal are re-numbered above every existing seq; later migrates check
// for such rows again and repair them. store.Open refuses a database
// without the identity record, so pgshard itself writes no row before the
// stride.
//
// Every wait is bounded (Options.LockTimeout, StatementTimeout): a lock
// wait that times out fails with a *TimeoutError naming the backends that
// held the lock (wait.go). Options.Adopt takes over a database whose store
// tables another program created — the seed's store — after checking them
// (adopt.go).
//
//	migrations.go  the embedded SQL (sql/NNNN_*.sql), checksums
//	apply.go       Apply, Migrate, the ledger, identity and sequence stride
//	identity.go    the identity record and its checks (VerifyCluster)
//	fence.go       SetFence: a shard's fence from a map (migration 0008; refused
//	               mid-move: MidMoveError), FenceSQLState
//	wait.go        bounded waits, blocker reports
//	adopt.go       --adopt: checks and take-over of foreign store tables
package migrations
