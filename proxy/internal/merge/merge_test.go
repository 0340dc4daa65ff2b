package merge_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/proxy/internal/merge"
	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// rows is a Source over int8 values in text, one column per row.
type rows struct {
	name string
	vals []string
	i    int
	row  []byte
	cols [][]byte
}

func (s *rows) Row() []byte    { return s.row }
func (s *rows) Cols() [][]byte { return s.cols }
func (s *rows) Failed() bool   { return false }
func (s *rows) Shard() string  { return s.name }
func (s *rows) Next() bool {
	if s.i >= len(s.vals) {
		return false
	}
	s.row = pgwire.AppendDataRow(nil, [][]byte{[]byte(s.vals[s.i])})
	s.i++
	var err error
	s.cols, err = pgwire.DataRowCols(s.cols[:0], s.row)
	return err == nil
}

// run merges the shards' rows by plan and returns the rows answered, one
// value each, joined by commas.
func run(t *testing.T, plan *route.Merge, flush func() error, shards ...[]string) (string, *pgwire.Error) {
	t.Helper()
	desc := pgvalue.AppendRowDesc(nil, []pgvalue.Field{{Name: "v", OID: pgtype.Int8OID, Typlen: 8, Typmod: -1}})
	var out []byte
	r := &merge.Run{Plan: plan, RawDesc: desc, Out: &out, Flush: flush, GroupLimit: 100}
	for i, vals := range shards {
		s := &rows{name: "shard" + strconv.Itoa(i), vals: vals}
		r.Sources = append(r.Sources, s)
		r.Live = append(r.Live, s.Next())
	}
	e := r.Answer()
	var got []string
	for len(out) > 0 {
		n := 1 + int(uint32(out[1])<<24|uint32(out[2])<<16|uint32(out[3])<<8|uint32(out[4]))
		if out[0] != 'D' {
			t.Fatalf("answer holds a %q message, want only DataRows", out[0])
		}
		cols, err := pgwire.DataRowCols(nil, out[:n])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(cols[0]))
		out = out[n:]
	}
	if e == nil && r.Emitted != int64(len(got)) {
		t.Fatalf("Emitted %d, %d rows answered", r.Emitted, len(got))
	}
	return strings.Join(got, ","), e
}

// TestMergeOrderedRows: a k-way merge of int8 rows (compared as numbers,
// not text) with OFFSET, LIMIT, DISTINCT and WITH TIES.
func TestMergeOrderedRows(t *testing.T) {
	asc := []route.SortKey{{Column: 0}}
	for _, tc := range []struct {
		name string
		plan route.Merge
		want string
	}{
		{"every row, in order", route.Merge{Width: 1, OrderBy: asc, Limit: -1, Offset: 0}, "1,2,2,3,9,10"},
		{"OFFSET 1 LIMIT 3", route.Merge{Width: 1, OrderBy: asc, Limit: 3, Offset: 1}, "2,2,3"},
		{"DISTINCT", route.Merge{Width: 1, OrderBy: asc, Distinct: true, Limit: -1}, "1,2,3,9,10"},
		{"LIMIT 2 WITH TIES", route.Merge{Width: 1, OrderBy: asc, Limit: 2, WithTies: true}, "1,2,2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, e := run(t, &tc.plan, nil, []string{"1", "2", "10"}, []string{"2", "3", "9"})
			if e != nil {
				t.Fatal(e)
			}
			if got != tc.want {
				t.Fatalf("merged %s, want %s", got, tc.want)
			}
		})
	}
}

// A shard whose rows come out of the merge's order stops the statement
// with an error naming it, never a wrong answer.
func TestMergeRefusesRowsOutOfOrder(t *testing.T) {
	plan := &route.Merge{Width: 1, OrderBy: []route.SortKey{{Column: 0}}, Limit: -1}
	_, e := run(t, plan, nil, []string{"1", "9", "4"}, []string{"2", "3"})
	if e == nil || e.Code != pgwire.CodeInternalError || !strings.Contains(e.Message, `shard "shard0"`) {
		t.Fatalf("got %v, want XX000 naming shard0", e)
	}
}

// A client write that fails ends the merge with ErrStop and the error.
func TestMergeStopsWhenTheClientGoesAway(t *testing.T) {
	var big []string
	for i := range 10000 {
		big = append(big, strconv.Itoa(100000+i))
	}
	gone := errors.New("client gone")
	plan := &route.Merge{Width: 1, OrderBy: []route.SortKey{{Column: 0}}, Limit: -1}
	_, e := run(t, plan, func() error { return gone }, big, big)
	if e != merge.ErrStop {
		t.Fatalf("got %v, want ErrStop", e)
	}
}
