// Package router is the execution store over every shard of a shard map:
// the same operations as package store (it implements
// store.ExecutionStore), each keyed operation sent to the shard that owns
// its execution id, each key-less read fanned out to every shard and
// merged.
//
//	                  ┌── Commit/Load/…(id) ──▶ m.Lookup(id) ──▶ one shard's store.Store
//	Router ───────────┼── AckOutbox/AckSpawn(seq) ──▶ m.ShardForSeq(seq) ──▶ one shard
//	                  └── PendingOutbox/PendingSpawns/DueTimers/ListExecutions
//	                        ──▶ every shard concurrently, each asked for at most the
//	                            requested limit ──▶ k-way merge (container/heap) ──▶ limit
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
// Ordering of merged reads: outbox rows and spawn intents by seq (global:
// seqs are strided by shard ordinal, so they never collide), due timers by
// fire_at then execution id and path, listings by execution id. Ids
// compare bytewise — Go's string order, and COLLATE "C" in every shard's
// SQL — so the shards' pages merge into one global order, and a listing's
// cursor (the last id returned) continues correctly on every shard.
//
// Open refuses to start when a shard's identity record disagrees with the
// map (wrong name or ordinal, another bucket count, two entries on one
// database).
package router
