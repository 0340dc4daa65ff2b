package proxy_test

import (
	"strconv"
	"strings"
)

// The LATERAL shape of the query generator (PGSHARD_FUZZSQL_SHAPE=
// lateral; a share of the default mix): a table joined, inner or LEFT,
// to a LATERAL subquery over another table tied to its row — by the
// sharding key mostly (each row's subquery then reads that row's shard
// only, so its LIMIT, OFFSET, aggregates, DISTINCT and window functions
// fan out), else by a column off the keys, an inequality or OR (which
// pgshard must refuse or answer exactly) — with the subquery's rows
// picked by a total order and LIMIT / OFFSET, grouped, DISTINCT or
// numbered by row_number().

// lateral writes one query of the LATERAL shape.
func (g *ggen) lateral() gquery {
	a := rel{alias: "a", t: g.table()}
	b := rel{alias: "b", t: g.table()}
	tie := g.joinCond(a, b)
	if g.p(25) {
		tie = g.tie(a, b)
	}
	w := " WHERE " + tie
	if g.p(40) {
		w += " AND " + g.pred([]rel{b}, 1)
	}
	var body string
	var cols []string // the subquery's output columns (x.c1, ...)
	switch g.n(4) {
	case 0: // aggregates per row
		n := 1 + g.n(2)
		var aggs []string
		for i := 0; i < n; i++ {
			aggs = append(aggs, g.agg([]rel{b})+" AS c"+strconv.Itoa(i+1))
			cols = append(cols, "x.c"+strconv.Itoa(i+1))
		}
		body = "SELECT " + strings.Join(aggs, ", ") + " FROM " + b.t.name + " b" + w
		if g.p(30) {
			body += " HAVING count(*) > " + strconv.Itoa(g.n(3))
		}
	case 1: // row_number over the row's subquery
		c := b.t.cols[g.n(len(b.t.cols))]
		body = "SELECT " + cref(b, c.name) + " AS c1, row_number() OVER (ORDER BY " + strings.Join(pksOf([]rel{b}), ", ") + ") AS c2 FROM " + b.t.name + " b" + w
		cols = []string{"x.c1", "x.c2"}
	default: // a total order, LIMIT / OFFSET, maybe DISTINCT on the order's columns
		pks := pksOf([]rel{b})
		var outs []string
		for i, p := range pks {
			outs = append(outs, p+" AS c"+strconv.Itoa(i+1))
			cols = append(cols, "x.c"+strconv.Itoa(i+1))
		}
		sel := "SELECT "
		if g.p(20) {
			sel = "SELECT DISTINCT "
		}
		var ord []string
		for _, p := range pks {
			ord = append(ord, p+g.pick([]string{"", " DESC"}))
		}
		body = sel + strings.Join(outs, ", ") + " FROM " + b.t.name + " b" + w + " ORDER BY " + strings.Join(ord, ", ") +
			" LIMIT " + strconv.Itoa(1+g.n(3))
		if g.p(25) {
			body += " OFFSET " + strconv.Itoa(g.n(2))
		}
	}
	join := g.pick([]string{" CROSS JOIN LATERAL (", " JOIN LATERAL (", " LEFT JOIN LATERAL (", ", LATERAL ("})
	on := ""
	if strings.Contains(join, "JOIN LATERAL") && !strings.Contains(join, "CROSS") {
		on = " ON true"
	}
	from := " FROM " + a.t.name + " a" + join + body + ") x" + on
	if g.p(25) {
		// aggregated over the rows and their subqueries' rows
		return gquery{sql: "SELECT count(*), count(" + cols[0] + ")" + from + g.where([]rel{a}, 30), ordered: true}
	}
	outs := append(pksOf([]rel{a}), cols...)
	s := "SELECT " + strings.Join(outs, ", ") + from + g.where([]rel{a}, 30)
	var ord []string
	for i := range outs {
		ord = append(ord, strconv.Itoa(i+1))
	}
	// every output column: a total order of the answer (a row of a and
	// its subquery's row, itself unique by its columns or its number)
	return gquery{sql: s + " ORDER BY " + strings.Join(ord, ", ") + " NULLS FIRST", ordered: true}
}
