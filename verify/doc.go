// Package verify is the independent checker of pgshard's chaos runs. It
// reads only a run's history (HISTORY.md, format versions 1 and 2) and the final
// contents of every shard, and decides whether the invariants of the
// execution store (ARCHITECTURE.md §5) held, whether the faults really landed,
// and explains every violation with the ops and rows involved.
//
// It shares no code with what it checks: it imports neither store,
// router, loadgen nor chaos (a test enforces it), computes buckets with
// Postgres's own hash function on each shard, and uses shardmap only to
// read the map it is given.
//
//	history.jsonl[.gz|.zst] ──ReadHistory (history.go)──▶ History
//	                          op lines by fastLine (fastline.go), the
//	                          rest and anything unusual by encoding/json
//	every shard (direct DSNs) ──Dump (state.go)─────────▶ State ⇄ state.json
//	                          fence tables by fence.go
//	                                   │
//	                                   ▼
//	        Check (check.go): newWorld (index.go) indexes ops by execution
//	                          and rows by key, one pass each
//	                 ┌─ resolve (resolve.go): every commit present / absent /
//	                 │  unresolved, from evidence only (claims and tokens)
//	                 ├─ content      digest.go           canonical JSON digests: each
//	                 │               row, load and delivery == its writer's
//	                 ├─ cas          check_cas.go        versions, writers, final row
//	                 ├─ linearizable check_lin.go        porcupine, one partition per execution
//	                 ├─ outbox       check_outbox.go
//	                 ├─ dedupe       check_dedupe.go
//	                 ├─ timers       check_timers.go     replay of each committed chain
//	                 ├─ spawns       check_spawns.go
//	                 ├─ trace        check_trace.go
//	                 ├─ placement    check_placement.go
//	                 │               check_fence.go      each shard's fence == the final map
//	                 ├─ lease        check_lease.go      no keyed op served through a follower
//	                 │                                   cut off from the catalog past its lease
//	                 ├─ faults       faults.go           landings from evidence + ops, timeline
//	                 └─ recovery     recovery.go         time from heal until the ok-op rate is back
//	                                   │
//	                                   ▼
//	        Verdict (verdict.go): table, violations, liveness, unknowns,
//	            undecided executions (checks that could not run), faults,
//	            recovery; decide sets the result, once
//	            WriteText · WriteJSON (VERDICT.md) · ExitCode 0/1/2
//	            WriteReport (report.go): verdict.json, report.html,
//	                                     porcupine visualizations
//
// A row must hold exactly what its last writer wrote: a version-2 history
// records a digest of every document written and read (HISTORY.md,
// "Content digests"), and every final row, load and delivery is compared
// with its writer's. A check that cannot run because unresolved commits
// leave it ambiguous is not a pass: the execution is reported undecided,
// and too many make the run VACUOUS (VERDICT.md).
//
// Everything "present" or "absent" is decided once, by resolve, from the
// history and the final state; every check reads the same resolution. So an
// unknown-outcome commit resolved present must have all its effects (its
// version, ledger row, emits, timers, spawns, trace entry) and one resolved
// absent none of them: each check reports the part that breaks that.
//
// The checks are about invariants, never about known bugs: the mutants of
// the chaos suite and corruptions made directly in the database are caught
// because they break an invariant, and the regression corpus in
// testdata/corpus (one case per invariant and per way to break it) shows
// it. `pgshard verify` is the command-line face (internal/cli/verify.go).
package verify
