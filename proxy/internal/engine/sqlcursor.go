package engine

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// SQL cursors over a read of every shard: DECLARE name CURSOR FOR a
// merged read (psql's FETCH_COUNT, psycopg's named cursors, SQLAlchemy's
// stream_results) runs the read at once into a cursor the proxy keeps
// (cursor.go), as a portal fetched in parts does, and FETCH / MOVE
// FORWARD, NEXT and ALL, and CLOSE of that name are answered from it;
// the cursor ends with its transaction (Postgres declares cursors
// WITHOUT HOLD only in a transaction block). DECLARE in the simple
// protocol and in the extended one (psycopg 3 declares with Bind
// parameters), FETCH, MOVE and CLOSE in the simple protocol (how psql
// and psycopg send them), Describe and Execute of the cursor's portal
// name in the extended one. A cursor over a keyed read is not the
// proxy's: the statements go to its shard as before.
//
//	DECLARE ─▶ declaredFan: the query's route is merged across shards
//	  ─▶ the fan-out of the query (fanPlan.fetch fetchDeclare), kept
//	  by fanExec.runCursor, answered "DECLARE CURSOR"
//	FETCH / MOVE / CLOSE of a kept cursor ─▶ simpleCursor: a local
//	  answer, its effect (effCursor) moving or dropping the cursor

// fetchDeclare is fanPlan.fetch for a DECLARE: every row is kept, the
// answer is the DECLARE's.
const fetchDeclare = -2

// declaredFan returns the route of a DECLARE's query when it reads every
// shard merged (the proxy keeps the cursor), ok false otherwise (the
// DECLARE goes the way of any statement).
func declaredFan(s *Session, cur *route.Cursor, params [][]byte, formats []int16, oids []uint32) (route.Dest, bool) {
	if cur.Hold || cur.Query == nil || !cur.Query.Select || !cur.Query.ReadOnly {
		return route.Dest{}, false
	}
	d := s.gen.Config.Analyzer.Route(cur.Query, params, formats, oids)
	return d, d.Kind == route.DestAll && d.Merge != nil && !cur.Query.Copy
}

// codeDuplicateCursor is duplicate_cursor.
const codeDuplicateCursor = "42P03"

// declareError is why a DECLARE over a read of every shard is refused:
// outside a transaction block (as Postgres refuses any DECLARE without
// HOLD), a name the proxy keeps a cursor of already, or BINARY (its rows
// would be fetched in text).
func declareError(pl *planner, cur *route.Cursor) *pgwire.Error {
	if pl.sim.tx == txIdle && !pl.explicit {
		return pgwire.NewError(pgwire.CodeNoActiveTransaction, "DECLARE CURSOR can only be used in transaction blocks")
	}
	if pl.s.cursors.get(cur.Name) != nil {
		return pgwire.NewError(codeDuplicateCursor, fmt.Sprintf("cursor %q already exists", cur.Name))
	}
	if cur.Binary {
		return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: "DECLARE BINARY over a read of every shard is not supported by pgshard",
			Hint:    "Declare it without BINARY, or fetch the query's rows in binary through the extended protocol."}
	}
	return nil
}

// planDeclare plans a DECLARE whose query reads every shard (route d) as
// the fan-out of that query kept as cursor cur.Name, returned for the
// caller to complete with its protocol's fields; nil and true when the
// DECLARE is refused (planned as failed); false when the transaction's
// routing keeps the query off the fan-out (the DECLARE then goes the
// way of any statement).
func planDeclare(pl *planner, cur *route.Cursor, d route.Dest) (*fanPlan, bool) {
	if e := declareError(pl, cur); e != nil {
		pl.fail(e, nil)
		return nil, true
	}
	rp := pl.target(cur.Query, d)
	if rp.err != nil {
		pl.fail(rp.err, nil)
		return nil, true
	}
	if !rp.fan {
		return nil, false
	}
	return &fanPlan{st: cur.Query, dest: d, inTxn: rp.fanInTxn, only: rp.fanOnly, fetch: fetchDeclare, cursor: cur.Name}, true
}

// simpleCursor plans a cursor statement alone in its Query message that
// the proxy answers (true): a DECLARE of a read of every shard, a FETCH,
// MOVE or CLOSE of a cursor it keeps. False: the statement goes the way
// of any other (a failed transaction's 25P02 too).
func simpleCursor(p queryPlanner, msg []byte, a *route.Statement) bool {
	pl, cur := p.planner, a.Cursor
	if pl.sim.tx == txFailed {
		return false
	}
	switch cur.Verb {
	case route.CursorDeclare:
		d, ok := declaredFan(pl.s, cur, nil, nil, nil)
		if !ok {
			return false
		}
		f, ok := planDeclare(pl, cur, d)
		if !ok {
			return false
		}
		if f == nil {
			p.endQuery() // refused
			return true
		}
		f.simple, f.query = true, string(msg)
		pl.fan = f
		return true
	case route.CursorClose:
		if cur.Name == "" {
			// CLOSE ALL: the proxy's cursors, and the backend's (the
			// statement goes on). Planning's one write of the session, as
			// a Bind's drop of its portal's cursor.
			pl.s.cursors.clear()
			return false
		}
	}
	fc := pl.s.cursors.get(cur.Name)
	if fc == nil {
		return false
	}
	if e := forwardOnly(cur); e != nil {
		pl.fail(e, nil)
		p.endQuery()
		return true
	}
	planCursorStmt(pl, fc, cur, true)
	p.endQuery()
	return true
}

// forwardOnly refuses a FETCH or MOVE of a kept cursor in another
// direction than forward.
func forwardOnly(cur *route.Cursor) *pgwire.Error {
	if cur.Forward || cur.Verb == route.CursorClose {
		return nil
	}
	return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: "a cursor over every shard is fetched forward only: pgshard keeps its merged rows and reads them in order",
		Hint:    "Use FETCH FORWARD n, FETCH NEXT or FETCH ALL (MOVE likewise)."}
}

// planCursorStmt answers a FETCH, MOVE or CLOSE of the kept cursor fc
// from where the plan left it (cursorPos); desc: a FETCH's answer
// begins with the rows' description (the simple protocol).
func planCursorStmt(pl *planner, fc *fanCursor, cur *route.Cursor, desc bool) {
	lo := len(pl.plan.lbuf)
	if cur.Verb == route.CursorClose {
		pl.plan.lbuf = pgwire.AppendCommandComplete(pl.plan.lbuf, "CLOSE CURSOR")
		pl.plan.addLocal(lo, &effect{kind: effCursor, cur: cursorAt{name: fc.name, pos: -1}})
		return
	}
	at := cursorPos(&pl.plan, fc)
	fetch := cur.Verb == route.CursorFetch
	if fetch && desc {
		pl.plan.lbuf = appendCursorDesc(pl.plan.lbuf, fc)
	}
	n := len(fc.offs) - at.pos
	if cur.Count >= 0 && cur.Count < int64(n) {
		n = int(cur.Count)
	}
	verb := "MOVE "
	if fetch {
		pl.plan.lbuf = append(pl.plan.lbuf, fc.rowBytes(at.pos, at.pos+n)...)
		verb = "FETCH "
	}
	pl.plan.lbuf = pgwire.AppendCommandComplete(pl.plan.lbuf, verb+strconv.Itoa(n))
	at.pos += n
	at.atEnd = at.pos == len(fc.offs)
	pl.plan.cursors = append(pl.plan.cursors, at)
	pl.plan.addLocal(lo, &effect{kind: effCursor, cur: at})
}

// bindCursor plans the Bind (p.planner.bv, message idx) of portal pi's
// cursor statement when the proxy answers it (true): a DECLARE of a read
// of every shard (psycopg 3 declares with parameters) becomes the fan-out
// of its query, kept; a FETCH, MOVE or CLOSE of a cursor the proxy keeps
// a local portal (portalInfo.cursor) its Describe and Execute answer from
// the cursor. False: the Bind goes the way of any other.
func bindCursor(p pipePlanner, pi portalInfo, idx int) bool {
	cur, vs, bv := pi.vs.st.Cursor, pi.vs, &p.planner.bv
	if p.planner.sim.tx == txFailed {
		return false
	}
	if cur.Verb == route.CursorDeclare {
		d, ok := declaredFan(p.planner.s, cur, bv.Params, bv.Formats, vs.oids)
		if !ok {
			return false
		}
		f, ok := planDeclare(p.planner, cur, d)
		if ok && f != nil { // the query's fan-out, kept
			p.startFan(f.st, d, vs, idx, routePlan{fanInTxn: f.inTxn, fanOnly: f.only})
			p.planner.fan.fetch, p.planner.fan.cursor = fetchDeclare, f.cursor
		}
		return ok
	}
	if cur.Name == "" || p.planner.s.cursors.get(cur.Name) == nil {
		return false
	}
	e := forwardOnly(cur)
	if e == nil && cur.Verb == route.CursorFetch && slices.Contains(p.planner.bv.ResultFmts, 1) {
		e = &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: "a cursor over every shard is fetched in text: pgshard keeps its merged rows as text",
			Hint:    "Fetch it in text format (psycopg: a cursor without binary=True)."}
	}
	if e != nil {
		p.planner.fail(e, nil)
		return true
	}
	pi.cursor, pi.local = cur, true
	p.bindLocal(pi)
	return true
}

// appendCursorDesc appends fc's rows' description (NoData if it has
// none).
func appendCursorDesc(dst []byte, fc *fanCursor) []byte {
	if fc.desc != nil {
		return append(dst, fc.desc...)
	}
	return pgwire.AppendEmpty(dst, 'n')
}
