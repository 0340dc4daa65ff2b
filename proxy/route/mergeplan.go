package route

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"

	"github.com/pgshard/pgshard/shardmap"
)

// The fan-out merge planner: whether the top-level SELECT, read from every
// shard, can be merged into the answer one database would give, and how.
// It is a whitelist: a shape is merged only when the merge provably gives
// that answer; anything else is refused with the reason (pgshard refuses
// rather than answer wrongly).
//
// Rows (the per-shard rows are the client's rows):
//   - plain rows, concatenated;
//   - ORDER BY select-list columns (position, output name or an equal
//     expression) or other expressions of the input columns (sent as
//     hidden columns), k-way merged;
//   - LIMIT/OFFSET: each shard returns its first n+m rows (64-bit,
//     saturating; LIMIT ALL when n+m does not fit), the merge skips m and
//     keeps n;
//   - GROUP BY or DISTINCT including a sharding key of a table that is not
//     on the nullable side of an outer join: every group is on one shard;
//   - DISTINCT without a key: each shard sorts by every column, the merge
//     drops adjacent duplicates.
//
// Groups (the per-shard rows are partial groups, merged by the proxy):
//   - count, sum, min, max, avg (as sum and count), count/sum(DISTINCT key)
//     (additive: a key's rows are on one shard), min/max(DISTINCT x),
//     FILTER (WHERE ...), each possibly under one cast to int2, int4,
//     int8, numeric, float4, float8 or text;
//   - count(DISTINCT x) of a non-key and string_agg(x, 'sep' ORDER BY x)
//     from the shards' array_agg of their values (AggCountDistinct,
//     AggStringAgg: the merge counts / orders the union);
//   - GROUP BY any expressions (hidden key columns, sorted per shard, then
//     merged), HAVING of comparisons of merged aggregates, group keys,
//     constants and parameters, ORDER BY of the merged columns, LIMIT and
//     OFFSET after the merge.
//
// A VALUES list kept whole by the statement's one outer join on a sharding
// key is split by shard (valuesplit.go: Merge.ShardSQL).
//
// A top-level UNION [ALL] is merged by setop.go's rules.
//
// Refused: window functions, INTERSECT/EXCEPT, DISTINCT ON, GROUPING SETS,
// FETCH WITH TIES over aggregates or with a parameter count, other
// aggregates (string_agg ordered otherwise) and expressions of aggregates, ORDER
// BY ... USING, collations other than "C", and reads of sharded tables
// through derived tables or subqueries whose result needs every shard
// (see globalSelect).
func (a *analyzer) mergePlan() (*mergePlan, string) {
	t := a.top
	if t == nil {
		return nil, "only a plain SELECT can be fanned out and merged"
	}
	if t.setop {
		return setOpPlan(a, t) // setop.go
	}
	anchors, why := a.mergeableFrom(t)
	if why != "" {
		return nil, why
	}
	m := &merger{sel: newSelectList(t, anchors, &a.rd), cols: shardColumns{stmt: t.sel}, split: a.cov.split, smap: a.m}
	s := t.sel
	var c topCalls
	c.window, c.agg = topLevelCalls(s.TargetList)
	c.sortWindow, c.sortAgg = topLevelCalls(s.SortClause)
	_, c.havingAgg = topLevelCalls([]*pg.Node{s.HavingClause})
	if why := m.unmergedWindowsOrTies(c); why != "" {
		return nil, why
	}
	distinct, why := m.distinctOnShape(c)
	if why != "" {
		return nil, why
	}
	keyGrouped, why := m.groupedByKey()
	if why != "" {
		return nil, why
	}
	keyDistinct := false
	if distinct {
		for i := range m.sel.targets {
			keyDistinct = keyDistinct || m.sel.targetKey(i)
		}
	}
	aggregated := c.aggregates() || len(s.GroupClause) > 0 || s.HavingClause != nil
	switch {
	case keyGrouped || !aggregated:
		// Each group (if any) lives on one shard: per-shard rows are rows.
		why = m.rows(distinct && !keyDistinct && !keyGrouped, keyGrouped)
	case distinct:
		return nil, "SELECT DISTINCT with aggregates or GROUP BY without a sharding key cannot be merged"
	default:
		why = m.groups()
	}
	if why != "" {
		return nil, why
	}
	return m.finish()
}

// copyPlan plans COPY ... TO STDOUT of every shard (co: its options):
// each shard runs the statement as the client wrote it and the engine
// sends their outputs one after the other. That is the table's rows for
// COPY table, and for COPY (query) when the query's merge is the shards'
// rows as they come, in any order: no ORDER BY, LIMIT, DISTINCT or
// aggregate, and no text rewritten per shard. Otherwise — and for a
// binary COPY (query) or of a table's listed columns, whose values may
// name types by the shard's numbers — the shards run the query and the
// engine writes the merged rows as the COPY (copyRows).
func (a *analyzer) copyPlan(co *CopyOut) (*mergePlan, string) {
	cp := &mergePlan{merge: Merge{Width: -1, Limit: -1, Offset: -1, CopyOut: co},
		desc: "each shard's COPY output in turn"}
	if a.top == nil {
		return cp, "" // COPY table TO
	}
	mp, why := a.mergePlan()
	if mp == nil {
		return nil, "COPY (query) TO: " + why
	}
	m := &mp.merge
	if m.SQL != "" || m.ShardSQL != nil || m.Hidden > 0 || len(m.OrderBy) > 0 || m.Distinct ||
		m.DistinctOn > 0 || m.Limit >= 0 || m.Offset >= 0 || mp.limit != nil || mp.offset != nil ||
		m.Groups != nil || m.Stages != nil {
		return copyRows(a, co, mp) // copyrows.go
	}
	if a.copyQuery != nil && copyBinary(a.copyOpts) {
		// A binary value of a user's array, composite or record names
		// its types by the shard's numbers: the rows are told in the
		// catalog's (engine/relabelvalues.go) and pgshard writes them,
		// or where it cannot, each shard's output passes (Passthrough).
		pass := *cp
		pass.merge.CopyOut = &CopyOut{Header: co.Header}
		if rp, why := copyRows(a, co, mp); rp != nil {
			co.Passthrough = &pass.merge
			return rp, why
		}
		return &pass, ""
	}
	return cp, ""
}

// topCalls says where the top-level SELECT calls window functions and
// aggregates: in its select list, its ORDER BY, its HAVING.
type topCalls struct {
	window, agg, sortWindow, sortAgg, havingAgg bool
}

func (c topCalls) aggregates() bool { return c.agg || c.sortAgg || c.havingAgg }

// mergeableFrom checks the FROM clause of the top-level SELECT: its
// subqueries and CTEs read no sharded table across shards, it reads a
// sharded table itself, and every row it produces is on one shard (a
// VALUES list joined on the key may be split: valuesplit.go). It returns
// the keyed tables not on the nullable side of an outer join (anchors).
func (a *analyzer) mergeableFrom(t *topInfo) ([]*tref, string) {
	s := t.sel
	if why := a.cov.fromLocal(s.FromClause, t.sc); why != "" {
		return nil, "a subquery or CTE in FROM reads sharded tables: " + why
	}
	var anchors []*tref
	topRefs := 0
	for _, r := range a.g.refs {
		if r.top && r.role == roleRead && r.sc == t.sc {
			topRefs++
			if !r.nullable {
				anchors = append(anchors, r)
			}
		}
	}
	if topRefs == 0 && !t.derivedSharded {
		return nil, "the sharded tables are read only inside subqueries, whose per-shard results cannot be combined"
	}
	if a.cov.uncovered(s.FromClause, t.sc) != "" {
		// A VALUES list joined on the key may be split by shard (valuesplit.go).
		a.cov.split = a.cov.splitValues(s.FromClause, t.sc, s, a.rd.lit)
	}
	if why := a.cov.uncovered(s.FromClause, t.sc); why != "" {
		// The rule: every row the FROM clause produces must contain a row
		// of a keyed table, which lives on exactly one shard; else that
		// row is produced by every shard (or by none).
		return nil, why
	}
	return anchors, ""
}

// unmergedWindowsOrTies refuses window functions unless PARTITION BY a
// sharding key without aggregates, and FETCH ... WITH TIES together with
// DISTINCT or over aggregates without GROUP BY.
func (m *merger) unmergedWindowsOrTies(c topCalls) string {
	s := m.sel.s
	if len(s.WindowClause) > 0 || c.window || c.sortWindow {
		if c.aggregates() || len(s.GroupClause) > 0 || !m.sel.t.sc.windowsByKey(s, m.sel.isAnchorKey) {
			return "window functions would see only one shard's rows (a window is merged only when it is PARTITION BY a sharding key, without aggregates)"
		}
	}
	if s.LimitOption == pg.LimitOption_LIMIT_OPTION_WITH_TIES && len(s.DistinctClause) > 0 {
		return "FETCH ... WITH TIES is not merged together with DISTINCT"
	}
	if s.LimitOption == pg.LimitOption_LIMIT_OPTION_WITH_TIES && len(s.GroupClause) == 0 && (c.aggregates() || s.HavingClause != nil) {
		// One database may fail it (21000, the tie test evaluating the
		// aggregate again): never answer where it fails.
		return "FETCH ... WITH TIES over aggregates without GROUP BY is not merged"
	}
	return ""
}

// distinctOnShape reports whether the SELECT is DISTINCT (without ON).
// DISTINCT ON a sharding key needs no merge (each key's rows are on one
// shard, which picks its row); DISTINCT ON other expressions is merged
// (m.distinctOn); with aggregates or GROUP BY it is refused.
func (m *merger) distinctOnShape(c topCalls) (distinct bool, why string) {
	s := m.sel.s
	distinct = len(s.DistinctClause) > 0
	if !distinct || len(s.DistinctClause) == 1 && s.DistinctClause[0].GetNode() == nil {
		return distinct, ""
	}
	onKey := false
	for _, d := range s.DistinctClause {
		if o, ok := m.sel.t.sc.keyOrigin(d); ok && m.sel.isAnchorKey(&o) {
			onKey = true
		}
	}
	if c.aggregates() || len(s.GroupClause) > 0 {
		return false, "DISTINCT ON cannot be merged across shards together with aggregates or GROUP BY"
	}
	if !onKey {
		// Each shard sends its first row of each group in the ORDER BY
		// order; the merge keeps the first of a group's rows.
		m.distinctOn = s.DistinctClause
	}
	return false, ""
}

// groupedByKey reports whether GROUP BY includes a sharding key of an
// anchor (then each group lives on one shard); GROUPING SETS are refused.
func (m *merger) groupedByKey() (bool, string) {
	s, lit := m.sel.s, m.sel.rd.lit
	keyGrouped := false
	for _, g := range s.GroupClause {
		if lit.has(g) {
			lit.taintf("a literal in GROUP BY (a constant there is a position)")
		}
		switch {
		case g.GetGroupingSet() != nil:
			return false, "GROUPING SETS / ROLLUP / CUBE cannot be merged across shards"
		case g.GetAConst() != nil:
			if v, _ := constVal(g.GetAConst()); v.kind == kInt && m.sel.targetKey(int(v.i)-1) {
				keyGrouped = true
			}
		default:
			if o, ok := m.sel.t.sc.keyOrigin(g); ok && m.sel.isAnchorKey(&o) {
				keyGrouped = true
			} else if cr := g.GetColumnRef(); cr != nil && len(cr.Fields) == 1 {
				if i := m.sel.targetByName(m.sel.targets[:m.sel.starAt], strName(cr.Fields[0])); m.sel.targetKey(i) {
					keyGrouped = true
				}
			}
		}
	}
	return keyGrouped, ""
}

// merger builds one statement's merge plan.
type merger struct {
	sel *selectList
	// split is the VALUES list split by shard (nil if none); smap the map
	// whose shards it is split over.
	split *valuesSplit
	smap  *shardmap.Map

	mp   mergePlan
	desc []string
	// shard is the per-shard statement being built (a clone of s), nil
	// when every shard runs the client's statement as it is.
	shard *pg.SelectStmt
	// cols are the per-shard select-list entries the plan adds.
	cols shardColumns
	// distinctOn: DISTINCT ON without a sharding key (merged by
	// Merge.DistinctOn).
	distinctOn []*pg.Node
	// keepLimit: the per-shard statement keeps the client's LIMIT and
	// OFFSET (a negative constant, which every shard reports as an error).
	keepLimit bool
}

// clone makes the per-shard statement, once.
func (m *merger) clone() *pg.SelectStmt {
	if m.shard == nil {
		m.shard = proto.Clone(m.sel.s).(*pg.SelectStmt)
	}
	return m.shard
}

// ---- rows ----

// rows plans a merge of rows: dedup is SELECT DISTINCT without a key;
// keyGrouped a GROUP BY on a key (aggregates are then per group, exact).
func (m *merger) rows(dedup, keyGrouped bool) string {
	s, mp := m.sel.s, &m.mp
	for _, n := range s.SortClause {
		sb := n.GetSortBy()
		if sb == nil {
			return "an ORDER BY term cannot be merged"
		}
		k, why := sortKey(sb)
		if why != "" {
			return why
		}
		col, found, why := m.sel.sortColumn(sb, m.sel.starAt)
		if why != "" {
			return why
		}
		if !found {
			e := sb.Node
			switch {
			case dedup:
				return fmt.Sprintf("for SELECT DISTINCT, ORDER BY %s must be in the select list", exprText(e))
			case !keyGrouped && containsAggregate(e):
				return fmt.Sprintf("ORDER BY %s is an aggregate of every shard's rows", exprText(e))
			}
			if c := e.GetAConst(); c != nil {
				return "ORDER BY " + exprText(e) + " is not a select-list position"
			}
			// Sent as a hidden column: the shards sort by it, the proxy
			// merges by it and drops it.
			k.Hidden, col = true, m.cols.add(e)
		}
		k.Column = col
		mp.merge.OrderBy = append(mp.merge.OrderBy, k)
	}
	if m.distinctOn != nil {
		if why := m.distinctOnKeys(); why != "" {
			return why
		}
	}
	if dedup {
		if m.sel.starAt < len(m.sel.targets) {
			return "SELECT DISTINCT * cannot be merged: name the columns"
		}
		// Every shard sorts by every column (the client's order first), so
		// that duplicates from different shards meet.
		used := map[int]bool{}
		for _, k := range mp.merge.OrderBy {
			used[k.Column] = true
		}
		sc := m.clone()
		for i := range m.sel.targets {
			if !used[i] {
				mp.merge.OrderBy = append(mp.merge.OrderBy, SortKey{Column: i})
				sc.SortClause = append(sc.SortClause, pg.MakeSortByNode(pg.MakeAConstIntNode(int64(i+1), -1),
					pg.SortByDir_SORTBY_ASC, pg.SortByNulls_SORTBY_NULLS_LAST, -1))
			}
		}
		mp.merge.Distinct = true
	}
	if len(m.cols.hidden) > 0 {
		sc := m.clone()
		sc.TargetList = append(sc.TargetList, m.cols.targetList()...)
		mp.merge.Hidden = len(m.cols.hidden)
	}
	if len(mp.merge.OrderBy) > 0 {
		var ks []string
		for _, k := range mp.merge.OrderBy {
			ks = append(ks, k.describe("column", m.hiddenName))
		}
		m.desc = append(m.desc, "merge sorted rows by "+strings.Join(ks, ", "))
	} else {
		m.desc = append(m.desc, "concatenate rows")
	}
	switch {
	case keyGrouped:
		m.desc[0] += " (grouped by a sharding key: each group is on one shard)"
	case mp.merge.Distinct:
		m.desc[0] += ", dropping duplicates (DISTINCT: every shard sorts by every column)"
	case mp.merge.DistinctOn > 0:
		m.desc[0] += fmt.Sprintf(", keeping the first row of each DISTINCT ON group (equal on the first %d sort keys)", mp.merge.DistinctOn)
	case len(s.DistinctClause) > 0:
		m.desc[0] += " (DISTINCT includes a sharding key: duplicates are on one shard)"
	}
	return m.limits(true)
}

// distinctOnKeys plans DISTINCT ON without a sharding key: its
// expressions must be the leading ORDER BY terms (as Postgres requires
// when there is an ORDER BY), so that each shard's first row of a group
// is its least in the ORDER BY order, the merged stream meets a group's
// rows together, and the first of them is the one database's answer.
func (m *merger) distinctOnKeys() string {
	const why = "DISTINCT ON without a sharding key is merged only when its expressions are the leading ORDER BY terms (in the select list)"
	type pos struct {
		col   int
		found bool
	}
	ds := make([]pos, len(m.distinctOn))
	for i, d := range m.distinctOn {
		col, found, w := m.sel.sortColumn(&pg.SortBy{Node: d}, m.sel.starAt)
		if w != "" {
			return w
		}
		ds[i] = pos{col, found}
	}
	matched := make([]bool, len(ds))
	n := 0
	for i, sn := range m.sel.s.SortClause {
		sb := sn.GetSortBy()
		k := m.mp.merge.OrderBy[i]
		hit := false
		for j, d := range m.distinctOn {
			if !k.Hidden && ds[j].found && ds[j].col == k.Column || m.sel.rd.sameExpr(sb.Node, d) && ds[j].found && !k.Hidden {
				matched[j], hit = true, true
			}
		}
		if !hit {
			break
		}
		n++
	}
	for _, ok := range matched {
		if !ok {
			return why
		}
	}
	if n == 0 {
		return why
	}
	m.mp.merge.DistinctOn = n
	return ""
}

// hiddenName names hidden column i for descriptions.
func (m *merger) hiddenName(i int) string {
	if m.shard != nil && i < len(m.cols.hidden) {
		return "hidden " + exprText(m.cols.hidden[i])
	}
	return fmt.Sprintf("hidden column %d", i+1)
}

// sortKey reads an ORDER BY term's direction and NULLs placement.
func sortKey(sb *pg.SortBy) (SortKey, string) {
	var k SortKey
	switch sb.SortbyDir {
	case pg.SortByDir_SORTBY_DESC:
		k.Desc = true
	case pg.SortByDir_SORTBY_USING:
		return k, "ORDER BY ... USING an operator cannot be merged"
	}
	switch sb.SortbyNulls {
	case pg.SortByNulls_SORTBY_NULLS_FIRST:
		k.NullsFirst = true
	case pg.SortByNulls_SORTBY_NULLS_LAST:
		k.NullsFirst = false
	default:
		k.NullsFirst = k.Desc // Postgres: NULLs sort as larger than any value
	}
	if cc := sb.Node.GetCollateClause(); cc != nil && bytewiseCollation(cc.Collname) {
		k.Bytewise = true
	}
	return k, ""
}

// describe renders a sort key: "column 2 desc nulls first".
func (k SortKey) describe(what string, hidden func(int) string) string {
	d := "asc"
	if k.Desc {
		d = "desc"
	}
	n := "nulls last"
	if k.NullsFirst {
		n = "nulls first"
	}
	c := fmt.Sprintf("%s %d", what, k.Column+1)
	if k.Hidden && hidden != nil {
		c = hidden(k.Column)
	}
	s := c + " " + d + " " + n
	if k.Bytewise {
		s += " (bytewise)"
	}
	return s
}

// ---- LIMIT / OFFSET ----

// limits reads LIMIT and OFFSET; perShard says the shards may apply the
// LIMIT as LIMIT n+m (Rows), else they get neither (Groups).
func (m *merger) limits(perShard bool) string {
	s, mp := m.sel.s, &m.mp
	lim, limSrc, limWhy := m.sel.rd.limitOf(s.LimitCount, "LIMIT")
	off, offSrc, offWhy := m.sel.rd.limitOf(s.LimitOffset, "OFFSET")
	if limWhy == errNegative || offWhy == errNegative {
		// Every shard rejects it, as one database would (2201W / 2201X).
		m.keepLimit = true
		mp.merge.Limit, mp.merge.Offset = -1, -1
		m.desc = append(m.desc, "every shard reports the negative LIMIT/OFFSET")
		return ""
	}
	if limWhy != "" {
		return limWhy
	}
	if offWhy != "" {
		return offWhy
	}
	if s.LimitOption == pg.LimitOption_LIMIT_OPTION_WITH_TIES {
		// Every shard sends every row; the merge skips m, keeps n and the
		// rows that tie with the n-th. Only constant counts: a parameter
		// may be NULL, which one database refuses.
		if limSrc != nil && limSrc.param > 0 || offSrc != nil && offSrc.param > 0 || limSrc == nil && lim < 0 {
			return "FETCH ... WITH TIES with a parameter count cannot be merged (write the count)"
		}
		if g := mp.merge.Groups; g != nil && len(g.OrderBy) == 0 || g == nil && len(mp.merge.OrderBy) == 0 {
			return "FETCH ... WITH TIES needs ORDER BY"
		}
		mp.merge.Limit, mp.merge.Offset, mp.merge.WithTies = lim, off, true
		mp.limit, mp.offset = limSrc, offSrc
		sc := m.clone()
		sc.LimitCount, sc.LimitOffset, sc.LimitOption = nil, nil, pg.LimitOption_LIMIT_OPTION_DEFAULT
		m.desc = append(m.desc, "then FETCH FIRST "+limitText(lim, limSrc)+" ROWS WITH TIES after OFFSET "+limitText(off, offSrc)+" (every shard sends every row)")
		return ""
	}
	mp.merge.Limit, mp.merge.Offset = lim, off
	mp.limit, mp.offset = limSrc, offSrc
	hasOffset := offSrc != nil || off > 0
	if s.LimitCount != nil || s.LimitOffset != nil {
		l := "LIMIT " + limitText(lim, limSrc)
		if limSrc != nil && limSrc.lit > 0 {
			// Rendered per text (descText).
			l, mp.litDesc = "LIMIT "+litMark, true
		}
		if hasOffset {
			l += " OFFSET " + limitText(off, offSrc)
		}
		m.desc = append(m.desc, "then "+l)
	}
	if !perShard {
		if s.LimitCount != nil || s.LimitOffset != nil {
			sc := m.clone()
			sc.LimitCount, sc.LimitOffset, sc.LimitOption = nil, nil, pg.LimitOption_LIMIT_OPTION_DEFAULT
			// Parameters only LIMIT/OFFSET used stay in the statement, so
			// that the shards type them as one database would (int8).
			for _, src := range []*source{limSrc, offSrc} {
				if src != nil && src.param > 0 {
					m.cols.add(int8Expr(pg.MakeParamRefNode(int32(src.param), -1)))
				}
			}
		}
		return ""
	}
	if !hasOffset {
		return "" // each shard applies the LIMIT itself
	}
	sc := m.clone()
	sc.LimitOffset = nil
	switch {
	case s.LimitCount == nil || (limSrc == nil && lim < 0):
		if offSrc != nil {
			// LIMIT ALL, written so that the OFFSET parameter is still used
			// (and typed int8, as one database types it).
			sc.LimitCount = mustExpr("CASE WHEN " + paramInt8(offSrc.placeholder()) + " IS NULL THEN NULL::pg_catalog.int8 END")
		} else {
			sc.LimitCount = nil
		}
	case limSrc == nil && offSrc == nil:
		if lim > math.MaxInt64-off {
			sc.LimitCount = nil // n+m does not fit: every row
		} else {
			sc.LimitCount = int8Const(lim + off)
		}
	default:
		// n+m at Bind time, saturating to LIMIT ALL (NULL): CASE WHEN n >
		// max-m THEN NULL ELSE n+m END, NULL n stays NULL (ALL), NULL m is 0.
		n := exprSQL(int8Expr(s.LimitCount))
		o := "0"
		if s.LimitOffset != nil {
			o = "COALESCE(" + exprSQL(int8Expr(s.LimitOffset)) + ", 0)"
		}
		sc.LimitCount = mustExpr(fmt.Sprintf("CASE WHEN %s > 9223372036854775807 - %s THEN NULL ELSE %s + %s END", n, o, n, o))
	}
	return ""
}

// placeholder is the $n of src, a parameter or a normalized text's
// literal slot.
func (src *source) placeholder() int {
	if src.param == 0 && src.lit > 0 {
		return slotBase + src.lit
	}
	return src.param
}

func paramInt8(n int) string { return "$" + strconv.Itoa(n) + "::pg_catalog.int8" }

// int8Expr is n::int8 (constants and parameters as they are written).
func int8Expr(n *pg.Node) *pg.Node {
	return &pg.Node{Node: &pg.Node_TypeCast{TypeCast: &pg.TypeCast{Arg: n, Location: -1,
		TypeName: &pg.TypeName{Names: []*pg.Node{pg.MakeStrNode("pg_catalog"), pg.MakeStrNode("int8")}, Typemod: -1, Location: -1}}}}
}

// int8Const is an integer constant of any size (the grammar reads an
// integer beyond int4 as a Float node; an Integer node holds 32 bits).
func int8Const(v int64) *pg.Node {
	if v >= math.MinInt32 && v <= math.MaxInt32 {
		return pg.MakeAConstIntNode(v, -1)
	}
	return &pg.Node{Node: &pg.Node_AConst{AConst: &pg.A_Const{Val: &pg.A_Const_Fval{Fval: &pg.Float{Fval: strconv.FormatInt(v, 10)}}, Location: -1}}}
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

// ---- groups ----

// groups plans a merge of per-shard partial groups.
func (m *merger) groups() string {
	if m.sel.starAt < len(m.sel.targets) {
		return "* together with aggregates or GROUP BY cannot be merged"
	}
	g := &GroupMerge{DigitsColumn: -1, StyleColumn: -1}
	m.mp.merge.Groups = g
	m.shard = proto.Clone(m.sel.s).(*pg.SelectStmt)
	m.shard.TargetList = nil
	gp := &groupPlan{g: g, sel: m.sel, cols: &m.cols}
	keys, why := gp.groupKeys()
	if why != "" {
		return why
	}
	if why := gp.groupOutputs(); why != "" {
		return why
	}
	if why := gp.groupHaving(); why != "" {
		return why
	}
	keyOrder, why := gp.groupOrder(keys)
	if why != "" {
		return why
	}
	gp.groupSortKeys(keys, keyOrder)
	// extra_float_digits and IntervalStyle as the shard applies them, for
	// the floats and intervals the proxy prints.
	for _, o := range g.Outputs {
		if o.Agg == AggSum || o.Agg == AggAvg || o.Cast != CastNone {
			g.DigitsColumn = m.cols.add(mustExpr("pg_catalog.current_setting('extra_float_digits')"))
			break
		}
	}
	for _, o := range g.Outputs {
		if o.Agg == AggSum && !o.Count || o.Agg == AggAvg {
			g.StyleColumn = m.cols.add(mustExpr("pg_catalog.current_setting('IntervalStyle')"))
			break
		}
	}
	if why := m.limits(false); why != "" {
		return why
	}
	m.groupShardStatement(g, keys)
	m.describeGroups(g, keys)
	return ""
}

// groupShardStatement writes the per-shard statement: the per-shard select
// list, GROUP BY the resolved keys, ORDER BY g.Keys, no HAVING.
func (m *merger) groupShardStatement(g *GroupMerge, keys []*pg.Node) {
	sc := m.shard
	sc.TargetList = m.cols.targetList()
	sc.HavingClause = nil
	sc.GroupClause = nil
	for _, e := range keys {
		// Positions and names are resolved: the per-shard select list
		// differs from the client's.
		sc.GroupClause = append(sc.GroupClause, proto.Clone(e).(*pg.Node))
	}
	sc.SortClause = nil
	for _, k := range g.Keys {
		dir, nulls := pg.SortByDir_SORTBY_ASC, pg.SortByNulls_SORTBY_NULLS_LAST
		if k.Desc {
			dir = pg.SortByDir_SORTBY_DESC
		}
		if k.NullsFirst {
			nulls = pg.SortByNulls_SORTBY_NULLS_FIRST
		}
		sc.SortClause = append(sc.SortClause, pg.MakeSortByNode(pg.MakeAConstIntNode(int64(k.Column+1), -1), dir, nulls, -1))
	}
}

// describeGroups puts the group merge at the head of the description, its
// HAVING after it, and its ORDER BY before the LIMIT.
func (m *merger) describeGroups(g *GroupMerge, keys []*pg.Node) {
	var outs []string
	for i, o := range g.Outputs {
		what := fmt.Sprintf("column %d", i+1)
		if i >= g.Visible {
			what = "hidden " + what
		}
		outs = append(outs, what+" "+o.describe())
	}
	d := "combine one row per shard"
	if len(keys) > 0 {
		var ks []string
		for _, e := range keys {
			ks = append(ks, exprText(e))
		}
		d = "merge groups by (" + strings.Join(ks, ", ") + "), sorted on every shard,"
	}
	m.desc = append([]string{d + " into " + strings.Join(outs, ", ")}, m.desc...)
	if g.Having != nil {
		m.desc = append(m.desc[:1], append([]string{"keep groups where " + g.Having.describe()}, m.desc[1:]...)...)
	}
	if len(g.OrderBy) > 0 {
		var ks []string
		for _, k := range g.OrderBy {
			ks = append(ks, k.describe("column", nil))
		}
		how := "in key order, "
		if g.SortAfter {
			how = "sorting the merged groups (bounded), "
		}
		m.desc = append(m.desc[:len(m.desc)-len(limitDesc(m.desc))], append([]string{"order " + how + "by " + strings.Join(ks, ", ")}, limitDesc(m.desc)...)...)
	}
}

// limitDesc is the trailing LIMIT part of a description ("then LIMIT ...").
func limitDesc(desc []string) []string {
	if n := len(desc); n > 0 && strings.HasPrefix(desc[n-1], "then LIMIT") {
		return desc[n-1:]
	}
	return nil
}

// finish builds the per-shard SQL and the plan.
func (m *merger) finish() (*mergePlan, string) {
	mp := &m.mp
	if m.keepLimit && m.shard != nil {
		m.shard.LimitCount, m.shard.LimitOffset, m.shard.LimitOption = m.sel.s.LimitCount, m.sel.s.LimitOffset, m.sel.s.LimitOption
	}
	if m.shard != nil {
		out, err := deparse(&pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: m.shard}})
		if err != nil {
			return nil, "the per-shard statement could not be written: " + err.Error()
		}
		mp.merge.SQL = out
		m.desc = append(m.desc, "each shard runs: "+out)
		// With literal placeholders the per-shard SQL is not the text's:
		// a text whose decision is this fan-out is analyzed in full
		// (litBinding.attach).
		mp.litFanout = m.sel.rd.lit != nil && (m.sel.rd.lit.inString(out) || mp.limit != nil && mp.limit.lit > 0 || mp.offset != nil && mp.offset.lit > 0)
	}
	if sp := m.split; sp != nil {
		sqls, why := sp.shardSQL(m.clone(), len(m.smap.Shards))
		if why != "" {
			return nil, why
		}
		mp.merge.ShardSQL = sqls
		m.desc = append(m.desc, sp.describe(m.smap))
	}
	switch {
	case mp.merge.Groups != nil:
		mp.merge.Hidden, mp.merge.Width = 0, len(m.cols.hidden)
	case m.sel.starAt < len(m.sel.targets):
		mp.merge.Width = -1
	default:
		mp.merge.Width = len(m.sel.targets) + mp.merge.Hidden
	}
	mp.desc = strings.Join(m.desc, "; ")
	return mp, ""
}

// hasParam reports a $n in n (outside subqueries too).
func hasParam(n *pg.Node) bool {
	found := false
	inspect(n, func(x *pg.Node) bool {
		if x.GetParamRef() != nil {
			found = true
		}
		return !found
	})
	return found
}

// containsAggregate reports an aggregate call in n, outside subqueries.
func containsAggregate(n *pg.Node) bool {
	_, agg := topLevelCalls([]*pg.Node{n})
	return agg
}

// exprSQL deparses an expression.
func exprSQL(n *pg.Node) string {
	sel := &pg.SelectStmt{TargetList: []*pg.Node{{Node: &pg.Node_ResTarget{ResTarget: &pg.ResTarget{Val: n, Location: -1}}}}}
	out, err := deparse(&pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: sel}})
	if err != nil {
		return "NULL"
	}
	return strings.TrimPrefix(out, "SELECT ")
}

// mustExpr parses an expression the planner writes itself.
func mustExpr(sql string) *pg.Node {
	res, err := pg.Parse("SELECT " + sql)
	if err != nil || len(res.Stmts) != 1 {
		panic("route: bad internal expression " + sql + ": " + fmt.Sprint(err))
	}
	return res.Stmts[0].Stmt.GetSelectStmt().TargetList[0].GetResTarget().Val
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

// sameExpr compares two expressions, ignoring where they are in the text
// (normalizeTree, deparse.go).
func sameExpr(x, y *pg.Node) bool {
	if x == nil || y == nil {
		return x == y
	}
	cx, cy := proto.Clone(x).(*pg.Node), proto.Clone(y).(*pg.Node)
	normalizeTree(cx.ProtoReflect())
	normalizeTree(cy.ProtoReflect())
	return proto.Equal(cx, cy)
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
	return aggregates[name] || fc.AggStar || fc.AggDistinct || fc.AggWithinGroup || len(fc.AggOrder) > 0 || fc.AggFilter != nil
}

// describeStages is Describe of a read in two stages. No statement of
// the client's goes to the shards as it is: each stage-1 statement is
// routed (and merged) on its own, then stage 2 runs on one shard, or
// where it routes.
func (mg *Merge) describeStages() []string {
	st := mg.Stages
	var out []string
	for i, in := range st.Inner {
		out = append(out, fmt.Sprintf("stage 1.%d SQL: %s (routed on its own)", i+1, in.SQL))
	}
	if st.Spread {
		out = append(out, "stage 2 SQL:   "+st.Outer+" (routed on its own, each marker a VALUES list of stage 1's rows)")
	} else {
		out = append(out, "stage 2 SQL:   "+st.Outer+" (on the default shard, each marker a VALUES list of stage 1's rows)")
	}
	if co := mg.CopyOut; co != nil {
		out = append(out, "copy out:      stage 2's rows, written as one COPY in "+co.Format.String()+" format by pgshard")
	}
	return out
}

// Describe renders the plan for people (pgshard route): one line per
// step the engine takes.
func (mg *Merge) Describe() []string {
	var out []string
	if mg.Stages != nil {
		return mg.describeStages()
	}
	if co := mg.CopyOut; co != nil && co.Rows {
		out = append(out, "copy out:      the merged rows, written as one COPY in "+co.Format.String()+" format by pgshard")
	} else if co != nil {
		out = append(out, "per-shard SQL: the client's statement",
			"copy out:      one COPY: each shard's output in shard order, row counts summed")
		if co.Header {
			out = append(out, "header:        the first shard's header line only")
		}
		return append(out, "if binary:     the first shard's file header, one trailer at the end")
	}
	if mg.SQL != "" {
		out = append(out, "per-shard SQL: "+mg.SQL)
	} else {
		out = append(out, "per-shard SQL: the client's statement")
	}
	for i, q := range mg.ShardSQL {
		out = append(out, fmt.Sprintf("shard %d SQL:   %s", i, q))
	}
	if mg.Hidden > 0 {
		out = append(out, fmt.Sprintf("hidden:        the last %d per-shard columns are the proxy's (never shown)", mg.Hidden))
	}
	hidden := func(i int) string { return fmt.Sprintf("hidden column %d", i+1) }
	keys := func(ks []SortKey, what string, h func(int) string) string {
		var s []string
		for _, k := range ks {
			s = append(s, k.describe(what, h))
		}
		return strings.Join(s, ", ")
	}
	if g := mg.Groups; g != nil {
		if len(g.Keys) == 0 {
			out = append(out, "groups:        one (no GROUP BY): one row per shard, combined")
		} else {
			out = append(out, "group keys:    "+keys(g.Keys, "per-shard column", nil)+" (every shard sorts by them; equal keys are combined)")
		}
		for i, o := range g.Outputs {
			what := "output"
			if i >= g.Visible {
				what = "hidden output"
			}
			src := fmt.Sprintf("per-shard column %d", o.Column+1)
			if o.Agg == AggAvg {
				src = fmt.Sprintf("per-shard columns %d (sum) and %d (count)", o.Column+1, o.Column+2)
			}
			out = append(out, fmt.Sprintf("%-14s %d %s %s", what+":", i+1, o.describe(), "("+src+")"))
		}
		if g.Having != nil {
			out = append(out, "having:        "+g.Having.describe())
		}
		if len(g.OrderBy) > 0 {
			how := "(groups arrive in this order)"
			if g.SortAfter {
				how = "(merged groups are sorted, bounded by proxy.max_merge_groups)"
			}
			out = append(out, "order by:      "+keys(g.OrderBy, "output", nil)+" "+how)
		}
		if g.DigitsColumn >= 0 {
			out = append(out, fmt.Sprintf("float digits:  per-shard column %d (extra_float_digits as the shard applies it)", g.DigitsColumn+1))
		}
		if g.StyleColumn >= 0 {
			out = append(out, fmt.Sprintf("interval style: per-shard column %d (IntervalStyle as the shard applies it)", g.StyleColumn+1))
		}
	} else {
		if len(mg.OrderBy) > 0 {
			out = append(out, "order by:      "+keys(mg.OrderBy, "column", hidden)+" (k-way merge: one row per shard in memory)")
		} else {
			out = append(out, "order:         none (rows concatenated, shard by shard)")
		}
		if mg.Distinct {
			out = append(out, "distinct:      a row equal to the one before is dropped")
		}
		if mg.DistinctOn > 0 {
			out = append(out, fmt.Sprintf("distinct on:   a row equal to the one before on the first %d order-by keys is dropped", mg.DistinctOn))
		}
	}
	if mg.Offset > 0 {
		out = append(out, fmt.Sprintf("offset:        %d (skipped after the merge)", mg.Offset))
	}
	if mg.Limit >= 0 && mg.WithTies {
		out = append(out, fmt.Sprintf("limit:         %d with ties (after the merge)", mg.Limit))
	} else if mg.Limit >= 0 {
		out = append(out, fmt.Sprintf("limit:         %d (after the merge)", mg.Limit))
	}
	return out
}
