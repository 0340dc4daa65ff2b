package verify

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// outbox checks that an outbox event exists (as a final row, or as a
// delivery, an ack or a relay read of one) only if the commit that emitted
// it committed, that each event was in exactly one row, and that each
// emit of a committed commit was applied to its target exactly once (a
// row still pending after the quiesce is a liveness failure).
func (ck *checker) outbox() {
	w := ck.w
	// event → where it was seen with which seq (where = pre + s,
	// joined only for a violation).
	type sighting struct {
		seq    int64
		pre, s string
	}
	seqs := map[string][]sighting{}
	seen := func(event string, seq int64, pre, s string) {
		seqs[event] = append(seqs[event], sighting{seq, pre, s})
	}
	emitter := map[string]string{}              // event → the execution that emitted it, where known
	pending := map[string][]placed[OutboxRow]{} // event → final rows
	for _, sh := range w.s.Shards {
		for _, r := range sh.Outbox {
			ck.count(InvOutbox, 1)
			rr := RowRef{Shard: sh.Name, Table: "outbox", Key: fmt.Sprintf("seq=%d", r.Seq)}
			ev, ok := parseOutbox(r.Event)
			if !ok || ev.ID == "" || ev.From == "" || ev.Op == "" {
				ck.add(InvOutbox, "", fmt.Sprintf("outbox row seq %d is not an event document with id, from and op", r.Seq), nil, []RowRef{rr})
				continue
			}
			target := ""
			if r.TargetID != nil {
				target = *r.TargetID
			}
			seen(ev.ID, r.Seq, "row on ", sh.Name)
			emitter[ev.ID] = ev.From
			pending[ev.ID] = append(pending[ev.ID], placed[OutboxRow]{sh.Name, r})
			c := w.commits[ev.Op]
			switch {
			case c == nil:
				ck.add(InvOutbox, ev.From, fmt.Sprintf("outbox row seq %d (event %s) names emitter %q, which is not a commit of the history", r.Seq, ev.ID, ev.Op), nil, []RowRef{rr})
			case c.st != present:
				ck.add(InvOutbox, ev.From, fmt.Sprintf("outbox row seq %d (event %s) was emitted by %s, which did not commit: an event must exist only if its commit committed%s", r.Seq, ev.ID, c.ID, c.wholly()),
					[]OpRef{c.ref("the emitter")}, []RowRef{rr})
			case c.Exe != ev.From:
				ck.add(InvOutbox, ev.From, fmt.Sprintf("outbox row seq %d says it is from %s, but its emitter %s is a commit of %s", r.Seq, ev.From, c.ID, c.Exe),
					[]OpRef{c.ref("the emitter")}, []RowRef{rr})
			case !c.emitsTo(ev.ID, target):
				ck.add(InvOutbox, ev.From, fmt.Sprintf("outbox row seq %d (event %s to %q) is not an emit of %s", r.Seq, ev.ID, target, c.ID),
					[]OpRef{c.ref("the emitter")}, []RowRef{rr})
			default:
				if want := c.emitDigest(ev.ID, target); want != "" {
					ck.count(InvOutbox, 1)
					if got := docDigest(r.Event); got != want {
						ck.add(InvOutbox, ev.From, fmt.Sprintf("outbox row seq %d (event %s) has content digest %s, but %s wrote %s: the row does not hold what its writer wrote", r.Seq, ev.ID, got, c.ID, want),
							[]OpRef{c.ref("the emitter")}, []RowRef{rr})
					}
				}
			}
		}
	}
	for _, d := range w.deliveries {
		ck.count(InvOutbox, 1)
		seen(d.Input, d.Seq, "delivery ", d.ID)
		o := w.commits[d.Origin]
		if o != nil && emitter[d.Input] == "" {
			emitter[d.Input] = o.Exe
		}
		switch {
		case o == nil:
			ck.add(InvOutbox, d.Exe, fmt.Sprintf("delivery %s of event %s (seq %d) names origin %q, which is not a commit of the history", d.ID, d.Input, d.Seq, d.Origin),
				[]OpRef{d.ref("the delivery")}, nil)
		case o.st != present:
			ck.add(InvOutbox, d.Exe, fmt.Sprintf("delivery %s (%s) carried event %s of %s, which did not commit: the relay read an outbox row of an uncommitted commit%s", d.ID, d.Outcome, d.Input, o.ID, o.wholly()),
				[]OpRef{d.ref("the delivery"), o.ref("the origin")}, nil)
		case !o.emitsTo(d.Input, d.Exe):
			ck.add(InvOutbox, d.Exe, fmt.Sprintf("delivery %s applies event %s to %s, which its origin %s did not emit there", d.ID, d.Input, d.Exe, o.ID),
				[]OpRef{d.ref("the delivery"), o.ref("the origin")}, nil)
		default:
			if want := o.emitDigest(d.Input, d.Exe); want != "" && d.BodyDigest != "" {
				ck.count(InvOutbox, 1)
				if d.BodyDigest != want {
					ck.add(InvOutbox, d.Exe, fmt.Sprintf("delivery %s read event %s (seq %d) with content digest %s, but its origin %s wrote %s: the relay read content its writer never wrote",
						d.ID, d.Input, d.Seq, d.BodyDigest, o.ID, want), []OpRef{d.ref("the delivery"), o.ref("the origin")}, nil)
				}
			}
		}
	}
	for _, a := range w.outAcks {
		if a.Event == "" {
			continue // nothing to compare: not counted
		}
		ck.count(InvOutbox, 1)
		seen(a.Event, a.Seq, "ack ", a.ID)
		ck.emitted(a, a.Event, a.Target, desc{kind: dAckedSeq, s: a.ID, n: a.Seq})
	}
	for _, l := range w.relayLoads {
		ck.count(InvOutbox, 1)
		ck.emitted(l, l.Event, l.Exe, desc{kind: dRelayLoad, s: l.ID})
	}
	events := make([]string, 0, len(seqs))
	for ev := range seqs {
		events = append(events, ev)
	}
	sort.Strings(events)
	for _, ev := range events {
		ss := seqs[ev]
		if !slices.ContainsFunc(ss, func(x sighting) bool { return x.seq != ss[0].seq }) {
			continue
		}
		m := map[int64][]string{} // seq → where it was seen
		var distinct []int64
		for _, x := range ss {
			if m[x.seq] == nil {
				distinct = append(distinct, x.seq)
			}
			m[x.seq] = append(m[x.seq], x.pre+x.s)
		}
		if ck.movedCopies(emitter[ev], distinct) {
			// A move copied the row to the emitter's new shard (the
			// contract: a redelivery after a move, dedupe absorbs it).
			ck.count(InvOutbox, 1)
			continue
		}
		var parts []string
		for seq, where := range m {
			parts = append(parts, fmt.Sprintf("seq %d (%s)", seq, strings.Join(where, ", ")))
		}
		sort.Strings(parts)
		ck.add(InvOutbox, "", fmt.Sprintf("event %s was in %d outbox rows: %s", ev, len(m), strings.Join(parts, "; ")), nil, nil)
	}

	// Every emit of a committed commit is applied exactly once.
	applied := map[string][]*cop{} // target \x00 event → present deliveries
	maybe := map[string]bool{}     // ... → an unresolved delivery exists
	for _, id := range w.exeOrder {
		for _, c := range w.exes[id].chain {
			if c.Cause == CauseOutbox {
				k := c.Exe + "\x00" + c.Input
				applied[k] = append(applied[k], c)
			}
		}
	}
	for _, d := range w.deliveries {
		if d.st == unresolved {
			maybe[d.Exe+"\x00"+d.Input] = true
		}
	}
	for _, id := range w.exeOrder {
		for _, c := range w.exes[id].chain {
			for _, em := range c.Emits {
				ck.count(InvOutbox, 1)
				ck.count(InvLiveness, 1) // applied and acked after the quiesce
				a := applied[em.Target+"\x00"+em.Event]
				rows := pending[em.Event]
				var rr []RowRef
				for _, r := range rows {
					rr = append(rr, RowRef{Shard: r.shard, Table: "outbox", Key: fmt.Sprintf("seq=%d", r.r.Seq)})
				}
				switch {
				case len(a) == 0 && len(rows) > 0:
					ck.add(InvLiveness, em.Target, fmt.Sprintf("event %s of %s is still pending for %s (never applied)", em.Event, c.ID, em.Target),
						[]OpRef{c.ref("the emitter")}, rr)
				case len(a) == 0 && maybe[em.Target+"\x00"+em.Event]:
					// An unresolved delivery may have applied it: undecided.
					ck.skip(em.Target, InvOutbox, fmt.Sprintf("event %s of %s was applied, if at all, by an unresolved delivery", em.Event, c.ID))
				case len(a) == 0:
					ck.add(InvOutbox, em.Target, fmt.Sprintf("event %s emitted by %s to %s was never applied, and its outbox row is gone (acked without delivery, or deleted)%s", em.Event, c.ID, em.Target, c.wholly()),
						[]OpRef{c.ref("the emitter")}, nil)
				case len(a) > 1:
					ops := []OpRef{c.ref("the emitter")}
					for _, d := range a {
						ops = append(ops, d.ref("applies it"))
					}
					ck.add(InvOutbox, em.Target, fmt.Sprintf("event %s emitted by %s was applied %d times to %s", em.Event, c.ID, len(a), em.Target), ops, rr)
				case len(rows) > 0:
					ck.add(InvLiveness, em.Target, fmt.Sprintf("event %s of %s was applied by %s but its outbox row was never acked", em.Event, c.ID, a[0].ID),
						[]OpRef{c.ref("the emitter"), a[0].ref("the delivery")}, rr)
				}
			}
		}
	}
}

// emitDigest is the content digest of c's emit of event to target, ""
// if the history does not record one.
func (c *cop) emitDigest(event, target string) string {
	for _, em := range c.Emits {
		if em.Event == event && em.Target == target {
			return em.Digest
		}
	}
	return ""
}

// emitted checks that event, seen by op o, was emitted to target (if not
// "") by a commit that committed.
func (ck *checker) emitted(o *Op, event, target string, what desc) {
	cands := ck.w.emitters[event]
	var ops []OpRef
	maybe := ""
	for _, c := range cands {
		if target != "" && !c.emitsTo(event, target) {
			ops = append(ops, c.ref("an emitter of "+event))
			continue
		}
		switch c.st {
		case present:
			return
		case unresolved:
			maybe = c.Exe
		}
		ops = append(ops, c.ref("an emitter of "+event))
	}
	if maybe != "" {
		// An unresolved emitter may have committed: undecided, not passed.
		ck.skip(maybe, InvOutbox, fmt.Sprintf("%s saw event %s, emitted only by unresolved commits", what, event))
		return
	}
	why := "which no commit of the history emitted"
	if len(cands) > 0 {
		why = "whose emitters did not commit"
		if target != "" {
			why += " (or did not emit it to " + target + ")"
		}
	}
	ck.add(InvOutbox, target, fmt.Sprintf("%s saw event %s, %s", what, event, why), append([]OpRef{ref(o, "")}, ops...), nil)
}

// movedCopies reports whether outbox rows seqs of one event (or spawn
// rows of one child), emitted by execution from, are the copies moves made (ARCHITECTURE.md §6: a move
// copies its range's pending outbox rows to the destination, numbered
// from the destination's sequence, and a relay that read the source's row
// may deliver the event again; dedupe absorbs it): no more rows than one
// plus the moves of a range holding the emitter's bucket (the run's move
// and mover-kill faults, whatever became of them), each on a shard (a
// seq's stride names it) that was the source or the destination of one
// of those moves. A range moved back and forth gives its row a new seq on
// a shard that held it before.
func (ck *checker) movedCopies(from string, seqs []int64) bool {
	e := ck.w.exes[from]
	if e == nil || len(e.rows) == 0 || len(seqs) < 2 {
		return false
	}
	bucket := e.rows[0].r.Bucket
	byOrdinal := map[int]string{}
	for _, s := range ck.w.h.Header.Map.Shards {
		byOrdinal[s.Ordinal] = s.Name
	}
	involved := map[string]bool{}
	moves := 0
	for _, mv := range ck.w.h.Moves() {
		if mv.Lo <= bucket && bucket <= mv.Hi {
			involved[mv.From], involved[mv.To] = true, true
			moves++
		}
	}
	if len(seqs) > moves+1 {
		return false
	}
	for _, seq := range seqs {
		ord := int((((seq%seqStride)+seqStride)%seqStride + seqStride - 1) % seqStride)
		if name, ok := byOrdinal[ord]; !ok || !involved[name] {
			return false
		}
	}
	return true
}
