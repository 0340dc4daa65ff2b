package route

import (
	"fmt"
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// groupPlan plans a merge of per-shard partial groups (GroupMerge): the
// group keys, how each merged column is computed from the shards' partial
// aggregates (count, sum, min, max, avg as sum and count, string_agg and
// count(DISTINCT x) from arrays), HAVING as a condition on merged values,
// and ORDER BY over merged columns. It owns the GroupMerge it fills; the
// per-shard columns it needs go to cols.
type groupPlan struct {
	g    *GroupMerge
	sel  *selectList
	cols *shardColumns
}

// groupKeys resolves the GROUP BY items into expressions, as Postgres
// does: a position is its select-list entry; a bare name that is also an
// output name is refused (pgshard cannot tell which one Postgres takes).
func (gp *groupPlan) groupKeys() ([]*pg.Node, string) {
	var keys []*pg.Node
	for _, item := range gp.sel.s.GroupClause {
		e := item
		if c := item.GetAConst(); c != nil {
			v, _ := constVal(c)
			if v.kind != kInt || v.i < 1 || int(v.i) > len(gp.sel.targets) {
				return nil, "GROUP BY " + exprText(item) + " is not a select-list position"
			}
			e = gp.sel.targets[v.i-1].Val
			if containsAggregate(e) {
				return nil, "GROUP BY " + exprText(item) + " names an aggregate"
			}
		} else if cr := item.GetColumnRef(); cr != nil && len(cr.Fields) == 1 {
			// A bare name is an input column first, an output name only if
			// there is no such input column: pgshard cannot tell which.
			name := strName(cr.Fields[0])
			for _, rt := range gp.sel.targets {
				if rt.Name == name && !gp.sel.rd.sameExpr(rt.Val, item) {
					return nil, fmt.Sprintf("GROUP BY %s: it is the name of a select-list entry and maybe of an input column; group by the expression or its position", name)
				}
			}
		}
		keys = append(keys, e)
	}
	return keys, ""
}

// groupOutputs plans how each select-list entry is merged (an aggregate
// of the shards' partial values, or a group key).
func (gp *groupPlan) groupOutputs() string {
	g := gp.g
	for _, rt := range gp.sel.targets {
		out, why := gp.output(rt.Val, rt.Name, true)
		if why != "" {
			return why
		}
		g.Outputs = append(g.Outputs, out)
	}
	g.Visible = len(g.Outputs)
	return ""
}

// groupHaving plans HAVING as a condition the merge evaluates on merged
// groups.
func (gp *groupPlan) groupHaving() string {
	g := gp.g
	s, lit := gp.sel.s, gp.sel.rd.lit
	if s.HavingClause == nil {
		return ""
	}
	if lit.has(s.HavingClause) {
		lit.taintf("a literal in HAVING (the merge compares with it)")
	}
	c, why := gp.cond(s.HavingClause)
	if why != "" {
		return "HAVING cannot be merged: " + why
	}
	g.Having = c
	if hasParam(s.HavingClause) {
		// Keep its parameters typed as one database types them.
		gp.cols.add(s.HavingClause)
	}
	return ""
}

// groupOrder plans ORDER BY over the merged columns (hidden ones for
// expressions not in the select list). It returns the order in terms of
// the group keys when the ORDER BY is by group keys only (the merge then
// streams), else nil and sets g.SortAfter.
func (gp *groupPlan) groupOrder(keys []*pg.Node) ([]SortKey, string) {
	g := gp.g
	var keyOrder []SortKey // in terms of keys
	streaming := true
	for _, n := range gp.sel.s.SortClause {
		sb := n.GetSortBy()
		if sb == nil {
			return nil, "an ORDER BY term cannot be merged"
		}
		k, why := sortKey(sb)
		if why != "" {
			return nil, why
		}
		if hasParam(sb.Node) {
			return nil, "ORDER BY " + exprText(sb.Node) + ": a parameter in ORDER BY of a merged aggregate is not supported"
		}
		col, found, why := gp.sel.sortColumn(sb, len(gp.sel.targets))
		if why != "" {
			return nil, why
		}
		if !found {
			e := sb.Node
			if cc := e.GetCollateClause(); cc != nil {
				e = cc.Arg
			}
			if c := e.GetAConst(); c != nil {
				return nil, "ORDER BY " + exprText(e) + " is not a select-list position"
			}
			out, why := gp.output(e, "", false)
			if why != "" {
				return nil, why
			}
			col = len(g.Outputs)
			g.Outputs = append(g.Outputs, out)
		}
		k.Column = col
		g.OrderBy = append(g.OrderBy, k)
		ki := gp.keyOf(g.Outputs[col], keys, col)
		if ki < 0 {
			streaming = false
		} else {
			kk := k
			kk.Column = ki
			keyOrder = append(keyOrder, kk)
		}
	}
	if !streaming {
		keyOrder = nil
		g.SortAfter = len(g.OrderBy) > 0
	}
	return keyOrder, ""
}

// groupSortKeys adds the group keys as hidden columns and the order every
// shard sorts them in (g.Keys): keyOrder's first, then the other keys.
func (gp *groupPlan) groupSortKeys(keys []*pg.Node, keyOrder []SortKey) {
	g := gp.g
	keyCol := make([]int, len(keys))
	for i, e := range keys {
		keyCol[i] = gp.cols.add(e)
	}
	used := map[int]bool{}
	for _, k := range keyOrder {
		used[k.Column] = true
	}
	for i := range keys {
		if !used[i] {
			keyOrder = append(keyOrder, SortKey{Column: i})
		}
	}
	for _, k := range keyOrder {
		col := keyCol[k.Column]
		if k.Bytewise {
			// Sort the shards' rows as the merge compares them.
			col = gp.cols.add(&pg.Node{Node: &pg.Node_CollateClause{CollateClause: &pg.CollateClause{Arg: keys[k.Column],
				Collname: []*pg.Node{pg.MakeStrNode("C")}, Location: -1}}})
		}
		g.Keys = append(g.Keys, SortKey{Column: col, Desc: k.Desc, NullsFirst: k.NullsFirst, Bytewise: k.Bytewise})
	}
}

// keyOf returns the group key an output is (its expression equals the
// key's), -1 if none.
func (gp *groupPlan) keyOf(o Output, keys []*pg.Node, col int) int {
	if o.Agg != AggNone || o.Cast != CastNone || o.Hidden {
		return -1
	}
	e := gp.cols.hidden[o.Column]
	for i, k := range keys {
		if gp.sel.rd.sameExpr(e, k) || sameColumn(e, k, gp.sel.t) {
			return i
		}
	}
	return -1
}

// output plans one merged column: an aggregate (possibly cast), or any
// other expression (a group key or a constant: the first shard's value).
// alias is the client's name for it; visible says the client sees it
// (the shards then name it as the client's statement does).
func (gp *groupPlan) output(e *pg.Node, alias string, visible bool) (Output, string) {
	spec, isAgg, why := gp.aggSpec(e)
	if why != "" {
		return Output{}, fmt.Sprintf("%s %s", exprText(e), why)
	}
	if spec.agg == AggStringAgg || spec.agg == AggCountDistinct {
		return gp.arrayOutput(spec, e, alias, visible), ""
	}
	name := alias
	if name == "" {
		name = colName(e)
	}
	if !visible {
		alias = ""
	}
	if !isAgg {
		if containsAggregate(e) {
			return Output{}, fmt.Sprintf("%s: an expression of aggregates cannot be merged (select the aggregates themselves; a cast of one is fine)", exprText(e))
		}
		return Output{Agg: AggNone, Column: gp.cols.put(e, alias, visible), Name: name}, ""
	}
	out := Output{Agg: spec.agg, Cast: spec.cast, Name: name, Count: spec.count}
	if spec.agg == AggAvg {
		sum := proto.Clone(spec.call).(*pg.FuncCall)
		sum.Funcname = []*pg.Node{pg.MakeStrNode("pg_catalog"), pg.MakeStrNode("sum")}
		cnt := proto.Clone(spec.call).(*pg.FuncCall)
		cnt.Funcname = []*pg.Node{pg.MakeStrNode("pg_catalog"), pg.MakeStrNode("count")}
		if visible && alias == "" {
			alias = name // the shards would name the sum "sum"
		}
		out.Column = gp.cols.put(&pg.Node{Node: &pg.Node_FuncCall{FuncCall: sum}}, alias, visible)
		gp.cols.add(&pg.Node{Node: &pg.Node_FuncCall{FuncCall: cnt}})
		return out, ""
	}
	out.Column = gp.cols.put(&pg.Node{Node: &pg.Node_FuncCall{FuncCall: spec.call}}, alias, visible)
	if len(spec.call.Args) == 1 {
		if cc := spec.call.Args[0].GetCollateClause(); cc != nil && bytewiseCollation(cc.Collname) {
			out.Bytewise = true
		}
	}
	return out, ""
}

// arrayOutput plans a merged aggregate whose partial is an array of the
// shard's values (string_agg ordered by its value, count(DISTINCT x)):
// the shards name the column as the client's statement names the
// aggregate, the merge computes it from the union of the arrays.
func (gp *groupPlan) arrayOutput(spec aggSpec, e *pg.Node, alias string, visible bool) Output {
	name := alias
	if name == "" {
		name = colName(e)
	}
	if !visible {
		alias = ""
	} else if alias == "" {
		alias = name // the shards would name the array "array_agg"
	}
	return Output{Agg: spec.agg, Cast: spec.cast, Name: name, Sep: spec.sep, Desc: spec.desc, Distinct: spec.distinct,
		Bytewise: spec.bytewise, Column: gp.cols.put(&pg.Node{Node: &pg.Node_FuncCall{FuncCall: spec.call}}, alias, visible)}
}

// aggSpec is a merged aggregate: the aggregate call and what follows.
type aggSpec struct {
	agg   Agg
	cast  Cast
	count bool         // count(...): an AggSum that never adds up intervals
	call  *pg.FuncCall // the call to send to the shards (sum/count/min/max, array_agg)
	// string_agg: the separator, the order of its values, DISTINCT, and
	// whether the order is bytewise (ORDER BY x COLLATE "C").
	sep                      string
	desc, distinct, bytewise bool
}

// aggSpec reads an aggregate call, possibly under one cast. isAgg false:
// e is not an aggregate call (it may contain some); why: it is one that
// cannot be merged.
func (gp *groupPlan) aggSpec(e *pg.Node) (aggSpec, bool, string) {
	var spec aggSpec
	n := e
	if !containsAggregate(e) {
		return spec, false, ""
	}
	if tc := n.GetTypeCast(); tc != nil {
		c, ok := castOf(tc.TypeName)
		if !isAggregate(tc.Arg) && tc.Arg.GetTypeCast() == nil {
			return spec, false, "" // an expression of aggregates, under a cast
		}
		if !ok || tc.Arg.GetTypeCast() != nil {
			return spec, false, "casts a merged aggregate to a type pgshard does not compute (it casts to int2, int4, int8, numeric, float4, float8 or text)"
		}
		spec.cast, n = c, tc.Arg
	}
	fc := n.GetFuncCall()
	if fc == nil || !isAggregate(n) {
		return spec, false, ""
	}
	schema, name := funcName(fc)
	if schema != "" && schema != "pg_catalog" {
		return spec, false, "is not a built-in aggregate"
	}
	if name == "string_agg" {
		return gp.stringAgg(spec, fc)
	}
	switch {
	case fc.AggWithinGroup:
		return spec, false, "is an ordered-set aggregate: it needs every shard's rows at once"
	case len(fc.AggOrder) > 0:
		return spec, false, "orders its input: it needs every shard's rows at once"
	case fc.FuncVariadic:
		return spec, false, "cannot be merged"
	}
	switch name {
	case "count":
		spec.agg, spec.count = AggSum, true
	case "sum":
		spec.agg = AggSum
	case "min":
		spec.agg = AggMin
	case "max":
		spec.agg = AggMax
	case "avg":
		spec.agg = AggAvg
	case "bool_and", "every", "bool_or":
		// false < true: AND over the shards' values is their least, OR
		// their greatest (a shard without rows answers NULL, which the
		// merge skips as it skips NULLs of min and max).
		spec.agg = AggMin
		if name == "bool_or" {
			spec.agg = AggMax
		}
		if spec.cast != CastNone {
			return spec, false, "casts a merged boolean aggregate (pgshard casts only numbers)"
		}
	default:
		return spec, false, "needs every shard's rows at once (count, sum, avg, min, max, bool_and, bool_or and every merge)"
	}
	if fc.AggDistinct && spec.agg != AggMin && spec.agg != AggMax {
		// Additive only over a sharding key: each value is on one shard.
		// Any keyed table's key column will do, nullable (an outer join's
		// side) or read through a derived table or CTE: a non-NULL value
		// of it comes only from the shard the value places, and NULLs
		// are not counted.
		if len(fc.Args) != 1 {
			return spec, false, "counts distinct values of several shards"
		}
		if fc.Args[0].GetRowExpr() != nil {
			// A row's values are records, whose arrays the merge cannot
			// read (answered in two stages instead).
			return spec, false, "counts distinct rows (a, b): their record values are not merged"
		}
		o, ok := gp.sel.t.sc.keyOrigin(fc.Args[0])
		if (!ok || o.ref == nil) && name == "count" && !fc.AggStar {
			// Each shard sends its distinct values; the merge counts
			// the distinct values of their union.
			spec.agg = AggCountDistinct
			spec.call = arrayAggCall(fc, nil)
			return spec, true, ""
		}
		if !ok || o.ref == nil {
			return spec, false, fmt.Sprintf("would count a value once per shard: %s(DISTINCT ...) merges only over a sharding key (count(DISTINCT x) merges over any x)", name)
		}
	}
	if !fc.AggStar && len(fc.Args) != 1 {
		return spec, false, "cannot be merged"
	}
	spec.call = proto.Clone(fc).(*pg.FuncCall)
	return spec, true, ""
}

// stringAgg reads string_agg(x, 'sep' ORDER BY x): merged when the
// values are ordered by themselves (equal values are then equal text, and
// their order among themselves does not show), the separator a string
// constant. Each shard sends array_agg([DISTINCT] x ORDER BY x) in binary;
// the merge orders the union of the arrays (bytewise: the C collation, or
// ORDER BY x COLLATE "C"; else the merge refuses at run time), skips
// NULLs (as string_agg does) and joins the values with the separator.
func (gp *groupPlan) stringAgg(spec aggSpec, fc *pg.FuncCall) (aggSpec, bool, string) {
	const why = "is merged only as string_agg(x, 'separator' ORDER BY x [COLLATE \"C\"]): ordered by its own values, with a string constant as the separator"
	if spec.cast != CastNone {
		return spec, false, "casts a merged string_agg (select it as it is)"
	}
	if fc.AggWithinGroup || fc.FuncVariadic || fc.AggStar || len(fc.Args) != 2 || len(fc.AggOrder) != 1 {
		return spec, false, why
	}
	if gp.sel.rd.lit.has(fc.Args[1]) {
		gp.sel.rd.lit.taintf("a literal string_agg separator (the merge joins the values with it)")
		return spec, false, why
	}
	c := fc.Args[1].GetAConst()
	if c == nil || c.Isnull {
		return spec, false, why
	}
	v, _ := constVal(c)
	if v.kind != kText {
		return spec, false, why
	}
	sb := fc.AggOrder[0].GetSortBy()
	if sb == nil {
		return spec, false, why
	}
	k, w := sortKey(sb)
	if w != "" {
		return spec, false, w
	}
	node := sb.Node
	if cc := node.GetCollateClause(); cc != nil {
		if !bytewiseCollation(cc.Collname) {
			return spec, false, "orders by a collation other than \"C\": only the C collation (bytewise) is merged across shards"
		}
		node = cc.Arg
	}
	arg := fc.Args[0]
	if cc := arg.GetCollateClause(); cc != nil {
		arg = cc.Arg // the value's collation does not change its text
	}
	if otherCollation(node) || !gp.sel.rd.sameExpr(node, arg) {
		return spec, false, why
	}
	spec.agg, spec.sep, spec.desc, spec.distinct, spec.bytewise = AggStringAgg, v.s, k.Desc, fc.AggDistinct, k.Bytewise
	spec.call = arrayAggCall(fc, fc.AggOrder)
	return spec, true, ""
}

// cond plans a HAVING condition over merged values.
func (gp *groupPlan) cond(n *pg.Node) (*Cond, string) {
	switch x := n.GetNode().(type) {
	case *pg.Node_BoolExpr:
		c := &Cond{}
		switch x.BoolExpr.Boolop {
		case pg.BoolExprType_AND_EXPR:
			c.Op = CondAnd
		case pg.BoolExprType_OR_EXPR:
			c.Op = CondOr
		case pg.BoolExprType_NOT_EXPR:
			c.Op = CondNot
		}
		for _, arg := range x.BoolExpr.Args {
			k, why := gp.cond(arg)
			if why != "" {
				return nil, why
			}
			c.Kids = append(c.Kids, k)
		}
		return c, ""
	case *pg.Node_NullTest:
		l, why := gp.operand(x.NullTest.Arg)
		if why != "" {
			return nil, why
		}
		op := CondIsNull
		if x.NullTest.Nulltesttype == pg.NullTestType_IS_NOT_NULL {
			op = CondNotNull
		}
		if x.NullTest.Argisrow {
			return nil, "a row IS NULL test is not supported"
		}
		return &Cond{Op: op, L: l}, ""
	case *pg.Node_AExpr:
		ae := x.AExpr
		if ae.Kind != pg.A_Expr_Kind_AEXPR_OP || len(ae.Name) == 0 || ae.Lexpr == nil {
			return nil, exprText(n) + " is not a comparison"
		}
		if len(ae.Name) > 1 && strName(ae.Name[0]) != "pg_catalog" {
			return nil, exprText(n) + " uses an operator pgshard does not evaluate"
		}
		op := strName(ae.Name[len(ae.Name)-1])
		switch op {
		case "=", "<>", "<", "<=", ">", ">=":
		case "!=":
			op = "<>"
		default:
			return nil, "the operator " + op + " is not evaluated by pgshard (it evaluates =, <>, <, <=, >, >=, AND, OR, NOT, IS [NOT] NULL)"
		}
		l, why := gp.operand(ae.Lexpr)
		if why != "" {
			return nil, why
		}
		r, why := gp.operand(ae.Rexpr)
		if why != "" {
			return nil, why
		}
		if l.Output < 0 && r.Output < 0 {
			return nil, exprText(n) + " compares no merged value"
		}
		return &Cond{Op: CondCmp, Cmp: op, L: l, R: r}, ""
	}
	return nil, exprText(n) + " is not a comparison"
}

// operand plans one side of a HAVING comparison.
func (gp *groupPlan) operand(n *pg.Node) (Operand, string) {
	e := n
	if c := e.GetAConst(); c != nil {
		if c.Isnull {
			return Operand{Output: -1, Null: true}, ""
		}
		v, _ := constVal(c)
		switch v.kind {
		case kInt:
			return Operand{Output: -1, Const: strconv.FormatInt(v.i, 10), ConstKind: "int"}, ""
		case kNum:
			return Operand{Output: -1, Const: v.s, ConstKind: "numeric"}, ""
		case kText:
			return Operand{Output: -1, Const: v.s, ConstKind: "text"}, ""
		}
		return Operand{}, exprText(n) + " is a constant pgshard does not compare"
	}
	if pr := e.GetParamRef(); pr != nil {
		return Operand{Output: -1, Param: int(pr.Number)}, ""
	}
	if e.GetTypeCast() != nil && !isAggregate(e.GetTypeCast().Arg) {
		return Operand{}, exprText(n) + ": a cast in HAVING is evaluated only on an aggregate"
	}
	// A merged value: reuse a select-list column equal to it.
	g := gp.g
	for i := 0; i < g.Visible; i++ {
		if gp.sel.rd.sameExpr(gp.sel.targets[i].Val, e) {
			return Operand{Output: i}, ""
		}
	}
	out, why := gp.output(e, "", false)
	if why != "" {
		return Operand{}, why
	}
	g.Outputs = append(g.Outputs, out)
	return Operand{Output: len(g.Outputs) - 1}, ""
}

// otherCollation reports a COLLATE other than "C" or "POSIX" in n.
func otherCollation(n *pg.Node) bool {
	found := false
	inspect(n, func(x *pg.Node) bool {
		if cc := x.GetCollateClause(); cc != nil && !bytewiseCollation(cc.Collname) {
			found = true
		}
		return !found
	})
	return found
}

// arrayAggCall is pg_catalog.array_agg of fc's first argument, with fc's
// DISTINCT and FILTER and the given ORDER BY.
func arrayAggCall(fc *pg.FuncCall, order []*pg.Node) *pg.FuncCall {
	c := proto.Clone(fc).(*pg.FuncCall)
	c.Funcname = []*pg.Node{pg.MakeStrNode("pg_catalog"), pg.MakeStrNode("array_agg")}
	c.Args = c.Args[:1]
	c.AggOrder = nil
	for _, o := range order {
		c.AggOrder = append(c.AggOrder, proto.Clone(o).(*pg.Node))
	}
	return c
}

// castOf maps a cast's type name to a Cast the merge computes.
func castOf(tn *pg.TypeName) (Cast, bool) {
	if tn == nil || len(tn.Names) == 0 || len(tn.Typmods) > 0 || len(tn.ArrayBounds) > 0 || tn.Setof || tn.PctType {
		return 0, false
	}
	if len(tn.Names) > 1 && strName(tn.Names[0]) != "pg_catalog" {
		return 0, false
	}
	switch strName(tn.Names[len(tn.Names)-1]) {
	case "int2":
		return CastInt2, true
	case "int4":
		return CastInt4, true
	case "int8":
		return CastInt8, true
	case "numeric", "decimal":
		return CastNumeric, true
	case "float4":
		return CastFloat4, true
	case "float8":
		return CastFloat8, true
	case "text":
		return CastText, true
	}
	return 0, false
}

// describe renders an output for explanations.
func (o Output) describe() string {
	var s string
	switch o.Agg {
	case AggNone:
		s = "= first shard's value"
	case AggSum:
		s = "= sum of the shards'"
	case AggMin:
		s = "= least of the shards'"
	case AggMax:
		s = "= greatest of the shards'"
	case AggAvg:
		s = "= sum of the shards' sums / sum of their counts"
	case AggStringAgg:
		s = "= the shards' arrays of values merged in order, joined by " + quoteKey(o.Sep)
		if o.Distinct {
			s = "= the shards' arrays of distinct values merged in order without duplicates, joined by " + quoteKey(o.Sep)
		}
	case AggCountDistinct:
		s = "= count of the distinct values of the shards' arrays"
	}
	if o.Cast != CastNone {
		s += ", then ::" + o.Cast.String()
	}
	return s
}

// describe renders a condition for explanations.
func (c *Cond) describe() string {
	switch c.Op {
	case CondAnd, CondOr:
		var parts []string
		for _, k := range c.Kids {
			parts = append(parts, "("+k.describe()+")")
		}
		if c.Op == CondAnd {
			return strings.Join(parts, " AND ")
		}
		return strings.Join(parts, " OR ")
	case CondNot:
		return "NOT (" + c.Kids[0].describe() + ")"
	case CondIsNull:
		return c.L.describe() + " IS NULL"
	case CondNotNull:
		return c.L.describe() + " IS NOT NULL"
	}
	return c.L.describe() + " " + c.Cmp + " " + c.R.describe()
}

func (o Operand) describe() string {
	switch {
	case o.Output >= 0:
		return fmt.Sprintf("column %d", o.Output+1)
	case o.Null:
		return "NULL"
	case o.Param > 0:
		return "$" + strconv.Itoa(o.Param)
	case o.ConstKind == "text":
		return quoteKey(o.Const)
	}
	return o.Const
}
