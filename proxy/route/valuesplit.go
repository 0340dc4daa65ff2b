package route

import (
	"fmt"
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/pgshard/pgshard/shardmap"
)

// A VALUES list split by shard: the preserved side of an outer join whose
// join condition equates one of its columns with the sharding key of the
// keyed table on the other side,
//
//	SELECT e.version, v.w FROM (VALUES ('id1', 0), ('id2', 1)) AS v(k, w)
//	  LEFT JOIN executions e ON e.id = v.k
//
// Sent whole to every shard, every shard would produce every VALUES row
// (NULL-extended where it has no match): the rows would repeat once per
// shard. Split, each shard gets only the VALUES rows whose key it owns (as
// if the list were a keyed table placed by that column): a row's matches
// are on its key's shard (they equal its key), so that shard produces the
// row joined to all of its matches, or NULL-extended when there is none,
// and no other shard produces it. A FULL JOIN's other side keeps its rows
// on their own shards, and an unmatched one is unmatched everywhere (its
// only possible partners are on its shard). A NULL key matches nothing:
// its rows go to the first shard.
//
// Every shard keeps the whole list (so that the columns are typed as one
// database types them) with a row number, and a filter keeps its rows:
//
//	(SELECT _pgshard_v.column1, _pgshard_v.column2
//	   FROM (VALUES ('id1', 0, 1), ('id2', 1, 2)) AS _pgshard_v
//	  WHERE _pgshard_v.column3 IN (2)) AS v(k, w)
//
// unnest(ARRAY['id1', 'id2']) AS v(k) is split the same way (its rows
// numbered WITH ORDINALITY).
//
// Only the plain shape is split: the top-level FROM is that one join; the
// other side is one keyed table with a text key; the VALUES list is not
// LATERAL and holds only constants and parameters, the key column only
// string constants or NULL; the condition is an AND of the equality and
// anything else. Anything else stays refused by the fan-out rule.

// valuesSplit is a VALUES list (or unnest of an ARRAY of constants) the
// fan-out splits by shard.
type valuesSplit struct {
	rs    *pg.RangeSubselect // the VALUES list in the client's statement
	rf    *pg.RangeFunction  // or the unnest(ARRAY[...])
	left  bool               // it is the join's left argument
	alias string             // its alias (for descriptions)
	col   string             // the key column's name
	owner []int              // per row, the index of the shard that gets it
}

// splitMarker stands for the row filter in the deparsed per-shard SQL.
const splitMarker = "pgshard_split_rows"

// splitValues returns the VALUES list of the top-level FROM that the
// fan-out may split by shard, or nil. top is the top-level SELECT; lit
// says which $n are literal slots (nil when the text is not normalized).
func (cv *coverage) splitValues(from []*pg.Node, sc *scope, top *pg.SelectStmt, lit *litCtx) *valuesSplit {
	if len(from) != 1 || cv.m == nil {
		return nil
	}
	j := from[0].GetJoinExpr()
	if j == nil || j.Alias != nil || j.Quals == nil || len(j.UsingClause) > 0 || j.IsNatural {
		return nil
	}
	try := func(vn, other *pg.Node, left bool) *valuesSplit {
		rv := other.GetRangeVar()
		if rv == nil || cv.tables[rv.Relname] == nil || isCatalog(rv.Schemaname, rv.Relname) ||
			rv.Schemaname == "" && sc.cte(rv.Relname) != nil {
			return nil
		}
		if rf := vn.GetRangeFunction(); rf != nil {
			return cv.splitUnnest(rf, j.Quals, left, sc, top, lit)
		}
		rs := vn.GetRangeSubselect()
		if rs == nil || rs.Lateral || rs.Alias == nil {
			return nil
		}
		sel := rs.Subquery.GetSelectStmt()
		if sel == nil || len(sel.ValuesLists) == 0 || sel.WithClause != nil || len(sel.SortClause) > 0 ||
			sel.LimitCount != nil || sel.LimitOffset != nil || len(sel.LockingClause) > 0 {
			return nil
		}
		width := len(sel.ValuesLists[0].GetList().GetItems())
		names := make([]string, width)
		for i := range names {
			names[i] = "column" + strconv.Itoa(i+1)
		}
		for i, c := range rs.Alias.Colnames {
			if i < width {
				names[i] = c.GetString_().GetSval()
			}
		}
		for _, row := range sel.ValuesLists {
			items := row.GetList().GetItems()
			if len(items) != width {
				return nil
			}
			for _, it := range items {
				if !constantEntry(it) {
					return nil
				}
			}
		}
		col := splitColumn(j.Quals, rs.Alias.Aliasname, names, sc)
		if col < 0 {
			return nil
		}
		sp := &valuesSplit{rs: rs, left: left, alias: rs.Alias.Aliasname, col: names[col]}
		for _, row := range sel.ValuesLists {
			if !sp.place(row.GetList().GetItems()[col], lit, cv.m) {
				return nil
			}
		}
		return sp
	}
	switch j.Jointype {
	case pg.JoinType_JOIN_LEFT:
		return try(j.Larg, j.Rarg, true)
	case pg.JoinType_JOIN_RIGHT:
		return try(j.Rarg, j.Larg, false)
	case pg.JoinType_JOIN_FULL:
		if sp := try(j.Larg, j.Rarg, true); sp != nil {
			return sp
		}
		return try(j.Rarg, j.Larg, false)
	}
	return nil
}

// place appends the shard (of map m) of the row whose key is e to
// sp.owner: a string constant's key's shard, the first shard for NULL (it
// matches nothing). It reports false for any other key.
func (sp *valuesSplit) place(e *pg.Node, lit *litCtx, m *shardmap.Map) bool {
	if lit.has(e) {
		// The rows' shards depend on the literals' values.
		lit.taintf("a VALUES list is split by the shards of its keys")
		return false
	}
	switch c := e.GetAConst(); {
	case c != nil && c.Isnull:
		sp.owner = append(sp.owner, 0)
	case c != nil && c.GetSval() != nil:
		b := shardmap.BucketText(c.GetSval().GetSval(), m.Buckets)
		sp.owner = append(sp.owner, m.ShardIndexForBucket(b))
	default:
		return false
	}
	return true
}

// splitUnnest is splitValues for unnest(ARRAY['k1', 'k2', ...]) AS v(k):
// one array of string constants (or NULL), a one-column alias, and no
// whole-row reference to v (a function's whole row is its value; the
// split list's would be a record).
func (cv *coverage) splitUnnest(rf *pg.RangeFunction, quals *pg.Node, left bool, sc *scope, top *pg.SelectStmt, lit *litCtx) *valuesSplit {
	if rf.Lateral || rf.Ordinality || rf.IsRowsfrom || len(rf.Functions) != 1 || len(rf.Coldeflist) > 0 ||
		rf.Alias == nil || len(rf.Alias.Colnames) != 1 {
		return nil
	}
	items := rf.Functions[0].GetList().GetItems()
	if len(items) == 0 || len(items) > 1 && items[1] != nil && items[1].GetNode() != nil {
		return nil
	}
	fc := items[0].GetFuncCall()
	if fc == nil || len(fc.Args) != 1 || fc.AggStar || fc.AggDistinct || fc.FuncVariadic || fc.Over != nil {
		return nil
	}
	if schema, name := funcName(fc); name != "unnest" || schema != "" && schema != "pg_catalog" {
		return nil
	}
	arr := fc.Args[0].GetAArrayExpr()
	if arr == nil || len(arr.Elements) == 0 {
		return nil
	}
	alias, col := rf.Alias.Aliasname, rf.Alias.Colnames[0].GetString_().GetSval()
	whole := false
	inspect(&pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: top}}, func(n *pg.Node) bool {
		if cr := n.GetColumnRef(); cr != nil && len(cr.Fields) == 1 && cr.Fields[0].GetString_().GetSval() == alias {
			whole = true
		}
		return !whole
	})
	if whole || splitColumn(quals, alias, []string{col}, sc) != 0 {
		return nil
	}
	sp := &valuesSplit{rf: rf, left: left, alias: alias, col: col}
	for _, e := range arr.Elements {
		if !sp.place(e, lit, cv.m) {
			return nil
		}
	}
	return sp
}

// constantEntry reports whether a VALUES entry is the same on every shard
// and reads nothing: a constant or a parameter, possibly cast.
func constantEntry(n *pg.Node) bool {
	for n.GetTypeCast() != nil {
		n = n.GetTypeCast().Arg
	}
	return n.GetAConst() != nil || n.GetParamRef() != nil
}

// splitColumn returns the index of the VALUES column (of alias, with the
// given column names) that a conjunct of the join condition equates with a
// text sharding key of the statement's top-level keyed table, -1 if none.
func splitColumn(quals *pg.Node, alias string, names []string, sc *scope) int {
	var conj []*pg.Node
	if b := quals.GetBoolExpr(); b != nil && b.Boolop == pg.BoolExprType_AND_EXPR {
		conj = b.Args
	} else {
		conj = []*pg.Node{quals}
	}
	valuesCol := func(n *pg.Node) int {
		cr := n.GetColumnRef()
		if cr == nil || len(cr.Fields) != 2 || cr.Fields[0].GetString_().GetSval() != alias {
			return -1
		}
		name := cr.Fields[1].GetString_().GetSval()
		for i, c := range names {
			if c == name {
				return i
			}
		}
		return -1
	}
	isKey := func(n *pg.Node) bool {
		o, ok := sc.keyOrigin(n)
		return ok && o.ref.sc == sc && o.typ() == KeyText
	}
	for _, c := range conj {
		x := c.GetAExpr()
		if x == nil || x.Kind != pg.A_Expr_Kind_AEXPR_OP || !isEqOp(x.Name) {
			continue
		}
		if i := valuesCol(x.Rexpr); i >= 0 && isKey(x.Lexpr) {
			return i
		}
		if i := valuesCol(x.Lexpr); i >= 0 && isKey(x.Rexpr) {
			return i
		}
	}
	return -1
}

// shardSQL rewrites the per-shard statement sel (a clone of the
// client's) for the split and returns one statement per shard.
func (sp *valuesSplit) shardSQL(sel *pg.SelectStmt, shards int) ([]string, string) {
	j := sel.FromClause[0].GetJoinExpr()
	vn := j.Rarg
	if sp.left {
		vn = j.Larg
	}
	if rf := vn.GetRangeFunction(); rf != nil {
		fn := exprSQL(rf.Functions[0].GetList().GetItems()[0])
		res, err := pg.Parse("SELECT _pgshard_v.c FROM " + fn + " WITH ORDINALITY AS _pgshard_v(c, n) WHERE " + splitMarker)
		if err != nil || len(res.Stmts) != 1 {
			return nil, "the per-shard statement could not be written: " + fmt.Sprint(err)
		}
		vn.Node = &pg.Node_RangeSubselect{RangeSubselect: &pg.RangeSubselect{Subquery: res.Stmts[0].Stmt, Alias: rf.Alias}}
		return sp.render(sel, "_pgshard_v.n", shards)
	}
	rs := vn.GetRangeSubselect()
	vals := rs.Subquery.GetSelectStmt()
	width := len(vals.ValuesLists[0].GetList().GetItems())
	inner := &pg.SelectStmt{LimitOption: pg.LimitOption_LIMIT_OPTION_DEFAULT, Op: pg.SetOperation_SETOP_NONE}
	for i, row := range vals.ValuesLists {
		l := row.GetList()
		l.Items = append(l.Items, pg.MakeAConstIntNode(int64(i+1), -1))
		inner.ValuesLists = append(inner.ValuesLists, row)
	}
	wrap := &pg.SelectStmt{LimitOption: pg.LimitOption_LIMIT_OPTION_DEFAULT, Op: pg.SetOperation_SETOP_NONE}
	for i := 0; i < width; i++ {
		wrap.TargetList = append(wrap.TargetList, pg.MakeResTargetNodeWithVal(
			pg.MakeColumnRefNode([]*pg.Node{pg.MakeStrNode("_pgshard_v"), pg.MakeStrNode("column" + strconv.Itoa(i+1))}, -1), -1))
	}
	wrap.FromClause = []*pg.Node{{Node: &pg.Node_RangeSubselect{RangeSubselect: &pg.RangeSubselect{
		Subquery: &pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: inner}},
		Alias:    &pg.Alias{Aliasname: "_pgshard_v"},
	}}}}
	wrap.WhereClause = pg.MakeColumnRefNode([]*pg.Node{pg.MakeStrNode(splitMarker)}, -1)
	rs.Subquery = &pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: wrap}}
	return sp.render(sel, "_pgshard_v.column"+strconv.Itoa(width+1), shards)
}

// render deparses sel, whose split list's filter is splitMarker, once per
// shard with the filter that keeps the rows (numbered by rowcol) of that
// shard.
func (sp *valuesSplit) render(sel *pg.SelectStmt, rowcol string, shards int) ([]string, string) {
	out, err := deparse(&pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: sel}})
	if err != nil {
		return nil, "the per-shard statement could not be written: " + err.Error()
	}
	if strings.Count(out, splitMarker) != 1 {
		return nil, "the statement names " + splitMarker
	}
	sqls := make([]string, shards)
	for s := range sqls {
		var rows []string
		for i, o := range sp.owner {
			if o == s {
				rows = append(rows, strconv.Itoa(i+1))
			}
		}
		filter := "false"
		if len(rows) > 0 {
			filter = rowcol + " IN (" + strings.Join(rows, ", ") + ")"
		}
		sqls[s] = strings.Replace(out, splitMarker, filter, 1)
	}
	return sqls, ""
}

// describe says how the split sends the rows.
func (sp *valuesSplit) describe(m *shardmap.Map) string {
	per := map[int]int{}
	for _, o := range sp.owner {
		per[o]++
	}
	var parts []string
	for s := range m.Shards {
		if per[s] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", m.Shards[s].Name, per[s]))
		}
	}
	what := "VALUES list"
	if sp.rf != nil {
		what = "unnest list"
	}
	return fmt.Sprintf("the "+what+" %s is split by its key %s.%s: each shard gets the rows whose key it owns (%s)",
		sp.alias, sp.alias, sp.col, strings.Join(parts, ", "))
}
