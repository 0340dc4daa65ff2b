package proxy_test

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
)

// The random read-query generator of TestFuzzSQL: seeded, it writes read
// queries over the store's six tables the way a new user's ad-hoc queries
// look — projections, filters, aggregates, GROUP BY / HAVING, DISTINCT
// [ON], ORDER BY with NULLS and expressions, LIMIT / OFFSET / FETCH WITH
// TIES, joins (co-located on the execution id and not), semi- and
// anti-joins, scalar subqueries, derived tables, CTEs, set operations,
// window functions, VALUES and generate_series, and what the rich shape
// adds (fuzzsql_rich_test.go) and reads of the typed values of the vals
// table (fuzzsql_vals_test.go) — and says how its answer
// may be compared: in order when its ORDER BY is total, else as a
// multiset. It never uses a LIMIT without a total order (the rows picked
// would be the database's choice) nor volatile functions.

// gcol is a column and its kind: t text, i integer, f float, j JSON text.
type gcol struct{ name, kind string }

type gtable struct {
	name string
	cols []gcol
	pk   []string // unique columns (a total order)
	key  string   // the sharding key column ("" for outbox)
}

var gtables = []gtable{
	{"executions", []gcol{{"id", "t"}, {"definition_id", "t"}, {"data", "j"}, {"version", "i"}}, []string{"id"}, "id"},
	{"timers", []gcol{{"execution_id", "t"}, {"path", "t"}, {"fire_at", "f"}}, []string{"execution_id", "path"}, "execution_id"},
	{"trace", []gcol{{"execution_id", "t"}, {"idx", "i"}, {"entry", "j"}}, []string{"execution_id", "idx"}, "execution_id"},
	{"processed_events", []gcol{{"execution_id", "t"}, {"event_id", "t"}}, []string{"execution_id", "event_id"}, "execution_id"},
	{"spawns", []gcol{{"seq", "i"}, {"parent_id", "t"}, {"child_id", "t"}, {"root_path", "t"}, {"context", "j"}}, []string{"seq"}, "parent_id"},
	{"outbox", []gcol{{"seq", "i"}, {"target_id", "t"}, {"event", "j"}}, []string{"seq"}, ""},
	// unsharded (on the default shard): only the unsharded shape reads it
	// (fuzzsql_unsharded_test.go)
	{"lookup", []gcol{{"k", "t"}, {"v", "t"}, {"n", "f"}, {"w", "i"}, {"vc", "t"}, {"nm", "f"}, {"ch", "t"}}, []string{"k"}, ""},
	// global (the same rows on every shard): likewise
	{"gdefs", []gcol{{"name", "t"}, {"owner", "t"}, {"rank", "i"}}, []string{"name"}, ""},
}

func gtableByName(n string) gtable {
	for _, t := range gtables {
		if t.name == n {
			return t
		}
	}
	panic(n)
}

// gquery is one generated case.
type gquery struct {
	sql     string
	params  []*string
	ordered bool // the ORDER BY is total: compare in order
}

// ggen generates queries from one seed.
type ggen struct {
	r      *rand.Rand
	ids    []string // execution ids of the data set
	params []*string
	np     int // parameters allowed in this query (0: inline everything)
	// pendingWhere are join conditions of comma-joined FROM items, for
	// the WHERE clause.
	pendingWhere []string
	// only, when set, is the one shape generated (PGSHARD_FUZZSQL_SHAPE).
	only func(*ggen) gquery
	// unsharded: table() may pick the unsharded table (the unsharded
	// shape's queries).
	unsharded bool
}

// ggenShapes are the shapes PGSHARD_FUZZSQL_SHAPE may name.
var ggenShapes = map[string]func(*ggen) gquery{
	"plain": (*ggen).plain, "aggregate": (*ggen).aggregate, "semi": (*ggen).semi, "cte": (*ggen).cte,
	"setop": (*ggen).setop, "window": (*ggen).window, "values": (*ggen).valuesJoin,
	"scalar": (*ggen).scalarSub, "derived": (*ggen).derived, "nofrom": (*ggen).noFrom,
	"semiwide": (*ggen).semiWide, "unsharded": (*ggen).unshardedMix, "lateral": (*ggen).lateral,
	"rich": (*ggen).rich, "vals": (*ggen).vals,
}

func newGgen(seed uint64, ids []string) *ggen {
	return &ggen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), ids: ids}
}

func (g *ggen) n(k int) int            { return g.r.IntN(k) }
func (g *ggen) p(pct int) bool         { return g.r.IntN(100) < pct }
func (g *ggen) pick(s []string) string { return s[g.r.IntN(len(s))] }

// val returns a literal, or a parameter holding it ($n) when the query may
// take parameters; cast is appended to parameters whose type the server
// could not infer.
func (g *ggen) val(lit, text, cast string) string {
	if g.np > 0 && g.p(35) {
		v := text
		g.params = append(g.params, &v)
		return "$" + strconv.Itoa(len(g.params)) + cast
	}
	return lit
}

func q(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// konst is a constant comparable with a column of the kind, drawn from the
// data set's values.
func (g *ggen) konst(t, col, kind string) string {
	switch {
	case col == "id" || col == "execution_id" || col == "parent_id" || col == "child_id" || col == "target_id" || col == "k" || col == "vc":
		id := g.pick(g.ids)
		if g.p(5) {
			id = "nope"
		}
		return g.val(q(id), id, "")
	case col == "n" || col == "nm":
		v := strconv.Itoa(g.n(150) - 50)
		return g.val(v, v, "::numeric")
	case col == "definition_id" || col == "v" || col == "name":
		v := g.pick([]string{"order", "payment", "shipment", "Refund", "ärger"})
		return g.val(q(v), v, "")
	case col == "path":
		v := fmt.Sprintf("root/t%d", g.n(14))
		return g.val(q(v), v, "")
	case col == "root_path":
		v := fmt.Sprintf("root/r%d", g.n(5))
		return g.val(q(v), v, "")
	case col == "event_id":
		v := fmt.Sprintf("ev-%d", g.n(220))
		return g.val(q(v), v, "")
	case col == "version":
		v := strconv.Itoa(g.n(14))
		return g.val(v, v, "::int")
	case col == "idx":
		v := strconv.Itoa(g.n(7))
		return g.val(v, v, "::int")
	case col == "fire_at":
		v := strconv.FormatFloat(1000+float64(g.n(410))*0.25, 'f', -1, 64)
		return g.val(v, v, "::float8")
	case col == "seq":
		v := strconv.Itoa(1 + g.n(3) + 1024*g.n(70))
		return g.val(v, v, "::int8")
	}
	switch kind {
	case "i":
		v := strconv.Itoa(g.n(10))
		return g.val(v, v, "::int")
	case "f":
		v := strconv.Itoa(1000 + g.n(100))
		return g.val(v, v, "::float8")
	}
	v := g.pick([]string{"a", "root", "", "ev-1", "done"})
	return g.val(q(v), v, "::text")
}

// rel is a FROM item the query reads: an alias of a table.
type rel struct {
	alias    string
	t        gtable
	nullable bool
}

// cref is a column reference of rel x.
func cref(x rel, c string) string { return x.alias + "." + c }

// scalar is an expression over the columns of rels, and its kind.
func (g *ggen) scalar(rels []rel) (string, string) {
	x := rels[g.n(len(rels))]
	c := x.t.cols[g.n(len(x.t.cols))]
	ref := cref(x, c.name)
	switch c.kind {
	case "i":
		switch g.n(6) {
		case 0:
			return ref + " + 1", "i"
		case 1:
			return ref + " % 3", "i"
		case 2:
			return "-" + ref, "i"
		}
		return ref, "i"
	case "f":
		switch g.n(5) {
		case 0:
			return ref + " - 1000", "f"
		case 1:
			return "floor(" + ref + ")", "f"
		case 2:
			return ref + "::int", "i"
		}
		return ref, "f"
	case "j":
		switch g.n(6) {
		case 0:
			return ref + "::jsonb->>'status'", "t"
		case 1:
			if x.t.name == "executions" {
				return ref + "::jsonb->>'parent_id'", "t"
			}
			return "length(" + ref + ")", "i"
		case 2:
			return "(" + ref + "::jsonb->>'n')::int", "i"
		case 3:
			return "jsonb_typeof(" + ref + "::jsonb)", "t"
		}
		return ref, "t"
	}
	switch g.n(9) {
	case 0:
		return "lower(" + ref + ")", "t"
	case 1:
		return "length(" + ref + ")", "i"
	case 2:
		return "substr(" + ref + ", 1, 3)", "t"
	case 3:
		return ref + " || 'x'", "t"
	case 4:
		return "coalesce(" + ref + ", '-')", "t"
	case 5:
		if c.name == "id" || c.name == "execution_id" || c.name == "parent_id" {
			return ref + "::uuid", "u"
		}
	}
	return ref, "t"
}

// pred is a boolean condition over rels.
func (g *ggen) pred(rels []rel, depth int) string {
	if depth < 2 && g.p(25) {
		op := " AND "
		if g.p(40) {
			op = " OR "
		}
		return "(" + g.pred(rels, depth+1) + op + g.pred(rels, depth+1) + ")"
	}
	if depth < 2 && g.p(5) {
		return "NOT " + g.pred(rels, depth+1)
	}
	x := rels[g.n(len(rels))]
	c := x.t.cols[g.n(len(x.t.cols))]
	ref := cref(x, c.name)
	switch g.n(10) {
	case 0:
		if g.p(50) {
			return ref + " IS NULL"
		}
		return ref + " IS NOT NULL"
	case 1:
		return fmt.Sprintf("%s IN (%s, %s, %s)", ref, g.konst(x.t.name, c.name, c.kind), g.konst(x.t.name, c.name, c.kind), g.konst(x.t.name, c.name, c.kind))
	case 2:
		if c.kind == "j" {
			return ref + "::jsonb->>'status' = " + g.val("'done'", "done", "::text")
		}
		if c.kind == "t" {
			return ref + " LIKE " + q(g.pick([]string{"root/%", "a%", "%1", "ev-1%", "0%"}))
		}
	case 3:
		if c.kind == "i" || c.kind == "f" {
			return fmt.Sprintf("%s BETWEEN %s AND %s", ref, g.konst(x.t.name, c.name, c.kind), g.konst(x.t.name, c.name, c.kind))
		}
	case 4:
		if x.t.key != "" && !x.nullable {
			// a key predicate: one shard, or several with IN
			k := x.t.key
			return fmt.Sprintf("%s = %s", cref(x, k), g.konst(x.t.name, k, "t"))
		}
	}
	if c.kind == "j" {
		return fmt.Sprintf("(%s::jsonb->>'n')::int %s %d", ref, g.pick([]string{"<", ">", "=", "<>"}), g.n(200))
	}
	return fmt.Sprintf("%s %s %s", ref, g.pick([]string{"=", "<>", "<", "<=", ">", ">="}), g.konst(x.t.name, c.name, c.kind))
}

// joinable is a join of b to the rels: a condition, and whether it
// equates the shard keys (co-located).
func (g *ggen) joinCond(a, b rel) string {
	if a.t.key != "" && b.t.key != "" && g.p(80) {
		return cref(b, b.t.key) + " = " + cref(a, a.t.key)
	}
	// crossing joins
	switch {
	case a.t.name == "outbox" && b.t.key != "" && g.p(70):
		return cref(b, b.t.key) + " = " + cref(a, "target_id")
	case b.t.name == "outbox" && a.t.key != "" && g.p(70):
		return cref(b, "target_id") + " = " + cref(a, a.t.key)
	case b.t.name == "executions" && a.t.name == "spawns" && g.p(50):
		return cref(b, "id") + " = " + cref(a, "child_id")
	case b.t.name == "executions" && a.t.name == "outbox":
		return cref(b, "id") + " = " + cref(a, "target_id")
	case a.t.name == "executions" && b.t.name == "outbox":
		return cref(b, "target_id") + " = " + cref(a, "id")
	case b.t.name == "executions" && a.t.name == "executions":
		return cref(b, "id") + " = " + cref(a, "data") + "::jsonb->>'parent_id'"
	case a.t.key != "" && b.t.key != "" && g.p(50):
		return cref(b, b.t.key) + " = " + cref(a, a.t.key) + " AND " + g.pred([]rel{a, b}, 1)
	}
	ca, cb := a.t.cols[g.n(len(a.t.cols))], b.t.cols[g.n(len(b.t.cols))]
	if ca.kind == cb.kind && ca.kind != "j" {
		return cref(b, cb.name) + " = " + cref(a, ca.name)
	}
	if a.t.key != "" && b.t.key != "" {
		return cref(b, b.t.key) + " = " + cref(a, a.t.key)
	}
	// Selective conditions only: a cross product of the larger tables
	// would take the reference database longer than a case's bound.
	if b.t.pk[0] == "seq" && a.t.pk[0] == "seq" {
		return cref(b, "seq") + " = " + cref(a, "seq")
	}
	return cref(b, firstText(b.t)) + " = " + cref(a, firstText(a.t))
}

func firstText(t gtable) string {
	for _, c := range t.cols {
		if c.kind == "t" {
			return c.name
		}
	}
	return t.pk[0]
}

func (g *ggen) table() gtable {
	if g.unsharded && g.p(35) {
		return gtableByName(g.pick([]string{"lookup", "lookup", "gdefs"}))
	}
	// weight the keyed tables
	w := []int{4, 3, 3, 2, 2, 2}
	n := g.n(16)
	for i, x := range w {
		if n < x {
			return gtables[i]
		}
		n -= x
	}
	return gtables[0]
}

// from builds a FROM clause of 1..3 tables; rels are the relations it
// exposes.
func (g *ggen) from() (string, []rel) {
	t := g.table()
	rels := []rel{{alias: "a", t: t}}
	sql := t.name + " a"
	joins := 0
	switch {
	case g.p(45):
		joins = 1
	case g.p(15):
		joins = 2
	}
	for i := 0; i < joins; i++ {
		b := rel{alias: string(rune('b' + i)), t: g.table()}
		kind := g.pick([]string{"JOIN", "JOIN", "LEFT JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", ","})
		on := g.joinCond(rels[g.n(len(rels))], b)
		switch kind {
		case "LEFT JOIN":
			b.nullable = true
		case "RIGHT JOIN":
			for j := range rels {
				rels[j].nullable = true
			}
		case "FULL JOIN":
			b.nullable = true
			for j := range rels {
				rels[j].nullable = true
			}
		}
		if kind == "," {
			sql += ", " + b.t.name + " " + b.alias
			rels = append(rels, b)
			// the condition goes to WHERE: keep it in the FROM as a
			// cross join filtered later by the caller's WHERE
			sql += " /*w*/"
			g.pendingWhere = append(g.pendingWhere, on)
			continue
		}
		sql += " " + kind + " " + b.t.name + " " + b.alias + " ON " + on
		rels = append(rels, b)
	}
	sql = strings.ReplaceAll(sql, " /*w*/", "")
	return sql, rels
}

// gen writes one query.
func (g *ggen) gen() gquery {
	g.params, g.pendingWhere = nil, nil
	g.np = 0
	if g.p(50) {
		g.np = 8
	}
	var qq gquery
	if g.only != nil {
		qq = g.only(g)
		qq.params = g.params
		return qq
	}
	switch k := g.n(100); {
	case k < 21:
		qq = g.plain()
	case k < 26:
		qq = g.vals()
	case k < 34:
		qq = g.rich()
	case k < 45:
		qq = g.aggregate()
	case k < 50:
		qq = g.semi()
	case k < 55:
		qq = g.semiWide()
	case k < 59:
		qq = g.unshardedMix()
	case k < 61:
		qq = g.lateral()
	case k < 63:
		qq = g.cte()
	case k < 69:
		qq = g.setop()
	case k < 76:
		qq = g.window()
	case k < 82:
		qq = g.valuesJoin()
	case k < 90:
		qq = g.scalarSub()
	default:
		qq = g.derived()
	}
	qq.params = g.params
	return qq
}

// where renders WHERE from the pending join conditions and random filters.
func (g *ggen) where(rels []rel, pct int) string {
	conds := g.pendingWhere
	g.pendingWhere = nil
	if g.p(pct) {
		conds = append(conds, g.pred(rels, 0))
	}
	if len(conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(conds, " AND ")
}

// orderLimit adds ORDER BY (maybe total) and LIMIT/OFFSET/FETCH to a
// query whose output columns are outs and whose unique columns are pks
// (expressions usable in ORDER BY).
func (g *ggen) orderLimit(outs []string, pks []string, distinct bool) (string, bool) {
	if !g.p(65) {
		return "", false
	}
	var keys []string
	total := false
	dirs := func(e string) string {
		s := e
		switch g.n(4) {
		case 1:
			s += " DESC"
		case 2:
			s += " ASC"
		}
		switch g.n(5) {
		case 1:
			s += " NULLS FIRST"
		case 2:
			s += " NULLS LAST"
		}
		return s
	}
	for i := 0; i < 1+g.n(2) && len(outs) > 0; i++ {
		switch g.n(3) {
		case 0:
			keys = append(keys, dirs(strconv.Itoa(1+g.n(len(outs)))))
		default:
			keys = append(keys, dirs(outs[g.n(len(outs))]))
		}
	}
	if !distinct && g.p(70) || distinct && g.p(70) && allIn(pks, outs) {
		for _, k := range pks {
			keys = append(keys, dirs(k))
		}
		total = len(pks) > 0
	}
	if len(keys) == 0 {
		return "", false
	}
	s := " ORDER BY " + strings.Join(keys, ", ")
	if total {
		switch g.n(5) {
		case 0:
			s += " LIMIT " + g.val(strconv.Itoa(g.n(30)), strconv.Itoa(g.n(30)), "::int8")
		case 1:
			s += " LIMIT " + strconv.Itoa(1+g.n(20)) + " OFFSET " + g.val(strconv.Itoa(g.n(20)), strconv.Itoa(g.n(20)), "::int8")
		case 2:
			s += " OFFSET " + strconv.Itoa(g.n(50))
		case 3:
			s += " FETCH FIRST " + strconv.Itoa(1+g.n(10)) + " ROWS ONLY"
		}
	} else if g.p(20) {
		// WITH TIES picks a set that does not depend on the order of ties
		s += " FETCH FIRST " + strconv.Itoa(1+g.n(10)) + " ROWS WITH TIES"
	}
	return s, total
}

func allIn(xs, ys []string) bool {
	for _, x := range xs {
		found := false
		for _, y := range ys {
			found = found || x == y
		}
		if !found {
			return false
		}
	}
	return true
}

func pksOf(rels []rel) []string {
	var out []string
	for _, x := range rels {
		for _, c := range x.t.pk {
			out = append(out, cref(x, c))
		}
	}
	return out
}

// selectList picks 1..4 expressions (named when alias).
func (g *ggen) selectList(rels []rel) []string {
	var outs []string
	for i := 0; i < 1+g.n(4); i++ {
		e, _ := g.scalar(rels)
		outs = append(outs, e)
	}
	return outs
}

func (g *ggen) plain() gquery {
	from, rels := g.from()
	outs := g.selectList(rels)
	sel := "SELECT "
	distinct := false
	var pks = pksOf(rels)
	switch g.n(8) {
	case 0:
		sel += "DISTINCT "
		distinct = true
		pks = outs
	case 1:
		// DISTINCT ON the first expression (or a key), ordered totally
		// within it
		d := outs[0]
		if rels[0].t.key != "" && g.p(50) {
			d = cref(rels[0], rels[0].t.key)
		}
		w := g.where(rels, 60)
		ord := " ORDER BY " + d + ", " + strings.Join(pksOf(rels), ", ")
		lim := ""
		if g.p(30) {
			lim = " LIMIT " + strconv.Itoa(1+g.n(10))
		}
		return gquery{sql: "SELECT DISTINCT ON (" + d + ") " + strings.Join(outs, ", ") + " FROM " + from + w + ord + lim, ordered: true}
	}
	w := g.where(rels, 70)
	ord, total := g.orderLimit(outs, pks, distinct)
	return g.unqualify(gquery{sql: sel + strings.Join(outs, ", ") + " FROM " + from + w + ord, ordered: total}, rels)
}

var qualRe = regexp.MustCompile(`\ba\.`)

// unqualify drops the alias of a one-table query now and then, so that
// ORDER BY names meet select-list names (ORDER BY id::uuid, id).
func (g *ggen) unqualify(qq gquery, rels []rel) gquery {
	if len(rels) != 1 || !g.p(40) {
		return qq
	}
	qq.sql = strings.Replace(qualRe.ReplaceAllString(qq.sql, ""), " "+rels[0].t.name+" a", " "+rels[0].t.name, 1)
	return qq
}

func (g *ggen) agg(rels []rel) string {
	x := rels[g.n(len(rels))]
	c := x.t.cols[g.n(len(x.t.cols))]
	ref := cref(x, c.name)
	switch c.kind {
	case "i", "f":
		return g.pick([]string{"sum", "min", "max", "avg", "count"}) + "(" + ref + ")"
	}
	switch g.n(10) {
	case 0:
		return "count(DISTINCT " + ref + ")"
	case 1:
		return "string_agg(" + ref + ", ',' ORDER BY " + ref + ")"
	case 2:
		return "count(*) FILTER (WHERE " + g.pred(rels, 1) + ")"
	case 3:
		return "bool_and(" + ref + " IS NOT NULL)"
	case 4:
		return "sum(length(" + ref + "))"
	}
	return g.pick([]string{"min", "max", "count"}) + "(" + ref + ")"
}

func (g *ggen) aggregate() gquery {
	from, rels := g.from()
	var groups []string
	for i := 0; i < g.n(3); i++ {
		e, _ := g.scalar(rels)
		groups = append(groups, e)
	}
	outs := append([]string{}, groups...)
	for i := 0; i < 1+g.n(3); i++ {
		if g.p(20) {
			outs = append(outs, "count(*)")
		} else {
			outs = append(outs, g.agg(rels))
		}
	}
	w := g.where(rels, 50)
	s := "SELECT " + strings.Join(outs, ", ") + " FROM " + from + w
	if len(groups) > 0 {
		s += " GROUP BY " + strings.Join(groups, ", ")
		if g.p(30) {
			s += " HAVING " + g.pick([]string{"count(*) > 1", "count(*) >= 2", "max(" + groups[0] + ") IS NOT NULL", "count(*) < 4 OR min(" + groups[0] + ") IS NULL"})
		}
	}
	var pks []string
	if len(groups) > 0 {
		pks = groups
	}
	ord, total := g.orderLimit(outs, pks, true)
	if len(groups) == 0 {
		total = true // one row
	}
	return gquery{sql: s + ord, ordered: total}
}

func (g *ggen) semi() gquery {
	t := g.table()
	a := rel{alias: "a", t: t}
	u := g.table()
	b := rel{alias: "b", t: u}
	cond := g.joinCond(a, b)
	if g.p(30) {
		cond += " AND " + g.pred([]rel{b}, 1)
	}
	var p string
	switch g.n(5) {
	case 0:
		p = "EXISTS (SELECT 1 FROM " + u.name + " b WHERE " + cond + ")"
	case 1:
		p = "NOT EXISTS (SELECT 1 FROM " + u.name + " b WHERE " + cond + ")"
	case 2:
		if t.key != "" && u.key != "" {
			p = cref(a, t.key) + " IN (SELECT b." + u.key + " FROM " + u.name + " b WHERE " + g.pred([]rel{b}, 1) + ")"
		} else {
			p = "EXISTS (SELECT 1 FROM " + u.name + " b WHERE " + cond + ")"
		}
	case 3:
		if t.key != "" && u.key != "" {
			p = cref(a, t.key) + " NOT IN (SELECT b." + u.key + " FROM " + u.name + " b WHERE " + g.pred([]rel{b}, 1) + ")"
		} else {
			p = "NOT EXISTS (SELECT 1 FROM " + u.name + " b WHERE " + cond + ")"
		}
	default:
		c := t.cols[g.n(len(t.cols))]
		uc := u.cols[g.n(len(u.cols))]
		p = cref(a, c.name) + " IN (SELECT b." + uc.name + " FROM " + u.name + " b)"
		if c.kind != uc.kind || c.kind == "j" {
			p = "EXISTS (SELECT 1 FROM " + u.name + " b WHERE " + cond + ")"
		}
	}
	rels := []rel{a}
	outs := g.selectList(rels)
	w := " WHERE " + p
	if g.p(40) {
		w += " AND " + g.pred(rels, 1)
	}
	if g.p(25) {
		s := "SELECT count(*), " + g.agg(rels) + " FROM " + t.name + " a" + w
		return gquery{sql: s, ordered: true}
	}
	ord, total := g.orderLimit(outs, pksOf(rels), false)
	return g.unqualify(gquery{sql: "SELECT " + strings.Join(outs, ", ") + " FROM " + t.name + " a" + w + ord, ordered: total}, rels)
}

// inner writes a sub-select over one or two tables with named output
// columns c1..cn; keyCol says whether c1 is the shard key.
func (g *ggen) inner() (string, []gcol) {
	t := g.table()
	a := rel{alias: "x", t: t}
	rels := []rel{a}
	from := t.name + " x"
	if g.p(30) {
		u := g.table()
		b := rel{alias: "y", t: u}
		from += " " + g.pick([]string{"JOIN", "LEFT JOIN"}) + " " + u.name + " y ON " + g.joinCond(a, b)
		rels = append(rels, b)
	}
	var cols []gcol
	var outs []string
	for i, c := range t.pk {
		cols = append(cols, gcol{fmt.Sprintf("c%d", i+1), t.cols[colIndex(t, c)].kind})
		outs = append(outs, "x."+c+" AS "+cols[i].name)
	}
	for i := 0; i < 1+g.n(2); i++ {
		e, k := g.scalar(rels)
		n := fmt.Sprintf("c%d", len(cols)+1)
		cols = append(cols, gcol{n, k})
		outs = append(outs, e+" AS "+n)
	}
	s := "SELECT " + strings.Join(outs, ", ") + " FROM " + from
	if g.p(50) {
		s += " WHERE " + g.pred(rels, 1)
	}
	switch g.n(8) {
	case 0:
		// Ordered by every joined relation's key: a join repeats x's
		// rows, and a LIMIT over ties may keep any of them.
		s += " ORDER BY " + strings.Join(pksOf(rels), ", ") + " LIMIT " + strconv.Itoa(5+g.n(30))
	case 1:
		// grouped by the key
		s = "SELECT x." + t.pk[0] + " AS c1, count(*) AS c2 FROM " + from + " GROUP BY x." + t.pk[0]
		cols = []gcol{{"c1", t.cols[colIndex(t, t.pk[0])].kind}, {"c2", "i"}}
	}
	return s, cols
}

func colIndex(t gtable, c string) int {
	for i, x := range t.cols {
		if x.name == c {
			return i
		}
	}
	panic(c)
}

func (g *ggen) cte() gquery {
	body, cols := g.inner()
	pk := gtable{name: "c", cols: cols, pk: []string{"c1"}}
	var names []string
	for _, c := range cols {
		names = append(names, c.name)
	}
	from := "c"
	rels := []rel{{alias: "c", t: pk}}
	outs := []string{"c.c1"}
	uniq := []string{"c.c1"}
	for _, c := range cols[1:] {
		if g.p(60) {
			outs = append(outs, "c."+c.name)
		}
		uniq = append(uniq, "c."+c.name)
	}
	if g.p(40) {
		t := g.table()
		from += " " + g.pick([]string{"JOIN", "LEFT JOIN"}) + " " + t.name + " t ON t." + t.pk[0] + " = c.c1"
		if t.key != "" {
			from = strings.Replace(from, "t."+t.pk[0]+" = c.c1", "t."+t.key+" = c.c1", 1)
		}
		outs = append(outs, "t."+t.cols[g.n(len(t.cols))].name)
		for _, p := range t.pk {
			uniq = append(uniq, "t."+p)
		}
	}
	s := "WITH c AS (" + body + ") SELECT " + strings.Join(outs, ", ") + " FROM " + from
	if g.p(40) {
		s += " WHERE " + g.pred(rels, 1)
	}
	if g.p(25) {
		return gquery{sql: "WITH c AS (" + body + ") SELECT count(*), count(DISTINCT c.c1) FROM c", ordered: true}
	}
	ord, total := g.orderLimit(outs, uniq, false)
	return gquery{sql: s + ord, ordered: total}
}

func (g *ggen) derived() gquery {
	body, cols := g.inner()
	outs := []string{"d.c1"}
	for _, c := range cols[1:] {
		if g.p(60) {
			outs = append(outs, "d."+c.name)
		}
	}
	var uniq []string
	for _, c := range cols {
		uniq = append(uniq, "d."+c.name)
	}
	s := "SELECT " + strings.Join(outs, ", ") + " FROM (" + body + ") d"
	if g.p(40) {
		s += " WHERE d.c1 IS NOT NULL"
	}
	ord, total := g.orderLimit(outs, uniq, false)
	return gquery{sql: s + ord, ordered: total}
}

// setopConst is a constant of each column kind, for a set operation's
// branch without a column of that kind.
var setopConst = map[string]string{"t": "'x'", "i": "7", "f": "1.5::float8", "j": "'{}'"}

// setop writes 2 or 3 branches of 1 or 2 columns joined by set
// operations (UNION [ALL] mostly, nested now and then), a branch being a
// filtered table, a table joined to executions on its key, or a keyed
// read; ordered by every output column (a total order of the answer's
// rows), maybe with LIMIT/OFFSET.
func (g *ggen) setop() gquery {
	first := g.table()
	var kinds []string
	var outs []string
	for i := 0; i < 1+g.n(2); i++ {
		c := first.cols[g.n(len(first.cols))]
		kinds = append(kinds, c.kind)
		outs = append(outs, "c"+strconv.Itoa(i+1))
	}
	branch := func(i int) string {
		t := first
		if i > 0 {
			t = g.table()
		}
		a := rel{alias: "a" + strconv.Itoa(i), t: t}
		var cols []string
		for j, k := range kinds {
			var names []string
			for _, c := range t.cols {
				if c.kind == k {
					names = append(names, c.name)
				}
			}
			// no column of that kind: a constant of it (a branch of
			// constants over a table is still one row per table row)
			c := setopConst[k]
			if len(names) > 0 {
				c = cref(a, g.pick(names))
			}
			if i == 0 {
				c += " AS " + outs[j]
			}
			cols = append(cols, c)
		}
		from := t.name + " " + a.alias
		rels := []rel{a}
		if t.key != "" && t.name != "executions" && g.p(25) {
			e := rel{alias: "e" + strconv.Itoa(i), t: gtableByName("executions")}
			from += " JOIN executions " + e.alias + " ON " + cref(e, "id") + " = " + cref(a, t.key)
			rels = append(rels, e)
		}
		w := ""
		switch {
		case t.key != "" && g.p(20):
			w = " WHERE " + cref(a, t.key) + " = " + g.konst(t.name, t.key, "t")
		case g.p(60):
			w = " WHERE " + g.pred(rels, 1)
		}
		return "SELECT " + strings.Join(cols, ", ") + " FROM " + from + w
	}
	ops := []string{"UNION ALL", "UNION ALL", "UNION", "UNION", "INTERSECT", "EXCEPT", "INTERSECT ALL", "EXCEPT ALL"}
	s := branch(0) + " " + g.pick(ops) + " " + branch(1)
	if g.p(35) {
		third := branch(2)
		if g.p(50) {
			s = "(" + s + ")"
		} else {
			third = "(" + third + ")"
		}
		s += " " + g.pick(ops) + " " + third
	}
	if !g.p(60) {
		return gquery{sql: s}
	}
	var keys []string
	for i := range outs {
		k := strconv.Itoa(i + 1)
		if g.p(50) {
			k = outs[i]
		}
		if g.p(30) {
			k += " DESC"
		}
		keys = append(keys, k)
	}
	g.r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	s += " ORDER BY " + strings.Join(keys, ", ")
	switch g.n(3) {
	case 0:
		s += " LIMIT " + g.val(strconv.Itoa(1+g.n(20)), strconv.Itoa(1+g.n(20)), "::int8")
	case 1:
		s += " LIMIT " + strconv.Itoa(1+g.n(20)) + " OFFSET " + strconv.Itoa(g.n(10))
	}
	return gquery{sql: s, ordered: true}
}

// noFrom writes a SELECT without FROM over subqueries of the tables:
// EXISTS / NOT EXISTS, an aggregate, IN, or a WHERE EXISTS.
func (g *ggen) noFrom() gquery {
	sub := func() (string, []rel) {
		t := g.table()
		b := rel{alias: "b", t: t}
		return t.name + " b" + g.where([]rel{b}, 70), []rel{b}
	}
	var outs []string
	for i := 0; i < 1+g.n(3); i++ {
		from, rels := sub()
		switch g.n(4) {
		case 0:
			outs = append(outs, "EXISTS (SELECT 1 FROM "+from+")")
		case 1:
			outs = append(outs, "NOT EXISTS (SELECT 1 FROM "+from+")")
		case 2:
			outs = append(outs, "(SELECT "+g.agg(rels)+" FROM "+from+")")
		default:
			c := rels[0].t.cols[g.n(len(rels[0].t.cols))]
			outs = append(outs, g.konst(rels[0].t.name, c.name, c.kind)+" IN (SELECT b."+c.name+" FROM "+from+")")
		}
	}
	w := ""
	if g.p(25) {
		from, _ := sub()
		w = " WHERE EXISTS (SELECT 1 FROM " + from + ")"
	}
	return gquery{sql: "SELECT " + strings.Join(outs, ", ") + w}
}

func (g *ggen) window() gquery {
	t := g.table()
	a := rel{alias: "a", t: t}
	rels := []rel{a}
	part := ""
	if t.key != "" && g.p(70) {
		part = "PARTITION BY a." + t.key + " "
	} else if g.p(50) {
		c := t.cols[g.n(len(t.cols))]
		part = "PARTITION BY a." + c.name + " "
	}
	ord := "ORDER BY " + strings.Join(pksOf(rels), ", ")
	var fn string
	switch g.n(5) {
	case 0:
		fn = "row_number() OVER (" + part + ord + ")"
	case 1:
		fn = "count(*) OVER (" + part + ")"
	case 2:
		fn = "rank() OVER (" + part + ord + ")"
	case 3:
		c := t.pk[len(t.pk)-1]
		fn = "lag(a." + c + ") OVER (" + part + ord + ")"
	default:
		fn = "sum(length(a." + t.pk[0] + ")) OVER (" + part + ord + ")"
	}
	outs := append(g.selectList(rels), fn)
	s := "SELECT " + strings.Join(outs, ", ") + " FROM " + t.name + " a" + g.where(rels, 40)
	o, total := g.orderLimit(outs, pksOf(rels), false)
	return g.unqualify(gquery{sql: s + o, ordered: total}, rels)
}

func (g *ggen) valuesJoin() gquery {
	var src string
	var vcols []gcol
	switch g.n(3) {
	case 0:
		var rows []string
		for i := 0; i < 1+g.n(4); i++ {
			rows = append(rows, fmt.Sprintf("(%s, %d)", q(g.pick(g.ids)), i))
		}
		src = "(VALUES " + strings.Join(rows, ", ") + ") AS v(k, w)"
		vcols = []gcol{{"k", "t"}, {"w", "i"}}
	case 1:
		src = "generate_series(0, " + strconv.Itoa(g.n(6)) + ") AS v(w)"
		vcols = []gcol{{"w", "i"}}
	default:
		src = "unnest(ARRAY[" + q(g.pick(g.ids)) + ", " + q(g.pick(g.ids)) + "]) AS v(k)"
		vcols = []gcol{{"k", "t"}}
	}
	t := g.table()
	vt := gtable{name: "v", cols: vcols}
	a := rel{alias: "a", t: t}
	v := rel{alias: "v", t: vt}
	var on string
	hasK := vcols[0].name == "k"
	switch {
	case hasK && t.key != "":
		on = "a." + t.key + " = v.k"
	case colIndexOK(t, "idx") && !hasK:
		on = "a.idx = v.w"
	case !hasK && colIndexOK(t, "version"):
		on = "a.version = v.w"
	default:
		on = "true"
	}
	var from string
	vnull, anull := false, false
	switch g.n(5) {
	case 0:
		from = src + " LEFT JOIN " + t.name + " a ON " + on
		anull = true
	case 1:
		from = t.name + " a JOIN " + src + " ON " + on
	case 2:
		from = t.name + " a LEFT JOIN " + src + " ON " + on
		vnull = true
	case 3:
		from = src + " FULL JOIN " + t.name + " a ON " + on
		vnull, anull = true, true
	default:
		from = src + ", " + t.name + " a"
		g.pendingWhere = append(g.pendingWhere, on)
	}
	a.nullable, v.nullable = anull, vnull
	rels := []rel{v, a}
	outs := g.selectList(rels)
	if g.p(40) {
		outs = append(outs, "v."+vcols[len(vcols)-1].name)
	}
	w := g.where(rels, 50)
	if g.p(25) {
		gb := "v." + vcols[0].name
		return gquery{sql: "SELECT " + gb + ", count(a." + t.pk[0] + ") FROM " + from + w + " GROUP BY " + gb + " ORDER BY 1", ordered: true}
	}
	uniq := append(pksOf([]rel{a}), "v."+vcols[len(vcols)-1].name)
	if len(vcols) == 2 {
		uniq = append(uniq, "v.k")
	}
	o, total := g.orderLimit(outs, uniq, false)
	return gquery{sql: "SELECT " + strings.Join(outs, ", ") + " FROM " + from + w + o, ordered: total}
}

func colIndexOK(t gtable, c string) bool {
	for _, x := range t.cols {
		if x.name == c {
			return true
		}
	}
	return false
}

func (g *ggen) scalarSub() gquery {
	if g.p(25) {
		return g.noFrom()
	}
	t := g.table()
	a := rel{alias: "a", t: t}
	rels := []rel{a}
	outs := g.selectList(rels)
	u := g.table()
	var sub string
	switch g.n(4) {
	case 0:
		if t.key != "" && u.key != "" {
			sub = "(SELECT count(*) FROM " + u.name + " b WHERE b." + u.key + " = a." + t.key + ")"
		} else {
			sub = "(SELECT count(*) FROM " + u.name + " b)"
		}
	case 1:
		sub = "(SELECT max(w) FROM (VALUES (1), (2), (3)) AS v(w))"
	case 2:
		sub = "(SELECT count(*) FROM " + u.name + " b)"
	default:
		sub = "(SELECT min(b." + u.pk[0] + ") FROM " + u.name + " b WHERE " + g.pred([]rel{{alias: "b", t: u}}, 1) + ")"
	}
	outs = append(outs, sub)
	o, total := g.orderLimit(outs, pksOf(rels), false)
	return gquery{sql: "SELECT " + strings.Join(outs, ", ") + " FROM " + t.name + " a" + g.where(rels, 40) + o, ordered: total}
}
