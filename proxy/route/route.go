package route

import (
	"fmt"
	"strings"
)

// Route decides where st runs. It never panics on any parameter bytes:
// malformed input becomes a DestRefuse with the SQLSTATE Postgres would use.
func (r *Table) Route(st *Statement, params [][]byte, formats []int16, paramOIDs []uint32) Dest {
	d := r.routeOne(st, params, formats, paramOIDs)
	var key *Dest
	if d.Kind == DestShard && d.Shard != r.defShard && len(st.Unsharded) > 0 && st.Select && st.ReadOnly && st.ParseError == "" &&
		(st.plan == nil || st.plan.hint == nil) { // a hint's shard is the client's choice
		kd := d
		key = &kd
		d = r.unshardedElsewhere(st, d)
	}
	if d.Kind == DestRefuse && (st.Select || st.Copy && st.plan != nil && st.plan.copyStaged != nil) && st.ReadOnly && st.ParseError == "" && acrossShards(d.Refusal) {
		one := func(x *Statement) Dest { return r.routeOne(x, params, formats, paramOIDs) }
		d = r.stmts.stages(st).route(d, one) // twostage.go
	}
	d.OnKeyShard = key
	return d
}

// unshardedElsewhere refuses keyed read d of st, which also reads
// unsharded tables while its key's shard is not the default one, where
// they live: one shard cannot answer it (Route answers it in two stages
// where it can: the unsharded tables' subqueries on the default shard
// first).
func (r *Table) unshardedElsewhere(st *Statement, d Dest) Dest {
	shards := r.pl.m.Shards
	msg := fmt.Sprintf("statement joins unsharded tables (%s), which live on the default shard %q, with rows of shard %q; %s",
		strings.Join(st.Unsharded, ", "), shards[r.defShard].Name, shards[d.Shard].Name, unshardedKeyed)
	return Dest{Kind: DestRefuse, Bucket: -1, Reason: d.Why(), Refusal: &Refusal{SQLState: "0A000", Message: msg,
		Detail: "Routing: " + d.Why(),
		Hint:   "Read the unsharded tables in a subquery of their own (answered in two stages) or a statement of their own, or add them to the sharding schema (keyed or global)."}}
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
