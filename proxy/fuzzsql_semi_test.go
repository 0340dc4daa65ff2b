package proxy_test

import (
	"regexp"
	"strconv"
	"strings"
)

// The wide semi-join shape of the query generator (PGSHARD_FUZZSQL_SHAPE=
// semiwide; a share of the default mix): the subqueries tied to the row
// that semi() does not write, the ones a rewrite of EXISTS or IN must
// get exactly right or leave alone. Its EXISTS select lists are
// aggregates (one row of none), set-returning functions (no row of
// one), DISTINCT, columns and *; its subqueries have LIMIT 0 / 1,
// OFFSET, GROUP BY with HAVING, ORDER BY; they are tied to the row by
// a key, by a column that is not a key, by two equalities, by an
// expression, by an inequality, under OR, through an unqualified column
// of their own table, or two levels deep; the tests stand alone, under
// NOT, OR and CASE, in the select list, and as IN, NOT IN, ANY, ALL and
// row IN with other operators than equality.

// semiWide writes one query of the wide semi-join shape.
func (g *ggen) semiWide() gquery {
	t := g.table()
	a := rel{alias: "a", t: t}
	rels := []rel{a}
	p := g.semiTest(a)
	outs := g.selectList(rels)
	switch g.n(6) {
	case 0:
		outs = append(outs, p)
		return g.semiOuter(t, rels, outs, g.where(rels, 40))
	case 1:
		outs = append(outs, "CASE WHEN "+p+" THEN 'y' ELSE 'n' END")
		return g.semiOuter(t, rels, outs, g.where(rels, 40))
	case 2:
		p = "NOT (" + p + ")"
	case 3:
		p = "(" + g.pred(rels, 1) + " OR " + p + ")"
	}
	w := " WHERE " + p
	if g.p(35) {
		w += " AND " + g.pred(rels, 1)
	}
	if g.p(20) {
		return g.unqualify(gquery{sql: "SELECT count(*), " + g.agg(rels) + " FROM " + t.name + " a" + w, ordered: true}, rels)
	}
	return g.semiOuter(t, rels, outs, w)
}

// semiOuter finishes a semi-join query: FROM t a, WHERE w, ORDER BY;
// now and then with the subqueries' columns, or every column, named
// without their qualifiers (Postgres then resolves each to the nearest
// relation that has it: the subquery's own first).
func (g *ggen) semiOuter(t gtable, rels []rel, outs []string, w string) gquery {
	ord, total := g.orderLimit(outs, pksOf(rels), false)
	qq := gquery{sql: "SELECT " + strings.Join(outs, ", ") + " FROM " + t.name + " a" + w + ord, ordered: total}
	if g.p(30) {
		qq.sql = innerQualRe.ReplaceAllString(qq.sql, "")
	}
	return g.unqualify(qq, rels)
}

var innerQualRe = regexp.MustCompile(`\b[bc]\.`)

// semiTest is a boolean test of row a against a subquery.
func (g *ggen) semiTest(a rel) string {
	u := g.table()
	b := rel{alias: "b", t: u}
	switch g.n(9) {
	case 0, 1, 2:
		return "EXISTS (" + g.existsBody(a, b) + ")"
	case 3, 4:
		return "NOT EXISTS (" + g.existsBody(a, b) + ")"
	case 5:
		// two levels: the inner subquery tied to b, or to a itself
		c := rel{alias: "c", t: g.table()}
		to := b
		if g.p(40) {
			to = a
		}
		not := g.pick([]string{"", "NOT "})
		return "EXISTS (SELECT 1 FROM " + u.name + " b WHERE " + g.tie(a, b) + " AND " + not + "EXISTS (SELECT 1 FROM " + c.t.name + " c WHERE " + g.tie(to, c) + "))"
	case 6:
		return g.quantified(a, b)
	case 7:
		// a scalar subquery tied to the row, compared
		return "(SELECT count(*) FROM " + u.name + " b WHERE " + g.tie(a, b) + ") " + g.pick([]string{">", ">=", "=", "<"}) + " " + strconv.Itoa(g.n(3))
	default:
		// a row IN: the sharding key and a text column
		ka, kb := keyOrFirst(a.t), keyOrFirst(u)
		ta, tb := firstText(a.t), firstText(u)
		not := g.pick([]string{"", "NOT "})
		return "(" + cref(a, ka) + ", " + cref(a, ta) + ") " + not + "IN (SELECT " + cref(b, kb) + ", " + cref(b, tb) + " FROM " + u.name + " b" + g.optWhere([]rel{b}) + ")"
	}
}

// keyOrFirst is t's sharding key, or its first text column.
func keyOrFirst(t gtable) string {
	if t.key != "" {
		return t.key
	}
	return firstText(t)
}

// optWhere is a WHERE over rels, half of the time.
func (g *ggen) optWhere(rels []rel) string {
	if g.p(50) {
		return " WHERE " + g.pred(rels, 1)
	}
	return ""
}

// existsBody is the SELECT of an EXISTS over b tied to row a.
func (g *ggen) existsBody(a, b rel) string {
	u := b.t
	c := u.cols[g.n(len(u.cols))]
	var target string
	agg := false
	switch g.n(10) {
	case 0, 1:
		target = "1"
	case 2:
		target = "*"
	case 3:
		target = cref(b, c.name)
	case 4:
		target = "DISTINCT " + cref(b, c.name)
	case 5:
		target, agg = "count(*)", true
	case 6:
		target, agg = "max("+cref(b, c.name)+")", true
	case 7:
		target = "generate_series(1, " + strconv.Itoa(g.n(2)) + ")"
	case 8:
		target = "NULL"
	default:
		target = "1 AS one"
	}
	s := "SELECT " + target + " FROM " + u.name + " b WHERE " + g.tie(a, b)
	if g.p(30) {
		s += " AND " + g.pred([]rel{b}, 1)
	}
	switch g.n(8) {
	case 0:
		s += " LIMIT " + strconv.Itoa(g.n(2))
	case 1:
		s += " OFFSET " + strconv.Itoa(g.n(3))
	case 2:
		if !agg {
			s = "SELECT count(*) FROM " + u.name + " b WHERE " + g.tie(a, b) + " GROUP BY " + cref(b, c.name)
		}
		s += " HAVING count(*) " + g.pick([]string{"> 1", ">= 1", "= 1", "> 0"})
	case 3:
		if !agg {
			s += " ORDER BY 1 LIMIT 1"
		}
	}
	return s
}

// tie is a condition tying b's rows to row a.
func (g *ggen) tie(a, b rel) string {
	switch g.n(10) {
	case 0, 1, 2:
		return g.joinCond(a, b)
	case 3:
		// a column that is not a key, of the same kind on both sides
		if e, ok := g.sameKind(a, b, " = "); ok {
			return e
		}
	case 4:
		// two equalities
		if e, ok := g.sameKind(a, b, " = "); ok {
			return g.joinCond(a, b) + " AND " + e
		}
	case 5:
		// an expression on one side
		if a.t.key != "" && b.t.key != "" {
			return g.pick([]string{"lower(", "btrim("}) + cref(b, b.t.key) + ") = " + cref(a, a.t.key)
		}
	case 6:
		// an inequality
		if e, ok := g.sameKind(a, b, g.pick([]string{" < ", " >= ", " <> "})); ok {
			if b.t.key != "" && a.t.key != "" && g.p(60) {
				e = cref(b, b.t.key) + " = " + cref(a, a.t.key) + " AND " + e
			}
			return e
		}
	case 7:
		// under OR
		return "(" + g.joinCond(a, b) + " OR " + g.pred([]rel{b}, 1) + ")"
	case 8:
		// the subquery's own column unqualified (it is b's, whatever a has)
		if b.t.key != "" && a.t.key != "" {
			return b.t.key + " = " + cref(a, a.t.key)
		}
	}
	return g.joinCond(a, b)
}

// sameKind is "b.x op a.y" over two columns of one kind, ok false when
// the tables have no such pair.
func (g *ggen) sameKind(a, b rel, op string) (string, bool) {
	pairs := comparablePairs(a, b)
	if len(pairs) == 0 {
		return "", false
	}
	p := pairs[g.n(len(pairs))]
	return p[1] + op + p[0], true
}

// comparablePairs are the pairs (a's column, b's column) of one kind
// (integers and floats compare with each other; JSON is left out).
func comparablePairs(a, b rel) [][2]string {
	var pairs [][2]string
	for _, ca := range a.t.cols {
		for _, cb := range b.t.cols {
			num := (ca.kind == "i" || ca.kind == "f") && (cb.kind == "i" || cb.kind == "f")
			if num || ca.kind == "t" && cb.kind == "t" {
				pairs = append(pairs, [2]string{cref(a, ca.name), cref(b, cb.name)})
			}
		}
	}
	return pairs
}

// quantified is a column of a against a subquery's column by IN, NOT IN,
// ANY, SOME or ALL (of one kind), tied to the row or not.
func (g *ggen) quantified(a, b rel) string {
	pairs := comparablePairs(a, b)
	if len(pairs) == 0 {
		return "EXISTS (" + g.existsBody(a, b) + ")"
	}
	p := pairs[g.n(len(pairs))]
	op := g.pick([]string{"IN", "NOT IN", "= ANY", "<> ALL", "< ANY", ">= ALL", "= SOME", "> ALL"})
	w := g.optWhere([]rel{b})
	if g.p(50) {
		if w == "" {
			w = " WHERE " + g.tie(a, b)
		} else {
			w += " AND " + g.tie(a, b)
		}
	}
	return p[0] + " " + op + " (SELECT " + p[1] + " FROM " + b.t.name + " b" + w + ")"
}
