// Package router is the execution store over every shard of a shard map:
// the same operations as package store (it implements
// store.ExecutionStore), each keyed operation sent to the shard that owns
// its execution id, each key-less read fanned out to every shard and
// merged.
//
//	                  ┌── Commit/Load/…(id) ──▶ m.Lookup(id) ──▶ one shard's store.Store
//	Router ───────────┼── AckOutbox/AckSpawn(seq) ──▶ m.ShardForSeq(seq) ──▶ one shard
//	                  ├── DueTimers/ListExecutions
//	                  │     ──▶ every shard concurrently, each asked for at most the
//	                  │         requested limit ──▶ k-way merge (container/heap) ──▶ limit
//	                  └── PendingOutbox/PendingSpawns
//	                        ──▶ every shard concurrently, each asked for at most the
//	                            requested limit ──▶ round robin over the shards ──▶ limit
//
// Each shard has its own pool (store.Store), directly or through the
// shard's PgBouncer (Options.UsePooler). Every error that concerns one
// shard is a *ShardError naming it (`shard "shard2": …`), which unwraps to
// the store's error, so errors.Is(err, store.ErrConflict) and the like keep
// working. A shard that is down fails only the operations that need it,
// within the connect timeout (2 s by default); a fan-out read that cannot
// reach a shard fails as a whole and says which shards it could not read —
// never a silently partial answer.
//
// Ordering of fanned-out reads: due timers by fire_at then execution id
// and path, listings by execution id — global orders. Outbox rows and
// spawn intents are drained fairly instead: a batch takes one row of each
// shard in turn (starting with a shard that moves on every call), each
// shard's rows oldest first by seq; no order across shards is promised,
// because a seq counts its own shard's inserts (it is strided by ordinal
// so that it names its shard) and says nothing about age across shards —
// merging by seq let a shard with small seqs win every batch. Ids
// compare bytewise — Go's string order, and COLLATE "C" in every shard's
// SQL — so the shards' pages merge into one global order, and a listing's
// cursor (the last id returned) continues correctly on every shard.
//
// Fan-out scans over fenced shards (due timers, pending spawns, listings)
// are checked for coverage (coverage.go): each shard's part returns the
// buckets its fence served in that part's snapshot, and a fan-out whose
// parts do not serve every bucket exactly once — one read between a range
// move's flips on its source and on its destination — is read again a few
// times and then fails with ErrNotCovered, never a partial or doubled
// answer.
//
// Open refuses to start when a shard's identity record disagrees with the
// map (wrong name or ordinal, another bucket count, two entries on one
// database). SetMap checks a later map the same way but reads only the
// records of shards (name and DSN) no earlier map had, so one shard down
// does not hold the router on an old map — a follower whose lease lapsed
// serves again only once it switched to the catalog's.
//
// Following a catalog: Options.Maps (a *catalog.Catalog) is where a
// keyed operation refused by a shard's fence reloads the map before its
// one retry; Options.Lease (a *catalog.Follower) is asked before every
// keyed operation, which is refused with ErrNotServing while the lease is
// not live. The follower's loop is the caller's:
//
//	f, _ := cat.NewFollower(catalog.FollowOptions{Owner: "router@host", Kind: "router"})
//	r, _ := router.Open(ctx, m, router.Options{Maps: cat, Lease: f})
//	go f.Run(ctx, r.Epoch, r.SetMap) // watch + lease; waited for by the caller
package router
