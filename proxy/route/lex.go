package route

import "strconv"

// A small SQL lexer: enough of Postgres's scanner (scan.l) to find comments
// (where hints live), the words of a statement and its semicolons without
// ever mistaking the inside of a string, quoted identifier or dollar-quoted
// body for either. It assumes standard_conforming_strings = on (the default
// since PostgreSQL 9.1): in '...' a backslash is an ordinary character; in
// E'...' it escapes the next one.

type tokKind uint8

const (
	tokWord   tokKind = iota // identifier or keyword (unquoted)
	tokQIdent                // "quoted identifier" (text holds the unescaped name)
	tokString                // any string constant (text holds the unescaped value for plain '...')
	tokNumber                // numeric constant
	tokParam                 // $n
	tokPunct                 // operator or punctuation, one token per run
	tokSemi                  // ;
)

type token struct {
	kind tokKind
	text string // for tokString of a plain '...' constant: its value; otherwise the source text
	// plain is true for a tokString that is a plain '...' constant whose
	// value text holds.
	plain bool
	// start and end delimit the token in the text (end exclusive).
	start, end int
}

// comment is a /* ... */ block comment: its body without the delimiters.
type comment struct {
	body string
}

// lexResult is what one pass over a query text finds.
type lexResult struct {
	toks     []token
	comments []comment
	// bad is set when the text ends inside a string, identifier or comment
	// (the parser will report the error).
	bad bool
	// maxParam is the highest $n.
	maxParam int
}

// lex scans sql. With wantTokens false it only collects comments. It stops
// collecting tokens after maxToks (the fast path never needs more).
func lex(sql string, wantTokens bool, maxToks int) lexResult {
	var r lexResult
	sc := scanner{sql: sql, keepComments: true}
	for {
		t, ok := sc.next()
		if !ok {
			break
		}
		if t.kind == tokParam {
			if n, err := strconv.Atoi(t.text[1:]); err == nil && n > r.maxParam {
				r.maxParam = n
			}
		}
		if wantTokens && len(r.toks) < maxToks {
			r.toks = append(r.toks, t)
		}
	}
	r.comments, r.bad = sc.comments, sc.bad
	return r
}

// scanner reads a query text one token at a time. Whitespace and comments
// separate tokens; block comments are kept when keepComments is set.
type scanner struct {
	sql          string
	i            int
	keepComments bool
	comments     []comment
	// bad is set when the text ends inside a string, identifier or comment
	// (the parser will report the error); next then returns false.
	bad bool
}

// next returns the next token, or false at the end of the text (or of the
// scannable part: see bad). Blanks and comments are skipped here, words,
// numbers and operators read here (the common tokens); quoted tokens,
// block comments and '$' have their own readers.
func (s *scanner) next() (token, bool) {
	sql := s.sql
	i, n := s.i, len(sql)
	tok := func(t token, next int) (token, bool) {
		t.start, t.end = i, next
		s.i = next
		return t, true
	}
	for i < n {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < n && sql[i+1] == '-':
			for i < n && sql[i] != '\n' && sql[i] != '\r' {
				i++
			}
		case c == '/' && i+1 < n && sql[i+1] == '*':
			next, ok := s.blockComment(i)
			if !ok {
				return s.fail()
			}
			i = next
		case c == '\'' || c == '"' || i+1 < n && (sql[i+1] == '\'' || sql[i+1] == '&') && quoteStart(sql, i):
			t, next, ok := scanQuotedToken(sql, i)
			if !ok {
				return s.fail()
			}
			return tok(t, next)
		case c == '$':
			t, next, ok := scanDollar(sql, i)
			if !ok {
				return s.fail()
			}
			return tok(t, next)
		case isIdentStart(c):
			j := i + 1
			for j < n && isIdentCont(sql[j]) {
				j++
			}
			return tok(token{kind: tokWord, text: sql[i:j]}, j)
		case isDigit(c) || (c == '.' && i+1 < n && isDigit(sql[i+1])):
			j := i + 1
			for j < n && (isDigit(sql[j]) || sql[j] == '.' || sql[j] == '_' || isLetter(sql[j]) ||
				((sql[j] == '+' || sql[j] == '-') && (sql[j-1] == 'e' || sql[j-1] == 'E'))) {
				j++
			}
			return tok(token{kind: tokNumber, text: sql[i:j]}, j)
		case c == ';':
			return tok(token{kind: tokSemi, text: ";"}, i+1)
		default:
			// Operators: a run of operator characters is one token, but a
			// comment start inside it ends the run (as in scan.l).
			j := i + 1
			if isOpChar(c) {
				for j < n && isOpChar(sql[j]) && !(sql[j] == '-' && j+1 < n && sql[j+1] == '-') &&
					!(sql[j] == '/' && j+1 < n && sql[j+1] == '*') {
					j++
				}
			}
			return tok(token{kind: tokPunct, text: sql[i:j]}, j)
		}
	}
	s.i = n
	return token{}, false
}

// fail marks the rest of the text unscannable (it ends inside a token or
// a comment).
func (s *scanner) fail() (token, bool) {
	s.bad = true
	s.i = len(s.sql)
	return token{}, false
}

// blockComment skips the block comment at sql[i] ("/*"; they nest in
// Postgres), keeping its body when keepComments is set. It returns the
// index after it, false when the text ends inside it.
func (s *scanner) blockComment(i int) (int, bool) {
	sql, n := s.sql, len(s.sql)
	start := i + 2
	depth := 1
	i += 2
	for i < n && depth > 0 {
		switch {
		case sql[i] == '/' && i+1 < n && sql[i+1] == '*':
			depth++
			i += 2
		case sql[i] == '*' && i+1 < n && sql[i+1] == '/':
			depth--
			i += 2
		default:
			i++
		}
	}
	if depth > 0 {
		return n, false
	}
	if s.keepComments {
		s.comments = append(s.comments, comment{body: sql[start : i-2]})
	}
	return i, true
}

// quoteStart reports whether a quoted token starts at sql[i]: '...',
// "...", or a prefixed string E'...', B'...', X'...', N'...', U&'...' or
// identifier U&"..." whose prefix is not the end of an identifier.
func quoteStart(sql string, i int) bool {
	n := len(sql)
	switch sql[i] {
	case '\'', '"':
		return true
	case 'e', 'E', 'b', 'B', 'x', 'X', 'n', 'N':
		return i+1 < n && sql[i+1] == '\'' && !identBefore(sql, i)
	case 'u', 'U':
		return i+2 < n && sql[i+1] == '&' && (sql[i+2] == '\'' || sql[i+2] == '"') && !identBefore(sql, i)
	}
	return false
}

// scanQuotedToken reads the quoted token at sql[i] (quoteStart is true).
// It returns the token without its position, the index after it, and
// false when the text ends inside it.
func scanQuotedToken(sql string, i int) (token, int, bool) {
	switch c := sql[i]; c {
	case '\'':
		v, next, ok := scanQuoted(sql, i, '\'', false)
		return token{kind: tokString, text: v, plain: true}, next, ok
	case '"':
		v, next, ok := scanQuoted(sql, i, '"', false)
		return token{kind: tokQIdent, text: v}, next, ok
	case 'e', 'E':
		_, next, ok := scanQuoted(sql, i+1, '\'', true)
		return token{kind: tokString, text: sql[i:next]}, next, ok
	case 'u', 'U':
		q := sql[i+2]
		_, next, ok := scanQuoted(sql, i+2, q, false)
		kind := tokString
		if q == '"' {
			kind = tokQIdent
		}
		return token{kind: kind, text: sql[i:next]}, next, ok
	}
	// B'...', X'...', N'...'
	_, next, ok := scanQuoted(sql, i+1, '\'', false)
	return token{kind: tokString, text: sql[i:next]}, next, ok
}

// scanDollar reads a token starting with '$': a parameter $n, a
// dollar-quoted string $tag$ ... $tag$ (the tag an identifier without '$',
// or empty), or else the operator character '$'.
func scanDollar(sql string, i int) (token, int, bool) {
	n := len(sql)
	if i+1 < n && isDigit(sql[i+1]) {
		j := i + 1
		for j < n && isDigit(sql[j]) {
			j++
		}
		return token{kind: tokParam, text: sql[i:j]}, j, true
	}
	j := i + 1
	for j < n && isIdentCont(sql[j]) && sql[j] != '$' {
		j++
	}
	if j < n && sql[j] == '$' && (j == i+1 || isIdentStart(sql[i+1])) {
		delim := sql[i : j+1]
		end := indexFrom(sql, delim, j+1)
		if end < 0 {
			return token{}, n, false
		}
		return token{kind: tokString, text: sql[i : end+len(delim)]}, end + len(delim), true
	}
	return token{kind: tokPunct, text: "$"}, i + 1, true
}

// scanQuoted scans a quoted token starting at sql[i] == q, where a doubled
// q stands for one q and, with backslash, '\' escapes the next byte. It
// returns the unescaped value, the index after the closing quote and
// whether the token was closed. Adjacent string constants separated by a
// newline continue one another in SQL; this lexer treats them as separate
// tokens, which only matters to the fast path (it then declines).
func scanQuoted(sql string, i int, q byte, backslash bool) (string, int, bool) {
	n := len(sql)
	j := i + 1
	var buf []byte
	start := j
	for j < n {
		c := sql[j]
		if backslash && c == '\\' {
			if j+1 >= n {
				return "", n, false
			}
			buf = append(buf, sql[start:j]...)
			buf = append(buf, sql[j+1])
			j += 2
			start = j
			continue
		}
		if c == q {
			if j+1 < n && sql[j+1] == q {
				buf = append(buf, sql[start:j+1]...)
				j += 2
				start = j
				continue
			}
			if buf == nil {
				return sql[i+1 : j], j + 1, true
			}
			buf = append(buf, sql[start:j]...)
			return string(buf), j + 1, true
		}
		j++
	}
	return "", n, false
}

func identBefore(sql string, i int) bool { return i > 0 && isIdentCont(sql[i-1]) }

func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// isIdentStart matches scan.l's ident_start: letters, '_' and any byte of
// a multi-byte UTF-8 character.
func isIdentStart(c byte) bool { return isLetter(c) || c == '_' || c >= 0x80 }

func isIdentCont(c byte) bool { return isIdentStart(c) || isDigit(c) || c == '$' }

func isOpChar(c byte) bool {
	switch c {
	case '~', '!', '@', '#', '^', '&', '|', '`', '?', '+', '-', '*', '/', '%', '<', '>', '=':
		return true
	}
	return false
}

func indexFrom(s, sub string, from int) int {
	for i := from; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// fold lowercases ASCII letters, as Postgres folds unquoted identifiers.
func fold(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// isWord reports whether t is the unquoted keyword kw (kw in lowercase).
func (t token) isWord(kw string) bool {
	if t.kind != tokWord || len(t.text) != len(kw) {
		return false
	}
	for i := 0; i < len(kw); i++ {
		c := t.text[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != kw[i] {
			return false
		}
	}
	return true
}

// fastPath recognises, without the parser, the statements that a session
// sends most and that never carry a key in their SQL: BEGIN, COMMIT,
// ROLLBACK and their spellings, and SET LOCAL pgshard.key = '...' (whose
// text differs per transaction and so must not fill the statement cache).
// It returns nil for anything else, including any variant with options
// (BEGIN ISOLATION LEVEL ...), which the parser then handles.
func fastPath(sql string) *Statement {
	// At most 7 tokens: stop scanning at the 8th (a long text is never
	// one of these statements).
	var buf [8]token
	toks := buf[:0]
	sc := scanner{sql: sql, keepComments: true}
	for {
		t, ok := sc.next()
		if !ok {
			break
		}
		if len(toks) == len(buf)-1 {
			return nil
		}
		toks = append(toks, t)
	}
	if sc.bad || len(toks) == 0 {
		return nil
	}
	if toks[len(toks)-1].kind == tokSemi {
		toks = toks[:len(toks)-1]
	}
	if len(toks) == 0 {
		return nil
	}
	for _, t := range toks {
		if t.kind == tokSemi {
			return nil
		}
	}
	optWork := func(rest []token) bool {
		return len(rest) == 0 || len(rest) == 1 && (rest[0].isWord("work") || rest[0].isWord("transaction"))
	}
	st := &Statement{SQL: sql, ReadOnly: true}
	switch {
	case toks[0].isWord("begin") && optWork(toks[1:]):
		st.Kind = KindBegin
	case toks[0].isWord("start") && len(toks) == 2 && toks[1].isWord("transaction"):
		st.Kind = KindBegin
	case (toks[0].isWord("commit") || toks[0].isWord("end")) && optWork(toks[1:]):
		st.Kind = KindCommit
	case (toks[0].isWord("rollback") || toks[0].isWord("abort")) && optWork(toks[1:]):
		st.Kind = KindRollback
	case len(toks) == 7 && toks[0].isWord("set") && toks[1].isWord("local") && toks[2].isWord("pgshard") &&
		toks[3].kind == tokPunct && toks[3].text == "." && toks[4].isWord("key") &&
		(toks[5].kind == tokPunct && toks[5].text == "=" || toks[5].isWord("to")):
		v := toks[6]
		switch {
		case v.kind == tokString && v.plain:
			st.SetValue = v.text
		case v.kind == tokNumber && isDecimal(v.text):
			st.SetValue = v.text
		case v.kind == tokWord && !v.isWord("default"):
			st.SetValue = fold(v.text)
		default:
			return nil
		}
		st.Kind = KindSetLocal
		st.SetName = hintSetting
	default:
		return nil
	}
	// A hint comment on a transaction-control statement is honoured by
	// Route like any other (the engine may bind the transaction early).
	if len(sc.comments) > 0 {
		h, err := parseHints(sc.comments)
		if err != nil || h.present() {
			return nil // let the full path build the plan and the refusal
		}
	}
	return st
}

func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}
