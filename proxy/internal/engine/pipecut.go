package engine

import (
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
//	     ◀── plan the Bind again, afresh ◀── runCut: the part so far,
//	                                          its own implicit transaction

// cutBefore reports whether the pipeline is cut before statement a of
// route d (see above).
func (p pipePlanner) cutBefore(a *route.Statement, d route.Dest) bool {
	pl, s := p.planner, p.planner.s
	if !pl.pipeline || pl.simple || !pl.onBackend || pl.failed || pl.copyIn || pl.fan != nil || len(pl.leads) > 0 ||
		pl.swapMain || pl.sim.hint >= 0 || s.own != nil || !plainRead(a) {
		return false
	}
	switch {
	case pl.explicit && pl.sim.tx == txBound:
		// In a transaction block: the part so far runs up to a Flush,
		// and the read goes to its shard's reader as at the start of a
		// pipeline (router.inTxn), unless the isolation level or a hint
		// keeps the transaction on one shard.
		if s.txn.hintBound || s.txn.bstatus == 'E' || strictIsolation(pl.sim.deferred) {
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
	return !f.inTxn && !f.simple && f.executed && f.only == 0 && len(f.leads) == 0 && f.dest.Merge != nil && plainRead(f.st)
}

// plainRead: a is a read that changes nothing and sets nothing.
func plainRead(a *route.Statement) bool {
	return a.Select && a.ReadOnly && a.Settings == nil && !a.Copy
}

// runCut runs the part of the pipeline planned before the cut
// (p.planner.cut) as an implicit transaction of its own and gives its
// backend back. done says the pipeline ended there (the part failed: the
// rest is skipped up to the Sync, whose ReadyForQuery is written; or the
// backend's acquisition failed, and the whole pipeline was answered as
// failed); else the caller plans the rest afresh.
func (s *Session) runCut(p pipePlanner, term byte) (done bool, err error) {
	pl := p.planner
	pl.cut = false
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
		if term == 'S' { // the part failed: the rest is skipped up to the Sync
			s.txn.skipUntilSync = false
			if !s.pinFatal {
				s.cc.out = pgwire.AppendRFQ(s.cc.out, s.txn.status())
			}
		}
		return true, nil
	}
	pl.plan.bw = pgwire.AppendEmpty(pl.plan.bw, 'S')
	pl.plan.items = append(pl.plan.items, item{kind: itSync})
	if pl.wrap {
		pl.holdCommit()
		pl.plan.bw = pgwire.AppendQuery(pl.plan.bw, "COMMIT")
		pl.plan.items = append(pl.plan.items, item{kind: itQuery, flags: fSwallow})
	}
	s.fretry.armed = false // the fence's retry reruns a whole pipeline: not after a part of it ran
	res, err := runExchange(s, &pl.plan, pl.bc, false)
	if err != nil {
		return true, err
	}
	if !res.lost {
		pl.exErrored = res.errored
		s.afterReady(pl, res.status)
	}
	if res.lost || res.errored || pl.failed || res.status != 'I' {
		// Postgres skips the rest of the pipeline up to its Sync.
		if term == 'S' {
			if !s.pinFatal {
				s.cc.out = pgwire.AppendRFQ(s.cc.out, s.txn.status())
			}
		} else {
			s.txn.skipUntilSync = true
		}
		return true, nil
	}
	return false, nil
}
