package pgvalue

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// The values of these tests, as Postgres's array_send and record_send
// write them.

// binArrayN is an array of any number of dimensions (array_test.go's
// binArray: of one at most), an array of elem with dims and its
// elements (nil: NULL).
func binArrayN(elem uint32, dims []int32, elems ...[]byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(dims)))
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, elem)
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, uint32(d))
		b = binary.BigEndian.AppendUint32(b, 1)
	}
	for _, e := range elems {
		b = appendItem(b, e)
	}
	return b
}

type field struct {
	typ uint32
	v   []byte
}

func binRecord(fields ...field) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(fields)))
	for _, f := range fields {
		b = binary.BigEndian.AppendUint32(b, f.typ)
		b = appendItem(b, f.v)
	}
	return b
}

func appendItem(b, v []byte) []byte {
	if v == nil {
		return binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
	}
	return append(binary.BigEndian.AppendUint32(b, uint32(len(v))), v...)
}

// The user types of these tests: an enum, an array of it, a composite.
const (
	tMood      = 16600
	tMoodArray = 16601
	tPair      = 16700
	tUnknown   = 16800
)

func testKind(o uint32) ValueKind {
	switch o {
	case tMoodArray, RecordArrayOID, pgtype.Int4ArrayOID:
		return ValueArray
	case tPair, RecordOID:
		return ValueRecord
	}
	return ValuePlain
}

func oidsAt(v []byte, offs []int) []uint32 {
	var out []uint32
	for _, at := range offs {
		out = append(out, binary.BigEndian.Uint32(v[at:]))
	}
	return out
}

func TestValueOIDs(t *testing.T) {
	calm, busy := []byte("calm"), []byte("busy")
	four := binary.BigEndian.AppendUint32(nil, 4)
	moods := binArrayN(tMood, []int32{2}, calm, busy)
	for _, c := range []struct {
		name string
		v    []byte
		typ  uint32
		want []uint32 // the OIDs at the offsets found, in order
	}{
		{"an array of a user enum", moods, tMoodArray, []uint32{tMood}},
		{"an empty array", binArrayN(tMood, nil), tMoodArray, []uint32{tMood}},
		{"two dimensions, a NULL", binArrayN(tMood, []int32{2, 2}, calm, nil, busy, calm), tMoodArray, []uint32{tMood}},
		{"an array of a built-in type", binArrayN(pgtype.Int4OID, []int32{1}, four), pgtype.Int4ArrayOID, nil},
		{"a plain value", calm, tMood, nil},
		{"a record", binRecord(field{pgtype.Int4OID, four}, field{tMood, calm}, field{tMoodArray, moods}, field{tPair, nil}),
			RecordOID, []uint32{tMood, tMoodArray, tMood, tPair}},
		{"a composite of a composite", binRecord(field{tPair, binRecord(field{tMood, busy})}), tPair, []uint32{tPair, tMood}},
		{"an array of records", binArrayN(RecordOID, []int32{2}, binRecord(field{tMood, calm}), binRecord()), RecordArrayOID, []uint32{tMood}},
		{"an array of composites", binArrayN(tPair, []int32{1}, binRecord(field{tMoodArray, moods})), RecordArrayOID, []uint32{tPair, tMoodArray, tMood}},
		{"a type not known is not walked", binRecord(field{tUnknown, binRecord(field{tMood, calm})}), RecordOID, []uint32{tUnknown}},
	} {
		offs, ok := ValueOIDs([]int{-1}, c.v, c.typ, testKind)
		if !ok {
			t.Errorf("%s: %x does not decode", c.name, c.v)
			continue
		}
		if offs[0] != -1 {
			t.Errorf("%s: what offs held was overwritten", c.name)
		}
		if got := oidsAt(c.v, offs[1:]); !slices.Equal(got, c.want) {
			t.Errorf("%s: OIDs %v, want %v", c.name, got, c.want)
		}
	}
}

func TestValueOIDsMalformed(t *testing.T) {
	moods := binArrayN(tMood, []int32{2}, []byte("calm"), []byte("busy"))
	deep := binRecord(field{tMood, []byte("x")})
	for range maxValueDepth + 1 {
		deep = binRecord(field{tPair, deep})
	}
	huge := binArrayN(tMood, []int32{1 << 30, 1 << 30}, []byte("x"))
	for name, c := range map[string]struct {
		v   []byte
		typ uint32
	}{
		"cut short":                    {moods[:len(moods)-1], tMoodArray},
		"bytes after":                  {append(append([]byte(nil), moods...), 0), tMoodArray},
		"no header":                    {moods[:11], tMoodArray},
		"negative dimensions":          {binArrayN(tMood, []int32{-1}), tMoodArray},
		"seven dimensions":             {binArrayN(tMood, []int32{1, 1, 1, 1, 1, 1, 1}, []byte("x")), tMoodArray},
		"more elements than bytes":     {huge, tMoodArray},
		"a length of -2":               {append(binArrayN(tMood, []int32{1}), 0xFF, 0xFF, 0xFF, 0xFE), tMoodArray},
		"a record cut short":           {binRecord(field{tMood, []byte("calm")})[:10], RecordOID},
		"a record's count lies":        {binary.BigEndian.AppendUint32(nil, 3), RecordOID},
		"a field that is not its type": {binRecord(field{tMoodArray, []byte("calm")}), tPair},
		"nested too deep":              {deep, tPair},
	} {
		if offs, ok := ValueOIDs([]int{7}, c.v, c.typ, testKind); ok || len(offs) != 1 || offs[0] != 7 {
			t.Errorf("%s: ValueOIDs(%x) = %v, %v; want it refused with offs as given", name, c.v, offs, ok)
		}
	}
}
