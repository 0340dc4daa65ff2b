package proxy_test

import (
	"strconv"
	"strings"
)

// The typed-values shape of the query generator (PGSHARD_FUZZSQL_SHAPE=
// vals; a share of the default mix): reads of the vals table, whose
// columns hold every type a merge must treat as one database does — int2,
// int4 and int8 (sums beyond 64 bits), numeric of several scales, real and
// double precision (NaN, values near 2^70 and 2^-30, every sum exact),
// text in the database's collation, bool, date, timestamptz and uuid (and
// BC dates, intervals, times and times with time zone made of them), NULLs
// everywhere — grouped or not, with the aggregates a merge combines
// (sum, avg, min, max, count [DISTINCT], bool_and / bool_or, exact
// variances of integers and numerics), expressions of those types in the
// select list, WHERE, GROUP BY and ORDER BY (with NULLS FIRST / LAST and
// DESC), DISTINCT, and LIMIT / OFFSET under a total order.

// valsCol is a column of vals and its kind: i integer, n numeric, f float
// (NaN possible), t text, b bool, d date, s timestamptz, u uuid.
type valsCol struct{ name, kind string }

var valsCols = []valsCol{
	{"i2", "i"}, {"i4", "i"}, {"i8", "i"}, {"n", "n"}, {"f4", "f"}, {"f8", "f"}, {"fbig", "f"}, {"ftiny", "f"},
	{"f4big", "f"}, {"t", "t"}, {"b", "b"}, {"d", "d"}, {"ts", "s"}, {"u", "u"}, {"g", "t"},
}

func (g *ggen) valsCol(kinds string) valsCol {
	for {
		c := valsCols[g.n(len(valsCols))]
		if kinds == "" || strings.Contains(kinds, c.kind) {
			return c
		}
	}
}

// valsExpr is an expression over one column of vals, and its kind.
func (g *ggen) valsExpr() (string, string) {
	c := g.valsCol("")
	r := "v." + c.name
	switch c.kind {
	case "i":
		return g.pick([]string{r, r, r + " % 7", r + "::numeric / 3", "abs(" + r + "::int8)", r + " * 2", "-" + r}), g.pick([]string{"i", "n"})
	case "n":
		return g.pick([]string{r, r, "round(" + r + ", 1)", r + " * 2", "trunc(" + r + ")", r + "::float8", "-" + r, "scale(" + r + ")"}), "n"
	case "f":
		return g.pick([]string{r, r, r + " * 2", "floor(" + r + ")", "-" + r, r + "::numeric", "(" + r + " > 0)"}), "f"
	case "t":
		return g.pick([]string{r, r, "upper(" + r + ")", "length(" + r + ")", r + " || '.'", "coalesce(" + r + ", '∅')", r + " COLLATE \"C\""}), "t"
	case "b":
		return g.pick([]string{r, "NOT " + r, r + "::int", "coalesce(" + r + ", false)"}), "b"
	case "d":
		return g.pick([]string{r, r + " + 3", "date_part('month', " + r + ")", "to_char(" + r + ", 'YYYY-MM')", r + " - DATE '2024-03-01'",
			r + " - 800000", "make_interval(days => " + r + " - DATE '2024-03-01')"}), "d"
	case "s":
		return g.pick([]string{r, "date_trunc('day', " + r + ")", "extract(epoch FROM " + r + ")", r + " + interval '1 hour'", r + "::date",
			r + " - TIMESTAMPTZ '2024-03-01 00:00:00+00'", r + "::time", r + "::timetz", "age(" + r + ", TIMESTAMPTZ '2020-01-01 00:00:00+00')"}), "s"
	}
	return g.pick([]string{r, r + "::text", "substr(" + r + "::text, 1, 4)"}), "u"
}

// valsPred is a condition over vals.
func (g *ggen) valsPred() string {
	c := g.valsCol("")
	r := "v." + c.name
	switch g.n(6) {
	case 0:
		return r + g.pick([]string{" IS NULL", " IS NOT NULL"})
	case 1:
		if c.kind == "b" {
			return r + g.pick([]string{" IS TRUE", " IS NOT FALSE", ""})
		}
	case 2:
		return "v.id " + g.pick([]string{"<", ">=", "IN ('v001', 'v002', 'v150', 'v077') AND v.id <>"}) + " " + g.val(q("v1"+strconv.Itoa(g.n(10))), "v1"+strconv.Itoa(g.n(10)), "")
	}
	switch c.kind {
	case "i":
		return r + g.pick([]string{" > ", " < ", " <> "}) + g.val(strconv.Itoa(g.n(200)-100), strconv.Itoa(g.n(200)-100), "::int")
	case "n":
		return r + g.pick([]string{" > ", " < "}) + g.val(strconv.Itoa(g.n(2000)-1000)+".5", strconv.Itoa(g.n(2000)-1000)+".5", "::numeric")
	case "f":
		return r + g.pick([]string{" > 0", " < 0", " = 'NaN'", " <> 'NaN'", " >= 1000"})
	case "t":
		return r + g.pick([]string{" > 'a'", " < 'Z'", " LIKE 'a%'", " = ''", " ILIKE 'A%'", " >= 'ä'"})
	case "d":
		return r + g.pick([]string{" > DATE '2024-03-01'", " < DATE '2023-12-01'"})
	case "s":
		return r + g.pick([]string{" > TIMESTAMPTZ '2024-03-05 00:00:00+00'", " < TIMESTAMPTZ '2024-03-03 12:00:00+00'"})
	case "u":
		return r + " > '80000000-0000-4000-8000-000000000000'"
	}
	return r
}

// valsAgg is an aggregate of vals whose answer one database gives exactly
// whatever the order rows come in (float sums are exact in this data).
func (g *ggen) valsAgg() string {
	c := g.valsCol("")
	r := "v." + c.name
	switch c.kind {
	case "i", "n":
		return g.pick([]string{"sum(", "avg(", "min(", "max(", "count(", "stddev(", "var_pop(", "sum(DISTINCT ", "avg(DISTINCT ", "count(DISTINCT "}) + r + ")"
	case "f":
		return g.pick([]string{"sum(", "avg(", "min(", "max(", "count(", "count(DISTINCT "}) + r + ")"
	case "b":
		return g.pick([]string{"bool_and(", "bool_or(", "count(", "every("}) + r + ")"
	case "u":
		return g.pick([]string{"count(", "count(DISTINCT "}) + r + ")" // no min(uuid)
	case "s":
		if g.p(40) { // intervals: added field by field, avg as interval_div
			return g.pick([]string{"sum(", "avg(", "min(", "max("}) + g.pick([]string{r + " - TIMESTAMPTZ '2024-03-01 00:00:00+00'",
				"age(" + r + ", TIMESTAMPTZ '2020-01-01 00:00:00+00')", "make_interval(days => v.i4 % 40, secs => v.i2 * 0.5)"}) + ")"
		}
	}
	return g.pick([]string{"min(", "max(", "count(", "count(DISTINCT "}) + r + ")"
}

// vals writes one query of the typed-values shape.
func (g *ggen) vals() gquery {
	where := ""
	if g.p(55) {
		where = " WHERE " + g.valsPred()
		if g.p(25) {
			where += g.pick([]string{" AND ", " OR "}) + g.valsPred()
		}
	}
	if g.p(45) {
		return g.valsGrouped(where)
	}
	var outs []string
	for i := 0; i < 1+g.n(3); i++ {
		e, _ := g.valsExpr()
		outs = append(outs, e)
	}
	if g.p(20) {
		s := "SELECT DISTINCT " + strings.Join(outs, ", ") + " FROM vals v" + where
		if g.p(50) {
			var ord []string
			for i := range outs {
				ord = append(ord, strconv.Itoa(i+1)+g.pick([]string{"", " DESC"})+g.pick([]string{"", " NULLS FIRST", " NULLS LAST"}))
			}
			return gquery{sql: s + " ORDER BY " + strings.Join(ord, ", "), ordered: true}
		}
		return gquery{sql: s}
	}
	s := "SELECT v.id, " + strings.Join(outs, ", ") + " FROM vals v" + where
	if !g.p(75) {
		return gquery{sql: s}
	}
	var ord []string
	for i := 0; i < 1+g.n(2); i++ {
		ord = append(ord, strconv.Itoa(2+g.n(len(outs)))+g.pick([]string{"", " DESC", " ASC"})+g.pick([]string{"", " NULLS FIRST", " NULLS LAST"}))
	}
	s += " ORDER BY " + strings.Join(ord, ", ") + ", v.id" + g.pick([]string{"", " DESC"})
	switch g.n(4) {
	case 0:
		s += " LIMIT " + g.val(strconv.Itoa(1+g.n(30)), strconv.Itoa(1+g.n(30)), "::int8")
	case 1:
		s += " LIMIT " + strconv.Itoa(1+g.n(20)) + " OFFSET " + g.val(strconv.Itoa(g.n(40)), strconv.Itoa(g.n(40)), "::int8")
	}
	return gquery{sql: s, ordered: true}
}

// valsGrouped: aggregates of vals, grouped by one or two expressions or
// not at all.
func (g *ggen) valsGrouped(where string) gquery {
	var groups []string
	for i := 0; i < g.n(3); i++ {
		e, _ := g.valsExpr()
		if g.p(40) {
			e = "v.g"
		}
		groups = append(groups, e)
	}
	outs := append([]string{}, groups...)
	for i := 0; i < 1+g.n(3); i++ {
		outs = append(outs, g.valsAgg())
	}
	s := "SELECT " + strings.Join(outs, ", ") + " FROM vals v" + where
	if len(groups) == 0 {
		return gquery{sql: s, ordered: true}
	}
	s += " GROUP BY " + strings.Join(groups, ", ")
	if g.p(25) {
		s += " HAVING " + g.pick([]string{"count(*) > 1", "count(*) < 5", g.valsAgg() + " IS NOT NULL"})
	}
	if !g.p(60) {
		return gquery{sql: s}
	}
	var ord []string
	for i := range groups {
		ord = append(ord, strconv.Itoa(i+1)+g.pick([]string{"", " DESC"})+g.pick([]string{"", " NULLS FIRST", " NULLS LAST"}))
	}
	s += " ORDER BY " + strings.Join(ord, ", ")
	// the groups' keys are unique: a total order, unless an ORDER BY
	// key's equality is not the group's (none here) — LIMIT only then
	if g.p(30) {
		s += " LIMIT " + strconv.Itoa(1+g.n(8))
	}
	return gquery{sql: s, ordered: true}
}
