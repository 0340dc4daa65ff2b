package verify

import (
	"fmt"
	"sort"
	"strings"
)

// trace checks each execution's trace ring against its committed chain:
// at most trace_max rows (when > 0), contiguous idx, newest idx == (number
// of committed traced commits) - 1, and the ring holding exactly the last
// min(trace_max, n) traced commits in chain order (idx k is the k-th
// traced commit). Entries naming commits that did not commit are
// violations.
func (ck *checker) trace() {
	w := ck.w
	tm := w.traceMax
	for _, id := range w.exeOrder {
		e := w.exes[id]
		rows := append([]placed[TraceRow]{}, e.trace...)
		sort.SliceStable(rows, func(i, j int) bool { return rows[i].r.Idx < rows[j].r.Idx })
		rr := func(t placed[TraceRow]) RowRef {
			return RowRef{Shard: t.shard, Table: "trace", Key: fmt.Sprintf("execution_id=%s idx=%d", id, t.r.Idx)}
		}
		docs := make([]traceDoc, len(rows))
		for i, t := range rows {
			if err := decodeDoc(t.r.Entry, &docs[i]); err != nil || docs[i].Op == "" {
				ck.add(InvTrace, id, fmt.Sprintf("trace row idx %d: entry is not {\"op\":...}", t.r.Idx), nil, []RowRef{rr(t)})
				continue
			}
			c := w.commits[docs[i].Op]
			switch {
			case c == nil || c.Exe != id:
				ck.add(InvTrace, id, fmt.Sprintf("trace row idx %d names op %q, which is not a commit of %s", t.r.Idx, docs[i].Op, id), nil, []RowRef{rr(t)})
			case c.st != present:
				ck.add(InvTrace, id, fmt.Sprintf("trace row idx %d is the entry of %s, which did not commit%s", t.r.Idx, c.ID, c.wholly()), []OpRef{c.ref("")}, []RowRef{rr(t)})
			case !c.Trace:
				ck.add(InvTrace, id, fmt.Sprintf("trace row idx %d names %s, which appends no trace entry", t.r.Idx, c.ID), []OpRef{c.ref("")}, []RowRef{rr(t)})
			case c.TraceDigest != "":
				ck.count(InvTrace, 1)
				if got := docDigest(t.r.Entry); got != c.TraceDigest {
					ck.add(InvTrace, id, fmt.Sprintf("trace row idx %d has content digest %s, but %s wrote the entry %s: the row does not hold what its writer wrote", t.r.Idx, got, c.ID, c.TraceDigest),
						[]OpRef{c.ref("the writer")}, []RowRef{rr(t)})
				}
			}
		}
		if tm > 0 && len(rows) > tm {
			ck.add(InvTrace, id, fmt.Sprintf("the trace ring of %s holds %d entries, more than trace_max %d", id, len(rows), tm), nil, traceRefs(rows, rr))
		}
		var idx []string
		contiguous := true
		for i, t := range rows {
			idx = append(idx, fmt.Sprint(t.r.Idx))
			if i > 0 && t.r.Idx != rows[i-1].r.Idx+1 {
				contiguous = false
			}
		}
		if !contiguous {
			ck.add(InvTrace, id, fmt.Sprintf("the trace idx of %s are not contiguous: %s", id, strings.Join(idx, ",")), nil, traceRefs(rows, rr))
		}
		if !e.chainOK {
			if e.ambiguous {
				ck.skip(id, InvTrace, "the ring's order against the committed chain (an ambiguous version)")
			}
			continue // the CAS check reports a broken chain
		}
		var traced []*cop
		for _, c := range e.chain {
			if c.Trace {
				traced = append(traced, c)
			}
		}
		// Counted only where the ring was compared with the chain.
		ck.count(InvTrace, len(rows)+len(traced))
		n := len(traced)
		want := n
		if tm > 0 {
			want = min(tm, n)
		}
		if len(rows) != want && !(tm > 0 && len(rows) > tm) {
			ck.add(InvTrace, id, fmt.Sprintf("the trace ring of %s holds %d entries, want min(trace_max %d, %d traced commits) = %d", id, len(rows), tm, n, want),
				nil, traceRefs(rows, rr))
		}
		if len(rows) > 0 && rows[len(rows)-1].r.Idx != n-1 {
			ck.add(InvTrace, id, fmt.Sprintf("the newest trace idx of %s is %d, want %d (%d traced commits)", id, rows[len(rows)-1].r.Idx, n-1, n),
				nil, []RowRef{rr(rows[len(rows)-1])})
		}
		for i, t := range rows {
			k := t.r.Idx
			if docs[i].Op == "" {
				continue
			}
			switch {
			case k < 0 || k >= n:
				if n > 0 || k != 0 {
					ck.add(InvTrace, id, fmt.Sprintf("trace row idx %d is beyond the %d traced commits", k, n), nil, []RowRef{rr(t)})
				}
			case docs[i].Op != traced[k].ID:
				ck.add(InvTrace, id, fmt.Sprintf("trace row idx %d holds the entry of %s, but traced commit #%d is %s", k, docs[i].Op, k, traced[k].ID),
					[]OpRef{traced[k].ref("the commit that idx belongs to")}, []RowRef{rr(t)})
			case docs[i].Step != nil && *docs[i].Step != traced[k].slot()-1:
				ck.add(InvTrace, id, fmt.Sprintf("trace row idx %d says step %d, but %s committed version %d (step %d)", k, *docs[i].Step, traced[k].ID, traced[k].slot(), traced[k].slot()-1),
					[]OpRef{traced[k].ref("")}, []RowRef{rr(t)})
			}
		}
	}
}

func traceRefs(rows []placed[TraceRow], f func(placed[TraceRow]) RowRef) []RowRef {
	var out []RowRef
	for i, r := range rows {
		if i == 12 {
			break
		}
		out = append(out, f(r))
	}
	return out
}
