package route

import (
	"fmt"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// selectList is the top-level SELECT a merge plan is built for, as the
// plan reads it: its select list (targets; starAt is the index of its
// first *, len(targets) if none), the keyed tables whose sharding keys
// place its rows (anchors: not on the nullable side of an outer join),
// and how ORDER BY / GROUP BY / DISTINCT terms name its entries.
type selectList struct {
	t       *topInfo
	s       *pg.SelectStmt
	targets []*pg.ResTarget
	starAt  int
	anchors []*tref
	rd      *exprReader // literal-aware comparison of expressions
}

// newSelectList reads the top-level SELECT's select list and where its
// first * is.
func newSelectList(t *topInfo, anchors []*tref, rd *exprReader) *selectList {
	return readTargets(&selectList{t: t, s: t.sel, anchors: anchors, starAt: -1, rd: rd}, t.sel.TargetList)
}

// readTargets reads the select list list into sl.
func readTargets(sl *selectList, list []*pg.Node) *selectList {
	for _, n := range list {
		if rt := n.GetResTarget(); rt != nil {
			if cr := rt.Val.GetColumnRef(); sl.starAt < 0 && cr != nil && len(cr.Fields) > 0 && cr.Fields[len(cr.Fields)-1].GetAStar() != nil {
				sl.starAt = len(sl.targets)
			}
			sl.targets = append(sl.targets, rt)
		}
	}
	if sl.starAt < 0 {
		sl.starAt = len(sl.targets)
	}
	return sl
}

func (sl *selectList) isAnchorKey(o *colOrigin) bool {
	if o == nil {
		return false
	}
	for _, r := range sl.anchors {
		if o.ref == r {
			return true
		}
	}
	return false
}

func (sl *selectList) targetKey(i int) bool {
	return i >= 0 && i < sl.starAt && i < len(sl.t.cols) && sl.isAnchorKey(sl.t.cols[i].origin)
}

// sortColumn resolves an ORDER BY term to a select-list position, as
// Postgres does: a position number, an output column name, or an
// expression equal to a select-list entry (among the first starAt). found is false (with no
// reason) for another expression.
func (sl *selectList) sortColumn(sb *pg.SortBy, starAt int) (int, bool, string) {
	n, targets, t := sb.Node, sl.targets, sl.t
	// x COLLATE "C" orders bytewise, which is how the engine merges text:
	// resolve it as x. Any other collation would need the server's rules.
	if cc := n.GetCollateClause(); cc != nil {
		if !bytewiseCollation(cc.Collname) {
			return 0, false, fmt.Sprintf("ORDER BY %s: only COLLATE \"C\" (bytewise) can be merged across shards", exprText(n))
		}
		n = cc.Arg
	}
	if sl.rd.lit.has(n) {
		sl.rd.lit.taintf("a literal in ORDER BY (a constant there is a position)")
	}
	if c := n.GetAConst(); c != nil {
		v, _ := constVal(c)
		if v.kind != kInt || v.i < 1 || int(v.i) > len(targets) {
			return 0, false, "ORDER BY " + exprText(n) + " is not a select-list position"
		}
		if int(v.i)-1 >= starAt {
			return 0, false, "ORDER BY " + itoa(v.i) + " is a position after *: name the columns in the select list"
		}
		return int(v.i) - 1, true, ""
	}
	if cr := n.GetColumnRef(); cr != nil && len(cr.Fields) == 1 && cr.Fields[0].GetString_() != nil {
		if i := sl.targetByName(targets[:starAt], strName(cr.Fields[0])); i >= 0 {
			return i, true, ""
		} else if i == -2 {
			return 0, false, "ORDER BY " + exprText(n) + " is ambiguous"
		}
	}
	for i := 0; i < starAt; i++ {
		if sl.rd.sameExpr(n, targets[i].Val) || sameColumn(n, targets[i].Val, t) {
			return i, true, ""
		}
	}
	return 0, false, ""
}

// targetByName finds the select-list entry with output name name: its
// index, -1 if none, -2 if several (that are not the same expression).
func (sl *selectList) targetByName(targets []*pg.ResTarget, name string) int {
	found := -1
	for i, rt := range targets {
		n := rt.Name
		if n == "" {
			n = colName(rt.Val)
		}
		if n != name {
			continue
		}
		if found >= 0 && !sl.rd.sameExpr(targets[found].Val, rt.Val) {
			return -2
		}
		if found < 0 {
			found = i
		}
	}
	return found
}

// sameColumn: e.id and id name the same column when the FROM has one item.
func sameColumn(x, y *pg.Node, t *topInfo) bool {
	cx, cy := x.GetColumnRef(), y.GetColumnRef()
	if cx == nil || cy == nil || len(cx.Fields) == 0 || len(cy.Fields) == 0 {
		return false
	}
	if strName(cx.Fields[len(cx.Fields)-1]) != strName(cy.Fields[len(cy.Fields)-1]) {
		return false
	}
	return len(t.sc.items) == 1 && len(cx.Fields) <= 2 && len(cy.Fields) <= 2
}
