package route

import (
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// Reads in two stages: a read refused because a FROM subquery or CTE
// needs every shard's rows at once (LIMIT, aggregates, DISTINCT, a window
// inside it), or a subquery of its WHERE or select list reads other
// shards' rows than its own, is answered when every sharded table it
// reads outside its own FROM lies in subqueries each answerable alone:
//
//	SELECT ... FROM (inner 1) AS d JOIN (inner 2) AS e ... WITH c AS (inner 3) ...
//	  stage 1: each inner, as a statement of its own, routed by Route
//	           (fanned out and merged, or on its one shard)
//	  stage 2: the outer statement, each inner replaced by its rows,
//	           on the default shard, where Postgres evaluates the rest
//	SELECT ... FROM t a WHERE a.x IN (inner 1) AND EXISTS (inner 2) ...
//	  the spread plan (tried first): the same, but the outer statement
//	  keeps its FROM and stage 2 is routed as any read (its key's shard,
//	  or every shard merged)
//
// Stages are looked for only when Route refuses a read-only SELECT, once
// per statement (cached in the Statement). Not answered in two stages:
// a LATERAL subquery or a subquery qualifying a column by a relation of
// the statement around it (correlated; an EXISTS tied to the row by one
// equality is decorrelated first: decorrelate.go), an inner that reads
// a CTE of the statement, recursive CTEs, COLLATE anywhere (a column's
// collation would be lost), writes. A set operation at the top that
// setop.go does not merge (INTERSECT, EXCEPT, a branch with aggregates or
// LIMIT) has each branch that reads a sharded table as an inner statement
// (branches): stage 2 computes the set operation on the default shard.
// A SELECT without FROM has each subquery that reads a sharded table as
// an inner statement (sublinks): SELECT EXISTS (SELECT 1 FROM t WHERE
// ...), SELECT (SELECT count(*) FROM t) AS n.

// acrossShards reports whether ref refuses a read only because it needs
// several shards' rows at once (what two stages may answer: its Cause),
// not for an error of the statement or its parameters: keys of two
// shards too (twoShards), which only a spread plan answers.
func acrossShards(ref *Refusal) bool {
	return ref != nil && ref.SQLState == "0A000" && ref.Cause != CauseNone
}

// unshardedKeyed ends the message of a keyed read of another shard than
// the default one that also reads an unsharded table (unshardedElsewhere,
// CauseUnshardedKeyed): a spread plan answers it when the unsharded table
// is read by a subquery of its own.
const unshardedKeyed = "one shard cannot read both"

// unshardedFanOut ends the message of a read of every shard that also
// reads an unsharded table (cannotFanOut, CauseUnshardedFanOut):
// answered in two stages when the unsharded table is read by a subquery
// of its own (stage 1 on the default shard), or stage 2 runs there.
const unshardedFanOut = "which is not sharded and lives on the default shard only"

// twoShards reports whether ref refuses a statement whose keys name two
// shards (evaluator.conflict): answered in two stages by a spread plan
// (a subquery keyed to another shard than the statement's), or by one
// whose tables are each read on its key's shard first (its key pushed
// into it), never by reading a table whole (routeThis).
func twoShards(ref *Refusal) bool {
	return ref != nil && ref.Cause == CauseTwoShards
}

// noStages marks a statement without a two-stage plan.
var noStages = &Stages{}

// stages is st's two-stage plan, noStages if it has none: built once per
// statement and kept in it (a statement bound to a shape's analysis has
// the shape's pointer, for another text, and builds its own).
func (s *statements) stages(st *Statement) *Stages {
	sg := (*Stages)(atomic.LoadPointer(&st.stages))
	if sg == nil || sg.stmt != st.SQL && sg != noStages {
		b := stageBuilder{analyze: s.analyze, sc: s.sc}
		query, co := st.SQL, (*CopyOut)(nil)
		if st.Copy {
			query, co = st.plan.copyStaged.query, st.plan.copyStaged.co
		}
		sg = b.plan(query)
		for x := sg; x != nil && x != noStages; x = x.alt {
			x.stmt, x.merge.CopyOut = st.SQL, co
			x.learn = &stageLearn{analyze: s.analyze, sc: s.sc}
		}
		atomic.StorePointer(&st.stages, unsafe.Pointer(sg))
	}
	return sg
}

// Query is the SELECT these are the stages of: the client's statement,
// or a COPY (query) TO's query (its Merge has CopyOut: the engine writes
// stage 2's rows as the COPY).
func (sg *Stages) Query() string { return sg.sql }

// route is the Dest of these stages, or refused (the Dest Route decided
// for the whole statement) when sg is noStages or a stage is refused;
// one routes a stage's statement alone (Route without two stages).
func (sg *Stages) route(refused Dest, one func(*Statement) Dest) Dest {
	d := sg.routeThis(refused, one)
	for x := sg.alt; d.Kind == DestRefuse && x != nil; x = x.alt {
		d = x.routeThis(refused, one)
	}
	return d
}

// routeThis is route for sg's own plan (not its alternative).
func (sg *Stages) routeThis(refused Dest, one func(*Statement) Dest) Dest {
	if sg == noStages {
		return refused
	}
	// A keyed read is never answered by reading its tables whole: without
	// the spread plan, only where each table read first is read on its
	// key's shard (its key pushed into it: pushdown.go).
	keyed := !sg.Spread && (twoShards(refused.Refusal) || refused.Refusal != nil && refused.Refusal.Cause == CauseUnshardedKeyed)
	for _, in := range sg.Inner {
		d := one(in)
		if d.Kind == DestRefuse || d.Kind == DestAll && (d.Merge == nil || keyed) || len(in.Unsharded) > 0 && d.Kind != DestAny {
			return refused // (an unsharded table is read on the default shard alone)
		}
	}
	d := one(sg.outer)
	if !sg.Spread && d.Kind != DestAny || d.Kind == DestRefuse || d.Kind == DestAll && (d.Merge == nil || d.Merge.Stages != nil) ||
		len(sg.outer.Unsharded) > 0 && d.Kind != DestAny {
		return refused
	}
	n := len(sg.Inner)
	why := "in two stages: " + itoa(int64(n)) + " subquer" + plural(n, "y", "ies")
	if sg.Spread {
		why += " answered first, then the statement with their rows where it routes (" + d.Why() + ")"
	} else {
		why += " read first (each where its own routing sends it), then the statement over their rows on the default shard"
	}
	return Dest{Kind: DestAll, Bucket: -1, Merge: sg.merge, Reason: why}
}

// OuterStatement is Outer's analysis: Route decides where stage 2 runs
// (a spread plan's; any other's runs on the default shard).
func (sg *Stages) OuterStatement() *Statement { return sg.outer }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// plan builds the two-stage plans of a SELECT's text, noStages if it
// has none, tried in this order (each the alternative of the one
// before: whether Route answers a plan may depend on the parameters — a
// literal normalized away, a key of the wrong type — and on whether its
// inner statements are answered alone):
//
//	spread  its outer statement keeps its FROM and is routed as any read
//	flat    its outer statement runs on the default shard; its FROM
//	        subqueries, CTEs and uncorrelated subqueries are inner
//	        statements, its sharded tables in FROM read whole
//	deep    the same, but a FROM subquery, CTE, branch or uncorrelated
//	        subquery that reads a sharded table stays in the outer
//	        statement, taken apart the same way (inside): for one that
//	        is no read pgshard answers alone (a join not on the keys, a
//	        window or LIMIT over such a join)
//	correlated  the same, and so is a subquery that refers to the row
//	        around it (in WHERE, the select list, a LATERAL subquery):
//	        stage 2 runs it once per row over its tables' rows, which
//	        have no index there, so the engine refuses it beyond a
//	        budget of rows compared (Stages.Correlated)
func (b *stageBuilder) plan(sql string) *Stages {
	low := strings.ToLower(sql)
	for _, w := range []string{"pgshard_stage_", "pgshard_v", "collate", "ctid", "xmin", "xmax", "cmin", "cmax", "tableoid"} {
		if strings.Contains(low, w) {
			return noStages // a marker, a collation or a system column a stage would lose
		}
	}
	var first, last *Stages
	for _, mode := range []stageMode{stageSpread, stageFlat, stageDeep, stageCorrelated} {
		sg := b.build(sql, mode)
		if sg == noStages {
			continue
		}
		if last != nil && sg.Outer == last.Outer {
			// The plan before it again (the same outer statement, so the
			// same inner ones): as much a plan that takes every part
			// apart as this one is.
			last.apart = last.apart || sg.apart
			continue
		}
		if first == nil {
			first = sg
		} else {
			last.alt = sg
		}
		last = sg
	}
	if first == nil {
		return noStages
	}
	return first
}

// stageMode is the kind of two-stage plan build builds (plan).
type stageMode int

const (
	stageSpread stageMode = iota
	stageFlat
	stageDeep
	stageCorrelated
)

// build builds one kind of two-stage plan of sql (plan): spread, only
// the subqueries of the WHERE, HAVING and select list of a SELECT with
// FROM as inner statements (its FROM stays, and stage 2 runs where Route
// sends it); else every part reading a sharded table that can be one
// (flat) or its sharded tables (deep), stage 2 on the default shard.
func (b *stageBuilder) build(sql string, mode stageMode) *Stages {
	spread := mode == stageSpread
	b.inner, b.innerSub, b.corrInner, b.fail, b.sub = nil, nil, nil, false, -1
	b.spread, b.deep, b.corr, b.inCorr = spread, mode >= stageDeep, mode == stageCorrelated, 0
	res, err := pg.Parse(sql)
	if err != nil || len(res.Stmts) != 1 {
		return noStages
	}
	root := res.Stmts[0].Stmt
	if orderSensitive(root) {
		return noStages
	}
	sel := root.GetSelectStmt()
	if sel == nil || len(sel.ValuesLists) > 0 || sel.IntoClause != nil || spread && (isSetOp(sel) || len(sel.FromClause) == 0) {
		return noStages
	}
	b.ctes = map[string]bool{}
	if w := sel.WithClause; w != nil {
		if w.Recursive {
			return noStages
		}
		for _, c := range w.Ctes {
			b.ctes[strings.ToLower(c.GetCommonTableExpr().GetCtename())] = true
		}
		for _, c := range w.Ctes {
			cte := c.GetCommonTableExpr()
			if cte == nil || cte.Ctequery.GetSelectStmt() == nil {
				return noStages
			}
			if !spread {
				b.part(&cte.Ctequery)
			}
		}
	}
	switch {
	case isSetOp(sel):
		b.branches(&sel.Larg)
		b.branches(&sel.Rarg)
	case len(sel.FromClause) == 0:
		b.sublinks(sel)
	default:
		var subs []*pg.SubLink
		if len(b.learned) > 0 { // learn.go
			if !b.noDirect {
				if sg := b.direct(root, sql); sg != nil {
					return sg
				}
			}
			if subs = qualify(sel, b.learned, true); subs == nil {
				return noStages
			}
		}
		done := decorrelate(sel) // decorrelate.go
		for _, sl := range subs {
			if !slices.Contains(done, sl) {
				return noStages // a subquery qualified by its own relation stays unverified
			}
		}
		b.sublinks(sel)
		push := pushable(sel, true)
		for _, it := range sel.FromClause {
			if spread {
				b.fromUnsharded(it, push) // the spread plan keeps the rest of the FROM as it is
				continue
			}
			b.from(it, push)
		}
	}
	if b.fail || len(b.inner) == 0 {
		return noStages
	}
	outer, err := deparse(root)
	if err != nil {
		return noStages
	}
	for i := range b.inner {
		if strings.Count(outer, StageMarker(i)) != 1 {
			return noStages
		}
	}
	ost, err := b.analyze(outer)
	if err != nil || ost.ParseError != "" || !ost.Select || !ost.ReadOnly {
		return noStages
	}
	if spread && (len(ost.Unsharded) > 0 || ost.plan != nil && ost.plan.static != nil && ost.plan.static.Kind == DestRefuse) ||
		!spread && b.keyed(ost) {
		return noStages
	}
	sg := &Stages{Inner: b.inner, Outer: outer, Spread: spread, outer: ost, sql: sql, innerSub: b.innerSub, corr: b.corrInner, apart: b.deep}
	sg.merge = &Merge{Width: -1, Limit: -1, Offset: -1, Stages: sg}
	return sg
}

// stageBuilder builds one statement's two-stage plan: it replaces the
// inner statements of its parse tree by markers and analyzes each.
type stageBuilder struct {
	// analyze is Table.Analyze: the inner and outer statements are
	// analyzed (and cached) like any other text.
	analyze func(sql string) (*Statement, error)
	sc      *compiled       // which tables are sharded
	ctes    map[string]bool // the statement's CTE names
	inner   []*Statement
	fail    bool
	// spread: the plan being built keeps the statement's FROM, and stage
	// 2 runs where Route sends it — possibly not on the default shard, so
	// a subquery reading an unsharded table is an inner statement too.
	// deep: its parts are taken apart rather than made inner statements
	// (part); corr: so are its correlated subqueries (inCorr counts those
	// being taken apart, corrInner marks the inner statements read for
	// them).
	spread, deep, corr bool
	inCorr             int
	corrInner          []bool
	// learned are columns learned to be the statement's row's (learn.go);
	// sub is the ordinal of the subquery sublinks stages, innerSub each
	// inner statement's (-1: not a subquery of sublinks).
	learned  []learnedCol
	sub      int
	innerSub []int
	// noDirect: build no direct plan (learn.go), the plan that qualifies
	// and decorrelates instead.
	noDirect bool
}

// from replaces the sharded subqueries and tables of a FROM item; push
// are the terms of its SELECT's WHERE a table may be read with
// (pushable).
func (b *stageBuilder) from(n *pg.Node, push map[string][]*pg.Node) {
	switch {
	case n.GetJoinExpr() != nil:
		b.from(n.GetJoinExpr().Larg, push)
		b.from(n.GetJoinExpr().Rarg, push)
	case n.GetRangeVar() != nil:
		b.pull(n, push)
	case n.GetRangeSubselect() != nil:
		rs := n.GetRangeSubselect()
		switch {
		case rs.Subquery.GetSelectStmt() == nil:
		case !rs.Lateral:
			b.part(&rs.Subquery)
		case b.corr:
			b.correlatedPart(rs.Subquery.GetSelectStmt())
		}
	}
}

// branches makes each branch of a set operation that reads a sharded
// table an inner statement of its own (INTERSECT, EXCEPT, or a UNION
// setop.go does not merge: stage 2 computes the set operation over the
// branches' merged rows).
func (b *stageBuilder) branches(s **pg.SelectStmt) {
	if isSetOp(*s) {
		b.branches(&(*s).Larg)
		b.branches(&(*s).Rarg)
		return
	}
	if len((*s).ValuesLists) > 0 {
		return
	}
	n := &pg.Node{Node: &pg.Node_SelectStmt{SelectStmt: *s}}
	b.part(&n)
	if sel := n.GetSelectStmt(); sel != nil {
		*s = sel
	}
}

// sublinks makes each subquery in the WHERE, HAVING, select list and
// ORDER BY of sel that reads a sharded table and names no relation of the statement
// around it (correlated) an inner statement: with no FROM (SELECT EXISTS
// (...), SELECT (SELECT count(*) FROM t), SELECT 1 WHERE EXISTS (...)),
// or over the statement's own FROM (WHERE a.k IN (SELECT ... FROM t b
// WHERE ...)). Stage 1 reads one row of an EXISTS (LIMIT 1 when it has
// none: the same truth value), and at most PullLimit+1 of an IN, ANY,
// ALL or ARRAY (bound). A subquery that names a column of the statement around it
// without a qualifier shows as correlated only when it runs alone (the
// engine refuses the read then: twostage.go there).
func (b *stageBuilder) sublinks(sel *pg.SelectStmt) {
	b.sub = -1
	defer func() { b.sub = -1 }()
	topSublinks(sel, func(_ *pg.Node, sl *pg.SubLink) {
		b.sub++
		if correlated(sl.Subselect) {
			if b.corr {
				b.correlatedPart(sl.Subselect.GetSelectStmt())
			}
			return
		}
		if q := sl.Subselect.GetSelectStmt(); sl.SubLinkType == pg.SubLinkType_EXISTS_SUBLINK && q != nil && q.LimitCount == nil && q.LimitOffset == nil {
			q.LimitCount, q.LimitOption = pg.MakeAConstIntNode(1, -1), pg.LimitOption_LIMIT_OPTION_COUNT
		} else if sl.SubLinkType != pg.SubLinkType_EXPR_SUBLINK {
			b.bound(sl.Subselect) // a scalar subquery reads one row or fails
		}
		b.part(&sl.Subselect)
	})
}

// bound gives subquery q, a SELECT without LIMIT or OFFSET, LIMIT
// PullLimit+1: more rows than that are refused anyway (54000), and the
// limit lets every shard stop there (an index scan stops early) rather
// than read, and sort for a merge, a whole table first. Fewer rows are
// the subquery's all, so the answer is the same. Left without it when the
// limit would make q a read pgshard does not merge, or q stays in the
// outer statement (it reads no sharded table, or a CTE of the statement:
// stage), where the limit would change its answer.
func (b *stageBuilder) bound(q *pg.Node) {
	sel := q.GetSelectStmt()
	if sel == nil || isSetOp(sel) || sel.LimitCount != nil || sel.LimitOffset != nil || len(sel.ValuesLists) > 0 || b.deep {
		return // (the deep plan takes it apart: part)
	}
	sel.LimitCount, sel.LimitOption = pg.MakeAConstIntNode(PullLimit+1, -1), pg.LimitOption_LIMIT_OPTION_COUNT
	if text, err := deparse(q); err == nil {
		if st, err := b.analyze(text); err == nil && st.ParseError == "" && b.staged(st) && !b.ctesRead(st) &&
			(b.spread || !b.keyed(st) || !b.readsUnsharded(st)) && // not taken apart (stage)
			(st.plan == nil || st.plan.static == nil || st.plan.static.Kind != DestRefuse) {
			return // an inner statement (stage), merged as it is
		}
	}
	sel.LimitCount, sel.LimitOption = nil, pg.LimitOption_LIMIT_OPTION_DEFAULT
}

// correlated reports whether subquery q qualifies a column by a relation
// it does not have itself (a.id in EXISTS (SELECT 1 FROM t b WHERE b.k =
// a.id)): a column of the statement around it.
func correlated(q *pg.Node) bool {
	names := relationNames(q)
	outer := false
	inspect(q, func(n *pg.Node) bool {
		if cr := n.GetColumnRef(); cr != nil && len(cr.Fields) >= 2 && !names[strName(cr.Fields[len(cr.Fields)-2])] {
			outer = true
		}
		return !outer
	})
	return outer
}

// PullLimit bounds the rows stage 1 reads of a sharded table in FROM:
// the inner statement asks for one more than the engine accepts.
const PullLimit = 10000

// CorrelatedBudget bounds the rows stage 2 compares for its subqueries
// that refer to the row (Stages.Correlated): the rows stage 1 read for
// them times the other rows it read (+1), beyond which the engine
// refuses the read (54000). About 0.4 s of one core on the machines
// pgshard is tested on: 2,000 × 2,000 rows of a LATERAL ... LIMIT over
// VALUES lists took 390 ms.
const CorrelatedBudget = 4_000_000

// fromUnsharded makes each unsharded table of a spread plan's FROM item
// an inner statement, read whole (pullTable): stage 1 reads it on the
// default shard, and stage 2 — its key's shard, or every shard — joins
// its rows as the table's (SELECT e.data, d.owner FROM executions e JOIN
// definitions d ON d.name = e.definition_id WHERE e.id = $1, of any
// shard).
func (b *stageBuilder) fromUnsharded(n *pg.Node, push map[string][]*pg.Node) {
	switch {
	case n.GetJoinExpr() != nil:
		b.fromUnsharded(n.GetJoinExpr().Larg, push)
		b.fromUnsharded(n.GetJoinExpr().Rarg, push)
	case n.GetRangeVar() != nil:
		rv := n.GetRangeVar()
		if !b.ctes[rv.Relname] && !b.keyedTable(rv.Relname) && !b.sc.global[rv.Relname] && !isCatalog(rv.Schemaname, rv.Relname) {
			b.pullTable(n, push)
		}
	}
}

// pull makes a sharded table in FROM (n, a RangeVar) an inner statement
// of its own, SELECT * FROM t LIMIT PullLimit+1, read as a subquery with
// the table's name or alias (pullTable).
func (b *stageBuilder) pull(n *pg.Node, push map[string][]*pg.Node) {
	rv := n.GetRangeVar()
	if b.ctes[rv.Relname] || !b.keyedTable(rv.Relname) {
		return
	}
	b.pullTable(n, push)
}

// pullTable makes the table of RangeVar n an inner statement of its own,
// SELECT * FROM t LIMIT PullLimit+1, read as a subquery with the table's
// name or alias; with the terms push has for that name, SELECT * FROM t
// alias WHERE terms LIMIT PullLimit+1 (pushdown.go).
func (b *stageBuilder) pullTable(n *pg.Node, push map[string][]*pg.Node) {
	rv := n.GetRangeVar()
	if rv.Schemaname != "" && rv.Alias == nil {
		b.fail = true // the statement may name its columns schema.table.column
		return
	}
	alias := rv.Alias
	if alias == nil {
		alias = &pg.Alias{Aliasname: rv.Relname}
	}
	bare := proto.Clone(rv).(*pg.RangeVar)
	bare.Alias = nil
	tmpl, err := pg.Parse("SELECT * FROM t LIMIT " + itoa(PullLimit+1))
	if err != nil {
		b.fail = true
		return
	}
	q := tmpl.Stmts[0].Stmt
	if terms := push[alias.Aliasname]; len(terms) > 0 {
		bare.Alias = rv.Alias // the terms name the table by it
		q.GetSelectStmt().WhereClause = withTerms(terms)
	}
	q.GetSelectStmt().FromClause[0] = &pg.Node{Node: &pg.Node_RangeVar{RangeVar: bare}}
	sub := &pg.RangeSubselect{Subquery: q, Alias: alias}
	b.stage(&sub.Subquery)
	n.Node = &pg.Node_RangeSubselect{RangeSubselect: sub}
}

// part makes *q, a FROM subquery, CTE, set operation's branch or
// uncorrelated subquery, an inner statement (stage); the deep plan takes
// it apart instead (inside): it stays in the outer statement, on the
// default shard, with its own sharded tables and parts read first.
func (b *stageBuilder) part(q **pg.Node) {
	if !b.deep {
		b.stage(q)
		return
	}
	b.inside((*q).GetSelectStmt())
}

// correlatedPart takes apart sel, a subquery that refers to the row
// around it (the correlated plan: inside), its inner statements marked
// as read for it.
func (b *stageBuilder) correlatedPart(sel *pg.SelectStmt) {
	b.inCorr++
	defer func() { b.inCorr-- }()
	b.inside(sel)
}

// stage makes *q an inner statement when it reads a sharded table.
func (b *stageBuilder) stage(q **pg.Node) {
	text, err := deparse(*q)
	if err != nil {
		b.fail = true
		return
	}
	st, err := b.analyze(text)
	if err != nil || st.ParseError != "" || !st.Select || !st.ReadOnly {
		b.fail = true
		return
	}
	if !b.staged(st) {
		return // stays in the outer statement
	}
	if b.keyed(st) && b.readsUnsharded(st) {
		// It reads an unsharded table too, so it is no statement alone
		// (its read would need two stages itself). In the spread plan it
		// would be one: no spread plan. Else it stays in the outer
		// statement, on the default shard, its sharded parts taken out.
		if b.spread {
			b.fail = true
			return
		}
		b.inside((*q).GetSelectStmt())
		return
	}
	if b.ctesRead(st) {
		b.fail = true // reads a CTE of the statement: not a statement alone
		return
	}
	mk, err := pg.Parse(StageMarker(len(b.inner)))
	if err != nil {
		b.fail = true
		return
	}
	*q = mk.Stmts[0].Stmt
	b.inner, b.innerSub, b.corrInner = append(b.inner, st), append(b.innerSub, b.sub), append(b.corrInner, b.inCorr > 0)
}

// inside takes out the sharded parts of sel, a subquery, CTE or set
// operation's branch that stays in the outer statement of a plan whose
// stage 2 runs on the default shard (a part that also reads an unsharded
// table: stage), as build does the statement's: its subqueries that do
// not refer to a row around them and its FROM's subqueries and sharded
// tables. Its inner statements are no subquery of the statement's own
// (innerSub -1: nothing is learned for them, learn.go).
func (b *stageBuilder) inside(sel *pg.SelectStmt) {
	if sel == nil {
		b.fail = true
		return
	}
	sub, n0 := b.sub, len(b.inner)
	defer func() {
		b.sub = sub
		for i := n0; i < len(b.innerSub); i++ {
			b.innerSub[i] = -1
		}
	}()
	if isSetOp(sel) {
		b.branches(&sel.Larg)
		b.branches(&sel.Rarg)
		return
	}
	b.sublinks(sel)
	push := pushable(sel, false)
	for _, it := range sel.FromClause {
		b.from(it, push)
	}
}

// readsUnsharded reports whether st reads an unsharded table (a CTE of
// the statement is no table: st was analyzed alone).
func (b *stageBuilder) readsUnsharded(st *Statement) bool {
	for _, t := range st.Unsharded {
		if !b.ctes[t] {
			return true
		}
	}
	return false
}

// ctesRead reports whether st reads a CTE of the statement.
func (b *stageBuilder) ctesRead(st *Statement) bool {
	for _, t := range st.Tables {
		if b.ctes[t] {
			return true
		}
	}
	return false
}

// keyed reports whether st reads a table of the sharding schema.
func (b *stageBuilder) keyed(st *Statement) bool {
	for _, t := range st.Tables {
		if b.keyedTable(t) {
			return true
		}
	}
	return false
}

// staged reports whether subquery st is an inner statement: it reads a
// sharded table, or, in a spread plan (whose stage 2 may run on other
// shards than the default one), an unsharded one (stage 1 reads it on
// the default shard, where it lives).
func (b *stageBuilder) staged(st *Statement) bool {
	return b.keyed(st) || b.spread && b.readsUnsharded(st)
}

// keyedTable reports whether t is a table of the sharding schema.
func (b *stageBuilder) keyedTable(t string) bool { return b.sc.tables[t] != nil }

// inputOrdered are aggregates whose value depends on the order of their
// input rows unless they have an ORDER BY of their own.
var inputOrdered = map[string]bool{"string_agg": true, "array_agg": true, "json_agg": true, "jsonb_agg": true,
	"json_object_agg": true, "jsonb_object_agg": true, "xmlagg": true, "json_agg_strict": true, "jsonb_agg_strict": true}

// peerOrdered are window functions whose value depends on the order of
// rows that tie in the window's ORDER BY.
var peerOrdered = map[string]bool{"row_number": true, "ntile": true, "lag": true, "lead": true,
	"first_value": true, "last_value": true, "nth_value": true}

// orderSensitive reports whether the statement's answer may depend on
// the order in which a relation's rows are read (which stage 1 does not
// keep: the shards' rows come one shard after another), beyond what
// the statement leaves to Postgres: an aggregate of ordered input
// without ORDER BY, a window function over peers or with a frame whose
// window has no ORDER BY, DISTINCT ON in a SELECT without ORDER BY. A
// window's or a DISTINCT ON's ORDER BY says which rows come first; the
// order of rows it ties is Postgres's choice on one database too
// (row_number() OVER (ORDER BY x) numbers rows of equal x in any
// order), so stage 2's order among them is one of its answers. FETCH
// ... WITH TIES keeps every row that ties with the last one: the same
// rows whatever order they are read in — but over min and max of one
// table without GROUP BY one database may fail it where stage 2 does not
// (21000: Postgres reads such aggregates by an index, as InitPlans the
// tie test evaluates again), so that one is not answered.
func orderSensitive(root *pg.Node) bool {
	bad := false
	named := namedWindows(root)
	inspect(root, func(n *pg.Node) bool {
		if fc := n.GetFuncCall(); fc != nil {
			_, name := funcName(fc)
			bad = bad || inputOrdered[name] && len(fc.AggOrder) == 0 ||
				fc.Over != nil && (peerOrdered[name] || fc.Over.FrameOptions&1 != 0) && !windowOrdered(fc.Over, named)
		}
		if sel := n.GetSelectStmt(); sel != nil {
			bad = bad || len(sel.DistinctClause) > 0 && sel.DistinctClause[0].GetNode() != nil && len(sel.SortClause) == 0 ||
				sel.LimitOption == pg.LimitOption_LIMIT_OPTION_WITH_TIES && len(sel.GroupClause) == 0 && minMaxed(sel)
		}
		return !bad
	})
	return bad
}

// namedWindows are the windows the statement names (WINDOW w AS (...)),
// by name; a name defined twice (in two SELECTs) maps to nil: which one a
// call means is not looked for.
func namedWindows(root *pg.Node) map[string]*pg.WindowDef {
	named := map[string]*pg.WindowDef{}
	inspect(root, func(n *pg.Node) bool {
		if sel := n.GetSelectStmt(); sel != nil {
			for _, w := range sel.WindowClause {
				if wd := w.GetWindowDef(); wd != nil {
					if _, dup := named[wd.Name]; dup {
						named[wd.Name] = nil
					} else {
						named[wd.Name] = wd
					}
				}
			}
		}
		return true
	})
	return named
}

// windowOrdered reports whether window w (OVER (...), OVER name, or
// OVER (name ...)) has an ORDER BY, its own or its named window's.
func windowOrdered(w *pg.WindowDef, named map[string]*pg.WindowDef) bool {
	for range 4 { // a named window may refer to another one
		if len(w.OrderClause) > 0 {
			return true
		}
		ref := w.Refname
		if ref == "" {
			ref = w.Name
		}
		next := named[ref]
		if ref == "" || next == nil || next == w {
			return false
		}
		w = next
	}
	return false
}

// minMaxed reports whether sel is a read Postgres may answer by index
// (its min/max optimization): one table in FROM, and its aggregates (in
// the select list, ORDER BY or HAVING) min and max only.
func minMaxed(sel *pg.SelectStmt) bool {
	if len(sel.FromClause) != 1 || sel.FromClause[0].GetRangeVar() == nil {
		return false
	}
	minMax, other := false, false
	for _, n := range append(append(slices.Clone(sel.TargetList), sel.SortClause...), sel.HavingClause) {
		inspect(n, func(x *pg.Node) bool {
			if fc := x.GetFuncCall(); fc != nil && fc.Over == nil {
				switch _, name := funcName(fc); {
				case name == "min" || name == "max":
					minMax = true
				case aggregates[name]:
					other = true
				}
			}
			return true
		})
	}
	return minMax && !other
}
