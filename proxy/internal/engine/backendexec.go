package engine

import (
	"context"
	"fmt"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// backendExec is the side of the planner that does I/O: it carries out
// the router's decisions (target's routePlan, kept in the planner) on
// the session: acquires a backend of the plan's shard (another one when
// any shard would do), takes a reader for the transaction, replays a
// deferred transaction's start, moves a soft transaction (a ROLLBACK on
// its backend), demotes the transaction's backend to a reader, probes
// and asserts the map fence (fence.go, fenceretry.go), describes a
// statement in a transaction of its own (describeApart), and takes the
// I/O step of a local action (take: a soft move's ROLLBACK, a session
// SET's probe, the ending or cancelling of sessions a
// pg_terminate_backend / pg_cancel_backend names). The planner's other parts (plan.go, router.go,
// txnsim.go, stmtbook.go) do none of this; the extended-protocol and
// simple-query planners call it through planner.exec where a statement
// needs its backend or an action has a step.
type backendExec struct{ planner *planner }

// exec is the planner's executor side.
func (p *planner) exec() backendExec { return backendExec{p} }

// run carries out the router's plan rp of statement a (not a fan-out):
// the pipeline runs on rp.shard, any shard if rp.anyShard, moving the
// transaction's backend if rp.swapMain, asserting rp.fence's key when
// the statement runs on its key's shard.
func (p backendExec) run(rp routePlan, a *route.Statement) *pgwire.Error {
	p.planner.anyShard = p.planner.anyShard || rp.anyShard
	p.planner.swapMain = p.planner.swapMain || rp.swapMain
	p.planner.fence.clear()
	if rp.fence.set() && rp.shard == rp.fence.shard {
		p.planner.fence = rp.fence // only a statement run on its key's shard asserts it
	}
	return p.ensureBackend(rp.shard, a)
}

// ensureBackend makes the pipeline run on shard: acquires a connection
// (or, where mayDefer allows, plans its acquisition as the plan's step:
// acquirestep.go), replays a deferred transaction, or moves a soft one.
func (p backendExec) ensureBackend(shard int, a *route.Statement) *pgwire.Error {
	s := p.planner.s
	if p.planner.onBackend {
		p.fenceHeld()
		return nil
	}
	if e := p.planner.given.movedErr(p.planner.cur); e != nil {
		return e // the soft move this statement stopped for failed
	}
	heldAtEntry := p.planner.held
	if p.planner.held && p.planner.swapMain {
		if p.mayStop(false) {
			return stopSwap(p.planner) // the runner demotes it (acquireneed.go)
		}
		p.demoteToReader()
	}
	if p.planner.held {
		if shard == p.planner.shard || shard < 0 || !p.planner.soft {
			p.planner.onBackend = true
			p.fenceHeld()
			return nil
		}
		// A soft transaction (only table-less reads so far) moves: the
		// runner rolls it back (acquireneed.go), or here.
		if p.mayStop(false) {
			return stopMoveSoft(p.planner, p.planner.shard)
		}
		if e := p.moveSoft(); e != nil {
			return e
		}
	}
	if p.planner.sim.tx == txDeferred && !p.planner.held && s.readers.any() && p.bindReader(shard) {
		return nil
	}
	if p.mayDefer(shard, a) {
		p.planAcquire(shard, a)
		return nil
	}
	g := p.useGiven(shard)
	p.planner.took = nil
	switch {
	case g != nil && g.err != nil:
		return g.err
	case g != nil:
		p.planner.took = g // given by the runner (acquireneed.go)
	case g == nil && p.mayStop(heldAtEntry):
		return p.stop(shard) // the runner takes it (acquireneed.go)
	case g == nil:
		pool, pre, bc, sh, e := acquireOn(p.planner.ctx, s, shard, p.planner.anyShard)
		if e != nil {
			return e
		}
		g = &givenConn{pool: pool, pre: pre, bc: bc, shard: sh}
		if p.planner.fence.set() && !p.planner.noFence && s.own == nil {
			g.fenced = s.host.Fences.fenced(p.planner.ctx, s.gen, s.host.Log, pool, bc)
		}
	}
	s.setBackend(g.bc)
	s.txn.shard = g.shard
	p.planner.bc, p.planner.shard, p.planner.onBackend = g.bc, g.shard, true
	fence := p.planner.fence.set() && !p.planner.noFence && s.own == nil && g.fenced
	p.openTxn(g.pre, fence, a)
	return nil
}

// openTxn writes what opens the pipeline's part on its backend ahead of
// it: a deferred transaction's replay, the fence's assert (fence: the
// statement's key is asserted), the BEGIN of a wrap for the settings
// pre. It reads nothing of the backend, so a deferred acquisition
// (planAcquire) plans it too.
func (p backendExec) openTxn(pre *backend.Settings, fence bool, a *route.Statement) {
	s := p.planner.s
	fenceKey := ""
	if fence {
		fenceKey = s.host.StandIns.fenceKeyFor(s.gen.Config.Map, p.planner.fence.text(), p.planner.fence.bucket)
	}
	p.planner.fence.clear() // used once
	// The assert may be retried after a refusal only when it is the
	// transaction's first step (fenceretry.go).
	fflag := p.fenceRetryFlag(fence)
	switch {
	case p.planner.sim.tx == txDeferred:
		p.replayDeferred(pre, fence, fenceKey, fflag)
	case fence && len(pre.KV) == 0 && p.planner.sim.tx == txIdle && !p.planner.simple && (a == nil || !a.NoTxnBlock):
		// A pipeline up to Sync is one implicit transaction already: the
		// assert is its first statement (no BEGIN/COMMIT wrap).
		p.appendFenceExtended(fenceKey, fflag)
		p.noteFenceBucket()
	case fence && len(pre.KV) == 0 && p.planner.sim.tx == txIdle && p.planner.inlineOK && (a == nil || !a.NoTxnBlock) && inlinable(fenceKey):
		// A simple Query's statements are one implicit transaction: the
		// assert goes first in the client's own query string
		// (appendClientQuery), no BEGIN/COMMIT wrap.
		p.planner.inlineFence, p.planner.inlineFlags = fenceKey, fSwallow|fReplay|fflag
		p.noteFenceBucket()
	case (len(pre.KV) > 0 || fence) && p.planner.sim.tx == txIdle && (a == nil || !a.NoTxnBlock):
		p.wrapBegin(pre, fence, fenceKey, fflag)
	}
}

// demoteToReader: the held backend has only read, and the transaction
// writes another shard (planner.swapMain). The backend becomes the
// reader of its shard, and the transaction continues on the write's
// shard (its reader, or a replay of the transaction's start there).
func (p backendExec) demoteToReader() {
	demoteSession(p.planner.s)
	leaveForReader(p.planner)
}

// demoteSession is the session's side of demoteToReader: its backend
// becomes the reader of its shard, its transaction deferred again (what
// it replays kept).
func demoteSession(s *Session) {
	s.readers.add(s.txn.shard, s.bc, len(s.gen.Pools))
	s.setBackend(nil)
	s.txn.tx, s.txn.soft = txDeferred, false
}

// leaveForReader is the plan's side of demoteToReader.
func leaveForReader(pl *planner) {
	pl.held, pl.bc, pl.soft = false, nil, false
	pl.sim.tx, pl.explicit = txDeferred, false
}

// bindReader makes the reader of shard (with p.anyShard, of the first
// shard from it that has one) the deferred transaction's backend: a
// read of every shard opened the transaction there already. It reports
// whether there was one.
func (p backendExec) bindReader(shard int) bool {
	s := p.planner.s
	if p.planner.anyShard {
		for i := range s.readers.conns {
			if s.readers.conns[(shard+i)%len(s.readers.conns)] != nil {
				shard = (shard + i) % len(s.readers.conns)
				break
			}
		}
	}
	bc := s.readers.take(shard)
	if bc == nil {
		return false
	}
	if p.planner.sim.hint >= 0 {
		s.txn.hintBound = true
	}
	s.setBackend(bc)
	s.txn.shard = shard
	p.planner.bc, p.planner.shard, p.planner.onBackend = bc, shard, true
	p.planner.explicit = true
	p.planner.sim.tx = txBound
	p.fenceHeld()
	return true
}

// acquireOn takes a connection of shard's pool keyed by the session's
// settings (with anyShard, of the next shard whose pool can give one);
// pre is the settings the transaction must apply itself.
func acquireOn(ctx context.Context, s *Session, shard int, anyShard bool) (pool *backend.Pool, pre *backend.Settings, bc *backend.Conn, _ int, _ *pgwire.Error) {
	pool = s.gen.Pools[shard]
	key, pre := s.cur.Split(pool.ViaPooler)
	bc, err := pool.Acquire(ctx, key)
	for k := 1; err != nil && anyShard && k < len(s.gen.Pools); k++ {
		if _, isPg := err.(*backend.PgError); isPg {
			break
		}
		shard = (shard + 1) % len(s.gen.Pools)
		pool = s.gen.Pools[shard]
		key, pre = s.cur.Split(pool.ViaPooler)
		bc, err = pool.Acquire(ctx, key)
	}
	if err != nil {
		return pool, pre, nil, shard, acquireError(pool, err)
	}
	return pool, pre, bc, shard, nil
}

// describeApart answers a Describe of statement vs that comes before
// anything of its transaction ran on a shard — an implicit transaction's
// first message for a backend, or a transaction block still deferred
// (only BEGIN, SET LOCAL, ... so far) — when the pipeline's next
// statement reads every shard (Parse, Describe, Bind, Execute, Sync in
// one pipeline: JDBC for a statement with parameters of unknown type,
// the postgres.js driver's cursors): one shard describes it in a
// transaction of its own that repeats what the client's has set (the
// session's settings, the deferred BEGIN and SET LOCALs) and is rolled
// back, and the description is the proxy's answer. Described on a
// backend of the client's transaction instead, the read would follow a
// statement of one shard, which the proxy refuses. It reports false,
// and the Describe is planned as before, where that does not hold.
func (p backendExec) describeApart(vs *vstmt) bool {
	pl, s := p.planner, p.planner.s
	if pl.held || pl.onBackend || !(pl.sim.tx == txIdle || pl.sim.tx == txDeferred && !s.readers.any()) || pl.simple || !pl.pipeline || pl.fan != nil ||
		s.own != nil || pl.sim.hint >= 0 || len(s.gen.Pools) < 2 || len(vs.st.Unsharded) > 0 {
		return false
	}
	var desc backend.Described
	var e *pgwire.Error
	switch gd := pl.given.describedAt(pl.cur); {
	case gd != nil:
		desc, e = gd.desc, gd.err // described by the runner (acquireneed.go)
	case p.mayStop(pl.held):
		stopDescribe(pl, vs, s.gen.pickAny())
		return true
	default:
		pl.stepped = true // I/O while planning: the part is not planned again
		desc, e = describeOn(pl.ctx, s, s.gen.pickAny(), vs.st.SQL, vs.oids, pl.sim.deferred, pl.sim.tx == txDeferred)
	}
	if e != nil {
		if !desc.Parsed && pl.pendingParse >= 0 && pl.pendingParse == len(pl.plan.items)-1 && pl.pendingVs == vs {
			// The client's Parse came just before and failed on the
			// shard: its error replaces the ParseComplete the proxy
			// planned, as Postgres answers.
			it := pl.plan.items[pl.pendingParse]
			pl.plan.items = pl.plan.items[:pl.pendingParse]
			pl.plan.lbuf = pl.plan.lbuf[:it.lo]
			pl.pendingParse = -1
		}
		pl.fail(e, nil)
		return true
	}
	lo := len(pl.plan.lbuf)
	pl.plan.lbuf = append(pl.plan.lbuf, desc.Msgs...)
	pl.plan.addLocal(lo, nil)
	return true
}

// describeOn describes statement sql (parameter types oids) on shard in
// a transaction of its own that repeats what the client's has set (the
// session's settings; deferredTx: the deferred BEGIN and SET LOCALs
// deferred), on a connection taken for it and given back
// (describeApart): the shard's description, or the error the client
// gets — the shard's own, or the failure to reach it.
func describeOn(ctx context.Context, s *Session, shard int, sql string, oids []uint32, deferred []deferredStmt, deferredTx bool) (backend.Described, *pgwire.Error) {
	pool := s.gen.Pools[shard]
	key, pre := s.cur.Split(pool.ViaPooler)
	bc, err := pool.Acquire(ctx, key)
	if err != nil {
		return backend.Described{}, acquireError(pool, err)
	}
	begin := ""
	switch {
	case deferredTx:
		begin = replaySQL(deferred, pre)
	case len(pre.KV) > 0:
		begin = pre.BeginSQL() + ";\n" + pre.PreambleSQL()
	}
	rl := relabelFor(ctx, s, pool)
	d, err := bc.DescribeStmt(ctx, s.gen.Config.PoolTimeout, begin, sql, rl.paramTypes(oids))
	pool.Release(bc)
	rl.describedMsgs(d.Msgs)
	if err != nil {
		return d, pgwire.NewError(pgwire.CodeConnectionFailure, fmt.Sprintf("describing the statement on shard %q failed: %v", pool.Shard.Name, err))
	}
	if d.ErrRaw != nil {
		if e := pgwire.DecodeError(d.ErrRaw); e != nil {
			return d, e
		}
		return d, pgwire.NewError(pgwire.CodeInternalError, fmt.Sprintf("shard %q answered the statement's Describe with a malformed error", pool.Shard.Name))
	}
	return d, nil
}

// acquireError is the client's error for a failed Acquire of pool.
func acquireError(pool *backend.Pool, err error) *pgwire.Error {
	if be, ok := err.(*backend.PgError); ok {
		return pgErrorToError(be.PgErr, "ERROR")
	}
	return pgwire.AsError(err, &pgwire.Error{Code: pgwire.CodeCannotConnect, Message: fmt.Sprintf("shard %q: %v", pool.Shard.Name, err)})
}

// replayDeferred writes the deferred transaction's start (with the
// settings pre and the fence's assert) ahead of the pipeline, and binds
// the transaction to the backend.
func (p backendExec) replayDeferred(pre *backend.Settings, fence bool, fenceKey string, fflag itemFlags) {
	s := p.planner.s
	if p.planner.sim.hint >= 0 {
		s.txn.hintBound = true
	}
	replay := replaySQL(p.planner.sim.deferred, pre)
	if fence {
		replay = string(appendFenceSQL(append([]byte(replay), ";\n"...), fenceKey, p.planner.fenceCall()))
		p.noteFenceBucket()
	}
	p.planner.plan.bw = pgwire.AppendQuery(p.planner.plan.bw, replay)
	p.planner.plan.items = append(p.planner.plan.items, item{kind: itQuery, flags: fSwallow | fReplay | fflag})
	if p.planner.swapMain {
		// Its other shard's reads and this shard's write are one
		// transaction only under READ COMMITTED.
		lo := len(p.planner.plan.lbuf)
		p.planner.plan.lbuf = pgwire.AppendError(p.planner.plan.lbuf, isolationRefusal("REPEATABLE READ or SERIALIZABLE", "a transaction that read one shard cannot write another"))
		p.planner.plan.bw = pgwire.AppendQuery(p.planner.plan.bw, isoCheckSQL)
		p.planner.plan.items = append(p.planner.plan.items, item{kind: itQuery, flags: fSwallow | fReplay | fReplaceErr, lo: int32(lo), hi: int32(len(p.planner.plan.lbuf))})
	}
	p.planner.explicit = true
	p.planner.sim.tx = txBound
}

// wrapBegin opens the implicit transaction the settings pre or the
// fence's assert need: one Query, written in place: "BEGIN; [preamble;]
// [assert]" (the COMMIT follows the pipeline).
func (p backendExec) wrapBegin(pre *backend.Settings, fence bool, fenceKey string, fflag itemFlags) {
	bw, sp := pgwire.BeginMsg(p.planner.plan.bw, 'Q')
	bw = append(append(bw, pre.BeginSQL()...), ";\n"...)
	if len(pre.KV) > 0 {
		bw = append(bw, pre.PreambleSQL()...)
		if fence {
			bw = append(bw, ";\n"...)
		}
	}
	if fence {
		bw = appendFenceSQL(bw, fenceKey, p.planner.fenceCall())
		p.noteFenceBucket()
	}
	p.planner.plan.bw = pgwire.FinishMsg(append(bw, 0), sp)
	p.planner.plan.items = append(p.planner.plan.items, item{kind: itQuery, flags: fSwallow | fReplay | fflag})
	p.planner.wrap = true
}

// moveSoft rolls back a soft transaction (it ran only table-less reads)
// and makes the transaction deferred again, to be replayed elsewhere.
func (p backendExec) moveSoft() *pgwire.Error {
	from := p.planner.shard
	p.planner.leaveSoft()
	return p.rollbackSoft(from)
}

// rollbackSoft is the I/O of moving a soft transaction off its backend
// (of shard from): a ROLLBACK there, and the backend released.
func (p backendExec) rollbackSoft(from int) *pgwire.Error {
	return rollbackSoftOn(p.planner.ctx, p.planner.s, from)
}

// moveSoftOff is the runner's move of s's soft transaction off its
// backend (of shard from) that planning stopped for: the ROLLBACK, the
// backend released, the transaction deferred again (what it replays
// kept), as the plan's leaveSoft left it; after a failure too (the
// backend is gone; the statement that needed the move fails).
func moveSoftOff(ctx context.Context, s *Session, from int) *pgwire.Error {
	e := rollbackSoftOn(ctx, s, from)
	s.txn.tx, s.txn.bstatus = txDeferred, 0
	return e
}

func rollbackSoftOn(ctx context.Context, s *Session, from int) *pgwire.Error {
	_, err := s.bc.RunSimple(ctx, s.gen.Config.PoolTimeout, "ROLLBACK")
	s.dropBackend(err == nil)
	s.txn.soft = false
	if err != nil {
		return pgwire.NewError(pgwire.CodeConnectionFailure, fmt.Sprintf("moving the transaction off shard %q failed: %v", s.gen.shardName(from), err))
	}
	return nil
}

// take carries out the I/O step of a local action (action.step), if it
// has one, and returns the answer: the planned one when the step
// succeeded, else the step's error or finding.
func (p backendExec) take(act action) action {
	if e := p.planner.given.movedErr(p.planner.cur); e != nil {
		return action{err: e} // the soft move this statement stopped for failed
	}
	st := act.step
	if st == nil {
		return act
	}
	act.step = nil
	switch g, stopped := p.givenStepFor(st); {
	case stopped:
		return action{err: errPlanStopped} // the runner takes it (acquireneed.go)
	case g != nil:
		return probeAction(p.planner, st, g.probe) // probed by the runner
	}
	p.planner.stepped = true // its I/O is done: the part is not planned again
	switch st.kind {
	case stepMoveSoft:
		if e := p.rollbackSoft(st.from); e != nil {
			p.planner.sim.tx, p.planner.sim.hint = txDeferred, st.hint // as the move left it
			return action{err: e}
		}
		return act
	case stepProbeSet:
		return p.probeSet(st)
	case stepTerminate:
		st.term.carryOut(p.planner.ctx, p.planner.s)
		return act
	}
	return action{err: pgwire.NewError(pgwire.CodeInternalError, "pgshard planned an unknown step")}
}
