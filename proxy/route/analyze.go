package route

import (
	"fmt"
	"slices"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pgshard/pgshard/shardmap"
)

// topInfo is the top-level SELECT, for the merge plan.
type topInfo struct {
	sel            *pg.SelectStmt
	sc             *scope
	cols           []outCol
	setop          bool
	other          bool // a non-sharded item in its FROM
	derivedSharded bool // a subquery/CTE in its FROM reads keyed tables
	// leaves are a top-level set operation's branches (its SELECTs and
	// VALUES lists, left to right: setop.go).
	leaves []setLeaf
}

// analyzer walks one statement: its queries, FROM items, DML targets and
// function calls, and what they do (writes, locks, session features,
// refusals). What it learns is kept by the parts that own it: the refs
// and their links (g, a refGraph, which the plan reads: classify.go), what
// expressions say about keys and the literal slots (rd, an exprReader, whose lit
// classify.go sets), the FROM items' rows (cov); a query level's names
// are its scope's.
type analyzer struct {
	g  refGraph      // the refs to keyed tables and their links
	rd exprReader    // what expressions say about keys; the literal slots
	m  *shardmap.Map // the map the VALUES list is split over (valuesplit.go)
	sc *compiled
	// cov: the derived tables of FROM items, the VALUES list split by
	// shard; whether a FROM's rows each come from one shard.
	cov    coverage
	tables []string

	write       bool
	writeWhat   string
	notRO       string
	unknownFn   string // a function neither built in nor in the schema
	locking     bool
	unsupported string // a session-level feature: the statement is KindUnsupported
	// unsupportedState names that feature's session state (Statement.SessionState).
	unsupportedState string
	// everywhere are relations on every shard (catalogs, pgshard's own).
	everywhere map[string]bool
	// objects: the statement reads which schema objects exist
	// (Statement.ReadsObjects).
	objects bool
	refusal *Refusal // refused unless hinted
	top     *topInfo
	// setTop is the top-level set operation whose branch the next
	// selectStmt analyzes (nil for any other query): set just before
	// each branch, taken at selectStmt's start.
	setTop *topInfo
	// copyQuery and copyOpts: a COPY (query) TO's query and options
	// (copyrows.go).
	copyQuery *pg.Node
	copyOpts  []*pg.Node
}

// newAnalyzer returns an analyzer of the sharding schema sc over the map m.
func newAnalyzer(sc *compiled, m *shardmap.Map) *analyzer {
	a := &analyzer{m: m, sc: sc, rd: exprReader{sublinks: map[*pg.SubLink]*derived{}},
		cov: coverage{subs: map[*pg.RangeSubselect]*derived{}, tables: sc.tables, m: m}}
	a.cov.g = &a.g
	return a
}

func (a *analyzer) addTable(name string) {
	if !slices.Contains(a.tables, name) {
		a.tables = append(a.tables, name)
	}
}

func (a *analyzer) refuse(state, msg, hint string) {
	if a.refusal == nil {
		a.refusal = &Refusal{SQLState: state, Message: msg, Hint: hint}
	}
}

func (a *analyzer) setWrite(what string) {
	a.write = true
	if a.writeWhat == "" {
		a.writeWhat = what
	}
}

// strName returns the value of a String node ("" otherwise).
func strName(n *pg.Node) string {
	if s := n.GetString_(); s != nil {
		return s.Sval
	}
	return ""
}

// noteCatalog records a relation that exists on every shard whatever the
// sharding schema says: a system catalog or view, or pgshard's own tables
// (pgshard_identity, pgshard_migrations). It is not unsharded.
func (a *analyzer) noteCatalog(rv *pg.RangeVar) {
	if rv.Schemaname == "information_schema" || objectCatalogs[rv.Relname] && (rv.Schemaname == "" || rv.Schemaname == "pg_catalog") {
		a.objects = true
	}
	if isCatalog(rv.Schemaname, rv.Relname) || strings.HasPrefix(rv.Relname, "pgshard_") {
		if a.everywhere == nil {
			a.everywhere = map[string]bool{}
		}
		a.everywhere[rv.Relname] = true
	}
}

// isCatalog reports whether a relation is a system catalog or view:
// qualified by pg_catalog or information_schema, or unqualified and one
// of pg_catalog's (catalogs.go) — a user's table may begin with pg_.
func isCatalog(schema, rel string) bool {
	return schema == "pg_catalog" || schema == "information_schema" || (schema == "" && catalogRelations[rel])
}

// ---- queries ----

// query analyzes a query-like node in scope parent and returns its output.
func (a *analyzer) query(n *pg.Node, parent *scope, top bool) *derived {
	if n == nil {
		return &derived{}
	}
	before := len(a.g.refs)
	var d *derived
	switch x := n.Node.(type) {
	case *pg.Node_SelectStmt:
		d = a.selectStmt(x.SelectStmt, parent, top)
	case *pg.Node_InsertStmt:
		d = a.insertStmt(x.InsertStmt, parent)
	case *pg.Node_UpdateStmt:
		d = a.updateStmt(x.UpdateStmt, parent)
	case *pg.Node_DeleteStmt:
		d = a.deleteStmt(x.DeleteStmt, parent)
	case *pg.Node_MergeStmt:
		d = a.mergeStmt(x.MergeStmt, parent)
	default:
		a.walk(n, parent)
		d = &derived{}
	}
	d.sharded = d.sharded || len(a.g.refs) > before
	return d
}

func (a *analyzer) with(w *pg.WithClause, sc *scope) {
	if w == nil {
		return
	}
	sc.ctes = map[string]*derived{}
	for _, c := range w.Ctes {
		cte := c.GetCommonTableExpr()
		if cte == nil {
			continue
		}
		if w.Recursive {
			sc.ctes[cte.Ctename] = &derived{}
		}
		d := a.query(cte.Ctequery, sc, false)
		if len(cte.Aliascolnames) > 0 {
			cols := make([]outCol, len(cte.Aliascolnames))
			for i, n := range cte.Aliascolnames {
				cols[i].name = strName(n)
				if i < len(d.cols) {
					cols[i].origin, cols[i].expr = d.cols[i].origin, d.cols[i].expr
				}
			}
			d = &derived{cols: cols, known: true, sharded: d.sharded, localWhy: d.localWhy}
		}
		if w.Recursive {
			// A recursive CTE's rows come from several iterations: keep
			// its columns unknown.
			d = &derived{sharded: d.sharded, localWhy: "a recursive CTE combines every shard's rows"}
		}
		sc.ctes[cte.Ctename] = d
	}
}

func (a *analyzer) selectStmt(s *pg.SelectStmt, parent *scope, top bool) *derived {
	if s == nil {
		return &derived{}
	}
	owner := a.setTop // this query is a branch of owner's set operation
	a.setTop = nil
	sc := &scope{parent: parent}
	a.with(s.WithClause, sc)
	if isSetOp(s) {
		return setOpStmt(a, s, sc, owner, top) // setop.go
	}
	if len(s.ValuesLists) > 0 {
		owner.addLeaf(s, sc, "a VALUES list would be produced by every shard")
		d := &derived{known: true}
		for i, row := range s.ValuesLists {
			for j, v := range row.GetList().GetItems() {
				a.walk(v, sc)
				if i == 0 {
					d.cols = append(d.cols, outCol{name: fmt.Sprintf("column%d", j+1), expr: v})
				}
			}
		}
		if top {
			a.top = &topInfo{sel: s, sc: sc, cols: d.cols}
		}
		return d
	}
	var ti *topInfo
	if top {
		ti = &topInfo{sel: s, sc: sc}
		a.top = ti
	}
	firstRef := len(a.g.refs)
	for _, f := range s.FromClause {
		a.fromItem(f, sc, false, ti)
	}
	if s.WhereClause != nil {
		a.walk(s.WhereClause, sc)
		a.g.apply(a.rd.conj(s.WhereClause, sc), sc, modeInner, nil)
	}
	d := &derived{known: true}
	for _, t := range s.TargetList {
		rt := t.GetResTarget()
		if rt == nil {
			continue
		}
		a.walk(rt.Val, sc)
		d.addTarget(rt, sc)
	}
	a.walkList(s.GroupClause, sc)
	a.walk(s.HavingClause, sc)
	a.walkList(s.SortClause, sc)
	a.walkList(s.WindowClause, sc)
	a.walkList(s.DistinctClause, sc)
	a.walk(s.LimitCount, sc)
	a.walk(s.LimitOffset, sc)
	if len(s.LockingClause) > 0 {
		a.locking = true
	}
	if s.IntoClause != nil {
		a.refuse("0A000", "SELECT INTO creates a table from query results: pgshard does not route it",
			"Create the table with CREATE TABLE (applied to every shard) and fill it with INSERT ... SELECT on a key.")
	}
	if ti != nil {
		ti.cols = d.cols
	}
	if !top {
		d.refLo, d.refHi = firstRef, len(a.g.refs)
		d.localWhy = a.localWhy(s, sc)
		owner.addLeaf(s, sc, d.localWhy)
		if why := a.globalSelect(s, sc); why != "" {
			// Its rows depend on every shard's rows, so no row of it is
			// tied to one key: none of its columns carries a key's origin
			// (no IN / join on them links it to another ref), and its refs
			// say why.
			for i := range d.cols {
				d.cols[i].origin = nil
			}
			for _, r := range a.g.refs[firstRef:] {
				if r.sub == "" {
					r.sub = why
				}
			}
		}
	}
	return d
}

// globalSelect says why a subquery's, CTE's or derived table's result
// depends on the rows of every shard at once ("" when each of its rows
// depends only on rows of one key): LIMIT, OFFSET, FETCH, DISTINCT ON,
// window functions, and aggregates or GROUP BY that do not group by a
// key of the subquery's own tables.
func (a *analyzer) globalSelect(s *pg.SelectStmt, sc *scope) string {
	switch {
	case s.LimitCount != nil || s.LimitOffset != nil:
		return "a subquery with LIMIT/OFFSET/FETCH picks rows among every shard's"
	case len(s.DistinctClause) > 0 && s.DistinctClause[0].GetNode() != nil:
		return "a subquery with DISTINCT ON picks rows among every shard's"
	}
	w1, agg := topLevelCalls(s.TargetList)
	w2, agg2 := topLevelCalls(s.SortClause)
	_, agg3 := topLevelCalls([]*pg.Node{s.HavingClause})
	if w1 || w2 || len(s.WindowClause) > 0 {
		own := func(o *colOrigin) bool { return o.ref.sc == sc && !o.ref.nullable }
		if agg || agg2 || agg3 || len(s.GroupClause) > 0 || s.HavingClause != nil || !sc.windowsByKey(s, own) {
			return "a subquery with window functions (not PARTITION BY a sharding key) sees every shard's rows"
		}
		return ""
	}
	if !(agg || agg2 || agg3 || len(s.GroupClause) > 0 || s.HavingClause != nil) {
		return ""
	}
	for _, g := range s.GroupClause {
		if o, ok := sc.keyOrigin(g); ok && o.ref.sc == sc && !o.ref.nullable {
			return "" // groups of one key: each lives on one shard
		}
	}
	return "a subquery with aggregates or GROUP BY (not by a sharding key) combines every shard's rows"
}

// localWhy says why a subquery's (derived table's, CTE's) rows are not the
// union of the rows each shard computes from its own data, each row from
// exactly one shard ("" when they are): globalSelect's reasons, DISTINCT
// without a key of its own tables (duplicates on several shards), a FROM
// with rows that contain no keyed row (uncovered), or a derived table in
// its FROM for which the same holds.
func (a *analyzer) localWhy(s *pg.SelectStmt, sc *scope) string {
	if why := a.globalSelect(s, sc); why != "" {
		return why
	}
	if len(s.DistinctClause) > 0 {
		keyed := false
		for _, t := range s.TargetList {
			if rt := t.GetResTarget(); rt != nil {
				if o, ok := sc.keyOrigin(rt.Val); ok && o.ref.sc == sc && !o.ref.nullable {
					keyed = true
				}
			}
		}
		if !keyed {
			return "a subquery with DISTINCT (without a sharding key) drops duplicates of one shard only"
		}
	}
	if why := a.cov.fromLocal(s.FromClause, sc); why != "" {
		return why
	}
	return a.cov.uncovered(s.FromClause, sc)
}

// colName is the name Postgres gives an unnamed select-list entry
// (FigureColname), for the cases that matter to ORDER BY.
func colName(n *pg.Node) string {
	switch x := n.GetNode().(type) {
	case *pg.Node_ColumnRef:
		f := x.ColumnRef.Fields
		if len(f) > 0 {
			return strName(f[len(f)-1])
		}
	case *pg.Node_FuncCall:
		f := x.FuncCall.Funcname
		if len(f) > 0 {
			return strName(f[len(f)-1])
		}
	case *pg.Node_TypeCast:
		if name := colName(x.TypeCast.Arg); name != "?column?" {
			return name
		}
		if tn := x.TypeCast.TypeName; tn != nil && len(tn.Names) > 0 {
			return strName(tn.Names[len(tn.Names)-1])
		}
	case *pg.Node_AIndirection:
		for i := len(x.AIndirection.Indirection) - 1; i >= 0; i-- {
			if s := strName(x.AIndirection.Indirection[i]); s != "" {
				return s
			}
		}
		return colName(x.AIndirection.Arg)
	case *pg.Node_CoalesceExpr:
		return "coalesce"
	case *pg.Node_CaseExpr:
		return "case"
	case *pg.Node_SubLink:
		switch x.SubLink.SubLinkType {
		case pg.SubLinkType_EXISTS_SUBLINK:
			return "exists"
		case pg.SubLinkType_ARRAY_SUBLINK:
			return "array"
		case pg.SubLinkType_EXPR_SUBLINK:
			if s := x.SubLink.Subselect.GetSelectStmt(); s != nil && len(s.TargetList) > 0 {
				if rt := s.TargetList[0].GetResTarget(); rt != nil {
					if rt.Name != "" {
						return rt.Name
					}
					return colName(rt.Val)
				}
			}
		}
	}
	return "?column?"
}

// fromItem adds a FROM entry to sc and returns the keyed refs it holds.
func (a *analyzer) fromItem(n *pg.Node, sc *scope, nullable bool, ti *topInfo) []*tref {
	switch x := n.GetNode().(type) {
	case *pg.Node_RangeVar:
		rv := x.RangeVar
		vis := rv.Relname
		if rv.Alias != nil {
			vis = rv.Alias.Aliasname
		}
		if rv.Schemaname == "" {
			if d := sc.cte(rv.Relname); d != nil {
				d.uses++
				sc.items = append(sc.items, &item{name: vis, derived: d})
				if ti != nil && d.sharded {
					ti.derivedSharded = true
				}
				return nil
			}
		}
		a.addTable(rv.Relname)
		a.noteCatalog(rv)
		if t := a.sc.tables[rv.Relname]; t != nil && !isCatalog(rv.Schemaname, rv.Relname) {
			ref := a.g.newRef(t, vis, roleRead, sc)
			ref.nullable = nullable
			ref.top = ti != nil
			sc.items = append(sc.items, &item{name: vis, ref: ref})
			return []*tref{ref}
		}
		sc.items = append(sc.items, &item{name: vis, other: true})
		if ti != nil {
			ti.other = true
		}
		return nil
	case *pg.Node_JoinExpr:
		j := x.JoinExpr
		lnull := nullable || j.Jointype == pg.JoinType_JOIN_RIGHT || j.Jointype == pg.JoinType_JOIN_FULL
		rnull := nullable || j.Jointype == pg.JoinType_JOIN_LEFT || j.Jointype == pg.JoinType_JOIN_FULL
		lrefs := a.fromItem(j.Larg, sc, lnull, ti)
		rrefs := a.fromItem(j.Rarg, sc, rnull, ti)
		var f facts
		if j.Quals != nil {
			a.walk(j.Quals, sc)
			f = a.rd.conj(j.Quals, sc)
		}
		for _, u := range j.UsingClause {
			name := strName(u)
			lo, lok := keyIn(lrefs, name)
			ro, rok := keyIn(rrefs, name)
			if lok && rok && lo.typ() == ro.typ() {
				f.eqs = append(f.eqs, [2]colOrigin{lo, ro})
			}
		}
		switch j.Jointype {
		case pg.JoinType_JOIN_LEFT:
			a.g.apply(f, sc, modeOuter, rrefs)
		case pg.JoinType_JOIN_RIGHT:
			a.g.apply(f, sc, modeOuter, lrefs)
		case pg.JoinType_JOIN_FULL:
			a.g.apply(f, sc, modeFull, nil)
		default:
			a.g.apply(f, sc, modeInner, nil)
		}
		return append(lrefs, rrefs...)
	case *pg.Node_RangeSubselect:
		rs := x.RangeSubselect
		d := a.query(rs.Subquery, sc, false)
		name := ""
		if rs.Alias != nil {
			name = rs.Alias.Aliasname
			if len(rs.Alias.Colnames) > 0 {
				cols := make([]outCol, len(rs.Alias.Colnames))
				for i, c := range rs.Alias.Colnames {
					cols[i].name = strName(c)
					if i < len(d.cols) {
						cols[i].origin, cols[i].expr = d.cols[i].origin, d.cols[i].expr
					}
				}
				d = &derived{cols: cols, known: true, sharded: d.sharded, localWhy: d.localWhy}
			}
		}
		d.uses++
		a.cov.subs[rs] = d
		sc.items = append(sc.items, &item{name: name, derived: d})
		if ti != nil && d.sharded {
			ti.derivedSharded = true
		}
		return nil
	case *pg.Node_RangeTableSample:
		return a.fromItem(x.RangeTableSample.Relation, sc, nullable, ti)
	}
	a.walk(n, sc)
	name := ""
	if rf := n.GetRangeFunction(); rf != nil && rf.Alias != nil {
		name = rf.Alias.Aliasname
	}
	sc.items = append(sc.items, &item{name: name, other: true})
	if ti != nil {
		ti.other = true
	}
	return nil
}

func keyIn(refs []*tref, col string) (colOrigin, bool) {
	found, n := colOrigin{}, 0
	for _, r := range refs {
		if k := r.t.keyIndex(col); k >= 0 {
			found, n = colOrigin{ref: r, key: k}, n+1
		}
	}
	return found, n == 1
}

// ---- DML ----

func (a *analyzer) targetRef(rv *pg.RangeVar, sc *scope, ro role, verb string) *tref {
	vis := rv.Relname
	if rv.Alias != nil {
		vis = rv.Alias.Aliasname
	}
	a.addTable(rv.Relname)
	a.noteCatalog(rv)
	a.setWrite(verb + " " + rv.Relname)
	t := a.sc.tables[rv.Relname]
	if t == nil || isCatalog(rv.Schemaname, rv.Relname) {
		// A table outside the sharding schema is unsharded: it lives on
		// the default shard, where the write goes (Statement.Unsharded).
		// A global table (identical on every shard) or a catalog cannot
		// be written on one shard.
		if a.sc.global[rv.Relname] || isCatalog(rv.Schemaname, rv.Relname) {
			what := "is a global table (identical on every shard)"
			if !a.sc.global[rv.Relname] {
				what = "is a system catalog"
			}
			a.refuse("0A000", fmt.Sprintf("%s %s: the table %s, so pgshard cannot choose its shard", verb, rv.Relname, what),
				"Route the statement with /* pgshard:shard=NAME */.")
		}
		sc.items = append(sc.items, &item{name: vis, other: true})
		return nil
	}
	ref := a.g.newRef(t, vis, ro, sc)
	sc.items = append(sc.items, &item{name: vis, ref: ref})
	return ref
}

func (a *analyzer) insertStmt(ins *pg.InsertStmt, parent *scope) *derived {
	sc := &scope{parent: parent}
	a.with(ins.WithClause, sc)
	rv := ins.Relation
	// The rows to insert: VALUES lists, or a query (which cannot see the
	// target table).
	var rows [][]*pg.Node
	var src *derived
	if ins.SelectStmt != nil {
		sel := ins.SelectStmt.GetSelectStmt()
		if sel != nil && len(sel.ValuesLists) > 0 && sel.WithClause == nil && len(sel.SortClause) == 0 && sel.LimitCount == nil {
			for _, row := range sel.ValuesLists {
				items := row.GetList().GetItems()
				for _, v := range items {
					a.walk(v, sc)
				}
				rows = append(rows, items)
			}
		} else {
			src = a.query(ins.SelectStmt, sc, false)
		}
	} else {
		rows = [][]*pg.Node{nil} // DEFAULT VALUES
	}
	ref := a.targetRef(rv, sc, roleInsert, "INSERT into")
	if ref != nil {
		var cols []string
		for _, c := range ins.Cols {
			if rt := c.GetResTarget(); rt != nil {
				cols = append(cols, rt.Name)
			}
		}
		// pos: the key's index in a row, -1 if absent, -2 if unknown.
		pos := func(k keyCol) int {
			if len(cols) > 0 {
				return slices.Index(cols, k.col)
			}
			if ins.SelectStmt == nil {
				return -1
			}
			if k.pos > 0 {
				return k.pos - 1
			}
			return -2
		}
		var rowNodes []*cnode
		if src != nil {
			rowNodes = append(rowNodes, a.insertRow(ref, pos, func(i int) (*pg.Node, *colOrigin, bool) {
				if !src.known || i >= len(src.cols) {
					return nil, nil, false
				}
				c := src.cols[i]
				if c.expr == nil && c.origin == nil {
					return nil, nil, false // e.g. a UNION's column: unknown, not a default
				}
				return c.expr, c.origin, true
			}))
		}
		for _, row := range rows {
			rowNodes = append(rowNodes, a.insertRow(ref, pos, func(i int) (*pg.Node, *colOrigin, bool) {
				if i >= len(row) {
					return nil, nil, row == nil && ins.SelectStmt == nil // DEFAULT VALUES: every column takes its default
				}
				return row[i], nil, true
			}))
		}
		switch rowNodes = dropNil(rowNodes); len(rowNodes) {
		case 0:
		case 1:
			ref.cons = append(ref.cons, rowNodes[0])
		default:
			ref.cons = append(ref.cons, &cnode{op: cOr, kids: rowNodes})
		}
	}
	if oc := ins.OnConflictClause; oc != nil {
		// EXCLUDED is the proposed row: it has the inserted key.
		sc.items = append(sc.items, &item{name: "excluded", ref: ref, other: ref == nil})
		if oc.Infer != nil {
			a.walk(oc.Infer.WhereClause, sc)
		}
		a.walk(oc.WhereClause, sc)
		for _, t := range oc.TargetList {
			if rt := t.GetResTarget(); rt != nil {
				a.walk(rt.Val, sc)
				if ref != nil {
					a.keyAssign(ref, rt, sc, true)
				}
			}
		}
	}
	return a.returning(ins.ReturningList, sc)
}

// insertRow is the constraint one inserted row puts on the target's shard.
// at returns the row's i-th value: an expression, or (INSERT ... SELECT) a
// key column it copies; ok false when the value is unknown.
func (a *analyzer) insertRow(ref *tref, pos func(keyCol) int, at func(i int) (*pg.Node, *colOrigin, bool)) *cnode {
	t := ref.t
	var kids []*cnode
	linked := false
	for _, k := range t.keys {
		col := t.name + "." + k.col
		p := pos(k)
		if p == -2 {
			kids = append(kids, &cnode{op: cAll, note: "INSERT into " + t.name + " without a column list: the position of " + col + " is not configured"})
			continue
		}
		var e *pg.Node
		var o *colOrigin
		ok := p >= 0
		if ok {
			e, o, ok = at(p)
		}
		if p == -1 || ok && e == nil && o == nil || ok && e.GetSetToDefault() != nil {
			if k.typ == KeySeq {
				continue // generated on the shard that inserts the row
			}
			kids = append(kids, &cnode{op: cAll, note: col + " takes its default, whose shard is unknown"})
			continue
		}
		if !ok {
			kids = append(kids, &cnode{op: cAll, note: "the value of " + col + " is not known"})
			continue
		}
		if o != nil && o.typ() == k.typ {
			a.g.sameKeys(ref, o.ref)
			linked = true
			continue
		}
		if s := a.rd.srcOf(e, k, t.name, true); s != nil {
			kids = append(kids, &cnode{op: cSrc, src: s})
			continue
		}
		kids = append(kids, &cnode{op: cAll, note: col + " is computed (" + exprText(e) + ")"})
	}
	switch {
	case len(kids) == 0 && linked:
		return nil // the key is copied from the rows read: their group decides
	case len(kids) == 0:
		return &cnode{op: cNone, note: "a new " + t.name + " row is stored on the shard the statement runs on"}
	case len(kids) == 1:
		return kids[0]
	}
	return &cnode{op: cAnd, kids: kids}
}

func dropNil(ns []*cnode) []*cnode {
	out := ns[:0]
	for _, n := range ns {
		if n != nil {
			out = append(out, n)
		}
	}
	return out
}

// keyAssign checks an assignment (UPDATE SET, ON CONFLICT DO UPDATE SET)
// to a key column of ref: the row must stay on the statement's shard.
func (a *analyzer) keyAssign(ref *tref, rt *pg.ResTarget, sc *scope, onConflict bool) {
	k := ref.t.keyIndex(rt.Name)
	if k < 0 {
		return
	}
	kc := ref.t.keys[k]
	col := ref.t.name + "." + kc.col
	moves := func(how string) {
		a.refuse("0A000", fmt.Sprintf("the statement sets the sharding key %s %s: the row would belong to another shard", col, how),
			"Delete the row and insert it with its new key instead.")
	}
	v := rt.Val
	switch {
	case len(rt.Indirection) > 0 || v.GetMultiAssignRef() != nil:
		moves("in a compound assignment")
		return
	case v.GetSetToDefault() != nil:
		if kc.typ != KeySeq {
			moves("to its default")
		}
		return // a new sequence value from this shard's stride
	}
	if o, ok := sc.keyOrigin(v); ok && o.ref == ref && o.key == k {
		return // unchanged (SET id = id, SET id = EXCLUDED.id)
	}
	if s := a.rd.srcOf(v, kc, ref.t.name, true); s != nil {
		s.col = col + " (new value)"
		set := a.g.newRef(nil, "SET "+col, roleSetKey, sc)
		set.cons = []*cnode{{op: cSrc, src: s}}
		return
	}
	moves("to " + exprText(v))
}

func (a *analyzer) returning(list []*pg.Node, sc *scope) *derived {
	d := &derived{known: true}
	for _, t := range list {
		if rt := t.GetResTarget(); rt != nil {
			a.walk(rt.Val, sc)
			d.addTarget(rt, sc)
		}
	}
	return d
}

func (a *analyzer) updateStmt(up *pg.UpdateStmt, parent *scope) *derived {
	sc := &scope{parent: parent}
	a.with(up.WithClause, sc)
	ref := a.targetRef(up.Relation, sc, roleUpdate, "UPDATE")
	for _, f := range up.FromClause {
		a.fromItem(f, sc, false, nil)
	}
	a.where(up.WhereClause, sc, ref)
	for _, t := range up.TargetList {
		if rt := t.GetResTarget(); rt != nil {
			a.walk(rt.Val, sc)
			if ref != nil {
				a.keyAssign(ref, rt, sc, false)
			}
		}
	}
	return a.returning(up.ReturningList, sc)
}

func (a *analyzer) deleteStmt(del *pg.DeleteStmt, parent *scope) *derived {
	sc := &scope{parent: parent}
	a.with(del.WithClause, sc)
	ref := a.targetRef(del.Relation, sc, roleDelete, "DELETE from")
	for _, f := range del.UsingClause {
		a.fromItem(f, sc, false, nil)
	}
	a.where(del.WhereClause, sc, ref)
	return a.returning(del.ReturningList, sc)
}

// where analyzes an UPDATE/DELETE WHERE clause.
func (a *analyzer) where(w *pg.Node, sc *scope, target *tref) {
	if w == nil {
		return
	}
	if w.GetCurrentOfExpr() != nil {
		if target != nil {
			target.cons = append(target.cons, &cnode{op: cNone, note: "WHERE CURRENT OF: the row is on the cursor's shard"})
		}
		return
	}
	a.walk(w, sc)
	a.g.apply(a.rd.conj(w, sc), sc, modeInner, nil)
}

func (a *analyzer) mergeStmt(m *pg.MergeStmt, parent *scope) *derived {
	sc := &scope{parent: parent}
	a.with(m.WithClause, sc)
	if m.Relation != nil {
		a.addTable(m.Relation.Relname)
		a.setWrite("MERGE into " + m.Relation.Relname)
	}
	a.walk(m.SourceRelation, sc)
	a.refuse("0A000", "MERGE is not routed by pgshard",
		"Use INSERT ... ON CONFLICT with a key, or route the statement with /* pgshard:shard=NAME */.")
	return &derived{sharded: true}
}

// ---- expressions ----

// walk analyzes the subqueries and function calls inside an expression.
func (a *analyzer) walk(n *pg.Node, sc *scope) {
	inspect(n, func(x *pg.Node) bool {
		switch y := x.Node.(type) {
		case *pg.Node_SubLink:
			sl := y.SubLink
			a.walk(sl.Testexpr, sc)
			a.rd.sublinks[sl] = a.query(sl.Subselect, sc, false)
			return false
		case *pg.Node_FuncCall:
			a.funcCall(y.FuncCall, sc)
		case *pg.Node_TypeCast:
			if tn := y.TypeCast.TypeName; tn != nil && len(tn.Names) > 0 && objectTypes[strName(tn.Names[len(tn.Names)-1])] {
				a.objects = true
			}
		case *pg.Node_SelectStmt, *pg.Node_InsertStmt, *pg.Node_UpdateStmt, *pg.Node_DeleteStmt:
			a.query(x, sc, false)
			return false
		}
		return true
	})
}

func (a *analyzer) walkList(ns []*pg.Node, sc *scope) {
	for _, n := range ns {
		a.walk(n, sc)
	}
}

func funcName(fc *pg.FuncCall) (schema, name string) {
	f := fc.Funcname
	if len(f) == 0 {
		return "", ""
	}
	if len(f) > 1 {
		schema = strName(f[len(f)-2])
	}
	return schema, strName(f[len(f)-1])
}

func (a *analyzer) funcCall(fc *pg.FuncCall, sc *scope) {
	schema, name := funcName(fc)
	builtin := schema == "" || schema == "pg_catalog"
	if builtin {
		if objectFuncs[name] {
			a.objects = true
		}
		if why, ok := sessionFuncs[name]; ok && a.unsupported == "" {
			a.unsupported, a.unsupportedState = why, sessionFuncState[name]
		}
		if name == "set_config" && len(fc.Args) == 3 && a.rd.lit.has(fc.Args[2]) {
			a.rd.lit.taintf("set_config()'s third argument is a literal: its value decides the statement's kind")
		}
		if name == "set_config" && len(fc.Args) == 3 && a.rd.lit.has(fc.Args[0]) {
			a.rd.lit.taintf("set_config()'s first argument is a literal: the setting it names decides whether the statement only sets transaction-local state")
		}
		if name == "set_config" && len(fc.Args) == 3 && a.rd.lit.has(fc.Args[1]) {
			a.rd.lit.taintf("set_config()'s second argument is a literal: it is the value the statement sets")
		}
		if name == "set_config" && len(fc.Args) == 3 && !isTrue(fc.Args[2]) && a.unsupported == "" {
			a.unsupportedState = "set-config"
			a.unsupported = "set_config(..., false) changes a session setting, which would stay behind on a pooled server connection; use set_config(..., true) or SET LOCAL inside a transaction"
		}
	}
	if fk, ok := a.sc.funcs[name]; ok {
		a.setWrite("SELECT " + name + "()")
		ref := a.g.newRef(nil, name+"()", roleFunc, sc)
		var arg *pg.Node
		if fk.Arg < len(fc.Args) {
			arg = fc.Args[fk.Arg]
		}
		kc := keyCol{col: fmt.Sprintf("arg%d", fk.Arg+1), typ: fk.Type}
		switch {
		case arg == nil || arg.GetNamedArgExpr() != nil:
			ref.cons = []*cnode{{op: cAll, note: fmt.Sprintf("%s(): its key argument %d is not given by position", name, fk.Arg+1)}}
		default:
			if o, ok := sc.keyOrigin(arg); ok && o.typ() == fk.Type {
				a.g.sameKeys(ref, o.ref)
			} else if s := a.rd.srcOf(arg, kc, name, false); s != nil {
				s.col = fmt.Sprintf("%s() argument %d", name, fk.Arg+1)
				ref.cons = []*cnode{{op: cSrc, src: s}}
			} else {
				ref.cons = []*cnode{{op: cAll, note: fmt.Sprintf("%s(): its key argument is computed (%s)", name, exprText(arg))}}
			}
		}
		return
	}
	if a.unknownFn == "" && !(builtin && pgBuiltin[name]) {
		a.unknownFn = name
	}
	if a.notRO == "" && !(builtin && (readOnlyFuncs[name] || aggregates[name] || objectFuncs[name])) {
		a.notRO = fmt.Sprintf("it calls %s(), which pgshard cannot prove read-only", name)
	}
}

// isTrue and isFalse report whether n is the constant true or false (a
// boolean, or a string Postgres reads as one), cast at most.
func isTrue(n *pg.Node) bool { v, ok := constBool(n); return ok && v }

func isFalse(n *pg.Node) bool { v, ok := constBool(n); return ok && !v }

// constBool reads a boolean constant: ok is false for anything else.
func constBool(n *pg.Node) (v, ok bool) {
	for n.GetTypeCast() != nil {
		n = n.GetTypeCast().Arg
	}
	c := n.GetAConst()
	if c == nil || c.Isnull {
		return false, false
	}
	switch x := c.Val.(type) {
	case *pg.A_Const_Boolval:
		return x.Boolval.Boolval, true
	case *pg.A_Const_Sval:
		switch strings.ToLower(x.Sval.Sval) {
		case "f", "false", "off", "no", "n", "0":
			return false, true
		}
		return true, truthy(x.Sval.Sval)
	}
	return false, false
}

// truthy reports whether a string is a boolean option's true value as
// Postgres reads one (t, true, on, yes, y, 1; any case).
func truthy(s string) bool {
	switch strings.ToLower(s) {
	case "t", "true", "on", "yes", "y", "1":
		return true
	}
	return false
}

// exprText renders the small expressions that carry keys; others as "…".
func exprText(e *pg.Node) string {
	switch x := e.GetNode().(type) {
	case *pg.Node_ParamRef:
		return fmt.Sprintf("$%d", x.ParamRef.Number)
	case *pg.Node_AConst:
		if x.AConst.Isnull {
			return "NULL"
		}
		v, _ := constVal(x.AConst)
		switch v.kind {
		case kText, kInt, kNum:
			return string(appendConstExpr(nil, v))
		}
		if b, ok := x.AConst.Val.(*pg.A_Const_Boolval); ok {
			if b.Boolval.Boolval {
				return "true"
			}
			return "false"
		}
	case *pg.Node_TypeCast:
		tn := x.TypeCast.TypeName
		name := "?"
		if tn != nil && len(tn.Names) > 0 {
			name = strName(tn.Names[len(tn.Names)-1])
		}
		return exprText(x.TypeCast.Arg) + "::" + name
	case *pg.Node_ColumnRef:
		var parts []string
		for _, f := range x.ColumnRef.Fields {
			if f.GetAStar() != nil {
				parts = append(parts, "*")
			} else {
				parts = append(parts, strName(f))
			}
		}
		return strings.Join(parts, ".")
	case *pg.Node_FuncCall:
		_, name := funcName(x.FuncCall)
		return name + "(…)"
	case *pg.Node_SetToDefault:
		return "DEFAULT"
	case *pg.Node_SubLink:
		return "(SELECT …)"
	case *pg.Node_AExpr:
		ae := x.AExpr
		if ae.Kind == pg.A_Expr_Kind_AEXPR_OP && len(ae.Name) > 0 {
			op := strName(ae.Name[len(ae.Name)-1])
			if ae.Lexpr == nil {
				return op + exprText(ae.Rexpr)
			}
			return exprText(ae.Lexpr) + " " + op + " " + exprText(ae.Rexpr)
		}
	}
	return "…"
}

type facts struct {
	cons []refCons      // ref's key is constrained
	eqs  [][2]colOrigin // two keys are equal
	ins  [][2]colOrigin // key IN (SELECT key ...): the subquery's rows matter only for the outer key
}

// inspect calls fn for n and every node below it, depth first; fn
// returning false skips a node's children.
//
// The common expression nodes are walked directly (protoreflect is slow);
// the names inside a ColumnRef, operator or type are not visited.
func inspect(n *pg.Node, fn func(*pg.Node) bool) {
	if n == nil || n.Node == nil || !fn(n) {
		return
	}
	switch x := n.Node.(type) {
	case *pg.Node_ColumnRef, *pg.Node_AConst, *pg.Node_ParamRef, *pg.Node_String_, *pg.Node_AStar,
		*pg.Node_Integer, *pg.Node_Float, *pg.Node_Boolean, *pg.Node_SetToDefault:
		return
	case *pg.Node_AExpr:
		inspect(x.AExpr.Lexpr, fn)
		inspect(x.AExpr.Rexpr, fn)
	case *pg.Node_TypeCast:
		inspect(x.TypeCast.Arg, fn)
	case *pg.Node_BoolExpr:
		inspectAll(x.BoolExpr.Args, fn)
	case *pg.Node_ResTarget:
		inspectAll(x.ResTarget.Indirection, fn)
		inspect(x.ResTarget.Val, fn)
	case *pg.Node_SortBy:
		inspect(x.SortBy.Node, fn)
	case *pg.Node_List:
		inspectAll(x.List.Items, fn)
	case *pg.Node_NullTest:
		inspect(x.NullTest.Arg, fn)
	case *pg.Node_RowExpr:
		inspectAll(x.RowExpr.Args, fn)
	case *pg.Node_AArrayExpr:
		inspectAll(x.AArrayExpr.Elements, fn)
	case *pg.Node_CoalesceExpr:
		inspectAll(x.CoalesceExpr.Args, fn)
	case *pg.Node_SubLink:
		inspect(x.SubLink.Testexpr, fn)
		inspect(x.SubLink.Subselect, fn)
	case *pg.Node_FuncCall:
		fc := x.FuncCall
		inspectAll(fc.Args, fn)
		inspectAll(fc.AggOrder, fn)
		inspect(fc.AggFilter, fn)
		if fc.Over != nil {
			inspectMsg(fc.Over.ProtoReflect(), fn)
		}
	default:
		inspectMsg(n.ProtoReflect(), fn)
	}
}

func inspectAll(ns []*pg.Node, fn func(*pg.Node) bool) {
	for _, n := range ns {
		inspect(n, fn)
	}
}

func inspectMsg(m protoreflect.Message, fn func(*pg.Node) bool) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil || fd.IsMap() {
			return true
		}
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				visitMsg(l.Get(i).Message(), fn)
			}
			return true
		}
		visitMsg(v.Message(), fn)
		return true
	})
}

func visitMsg(m protoreflect.Message, fn func(*pg.Node) bool) {
	if node, ok := m.Interface().(*pg.Node); ok {
		inspect(node, fn)
		return
	}
	inspectMsg(m, fn)
}
