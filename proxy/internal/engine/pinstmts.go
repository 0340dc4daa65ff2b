package engine

import (
	"context"
	"slices"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// A pinned session's prepared statements. Outside a pin the proxy keeps
// the session's SQL-level and named protocol-level statements itself
// (virtual: stmtbook.go) and runs them on whichever backend a statement
// routes to; while pinned, PREPARE, EXECUTE and DEALLOCATE go to the
// pinned backend as the client sent them (ownBackend.forwards), where
// the server keeps its own statements. One namespace spans both, as on
// Postgres:
//
//   - a statement the proxy keeps but the pinned backend does not have
//     is prepared there under its name before a query string names it
//     (realizeNamed): "PREPARE p …; CREATE TEMP TABLE t …; EXECUTE p"
//     runs p, and a PREPARE of p's name fails as a duplicate;
//   - a statement the pinned backend prepared is kept by the proxy too
//     (keepPrepared), so it outlives the pin: the pin ends when the
//     temporary table is dropped, and EXECUTE p still finds p.

// realizeNamed prepares, on a pinned session's backend, the statements
// the proxy keeps that a query string's PREPARE, EXECUTE or DEALLOCATE
// names and that the backend does not have under that name yet. It
// returns the error to answer instead of the query (the server's, when a
// statement no longer prepares: Postgres would have failed its EXECUTE),
// nil to go on.
func (p pinner) realizeNamed(ctx context.Context, as []*route.Statement) *pgwire.Error {
	s := p.s
	if s.own == nil || s.bc == nil || s.txn.tx == txFailed || s.txn.tx == txBound && s.txn.bstatus == 'E' {
		return nil // an aborted transaction refuses them anyway
	}
	var todo []*vstmt
	for _, a := range as {
		switch a.Kind {
		case route.KindPrepare, route.KindExecute, route.KindDeallocate:
		default:
			continue
		}
		if vs := s.stmts[a.PrepareName]; a.PrepareName != "" && vs != nil && vs.realOn != s.bc && !slices.Contains(todo, vs) {
			todo = append(todo, vs)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	named := make([]backend.NamedStmt, len(todo))
	for i, vs := range todo {
		named[i] = backend.NamedStmt{Name: vs.name, SQL: vs.st.SQL, Oids: vs.oids}
	}
	errRaw, status, err := s.bc.ParseNamed(ctx, s.gen.Config.PoolTimeout, named)
	if err != nil {
		return pgwire.NewError(pgwire.CodeConnectionFailure, "preparing the session's statements on its pinned backend failed: "+err.Error())
	}
	if s.txn.tx == txBound {
		s.txn.bstatus = status
	}
	if errRaw != nil {
		if e := pgwire.DecodeError(errRaw); e != nil {
			return e
		}
		return pgwire.NewError(pgwire.CodeInternalError, "undecodable error from a shard")
	}
	for _, vs := range todo {
		vs.realOn = s.bc
	}
	return nil
}

// keepPrepared records a PREPARE the pinned backend ran: the proxy keeps
// the statement too (on that backend under its own name), so it outlives
// the pin. A statement the proxy could not run itself later — one it
// cannot analyze, or with a declared parameter type it does not know —
// stays on the server only, and holds the pin until it is deallocated.
func (p pinner) keepPrepared(a *route.Statement) {
	s := p.s
	if a.Prepared == nil || a.Prepared.Kind == route.KindUnsupported || slices.Contains(a.PrepareTypes, 0) {
		s.own.add(pinPrepare, []string{"\x00prepare\x00" + a.PrepareName})
		return
	}
	vs := preparedVstmt(a, s.gen.StmtEpoch.Load())
	vs.realOn = s.bc
	s.stmts[a.PrepareName] = vs
}

// pipelineNamed is the SQL-level PREPARE, EXECUTE and DEALLOCATE
// statements the buffered pipeline parses (for realizeNamed).
func pipelineNamed(s *Session) []*route.Statement {
	if len(s.stmts) == 0 {
		return nil // none to prepare on the backend: no Parse to read
	}
	var out []*route.Statement
	var pv pgwire.ParseView
	for _, m := range s.grp {
		if m.typ != 'P' || pv.Decode(m.raw) != nil {
			continue
		}
		if a, err := s.gen.Config.Analyzer.AnalyzeBytes(pv.Query); err == nil {
			switch a.Kind {
			case route.KindPrepare, route.KindExecute, route.KindDeallocate:
				out = append(out, a)
			}
		}
	}
	return out
}
