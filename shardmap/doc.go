// Package shardmap places keys on shards. It is pure: no I/O, no globals.
//
// A key is hashed exactly as Postgres's PARTITION BY HASH hashes a single
// text (or int8) partition key —
//
//	bucket = uint64(hash_combine64(0, hashtextextended(key, HASH_PARTITION_SEED))) % B
//
// — so the same placement can be computed inside every shard by the SQL
// function pgshard_bucket(text) and checked with a query. B, the number of
// virtual buckets, is a power of two fixed when a cluster is created.
//
// A Map assigns contiguous, inclusive bucket ranges to named shards and
// carries an epoch that only grows. Diff lists which buckets move between
// two maps; PlanAdd and PlanRemove compute a new map that moves the fewest
// buckets while keeping every shard within one bucket of the others.
// AddEmpty adds a shard that owns nothing yet (Shard.Empty: the only way a
// shard may own no buckets), the first step of adding one online.
package shardmap
