// Package reshard is the mover: it moves bucket ranges between shards
// while the store runs (ARCHITECTURE.md §6), driven by the catalog's move
// journal (`pgshard reshard plan | apply | status | abort`).
//
// One range move, each step journaled in the catalog's moves table:
//
//		planned ─▶ copying ─▶ catching_up ⇄ frozen ─▶ flipped ─▶ cleaning ─▶ done
//		   └───────────┴──────────┴─────────┴─▶ aborting ─▶ aborted   (abort, before flipped)
//
//	 1. Fences: the destination's range becomes incoming (it refuses every
//	    key of it), the source's range a fence row of its own, owned.
//	 2. Capture (migration 0010): the move's own trigger on each of the six
//	    store tables of the source (its range as the trigger's arguments)
//	    records the table and primary key of every row of the range
//	    inserted, updated or deleted; starting it takes the range's lock
//	    EXCLUSIVE, so every fenced writer in flight finishes before the
//	    copy's snapshot and every later one is recorded.
//	 3. Copy: every row of the range, one REPEATABLE READ snapshot of the
//	    source, COPY into the destination. Outbox rows go by their event's
//	    "from" (the emitter), spawns by parent_id; both are numbered afresh
//	    from the destination's sequences, so a seq always names the shard
//	    that holds its row.
//	 4. Catch-up: rounds that replay each recorded row — read again on the
//	    source in one snapshot with the records, upserted on the destination
//	    or, gone from the source, deleted there; one pipelined statement per
//	    table each side — and drop the records replayed.
//	 5. Freeze, within a budget: first, outside it, every connection the
//	    freeze uses acquired and warmed (each side's fence set to what it
//	    is; catch-up rounds on them, paced, until one leaves little and
//	    then the lock at once), so none is
//	    dialled under the lock; then the range's lock EXCLUSIVE with lock_timeout
//	    = the budget (writers in flight finish, new ones wait), the source's
//	    fence frozen (committed, so writes stay refused if the mover dies),
//	    the last catch-up until a round reads less than a batch (its
//	    snapshot, taken under the lock, holds every fenced write; cancelled
//	    at the budget's deadline if still running; its records are left for
//	    the clean-up). Over budget: the source
//	    is owned again, the lock released, and the freeze retried after a
//	    pause and another catch-up — never extended. Every freeze is
//	    recorded in the move's detail (catalog.FreezeRecord: start, hold,
//	    flipped or abandoned and why) with the journal step after its
//	    release: none is written inside the freeze.
//	 6. Flip: catalog.Flip writes epoch+1 (the destination owns the
//	    range) and journals the move flipped in one transaction: the commit
//	    point. Its plan (catalog.PrepareFlip: the successor map) is made
//	    before the lock; under it the flip is one pipelined batch and a
//	    commit, with a compare-and-swap on the plan's epoch: a map changed
//	    since (ErrStaleFlip) abandons the freeze, nothing written. Then the source's fence becomes moved, then the destination's
//	    owned (never both serving), and the lock is released: the writers
//	    that waited re-read the fence, are refused with PS001 naming the new
//	    owner, and a router reloads and retries there.
//	 7. Clean-up: the capture stopped (its triggers dropped), the
//	    range's rows deleted on the source in committed batches of at most
//	    Options.CleanupBatch rows per table (each a TID range scan from the
//	    ctid the batch before reached: no index serves the bucket
//	    predicate; a last sweep from the first page confirms none is left),
//	    other shards' fences told the new owner; done. A clean-up cut off
//	    is resumed from the journal's cleaning: the deletes are idempotent.
//
// Resume (apply again) decides by the journal: before flipped the move
// restarts from the copy, or from the catch-up when the copy was journaled
// and the source's capture still runs (a freeze left by a dead mover is
// undone first); flipped or later, it sets both fences as the flip says
// and cleans up. Abort rolls back a move that has not flipped
// (destination refuses and is emptied, capture stopped, source owned) and
// completes one that has. Apply and Abort hold the catalog lease
// LeaseOwner while they run: one mover at a time.
//
// Pacing: the copy, the catch-up rounds before a freeze (those on the
// freeze's connections before its lock request included) and the
// clean-up's deletes keep the mover busy at most Options.DutyCycle of the
// time (a pause after each stretch of work, a full batch's round too; the
// clean-up's between its batches);
// never the freeze. A move whose backlog stops shrinking (or stays a full
// batch) shortens, then drops, its pauses for the rest of it, so a paced
// move converges whenever an unpaced one would.
//
// Options.Hook stops a mover at each of Steps (tests, chaos's mover
// kills); Options.Around is given each step of a freeze (CutSteps: the
// lock and frozen fence, the last catch-up, the flip) to run in the
// mover's place — nothing in pgshard sets it: it exists for chaos/mutant's
// broken movers, which the chaos verifier must catch.
//
//	doc.go    this overview
//	apply.go  Options, Apply, Abort, Plan, PlanMoves
//	status.go Status (the journal with each running move's lag), WriteStatus
//	          (with each move's longest freeze and freezes abandoned)
//	move.go   one move: prepare (fences, capture, copy, catch-up), the
//	          freeze and flip, finish (clean-up), abort; Steps, CutSteps
//	shard.go  the SQL on the shards: fence changes, copy, catch-up, delete
//	pace.go   the pacer of a move's background work (Options.DutyCycle)
//	          and the catch-up's fallback to unpaced rounds
package reshard
