package route

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// statements is what each text is: its analysis, made once and kept in a
// bounded cache (texts), and — unless Options.KeepLiterals — the shared
// analyses of literal-normalized texts (shapes), which texts differing
// only in their constants bind to their own literals (shape.go). A
// statement is classified by classify.go (analyzeStmt) and, when a read
// is refused across shards, given its two-stage plan once (stages,
// twostage.go). It reads the map only through pl, the Table's placer: a
// constant key is placed, and a statement without $n decided, when it is
// analyzed. Safe for concurrent use.
type statements struct {
	sc       *compiled
	pl       *placer
	texts    *cache[*analysis] // nil = no cache
	shapes   *cache[*shape]    // nil = no normalization
	maxCache int               // the longest text cached
}

// analysis is what the cache holds for one text: the statements Split
// returns and the statement Analyze returns.
type analysis struct {
	list []*Statement
	one  *Statement
}

// newStatements returns the statements of texts analyzed under sc and
// placed by pl; opts.CacheSize and MaxCachedSQL are set.
func newStatements(sc *compiled, pl *placer, opts Options) statements {
	s := statements{sc: sc, pl: pl, texts: newCache[*analysis](opts.CacheSize), maxCache: opts.MaxCachedSQL}
	if s.texts != nil && !opts.KeepLiterals {
		s.shapes = newCache[*shape](opts.CacheSize)
	}
	return s
}

// len is the number of texts whose analysis is cached.
func (s *statements) len() int {
	if s.texts == nil {
		return 0
	}
	return s.texts.len()
}

// cachedBytes is the cached analysis of the text in sql, nil if none: a
// hit does not allocate.
func (s *statements) cachedBytes(sql []byte) *analysis {
	if s.texts == nil {
		return nil
	}
	return s.texts.getBytes(sql)
}

// analyze is Table.Analyze: the text's one statement.
func (s *statements) analyze(sql string) (*Statement, error) {
	a, err := s.analysis(sql)
	if err != nil {
		return nil, err
	}
	return a.one, nil
}

// analysis is the analysis of sql: cached, else made (by the fast path,
// through its shape, or in full) and cached.
func (s *statements) analysis(sql string) (*analysis, error) {
	if s.texts != nil {
		if a := s.texts.get(sql); a != nil {
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
			d := s.pl.routeKey(st.SetValue, s.sc.hintType)
			st.plan = &plan{static: &d}
			return a, nil
		}
		st.plan = &plan{static: anyDest(kindReason(st.Kind))}
		return s.store(sql, a), nil
	}
	if s.shapes != nil && len(sql) <= s.maxCache {
		if a := s.analyzeLiterals(sql); a != nil {
			return s.store(sql, a), nil
		}
	}
	a := s.analyzeText(sql)
	return s.store(sql, a), nil
}

// store caches a as sql's analysis, unless sql is too long, and returns
// the cached one (another goroutine's, if it stored first).
func (s *statements) store(sql string, a *analysis) *analysis {
	if s.texts == nil || len(sql) > s.maxCache {
		return a
	}
	return s.texts.put(sql, a)
}

// analyzeText parses sql once and analyzes each of its statements.
func (s *statements) analyzeText(sql string) *analysis {
	a, _, _ := s.analyzeTextLit(sql, nil)
	return a
}

// analyzeTextLit is analyzeText, for a normalized text when lc is set. It
// also returns, for a text of several statements, each one's span, and
// the parse error: for a normalized text the analysis is then nil.
func (s *statements) analyzeTextLit(sql string, lc *litCtx) (*analysis, [][2]int, error) {
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
		a.list = append(a.list, s.analyzeStmtLit(text, raw.Stmt, lc))
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
