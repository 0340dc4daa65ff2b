package route

import (
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"
)

// input is one Bind's parameters, and the literals of the statement's text
// (a statement analyzed through its normalized text).
type input struct {
	params  [][]byte
	formats []int16
	oids    []uint32
	lits    []literal
}

// value returns the key value source s has under in.
func (in *input) value(s *source) kval {
	if s.lit > 0 {
		return litValue(s, in.lits)
	}
	if s.param == 0 {
		return s.konst
	}
	n := s.param
	if in.params == nil {
		return refuse("42P02", "there is no parameter $"+strconv.Itoa(n))
	}
	if n > len(in.params) {
		return refuse("08P01", "bind message supplies "+strconv.Itoa(len(in.params))+" parameters, but the statement uses $"+strconv.Itoa(n))
	}
	var f int16
	switch len(in.formats) {
	case 0:
	case 1:
		f = in.formats[0]
	case len(in.params):
		f = in.formats[n-1]
	default:
		return refuse("08P01", "bind message has "+strconv.Itoa(len(in.formats))+" parameter formats but "+strconv.Itoa(len(in.params))+" parameters")
	}
	// The declared type wins (the cast then converts); else the cast
	// types the parameter; else the key column's type does.
	var v kval
	if n <= len(in.oids) && in.oids[n-1] != 0 {
		v = decodeParam(in.params[n-1], f, vtypeOfOID(in.oids[n-1]), n)
		if s.cast != vtNone {
			v = castTo(v, s.cast)
		}
	} else if s.cast != vtNone {
		v = decodeParam(in.params[n-1], f, s.cast, n)
	} else {
		v = decodeParam(in.params[n-1], f, naturalType(s.key), n)
	}
	for _, c := range s.chain {
		v = castTo(v, c)
	}
	return toKey(v, s.key)
}

// limitValue is a LIMIT/OFFSET parameter's value (-1 for NULL = none).
func (in *input) limitValue(s *source, def int64) (int64, *Refusal) {
	if s == nil {
		return def, nil
	}
	if s.param > 0 && s.param <= len(in.oids) {
		switch in.oids[s.param-1] {
		case 0, pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
		default:
			return 0, &Refusal{SQLState: "0A000", Message: fmt.Sprintf("%s $%d is declared with a type other than an integer: pgshard does not convert it for the merge", s.col, s.param),
				Hint: "Declare it int8 (or leave its type unspecified)."}
		}
	}
	v := in.value(s)
	switch v.kind {
	case kInt:
		if v.i < 0 {
			if s.col == "OFFSET" {
				return 0, &Refusal{SQLState: "2201X", Message: "OFFSET must not be negative"}
			}
			return 0, &Refusal{SQLState: "2201W", Message: "LIMIT must not be negative"}
		}
		return v.i, nil
	case kNull:
		return -1, nil
	case kRefuse:
		return 0, v.ref
	}
	return 0, &Refusal{SQLState: "0A000", Message: fmt.Sprintf("cannot read LIMIT/OFFSET from %s for the merge", s.exprText(in.lits)),
		Hint: "Send it as an integer (int2/int4/int8)."}
}
