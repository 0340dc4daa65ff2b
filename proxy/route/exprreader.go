package route

import (
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// What an expression says about sharding keys, read literally: the key
// source an expression is (a constant, a parameter, or a literal slot of
// a normalized text), the facts a condition states about keys (equal to a
// source, equal to another key, IN a subquery's keys), whether two
// expressions are the same, and the count a LIMIT or OFFSET is (the merge
// plan applies it). A normalized text's literal slots (lit) are
// placeholders: a decision that depends on a literal's value taints the
// text's shape (shape.go).

// exprReader reads expressions and conditions. lit says which $n are
// literal slots when analyzing a normalized text (nil otherwise);
// sublinks are the analyzed subqueries of the statement's expressions
// (x IN (SELECT key ...) links x to the subquery's key).
type exprReader struct {
	lit      *litCtx
	sublinks map[*pg.SubLink]*derived
}

// srcOf returns the key source an expression is — a constant or $n,
// through casts — or nil.
func (rd *exprReader) srcOf(e *pg.Node, k keyCol, table string, insert bool) *source {
	text := exprText(e)
	var casts []vtype // outermost first
	for e != nil && e.GetTypeCast() != nil {
		casts = append(casts, vtypeOfCast(e.GetTypeCast().TypeName))
		e = e.GetTypeCast().Arg
	}
	slices.Reverse(casts) // innermost first
	col := table + "." + k.col
	switch {
	case e.GetParamRef() != nil:
		num := int(e.GetParamRef().Number)
		s := &source{param: num, key: k.typ, insert: insert, col: col, expr: text, table: table}
		if len(casts) > 0 {
			s.cast, s.chain = casts[0], casts[1:]
		}
		if lit := rd.lit.slot(num); lit > 0 {
			// A literal constant: its value is the text's, converted at
			// Route as the constant branch below converts it; its
			// rendering ("'abc'::text") is the literal's + the casts'.
			s.param, s.lit = 0, lit
			s.expr = strings.TrimPrefix(text, "$"+itoa(int64(num)))
			return s
		}
		if s.param < 1 {
			return nil
		}
		return s
	case e.GetAConst() != nil:
		v, literal := constVal(e.GetAConst())
		switch {
		case literal && len(casts) == 0 && k.typ != KeyText:
			v = parseInt(v.s, vtInt8) // an untyped literal is read as the key's type
		default:
			for _, c := range casts {
				v = castTo(v, c)
			}
		}
		return &source{konst: toKey(v, k.typ), key: k.typ, insert: insert, col: col, expr: text, table: table}
	}
	return nil
}

// facts are what a boolean condition says about keys.

type refCons struct {
	ref *tref
	n   *cnode
}

func (f *facts) add(g facts) {
	f.cons = append(f.cons, g.cons...)
	f.eqs = append(f.eqs, g.eqs...)
	f.ins = append(f.ins, g.ins...)
}

// conj analyzes a condition that must hold for every row that matters.
func (rd *exprReader) conj(e *pg.Node, sc *scope) facts {
	var f facts
	switch x := e.GetNode().(type) {
	case *pg.Node_BoolExpr:
		switch x.BoolExpr.Boolop {
		case pg.BoolExprType_AND_EXPR:
			for _, arg := range x.BoolExpr.Args {
				f.add(rd.conj(arg, sc))
			}
		case pg.BoolExprType_OR_EXPR:
			f.cons = rd.disj(x.BoolExpr.Args, sc)
		}
	case *pg.Node_AExpr:
		ae := x.AExpr
		if !isEqOp(ae.Name) {
			break
		}
		switch ae.Kind {
		case pg.A_Expr_Kind_AEXPR_OP:
			l, r := ae.Lexpr.GetRowExpr(), ae.Rexpr.GetRowExpr()
			if l != nil && r != nil && len(l.Args) == len(r.Args) {
				for i := range l.Args {
					f.add(rd.eqPair(l.Args[i], r.Args[i], sc))
				}
				break
			}
			f.add(rd.eqPair(ae.Lexpr, ae.Rexpr, sc))
		case pg.A_Expr_Kind_AEXPR_IN:
			f.add(rd.inList(ae.Lexpr, ae.Rexpr.GetList().GetItems(), sc))
		case pg.A_Expr_Kind_AEXPR_OP_ANY:
			if arr := ae.Rexpr.GetAArrayExpr(); arr != nil {
				f.add(rd.inList(ae.Lexpr, arr.Elements, sc))
			}
		}
	case *pg.Node_SubLink:
		sl := x.SubLink
		if sl.SubLinkType != pg.SubLinkType_ANY_SUBLINK || (len(sl.OperName) > 0 && !isEqOp(sl.OperName)) {
			break
		}
		o, ok := sc.keyOrigin(sl.Testexpr)
		d := rd.sublinks[sl]
		if ok && d != nil && len(d.cols) > 0 && d.cols[0].origin != nil && d.cols[0].origin.typ() == o.typ() {
			f.ins = append(f.ins, [2]colOrigin{o, *d.cols[0].origin})
		}
	}
	return f
}

// disj: a ref is constrained by an OR only when every arm constrains it.
func (rd *exprReader) disj(args []*pg.Node, sc *scope) []refCons {
	if len(args) == 0 {
		return nil
	}
	arms := make([]facts, len(args))
	for i, arg := range args {
		arms[i] = rd.conj(arg, sc)
	}
	var out []refCons
	for _, rc := range arms[0].cons {
		if slices.ContainsFunc(out, func(o refCons) bool { return o.ref == rc.ref }) {
			continue
		}
		or := &cnode{op: cOr}
		ok := true
		for _, arm := range arms {
			var kids []*cnode
			for _, c := range arm.cons {
				if c.ref == rc.ref {
					kids = append(kids, c.n)
				}
			}
			switch len(kids) {
			case 0:
				ok = false
			case 1:
				or.kids = append(or.kids, kids[0])
			default:
				or.kids = append(or.kids, &cnode{op: cAnd, kids: kids})
			}
		}
		if ok {
			out = append(out, refCons{ref: rc.ref, n: or})
		}
	}
	return out
}

func isEqOp(name []*pg.Node) bool {
	if len(name) == 0 {
		return false
	}
	if len(name) > 1 && strName(name[0]) != "pg_catalog" {
		return false
	}
	return strName(name[len(name)-1]) == "="
}

func (rd *exprReader) eqPair(l, r *pg.Node, sc *scope) facts {
	var f facts
	lo, lok := sc.keyOrigin(l)
	ro, rok := sc.keyOrigin(r)
	switch {
	case lok && rok:
		if lo.typ() == ro.typ() {
			f.eqs = append(f.eqs, [2]colOrigin{lo, ro})
		}
	case lok:
		if s := rd.srcOf(r, lo.ref.t.keys[lo.key], lo.ref.t.name, false); s != nil {
			f.cons = append(f.cons, refCons{ref: lo.ref, n: &cnode{op: cSrc, src: s}})
		}
	case rok:
		if s := rd.srcOf(l, ro.ref.t.keys[ro.key], ro.ref.t.name, false); s != nil {
			f.cons = append(f.cons, refCons{ref: ro.ref, n: &cnode{op: cSrc, src: s}})
		}
	}
	return f
}

func (rd *exprReader) inList(l *pg.Node, items []*pg.Node, sc *scope) facts {
	var f facts
	o, ok := sc.keyOrigin(l)
	if !ok || len(items) == 0 {
		return f
	}
	or := &cnode{op: cOr}
	for _, it := range items {
		s := rd.srcOf(it, o.ref.t.keys[o.key], o.ref.t.name, false)
		if s == nil {
			return facts{}
		}
		or.kids = append(or.kids, &cnode{op: cSrc, src: s})
	}
	if len(or.kids) == 1 {
		or = or.kids[0]
	}
	f.cons = append(f.cons, refCons{ref: o.ref, n: or})
	return f
}

// sameExpr is sameExpr for the analysis: comparing an expression that
// holds a literal slot would compare placeholders, not the literals.
func (rd *exprReader) sameExpr(x, y *pg.Node) bool {
	if rd.lit.has(x) || rd.lit.has(y) {
		rd.lit.taintf("an expression with a literal is compared with another (ORDER BY / GROUP BY / output names)")
	}
	return sameExpr(x, y)
}

// errNegative is limitOf's reason for a negative constant.
const errNegative = "negative"

// limitOf reads a LIMIT or OFFSET: a constant (its value, as Postgres
// coerces it to bigint), NULL/ALL (-1) or a parameter (a source read at
// Route). A negative constant gives errNegative.
func (rd *exprReader) limitOf(n *pg.Node, what string) (int64, *source, string) {
	if n == nil {
		return -1, nil, ""
	}
	if rd.lit.has(n) {
		// A plain integer literal is a value read at Route; any other
		// literal (a string, a decimal, a negative number, a cast one) is
		// judged here by its value: not shared.
		if pr := n.GetParamRef(); pr != nil {
			if k := rd.lit.slot(int(pr.Number)); k > 0 && rd.lit.class(k) == litInt {
				s := rd.srcOf(n, keyCol{col: what, typ: KeyInt8}, "", false)
				s.col = what
				return -1, s, ""
			}
		}
		rd.lit.taintf("%s %s is a literal other than a plain integer", what, exprText(n))
		return 0, nil, what + " is not shared"
	}
	e := n
	for e.GetTypeCast() != nil {
		if vt := vtypeOfCast(e.GetTypeCast().TypeName); vt != vtInt2 && vt != vtInt4 && vt != vtInt8 && !isNumericType(e.GetTypeCast().TypeName) {
			return 0, nil, fmt.Sprintf("%s %s: only integer and numeric casts are read for the merge", what, exprText(n))
		}
		e = e.GetTypeCast().Arg
	}
	if c := e.GetAConst(); c != nil {
		if c.Isnull {
			return -1, nil, ""
		}
		v, _ := constVal(c)
		i, ok := limitConst(v)
		if !ok {
			return 0, nil, what + " " + exprText(n) + " is not a bigint the merge can read"
		}
		if i < 0 {
			return 0, nil, errNegative
		}
		return i, nil, ""
	}
	if e.GetParamRef() != nil {
		s := rd.srcOf(n, keyCol{col: what, typ: KeyInt8}, "", false)
		if s != nil {
			s.col = what
			return -1, s, ""
		}
	}
	return 0, nil, what + " " + exprText(n) + " must be a constant or a parameter to be merged"
}

// limitConst converts a LIMIT/OFFSET constant as Postgres coerces it to
// bigint: integers as they are, a numeric rounded half away from zero, a
// quoted string read as int8in reads it.
func limitConst(v kval) (int64, bool) {
	switch v.kind {
	case kInt:
		return v.i, true
	case kNum:
		r, ok := new(big.Rat).SetString(v.s)
		if !ok {
			return 0, false
		}
		return roundRat(r)
	case kText:
		i, err := strconv.ParseInt(strings.TrimSpace(v.s), 10, 64)
		return i, err == nil
	}
	return 0, false
}

// roundRat rounds half away from zero to an int64.
func roundRat(r *big.Rat) (int64, bool) {
	num, den := new(big.Int).Set(r.Num()), r.Denom()
	neg := num.Sign() < 0
	num.Abs(num)
	q, rem := new(big.Int).QuoRem(num, den, new(big.Int))
	if rem.Mul(rem, big.NewInt(2)).Cmp(den) >= 0 {
		q.Add(q, big.NewInt(1))
	}
	if neg {
		q.Neg(q)
	}
	if !q.IsInt64() {
		return 0, false
	}
	return q.Int64(), true
}

func isNumericType(tn *pg.TypeName) bool {
	if tn == nil || len(tn.Names) == 0 || len(tn.Typmods) > 0 {
		return false
	}
	n := strName(tn.Names[len(tn.Names)-1])
	return n == "numeric" || n == "decimal"
}
