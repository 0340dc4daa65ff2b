// Package catalog keeps the shard map in Postgres: one source of truth that
// proxies and routers read at start and follow, with leases recording which
// process serves which epoch (ARCHITECTURE.md §6). A YAML map bootstraps it
// (`pgshard map push`) and remains the way to run without one.
//
// Everything lives in the schema pgshard_catalog of a database the user
// names by DSN (the catalog database; it may be a shard's server, in a
// database of its own):
//
//	                ┌─ head ─────────┐   CAS: UPDATE head SET epoch = new WHERE epoch = expected
//	Push(m, exp) ──▶│ epoch          │──┐
//	                └────────────────┘  │ same transaction
//	                ┌─ generations ──┐◀─┘  one immutable row set per epoch:
//	Load ◀──────────│ epoch, buckets │     shards (name, ordinal, DSNs, position)
//	Watch (poll) ◀──│ shards, ranges │     ranges (lo, hi, shard, state)
//	                └────────────────┘
//	                ┌─ moves ────────┐     the mover's journal (package reshard)
//	                └────────────────┘
//	Acquire/Renew ─▶┌─ leases ───────┐     owner, epoch served, token,
//	Release, Live   │ expires_at     │     expires_at = the server's now() + ttl
//	                └────────────────┘
//
// The map changes only by compare-and-swap on the epoch: Push updates the
// head row WHERE epoch = the epoch the writer expects, checks the new map
// against the generation it replaces (same bucket count, a shard keeps
// its ordinal), and writes the new generation, all in one transaction. Of
// two writers expecting one epoch exactly one wins; the other gets a
// *ConflictError naming both epochs. Epochs only grow. A generation is
// never updated: any change, a range's state included, is a new epoch.
// Each range has a state — owned, frozen, incoming or moved — and the map
// a reader gets holds the owning ones (owned and frozen); Push writes
// every range owned, the other states are for the mover. A shard that
// owns no range in a generation (just added, or drained) loads marked
// shardmap.Shard.Empty; the mark is not stored, it follows from the ranges.
//
// Leases are rows, never session-level advisory locks: a lease is live
// while expires_at > now() on the catalog server, whose clock alone
// decides expiry. Renewing needs the lease's token and fails once it
// lapsed, so a process that lost its lease learns it and re-acquires
// (with a new token) rather than reviving it. Lease.ValidUntil is the
// holder's conservative local bound.
//
// A Follower (follow.go) is what a router holds: it watches the epoch and
// hands each newer map to the process (e.g. router.SetMap), acquires the
// process's lease and renews it every TTL/3 with the epoch served, and
// answers Check — nil while the lease is live by its local bound, else a
// *NoLeaseError (ErrNoLease) — so a process cut off from the catalog stops
// serving once its lease lapses instead of serving a map it cannot prove
// current. A lost lease is acquired again (new token) only after the map
// was reloaded from the catalog.
//
// Safe through PgBouncer in transaction mode: no session state (timeouts
// with set_config(..., true)), transaction-level advisory locks only (the
// installer's), unnamed statements (pgx's QueryExecModeExec), and reads of
// the map in one statement, so one snapshot. Watch polls; it does not
// LISTEN. A process that learns from a shard that the map moved on asks
// for a poll now (WatchOptions.Wake, Follower.Nudge) instead of waiting
// out the interval.
//
// The schema is installed by Install from embedded, versioned SQL
// (sql/NNNN_*.sql) with a ledger (pgshard_catalog.schema_versions) in the
// style of package migrations: each version in its own transaction under a
// transaction-level advisory lock, recorded in that transaction, skipped
// when recorded, never edited once released, and a ledger naming a version
// this build does not know is refused. It is a ledger of its own, not
// migrations': the catalog imports nothing of ours but shardmap, and a
// catalog is not a shard (it has none of the store's tables and no
// identity record), so it may share a database with a shard without
// either ledger refusing the other's versions.
//
//	doc.go      this overview
//	catalog.go  Open, Options, Close, errors for a catalog not installed
//	install.go  the embedded schema versions, the ledger, Install
//	maps.go     Push (compare-and-swap), Load, LoadGeneration, Epoch, CheckSuccessor
//	watch.go    Watch: bounded polling for new epochs, sooner when woken
//	lease.go    Acquire, Renew, Release, Live
//	follow.go   Follower: Watch (Nudge wakes it) plus a lease renewed every TTL/3, for a
//	            router or proxy; Check refuses once the lease lapsed,
//	            WaitLive waits (bounded) for the first live lease
//	moves.go    the move journal: PlanMoves, Moves, UpdateMove,
//	            RecordFreezes, Reassign
//	flip.go     a move's commit point (epoch+1 and "flipped" in one
//	            transaction): PrepareFlip computes the successor ahead,
//	            Flip writes it in one pipelined batch and a COMMIT, by
//	            compare-and-swap on the plan's epoch (ErrStaleFlip);
//	            FlipMove does both
//	freezes.go  FreezeRecord: a move's freezes as its detail records them
//	            ("freezes", appended by UpdateMove), decoded and summed up
//	sql/        the schema versions (0001_catalog.sql)
package catalog
