package verify

import (
	"fmt"
	"slices"
	"strings"
)

// fence compares every shard's fence (its tables, read by Dump) with the
// final map, as part of placement: at the end of a run each bucket range
// must be owned — state owned — by exactly the shard the map gives it
// to, no other shard may own it, and no range may be left frozen or
// incoming. A fence row's epoch is the epoch of the map that set it, so
// none may be newer than the final map's; after a run with moves the
// newest fence must be at the final map's epoch (the last flip set its
// destination's). The bucket-range arithmetic is its own, not the
// fence's SQL.
//
// A state dumped without fences (an older verifier's) is not compared. A
// shard without fence tables, or whose fence is off, is not compared
// in a run without moves (a fence someone turned off stays off there);
// after moves it is a violation: the move relied on it.
func (ck *checker) fence() {
	h, m := ck.w.h, ck.w.mp.m
	moves := (h.End != nil && h.End.Map != nil) || len(h.Moves()) > 0
	fenced := map[string]*Fence{}
	var newest uint64
	newestOn := ""
	for _, sh := range ck.w.s.Shards {
		f := sh.Fence
		cfg := RowRef{Shard: sh.Name, Table: "pgshard_fence_config", Key: "singleton"}
		switch {
		case f == nil:
			continue // not dumped (an older state): nothing to compare
		case f.NoTables:
			if moves {
				ck.count(InvPlacement, 1)
				ck.add(InvPlacement, "", fmt.Sprintf("fence: shard %s has no fence tables, after a run that moved ranges", sh.Name), nil, []RowRef{cfg})
			}
			continue
		case f.NoConfig:
			ck.count(InvPlacement, 1)
			ck.add(InvPlacement, "", fmt.Sprintf("fence: shard %s has no row in pgshard_fence_config", sh.Name), nil, []RowRef{cfg})
			continue
		case !f.Enabled:
			if moves {
				ck.count(InvPlacement, 1)
				ck.add(InvPlacement, "", fmt.Sprintf("fence: the fence of shard %s is off (epoch %d), after a run that moved ranges", sh.Name, f.Epoch), nil, []RowRef{cfg})
			}
			continue
		}
		ck.count(InvPlacement, 1+len(f.Rows))
		fenced[sh.Name] = f
		if f.Epoch > newest || newestOn == "" {
			newest, newestOn = f.Epoch, sh.Name
		}
		var p []string
		if f.Buckets != m.Buckets {
			p = append(p, fmt.Sprintf("%d buckets, the final map has %d", f.Buckets, m.Buckets))
		}
		if f.Epoch > m.Epoch {
			p = append(p, fmt.Sprintf("epoch %d, newer than the final map's %d", f.Epoch, m.Epoch))
		}
		if len(p) > 0 {
			ck.add(InvPlacement, "", fmt.Sprintf("fence: the fence configuration of shard %s disagrees with the final map: %s", sh.Name, strings.Join(p, "; ")), nil, []RowRef{cfg})
		}
		for i, r := range f.Rows {
			var p []string
			if r.Epoch == 0 || r.Epoch > m.Epoch {
				p = append(p, fmt.Sprintf("epoch %d, not in 1..%d (the final map's epoch)", r.Epoch, m.Epoch))
			}
			if r.Lo < 0 || r.Hi < r.Lo || r.Hi >= m.Buckets {
				p = append(p, fmt.Sprintf("not a range of buckets 0-%d", m.Buckets-1))
			}
			if i > 0 && r.Lo <= f.Rows[i-1].Hi {
				p = append(p, fmt.Sprintf("overlaps row %d-%d", f.Rows[i-1].Lo, f.Rows[i-1].Hi))
			}
			if !slices.Contains([]string{FenceOwned, FenceFrozen, FenceIncoming, FenceMoved}, r.State) {
				p = append(p, fmt.Sprintf("unknown state %q", r.State))
			}
			if !r.Enabled {
				p = append(p, "enabled false in an enabled fence")
			}
			if len(p) > 0 {
				ck.add(InvPlacement, "", fmt.Sprintf("fence: row %d-%d of shard %s's fence (%s): %s", r.Lo, r.Hi, sh.Name, r.describe(), strings.Join(p, "; ")),
					nil, []RowRef{r.ref(sh.Name)})
			}
		}
	}
	if moves && len(fenced) > 0 && newest < m.Epoch {
		ck.add(InvPlacement, "", fmt.Sprintf("fence: no shard's fence is at the final map's epoch %d (the newest is shard %s's, at %d): the last move's flip did not reach the fences", m.Epoch, newestOn, newest), nil,
			[]RowRef{{Shard: newestOn, Table: "pgshard_fence_config", Key: "singleton"}})
	}
	if len(fenced) == 0 {
		return
	}
	for _, iss := range fenceIssues(m, ck.w.s.Shards, fenced) {
		ck.add(InvPlacement, "", iss.summary, nil, iss.rows)
	}
}

// fenceIssue is one bucket range whose fences disagree with the map.
type fenceIssue struct {
	lo, hi  int
	summary string
	rows    []RowRef
}

// fenceIssues cuts buckets 0..B-1 at every boundary of the map's ranges
// and of the fence rows, so that within a segment each shard's fence and
// the map say one thing, classifies each segment, and merges neighbours
// that have the same problems with the same rows. Shards are in state
// order; only those in fenced are compared (the others' fences are off).
func fenceIssues(m MapInfo, shards []*ShardState, fenced map[string]*Fence) []fenceIssue {
	if m.Buckets <= 0 {
		return nil
	}
	mi := newMapIndex(m)
	cuts := map[int]bool{0: true}
	cut := func(b int) {
		if b >= 0 && b < m.Buckets {
			cuts[b] = true
		}
	}
	for _, r := range mi.ranges {
		cut(r.lo)
		cut(r.hi + 1)
	}
	for _, f := range fenced {
		for _, r := range f.Rows {
			cut(r.Lo)
			cut(r.Hi + 1)
		}
	}
	starts := make([]int, 0, len(cuts))
	for b := range cuts {
		starts = append(starts, b)
	}
	slices.Sort(starts)
	var out []fenceIssue
	prevKey := ""
	for i, lo := range starts {
		hi := m.Buckets - 1
		if i+1 < len(starts) {
			hi = starts[i+1] - 1
		}
		key, iss := fenceSegment(mi.owner(lo), lo, shards, fenced)
		if key == "" {
			prevKey = ""
			continue
		}
		if key == prevKey {
			out[len(out)-1].hi = hi
		} else {
			iss.lo, iss.hi = lo, hi
			out = append(out, iss)
		}
		prevKey = key
	}
	for i := range out {
		o := &out[i]
		o.summary = fmt.Sprintf("fence: buckets %d-%d %s", o.lo, o.hi, o.summary)
	}
	return out
}

// fenceSegment classifies one segment whose first bucket is b, owned by
// owner in the final map ("" none). It returns "" when the fences agree
// with the map, else a key (equal for segments with the same problems and
// rows) and the issue, whose summary lacks the range.
func fenceSegment(owner string, b int, shards []*ShardState, fenced map[string]*Fence) (string, fenceIssue) {
	var owners, frozen, incoming, gaps, says []string
	var rows []RowRef
	var ownerState, ownerSays string
	for _, sh := range shards {
		f := fenced[sh.Name]
		if f == nil {
			continue
		}
		r := f.rowOf(b)
		if r == nil {
			gaps = append(gaps, sh.Name)
			says = append(says, fmt.Sprintf("%s: no row", sh.Name))
			if sh.Name == owner {
				ownerState, ownerSays = "", "no row"
			}
			continue
		}
		switch r.State {
		case FenceOwned:
			owners = append(owners, sh.Name)
		case FenceFrozen:
			frozen = append(frozen, sh.Name)
		case FenceIncoming:
			incoming = append(incoming, sh.Name)
		}
		if sh.Name == owner {
			ownerState, ownerSays = r.State, r.describe()
		}
		says = append(says, fmt.Sprintf("%s: %d-%d %s", sh.Name, r.Lo, r.Hi, r.describe()))
		rows = append(rows, r.ref(sh.Name))
	}
	_, ownerFenced := fenced[owner]
	var p []string
	switch {
	case len(owners) > 1:
		p = append(p, fmt.Sprintf("owned by %d shards (%s)", len(owners), strings.Join(owners, ", ")))
	case len(owners) == 0 && (ownerFenced || owner == ""):
		p = append(p, "owned by no shard")
	case len(owners) == 1 && owners[0] != owner:
		p = append(p, fmt.Sprintf("owned by shard %s", owners[0]))
	}
	if ownerFenced && ownerState != FenceOwned && len(owners) > 0 {
		p = append(p, fmt.Sprintf("not owned by shard %s, its owner in the final map (its fence: %s)", owner, ownerSays))
	}
	if len(frozen) > 0 {
		p = append(p, "left frozen on "+strings.Join(frozen, ", "))
	}
	if len(incoming) > 0 {
		p = append(p, "left incoming on "+strings.Join(incoming, ", "))
	}
	if len(gaps) > 0 {
		p = append(p, "in no row of the fence of "+strings.Join(gaps, ", "))
	}
	if len(p) == 0 {
		return "", fenceIssue{}
	}
	whose := "no shard in the final map"
	if owner != "" {
		whose = "shard " + owner + " in the final map"
	}
	summary := fmt.Sprintf("(%s): %s — the fences say %s", whose, strings.Join(p, "; "), strings.Join(says, ", "))
	return summary, fenceIssue{summary: summary, rows: rows}
}

// rowOf is the row of f holding bucket b, nil if none (rows are ordered
// by lo; overlapping rows are reported elsewhere, the first one counts).
func (f *Fence) rowOf(b int) *FenceRow {
	for i := range f.Rows {
		if r := &f.Rows[i]; r.Lo <= b && b <= r.Hi {
			return r
		}
	}
	return nil
}

func (r *FenceRow) describe() string {
	s := fmt.Sprintf("%s at epoch %d", r.State, r.Epoch)
	if r.Owner != "" {
		s += ", owner " + r.Owner
	}
	return s
}

func (r *FenceRow) ref(shard string) RowRef {
	return RowRef{Shard: shard, Table: "pgshard_fence", Key: fmt.Sprintf("lo=%d", r.Lo), Note: fmt.Sprintf("%d-%d %s", r.Lo, r.Hi, r.describe())}
}
