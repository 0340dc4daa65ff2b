package engine

import (
	"context"
	"slices"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// What planning stops for: a backend's acquisition, a Describe answered
// apart (or a stale statement's at its Bind), an action's step, the
// tables of indexes a schema change names, a soft transaction's move off
// its backend, a swap of its backend for a write's shard, a call of
// pg_terminate_backend / pg_cancel_backend of the proxy's sessions. Where
// the plan cannot leave a
// backend's acquisition to the executor as a step of its own
// (acquireStep: only an idle session's pipeline whose Bind is its first
// statement for a backend, nothing after it reading the connection),
// the planner does not take the connection itself: it records what it
// needs (planner.need: the shard, whether any shard would do, whether
// the plan asserts a key there) and stops; the runner (runPipeline,
// simpleQuery) takes the connection — with its pool's fence asked on it
// where the plan asserts a key (takeNeed) — and plans the part again
// from its first message with the connection given (planner.given),
// which the same acquisition then uses: planning does no I/O there. A
// Describe answered apart (describeApart), a session SET's probe on
// any shard (an action's step that needs no backend of the pipeline)
// and the default shard's answer to which tables the indexes a schema
// change names belong to (indexddl.go) stop it alike: the runner
// describes, probes or asks, and the part is planned again with the
// result given (the probes in order: planner.given.steps; the index
// answers by their names: planner.given.indexes; the descriptions by
// message: planner.given.descs). A soft transaction's move (moveSoftOff:
// the ROLLBACK on the backend it holds, the backend released, the
// transaction deferred again) is done by the runner alike: the part
// planned again finds no backend held and replays the transaction on
// the shard its statement names; a failed move fails that statement. A
// swap (demoteSession: the backend that only read becomes its shard's
// reader, the transaction deferred again) likewise, without I/O; so is a
// terminate call (carryOut), answered when planned again as it was
// resolved before (planner.given.terms: the sessions it ended have left
// the register). A stop after the part took the connection the runner
// gave it (a session SET's probe on it) gives the part planned again the
// same connection, the session left as the part began (takeStop).
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
// at most maxRestarts times per part), no backend held when the
// acquisition comes
// (a soft move and a swap may stop while it is held: nothing of the part
// ran on the backend they leave), no step of an action taken
// and no Describe answered apart in the part yet (their I/O is done),
// not a pinned session. Elsewhere ensureBackend acquires on the spot, as
// before.

// errPlanStopped is what planning returns where it stopped
// (planner.need): the callers fail the statement as for any error, and
// the runner throws that plan away. A client never sees it.
var errPlanStopped = &pgwire.Error{Code: pgwire.CodeInternalError, Message: "pgshard: planning stopped for a backend (not an answer)"}

// maxRestarts bounds how many times a part is planned again; past it,
// what it needs is done on the spot.
const maxRestarts = 3

// acquireNeed is what planning stopped for.
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
	// describe: planning stopped for the description of a statement at
	// message msg (describeApart's Describe, staleResult's Bind): sql with parameter
	// types oids, described on shard in a transaction that repeats the
	// deferred one's start (deferredTx: deferred).
	describe   bool
	msg        int
	sql        string
	oids       []uint32
	deferred   []deferredStmt
	deferredTx bool
	// step: planning stopped for an action's step (a session SET's probe
	// on any shard), the part's next one.
	step *actionStep
	// index: planning stopped for the tables of the indexes a schema
	// change names alone (indexddl.go), asked of the default shard.
	index []string
	// soft: planning stopped at message msg for a soft transaction's
	// move off its backend (of shard from): a ROLLBACK there, the
	// backend released, the transaction deferred again (moveSoftOff).
	soft bool
	from int
	// term: planning stopped at message msg for the call of a
	// pg_terminate_backend / pg_cancel_backend of the proxy's sessions
	// (carryOut).
	term *terminateCall
	// swap: planning stopped at message msg for the swap of the
	// transaction's backend, which only read, for the write's shard: the
	// backend becomes its shard's reader (demoteSession).
	swap bool
}

// givens is what the runner did for a part that stopped, given to the
// part planned again: the connection of its acquisition (used once), the
// descriptions of its messages (a Describe answered apart, a stale
// statement's check at its Bind: by message), its steps' results in
// order (steps[i] is the i-th step take meets), its index questions' (by
// their names). All but the connection hold for every time the part is
// planned again: a part that stops twice is given both.
type givens struct {
	conn    *givenConn
	descs   []givenDescribe
	steps   []givenStep
	indexes []givenIndex
	// moveErr: the soft transaction's move the part stopped for at
	// message msg failed with err (the statement there fails with it).
	moveErr *givenErr
	// terms are the calls of pg_terminate_backend / pg_cancel_backend
	// the runner made, by message: planned again, the call is answered
	// as it was resolved then (the sessions it ended have left the
	// register since).
	terms []givenTerm
}

// givenTerm is the call of message msg the runner carried out.
type givenTerm struct {
	msg  int
	call *terminateCall
}

// terminatedAt is the call carried out for message msg (nil: none).
func (g *givens) terminatedAt(msg int) *terminateCall {
	for _, t := range g.terms {
		if t.msg == msg {
			return t.call
		}
	}
	return nil
}

// givenErr is an error the runner met doing what message msg needed.
type givenErr struct {
	msg int
	err *pgwire.Error
}

// movedErr is the error of the soft move message msg stopped for (nil:
// none, or it succeeded).
func (g *givens) movedErr(msg int) *pgwire.Error {
	if g.moveErr != nil && g.moveErr.msg == msg {
		return g.moveErr.err
	}
	return nil
}

// describedAt is the description given for message msg of the part
// (nil: none).
func (g *givens) describedAt(msg int) *givenDescribe {
	for i := range g.descs {
		if g.descs[i].msg == msg {
			return &g.descs[i]
		}
	}
	return nil
}

// givenIndex is the tables the default shard said the indexes names
// belong to (indexTables), or the error asking it failed with.
type givenIndex struct {
	names  []string
	tables []string
	err    *pgwire.Error
}

// givenDescribe is the description the runner got for message msg
// (a Describe, or a stale statement's Bind) planning stopped for, or the
// error it failed with.
type givenDescribe struct {
	msg  int
	desc backend.Described
	err  *pgwire.Error
	// epoch is the statement epoch before it was described.
	epoch uint64
}

// givenStep is an action's step the runner took: a session SET's probe
// (stepProbeSet) and what it read.
type givenStep struct {
	probe probeRead
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

// mayStop reports whether planning may stop where it would otherwise do
// I/O on the spot (see above). held: the planner holds a backend there
// (an acquisition's: when ensureBackend began). A soft transaction's
// move is I/O on the held backend that planning may stop for all the
// same (held false): nothing of the part runs on that backend before it.
func (p backendExec) mayStop(held bool) bool {
	pl := p.planner
	return pl.restartable && pl.restarts < maxRestarts && !held && !pl.stepped && pl.s.own == nil
}

// stopDescribe records the description of vs on shard as the plan's
// need: for its Describe answered apart (describeApart), for the check
// of its Bind when the schema changed since the client described it
// (staleResult).
func stopDescribe(pl *planner, vs *vstmt, shard int) {
	pl.need = acquireNeed{on: true, describe: true, shard: shard, msg: pl.cur, sql: vs.st.SQL,
		oids: slices.Clone(vs.oids), deferred: slices.Clone(pl.sim.deferred), deferredTx: pl.sim.tx == txDeferred, noted: pl.noted}
}

// failUnlessStopped fails pl's statement with e, unless e says planning
// stopped (the runner throws the plan away and plans the part again).
func failUnlessStopped(pl *planner, e *pgwire.Error) {
	if e != errPlanStopped {
		pl.fail(e, nil)
	}
}

// stopMoveSoft records the move of pl's soft transaction off its backend
// (of shard from) as the plan's need, the plan's side of it done
// (leaveSoft).
func stopMoveSoft(pl *planner, from int) *pgwire.Error {
	pl.leaveSoft()
	pl.need = acquireNeed{on: true, soft: true, from: from, msg: pl.cur, noted: pl.noted}
	return errPlanStopped
}

// stopSwap records the swap of pl's transaction backend for a write's
// shard as the plan's need, the plan's side of it done (leaveForReader).
func stopSwap(pl *planner) *pgwire.Error {
	leaveForReader(pl)
	pl.need = acquireNeed{on: true, swap: true, msg: pl.cur, noted: pl.noted}
	return errPlanStopped
}

// stop records the acquisition of shard as the plan's need.
func (p backendExec) stop(shard int) *pgwire.Error {
	pl := p.planner
	pl.need = acquireNeed{on: true, shard: shard, any: pl.anyShard,
		fence: pl.fence.set() && !pl.noFence && pl.s.host != nil, noted: pl.noted}
	return errPlanStopped
}

// givenStepFor is the runner's result for the action step take meets
// now (nil: none given; the step is the plan's next, in order), or
// stops planning for it where it may (stopped).
func (p backendExec) givenStepFor(st *actionStep) (g *givenStep, stopped bool) {
	pl := p.planner
	if st.kind == stepMoveSoft && p.mayStop(false) {
		stopMoveSoft(pl, st.from)
		return nil, true
	}
	if st.kind == stepTerminate && p.mayStop(pl.held || pl.onBackend) {
		pl.need = acquireNeed{on: true, term: st.term, msg: pl.cur, noted: pl.noted}
		return nil, true
	}
	if st.kind != stepProbeSet {
		return nil, false
	}
	// A probe on the pipeline's backend may stop only when that backend
	// is the connection the runner gave this part (took) and has no
	// statement cache: the part planned again is given it again
	// (takeStop), the probe taken on it by the runner first. Planning
	// writes nothing else of that connection; a statement cache it
	// writes (the statements it marks parsed there, the ones it evicts),
	// which a plan thrown away would leave wrong. Elsewhere, and on a
	// backend held before the part: on the spot.
	onTook := st.on != nil && pl.took != nil && st.on == pl.took.bc && st.on.Stmts == nil && !pl.held
	if st.on != nil && !onTook {
		return nil, false
	}
	if pl.stepAt < len(pl.given.steps) {
		pl.stepAt++
		return &pl.given.steps[pl.stepAt-1], false
	}
	if !p.mayStop(pl.held || pl.onBackend && !onTook) {
		return nil, false
	}
	pl.need = acquireNeed{on: true, step: st, noted: pl.noted}
	return nil, true
}

// useGiven takes the connection given for this acquisition, if any:
// one of shard (any shard when the plan allows it). A connection of
// another shard (not reached: planning is the same) goes back to its
// pool, and the acquisition happens on the spot.
func (p backendExec) useGiven(shard int) *givenConn {
	pl := p.planner
	g := pl.given.conn
	if g == nil {
		return nil
	}
	pl.given.conn = nil
	if g.err == nil && g.shard != shard && !pl.anyShard {
		g.pool.Release(g.bc)
		return nil
	}
	return g
}

// takeNeed does what planning stopped for (p.need) and adds its result
// to what the part planned again is given: the connection (its pool's
// fence asked where the plan asserts a key), the description, the
// step's result.
func takeNeed(ctx context.Context, s *Session, p *planner) givens {
	n, g := p.need, p.given
	g.conn = nil // (dropped by takeStop if unused)
	switch {
	case n.describe:
		epoch := s.gen.StmtEpoch.Load()
		d, e := describeOn(ctx, s, n.shard, n.sql, n.oids, n.deferred, n.deferredTx)
		g.descs = append(slices.Clip(g.descs), givenDescribe{msg: n.msg, desc: d, err: e, epoch: epoch})
	case n.step != nil:
		g.steps = append(slices.Clip(g.steps), givenStep{probe: probeStep(ctx, s, n.step)})
	case n.index != nil:
		tables, e := indexTablesOn(ctx, s, n.index)
		g.indexes = append(slices.Clip(g.indexes), givenIndex{names: n.index, tables: tables, err: e})
	case n.soft:
		if e := moveSoftOff(ctx, s, n.from); e != nil {
			g.moveErr = &givenErr{msg: n.msg, err: e}
		}
	case n.swap:
		demoteSession(s)
	case n.term != nil:
		n.term.carryOut(ctx, s)
		g.terms = append(slices.Clip(g.terms), givenTerm{msg: n.msg, call: n.term})
	default:
		pool, pre, bc, shard, e := acquireOn(ctx, s, n.shard, n.any)
		if e != nil {
			g.conn = &givenConn{pool: pool, shard: shard, err: e}
			break
		}
		g.conn = &givenConn{pool: pool, pre: pre, bc: bc, shard: shard}
		if n.fence {
			g.conn.fenced = s.host.Fences.fenced(ctx, s.gen, s.host.Log, pool, bc)
		}
	}
	return g
}

// resume is what a part planned again starts from: what the runner did
// for the plan that stopped (takeStop).
type resume struct {
	noted, restarts int
	given           givens
}

// takeStop does what the plan stopped for (p.need; a connection given
// to it and not used goes back to its pool first) and returns what the
// part planned again starts from. A plan that stopped after it took the
// connection given to it (p.took: a probe on it) leaves the session as
// the part began (no backend, its transaction shard) and gives the part
// planned again the same connection.
func takeStop(ctx context.Context, s *Session, p *planner) resume {
	r := resume{noted: p.need.noted, restarts: p.restarts}
	dropGiven(p)
	took := p.took
	if took != nil {
		s.setBackend(nil)
		s.txn.shard = p.shard0
	}
	r.given = takeNeed(ctx, s, p)
	if took != nil {
		r.given.conn = took
	}
	return r
}

// on readies planner p, new for the part being planned again: what the
// runner did is given, the decisions noted already are not noted again.
func (r resume) on(p *planner) {
	p.given, p.restartable, p.restarts, p.muted = r.given, true, r.restarts+1, r.noted
}

// dropGiven gives back a connection given that the plan did not use
// (planning stopped again elsewhere, or ended before).
func dropGiven(p *planner) {
	if g := p.given.conn; g != nil {
		p.given.conn = nil
		if g.err == nil {
			g.pool.Release(g.bc)
		}
	}
}
