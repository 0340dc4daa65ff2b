// Package mutant holds deliberately broken variants of the execution store
// and its clients, which prove that the chaos suite's verifier can fail: the
// chaos runner runs one scenario per mutant with the mutant plugged in where
// the store, the client or the servers' configuration normally are, and the
// verifier must catch every one. Only chaos tooling reaches this package;
// nothing in store, router, proxy, loadgen or any configuration can select a
// mutant.
//
// The mutants (All lists them with what exposes each):
//
//	kind                           level   what is broken
//	outbox-outside-tx              store   outbox rows committed in their own transaction before the CAS
//	cas-without-version            store   CAS UPDATE ... WHERE id = $1 (no version predicate)
//	dedupe-outside-tx              store   dedupe row committed in its own transaction before the CAS
//	timer-delete-without-fire-at   store   DeleteTimer ignores fire_at (a stale sweep removes a re-armed timer)
//	cancel-does-not-delete         store   timer cancels are skipped
//	relay-acks-before-delivering   client  PendingOutbox acks each row before returning it
//	retry-unknown-with-new-event   client  an unknown commit is retried once with event id + "-retry"
//	trace-trim-off-by-one          store   the trace ring keeps trace_max+1 entries
//	placement-wrong-shard          store   executions of buckets ≡ 3 (mod 8) live on the next shard
//	synchronous-commit-off         config  ALTER SYSTEM SET synchronous_commit = off on every shard
//
// Store-level bugs are switched into a reference store (OpenStore): a plain
// implementation of the store's semantics (ARCHITECTURE.md §1) as explicit
// multi-statement transactions over one pgxpool per shard, routed like the
// router. With no bug it is the control and behaves like the production
// store (a router) for everything the chaos workload does — the tests
// compare both operation by operation and table by table. Client-level bugs
// wrap the production loadgen.Target (Wrap); the configuration bug changes
// the shards' servers (Configure).
//
//	                    chaos runner: one run per mutant, then verify
//	               │                        │                          │
//	 OpenStore(ctx, m, pooler, bug, o)   Wrap(target, bug)   Configure(ctx, m, bug)
//	               │                        │                          │
//	refstore.go  pools per shard,        client.go                config.go
//	             routing by bucket       acksFirst.PendingOutbox  ALTER SYSTEM
//	             (+ wrong shard),        retryUnknown.Commit      synchronous_commit,
//	             identity check                 │                  restore
//	commit.go    BEGIN; CAS; side               │                          │
//	             effects; COMMIT;        the production target             │
//	             outcome classes         (storetarget over a router)       │
//	             (+ outbox/dedupe               │                          │
//	             outside, no version,           │                          │
//	             skipped cancels,               │                          │
//	             ring off by one)               │                          │
//	reads.go     loads, fan-out reads           │                          │
//	             merged by seq/fire_at,         │                          │
//	             acks by seq, DeleteTimer       │                          │
//	             (+ without fire_at)            │                          │
//	stall.go     stall checks: a shard          │                          │
//	             that stops answering           │                          │
//	             fails operations fast          │                          │
//	               │                            │                          │
//	               └────────────────────────────┴──────────────────────────┘
//	                   every shard: Postgres, directly or through PgBouncer
//
//	mutant.go    Kind, Level, Mutant, All, Lookup
package mutant
