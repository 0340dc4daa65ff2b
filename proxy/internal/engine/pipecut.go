package engine

import (
	"context"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// A pipeline of reads of several shards (a pgx Batch of keyed SELECTs,
// psycopg's pipeline mode: several statements, one Sync) is one implicit
// transaction to Postgres, and a transaction runs on one shard. When all
// it has sent to its backend so far are plain reads and the next
// statement is a read of another shard (or of every shard), the pipeline
// is cut there: what came before runs as an implicit transaction of its
// own (a Sync the client does not see ends it), and the rest is planned
// afresh on the next shard. Nothing a client can observe changes: reads
// change nothing that a later failure would roll back, and each of them
// reads committed data of its own moment under READ COMMITTED, as in one
// database. An error in the first part ends the pipeline as Postgres
// would: the rest is skipped up to its Sync. Writes, transaction-local
// settings and named portals (which the first part's end would close)
// are never cut: a second shard there is refused as before (a
// transaction writes one shard). Inside a transaction block (READ
// COMMITTED, no pgshard hint) the part so far runs up to a Flush the
// client does not see, and the read of another shard goes to its
// reader, as it would at the start of a pipeline: a transaction reads
// many shards and writes one.
//
//	runPipeline ─ bind ─ cutBefore? ─ yes ─▶ planner.cut
//	     │                                       │
//	     ◀── parts.next: the Bind again ◀── pipeParts.runCut: the part so
//	     │   on a fresh planner              far (its own implicit
//	     │                                   transaction, or up to a Flush)
//	     └─ fan-out planned, more follows ─▶ fanStop? refused
//	                                         pipeParts.runFan: the read,
//	                                         then parts.next for the rest

// cutBefore reports whether pl's pipeline is cut before statement a of
// route d (see above).
func cutBefore(pl *planner, a *route.Statement, d route.Dest) bool {
	s := pl.s
	if !pl.pipeline || pl.simple || !pl.onBackend || pl.failed || pl.copyIn || pl.fan != nil || len(pl.leads) > 0 ||
		pl.swapMain || pl.sim.hint >= 0 || s.own != nil || !cutRead(a) {
		return false
	}
	switch {
	case pl.explicit && pl.sim.tx == txBound:
		// In a transaction block: the part so far runs up to a Flush,
		// and the read goes to its shard's reader as at the start of a
		// pipeline (router.inTxn), unless the isolation level or a hint
		// keeps the transaction on one shard.
		if s.txn.hintBound || s.txn.bstatus == 'E' || strictIsolation(pl.sim.deferred, s.cur.Isolation()) {
			return false
		}
	case !pl.held && !pl.explicit && pl.sim.tx == txIdle:
		if pl.notRead || pl.setAhead || s.readers.any() {
			return false
		}
	default:
		return false
	}
	for _, pi := range pl.plan.portals {
		if pi.name != "" {
			return false // the first part's end would close it
		}
	}
	ad := s.gen.adjustDest(a, d)
	switch ad.Kind {
	case route.DestShard:
		return ad.Shard >= 0 && ad.Shard != pl.shard
	case route.DestAll:
		return ad.Merge != nil
	}
	return false
}

// cutAfterFan reports whether a pipeline outside a transaction block
// goes on after its read of every shard f, which then ends a part of its
// own: a plain read with no settings ahead of it (they would hold for
// the rest of the implicit transaction).
func cutAfterFan(f *fanPlan) bool {
	return !f.inTxn && !f.simple && f.executed && f.only == 0 && len(f.leads) == 0 && f.dest.Merge != nil && cutRead(f.st)
}

// plainRead: a is a read that changes nothing and sets nothing.
func plainRead(a *route.Statement) bool {
	return a.Select && a.ReadOnly && a.Settings == nil && !a.Copy
}

// cutRead: a pipeline may be cut before a, a plain read or a COPY ...
// TO (a read too, but none is cut after once it is in a part:
// planner.copyIn, the exchange relays its COPY).
func cutRead(a *route.Statement) bool {
	return fanRead(a) && a.ReadOnly && a.Settings == nil
}

// pipeParts runs a pipeline in parts (see above): the session, and the
// pipeline's last message (Sync or Flush).
type pipeParts struct {
	s    *Session
	term byte
}

// runCut runs the part of the pipeline planned before the cut
// (p.planner.cut) as an implicit transaction of its own and gives its
// backend back. done says the pipeline ended there (the part failed: the
// rest is skipped up to the Sync, whose ReadyForQuery is written; or the
// backend's acquisition failed, and the whole pipeline was answered as
// failed); else the caller plans the rest afresh.
func (r pipeParts) runCut(p pipePlanner) (done bool, err error) {
	s, term, pl := r.s, r.term, p.planner
	pl.cut = false
	dropGiven(pl) // (used by now, if the part had one)
	if pl.plan.acquire.on {
		p.takeAcquire()
		if pl.failed {
			return true, s.finish(pl, term)
		}
	}
	if pl.protoErr != nil {
		return true, pl.protoErr
	}
	if pl.explicit {
		// The transaction goes on: the part runs up to a Flush the
		// client does not see, as a Flush-terminated pipeline.
		p.flushMsg(nil)
		if err := s.finish(pl, 'H'); err != nil {
			return true, err
		}
		if !s.txn.skipUntilSync {
			return false, nil
		}
		s.txn.skipUntilSync = false // the part failed: the rest is skipped
		r.skipRest()
		return true, nil
	}
	appendUnseenSync(pl)
	// The fence's retry is not armed (finish arms it for its own exchange
	// only): it reruns a whole pipeline, not a part of one.
	res, err := runExchange(pl.ctx, s, &pl.plan, pl.bc, false)
	if err != nil {
		return true, err
	}
	if !res.lost {
		pl.exErrored = res.errored
		s.afterReady(pl, res.status)
	}
	if res.lost || res.errored || pl.failed || res.status != 'I' {
		r.skipRest()
		return true, nil
	}
	return false, nil
}

// next is the planner of the pipeline from its message i: the whole
// of it (i = 0), or its rest after a part of it ran.
func (r pipeParts) next(ctx context.Context, i int) pipePlanner {
	p := pipePlanner{r.s.newPlanner(ctx)}
	p.planner.pipeline, p.planner.cur, p.planner.restartable = true, i, true
	return p
}

// skipRest answers the rest of a pipeline after a part of it that ran
// failed: Postgres skips it up to its Sync.
func (r pipeParts) skipRest() {
	s := r.s
	if r.term == 'S' {
		s.cc.out = pgwire.AppendRFQ(s.cc.out, s.txn.status())
	} else {
		s.txn.skipUntilSync = true
	}
}

// fanStop is the refusal of message m after the read of every shard f,
// nil when the pipeline goes on past it (a part of its own outside a
// transaction block: cutAfterFan; inside one, BEGIN; SELECT ...; COMMIT
// in one batch).
func fanStop(f *fanPlan, m cmsg) *pgwire.Error {
	if e := fanBoundApart(f, m); e != nil {
		return e
	}
	if !f.executed || !f.inTxn && !cutAfterFan(f) {
		// Outside a transaction block a fan-out that is not a plain
		// read is its pipeline's implicit transaction: it must be alone.
		return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: "a statement that runs on every shard must be alone in its pipeline (Parse, Bind, Describe, Execute, Sync) outside a transaction block",
			Hint:    "Send a Sync after it, or add a key."}
	}
	return nil
}

// runFan runs the read of every shard pl planned as a part of its
// pipeline; done says the pipeline ended there (the read failed).
func (r pipeParts) runFan(pl *planner) (done bool, err error) {
	dropGiven(pl) // (used by now, if the part had one)
	f := pl.fan
	f.continues = true
	if err := newFanExec(pl).run(); err != nil {
		return true, err
	}
	if f.failed {
		r.skipRest()
		return true, nil
	}
	return false, nil
}

// fanBoundApart is the refusal of a Flush or a Sync between a read of
// every shard's Bind and its Execute (node-postgres's pg-cursor flushes,
// asyncpg's cursor syncs, then each fetches in parts) when the read
// cannot be fetched in parts; when it can, the read runs there into its
// portal's cursor (cursor.go) and nil is returned. Nil when m is neither.
func fanBoundApart(f *fanPlan, m cmsg) *pgwire.Error {
	if m.typ != 'H' && m.typ != 'S' || f.executed {
		return nil
	}
	if f.fetchable() {
		f.executed, f.fetch = true, fetchApart
		return nil
	}
	if m.typ == 'S' {
		return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: "this statement of every shard cannot be executed in a later pipeline than its Bind (its Bind was followed by a Sync, not by its Execute)",
			Hint:    "Send its Execute before the Sync, or add a key so that it runs on one shard."}
	}
	return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: "this statement of every shard cannot be fetched in parts (its portal was flushed before its Execute, as a cursor does)",
		Hint:    "Fetch it whole (Bind, Execute and Sync together, no cursor), or add a key so that it runs on one shard."}
}

// again plans the part from its message start again after planning
// stopped for a backend (p.planner.need, acquireneed.go): the runner
// takes the connection, which the new plan is given. The part's start
// is as it was (fresh: whether a fence refusal may be retried).
func (r pipeParts) again(ctx context.Context, p pipePlanner, start int) pipePlanner {
	fresh := p.planner.fresh
	res := takeStop(ctx, r.s, p.planner)
	q := r.next(ctx, start) // the same planner, reset
	q.planner.fresh = fresh
	res.on(q.planner)
	return q
}
