package verify

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
)

// Resolution decides, for every commit, whether it belongs in the final
// state, from evidence only:
//
//  1. an ok commit is present, a fail commit absent;
//  2. an info commit named by evidence (claims: the final row's
//     context.op, a load's writer, a trace entry's op, an outbox row's or a
//     delivery's origin, a spawn row's op) is present;
//  3. an info commit whose version exp+1 is held by another present commit,
//     or lies beyond the final version, is absent;
//  4. an info commit that is the only possible author of a token (a
//     processed_events row, an outbox event id, a spawn child, a timer
//     arming seen in a row or a read) that no present commit explains is
//     present;
//  5. an info commit that is the only candidate for a version 1..N that no
//     present commit holds is present;
//
// repeated until nothing changes. What is left is unresolved (counted,
// and nondeterministic in the linearizability check). Every later check
// reads "present" and "absent" from this one resolution, which is what
// makes a resolved-present info commit required to be wholly present and a
// resolved-absent one wholly absent.

// badClaim is evidence naming an op id that is not a commit of the
// execution the evidence is about.
type badClaim struct {
	exe string // the execution the evidence is about, "" if unknown
	id  string
	c   claim
}

// token is evidence that some commit among cands committed.
type token struct {
	cands []*cop
	what  desc
}

// desc describes a piece of evidence ("load X", "outbox row seq N", ...).
// It is formatted only when a verdict shows it: a large history has
// millions of pieces of evidence and shows a handful.
type desc struct {
	kind  descKind
	s, s2 string
	n     int64
	f     float64
}

type descKind uint8

const (
	dFinalRow descKind = iota
	dLoad
	dTraceRow
	dSpawnRow
	dOutboxRow
	dDelivery
	dSpawnToken
	dOutboxToken
	dProcessed
	dAckSpawn
	dTimersRow
	dTimerFire
	dAckOutbox
	dRelayLoad
	dDueTimers
	dAckedSeq
)

func (d desc) String() string {
	switch d.kind {
	case dFinalRow:
		return "the final executions row (context.op)"
	case dLoad:
		return "load " + d.s
	case dTraceRow:
		return fmt.Sprintf("trace row idx %d", d.n)
	case dSpawnRow:
		return fmt.Sprintf("spawn row seq %d", d.n)
	case dOutboxRow:
		return fmt.Sprintf("outbox row seq %d", d.n)
	case dDelivery:
		return fmt.Sprintf("delivery %s (%s) of outbox seq %d", d.s, d.s2, d.n)
	case dSpawnToken:
		return fmt.Sprintf("spawn row seq %d (child %s)", d.n, d.s)
	case dOutboxToken:
		return fmt.Sprintf("outbox row seq %d (event %s)", d.n, d.s)
	case dProcessed:
		return "processed_events row " + d.s
	case dAckSpawn:
		return "ack_spawn " + d.s
	case dTimersRow:
		return fmt.Sprintf("timers row %s at %v", d.s, d.f)
	case dTimerFire:
		return "timer fire " + d.s
	case dAckOutbox:
		return "ack_outbox " + d.s
	case dRelayLoad:
		return "relay load " + d.s
	case dDueTimers:
		return "due_timers " + d.s
	case dAckedSeq:
		return fmt.Sprintf("ack_outbox %s acked seq %d", d.s, d.n)
	}
	return "?"
}

func timerKey(path string, at float64) string {
	return path + "\x00" + strconv.FormatFloat(at, 'g', -1, 64)
}

func (w *world) resolve() (bad []badClaim) {
	// Per execution indexes: commits by event id and by timer arming.
	byEvent := map[*exe]map[string][]*cop{}
	byArming := map[*exe]map[string][]*cop{}
	for _, e := range w.exes {
		be, ba := map[string][]*cop{}, map[string][]*cop{}
		for _, c := range e.commits {
			if c.Event != "" {
				be[c.Event] = append(be[c.Event], c)
			}
			for _, t := range c.Timers {
				if !t.Cancel {
					ba[timerKey(t.Path, t.FireAt)] = append(ba[timerKey(t.Path, t.FireAt)], c)
				}
			}
		}
		byEvent[e], byArming[e] = be, ba
	}
	w.byEvent, w.byArming = byEvent, byArming

	addClaim := func(exeID, id string, c claim) {
		if id == "" {
			return
		}
		k := w.commits[id]
		if k == nil || (exeID != "" && k.Exe != exeID) {
			bad = append(bad, badClaim{exe: exeID, id: id, c: c})
			return
		}
		k.claims = append(k.claims, c)
	}
	// tokens, sized for what the loops below append (at most).
	ntok := len(w.outAcks) + len(w.relayLoads)
	for _, e := range w.exes {
		ntok += len(e.spawnRows) + len(e.outbox) + len(e.processed) + len(e.spawnAcks) + len(e.timers) + len(e.commits)
	}
	for _, r := range w.dueReads {
		ntok += len(r.Timers)
	}
	tokens := make([]token, 0, ntok)
	for _, id := range w.exeOrder {
		e := w.exes[id]
		if e.row != nil && e.doc != nil && e.doc.ctx.Op != nil {
			addClaim(id, *e.doc.ctx.Op, claim{version: e.n, what: desc{kind: dFinalRow},
				row: execRow(e.row.shard, id)})
		}
		for _, l := range e.loads {
			if l.Outcome == OutcomeOK && l.Exists && l.Writer != "" {
				addClaim(id, l.Writer, claim{version: l.Version, what: desc{kind: dLoad, s: l.ID}, op: l})
			}
		}
		for _, t := range e.trace {
			var d traceDoc
			if decodeDoc(t.r.Entry, &d) == nil && d.Op != "" {
				v := 0
				if d.Step != nil {
					v = *d.Step + 1
				}
				addClaim(id, d.Op, claim{version: v, what: desc{kind: dTraceRow, n: int64(t.r.Idx)},
					row: &RowRef{Shard: t.shard, Table: "trace", Key: fmt.Sprintf("execution_id=%s idx=%d", id, t.r.Idx)}})
			}
		}
		for _, s := range e.spawnRows {
			rr := &RowRef{Shard: s.shard, Table: "spawns", Key: fmt.Sprintf("seq=%d", s.r.Seq)}
			var d spawnDoc
			if decodeDoc(s.r.Context, &d) == nil && d.Op != "" {
				addClaim(id, d.Op, claim{what: desc{kind: dSpawnRow, n: s.r.Seq}, row: rr})
			}
			tokens = append(tokens, token{cands: w.spawners[id+"\x00"+s.r.ChildID], what: desc{kind: dSpawnToken, n: s.r.Seq, s: s.r.ChildID}})
		}
		for _, o := range e.outbox {
			ev, _ := parseOutbox(o.r.Event)
			if ev.Op != "" {
				addClaim(id, ev.Op, claim{what: desc{kind: dOutboxRow, n: o.r.Seq},
					row: &RowRef{Shard: o.shard, Table: "outbox", Key: fmt.Sprintf("seq=%d", o.r.Seq)}})
			}
			if ev.ID != "" {
				tokens = append(tokens, token{cands: w.emitters[ev.ID], what: desc{kind: dOutboxToken, n: o.r.Seq, s: ev.ID}})
			}
		}
		for _, p := range e.processed {
			tokens = append(tokens, token{cands: byEvent[e][p.r.EventID], what: desc{kind: dProcessed, s: p.r.EventID}})
		}
		for _, a := range e.spawnAcks {
			tokens = append(tokens, token{cands: w.spawners[id+"\x00"+a.Child], what: desc{kind: dAckSpawn, s: a.ID}})
		}
		for _, t := range e.timers {
			tokens = append(tokens, token{cands: byArming[e][timerKey(t.r.Path, t.r.FireAt)],
				what: desc{kind: dTimersRow, s: t.r.Path, f: t.r.FireAt}})
		}
		for _, c := range e.commits {
			if c.Cause == CauseTimer {
				tokens = append(tokens, token{cands: byArming[e][timerKey(c.Path, c.FireAt)], what: desc{kind: dTimerFire, s: c.ID}})
			}
		}
	}
	for _, d := range w.deliveries {
		addClaim("", d.Origin, claim{what: desc{kind: dDelivery, s: d.ID, s2: string(d.Outcome), n: d.Seq}, op: d.Op})
	}
	for _, a := range w.outAcks {
		if a.Event != "" {
			tokens = append(tokens, token{cands: w.emitters[a.Event], what: desc{kind: dAckOutbox, s: a.ID}})
		}
	}
	for _, l := range w.relayLoads {
		var cands []*cop
		for _, c := range w.emitters[l.Event] {
			if c.emitsTo(l.Event, l.Exe) {
				cands = append(cands, c)
			}
		}
		tokens = append(tokens, token{cands: cands, what: desc{kind: dRelayLoad, s: l.ID}})
	}
	for _, r := range w.dueReads {
		for _, t := range r.Timers {
			if e := w.exes[t.Exe]; e != nil {
				tokens = append(tokens, token{cands: byArming[e][timerKey(t.Path, t.FireAt)], what: desc{kind: dDueTimers, s: r.ID}})
			}
		}
	}

	// The fixpoint. Each round either resolves an info commit or stops,
	// so it ends after at most (info commits + 1) rounds.
	var infos []*cop
	for _, id := range w.exeOrder {
		for _, c := range w.exes[id].commits {
			if c.Outcome == OutcomeInfo {
				infos = append(infos, c)
			}
		}
	}
	// Each round does what the rounds of the plain fixpoint do, in the
	// same order, but only over what can still change: slots are rebuilt
	// for the executions that gained a present commit (only those change),
	// step 3 looks at the unresolved info commits, step 4 at the tokens
	// that are neither explained nor without candidates (a status never
	// returns to unresolved, so such a token cannot fire again), step 5
	// at the executions with unresolved commits. A 1,000,000-op history
	// takes hundreds of rounds; each used to walk every commit and token.
	dirty := map[*exe]bool{}
	setPresent := func(c *cop, why string) {
		c.st, c.why = present, why
		dirty[w.exes[c.Exe]] = true
	}
	for _, c := range infos {
		if len(c.claims) > 0 {
			setPresent(c, "named by "+c.claims[0].what.String())
		}
	}
	w.buildSlots()
	clear(dirty)
	todo := slices.Clone(infos)
	var pending []*exe // executions with unresolved commits, in exeOrder
	for _, id := range w.exeOrder {
		if e := w.exes[id]; slices.ContainsFunc(e.commits, func(c *cop) bool { return c.st == unresolved }) {
			pending = append(pending, e)
		}
	}
	for changed, first := true, true; changed; first = false {
		changed = false
		if !first {
			for e := range dirty {
				e.buildSlots()
			}
			clear(dirty)
		}
		todo = slices.DeleteFunc(todo, func(c *cop) bool { return c.st != unresolved })
		for _, c := range todo {
			e := w.exes[c.Exe]
			if v := c.slot(); len(e.slots[v]) > 0 {
				c.st, c.why = absent, fmt.Sprintf("version %d is held by %s", v, e.slots[v][0].ID)
				changed = true
			} else if v > e.n {
				c.st, c.why = absent, fmt.Sprintf("version %d is beyond the final version %d", v, e.n)
				changed = true
			}
		}
		if changed {
			continue
		}
		live := tokens[:0]
		for _, t := range tokens {
			var open []*cop
			explained := false
			for _, c := range t.cands {
				switch c.st {
				case present:
					explained = true
				case unresolved:
					open = append(open, c)
				}
			}
			if !explained && len(open) == 1 {
				setPresent(open[0], "sole possible author of "+t.what.String())
				changed = true
				continue
			}
			if !explained && len(open) > 1 {
				live = append(live, t)
			}
		}
		clear(tokens[len(live):])
		tokens = live
		if changed {
			continue
		}
		still := pending[:0]
		for _, e := range pending {
			open := map[int][]*cop{}
			for _, c := range e.commits {
				if c.st == unresolved {
					open[c.slot()] = append(open[c.slot()], c)
				}
			}
			if len(open) == 0 {
				continue
			}
			still = append(still, e)
			for v, cs := range open {
				if v >= 1 && v <= e.n && len(e.slots[v]) == 0 && len(cs) == 1 {
					setPresent(cs[0], fmt.Sprintf("sole candidate for version %d (final version %d)", v, e.n))
					changed = true
				}
			}
		}
		pending = still
	}
	for e := range dirty {
		e.buildSlots()
	}
	for _, c := range infos {
		if c.st == unresolved {
			n := 0
			for _, o := range w.exes[c.Exe].commits {
				if o.st == unresolved && o.slot() == c.slot() {
					n++
				}
			}
			c.why = fmt.Sprintf("no evidence names it; %d unresolved candidates for version %d", n, c.slot())
		}
	}
	return bad
}

// buildSlots fills each execution's slots and chain from the present
// commits.
func (w *world) buildSlots() {
	for _, e := range w.exes {
		e.buildSlots()
	}
}

// buildSlots fills e's slots and chain from its present commits.
func (e *exe) buildSlots() {
	clear(e.slots)
	// The present commits grouped by version (in commit order within
	// one), each group a piece of one array: one allocation per
	// execution, not one per version.
	var ps []*cop
	for _, c := range e.commits {
		if c.st == present {
			ps = append(ps, c)
		}
	}
	slices.SortStableFunc(ps, func(a, b *cop) int { return cmp.Compare(a.slot(), b.slot()) })
	for i := 0; i < len(ps); {
		j := i + 1
		for j < len(ps) && ps[j].slot() == ps[i].slot() {
			j++
		}
		e.slots[ps[i].slot()] = ps[i:j:j]
		i = j
	}
	e.chain = e.chain[:0]
	ok, single := true, 0
	for _, v := range e.versions {
		s := e.slots[v]
		sort.SliceStable(s, func(i, j int) bool { return s[i].T0 < s[j].T0 })
		e.chain = append(e.chain, s...)
		switch {
		case v >= 1 && v <= e.n && len(s) == 1:
			single++
		case len(s) > 0:
			ok = false
		}
	}
	// Versions 1..n each have exactly one writer, none beyond.
	e.chainOK = ok && single == max(e.n, 0)
}

// emitsTo reports whether c emits event to target.
func (c *cop) emitsTo(event, target string) bool {
	for _, em := range c.Emits {
		if em.Event == event && em.Target == target {
			return true
		}
	}
	return false
}
