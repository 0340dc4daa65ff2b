package route

import (
	"fmt"
	"math"
	"strings"
	"sync"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// mergePlan decides whether the top-level SELECT, read from every shard,
// can be merged into the answer one database would give, and how. It
// returns nil and the reason when it cannot: pgshard refuses rather than
// answer wrongly.
//
// What merges: plain rows (concatenated), ORDER BY on select-list columns
// (k-way merge of per-shard sorted rows), LIMIT/OFFSET (each shard returns
// LIMIT n+m rows, the merge skips m and keeps n), count/sum/min/max without
// GROUP BY (one row per shard, combined), and GROUP BY / DISTINCT that
// include a sharding key (every group lives on one shard).
func (a *analyzer) mergePlan() (*mergePlan, string) {
	t := a.top
	if t == nil {
		return nil, "only a plain SELECT can be fanned out and merged"
	}
	if t.setop {
		return nil, "UNION/INTERSECT/EXCEPT cannot be merged across shards"
	}
	s := t.sel
	if t.derivedSharded {
		return nil, "a subquery or CTE in FROM reads sharded tables; only plain reads of sharded tables are merged"
	}
	var anchors []*tref
	topRefs := 0
	for _, r := range a.refs {
		if r.top && r.role == roleRead && r.sc == t.sc {
			topRefs++
			if !r.nullable {
				anchors = append(anchors, r)
			}
		}
	}
	if topRefs == 0 {
		return nil, "the sharded tables are read only inside subqueries, whose per-shard results cannot be combined"
	}
	if len(anchors) == 0 && t.other {
		// Every output row must contain a row of a keyed table, which lives
		// on one shard; else another table's rows repeat once per shard.
		return nil, "the keyed tables are on the nullable side of an outer join with a table that is not sharded: its rows would repeat once per shard"
	}
	var targets []*pg.ResTarget
	starAt := -1
	for _, n := range s.TargetList {
		rt := n.GetResTarget()
		if rt == nil {
			continue
		}
		if cr := rt.Val.GetColumnRef(); starAt < 0 && cr != nil && len(cr.Fields) > 0 && cr.Fields[len(cr.Fields)-1].GetAStar() != nil {
			starAt = len(targets)
		}
		targets = append(targets, rt)
	}
	if starAt < 0 {
		starAt = len(targets)
	}
	hasWindow, hasAgg := topLevelCalls(s.TargetList)
	sortWindow, _ := topLevelCalls(s.SortClause)
	if len(s.WindowClause) > 0 || hasWindow || sortWindow {
		return nil, "window functions would see only one shard's rows"
	}
	isAnchorKey := func(o *colOrigin) bool {
		if o == nil {
			return false
		}
		for _, r := range anchors {
			if o.ref == r {
				return true
			}
		}
		return false
	}
	targetKey := func(i int) bool {
		return i >= 0 && i < starAt && i < len(t.cols) && isAnchorKey(t.cols[i].origin)
	}
	if len(s.DistinctClause) > 0 {
		if len(s.DistinctClause) != 1 || s.DistinctClause[0].GetNode() != nil {
			return nil, "DISTINCT ON cannot be merged across shards"
		}
		ok := false
		for i := range targets {
			ok = ok || targetKey(i)
		}
		if !ok {
			return nil, "DISTINCT without a sharding key in the select list would return a row once per shard"
		}
	}
	grouped := false
	for _, g := range s.GroupClause {
		if a.lit.has(g) {
			a.lit.taintf("a literal in GROUP BY (a constant there is a position)")
		}
		switch {
		case g.GetGroupingSet() != nil:
			return nil, "GROUPING SETS / ROLLUP / CUBE cannot be merged across shards"
		case g.GetAConst() != nil:
			if v, _ := constVal(g.GetAConst()); v.kind == kInt && targetKey(int(v.i)-1) {
				grouped = true
			}
		default:
			if o, ok := a.keyOrigin(g, t.sc); ok && isAnchorKey(&o) {
				grouped = true
			} else if cr := g.GetColumnRef(); cr != nil && len(cr.Fields) == 1 {
				// An output-column name.
				if i := a.targetByName(targets[:starAt], strName(cr.Fields[0])); targetKey(i) {
					grouped = true
				}
			}
		}
	}
	if len(s.GroupClause) > 0 && !grouped {
		return nil, "GROUP BY without a sharding key would split groups across shards"
	}
	if s.HavingClause != nil && !grouped {
		return nil, "HAVING without GROUP BY a sharding key needs every shard's rows at once"
	}
	if s.LimitOption == pg.LimitOption_LIMIT_OPTION_WITH_TIES {
		return nil, "FETCH ... WITH TIES cannot be merged across shards"
	}

	mp := &mergePlan{merge: Merge{Limit: -1, Offset: -1}}
	var desc []string
	if !grouped && hasAgg {
		if starAt < len(targets) {
			return nil, "* together with aggregates cannot be merged"
		}
		for i, rt := range targets {
			agg, why := aggOf(rt.Val)
			if why != "" {
				return nil, fmt.Sprintf("select-list entry %d (%s) %s", i+1, exprText(rt.Val), why)
			}
			mp.merge.Aggregates = append(mp.merge.Aggregates, agg)
		}
		// ORDER BY is moot: the merge yields a single row.
		var as []string
		for _, g := range mp.merge.Aggregates {
			as = append(as, g.String())
		}
		desc = append(desc, "combine one row per shard ("+strings.Join(as, ", ")+")")
	} else {
		for _, n := range s.SortClause {
			sb := n.GetSortBy()
			if sb == nil {
				return nil, "an ORDER BY term cannot be merged"
			}
			col, why := a.sortColumn(sb, targets, starAt, t)
			if why != "" {
				return nil, why
			}
			k := SortKey{Column: col}
			switch sb.SortbyDir {
			case pg.SortByDir_SORTBY_DESC:
				k.Desc = true
			case pg.SortByDir_SORTBY_USING:
				return nil, "ORDER BY ... USING an operator cannot be merged"
			}
			switch sb.SortbyNulls {
			case pg.SortByNulls_SORTBY_NULLS_FIRST:
				k.NullsFirst = true
			case pg.SortByNulls_SORTBY_NULLS_LAST:
				k.NullsFirst = false
			default:
				k.NullsFirst = k.Desc // Postgres: NULLs sort as larger than any value
			}
			mp.merge.OrderBy = append(mp.merge.OrderBy, k)
		}
		if len(mp.merge.OrderBy) > 0 {
			var ks []string
			for _, k := range mp.merge.OrderBy {
				d := "asc"
				if k.Desc {
					d = "desc"
				}
				n := "nulls last"
				if k.NullsFirst {
					n = "nulls first"
				}
				ks = append(ks, fmt.Sprintf("column %d %s %s", k.Column+1, d, n))
			}
			desc = append(desc, "merge sorted rows by "+strings.Join(ks, ", "))
		} else {
			desc = append(desc, "concatenate rows")
		}
		if grouped {
			desc[0] += " (grouped by a sharding key: each group is on one shard)"
		}
	}

	// LIMIT / OFFSET.
	var why string
	var limSrc, offSrc *source
	mp.merge.Limit, limSrc, why = a.limitOf(s.LimitCount, "LIMIT")
	if why != "" {
		return nil, why
	}
	mp.merge.Offset, offSrc, why = a.limitOf(s.LimitOffset, "OFFSET")
	if why != "" {
		return nil, why
	}
	mp.limit, mp.offset = limSrc, offSrc
	hasOffset := offSrc != nil || mp.merge.Offset > 0
	if s.LimitCount != nil || s.LimitOffset != nil {
		l := "LIMIT " + limitText(mp.merge.Limit, limSrc)
		if limSrc != nil && limSrc.lit > 0 {
			// Rendered per text (descText).
			l, mp.litDesc = "LIMIT "+litMark, true
		}
		if hasOffset {
			l += " OFFSET " + limitText(mp.merge.Offset, offSrc)
		}
		desc = append(desc, "then "+l)
	}
	if hasOffset {
		// Each shard returns the first n+m rows; the merge skips m.
		c := proto.Clone(s).(*pg.SelectStmt)
		c.LimitOffset = nil
		switch {
		case s.LimitCount == nil || (limSrc == nil && mp.merge.Limit < 0):
			c.LimitCount = nil
		case limSrc == nil && offSrc == nil:
			if mp.merge.Limit > math.MaxInt64-mp.merge.Offset {
				c.LimitCount = nil
			} else {
				c.LimitCount = pg.MakeAConstIntNode(mp.merge.Limit+mp.merge.Offset, -1)
			}
		default:
			c.LimitCount = pg.MakeAExprNode(pg.A_Expr_Kind_AEXPR_OP, []*pg.Node{pg.MakeStrNode("+")},
				int8Expr(s.LimitCount), int8Expr(s.LimitOffset), -1)
		}
		out, err := deparse(&pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: c}})
		if err != nil {
			return nil, "the per-shard LIMIT could not be rewritten: " + err.Error()
		}
		mp.merge.SQL = out
		desc = append(desc, "each shard runs: "+out)
		// With literal placeholders the per-shard SQL is not the text's,
		// nor is the choice to rewrite it (OFFSET 0 is not rewritten): a
		// text that fans out is analyzed in full (bindStatement).
		mp.litFanout = a.lit != nil && (a.lit.inString(out) || limSrc != nil && limSrc.lit > 0 || offSrc != nil && offSrc.lit > 0)
	}
	mp.desc = strings.Join(desc, "; ")
	return mp, ""
}

// int8Expr is n::int8 (constants and parameters as they are written).
func int8Expr(n *pg.Node) *pg.Node {
	return &pg.Node{Node: &pg.Node_TypeCast{TypeCast: &pg.TypeCast{Arg: n, Location: -1,
		TypeName: &pg.TypeName{Names: []*pg.Node{pg.MakeStrNode("pg_catalog"), pg.MakeStrNode("int8")}, Typemod: -1, Location: -1}}}}
}

func limitText(v int64, s *source) string {
	if s != nil {
		return s.expr
	}
	if v < 0 {
		return "ALL"
	}
	return itoa(v)
}

// limitOf reads a LIMIT or OFFSET: a constant, NULL/ALL (-1) or a parameter.
func (a *analyzer) limitOf(n *pg.Node, what string) (int64, *source, string) {
	if n == nil {
		return -1, nil, ""
	}
	if a.lit.has(n) {
		// A plain integer literal is a value read at Route; any other
		// literal (a string, a decimal, a negative number, a cast one) is
		// judged here by its value: not shared.
		if pr := n.GetParamRef(); pr != nil {
			if k := a.lit.slot(int(pr.Number)); k > 0 && a.lit.class(k) == litInt {
				s := a.srcOf(n, keyCol{col: what, typ: KeyInt8}, "", false)
				s.col = what
				return -1, s, ""
			}
		}
		a.lit.taintf("%s %s is a literal other than a plain integer", what, exprText(n))
		return 0, nil, what + " is not shared"
	}
	e := n
	for e.GetTypeCast() != nil {
		e = e.GetTypeCast().Arg
	}
	if c := e.GetAConst(); c != nil {
		if c.Isnull {
			return -1, nil, ""
		}
		v, _ := constVal(c)
		if v.kind != kInt {
			return 0, nil, what + " " + exprText(n) + " is not an integer"
		}
		if v.i < 0 {
			return 0, nil, what + " must not be negative"
		}
		return v.i, nil, ""
	}
	if e.GetParamRef() != nil {
		s := a.srcOf(n, keyCol{col: what, typ: KeyInt8}, "", false)
		if s != nil {
			s.col = what
			return -1, s, ""
		}
	}
	return 0, nil, what + " " + exprText(n) + " must be a constant or a parameter to be merged"
}

// sortColumn resolves an ORDER BY term to a select-list position, as
// Postgres does: a position number, an output column name, or an
// expression equal to a select-list entry.
func (a *analyzer) sortColumn(sb *pg.SortBy, targets []*pg.ResTarget, starAt int, t *topInfo) (int, string) {
	n := sb.Node
	notListed := fmt.Sprintf("ORDER BY %s is not in the select list: add it to the select list (pgshard merges by result columns)", exprText(n))
	// x COLLATE "C" orders bytewise, which is how the engine merges text:
	// resolve it as x. Any other collation would need the server's rules.
	if cc := n.GetCollateClause(); cc != nil {
		if !bytewiseCollation(cc.Collname) {
			return 0, fmt.Sprintf("ORDER BY %s: only COLLATE \"C\" (bytewise) can be merged across shards", exprText(n))
		}
		n = cc.Arg
	}
	if a.lit.has(n) {
		a.lit.taintf("a literal in ORDER BY (a constant there is a position)")
	}
	if c := n.GetAConst(); c != nil {
		v, _ := constVal(c)
		if v.kind != kInt || v.i < 1 || int(v.i) > len(targets) {
			return 0, "ORDER BY " + exprText(n) + " is not a select-list position"
		}
		if int(v.i)-1 >= starAt {
			return 0, "ORDER BY " + itoa(v.i) + " is a position after *: name the columns in the select list"
		}
		return int(v.i) - 1, ""
	}
	if cr := n.GetColumnRef(); cr != nil && len(cr.Fields) == 1 && cr.Fields[0].GetString_() != nil {
		if i := a.targetByName(targets[:starAt], strName(cr.Fields[0])); i >= 0 {
			return i, ""
		} else if i == -2 {
			return 0, "ORDER BY " + exprText(n) + " is ambiguous"
		}
	}
	for i := 0; i < starAt; i++ {
		if a.sameExpr(n, targets[i].Val) || sameColumn(n, targets[i].Val, t) {
			return i, ""
		}
	}
	if starAt < len(targets) {
		return 0, fmt.Sprintf("ORDER BY %s: with * in the select list the column's position is unknown; name the columns", exprText(n))
	}
	return 0, notListed
}

// bytewiseCollation reports whether a COLLATE name (possibly
// schema-qualified) is "C" or "POSIX": byte order, as the merge compares.
func bytewiseCollation(name []*pg.Node) bool {
	if len(name) == 0 {
		return false
	}
	c := strName(name[len(name)-1])
	return c == "C" || c == "POSIX"
}

// targetByName finds the select-list entry with output name name: its
// index, -1 if none, -2 if several (that are not the same expression).
func (a *analyzer) targetByName(targets []*pg.ResTarget, name string) int {
	found := -1
	for i, rt := range targets {
		n := rt.Name
		if n == "" {
			n = colName(rt.Val)
		}
		if n != name {
			continue
		}
		if found >= 0 && !a.sameExpr(targets[found].Val, rt.Val) {
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

// sameExpr is sameExpr for the analysis: comparing an expression that
// holds a literal slot would compare placeholders, not the literals.
func (a *analyzer) sameExpr(x, y *pg.Node) bool {
	if a.lit.has(x) || a.lit.has(y) {
		a.lit.taintf("an expression with a literal is compared with another (ORDER BY / GROUP BY / output names)")
	}
	return sameExpr(x, y)
}

// sameExpr compares two expressions, ignoring where they are in the text.
func sameExpr(x, y *pg.Node) bool {
	if x == nil || y == nil {
		return x == y
	}
	cx, cy := proto.Clone(x).(*pg.Node), proto.Clone(y).(*pg.Node)
	clearLocations(cx.ProtoReflect())
	clearLocations(cy.ProtoReflect())
	return proto.Equal(cx, cy)
}

func clearLocations(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Name() == "location" && fd.Kind() == protoreflect.Int32Kind:
			m.Clear(fd)
		case fd.Message() != nil && fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				clearLocations(l.Get(i).Message())
			}
		case fd.Message() != nil && !fd.IsMap():
			clearLocations(v.Message())
		}
		return true
	})
}

// topLevelCalls reports window functions and aggregates in ns, outside
// subqueries.
func topLevelCalls(ns []*pg.Node) (window, aggregate bool) {
	for _, n := range ns {
		inspect(n, func(x *pg.Node) bool {
			if x.GetSubLink() != nil {
				return false
			}
			window = window || isWindow(x)
			aggregate = aggregate || isAggregate(x)
			return true
		})
	}
	return window, aggregate
}

func isWindow(n *pg.Node) bool {
	fc := n.GetFuncCall()
	return fc != nil && fc.Over != nil
}

func isAggregate(n *pg.Node) bool {
	fc := n.GetFuncCall()
	if fc == nil || fc.Over != nil {
		return false
	}
	_, name := funcName(fc)
	return aggregates[name] || fc.AggStar || fc.AggDistinct || fc.AggWithinGroup || len(fc.AggOrder) > 0
}

// aggOf says how a select-list entry of an aggregate query combines.
func aggOf(n *pg.Node) (Agg, string) {
	e := n
	for e.GetTypeCast() != nil {
		e = e.GetTypeCast().Arg
	}
	if e.GetAConst() != nil || e.GetParamRef() != nil {
		return AggNone, ""
	}
	fc := n.GetFuncCall()
	if fc == nil || !isAggregate(n) {
		return 0, "cannot be merged: with aggregates, select bare count(), sum(), min() or max() (or constants)"
	}
	_, name := funcName(fc)
	switch {
	case fc.AggDistinct:
		return 0, "cannot be merged: " + name + "(DISTINCT ...) would count values once per shard"
	case fc.AggWithinGroup:
		return 0, "cannot be merged: ordered-set aggregates need every shard's rows at once"
	}
	switch name {
	case "count", "sum":
		return AggSum, ""
	case "min":
		return AggMin, ""
	case "max":
		return AggMax, ""
	case "avg":
		return 0, "cannot be merged: avg() of averages is wrong; select sum(x) and count(x) and divide"
	}
	return 0, "cannot be merged: " + name + "() needs every shard's rows at once (count, sum, min and max merge)"
}

// parseVersion is the parse-tree version Deparse expects (the grammar's
// PG_VERSION_NUM), taken from a parse.
var parseVersion = sync.OnceValue(func() int32 {
	res, err := pg.Parse("SELECT 1")
	if err != nil {
		return 0
	}
	return res.Version
})

// deparse renders one statement as SQL.
func deparse(n *pg.Node) (string, error) {
	return pg.Deparse(&pg.ParseResult{Version: parseVersion(), Stmts: []*pg.RawStmt{{Stmt: n}}})
}
