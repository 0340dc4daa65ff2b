package route

// Explanation is a routing decision with the steps that led to it, for
// people (`pgshard route`), not for the hot path.
type Explanation struct {
	// Statement is the statement explained.
	Statement *Statement
	// Dest is the decision, as Route returns it.
	Dest Dest
	// Steps are the reasons, in order: each key found and where it lives,
	// how references combine, the decision.
	Steps []string
}

// Explain routes st like Route and records why.
func (r *Table) Explain(st *Statement, params [][]byte, formats []int16, paramOIDs []uint32) Explanation {
	ex := Explanation{Statement: st, Dest: r.Route(st, params, formats, paramOIDs)}
	p := st.plan
	if st.ParseError != "" {
		ex.Steps = append(ex.Steps, "Postgres's grammar rejects the text: "+st.ParseError)
	}
	if p != nil && (p.static == nil || p.decided) {
		var steps []string
		in := input{params: params, formats: formats, oids: paramOIDs}
		if st.lit != nil {
			in.lits = st.lit.lits
		}
		e := evaluator{pl: &r.pl, sc: r.sc, in: &in, trace: &steps}
		e.decide(p)
		ex.Steps = append(ex.Steps, steps...)
	}
	if n, why := len(ex.Steps), ex.Dest.Why(); n == 0 || ex.Steps[n-1] != why {
		ex.Steps = append(ex.Steps, why)
	}
	if len(st.IndexNames) > 0 && ex.Dest.Kind == DestAny {
		ex.Steps = append(ex.Steps, "the proxy first asks the default shard which table each index named is of: on every shard if one is a keyed or global table's")
	}
	return ex
}
