package verify

import (
	"encoding/json"
	"fmt"
	"strings"
)

// cas checks, per execution, the version chain built from all evidence:
// versions 1..N with exactly one present writer each, every acknowledged
// commit present at exp+1, no failed commit with effects, every claim
// consistent with the version its op wrote, and the final row intact.
func (ck *checker) cas(bad []badClaim) {
	w := ck.w
	for _, bc := range bad {
		o := w.opByID(bc.id)
		var why string
		switch {
		case o == nil:
			why = "is not an op of the history"
		case o.Kind != KindCommit:
			why = "is a " + o.Kind + " op, not a commit"
		default:
			why = "is a commit of execution " + o.Exe
		}
		var ops []OpRef
		var rows []RowRef
		if bc.c.op != nil {
			ops = append(ops, ref(bc.c.op, "the evidence"))
		}
		if o != nil {
			ops = append(ops, ref(o, "the op named"))
		}
		if bc.c.row != nil {
			rows = append(rows, *bc.c.row)
		}
		ck.add(InvCAS, bc.exe, fmt.Sprintf("%s names writer %q, which %s", bc.c.what, bc.id, why), ops, rows)
	}
	for _, id := range w.exeOrder {
		e := w.exes[id]
		ck.count(InvCAS, e.n+len(e.commits))
		for _, c := range e.commits {
			if c.Outcome == OutcomeFail && len(c.claims) > 0 {
				ops, rows := claimRefs(c)
				ck.add(InvCAS, id, fmt.Sprintf("failed commit %s has effects in the final state or the history (named by %s)", c.ID, claimList(c)),
					append([]OpRef{c.ref("failed: must be wholly absent")}, ops...), rows)
			}
			for _, cl := range c.claims {
				if cl.version != 0 && cl.version != c.slot() {
					var ops []OpRef
					var rows []RowRef
					if cl.op != nil {
						ops = append(ops, ref(cl.op, fmt.Sprintf("says %s wrote version %d", c.ID, cl.version)))
					}
					if cl.row != nil {
						rows = append(rows, *cl.row)
					}
					ck.add(InvCAS, id, fmt.Sprintf("%s says %s wrote version %d, but %s commits version %d (exp %d): one op cannot write two versions",
						cl.what, c.ID, cl.version, c.ID, c.slot(), c.Exp), append([]OpRef{c.ref("")}, ops...), rows)
				}
			}
		}
		// Versions 1..n that no commit of the history writes at all, as
		// ranges (a corrupt version can be huge).
		bySlot := map[int][]*cop{}
		for _, c := range e.commits {
			bySlot[c.slot()] = append(bySlot[c.slot()], c)
		}
		next := 1
		gap := func(lo, hi int) {
			if lo > hi {
				return
			}
			what := fmt.Sprintf("version %d", lo)
			if hi > lo {
				what = fmt.Sprintf("versions %d..%d", lo, hi)
			}
			ck.add(InvCAS, id, fmt.Sprintf("%s (final version %d): no commit of the history writes it", what, e.n), nil, rowsOf(e))
		}
		for _, v := range e.versions {
			if v < 1 {
				continue
			}
			gap(next, min(v-1, e.n))
			next = v + 1
			s := e.slots[v]
			switch {
			case len(s) >= 2:
				var ops []OpRef
				var names []string
				for _, c := range s {
					ops = append(ops, c.ref(presentWhy(c)))
					names = append(names, c.ID)
				}
				ck.add(InvCAS, id, fmt.Sprintf("version %d has %d committed writers (%s): an acknowledged or resolved-present commit was overwritten",
					v, len(s), strings.Join(names, ", ")), ops, rowsOf(e))
			case len(s) == 0 && v <= e.n:
				var open, failed []OpRef
				for _, c := range bySlot[v] {
					if c.st == unresolved {
						open = append(open, c.ref("a candidate"))
					} else {
						failed = append(failed, c.ref("not committed"))
					}
				}
				if len(open) > 1 {
					// Ambiguous: not checked, and said so.
					ck.skip(id, InvCAS, fmt.Sprintf("version %d has %d unresolved candidate writers", v, len(open)))
					ck.count(InvCAS, -1) // counted in e.n above, not compared
					e.ambiguous = true
					continue
				}
				ck.add(InvCAS, id, fmt.Sprintf("version %d (final version %d) has no committed writer in the history", v, e.n),
					failed, rowsOf(e))
			}
			if v > e.n {
				for _, c := range s {
					if c.Outcome == OutcomeOK {
						ck.add(InvCAS, id, fmt.Sprintf("acknowledged commit %s (version %d) is lost: the final version is %d", c.ID, v, e.n),
							[]OpRef{c.ref("acknowledged")}, rowsOf(e))
					} else {
						ops, rows := claimRefs(c)
						ck.add(InvCAS, id, fmt.Sprintf("unknown-outcome commit %s is partly present (%s) but its version %d is beyond the final version %d: not wholly present",
							c.ID, c.why, v, e.n), append([]OpRef{c.ref("")}, ops...), append(rows, rowsOf(e)...))
					}
				}
			}
		}
		gap(next, e.n)
		if e.row != nil && e.n < 1 {
			ck.add(InvCAS, id, fmt.Sprintf("final row: version %d is not a version (versions start at 1)", e.n), nil, rowsOf(e))
		}
		ck.rowIntegrity(e)
		ck.loadContent(e)
	}
}

// rowIntegrity checks the final executions row against itself and its
// writer: version column == data.version, data.id == id, data's
// definition_id == the column, context.step == version-1, context.last ==
// the writer's event.
func (ck *checker) rowIntegrity(e *exe) {
	if e.row == nil {
		return
	}
	r := e.row.r
	row := []RowRef{*execRow(e.row.shard, e.id)}
	bad := func(format string, args ...any) {
		ck.add(InvCAS, e.id, "final row: "+fmt.Sprintf(format, args...), nil, row)
	}
	if e.docErr != nil {
		bad("data is not a JSON document: %v", e.docErr)
		return
	}
	d := e.doc
	switch {
	case d.ID == nil:
		bad("data has no id")
	case *d.ID != e.id:
		bad("data.id is %q, the row's id is %q", *d.ID, e.id)
	}
	switch {
	case d.Version == nil:
		bad("data has no version")
	case *d.Version != r.Version:
		bad("data.version is %d, the version column is %d", *d.Version, r.Version)
	}
	if d.DefinitionID != nil && *d.DefinitionID != r.DefinitionID {
		bad("data.definition_id is %q, the column is %q", *d.DefinitionID, r.DefinitionID)
	}
	if d.ctxErr != nil {
		bad("data.context is not the workload's context: %v", d.ctxErr)
		return
	}
	c := d.ctx
	switch {
	case c.Step == nil:
		bad("context has no step")
	case *c.Step != r.Version-1:
		bad("context.step is %d at version %d, want %d", *c.Step, r.Version, r.Version-1)
	}
	if c.Op == nil || *c.Op == "" {
		bad("context has no op (the writer's op id)")
	}
	if len(e.slots[r.Version]) == 1 {
		wr := e.slots[r.Version][0]
		last := ""
		if c.Last != nil {
			last = *c.Last
		}
		if last != wr.Event {
			ck.add(InvCAS, e.id, fmt.Sprintf("final row: context.last is %q, but its writer %s applied event %q", last, wr.ID, wr.Event),
				[]OpRef{wr.ref("the writer of the final version")}, row)
		}
		ck.writtenContent(e, d, wr, row)
	}
	ck.workloadDoc(e, d, row)
}

// writtenContent compares the final row's state with what its writer
// wrote (when the history records it): the step, the active state and the
// armed timers. An acknowledged commit whose content was altered is as
// lost as one that is missing.
func (ck *checker) writtenContent(e *exe, d *execDoc, wr *cop, row []RowRef) {
	bad := func(format string, args ...any) {
		ck.add(InvCAS, e.id, "final row: "+fmt.Sprintf(format, args...), []OpRef{wr.ref("the writer of the final version")}, row)
	}
	c := d.ctx
	if wr.Step != nil && c.Step != nil && *c.Step != *wr.Step {
		bad("context.step is %d, but its writer %s wrote %d", *c.Step, wr.ID, *wr.Step)
	}
	if wr.Active != "" && !(len(d.ActivePath) == 1 && d.ActivePath[0] == wr.Active) {
		bad("active_path is %q, but its writer %s wrote [%q]", d.ActivePath, wr.ID, wr.Active)
	}
	if wr.Armed != nil && !sameTimers(c.Timers, wr.Armed) {
		bad("context.timers is %s, but its writer %s armed %s", fmtTimers(c.Timers), wr.ID, fmtTimers(wr.Armed))
	}
	if wr.DataDigest == "" {
		return
	}
	// The whole content, not only the members above.
	ck.count(InvCAS, 1)
	var members map[string]json.RawMessage
	if json.Unmarshal([]byte(e.row.r.Data), &members) == nil {
		for _, k := range sortedKeys(members) {
			if !knownDataMembers[k] {
				bad("data has a member %q, which no writer of the store's document writes", k)
			}
		}
	}
	got, err := stateDigest(d)
	switch {
	case err != nil:
		bad("the state cannot be read (%v), but its writer %s wrote state %s", err, wr.ID, wr.DataDigest)
	case got != wr.DataDigest:
		bad("the state (active_path and context) has digest %s, but its writer %s wrote %s: the row does not hold what its writer wrote", got, wr.ID, wr.DataDigest)
	}
}

// loadContent compares what each load read (the digest of the state it
// returned) with what the commit it names as the writer wrote.
func (ck *checker) loadContent(e *exe) {
	for _, l := range e.loads {
		if l.Outcome != OutcomeOK || !l.Exists || l.DataDigest == "" || l.Writer == "" {
			continue
		}
		c := ck.w.commits[l.Writer]
		if c == nil || c.Exe != e.id || c.DataDigest == "" || c.slot() != l.Version {
			continue // a bad claim, reported by the resolution
		}
		ck.count(InvCAS, 1)
		if c.DataDigest != l.DataDigest {
			ck.add(InvCAS, e.id, fmt.Sprintf("load %s read version %d written by %s with state digest %s, but %s wrote %s: the store returned content its writer never wrote",
				l.ID, l.Version, c.ID, l.DataDigest, c.ID, c.DataDigest), []OpRef{ref(l, "the read"), c.ref("the writer")}, nil)
		}
	}
}

// workloadDoc checks the parts of the final row's document every state of
// the chaos workload has (HISTORY.md, workload conventions), for histories
// whose header describes them: the definition, status "running", no
// parent and no outcome, and the padding.
func (ck *checker) workloadDoc(e *exe, d *execDoc, row []RowRef) {
	w := ck.w.h.Header.Workload
	if w.PayloadBytes == nil {
		return
	}
	bad := func(format string, args ...any) {
		ck.add(InvCAS, e.id, "final row: "+fmt.Sprintf(format, args...), nil, row)
	}
	if r := e.row.r; w.DefinitionID != "" && r.DefinitionID != w.DefinitionID {
		bad("definition_id is %q; every execution of the run is of %q", r.DefinitionID, w.DefinitionID)
	}
	if d.Status == nil || *d.Status != "running" {
		bad("data.status is %s, the workload only ever writes \"running\"", jsonOf(d.Status))
	}
	if isSet(d.ParentID) {
		bad("data.parent_id is %s, the workload's executions have no parent", d.ParentID)
	}
	if isSet(d.Outcome) {
		bad("data.outcome is %s, the workload never sets one", d.Outcome)
	}
	if p := d.ctx.Payload; p == nil && *w.PayloadBytes > 0 || p != nil && *p != strings.Repeat("x", *w.PayloadBytes) {
		bad("context.payload is not the workload's %d-byte padding", *w.PayloadBytes)
	}
}

// isSet reports whether a JSON member is present and not null.
func isSet(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func presentWhy(c *cop) string {
	if c.Outcome == OutcomeOK {
		return "acknowledged"
	}
	return "resolved present: " + c.why
}

func claimList(c *cop) string {
	var s []string
	for i, cl := range c.claims {
		if i == 3 {
			s = append(s, fmt.Sprintf("and %d more", len(c.claims)-3))
			break
		}
		s = append(s, cl.what.String())
	}
	return strings.Join(s, ", ")
}

func claimRefs(c *cop) (ops []OpRef, rows []RowRef) {
	for i, cl := range c.claims {
		if i == 5 {
			break
		}
		if cl.op != nil {
			ops = append(ops, ref(cl.op, "names "+c.ID))
		}
		if cl.row != nil {
			r := *cl.row
			r.Note = "names " + c.ID
			rows = append(rows, r)
		}
	}
	return ops, rows
}

func rowsOf(e *exe) []RowRef {
	var rows []RowRef
	for _, r := range e.rows {
		rr := *execRow(r.shard, e.id)
		rr.Note = fmt.Sprintf("version %d", r.r.Version)
		rows = append(rows, rr)
	}
	if len(rows) == 0 {
		return []RowRef{{Table: "executions", Key: "id=" + e.id, Note: "no row on any shard"}}
	}
	return rows
}
