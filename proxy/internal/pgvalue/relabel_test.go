package pgvalue

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

func TestEditRowDesc(t *testing.T) {
	in := []Field{
		{Name: "aid", Table: 16500, Attnum: 1, OID: pgtype.Int8OID, Typlen: 8, Typmod: -1},
		{Name: "mood", Table: 16500, Attnum: 5, OID: 16600, Typlen: 4, Typmod: -1, Format: 1},
		{Name: "?column?", OID: pgtype.TextOID, Typlen: -1, Typmod: -1},
	}
	msg := AppendRowDesc(nil, in)
	if !RowDescUserOIDs(msg) {
		t.Fatal("a description naming table 16500 names no user object")
	}
	var seen [][3]uint32
	ok := EditRowDesc(msg, func(tab uint32, a uint16, o uint32) (uint32, uint16, uint32) {
		seen = append(seen, [3]uint32{tab, uint32(a), o})
		if tab == 16500 {
			tab, a = 17000, a+1
		}
		if o == 16600 {
			o = 17100
		}
		return tab, a, o
	})
	if !ok {
		t.Fatal("EditRowDesc refused a well-formed RowDescription")
	}
	want := [][3]uint32{{16500, 1, pgtype.Int8OID}, {16500, 5, 16600}, {0, 0, pgtype.TextOID}}
	if len(seen) != len(want) {
		t.Fatalf("edit saw %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("edit saw %v, want %v", seen, want)
		}
	}
	got, err := ParseRowDesc(msg)
	if err != nil {
		t.Fatal(err)
	}
	exp := append([]Field(nil), in...)
	exp[0].Table, exp[0].Attnum = 17000, 2
	exp[1].Table, exp[1].Attnum, exp[1].OID = 17000, 6, 17100
	for i := range exp {
		if got[i] != exp[i] {
			t.Errorf("column %d: %+v, want %+v", i, got[i], exp[i])
		}
	}

	builtin := AppendRowDesc(nil, []Field{{Name: "n", OID: pgtype.Int4OID, Typlen: 4, Typmod: -1}})
	if RowDescUserOIDs(builtin) {
		t.Error("a description of built-in types only names a user object")
	}
}

func TestEditRowDescMalformed(t *testing.T) {
	good := AppendRowDesc(nil, []Field{{Name: "a", Table: 16400, Attnum: 1, OID: 16401}})
	for name, msg := range map[string][]byte{
		"cut short":      good[:len(good)-1],
		"trailing bytes": append(append([]byte(nil), good...), 0),
		"no name end":    {'T', 0, 0, 0, 8, 0, 1, 'a'},
		"not a T":        append([]byte{'D'}, good[1:]...),
		"no count":       {'T', 0, 0, 0, 4},
	} {
		before := append([]byte(nil), msg...)
		called := false
		if EditRowDesc(msg, func(t uint32, a uint16, o uint32) (uint32, uint16, uint32) { called = true; return 1, 1, 1 }) {
			t.Errorf("%s: EditRowDesc accepted %x", name, msg)
		}
		if called || !bytes.Equal(msg, before) {
			t.Errorf("%s: EditRowDesc changed a malformed message", name)
		}
		if RowDescUserOIDs(msg) {
			t.Errorf("%s: a malformed message names user objects", name)
		}
	}
}

func TestEditParamDesc(t *testing.T) {
	msg, sp := pgwire.BeginMsg(nil, 't')
	msg = pgwire.AppendU16(msg, 3)
	for _, o := range []uint32{pgtype.Int8OID, 16600, 0} {
		msg = pgwire.AppendU32(msg, o)
	}
	msg = pgwire.FinishMsg(msg, sp)
	if !ParamDescUserOIDs(msg) {
		t.Fatal("a parameter of type 16600 is not a user type")
	}
	if !EditParamDesc(msg, func(_ uint32, _ uint16, o uint32) (uint32, uint16, uint32) {
		if o == 16600 {
			o = 17100
		}
		return 0, 0, o
	}) {
		t.Fatal("EditParamDesc refused a well-formed ParameterDescription")
	}
	for i, want := range []uint32{pgtype.Int8OID, 17100, 0} {
		if got := binary.BigEndian.Uint32(msg[pgwire.HeaderLen+2+4*i:]); got != want {
			t.Errorf("parameter %d: type %d, want %d", i, got, want)
		}
	}
	if EditParamDesc(msg[:len(msg)-1], func(uint32, uint16, uint32) (uint32, uint16, uint32) { return 0, 0, 1 }) {
		t.Error("EditParamDesc accepted a message cut short")
	}
}
