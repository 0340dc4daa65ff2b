package route

import (
	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// Decorrelating an EXISTS for a read in two stages. A semi- or anti-join
// whose subquery is tied to the statement's row by equalities that are
// not on both tables' sharding keys (outbox a WHERE EXISTS (SELECT 1 FROM
// executions b WHERE b.id = a.target_id AND ...)) cannot run per shard.
// The same truth value, for every row and NULL, is
//
//	EXISTS (SELECT 1 FROM t b WHERE b.k = a.x AND rest)
//	  ≡ COALESCE(a.x IN (SELECT DISTINCT b.k FROM t b WHERE rest), false)
//
// (a.x NULL: EXISTS is false, IN is NULL or false; a.x not NULL: IN is
// true where some b.k equals it, else NULL or false), and the IN's
// subquery no longer refers to the row: stage 1 merges it, stage 2 runs
// the statement where it routes (twostage.go, spread). Several equalities
// make a row IN, (a.x, a.y) IN (SELECT DISTINCT b.k, b.m ...): true
// where one row has every equality true, NULL or false otherwise. Only a
// plain subquery is rewritten (FROM and WHERE, no GROUP BY, HAVING,
// DISTINCT, LIMIT — LIMIT 1 and OFFSET 0 are dropped first: rowsKept —,
// WITH, window or set operation; a select list of constants and
// columns only: plainTargets), and only when every column of
// an equality is qualified — by a relation of the subquery on one side,
// by one it does not have on the other: an unqualified column may be
// either's, which only the catalog or a shard's 42703 knows (learn.go). A
// column of the statement's row left unqualified in rest makes the
// rewritten subquery fail alone (42703), which the engine learns from
// or answers as the correlated refusal.

// decorrelate rewrites the EXISTS subqueries of sel's WHERE, HAVING,
// select list and ORDER BY that it can (see above), and returns them.
func decorrelate(sel *pg.SelectStmt) (done []*pg.SubLink) {
	// A select-list item that is an EXISTS and has no name is the column
	// "exists"; rewritten, it would be "coalesce": named as it was.
	var bare []*pg.ResTarget
	for _, t := range sel.TargetList {
		if rt := t.GetResTarget(); rt != nil && rt.Name == "" && rt.Val.GetSubLink().GetSubLinkType() == pg.SubLinkType_EXISTS_SUBLINK {
			bare = append(bare, rt)
		}
	}
	topSublinks(sel, func(x *pg.Node, sl *pg.SubLink) {
		if sl.SubLinkType == pg.SubLinkType_EXISTS_SUBLINK {
			if in := existsAsIn(sl); in != nil {
				x.Node, done = in.Node, append(done, sl)
			}
		}
	})
	for _, rt := range bare {
		if rt.Val.GetSubLink() == nil {
			rt.Name = "exists"
		}
	}
	return done
}

// plainSubquery reports whether q is a SELECT of FROM and WHERE only (no
// GROUP BY, HAVING, DISTINCT, LIMIT, WITH, window, set operation,
// locking or VALUES), which a rewrite may take apart.
func plainSubquery(q *pg.SelectStmt) bool {
	return q != nil && len(q.FromClause) > 0 && q.WhereClause != nil && !isSetOp(q) && q.WithClause == nil &&
		len(q.GroupClause) == 0 && q.HavingClause == nil && len(q.DistinctClause) == 0 && len(q.WindowClause) == 0 &&
		q.LimitCount == nil && q.LimitOffset == nil && len(q.LockingClause) == 0 && len(q.ValuesLists) == 0
}

// conjuncts are the terms of w's top-level AND (w itself if it is not
// one).
func conjuncts(w *pg.Node) []*pg.Node {
	if be := w.GetBoolExpr(); be != nil && be.Boolop == pg.BoolExprType_AND_EXPR {
		return be.Args
	}
	return []*pg.Node{w}
}

// and is the conjunction of terms: nil for none.
func and(terms []*pg.Node) *pg.Node {
	switch len(terms) {
	case 0:
		return nil
	case 1:
		return terms[0]
	}
	return &pg.Node{Node: &pg.Node_BoolExpr{BoolExpr: &pg.BoolExpr{Boolop: pg.BoolExprType_AND_EXPR, Args: terms}}}
}

// topSublinks calls fn for each subquery of sel's WHERE, HAVING, select
// list and ORDER BY that is not inside another (x is its node, for fn to
// replace).
func topSublinks(sel *pg.SelectStmt, fn func(x *pg.Node, sl *pg.SubLink)) {
	ns := append(append([]*pg.Node{sel.WhereClause, sel.HavingClause}, sel.TargetList...), sel.SortClause...)
	for _, n := range ns {
		inspect(n, func(x *pg.Node) bool {
			if sl := x.GetSubLink(); sl != nil {
				fn(x, sl)
				return false
			}
			return true
		})
	}
}

// existsAsIn is the COALESCE(x IN (...), false) standing for EXISTS
// subquery sl, nil when sl is not one decorrelate rewrites.
func existsAsIn(sl *pg.SubLink) *pg.Node {
	q := sl.Subselect.GetSelectStmt()
	if q != nil && rowsKept(q) {
		q = proto.Clone(q).(*pg.SelectStmt)
		q.LimitCount, q.LimitOffset, q.LimitOption, q.SortClause = nil, nil, pg.LimitOption_LIMIT_OPTION_DEFAULT, nil
	}
	if !plainSubquery(q) || !plainTargets(q.TargetList) {
		return nil
	}
	own := relationNames(sl.Subselect)
	var inners, outers, rest []*pg.Node
	for _, c := range conjuncts(q.WhereClause) {
		if inner, outer := correlation(c, own); inner != nil {
			inners, outers = append(inners, inner), append(outers, outer)
		} else {
			rest = append(rest, c)
		}
	}
	if len(inners) == 0 {
		return nil
	}
	sub := &pg.SelectStmt{DistinctClause: []*pg.Node{{}}, FromClause: q.FromClause,
		WhereClause: and(rest), LimitOption: pg.LimitOption_LIMIT_OPTION_DEFAULT, Op: pg.SetOperation_SETOP_NONE}
	for _, in := range inners {
		sub.TargetList = append(sub.TargetList, &pg.Node{Node: &pg.Node_ResTarget{ResTarget: &pg.ResTarget{Val: in}}})
	}
	subq := &pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: sub}}
	if correlated(subq) {
		return nil // rest names the row too
	}
	test := outers[0]
	if len(outers) > 1 {
		// (a.x, a.y) IN (SELECT b.k, b.m ...): true where one row has
		// both equalities true, as EXISTS with both
		test = &pg.Node{Node: &pg.Node_RowExpr{RowExpr: &pg.RowExpr{Args: outers, RowFormat: pg.CoercionForm_COERCE_IMPLICIT_CAST}}}
	}
	in := &pg.Node{Node: &pg.Node_SubLink{SubLink: &pg.SubLink{SubLinkType: pg.SubLinkType_ANY_SUBLINK, Testexpr: test, Subselect: subq}}}
	no := &pg.Node{Node: &pg.Node_AConst{AConst: &pg.A_Const{Val: &pg.A_Const_Boolval{Boolval: &pg.Boolean{}}}}}
	return &pg.Node{Node: &pg.Node_CoalesceExpr{CoalesceExpr: &pg.CoalesceExpr{Args: []*pg.Node{in, no}}}}
}

// rowsKept reports whether EXISTS subquery q's LIMIT and OFFSET leave it
// a row whenever it has one without them: a constant LIMIT of at least 1
// (EXISTS (SELECT 1 ... LIMIT 1), as ORMs write it), no OFFSET or OFFSET
// 0. Its ORDER BY then does not matter either.
func rowsKept(q *pg.SelectStmt) bool {
	if q.LimitCount == nil && q.LimitOffset == nil {
		return false
	}
	return (q.LimitCount == nil || intConst(q.LimitCount) >= 1) && (q.LimitOffset == nil || intConst(q.LimitOffset) == 0)
}

// intConst is n's value when it is an integer constant, else -1.
func intConst(n *pg.Node) int32 {
	if c := n.GetAConst(); c != nil && !c.Isnull {
		if iv, ok := c.Val.(*pg.A_Const_Ival); ok {
			return iv.Ival.GetIval()
		}
	}
	return -1
}

// plainTargets reports whether an EXISTS subquery's select list is
// only constants and columns (SELECT 1, SELECT *, SELECT b.id): its rows
// are then its FROM's rows that pass WHERE, which the rewrite keeps. An
// aggregate would make one row of none (EXISTS (SELECT count(*) ...) is
// always true), a set-returning function none or several of one.
func plainTargets(ts []*pg.Node) bool {
	for _, t := range ts {
		rt := t.GetResTarget()
		if rt == nil {
			return false
		}
		v := rt.Val
		if tc := v.GetTypeCast(); tc != nil {
			v = tc.Arg
		}
		if v.GetAConst() == nil && v.GetColumnRef() == nil {
			return false
		}
	}
	return true
}

// correlation splits c, a conjunct inner = outer (either way round), into
// its side over the subquery's own relations (names own) and its side
// over the statement's row; nil, nil when c is not such an equality with
// every column qualified.
func correlation(c *pg.Node, own map[string]bool) (inner, outer *pg.Node) {
	ae := c.GetAExpr()
	if ae == nil || ae.Kind != pg.A_Expr_Kind_AEXPR_OP || len(ae.Name) != 1 || strName(ae.Name[0]) != "=" {
		return nil, nil
	}
	l, r := sideOf(ae.Lexpr, own), sideOf(ae.Rexpr, own)
	switch {
	case l == sideOwn && r == sideRow:
		return ae.Lexpr, ae.Rexpr
	case l == sideRow && r == sideOwn:
		return ae.Rexpr, ae.Lexpr
	}
	return nil, nil
}

const (
	sideNone = iota // no column, an unqualified one, a subquery, or both sides' columns
	sideOwn         // only columns of the subquery's relations
	sideRow         // only columns of the statement's row
)

// sideOf tells whose columns expression e reads (see the constants).
func sideOf(e *pg.Node, own map[string]bool) int {
	side, bad := sideNone, false
	inspect(e, func(n *pg.Node) bool {
		if n.GetSubLink() != nil {
			bad = true
		}
		cr := n.GetColumnRef()
		if cr == nil || bad {
			return !bad
		}
		if len(cr.Fields) < 2 || cr.Fields[len(cr.Fields)-1].GetAStar() != nil {
			bad = true
			return false
		}
		s := sideRow
		if own[strName(cr.Fields[len(cr.Fields)-2])] {
			s = sideOwn
		}
		if side != sideNone && side != s {
			bad = true
		}
		side = s
		return !bad
	})
	if bad {
		return sideNone
	}
	return side
}

// relationNames are the names subquery q gives its relations at any
// depth: tables (and their aliases), subqueries, functions, joins, CTEs.
func relationNames(q *pg.Node) map[string]bool {
	names := map[string]bool{}
	alias := func(a *pg.Alias) {
		if a != nil {
			names[a.Aliasname] = true
		}
	}
	inspect(q, func(n *pg.Node) bool {
		switch x := n.Node.(type) {
		case *pg.Node_RangeVar:
			names[x.RangeVar.Relname] = true
			alias(x.RangeVar.Alias)
		case *pg.Node_RangeSubselect:
			alias(x.RangeSubselect.Alias)
		case *pg.Node_RangeFunction:
			alias(x.RangeFunction.Alias)
		case *pg.Node_JoinExpr:
			alias(x.JoinExpr.Alias)
		case *pg.Node_CommonTableExpr:
			names[x.CommonTableExpr.Ctename] = true
		}
		return true
	})
	return names
}
