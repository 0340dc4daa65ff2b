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
	m        *shardmap.Map
	schema   Schema
	sc       *compiled
	cache    *cache[*analysis]
	shapes   *cache[*shape] // analyses of literal-normalized texts; nil = no normalization
	maxCache int
	ordIdx   [maxShards]int16 // ordinal → shard index, -1 if none
	byName   map[string]int
	names    string // "s0, s1, ..." for messages
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
	r := &Table{m: mc, schema: schema, sc: compile(schema), cache: newCache[*analysis](opts.CacheSize), maxCache: opts.MaxCachedSQL, byName: map[string]int{}}
	if r.cache != nil && !opts.KeepLiterals {
		r.shapes = newCache[*shape](opts.CacheSize)
	}
	for i := range r.ordIdx {
		r.ordIdx[i] = -1
	}
	var names []string
	for i, s := range mc.Shards {
		r.ordIdx[s.Ordinal] = int16(i)
		r.byName[s.Name] = i
		names = append(names, s.Name)
	}
	r.names = strings.Join(names, ", ")
	return r, nil
}

// Map returns the shard map that Dest.Shard indexes refer to.
func (r *Table) Map() *shardmap.Map { return r.m }

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
			d := r.RouteKey(st.SetValue, r.sc.hintType)
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
func (r *Table) RouteKey(key string, t KeyType) Dest {
	v := toKey(kval{kind: kText, s: key}, t)
	if v.kind != kInt && t != KeyText {
		ref := &Refusal{SQLState: "22P02", Message: fmt.Sprintf("pgshard key %q is not a valid %s key", key, t),
			Hint: "An integer sharding key is given in decimal."}
		return Dest{Kind: DestRefuse, Bucket: -1, Reason: ref.Message, Refusal: ref}
	}
	p := r.place(v, &source{key: t, insert: true, col: "key", expr: quoteKey(key)})
	switch p.kind {
	case pOne:
		return Dest{Kind: DestShard, Shard: p.shard, Key: strings.Clone(v.text()), Bucket: p.bucket,
			Reason: "pgshard key " + quoteKey(v.text()) + placeWhy(r, p)}
	case pRefuse:
		return Dest{Kind: DestRefuse, Bucket: -1, Reason: p.ref.Message, Refusal: p.ref}
	}
	ref := &Refusal{SQLState: "22023", Message: fmt.Sprintf("pgshard key %q names no shard", key)}
	return Dest{Kind: DestRefuse, Bucket: -1, Reason: ref.Message, Refusal: ref}
}

// RouteShard routes to the shard named name (an operator's choice).
func (r *Table) RouteShard(name string) Dest {
	i, ok := r.byName[name]
	if !ok {
		ref := r.unknownShard(name)
		return Dest{Kind: DestRefuse, Bucket: -1, Reason: ref.Message, Refusal: ref}
	}
	return Dest{Kind: DestShard, Shard: i, Bucket: -1, Reason: "pgshard shard " + name}
}

func (r *Table) unknownShard(name string) *Refusal {
	return &Refusal{SQLState: "42704", Message: fmt.Sprintf("hint pgshard:shard=%s names no shard of map epoch %d", name, r.m.Epoch),
		Hint: "Known shards: " + r.names + "."}
}

// Bound returns where a statement routed to d runs inside a transaction
// already bound to shard bound: DestAny runs there; DestShard must be that
// shard, else the statement is refused with SQLSTATE 0A000 naming both
// shards (the client must roll back); a fan-out or DDL (DestAll) cannot
// join a transaction on one shard and is refused too.
func (r *Table) Bound(d Dest, bound int) Dest {
	switch d.Kind {
	case DestAny:
		d.Kind, d.Shard = DestShard, bound
		d.Reason += "; runs on the transaction's shard " + r.m.Shards[bound].Name
		return d
	case DestShard:
		if d.Shard == bound {
			return d
		}
		ref := &Refusal{SQLState: "0A000",
			Message: fmt.Sprintf("statement belongs to shard %s but the transaction runs on shard %s", r.m.Shards[d.Shard].Name, r.m.Shards[bound].Name),
			Detail:  d.Reason,
			Hint:    "A transaction must stay on one shard: roll back and run the statement in its own transaction."}
		return Dest{Kind: DestRefuse, Shard: d.Shard, Key: d.Key, Bucket: d.Bucket, Reason: ref.Message, Refusal: ref}
	case DestAll:
		ref := &Refusal{SQLState: "0A000",
			Message: fmt.Sprintf("statement needs every shard but the transaction runs on shard %s", r.m.Shards[bound].Name),
			Detail:  d.Reason,
			Hint:    "Add a key predicate, or run the statement outside the transaction."}
		return Dest{Kind: DestRefuse, Bucket: -1, Reason: ref.Message, Refusal: ref}
	}
	return d
}

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

func quoteKey(s string) string {
	const max = 40
	if len(s) > max {
		cut := max
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
