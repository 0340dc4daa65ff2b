package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// portalInfo is a portal bound in the current pipeline.
type portalInfo struct {
	name  string
	vs    *vstmt
	local bool
	// term, for a local portal, is a pg_terminate_backend/pg_cancel_backend
	// call of sessions' PIDs the proxy answered (terminate.go).
	term *terminateCall
	// setcfg, for a local portal, is a set_config(name, value, false)
	// the proxy keeps as a session setting (setconfig.go).
	setcfg *setConfigCall
	// lead is the fan-out lead (p.leads, +1) the portal runs, 0 if none.
	lead int
	// replay repeats the settings the portal makes inside a transaction
	// block on the transaction's other backends (settingsReplay).
	replay string
	// setting: the portal runs a setting on the backend (replay, or a
	// SET LOCAL of the pipeline's implicit transaction): execute looks
	// closer.
	setting bool
	// cursor, for a local portal, is a FETCH, MOVE or CLOSE of a cursor
	// the proxy keeps (sqlcursor.go).
	cursor *route.Cursor
}

// pipePlanner is the planner of an extended-protocol pipeline: each
// buffered message (Parse, Bind, Describe, Execute, Close, Sync, Flush)
// planned in turn, with the pipeline's portals, its backend's unnamed
// statement, the lookahead to the shard of its next keyed statement,
// and the fan-out read and its leads (fanout.go, fanlead.go).
type pipePlanner struct{ planner *planner }

func (p pipePlanner) portal(name []byte) *portalInfo {
	for i := len(p.planner.plan.portals) - 1; i >= 0; i-- {
		if p.planner.plan.portals[i].name == string(name) {
			return &p.planner.plan.portals[i]
		}
	}
	return nil
}

// runPipeline plans and runs the buffered extended-protocol messages (the
// last one is Sync or Flush).
func (s *Session) runPipeline(ctx context.Context) error {
	term := s.grp[len(s.grp)-1].typ
	if s.txn.skipUntilSync {
		// Reached only with Sync: an earlier Flush-terminated part failed.
		s.txn.skipUntilSync = false
		if s.bc != nil {
			p := s.newPlanner(ctx)
			pipePlanner{p}.sync([]byte{'S', 0, 0, 0, 4})
			return s.finish(p, 'S')
		}
		s.cc.out = pgwire.AppendRFQ(s.cc.out, s.txn.status())
		return nil
	}
	pn := pinning(s)
	e := pn.pinForPipeline(ctx)
	if e == nil && s.own != nil {
		e = pn.realizeNamed(ctx, pipelineNamed(s)) // pinstmts.go
	}
	if e != nil {
		s.cc.out = pgwire.AppendError(s.cc.out, e)
		if term == 'S' {
			s.cc.out = pgwire.AppendRFQ(s.cc.out, s.txn.status())
		} else {
			s.txn.skipUntilSync = true
		}
		return nil
	}
	parts := pipeParts{s, term}
	p := parts.next(ctx, 0)
	start := 0 // the first message of the part being planned
	for i := 0; ; i++ {
		if p.planner.need.on {
			// Planning stopped for a backend: the runner takes it and
			// plans the part again (acquireneed.go).
			p, i = parts.again(ctx, p, start), start
		}
		if i >= len(s.grp) {
			break
		}
		m := s.grp[i]
		p.planner.cur = i
		if p.planner.protoErr != nil {
			break
		}
		if p.planner.fan != nil {
			if p.fanAccepts(m) {
				continue
			}
			if e := fanStop(p.planner.fan, m); e != nil {
				// m is planned as a failed pipeline's (a Sync or Flush
				// still answered).
				p.planner.fan = nil
				p.planner.fail(e, nil)
			} else {
				// The pipeline goes on after the read (pipecut.go): the read
				// runs now, the rest is planned afresh.
				inTxn := p.planner.fan.inTxn
				if done, err := parts.runFan(p.planner); done || err != nil {
					return err
				}
				p, start = parts.next(ctx, i), i
				p.planner.fresh = p.planner.fresh && inTxn // no fence retry after a part ran
			}
		}
		if p.planner.failed && m.typ != 'S' && m.typ != 'H' {
			continue
		}
		switch m.typ {
		case 'P':
			p.parse(m.raw)
		case 'B':
			p.bind(m.raw, i)
			if p.planner.cut {
				if done, err := parts.runCut(p); done || err != nil {
					return err
				}
				p, start = parts.next(ctx, i), i
				p.planner.fresh = false // a fence refusal is not retried: the part before ran
				p.bind(m.raw, i)
			}
		case 'D':
			p.describe(m.raw, i)
		case 'E':
			p.execute(m.raw)
		case 'C':
			p.close(m.raw)
		case 'S':
			p.sync(m.raw)
		case 'H':
			p.flushMsg(m.raw)
		}
	}
	dropGiven(p.planner)
	p.takeAcquire() // the plan's acquisition step (acquirestep.go), if any
	if p.planner.protoErr != nil {
		return p.planner.protoErr
	}
	return s.finish(p.planner, term)
}

func (p pipePlanner) parse(raw []byte) {
	s := p.planner.s
	if err := p.planner.pv.Decode(raw); err != nil {
		p.planner.protoErr = err
		return
	}
	a, err := s.gen.Config.Analyzer.AnalyzeBytes(p.planner.pv.Query)
	if err != nil {
		p.planner.fail(pgwire.NewError(pgwire.CodeSyntaxError, err.Error()), nil)
		return
	}
	var vs *vstmt
	var eff *effect
	if len(p.planner.pv.Name) == 0 {
		vs = s.unnamed
		if vs == nil || vs.st != a || !equalOids(vs.oids, p.planner.pv.Oids) {
			vs = newVstmt("", a, p.planner.pv.Oids)
		}
		s.unnamed = vs // the unnamed statement changes at once (see doc.go)
		vs.epoch = s.gen.StmtEpoch.Load()
		vs.cacheUnnamed = s.gen.Config.UnnamedStatements == UnnamedCached && s.gen.Config.StatementCacheSize > 0 &&
			a.Kind == route.KindOther && a.ParseError == "" && s.own == nil && a.MarkUnnamed()
	} else {
		name := string(p.planner.pv.Name)
		if p.planner.book.lookup(p.planner.pv.Name) != nil {
			p.planner.fail(pgwire.NewError(pgwire.CodeDuplicatePstatement, fmt.Sprintf("prepared statement %q already exists", name)), nil)
			return
		}
		vs = newVstmt(name, a, p.planner.pv.Oids)
		vs.epoch = s.gen.StmtEpoch.Load()
		p.planner.book.overlayPut(name, vs)
		eff = &effect{kind: effStmtPut, name: name, vs: vs}
		if s.own != nil && p.planner.sim.tx != txFailed {
			// A pinned session's named statement is the server's own, as
			// on a direct connection (its plan cache, pg_prepared_statements,
			// "cached plan must not change result type").
			if e := p.planner.exec().ensureBackend(s.own.shard, a); e != nil {
				p.planner.fail(e, nil)
				return
			}
			eff.real, vs.realOn = p.planner.bc, p.planner.bc // later messages of the pipeline use it
			p.planner.plan.bw = append(p.planner.plan.bw, raw...)
			p.planner.plan.items = append(p.planner.plan.items, item{kind: itParse, eff: eff})
			return
		}
	}
	if a.ParseError != "" || (p.planner.onBackend && len(p.planner.pv.Name) == 0 && !(vs.cacheUnnamed && p.planner.bc.Stmts != nil)) {
		// Send it: Postgres reports a syntax error itself, exactly.
		if !p.planner.onBackend {
			rp := p.planner.target(a, route.Dest{Kind: route.DestAny})
			e := rp.err
			if e == nil {
				e = p.planner.exec().run(rp, a)
			}
			if e != nil {
				p.planner.fail(e, nil)
				return
			}
		}
		if len(p.planner.pv.Name) == 0 {
			p.planner.plan.bw = append(p.planner.plan.bw, raw...)
		} else {
			p.planner.plan.bw = pgwire.AppendParseMsg(p.planner.plan.bw, "", a.SQL, vs.oids)
		}
		p.planner.plan.items = append(p.planner.plan.items, item{kind: itParse, eff: eff})
		p.planner.backendUnnamed = vs
		return
	}
	lo := len(p.planner.plan.lbuf)
	p.planner.plan.lbuf = pgwire.AppendEmpty(p.planner.plan.lbuf, '1')
	p.planner.plan.addLocal(lo, eff)
	p.planner.pendingParse, p.planner.pendingRaw, p.planner.pendingVs = len(p.planner.plan.items)-1, raw, vs
}

// bindDest is the destination of a Bind's statement a: an SQL-level
// PREPARE or EXECUTE is refused unless the session is pinned (its
// backend runs them), and what a pinned session's backend runs as sent
// goes by what it reads and writes (pinnedForwardDest).
func bindDest(p *planner, a *route.Statement, bv *pgwire.BindView, oids []uint32) (route.Dest, *pgwire.Error) {
	s := p.s
	if (a.Kind == route.KindPrepare || a.Kind == route.KindExecute) && !s.own.forwards(a) {
		return route.Dest{}, pgwire.NewError(pgwire.CodeFeatureNotSupported, "SQL-level PREPARE/EXECUTE through the extended protocol is not supported by pgshard; use protocol-level prepared statements")
	}
	d, stopped := indexDest(p, a, s.gen.Config.Analyzer.Route(a, bv.Params, bv.Formats, oids)) // indexddl.go
	if stopped {
		return route.Dest{}, errPlanStopped // the runner asks the default shard (acquireneed.go)
	}
	if s.own != nil {
		return pinnedForwardDest(p, a, d, bv.Params, bv.Formats, oids) // pinroute.go
	}
	return d, nil
}

func equalOids(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// sendParse makes vs the backend's statement for the next Bind/Describe:
// nothing if it already is; a cached server-side statement on a direct
// connection (named statements, and unnamed ones vs.cacheUnnamed); the
// client's own Parse when it came just before; else an injected unnamed
// Parse whose ParseComplete the client does not see.
// It returns the backend statement name and the cache entry used.
func (p pipePlanner) sendParse(vs *vstmt) (string, *backend.CachedStmt) {
	s := p.planner.s
	if vs == p.planner.backendUnnamed {
		return "", nil
	}
	if vs.realOn != nil && vs.realOn == p.planner.bc {
		return vs.name, nil // the pinned backend has it under its own name
	}
	if c := p.planner.stmtCache(); c != nil && (vs.name != "" || vs.cacheUnnamed) {
		// The client's Parse was answered by the proxy; the cache's
		// statement replaces it.
		p.planner.pendingParse = -1
		if e := s.gen.StmtEpoch.Load(); c.Epoch != e {
			c.Reset(e)
		}
		cs := c.Get(vs.cacheKey)
		for _, old := range c.Evicted {
			p.planner.plan.bw = pgwire.AppendClose(p.planner.plan.bw, 'S', old)
			p.planner.plan.items = append(p.planner.plan.items, item{kind: itClose, flags: fSwallow})
		}
		c.Evicted = c.Evicted[:0]
		if cs == nil {
			cs = c.Add(vs.cacheKey)
			p.planner.plan.bw = pgwire.AppendParseMsg(p.planner.plan.bw, cs.Name, vs.st.SQL, vs.oids)
			p.planner.plan.items = append(p.planner.plan.items, item{kind: itParse, flags: fSwallow | fClientPart, cs: cs})
		}
		return cs.Name, cs
	}
	if p.planner.pendingParse >= 0 && p.planner.pendingParse == len(p.planner.plan.items)-1 && vs == s.unnamed && vs.name == "" {
		// The client's unnamed Parse was the previous message: send it as is.
		p.planner.plan.items[p.planner.pendingParse] = item{kind: itParse}
		p.planner.plan.bw = append(p.planner.plan.bw, p.planner.pendingRaw...)
	} else if p.planner.pendingParse >= 0 && p.planner.pendingParse == len(p.planner.plan.items)-1 && vs == p.planner.pendingVs && vs.name != "" {
		// The client's named Parse was the previous message: the backend
		// parses it (as the unnamed statement) and its ParseComplete — or
		// its error, without a ParseComplete — is the client's answer.
		eff := p.planner.plan.items[p.planner.pendingParse].eff
		p.planner.plan.items[p.planner.pendingParse] = item{kind: itParse, eff: eff}
		p.planner.plan.bw = pgwire.AppendParseMsg(p.planner.plan.bw, "", vs.st.SQL, vs.oids)
	} else {
		p.planner.plan.bw = pgwire.AppendParseMsg(p.planner.plan.bw, "", vs.st.SQL, vs.oids)
		p.planner.plan.items = append(p.planner.plan.items, item{kind: itParse, flags: fSwallow | fClientPart})
	}
	p.planner.pendingParse = -1
	p.planner.backendUnnamed = vs
	return "", nil
}

// bind plans a Bind raw (message idx of the pipeline): a portal the proxy
// answers itself, a lead of a read of every shard, a fan-out, or a Bind
// for the backend of the shard it routes to with its parameters.
func (p pipePlanner) bind(raw []byte, idx int) {
	s := p.planner.s
	bv := &p.planner.bv
	pi, ok := bindPortal(p, raw)
	if !ok {
		return
	}
	vs := pi.vs
	a := vs.st
	local := p.planner.isLocal(a)
	if local && a.Kind == route.KindSetLocal && p.planner.pipeline && p.planner.sim.tx == txIdle && !p.planner.onTxnBackend() && setsOnlyLocal(a) {
		// SET LOCAL in a pipeline's implicit transaction: Postgres applies
		// it (with a warning) to the statements after it, up to the Sync.
		switch sh := p.lookahead(idx, leadable(a)); {
		case sh == aheadFan:
			p.addLead(vs, raw, pi) // on every shard, ahead of the read
			return
		case sh >= 0, sh == aheadAny:
			// On the shard of the statement after it (or the one target
			// picks, which that statement then follows); dropping it
			// would run that statement without the setting.
			local = false
			pi.setting = true
		}
	}
	if local && sessionLead(a) && p.planner.sim.tx == txIdle && !p.planner.onTxnBackend() && p.lookahead(idx, true) == aheadFan {
		// A session SET (or constant set_config) ahead of a read of every
		// shard: every shard runs it transaction-locally ahead of the
		// read, and the proxy keeps it once the read succeeded (fanlead.go).
		p.addLead(vs, raw, pi)
		p.planner.leads[len(p.planner.leads)-1].session = true
		return
	}
	if a.Cursor != nil && !local && bindCursor(p, pi, idx) {
		return // sqlcursor.go
	}
	if local && a.SetConfig != nil && p.planner.sim.tx != txFailed {
		if pi.setcfg = bindSetConfig(p.planner, vs); pi.setcfg == nil {
			return // failed
		}
	}
	if local {
		pi.local = true
		p.bindLocal(pi)
		return
	}
	if a.Kind == route.KindOther && p.planner.sim.tx != txFailed && !(p.planner.held && s.txn.bstatus == 'E') && p.bindTerminate(pi) {
		return
	}
	if a.Settings != nil && (p.planner.sim.tx == txDeferred || p.planner.sim.tx == txBound) {
		// Inside a transaction block the settings hold for the rest of
		// the transaction, on every backend it uses: they are repeated on
		// the others (replaySQL), and ahead of a read of every shard in
		// this pipeline they run on every shard first (a lead).
		replay, e := settingsReplay(a, &p.planner.bv, vs.oids)
		if e != nil {
			p.planner.fail(e, nil)
			return
		}
		if in := p.planner.routeState(); in.fanReadsInTxn() && p.lookahead(idx, true) == aheadFan {
			p.addLead(vs, raw, pi)
			p.planner.leads[len(p.planner.leads)-1].replay = replay
			return
		}
		pi.replay, pi.setting = replay, replay != ""
	}
	d, e := bindDest(p.planner, a, bv, vs.oids)
	if e = p.staleResult(vs, d, e); e != nil { // staledesc.go
		failUnlessStopped(p.planner, e)
		return
	}
	if cutBefore(p.planner, a, d) {
		p.planner.cut = true // runPipeline runs what came before, then plans this Bind again
		return
	}
	rp := p.planner.target(a, d)
	if rp.err != nil {
		p.planner.fail(rp.err, nil)
		return
	}
	if rp.fan {
		p.startFan(a, d, vs, idx, rp)
		return
	}
	if rp.leadNext {
		p.addLead(vs, raw, pi)
		return
	}
	if !p.planner.onTxnBackend() && p.planner.sim.tx == txIdle {
		p.planner.lazy = p.deferrable(vs, idx)
	}
	e = p.planner.exec().run(rp, a)
	p.planner.lazy = nil
	if e != nil {
		p.planner.fail(e, nil)
		return
	}
	p.bindOnBackend(raw, pi)
}

// bindPortal decodes a Bind (into p.bv) and finds its statement: the
// portal it makes, or false when it fails (the planner holds why).
func bindPortal(p pipePlanner, raw []byte) (portalInfo, bool) {
	s := p.planner.s
	bv := &p.planner.bv
	if err := bv.Decode(raw); err != nil {
		p.planner.protoErr = err
		return portalInfo{}, false
	}
	// A Bind replaces the portal of its name: the session's cursor of
	// it is gone (cursor.go) — the one write planning makes of the
	// session, idempotent, and made whatever the Bind's fate.
	if len(s.cursors.list) > 0 {
		s.cursors.drop(string(bv.Portal))
	}
	vs := p.planner.book.lookup(bv.Stmt)
	if vs == nil {
		p.planner.fail(pgwire.NewError(pgwire.CodeUndefinedPstatement, fmt.Sprintf("prepared statement %q does not exist", bv.Stmt)), nil)
		return portalInfo{}, false
	}
	pi := portalInfo{vs: vs}
	if len(bv.Portal) > 0 {
		pi.name = string(bv.Portal)
	}
	return pi, true
}

// bindLocal answers the Bind of a portal the proxy runs itself (pi.local)
// with its BindComplete.
func (p pipePlanner) bindLocal(pi portalInfo) {
	p.planner.plan.portals = append(p.planner.plan.portals, pi)
	lo := len(p.planner.plan.lbuf)
	p.planner.plan.lbuf = pgwire.AppendEmpty(p.planner.plan.lbuf, '2')
	p.planner.plan.addLocal(lo, nil)
}

// bindTerminate answers a Bind (decoded in p.bv) of a
// pg_terminate_backend/pg_cancel_backend call of sessions' PIDs
// (terminate.go); it reports whether the statement was one. Whether it
// is, is decided without I/O (resolve); the call itself is the action's
// step (stepTerminate), which the executor takes before the answer.
func (p pipePlanner) bindTerminate(pi portalInfo) bool {
	bv := &p.planner.bv
	c := p.planner.given.terminatedAt(p.planner.cur)
	done := c != nil // carried out by the runner, planning stopped for it (acquireneed.go)
	if !done {
		if c = parseTerminate(pi.vs.st, bv.Params, bv.Formats); c == nil || !c.resolve(p.planner.s) {
			return false
		}
	}
	c.binary = len(bv.ResultFmts) == 1 && bv.ResultFmts[0] == 1
	act := terminateAction(c)
	if done {
		act.step = nil
	}
	if act = p.planner.exec().take(act); act.err != nil {
		// The self form: the statement itself is interrupted (its
		// FATAL is the answer); the session then ends.
		p.planner.fail(act.err, nil)
		return true
	}
	pi.local, pi.term = true, c
	p.bindLocal(pi)
	return true
}

// bindOnBackend writes the Bind raw (decoded in p.bv) of portal pi for
// the pipeline's backend, preceded by the Parse of its statement that
// backend needs.
func (p pipePlanner) bindOnBackend(raw []byte, pi portalInfo) {
	s := p.planner.s
	bv := &p.planner.bv
	vs := pi.vs
	a := vs.st
	p.planner.recordSoft(a)
	p.planner.noteWrite(a)
	p.planner.notePinOp(a)
	noteSetConfigValue(p.planner, a, bv.Params, vs.oids) // setconfig.go
	p.planner.copyIn = p.planner.copyIn || a.Copy
	p.planner.setAhead = p.planner.setAhead || setsOnlyLocal(a)
	p.planner.notRead = p.planner.notRead || !plainRead(a) || pi.setting || pi.replay != ""
	p.planner.plan.portals = append(p.planner.plan.portals, pi)
	if p.cachedBind(vs) {
		return // written by the executor against the connection it takes
	}
	name, cs := p.sendParse(vs)
	if len(bv.Stmt) == 0 && name == "" {
		p.planner.plan.bw = append(p.planner.plan.bw, raw...)
	} else {
		p.planner.plan.bw = pgwire.AppendBindAs(p.planner.plan.bw, raw, bv, name)
	}
	var fl itemFlags
	if vs.epoch != s.gen.StmtEpoch.Load() {
		fl = fStale
	}
	p.planner.plan.items = append(p.planner.plan.items, item{kind: itBind, cs: cs, flags: fl, rows: bindRows(vs, bv.ResultFmts)})
}

// recordSoft keeps the SET LOCAL and savepoint commands a transaction
// sends to its backend in the deferred list (the transaction's start, as
// replayed when a soft transaction moves, or when a read of every shard
// opens a reader on another shard), and ends a soft binding at the first
// statement that is not a table-less read. COMMIT / ROLLBACK sent to the
// backend end the list (AND CHAIN keeps the BEGIN).
func (p *planner) recordSoft(a *route.Statement) {
	inTxn := p.sim.tx == txBound || p.explicit
	switch a.Kind {
	case route.KindSetLocal, route.KindSavepoint:
		if !inTxn {
			return
		}
		d := deferredStmt{sql: a.SQL, setLocal: a.Kind == route.KindSetLocal, setTxn: a.SetName == "transaction", iso: a.Isolation}
		if a.Kind == route.KindSavepoint && a.SavepointVerb == "SAVEPOINT" {
			d.savepoint = a.SavepointName
		}
		p.sim.addDeferred(d)
		lo := len(p.plan.lbuf)
		p.plan.addLocal(lo, p.sim.txEffectKeep())
		return
	case route.KindCommit, route.KindRollback:
		if inTxn && len(p.sim.deferred) > 0 {
			keep := p.sim.deferred[:0:0]
			if a.Chain {
				keep = []deferredStmt{p.sim.deferred[0]}
			}
			p.sim.setDeferred(keep)
			lo := len(p.plan.lbuf)
			p.plan.addLocal(lo, p.sim.txEffectKeep())
		}
	}
	if !p.soft {
		return
	}
	switch a.Kind {
	case route.KindOther, route.KindShow:
		if !a.ReadOnly {
			p.soft = false
		}
	default:
		p.soft = false
	}
}

// noteWrite records that the transaction's backend ran a statement that
// may write: from then on the transaction writes only there.
func (p *planner) noteWrite(a *route.Statement) {
	if (p.sim.tx == txBound || p.explicit) && !a.ReadOnly && (a.Kind == route.KindOther || a.Kind == route.KindDDL) {
		p.s.txn.mainWrote = true
	}
}

func (p pipePlanner) describe(raw []byte, idx int) {
	s := p.planner.s
	kind, name, err := pgwire.DecodeTarget(raw)
	if err != nil {
		p.planner.protoErr = err
		return
	}
	if kind == 'S' {
		vs := p.planner.book.lookup(name)
		if vs == nil {
			p.planner.fail(pgwire.NewError(pgwire.CodeUndefinedPstatement, fmt.Sprintf("prepared statement %q does not exist", name)), nil)
			return
		}
		// A set_config the proxy keeps (setconfig.go) is described by a
		// shard, as a statement it runs: describing it sets nothing.
		if p.planner.isLocal(vs.st) && (vs.st.SetConfig == nil || p.planner.sim.tx == txFailed) || (vs.st.Kind == route.KindPrepare || vs.st.Kind == route.KindExecute) && !s.own.forwards(vs.st) {
			lo := len(p.planner.plan.lbuf)
			p.planner.plan.lbuf = appendParamDesc(p.planner.plan.lbuf, vs)
			p.planner.plan.lbuf = pgwire.AppendEmpty(p.planner.plan.lbuf, 'n')
			p.planner.plan.addLocal(lo, nil)
			return
		}
		if !p.planner.onBackend {
			ahead, next := -1, nextStmt{}
			if !p.planner.held {
				ahead, next = p.lookaheadStmt(idx, false)
			}
			if next.readsEveryShard() && p.planner.exec().describeApart(vs) {
				return
			}
			unsharded := func() bool {
				return len(vs.st.Unsharded) > 0 || s.gen.Config.Analyzer.Route(vs.st, nil, nil, vs.oids).Default
			}
			in := p.planner.routeState()
			rp := router{gen: s.gen}.describer(&in, ahead, unsharded)
			if rp.softOn {
				p.planner.soft = true
			}
			if rp.anyShard || rp.hinted {
				p.planner.anyShard = rp.anyShard
			}
			if e := p.planner.exec().ensureBackend(rp.shard, vs.st); e != nil {
				p.planner.fail(e, nil)
				return
			}
		}
		bname, cs := p.sendParse(vs)
		p.planner.plan.bw = pgwire.AppendDescribe(p.planner.plan.bw, 'S', bname)
		p.planner.plan.items = append(p.planner.plan.items, item{kind: itDescStmt, cs: cs, vs: vs})
		return
	}
	pi := p.portal(name)
	switch {
	case pi != nil && pi.lead > 0:
		p.planner.leads[pi.lead-1].describe = true // answered with the lead's answer
	case pi != nil && pi.cursor != nil:
		lo := len(p.planner.plan.lbuf)
		if fc := p.planner.s.cursors.get(pi.cursor.Name); fc != nil && pi.cursor.Verb == route.CursorFetch {
			p.planner.plan.lbuf = appendCursorDesc(p.planner.plan.lbuf, fc)
		} else {
			p.planner.plan.lbuf = pgwire.AppendEmpty(p.planner.plan.lbuf, 'n')
		}
		p.planner.plan.addLocal(lo, nil)
	case pi != nil && pi.local:
		lo := len(p.planner.plan.lbuf)
		switch {
		case pi.term != nil:
			p.planner.plan.lbuf = appendTerminateDesc(p.planner.plan.lbuf, pi.term)
		case pi.setcfg != nil:
			p.planner.plan.lbuf = appendSetConfigDesc(p.planner.plan.lbuf, pi.setcfg)
		default:
			p.planner.plan.lbuf = pgwire.AppendEmpty(p.planner.plan.lbuf, 'n')
		}
		p.planner.plan.addLocal(lo, nil)
	case pi == nil && cursorOf(p, name) != nil:
		planCursorDescribe(p, cursorOf(p, name)) // cursor.go
	case pi != nil || p.planner.held:
		if e := p.planner.exec().ensureBackend(p.planner.shard, nil); e != nil {
			p.planner.fail(e, nil)
			return
		}
		p.planner.plan.bw = append(p.planner.plan.bw, raw...)
		p.planner.plan.items = append(p.planner.plan.items, item{kind: itDescPortal})
	default:
		p.planner.fail(pgwire.NewError(pgwire.CodeUndefinedCursor, fmt.Sprintf("portal %q does not exist", name)), nil)
	}
}

// appendParamDesc appends a ParameterDescription for a statement the proxy
// answers itself (utility statements take no parameters).
func appendParamDesc(dst []byte, vs *vstmt) []byte {
	dst, sp := pgwire.BeginMsg(dst, 't')
	n := max(len(vs.oids), vs.st.NumParams)
	dst = pgwire.AppendU16(dst, uint16(n))
	for i := 0; i < n; i++ {
		var o uint32
		if i < len(vs.oids) {
			o = vs.oids[i]
		}
		dst = pgwire.AppendU32(dst, o)
	}
	return pgwire.FinishMsg(dst, sp)
}

// lookahead routes the next Bind of the pipeline after idx, up to its
// Sync (where its implicit transaction ends), so that a Describe or a
// key-less statement before it runs on the shard the pipeline will use
// (-1 = none decided; aheadAny = a statement follows that has no shard of
// its own: any, or every shard). Statements parsed by the pipeline itself count;
// statements that only set transaction-local state are passed over (they
// run wherever the statement after them runs).
//
// lead says that message idx is the Bind of a statement that may run
// ahead of a read of every shard (leadable): lookahead then returns
// aheadFan when the pipeline's next other statement is such a read and
// the messages in between and after it have the shape fanlead.go runs
// (leadShape): the settings run on every shard, ahead of the read.
func (p pipePlanner) lookahead(idx int, lead bool) int {
	ahead, _ := p.lookaheadStmt(idx, lead)
	return ahead
}

// lookaheadStmt is lookahead, with the statement it found when that
// statement has no shard of its own (aheadAny; else next is zero): next's
// route says whether it reads every shard. A value, not a pointer: the
// keyless routing of every pipeline statement calls lookahead.
func (p pipePlanner) lookaheadStmt(idx int, lead bool) (ahead int, next nextStmt) {
	s := p.planner.s
	var pv pgwire.ParseView
	var bv pgwire.BindView
	var parsed map[string]*vstmt // by name, "" = unnamed
	var ls leadShape
	if lead {
		lead = ls.bind(s.grp[idx])
	}
	for i, m := range s.grp[idx+1:] {
		switch m.typ {
		case 'S':
			return -1, nextStmt{}
		case 'P':
			if pv.Decode(m.raw) != nil {
				return -1, nextStmt{}
			}
			lead = lead && ls.parse(&pv)
			a, err := s.gen.Config.Analyzer.AnalyzeBytes(pv.Query)
			if err != nil {
				return -1, nextStmt{}
			}
			if parsed == nil {
				parsed = map[string]*vstmt{}
			}
			parsed[string(pv.Name)] = &vstmt{st: a, oids: slices.Clone(pv.Oids)}
			continue
		case 'B':
		default:
			lead = lead && ls.other(m)
			continue
		}
		if bv.Decode(m.raw) != nil {
			return -1, nextStmt{}
		}
		vs := parsed[string(bv.Stmt)]
		if vs == nil {
			vs = p.planner.book.lookup(bv.Stmt)
		}
		if vs == nil {
			return -1, nextStmt{}
		}
		if setsOnlyLocal(vs.st) {
			// Inside a transaction block SET LOCAL is kept by the proxy
			// (replayed on every backend), not a lead.
			lead = lead && leadable(vs.st) && (p.planner.sim.tx == txIdle || vs.st.Settings != nil) && ls.bind(m)
			continue
		}
		if lead && sessionLead(vs.st) && p.planner.sim.tx == txIdle {
			lead = ls.bind(m) // a session setting leads the read too
			continue
		}
		if p.planner.isLocal(vs.st) {
			return -1, nextStmt{}
		}
		d := s.gen.Config.Analyzer.Route(vs.st, bv.Params, bv.Formats, vs.oids)
		// (A read in two stages takes leads in an implicit transaction
		// only: its stages run them first, twostage.go; inside a block
		// they run outside it.)
		if d.Kind == route.DestAll && lead && d.Merge != nil && (d.Merge.Stages == nil || p.planner.sim.tx == txIdle) && fanRead(vs.st) && ls.fan(s.grp[idx+1+i:], p.planner.sim.tx != txIdle) {
			return aheadFan, nextStmt{}
		}
		switch {
		case d.Kind == route.DestShard:
		case d.Kind == route.DestAny && d.Default:
			// Unsharded objects, side effects the proxy cannot see: the
			// default shard runs it (as target decides).
			d.Shard = s.gen.DefaultShard
		default:
			return aheadAny, nextStmt{vs: vs, dest: d}
		}
		if p.planner.sim.hint >= 0 {
			return p.planner.sim.hint, nextStmt{}
		}
		return d.Shard, nextStmt{}
	}
	return -1, nextStmt{}
}

// nextStmt is a statement lookaheadStmt found ahead in the pipeline, and
// its route (vs nil: none).
type nextStmt struct {
	vs   *vstmt
	dest route.Dest
}

// readsEveryShard: the statement is a read the proxy merges from every
// shard.
func (n nextStmt) readsEveryShard() bool {
	return n.vs != nil && n.dest.Kind == route.DestAll && n.dest.Merge != nil && fanRead(n.vs.st)
}

func (p pipePlanner) execute(raw []byte) {
	portal, maxRows, err := pgwire.DecodeExecute(raw)
	if err != nil {
		p.planner.protoErr = err
		return
	}
	pi := p.portal(portal)
	switch {
	case pi != nil && pi.term != nil:
		lo := len(p.planner.plan.lbuf)
		p.planner.plan.lbuf = appendTerminateResult(p.planner.plan.lbuf, pi.term, false)
		p.planner.plan.addLocal(lo, nil)
	case pi != nil && pi.lead > 0:
		p.planner.leads[pi.lead-1].executed = true
	case pi != nil && pi.cursor != nil:
		if fc := p.planner.s.cursors.get(pi.cursor.Name); fc != nil {
			planCursorStmt(p.planner, fc, pi.cursor, false) // sqlcursor.go
		} else {
			p.planner.fail(pgwire.NewError(pgwire.CodeUndefinedCursor, fmt.Sprintf("cursor %q does not exist", pi.cursor.Name)), nil)
		}
	case pi != nil && pi.setcfg != nil && p.planner.sim.tx != txFailed:
		p.planner.answer(p.planner.exec().take(setConfigAction(p.planner, pi.vs.st, pi.setcfg)))
	case pi != nil && pi.local:
		p.planner.answer(p.planner.exec().take(p.planner.localAction(pi.vs.st)))
	case pi == nil && cursorOf(p, portal) != nil:
		planCursorExecute(p, cursorOf(p, portal), rowLimit(maxRows)) // cursor.go
	case pi != nil || p.planner.held:
		if e := p.planner.exec().ensureBackend(p.planner.shard, nil); e != nil {
			p.planner.fail(e, nil)
			return
		}
		var eff *effect
		if pi != nil && pi.setting {
			eff = p.executeSetting(pi)
		}
		p.planner.plan.bw = append(p.planner.plan.bw, raw...)
		p.planner.plan.items = append(p.planner.plan.items, item{kind: itExecute, flags: fClientPart, eff: eff})
	default:
		p.planner.fail(pgwire.NewError(pgwire.CodeUndefinedCursor, fmt.Sprintf("portal %q does not exist", portal)), nil)
	}
}

// executeSetting plans what goes with the Execute of a setting sent to
// the backend, and returns the effect its success has.
func (p pipePlanner) executeSetting(pi *portalInfo) *effect {
	if pi.vs.st.Kind == route.KindSetLocal && p.planner.wrap && p.planner.sim.tx == txIdle {
		// Postgres warns about SET LOCAL in a pipeline's implicit
		// transaction; the BEGIN pgshard wraps it in (for the client's
		// settings) keeps the backend from it.
		lo := len(p.planner.plan.lbuf)
		p.planner.plan.lbuf = pgwire.AppendNotice(p.planner.plan.lbuf, setLocalWarning.Severity, setLocalWarning.Code, setLocalWarning.Message)
		p.planner.plan.addLocal(lo, nil)
	}
	if pi.replay != "" && (p.planner.sim.tx == txBound || p.planner.explicit) {
		// Once they ran, the transaction's other backends repeat the
		// settings (readers that did not are ended by the effect).
		p.planner.sim.addDeferred(deferredStmt{sql: pi.replay, setLocal: true})
		return p.planner.sim.txEffectKeep()
	}
	return nil
}

func (p pipePlanner) close(raw []byte) {
	s := p.planner.s
	kind, name, err := pgwire.DecodeTarget(raw)
	if err != nil {
		p.planner.protoErr = err
		return
	}
	if kind == 'S' {
		lo := len(p.planner.plan.lbuf)
		p.planner.plan.lbuf = pgwire.AppendEmpty(p.planner.plan.lbuf, '3')
		var eff *effect
		if len(name) == 0 {
			s.unnamed = nil
		} else {
			n := string(name)
			if vs := p.planner.book.lookup(name); vs != nil && vs.realOn != nil && vs.realOn == s.bc {
				// The pinned backend has it: close it there too.
				p.planner.plan.lbuf = p.planner.plan.lbuf[:lo]
				p.planner.book.overlayPut(n, nil)
				if e := p.planner.exec().ensureBackend(p.planner.shard, nil); e != nil {
					p.planner.fail(e, nil)
					return
				}
				p.planner.plan.bw = append(p.planner.plan.bw, raw...)
				p.planner.plan.items = append(p.planner.plan.items, item{kind: itClose, eff: &effect{kind: effStmtDel, name: n}})
				return
			}
			p.planner.book.overlayPut(n, nil)
			eff = &effect{kind: effStmtDel, name: n}
		}
		p.planner.plan.addLocal(lo, eff)
		return
	}
	if fc := cursorOf(p, name); fc != nil {
		planCursorClose(p, fc) // cursor.go
		return
	}
	if p.planner.onTxnBackend() {
		if e := p.planner.exec().ensureBackend(p.planner.shard, nil); e != nil {
			p.planner.fail(e, nil)
			return
		}
		p.planner.plan.bw = append(p.planner.plan.bw, raw...)
		p.planner.plan.items = append(p.planner.plan.items, item{kind: itClose})
		return
	}
	lo := len(p.planner.plan.lbuf)
	p.planner.plan.lbuf = pgwire.AppendEmpty(p.planner.plan.lbuf, '3')
	p.planner.plan.addLocal(lo, nil)
}

func (p pipePlanner) sync(raw []byte) {
	s := p.planner.s
	if p.planner.onTxnBackend() {
		if e := p.planner.exec().ensureBackend(p.planner.shard, nil); e == nil {
			p.planner.plan.bw = append(p.planner.plan.bw, raw...)
			if p.planner.wrap {
				p.planner.plan.items = append(p.planner.plan.items, item{kind: itSync})
				p.planner.holdCommit()
				p.planner.plan.bw = pgwire.AppendQuery(p.planner.plan.bw, "COMMIT")
				p.planner.plan.items = append(p.planner.plan.items, item{kind: itQuery, flags: fSwallow | fRFQ})
			} else {
				p.planner.plan.items = append(p.planner.plan.items, item{kind: itSync, flags: fRFQ})
			}
			return
		}
	}
	lo := len(p.planner.plan.lbuf)
	p.planner.plan.lbuf = pgwire.AppendRFQ(p.planner.plan.lbuf, p.planner.sim.simStatus(s.txn.bstatus))
	p.planner.plan.addLocal(lo, nil)
}

func (p pipePlanner) flushMsg(raw []byte) {
	if !p.planner.onBackend {
		return // answered locally so far; the loop flushes the client buffer
	}
	if raw == nil {
		raw = []byte{'H', 0, 0, 0, 4}
	}
	p.planner.plan.bw = append(p.planner.plan.bw, raw...)
	p.planner.plan.items = append(p.planner.plan.items, item{kind: itFlush})
}

// finish runs a planned exchange and updates the session from its result.
func (s *Session) finish(p *planner, term byte) error {
	if p.protoErr != nil {
		return p.protoErr
	}
	if p.fan != nil {
		return newFanExec(p).run()
	}
	if !p.onBackend {
		for i := range p.plan.items {
			it := &p.plan.items[i]
			if it.kind == itLead {
				// Cannot happen: lookahead makes leads only of a pipeline
				// whose read fans out.
				s.cc.out = pgwire.AppendError(s.cc.out, pgwire.NewError(pgwire.CodeInternalError, "pgshard planned settings ahead of a read of every shard without the read"))
				continue
			}
			s.cc.out = append(s.cc.out, p.plan.lbuf[it.lo:it.hi]...)
			s.apply(it.eff)
		}
		if p.failed && term == 'H' {
			s.txn.skipUntilSync = true
		}
		return nil
	}
	release := term == 'H' && p.statementsOnly()
	if release {
		// Close the backend's implicit transaction, so that the backend
		// can go back to its pool.
		appendUnseenSync(p)
	}
	s.fretry.armed, s.fretry.outStart, s.fretry.idleStart = term != 'H', len(s.cc.out), p.idleStart
	res, err := runExchange(p.ctx, s, &p.plan, p.bc, p.explicit)
	s.fretry.armed = false
	if err != nil {
		return err
	}
	if res.fence {
		return s.fretry.retry(p.ctx, s, res)
	}
	if res.lost {
		if term == 'H' {
			s.txn.skipUntilSync = true
		} else if !s.pinFatal {
			s.cc.out = pgwire.AppendRFQ(s.cc.out, s.txn.status())
		}
		return nil
	}
	if term == 'H' {
		if res.errored || p.failed {
			s.txn.skipUntilSync = true
		}
		if release {
			s.dropBackend(res.status == 'I')
			return nil
		}
		if p.explicit || s.txn.tx == txBound {
			s.txn.tx = txBound
			if res.status != 0 {
				s.txn.bstatus = res.status
			} else if s.txn.bstatus == 0 {
				s.txn.bstatus = 'T'
			}
			if res.errored {
				s.txn.bstatus = 'E'
			}
		} else {
			s.txn.pipelineHeld = true
			s.txn.wrapped = p.wrap
		}
		s.txn.soft = p.soft
		return nil
	}
	p.exErrored = res.errored
	s.afterReady(p, res.status)
	return nil
}

// appendUnseenSync ends the plan's implicit transaction with a Sync the
// client does not see (and the COMMIT of a settings wrap after it).
func appendUnseenSync(p *planner) {
	p.plan.bw = pgwire.AppendEmpty(p.plan.bw, 'S')
	p.plan.items = append(p.plan.items, item{kind: itSync})
	if p.wrap {
		p.holdCommit()
		p.plan.bw = pgwire.AppendQuery(p.plan.bw, "COMMIT")
		p.plan.items = append(p.plan.items, item{kind: itQuery, flags: fSwallow})
	}
}

// statementsOnly reports whether a Flush-terminated pipeline that took a
// backend outside any transaction only parsed, described or closed
// statements there (on whichever shard the planner picked, as no key was
// known yet). Nothing of it needs that backend afterwards (the proxy
// re-parses a statement on the backend where it is bound), so the
// backend is released rather than pinned: a pinned one would refuse the
// next Bind for a key of another shard as cross-shard.
func (p *planner) statementsOnly() bool {
	if p.held || p.explicit || p.sim.tx != txIdle || !p.onBackend {
		return false
	}
	for _, it := range p.plan.items {
		switch it.kind {
		case itLocal, itParse, itDescStmt, itClose, itFlush, itAbort:
		case itQuery:
			if it.flags&fReplay == 0 { // not the settings preamble of a wrap
				return false
			}
		default:
			return false
		}
	}
	return true
}

// afterReady updates the session after the client's ReadyForQuery: the
// backend's status says whether a transaction is still open.
func (s *Session) afterReady(p *planner, st byte) {
	s.txn.pipelineHeld = false
	s.txn.wrapped = false
	switch st {
	case 'T', 'E':
		s.txn.tx = txBound
		s.txn.bstatus = st
		s.txn.soft = p.soft
		s.txn.hint = -1
		if st == 'E' {
			s.readers.end() // the transaction failed: nothing more to read
		}
	default:
		s.txn.reset()
		if s.own != nil {
			if !p.exErrored {
				pinning(s).applyPinOps(p.pinOps, true)
			} else if s.own.reasons &^= pinSetsOnce; s.own.reasons == 0 {
				pinning(s).unpin() // it failed: its settings were rolled back with it
			}
		} else {
			s.dropBackend(true)
		}
		s.readers.end()
		return
	}
	if s.own != nil && !p.exErrored {
		pinning(s).applyPinOps(p.pinOps, false)
	}
}
