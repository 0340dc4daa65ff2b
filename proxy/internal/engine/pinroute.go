package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// Where the statements a pinned session's backend runs as the client sent
// them (ownBackend.forwards) read and write. Such a statement goes to the
// pinned backend whatever it names, so the proxy routes what it runs
// there, as it routes every other statement, before sending it: a
// statement whose rows live on another shard than the pin's is refused
// as any statement for another shard is (the pinned backend would answer
// from its own rows: none, or some), and a pin is made on the shard the
// statement that makes it reads.
//
//   - EXECUTE goes by the prepared statement it runs and its arguments
//     (pinnedExecuteDest);
//   - a statement refused in transaction pooling for the session state it
//     keeps — a temporary table made by CREATE TEMP TABLE ... AS, a cursor
//     WITH HOLD, a session advisory lock or set_config(..., false) in a
//     query — goes by the rows it reads and writes
//     (route.Analyzer.OnOwnSession: ownDest), when pinning the session
//     (stateShard, pinOn) and once pinned (pinnedForwardDest);
//   - the session's temporary tables are on its pinned backend, wherever
//     the pin is, not on the default shard with the unsharded tables
//     (pinAdjust).

// pinnedForwardDest is the destination of a's run on a pinned session's
// backend (d is a's own, kept when the proxy has nothing to add): an
// EXECUTE by the statement it runs, a statement that keeps session state
// by what it reads and writes (params, formats, oids: a Bind's).
func pinnedForwardDest(p *planner, a *route.Statement, d route.Dest, params [][]byte, formats []int16, oids []uint32) (route.Dest, *pgwire.Error) {
	switch {
	case a.Kind == route.KindExecute:
		return pinnedExecuteDest(p, a, d)
	case a.Kind != route.KindUnsupported || a.SessionState == "" || p.sim.tx == txFailed:
		return d, nil
	}
	own, od, ok := ownDest(p.s, a, params, formats, oids)
	if !ok {
		return d, nil
	}
	fits, e := p.pinnedRoute(own, od)
	switch {
	case e != nil:
		return d, e
	case fits:
		return od, nil
	}
	return d, ownRefusal(od)
}

// ownDest routes a, a statement that keeps session state, as a server
// session of its own runs it (route.Analyzer.OnOwnSession): ok is false
// when it names no table (any shard's session runs it).
func ownDest(s *Session, a *route.Statement, params [][]byte, formats []int16, oids []uint32) (*route.Statement, route.Dest, bool) {
	own := s.gen.Config.Analyzer.OnOwnSession(a)
	if own == nil {
		return nil, route.Dest{}, false
	}
	return own, pinAdjust(s, own, s.gen.Config.Analyzer.Route(own, params, formats, oids)), true
}

// ownRefusal is the error for a statement that keeps session state whose
// rows are not one shard's (ownDest's d): it cannot run on one session.
func ownRefusal(d route.Dest) *pgwire.Error {
	if d.Kind == route.DestRefuse && d.Refusal != nil {
		return refusalError(d.Refusal)
	}
	return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: "this statement keeps session state on the server session that runs it, and reads or writes the rows of every shard: pgshard cannot run it on one session",
		Detail:  d.Why(),
		Hint:    "Add a key predicate, or read the rows first and keep them in the client."}
}

// stateShard is the shard whose rows the statements of as that keep
// session state read and write, where a pin for them goes (-1: they name
// no table's rows, the pin's usual shard serves them); an error when they
// cannot run on one session (rows of every shard, or of two shards).
func stateShard(s *Session, as []*route.Statement) (int, *pgwire.Error) {
	shard := -1
	for _, a := range as {
		if a.Kind != route.KindUnsupported || a.SessionState == "" {
			continue
		}
		var e *pgwire.Error
		if shard, e = stateShardOf(s, shard, a, nil, nil, nil); e != nil {
			return -1, e
		}
	}
	return shard, nil
}

// stateShardOf is stateShard's step for a (with a Bind's params, formats
// and oids), shard the shard found so far (-1: none).
func stateShardOf(s *Session, shard int, a *route.Statement, params [][]byte, formats []int16, oids []uint32) (int, *pgwire.Error) {
	g := s.gen
	_, d, ok := ownDest(s, a, params, formats, oids)
	want := -1
	switch {
	case !ok:
		return shard, nil
	case d.Kind == route.DestRefuse, d.Kind == route.DestAll:
		return -1, ownRefusal(d)
	case d.Kind == route.DestShard:
		want = d.Shard
	case d.Default:
		want = g.DefaultShard
	default:
		return shard, nil
	}
	if shard >= 0 && want != shard {
		return -1, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: fmt.Sprintf("statements that keep session state touch shards %q and %q: a session of its own is on one shard", g.shardName(shard), g.shardName(want)),
			Hint:    "Send them from two sessions."}
	}
	return want, nil
}

// pinnedExecuteDest routes a pinned session's EXECUTE (sent to its
// backend as the client wrote it) by the statement it runs, as an
// unpinned session's is (sqlExecute): a statement the proxy knows whose
// arguments name a key of another shard is refused as any statement for
// another shard is (the pinned backend would answer it from its own
// rows: none), one that reads every shard is refused too, and a keyed
// one gets the fence's assert of its key. d is the EXECUTE's own
// destination, returned when the statement is not the proxy's to know
// (the server answers it).
func pinnedExecuteDest(p *planner, a *route.Statement, d route.Dest) (route.Dest, *pgwire.Error) {
	vs := p.book.lookup([]byte(a.PrepareName))
	if vs == nil || p.isLocal(vs.st) || p.sim.tx == txFailed {
		return d, nil
	}
	vd := pinAdjust(p.s, vs.st, p.s.gen.Config.Analyzer.Route(vs.st, a.ExecuteArgs, nil, vs.oids))
	ok, e := p.pinnedRoute(vs.st, vd)
	switch {
	case e != nil:
		return d, e
	case ok:
		return vd, nil
	case a.ExecuteArgs == nil && a.Reason != "":
		return d, pgwire.NewError(pgwire.CodeFeatureNotSupported, a.Reason)
	case vd.Kind == route.DestRefuse && vd.Refusal != nil:
		return d, refusalError(vd.Refusal)
	}
	return d, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
		Message: "EXECUTE of a prepared statement that runs on every shard is not supported by pgshard in a pinned session",
		Detail:  vd.Why(),
		Hint:    "Run the statement itself."}
}

// pinOn pins the session (pinTo) on shard or, when the statements that
// keep session state read one shard's rows (stateShard: own >= 0), on
// that one: a transaction already on another shard is refused, as any
// statement for another shard is.
func (p pinner) pinOn(ctx context.Context, shard, own int, why pinReason, temps []string) *pgwire.Error {
	s := p.s
	if own >= 0 {
		if s.bc != nil && s.txn.shard != own {
			return router{gen: s.gen}.crossShard(&routeIn{tx: s.txn.tx, explicit: s.txn.tx != txIdle}, own, s.txn.shard, "")
		}
		shard = own
	}
	return p.pinTo(ctx, shard, why, temps)
}

// pinAdjust is adjustDest for a statement of s: in a pinned session the
// session's own temporary tables live on its backend — wherever the pin
// is — not with the unsharded tables on the default shard, so a statement
// whose unsharded tables are all of them runs on the pin's shard (a keyed
// statement on its key's, which the pin then checks).
func pinAdjust(s *Session, a *route.Statement, d route.Dest) route.Dest {
	temps := s.own != nil && len(a.Unsharded) > 0 && s.own.holdsAll(a.Unsharded)
	if temps && d.OnKeyShard != nil {
		d = *d.OnKeyShard // not the default shard's tables: its key's decision
	}
	if s.own != nil && d.Kind == route.DestAll && d.Merge != nil && d.Merge.Stages != nil {
		if t := s.own.heldOf(a.Unsharded); t != "" {
			return route.Dest{Kind: route.DestRefuse, Bucket: -1, Reason: d.Why(), Refusal: &route.Refusal{SQLState: pgwire.CodeFeatureNotSupported,
				Message: fmt.Sprintf("a read in two stages cannot read the session's temporary table %s: its stages run on connections of their own", t),
				Detail:  "Routing: " + d.Why(),
				Hint:    "Read the temporary table in a statement of its own, or give the sharded rows a key of the pinned shard."}}
		}
	}
	if !temps || d.Kind == route.DestAll || d.Kind == route.DestRefuse {
		return s.gen.adjustDest(a, d)
	}
	if d.Kind == route.DestShard {
		return d
	}
	return route.Dest{Kind: route.DestShard, Shard: s.own.shard, Bucket: -1,
		Reason: "the session's temporary tables (" + strings.Join(a.Unsharded, ", ") + ") on its pinned backend"}
}
