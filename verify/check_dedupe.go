package verify

import (
	"fmt"
	"sort"
)

// dedupe checks, per execution, that the processed_events rows are exactly
// the events its committed writers applied, that no event id and no input
// was applied twice, and that loads saw the ledger: a load invoked after
// the commit applying its event was acknowledged says processed=true, and
// processed=true is only said of an event applied no later than the load.
func (ck *checker) dedupe() {
	w := ck.w
	for _, id := range w.exeOrder {
		e := w.exes[id]
		// rows: event id → its processed_events rows (the shards they
		// are on; refs builds their RowRefs for a violation).
		rows := map[string][]string{}
		for _, p := range e.processed {
			rows[p.r.EventID] = append(rows[p.r.EventID], p.shard)
		}
		refs := func(ev string) []RowRef {
			var out []RowRef
			for _, sh := range rows[ev] {
				out = append(out, RowRef{Shard: sh, Table: "processed_events", Key: "execution_id=" + id + " event_id=" + ev})
			}
			return out
		}
		byEvent := map[string][]*cop{}
		byInput := map[string][]*cop{}
		for _, c := range e.chain {
			if c.Event != "" {
				byEvent[c.Event] = append(byEvent[c.Event], c)
			}
			if c.Input != "" {
				byInput[c.Input] = append(byInput[c.Input], c)
			}
		}
		ck.count(InvDedupe, len(e.processed)+len(e.chain))
		// unsure: events recorded by an unresolved commit, which may be
		// the one that applied it.
		unsure := map[string]bool{}
		for _, c := range e.commits {
			if c.st == unresolved && c.Event != "" {
				unsure[c.Event] = true
			}
		}
		for _, ev := range sortedKeys(rows) {
			if len(byEvent[ev]) > 0 {
				continue
			}
			if unsure[ev] {
				ck.skip(id, InvDedupe, fmt.Sprintf("processed_events row %s is recorded only by unresolved commits", ev))
				continue
			}
			var ops []OpRef
			for _, c := range w.byEvent[e][ev] {
				ops = append(ops, c.ref("records "+ev+" but did not commit"))
			}
			ck.add(InvDedupe, id, fmt.Sprintf("processed_events row %s has no applied event: no committed commit of %s records it", ev, id), ops, refs(ev))
		}
		for _, ev := range sortedKeys(byEvent) {
			cs := byEvent[ev]
			if len(rows[ev]) == 0 {
				ck.add(InvDedupe, id, fmt.Sprintf("event %s applied by %s (version %d) has no processed_events row%s", ev, cs[0].ID, cs[0].slot(), cs[0].wholly()),
					[]OpRef{cs[0].ref("applied it")}, nil)
			}
			if len(cs) > 1 {
				ck.add(InvDedupe, id, fmt.Sprintf("event %s was applied %d times to %s", ev, len(cs), id), refsOf(cs, "applies it"), refs(ev))
			}
		}
		for _, in := range sortedKeys(byInput) {
			cs := byInput[in]
			if len(cs) < 2 {
				continue
			}
			distinct := map[string]bool{}
			for _, c := range cs {
				distinct[c.Event] = true
			}
			if len(distinct) == 1 {
				continue // reported above as the same event applied twice
			}
			ck.add(InvDedupe, id, fmt.Sprintf("input %s was applied %d times to %s under different event ids (a client retried an unknown commit with a new event id?)", in, len(cs), id),
				refsOf(cs, "applies it"), nil)
		}
		for _, l := range e.loads {
			if l.Outcome != OutcomeOK || l.Event == "" {
				continue
			}
			ck.count(InvDedupe, 1)
			cs := byEvent[l.Event]
			switch {
			case l.Processed && len(cs) == 0 && unsure[l.Event]:
				ck.skip(id, InvDedupe, fmt.Sprintf("load %s said %s is processed, which only unresolved commits record", l.ID, l.Event))
			case l.Processed && len(cs) == 0:
				ck.add(InvDedupe, id, fmt.Sprintf("load %s said event %s is processed, but no committed commit of %s applied it", l.ID, l.Event, id),
					[]OpRef{ref(l, "processed=true")}, refs(l.Event))
			case l.Processed && len(cs) > 0 && earliestCall(cs).T0 > l.T1:
				c := earliestCall(cs)
				ck.add(InvDedupe, id, fmt.Sprintf("load %s said event %s is processed before the commit applying it (%s) was even invoked", l.ID, l.Event, c.ID),
					[]OpRef{ref(l, "processed=true"), c.ref("applies it")}, nil)
			case !l.Processed && len(cs) > 0:
				if c := earliestAck(cs); c != nil && c.T1 < l.T0 {
					ck.add(InvDedupe, id, fmt.Sprintf("load %s said event %s is not processed, but %s applying it was acknowledged before the load began", l.ID, l.Event, c.ID),
						[]OpRef{ref(l, "processed=false"), c.ref("acknowledged")}, refs(l.Event))
				}
			}
		}
	}
}

func earliestAck(cs []*cop) *cop {
	var best *cop
	for _, c := range cs {
		if c.Outcome == OutcomeOK && (best == nil || c.T1 < best.T1) {
			best = c
		}
	}
	return best
}

func earliestCall(cs []*cop) *cop {
	best := cs[0]
	for _, c := range cs[1:] {
		if c.T0 < best.T0 {
			best = c
		}
	}
	return best
}

func refsOf(cs []*cop, note string) []OpRef {
	var out []OpRef
	for _, c := range cs {
		out = append(out, c.ref(note))
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
