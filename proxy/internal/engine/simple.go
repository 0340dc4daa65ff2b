package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// simpleQuery runs one Query message: analyzed (cached per text), answered
// locally (transaction control while nothing is bound, session settings,
// DEALLOCATE, ...), sent to one shard, or fanned out.
func (s *Session) simpleQuery(ctx context.Context, msg []byte) error {
	sql, err := pgwire.DecodeQuery(msg)
	if err != nil {
		return err
	}
	s.unnamed = nil // a simple query destroys the unnamed statement, as in Postgres
	as, err := s.gen.Config.Analyzer.SplitBytes(sql)
	if err == nil && terminateSimple(ctx, s, as) {
		return nil
	}
	if err == nil && endsTxnBeforePin(s, as) {
		return s.simpleAfterTxnEnd(ctx, string(sql), as)
	}
	if err == nil {
		pn := pinning(s)
		e := pn.pinForQuery(ctx, as)
		if e == nil {
			e = pn.realizeNamed(ctx, as)
		}
		if e != nil {
			s.cc.out = pgwire.AppendError(s.cc.out, e)
			s.cc.out = pgwire.AppendRFQ(s.cc.out, s.txn.status())
			return nil
		}
	}
	p := s.planQuery(ctx, msg, as, err, nil)
	for p.need.on { // at most maxRestarts times (backendExec.mayStop)
		// Planning stopped for a backend: taken, and the query planned
		// again with it (acquireneed.go).
		res := takeStop(ctx, s, p)
		p = s.planQuery(ctx, msg, as, err, &res)
	}
	dropGiven(p)
	takeQueryAcquire(p) // the plan's acquisition step (acquirestep.go), if any
	return s.finish(p, 'Q')
}

// planQuery plans the Query message msg, its statements as (or err, the
// analyzer's error): its plan (planner.plan, or planner.fan) is what
// finish runs. res, when set, is what the runner did for the plan that
// stopped (acquireneed.go): the query is planned again with it given.
func (s *Session) planQuery(ctx context.Context, msg []byte, as []*route.Statement, err error, res *resume) *planner {
	p := queryPlanner{s.newPlanner(ctx)}
	p.planner.simple, p.planner.restartable = true, true
	if res != nil {
		res.on(p.planner)
	}
	switch {
	case err != nil:
		p.planner.fail(pgwire.NewError(pgwire.CodeSyntaxError, err.Error()), nil)
		p.endQuery()
	case len(as) == 1:
		p.simpleOne(msg, as[0])
	default:
		p.simpleMulti(msg, as)
	}
	return p.planner
}

// queryPlanner is the planner of a simple Query message: one statement
// (simpleOne, sqlExecute) or a query string of several (simpleMulti and
// its helpers: the string's shape, its one shard, a DDL or a read of
// every shard, settings ahead of a read), answered by one exchange.
type queryPlanner struct{ planner *planner }

// endQuery adds what follows a simple query: the ReadyForQuery (local,
// or the COMMIT of a wrapped implicit transaction).
func (p queryPlanner) endQuery() {
	s := p.planner.s
	if p.planner.onBackend {
		if p.planner.wrap {
			p.planner.holdCommit()
			p.planner.plan.bw = pgwire.AppendQuery(p.planner.plan.bw, "COMMIT")
			p.planner.plan.items = append(p.planner.plan.items, item{kind: itQuery, flags: fSwallow | fRFQ})
		}
		return
	}
	lo := len(p.planner.plan.lbuf)
	p.planner.plan.lbuf = pgwire.AppendRFQ(p.planner.plan.lbuf, p.planner.sim.simStatus(s.txn.bstatus))
	p.planner.plan.addLocal(lo, nil)
}

// queryFlags are the flags of the client's query item: it carries the
// client's ReadyForQuery unless a wrapping COMMIT follows.
func (p *planner) queryFlags() itemFlags {
	if p.wrap {
		return fClientPart
	}
	return fClientPart | fRFQ
}

func (p queryPlanner) simpleOne(msg []byte, a *route.Statement) {
	s := p.planner.s
	st := a
	if a.Cursor != nil && simpleCursor(p, msg, a) {
		return // sqlcursor.go
	}
	if p.planner.isLocal(a) {
		if st.Kind == route.KindExecute && p.planner.sim.tx != txFailed {
			p.sqlExecute(a)
			p.endQuery()
			return
		}
		p.planner.answer(p.planner.exec().take(p.planner.localAction(a)))
		p.endQuery()
		return
	}
	d, stopped := indexDest(p.planner, st, s.gen.Config.Analyzer.Route(st, nil, nil, nil)) // indexddl.go
	if stopped {
		return // the runner asks the default shard (acquireneed.go)
	}
	if s.own != nil {
		var e *pgwire.Error
		if d, e = pinnedForwardDest(p.planner, st, d, nil, nil, nil); e != nil { // pinroute.go
			p.planner.fail(e, nil)
			p.endQuery()
			return
		}
	}
	rp := p.planner.target(a, d)
	if rp.err != nil {
		p.planner.fail(rp.err, nil)
		p.endQuery()
		return
	}
	if rp.fan {
		p.planner.fan = &fanPlan{simple: true, st: a, dest: d, query: string(msg), inTxn: rp.fanInTxn, only: rp.fanOnly}
		return
	}
	p.planner.inlineOK = true
	e := p.planner.exec().run(rp, a)
	p.planner.inlineOK = false
	if e != nil {
		p.planner.fail(e, nil)
		p.endQuery()
		return
	}
	p.planner.recordSoft(a)
	p.planner.noteWrite(a)
	p.planner.notePinOp(a)
	var eff *effect
	if a.Settings != nil && (p.planner.sim.tx == txBound || p.planner.explicit) {
		// The transaction's other backends repeat the settings.
		p.planner.sim.addDeferred(deferredStmt{sql: a.SQL, setLocal: true})
		eff = p.planner.sim.txEffectKeep()
	}
	p.planner.copyIn = p.planner.copyIn || a.Copy
	p.appendClientQuery(msg, eff)
	p.endQuery()
}

// sqlExecute runs EXECUTE name(args) of a statement PREPAREd through the
// proxy: as Parse/Bind/Describe/Execute/Sync of the statement's text, with
// the answers a simple query would have given.
func (p queryPlanner) sqlExecute(a *route.Statement) {
	s := p.planner.s
	st := a
	vs := p.planner.book.lookup([]byte(st.PrepareName))
	if vs == nil {
		p.planner.fail(pgwire.NewError(pgwire.CodeUndefinedPstatement, fmt.Sprintf("prepared statement %q does not exist", st.PrepareName)), nil)
		return
	}
	if st.ExecuteArgs == nil && st.Reason != "" {
		p.planner.fail(pgwire.NewError(pgwire.CodeFeatureNotSupported, st.Reason), nil)
		return
	}
	if p.planner.isLocal(vs.st) {
		p.planner.fail(pgwire.NewError(pgwire.CodeFeatureNotSupported, "EXECUTE of a prepared transaction-control or session statement is not supported by pgshard"), nil)
		return
	}
	d := s.gen.Config.Analyzer.Route(vs.st, st.ExecuteArgs, nil, vs.oids)
	rp := p.planner.target(vs.st, d)
	e := rp.err
	if e == nil && rp.fan {
		e = pgwire.NewError(pgwire.CodeFeatureNotSupported, "EXECUTE of a prepared statement that runs on every shard is not supported by pgshard; run the statement itself")
	}
	if e == nil {
		e = p.planner.exec().run(rp, vs.st)
	}
	if e != nil {
		p.planner.fail(e, nil)
		return
	}
	// (noPosition: an error's position is in the statement's text, not
	// the client's EXECUTE; Postgres reports none.)
	p.planner.plan.bw = pgwire.AppendParseMsg(p.planner.plan.bw, "", vs.st.SQL, vs.oids)
	p.planner.plan.items = append(p.planner.plan.items, item{kind: itParse, flags: fSwallow | fClientPart, posShift: noPosition})
	p.planner.plan.bw = pgwire.AppendBindText(p.planner.plan.bw, "", "", st.ExecuteArgs)
	p.planner.plan.items = append(p.planner.plan.items, item{kind: itBind, flags: fSwallow, posShift: noPosition})
	p.planner.plan.bw = pgwire.AppendDescribe(p.planner.plan.bw, 'P', "")
	p.planner.plan.items = append(p.planner.plan.items, item{kind: itDescPortal, flags: fDropNoData, posShift: noPosition})
	p.planner.plan.bw = pgwire.AppendExecute(p.planner.plan.bw, "", 0)
	p.planner.plan.items = append(p.planner.plan.items, item{kind: itExecute, posShift: noPosition})
	p.planner.plan.bw = pgwire.AppendEmpty(p.planner.plan.bw, 'S')
	if p.planner.wrap {
		p.planner.plan.items = append(p.planner.plan.items, item{kind: itSync})
	} else {
		p.planner.plan.items = append(p.planner.plan.items, item{kind: itSync, flags: fRFQ})
	}
	p.planner.backendUnnamed = nil
}

// simpleMulti runs a query string of several statements. Postgres runs
// them in one implicit transaction (unless they contain transaction
// control); pgshard sends the string as is to the one shard all of them
// route to. Statements the proxy answers itself can only be combined with
// each other.
func (p queryPlanner) simpleMulti(msg []byte, as []*route.Statement) {
	s := p.planner.s
	if p.planner.sim.tx != txFailed {
		if e := indexesAlone(p.planner, as); e == errPlanStopped {
			return // the runner asks the default shard (acquireneed.go)
		} else if e != nil {
			p.failQuery(e) // indexddl.go
			return
		}
	}
	if s.own != nil && p.planner.sim.tx != txFailed {
		p.pinnedMulti(msg, as)
		return
	}
	sh := p.multiShapeOf(as)
	if p.planner.sim.tx == txFailed {
		sh.allLocal = true
	}
	if sh.allLocal {
		p.multiLocal(as)
		return
	}
	if f := p.simpleLeads(msg, as); f != nil {
		p.planner.fan = f // settings, then a read of every shard (fanlead.go)
		return
	}
	if sh.anyLocal {
		p.failQuery(&pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: "session settings, DEALLOCATE, DISCARD, PREPARE/EXECUTE and pgshard hints cannot be combined with other statements in one query string",
			Hint:    "Send them as separate queries."})
		return
	}
	if e := p.settingsAheadOfAll(as); e != nil {
		p.failQuery(e)
		return
	}
	first, firstDest, fanAll, ok := p.multiRoute(as)
	if !ok {
		return
	}
	if fanAll || first < 0 {
		p.multiEveryShard(msg, as, sh)
		return
	}
	if others, ok := p.ddlSubsets(as); ok {
		// DDL every shard needs mixed with statements of unsharded tables:
		// the default shard runs the string, the others the former.
		d := route.Dest{Kind: route.DestAll, Reason: "DDL for every shard with statements of unsharded tables"}
		if e := p.planner.target(as[0], d).err; e != nil {
			p.failQuery(e)
			return
		}
		p.planner.fan = &fanPlan{simple: true, st: as[0], dest: d, query: string(msg), others: others}
		return
	}
	if e := p.multiMixesAll(as); e != nil {
		p.failQuery(e)
		return
	}
	rp := p.planner.target(as[first], firstDest)
	if rp.err != nil {
		p.failQuery(rp.err)
		return
	}
	if sh.blockCtl && p.planner.sim.tx == txIdle && !p.planner.held {
		if e := p.ownTxnError(rp.shard); e != nil {
			p.failQuery(e)
			return
		}
	}
	p.planner.inlineOK = true
	e := p.planner.exec().run(rp, as[first])
	p.planner.inlineOK = false
	if e != nil {
		p.failQuery(e)
		return
	}
	for _, a := range as {
		p.planner.notePinOp(a)
		p.planner.copyIn = p.planner.copyIn || a.Copy
	}
	p.appendClientQuery(msg, p.multiSettings(as, sh))
	p.endQuery()
}

// multiSettings keeps what a query string run on the transaction's
// backend set for the transaction block (SET LOCAL, set_config(...,
// true)), as simpleOne does for one statement: the block's other
// backends (readers of other shards, a read in two stages' stages)
// repeat it. The effect that records it, nil when there is none or the
// string is not inside the client's block (or opens or ends one).
func (p queryPlanner) multiSettings(as []*route.Statement, sh multiShape) *effect {
	if sh.blockCtl || !(p.planner.sim.tx == txBound || p.planner.explicit) {
		return nil
	}
	var eff *effect
	for _, a := range as {
		if a.Settings != nil || a.Kind == route.KindSetLocal && setsOnlyLocal(a) {
			p.planner.sim.addDeferred(deferredStmt{sql: a.SQL, setLocal: true, setTxn: a.Kind == route.KindSetLocal && a.SetName == "transaction", iso: a.Isolation})
			eff = p.planner.sim.txEffectKeep()
		}
	}
	return eff
}

// failQuery ends the query string with the local error e.
func (p queryPlanner) failQuery(e *pgwire.Error) {
	p.planner.fail(e, nil)
	p.endQuery()
}

// multiShape is what a query string of several statements holds.
type multiShape struct {
	// allLocal: only statements the proxy answers; anyLocal: some.
	allLocal, anyLocal bool
	// hasTxn: transaction control the backend runs.
	hasTxn bool
	// allDDL: only DDL.
	allDDL bool
	// blockCtl: the string has transaction control that the BEGIN/COMMIT
	// of the settings preamble would change (not a SET LOCAL of a
	// setting, which holds to the end of either transaction alike).
	blockCtl bool
}

// multiShapeOf classifies the statements as of a query string.
func (p queryPlanner) multiShapeOf(as []*route.Statement) multiShape {
	s := p.planner.s
	sh := multiShape{allLocal: true, allDDL: true}
	for _, a := range as {
		k := a.Kind
		local := localKind(k) && !s.own.forwards(a) || k == route.KindSetLocal && strings.HasPrefix(a.SetName, "pgshard.")
		if txnControl(k) && !local {
			sh.hasTxn = true
			sh.blockCtl = sh.blockCtl || !(k == route.KindSetLocal && leadable(a))
		} else if local {
			sh.anyLocal = true
		} else {
			sh.allLocal = false
		}
		if k != route.KindDDL {
			sh.allDDL = false
		}
	}
	return sh
}

// multiLocal answers a query string of statements the proxy answers (or
// transaction control while nothing is bound), each in turn, stopping at
// an error.
func (p queryPlanner) multiLocal(as []*route.Statement) {
	for _, a := range as {
		if !p.planner.isLocal(a) {
			p.planner.fail(pgwire.NewError(pgwire.CodeFeatureNotSupported, "this combination of statements in one query string is not supported by pgshard; send them separately"), nil)
			break
		}
		act := p.planner.exec().take(p.planner.localAction(a))
		p.planner.answer(act)
		if act.err != nil {
			break
		}
	}
	p.endQuery()
}

// multiRoute routes every statement of a query string but transaction
// control; they must agree on one shard. first is the statement whose
// destination (firstDest) picks the string's target (-1 if none);
// fanAll that every statement routed runs on every shard. ok is false
// when the string failed (refused, or statements for two shards).
func (p queryPlanner) multiRoute(as []*route.Statement) (first int, firstDest route.Dest, fanAll, ok bool) {
	s := p.planner.s
	shard := -1
	first, fanAll = -1, true
	for i, a := range as {
		if txnControl(a.Kind) {
			continue
		}
		d := s.gen.adjustDest(a, s.gen.Config.Analyzer.Route(a, nil, nil, nil))
		if s.own.forwards(a) {
			d = route.Dest{Kind: route.DestShard, Shard: s.own.shard, Bucket: -1, Reason: "the pinned session's backend"}
		} else if d.Kind == route.DestAny && d.Default {
			d = route.Dest{Kind: route.DestShard, Shard: s.gen.DefaultShard, Bucket: -1, Reason: d.Why()}
		}
		switch d.Kind {
		case route.DestRefuse:
			p.failQuery(p.planner.target(a, d).err)
			return first, firstDest, fanAll, false
		case route.DestAll:
			continue
		case route.DestShard:
			if shard >= 0 && d.Shard != shard {
				p.planner.multi = true // the conflict is within the string
				p.failQuery(p.planner.crossShard(d.Shard, shard, d.Why()))
				return first, firstDest, fanAll, false
			}
			shard = d.Shard
		}
		fanAll = false
		if first < 0 || d.Kind == route.DestShard && firstDest.Kind != route.DestShard {
			first, firstDest = i, d
		}
	}
	return first, firstDest, fanAll, true
}

// multiEveryShard runs a query string of statements of every shard:
// several DDL statements (outside transaction control) fan out; anything
// else is refused.
func (p queryPlanner) multiEveryShard(msg []byte, as []*route.Statement, sh multiShape) {
	if sh.allDDL && !sh.hasTxn {
		d := route.Dest{Kind: route.DestAll, Reason: "several DDL statements"}
		if e := p.planner.target(as[0], d).err; e != nil {
			p.failQuery(e)
			return
		}
		p.planner.fan = &fanPlan{simple: true, st: as[0], dest: d, query: string(msg)}
		return
	}
	p.failQuery(&pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: "a statement that runs on every shard must be alone in its query string (except several DDL statements)",
		Hint:    "Send it as a separate query, outside a transaction block."})
}

// multiMixesAll refuses a query string of statements for one shard with
// one that runs on every shard.
func (p queryPlanner) multiMixesAll(as []*route.Statement) *pgwire.Error {
	s := p.planner.s
	for _, a := range as {
		if s.own.forwards(a) {
			continue
		}
		if d := s.gen.adjustDest(a, s.gen.Config.Analyzer.Route(a, nil, nil, nil)); d.Kind == route.DestAll || !txnControl(a.Kind) && a.Kind == route.KindDDL && d.Kind != route.DestShard && !d.Default {
			return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
				Message: "a statement that runs on every shard cannot be combined with statements for one shard in a query string"}
		}
	}
	return nil
}

// ownTxnError: the query string manages its own transaction (block
// control), so the proxy cannot wrap it, nor the fence assert in it; it
// is refused when the settings pgshard applies per transaction on
// target's pool would need that wrap.
func (p queryPlanner) ownTxnError(target int) *pgwire.Error {
	p.planner.noFence = true
	pool := p.planner.s.gen.Pools[target]
	if _, pre := p.planner.s.cur.Split(pool.ViaPooler); len(pre.KV) > 0 {
		return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: "a query string with transaction control cannot be combined with the connection settings pgshard applies per transaction (" + settingNames(pre) + ") through a pooler",
			Hint:    "Send the statements separately."}
	}
	return nil
}

// holdCommit, before the COMMIT of a wrapped implicit transaction that ran
// a COPY, marks where the bytes that must wait for the copy begin: a
// backend in COPY FROM STDIN mode takes nothing but copy messages (a Query
// there is Postgres's "unexpected message type 0x51 during COPY from
// stdin"), and a query string may go on after its COPY, or hold several.
// The exchange writes them once the items before them are answered.
func (p *planner) holdCommit() {
	if p.copyIn && p.plan.bwHold == 0 {
		p.plan.bwHold, p.plan.bwHoldItem = len(p.plan.bw), len(p.plan.items)
	}
}

// settingsAheadOfAll refuses a query string (an implicit transaction) in
// which transaction-local settings precede a statement that runs on every
// shard and is not a read they lead (simpleLeads): they would be dropped.
func (p queryPlanner) settingsAheadOfAll(as []*route.Statement) *pgwire.Error {
	s := p.planner.s
	if p.planner.sim.tx != txIdle || p.planner.held || hasTxnBlock(as) {
		return nil
	}
	set := false
	for _, a := range as {
		if setsOnlyLocal(a) {
			set = true
			continue
		}
		if !set || txnControl(a.Kind) {
			continue
		}
		if d := s.gen.adjustDest(a, s.gen.Config.Analyzer.Route(a, nil, nil, nil)); d.Kind == route.DestAll {
			return errSettingsAhead(d.Why())
		}
	}
	return nil
}

// hasTxnBlock reports whether a query string opens or ends a transaction
// block itself (its settings then belong to that block, not the string's
// implicit transaction).
func hasTxnBlock(as []*route.Statement) bool {
	for _, a := range as {
		switch a.Kind {
		case route.KindBegin, route.KindCommit, route.KindRollback:
			return true
		}
	}
	return false
}

func settingNames(st *backend.Settings) string {
	var n []string
	for _, kv := range st.KV {
		n = append(n, kv[0])
	}
	return strings.Join(n, ", ")
}

// ddlSubsets decides whether a query string mixes DDL every shard needs
// (DestAll) with statements that live on the default shard (unsharded
// tables' DDL and rows), outside a transaction: then it returns the Query
// message of the DestAll statements alone, in order, for the other shards.
func (p queryPlanner) ddlSubsets(as []*route.Statement) ([]byte, bool) {
	s := p.planner.s
	if len(s.gen.Pools) < 2 || p.planner.sim.tx != txIdle || p.planner.held {
		return nil, false
	}
	var all []string
	dflt := false
	for _, a := range as {
		if txnControl(a.Kind) || localKind(a.Kind) {
			return nil, false
		}
		d := s.gen.adjustDest(a, s.gen.Config.Analyzer.Route(a, nil, nil, nil))
		switch {
		case d.Kind == route.DestAll && a.Kind == route.KindDDL && d.Merge == nil:
			all = append(all, a.SQL)
		case d.Kind == route.DestAny && d.Default, d.Kind == route.DestShard && d.Shard == s.gen.DefaultShard && len(a.Unsharded) > 0:
			dflt = true
		default:
			return nil, false
		}
	}
	if len(all) == 0 || !dflt {
		return nil, false
	}
	return pgwire.AppendQuery(nil, strings.Join(all, ";\n")), true
}

// endsTxnBeforePin reports whether a query string sent inside a
// transaction block first ends it (COMMIT or ROLLBACK, without AND
// CHAIN) and then has a statement that needs a server session of its own
// for the query (a session reset, as asyncpg's pool sends with the
// ROLLBACK of a connection given back inside a transaction:
// "ROLLBACK; SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *;
// RESET ALL"). Such a session cannot be the pooled connection the
// transaction runs on; once the transaction has ended it need not be.
func endsTxnBeforePin(s *Session, as []*route.Statement) bool {
	if len(as) < 2 || s.txn.tx == txIdle || s.own != nil || as[0].Chain ||
		as[0].Kind != route.KindCommit && as[0].Kind != route.KindRollback {
		return false
	}
	for _, a := range as[1:] {
		if txnControl(a.Kind) {
			return false // the rest opens or ends transactions itself: as it is
		}
		if s.gen.pinTriggerOf(a, true, false) != 0 {
			return true
		}
	}
	return false
}

// simpleAfterTxnEnd runs a query string that ends the client's
// transaction and then needs a server session (endsTxnBeforePin) as
// Postgres runs it — the COMMIT or ROLLBACK, then the rest in an implicit
// transaction of its own — in two steps: the first statement as a query
// of its own (its ReadyForQuery withheld), then, unless it failed (an
// error skips the rest of a query string), the rest as one query from an
// idle session, which may then have a server session for it. One
// difference remains: an error position in the rest counts from the
// rest's start, not from the client's string's.
func (s *Session) simpleAfterTxnEnd(ctx context.Context, sql string, as []*route.Statement) error {
	start := len(s.cc.out)
	if err := s.simpleQuery(ctx, pgwire.AppendQuery(nil, as[0].SQL)); err != nil {
		return err
	}
	out := s.cc.out
	if len(out)-start < 6 || out[len(out)-6] != 'Z' || hasError(out[start:]) {
		return nil // it failed (or its answer went out already): the string ends here, as in Postgres
	}
	s.cc.out = out[:len(out)-6]
	var rest string
	if i := strings.Index(sql, as[0].SQL); i >= 0 {
		rest = strings.TrimLeft(sql[i+len(as[0].SQL):], "; \t\r\n")
	} else {
		parts := make([]string, 0, len(as)-1)
		for _, a := range as[1:] {
			parts = append(parts, a.SQL)
		}
		rest = strings.Join(parts, ";\n") // not found as written: the rest's statements
	}
	return s.simpleQuery(ctx, pgwire.AppendQuery(nil, rest))
}

// hasError reports whether a run of backend messages holds an
// ErrorResponse.
func hasError(msgs []byte) bool {
	for msg, rest, ok := pgwire.NextMsg(msgs); ok; msg, rest, ok = pgwire.NextMsg(rest) {
		if msg[0] == 'E' {
			return true
		}
	}
	return false
}
