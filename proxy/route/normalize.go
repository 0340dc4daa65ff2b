package route

import (
	"strconv"
	"sync"
	"unicode/utf8"
)

// Literal normalization: texts that differ only in their constants share
// one analysis.
//
//	text ─► normalizer (one pass of the scanner) ─► normalized text + literals
//	         "… WHERE aid = 48213"                  "… WHERE aid = $1048577" + [48213 (int)]
//	normalized text + literal classes ─► shape cache ─hit─► shared analysis
//	                                        │miss
//	                                        └─ parse + analyze once; placeholders
//	                                           are literal slots, never Bind params
//	shared analysis + literals ─► per-text Statement (original SQL, literals,
//	                              decision) ─► per-text cache
//
// A placeholder stands for a literal constant, typed exactly as the
// constant is (a quoted string is unknown-typed, an integer is int4/int8,
// a decimal or out-of-range integer is numeric): at Route, the literal's
// value goes through the same conversions as the constant would have at
// analysis. Whatever cannot be proven to analyze the same with a
// placeholder keeps its literal in the normalized text (the text then
// shares its analysis only with texts that have that literal too), and a
// text whose analysis would depend on a literal's value in any other way
// falls back to the full parse of its own text.

// litClass is the lexical class of a literal replaced by a placeholder.
// It is part of the shape's key: texts share an analysis only when their
// literals are of the same classes.
type litClass byte

const (
	litString litClass = 's' // '...': unknown-typed; value unescaped
	litInt    litClass = 'i' // an integer constant ≥ 0 that fits int64
	litNum    litClass = 'n' // any other number: negative, decimal, beyond int64
)

// literal is one literal constant of a text.
type literal struct {
	// v is the constant's value as constVal reads it from the parse tree:
	// kText for a string, kInt for an integer that fits int64, kNum (the
	// source text) for any other number.
	v     kval
	class litClass
}

// normalizer finds the literal constants of a text and builds its
// normalized text, in one pass of the scanner. It is reused (normPool).
type normalizer struct {
	lits    []literal
	spans   []litSpan
	classes []byte
	frames  []frame
	// key is the normalized text, a NUL byte, and the literals' classes.
	key     []byte
	normLen int // the normalized text is key[:normLen]
	base    int // the highest $n of the text (its real parameters)
}

// litSpan is where a literal is in the text and its placeholder in the
// normalized text (with the blanks added around it).
type litSpan struct{ start, end, nstart, nend int }

// frame is one level of parentheses.
type frame struct {
	verbatim bool // literals inside are kept (type modifiers, DISTINCT ON, EXTRACT(...))
	orderBy  bool // the level is in ORDER BY / GROUP BY, whose constants are positions
	// neg: the '(' follows a '-': -(5) is the constant -5, so the number
	// it starts with stays.
	neg bool
}

type litCandidate struct {
	start, end int
	lit        literal
	neg        bool // -N folded into one constant
}

const (
	maxParenDepth = 64 // deeper texts are analyzed in full
	// slotBase numbers the placeholders: literal k is $slotBase+k, above
	// any real parameter (a text with a higher $n is analyzed in full), so
	// that a placeholder rendered into a string is recognisable as one
	// (a fixed message such as "e.g. id = $1" is not).
	slotBase = 1 << 20
)

var normPool = sync.Pool{New: func() any { return new(normalizer) }}

// typeState follows a type name, whose parenthesised modifiers are not
// values: x::numeric(10, 2), CAST(x AS varchar(10)), AS t(a int),
// DISTINCT ON (1).
type typeState uint8

const (
	tsNone  typeState = iota
	tsName            // a type name may follow (after :: or AS)
	tsIn              // inside a type name: ( opens its modifiers
	tsParen           // a ( right here holds no values (DISTINCT ON)
)

// run normalizes sql. It returns false when the text has no literal to
// replace or must be analyzed in full (it ends inside a token, has
// unbalanced parentheses, a string continued on the next line, a U&
// string or identifier, a string right after ')' — a typed literal with
// type modifiers —, or a huge $n).
func (n *normalizer) run(sql string) bool {
	n.reset()
	sc := scanner{sql: sql}
	c := normCursor{stmtStart: true}
	for {
		t, ok := sc.next()
		if !ok {
			break
		}
		// A literal is a placeholder only if what follows it is not an
		// indirection ('x'.f, '{1}'[1]: a parameter could take one, a
		// constant cannot) nor, for -N, an operator binding tighter than
		// unary minus (-5::text is -(5::text)).
		if c.hasCand {
			c.hasCand = false
			if c.cand.followedBy(t) {
				n.add(c.cand)
			}
		}
		if !n.step(sql, &c, t) {
			return false
		}
	}
	if sc.bad || len(n.frames) != 1 {
		return false
	}
	if c.hasCand {
		n.add(c.cand)
	}
	if len(n.lits) == 0 {
		return false
	}
	n.assemble(sql)
	return true
}

// normCursor is where run is in the text: the two previous tokens of the
// statement, the state of a type name, and the literal that becomes a
// placeholder unless the next token says otherwise.
type normCursor struct {
	p1, p2       token // the two previous tokens of the statement
	k1, k2       kw    // their keywords
	have1, have2 bool
	// stmtStart: the next token starts a statement; stmtOK: the
	// statement's literals may become placeholders.
	stmtStart, stmtOK bool
	ts                typeState
	cand              litCandidate
	hasCand           bool
}

func (n *normalizer) reset() {
	n.lits, n.spans, n.classes = n.lits[:0], n.spans[:0], n.classes[:0]
	n.frames = append(n.frames[:0], frame{})
	n.base = 0
}

// step takes token t: it decides whether t is a literal candidate and
// follows statements, parentheses and clauses. It returns false when the
// text must be analyzed in full.
func (n *normalizer) step(sql string, c *normCursor, t token) bool {
	k := kwNone
	if t.kind == tokWord && !(c.have1 && c.p1.kind == tokPunct && c.p1.text == ".") {
		k = keyword(t.text) // after '.', a word is a name: i.limit
	}
	if c.stmtStart && t.kind != tokSemi {
		c.stmtStart = false
		c.stmtOK = kwFlags[k]&fStmt != 0 || t.kind == tokPunct && t.text == "("
	}
	top := &n.frames[len(n.frames)-1]
	kept := !c.stmtOK || top.verbatim || top.orderBy
	switch t.kind {
	case tokSemi:
		if len(n.frames) != 1 {
			return false
		}
		n.frames[0] = frame{}
		c.stmtStart, c.stmtOK, c.ts = true, false, tsNone
		c.have1, c.have2 = false, false
		return true
	case tokParam:
		if !n.param(t) {
			return false
		}
	case tokQIdent:
		if c := sql[t.start]; c == 'u' || c == 'U' {
			return false // U&"..." may be followed by UESCAPE '...'
		}
	case tokString:
		if !c.stringLiteral(sql, t, kept) {
			return false
		}
	case tokNumber:
		if !kept {
			c.cand, c.hasCand = numberCandidate(sql, t, c.p1, c.p2, c.k1, c.k2, c.have1, c.have2, top.neg)
		}
	case tokPunct:
		if !n.paren(c, t, top) {
			return false
		}
	case tokWord:
		if top.orderBy && kwFlags[k]&fClauseEnd != 0 {
			top.orderBy = false
		}
		if k == kwBy && c.have1 && (c.k1 == kwOrder || c.k1 == kwGroup) {
			top.orderBy = true
		}
	}
	c.ts = nextTypeState(c.ts, t, k, c.p1, c.k1, c.have1)
	c.p2, c.k2, c.have2 = c.p1, c.k1, c.have1
	c.p1, c.k1, c.have1 = t, k, true
	return true
}

// param records a $n; false for a $n above the placeholders' numbers.
func (n *normalizer) param(t token) bool {
	if len(t.text) > 8 {
		return false
	}
	v, _ := strconv.Atoi(t.text[1:])
	if v > slotBase {
		return false
	}
	n.base = max(n.base, v)
	return true
}

// stringLiteral decides whether the string constant t is a literal
// candidate (kept: literals here stay). It returns false when the text
// must be analyzed in full.
func (c *normCursor) stringLiteral(sql string, t token, kept bool) bool {
	if ch := sql[t.start]; ch == 'u' || ch == 'U' {
		return false // U&'...' may be followed by UESCAPE '...'
	}
	if c.have1 && (c.p1.kind == tokString || c.p1.kind == tokPunct && c.p1.text == ")") {
		// Two strings in a row are one continued constant (or an error); a
		// string after ')' is a typed literal whose type has modifiers,
		// numeric(10,2) '5'.
		return false
	}
	// The scanner rejects a string that is not valid UTF-8: it stays, so
	// that the text fails as it would.
	if t.plain && !kept && stringAfter(c.p1, c.k1, c.have1) && utf8.ValidString(t.text) {
		c.cand = litCandidate{start: t.start, end: t.end, lit: literal{v: kval{kind: kText, s: t.text}, class: litString}}
		c.hasCand = true
	}
	return true
}

// paren follows parentheses: a '(' opens a frame (verbatim for type
// modifiers, DISTINCT ON, ORDER BY positions and EXTRACT), ')' closes one.
// It returns false when they nest too deep or do not balance.
func (n *normalizer) paren(c *normCursor, t token, top *frame) bool {
	switch t.text {
	case "(":
		if len(n.frames) == maxParenDepth {
			return false
		}
		n.frames = append(n.frames, frame{
			// pg_query takes EXTRACT($1 FROM x) but not EXTRACT(5 FROM x).
			verbatim: top.verbatim || top.orderBy || c.ts == tsIn || c.ts == tsParen || c.have1 && c.k1 == kwExtract,
			neg:      c.have1 && c.p1.kind == tokPunct && (c.p1.text[len(c.p1.text)-1] == '-' || c.p1.text == "(" && top.neg),
		})
	case ")":
		if len(n.frames) == 1 {
			return false
		}
		n.frames = n.frames[:len(n.frames)-1]
	}
	return true
}

func (n *normalizer) add(c litCandidate) {
	n.lits = append(n.lits, c.lit)
	n.spans = append(n.spans, litSpan{start: c.start, end: c.end})
	n.classes = append(n.classes, byte(c.lit.class))
}

func (c *litCandidate) followedBy(t token) bool {
	if t.kind != tokPunct {
		return true
	}
	switch t.text[0] {
	case '.', '[':
		return false
	case ':', '(':
		return !c.neg
	}
	return true
}

// nextTypeState is the type-name state after token t.
func nextTypeState(ts typeState, t token, k kw, p1 token, k1 kw, have1 bool) typeState {
	switch t.kind {
	case tokPunct:
		if t.text == ":" && have1 && p1.kind == tokPunct && p1.text == ":" && p1.end == t.start {
			return tsName // ::
		}
		if t.text == "." && ts == tsIn {
			return tsName // schema.type
		}
		return tsNone
	case tokWord:
		switch {
		case k == kwAs:
			return tsName
		case k == kwOn && have1 && k1 == kwDistinct:
			return tsParen
		case ts == tsName && k != kwMaterialized && k != kwNot:
			return tsIn // WITH x AS [NOT] MATERIALIZED (...) holds a query
		case ts == tsIn && kwFlags[k]&fTypeWord != 0:
			return tsIn // double precision, character varying, time with time zone
		}
		return tsNone
	case tokQIdent:
		if ts == tsName {
			return tsIn
		}
	}
	return tsNone
}

// stringAfter: a string constant after p1 is a value — after an operator
// or punctuation, or after a keyword that an expression follows. After
// another word it may be a typed literal (date '2024-01-01', int8 '5'),
// whose string must stay.
func stringAfter(p1 token, k1 kw, have1 bool) bool {
	if !have1 {
		return false
	}
	switch p1.kind {
	case tokPunct:
		switch p1.text {
		case ")", "]", ".", ":":
			return false
		}
		return true
	case tokWord:
		return kwFlags[k1]&fString != 0
	}
	return false
}

// numberCandidate: a number that is a value. -N right after an operator,
// '(' or ',' (or a reserved keyword an expression follows) is one
// constant: the grammar folds the minus into it, so -N is replaced as a
// whole; a number after any other '-' stays (the minus may be unary), as
// does the first number in -( ... ). After a word, only a reserved keyword
// an expression follows will do: after a type name, `date 1.5` is an
// error but `date $1` is a typed literal to pg_query. Only plain decimal
// forms are replaced: 1.5e3, 0x1F, 1_000 stay.
func numberCandidate(sql string, t token, p1, p2 token, k1, k2 kw, have1, have2, negFrame bool) (litCandidate, bool) {
	isInt, ok := plainNumber(t.text)
	if !ok || !have1 || t.end < len(sql) && isIdentCont(sql[t.end]) {
		// 0쫏: a number glued to an identifier is the scanner's "trailing
		// junk" error, which must stay one.
		return litCandidate{}, false
	}
	neg := false
	switch p1.kind {
	case tokPunct:
		switch {
		case p1.text == "-" && p1.end == t.start:
			if !unaryAfter(p2, k2, have2) || negFrame && p2.kind == tokPunct && p2.text == "(" {
				return litCandidate{}, false
			}
			neg = true
		case p1.text[len(p1.text)-1] == '-':
			return litCandidate{}, false
		case p1.text == ")" || p1.text == "]" || p1.text == ".":
			return litCandidate{}, false
		case p1.text == "(" && negFrame:
			return litCandidate{}, false
		}
	case tokWord:
		if kwFlags[k1]&fNumber == 0 {
			return litCandidate{}, false
		}
	default:
		return litCandidate{}, false
	}
	start := t.start
	if neg {
		start = p1.start
	}
	src := sql[start:t.end]
	lit := literal{v: kval{kind: kNum, s: src}, class: litNum}
	if isInt {
		if i, err := strconv.ParseInt(src, 10, 64); err == nil {
			lit.v = kval{kind: kInt, i: i}
			if i >= 0 {
				lit.class = litInt
			}
		}
	}
	return litCandidate{start: start, end: t.end, lit: lit, neg: neg}, true
}

// unaryAfter: a '-' after p2 is a unary minus that the grammar folds into
// the number after it (and p2 is not itself a minus: - -5 folds twice).
func unaryAfter(p2 token, k2 kw, have2 bool) bool {
	if !have2 {
		return false
	}
	switch p2.kind {
	case tokPunct:
		if p2.text[len(p2.text)-1] == '-' {
			return false
		}
		switch p2.text {
		case ")", "]", ".", ":":
			return false
		}
		return true
	case tokWord:
		return kwFlags[k2]&fUnary != 0
	}
	return false
}

// plainNumber reports whether s is digits, optionally with one '.'
// (123, 1.5, .5, 5.), and whether it is an integer.
func plainNumber(s string) (isInt, ok bool) {
	dot, digits := false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case isDigit(c):
			digits++
		case c == '.' && !dot:
			dot = true
		default:
			return false, false
		}
	}
	return !dot, digits > 0
}

// assemble writes the normalized text and the key into n.key.
func (n *normalizer) assemble(sql string) {
	k := n.key[:0]
	prev := 0
	for i := range n.spans {
		sp := &n.spans[i]
		k = append(k, sql[prev:sp.start]...)
		sp.nstart = len(k)
		if sp.start > 0 && isIdentCont(sql[sp.start-1]) {
			k = append(k, ' ')
		}
		k = append(k, '$')
		k = strconv.AppendInt(k, int64(slotBase+i+1), 10)
		if sp.end < len(sql) && isIdentCont(sql[sp.end]) {
			k = append(k, ' ')
		}
		sp.nend = len(k)
		prev = sp.end
	}
	k = append(k, sql[prev:]...)
	n.normLen = len(k)
	k = append(k, 0)
	k = append(k, n.classes...)
	n.key = k
}

// origOffset maps an offset of the normalized text to the text's; -1 if
// it falls inside a placeholder.
func (n *normalizer) origOffset(x int) int {
	delta := 0
	for _, sp := range n.spans {
		if x <= sp.nstart {
			break
		}
		if x < sp.nend {
			return -1
		}
		delta = sp.end - sp.nend
	}
	return x + delta
}

// ---- keywords ----

type kw uint8

const (
	kwNone kw = iota
	kwSelect
	kwInsert
	kwUpdate
	kwDelete
	kwWith
	kwValues
	kwCall
	kwWhere
	kwAnd
	kwOr
	kwNot
	kwThen
	kwElse
	kwWhen
	kwCase
	kwLike
	kwIlike
	kwBetween
	kwEscape
	kwReturning
	kwHaving
	kwDistinct
	kwIn
	kwFrom
	kwTo
	kwZone
	kwOn
	kwLimit
	kwOffset
	kwFetch
	kwFor
	kwWindow
	kwUnion
	kwIntersect
	kwExcept
	kwOrder
	kwGroup
	kwBy
	kwAs
	kwMaterialized
	kwDouble
	kwPrecision
	kwCharacter
	kwVarying
	kwBit
	kwNational
	kwChar
	kwVarchar
	kwWithout
	kwTime
	kwTimestamp
	kwInterval
	kwYear
	kwMonth
	kwDay
	kwHour
	kwMinute
	kwSecond
	kwExtract
	kwCount
)

const (
	fStmt      = 1 << iota // a statement starting with it may have placeholders
	fString                // a string constant after it is a value
	fUnary                 // a '-' after it is unary (a reserved word no operand ends with)
	fClauseEnd             // ends an ORDER BY / GROUP BY list
	fTypeWord              // continues a type name
	fNumber                // a number after it is a value (a reserved word: never a type name)
)

// Reserved words an expression follows: a number (or -number) after them
// is a value.
const fExpr = fString | fUnary | fNumber

var kwFlags = [kwCount]uint8{
	kwSelect: fStmt | fExpr, kwInsert: fStmt, kwUpdate: fStmt, kwDelete: fStmt, kwWith: fStmt | fTypeWord,
	kwValues: fStmt, kwCall: fStmt,
	kwWhere: fExpr, kwAnd: fExpr, kwOr: fExpr, kwNot: fExpr,
	kwThen: fExpr, kwElse: fExpr, kwWhen: fExpr, kwCase: fExpr,
	kwLike: fString, kwIlike: fString, kwBetween: fString | fNumber, kwEscape: fString,
	kwReturning: fExpr | fClauseEnd, kwHaving: fExpr | fClauseEnd, kwDistinct: fExpr,
	kwIn: fExpr, kwFrom: fExpr, kwTo: fExpr | fTypeWord, kwZone: fString | fTypeWord,
	kwOn: fExpr, kwLimit: fUnary | fNumber | fClauseEnd, kwOffset: fUnary | fNumber | fClauseEnd, kwFetch: fClauseEnd,
	kwFor: fClauseEnd, kwWindow: fClauseEnd, kwUnion: fClauseEnd, kwIntersect: fClauseEnd, kwExcept: fClauseEnd,
	kwDouble: fTypeWord, kwPrecision: fTypeWord, kwCharacter: fTypeWord, kwVarying: fTypeWord, kwBit: fTypeWord,
	kwNational: fTypeWord, kwChar: fTypeWord, kwVarchar: fTypeWord, kwWithout: fTypeWord, kwTime: fTypeWord,
	kwTimestamp: fTypeWord, kwInterval: fTypeWord, kwYear: fTypeWord, kwMonth: fTypeWord, kwDay: fTypeWord,
	kwHour: fTypeWord, kwMinute: fTypeWord, kwSecond: fTypeWord,
}

// kwNames spells each keyword the normalizer cares about, in lowercase.
var kwNames = [kwCount]string{
	kwSelect:       "select",
	kwInsert:       "insert",
	kwUpdate:       "update",
	kwDelete:       "delete",
	kwWith:         "with",
	kwValues:       "values",
	kwCall:         "call",
	kwWhere:        "where",
	kwAnd:          "and",
	kwOr:           "or",
	kwNot:          "not",
	kwThen:         "then",
	kwElse:         "else",
	kwWhen:         "when",
	kwCase:         "case",
	kwLike:         "like",
	kwIlike:        "ilike",
	kwBetween:      "between",
	kwEscape:       "escape",
	kwReturning:    "returning",
	kwHaving:       "having",
	kwDistinct:     "distinct",
	kwIn:           "in",
	kwFrom:         "from",
	kwTo:           "to",
	kwZone:         "zone",
	kwOn:           "on",
	kwLimit:        "limit",
	kwOffset:       "offset",
	kwFetch:        "fetch",
	kwFor:          "for",
	kwWindow:       "window",
	kwUnion:        "union",
	kwIntersect:    "intersect",
	kwExcept:       "except",
	kwOrder:        "order",
	kwGroup:        "group",
	kwBy:           "by",
	kwAs:           "as",
	kwMaterialized: "materialized",
	kwDouble:       "double",
	kwPrecision:    "precision",
	kwCharacter:    "character",
	kwVarying:      "varying",
	kwBit:          "bit",
	kwNational:     "national",
	kwChar:         "char",
	kwVarchar:      "varchar",
	kwWithout:      "without",
	kwTime:         "time",
	kwTimestamp:    "timestamp",
	kwInterval:     "interval",
	kwYear:         "year",
	kwMonth:        "month",
	kwDay:          "day",
	kwHour:         "hour",
	kwMinute:       "minute",
	kwSecond:       "second",
	kwExtract:      "extract",
}

// kwByInitial lists the keywords by their first letter ('a' to 'z'):
// keyword compares a word with those few only.
var kwByInitial = func() (t [26][]kw) {
	for k := kwNone + 1; k < kwCount; k++ {
		i := kwNames[k][0] - 'a'
		t[i] = append(t[i], k)
	}
	return t
}()

// keyword returns the keyword s spells (in any case), kwNone if none the
// normalizer cares about.
func keyword(s string) kw {
	if len(s) < 2 || len(s) > 12 {
		return kwNone
	}
	var b [12]byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	if b[0] < 'a' || b[0] > 'z' {
		return kwNone
	}
	for _, k := range kwByInitial[b[0]-'a'] {
		if len(kwNames[k]) == len(s) && kwNames[k] == string(b[:len(s)]) {
			return k
		}
	}
	return kwNone
}
