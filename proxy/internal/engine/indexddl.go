package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// Schema changes that name an index by its name alone (DROP INDEX, ALTER
// INDEX, REINDEX INDEX, COMMENT ON INDEX: route.Statement.IndexNames)
// say nothing of the table the index is on. The analyzer sends them where
// an unsharded table's index lives, the default shard; an index of a
// keyed or global table is on every shard, and must change there too
// (dropped on the default shard alone, the others would keep it). So
// before such a statement runs, the default shard — which has every
// table, and so every index — is asked which tables the named indexes
// belong to (indexTablesSQL, on a connection of its own), and the
// statement runs on every shard when the schema places one of them
// (outside a transaction block; inside one it is refused, as every
// schema change of every shard is; in a query string with other
// statements, indexesAlone refuses it). Planning stops for the question
// where it may (indexTablesFor): the runner asks, and plans the part
// again with the answer. An index the default shard does not
// have (a typo, IF EXISTS) leaves the statement where it was: Postgres
// answers it there.

// indexTablesSQL lists the tables of the indexes in names (each a quoted,
// possibly schema-qualified name, as to_regclass reads it).
func indexTablesSQL(names []string) string {
	b := []byte("SELECT DISTINCT c.relname FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indrelid WHERE i.indexrelid = ANY (ARRAY[")
	for i, n := range names {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, "to_regclass("...)
		b = appendLiteral(b, quoteQualified(n))
		b = append(b, ")::oid"...)
	}
	return string(append(b, "])"...))
}

// quoteQualified quotes each part of a dotted name as an identifier (the
// parser's names: case already folded, quotes removed).
func quoteQualified(name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = `"` + strings.ReplaceAll(p, `"`, `""`) + `"`
	}
	return strings.Join(parts, ".")
}

// indexDest is where a (planned by p), a schema change naming indexes by name alone,
// runs: every shard when one of them is of a table the schema places,
// else d. Nothing to ask for other statements, a single shard, or a
// statement routed elsewhere than the default shard. The default shard
// is asked by the runner where planning may stop for it (stopped: p.need
// says what for; the part is planned again with the answer given,
// acquireneed.go), else on the spot.
func indexDest(p *planner, a *route.Statement, d route.Dest) (_ route.Dest, stopped bool) {
	g := p.s.gen
	if len(a.IndexNames) == 0 || len(g.Pools) < 2 || a.Kind != route.KindDDL ||
		!(d.Kind == route.DestAny || d.Kind == route.DestShard && d.Shard == g.DefaultShard) {
		return d, false
	}
	tables, e, stopped := indexTablesFor(p, a.IndexNames)
	if stopped {
		return d, true
	}
	if e != nil {
		return route.Dest{Kind: route.DestRefuse, Bucket: -1, Reason: "asking which table an index is of",
			Refusal: &route.Refusal{SQLState: e.Code, Message: "pgshard could not learn which table the index belongs to: " + e.Message,
				Hint: "The statement changes every shard's schema when the index is of a sharded table: retry when the default shard answers."}}, false
	}
	for _, t := range tables {
		if g.Config.Analyzer.IsPlaced(t) {
			return route.Dest{Kind: route.DestAll, Bucket: -1,
				Reason: fmt.Sprintf("a schema change of index %s, of table %s, which every shard has: applied to every shard", strings.Join(a.IndexNames, ", "), t)}, false
		}
	}
	return d, false
}

// indexTablesFor is the default shard's answer to which tables the
// indexes names belong to: given by the runner, or planning stops for
// it (stopped) where it may, else asked on the spot.
func indexTablesFor(p *planner, names []string) (tables []string, e *pgwire.Error, stopped bool) {
	for i, gi := range p.given.indexes {
		if slices.Equal(gi.names, names) {
			p.given.indexes = slices.Delete(slices.Clip(p.given.indexes), i, i+1)
			return gi.tables, gi.err, false
		}
	}
	if p.exec().mayStop(p.held || p.onBackend) {
		p.need = acquireNeed{on: true, index: slices.Clone(names), noted: p.noted}
		return nil, nil, true
	}
	p.stepped = true // I/O while planning: the part is not planned again
	tables, e = indexTablesOn(p.ctx, p.s, names)
	return tables, e, false
}

// indexTablesOn asks the default shard which tables the indexes in names
// belong to, on a connection taken for it and given back.
func indexTablesOn(ctx context.Context, s *Session, names []string) ([]string, *pgwire.Error) {
	pool := s.gen.Pools[s.gen.DefaultShard]
	key, _ := s.cur.Split(pool.ViaPooler)
	bc, err := pool.Acquire(ctx, key)
	if err != nil {
		return nil, acquireError(pool, err)
	}
	res, err := bc.RunSimple(ctx, s.gen.Config.PoolTimeout, indexTablesSQL(names))
	pool.Release(bc)
	switch {
	case err != nil:
		return nil, pgwire.NewError(pgwire.CodeConnectionFailure, fmt.Sprintf("shard %q: %s", pool.Shard.Name, backend.ShortErr(err)))
	case len(res) != 1:
		return nil, pgwire.NewError(pgwire.CodeInternalError, fmt.Sprintf("shard %q answered %d results to one query", pool.Shard.Name, len(res)))
	case res[0].ErrRaw != nil:
		if e := pgwire.DecodeError(res[0].ErrRaw); e != nil {
			return nil, e
		}
		return nil, pgwire.NewError(pgwire.CodeInternalError, fmt.Sprintf("shard %q answered with a malformed error", pool.Shard.Name))
	}
	var out []string
	for _, r := range res[0].Rows {
		if len(r) == 1 && r[0] != nil {
			out = append(out, string(r[0]))
		}
	}
	return out, nil
}

// indexesAlone refuses a query string of several statements one of which
// changes an index of a table the schema places (indexDest: every
// shard). A query string is routed statement by statement from the
// analyzer's decisions alone (multiRoute and its kin), which cannot know
// whose index a name is; rather than change it on the default shard
// alone, the string is refused. The default shard is asked once per such
// statement; an unsharded table's index lets the string run as before.
func indexesAlone(p *planner, as []*route.Statement) *pgwire.Error {
	g := p.s.gen
	for _, a := range as {
		if len(a.IndexNames) == 0 {
			continue
		}
		d, stopped := indexDest(p, a, g.adjustDest(a, g.Config.Analyzer.Route(a, nil, nil, nil)))
		if stopped {
			return errPlanStopped // the runner asks (acquireneed.go)
		}
		switch d.Kind {
		case route.DestRefuse:
			return refusalError(d.Refusal)
		case route.DestAll:
			return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
				Message: "a schema change of an index of a sharded table must be alone in its query string: " + d.Why(),
				Hint:    "Send it as a separate query, outside a transaction block: pgshard then runs it on every shard."}
		}
	}
	return nil
}
