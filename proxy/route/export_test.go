package route

// Normalized reports whether st was analyzed through its literal-normalized
// text (for tests: an equivalence check that never normalizes proves
// nothing).
func Normalized(st *Statement) bool { return st.lit != nil }

// ShapeCount is the number of normalized texts whose analysis is cached.
func (r *Table) ShapeCount() int {
	if r.stmts.shapes == nil {
		return 0
	}
	return r.stmts.shapes.len()
}

// ShapeOf normalizes sql and reports whether it has literals to replace
// and, when its shape is cached and analyzed in full, why.
func (r *Table) ShapeOf(sql string) (normalizes bool, fallback string) {
	n := new(normalizer)
	if r.stmts.shapes == nil || !n.run(sql) {
		return false, ""
	}
	if sh := r.stmts.shapes.getBytes(n.key); sh != nil && sh.a == nil {
		return true, sh.why
	}
	return true, ""
}

// RouteAlone is where st runs by its own routing, without a read in two
// stages: its refusal, if any, as the two-stage plan sees it.
func (r *Table) RouteAlone(st *Statement) Dest {
	d, _ := r.routeAlone(st, nil, nil, nil)
	return d
}
