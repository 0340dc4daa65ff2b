package route

import (
	"slices"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// The scopes of a statement's analysis: each query level's FROM items
// (keyed tables, derived tables and CTEs, other relations), searched
// innermost first as Postgres searches them, and what a column reference
// or an expression of a scope is in terms of sharding keys (keyOrigin).
// A scope knows only its own items and its parents: resolving a name
// needs nothing else of the analysis.

// scope is one query level's FROM items, searched innermost first.

type scope struct {
	parent *scope
	items  []*item
	ctes   map[string]*derived
}

func (s *scope) cte(name string) *derived {
	for ; s != nil; s = s.parent {
		if d, ok := s.ctes[name]; ok {
			return d
		}
	}
	return nil
}

func (s *scope) isAncestorOf(o *scope) bool {
	for p := o.parent; p != nil; p = p.parent {
		if p == s {
			return true
		}
	}
	return false
}

// item is one FROM entry.
type item struct {
	name    string
	ref     *tref
	derived *derived
	// other: a table outside the sharding schema, a function, VALUES: its
	// columns are unknown.
	other bool
}

// derived is the output of a query: a subquery, CTE or RETURNING list.
type derived struct {
	cols    []outCol
	known   bool // cols lists every output column
	sharded bool // the query reads or writes keyed tables
	// localWhy says why the query's rows are not the union of disjoint
	// per-shard answers ("" when every row comes from one shard, so it
	// may be read in the FROM of a fan-out): see localWhy.
	localWhy string
	// uses counts the FROM items that read it (a CTE may be read twice).
	uses int
	// refLo, refHi are the ids of the refs made while analyzing a
	// SELECT's FROM, WHERE, select list ... (its subqueries' too): a
	// LATERAL subquery's tie to the row (coverage.tiedToRow). Zero for
	// a set operation or VALUES.
	refLo, refHi int
}

func (d *derived) col(name string) (outCol, bool) {
	n, found := 0, outCol{}
	for _, c := range d.cols {
		if c.name == name {
			n++
			found = c
		}
	}
	return found, n == 1
}

type outCol struct {
	name   string
	origin *colOrigin
	expr   *pg.Node
}

// addTarget adds a select-list entry (or RETURNING entry) to d's columns.
func (d *derived) addTarget(rt *pg.ResTarget, sc *scope) {
	if cr := rt.Val.GetColumnRef(); cr != nil && len(cr.Fields) > 0 && cr.Fields[len(cr.Fields)-1].GetAStar() != nil {
		// * or rel.*: the key columns are known, the others are not.
		rel := ""
		if len(cr.Fields) >= 2 {
			rel = strName(cr.Fields[len(cr.Fields)-2])
		}
		for _, it := range sc.items {
			if rel != "" && it.name != rel {
				continue
			}
			switch {
			case it.ref != nil:
				for k, kc := range it.ref.t.keys {
					d.cols = append(d.cols, outCol{name: kc.col, origin: &colOrigin{ref: it.ref, key: k}})
				}
				d.known = false
			case it.derived != nil:
				d.cols = append(d.cols, it.derived.cols...)
				d.known = d.known && it.derived.known
			default:
				d.known = false
			}
		}
		return
	}
	c := outCol{name: rt.Name, expr: rt.Val}
	if c.name == "" {
		c.name = colName(rt.Val)
	}
	if o, ok := sc.keyOrigin(rt.Val); ok {
		c.origin = &o
	}
	d.cols = append(d.cols, c)
}

// keyOrigin returns the key column an expression is (through casts that
// keep its value), if any.
func (sc *scope) keyOrigin(e *pg.Node) (colOrigin, bool) {
	var casts []vtype
	for e != nil && e.GetTypeCast() != nil {
		casts = append(casts, vtypeOfCast(e.GetTypeCast().TypeName))
		e = e.GetTypeCast().Arg
	}
	cr := e.GetColumnRef()
	if cr == nil {
		return colOrigin{}, false
	}
	o, ok := sc.resolve(cr)
	if !ok {
		return o, false
	}
	for _, c := range casts {
		if c != naturalType(o.typ()) {
			return o, false
		}
	}
	return o, true
}

// resolve finds the key column a column reference names. Scopes are
// searched innermost first, as Postgres does; a name that might belong to
// a table whose columns are unknown resolves to nothing (never guess).
func (sc *scope) resolve(cr *pg.ColumnRef) (colOrigin, bool) {
	var names []string
	for _, f := range cr.Fields {
		s := f.GetString_()
		if s == nil {
			return colOrigin{}, false // * or a subscript
		}
		names = append(names, s.Sval)
	}
	if len(names) == 0 {
		return colOrigin{}, false
	}
	col := names[len(names)-1]
	if len(names) == 1 {
		for s := sc; s != nil; s = s.parent {
			var found *colOrigin
			count, maybe := 0, false
			for _, it := range s.items {
				switch {
				case it.ref != nil:
					if k := it.ref.t.keyIndex(col); k >= 0 {
						count++
						found = &colOrigin{ref: it.ref, key: k}
					} else {
						maybe = true
					}
				case it.derived != nil:
					if c, ok := it.derived.col(col); ok {
						count++
						found = c.origin
					} else if !it.derived.known {
						maybe = true
					}
				default:
					maybe = true
				}
			}
			if count == 1 && found != nil {
				return *found, true
			}
			if count > 0 || maybe {
				return colOrigin{}, false
			}
		}
		return colOrigin{}, false
	}
	rel := names[len(names)-2]
	for s := sc; s != nil; s = s.parent {
		for _, it := range s.items {
			if it.name != rel {
				continue
			}
			switch {
			case it.ref != nil:
				if k := it.ref.t.keyIndex(col); k >= 0 {
					return colOrigin{ref: it.ref, key: k}, true
				}
			case it.derived != nil:
				if c, ok := it.derived.col(col); ok && c.origin != nil {
					return *c.origin, true
				}
			}
			return colOrigin{}, false
		}
	}
	return colOrigin{}, false
}

// windowsByKey reports whether every window function of s (a SELECT of
// this scope; select list,
// ORDER BY) is PARTITION BY an expression that is a sharding key accepted by
// isKey: every partition then lives on one shard, which computes the
// window exactly.
func (sc *scope) windowsByKey(s *pg.SelectStmt, isKey func(*colOrigin) bool) bool {
	named := map[string]*pg.WindowDef{}
	for _, w := range s.WindowClause {
		if wd := w.GetWindowDef(); wd != nil {
			named[wd.Name] = wd
		}
	}
	byKey := func(wd *pg.WindowDef) bool {
		for i := 0; wd != nil && i < 8; i++ {
			for _, p := range wd.PartitionClause {
				if o, ok := sc.keyOrigin(p); ok && isKey(&o) {
					return true
				}
			}
			if wd.Refname == "" {
				return false
			}
			wd = named[wd.Refname]
		}
		return false
	}
	ok := true
	for _, w := range s.WindowClause {
		if wd := w.GetWindowDef(); wd != nil && !byKey(wd) {
			ok = false
		}
	}
	inspectAll(append(slices.Clone(s.TargetList), s.SortClause...), func(n *pg.Node) bool {
		if n.GetSubLink() != nil {
			return false
		}
		if fc := n.GetFuncCall(); fc != nil && fc.Over != nil {
			wd := fc.Over
			if wd.Name != "" && len(wd.PartitionClause) == 0 && wd.Refname == "" {
				wd = named[wd.Name] // OVER w
			}
			if !byKey(wd) {
				ok = false
			}
		}
		return ok
	})
	return ok
}
