package pgvalue

import (
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"
)

// TypeName is the SQL name of type oid with type modifier typmod, as a
// cast writes it (varchar(7), numeric(10,2), timestamp(3) with time
// zone, bit(8), and arrays of them: varchar(7)[]), for the built-in types
// whose modifier is a length, a precision or a scale; false for any
// other type or modifier (interval's fields, a type of an extension). A
// value of that type and modifier cast to it is unchanged: the read in
// two stages casts its rows back to the modifier their column had.
func TypeName(oid uint32, typmod int32) (string, bool) {
	if typmod < 0 {
		return "", false
	}
	if elem, ok := typmodArrays[oid]; ok {
		name, ok := TypeName(elem, typmod)
		return name + "[]", ok
	}
	n := typmod - 4 // VARHDRSZ: the length types count the header
	switch oid {
	case pgtype.VarcharOID:
		if n < 1 {
			return "", false
		}
		return "varchar(" + strconv.Itoa(int(n)) + ")", true
	case pgtype.BPCharOID:
		if n < 1 {
			return "", false
		}
		return "character(" + strconv.Itoa(int(n)) + ")", true
	case pgtype.NumericOID:
		if n < 0 {
			return "", false
		}
		// numeric's typmod: precision in the high 16 bits, scale in the
		// low 11 (signed: Postgres 15 allows a negative scale).
		prec, scale := (n>>16)&0xffff, n&0x7ff
		if scale&0x400 != 0 {
			scale -= 0x800
		}
		if prec < 1 || prec > 1000 {
			return "", false
		}
		return "numeric(" + strconv.Itoa(int(prec)) + "," + strconv.Itoa(int(scale)) + ")", true
	case pgtype.BitOID, pgtype.VarbitOID:
		if typmod < 1 {
			return "", false
		}
		name := "bit("
		if oid == pgtype.VarbitOID {
			name = "bit varying("
		}
		return name + strconv.Itoa(int(typmod)) + ")", true
	}
	if name, ok := precisionTypes[oid]; ok && typmod <= 6 {
		return name[0] + "(" + strconv.Itoa(int(typmod)) + ")" + name[1], true
	}
	return "", false
}

// precisionTypes are the types whose modifier is a precision of
// fractional seconds (0..6): the name before and after it.
var precisionTypes = map[uint32][2]string{
	pgtype.TimestampOID:   {"timestamp", " without time zone"},
	pgtype.TimestamptzOID: {"timestamp", " with time zone"},
	pgtype.TimeOID:        {"time", " without time zone"},
	pgtype.TimetzOID:      {"time", " with time zone"},
}

// typmodArrays maps the array types of TypeName's types to their
// element types (an array column carries its elements' modifier).
var typmodArrays = map[uint32]uint32{
	pgtype.VarcharArrayOID:     pgtype.VarcharOID,
	pgtype.BPCharArrayOID:      pgtype.BPCharOID,
	pgtype.NumericArrayOID:     pgtype.NumericOID,
	pgtype.BitArrayOID:         pgtype.BitOID,
	pgtype.VarbitArrayOID:      pgtype.VarbitOID,
	pgtype.TimestampArrayOID:   pgtype.TimestampOID,
	pgtype.TimestamptzArrayOID: pgtype.TimestamptzOID,
	pgtype.TimeArrayOID:        pgtype.TimeOID,
	pgtype.TimetzArrayOID:      pgtype.TimetzOID,
}
