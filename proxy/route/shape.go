package route

import (
	"fmt"
	"reflect"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// shape is the cached analysis of a normalized text, shared by every text
// that normalizes to it.
type shape struct {
	// a is the analysis, its statements' placeholders literal slots; nil
	// when texts of this shape are analyzed in full (why says why).
	a   *analysis
	why string
	// spans are, for a text of several statements, each statement's
	// [start, end) in the normalized text (before trimming blanks).
	spans [][2]int
}

// litCtx tells the analysis of a normalized text which $n are literal
// slots: $slotBase+1 ... $slotBase+n, slot k of class classes[k-1]; the
// $n up to base are the text's parameters.
type litCtx struct {
	base, n int
	classes string
	// taint, when set, says why the analysis depends on a literal's value
	// in a way the shared analysis cannot reproduce: the shape is not used.
	taint string
}

// slot returns the literal slot (1-based) that $num is, 0 if none.
func (c *litCtx) slot(num int) int {
	if c == nil || num <= slotBase || num > slotBase+c.n {
		return 0
	}
	return num - slotBase
}

func (c *litCtx) class(k int) litClass { return litClass(c.classes[k-1]) }

func (c *litCtx) taintf(format string, args ...any) {
	if c != nil && c.taint == "" {
		c.taint = fmt.Sprintf(format, args...)
	}
}

// has reports whether a literal slot occurs in n.
func (c *litCtx) has(n *pg.Node) bool {
	if c == nil || n == nil {
		return false
	}
	found := false
	inspect(n, func(x *pg.Node) bool {
		if pr := x.GetParamRef(); pr != nil && c.slot(int(pr.Number)) > 0 {
			found = true
		}
		return !found
	})
	return found
}

// inString reports whether a placeholder of a literal ($n) was rendered
// into s.
func (c *litCtx) inString(s string) bool {
	for i := strings.IndexByte(s, '$'); i >= 0; {
		j := i + 1
		num := 0
		for j < len(s) && isDigit(s[j]) && num <= slotBase+c.n {
			num = num*10 + int(s[j]-'0')
			j++
		}
		if j > i+1 && c.slot(num) > 0 {
			return true
		}
		k := strings.IndexByte(s[j:], '$')
		if k < 0 {
			break
		}
		i = j + k
	}
	return false
}

var (
	statementType = reflect.TypeOf(Statement{})
	mergePlanType = reflect.TypeOf(mergePlan{})
)

// rendered reports whether a placeholder was rendered into any string
// reachable from v: a reason, note, refusal or SQL that names a literal
// would be shared by texts with other literals. Walking every reachable
// string (rather than a list of fields) keeps a field added later from
// escaping the check. The statement's own SQL (replaced per text) and a
// merge plan that Route never uses with literals (litFanout) are skipped.
func (c *litCtx) rendered(v reflect.Value, seen map[uintptr]bool) bool {
	switch v.Kind() {
	case reflect.String:
		return c.inString(v.String())
	case reflect.Pointer:
		if v.IsNil() || seen[v.Pointer()] {
			return false
		}
		seen[v.Pointer()] = true
		return c.rendered(v.Elem(), seen)
	case reflect.Interface:
		return !v.IsNil() && c.rendered(v.Elem(), seen)
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			if c.rendered(v.Index(i), seen) {
				return true
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if c.rendered(it.Key(), seen) || c.rendered(it.Value(), seen) {
				return true
			}
		}
	case reflect.Struct:
		t := v.Type()
		if t == mergePlanType && v.FieldByName("litFanout").Bool() {
			return false
		}
		for i := 0; i < v.NumField(); i++ {
			if t == statementType && t.Field(i).Name == "SQL" {
				continue
			}
			if c.rendered(v.Field(i), seen) {
				return true
			}
		}
	}
	return false
}

// literalStatement says whether a statement node may hold literal slots:
// the queries whose analysis reads constants only as key values (and
// where it checks that it does).
func literalStatement(n *pg.Node) bool {
	switch n.GetNode().(type) {
	case *pg.Node_SelectStmt, *pg.Node_InsertStmt, *pg.Node_UpdateStmt, *pg.Node_DeleteStmt, *pg.Node_CallStmt:
		return true
	}
	return false
}

// analyzeShape parses and analyzes a normalized text once.
func (s *statements) analyzeShape(n *normalizer) *shape {
	norm := string(n.key[:n.normLen])
	lc := &litCtx{base: n.base, n: len(n.lits), classes: string(n.classes)}
	a, spans, perr := s.analyzeTextLit(norm, lc)
	switch {
	case perr != nil:
		// The original text may parse (or fail with another message):
		// let it speak for itself.
		return &shape{why: "the normalized text does not parse: " + perr.Error()}
	case lc.taint != "":
		return &shape{why: lc.taint}
	}
	seen := map[uintptr]bool{}
	for _, st := range a.list {
		if lc.rendered(reflect.ValueOf(st), seen) {
			return &shape{why: "a literal's text appears in the analysis of " + clip(st.SQL, 60)}
		}
	}
	if lc.rendered(reflect.ValueOf(a.one), seen) {
		return &shape{why: "a literal's text appears in the analysis"}
	}
	return &shape{a: a, spans: spans}
}

// litBinding is what a text's statement adds to the shared analysis: the
// text's literals and, for a statement without $n parameters, its
// decision (it depends on nothing else).
type litBinding struct {
	lits    []literal
	dest    Dest
	decided bool
}

// litText holds, in one allocation, the analysis of a one-statement text
// with literals.
type litText struct {
	a    analysis
	list [1]*Statement
	st   Statement
	b    litBinding
	lits [4]literal
}

// bind makes the analysis of the text sql (normalized by n) from the
// shape's: statements that carry the text's SQL and literals, those
// without $n decided by e. It returns nil when the text must be analyzed
// in full after all: a statement's fan-out plan needs per-shard SQL
// rewritten from the text's own tree.
func (sh *shape) bind(sql string, n *normalizer, e evaluator) *analysis {
	if len(sh.a.list) == 1 && sh.a.one == sh.a.list[0] {
		x := &litText{st: *sh.a.one}
		x.st.SQL = sql
		if !x.b.attach(&x.st, append(x.lits[:0], n.lits...), e) {
			return nil
		}
		x.list[0] = &x.st
		x.a = analysis{list: x.list[:], one: &x.st}
		return &x.a
	}
	lits := append([]literal(nil), n.lits...)
	sts := make([]Statement, len(sh.a.list))
	bs := make([]litBinding, len(sh.a.list))
	a := &analysis{list: make([]*Statement, len(sh.a.list))}
	for i, shared := range sh.a.list {
		start, end := n.origOffset(sh.spans[i][0]), n.origOffset(sh.spans[i][1])
		if start < 0 || end < start || end > len(sql) {
			return nil
		}
		sts[i] = *shared
		sts[i].SQL = strings.TrimSpace(sql[start:end])
		if !bs[i].attach(&sts[i], lits, e) {
			return nil
		}
		a.list[i] = &sts[i]
	}
	one := *sh.a.one
	one.SQL = sql
	a.one = &one
	return a
}

// attach binds st to the text's literals, and decides st now with e when
// it has no $n parameters (nothing else can change its decision).
func (b *litBinding) attach(st *Statement, lits []literal, e evaluator) bool {
	b.lits = lits
	st.lit = b
	p := st.plan
	if st.NumParams > 0 {
		// Decided per Bind; a fan-out would need the text's own tree.
		return p == nil || p.merge == nil || !p.merge.litFanout
	}
	e.in = &input{lits: b.lits}
	d := e.route(st)
	if d.Kind == DestAll && p != nil && p.merge != nil && p.merge.litFanout && d.Merge != nil {
		return false
	}
	b.dest, b.decided = d, true
	return true
}

// analyzeLiterals analyzes sql through its shape; nil when the text has
// no literal to normalize or its shape is analyzed in full.
func (s *statements) analyzeLiterals(sql string) *analysis {
	n := normPool.Get().(*normalizer)
	defer normPool.Put(n)
	if !n.run(sql) {
		return nil
	}
	sh := s.shapes.getBytes(n.key)
	if sh == nil {
		sh = s.shapes.put(string(n.key), s.analyzeShape(n))
	}
	if sh.a == nil {
		return nil
	}
	return sh.bind(sql, n, evaluator{pl: s.pl, sc: s.sc})
}

// litValue is the key value a literal slot source has: the conversions
// srcOf applies to a constant, applied at Route.
func litValue(s *source, lits []literal) kval {
	if s.lit > len(lits) {
		return none("the literal of " + s.col + " is missing")
	}
	l := &lits[s.lit-1]
	v := l.v
	if l.class == litString && s.cast == vtNone && s.key != KeyText {
		v = parseInt(v.s, vtInt8) // an untyped literal is read as the key's type
	} else {
		if s.cast != vtNone {
			v = castTo(v, s.cast)
		}
		for _, c := range s.chain {
			v = castTo(v, c)
		}
	}
	return toKey(v, s.key)
}

// appendConstExpr renders a constant as exprText does: a string quoted
// (and clipped), a number as the parser read it.
func appendConstExpr(b []byte, v kval) []byte {
	if v.kind == kNum {
		return append(b, v.s...)
	}
	return appendKey(b, v)
}
