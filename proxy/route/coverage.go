package route

import (
	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/pgshard/pgshard/shardmap"
)

// Whether the rows of a FROM clause each come from exactly one shard, the
// fan-out rule's question (doc.go, "The fan-out rule"): a row that
// contains a row of a keyed table lives on that row's shard (it is
// covered); a derived table or CTE is read in a fan-out only when its own
// rows are each from one shard (its localWhy is ""); a VALUES list joined
// on a sharding key may be split by shard (valuesplit.go) and is then
// covered too.

// coverage is what the analysis knows about a statement's FROM items
// beyond its refs: the derived table of each FROM subquery (subs, filled
// as the analysis meets them) and the VALUES list the fan-out splits by
// shard (split, nil if none). tables and m are the sharding schema's
// keyed tables and the shard map the split places rows by.
type coverage struct {
	subs   map[*pg.RangeSubselect]*derived
	split  *valuesSplit
	tables map[string]*tableInfo
	m      *shardmap.Map
	// g is the analysis's refs and their links (a LATERAL subquery's
	// tie to the row: tiedToRow).
	g *refGraph
}

// fromLocal says why a FROM item reads a derived table or CTE over keyed
// tables whose rows do not each come from one shard ("" if none does).
func (cv *coverage) fromLocal(from []*pg.Node, sc *scope) string {
	why := ""
	for _, f := range from {
		inspect(f, func(n *pg.Node) bool {
			if why != "" || n.GetSubLink() != nil {
				return false
			}
			var d *derived
			switch x := n.GetNode().(type) {
			case *pg.Node_RangeSubselect:
				d = cv.subs[x.RangeSubselect]
				if d != nil && x.RangeSubselect.Lateral && cv.tiedToRow(d, sc) {
					return false // evaluated per row of sc, on that row's shard
				}
			case *pg.Node_RangeVar:
				if x.RangeVar.Schemaname == "" {
					d = sc.cte(x.RangeVar.Relname)
				}
			}
			if d != nil && d.sharded {
				switch {
				case d.localWhy != "":
					why = d.localWhy
				case d.uses > 1:
					why = "a CTE over sharded tables is read twice: its rows would meet only their own shard's"
				}
				return false
			}
			return true
		})
	}
	return why
}

// tiedToRow reports whether LATERAL subquery d reads only rows on the
// shard of the FROM row it is evaluated for: it reads keyed tables, each
// co-located with a keyed table of sc's own FROM (tied to it by the
// sharding key: t.execution_id = e.id in its WHERE). Its LIMIT,
// aggregates, DISTINCT or windows then pick among that row's shard's
// rows only, as they would among one database's (SELECT ... FROM
// executions e LEFT JOIN LATERAL (SELECT ... FROM timers t WHERE
// t.execution_id = e.id ORDER BY fire_at LIMIT 1) t1 ON true).
func (cv *coverage) tiedToRow(d *derived, sc *scope) bool {
	if cv.g == nil || d.refHi <= d.refLo || d.refHi > len(cv.g.refs) {
		return false
	}
	tied := false
	for _, r := range cv.g.refs[d.refLo:d.refHi] {
		if r.t == nil {
			continue
		}
		ok := false
		for _, o := range cv.g.refs[:d.refLo] {
			if o.sc == sc && o.t != nil && find(cv.g.co, o.id) == find(cv.g.co, r.id) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
		tied = true
	}
	return tied
}

// uncovered says why some row of a FROM list may contain no row of a keyed
// table ("" when every row contains one). Such a row does not depend on any
// shard's data: every shard produces it, and the concatenated answer would
// repeat it once per shard. A keyed table covers its rows; an inner or
// cross join is covered when either side is, a LEFT JOIN when its left
// side is, a RIGHT JOIN when its right side is, a FULL JOIN when both are;
// a FROM list when any item is. VALUES, functions (generate_series,
// unnest, ...), CTEs, derived tables and tables outside the sharding
// schema cover nothing.
func (cv *coverage) uncovered(from []*pg.Node, sc *scope) string {
	if len(from) == 0 {
		return "no FROM clause: its rows would repeat once per shard"
	}
	for _, f := range from {
		if cv.covered(f, sc) {
			return ""
		}
	}
	for _, f := range from {
		if j := f.GetJoinExpr(); j != nil {
			return "a row of " + joinWhat(j) + " would contain no row of a sharded table (" + cv.uncoveredPart(f, sc) +
				"), so every shard would produce it; pgshard answers a fan-out only when every row it returns comes from one shard"
		}
	}
	return "the FROM clause has no sharded table that every row comes from (" + cv.uncoveredPart(from[0], sc) +
		" produces the same rows on every shard, which would repeat once per shard)"
}

func joinWhat(j *pg.JoinExpr) string {
	switch j.Jointype {
	case pg.JoinType_JOIN_LEFT:
		return "the LEFT JOIN"
	case pg.JoinType_JOIN_RIGHT:
		return "the RIGHT JOIN"
	case pg.JoinType_JOIN_FULL:
		return "the FULL JOIN"
	}
	return "the join"
}

// uncoveredPart names the first FROM item that covers nothing.
func (cv *coverage) uncoveredPart(n *pg.Node, sc *scope) string {
	switch x := n.GetNode().(type) {
	case *pg.Node_JoinExpr:
		j := x.JoinExpr
		if !cv.covered(j.Larg, sc) {
			return cv.uncoveredPart(j.Larg, sc)
		}
		return cv.uncoveredPart(j.Rarg, sc)
	case *pg.Node_RangeVar:
		rv := x.RangeVar
		if rv.Schemaname == "" && sc.cte(rv.Relname) != nil {
			return "the CTE " + rv.Relname
		}
		return "the table " + rv.Relname + ", which is not sharded"
	case *pg.Node_RangeSubselect:
		if sel := x.RangeSubselect.Subquery.GetSelectStmt(); sel != nil && len(sel.ValuesLists) > 0 {
			return "a VALUES list"
		}
		return "a derived table"
	case *pg.Node_RangeFunction:
		return "a function in FROM"
	case *pg.Node_RangeTableSample:
		return cv.uncoveredPart(x.RangeTableSample.Relation, sc)
	}
	return "a FROM item"
}

// covered reports whether every row of FROM item n contains a row of a
// keyed table.
func (cv *coverage) covered(n *pg.Node, sc *scope) bool {
	switch x := n.GetNode().(type) {
	case *pg.Node_RangeVar:
		rv := x.RangeVar
		if rv.Schemaname == "" {
			if d := sc.cte(rv.Relname); d != nil {
				return d.sharded && d.localWhy == ""
			}
		}
		return cv.tables[rv.Relname] != nil && !isCatalog(rv.Schemaname, rv.Relname)
	case *pg.Node_RangeSubselect:
		if cv.split != nil && cv.split.rs == x.RangeSubselect {
			return true // each shard gets the rows whose key it owns
		}
		d := cv.subs[x.RangeSubselect]
		return d != nil && d.sharded && d.localWhy == ""
	case *pg.Node_RangeFunction:
		return cv.split != nil && cv.split.rf == x.RangeFunction // split by shard
	case *pg.Node_RangeTableSample:
		return cv.covered(x.RangeTableSample.Relation, sc)
	case *pg.Node_JoinExpr:
		j := x.JoinExpr
		switch j.Jointype {
		case pg.JoinType_JOIN_INNER:
			return cv.covered(j.Larg, sc) || cv.covered(j.Rarg, sc)
		case pg.JoinType_JOIN_LEFT:
			return cv.covered(j.Larg, sc)
		case pg.JoinType_JOIN_RIGHT:
			return cv.covered(j.Rarg, sc)
		case pg.JoinType_JOIN_FULL:
			return cv.covered(j.Larg, sc) && cv.covered(j.Rarg, sc)
		}
	}
	return false
}
