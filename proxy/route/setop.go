package route

import (
	"fmt"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// A top-level UNION [ALL] read from every shard (the fan-out rule applied
// to each branch). Each shard runs the statement as the client wrote it
// over its own rows; the answer one database gives is then:
//
//   - UNION ALL: the shards' answers concatenated, when every branch's
//     rows are each computed on exactly one shard (a branch is a read the
//     fan-out rule would concatenate on its own: covered by a keyed
//     table, no aggregate, DISTINCT or LIMIT over every shard's rows —
//     analyzer.localWhy) and every set operation under it is a UNION ALL
//     without LIMIT/OFFSET of its own (a multiset union of the shards'
//     multiset unions);
//   - UNION: the same rows with duplicates dropped across shards (each
//     shard drops its own; the merge, as for SELECT DISTINCT, has every
//     shard sort by every column and drops adjacent equal rows), which
//     also holds with UNION or UNION ALL under it;
//   - ORDER BY result columns (by position or output name, the only
//     forms Postgres accepts there) and LIMIT/OFFSET/FETCH: merged as a
//     plain read's (mergeplan.go's rows and limits).
//
// The branches are not joined: each branch's keyed tables must be
// co-located among themselves only (notColocated, by branch: group.leaf).
// Not merged (then answered in two stages, twostage.go's branches, when
// each branch can be a statement of its own): INTERSECT and EXCEPT (a
// row's fate depends on rows of other shards), a UNION under a UNION
// ALL, a parenthesized set operation with LIMIT/OFFSET, a VALUES branch
// or a branch over no keyed table (every shard would produce its rows),
// and ORDER BY of anything but a result column.

// setLeaf is one branch of a top-level set operation: its query, scope
// and why its rows are not each from one shard ("" when they are).
type setLeaf struct {
	sel *pg.SelectStmt
	sc  *scope
	why string
}

// setOpStmt analyzes the set operation s in its scope sc: a branch of
// owner's (nil: of none) or, top, the statement itself, which then owns
// its branches (a.setTop is set to the owner just before each branch).
func setOpStmt(a *analyzer, s *pg.SelectStmt, sc *scope, owner *topInfo, top bool) *derived {
	if top {
		owner = &topInfo{sel: s, sc: sc, setop: true}
	}
	a.setTop = owner
	l := a.selectStmt(s.Larg, sc, false)
	a.setTop = owner
	a.selectStmt(s.Rarg, sc, false)
	a.setTop = nil // (a branch that is nil never took it)
	a.walkList(s.SortClause, sc)
	a.walk(s.LimitCount, sc)
	a.walk(s.LimitOffset, sc)
	if len(s.LockingClause) > 0 {
		a.locking = true
	}
	d := &derived{known: l.known, localWhy: "a UNION/INTERSECT/EXCEPT combines every shard's rows"}
	for _, c := range l.cols {
		d.cols = append(d.cols, outCol{name: c.name})
	}
	if top {
		a.top = owner
	}
	return d
}

// isSetOp reports whether s is a UNION/INTERSECT/EXCEPT node.
func isSetOp(s *pg.SelectStmt) bool {
	return s.Op != pg.SetOperation_SETOP_NONE && s.Op != pg.SetOperation_SET_OPERATION_UNDEFINED
}

// addLeaf records a branch of t's set operation (t nil: not a branch).
func (t *topInfo) addLeaf(s *pg.SelectStmt, sc *scope, why string) {
	if t != nil {
		t.leaves = append(t.leaves, setLeaf{sel: s, sc: sc, why: why})
	}
}

// leafOf returns the branch whose query sc is or is inside, -1 for none
// (a CTE of the set operation itself).
func (t *topInfo) leafOf(sc *scope) int {
	for ; sc != nil; sc = sc.parent {
		for i := range t.leaves {
			if t.leaves[i].sc == sc {
				return i
			}
		}
	}
	return -1
}

// setOpWhy says why t's set operation is not merged ("" when it is).
func (t *topInfo) setOpWhy() string {
	distinct := !t.sel.All
	var walk func(s *pg.SelectStmt, top bool) string
	walk = func(s *pg.SelectStmt, top bool) string {
		switch {
		case !isSetOp(s):
			return ""
		case s.Op != pg.SetOperation_SETOP_UNION:
			return "INTERSECT/EXCEPT cannot be merged across shards (whether a row is kept depends on rows of other shards)"
		case !top && !s.All && !distinct:
			return "a UNION (without ALL) under a UNION ALL cannot be merged across shards (each shard would drop only its own duplicates)"
		case !top && (s.LimitCount != nil || s.LimitOffset != nil):
			return "a parenthesized set operation with LIMIT/OFFSET picks rows among every shard's"
		}
		return firstNonEmpty(walk(s.Larg, false), walk(s.Rarg, false))
	}
	if why := walk(t.sel, true); why != "" {
		return why
	}
	for i, l := range t.leaves {
		if l.why != "" {
			return fmt.Sprintf("branch %d of the UNION: %s", i+1, l.why)
		}
	}
	if len(t.leaves) == 0 {
		return "UNION/INTERSECT/EXCEPT cannot be merged across shards"
	}
	return ""
}

// setOpPlan plans the merge of t (analyzed by a), a top-level UNION [ALL] (the file's
// comment): the select list is the first branch's (its output names),
// UNION's duplicates are dropped as SELECT DISTINCT's.
func setOpPlan(a *analyzer, t *topInfo) (*mergePlan, string) {
	if why := t.setOpWhy(); why != "" {
		return nil, why
	}
	sl := readTargets(&selectList{t: t, s: t.sel, starAt: -1, rd: &a.rd}, t.leaves[0].sel.TargetList)
	m := &merger{sel: sl, cols: shardColumns{stmt: t.sel}, smap: a.m}
	for _, n := range t.sel.SortClause {
		sb := n.GetSortBy()
		if sb == nil {
			return nil, "an ORDER BY term cannot be merged"
		}
		_, found, why := sl.sortColumn(sb, sl.starAt)
		switch {
		case why != "":
			return nil, why
		case !found:
			return nil, "ORDER BY " + exprText(sb.Node) + ": the ORDER BY of a UNION is merged only by a result column (its position or output name)"
		}
	}
	if !t.sel.All && sl.starAt < len(sl.targets) {
		return nil, "a UNION (without ALL) of SELECT * cannot be merged: name the columns"
	}
	if why := m.rows(!t.sel.All, false); why != "" {
		return nil, why
	}
	what := "UNION ALL (each branch's rows on one shard)"
	if !t.sel.All {
		what = "UNION (each branch's rows on one shard)"
	}
	m.desc[0] = what + ": " + m.desc[0]
	return m.finish()
}
