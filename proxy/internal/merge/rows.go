package merge

import (
	"fmt"

	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// Rows: the k-way merge of the shards' rows by the ORDER BY keys, with
// DISTINCT, DISTINCT ON, OFFSET, LIMIT and FETCH ... WITH TIES.

func (r rowMerge) rows() *pgwire.Error {
	m := r.run.Plan
	visible := len(r.run.fields) - m.Hidden
	keys, e := r.rowKeys(visible)
	if e != nil {
		return e
	}
	if r.run.Describe {
		if m.Hidden == 0 && r.run.Origins == nil {
			*r.run.Out = append(*r.run.Out, r.run.RawDesc...)
		} else {
			*r.run.Out = r.run.appendDesc(*r.run.Out, r.run.fields[:visible])
		}
	}
	skip, limit := m.Offset, m.Limit
	var last []byte
	var lastCols [][]byte
	ordered := len(keys) > 0
	ties := m.WithTies && ordered
	for limit != 0 || ties && r.run.Emitted > 0 {
		best, e := r.leastRow(keys)
		if e != nil {
			return e
		}
		if best < 0 {
			break
		}
		st := r.run.Sources[best]
		if limit == 0 {
			// FETCH ... WITH TIES: only rows that tie with the last one.
			c, e := r.run.compareRows(st.Cols(), lastCols, keys)
			if e != nil {
				return e
			}
			if c != 0 {
				break
			}
		}
		dup := false
		if last != nil {
			if dup, e = r.duplicate(st, lastCols, keys, visible); e != nil {
				return e
			}
		}
		if ordered || m.Distinct {
			last = append(last[:0], st.Row()...)
			lastCols, _ = pgwire.DataRowCols(lastCols[:0], last)
		}
		if !dup {
			if skip > 0 {
				skip--
			} else {
				if m.Hidden == 0 {
					*r.run.Out = append(*r.run.Out, st.Row()...)
				} else {
					*r.run.Out = pgwire.AppendDataRow(*r.run.Out, st.Cols()[:visible])
				}
				r.run.Emitted++
				if limit > 0 {
					limit--
				}
				if e := r.run.flushFull(); e != nil {
					return e
				}
			}
		}
		r.run.Live[best] = st.Next()
		if st.Failed() {
			return nil // reported by the caller
		}
	}
	return nil
}

// duplicate checks st's row against the last one read: in order (each
// shard sends its rows in this order: a row that sorts before the last
// one means the shards order differently from the merge, another
// collation: never answer wrongly), and a duplicate under DISTINCT or
// DISTINCT ON (the shards' first rows of one group meet here in order;
// the first is the answer's).
func (r rowMerge) duplicate(st Source, lastCols [][]byte, keys []sortCol, visible int) (bool, *pgwire.Error) {
	m := r.run.Plan
	if len(keys) > 0 {
		c, e := r.run.compareRows(st.Cols(), lastCols, keys)
		if e != nil {
			return false, e
		}
		if c < 0 {
			return false, r.run.outOfOrder(st)
		}
	}
	dup := false
	if m.Distinct {
		eq, e := r.equalCols(st.Cols(), lastCols, visible)
		if e != nil {
			return false, e
		}
		dup = eq
	}
	if m.DistinctOn > 0 && m.DistinctOn <= len(keys) {
		c, e := r.run.compareRows(st.Cols(), lastCols, keys[:m.DistinctOn])
		if e != nil {
			return false, e
		}
		dup = c == 0
	}
	return dup, nil
}

// rowKeys are the merge's ORDER BY keys on the per-shard columns (a
// hidden column follows the visible ones).
func (r rowMerge) rowKeys(visible int) ([]sortCol, *pgwire.Error) {
	if visible < 0 {
		return nil, pgwire.NewError(pgwire.CodeInternalError, "pgshard merge: a shard returned fewer columns than the merge needs")
	}
	keys := make([]sortCol, len(r.run.Plan.OrderBy))
	for i, k := range r.run.Plan.OrderBy {
		c := k.Column
		if k.Hidden {
			c += visible
		}
		if c < 0 || c >= len(r.run.fields) {
			return nil, pgwire.NewError(pgwire.CodeInternalError, fmt.Sprintf("pgshard merge: sort column %d is not in the result", c+1))
		}
		keys[i] = sortCol{col: c, SortKey: k}
	}
	return keys, nil
}

// leastRow returns the live source whose row comes first by keys (the
// first live one without keys), -1 when none is live.
func (r rowMerge) leastRow(keys []sortCol) (int, *pgwire.Error) {
	best := -1
	for i, st := range r.run.Sources {
		if !r.run.Live[i] {
			continue
		}
		if best < 0 {
			best = i
			if len(keys) == 0 {
				break
			}
			continue
		}
		c, e := r.run.compareRows(st.Cols(), r.run.Sources[best].Cols(), keys)
		if e != nil {
			return -1, e
		}
		if c < 0 {
			best = i
		}
	}
	return best, nil
}

// sortCol is a sort key on an absolute per-shard column.
type sortCol struct {
	route.SortKey
	col int
}

// compareRows orders two rows (split DataRows) by the keys (<0: a first).
func (r *Run) compareRows(a, b [][]byte, keys []sortCol) (int, *pgwire.Error) {
	for _, k := range keys {
		if k.col >= len(a) || k.col >= len(b) {
			return 0, pgwire.NewError(pgwire.CodeInternalError, "pgshard merge: shards returned rows of different widths")
		}
		c, e := r.compareNullable(a[k.col], b[k.col], k.col, k.SortKey)
		if e != nil || c != 0 {
			return c, e
		}
	}
	return 0, nil
}

// compareNullable orders two values of column col under one sort key.
func (r *Run) compareNullable(av, bv []byte, col int, k route.SortKey) (int, *pgwire.Error) {
	switch {
	case av == nil && bv == nil:
		return 0, nil
	case av == nil:
		if k.NullsFirst {
			return -1, nil
		}
		return 1, nil
	case bv == nil:
		if k.NullsFirst {
			return 1, nil
		}
		return -1, nil
	}
	c, e := pgvalue.CompareValues(av, bv, &r.fields[col], r.Bytewise || k.Bytewise, r.Times)
	if e != nil {
		return 0, e
	}
	if k.Desc {
		c = -c
	}
	return c, nil
}

// equalCols reports whether two rows are equal (as Postgres's equality
// for each type: DISTINCT) in their first n columns.
func (r rowMerge) equalCols(a, b [][]byte, n int) (bool, *pgwire.Error) {
	for i := 0; i < n; i++ {
		switch {
		case a[i] == nil && b[i] == nil:
			continue
		case a[i] == nil || b[i] == nil:
			return false, nil
		}
		c, e := pgvalue.CompareValues(a[i], b[i], &r.run.fields[i], r.run.Bytewise, r.run.Times)
		if e != nil {
			return false, e
		}
		if c != 0 {
			return false, nil
		}
	}
	return true, nil
}

func (r *Run) outOfOrder(st Source) *pgwire.Error {
	return &pgwire.Error{Code: pgwire.CodeInternalError,
		Message: fmt.Sprintf("pgshard merge: shard %q returned rows in an order the merge does not reproduce; the statement was stopped rather than answered wrongly", st.Shard()),
		Hint:    `The shards sort text by a collation other than C: write COLLATE "C" in ORDER BY, or add a key so that one shard answers.`}
}
