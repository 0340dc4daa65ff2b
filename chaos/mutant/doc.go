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
//	move-without-final-catch-up    mover   the freeze flips without its last catch-up
//	flip-without-freeze            mover   the flip without the freeze (no range lock, source fence owned)
//	shard-not-fencing              config  pgshard_fence_assert/_check admit every key on every shard
//	delete-source-before-flip      mover   the source's rows deleted after the last catch-up, before the flip
//	proxy-ignores-fence            client  a fence refusal (PS001) taken for success
//	proxy-ignores-lease            proxy   the proxy's catalog lease TTL an hour, the run's record 2 s
//	router-ignores-lease           router  the router's catalog lease TTL an hour, the run's record 2 s
//
// The last five are the resharding mutants (issue 20, group "reshard"):
// each needs the move faults (delete-source-before-flip and
// proxy-ignores-fence the mover kills too), so they run against
// configs/chaos/mutants-reshard.yaml, where the router under test follows
// the run's catalog and the verifier places rows by the map the moves left.
// proxy-ignores-lease and router-ignores-lease need the catalog-cut faults
// and a target with the proxy, resp. the router: they run against
// configs/chaos/mutants-lease.yaml, pgbouncer+proxy (ProxyConfig and
// RouterLeaseTTL, proxy.go: the production proxy and router with a
// lease that lies).
//
// Store-level bugs are switched into a reference store (OpenStore): a plain
// implementation of the store's semantics (ARCHITECTURE.md §1) as explicit
// multi-statement transactions over one pgxpool per shard, routed like the
// router. With no bug it is the control and behaves like the production
// store (a router) for everything the chaos workload does — the tests
// compare both operation by operation and table by table. Client-level bugs
// wrap the production loadgen.Target (Wrap); the configuration bugs change
// the shards' servers (Configure). Mover bugs replace one step of the
// production mover's freeze (Mover): the chaos runner hands the function
// to its move faults as reshard.Options.Around, which the mover calls
// with each of reshard.CutSteps (the real step and the source's delete
// in hand) — pgshard itself never sets it.
//
//	                    chaos runner: one run per mutant, then verify
//	               │                        │                          │                       │
//	 OpenStore(ctx, m, pooler, bug, o)   Wrap(target, bug)   Configure(ctx, m, bug)     Mover(bug)
//	               │                        │                          │                       │
//	refstore.go  pools per shard,        client.go                config.go              mover.go
//	             routing by bucket       acksFirst.PendingOutbox  ALTER SYSTEM           skip freeze or
//	             (+ wrong shard),        retryUnknown.Commit      synchronous_commit,    final-catch-up;
//	             identity check          ignoresFence: PS001      restore                delete the source
//	commit.go    BEGIN; CAS; side        taken for success        unfence.go             after the catch-up
//	             effects; COMMIT;               │                 fence checks that            │
//	             outcome classes         the production target    admit all, restore     the move faults'
//	             (+ outbox/dedupe        (storetarget over a      the saved ones         reshard.Apply
//	             outside, no version,    router)                         │               (Options.Around)
//	             skipped cancels,               │                          │                       │
//	             ring off by one)               │                          │                       │
//	reads.go     loads, fan-out reads           │                          │                       │
//	             merged by seq/fire_at,         │                          │                       │
//	             acks by seq, DeleteTimer       │                          │                       │
//	             (+ without fire_at)            │                          │                       │
//	stall.go     stall checks: a shard          │                          │                       │
//	             that stops answering           │                          │                       │
//	             fails operations fast          │                          │                       │
//	               │                            │                          │                       │
//	               └────────────────────────────┴──────────────────────────┴───────────────────────┘
//	                   every shard: Postgres, directly or through PgBouncer
//
//	mutant.go    Kind, Level, Mutant, All, Lookup, ReshardGroup, InGroup
package mutant
