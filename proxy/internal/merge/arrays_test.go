package merge_test

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/proxy/internal/merge"
	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// one is a Source of one row of one column (nil: NULL).
type one struct {
	v    []byte
	done bool
	row  []byte
	cols [][]byte
}

func (s *one) Row() []byte    { return s.row }
func (s *one) Cols() [][]byte { return s.cols }
func (s *one) Failed() bool   { return false }
func (s *one) Shard() string  { return "shard" }
func (s *one) Next() bool {
	if s.done {
		return false
	}
	s.done = true
	s.row = pgwire.AppendDataRow(nil, [][]byte{s.v})
	s.cols, _ = pgwire.DataRowCols(nil, s.row)
	return true
}

// binArray encodes a one-dimensional array in binary format (nil
// elements are NULLs).
func binArray(elem uint32, vals ...[]byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, 1)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, elem)
	b = binary.BigEndian.AppendUint32(b, uint32(len(vals)))
	b = binary.BigEndian.AppendUint32(b, 1)
	for _, v := range vals {
		if v == nil {
			b = binary.BigEndian.AppendUint32(b, math.MaxUint32)
			continue
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b
}

func texts(vs ...string) [][]byte {
	var out [][]byte
	for _, v := range vs {
		if v == "NULL" {
			out = append(out, nil)
		} else {
			out = append(out, []byte(v))
		}
	}
	return out
}

func f8(v float64) []byte { return binary.BigEndian.AppendUint64(nil, math.Float64bits(v)) }
func i4(v int32) []byte   { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

// arrayRun merges one group whose only output is out, from shards each
// sending one array (nil: NULL, no rows) of arrOID; it returns the value
// answered ("NULL" for NULL).
func arrayRun(t *testing.T, out route.Output, bytewise bool, arrOID uint32, shards ...[]byte) (string, *pgwire.Error) {
	t.Helper()
	plan := &route.Merge{Width: 1, Limit: -1, Groups: &route.GroupMerge{Outputs: []route.Output{out}, Visible: 1, DigitsColumn: -1}}
	desc := pgvalue.AppendRowDesc(nil, []pgvalue.Field{{Name: out.Name, OID: arrOID, Typlen: -1, Typmod: -1, Format: 1}})
	var buf []byte
	r := &merge.Run{Plan: plan, RawDesc: desc, Out: &buf, GroupLimit: 10, Bytewise: bytewise}
	for _, v := range shards {
		s := &one{v: v}
		r.Sources = append(r.Sources, s)
		r.Live = append(r.Live, s.Next())
	}
	if e := r.Answer(); e != nil {
		return "", e
	}
	if len(buf) == 0 || buf[0] != 'D' {
		t.Fatalf("answer %q, want one DataRow", buf)
	}
	cols, err := pgwire.DataRowCols(nil, buf)
	if err != nil || len(cols) != 1 {
		t.Fatalf("answer %q: %v", buf, err)
	}
	if cols[0] == nil {
		return "NULL", nil
	}
	return string(cols[0]), nil
}

// TestMergeStringAgg: string_agg(x, sep ORDER BY x) from the shards'
// arrays: the union in order (ties across shards kept), NULLs skipped,
// DESC, DISTINCT, bpchar read as text, NULL without values; text outside
// the C collation, and values that are not text, are refused (0A000).
func TestMergeStringAgg(t *testing.T) {
	agg := route.Output{Agg: route.AggStringAgg, Name: "string_agg", Sep: ","}
	desc := agg
	desc.Desc, desc.Sep = true, " | "
	dist := agg
	dist.Distinct = true
	for _, tc := range []struct {
		name     string
		out      route.Output
		bytewise bool
		elem     uint32
		shards   [][]byte
		want     string
		code     string
	}{
		{"union in order, ties and NULLs", agg, true, pgtype.TextOID,
			[][]byte{binArray(pgtype.TextOID, texts("b", "d", "NULL")...), nil, binArray(pgtype.TextOID, texts("", "a", "b", "B")...)}, ",B,a,b,b,d", ""},
		{"descending", desc, true, pgtype.TextOID,
			[][]byte{binArray(pgtype.TextOID, texts("a", "c")...), binArray(pgtype.TextOID, texts("b")...)}, "c | b | a", ""},
		{"distinct", dist, true, pgtype.TextOID,
			[][]byte{binArray(pgtype.TextOID, texts("a", "b")...), binArray(pgtype.TextOID, texts("b", "c")...)}, "a,b,c", ""},
		{"bpchar without trailing blanks", agg, true, pgtype.BPCharOID,
			[][]byte{binArray(pgtype.BPCharOID, texts("b  ")...), binArray(pgtype.BPCharOID, texts("a ")...)}, "a,b", ""},
		{"no values", agg, true, pgtype.TextOID,
			[][]byte{nil, binArray(pgtype.TextOID, texts("NULL")...)}, "NULL", ""},
		{"COLLATE \"C\" in a non-C database", route.Output{Agg: route.AggStringAgg, Sep: "-", Bytewise: true}, false, pgtype.TextOID,
			[][]byte{binArray(pgtype.TextOID, texts("b")...), binArray(pgtype.TextOID, texts("a")...)}, "a-b", ""},
		{"text in a non-C database refused", agg, false, pgtype.TextOID,
			[][]byte{binArray(pgtype.TextOID, texts("b")...), binArray(pgtype.TextOID, texts("a")...)}, "", pgwire.CodeFeatureNotSupported},
		{"integers refused", agg, true, pgtype.Int4OID,
			[][]byte{binArray(pgtype.Int4OID, i4(1)), binArray(pgtype.Int4OID, i4(2))}, "", pgwire.CodeFeatureNotSupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arr := uint32(1009) // text[]; the field's type does not matter to the merge
			got, e := arrayRun(t, tc.out, tc.bytewise, arr, tc.shards...)
			switch {
			case tc.code != "":
				if e == nil || e.Code != tc.code {
					t.Fatalf("got %q, %v; want SQLSTATE %s", got, e, tc.code)
				}
			case e != nil:
				t.Fatal(e)
			case got != tc.want:
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMergeCountDistinct: count(DISTINCT x) from the shards' arrays of
// distinct values: a value on several shards counts once, values equal
// as Postgres compares them count once (-0 = 0, NaN = NaN), NULLs never,
// no values count 0; a type the merge cannot compare is refused.
func TestMergeCountDistinct(t *testing.T) {
	agg := route.Output{Agg: route.AggCountDistinct, Name: "count"}
	for _, tc := range []struct {
		name     string
		bytewise bool
		shards   [][]byte
		want     string
		code     string
	}{
		{"integers on several shards", true, [][]byte{binArray(pgtype.Int4OID, i4(1), i4(2), nil), binArray(pgtype.Int4OID, i4(2), i4(3)), nil}, "3", ""},
		{"floats as Postgres compares them", true, [][]byte{binArray(pgtype.Float8OID, f8(math.Copysign(0, -1)), f8(math.NaN())), binArray(pgtype.Float8OID, f8(0), f8(math.NaN()), f8(1.5))}, "3", ""},
		{"text", true, [][]byte{binArray(pgtype.TextOID, texts("a", "b")...), binArray(pgtype.TextOID, texts("B", "b")...)}, "3", ""},
		{"no values", true, [][]byte{nil, nil}, "0", ""},
		{"text in a non-C database refused", false, [][]byte{binArray(pgtype.TextOID, texts("a")...), binArray(pgtype.TextOID, texts("b")...)}, "", pgwire.CodeFeatureNotSupported},
		{"jsonb refused", true, [][]byte{binArray(pgtype.JSONBOID, []byte("\x01{}")), binArray(pgtype.JSONBOID, []byte("\x01[]"))}, "", pgwire.CodeFeatureNotSupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, e := arrayRun(t, agg, tc.bytewise, 1007, tc.shards...)
			switch {
			case tc.code != "":
				if e == nil || e.Code != tc.code {
					t.Fatalf("got %q, %v; want SQLSTATE %s", got, e, tc.code)
				}
			case e != nil:
				t.Fatal(e)
			case got != tc.want:
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	// A shard's value that is not a one-dimensional array is an error,
	// never a count.
	_, e := arrayRun(t, agg, true, 1007, []byte("{1,2}"))
	if e == nil || e.Code != pgwire.CodeInternalError || !strings.Contains(e.Message, "not the array") {
		t.Fatalf("got %v, want XX000: not the array the merge expects", e)
	}
}
