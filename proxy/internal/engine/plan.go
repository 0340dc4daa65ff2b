package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// abortSQL is sent as an unnamed Parse (or Query) when the proxy refuses a
// statement inside a transaction that already runs on a backend: its
// syntax error aborts the backend's transaction exactly where the client's
// is aborted, so a later COMMIT cannot commit what came before. Aborting
// releases the transaction's locks at once; the backend then waits for the
// client's ROLLBACK like any failed transaction.
const abortSQL = "/* pgshard: statement refused; this error aborts the transaction */ SELECT ("

// localKind reports whether statements of kind k are always answered by
// the proxy itself (never sent to a backend).
func localKind(k route.Kind) bool {
	switch k {
	case route.KindSetSession, route.KindDeallocate, route.KindDiscard, route.KindPrepare,
		route.KindExecute, route.KindUnsupported, route.KindEmpty:
		return true
	}
	return false
}

// txnControl reports whether k is a transaction-control kind the proxy
// emulates while no backend is bound.
func txnControl(k route.Kind) bool {
	switch k {
	case route.KindBegin, route.KindCommit, route.KindRollback, route.KindSavepoint, route.KindSetLocal:
		return true
	}
	return false
}

// planner turns one pipeline (the extended-protocol messages up to Sync or
// Flush) or one simple query into its plan value (planned, planned.go):
// the bytes to send to a backend (bw) and the items that say how to
// answer the client (items, lbuf), or a fan-out (fan). It simulates the
// transaction state as it goes; the session's real state changes only
// through item effects and the backend's final ReadyForQuery, and as the
// executor takes a backend or an action's step (below).
//
// Its parts, one concern each:
//
//	planner       (plan.go)        the state of one plan, the proxy's own
//	                               answers (localAction, answer, fail),
//	                               target: the router's plan of a statement
//	pipePlanner   (extended.go, fanout.go, fanlead.go)  pipeline messages
//	queryPlanner  (simple.go)      Query messages, query strings
//	router        (router.go)      routing decisions as routePlan values:
//	                               no I/O, no session buffers
//	txnSim        (txnsim.go)      the simulated transaction
//	stmtBook      (stmtbook.go)    prepared statements as the plan sees them
//	backendExec   (backendexec.go) the I/O: carries a routePlan out
//	                               (acquire, readers, replay, soft moves,
//	                               the fence's probe and asserts) and an
//	                               action's step (take: the ROLLBACK of a
//	                               soft move, a session SET's probe, the
//	                               call of a pg_terminate_backend)
//
// The proxy's own answers are values: localAction returns an action,
// with the I/O it needs first as its step (actionStep: stepMoveSoft,
// stepProbeSet, stepTerminate), which the caller hands to the executor
// (take) before answering. A pg_terminate_backend / pg_cancel_backend of
// the proxy's sessions is one (bindTerminate, terminate.go): whether the
// call is the proxy's is decided from the session register
// (terminateCall.resolve, a lookup in memory), and ending or cancelling
// the sessions is its step (stepTerminate, terminateCall.carryOut), which
// planning stops for: the runner carries it out, and the part planned
// again answers the call as resolved then (TestPlanStopsForTerminate).
//
// A backend acquisition is a step of the plan where nothing planned
// after it reads the connection (acquireStep, acquirestep.go): an idle
// session's Query (one statement or a string) of one shard whose pool's
// fence state is known, taken by takeQueryAcquire before the exchange
// (TestPlanQueryAcquireStep); an idle session's pipeline whose Bind is
// its first statement for a backend
// (one shard, not "any"), whose Parse and Bind the planner writes or,
// when they depend on the connection's statement cache (a named or
// cached unnamed statement through a direct connection), leaves to the
// executor (acquireStep.render: the cache's Closes, Parse and Bind
// written against the connection taken), not a pinned backend's own
// statement name, whose fence state is known without asking the
// backend (the configuration, or the pool's probe done already) or is
// the pool's first question with the assert alone ahead of the
// statement (no session settings to wrap: acquireStep.probe), with
// only Describes of portals, Executes, Syncs and Flushes after it.
// There the planner writes the fence's assert and a wrap's BEGIN as it
// would after an acquisition and records the step (the shard, the
// pool, the settings key, the asserted bucket, where the assert is in
// the plan when the pool's fence is still to be asked, the message and
// the planner's state at it); runPipeline takes it before the exchange
// (pipePlanner.takeAcquire): the connection becomes the session's
// backend, the pool's fence is asked on it if the step says so (the
// assert cut out of the plan when the shard has none), and an
// acquisition error plans the pipeline again from that message as
// failed there (its Sync and Flush answered), the plan before it kept.
// Planning such a pipeline does no I/O and writes nothing of the
// session's (TestPlanAcquireStep, TestPlanAcquireStepProbe).
//
// Every other acquisition of a backend while none is held — a deferred
// transaction's first statement for a shard, a key-less read any shard
// answers (the next shard whose pool gives a connection), a query
// string, a statement after the assert of a pool whose fence is not
// known yet, a pipeline's acquisition after other statements — stops
// planning instead (acquireneed.go): the plan records what it needs
// (planner.need), the runner (runPipeline, simpleQuery) takes the
// connection and asks its pool's fence where the plan asserts a key,
// and the part is planned again from its first message with the
// connection given, which the same acquisition uses. Planning the part
// again is exact because planning up to there changed nothing of the
// session's (the routing decisions it noted are not noted twice:
// planner.muted). Planning such a part does no I/O
// (TestPlanStopsForBackend). A Describe answered apart (describeApart),
// the Bind of a statement described before a schema change (its
// description on its shard: staledesc.go), a session SET's probe on any
// shard, the question of whose index a schema change names alone
// (indexddl.go), a soft transaction's move off the backend it holds
// (the ROLLBACK there: a keyed statement or a shard hint of another
// shard, before anything of the part ran on that backend) and the swap
// of a transaction's backend that only read for a write's shard (the
// backend becomes its shard's reader) stop it the same way: the runner
// describes, probes, asks, moves or swaps, and the part is planned again
// with the result given (TestPlanStopsForDescribe,
// TestPlanStopsForStaleCheck, TestPlanStopsForStep,
// TestPlanStopsForIndexTables, TestPlanStopsForSoftMove,
// TestPlanStopsForSwap).
//
// Still done on the spot, while planning:
//
//   - what changes the session's backends: a deferred transaction's
//     reader taken (bindReader: no I/O, the session's readers change),
//     and the statements of a pinned session;
//   - the probes, Describes, soft moves, swaps and terminate calls above
//     where the runner cannot take them (the part planned maxRestarts
//     times already, a backend held, or after one of these) — after any
//     of them, an acquisition later in the same part is made on the spot
//     too (planner.stepped: the part is not planned again, which would
//     repeat its I/O). A session SET's probe on the backend its own
//     pipeline took stops too when the runner gave that connection to
//     the part and it has no statement cache (through a pooler;
//     planner.took: the part planned again is given it again, the
//     session left as the part began: TestPlanStopsForProbeOnTaken);
//     on a direct connection with a statement cache, or after an
//     acquisition made on the spot, it runs on the spot;
//   - a read of every shard in the middle of a transaction block's
//     pipeline: runPipeline runs it, then plans the rest afresh (the
//     plan ends there, as at a stop).
//
// What planning reads of the acquired backend, so that it is planned
// only once the connection is taken: (1) outside the acquisition
// step's one Bind, sendParse's bytes depend on that connection's
// statement cache (bc.Stmts: none through a pooler; which of the
// pipeline's statements it holds already, the names it evicts, whose
// Close goes first, its epoch), on a pinned backend's own names
// (vstmt.realOn), and parse's choice of answering an unnamed Parse
// itself; (2) the shard it is on: with anyShard, the next shard whose
// pool gives a connection, against which every later statement of the
// pipeline is routed; (3) whether the fence's assert is written ahead
// (PoolFences.fenced asks the backend once per pool); (4) where the
// plan fails: an acquisition's error fails the pipeline at that
// message.
type planner struct {
	s   *Session
	ctx context.Context

	// the simulated transaction state (txnsim.go) and the prepared
	// statements as the plan sees them (stmtbook.go)
	sim  txnSim
	book stmtBook
	// planned is the plan's value: what the executor runs (planned.go).
	plan planned
	// pv and bv: the Parse and Bind being planned, decoded.
	pv pgwire.ParseView
	bv pgwire.BindView

	// held: the session held a backend when the pipeline started (bound
	// transaction or pinned pipeline).
	held bool
	// onBackend: the pipeline runs on a backend (bc, shard).
	onBackend bool
	bc        *backend.Conn
	shard     int
	// explicit: the backend part runs inside a transaction block the
	// client opened (so a lost backend fails the client's transaction).
	explicit bool
	// wrap: an implicit transaction is wrapped in BEGIN/COMMIT so the
	// preamble's transaction-local settings apply.
	wrap bool
	soft bool
	// copyIn: a COPY is sent in this pipeline or query string; the
	// wrapping COMMIT must then wait until its copy has ended (holdCommit).
	copyIn bool

	// backendUnnamed is the statement that is the backend's unnamed
	// statement in this pipeline.
	backendUnnamed *vstmt
	// pendingParse is the index of the local ParseComplete item of the
	// unnamed Parse just before (-1): the next Bind may send that Parse
	// itself instead of a re-Parse.
	pendingParse int
	pendingRaw   []byte
	pendingVs    *vstmt // the statement that Parse made

	// simple: planning a simple Query (not a pipeline); multi: two
	// statements of one query string belong to different shards.
	simple, multi bool
	// anyShard: the shard was picked because any would do; another may
	// be tried if it cannot be reached.
	anyShard bool
	// pipeline: planning an extended-protocol pipeline (s.grp), whose
	// message cur is being planned.
	pipeline bool
	cur      int

	failed   bool  // a local error ended the pipeline
	protoErr error // a malformed message: the client is disconnected
	// fan is set when the pipeline is a fan-out (DestAll) statement
	// (its shape from the router's plan: routePlan.fanInTxn, fanOnly).
	fan *fanPlan
	// swapMain: the pipeline's write goes to another shard than the
	// transaction's backend, which has only read: that backend becomes a
	// reader, the write's shard the transaction's backend.
	swapMain bool
	// pinOps are the pin changes of statements sent to a pinned backend;
	// exErrored says the exchange reported an error (pin.go).
	pinOps    []pinOp
	exErrored bool
	// leads are the statements that only set transaction-local settings
	// ahead of the pipeline's fan-out read, in its implicit transaction
	// (fanlead.go; routePlan.leadNext makes the statement being planned
	// one).
	leads []fanLead
	// setAhead: a statement that only sets transaction-local state went
	// to the backend in this pipeline's implicit transaction.
	setAhead bool
	// notRead: a statement sent to the backend in this pipeline is not a
	// plain read, so the pipeline is never cut after it; cut: planning
	// stopped before the message being planned, which runPipeline plans
	// again after running what came before (pipecut.go).
	notRead, cut bool
	// fence is the key that routed the statement being targeted (key "":
	// none); ensureBackend asserts it when it opens the transaction
	// (fence.go). noFence: the query string manages its own transaction.
	fence   fenceTarget
	noFence bool
	// inlineOK: the caller sends the client's Query right after
	// ensureBackend (simpleOne, simpleMulti), so an assert may go inside
	// it (inlineFence, fence.go) rather than in a BEGIN … COMMIT wrap.
	inlineOK    bool
	inlineFence string
	inlineFlags itemFlags
	// fresh: the pipeline started with no backend, reader or pin, or
	// with a soft transaction's (only table-less reads so far): a fence
	// refusal of its first keyed statement may be retried (fenceretry.go).
	fresh bool
	// idleStart: the pipeline started outside a transaction block (a
	// BEGIN in it is undone by a fence retry: fenceretry.go).
	idleStart bool
	// lazy: the Bind being planned (of statement lazy) may leave the
	// acquisition of its backend to the executor (acquirestep.go).
	lazy *vstmt
	// need: planning stopped for a backend's acquisition, which the
	// runner takes and then plans the part again with it given
	// (acquireneed.go); restartable: the runner does that, restarts times
	// so far for this part. stepped: I/O was done while planning this
	// part (an action's step, a Describe answered apart, a lookup of
	// indexes), so it is not planned again. noted: the routing decisions
	// noted so far; muted: how many of the first ones a part planned
	// again leaves unnoted (noted already).
	need   acquireNeed
	given  givens
	stepAt int // the next of given.steps
	// took: the connection given for this part's acquisition, taken
	// (the session's backend from then on); shard0: the session's
	// transaction shard when the part began. A stop after it gives the
	// same connection to the part planned again (takeStop).
	took        *givenConn
	shard0      int
	restartable bool
	restarts    int
	stepped     bool
	noted       int
	muted       int
}

func (s *Session) newPlanner(ctx context.Context) *planner {
	if s.plan == nil {
		s.plan = new(planner)
	}
	p := s.plan
	*p = planner{s: s, ctx: ctx, sim: txnSim{tx: s.txn.tx, deferred: s.txn.deferred, hint: s.txn.hint},
		book: stmtBook{stmts: s.stmts, unnamed: &s.unnamed}, shard: -1, pendingParse: -1,
		plan: p.plan.reset(), pv: p.pv, bv: p.bv}
	p.shard0 = s.txn.shard
	p.fresh = (s.bc == nil || s.txn.soft && s.txn.tx == txBound) && s.own == nil && !s.readers.any() && !s.txn.hintBound
	p.idleStart = p.fresh && s.txn.tx == txIdle
	if s.bc != nil {
		p.held = true
		p.bc = s.bc
		p.shard = s.txn.shard
		p.explicit = s.txn.tx == txBound
		p.soft = s.txn.soft
		p.wrap = s.txn.wrapped
	}
	return p
}

// onTxnBackend reports whether statements now go to a backend rather than
// being emulated (a backend is involved in the pipeline or the
// transaction).
func (p *planner) onTxnBackend() bool { return p.onBackend || p.held }

// isLocal reports whether a statement is answered by the proxy itself.
func (p *planner) isLocal(a *route.Statement) bool {
	k := a.Kind
	switch {
	case p.sim.tx == txFailed:
		return true
	case p.s.own.forwards(a):
		return false
	case localKind(k):
		return true
	case k == route.KindSetLocal && strings.HasPrefix(a.SetName, "pgshard."):
		return true
	case txnControl(k) && !p.onTxnBackend():
		return true
	}
	return false
}

// action is the proxy's own answer to a statement. With a step, it is
// the answer planned for the step's success: the executor
// (backendExec.take) does the step's I/O first and answers with what it
// found (planning does none).
type action struct {
	notice *pgwire.Error // a WARNING Postgres would have sent first
	tag    string        // CommandComplete tag
	empty  bool          // EmptyQueryResponse instead of a tag
	rows   []byte        // result messages before the tag (RowDescription, DataRows)
	err    *pgwire.Error
	eff    *effect
	step   *actionStep
}

// stepKind is the I/O an action needs before its answer.
type stepKind uint8

const (
	// stepMoveSoft: a pgshard hint names another shard than the soft
	// transaction's (only table-less reads ran on its backend): the
	// executor rolls that backend's transaction back and releases it;
	// the plan already goes on with the transaction deferred.
	stepMoveSoft stepKind = iota + 1
	// stepProbeSet: a session SET is validated by running it on a shard
	// in a transaction rolled back (Session.probeSet): on the
	// pipeline's backend (on), or any shard's when on is nil. Its
	// answer (the canonical value, Postgres's error) is the action's.
	stepProbeSet
	// stepTerminate: a pg_terminate_backend / pg_cancel_backend of the
	// proxy's sessions (term, resolved without I/O, terminate.go): the
	// executor ends or cancels them (terminateCall.carryOut).
	stepTerminate
)

// actionStep is the I/O step of an action (action.step).
type actionStep struct {
	kind stepKind
	// stepMoveSoft: from is the soft transaction's shard, to the hint's;
	// hint is the simulated hint before the action (the plan's state if
	// the move fails).
	from, to, hint int
	// stepProbeSet: the SET statement, its setting's name (lower case),
	// the answer's tag (SET or RESET) and the backend it runs on (nil:
	// any shard's).
	st   *route.Statement
	name string
	tag  string
	on   *backend.Conn
	// stepTerminate: the call and the sessions it names.
	term *terminateCall
	// stepProbeSet of a set_config(name, value, false): the call, which
	// is the probe, and whose row is the answer (setconfig.go).
	cfg *setConfigCall
}

// localAction answers a statement isLocal accepted, advancing the
// simulated state.
func (p *planner) localAction(a *route.Statement) action {
	k := a.Kind
	backendFailed := p.held && p.sim.tx == txBound && p.s.txn.bstatus == 'E'
	if p.sim.tx == txFailed {
		return p.sim.failedTxAction(a)
	}
	if backendFailed && k != route.KindEmpty {
		return action{err: errInFailedTx()}
	}
	switch k {
	case route.KindEmpty:
		return action{empty: true}
	case route.KindBegin:
		return p.sim.beginAction(a)
	case route.KindSetLocal:
		if strings.HasPrefix(a.SetName, "pgshard.") {
			return p.hintAction(a)
		}
		return p.sim.setLocalAction(a)
	case route.KindCommit, route.KindRollback:
		return p.sim.endTxAction(a)
	case route.KindSavepoint:
		return p.sim.savepointAction(a, p.onTxnBackend())
	case route.KindSetSession:
		return p.setSessionAction(a)
	case route.KindDeallocate:
		return p.bookAction(p.book.deallocate(a))
	case route.KindDiscard:
		return p.discardAction(a)
	case route.KindPrepare:
		return p.bookAction(p.book.prepare(a, p.s.gen.StmtEpoch.Load()))
	case route.KindExecute:
		return p.failLocal(pgwire.NewError(pgwire.CodeFeatureNotSupported, "EXECUTE of an SQL-level prepared statement is not supported inside an extended-protocol statement or a multi-statement query"))
	case route.KindUnsupported:
		if a.SetConfig != nil { // a query string's (a Bind's is the portal's: setconfig.go)
			c, e := querySetConfig(a)
			if e != nil {
				return p.failLocal(e)
			}
			return setConfigAction(p, a, c)
		}
		p.s.gen.Metrics.Refusals.WithLabelValues("unsupported").Inc()
		reason := a.Reason
		if reason == "" {
			reason = "this statement needs session state, which does not survive transaction pooling"
		}
		return p.failLocal(&pgwire.Error{Code: pgwire.CodeFeatureNotSupported, Message: reason,
			Hint: "pgshard runs each transaction on a pooled connection: use transaction-scoped features (SET LOCAL, pg_advisory_xact_lock, ...)."})
	}
	return p.failLocal(pgwire.NewError(pgwire.CodeInternalError, fmt.Sprintf("pgshard cannot answer a %s statement itself", k)))
}

// discardAction answers DISCARD: ALL returns the session to its startup
// settings and forgets its statements.
func (p *planner) discardAction(a *route.Statement) action {
	switch strings.ToLower(a.SetName) {
	case "all":
		if p.sim.tx != txIdle || p.held && p.sim.tx == txBound {
			return p.failLocal(pgwire.NewError(pgwire.CodeActiveTransaction, "DISCARD ALL cannot run inside a transaction block"))
		}
		p.book.forgetSession()
		return action{tag: "DISCARD ALL", eff: &effect{kind: effSettings, set: p.s.startup, rep: p.s.ps.startupReported, name: "discard"}}
	case "plans":
		return action{tag: "DISCARD PLANS"}
	case "sequences":
		return action{tag: "DISCARD SEQUENCES"}
	case "temp", "temporary":
		return action{tag: "DISCARD TEMP"}
	}
	return action{tag: "DISCARD"}
}

func errInFailedTx() *pgwire.Error {
	return pgwire.NewError(pgwire.CodeInFailedTransaction, "current transaction is aborted, commands ignored until end of transaction block")
}

// failLocal is an error answered locally; a deferred transaction fails.
func (p *planner) failLocal(e *pgwire.Error) action {
	return p.sim.failAt(e, p.onTxnBackend())
}

// bookAction is the answer of the statement book's PREPARE or
// DEALLOCATE (its error, failLocal).
func (p *planner) bookAction(act action, e *pgwire.Error) action {
	if e != nil {
		return p.failLocal(e)
	}
	return act
}

// hintAction handles SET LOCAL pgshard.key / pgshard.shard.
func (p *planner) hintAction(a *route.Statement) action {
	st := a
	srv := p.s.gen
	var shard int
	var reason string
	switch st.SetName {
	case "pgshard.key":
		d := srv.Config.Analyzer.RouteKey(st.SetValue, srv.Config.HintKeyType)
		if d.Kind == route.DestRefuse && d.Refusal != nil {
			return p.failLocal(refusalError(d.Refusal))
		}
		if d.Kind != route.DestShard {
			return p.failLocal(pgwire.NewError(pgwire.CodeInvalidParameterValue, fmt.Sprintf("pgshard.key %q does not name a shard", st.SetValue)))
		}
		shard, reason = d.Shard, d.Why()
	case "pgshard.shard":
		shard = -1
		for i, sh := range srv.Config.Map.Shards {
			if sh.Name == st.SetValue {
				shard = i
			}
		}
		if shard < 0 {
			return p.failLocal(pgwire.NewError(pgwire.CodeInvalidParameterValue, fmt.Sprintf("pgshard.shard: no shard named %q", st.SetValue)))
		}
		reason = "SET LOCAL pgshard.shard"
	default:
		return p.failLocal(pgwire.NewError(pgwire.CodeFeatureNotSupported, fmt.Sprintf("unknown pgshard setting %q (pgshard.key and pgshard.shard exist)", st.SetName)))
	}
	if p.sim.tx == txIdle && !p.onTxnBackend() {
		return action{notice: &pgwire.Error{Severity: "WARNING", Code: pgwire.CodeNoActiveTransaction, Message: "SET LOCAL can only be used in transaction blocks"}, tag: "SET"}
	}
	var step *actionStep
	if p.onTxnBackend() {
		if shard != p.shard {
			if !(p.soft && p.held && !p.onBackend) {
				return action{err: p.crossShard(shard, p.shard, reason)}
			}
			// Only table-less reads ran so far: move to the hint's shard
			// (the executor rolls the backend back: stepMoveSoft).
			step = &actionStep{kind: stepMoveSoft, from: p.shard, to: shard, hint: p.sim.hint}
			p.leaveSoft()
		} else {
			p.soft = false
			return action{tag: "SET"}
		}
	}
	if p.sim.hint >= 0 && p.sim.hint != shard {
		act := p.failLocal(p.crossShard(shard, p.sim.hint, reason))
		act.step = step
		return act
	}
	p.sim.hint = shard
	return action{tag: "SET", eff: p.sim.txEffect(), step: step}
}

// leaveSoft is the plan's side of moving a soft transaction off its
// backend: the transaction is deferred again, to be replayed elsewhere
// (the executor's side: backendExec.moveSoft).
func (p *planner) leaveSoft() {
	p.held, p.bc, p.soft = false, nil, false
	p.sim.tx = txDeferred
	p.explicit = false
}

// target decides the shard of a statement that runs on a backend, or a
// fan-out (DestAll), or an error: the router's plan (router.go), which
// the caller hands to the executor (backendExec.run) or shapes into a
// fan-out (fanPlan). The decision is recorded (SHOW ROUTES,
// pgshard_proxy_routes_total).
func (p *planner) target(a *route.Statement, d route.Dest) routePlan {
	srv := p.s.gen
	if a.Kind == route.KindDDL {
		srv.StmtEpoch.Add(1) // see Server.stmtEpoch
		srv.Collation.Store(collationUnknown)
	}
	ad := pinAdjust(p.s, a, d) // pinroute.go
	in := p.routeState()
	in.forward = p.s.own.forwards(a)
	if ad.Kind == route.DestShard && ad.Bucket >= 0 {
		in.leaseErr = srv.Ops.LeaseError()
	}
	r := router{gen: srv}
	rp := r.decide(a, ad, &in)
	if rp.needAhead {
		// A key-less statement of a pipeline: the shard of the
		// pipeline's next keyed statement (before its Sync), so that its
		// implicit transaction stays on one shard (e.g. set_config(...,
		// true) ahead of a keyed statement); or, for a setting ahead of a
		// read of every shard, every shard.
		r.keyless(a, &in, pipePlanner{p}.lookahead(p.cur, leadable(a) && p.s.grp[p.cur].typ == 'B'), &rp)
	}
	p.takeRoute(rp)
	p.noted++
	if p.muted > 0 {
		p.muted-- // noted when this part was planned first (acquireneed.go)
	} else {
		srv.Ops.NoteDecision(a.SQL, d, rp.shard, rp.fan, rp.err, p.sim.hint >= 0 || p.s.txn.hintBound)
	}
	return rp
}

// routeState is the routing state the router reads.
func (p *planner) routeState() routeIn {
	s := p.s
	in := routeIn{tx: p.sim.tx, hint: p.sim.hint,
		held: p.held, onBackend: p.onBackend, shard: p.shard, explicit: p.explicit, soft: p.soft,
		bstatus: s.txn.bstatus, hintBound: s.txn.hintBound, mainWrote: s.txn.mainWrote,
		setAhead: p.setAhead, multi: p.multi, pipeline: p.pipeline}
	if p.held && p.sim.tx == txBound && p.explicit {
		in.strict = strictIsolation(p.sim.deferred, s.cur.Isolation()) // read only then (router.inTxn)
	}
	if s.own != nil {
		in.pinned, in.pinShard, in.pinReasons = true, s.own.shard, s.own.reasons
	}
	return in
}

// takeRoute counts a refusal and advances the simulated soft binding
// (the router's next decision reads it); the rest of the plan is the
// executor's (backendExec.run).
func (p *planner) takeRoute(rp routePlan) {
	if rp.refusal != "" {
		p.s.gen.Metrics.Refusals.WithLabelValues(rp.refusal).Inc()
	}
	if rp.softOn {
		p.soft = true
	}
	if rp.softOff {
		p.soft = false
	}
	p.fence.clear() // a key of an earlier statement is not asserted for this one
}

// pinnedRoute is the router's decision for a statement of a pinned
// session (counted when refused); ok false: the ordinary rules apply.
func (p *planner) pinnedRoute(a *route.Statement, d route.Dest) (ok bool, e *pgwire.Error) {
	in := p.routeState()
	in.forward = p.s.own.forwards(a)
	var rp routePlan
	ok = router{gen: p.s.gen}.pinned(a, d, &in, &rp)
	if rp.refusal != "" {
		p.s.gen.Metrics.Refusals.WithLabelValues(rp.refusal).Inc()
	}
	return ok, rp.err
}

// crossShard is the error for a statement whose shard is not the
// transaction's (counted as a refusal).
func (p *planner) crossShard(want, have int, reason string) *pgwire.Error {
	p.s.gen.Metrics.Refusals.WithLabelValues("cross_shard").Inc()
	in := p.routeState()
	return router{gen: p.s.gen}.crossShard(&in, want, have, reason)
}

func refusalError(r *route.Refusal) *pgwire.Error {
	code := r.SQLState
	if code == "" {
		code = pgwire.CodeFeatureNotSupported
	}
	return &pgwire.Error{Code: code, Message: r.Message, Detail: r.Detail, Hint: r.Hint}
}

// fail ends the pipeline with a local error. When a backend takes part,
// its transaction (explicit or implicit) is aborted at the same point by a
// failing Parse, whose error is replaced by e.
func (p *planner) fail(e *pgwire.Error, eff *effect) {
	p.failed = true
	if p.onTxnBackend() {
		if !p.onBackend {
			if be := p.exec().ensureBackend(p.shard, nil); be != nil {
				lo := len(p.plan.lbuf)
				p.plan.lbuf = pgwire.AppendError(p.plan.lbuf, e)
				p.plan.addLocal(lo, eff)
				return
			}
		}
		lo := len(p.plan.lbuf)
		p.plan.lbuf = pgwire.AppendError(p.plan.lbuf, e)
		if p.simple {
			p.plan.bw = pgwire.AppendQuery(p.plan.bw, abortSQL)
			p.plan.items = append(p.plan.items, item{kind: itQuery, flags: fReplaceErr | p.queryFlags(), lo: int32(lo), hi: int32(len(p.plan.lbuf)), eff: eff})
			return
		}
		p.plan.bw = pgwire.AppendParseMsg(p.plan.bw, "", abortSQL, nil)
		p.plan.items = append(p.plan.items, item{kind: itAbort, flags: fReplaceErr, lo: int32(lo), hi: int32(len(p.plan.lbuf)), eff: eff})
		p.backendUnnamed = nil
		return
	}
	if eff == nil && p.sim.tx == txDeferred {
		p.sim.tx = txFailed
		eff = p.sim.txEffect()
	}
	lo := len(p.plan.lbuf)
	p.plan.lbuf = pgwire.AppendError(p.plan.lbuf, e)
	p.plan.addLocal(lo, eff)
}

// answer emits a local action's answer (when it succeeded).
func (p *planner) answer(act action) {
	if act.err != nil {
		p.fail(act.err, act.eff)
		return
	}
	lo := len(p.plan.lbuf)
	if act.notice != nil {
		p.plan.lbuf = pgwire.AppendNotice(p.plan.lbuf, act.notice.Severity, act.notice.Code, act.notice.Message)
	}
	p.plan.lbuf = append(p.plan.lbuf, act.rows...)
	if act.empty {
		p.plan.lbuf = pgwire.AppendEmpty(p.plan.lbuf, 'I')
	} else {
		p.plan.lbuf = pgwire.AppendCommandComplete(p.plan.lbuf, act.tag)
	}
	if act.eff != nil && act.eff.kind == effSettings {
		_, before := settingsNow(p) // this change's item is not added yet
		p.plan.lbuf = appendSettingStatus(p.plan.lbuf, act.eff, before)
	}
	p.plan.addLocal(lo, act.eff)
}

// replaySQL is the text that replays a deferred transaction: BEGIN and the
// recorded statements, with the client's transaction-local settings
// (preamble) right after BEGIN and any SET TRANSACTION (which must precede
// every query, and the preamble is a query); SET LOCALs recorded before
// that point run again after it, so the client's own SET LOCAL wins.
// The session's default isolation level and deferrable (which the
// preamble, a query, comes too late for) go right after the BEGIN as a
// SET TRANSACTION, leaving out what the BEGIN names itself, so a later
// SET TRANSACTION of the client's still wins.
func replaySQL(deferred []deferredStmt, pre *backend.Settings) string {
	var b strings.Builder
	add := func(sql string) {
		if b.Len() > 0 {
			b.WriteString(";\n")
		}
		b.WriteString(sql)
	}
	at := min(1, len(deferred))
	if len(pre.KV) > 0 {
		for i, d := range deferred {
			if d.setTxn {
				at = i + 1
			}
		}
	}
	for i, d := range deferred[:at] {
		add(d.sql)
		if i == 0 && len(pre.KV) > 0 {
			if m := pre.TxnModes(d.iso != "", strings.Contains(strings.ToLower(d.sql), "deferrable")); m != "" {
				add("SET TRANSACTION " + m)
			}
		}
	}
	if len(pre.KV) > 0 {
		add(pre.PreambleSQL())
		for _, d := range deferred[1:at] {
			if d.setLocal && !d.setTxn {
				add(d.sql)
			}
		}
	}
	for _, d := range deferred[at:] {
		add(d.sql)
	}
	return b.String()
}
