package merge

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
)

// Groups: the shards' partial groups, sorted by the group key, combined
// into one group per key (aggregates finished here), then HAVING, an
// optional bounded sort, OFFSET and LIMIT.

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
	// iv is the sum of an interval's partial sums (have: one was added).
	iv pgvalue.Interval
	// elems are the non-NULL values of the shards' arrays (string_agg,
	// count(DISTINCT x)), of type elem (binary format).
	elems [][]byte
	elem  pgvalue.Field
}

func (r groupMerge) groups() *pgwire.Error {
	m := r.run.Plan
	g := m.Groups
	if len(r.run.fields) != m.Width {
		return pgwire.NewError(pgwire.CodeInternalError, fmt.Sprintf("pgshard merge: a shard returned %d columns, the merge expects %d", len(r.run.fields), m.Width))
	}
	out, finals, e := r.groupFields()
	if e != nil {
		return e
	}
	if r.run.Describe {
		*r.run.Out = r.run.appendDesc(*r.run.Out, out)
	}
	var efd int
	var style string
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
	members := make([]int, 0, len(r.run.Sources))
	for {
		members, e = r.leastGroup(members[:0], keys)
		if e != nil {
			return e
		}
		if len(members) == 0 {
			break
		}
		lead := r.run.Sources[members[0]]
		if first {
			efd, style = shardSettings(g, lead.Cols())
		}
		if len(keys) > 0 {
			if lastKey, lastKeyCols, e = r.keyAscends(lead, keys, lastKey, lastKeyCols); e != nil {
				return e
			}
		}
		first = false
		vals, failed, e := r.combine(members, accs, finals, out, efd, style)
		if e != nil || failed {
			return e
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
			if len(buffered) >= r.run.GroupLimit {
				return r.tooManyGroups()
			}
			buffered = append(buffered, vals)
			continue
		}
		if limit == 0 {
			// FETCH ... WITH TIES: the groups that tie with the last one
			// (they arrive together, in key order); else drain: the
			// shards' rows are read to the end.
			if m.WithTies && lastOut != nil {
				if lastOut, e = r.emitTie(vals, lastOut, finals); e != nil {
					return e
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
		if e := r.run.flushFull(); e != nil {
			return e
		}
	}
	if g.SortAfter {
		return r.emitSorted(buffered, finals, skip, limit, lastOut)
	}
	return nil
}

// keyAscends checks that lead's group key follows the last one (keys
// strictly increase: a key met again means the shards sort differently
// from the merge) and returns lead's key as the last one.
func (r groupMerge) keyAscends(lead Source, keys []sortCol, lastKey []byte, lastKeyCols [][]byte) ([]byte, [][]byte, *pgwire.Error) {
	if lastKey != nil {
		c, e := r.run.compareRows(lead.Cols(), lastKeyCols, keys)
		if e != nil {
			return nil, nil, e
		}
		if c <= 0 {
			return nil, nil, r.run.outOfOrder(lead)
		}
	}
	lastKey = append(lastKey[:0], lead.Row()...)
	lastKeyCols, _ = pgwire.DataRowCols(lastKeyCols[:0], lastKey)
	return lastKey, lastKeyCols, nil
}

// combine merges the members' rows of one group into its finished
// values and advances the members; failed: a member's answer failed (the
// caller reports it).
func (r groupMerge) combine(members []int, accs []acc, finals, out []pgvalue.Field, efd int, style string) ([]outVal, bool, *pgwire.Error) {
	clear(accs)
	for _, i := range members {
		if e := r.accumulate(accs, r.run.Sources[i].Cols()); e != nil {
			return nil, false, e
		}
	}
	vals, e := r.finish(accs, finals, out, efd, style)
	if e != nil {
		return nil, false, e
	}
	for _, i := range members {
		st := r.run.Sources[i]
		r.run.Live[i] = st.Next()
		if st.Failed() {
			return nil, true, nil
		}
	}
	return vals, false, nil
}

// tooManyGroups fails a sort after grouping that would buffer more than
// GroupLimit groups.
func (r groupMerge) tooManyGroups() *pgwire.Error {
	return &pgwire.Error{Code: pgwire.CodeProgramLimitExceeded,
		Message: fmt.Sprintf("a GROUP BY merged across shards produced more than %d groups to sort (proxy.merge_group_limit)", r.run.GroupLimit),
		Hint:    "Order by the GROUP BY columns (then groups stream without buffering), add a LIMIT-free key predicate, or raise proxy.merge_group_limit."}
}

// emitTie emits a group after the limit that ties with the last one
// emitted (FETCH ... WITH TIES) and returns the last one, nil once a
// group does not tie (no later group can).
func (r groupMerge) emitTie(vals, lastOut []outVal, finals []pgvalue.Field) ([]outVal, *pgwire.Error) {
	tie, e := r.tie(vals, lastOut, finals)
	if e != nil || !tie {
		return nil, e
	}
	r.emitGroup(vals, r.run.Plan.Groups.Visible)
	return lastOut, nil
}

// leastGroup returns in members the live shards whose current row has the
// least group key (every live shard when keys is empty).
func (r groupMerge) leastGroup(members []int, keys []sortCol) ([]int, *pgwire.Error) {
	for i, st := range r.run.Sources {
		if !r.run.Live[i] {
			continue
		}
		if len(members) == 0 {
			members = append(members, i)
			continue
		}
		c, e := r.run.compareRows(st.Cols(), r.run.Sources[members[0]].Cols(), keys)
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
func (r groupMerge) tie(a, b []outVal, finals []pgvalue.Field) (bool, *pgwire.Error) {
	for _, k := range r.run.Plan.Groups.OrderBy {
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
func (r groupMerge) emitSorted(buffered [][]outVal, finals []pgvalue.Field, skip, limit int64, lastOut []outVal) *pgwire.Error {
	m, g := r.run.Plan, r.run.Plan.Groups
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
func (r groupMerge) groupFields() ([]pgvalue.Field, []pgvalue.Field, *pgwire.Error) {
	g := r.run.Plan.Groups
	finals := make([]pgvalue.Field, len(g.Outputs))
	for j, o := range g.Outputs {
		f := r.run.fields[o.Column]
		computed := false
		switch o.Agg {
		case route.AggStringAgg:
			f.OID, computed = pgtype.TextOID, true
		case route.AggCountDistinct:
			f.OID, computed = pgtype.Int8OID, true
		case route.AggSum:
			switch f.OID {
			case pgtype.Int8OID, pgtype.NumericOID, pgtype.Float4OID, pgtype.Float8OID, pgtype.IntervalOID:
			default:
				return nil, nil, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
					Message: fmt.Sprintf("pgshard cannot add up column %q of every shard (type oid %d): it merges sums of integers, numeric, floats and intervals", f.Name, f.OID),
					Hint:    "Add a key so that one shard answers."}
			}
			computed = true
		case route.AggAvg:
			switch f.OID {
			case pgtype.Int8OID, pgtype.NumericOID:
				f.OID = pgtype.NumericOID
			case pgtype.Float8OID, pgtype.IntervalOID:
			default:
				return nil, nil, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
					Message: fmt.Sprintf("pgshard cannot merge avg of %q (its sum has type oid %d): it merges avg of integers, numeric, double precision and intervals", f.Name, f.OID),
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
			f.Format = r.run.clientFormat(j)
		}
		finals[j] = f
	}
	return finals[:g.Visible], finals, nil
}

// castOID is the column type a cast of a merged aggregate declares: its
// numeric target (castTarget), text for none or text.
func castOID(c route.Cast) uint32 {
	if t := castTarget(c); t != 0 && t != 1<<32-1 {
		return t
	}
	return pgtype.TextOID
}

// accumulate adds one shard's row of a group.
func (r groupMerge) accumulate(accs []acc, cols [][]byte) *pgwire.Error {
	for j, o := range r.run.Plan.Groups.Outputs {
		a := &accs[j]
		v := cols[o.Column]
		f := &r.run.fields[o.Column]
		switch o.Agg {
		case route.AggStringAgg, route.AggCountDistinct:
			if v == nil {
				continue // no row of the group on the shard (or FILTER)
			}
			if e := a.addArray(v, f); e != nil {
				return e
			}
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
			c, e := pgvalue.CompareValues(v, a.raw, f, r.run.Bytewise || o.Bytewise, r.run.Times)
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
					n, e := pgvalue.DecodeNum(cv, r.run.fields[o.Column+1].OID, r.run.fields[o.Column+1].Format)
					if e != nil {
						return e
					}
					a.count += n.Int
				}
			}
			if v == nil {
				continue
			}
			if f.OID == pgtype.IntervalOID {
				if e := a.addInterval(v, f); e != nil {
					return e
				}
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
func (r groupMerge) finish(accs []acc, finals []pgvalue.Field, out []pgvalue.Field, efd int, style string) ([]outVal, *pgwire.Error) {
	g := r.run.Plan.Groups
	vals := make([]outVal, len(g.Outputs))
	for j, o := range g.Outputs {
		a := &accs[j]
		format := finals[j].Format
		var n pgvalue.Num
		if (o.Agg == route.AggSum || o.Agg == route.AggAvg) && r.run.fields[o.Column].OID == pgtype.IntervalOID {
			v, e := r.intervalOut(a, o, format, style)
			if e != nil {
				return nil, e
			}
			vals[j] = v
			continue
		}
		switch o.Agg {
		case route.AggStringAgg:
			text, null, e := r.stringAgg(a, o)
			if e != nil {
				return nil, e
			}
			vals[j] = outVal{raw: text, null: null}
			continue
		case route.AggCountDistinct:
			c, e := r.countDistinct(a, o)
			if e != nil {
				return nil, e
			}
			n = pgvalue.Num{Kind: pgvalue.NumInt, Int: c, OID: pgtype.Int8OID}
		case route.AggNone, route.AggMin, route.AggMax:
			if !a.have || a.raw == nil {
				vals[j] = outVal{null: true}
				continue
			}
			if o.Cast == route.CastNone {
				vals[j] = outVal{raw: a.raw}
				continue
			}
			f := &r.run.fields[o.Column]
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

func (r groupMerge) emitGroup(vals []outVal, visible int) {
	row := make([][]byte, visible)
	for j := 0; j < visible; j++ {
		if !vals[j].null {
			row[j] = vals[j].raw
			if row[j] == nil {
				row[j] = []byte{}
			}
		}
	}
	*r.run.Out = pgwire.AppendDataRow(*r.run.Out, row)
	r.run.Emitted++
}

// compareOut orders two merged values of output j.
func (r groupMerge) compareOut(a, b outVal, j int, finals []pgvalue.Field, k route.SortKey) (int, *pgwire.Error) {
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
		bytewise := r.run.Bytewise || k.Bytewise || r.run.Plan.Groups.Outputs[j].Bytewise
		if c, e = pgvalue.CompareValues(a.raw, b.raw, &finals[j], bytewise, r.run.Times); e != nil {
			return 0, e
		}
	}
	if k.Desc {
		c = -c
	}
	return c, nil
}

// ---- aggregates merged from the shards' arrays of values ----

// addArray adds the non-NULL elements of a one-dimensional array in
// binary format (array_agg's partial of string_agg or count(DISTINCT x))
// to a; every shard's elements must have one type.
func (a *acc) addArray(v []byte, f *pgvalue.Field) *pgwire.Error {
	bad := func(why string) *pgwire.Error {
		return pgwire.NewError(pgwire.CodeInternalError, fmt.Sprintf("pgshard merge: column %q of a shard is not the array the merge expects (%s)", f.Name, why))
	}
	if f.Format != 1 {
		return bad("text format")
	}
	ndim, oid, elems, ok := pgvalue.DecodeArray(v)
	switch {
	case ndim == 0 && ok:
		return nil
	case ndim > 1:
		return &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: fmt.Sprintf("pgshard cannot merge %q of every shard: its values are arrays", f.Name),
			Hint:    "Add a key so that one shard answers."}
	case !ok:
		return bad("malformed")
	}
	if a.elem.OID == 0 {
		a.elem = pgvalue.Field{Name: f.Name, OID: oid, Typlen: pgvalue.TypeLen(oid), Typmod: -1, Format: 1}
	} else if a.elem.OID != oid {
		return bad("element types differ between shards")
	}
	for _, e := range elems {
		if e != nil { // NULL: string_agg and count skip it
			a.elems = append(a.elems, slices.Clone(e))
		}
	}
	return nil
}

// sortElems orders a's elements as Postgres orders the values (text by
// bytes when the shards' collation or the term's is C; else the
// comparison refuses), descending when desc, and drops duplicates when
// dedup.
func (r groupMerge) sortElems(a *acc, bytewise, desc, dedup bool) *pgwire.Error {
	var err *pgwire.Error
	cmp := func(x, y []byte) int {
		c, e := pgvalue.CompareValues(x, y, &a.elem, bytewise, r.run.Times)
		if e != nil && err == nil {
			err = e
		}
		if desc {
			c = -c
		}
		return c
	}
	slices.SortStableFunc(a.elems, cmp)
	if err != nil || !dedup {
		return err
	}
	a.elems = slices.CompactFunc(a.elems, func(x, y []byte) bool { return cmp(x, y) == 0 })
	return err
}

// stringAgg finishes string_agg(x, sep ORDER BY x): the shards' values in
// order, joined by the separator; NULL when there are none.
func (r groupMerge) stringAgg(a *acc, o route.Output) ([]byte, bool, *pgwire.Error) {
	if len(a.elems) == 0 {
		return nil, true, nil
	}
	bpchar := false
	switch a.elem.OID {
	case pgtype.TextOID, pgtype.VarcharOID:
	case pgtype.BPCharOID:
		bpchar = true // string_agg reads it as text: without trailing blanks
	default:
		return nil, false, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported,
			Message: fmt.Sprintf("pgshard merges string_agg of text values only (the values of %q have type oid %d)", o.Name, a.elem.OID),
			Hint:    "Cast the value to text, or add a key so that one shard answers."}
	}
	if e := r.sortElems(a, r.run.Bytewise || o.Bytewise, o.Desc, o.Distinct); e != nil {
		return nil, false, e
	}
	out := []byte{}
	for i, v := range a.elems {
		if i > 0 {
			out = append(out, o.Sep...)
		}
		if bpchar {
			v = bytes.TrimRight(v, " ")
		}
		out = append(out, v...)
	}
	return out, false, nil
}

// countDistinct finishes count(DISTINCT x): the number of distinct
// values in the shards' arrays (each shard's are distinct already; one
// value may be on several shards).
func (r groupMerge) countDistinct(a *acc, o route.Output) (int64, *pgwire.Error) {
	if len(a.elems) == 0 {
		return 0, nil
	}
	if e := r.sortElems(a, r.run.Bytewise || o.Bytewise, false, true); e != nil {
		return 0, e
	}
	return int64(len(a.elems)), nil
}

// addInterval adds a shard's partial interval sum (binary) to a.
func (a *acc) addInterval(v []byte, f *pgvalue.Field) *pgwire.Error {
	iv, ok := pgvalue.DecodeInterval(v)
	if !ok || f.Format != 1 {
		return pgwire.NewError(pgwire.CodeInternalError, "pgshard merge: a shard sent a malformed interval")
	}
	if !a.have {
		a.iv, a.have = iv, true
		return nil
	}
	var e *pgwire.Error
	a.iv, e = a.iv.Add(iv)
	return e
}

// intervalOut is a merged sum or avg of intervals, written in format
// (text in the shards' IntervalStyle, style).
func (r groupMerge) intervalOut(a *acc, o route.Output, format int16, style string) (outVal, *pgwire.Error) {
	if !a.have || o.Agg == route.AggAvg && a.count == 0 {
		return outVal{null: true}, nil
	}
	if o.Cast != route.CastNone {
		return outVal{}, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported, Message: fmt.Sprintf("pgshard cannot cast the merged interval %q to %s", o.Name, o.Cast)}
	}
	iv := a.iv
	if o.Agg == route.AggAvg {
		iv = iv.Div(a.count)
	}
	raw, ok := pgvalue.AppendInterval(nil, iv, format, style)
	if !ok {
		return outVal{}, &pgwire.Error{Code: pgwire.CodeFeatureNotSupported, Message: fmt.Sprintf("pgshard cannot write the merged interval %q in IntervalStyle %q", o.Name, style)}
	}
	return outVal{raw: raw}, nil
}

// shardSettings are extra_float_digits (1 when not asked for) and
// IntervalStyle as a shard applies them, from its hidden columns.
func shardSettings(g *route.GroupMerge, cols [][]byte) (efd int, style string) {
	efd = 1
	if g.DigitsColumn >= 0 {
		if d, err := strconv.Atoi(string(cols[g.DigitsColumn])); err == nil {
			efd = d
		}
	}
	if g.StyleColumn >= 0 {
		style = string(cols[g.StyleColumn])
	}
	return efd, style
}
