package route

import (
	"github.com/jackc/pgx/v5/pgtype"
	pg "github.com/pganalyze/pg_query_go/v6"
)

// Calls of pg_terminate_backend / pg_cancel_backend (Statement.Terminate).
//
// A client's BackendKeyData PID names a proxy session, not a backend, so
// the engine answers these calls itself when every PID is one of its
// sessions. What is recognized, from the parse tree (never from the
// text), is what tools and drivers send:
//
//   - SELECT pg_terminate_backend(x), x a PID constant, a parameter, or
//     pg_backend_pid() (the caller's own session), cast at most to an
//     integer type;
//   - SELECT pg_terminate_backend(n) FROM unnest($1) n, the parameter cast
//     at most to an integer array, the call's argument the alias;
//
// either function, schema-qualified with pg_catalog or not, the call the
// only entry of a select list with nothing else (no WHERE, ORDER BY,
// LIMIT, WITH, set operation …) and the function's one-argument form.
//
// So is SELECT pg_backend_pid() alone (Own): for a session without a
// backend of its own the engine answers the session's PID — the one its
// BackendKeyData gave the client and these calls take — not that of
// whichever pooled backend would run it, which the session's next
// transaction would not run on and which a pg_terminate_backend would
// take for another client's. A pinned session's own backend answers it,
// as does the backend of a shard a hint routes it to.
// Inside a larger statement (WHERE pid = pg_backend_pid()) it is the
// backend's, as that statement compares it with the backend's own views.

// Terminate is a recognized call.
type Terminate struct {
	// Cancel: pg_cancel_backend; else pg_terminate_backend.
	Cancel bool
	// Self: the PID is pg_backend_pid(), the calling session's.
	Self bool
	// Param, when > 0, is the $n holding the PID — or, with Array, the
	// array of PIDs; else PID is the constant.
	Param int
	PID   int64
	// Array: the unnest form, one call per element of $Param.
	Array bool
	// Own: SELECT pg_backend_pid(), the calling session's PID.
	Own bool
	// Column is the result column's name: the select list entry's
	// alias, else the function's name (as Postgres names it).
	Column string
}

// Fn is the function's short name: "terminate", "cancel" or "pid".
func (t *Terminate) Fn() string {
	switch {
	case t.Own:
		return "pid"
	case t.Cancel:
		return "cancel"
	}
	return "terminate"
}

// terminateCall recognizes node as a Terminate (nil when it is not one).
// A constant PID in a text analyzed through its shape (lc) is a literal
// slot: the shape is then not used (taint), so the text is analyzed in
// full and PID is its own.
func terminateCall(node *pg.Node, lc *litCtx) *Terminate {
	sel := node.GetSelectStmt()
	if sel == nil || len(sel.TargetList) != 1 || !bareSelect(sel, true) || len(sel.FromClause) > 1 {
		return nil
	}
	rt := sel.TargetList[0].GetResTarget()
	if rt == nil || rt.Val == nil || len(rt.Indirection) > 0 {
		return nil
	}
	fc := rt.Val.GetFuncCall()
	if fc != nil && len(fc.Args) == 0 && len(sel.FromClause) == 0 && isBackendPID(fc) {
		return &Terminate{Own: true, Column: column(rt.Name, "pg_backend_pid")}
	}
	if fc == nil || len(fc.Args) != 1 || !plainCall(fc) {
		return nil
	}
	schema, name := funcName(fc)
	if len(fc.Funcname) > 2 || schema != "" && schema != "pg_catalog" ||
		name != "pg_cancel_backend" && name != "pg_terminate_backend" {
		return nil
	}
	t := &Terminate{Cancel: name == "pg_cancel_backend", Column: column(rt.Name, name)}
	if len(sel.FromClause) == 1 {
		return unnestTerminate(t, sel.FromClause[0], fc.Args[0], lc)
	}
	arg := stripCasts(fc.Args[0], isIntOID)
	if arg == nil {
		return nil
	}
	if pf := arg.GetFuncCall(); pf != nil {
		if len(pf.Args) > 0 || !isBackendPID(pf) {
			return nil
		}
		t.Self = true
		return t
	}
	if pr := arg.GetParamRef(); pr != nil && pr.Number > 0 {
		if lc.slot(int(pr.Number)) > 0 {
			lc.taintf("pg_%s_backend of a constant PID", t.Fn())
			return nil
		}
		t.Param = int(pr.Number)
		return t
	}
	if c := arg.GetAConst(); c != nil && !c.Isnull {
		if iv, ok := c.Val.(*pg.A_Const_Ival); ok && iv.Ival.Ival >= 0 {
			t.PID = int64(iv.Ival.Ival)
			return t
		}
	}
	return nil
}

// column is the name Postgres gives a select list entry: its alias, else
// the function's name fn.
func column(alias, fn string) string {
	if alias != "" {
		return alias
	}
	return fn
}

// isBackendPID reports whether fc is a plain call of pg_backend_pid,
// schema-qualified with pg_catalog or not.
func isBackendPID(fc *pg.FuncCall) bool {
	schema, name := funcName(fc)
	return plainCall(fc) && len(fc.Funcname) <= 2 && name == "pg_backend_pid" && (schema == "" || schema == "pg_catalog")
}

// unnestTerminate completes t for the form FROM unnest($n) alias, the
// call's argument arg the alias.
func unnestTerminate(t *Terminate, from, arg *pg.Node, lc *litCtx) *Terminate {
	rf := from.GetRangeFunction()
	if rf == nil || rf.Lateral || rf.Ordinality || rf.IsRowsfrom || len(rf.Functions) != 1 || len(rf.Coldeflist) > 0 ||
		rf.Alias == nil || rf.Alias.Aliasname == "" || len(rf.Alias.Colnames) > 0 {
		return nil
	}
	pair := rf.Functions[0].GetList()
	if pair == nil || len(pair.Items) == 0 || pair.Items[0] == nil {
		return nil
	}
	uf := pair.Items[0].GetFuncCall()
	if uf == nil || len(uf.Args) != 1 || !plainCall(uf) || len(uf.Funcname) > 2 {
		return nil
	}
	if schema, name := funcName(uf); name != "unnest" || schema != "" && schema != "pg_catalog" {
		return nil
	}
	pr := stripCasts(uf.Args[0], isIntArray).GetParamRef()
	if pr == nil || pr.Number <= 0 || lc.slot(int(pr.Number)) > 0 {
		return nil
	}
	cr := arg.GetColumnRef()
	if cr == nil || len(cr.Fields) != 1 || strName(cr.Fields[0]) != rf.Alias.Aliasname {
		return nil
	}
	t.Param, t.Array = int(pr.Number), true
	return t
}

// bareSelect reports whether sel is a select list and nothing else (no
// WHERE, GROUP BY, HAVING, WINDOW, VALUES, ORDER BY, LIMIT, locking,
// WITH, INTO, DISTINCT, set operation), with a FROM list only if from.
func bareSelect(sel *pg.SelectStmt, from bool) bool {
	return (from || len(sel.FromClause) == 0) && sel.WhereClause == nil &&
		len(sel.GroupClause) == 0 && sel.HavingClause == nil && len(sel.WindowClause) == 0 &&
		len(sel.ValuesLists) == 0 && len(sel.SortClause) == 0 && sel.LimitCount == nil && sel.LimitOffset == nil &&
		len(sel.LockingClause) == 0 && sel.WithClause == nil && sel.IntoClause == nil && len(sel.DistinctClause) == 0 &&
		sel.Op == pg.SetOperation_SETOP_NONE && !sel.GroupDistinct
}

// plainCall reports whether fc is a plain function call: no aggregate
// or window decoration, no VARIADIC, no named arguments.
func plainCall(fc *pg.FuncCall) bool {
	if fc.AggStar || fc.AggDistinct || fc.FuncVariadic || fc.Over != nil || fc.AggFilter != nil ||
		len(fc.AggOrder) > 0 || fc.AggWithinGroup {
		return false
	}
	for _, a := range fc.Args {
		if a.GetNamedArgExpr() != nil {
			return false
		}
	}
	return true
}

// stripCasts returns n without its casts, each of which ok must accept;
// nil when one is not accepted.
func stripCasts(n *pg.Node, ok func(*pg.TypeName) bool) *pg.Node {
	for tc := n.GetTypeCast(); tc != nil; tc = n.GetTypeCast() {
		if tc.TypeName == nil || len(tc.TypeName.Typmods) > 0 || !ok(tc.TypeName) {
			return nil
		}
		n = tc.Arg
	}
	return n
}

// isIntOID: a cast to int2, int4 (integer) or int8.
func isIntOID(tn *pg.TypeName) bool {
	switch typeNameOID(tn) {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
		return true
	}
	return false
}

// isIntArray: a cast to a one-dimensional array of int2, int4 or int8.
func isIntArray(tn *pg.TypeName) bool {
	if len(tn.ArrayBounds) != 1 {
		return false
	}
	return isIntOID(&pg.TypeName{Names: tn.Names, Setof: tn.Setof, PctType: tn.PctType})
}
