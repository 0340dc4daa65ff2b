package route

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"sync"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
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
// Refused: window functions, set operations, DISTINCT ON, GROUPING SETS,
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
		return nil, "UNION/INTERSECT/EXCEPT cannot be merged across shards"
	}
	anchors, why := a.mergeableFrom(t)
	if why != "" {
		return nil, why
	}
	m := newMerger(a, t, anchors)
	s := m.s
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
		for i := range m.targets {
			keyDistinct = keyDistinct || m.targetKey(i)
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
	for _, r := range a.refs {
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
		a.cov.split = a.cov.splitValues(s.FromClause, t.sc, s, a.lit)
	}
	if why := a.cov.uncovered(s.FromClause, t.sc); why != "" {
		// The rule: every row the FROM clause produces must contain a row
		// of a keyed table, which lives on exactly one shard; else that
		// row is produced by every shard (or by none).
		return nil, why
	}
	return anchors, ""
}

// newMerger starts the merge plan of the top-level SELECT: its select
// list and where its first * is.
func newMerger(a *analyzer, t *topInfo, anchors []*tref) *merger {
	s := t.sel
	m := &merger{a: a, t: t, s: s, anchors: anchors, starAt: -1}
	for _, n := range s.TargetList {
		if rt := n.GetResTarget(); rt != nil {
			if cr := rt.Val.GetColumnRef(); m.starAt < 0 && cr != nil && len(cr.Fields) > 0 && cr.Fields[len(cr.Fields)-1].GetAStar() != nil {
				m.starAt = len(m.targets)
			}
			m.targets = append(m.targets, rt)
		}
	}
	if m.starAt < 0 {
		m.starAt = len(m.targets)
	}
	return m
}

// unmergedWindowsOrTies refuses window functions unless PARTITION BY a
// sharding key without aggregates, and FETCH ... WITH TIES together with
// DISTINCT or over aggregates without GROUP BY.
func (m *merger) unmergedWindowsOrTies(c topCalls) string {
	s := m.s
	if len(s.WindowClause) > 0 || c.window || c.sortWindow {
		if c.aggregates() || len(s.GroupClause) > 0 || !m.t.sc.windowsByKey(s, m.isAnchorKey) {
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
	s := m.s
	distinct = len(s.DistinctClause) > 0
	if !distinct || len(s.DistinctClause) == 1 && s.DistinctClause[0].GetNode() == nil {
		return distinct, ""
	}
	onKey := false
	for _, d := range s.DistinctClause {
		if o, ok := m.t.sc.keyOrigin(d); ok && m.isAnchorKey(&o) {
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
	s, a := m.s, m.a
	keyGrouped := false
	for _, g := range s.GroupClause {
		if a.lit.has(g) {
			a.lit.taintf("a literal in GROUP BY (a constant there is a position)")
		}
		switch {
		case g.GetGroupingSet() != nil:
			return false, "GROUPING SETS / ROLLUP / CUBE cannot be merged across shards"
		case g.GetAConst() != nil:
			if v, _ := constVal(g.GetAConst()); v.kind == kInt && m.targetKey(int(v.i)-1) {
				keyGrouped = true
			}
		default:
			if o, ok := m.t.sc.keyOrigin(g); ok && m.isAnchorKey(&o) {
				keyGrouped = true
			} else if cr := g.GetColumnRef(); cr != nil && len(cr.Fields) == 1 {
				if i := a.targetByName(m.targets[:m.starAt], strName(cr.Fields[0])); m.targetKey(i) {
					keyGrouped = true
				}
			}
		}
	}
	return keyGrouped, ""
}

// merger builds one statement's merge plan.
type merger struct {
	a       *analyzer
	t       *topInfo
	s       *pg.SelectStmt
	anchors []*tref
	targets []*pg.ResTarget
	starAt  int

	mp   mergePlan
	desc []string
	// shard is the per-shard statement being built (a clone of s), nil
	// when every shard runs the client's statement as it is.
	shard *pg.SelectStmt
	// hidden are the hidden per-shard select-list entries (Rows), or every
	// per-shard entry (Groups); names their aliases ("" = none).
	hidden []*pg.Node
	names  []string
	// internal says which of them the client never sees (named by
	// internalName); taken is the statement's text, lowercased, for it.
	internal []bool
	taken    string
	// distinctOn: DISTINCT ON without a sharding key (merged by
	// Merge.DistinctOn).
	distinctOn []*pg.Node
	// keepLimit: the per-shard statement keeps the client's LIMIT and
	// OFFSET (a negative constant, which every shard reports as an error).
	keepLimit bool
}

func (m *merger) isAnchorKey(o *colOrigin) bool {
	if o == nil {
		return false
	}
	for _, r := range m.anchors {
		if o.ref == r {
			return true
		}
	}
	return false
}

func (m *merger) targetKey(i int) bool {
	return i >= 0 && i < m.starAt && i < len(m.t.cols) && m.isAnchorKey(m.t.cols[i].origin)
}

// clone makes the per-shard statement, once.
func (m *merger) clone() *pg.SelectStmt {
	if m.shard == nil {
		m.shard = proto.Clone(m.s).(*pg.SelectStmt)
	}
	return m.shard
}

// ---- rows ----

// rows plans a merge of rows: dedup is SELECT DISTINCT without a key;
// keyGrouped a GROUP BY on a key (aggregates are then per group, exact).
func (m *merger) rows(dedup, keyGrouped bool) string {
	s, mp := m.s, &m.mp
	for _, n := range s.SortClause {
		sb := n.GetSortBy()
		if sb == nil {
			return "an ORDER BY term cannot be merged"
		}
		k, why := sortKey(sb)
		if why != "" {
			return why
		}
		col, found, why := m.a.sortColumn(sb, m.targets, m.starAt, m.t)
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
			k.Hidden, col = true, m.add(e)
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
		if m.starAt < len(m.targets) {
			return "SELECT DISTINCT * cannot be merged: name the columns"
		}
		// Every shard sorts by every column (the client's order first), so
		// that duplicates from different shards meet.
		used := map[int]bool{}
		for _, k := range mp.merge.OrderBy {
			used[k.Column] = true
		}
		sc := m.clone()
		for i := range m.targets {
			if !used[i] {
				mp.merge.OrderBy = append(mp.merge.OrderBy, SortKey{Column: i})
				sc.SortClause = append(sc.SortClause, pg.MakeSortByNode(pg.MakeAConstIntNode(int64(i+1), -1),
					pg.SortByDir_SORTBY_ASC, pg.SortByNulls_SORTBY_NULLS_LAST, -1))
			}
		}
		mp.merge.Distinct = true
	}
	if len(m.hidden) > 0 {
		sc := m.clone()
		sc.TargetList = append(sc.TargetList, m.targetList()...)
		mp.merge.Hidden = len(m.hidden)
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
		col, found, w := m.a.sortColumn(&pg.SortBy{Node: d}, m.targets, m.starAt, m.t)
		if w != "" {
			return w
		}
		ds[i] = pos{col, found}
	}
	matched := make([]bool, len(ds))
	n := 0
	for i, sn := range m.s.SortClause {
		sb := sn.GetSortBy()
		k := m.mp.merge.OrderBy[i]
		hit := false
		for j, d := range m.distinctOn {
			if !k.Hidden && ds[j].found && ds[j].col == k.Column || m.a.sameExpr(sb.Node, d) && ds[j].found && !k.Hidden {
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
	if m.shard != nil && i < len(m.hidden) {
		return "hidden " + exprText(m.hidden[i])
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
	s, mp := m.s, &m.mp
	lim, limSrc, limWhy := m.a.limitOf(s.LimitCount, "LIMIT")
	off, offSrc, offWhy := m.a.limitOf(s.LimitOffset, "OFFSET")
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
					m.add(int8Expr(pg.MakeParamRefNode(int32(src.param), -1)))
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
			sc.LimitCount = mustExpr("CASE WHEN " + paramInt8(offSrc.param) + " IS NULL THEN NULL::pg_catalog.int8 END")
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

// errNegative is limitOf's reason for a negative constant.
const errNegative = "negative"

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

// limitOf reads a LIMIT or OFFSET: a constant (its value, as Postgres
// coerces it to bigint), NULL/ALL (-1) or a parameter (a source read at
// Route). A negative constant gives errNegative.
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
		if vt := vtypeOfCast(e.GetTypeCast().TypeName); vt != vtInt2 && vt != vtInt4 && vt != vtInt8 && !isNumericType(e.GetTypeCast().TypeName) {
			return 0, nil, fmt.Sprintf("%s %s: only integer and numeric casts are read for the merge", what, exprText(n))
		}
		e = e.GetTypeCast().Arg
	}
	if c := e.GetAConst(); c != nil {
		if c.Isnull {
			return -1, nil, ""
		}
		v, _ := constVal(c)
		i, ok := limitConst(v)
		if !ok {
			return 0, nil, what + " " + exprText(n) + " is not a bigint the merge can read"
		}
		if i < 0 {
			return 0, nil, errNegative
		}
		return i, nil, ""
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

// limitConst converts a LIMIT/OFFSET constant as Postgres coerces it to
// bigint: integers as they are, a numeric rounded half away from zero, a
// quoted string read as int8in reads it.
func limitConst(v kval) (int64, bool) {
	switch v.kind {
	case kInt:
		return v.i, true
	case kNum:
		r, ok := new(big.Rat).SetString(v.s)
		if !ok {
			return 0, false
		}
		return roundRat(r)
	case kText:
		i, err := strconv.ParseInt(strings.TrimSpace(v.s), 10, 64)
		return i, err == nil
	}
	return 0, false
}

// roundRat rounds half away from zero to an int64.
func roundRat(r *big.Rat) (int64, bool) {
	num, den := new(big.Int).Set(r.Num()), r.Denom()
	neg := num.Sign() < 0
	num.Abs(num)
	q, rem := new(big.Int).QuoRem(num, den, new(big.Int))
	if rem.Mul(rem, big.NewInt(2)).Cmp(den) >= 0 {
		q.Add(q, big.NewInt(1))
	}
	if neg {
		q.Neg(q)
	}
	if !q.IsInt64() {
		return 0, false
	}
	return q.Int64(), true
}

func isNumericType(tn *pg.TypeName) bool {
	if tn == nil || len(tn.Names) == 0 || len(tn.Typmods) > 0 {
		return false
	}
	n := strName(tn.Names[len(tn.Names)-1])
	return n == "numeric" || n == "decimal"
}

// ---- groups ----

// groups plans a merge of per-shard partial groups.
func (m *merger) groups() string {
	if m.starAt < len(m.targets) {
		return "* together with aggregates or GROUP BY cannot be merged"
	}
	g := &GroupMerge{DigitsColumn: -1}
	m.mp.merge.Groups = g
	m.shard = proto.Clone(m.s).(*pg.SelectStmt)
	m.shard.TargetList = nil
	keys, why := m.groupKeys()
	if why != "" {
		return why
	}
	if why := m.groupOutputs(g); why != "" {
		return why
	}
	if why := m.groupHaving(g); why != "" {
		return why
	}
	keyOrder, why := m.groupOrder(g, keys)
	if why != "" {
		return why
	}
	m.groupSortKeys(g, keys, keyOrder)
	// extra_float_digits as the shard applies it, for floats the proxy prints.
	for _, o := range g.Outputs {
		if o.Agg == AggSum || o.Agg == AggAvg || o.Cast != CastNone {
			g.DigitsColumn = m.add(mustExpr("pg_catalog.current_setting('extra_float_digits')"))
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

// groupKeys resolves the GROUP BY items into expressions, as Postgres
// does: a position is its select-list entry; a bare name that is also an
// output name is refused (pgshard cannot tell which one Postgres takes).
func (m *merger) groupKeys() ([]*pg.Node, string) {
	var keys []*pg.Node
	for _, item := range m.s.GroupClause {
		e := item
		if c := item.GetAConst(); c != nil {
			v, _ := constVal(c)
			if v.kind != kInt || v.i < 1 || int(v.i) > len(m.targets) {
				return nil, "GROUP BY " + exprText(item) + " is not a select-list position"
			}
			e = m.targets[v.i-1].Val
			if containsAggregate(e) {
				return nil, "GROUP BY " + exprText(item) + " names an aggregate"
			}
		} else if cr := item.GetColumnRef(); cr != nil && len(cr.Fields) == 1 {
			// A bare name is an input column first, an output name only if
			// there is no such input column: pgshard cannot tell which.
			name := strName(cr.Fields[0])
			for _, rt := range m.targets {
				if rt.Name == name && !m.a.sameExpr(rt.Val, item) {
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
func (m *merger) groupOutputs(g *GroupMerge) string {
	for _, rt := range m.targets {
		out, why := m.output(rt.Val, rt.Name, true)
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
func (m *merger) groupHaving(g *GroupMerge) string {
	s, a := m.s, m.a
	if s.HavingClause == nil {
		return ""
	}
	if a.lit.has(s.HavingClause) {
		a.lit.taintf("a literal in HAVING (the merge compares with it)")
	}
	c, why := m.cond(s.HavingClause)
	if why != "" {
		return "HAVING cannot be merged: " + why
	}
	g.Having = c
	if hasParam(s.HavingClause) {
		// Keep its parameters typed as one database types them.
		m.add(s.HavingClause)
	}
	return ""
}

// groupOrder plans ORDER BY over the merged columns (hidden ones for
// expressions not in the select list). It returns the order in terms of
// the group keys when the ORDER BY is by group keys only (the merge then
// streams), else nil and sets g.SortAfter.
func (m *merger) groupOrder(g *GroupMerge, keys []*pg.Node) ([]SortKey, string) {
	var keyOrder []SortKey // in terms of keys
	streaming := true
	for _, n := range m.s.SortClause {
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
		col, found, why := m.a.sortColumn(sb, m.targets, len(m.targets), m.t)
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
			out, why := m.output(e, "", false)
			if why != "" {
				return nil, why
			}
			col = len(g.Outputs)
			g.Outputs = append(g.Outputs, out)
		}
		k.Column = col
		g.OrderBy = append(g.OrderBy, k)
		ki := m.keyOf(g.Outputs[col], keys, col)
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
func (m *merger) groupSortKeys(g *GroupMerge, keys []*pg.Node, keyOrder []SortKey) {
	keyCol := make([]int, len(keys))
	for i, e := range keys {
		keyCol[i] = m.add(e)
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
			col = m.add(&pg.Node{Node: &pg.Node_CollateClause{CollateClause: &pg.CollateClause{Arg: keys[k.Column],
				Collname: []*pg.Node{pg.MakeStrNode("C")}, Location: -1}}})
		}
		g.Keys = append(g.Keys, SortKey{Column: col, Desc: k.Desc, NullsFirst: k.NullsFirst, Bytewise: k.Bytewise})
	}
}

// groupShardStatement writes the per-shard statement: the per-shard select
// list, GROUP BY the resolved keys, ORDER BY g.Keys, no HAVING.
func (m *merger) groupShardStatement(g *GroupMerge, keys []*pg.Node) {
	sc := m.shard
	sc.TargetList = m.targetList()
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

// add appends a per-shard select-list entry and returns its column.
func (m *merger) add(e *pg.Node) int {
	i := m.addAs(e, "")
	m.internal[i] = true
	return i
}

// addAs is add with an alias: the shards then name the column as the
// client's statement names it ("" = as Postgres names the expression).
func (m *merger) addAs(e *pg.Node, alias string) int {
	m.hidden = append(m.hidden, e)
	m.names = append(m.names, alias)
	m.internal = append(m.internal, false)
	return len(m.hidden) - 1
}

// put is addAs for a column the client sees, add for one it does not.
func (m *merger) put(e *pg.Node, alias string, visible bool) int {
	if !visible {
		return m.add(e)
	}
	return m.addAs(e, alias)
}

// targets renders the per-shard select-list entries. A column the client
// never sees gets a name of the proxy's that no name of the statement
// uses: the name Postgres would give it (id for id::uuid) could make the
// client's ORDER BY id ambiguous on the shards (42702).
func (m *merger) targetList() []*pg.Node {
	var out []*pg.Node
	for i, e := range m.hidden {
		name := m.names[i]
		if m.internal[i] {
			name = m.internalName(i)
		}
		out = append(out, &pg.Node{Node: &pg.Node_ResTarget{ResTarget: &pg.ResTarget{Val: e, Name: name, Location: -1}}})
	}
	return out
}

// internalName names hidden column i: pgshard_N, with as many leading
// underscores as it takes for no identifier of the statement to contain
// it.
func (m *merger) internalName(i int) string {
	if m.taken == "" {
		m.taken = strings.ToLower(m.s.String())
	}
	prefix := "pgshard_"
	for strings.Contains(m.taken, prefix) {
		prefix = "_" + prefix
	}
	return prefix + strconv.Itoa(i+1)
}

// keyOf returns the group key an output is (its expression equals the
// key's), -1 if none.
func (m *merger) keyOf(o Output, keys []*pg.Node, col int) int {
	if o.Agg != AggNone || o.Cast != CastNone || o.Hidden {
		return -1
	}
	e := m.hidden[o.Column]
	for i, k := range keys {
		if m.a.sameExpr(e, k) || sameColumn(e, k, m.t) {
			return i
		}
	}
	return -1
}

// output plans one merged column: an aggregate (possibly cast), or any
// other expression (a group key or a constant: the first shard's value).
// alias is the client's name for it; visible says the client sees it
// (the shards then name it as the client's statement does).
func (m *merger) output(e *pg.Node, alias string, visible bool) (Output, string) {
	spec, isAgg, why := m.aggSpec(e)
	if why != "" {
		return Output{}, fmt.Sprintf("%s %s", exprText(e), why)
	}
	if spec.agg == AggStringAgg || spec.agg == AggCountDistinct {
		return m.arrayOutput(spec, e, alias, visible), ""
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
		return Output{Agg: AggNone, Column: m.put(e, alias, visible), Name: name}, ""
	}
	out := Output{Agg: spec.agg, Cast: spec.cast, Name: name}
	if spec.agg == AggAvg {
		sum := proto.Clone(spec.call).(*pg.FuncCall)
		sum.Funcname = []*pg.Node{pg.MakeStrNode("pg_catalog"), pg.MakeStrNode("sum")}
		cnt := proto.Clone(spec.call).(*pg.FuncCall)
		cnt.Funcname = []*pg.Node{pg.MakeStrNode("pg_catalog"), pg.MakeStrNode("count")}
		if visible && alias == "" {
			alias = name // the shards would name the sum "sum"
		}
		out.Column = m.put(&pg.Node{Node: &pg.Node_FuncCall{FuncCall: sum}}, alias, visible)
		m.add(&pg.Node{Node: &pg.Node_FuncCall{FuncCall: cnt}})
		return out, ""
	}
	out.Column = m.put(&pg.Node{Node: &pg.Node_FuncCall{FuncCall: spec.call}}, alias, visible)
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
func (m *merger) arrayOutput(spec aggSpec, e *pg.Node, alias string, visible bool) Output {
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
		Bytewise: spec.bytewise, Column: m.put(&pg.Node{Node: &pg.Node_FuncCall{FuncCall: spec.call}}, alias, visible)}
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

// aggSpec is a merged aggregate: the aggregate call and what follows.
type aggSpec struct {
	agg  Agg
	cast Cast
	call *pg.FuncCall // the call to send to the shards (sum/count/min/max, array_agg)
	// string_agg: the separator, the order of its values, DISTINCT, and
	// whether the order is bytewise (ORDER BY x COLLATE "C").
	sep                      string
	desc, distinct, bytewise bool
}

// aggSpec reads an aggregate call, possibly under one cast. isAgg false:
// e is not an aggregate call (it may contain some); why: it is one that
// cannot be merged.
func (m *merger) aggSpec(e *pg.Node) (aggSpec, bool, string) {
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
		return m.stringAgg(spec, fc)
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
		spec.agg = AggSum
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
		o, ok := m.t.sc.keyOrigin(fc.Args[0])
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
func (m *merger) stringAgg(spec aggSpec, fc *pg.FuncCall) (aggSpec, bool, string) {
	const why = "is merged only as string_agg(x, 'separator' ORDER BY x [COLLATE \"C\"]): ordered by its own values, with a string constant as the separator"
	if spec.cast != CastNone {
		return spec, false, "casts a merged string_agg (select it as it is)"
	}
	if fc.AggWithinGroup || fc.FuncVariadic || fc.AggStar || len(fc.Args) != 2 || len(fc.AggOrder) != 1 {
		return spec, false, why
	}
	if m.a.lit.has(fc.Args[1]) {
		m.a.lit.taintf("a literal string_agg separator (the merge joins the values with it)")
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
	if otherCollation(node) || !m.a.sameExpr(node, arg) {
		return spec, false, why
	}
	spec.agg, spec.sep, spec.desc, spec.distinct, spec.bytewise = AggStringAgg, v.s, k.Desc, fc.AggDistinct, k.Bytewise
	spec.call = arrayAggCall(fc, fc.AggOrder)
	return spec, true, ""
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

// cond plans a HAVING condition over merged values.
func (m *merger) cond(n *pg.Node) (*Cond, string) {
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
			k, why := m.cond(arg)
			if why != "" {
				return nil, why
			}
			c.Kids = append(c.Kids, k)
		}
		return c, ""
	case *pg.Node_NullTest:
		l, why := m.operand(x.NullTest.Arg)
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
		l, why := m.operand(ae.Lexpr)
		if why != "" {
			return nil, why
		}
		r, why := m.operand(ae.Rexpr)
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
func (m *merger) operand(n *pg.Node) (Operand, string) {
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
	g := m.mp.merge.Groups
	for i := 0; i < g.Visible; i++ {
		if m.a.sameExpr(m.targets[i].Val, e) {
			return Operand{Output: i}, ""
		}
	}
	out, why := m.output(e, "", false)
	if why != "" {
		return Operand{}, why
	}
	g.Outputs = append(g.Outputs, out)
	return Operand{Output: len(g.Outputs) - 1}, ""
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

// finish builds the per-shard SQL and the plan.
func (m *merger) finish() (*mergePlan, string) {
	mp := &m.mp
	if m.keepLimit && m.shard != nil {
		m.shard.LimitCount, m.shard.LimitOffset, m.shard.LimitOption = m.s.LimitCount, m.s.LimitOffset, m.s.LimitOption
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
		// (bindStatement).
		mp.litFanout = m.a.lit != nil && (m.a.lit.inString(out) || mp.limit != nil && mp.limit.lit > 0 || mp.offset != nil && mp.offset.lit > 0)
	}
	if sp := m.a.cov.split; sp != nil {
		sqls, why := sp.shardSQL(m.clone(), len(m.a.r.m.Shards))
		if why != "" {
			return nil, why
		}
		mp.merge.ShardSQL = sqls
		m.desc = append(m.desc, sp.describe(m.a.r))
	}
	switch {
	case mp.merge.Groups != nil:
		mp.merge.Hidden, mp.merge.Width = 0, len(m.hidden)
	case m.starAt < len(m.targets):
		mp.merge.Width = -1
	default:
		mp.merge.Width = len(m.targets) + mp.merge.Hidden
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

// sortColumn resolves an ORDER BY term to a select-list position, as
// Postgres does: a position number, an output column name, or an
// expression equal to a select-list entry. found is false (with no
// reason) for another expression.
func (a *analyzer) sortColumn(sb *pg.SortBy, targets []*pg.ResTarget, starAt int, t *topInfo) (int, bool, string) {
	n := sb.Node
	// x COLLATE "C" orders bytewise, which is how the engine merges text:
	// resolve it as x. Any other collation would need the server's rules.
	if cc := n.GetCollateClause(); cc != nil {
		if !bytewiseCollation(cc.Collname) {
			return 0, false, fmt.Sprintf("ORDER BY %s: only COLLATE \"C\" (bytewise) can be merged across shards", exprText(n))
		}
		n = cc.Arg
	}
	if a.lit.has(n) {
		a.lit.taintf("a literal in ORDER BY (a constant there is a position)")
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
		if i := a.targetByName(targets[:starAt], strName(cr.Fields[0])); i >= 0 {
			return i, true, ""
		} else if i == -2 {
			return 0, false, "ORDER BY " + exprText(n) + " is ambiguous"
		}
	}
	for i := 0; i < starAt; i++ {
		if a.sameExpr(n, targets[i].Val) || sameColumn(n, targets[i].Val, t) {
			return i, true, ""
		}
	}
	return 0, false, ""
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
	return aggregates[name] || fc.AggStar || fc.AggDistinct || fc.AggWithinGroup || len(fc.AggOrder) > 0 || fc.AggFilter != nil
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

// Describe renders the plan for people (pgshard route): one line per
// step the engine takes.
func (mg *Merge) Describe() []string {
	var out []string
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
