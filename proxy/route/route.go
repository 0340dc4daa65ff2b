package route

import (
	"fmt"
	"strings"
)

// Route decides where st runs. It never panics on any parameter bytes:
// malformed input becomes a DestRefuse with the SQLSTATE Postgres would use.
func (r *Table) Route(st *Statement, params [][]byte, formats []int16, paramOIDs []uint32) Dest {
	d, key := r.routeAlone(st, params, formats, paramOIDs)
	if stageable(st, d) {
		d = r.stmts.stages(st).route(d, r.stageRouter(params, formats, paramOIDs)) // twostage.go
	}
	d.OnKeyShard = key
	return d
}

// RouteApart is the Dest of st's two-stage plan that takes every part
// apart (the deep or correlated plan: twostage.go plan), where these
// parameters route it: no subquery of st runs alone there, only its
// tables are read first. The engine runs it when a stage of the plan
// Route chose failed alone for a column it does not have (a subquery
// naming a column of the row without a qualifier) and nothing was
// learned from that. A DestRefuse when st has no such plan.
func (r *Table) RouteApart(st *Statement, params [][]byte, formats []int16, paramOIDs []uint32) Dest {
	d, _ := r.routeAlone(st, params, formats, paramOIDs)
	if !stageable(st, d) {
		return Dest{Kind: DestRefuse, Bucket: -1, Reason: "no plan taking the statement apart",
			Refusal: &Refusal{SQLState: "0A000", Message: "cannot run across shards: no plan takes the statement apart"}}
	}
	one := r.stageRouter(params, formats, paramOIDs)
	for x := r.stmts.stages(st); x != nil && x != noStages; x = x.alt {
		if x.apart {
			if a := x.routeThis(d, one); a.Kind != DestRefuse {
				return a
			}
		}
	}
	return d
}

// stageRouter routes a stage's statement alone (without two stages of
// its own) with the client's parameters.
func (r *Table) stageRouter(params [][]byte, formats []int16, paramOIDs []uint32) func(*Statement) Dest {
	return func(x *Statement) Dest { return r.routeOne(x, params, formats, paramOIDs) }
}

// routeAlone is where st runs by its own routing, without two stages: a
// keyed read of another shard than the default one that also reads an
// unsharded table is refused (unshardedElsewhere), its key's decision
// kept (key).
func (r *Table) routeAlone(st *Statement, params [][]byte, formats []int16, paramOIDs []uint32) (d Dest, key *Dest) {
	d = r.routeOne(st, params, formats, paramOIDs)
	if d.Kind == DestShard && d.Shard != r.defShard && len(st.Unsharded) > 0 && st.Select && st.ReadOnly && st.ParseError == "" &&
		(st.plan == nil || st.plan.hint == nil) { // a hint's shard is the client's choice
		kd := d
		key = &kd
		d = r.unshardedElsewhere(st, d)
	}
	return d, key
}

// stageable reports whether d, st's own routing, refuses a read that
// two stages may answer.
func stageable(st *Statement, d Dest) bool {
	return d.Kind == DestRefuse && (st.Select || st.Copy && st.plan != nil && st.plan.copyStaged != nil) && st.ReadOnly && st.ParseError == "" && acrossShards(d.Refusal)
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
		Hint:   "Read the unsharded tables in a subquery of their own (answered in two stages) or a statement of their own, or add them to the sharding schema (keyed or global).",
		Cause:  CauseUnshardedKeyed}}
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
