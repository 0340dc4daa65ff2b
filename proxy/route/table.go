package route

import (
	"errors"
	"fmt"
	"strings"

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
type Table struct {
	schema   Schema
	sc       *compiled
	cache    *cache[*analysis]
	shapes   *cache[*shape] // analyses of literal-normalized texts; nil = no normalization
	maxCache int
	pl       placer // the map and where keys live on it (placer.go)
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
	r := &Table{schema: schema, sc: compile(schema), cache: newCache[*analysis](opts.CacheSize), maxCache: opts.MaxCachedSQL, pl: newPlacer(mc)}
	if r.cache != nil && !opts.KeepLiterals {
		r.shapes = newCache[*shape](opts.CacheSize)
	}
	return r, nil
}

// Map returns the shard map that Dest.Shard indexes refer to.
func (r *Table) Map() *shardmap.Map { return r.pl.m }

// Schema returns the sharding schema.
func (r *Table) Schema() Schema { return r.schema }

// CacheLen is the number of statement texts whose analysis is cached.
func (r *Table) CacheLen() int {
	if r.cache == nil {
		return 0
	}
	return r.cache.len()
}

// ErrNUL is returned for a query text holding a NUL byte: no protocol
// message can carry one, and Postgres's grammar would see only the part
// before it.
var ErrNUL = errors.New("route: query text contains a NUL byte")

// Analyze analyzes the single statement of a Parse message. A text with
// several statements yields a statement that Route refuses (42601), as
// Postgres refuses such a Parse; a text Postgres cannot parse yields a
// KindOther statement with ParseError set, routed DestAny.
func (r *Table) Analyze(sql string) (*Statement, error) {
	a, err := r.analysis(sql)
	if err != nil {
		return nil, err
	}
	return a.one, nil
}

// Split analyzes the statements of a simple Query message. The slice is
// shared with the cache: do not modify it.
func (r *Table) Split(sql string) ([]*Statement, error) {
	a, err := r.analysis(sql)
	if err != nil {
		return nil, err
	}
	return a.list, nil
}

// AnalyzeBytes is Analyze for a text held in a byte slice (a Parse
// message's query): a cached text is found without allocating.
func (r *Table) AnalyzeBytes(sql []byte) (*Statement, error) {
	if r.cache != nil {
		if a := r.cache.getBytes(sql); a != nil {
			return a.one, nil
		}
	}
	return r.Analyze(string(sql))
}

// SplitBytes is Split for a text held in a byte slice (a Query message's
// text): a cached text is found without allocating.
func (r *Table) SplitBytes(sql []byte) ([]*Statement, error) {
	if r.cache != nil {
		if a := r.cache.getBytes(sql); a != nil {
			return a.list, nil
		}
	}
	return r.Split(string(sql))
}

func (r *Table) analysis(sql string) (*analysis, error) {
	if r.cache != nil {
		if a := r.cache.get(sql); a != nil {
			return a, nil
		}
	}
	if strings.IndexByte(sql, 0) >= 0 {
		return nil, ErrNUL
	}
	if st := fastPath(sql); st != nil {
		a := &analysis{list: []*Statement{st}, one: st}
		if st.Kind == KindSetLocal {
			// SET LOCAL pgshard.key = '...': its text differs per
			// transaction; route it here and keep it out of the cache.
			d := r.pl.routeKey(st.SetValue, r.sc.hintType)
			st.plan = &plan{static: &d}
			return a, nil
		}
		st.plan = &plan{static: anyDest(kindReason(st.Kind))}
		return r.store(sql, a), nil
	}
	if r.shapes != nil && len(sql) <= r.maxCache {
		if a := r.analyzeLiterals(sql); a != nil {
			return r.store(sql, a), nil
		}
	}
	a := r.analyzeText(sql)
	return r.store(sql, a), nil
}

func (r *Table) store(sql string, a *analysis) *analysis {
	if r.cache == nil || len(sql) > r.maxCache {
		return a
	}
	return r.cache.put(sql, a)
}

// analyzeText parses sql once and analyzes each of its statements.
func (r *Table) analyzeText(sql string) *analysis {
	a, _, _ := r.analyzeTextLit(sql, nil)
	return a
}

// analyzeTextLit is analyzeText, for a normalized text when lc is set. It
// also returns, for a text of several statements, each one's span, and
// the parse error: for a normalized text the analysis is then nil.
func (r *Table) analyzeTextLit(sql string, lc *litCtx) (*analysis, [][2]int, error) {
	res, err := pg.Parse(sql)
	if err != nil {
		if lc != nil {
			return nil, nil, err
		}
		st := &Statement{SQL: sql, Kind: KindOther, ParseError: err.Error()}
		st.plan = &plan{static: anyDest("the server reports the syntax error: " + clip(err.Error(), 80))}
		return &analysis{list: []*Statement{st}, one: st}, nil, nil
	}
	if len(res.Stmts) == 0 {
		st := &Statement{SQL: sql, Kind: KindEmpty, ReadOnly: true}
		st.plan = &plan{static: anyDest(kindReason(KindEmpty))}
		return &analysis{list: []*Statement{st}, one: st}, nil, nil
	}
	a := &analysis{}
	var spans [][2]int
	for _, raw := range res.Stmts {
		text := sql
		if len(res.Stmts) > 1 {
			start := int(raw.StmtLocation)
			end := len(sql)
			if raw.StmtLen > 0 {
				end = start + int(raw.StmtLen)
			}
			if start < 0 || start > end || end > len(sql) {
				start, end = 0, len(sql)
			}
			text = strings.TrimSpace(sql[start:end])
			spans = append(spans, [2]int{start, end})
		}
		a.list = append(a.list, r.analyzeStmtLit(text, raw.Stmt, lc))
	}
	if len(a.list) == 1 {
		a.one = a.list[0]
	} else {
		ref := &Refusal{SQLState: "42601", Message: "cannot insert multiple commands into a prepared statement"}
		a.one = &Statement{SQL: sql, Kind: KindOther, Reason: ref.Message,
			plan: &plan{static: &Dest{Kind: DestRefuse, Bucket: -1, Reason: ref.Message, Refusal: ref}}}
	}
	return a, spans, nil
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

func anyDest(reason string) *Dest { return &Dest{Kind: DestAny, Bucket: -1, Reason: reason} }

func kindReason(k Kind) string {
	switch k {
	case KindBegin, KindSavepoint, KindSetLocal:
		return "transaction control: deferred until a statement names the shard"
	case KindCommit, KindRollback:
		return "transaction control: ends the transaction on its shard"
	case KindSetSession:
		return "session setting: kept by the proxy"
	case KindShow:
		return "SHOW reads a setting: any shard"
	case KindDeallocate, KindDiscard, KindPrepare, KindExecute:
		return "prepared statements and session state are handled by the proxy"
	case KindEmpty:
		return "empty query"
	}
	return "touches no sharded table"
}
