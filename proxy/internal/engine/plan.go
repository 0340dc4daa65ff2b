package engine

import (
	"context"
	"fmt"
	"slices"
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
// Flush) or one simple query into the bytes to send to a backend (s.bw) and
// the items that say how to answer the client (s.items, s.lbuf). It
// simulates the transaction state as it goes; the session's real state
// changes only through item effects and the backend's final ReadyForQuery.
type planner struct {
	s   *Session
	ctx context.Context

	// simulated transaction state
	tx       txState
	deferred []deferredStmt // shared with the session until modified
	cow      bool           // deferred is a private copy
	hint     int

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
	// overlay holds named statements created or removed earlier in the
	// pipeline (effects are applied only when answered).
	overlay map[string]*vstmt

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
	// fan is set when the pipeline is a fan-out (DestAll) statement;
	// fanInTxn says the last DestAll target joins the client's transaction.
	fan      *fanPlan
	fanInTxn bool
	// fanOnly, when set, is the one shard (+1) of a "fan-out" that reads
	// another shard than the transaction's backend's, in its reader.
	fanOnly int
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
	// (fanlead.go); leadNext says target chose to make the statement being
	// planned one.
	leads    []fanLead
	leadNext bool
	// setAhead: a statement that only sets transaction-local state went
	// to the backend in this pipeline's implicit transaction.
	setAhead bool
	// fenceKey is the key that routed the statement being targeted ("":
	// none); ensureBackend asserts it when it opens the transaction
	// (fence.go). noFence: the query string manages its own transaction.
	fenceKey    string
	fenceBucket int
	fenceShard  int
	noFence     bool
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
}

func (s *Session) newPlanner(ctx context.Context) *planner {
	if s.plan == nil {
		s.plan = new(planner)
	}
	p := s.plan
	*p = planner{s: s, ctx: ctx, tx: s.tx, deferred: s.deferred, hint: s.hint, shard: -1, pendingParse: -1}
	p.fresh = (s.bc == nil || s.soft && s.tx == txBound) && s.own == nil && !s.readers.any() && !s.hintBound
	if s.bc != nil {
		p.held = true
		p.bc = s.bc
		p.shard = s.shard
		p.explicit = s.tx == txBound
		p.soft = s.soft
		p.wrap = s.wrapped
	}
	s.items = s.items[:0]
	s.lbuf = s.lbuf[:0]
	s.bw = s.bw[:0]
	s.bwHold = 0
	s.portals = s.portals[:0]
	return p
}

// onTxnBackend reports whether statements now go to a backend rather than
// being emulated (a backend is involved in the pipeline or the
// transaction).
func (p *planner) onTxnBackend() bool { return p.onBackend || p.held }

// simStatus is the ReadyForQuery status of the simulated state.
func (p *planner) simStatus() byte {
	switch p.tx {
	case txDeferred:
		return 'T'
	case txFailed:
		return 'E'
	case txBound:
		return p.s.bstatus
	}
	return 'I'
}

// setDeferred replaces the simulated deferred list (copy on write).
func (p *planner) setDeferred(d []deferredStmt) {
	p.deferred = d
	p.cow = true
}

func (p *planner) addDeferred(d deferredStmt) {
	if !p.cow {
		p.deferred = slices.Clone(p.deferred)
		p.cow = true
	}
	p.deferred = append(p.deferred, d)
}

// txEffect is an effect switching the session to the simulated state.
func (p *planner) txEffect() *effect {
	return &effect{kind: effTx, tx: &txSnap{tx: p.tx, deferred: slices.Clone(p.deferred), hint: p.hint}}
}

// lookup finds a prepared statement as the pipeline sees it so far.
func (p *planner) lookup(name []byte) *vstmt {
	if len(name) == 0 {
		return p.s.unnamed
	}
	if p.overlay != nil {
		if v, ok := p.overlay[string(name)]; ok {
			return v
		}
	}
	return p.s.stmts[string(name)]
}

func (p *planner) overlayPut(name string, v *vstmt) {
	if p.overlay == nil {
		p.overlay = map[string]*vstmt{}
	}
	p.overlay[name] = v
}

// isLocal reports whether a statement is answered by the proxy itself.
func (p *planner) isLocal(a *route.Statement) bool {
	k := a.Kind
	switch {
	case p.tx == txFailed:
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

// action is the proxy's own answer to a statement.
type action struct {
	notice *pgwire.Error // a WARNING Postgres would have sent first
	tag    string        // CommandComplete tag
	empty  bool          // EmptyQueryResponse instead of a tag
	err    *pgwire.Error
	eff    *effect
}

// localAction answers a statement isLocal accepted, advancing the
// simulated state.
func (p *planner) localAction(a *route.Statement) action {
	k := a.Kind
	backendFailed := p.held && p.tx == txBound && p.s.bstatus == 'E'
	if p.tx == txFailed {
		return p.failedTxAction(a)
	}
	if backendFailed && k != route.KindEmpty {
		return action{err: errInFailedTx()}
	}
	switch k {
	case route.KindEmpty:
		return action{empty: true}
	case route.KindBegin:
		return p.beginAction(a)
	case route.KindCommit, route.KindRollback:
		return p.endTxAction(a)
	case route.KindSavepoint:
		return p.savepointAction(a)
	case route.KindSetLocal:
		return p.setLocalAction(a)
	case route.KindSetSession:
		return p.setSessionAction(a)
	case route.KindDeallocate:
		return p.deallocateAction(a)
	case route.KindDiscard:
		return p.discardAction(a)
	case route.KindPrepare:
		return p.prepareAction(a)
	case route.KindExecute:
		return p.failLocal(pgwire.NewError(pgwire.CodeFeatureNotSupported, "EXECUTE of an SQL-level prepared statement is not supported inside an extended-protocol statement or a multi-statement query"))
	case route.KindUnsupported:
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

// beginAction answers BEGIN: the transaction is deferred until a
// statement picks its shard.
func (p *planner) beginAction(a *route.Statement) action {
	if p.tx == txDeferred {
		return action{notice: &pgwire.Error{Severity: "WARNING", Code: pgwire.CodeActiveTransaction, Message: "there is already a transaction in progress"}, tag: "BEGIN"}
	}
	p.tx = txDeferred
	p.hint = -1
	p.setDeferred([]deferredStmt{{sql: a.SQL, strict: isStrict(a.Isolation)}})
	return action{tag: "BEGIN", eff: p.txEffect()}
}

// endTxAction answers COMMIT or ROLLBACK [AND CHAIN] of a transaction no
// backend runs.
func (p *planner) endTxAction(a *route.Statement) action {
	tag := "COMMIT"
	if a.Kind == route.KindRollback {
		tag = "ROLLBACK"
	}
	if p.tx == txIdle {
		return action{notice: &pgwire.Error{Severity: "WARNING", Code: pgwire.CodeNoActiveTransaction, Message: "there is no transaction in progress"}, tag: tag}
	}
	if a.Chain && len(p.deferred) > 0 {
		p.setDeferred([]deferredStmt{p.deferred[0]})
		p.hint = -1
		return action{tag: tag, eff: p.txEffect()}
	}
	p.tx = txIdle
	p.hint = -1
	p.setDeferred(nil)
	return action{tag: tag, eff: p.txEffect()}
}

// savepointAction answers SAVEPOINT, RELEASE and ROLLBACK TO of a
// deferred transaction: kept to be replayed.
func (p *planner) savepointAction(a *route.Statement) action {
	verb := a.SavepointVerb
	if p.tx == txIdle {
		what := map[string]string{"SAVEPOINT": "SAVEPOINT", "RELEASE": "RELEASE SAVEPOINT", "ROLLBACK": "ROLLBACK TO SAVEPOINT"}[verb]
		return action{err: pgwire.NewError(pgwire.CodeNoActiveTransaction, what+" can only be used in transaction blocks")}
	}
	name := a.SavepointName
	if verb == "SAVEPOINT" {
		p.addDeferred(deferredStmt{sql: a.SQL, savepoint: name})
		return action{tag: "SAVEPOINT", eff: p.txEffect()}
	}
	if !p.hasSavepoint(name) {
		return p.failLocal(pgwire.NewError(pgwire.CodeInvalidSavepoint, fmt.Sprintf("savepoint %q does not exist", name)))
	}
	p.addDeferred(deferredStmt{sql: a.SQL})
	return action{tag: verb, eff: p.txEffect()}
}

// setLocalAction answers SET LOCAL (a pgshard hint, or a setting of a
// deferred transaction: kept to be replayed).
func (p *planner) setLocalAction(a *route.Statement) action {
	if strings.HasPrefix(a.SetName, "pgshard.") {
		return p.hintAction(a)
	}
	if p.tx == txIdle {
		return action{notice: &pgwire.Error{Severity: "WARNING", Code: pgwire.CodeNoActiveTransaction, Message: "SET LOCAL can only be used in transaction blocks"}, tag: "SET"}
	}
	p.addDeferred(deferredStmt{sql: a.SQL, setLocal: true, setTxn: a.SetName == "transaction", strict: isStrict(a.Isolation)})
	return action{tag: "SET", eff: p.txEffect()}
}

// deallocateAction answers DEALLOCATE [ALL] of the session's virtual
// statements.
func (p *planner) deallocateAction(a *route.Statement) action {
	if a.PrepareName == "" {
		if p.overlay == nil {
			p.overlay = map[string]*vstmt{}
		}
		for n := range p.s.stmts {
			p.overlay[n] = nil
		}
		for n := range p.overlay {
			p.overlay[n] = nil
		}
		return action{tag: "DEALLOCATE ALL", eff: &effect{kind: effStmtClear}}
	}
	if p.lookup([]byte(a.PrepareName)) == nil {
		return p.failLocal(pgwire.NewError(pgwire.CodeUndefinedPstatement, fmt.Sprintf("prepared statement %q does not exist", a.PrepareName)))
	}
	p.overlayPut(a.PrepareName, nil)
	return action{tag: "DEALLOCATE", eff: &effect{kind: effStmtDel, name: a.PrepareName}}
}

// discardAction answers DISCARD: ALL returns the session to its startup
// settings and forgets its statements.
func (p *planner) discardAction(a *route.Statement) action {
	switch strings.ToLower(a.SetName) {
	case "all":
		if p.tx != txIdle || p.held && p.tx == txBound {
			return p.failLocal(pgwire.NewError(pgwire.CodeActiveTransaction, "DISCARD ALL cannot run inside a transaction block"))
		}
		if p.overlay == nil {
			p.overlay = map[string]*vstmt{}
		}
		for n := range p.s.stmts {
			p.overlay[n] = nil
		}
		return action{tag: "DISCARD ALL", eff: &effect{kind: effSettings, set: p.s.startup, rep: p.s.startupReported, name: "discard"}}
	case "plans":
		return action{tag: "DISCARD PLANS"}
	case "sequences":
		return action{tag: "DISCARD SEQUENCES"}
	case "temp", "temporary":
		return action{tag: "DISCARD TEMP"}
	}
	return action{tag: "DISCARD"}
}

// prepareAction answers PREPARE: a virtual statement of the session.
func (p *planner) prepareAction(a *route.Statement) action {
	if a.Prepared == nil {
		return p.failLocal(pgwire.NewError(pgwire.CodeFeatureNotSupported, "cannot analyze the prepared statement: "+a.Reason))
	}
	if p.lookup([]byte(a.PrepareName)) != nil {
		return p.failLocal(pgwire.NewError(pgwire.CodeDuplicatePstatement, fmt.Sprintf("prepared statement %q already exists", a.PrepareName)))
	}
	vs := newVstmt(a.PrepareName, a.Prepared, a.PrepareTypes)
	vs.epoch = p.s.gen.StmtEpoch.Load()
	p.overlayPut(a.PrepareName, vs)
	return action{tag: "PREPARE", eff: &effect{kind: effStmtPut, name: a.PrepareName, vs: vs}}
}

func errInFailedTx() *pgwire.Error {
	return pgwire.NewError(pgwire.CodeInFailedTransaction, "current transaction is aborted, commands ignored until end of transaction block")
}

// failLocal is an error answered locally; a deferred transaction fails.
func (p *planner) failLocal(e *pgwire.Error) action {
	if p.tx == txDeferred && !p.onTxnBackend() {
		p.tx = txFailed
		return action{err: e, eff: p.txEffect()}
	}
	return action{err: e}
}

// failedTxAction answers a statement in a failed deferred transaction.
func (p *planner) failedTxAction(a *route.Statement) action {
	st := a
	switch {
	case st.Kind == route.KindRollback || st.Kind == route.KindCommit:
		p.tx = txIdle
		p.hint = -1
		p.setDeferred(nil)
		return action{tag: "ROLLBACK", eff: p.txEffect()}
	case st.Kind == route.KindSavepoint && a.SavepointVerb == "ROLLBACK":
		name := a.SavepointName
		for i := len(p.deferred) - 1; i >= 0; i-- {
			if p.deferred[i].savepoint == name {
				p.setDeferred(slices.Clone(p.deferred[:i+1]))
				p.tx = txDeferred
				return action{tag: "ROLLBACK", eff: p.txEffect()}
			}
		}
		return action{err: pgwire.NewError(pgwire.CodeInvalidSavepoint, fmt.Sprintf("savepoint %q does not exist", name))}
	case st.Kind == route.KindEmpty:
		return action{empty: true}
	}
	return action{err: errInFailedTx()}
}

func (p *planner) hasSavepoint(name string) bool {
	for _, d := range p.deferred {
		if d.savepoint == name {
			return true
		}
	}
	return false
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
		shard, reason = d.Shard, d.Reason
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
	if p.tx == txIdle && !p.onTxnBackend() {
		return action{notice: &pgwire.Error{Severity: "WARNING", Code: pgwire.CodeNoActiveTransaction, Message: "SET LOCAL can only be used in transaction blocks"}, tag: "SET"}
	}
	if p.onTxnBackend() {
		if shard != p.shard {
			if !(p.soft && p.held && !p.onBackend) {
				return action{err: p.crossShard(shard, p.shard, reason)}
			}
			// Only table-less reads ran so far: move to the hint's shard.
			if e := p.moveSoft(); e != nil {
				return action{err: e}
			}
		} else {
			p.soft = false
			return action{tag: "SET"}
		}
	}
	if p.hint >= 0 && p.hint != shard {
		return p.failLocal(p.crossShard(shard, p.hint, reason))
	}
	p.hint = shard
	return action{tag: "SET", eff: p.txEffect()}
}

// crossShard is the error for a statement whose shard is not the
// transaction's.
func (p *planner) crossShard(want, have int, reason string) *pgwire.Error {
	srv := p.s.gen
	srv.Metrics.Refusals.WithLabelValues("cross_shard").Inc()
	e := &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: fmt.Sprintf("statement touches shard %q but the transaction is on shard %q", srv.shardName(want), srv.shardName(have)),
		Hint:    "A transaction runs on one shard: roll it back, then run the statement in its own transaction."}
	switch {
	case p.multi:
		e.Message = fmt.Sprintf("statement touches shard %q but other statements of the same query string run on shard %q", srv.shardName(want), srv.shardName(have))
		e.Hint = "A query string runs on one shard: send statements for different shards as separate queries (and transactions)."
	case p.tx == txIdle && !p.explicit:
		e.Message = fmt.Sprintf("statement touches shard %q but earlier statements of the same pipeline (one implicit transaction) ran on shard %q", srv.shardName(want), srv.shardName(have))
		e.Hint = "Send a Sync between statements for different shards."
	}
	if reason != "" {
		e.Detail = "Routing: " + reason
	}
	return e
}

func refusalError(r *route.Refusal) *pgwire.Error {
	code := r.SQLState
	if code == "" {
		code = pgwire.CodeFeatureNotSupported
	}
	return &pgwire.Error{Code: code, Message: r.Message, Detail: r.Detail, Hint: r.Hint}
}

// target decides the shard of a statement that runs on a backend, or
// returns a fan-out (DestAll) or an error; the decision is recorded
// (SHOW ROUTES, pgshard_proxy_routes_total).
func (p *planner) target(a *route.Statement, d route.Dest) (int, bool, *pgwire.Error) {
	shard, fan, e := p.decideTarget(a, d)
	if e != nil || fan || shard != p.fenceShard {
		p.fenceKey = "" // only a statement run on its key's shard asserts it
	}
	p.s.gen.Ops.NoteDecision(a.SQL, d, shard, fan, e, p.hint >= 0 || p.s.hintBound)
	return shard, fan, e
}

// decideTarget is target's decision.
func (p *planner) decideTarget(a *route.Statement, d route.Dest) (int, bool, *pgwire.Error) {
	srv := p.s.gen
	p.fanInTxn, p.fanOnly = false, 0
	if a.Kind == route.KindDDL {
		srv.StmtEpoch.Add(1) // see Server.stmtEpoch
		srv.Collation.Store(collationUnknown)
	}
	d = p.s.gen.adjustDest(a, d)
	p.fenceKey = ""
	if d.Kind == route.DestShard && d.Bucket >= 0 {
		if e := srv.Ops.LeaseError(); e != nil {
			return 0, false, e
		}
		p.fenceKey, p.fenceBucket, p.fenceShard = d.Key, d.Bucket, d.Shard
	}
	if p.s.own != nil {
		if sh, ok, e := p.pinnedTarget(a, d); ok {
			return sh, false, e
		}
	}
	switch d.Kind {
	case route.DestRefuse:
		srv.Metrics.Refusals.WithLabelValues("analyzer").Inc()
		if d.Refusal != nil {
			return 0, false, refusalError(d.Refusal)
		}
		return 0, false, pgwire.NewError(pgwire.CodeFeatureNotSupported, "pgshard cannot route this statement correctly: "+d.Reason)
	case route.DestAll:
		return p.targetAll(a, d)
	}
	want := -1
	if d.Kind == route.DestShard {
		want = d.Shard
	} else if d.Default {
		want = srv.DefaultShard // unsharded objects live there
	}
	if p.held && p.tx == txBound && p.s.bstatus == 'E' {
		// The transaction is aborted: the backend answers 25P02.
		return p.shard, false, nil
	}
	if p.onTxnBackend() {
		return p.targetInTxn(a, d, want)
	}
	if p.hint >= 0 {
		if want >= 0 && want != p.hint {
			return 0, false, p.crossShard(want, p.hint, d.Reason)
		}
		return p.hint, false, nil
	}
	if want >= 0 {
		return want, false, nil
	}
	return p.targetKeyless(a)
}

// targetAll is decideTarget's decision for a statement of every shard
// (DestAll): a fan-out, the one shard a hint or an aborted transaction
// gives, or a refusal.
func (p *planner) targetAll(a *route.Statement, d route.Dest) (int, bool, *pgwire.Error) {
	if !p.onTxnBackend() && p.tx == txIdle {
		return -1, true, nil
	}
	if p.s.own != nil && !p.onBackend && !p.explicit && p.tx == txIdle {
		return -1, true, nil // a pinned session's read of every shard, on pooled connections
	}
	if hinted := p.hint >= 0 || p.s.hintBound; hinted && d.Merge != nil && a.Kind != route.KindDDL && (p.tx == txDeferred || p.tx == txBound) {
		// SET LOCAL pgshard.shard/key chose the transaction's shard:
		// a key-less read reads that shard (an operator's view of it).
		if p.hint >= 0 && !p.onTxnBackend() {
			return p.hint, false, nil
		}
		return p.shard, false, nil
	}
	if d.Merge != nil && a.Select && !p.onBackend && (p.tx == txDeferred || p.tx == txBound && p.explicit) {
		// A read of every shard inside the client's transaction: each
		// shard reads in a backend transaction of its own (fanout.go).
		if p.held && p.s.bstatus == 'E' {
			return p.shard, false, nil // aborted: the backend answers 25P02
		}
		p.fanInTxn = true
		return -1, true, nil
	}
	p.s.gen.Metrics.Refusals.WithLabelValues("fanout_in_transaction").Inc()
	if p.setAhead && p.tx == txIdle && !p.held {
		return 0, false, errSettingsAhead(d.Reason)
	}
	if a.Kind == route.KindDDL || d.Merge == nil {
		return 0, false, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: "a statement that must change every shard's schema cannot run inside a transaction block",
			Detail:  d.Reason,
			Hint:    "Run it outside a transaction block (pgshard then runs it on every shard)."}
	}
	return 0, false, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: "a statement that must read every shard must be alone in its pipeline (or implicit transaction): earlier statements of it run on one shard",
		Detail:  d.Reason,
		Hint:    "Send a Sync before it (inside a transaction block the read then runs on every shard), or add a key."}
}

// targetInTxn is decideTarget's decision while the transaction runs on a
// backend (p.onTxnBackend) for a statement of shard want (-1: any): that
// backend, a read in another shard's reader, a move of a soft transaction
// or of one that has only read, or a refusal.
func (p *planner) targetInTxn(a *route.Statement, d route.Dest, want int) (int, bool, *pgwire.Error) {
	if want >= 0 && want != p.shard {
		if p.soft && !p.onBackend && p.held {
			return want, false, nil // ensureBackend moves the soft transaction
		}
		// A transaction reads any shards and writes one (unless a
		// pgshard hint put it on its shard).
		inTxn := !p.onBackend && p.held && p.tx == txBound && p.explicit && !p.s.hintBound && !strictIsolation(p.deferred)
		if inTxn && a.ReadOnly && a.Select {
			p.fanInTxn, p.fanOnly = true, want+1 // a read there, in its reader
			return -1, true, nil
		}
		if inTxn && !a.ReadOnly && !p.s.mainWrote {
			p.swapMain = true
			return want, false, nil
		}
		return 0, false, p.crossShard(want, p.shard, d.Reason)
	}
	if want >= 0 {
		p.soft = false
	}
	return p.shard, false, nil
}

// targetKeyless is decideTarget's decision for a statement of no shard
// in particular, outside a transaction's backend and hint: the shard of
// the pipeline's next keyed statement (or every shard, for a setting
// ahead of a read of every shard), any shard for a read, else the
// default shard.
func (p *planner) targetKeyless(a *route.Statement) (int, bool, *pgwire.Error) {
	if p.pipeline {
		// No key: the shard of the pipeline's next keyed statement (before
		// its Sync), so that its implicit transaction stays on one shard
		// (e.g. set_config(..., true) ahead of a keyed statement); or, for
		// a setting ahead of a read of every shard, every shard.
		sh := p.lookahead(p.cur, leadable(a) && p.s.grp[p.cur].typ == 'B')
		if sh >= 0 {
			return sh, false, nil
		}
		if sh == aheadFan && p.tx == txIdle {
			p.leadNext = true
			return -1, false, nil
		}
	}
	srv := p.s.gen
	if a.ReadOnly {
		if p.tx == txDeferred {
			p.soft = true
		}
		p.anyShard = true
		return srv.pickAny(), false, nil
	}
	return srv.DefaultShard, false, nil
}

// ensureBackend makes the pipeline run on shard: acquires a connection,
// replays a deferred transaction, or moves a soft one.
func (p *planner) ensureBackend(shard int, a *route.Statement) *pgwire.Error {
	s := p.s
	if p.onBackend {
		p.fenceHeld()
		return nil
	}
	if p.held && p.swapMain {
		p.demoteToReader()
	}
	if p.held {
		if shard == p.shard || shard < 0 || !p.soft {
			p.onBackend = true
			p.fenceHeld()
			return nil
		}
		// A soft transaction (only table-less reads so far) moves.
		if e := p.moveSoft(); e != nil {
			return e
		}
	}
	if p.tx == txDeferred && !p.held && s.readers.any() && p.bindReader(shard) {
		return nil
	}
	pool, pre, bc, shard, e := p.acquire(shard)
	if e != nil {
		return e
	}
	s.setBackend(bc)
	s.shard = shard
	p.bc, p.shard, p.onBackend = bc, shard, true
	fence := p.fenceKey != "" && !p.noFence && s.own == nil && s.fenced(p.ctx, pool, bc)
	fenceKey := ""
	if fence {
		fenceKey = s.host.StandIns.fenceKeyFor(s.gen.Config.Map, p.fenceKey, p.fenceBucket)
	}
	p.fenceKey = "" // used once
	// The assert may be retried after a refusal only when it is the
	// transaction's first step (fenceretry.go).
	fflag := p.fenceRetryFlag(fence)
	switch {
	case p.tx == txDeferred:
		p.replayDeferred(pre, fence, fenceKey, fflag)
	case fence && len(pre.KV) == 0 && p.tx == txIdle && !p.simple && (a == nil || !a.NoTxnBlock):
		// A pipeline up to Sync is one implicit transaction already: the
		// assert is its first statement (no BEGIN/COMMIT wrap).
		p.appendFenceExtended(fenceKey, fflag)
		s.fenceBuckets = append(s.fenceBuckets, p.fenceBucket)
	case fence && len(pre.KV) == 0 && p.tx == txIdle && p.inlineOK && (a == nil || !a.NoTxnBlock) && inlinable(fenceKey):
		// A simple Query's statements are one implicit transaction: the
		// assert goes first in the client's own query string
		// (appendClientQuery), no BEGIN/COMMIT wrap.
		p.inlineFence, p.inlineFlags = fenceKey, fSwallow|fReplay|fflag
		s.fenceBuckets = append(s.fenceBuckets, p.fenceBucket)
	case (len(pre.KV) > 0 || fence) && p.tx == txIdle && (a == nil || !a.NoTxnBlock):
		p.wrapBegin(pre, fence, fenceKey, fflag)
	}
	return nil
}

// demoteToReader: the held backend has only read, and the transaction
// writes another shard (planner.swapMain). The backend becomes the
// reader of its shard, and the transaction continues on the write's
// shard (its reader, or a replay of the transaction's start there).
func (p *planner) demoteToReader() {
	s := p.s
	s.readers.add(p.shard, s.bc, len(s.gen.Pools))
	s.setBackend(nil)
	p.held, p.bc, p.soft = false, nil, false
	p.tx, p.explicit = txDeferred, false
}

// bindReader makes the reader of shard (with p.anyShard, of the first
// shard from it that has one) the deferred transaction's backend: a
// read of every shard opened the transaction there already. It reports
// whether there was one.
func (p *planner) bindReader(shard int) bool {
	s := p.s
	if p.anyShard {
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
	if p.hint >= 0 {
		s.hintBound = true
	}
	s.setBackend(bc)
	s.shard = shard
	p.bc, p.shard, p.onBackend = bc, shard, true
	p.explicit = true
	p.tx = txBound
	p.fenceHeld()
	return true
}

// acquire takes a connection of shard's pool keyed by the session's
// settings (with p.anyShard, of the next shard whose pool can give one);
// pre is the settings the transaction must apply itself.
func (p *planner) acquire(shard int) (pool *backend.Pool, pre *backend.Settings, bc *backend.Conn, _ int, _ *pgwire.Error) {
	s := p.s
	pool = s.gen.Pools[shard]
	key, pre := s.cur.Split(pool.ViaPooler)
	bc, err := pool.Acquire(p.ctx, key)
	for k := 1; err != nil && p.anyShard && k < len(s.gen.Pools); k++ {
		if _, isPg := err.(*backend.PgError); isPg {
			break
		}
		shard = (shard + 1) % len(s.gen.Pools)
		pool = s.gen.Pools[shard]
		key, pre = s.cur.Split(pool.ViaPooler)
		bc, err = pool.Acquire(p.ctx, key)
	}
	if err != nil {
		if be, ok := err.(*backend.PgError); ok {
			return pool, pre, nil, shard, pgErrorToError(be.PgErr, "ERROR")
		}
		return pool, pre, nil, shard, pgwire.AsError(err, &pgwire.Error{Code: pgwire.CodeCannotConnect, Message: fmt.Sprintf("shard %q: %v", pool.Shard.Name, err)})
	}
	return pool, pre, bc, shard, nil
}

// replayDeferred writes the deferred transaction's start (with the
// settings pre and the fence's assert) ahead of the pipeline, and binds
// the transaction to the backend.
func (p *planner) replayDeferred(pre *backend.Settings, fence bool, fenceKey string, fflag itemFlags) {
	s := p.s
	if p.hint >= 0 {
		s.hintBound = true
	}
	replay := replaySQL(p.deferred, pre)
	if fence {
		replay = string(appendFenceSQL(append([]byte(replay), ";\n"...), fenceKey))
		s.fenceBuckets = append(s.fenceBuckets, p.fenceBucket)
	}
	s.bw = pgwire.AppendQuery(s.bw, replay)
	s.items = append(s.items, item{kind: itQuery, flags: fSwallow | fReplay | fflag})
	if p.swapMain {
		// Its other shard's reads and this shard's write are one
		// transaction only under READ COMMITTED.
		lo := len(s.lbuf)
		s.lbuf = pgwire.AppendError(s.lbuf, isolationRefusal("REPEATABLE READ or SERIALIZABLE", "a transaction that read one shard cannot write another"))
		s.bw = pgwire.AppendQuery(s.bw, isoCheckSQL)
		s.items = append(s.items, item{kind: itQuery, flags: fSwallow | fReplay | fReplaceErr, lo: int32(lo), hi: int32(len(s.lbuf))})
	}
	p.explicit = true
	p.tx = txBound
}

// wrapBegin opens the implicit transaction the settings pre or the
// fence's assert need: one Query, written in place: "BEGIN; [preamble;]
// [assert]" (the COMMIT follows the pipeline).
func (p *planner) wrapBegin(pre *backend.Settings, fence bool, fenceKey string, fflag itemFlags) {
	s := p.s
	bw, sp := pgwire.BeginMsg(s.bw, 'Q')
	bw = append(bw, "BEGIN;\n"...)
	if len(pre.KV) > 0 {
		bw = append(bw, pre.PreambleSQL()...)
		if fence {
			bw = append(bw, ";\n"...)
		}
	}
	if fence {
		bw = appendFenceSQL(bw, fenceKey)
		s.fenceBuckets = append(s.fenceBuckets, p.fenceBucket)
	}
	s.bw = pgwire.FinishMsg(append(bw, 0), sp)
	s.items = append(s.items, item{kind: itQuery, flags: fSwallow | fReplay | fflag})
	p.wrap = true
}

// moveSoft rolls back a soft transaction (it ran only table-less reads)
// and makes the transaction deferred again, to be replayed elsewhere.
func (p *planner) moveSoft() *pgwire.Error {
	s := p.s
	bc := s.bc
	_, err := bc.RunSimple(p.ctx, s.gen.Config.PoolTimeout, "ROLLBACK")
	s.dropBackend(err == nil)
	s.soft = false
	p.held, p.bc, p.soft = false, nil, false
	p.tx = txDeferred
	p.explicit = false
	if err != nil {
		return pgwire.NewError(pgwire.CodeConnectionFailure, fmt.Sprintf("moving the transaction off shard %q failed: %v", s.gen.shardName(p.shard), err))
	}
	return nil
}

// fail ends the pipeline with a local error. When a backend takes part,
// its transaction (explicit or implicit) is aborted at the same point by a
// failing Parse, whose error is replaced by e.
func (p *planner) fail(e *pgwire.Error, eff *effect) {
	s := p.s
	p.failed = true
	if p.onTxnBackend() {
		if !p.onBackend {
			if be := p.ensureBackend(p.shard, nil); be != nil {
				lo := len(s.lbuf)
				s.lbuf = pgwire.AppendError(s.lbuf, e)
				s.addLocal(lo, eff)
				return
			}
		}
		lo := len(s.lbuf)
		s.lbuf = pgwire.AppendError(s.lbuf, e)
		if p.simple {
			s.bw = pgwire.AppendQuery(s.bw, abortSQL)
			s.items = append(s.items, item{kind: itQuery, flags: fReplaceErr | p.queryFlags(), lo: int32(lo), hi: int32(len(s.lbuf)), eff: eff})
			return
		}
		s.bw = pgwire.AppendParseMsg(s.bw, "", abortSQL, nil)
		s.items = append(s.items, item{kind: itAbort, flags: fReplaceErr, lo: int32(lo), hi: int32(len(s.lbuf)), eff: eff})
		p.backendUnnamed = nil
		return
	}
	if eff == nil && p.tx == txDeferred {
		p.tx = txFailed
		eff = p.txEffect()
	}
	lo := len(s.lbuf)
	s.lbuf = pgwire.AppendError(s.lbuf, e)
	s.addLocal(lo, eff)
}

// answer emits a local action's answer (when it succeeded).
func (p *planner) answer(act action) {
	s := p.s
	if act.err != nil {
		p.fail(act.err, act.eff)
		return
	}
	lo := len(s.lbuf)
	if act.notice != nil {
		s.lbuf = pgwire.AppendNotice(s.lbuf, act.notice.Severity, act.notice.Code, act.notice.Message)
	}
	if act.empty {
		s.lbuf = pgwire.AppendEmpty(s.lbuf, 'I')
	} else {
		s.lbuf = pgwire.AppendCommandComplete(s.lbuf, act.tag)
	}
	if act.eff != nil && act.eff.kind == effSettings {
		s.lbuf = s.appendSettingStatus(s.lbuf, act.eff)
	}
	s.addLocal(lo, act.eff)
}

// appendSettingStatus appends the ParameterStatus messages a settings
// change implies (after its CommandComplete, as Postgres does before
// ReadyForQuery).
func (s *Session) appendSettingStatus(dst []byte, e *effect) []byte {
	names := make([]string, 0, len(e.rep))
	for n := range e.rep {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if v := e.rep[n]; s.reported[n] != v {
			dst = pgwire.AppendParameterStatus(dst, n, v)
		}
	}
	return dst
}

// replaySQL is the text that replays a deferred transaction: BEGIN and the
// recorded statements, with the client's transaction-local settings
// (preamble) right after BEGIN and any SET TRANSACTION (which must precede
// every query, and the preamble is a query); SET LOCALs recorded before
// that point run again after it, so the client's own SET LOCAL wins.
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
	for _, d := range deferred[:at] {
		add(d.sql)
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
