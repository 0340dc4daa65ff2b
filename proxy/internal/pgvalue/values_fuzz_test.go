package pgvalue

import (
	"bytes"
	"encoding/binary"
	"math/big"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// FuzzShardAnswer: the decoders of what a shard sends to a merge — a
// DataRow, a RowDescription, numeric and float values in text and binary
// — never panic; what decodes re-encodes to the same bytes (DataRow,
// RowDescription, numeric binary in its canonical form) or reads back the
// same (numeric text); the in-place description edits (relabel.go)
// accept only what decodes and never panic; the type OIDs found inside a
// binary array or record (valueoids.go) are inside it and user types'.
func FuzzShardAnswer(f *testing.F) {
	f.Add(pgwire.AppendDataRow(nil, [][]byte{[]byte("abc"), nil, {}}), []byte("12.500"))
	f.Add(AppendRowDesc(nil, []Field{{Name: "a", OID: pgtype.Int8OID, Typlen: 8, Typmod: -1}, {Name: "b", OID: pgtype.NumericOID, Typlen: -1, Typmod: -1, Format: 1}}), []byte("-0.0001"))
	f.Add([]byte{'D', 0, 0, 0, 6, 0, 1}, []byte("NaN"))
	f.Add(Dec{Coef: big.NewInt(-123456789), Scale: 4}.AppendBinary(nil), []byte("Infinity"))
	f.Add(binRecord(field{tMoodArray, binArrayN(tMood, []int32{2}, []byte("a"), nil)}, field{tPair, binRecord()}), []byte("0"))
	f.Add([]byte("Sat Dec 05 13:04:05.5 2020 CET"), []byte("05.12.2020 13:04:05 +0545 BC"))
	f.Add([]byte("12/05/2020 01:30:00 EDT"), []byte("2020-12-05 13:04:05.123456-04:56:02"))
	f.Add([]byte("@ 1 year 2 mons -3 days 4 hours 5 mins 6.5 secs ago"), []byte("+1-2 -3 +4:05:06.25"))
	f.Add([]byte("P1Y-2M3DT-4H5M-6.5S"), []byte("-1 years +2 mons -04:05:06"))
	f.Add([]byte("13:30:00.5+05:53:28"), []byte("24:00:00"))
	berlin, _ := time.LoadLocation("Europe/Berlin")
	f.Fuzz(func(t *testing.T, msg []byte, text []byte) {
		for _, typ := range []uint32{tMoodArray, tPair} {
			offs, ok := ValueOIDs(nil, msg, typ, testKind)
			if !ok && len(offs) != 0 {
				t.Fatalf("ValueOIDs refused %x but found OIDs at %v", msg, offs)
			}
			for _, at := range offs {
				if at < 0 || at+4 > len(msg) || binary.BigEndian.Uint32(msg[at:]) < FirstUserOID {
					t.Fatalf("ValueOIDs(%x, %d) found an OID at %d, which is not a user type's", msg, typ, at)
				}
			}
		}
		if len(msg) >= pgwire.HeaderLen {
			framed := append([]byte{'D'}, binary.BigEndian.AppendUint32(nil, uint32(len(msg)-1))...)
			framed = append(framed, msg[pgwire.HeaderLen:]...)
			if cols, err := pgwire.DataRowCols(nil, framed); err == nil {
				if again := pgwire.AppendDataRow(nil, cols); !bytes.Equal(again, framed) {
					t.Fatalf("DataRow %x re-encodes as %x", framed, again)
				}
			}
			framed[0] = 'T'
			// The in-place edit accepts only what decodes, and an
			// edit that changes nothing leaves the bytes alone.
			before := append([]byte(nil), framed...)
			_ = RowDescUserOIDs(framed)
			same := func(t uint32, a uint16, o uint32) (uint32, uint16, uint32) { return t, a, o }
			if _, err := ParseRowDesc(framed); err != nil && EditRowDesc(framed, same) {
				t.Fatalf("EditRowDesc accepts %x, which does not decode: %v", framed, err)
			}
			if !bytes.Equal(before, framed) {
				t.Fatalf("an identity edit changed %x into %x", before, framed)
			}
			framed[0] = 't'
			_ = ParamDescUserOIDs(framed)
			EditParamDesc(framed, same)
			if !bytes.Equal(before[1:], framed[1:]) {
				t.Fatalf("an identity edit changed ParameterDescription %x", framed)
			}
			framed[0] = 'T'
			if fs, err := ParseRowDesc(framed); err == nil {
				if again := AppendRowDesc(nil, fs); !bytes.Equal(again, framed) && bytes.IndexByte(framed[pgwire.HeaderLen:], 0) >= 0 {
					if _, err := ParseRowDesc(again); err != nil {
						t.Fatalf("RowDescription %x re-encodes undecodably as %x", framed, again)
					}
				}
			}
		}
		for _, oid := range []uint32{pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.Float4OID, pgtype.Float8OID, pgtype.NumericOID} {
			for _, format := range []int16{0, 1} {
				v := text
				if format == 1 {
					v = msg
				}
				n, e := DecodeNum(v, oid, format)
				if e != nil {
					continue
				}
				_ = AppendNum(nil, n, format, 1)
				f := Field{OID: oid, Format: format}
				if _, e := CompareValues(v, v, &f, true, nil); e != nil {
					t.Fatalf("a value that decodes (%x, oid %d) does not compare: %v", v, oid, e)
				}
			}
		}
		// Date and time texts (times.go): any bytes are read or refused,
		// never a panic; what is read is equal to itself.
		for _, oid := range []uint32{pgtype.DateOID, pgtype.TimestampOID, pgtype.TimestamptzOID} {
			for _, ts := range []*TimeStyle{nil, {Order: 'D', Zone: berlin}, {Order: 'M'}} {
				f := Field{OID: oid}
				if c, e := CompareValues(text, text, &f, true, ts); e == nil && c != 0 {
					t.Fatalf("%q (oid %d) is not equal to itself", text, oid)
				}
				_, _ = CompareValues(text, msg, &f, true, ts)
			}
		}
		// Intervals, times and times with time zone (intervals.go), text
		// and binary, likewise.
		for _, oid := range []uint32{pgtype.IntervalOID, pgtype.TimeOID, pgtype.TimetzOID} {
			for _, format := range []int16{0, 1} {
				v := text
				if format == 1 {
					v = msg
				}
				f := Field{OID: oid, Format: format}
				if c, e := CompareValues(v, v, &f, true, nil); e == nil && c != 0 {
					t.Fatalf("%q (oid %d, format %d) is not equal to itself", v, oid, format)
				}
			}
		}
		if d, ok := decFromBinary(msg); ok && d.Special == 0 {
			back, ok := decFromBinary(d.AppendBinary(nil))
			if !ok {
				t.Fatalf("numeric %x: %s re-encodes as %x, which does not decode", msg, d.Text(), d.AppendBinary(nil))
			}
			if decCmp(back, d) != 0 || back.Scale != d.Scale {
				t.Fatalf("numeric %x: %s re-read as %s", msg, d.Text(), back.Text())
			}
		}
		if d, ok := DecFromText(string(text)); ok && d.Special == 0 {
			back, ok := DecFromText(d.Text())
			if !ok {
				t.Fatalf("numeric text %q: %s does not decode", text, d.Text())
			}
			if decCmp(back, d) != 0 {
				t.Fatalf("numeric text %q: %s re-read as %s", text, d.Text(), back.Text())
			}
		}
	})
}
