package route

// Route decides where st runs. It never panics on any parameter bytes:
// malformed input becomes a DestRefuse with the SQLSTATE Postgres would use.
func (r *Table) Route(st *Statement, params [][]byte, formats []int16, paramOIDs []uint32) Dest {
	d := r.routeOne(st, params, formats, paramOIDs)
	if d.Kind == DestRefuse && (st.Select || st.Copy && st.plan != nil && st.plan.copyStaged != nil) && st.ReadOnly && st.ParseError == "" && acrossShards(d.Refusal) {
		one := func(x *Statement) Dest { return r.routeOne(x, params, formats, paramOIDs) }
		return r.stmts.stages(st).route(d, one) // twostage.go
	}
	return d
}

// routeOne is Route without the two-stage plan.
func (r *Table) routeOne(st *Statement, params [][]byte, formats []int16, paramOIDs []uint32) Dest {
	b := st.lit
	if b != nil && b.decided {
		return b.dest // a text with literals and no $n: decided when analyzed
	}
	in := input{params: params, formats: formats, oids: paramOIDs}
	if b != nil {
		in.lits = b.lits
	}
	e := evaluator{pl: &r.pl, sc: r.sc, in: &in}
	return e.route(st)
}
