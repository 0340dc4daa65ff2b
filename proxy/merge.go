package proxy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// The merge: route builds the plan (route.Merge), this file executes it
// over the shards' answers (fanout.go reads them) and writes the client's
// RowDescription, rows and command tag. Values compare and encode as
// package pgvalue says.
//
//	Rows:   shard0 ─┐
//	        shard1 ─┼─ k-way merge by OrderBy ─ [dedup] ─ OFFSET ─ LIMIT ─▶ client
//	        shard2 ─┘  (one row per shard in memory)
//
//	Groups: shard0 ─┐  rows sorted by the group key
//	        shard1 ─┼─ equal keys combined ─ HAVING ─ [sort, bounded] ─ OFFSET ─ LIMIT ─▶ client
//	        shard2 ─┘  (one group in memory; MergeGroupLimit when sorted)

// mergeRun executes one merge.
type mergeRun struct {
	s       *session
	m       *route.Merge
	streams []*fanStream
	live    []bool
	fields  []pgvalue.Field // the per-shard columns (the first shard's RowDescription)
	rawDesc []byte
	// client: the client's result format codes (Bind), none = text.
	client   []int16
	describe bool // send a RowDescription (simple query, or a portal Describe)
	bytewise bool // text orders by bytes on the shards (C collation)
	limit    int  // MergeGroupLimit
	emitted  int64
	// params, formats, oids are the client's Bind parameters (HAVING $n).
	params  [][]byte
	formats []int16
	oids    []uint32
	// ioErr is the client write that failed (run returned errStop).
	ioErr error
}

// errStop ends a merge whose client went away (mergeRun.ioErr).
var errStop = &pgwire.Error{Code: pgwire.CodeConnectionFailure, Message: "the client connection failed"}

// clientFormat is the format the client asked for column i.
func (r *mergeRun) clientFormat(i int) int16 {
	switch len(r.client) {
	case 0:
		return 0
	case 1:
		return r.client[0]
	}
	if i < len(r.client) {
		return r.client[i]
	}
	return 0
}

// shardFormats are the result formats to ask every shard for: the
// client's on the client's columns, binary on the proxy's own (hidden
// columns, partial aggregates, group keys). width is the per-shard
// column count, -1 when unknown (a * in the select list).
func shardFormats(m *route.Merge, client []int16) []int16 {
	fmtOf := func(i int) int16 {
		switch len(client) {
		case 0:
			return 0
		case 1:
			return client[0]
		}
		if i < len(client) {
			return client[i]
		}
		return 0
	}
	if g := m.Groups; g != nil {
		out := make([]int16, m.Width)
		for i := range out {
			out[i] = 1
		}
		for j := 0; j < g.Visible; j++ {
			o := g.Outputs[j]
			if o.Cast == route.CastNone && (o.Agg == route.AggNone || o.Agg == route.AggMin || o.Agg == route.AggMax) {
				out[o.Column] = fmtOf(j)
			}
		}
		return out
	}
	if m.Hidden == 0 {
		return client
	}
	if m.Width < 0 {
		if len(client) > 1 {
			out := slices.Clone(client)
			for i := 0; i < m.Hidden; i++ {
				out = append(out, 1)
			}
			return out
		}
		return client // one format for every column, the hidden ones too
	}
	out := make([]int16, m.Width)
	for i := range out {
		if i < m.Width-m.Hidden {
			out[i] = fmtOf(i)
		} else {
			out[i] = 1
		}
	}
	return out
}

// run writes the merged answer (RowDescription, rows) to s.out and returns
// the number of rows, or the error that ends it.
func (r *mergeRun) run() *pgwire.Error {
	fs, err := pgvalue.ParseRowDesc(r.rawDesc)
	if err != nil {
		return pgwire.NewError(pgwire.CodeProtocolViolation, err.Error())
	}
	r.fields = fs
	if r.m.Groups != nil {
		return r.groups()
	}
	return r.rows()
}

// description is the RowDescription the merge would answer with (for an
// error that ends the statement before its rows).
func (r *mergeRun) description() ([]byte, *pgwire.Error) {
	fs, err := pgvalue.ParseRowDesc(r.rawDesc)
	if err != nil {
		return nil, pgwire.NewError(pgwire.CodeProtocolViolation, err.Error())
	}
	r.fields = fs
	if r.m.Groups != nil {
		if len(r.fields) != r.m.Width {
			return nil, pgwire.NewError(pgwire.CodeInternalError, "pgshard merge: a shard returned another number of columns than the merge expects")
		}
		out, _, e := r.groupFields()
		if e != nil {
			return nil, e
		}
		return pgvalue.AppendRowDesc(nil, out), nil
	}
	visible := len(r.fields) - r.m.Hidden
	switch {
	case visible < 0:
		return nil, pgwire.NewError(pgwire.CodeInternalError, "pgshard merge: a shard returned fewer columns than the merge needs")
	case r.m.Hidden == 0:
		return r.rawDesc, nil
	}
	return pgvalue.AppendRowDesc(nil, r.fields[:visible]), nil
}

// ---- rows ----

func (r *mergeRun) rows() *pgwire.Error {
	s, m := r.s, r.m
	visible := len(r.fields) - m.Hidden
	if visible < 0 {
		return pgwire.NewError(pgwire.CodeInternalError, "pgshard merge: a shard returned fewer columns than the merge needs")
	}
	keys := make([]sortCol, len(m.OrderBy))
	for i, k := range m.OrderBy {
		c := k.Column
		if k.Hidden {
			c += visible
		}
		if c < 0 || c >= len(r.fields) {
			return pgwire.NewError(pgwire.CodeInternalError, fmt.Sprintf("pgshard merge: sort column %d is not in the result", c+1))
		}
		keys[i] = sortCol{col: c, SortKey: k}
	}
	if r.describe {
		if m.Hidden == 0 {
			s.out = append(s.out, r.rawDesc...)
		} else {
			s.out = pgvalue.AppendRowDesc(s.out, r.fields[:visible])
		}
	}
	skip, limit := m.Offset, m.Limit
	var last []byte
	var lastCols [][]byte
	ordered := len(keys) > 0
	ties := m.WithTies && ordered
	for limit != 0 || ties && r.emitted > 0 {
		best := -1
		for i, st := range r.streams {
			if !r.live[i] {
				continue
			}
			if best < 0 {
				best = i
				if !ordered {
					break
				}
				continue
			}
			c, e := r.compareRows(st.cols, r.streams[best].cols, keys)
			if e != nil {
				return e
			}
			if c < 0 {
				best = i
			}
		}
		if best < 0 {
			break
		}
		st := r.streams[best]
		if limit == 0 {
			// FETCH ... WITH TIES: only rows that tie with the last one.
			c, e := r.compareRows(st.cols, lastCols, keys)
			if e != nil {
				return e
			}
			if c != 0 {
				break
			}
		}
		dup := false
		if last != nil {
			if ordered {
				// Each shard sends its rows in this order: a row that sorts
				// before the last one means the shards order differently
				// from the merge (another collation): never answer wrongly.
				c, e := r.compareRows(st.cols, lastCols, keys)
				if e != nil {
					return e
				}
				if c < 0 {
					return r.outOfOrder(st)
				}
			}
			if m.Distinct {
				eq, e := r.equalCols(st.cols, lastCols, visible)
				if e != nil {
					return e
				}
				dup = eq
			}
			if m.DistinctOn > 0 && m.DistinctOn <= len(keys) {
				// DISTINCT ON: the shards' first rows of one group meet
				// here in order; the first is the answer's.
				c, e := r.compareRows(st.cols, lastCols, keys[:m.DistinctOn])
				if e != nil {
					return e
				}
				dup = c == 0
			}
		}
		if ordered || m.Distinct {
			last = append(last[:0], st.row...)
			lastCols, _ = pgwire.DataRowCols(lastCols[:0], last)
		}
		if !dup {
			if skip > 0 {
				skip--
			} else {
				if m.Hidden == 0 {
					s.out = append(s.out, st.row...)
				} else {
					s.out = pgwire.AppendDataRow(s.out, st.cols[:visible])
				}
				r.emitted++
				if limit > 0 {
					limit--
				}
				if len(s.out) > 64*1024 {
					if err := s.flush(); err != nil {
						r.ioErr = err
						return errStop
					}
				}
			}
		}
		r.live[best] = st.nextRow()
		if st.failed() {
			return nil // reported by the caller
		}
	}
	return nil
}

// sortCol is a sort key on an absolute per-shard column.
type sortCol struct {
	route.SortKey
	col int
}

// compareRows orders two rows (split DataRows) by the keys (<0: a first).
func (r *mergeRun) compareRows(a, b [][]byte, keys []sortCol) (int, *pgwire.Error) {
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
func (r *mergeRun) compareNullable(av, bv []byte, col int, k route.SortKey) (int, *pgwire.Error) {
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
	c, e := pgvalue.CompareValues(av, bv, &r.fields[col], r.bytewise || k.Bytewise)
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
func (r *mergeRun) equalCols(a, b [][]byte, n int) (bool, *pgwire.Error) {
	for i := 0; i < n; i++ {
		switch {
		case a[i] == nil && b[i] == nil:
			continue
		case a[i] == nil || b[i] == nil:
			return false, nil
		}
		c, e := pgvalue.CompareValues(a[i], b[i], &r.fields[i], r.bytewise)
		if e != nil {
			return false, e
		}
		if c != 0 {
			return false, nil
		}
	}
	return true, nil
}

func (r *mergeRun) outOfOrder(st *fanStream) *pgwire.Error {
	return &pgwire.Error{Code: pgwire.CodeInternalError,
		Message: fmt.Sprintf("pgshard merge: shard %q returned rows in an order the merge does not reproduce; the statement was stopped rather than answered wrongly", r.s.srv.shardName(st.shard)),
		Hint:    `The shards sort text by a collation other than C: write COLLATE "C" in ORDER BY, or add a key so that one shard answers.`}
}

// ---- groups ----

// outVal is one merged column of a group.
type outVal struct {
	null bool
	raw  []byte      // the value in the client's format (AggNone/min/max: a shard's bytes)
	n    pgvalue.Num // computed columns: the number
	comp bool        // computed (n is set)
}

// acc accumulates one output over a group's shard rows.
type acc struct {
	have  bool
	raw   []byte
	sum   pgvalue.Num
	count int64
}

func (r *mergeRun) groups() *pgwire.Error {
	s, m := r.s, r.m
	g := m.Groups
	if len(r.fields) != m.Width {
		return pgwire.NewError(pgwire.CodeInternalError, fmt.Sprintf("pgshard merge: a shard returned %d columns, the merge expects %d", len(r.fields), m.Width))
	}
	out, finals, e := r.groupFields()
	if e != nil {
		return e
	}
	if r.describe {
		s.out = pgvalue.AppendRowDesc(s.out, out)
	}
	efd := 1
	keys := make([]sortCol, len(g.Keys))
	for i, k := range g.Keys {
		keys[i] = sortCol{col: k.Column, SortKey: k}
	}
	accs := make([]acc, len(g.Outputs))
	var buffered [][]outVal
	skip, limit := m.Offset, m.Limit
	// lastOut is the last group emitted (FETCH ... WITH TIES: the groups
	// after the limit that tie with it on every ORDER BY term follow).
	var lastOut []outVal
	var lastKey []byte
	var lastKeyCols [][]byte
	first := true
	members := make([]int, 0, len(r.streams))
	for {
		members, e = r.leastGroup(members[:0], keys)
		if e != nil {
			return e
		}
		if len(members) == 0 {
			break
		}
		lead := r.streams[members[0]]
		if first && g.DigitsColumn >= 0 {
			if v := lead.cols[g.DigitsColumn]; v != nil {
				if d, err := strconv.Atoi(string(v)); err == nil {
					efd = d
				}
			}
		}
		if len(keys) > 0 {
			if lastKey != nil {
				// Keys must strictly increase: a key met again means the
				// shards sort differently from the merge.
				c, e := r.compareRows(lead.cols, lastKeyCols, keys)
				if e != nil {
					return e
				}
				if c <= 0 {
					return r.outOfOrder(lead)
				}
			}
			lastKey = append(lastKey[:0], lead.row...)
			lastKeyCols, _ = pgwire.DataRowCols(lastKeyCols[:0], lastKey)
		}
		first = false
		clear(accs)
		for _, i := range members {
			if e := r.accumulate(accs, r.streams[i].cols); e != nil {
				return e
			}
		}
		vals, e := r.finish(accs, finals, out, efd)
		if e != nil {
			return e
		}
		for _, i := range members {
			st := r.streams[i]
			r.live[i] = st.nextRow()
			if st.failed() {
				return nil
			}
		}
		if g.Having != nil {
			ok, e := r.eval(g.Having, vals, finals)
			if e != nil {
				return e
			}
			if ok != 1 {
				continue
			}
		}
		if g.SortAfter {
			if len(buffered) >= r.limit {
				return &pgwire.Error{Code: pgwire.CodeProgramLimitExceeded,
					Message: fmt.Sprintf("a GROUP BY merged across shards produced more than %d groups to sort (proxy.merge_group_limit)", r.limit),
					Hint:    "Order by the GROUP BY columns (then groups stream without buffering), add a LIMIT-free key predicate, or raise proxy.merge_group_limit."}
			}
			buffered = append(buffered, vals)
			continue
		}
		if limit == 0 {
			// FETCH ... WITH TIES: the groups that tie with the last one
			// (they arrive together, in key order); else drain: the
			// shards' rows are read to the end.
			if m.WithTies && lastOut != nil {
				tie, e := r.tie(vals, lastOut, finals)
				if e != nil {
					return e
				}
				if tie {
					r.emitGroup(vals, g.Visible)
				} else {
					lastOut = nil
				}
			}
			continue
		}
		if skip > 0 {
			skip--
			continue
		}
		r.emitGroup(vals, g.Visible)
		lastOut = vals
		if limit > 0 {
			limit--
		}
		if len(s.out) > 64*1024 {
			if err := s.flush(); err != nil {
				r.ioErr = err
				return errStop
			}
		}
	}
	if g.SortAfter {
		return r.emitSorted(buffered, finals, skip, limit, lastOut)
	}
	return nil
}

// leastGroup returns in members the live shards whose current row has the
// least group key (every live shard when keys is empty).
func (r *mergeRun) leastGroup(members []int, keys []sortCol) ([]int, *pgwire.Error) {
	for i, st := range r.streams {
		if !r.live[i] {
			continue
		}
		if len(members) == 0 {
			members = append(members, i)
			continue
		}
		c, e := r.compareRows(st.cols, r.streams[members[0]].cols, keys)
		if e != nil {
			return members, e
		}
		switch {
		case c < 0:
			members = append(members[:0], i)
		case c == 0:
			members = append(members, i)
		}
	}
	return members, nil
}

// tie reports whether two merged groups are equal on every ORDER BY term
// (FETCH ... WITH TIES).
func (r *mergeRun) tie(a, b []outVal, finals []pgvalue.Field) (bool, *pgwire.Error) {
	for _, k := range r.m.Groups.OrderBy {
		c, e := r.compareOut(a[k.Column], b[k.Column], k.Column, finals, k)
		if e != nil || c != 0 {
			return false, e
		}
	}
	return true, nil
}

// emitSorted sorts the groups a GROUP BY ordered by something other than
// its keys buffered, and emits them after OFFSET skip, at most limit
// (negative: all) and the groups tying with the last (WITH TIES); lastOut
// is the last group emitted before.
func (r *mergeRun) emitSorted(buffered [][]outVal, finals []pgvalue.Field, skip, limit int64, lastOut []outVal) *pgwire.Error {
	m, g := r.m, r.m.Groups
	var sortErr *pgwire.Error
	slices.SortStableFunc(buffered, func(a, b []outVal) int {
		for _, k := range g.OrderBy {
			c, e := r.compareOut(a[k.Column], b[k.Column], k.Column, finals, k)
			if e != nil && sortErr == nil {
				sortErr = e
			}
			if c != 0 {
				return c
			}
		}
		return 0
	})
	if sortErr != nil {
		return sortErr
	}
	for _, vals := range buffered {
		if limit == 0 {
			if !m.WithTies || lastOut == nil {
				break
			}
			tie, e := r.tie(vals, lastOut, finals)
			if e != nil {
				return e
			}
			if !tie {
				break
			}
			r.emitGroup(vals, g.Visible)
			continue
		}
		if skip > 0 {
			skip--
			continue
		}
		r.emitGroup(vals, g.Visible)
		lastOut = vals
		if limit > 0 {
			limit--
		}
	}
	return nil
}

// groupFields returns the client's RowDescription fields for the merged
// columns, and every output's field (its type as the merge computes it).
func (r *mergeRun) groupFields() ([]pgvalue.Field, []pgvalue.Field, *pgwire.Error) {
	g := r.m.Groups
	finals := make([]pgvalue.Field, len(g.Outputs))
	for j, o := range g.Outputs {
		f := r.fields[o.Column]
		computed := false
		switch o.Agg {
		case route.AggSum:
			switch f.OID {
			case pgtype.Int8OID, pgtype.NumericOID, pgtype.Float4OID, pgtype.Float8OID:
			default:
				return nil, nil, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
					Message: fmt.Sprintf("pgshard cannot add up column %q of every shard (type oid %d): it merges sums of integers, numeric and floats", f.Name, f.OID),
					Hint:    "Add a key so that one shard answers."}
			}
			computed = true
		case route.AggAvg:
			switch f.OID {
			case pgtype.Int8OID, pgtype.NumericOID:
				f.OID = pgtype.NumericOID
			case pgtype.Float8OID:
			default:
				return nil, nil, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
					Message: fmt.Sprintf("pgshard cannot merge avg of %q (its sum has type oid %d): it merges avg of integers, numeric and double precision", f.Name, f.OID),
					Hint:    "Cast the argument (avg(x::float8)), or add a key so that one shard answers."}
			}
			computed = true
		}
		if o.Cast != route.CastNone {
			switch f.OID {
			case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.NumericOID, pgtype.Float4OID, pgtype.Float8OID:
			default:
				return nil, nil, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
					Message: fmt.Sprintf("pgshard cannot cast the merged column %q (type oid %d) to %s", f.Name, f.OID, o.Cast)}
			}
			f.OID = castOID(o.Cast)
			computed = true
		}
		if computed {
			f.Typlen, f.Typmod, f.Table, f.Attnum = pgvalue.TypeLen(f.OID), -1, 0, 0
		}
		if j < g.Visible {
			f.Format = r.clientFormat(j)
		}
		finals[j] = f
	}
	return finals[:g.Visible], finals, nil
}

func castOID(c route.Cast) uint32 {
	switch c {
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
	}
	return pgtype.TextOID
}

// accumulate adds one shard's row of a group.
func (r *mergeRun) accumulate(accs []acc, cols [][]byte) *pgwire.Error {
	for j, o := range r.m.Groups.Outputs {
		a := &accs[j]
		v := cols[o.Column]
		f := &r.fields[o.Column]
		switch o.Agg {
		case route.AggNone:
			if !a.have {
				a.raw, a.have = slices.Clone(v), true
			}
		case route.AggMin, route.AggMax:
			if v == nil {
				continue
			}
			if !a.have {
				a.raw, a.have = slices.Clone(v), true
				continue
			}
			c, e := pgvalue.CompareValues(v, a.raw, f, r.bytewise || o.Bytewise)
			if e != nil {
				return e
			}
			if o.Agg == route.AggMin && c < 0 || o.Agg == route.AggMax && c > 0 {
				a.raw = append(a.raw[:0], v...)
			}
		case route.AggSum, route.AggAvg:
			if o.Agg == route.AggAvg {
				cv := cols[o.Column+1]
				if cv != nil {
					n, e := pgvalue.DecodeNum(cv, r.fields[o.Column+1].OID, r.fields[o.Column+1].Format)
					if e != nil {
						return e
					}
					a.count += n.Int
				}
			}
			if v == nil {
				continue
			}
			n, e := pgvalue.DecodeNum(v, f.OID, f.Format)
			if e != nil {
				return e
			}
			if !a.have {
				a.sum, a.have = n, true
				continue
			}
			if a.sum, e = pgvalue.NumAdd(a.sum, n); e != nil {
				return e
			}
		}
	}
	return nil
}

// finish computes a group's merged columns.
func (r *mergeRun) finish(accs []acc, finals []pgvalue.Field, out []pgvalue.Field, efd int) ([]outVal, *pgwire.Error) {
	g := r.m.Groups
	vals := make([]outVal, len(g.Outputs))
	for j, o := range g.Outputs {
		a := &accs[j]
		format := finals[j].Format
		var n pgvalue.Num
		switch o.Agg {
		case route.AggNone, route.AggMin, route.AggMax:
			if !a.have || a.raw == nil {
				vals[j] = outVal{null: true}
				continue
			}
			if o.Cast == route.CastNone {
				vals[j] = outVal{raw: a.raw}
				continue
			}
			f := &r.fields[o.Column]
			var e *pgwire.Error
			if n, e = pgvalue.DecodeNum(a.raw, f.OID, f.Format); e != nil {
				return nil, e
			}
		case route.AggSum:
			if !a.have {
				vals[j] = outVal{null: true}
				continue
			}
			n = a.sum
		case route.AggAvg:
			var e *pgwire.Error
			if n, e = pgvalue.NumAvg(a.sum, a.count); e != nil {
				return nil, e
			}
			if n.Kind == pgvalue.NumNull {
				vals[j] = outVal{null: true}
				continue
			}
		}
		n, text, e := pgvalue.NumCast(n, castTarget(o.Cast), efd)
		if e != nil {
			return nil, e
		}
		if text != nil {
			vals[j] = outVal{raw: text, n: n, comp: true}
			continue
		}
		vals[j] = outVal{raw: pgvalue.AppendNum(nil, n, format, efd), n: n, comp: true}
	}
	return vals, nil
}

func (r *mergeRun) emitGroup(vals []outVal, visible int) {
	s := r.s
	row := make([][]byte, visible)
	for j := 0; j < visible; j++ {
		if !vals[j].null {
			row[j] = vals[j].raw
			if row[j] == nil {
				row[j] = []byte{}
			}
		}
	}
	s.out = pgwire.AppendDataRow(s.out, row)
	r.emitted++
}

// compareOut orders two merged values of output j.
func (r *mergeRun) compareOut(a, b outVal, j int, finals []pgvalue.Field, k route.SortKey) (int, *pgwire.Error) {
	switch {
	case a.null && b.null:
		return 0, nil
	case a.null:
		if k.NullsFirst {
			return -1, nil
		}
		return 1, nil
	case b.null:
		if k.NullsFirst {
			return 1, nil
		}
		return -1, nil
	}
	var c int
	if a.comp && b.comp && a.n.Kind != pgvalue.NumNull && b.n.Kind != pgvalue.NumNull && finals[j].OID != pgtype.TextOID {
		c = pgvalue.CmpNum(a.n, b.n)
	} else {
		var e *pgwire.Error
		bytewise := r.bytewise || k.Bytewise || r.m.Groups.Outputs[j].Bytewise
		if c, e = pgvalue.CompareValues(a.raw, b.raw, &finals[j], bytewise); e != nil {
			return 0, e
		}
	}
	if k.Desc {
		c = -c
	}
	return c, nil
}

// eval evaluates a HAVING condition: 1 true, 0 false, -1 NULL.
func (r *mergeRun) eval(c *route.Cond, vals []outVal, finals []pgvalue.Field) (int, *pgwire.Error) {
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

func (r *mergeRun) operand(o route.Operand, vals []outVal, finals []pgvalue.Field) (operandVal, *pgwire.Error) {
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
func (r *mergeRun) paramOperand(n int) (operandVal, *pgwire.Error) {
	params, formats, oids := r.params, r.formats, r.oids
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
func (r *mergeRun) compareOperands(lo, ro route.Operand, vals []outVal, finals []pgvalue.Field) (int, bool, *pgwire.Error) {
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
		c, e := pgvalue.CompareValues(l.raw, rv.raw, l.field, r.bytewise)
		return c, false, e
	}
	return 0, false, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported, Message: "pgshard cannot compare these values of a merged HAVING"}
}

func (r *mergeRun) compareTextOperand(v operandVal, text []byte) (int, *pgwire.Error) {
	f := v.field
	switch f.OID {
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.NameOID:
		tf := *f
		tf.Format = 0
		raw := v.raw
		return pgvalue.CompareValues(raw, text, &tf, r.bytewise || r.m.Groups.Outputs[v.output].Bytewise)
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
