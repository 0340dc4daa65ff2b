package pgvalue

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// The modifiers are those Postgres 15 puts in a RowDescription for the
// type written on the right (SELECT NULL::varchar(7), ...), and the
// names are format_type's, as a cast accepts them.
func TestTypeName(t *testing.T) {
	cases := []struct {
		oid    uint32
		typmod int32
		want   string
	}{
		{pgtype.VarcharOID, 11, "varchar(7)"},
		{pgtype.BPCharOID, 5, "character(1)"},
		{pgtype.NumericOID, 655366, "numeric(10,2)"},
		{pgtype.NumericOID, 65540, "numeric(1,0)"},
		{pgtype.NumericOID, 5<<16 | 0x7fe + 4, "numeric(5,-2)"},
		{pgtype.NumericOID, 1000<<16 | 1000 + 4, "numeric(1000,1000)"},
		{pgtype.TimestampOID, 3, "timestamp(3) without time zone"},
		{pgtype.TimestamptzOID, 0, "timestamp(0) with time zone"},
		{pgtype.TimeOID, 6, "time(6) without time zone"},
		{pgtype.TimetzOID, 2, "time(2) with time zone"},
		{pgtype.BitOID, 8, "bit(8)"},
		{pgtype.VarbitOID, 3, "bit varying(3)"},
		{pgtype.VarcharArrayOID, 11, "varchar(7)[]"},
		{pgtype.NumericArrayOID, 655366, "numeric(10,2)[]"},
	}
	for _, c := range cases {
		got, ok := TypeName(c.oid, c.typmod)
		if !ok || got != c.want {
			t.Errorf("TypeName(%d, %d) = %q, %v; want %q", c.oid, c.typmod, got, ok, c.want)
		}
	}
	for _, c := range []struct {
		oid    uint32
		typmod int32
	}{
		{pgtype.VarcharOID, -1}, {pgtype.VarcharOID, 4}, {pgtype.IntervalOID, 32767<<16 | 6},
		{pgtype.TextOID, 10}, {pgtype.TimestampOID, 7}, {pgtype.NumericOID, 3}, {99999, 10},
		{pgtype.BitOID, 0},
	} {
		if got, ok := TypeName(c.oid, c.typmod); ok {
			t.Errorf("TypeName(%d, %d) = %q; want no name", c.oid, c.typmod, got)
		}
	}
}
