package route

import (
	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// Filters pushed into a table read whole. A table a two-stage plan reads
// whole (pull: SELECT * FROM t LIMIT PullLimit+1) is read with the terms
// of its SELECT's WHERE that name no other relation, as a copy: SELECT *
// FROM t a WHERE a.version > $1 LIMIT PullLimit+1 — fewer rows to carry
// and to hold under the limit, and a keyed term makes stage 1 a read of
// its key's shard. Stage 2 keeps the whole WHERE, so a term pushed only
// removes rows stage 2 would remove itself, which holds when
//
//   - every row stage 2 builds from a table's row has that row's values:
//     the table is not on the nullable side of an outer join (there a
//     row removed early turns a match into a NULL-extended row, which
//     WHERE a.x IS NULL would keep), nor inside a join with an alias
//     (where a.x would name another scope's a);
//   - the term names columns of that table only, each qualified by its
//     name or alias (an unqualified column may be another relation's, or
//     the row's around a subquery) — or unqualified in the statement's
//     own SELECT (not a subquery) when its FROM is that one table — and
//     reads nothing else: constants,
//     parameters, operators, casts, AND/OR/NOT, IS [NOT] NULL, CASE,
//     COALESCE, arrays, rows and the immutable functions of pushFuncs —
//     no subquery, aggregate, window or volatile function (random()
//     would be drawn twice).
//
// A join's ON terms that name one table are pushed the same way where
// the join drops that table's rows failing them: either side of an
// inner join, the nullable side of an outer one (a LEFT JOIN t ON
// t.path = 'x' matches only t's rows with that path; its preserved
// side keeps every row, so a term naming only it is never pushed).

// pushFuncs are built-in functions a pushed term may call: immutable,
// so stage 1 and stage 2 evaluate them alike.
var pushFuncs = setOf("lower", "upper", "length", "char_length", "octet_length", "substr", "substring",
	"btrim", "ltrim", "rtrim", "left", "right", "strpos", "replace", "md5", "abs", "round", "floor", "ceil",
	"ceiling", "mod", "trunc", "sign", "jsonb_typeof", "json_typeof", "jsonb_extract_path_text",
	"json_extract_path_text", "starts_with", "split_part", "reverse", "repeat", "lpad", "rpad", "ascii", "chr")

// pushable are the terms of sel's WHERE and ON clauses each table of
// its FROM may be read with, by the name sel gives the table (see
// above); top: sel is the statement's own SELECT, not a subquery. A
// name given twice (a self-join inside an aliased join) gets none.
func pushable(sel *pg.SelectStmt, top bool) map[string][]*pg.Node {
	if sel == nil {
		return nil
	}
	names, excluded := map[string]int{}, map[string]bool{}
	for _, it := range sel.FromClause {
		fromNames(it, false, names, excluded)
	}
	only := ""
	if top && len(sel.FromClause) == 1 {
		only = oneTable(sel.FromClause)
	}
	out := map[string][]*pg.Node{}
	if sel.WhereClause != nil {
		for _, c := range conjuncts(sel.WhereClause) {
			if rel := termRelation(c, only); names[rel] == 1 && !excluded[rel] {
				out[rel] = append(out[rel], c)
			}
		}
	}
	for _, it := range sel.FromClause {
		onTerms(it, names, out)
	}
	return out
}

// fromNames counts the names FROM item n gives its tables (names), and
// records those whose rows may not reach stage 2 as they are (excluded):
// on the nullable side of an outer join (nullable), or inside a join
// with an alias (where a WHERE's a.x names another scope's a).
func fromNames(n *pg.Node, nullable bool, names map[string]int, excluded map[string]bool) {
	switch {
	case n.GetJoinExpr() != nil:
		j := n.GetJoinExpr()
		hidden := j.Alias != nil
		l := nullable || hidden || j.Jointype == pg.JoinType_JOIN_RIGHT || j.Jointype == pg.JoinType_JOIN_FULL
		r := nullable || hidden || j.Jointype == pg.JoinType_JOIN_LEFT || j.Jointype == pg.JoinType_JOIN_FULL
		fromNames(j.Larg, l, names, excluded)
		fromNames(j.Rarg, r, names, excluded)
	case n.GetRangeVar() != nil:
		rv := n.GetRangeVar()
		name := rv.Relname
		if rv.Alias != nil {
			name = rv.Alias.Aliasname
		}
		names[name]++
		if nullable {
			excluded[name] = true
		}
	}
}

// onTerms adds to out the ON terms of the joins in FROM item n that one
// of their tables may be read with (see above); names counts the names
// of the statement's FROM.
func onTerms(n *pg.Node, names map[string]int, out map[string][]*pg.Node) {
	j := n.GetJoinExpr()
	if j == nil {
		return
	}
	onTerms(j.Larg, names, out)
	onTerms(j.Rarg, names, out)
	if j.Quals == nil {
		return
	}
	l, r, skip := map[string]int{}, map[string]int{}, map[string]bool{}
	fromNames(j.Larg, false, l, skip)
	fromNames(j.Rarg, false, r, skip)
	for _, c := range conjuncts(j.Quals) {
		rel := termRelation(c, "")
		if names[rel] != 1 {
			continue // no such table here, or two of that name
		}
		switch {
		case j.Jointype == pg.JoinType_JOIN_INNER && l[rel]+r[rel] == 1,
			j.Jointype == pg.JoinType_JOIN_LEFT && r[rel] == 1,
			j.Jointype == pg.JoinType_JOIN_RIGHT && l[rel] == 1:
			out[rel] = append(out[rel], c)
		}
	}
}

// termRelation is the one relation term t names, each column qualified
// by it (or unqualified, when only is the one table they can name), when
// t reads nothing a pushed term may not (see above); "" for any other
// term.
func termRelation(t *pg.Node, only string) string {
	rel, ok := "", true
	inspect(t, func(n *pg.Node) bool {
		switch x := n.Node.(type) {
		case *pg.Node_ColumnRef:
			f := x.ColumnRef.Fields
			name := ""
			switch {
			case len(f) == 1 && f[0].GetString_() != nil && only != "":
				name = only
			case len(f) == 2 && f[1].GetString_() != nil:
				name = strName(f[0])
			}
			if name == "" || rel != "" && name != rel {
				ok = false
			}
			rel = name
		case *pg.Node_FuncCall:
			fc := x.FuncCall
			schema, name := funcName(fc)
			if schema != "" && schema != "pg_catalog" || !pushFuncs[name] || fc.Over != nil || fc.AggStar ||
				fc.AggDistinct || len(fc.AggOrder) > 0 || fc.AggFilter != nil || fc.AggWithinGroup {
				ok = false
			}
		case *pg.Node_AConst, *pg.Node_ParamRef, *pg.Node_String_, *pg.Node_Integer, *pg.Node_Float, *pg.Node_Boolean,
			*pg.Node_AExpr, *pg.Node_TypeCast, *pg.Node_BoolExpr, *pg.Node_List, *pg.Node_NullTest, *pg.Node_BooleanTest,
			*pg.Node_AArrayExpr, *pg.Node_CoalesceExpr, *pg.Node_CaseExpr, *pg.Node_CaseWhen, *pg.Node_RowExpr:
		default:
			ok = false
		}
		return ok
	})
	if !ok {
		return ""
	}
	return rel
}

// withTerms is a copy of terms for a pulled table's own WHERE.
func withTerms(terms []*pg.Node) *pg.Node {
	cp := make([]*pg.Node, len(terms))
	for i, t := range terms {
		cp[i] = proto.Clone(t).(*pg.Node)
	}
	return and(cp)
}
