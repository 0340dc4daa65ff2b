package route

import (
	"slices"
)

// The reference graph of a statement's analysis: every reference to a
// keyed table (and pseudo-references: a keyed function's key argument, a
// key assigned by UPDATE SET), the constraints on its keys, and how refs
// are linked. uf groups refs whose keys are equal in every row that
// matters (they share a shard); co groups refs whose rows meet (they must
// be co-located); edges say that one ref's rows matter only where they
// join another's. The plan (keyplan.go, classify.go) reads it.

// refGraph is the statement's refs and their links.
type refGraph struct {
	refs   []*tref
	uf, co []int
	edges  [][2]int // ref ids: rows of edges[1] matter only where they join edges[0]
	// placeType is the key type of the first keyed table's placement key
	// (havePlace says there is one): a hint's key is read as it.
	placeType KeyType
	havePlace bool
}

// role is what a statement does with a ref.
type role uint8

const (
	roleRead   role = iota
	roleInsert      // rows inserted into a keyed table
	roleUpdate
	roleDelete
	roleFunc   // a keyed function's key argument
	roleSetKey // a key assigned by UPDATE SET / ON CONFLICT DO UPDATE SET
)

// tref is one reference to a keyed table (or a pseudo-reference: a keyed
// function argument, an assigned key).
type tref struct {
	id       int
	t        *tableInfo // nil for roleFunc / roleSetKey
	name     string     // the name it is visible by (alias or table)
	role     role
	cons     []*cnode // AND-ed constraints on its keys
	nullable bool     // on the nullable side of an outer join
	top      bool     // in the FROM of the top-level query
	sc       *scope
	desc     string
	// sub, when set, says the ref is read by a subquery whose result needs
	// every shard's rows at once (LIMIT, aggregates, ...): it is linked to
	// no other ref by its key, so it never runs on a part of the shards.
	sub string
}

// colOrigin is a key column of a ref.
type colOrigin struct {
	ref *tref
	key int // index into ref.t.keys
}

func (o colOrigin) typ() KeyType { return o.ref.t.keys[o.key].typ }

func (g *refGraph) newRef(t *tableInfo, name string, ro role, sc *scope) *tref {
	ref := &tref{id: len(g.refs), t: t, name: name, role: ro, sc: sc}
	switch {
	case t == nil:
		ref.desc = name
	case name != t.name:
		ref.desc = t.name + " " + name
	default:
		ref.desc = t.name
	}
	g.refs = append(g.refs, ref)
	g.uf = append(g.uf, ref.id)
	g.co = append(g.co, ref.id)
	if t != nil && t.place >= 0 && !g.havePlace {
		g.placeType, g.havePlace = t.keys[t.place].typ, true
	}
	return ref
}

func find(uf []int, i int) int {
	for uf[i] != i {
		uf[i] = uf[uf[i]]
		i = uf[i]
	}
	return i
}

func union(uf []int, i, j int) {
	i, j = find(uf, i), find(uf, j)
	if i < j {
		uf[j] = i
	} else if j < i {
		uf[i] = j
	}
}

// sameKeys records that x and y have equal keys in every row that matters.
func (g *refGraph) sameKeys(x, y *tref) {
	union(g.uf, x.id, y.id)
	union(g.co, x.id, y.id)
}

// limits records that y's rows matter only where they join x's.
func (g *refGraph) limits(x, y *tref) {
	g.edges = append(g.edges, [2]int{x.id, y.id})
	union(g.co, x.id, y.id)
}

// hasKeyedRef reports whether the statement references a keyed table.
func (g *refGraph) hasKeyedRef() bool {
	for _, ref := range g.refs {
		if ref.t != nil {
			return true
		}
	}
	return false
}

type applyMode uint8

const (
	modeInner applyMode = iota // WHERE, inner join ON: filters every ref of the level
	modeOuter                  // outer join ON: filters only the nullable side
	modeFull                   // full join ON: filters nothing
)

// apply records the facts of a condition of scope sc. nullSide lists the
// refs of an outer join's nullable side.
func (g *refGraph) apply(f facts, sc *scope, mode applyMode, nullSide []*tref) {
	onNullSide := func(r *tref) bool { return slices.Contains(nullSide, r) }
	for _, rc := range f.cons {
		// A condition on an outer query's row inside a subquery does not
		// filter the outer rows (NOT EXISTS ...).
		if rc.ref.sc != sc {
			continue
		}
		if mode == modeInner || mode == modeOuter && onNullSide(rc.ref) {
			rc.ref.cons = append(rc.ref.cons, rc.n)
		}
	}
	for _, eq := range f.eqs {
		x, y := eq[0].ref, eq[1].ref
		xin, yin := x.sc == sc, y.sc == sc
		switch {
		case xin && yin:
			switch {
			case mode == modeInner:
				g.sameKeys(x, y)
			case mode == modeFull:
				union(g.co, x.id, y.id)
			case onNullSide(x) && onNullSide(y):
				g.sameKeys(x, y)
			case onNullSide(y):
				g.limits(x, y)
			case onNullSide(x):
				g.limits(y, x)
			}
		case xin && y.sc.isAncestorOf(sc):
			if mode != modeFull {
				g.limits(y, x)
			}
			union(g.co, x.id, y.id)
		case yin && x.sc.isAncestorOf(sc):
			if mode != modeFull {
				g.limits(x, y)
			}
			union(g.co, x.id, y.id)
		default:
			// A key column of a derived table or CTE (its ref is in the
			// subquery's scope): every pair of rows the condition lets
			// meet has equal keys, so the two are co-located; their shard
			// sets are not narrowed (a CTE's rows may matter elsewhere).
			union(g.co, x.id, y.id)
		}
	}
	for _, in := range f.ins {
		g.limits(in[0].ref, in[1].ref)
	}
}
