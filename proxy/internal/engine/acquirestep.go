package engine

import (
	"slices"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// acquireStep is a backend acquisition the plan records instead of
// doing it (planned.acquire): the pipeline runs on shard, whose pool
// gives a connection for the settings key when the executor takes the
// step (runPipeline, before the exchange). Planning wrote everything
// else already (the fence's assert, a wrap's BEGIN) but a Bind that
// needs the connection's statement cache (render): none of it reads the
// connection.
//
// It is planned only where nothing after it reads the connection
// (mayDefer, pipePlanner.deferrable): an idle session's Query of one
// shard whose fence state is known (taken by takeQueryAcquire), or an
// idle session's pipeline, its
// first statement for a backend bound by a Bind (not a pinned
// backend's own statement; a Bind that needs the connection's statement
// cache is written by the executor: render), a fence
// state known without asking the backend or an assert planned alone
// (no settings to wrap) that the executor keeps or cuts out after its
// first question of the pool (probe), and only Describe (of a portal),
// Execute, Sync and Flush after it. Everywhere else the planner still
// acquires on the spot (ensureBackend).
type acquireStep struct {
	on    bool
	shard int
	pool  *backend.Pool
	key   *backend.Settings
	// asserted: the plan asserts the fence of bucket; the session
	// records it (fenceBuckets) once the backend is taken.
	asserted bool
	bucket   int
	// probe: the pool's fence state was not known when planned (fence
	// auto, the pool not asked yet). The plan asserts the key, its
	// assert being bw[bwLo:bwHi] and items[itLo:itHi]; the executor asks
	// the backend it took (PoolFences.fenced) and cuts the assert out
	// of the plan when the shard has no fence.
	probe      bool
	bwLo, bwHi int
	itLo, itHi int
	// render: the Bind's statement needs the connection's statement
	// cache (a named or cached unnamed statement, no pooler): the plan
	// leaves its Closes, Parse and Bind out, and the executor writes
	// them against the connection it took (renderBind) at bw[bindBw:]
	// and items[bindIt:], ahead of what was planned after the Bind.
	render         bool
	vs             *vstmt
	bindBw, bindIt int
	// msg is the pipeline message whose Bind needed the backend, and
	// snap the planner as it was there: if the acquisition fails, the
	// pipeline fails at that message, as if planned on the spot.
	msg  int
	snap *planner
}

// mayDefer reports whether the acquisition ensureBackend is about to do
// for statement a on shard can be a step of the plan instead (see
// acquireStep). planner.lazy says the message being planned allows it.
func (p backendExec) mayDefer(shard int, a *route.Statement) bool {
	pl, s := p.planner, p.planner.s
	if a == nil || a.Copy || pl.held || pl.anyShard || pl.swapMain ||
		pl.sim.tx != txIdle || pl.fan != nil || s.own != nil || shard < 0 || shard >= len(s.gen.Pools) {
		return false
	}
	switch {
	case pl.simple:
		// A Query: only where the client's string follows the
		// acquisition and nothing else (inlineOK: simpleOne,
		// simpleMulti), and no probe of the fence (its assert would be
		// inside the client's string).
		if !pl.inlineOK {
			return false
		}
	case pl.lazy == nil || !pl.pipeline:
		return false
	case pl.lazy.realOn != nil:
		return false // its Parse depends on the pinned backend's own names
	}
	pool := s.gen.Pools[shard]
	if pl.fence.set() && !pl.noFence {
		_, known := p.fenceKnown(pool)
		return known || !pl.simple && p.mayProbe(pool, a)
	}
	return true
}

// mayProbe reports whether the first question of pool's fence can be
// part of the acquisition step: the assert would be the pipeline's
// first statement on its own (openTxn's appendFenceExtended: no
// settings to wrap, a statement that may run in a transaction), so the
// executor can cut it out of the plan when the shard has no fence. Not
// the hot path: a pool's fence is asked about once.
func (p backendExec) mayProbe(pool *backend.Pool, a *route.Statement) bool {
	s := p.planner.s
	if s.host == nil || s.host.Fences == nil || a.NoTxnBlock {
		return false
	}
	_, pre := s.cur.Split(pool.ViaPooler)
	return len(pre.KV) == 0
}

// fenceKnown is whether transactions on pool assert their key, when
// that is known without asking the backend (PoolFences.fenced asks).
func (p backendExec) fenceKnown(pool *backend.Pool) (on, known bool) {
	s := p.planner.s
	var f *PoolFences
	if s.host != nil {
		f = s.host.Fences
	}
	return f.decided(s.gen, pool)
}

// planAcquire plans the pipeline onto shard with the acquisition as the
// plan's step (mayDefer said it may): what opens the transaction is
// written now, the connection is taken by takeAcquire.
func (p backendExec) planAcquire(shard int, a *route.Statement) {
	pl, s := p.planner, p.planner.s
	pool := s.gen.Pools[shard]
	key, pre := s.cur.Split(pool.ViaPooler)
	st := &pl.plan.acquire
	if st.snap == nil {
		st.snap = new(planner)
	}
	*st.snap = *pl
	st.on, st.shard, st.pool, st.key, st.msg = true, shard, pool, key, pl.cur
	st.asserted, st.bucket, st.probe, st.render, st.vs = false, 0, false, false, nil
	pl.shard, pl.onBackend = shard, true
	fence, known := false, true
	if pl.fence.set() && !pl.noFence {
		fence, known = p.fenceKnown(pool)
	}
	if !known {
		// mayProbe: the assert alone, kept or cut by the executor.
		st.probe, st.bwLo, st.itLo = true, len(pl.plan.bw), len(pl.plan.items)
		fence = true
	}
	p.openTxn(pre, fence, a)
	st.bwHi, st.itHi = len(pl.plan.bw), len(pl.plan.items)
}

// noteFenceBucket records that the plan asserts the fence's bucket: in
// the session's list now, or when the plan's acquisition is taken.
func (p backendExec) noteFenceBucket() {
	if st := &p.planner.plan.acquire; st.on {
		st.asserted, st.bucket = true, p.planner.fence.bucket
		return
	}
	p.planner.s.fenceBuckets = append(p.planner.s.fenceBuckets, p.planner.fence.bucket)
}

// takeAcquire takes the plan's acquisition step, if it has one: the
// connection becomes the session's backend, the plan's. On an error
// the pipeline is planned again from the step's message as failed
// there (the plan it had up to that message is kept).
func (p pipePlanner) takeAcquire() {
	pl, s := p.planner, p.planner.s
	st := &pl.plan.acquire
	if !st.on {
		return
	}
	err := takeStepConn(pl)
	if err == nil {
		if st.render {
			p.renderBind(st)
		}
		if st.probe && !s.host.Fences.fenced(pl.ctx, s.gen, s.host.Log, st.pool, pl.bc) {
			p.cutAssert(st)
		}
		if st.asserted {
			s.fenceBuckets = append(s.fenceBuckets, st.bucket)
		}
		return
	}
	snap, at, pool := st.snap, st.msg, st.pool // st is the plan's: restored below
	*pl = *snap
	pl.lazy = nil
	pl.plan.acquire = acquireStep{snap: snap}
	pl.fail(acquireError(pool, err), nil)
	for i := at + 1; i < len(s.grp); i++ {
		// The pipeline failed: only its Sync and Flush are answered.
		p.planner.cur = i
		switch m := s.grp[i]; m.typ {
		case 'S':
			p.sync(m.raw)
		case 'H':
			p.flushMsg(m.raw)
		}
	}
}

// takeQueryAcquire takes the acquisition step of a Query's plan, if it
// has one (mayDefer: an idle session's statement of one shard): the
// connection becomes the session's backend. On an error the Query is
// planned again from the step as failed there, as if acquired on the
// spot (failQuery).
func takeQueryAcquire(pl *planner) {
	s, st := pl.s, &pl.plan.acquire
	if !st.on {
		return
	}
	err := takeStepConn(pl)
	if err == nil {
		if st.asserted {
			s.fenceBuckets = append(s.fenceBuckets, st.bucket)
		}
		return
	}
	snap, pool := st.snap, st.pool
	*pl = *snap
	pl.plan.acquire = acquireStep{snap: snap}
	queryPlanner{pl}.failQuery(acquireError(pool, err))
}

// takeStepConn takes the connection of pl's acquisition step: it
// becomes the session's backend and the plan's. On an error the plan
// and the session are as they were (the caller plans the failure).
func takeStepConn(pl *planner) error {
	s, st := pl.s, &pl.plan.acquire
	st.on = false
	bc, err := st.pool.Acquire(pl.ctx, st.key)
	if err != nil {
		return err
	}
	s.setBackend(bc)
	s.txn.shard = st.shard
	pl.bc = bc
	return nil
}

// cachedBind reports whether the Bind of vs being planned is the
// acquisition step's and its statement needs the connection's statement
// cache: bindOnBackend leaves it to the executor (renderBind).
func (p pipePlanner) cachedBind(vs *vstmt) bool {
	pl, s := p.planner, p.planner.s
	st := &pl.plan.acquire
	if !st.on || pl.bc != nil || st.msg != pl.cur || vs.name == "" && !vs.cacheUnnamed {
		return false
	}
	if st.pool.ViaPooler || s.gen.Config.StatementCacheSize <= 0 {
		return false
	}
	st.render, st.vs, st.bindBw, st.bindIt = true, vs, len(pl.plan.bw), len(pl.plan.items)
	return true
}

// renderBind writes the step's Bind against the connection taken (its
// statement cache: the Closes of what it evicts, the statement's Parse
// if it does not hold it, the Bind under the cache's name) where the
// plan left it (bw[bindBw:], items[bindIt:]): written at the plan's
// end, then rotated into place, no allocation once the plan's buffers
// have grown.
func (p pipePlanner) renderBind(st *acquireStep) {
	pl := p.planner
	bw0, it0 := len(pl.plan.bw), len(pl.plan.items)
	raw := pl.s.grp[st.msg].raw
	if err := pl.bv.Decode(raw); err != nil {
		pl.protoErr = err // decoded once already when planned: not reached
		return
	}
	name, cs := p.sendParse(st.vs)
	pl.plan.bw = pgwire.AppendBindAs(pl.plan.bw, raw, &pl.bv, name)
	var fl itemFlags
	if st.vs.epoch != pl.s.gen.StmtEpoch.Load() {
		fl = fStale
	}
	pl.plan.items = append(pl.plan.items, item{kind: itBind, cs: cs, flags: fl, rows: bindRows(st.vs, pl.bv.ResultFmts)})
	rotate(pl.plan.bw[st.bindBw:], bw0-st.bindBw)
	rotate(pl.plan.items[st.bindIt:], it0-st.bindIt)
	st.render, st.vs = false, nil
}

// rotate moves x[k:] ahead of x[:k], in place.
func rotate[T any](x []T, k int) {
	slices.Reverse(x[:k])
	slices.Reverse(x[k:])
	slices.Reverse(x)
}

// cutAssert takes the assert planned ahead of the step's statement out
// of the plan: the executor's question of the pool said its shard has
// no fence (or could not tell: not fenced, asked again next time).
func (p pipePlanner) cutAssert(st *acquireStep) {
	pl := &p.planner.plan
	pl.bw = slices.Delete(pl.bw, st.bwLo, st.bwHi)
	pl.items = slices.Delete(pl.items, st.itLo, st.itHi)
	st.asserted, st.probe = false, false
}

// deferrable reports whether the Bind of statement vs (message idx) may
// leave the acquisition of its backend to the executor (acquireStep):
// the messages after it up to the pipeline's end are only Describes of
// portals, Executes, Syncs and Flushes, none of a portal the proxy
// answers itself (whose answer may need the pipeline's backend).
func (p pipePlanner) deferrable(vs *vstmt, idx int) *vstmt {
	for _, m := range p.planner.s.grp[idx+1:] {
		switch m.typ {
		case 'S', 'H':
			continue
		case 'D':
			kind, name, err := pgwire.DecodeTarget(m.raw)
			if err != nil || kind != 'P' || !p.backendPortal(name) {
				return nil
			}
		case 'E':
			name, _, err := pgwire.DecodeExecute(m.raw)
			if err != nil || !p.backendPortal(name) {
				return nil
			}
		default:
			return nil
		}
	}
	return vs
}

// backendPortal reports whether the portal name is the one the Bind
// being planned binds (unnamed portals and named ones alike are looked
// up as the plan will: the last bound of that name), or one bound
// earlier for a backend.
func (p pipePlanner) backendPortal(name []byte) bool {
	if string(name) == string(p.planner.bv.Portal) {
		return true
	}
	pi := p.portal(name)
	return pi == nil || !pi.local && pi.lead == 0 && pi.term == nil
}

// stmtCache is the statement cache of the pipeline's backend (nil: none,
// or no connection yet: mayDefer plans no acquisition where a statement
// would use one).
func (p *planner) stmtCache() *backend.StmtCache {
	if p.bc == nil {
		return nil
	}
	return p.bc.Stmts
}
