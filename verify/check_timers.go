package verify

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// arming is one committed schedule of a timer: path at fire_at by a
// commit, and what became of it.
type arming struct {
	path  string
	at    float64
	by    *cop
	slot  int
	until *cop   // the commit that re-armed or cancelled the path after it
	fired []*cop // the timer fires applied while it was armed (one, at most)
	stale []*cop // fires of it applied after it was fired or superseded
}

// timers replays each execution's committed chain — a schedule arms a
// path (superseding what it armed), a cancel disarms it, a timer fire
// disarms the path only if the state arms it at exactly the fired time —
// and checks the final state and rows against it: one row per (execution,
// path); rows == the final state's context.timers == the replay; no
// arming fired twice; every arming that was neither superseded nor fired
// and was due before the end is a liveness failure; no due_timers read
// returned a timer superseded before the read began, or never armed, or
// not due; no delete_timer removed a superseded arming.
func (ck *checker) timers() {
	w := ck.w
	endUnix, haveEnd := ck.endUnix()
	armings := map[*exe]map[string][]*arming{}
	// The complete answers of due_timers reads (shorter than their
	// limit), by invocation: each lists every timer row due at its time.
	var reads []*Op
	for _, r := range w.dueReads {
		if r.Outcome == OutcomeOK && r.Limit > 0 && len(r.Timers) < r.Limit {
			reads = append(reads, r)
		}
	}
	sort.SliceStable(reads, func(i, j int) bool { return reads[i].T0 < reads[j].T0 })
	for _, id := range w.exeOrder {
		e := w.exes[id]
		rowsByPath := map[string][]placed[TimerRow]{}
		for _, t := range e.timers {
			rowsByPath[t.r.Path] = append(rowsByPath[t.r.Path], t)
		}
		if e.doc != nil && e.doc.ctxErr == nil || e.row == nil {
			ck.count(InvTimers, len(e.timers)) // compared with the final state
		}
		rowRef := func(t placed[TimerRow]) RowRef {
			return RowRef{Shard: t.shard, Table: "timers", Key: fmt.Sprintf("execution_id=%s path=%s", id, t.r.Path), Note: fmt.Sprintf("fire_at %v", fmtAt(t.r.FireAt))}
		}
		for _, p := range sortedKeys(rowsByPath) {
			if rs := rowsByPath[p]; len(rs) > 1 {
				var rr []RowRef
				for _, t := range rs {
					rr = append(rr, rowRef(t))
				}
				ck.add(InvTimers, id, fmt.Sprintf("%d armed timers for path %s (at most one per execution and path)", len(rs), p), nil, rr)
			}
		}
		var state map[string]float64
		stateOK := e.doc != nil && e.doc.ctxErr == nil
		if stateOK {
			state = e.doc.ctx.Timers
		}
		switch {
		case stateOK:
			for _, p := range sortedKeys(state) {
				rs := rowsByPath[p]
				switch {
				case len(rs) == 0:
					ck.add(InvTimers, id, fmt.Sprintf("the final state arms %s at %s, but timers has no row for it", p, fmtAt(state[p])), nil, []RowRef{*execRow(e.row.shard, id)})
				case rs[0].r.FireAt != state[p]:
					ck.add(InvTimers, id, fmt.Sprintf("timers row %s fires at %s, the final state arms it at %s", p, fmtAt(rs[0].r.FireAt), fmtAt(state[p])), nil,
						[]RowRef{rowRef(rs[0]), *execRow(e.row.shard, id)})
				}
			}
		case e.row == nil && len(e.timers) > 0:
			ck.add(InvTimers, id, "timers rows of an execution that has no executions row", nil, []RowRef{rowRef(e.timers[0])})
		}
		if !e.chainOK {
			if stateOK {
				for _, p := range sortedKeys(rowsByPath) {
					if _, ok := state[p]; !ok {
						ck.add(InvTimers, id, fmt.Sprintf("timers row %s (at %s) is not armed by the final state", p, fmtAt(rowsByPath[p][0].r.FireAt)),
							nil, []RowRef{rowRef(rowsByPath[p][0])})
					}
				}
			}
			if e.ambiguous {
				ck.skip(id, InvTimers, "the replay of the committed chain (an ambiguous version)")
			}
			continue // the CAS check reports a broken chain; a replay would guess
		}
		am := map[string][]*arming{}
		armings[e] = am
		armed := map[string]*arming{}
		for _, c := range e.chain {
			if c.Cause == CauseTimer {
				ck.count(InvTimers, 1)
				if a := armed[c.Path]; a != nil && a.at == c.FireAt {
					a.fired = append(a.fired, c)
					delete(armed, c.Path)
				} else if as := am[timerKey(c.Path, c.FireAt)]; len(as) > 0 {
					as[len(as)-1].stale = append(as[len(as)-1].stale, c)
				} else {
					ck.add(InvTimers, id, fmt.Sprintf("timer fire %s of %s at %s: no committed commit before it armed that timer", c.ID, c.Path, fmtAt(c.FireAt)),
						[]OpRef{c.ref("the fire")}, nil)
				}
			}
			for _, t := range c.Timers {
				if a := armed[t.Path]; a != nil {
					a.until = c
				}
				if t.Cancel {
					delete(armed, t.Path)
					continue
				}
				a := &arming{path: t.Path, at: t.FireAt, by: c, slot: c.slot()}
				armed[t.Path] = a
				am[timerKey(t.Path, t.FireAt)] = append(am[timerKey(t.Path, t.FireAt)], a)
				ck.count(InvTimers, 1)
			}
		}
		if stateOK {
			// A row the final state does not arm is a fired timer whose
			// delete_timer has not run yet (pending: liveness), or a
			// cancelled, re-armed or never armed one left behind (a
			// violation).
			for _, p := range sortedKeys(rowsByPath) {
				if _, ok := state[p]; ok {
					continue
				}
				t := rowsByPath[p][0]
				as := am[timerKey(p, t.r.FireAt)]
				if len(as) > 0 && len(as[len(as)-1].fired) > 0 && as[len(as)-1].until == nil {
					a := as[len(as)-1]
					ck.add(InvLiveness, id, fmt.Sprintf("timer %s at %s fired (%s) but its row was never deleted", p, fmtAt(t.r.FireAt), a.fired[0].ID),
						[]OpRef{a.fired[0].ref("the fire")}, []RowRef{rowRef(t)})
					continue
				}
				ck.add(InvTimers, id, fmt.Sprintf("timers row %s (at %s) is not armed by the final state, and no fire of it explains that (a cancel that did not delete, a stale row?)", p, fmtAt(t.r.FireAt)),
					nil, []RowRef{rowRef(t)})
			}
			want := map[string]float64{}
			for p, a := range armed {
				want[p] = a.at
			}
			if !sameTimers(want, state) {
				ck.add(InvTimers, id, fmt.Sprintf("the final state arms %s, but the committed chain arms %s", fmtTimers(state), fmtTimers(want)),
					nil, []RowRef{*execRow(e.row.shard, id)})
			}
		}
		for _, k := range sortedKeys(am) {
			for _, a := range am[k] {
				if n := len(a.fired) + len(a.stale); n > 1 {
					ops := []OpRef{a.by.ref(fmt.Sprintf("arms %s at %s", a.path, fmtAt(a.at)))}
					ops = append(ops, refsOf(append(append([]*cop{}, a.fired...), a.stale...), "fires it")...)
					ck.add(InvTimers, id, fmt.Sprintf("timer %s at %s (armed by %s) fired %d times", a.path, fmtAt(a.at), a.by.ID, n), ops, nil)
				}
				if a.until != nil && len(a.fired) == 0 {
					ck.vanished(id, a, reads)
				}
				due := a.until == nil && haveEnd && a.at < endUnix-ck.o.TimerSlack.Seconds()
				if due {
					ck.count(InvLiveness, 1) // fired by the end
				}
				if due && len(a.fired) == 0 {
					ck.add(InvLiveness, id, fmt.Sprintf("timer %s at %s (armed by %s) was due %.1fs before the end but never fired", a.path, fmtAt(a.at), a.by.ID, endUnix-a.at),
						[]OpRef{a.by.ref("armed it")}, timerRows(rowsByPath[a.path], rowRef))
				}
			}
		}
		for _, d := range e.deletes {
			if d.Outcome != OutcomeOK || !d.Deleted {
				continue // nothing to compare: not counted
			}
			ck.count(InvTimers, 1)
			as := am[timerKey(d.Path, d.FireAt)]
			if len(as) == 0 {
				ck.add(InvTimers, id, fmt.Sprintf("delete_timer %s deleted %s at %s, which no committed commit armed", d.ID, d.Path, fmtAt(d.FireAt)), []OpRef{ref(d, "deleted=true")}, nil)
				continue
			}
			a := as[len(as)-1]
			if a.until != nil && a.until.Outcome == OutcomeOK && a.until.T1 < d.T0 {
				ck.add(InvTimers, id, fmt.Sprintf("delete_timer %s deleted %s at %s although %s had re-armed or cancelled it before the delete began: a stale sweep removed a re-armed timer",
					d.ID, d.Path, fmtAt(d.FireAt), a.until.ID), []OpRef{ref(d, "deleted=true"), a.by.ref("armed it"), a.until.ref("superseded it")}, nil)
			}
		}
	}
	for _, r := range w.dueReads {
		if r.Outcome != OutcomeOK {
			continue
		}
		for _, t := range r.Timers {
			ck.count(InvTimers, 1)
			if t.FireAt > r.Now {
				ck.add(InvTimers, t.Exe, fmt.Sprintf("due_timers %s (now %s) returned %s at %s, which was not due", r.ID, fmtAt(r.Now), t.Path, fmtAt(t.FireAt)), []OpRef{ref(r, "")}, nil)
			}
			e := w.exes[t.Exe]
			if e == nil {
				ck.add(InvTimers, t.Exe, fmt.Sprintf("due_timers %s returned a timer of %s, which the history never committed", r.ID, t.Exe), []OpRef{ref(r, "")}, nil)
				continue
			}
			k := timerKey(t.Path, t.FireAt)
			var cands []*cop
			committed, maybe := false, false
			for _, c := range w.byArming[e][k] {
				cands = append(cands, c)
				committed = committed || c.st == present
				maybe = maybe || c.st == unresolved
			}
			if !committed && maybe {
				ck.skip(t.Exe, InvTimers, fmt.Sprintf("due_timers %s returned %s at %s, armed only by unresolved commits", r.ID, t.Path, fmtAt(t.FireAt)))
				continue
			}
			if !committed {
				ck.add(InvTimers, t.Exe, fmt.Sprintf("due_timers %s returned %s at %s, whose arming never committed", r.ID, t.Path, fmtAt(t.FireAt)),
					append([]OpRef{ref(r, "")}, refsOf(cands, "arms it, did not commit")...), nil)
				continue
			}
			if as := armings[e][k]; len(as) > 0 {
				a := as[len(as)-1]
				if a.until != nil && a.until.Outcome == OutcomeOK && a.until.T1 < r.T0 {
					ck.add(InvTimers, t.Exe, fmt.Sprintf("due_timers %s returned %s at %s, which %s had re-armed or cancelled before the read began", r.ID, t.Path, fmtAt(t.FireAt), a.until.ID),
						[]OpRef{ref(r, ""), a.by.ref("armed it"), a.until.ref("superseded it")}, nil)
				}
			}
		}
	}
}

// vanished checks an arming that was replaced (re-armed or cancelled)
// without having fired: if a complete due_timers read ran entirely after
// the arming was acknowledged and before its replacement was invoked, at a
// time it was due, and did not return it, its row had disappeared while it
// was due — no op explains that (a correct store deletes a timer row only
// by a cancel, a re-arm or a delete_timer of that very fire_at, and the
// last runs only after a fire).
func (ck *checker) vanished(id string, a *arming, reads []*Op) {
	if a.by.Outcome != OutcomeOK {
		return // when an unknown-outcome commit took effect is not known
	}
	i := sort.Search(len(reads), func(i int) bool { return reads[i].T0 > a.by.T1 })
	for n := 0; i < len(reads) && n < 256; i, n = i+1, n+1 {
		r := reads[i]
		if r.T0 >= a.until.T0 {
			return
		}
		if r.Now < a.at || r.T1 >= a.until.T0 {
			continue
		}
		ck.count(InvTimers, 1)
		for _, t := range r.Timers {
			if t.Exe == id && t.Path == a.path && t.FireAt == a.at {
				return // seen due: the sweeper's fire lost to the replacement
			}
		}
		ck.add(InvTimers, id, fmt.Sprintf("timer %s at %s (armed by %s) was due, but due_timers %s (now %s, after the arming and before %s replaced it) did not return it: its row vanished while due, and no op explains that",
			a.path, fmtAt(a.at), a.by.ID, r.ID, fmtAt(r.Now), a.until.ID),
			[]OpRef{a.by.ref("armed it"), ref(r, "a complete read without it"), a.until.ref("replaced it")}, nil)
		return
	}
}

// endUnix is the run's end as Unix seconds, from the end line.
func (ck *checker) endUnix() (float64, bool) {
	h := ck.w.h
	if h.End == nil {
		return 0, false
	}
	t := h.End.EndedAt
	if t.IsZero() {
		if h.Header.StartedAt.IsZero() {
			return 0, false
		}
		t = h.Header.StartedAt.Add(time.Duration(h.End.T))
	}
	return float64(t.UnixNano()) / 1e9, true
}

func timerRows(rs []placed[TimerRow], f func(placed[TimerRow]) RowRef) []RowRef {
	var out []RowRef
	for _, r := range rs {
		out = append(out, f(r))
	}
	return out
}

func sameTimers(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func fmtTimers(m map[string]float64) string {
	if len(m) == 0 {
		return "no timer"
	}
	var s []string
	for k, v := range m {
		s = append(s, k+"@"+fmtAt(v))
	}
	sort.Strings(s)
	return "{" + strings.Join(s, ", ") + "}"
}

// fmtAt prints a fire time (Unix seconds) exactly, without an exponent.
func fmtAt(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
