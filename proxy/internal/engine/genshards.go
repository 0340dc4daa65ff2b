package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// What a session asks of its generation's shards itself (through its
// generationEnv, never the Server): a shard for a statement that may run
// anywhere, whether the shards order text by bytes, the check of the
// settings a preamble applies, and the database's placement rules for a
// routing decision (adjustDest).

// pickAny returns a shard for a statement that may run anywhere.
// Shards found down, or paused by an operator (PAUSE), are skipped while
// others serve.
func (g *GenerationEnv) pickAny() int {
	n := len(g.Pools)
	start := int(g.RR.Add(1) % uint32(n))
	for k := 0; k < n; k++ {
		if i := (start + k) % n; serving(g.Pools[i]) {
			return i
		}
	}
	return start
}

// serving reports whether pool's shard takes new transactions now: not
// found down, not paused.
func serving(pool *backend.Pool) bool {
	return pool.Down.Load() == nil && !pool.Ops.Paused.Load()
}

// pickHome returns the shard for a read that touches no sharded table:
// the default shard, which holds every object — the unsharded tables,
// views and sequences, and so the whole catalog: a read of pg_class or
// information_schema, a regclass cast, pg_relation_size('t') answer
// there as on one database, where another shard's catalog lacks them —
// or, while it is down or paused, any shard that serves (SELECT 1 still
// answers).
func (g *GenerationEnv) pickHome() int {
	if serving(g.Pools[g.DefaultShard]) {
		return g.DefaultShard
	}
	return g.pickAny()
}

const (
	collationUnknown int32 = iota
	collationC
	collationOther
)

// collationSQL reads what decides whether a shard orders text by bytes:
// the database's default collation and provider, and whether any column
// of a user table has a collation other than the default, C and POSIX.
const collationSQL = `SELECT d.datcollate, coalesce(pg_catalog.to_jsonb(d)->>'datlocprovider', 'c'),
 (SELECT count(*) FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
   WHERE a.attnum > 0 AND NOT a.attisdropped AND a.attcollation NOT IN (0, 100, 950, 951)
     AND c.relnamespace NOT IN ('pg_catalog'::pg_catalog.regnamespace, 'information_schema'::pg_catalog.regnamespace))
FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database()`

// textBytewise reports whether every shard orders text by bytes (the C
// or POSIX collation, libc provider, no column with another collation):
// only then does the merge compare text as the shards sort it. Checked
// once (and after DDL); a shard that cannot be asked counts as "no".
func (g *GenerationEnv) textBytewise(ctx context.Context) bool {
	switch g.Collation.Load() {
	case collationC:
		return true
	case collationOther:
		return false
	}
	ok := true
	for _, p := range g.Pools {
		bc, err := p.Acquire(ctx, backend.NoSettings)
		if err != nil {
			return false
		}
		res, err := bc.RunSimple(ctx, g.Config.PoolTimeout, collationSQL)
		if err != nil {
			p.Discard(bc)
			return false
		}
		p.Release(bc)
		if len(res) != 1 || res[0].ErrRaw != nil || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 3 {
			return false
		}
		row := res[0].Rows[0]
		coll, prov, n := string(row[0]), string(row[1]), string(row[2])
		if !(coll == "C" || coll == "POSIX") || prov != "c" || n != "0" {
			ok = false
		}
	}
	if ok {
		g.Collation.Store(collationC)
	} else {
		g.Collation.Store(collationOther)
		g.Log.Info("the shards do not order text by bytes: merges that compare text need COLLATE \"C\"")
	}
	return ok
}

// preambleCache remembers validated preamble settings: their canonical
// ParameterStatus values.
type preambleCache struct {
	mu sync.Mutex
	m  map[string]map[string]string
}

var preambles = &preambleCache{m: map[string]map[string]string{}}

// validatePreamble checks settings the preamble applies (they did not go
// into a startup packet) the way Postgres checks startup parameters, and
// returns the ParameterStatus values they produce. Results are cached.
func (g *GenerationEnv) validatePreamble(ctx context.Context, p *backend.Pool, key, pre *backend.Settings) (map[string]string, *pgwire.Error) {
	ck := p.Shard.Name + "\x00" + key.Key + "\x00" + pre.Key
	preambles.mu.Lock()
	vals, ok := preambles.m[ck]
	preambles.mu.Unlock()
	if ok {
		return vals, nil
	}
	bc, err := p.Acquire(ctx, key)
	if err != nil {
		return nil, pgwire.AsError(err, pgwire.NewError(pgwire.CodeCannotConnect, err.Error()))
	}
	res, err := bc.RunSimple(ctx, g.Config.PoolTimeout, pre.BeginSQL()+";\n"+pre.PreambleSQL(), "ROLLBACK")
	if err != nil {
		p.Discard(bc)
		return nil, pgwire.NewError(pgwire.CodeConnectionFailure, fmt.Sprintf("shard %q: %v", p.Shard.Name, err))
	}
	p.Release(bc)
	if res[0].ErrRaw != nil {
		e := pgwire.DecodeError(res[0].ErrRaw)
		if e == nil {
			return nil, pgwire.NewFatal(pgwire.CodeInternalError, "undecodable error from a shard")
		}
		e.Severity, e.Raw = "FATAL", nil
		return nil, e
	}
	vals = map[string]string{}
	for _, st := range res[0].Statuses {
		vals[st[0]] = st[1]
	}
	preambles.mu.Lock()
	if len(preambles.m) > 4096 {
		clear(preambles.m)
	}
	preambles.m[ck] = vals
	preambles.mu.Unlock()
	return vals, nil
}

// firstShard is the shard of the first statement of a query that routes
// to one (-1: none does).
func (g *GenerationEnv) firstShard(as []*route.Statement) int {
	for _, a := range as {
		if localKind(a.Kind) || txnControl(a.Kind) {
			continue
		}
		if d := g.adjustDest(a, g.Config.Analyzer.Route(a, nil, nil, nil)); d.Kind == route.DestShard {
			return d.Shard
		}
	}
	return -1
}

// adjustDest applies the database's placement rules to a routing
// decision: on a map with one shard every statement is routable there
// (reads of "every shard", DDL in transactions, shapes no merge supports,
// keys the analyzer could not read); unsharded objects live on the default
// shard, so a statement that joins them with sharded tables of another
// shard, or reads them on every shard, is refused — unless it is read in
// two stages, each of which reads them on the default shard alone.
func (g *GenerationEnv) adjustDest(a *route.Statement, d route.Dest) route.Dest {
	srv := g
	if len(srv.Pools) == 1 {
		switch d.Kind {
		case route.DestAll:
			return route.Dest{Kind: route.DestShard, Shard: 0, Bucket: -1, Reason: "one shard: " + d.Why()}
		case route.DestRefuse:
			if a.Kind != route.KindUnsupported && d.Refusal != nil && oneShardOverrides(d.Refusal.SQLState) {
				return route.Dest{Kind: route.DestShard, Shard: 0, Bucket: -1, Reason: "one shard (else refused: " + d.Refusal.Message + ")"}
			}
		}
		return d
	}
	if len(a.Unsharded) == 0 {
		return d
	}
	switch d.Kind {
	case route.DestShard:
		if d.Shard != srv.DefaultShard {
			srv.Metrics.Refusals.WithLabelValues("unsharded").Inc()
			return route.Dest{Kind: route.DestRefuse, Bucket: -1, Reason: d.Why(), Refusal: &route.Refusal{SQLState: pgwire.CodeFeatureNotSupported,
				Message: fmt.Sprintf("statement joins unsharded tables (%s), which live on the default shard %q, with rows of shard %q", strings.Join(a.Unsharded, ", "), srv.shardName(srv.DefaultShard), srv.shardName(d.Shard)),
				Detail:  "Routing: " + d.Why(),
				Hint:    "Read the unsharded tables in a statement of their own, or add them to the sharding schema (keyed or global)."}}
		}
	case route.DestAll:
		if a.Kind == route.KindDDL || d.Merge != nil && d.Merge.Stages != nil {
			return d // a read in two stages reads each unsharded table on the default shard (route.Stages)
		}
		srv.Metrics.Refusals.WithLabelValues("unsharded").Inc()
		return route.Dest{Kind: route.DestRefuse, Bucket: -1, Reason: d.Why(), Refusal: &route.Refusal{SQLState: pgwire.CodeFeatureNotSupported,
			Message: fmt.Sprintf("statement reads every shard but also unsharded tables (%s), which exist only on the default shard %q", strings.Join(a.Unsharded, ", "), srv.shardName(srv.DefaultShard)),
			Detail:  "Routing: " + d.Why(),
			Hint:    "Add a key, read the unsharded tables in a statement of their own, or add them to the sharding schema as global tables."}}
	}
	return d
}

// oneShardOverrides reports which refusals a map with one shard makes moot:
// those of routing (0A000) and of key values the server checks itself.
func oneShardOverrides(state string) bool {
	switch state {
	case "0A000", "22P02", "22P03", "23502":
		return true
	}
	return false
}
