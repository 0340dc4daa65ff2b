// Package chaos runs fault-injection scenarios against a local cluster and
// records what happened, so that package verify — which shares none of the
// code it checks — can prove the store's invariants survived
// (ARCHITECTURE.md §5).
//
// A run (Run, in run.go):
//
//	scenario.go  Scenario (YAML: target, workload, duration, faults, seed)
//	     │
//	     ▼
//	run.go       reset the store's tables (and the fences) ─▶ relays in front of every shard (relaymap.go, relay.go)
//	             ─▶ with move faults: the run's catalog, the router following it (movecatalog.go)
//	             ─▶ with catalog-cut faults: a relay between the catalog and its followers, the proxy and the router (fault_catalog_cut.go)
//	             ─▶ the chaos-owned proxy behind its own relay (proxyproc.go), for proxy targets
//	             ─▶ the store under test: router | proxy | both (target.go) | a mutant (mutant/)
//	     │
//	     ├─▶ loadgen.Run: setup, workers, outbox relay, timer sweeper ──▶ every op ─┐
//	     │        (OnStart) ─▶ Execute (schedule.go): Plan drawn from the seed,      │
//	     │                      each fault's Inject/Heal + evidence ──▶ every event ─┤
//	     │        meanwhile  ─▶ the PgBouncer watch (pooler_watch.go): one that      │
//	     │                      exited on its own is started again, logged           │
//	     │        (Quiesce)  ─▶ stop the schedule, HealAll, drain outbox,            │
//	     │                      spawns and timers, bounded                           ▼
//	     │                                                    history.go  History: history.jsonl[.gz|.zst]
//	     │                                                    history_acks.go  its lost-acks matched to unknown-outcome commits ┐ the goal's count:
//	     │                                                    history_corr.go  the other kinds' ops credited by the verifier's  ┘ Corroborated
//	     │                                                                     rule, online (a lower bound of the verdict's)
//	     ▼                                                                (verify/HISTORY.md, version 2)
//	faults.json (the plan and what each fault did), run.json (what replay needs), loadgen/ reports
//
// The faults are small types, one per kind, in fault_<kind>.go (fault.go
// has the diagram and the catalogue; admin.go the SQL sessions they use on
// the shards and PgBouncers' consoles, named so no fault touches them); network faults happen in a user-space
// relay that frames the Postgres protocol (pgframe.go), which is what makes
// a lost commit acknowledgement deterministic: the relay lets the commit
// through, waits for the server's whole reply, drops it and resets both
// sides. Everything is drawn from the scenario's seed, so a run's workload
// choices and fault schedule repeat exactly (`pgshard chaos replay`);
// the interleaving of operations is the machine's.
//
// Chaos only ever targets a cluster on this machine (loopback DSNs) and
// empties the store's six tables on every shard when a run starts. Process
// faults (crashes, PgBouncer and proxy restarts) need the process control a
// local cluster gives (package cluster); a scenario that needs it against a
// cluster without it is refused before anything runs.
//
// Move faults (move, mover-kill: fault_move.go) run the production mover
// (package reshard) on a catalog the run creates for itself (on the
// cluster's catalog server when RunOptions.CatalogDSN names one that is no
// shard's, so every shard may crash; else on shard0's); the history's end
// line records the catalog's final map, by which verify places rows.
// A shard-crash with param during=catch-up (catchup.go) waits for a move
// of its shard to enter its catch-up and crashes the shard there, the
// mover held at that point until the shard is down.
// The catalog-cut fault (fault_catalog_cut.go) cuts the chaos-owned proxy
// and the router off from that catalog past their lease TTL while the
// mover goes on; the op lines' via says which client each op went
// through, so that verify can judge both clients' keyed operations
// during the cut. The catalog-crash fault (fault_catalog_crash.go)
// crashes the catalog's own server (the cluster's catalog server only)
// past the same lease TTL: the mover's move in flight stops and is
// resumed from the journal once the server is back, and verify judges
// the followers' keyed operations during the crash as during a cut.
//
// Package chaos/mutant holds the deliberately broken stores and clients the
// mutant runs plug in; only chaos tooling reaches it.
package chaos
