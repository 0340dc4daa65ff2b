package route

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/pgshard/pgshard/shardmap"
)

// Options tune a Table.
type Options struct {
	// CacheSize is how many distinct statement texts keep their analysis
	// (default 10000), and how many literal-normalized texts keep theirs
	// (a second cache); a negative size disables both.
	CacheSize int
	// MaxCachedSQL is the longest text that is cached (default 64 KiB):
	// longer ones are analyzed on every use.
	MaxCachedSQL int
	// DefaultShard names the shard the unsharded tables live on ("": the
	// map's first shard), as the proxy's default_shard: a keyed read of
	// another shard that also reads one of them is answered in two stages
	// (Route) or refused.
	DefaultShard string
	// KeepLiterals turns literal normalization off: every distinct text is
	// parsed and analyzed in full, as if its constants mattered to its
	// shape (see the package documentation). Normalization needs the
	// cache; it is off without one.
	KeepLiterals bool
}

// DefaultCacheSize is the statement cache's default capacity.
const DefaultCacheSize = 10000

// DefaultMaxCachedSQL is the default of Options.MaxCachedSQL.
const DefaultMaxCachedSQL = 64 << 10

// Table is the Analyzer for one shard map and sharding schema. It is safe
// for concurrent use. A new map (epoch) needs a new Table: analyses of
// constant keys name shards of the map they were made for.
//
// Table is a facade over three parts: pl, where keys live on the map
// (placer.go: RouteKey, RouteShard, Bound); stmts, what a text's
// statements are, cached (statements.go: Analyze, Split); and, per Route
// or Explain, an evaluator, where one execution of a statement goes
// (evaluator.go).
type Table struct {
	schema Schema
	sc     *compiled
	pl     placer     // the map and where keys live on it (placer.go)
	stmts  statements // each text's analysis, cached (statements.go)
	// check is the checked served set of the map (served.go), built once.
	checkOnce sync.Once
	check     string
	// defShard is the index of Options.DefaultShard in the map (0: the
	// first shard).
	defShard int
}

var _ Analyzer = (*Table)(nil)

// New returns a Table for the shard map m and the sharding schema. It
// validates both; m is copied (Map returns the copy routes refer to).
func New(m *shardmap.Map, schema Schema, opts Options) (*Table, error) {
	if m == nil {
		return nil, errors.New("route: no shard map")
	}
	if err := schema.Validate(); err != nil {
		return nil, err
	}
	mc := m.Clone()
	if err := mc.Validate(); err != nil {
		return nil, fmt.Errorf("route: %w", err)
	}
	if opts.CacheSize == 0 {
		opts.CacheSize = DefaultCacheSize
	}
	if opts.MaxCachedSQL <= 0 {
		opts.MaxCachedSQL = DefaultMaxCachedSQL
	}
	r := &Table{schema: schema, sc: compile(schema), pl: newPlacer(mc)}
	if opts.DefaultShard != "" {
		if _, err := mc.ShardByName(opts.DefaultShard); err != nil {
			return nil, fmt.Errorf("route: the default shard: %w", err)
		}
		r.defShard = slices.IndexFunc(mc.Shards, func(sh shardmap.Shard) bool { return sh.Name == opts.DefaultShard })
	}
	r.stmts = newStatements(r.sc, &r.pl, opts)
	return r, nil
}

// Map returns the shard map that Dest.Shard indexes refer to.
func (r *Table) Map() *shardmap.Map { return r.pl.m }

// IsPlaced reports whether the schema places table: keyed or global.
func (r *Table) IsPlaced(table string) bool {
	return r.sc.tables[table] != nil || r.sc.global[table]
}

// Schema returns the sharding schema.
func (r *Table) Schema() Schema { return r.schema }

// CacheLen is the number of statement texts whose analysis is cached.
func (r *Table) CacheLen() int { return r.stmts.len() }

// ErrNUL is returned for a query text holding a NUL byte: no protocol
// message can carry one, and Postgres's grammar would see only the part
// before it.
var ErrNUL = errors.New("route: query text contains a NUL byte")

// Analyze analyzes the single statement of a Parse message. A text with
// several statements yields a statement that Route refuses (42601), as
// Postgres refuses such a Parse; a text Postgres cannot parse yields a
// KindOther statement with ParseError set, routed DestAny.
func (r *Table) Analyze(sql string) (*Statement, error) { return r.stmts.analyze(sql) }

// Split analyzes the statements of a simple Query message. The slice is
// shared with the cache: do not modify it.
func (r *Table) Split(sql string) ([]*Statement, error) {
	a, err := r.stmts.analysis(sql)
	if err != nil {
		return nil, err
	}
	return a.list, nil
}

// AnalyzeBytes is Analyze for a text held in a byte slice (a Parse
// message's query): a cached text is found without allocating.
func (r *Table) AnalyzeBytes(sql []byte) (*Statement, error) {
	if a := r.stmts.cachedBytes(sql); a != nil {
		return a.one, nil
	}
	return r.Analyze(string(sql))
}

// SplitBytes is Split for a text held in a byte slice (a Query message's
// text): a cached text is found without allocating.
func (r *Table) SplitBytes(sql []byte) ([]*Statement, error) {
	if a := r.stmts.cachedBytes(sql); a != nil {
		return a.list, nil
	}
	return r.Split(string(sql))
}

// OnOwnSession is st, a statement refused for the session state it keeps
// on the server session that runs it (KindUnsupported with SessionState),
// analyzed as a server session of its own — a pinned client's — runs it:
// routed by the rows it reads and writes (a CREATE TEMP TABLE ... AS by
// its query, a DECLARE ... WITH HOLD by its cursor's, a query calling
// pg_advisory_lock or set_config(..., false) as that query). nil for a
// statement of another kind, or one that names no table (any shard's
// session runs it). Not cached: it parses st's text again — only for a
// statement whose query may name a table — and only statements that pin
// a session ask.
func (r *Table) OnOwnSession(st *Statement) *Statement {
	if st.Kind != KindUnsupported || st.SessionState == "" || st.ParseError != "" {
		return nil
	}
	if len(st.Tables) == 0 && st.Cursor == nil && len(st.TempTables) == 0 {
		// Its query names no table (a call of pg_advisory_lock(k) or
		// set_config(…, false) alone, LISTEN): nothing for a parse to find.
		// Only a CREATE TEMP … AS, a temporary view and a cursor WITH HOLD
		// leave their query unread when refused.
		return nil
	}
	res, err := pg.Parse(st.SQL)
	if err != nil || len(res.Stmts) != 1 {
		return nil
	}
	own := r.stmts.analyzeWith(st.SQL, res.Stmts[0].Stmt, nil, true)
	if len(own.Tables) == 0 {
		return nil
	}
	return own
}

// RouteKey routes an explicit key (SET LOCAL pgshard.key, a hint). An int8
// or seq key must be a decimal integer.
func (r *Table) RouteKey(key string, t KeyType) Dest { return r.pl.routeKey(key, t) }

// RouteShard routes to the shard named name (an operator's choice).
func (r *Table) RouteShard(name string) Dest { return r.pl.routeShard(name) }

// Bound returns where a statement routed to d runs inside a transaction
// already bound to shard bound: DestAny runs there; DestShard must be that
// shard, else the statement is refused with SQLSTATE 0A000 naming both
// shards (the client must roll back); a fan-out or DDL (DestAll) cannot
// join a transaction on one shard and is refused too.
func (r *Table) Bound(d Dest, bound int) Dest { return r.pl.bound(d, bound) }
