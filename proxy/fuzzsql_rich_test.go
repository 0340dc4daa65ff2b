package proxy_test

import (
	"strconv"
	"strings"
)

// The rich shape of the query generator (PGSHARD_FUZZSQL_SHAPE=rich; a
// share of the default mix): what ad-hoc queries use beyond the other
// shapes — ordered-set aggregates (percentile_cont, percentile_disc,
// mode), array_agg / json_agg / string_agg with DISTINCT or their own
// ORDER BY, exact statistics (stddev and variance of integers), bit and
// boolean aggregates, ROLLUP / CUBE / GROUPING SETS with grouping(),
// CASE / COALESCE / NULLIF / IS DISTINCT FROM / = ANY (ARRAY[...]) /
// greatest / least, COLLATE "C", WITH RECURSIVE (over the spawn tree and
// over a counter), window functions with frames and over aggregates,
// INTERSECT ALL / EXCEPT ALL, and a keyed IN over a sub-select with its
// own ORDER BY and LIMIT. Only functions whose answer does not depend on
// the order rows arrive in, and floats only where the data's values make
// every sum exact.

// rich writes one query of the rich shape.
func (g *ggen) rich() gquery {
	switch g.n(7) {
	case 0:
		return richAggregates(g)
	case 1:
		return richGroupingSets(g)
	case 2:
		return richExprs(g)
	case 3:
		return richRecursive(g)
	case 4:
		return richWindow(g)
	case 5:
		return richSetops(g)
	default:
		return richInSub(g)
	}
}

// richCol is a column of x of one of the kinds (any when none).
func richCol(g *ggen, x rel, kinds string) (gcol, bool) {
	var cs []gcol
	for _, c := range x.t.cols {
		if kinds == "" || strings.Contains(kinds, c.kind) {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		return gcol{}, false
	}
	return cs[g.n(len(cs))], true
}

// richAgg is one aggregate over x whose answer does not depend on the
// order of its input rows.
func richAgg(g *ggen, x rel) string {
	c, _ := richCol(g, x, "")
	ref := cref(x, c.name)
	ord := strings.Join(pksOf([]rel{x}), ", ")
	if c.kind == "j" {
		ref = "(" + ref + "::jsonb->>'n')::int"
		c.kind = "i"
	}
	num := c.kind == "i" || c.kind == "f"
	switch k := g.n(16); {
	case k == 0 && num:
		return "percentile_cont(" + g.pick([]string{"0.5", "0.25", "0.9", "0", "1"}) + ") WITHIN GROUP (ORDER BY " + ref + ")"
	case k == 1:
		return "percentile_disc(" + g.pick([]string{"0.5", "0.1", "0.75"}) + ") WITHIN GROUP (ORDER BY " + ref + g.pick([]string{"", " DESC"}) + ")"
	case k == 2:
		return "mode() WITHIN GROUP (ORDER BY " + ref + ")"
	case k == 3:
		return "array_agg(" + ref + " ORDER BY " + ord + ")"
	case k == 4:
		return "array_agg(DISTINCT " + ref + ")"
	case k == 5:
		return g.pick([]string{"json_agg", "jsonb_agg"}) + "(" + ref + " ORDER BY " + ord + ")"
	case k == 6 && c.kind == "i":
		return g.pick([]string{"stddev", "variance", "stddev_pop", "var_samp", "var_pop"}) + "(" + ref + ")"
	case k == 7 && c.kind == "i":
		return g.pick([]string{"bit_or", "bit_and", "bit_xor"}) + "(" + ref + ")"
	case k == 8:
		return g.pick([]string{"every", "bool_or"}) + "(" + g.pred([]rel{x}, 1) + ")"
	case k == 9 && num:
		return g.pick([]string{"sum", "avg", "count"}) + "(DISTINCT " + ref + ")"
	case k == 10 && c.kind == "t":
		return "string_agg(DISTINCT " + ref + ", '|' ORDER BY " + ref + ")"
	case k == 11 && c.kind == "t":
		return g.pick([]string{"min", "max"}) + "(" + ref + " COLLATE \"C\")"
	case k == 12:
		return "count(*) FILTER (WHERE " + g.pred([]rel{x}, 1) + ")"
	case k == 13:
		return "json_object_agg(" + cref(x, x.t.pk[len(x.t.pk)-1]) + ", " + ref + " ORDER BY " + ord + ")"
	case k == 14 && num:
		return "max(" + ref + ") - min(" + ref + ")"
	}
	return g.pick([]string{"count", "min", "max"}) + "(" + ref + ")"
}

// richAggregates: rich aggregates over a table, grouped by a scalar or
// not at all.
func richAggregates(g *ggen) gquery {
	x := rel{alias: "a", t: g.table()}
	rels := []rel{x}
	var groups []string
	if g.p(60) {
		e, _ := g.scalar(rels)
		if x.t.key != "" && g.p(40) {
			e = cref(x, x.t.key)
		}
		groups = append(groups, e)
	}
	outs := append([]string{}, groups...)
	for i := 0; i < 1+g.n(3); i++ {
		outs = append(outs, richAgg(g, x))
	}
	s := "SELECT " + strings.Join(outs, ", ") + " FROM " + x.t.name + " a" + g.where(rels, 40)
	if len(groups) == 0 {
		return gquery{sql: s, ordered: true}
	}
	s += " GROUP BY " + groups[0]
	if g.p(25) {
		s += " HAVING count(*) > " + strconv.Itoa(g.n(3))
	}
	if g.p(50) {
		return gquery{sql: s + " ORDER BY 1 NULLS FIRST", ordered: true}
	}
	return gquery{sql: s}
}

// richGroupingSets: ROLLUP, CUBE or GROUPING SETS of one or two
// scalars, with grouping() and plain aggregates.
func richGroupingSets(g *ggen) gquery {
	from, rels := g.from()
	a, _ := g.scalar(rels)
	b, _ := g.scalar(rels)
	var grp string
	switch g.n(4) {
	case 0:
		grp = "ROLLUP (" + a + ", " + b + ")"
	case 1:
		grp = "CUBE (" + a + ", " + b + ")"
	case 2:
		grp = "GROUPING SETS ((" + a + "), (" + b + "), ())"
	default:
		grp = a + ", ROLLUP (" + b + ")"
	}
	outs := []string{a, b, "grouping(" + a + ", " + b + ")", "count(*)"}
	if g.p(60) {
		outs = append(outs, g.agg(rels))
	}
	s := "SELECT " + strings.Join(outs, ", ") + " FROM " + from + g.where(rels, 40) + " GROUP BY " + grp
	if g.p(20) {
		s += " HAVING count(*) > 1"
	}
	if g.p(40) {
		// a grouping set's rows are unique by its keys, and grouping()
		// tells the sets apart: a total order
		return gquery{sql: s + " ORDER BY 3, 1 NULLS FIRST, 2 NULLS FIRST", ordered: true}
	}
	return gquery{sql: s}
}

// richExpr is a conditional or comparison expression over x.
func richExpr(g *ggen, x rel) string {
	c, _ := richCol(g, x, "tif")
	ref := cref(x, c.name)
	k := g.konst(x.t.name, c.name, c.kind)
	switch g.n(8) {
	case 0:
		return "CASE WHEN " + g.pred([]rel{x}, 1) + " THEN " + ref + "::text ELSE " + q("other") + " END"
	case 1:
		return "coalesce(" + ref + "::text, " + q("none") + ")"
	case 2:
		return "nullif(" + ref + ", " + k + ")"
	case 3:
		return "(" + ref + " IS DISTINCT FROM " + k + ")"
	case 4:
		return "(" + ref + " = ANY (ARRAY[" + k + ", " + g.konst(x.t.name, c.name, c.kind) + "]))"
	case 5:
		return g.pick([]string{"greatest", "least"}) + "(" + ref + ", " + k + ")"
	case 6:
		return "CASE " + ref + " WHEN " + k + " THEN 1 WHEN " + g.konst(x.t.name, c.name, c.kind) + " THEN 2 ELSE 0 END"
	}
	return "(" + ref + " IS NOT DISTINCT FROM " + k + ")"
}

// richExprs: a projection of conditional expressions, filtered by them
// (a keyed = ANY, IS NOT DISTINCT FROM a key), ordered by a text column
// in the C collation now and then.
func richExprs(g *ggen) gquery {
	x := rel{alias: "a", t: g.table()}
	rels := []rel{x}
	outs := []string{richExpr(g, x)}
	for i := 0; i < g.n(3); i++ {
		outs = append(outs, richExpr(g, x))
	}
	var conds []string
	if x.t.key != "" && g.p(40) {
		key := cref(x, x.t.key)
		k1, k2 := g.konst(x.t.name, x.t.key, "t"), g.konst(x.t.name, x.t.key, "t")
		conds = append(conds, g.pick([]string{
			key + " = ANY (ARRAY[" + k1 + ", " + k2 + "])",
			key + " IS NOT DISTINCT FROM " + k1,
			"(" + key + " = " + k1 + " OR " + key + " = " + k2 + ")",
			key + " IN (" + k1 + ") AND " + key + " <> ALL (ARRAY[" + k2 + "])",
		}))
	}
	if g.p(50) {
		conds = append(conds, richExpr(g, x)+" IS NOT NULL")
	}
	if g.p(30) {
		conds = append(conds, "coalesce("+richExpr(g, x)+"::text, '') <> ''")
	}
	s := "SELECT " + strings.Join(append(outs, pksOf(rels)...), ", ") + " FROM " + x.t.name + " a"
	if len(conds) > 0 {
		s += " WHERE " + strings.Join(conds, " AND ")
	}
	var ord []string
	if t, ok := richCol(g, x, "t"); ok && g.p(50) {
		ord = append(ord, cref(x, t.name)+" COLLATE \"C\""+g.pick([]string{"", " DESC"}))
	}
	ord = append(ord, pksOf(rels)...)
	s += " ORDER BY " + strings.Join(ord, ", ")
	if g.p(30) {
		s += " LIMIT " + strconv.Itoa(1+g.n(15))
	}
	return gquery{sql: s, ordered: true}
}

// richRecursive: WITH RECURSIVE over the spawn tree from a root (by key,
// or from every parent), or a counter joined to a table.
func richRecursive(g *ggen) gquery {
	depth := strconv.Itoa(1 + g.n(4))
	if g.p(60) {
		start := "SELECT s.child_id, s.parent_id, 1 FROM spawns s"
		if g.p(60) {
			start += " WHERE s.parent_id = " + g.konst("spawns", "parent_id", "t")
		} else {
			start += " WHERE s.root_path = " + g.konst("spawns", "root_path", "t")
		}
		s := "WITH RECURSIVE tree(id, parent, depth) AS (" + start +
			" UNION ALL SELECT s.child_id, s.parent_id, tree.depth + 1 FROM spawns s JOIN tree ON s.parent_id = tree.id WHERE tree.depth < " + depth + ")"
		if g.p(40) {
			return gquery{sql: s + " SELECT depth, count(*), count(DISTINCT id) FROM tree GROUP BY depth ORDER BY depth", ordered: true}
		}
		if g.p(50) {
			return gquery{sql: s + " SELECT tree.id, tree.depth, e.version FROM tree LEFT JOIN executions e ON e.id = tree.id ORDER BY 1, 2, 3"}
		}
		return gquery{sql: s + " SELECT id, parent, depth FROM tree ORDER BY 1, 2, 3", ordered: true}
	}
	x := rel{alias: "a", t: g.table()}
	c, ok := richCol(g, x, "i")
	if !ok {
		return gquery{sql: "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < " + depth + ") SELECT n.i, count(a." + x.t.pk[0] + ") FROM n LEFT JOIN " + x.t.name + " a ON length(a." + x.t.pk[0] + ") % 5 = n.i GROUP BY n.i ORDER BY 1", ordered: true}
	}
	return gquery{sql: "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < " + depth + ") SELECT n.i, count(a." + c.name + "), sum(a." + c.name + ") FROM n LEFT JOIN " + x.t.name + " a ON a." + c.name + " % 5 = n.i GROUP BY n.i ORDER BY 1", ordered: true}
}

// richWindow: window functions with frames, named windows and over
// aggregates, ordered totally within each partition.
func richWindow(g *ggen) gquery {
	x := rel{alias: "a", t: g.table()}
	rels := []rel{x}
	pks := strings.Join(pksOf(rels), ", ")
	part := ""
	if x.t.key != "" && g.p(60) {
		part = "PARTITION BY a." + x.t.key + " "
	}
	c, _ := richCol(g, x, "i")
	val := "length(" + cref(x, x.t.pk[0]) + ")"
	if c.name != "" {
		val = cref(x, c.name)
	}
	if g.p(25) && x.t.key != "" {
		// a window over the groups' aggregates
		k := cref(x, x.t.key)
		return gquery{sql: "SELECT " + k + ", count(*), " + g.pick([]string{"rank()", "dense_rank()", "row_number()", "sum(count(*))"}) +
			" OVER (ORDER BY count(*) DESC, " + k + ") FROM " + x.t.name + " a" + g.where(rels, 30) + " GROUP BY " + k + " ORDER BY 3, 1", ordered: true}
	}
	frame := g.pick([]string{"", " ROWS BETWEEN 1 PRECEDING AND CURRENT ROW", " ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING",
		" ROWS BETWEEN CURRENT ROW AND 2 FOLLOWING", " GROUPS BETWEEN 1 PRECEDING AND 1 FOLLOWING"})
	var fns []string
	for i := 0; i < 1+g.n(2); i++ {
		fns = append(fns, g.pick([]string{
			"sum(" + val + ") OVER w", "dense_rank() OVER w", "ntile(3) OVER w", "first_value(" + val + ") OVER w",
			"last_value(" + val + ") OVER w", "percent_rank() OVER w", "cume_dist() OVER w",
			"lead(" + val + ", 2, -1) OVER w", "nth_value(" + val + ", 2) OVER w", "count(*) OVER w", "max(" + val + ") OVER w",
		}))
	}
	outs := append(pksOf(rels), fns...)
	s := "SELECT " + strings.Join(outs, ", ") + " FROM " + x.t.name + " a" + g.where(rels, 40) +
		" WINDOW w AS (" + part + "ORDER BY " + pks + frame + ") ORDER BY " + pks
	if g.p(30) {
		s += " LIMIT " + strconv.Itoa(1+g.n(20))
	}
	return gquery{sql: s, ordered: true}
}

// richSetops: INTERSECT [ALL] / EXCEPT [ALL] of two filtered reads of
// one column.
func richSetops(g *ggen) gquery {
	x := rel{alias: "a", t: g.table()}
	c, _ := richCol(g, x, "ti")
	col := cref(x, c.name)
	y := rel{alias: "a", t: x.t}
	op := g.pick([]string{"INTERSECT", "INTERSECT ALL", "EXCEPT", "EXCEPT ALL"})
	s := "SELECT " + col + " FROM " + x.t.name + " a" + g.where([]rel{x}, 60) + " " + op +
		" SELECT " + col + " FROM " + y.t.name + " a" + g.where([]rel{y}, 60)
	if g.p(50) {
		return gquery{sql: s + " ORDER BY 1 NULLS FIRST", ordered: true}
	}
	return gquery{sql: s}
}

// richInSub: a read filtered by its key IN a sub-select of another table
// with its own total order and LIMIT (the rows picked must be the same
// as on one database), or by the key of a correlated EXISTS with LIMIT.
func richInSub(g *ggen) gquery {
	x := rel{alias: "a", t: g.table()}
	y := rel{alias: "b", t: g.table()}
	if x.t.key == "" {
		x.t = gtables[0]
	}
	if y.t.key == "" {
		y.t = gtables[1]
	}
	sub := "SELECT b." + y.t.key + " FROM " + y.t.name + " b" + g.where([]rel{y}, 50) +
		" ORDER BY " + strings.Join(pksOf([]rel{y}), g.pick([]string{", ", " DESC, "})) + " LIMIT " + strconv.Itoa(1+g.n(8))
	if g.p(20) {
		sub += " OFFSET " + strconv.Itoa(g.n(5))
	}
	not := g.pick([]string{"", "", "NOT "})
	s := "SELECT " + strings.Join(pksOf([]rel{x}), ", ") + " FROM " + x.t.name + " a WHERE a." + x.t.key + " " + not + "IN (" + sub + ")"
	return gquery{sql: s + " ORDER BY " + strings.Join(pksOf([]rel{x}), ", "), ordered: true}
}
