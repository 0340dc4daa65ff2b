package merge

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// HAVING: the merged groups' condition, over their finished values, the
// statement's constants and the client's Bind parameters.

func (r groupMerge) eval(c *route.Cond, vals []outVal, finals []pgvalue.Field) (int, *pgwire.Error) {
	switch c.Op {
	case route.CondAnd, route.CondOr:
		res := 1
		if c.Op == route.CondOr {
			res = 0
		}
		for _, k := range c.Kids {
			v, e := r.eval(k, vals, finals)
			if e != nil {
				return 0, e
			}
			switch {
			case c.Op == route.CondAnd && v == 0, c.Op == route.CondOr && v == 1:
				return v, nil
			case v == -1:
				res = -1
			}
		}
		return res, nil
	case route.CondNot:
		v, e := r.eval(c.Kids[0], vals, finals)
		if v == -1 || e != nil {
			return v, e
		}
		return 1 - v, nil
	case route.CondIsNull, route.CondNotNull:
		isNull := c.L.Output >= 0 && vals[c.L.Output].null || c.L.Output < 0 && c.L.Null
		if isNull == (c.Op == route.CondIsNull) {
			return 1, nil
		}
		return 0, nil
	}
	cmp, null, e := r.compareOperands(c.L, c.R, vals, finals)
	if e != nil || null {
		return -1, e
	}
	var ok bool
	switch c.Cmp {
	case "=":
		ok = cmp == 0
	case "<>":
		ok = cmp != 0
	case "<":
		ok = cmp < 0
	case "<=":
		ok = cmp <= 0
	case ">":
		ok = cmp > 0
	case ">=":
		ok = cmp >= 0
	}
	if ok {
		return 1, nil
	}
	return 0, nil
}

// operandVal is a HAVING operand's value: a number, or text.
type operandVal struct {
	null   bool
	isNum  bool
	n      pgvalue.Num
	text   []byte
	field  *pgvalue.Field // for a merged value that is neither
	raw    []byte
	output int
}

func (r groupMerge) operand(o route.Operand, vals []outVal, finals []pgvalue.Field) (operandVal, *pgwire.Error) {
	if o.Output >= 0 {
		v := vals[o.Output]
		if v.null {
			return operandVal{null: true}, nil
		}
		if v.comp && finals[o.Output].OID != pgtype.TextOID {
			return operandVal{isNum: true, n: v.n}, nil
		}
		f := &finals[o.Output]
		switch f.OID {
		case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.NumericOID, pgtype.Float4OID, pgtype.Float8OID:
			n, e := pgvalue.DecodeNum(v.raw, f.OID, f.Format)
			if e != nil {
				return operandVal{}, e
			}
			return operandVal{isNum: true, n: n}, nil
		}
		return operandVal{field: f, raw: v.raw, output: o.Output}, nil
	}
	if o.Null {
		return operandVal{null: true}, nil
	}
	if o.Param > 0 {
		return r.paramOperand(o.Param)
	}
	switch o.ConstKind {
	case "int", "numeric":
		d, ok := pgvalue.DecFromText(o.Const)
		if !ok {
			return operandVal{}, pgwire.NewError(pgwire.CodeInternalError, "pgshard merge: bad constant "+o.Const)
		}
		return operandVal{isNum: true, n: pgvalue.Num{Kind: pgvalue.NumDec, Dec: d, OID: pgtype.NumericOID}}, nil
	}
	return operandVal{text: []byte(o.Const)}, nil
}

// paramOperand reads a Bind parameter used in HAVING.
func (r groupMerge) paramOperand(n int) (operandVal, *pgwire.Error) {
	params, formats, oids := r.run.Params, r.run.Formats, r.run.OIDs
	if n > len(params) {
		return operandVal{}, pgwire.NewError(pgwire.CodeProtocolViolation, fmt.Sprintf("bind message supplies %d parameters, but HAVING uses $%d", len(params), n))
	}
	v := params[n-1]
	if v == nil {
		return operandVal{null: true}, nil
	}
	var f int16
	switch len(formats) {
	case 0:
	case 1:
		f = formats[0]
	default:
		f = formats[n-1]
	}
	var oid uint32
	if n <= len(oids) {
		oid = oids[n-1]
	}
	if f == 1 {
		switch oid {
		case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.NumericOID, pgtype.Float4OID, pgtype.Float8OID:
			x, e := pgvalue.DecodeNum(v, oid, 1)
			if e != nil {
				return operandVal{}, e
			}
			return operandVal{isNum: true, n: x}, nil
		case pgtype.TextOID, pgtype.VarcharOID:
			return operandVal{text: v}, nil
		}
		return operandVal{}, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported, Message: fmt.Sprintf("pgshard cannot read the binary parameter $%d (type oid %d) of a merged HAVING", n, oid)}
	}
	if n, ok := numFromText(v); ok {
		return operandVal{isNum: true, n: n}, nil
	}
	return operandVal{text: v}, nil
}

// numFromText reads a number written as text: a decimal exactly, else a
// float (NaN, Infinity, 1e5).
func numFromText(v []byte) (pgvalue.Num, bool) {
	t := strings.TrimSpace(string(v))
	if d, ok := pgvalue.DecFromText(t); ok && d.Special == 0 && t != "" && t[0] != '+' {
		return pgvalue.Num{Kind: pgvalue.NumDec, Dec: d, OID: pgtype.NumericOID}, true
	}
	if x, ok := pgvalue.ParsePgFloat(t, 64); ok {
		return pgvalue.Num{Kind: pgvalue.NumF8, Float: x, OID: pgtype.Float8OID}, true
	}
	return pgvalue.Num{}, false
}

// compareOperands compares two HAVING operands.
func (r groupMerge) compareOperands(lo, ro route.Operand, vals []outVal, finals []pgvalue.Field) (int, bool, *pgwire.Error) {
	l, e := r.operand(lo, vals, finals)
	if e != nil {
		return 0, false, e
	}
	rv, e := r.operand(ro, vals, finals)
	if e != nil {
		return 0, false, e
	}
	if l.null || rv.null {
		return 0, true, nil
	}
	// An untyped string literal (or text parameter) compared with a
	// number is read as a number, as Postgres coerces an unknown literal.
	if l.isNum && !rv.isNum && rv.field == nil {
		n, ok := numFromText(rv.text)
		if !ok {
			return 0, false, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported, Message: fmt.Sprintf("pgshard cannot compare a merged number with %q in HAVING", rv.text)}
		}
		rv = operandVal{isNum: true, n: n}
	}
	if rv.isNum && !l.isNum && l.field == nil {
		n, ok := numFromText(l.text)
		if !ok {
			return 0, false, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported, Message: fmt.Sprintf("pgshard cannot compare a merged number with %q in HAVING", l.text)}
		}
		l = operandVal{isNum: true, n: n}
	}
	switch {
	case l.isNum && rv.isNum:
		return pgvalue.CmpNum(l.n, rv.n), false, nil
	case l.field != nil && rv.field == nil && !rv.isNum:
		c, e := r.compareTextOperand(l, rv.text)
		return c, false, e
	case rv.field != nil && l.field == nil && !l.isNum:
		c, e := r.compareTextOperand(rv, l.text)
		return -c, false, e
	case l.field != nil && rv.field != nil:
		c, e := pgvalue.CompareValues(l.raw, rv.raw, l.field, r.run.Bytewise, r.run.Times)
		return c, false, e
	}
	return 0, false, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported, Message: "pgshard cannot compare these values of a merged HAVING"}
}

func (r groupMerge) compareTextOperand(v operandVal, text []byte) (int, *pgwire.Error) {
	f := v.field
	switch f.OID {
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.NameOID:
		tf := *f
		tf.Format = 0
		raw := v.raw
		return pgvalue.CompareValues(raw, text, &tf, r.run.Bytewise || r.run.Plan.Groups.Outputs[v.output].Bytewise, r.run.Times)
	}
	return 0, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported, Message: fmt.Sprintf("pgshard cannot compare column %q (type oid %d) with a constant in a merged HAVING", f.Name, f.OID)}
}

// castTarget is pgvalue.NumCast's target type for a cast of a merged aggregate
// (0: no cast; a cast it does not know maps to an OID pgvalue.NumCast refuses).
func castTarget(c route.Cast) uint32 {
	switch c {
	case route.CastNone:
		return 0
	case route.CastInt2:
		return pgtype.Int2OID
	case route.CastInt4:
		return pgtype.Int4OID
	case route.CastInt8:
		return pgtype.Int8OID
	case route.CastNumeric:
		return pgtype.NumericOID
	case route.CastFloat4:
		return pgtype.Float4OID
	case route.CastFloat8:
		return pgtype.Float8OID
	case route.CastText:
		return pgtype.TextOID
	}
	return 1<<32 - 1
}
