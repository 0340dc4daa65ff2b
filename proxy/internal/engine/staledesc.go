package engine

import (
	"slices"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// A client's prepared statement keeps the result columns it was described
// with. On its own server statement, Postgres re-plans it after a schema
// change and refuses it with 0A000 "cached plan must not change result
// type" when the columns changed (their number, a name, a type or a
// typmod): the client learns it must prepare it again. Through the proxy
// the statement is parsed afresh on whichever backend runs it, so nothing
// on the server compares: a column whose type changed (int4 → text) would
// be sent in the new type and decoded by the client in the old one, a
// column dropped and another added would shift values silently.
//
// So the description the client got (its Describe of the statement) is
// kept in the statement (vstmt.desc, resultShape), and a Bind of it under
// a later statement epoch — a schema change this proxy saw — outside a
// transaction, or first in one (nothing of it ran on a backend yet),
// describes it again on its shard first (describeOn: a connection and a
// transaction of its own, taken by the runner while planning stops for
// it: acquireneed.go) and refuses it as Postgres would when the
// columns differ; when they do not, the statement moves to the current
// epoch and is not described again. Later in a transaction (whose own
// schema changes a separate connection cannot see) the column-count
// check of fStale remains. A schema change made elsewhere
// (another proxy, a direct connection) moves no epoch here: the
// statement is then run as parsed now, as before.

// resultShape is what of a RowDescription (or NoData: no columns) Postgres
// compares when it re-plans a prepared statement: each column's name,
// type and typmod; not its table, attribute number or format. ok is
// false for a malformed message.
func resultShape(msg []byte) (shape []pgvalue.Field, ok bool) {
	if len(msg) == 0 || msg[0] != 'T' {
		return []pgvalue.Field{}, true
	}
	fs, err := pgvalue.ParseRowDesc(msg)
	if err != nil {
		return nil, false
	}
	for i := range fs {
		fs[i] = pgvalue.Field{Name: fs[i].Name, OID: fs[i].OID, Typmod: fs[i].Typmod}
	}
	return fs, true
}

// rowDescOf returns the RowDescription or NoData among a Describe's
// answers (ParameterDescription first), nil if none.
func rowDescOf(msgs []byte) []byte {
	for msg, rest, ok := pgwire.NextMsg(msgs); ok; msg, rest, ok = pgwire.NextMsg(rest) {
		if msg[0] == 'T' || msg[0] == 'n' {
			return msg
		}
	}
	return nil
}

// staleResult checks a Bind of vs, routed to d (or refused with bindErr,
// returned as it is), whose statement epoch is behind: the error the
// client gets when its described columns changed (nil when they did not,
// or when the check does not apply).
func (p pipePlanner) staleResult(vs *vstmt, d route.Dest, bindErr *pgwire.Error) *pgwire.Error {
	pl, s := p.planner, p.planner.s
	if bindErr != nil {
		return bindErr
	}
	if vs.desc == nil || vs.epoch == s.gen.StmtEpoch.Load() || s.own != nil || pl.held || pl.onBackend ||
		!(pl.sim.tx == txIdle || pl.sim.tx == txDeferred && !s.readers.any()) || len(pl.plan.bw) > 0 {
		// (bw: earlier statements of the pipeline, a schema change among
		// them perhaps, have not run yet: a description now would be of
		// the schema before them.)
		return nil
	}
	shard := d.Shard
	switch d.Kind {
	case route.DestShard:
	case route.DestAny:
		shard = s.gen.pickAny()
		if d.Default || len(vs.st.Unsharded) > 0 {
			shard = s.gen.DefaultShard
		}
	default:
		return nil
	}
	epoch := s.gen.StmtEpoch.Load()
	var desc backend.Described
	var e *pgwire.Error
	switch gd := pl.given.describedAt(pl.cur); {
	case gd != nil:
		desc, e, epoch = gd.desc, gd.err, gd.epoch // described by the runner (acquireneed.go)
	case pl.exec().mayStop(pl.held):
		stopDescribe(pl, vs, shard)
		return errPlanStopped
	default:
		pl.stepped = true // I/O while planning: the part is not planned again
		desc, e = describeOn(pl.ctx, s, shard, vs.st.SQL, vs.oids, pl.sim.deferred, pl.sim.tx == txDeferred)
	}
	if e != nil {
		return nil // the Bind's own run reports what is wrong
	}
	rd := rowDescOf(desc.Msgs)
	if rd == nil {
		return nil // nothing to compare: the Bind's own run answers
	}
	now, ok := resultShape(rd)
	if !ok {
		return nil
	}
	if !slices.Equal(now, vs.desc) { // the fields resultShape keeps, compared as Postgres does
		return pgwire.ResultTypeChanged()
	}
	vs.epoch = epoch // checked: the client's columns hold under this epoch
	return nil
}
