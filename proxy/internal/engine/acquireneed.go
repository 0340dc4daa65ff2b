package engine

import (
	"context"
	"slices"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// An acquisition planning stops for. Where the plan cannot leave a
// backend's acquisition to the executor as a step of its own
// (acquireStep: only an idle session's pipeline whose Bind is its first
// statement for a backend, nothing after it reading the connection),
// the planner does not take the connection itself: it records what it
// needs (planner.need: the shard, whether any shard would do, whether
// the plan asserts a key there) and stops; the runner (runPipeline,
// simpleQuery) takes the connection — with its pool's fence asked on it
// where the plan asserts a key (takeNeed) — and plans the part again
// from its first message with the connection given (planner.given),
// which the same acquisition then uses: planning does no I/O there.
//
//	plan ──► ensureBackend: no connection yet ──► need, stop
//	runner: takeNeed (Acquire, the fence's question) ──► given
//	plan again ──► ensureBackend: given ──► the rest planned on it
//
// Planning the part again gives the same plan up to the acquisition
// because planning changes nothing of the session's (its effects reach
// the session as the executor runs the plan; the routing decisions
// planned twice are counted once: planner.muted). The planner stops
// only where that holds: a runner that plans again (planner.restartable,
// at most twice per part), no backend held when the acquisition comes
// (a soft transaction's move or a swap of the transaction's backend is
// I/O on the held backend, done on the spot), no step of an action taken
// and no Describe answered apart in the part yet (their I/O is done),
// not a pinned session. Elsewhere ensureBackend acquires on the spot, as
// before.

// errPlanStopped is what ensureBackend returns when planning stopped
// for an acquisition (planner.need): the callers fail the statement as
// for any error, and the runner throws that plan away. A client never
// sees it.
var errPlanStopped = &pgwire.Error{Code: pgwire.CodeInternalError, Message: "pgshard: planning stopped for a backend (not an answer)"}

// acquireNeed is the acquisition planning stopped for.
type acquireNeed struct {
	on    bool
	shard int
	// any: any shard would do (the next whose pool gives a connection).
	any bool
	// fence: the plan asserts a key on it (ask the pool's fence).
	fence bool
	// noted: the routing decisions noted before the stop (planned again:
	// not noted twice).
	noted int
	// describe: planning stopped for the Describe of a statement
	// answered apart (describeApart) at message msg: sql with parameter
	// types oids, described on shard in a transaction that repeats the
	// deferred one's start (deferredTx: deferred).
	describe   bool
	msg        int
	sql        string
	oids       []uint32
	deferred   []deferredStmt
	deferredTx bool
}

// givenDescribe is the description the runner got for the Describe of
// message msg planning stopped for, or the error the client gets.
type givenDescribe struct {
	msg  int
	desc backend.Described
	err  *pgwire.Error
}

// givenConn is the connection the runner took for the acquisition
// planning stopped for, or its failure (err: the statement fails with
// it, as if acquired on the spot).
type givenConn struct {
	pool   *backend.Pool
	pre    *backend.Settings
	bc     *backend.Conn
	shard  int
	fenced bool // the pool's fence, asked on bc where the plan asserts a key
	err    *pgwire.Error
}

// mayStop reports whether ensureBackend, about to acquire on the spot,
// may stop planning instead (see above). heldAtEntry: the planner held
// a backend when ensureBackend began.
func (p backendExec) mayStop(heldAtEntry bool) bool {
	pl := p.planner
	return pl.restartable && pl.restarts < 2 && !heldAtEntry && !pl.stepped && pl.s.own == nil
}

// stopDescribe records the Describe of vs answered apart as the plan's
// need (describeApart).
func (p backendExec) stopDescribe(vs *vstmt) {
	pl := p.planner
	pl.need = acquireNeed{on: true, describe: true, shard: pl.s.gen.pickAny(), msg: pl.cur, sql: vs.st.SQL,
		oids: slices.Clone(vs.oids), deferred: slices.Clone(pl.sim.deferred), deferredTx: pl.sim.tx == txDeferred, noted: pl.noted}
}

// stop records the acquisition of shard as the plan's need.
func (p backendExec) stop(shard int) *pgwire.Error {
	pl := p.planner
	pl.need = acquireNeed{on: true, shard: shard, any: pl.anyShard,
		fence: pl.fence.set() && !pl.noFence && pl.s.host != nil, noted: pl.noted}
	return errPlanStopped
}

// useGiven takes the connection given for this acquisition, if any:
// one of shard (any shard when the plan allows it). A connection of
// another shard (not reached: planning is the same) goes back to its
// pool, and the acquisition happens on the spot.
func (p backendExec) useGiven(shard int) *givenConn {
	pl := p.planner
	g := pl.given
	if g == nil {
		return nil
	}
	pl.given = nil
	if g.err == nil && g.shard != shard && !pl.anyShard {
		g.pool.Release(g.bc)
		return nil
	}
	return g
}

// takeNeed takes the connection planning stopped for (p.need), and asks
// its pool's fence where the plan asserts a key; the part is then
// planned again with it (planner.given).
func takeNeed(ctx context.Context, s *Session, p *planner) (*givenConn, *givenDescribe) {
	n := p.need
	if n.describe {
		d, e := describeOn(ctx, s, n.shard, n.sql, n.oids, n.deferred, n.deferredTx)
		return nil, &givenDescribe{msg: n.msg, desc: d, err: e}
	}
	pool, pre, bc, shard, e := acquireOn(ctx, s, n.shard, n.any)
	if e != nil {
		return &givenConn{pool: pool, shard: shard, err: e}, nil
	}
	g := &givenConn{pool: pool, pre: pre, bc: bc, shard: shard}
	if n.fence {
		g.fenced = s.host.Fences.fenced(ctx, s.gen, s.host.Log, pool, bc)
	}
	return g, nil
}

// replanFrom readies planner p, new for the part being planned again,
// with the connection given for what the part before it stopped for.
func replanFrom(p *planner, old acquireNeed, restarts int, g *givenConn, gd *givenDescribe) {
	p.given, p.givenDesc, p.restartable, p.restarts, p.muted = g, gd, true, restarts+1, old.noted
}

// dropGiven gives back a connection given that the plan did not use
// (planning stopped again elsewhere, or ended before).
func dropGiven(p *planner) {
	if g := p.given; g != nil {
		p.given = nil
		if g.err == nil {
			g.pool.Release(g.bc)
		}
	}
}
