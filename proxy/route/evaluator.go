package route

import (
	"fmt"
	"strings"
)

// evaluator decides one statement under one Bind (or a text's literals):
// it evaluates the plan's constraint trees into the groups' shard sets over
// the map (pl) and the schema (sc), and turns them into a Dest. With trace
// set it records each step (Explain). A Route makes one on its stack.
type evaluator struct {
	pl     *placer
	sc     *compiled
	in     *input
	trace  *[]string
	prefix string // the group being evaluated, for trace lines
}

// route decides st: its decision made at analysis, the fast path of a
// statement one key parameter decides, else its plan in full.
func (e *evaluator) route(st *Statement) Dest {
	p := st.plan
	if p == nil {
		return *anyDest(kindReason(st.Kind))
	}
	if p.static != nil {
		return *p.static
	}
	if s := p.fast; s != nil {
		v := e.in.value(s)
		at := e.pl.place(v, s)
		switch at.kind {
		case pOne:
			return e.pl.shardDest(at, 1, e.in.lits)
		case pEmpty:
			return Dest{Kind: DestAny, Bucket: -1, Reason: emptyWhy(at, e.in.lits)}
		}
	}
	return e.decide(p)
}

// gstate is one group's evaluated shard set and the key that witnesses it.
type gstate struct {
	set  sset
	wit  placed
	ok   bool   // wit is set
	note string // why the set is every shard, when a key could not be used
}

func (e *evaluator) tracef(format string, args ...any) {
	if e.trace != nil {
		*e.trace = append(*e.trace, e.prefix+fmt.Sprintf(format, args...))
	}
}

func (e *evaluator) eval(n *cnode) (gstate, *Refusal) {
	if n == nil {
		return gstate{set: setAll()}, nil
	}
	switch n.op {
	case cAll:
		e.tracef("%s: every shard", n.note)
		return gstate{set: setAll(), note: n.note}, nil
	case cNone:
		e.tracef("%s: no shard needed", n.note)
		return gstate{}, nil
	case cSrc:
		v := e.in.value(n.src)
		p := e.pl.place(v, n.src)
		switch p.kind {
		case pOne:
			if e.trace != nil {
				e.tracef("%s → %s%s", n.src.desc(e.in.lits), string(appendKey(nil, p.v)), e.pl.placeWhy(p))
			}
			return gstate{set: setOne(p.shard), wit: p, ok: true}, nil
		case pEmpty:
			if e.trace != nil {
				e.tracef("%s → %s: matches no row (%s)", n.src.desc(e.in.lits), p.v.text(), p.note)
			}
			return gstate{}, nil
		case pAll:
			if e.trace != nil {
				e.tracef("%s: no key (%s): every shard", n.src.desc(e.in.lits), p.note)
			}
			return gstate{set: setAll(), note: n.src.desc(e.in.lits) + ": " + p.note}, nil
		}
		return gstate{}, p.ref
	case cAnd:
		g := gstate{set: setAll()}
		for _, k := range n.kids {
			kg, ref := e.eval(k)
			if ref != nil {
				return g, ref
			}
			g.set.and(&kg.set)
			if g.note == "" {
				g.note = kg.note
			}
			// Keep the first key as the witness while it is still in the
			// set; else take this one if it is.
			if kg.ok && (!g.ok || !g.set.has(g.wit.shard) && g.set.has(kg.wit.shard)) {
				g.wit, g.ok = kg.wit, true
			}
		}
		return g, nil
	case cOr:
		var g gstate
		for _, k := range n.kids {
			kg, ref := e.eval(k)
			if ref != nil {
				return g, ref
			}
			g.set.or(&kg.set)
			if g.note == "" {
				g.note = kg.note
			}
			if kg.ok && !g.ok {
				g.wit, g.ok = kg.wit, true
			}
		}
		return g, nil
	}
	return gstate{set: setAll()}, nil
}

func refuseDest(ref *Refusal) Dest {
	return Dest{Kind: DestRefuse, Bucket: -1, Reason: ref.Message, Refusal: ref}
}

const hintAdvice = "Add a key predicate (e.g. id = $1), or route it explicitly with /* pgshard:key=KEY */ or /* pgshard:shard=NAME */."

// decide evaluates a plan in full; with e.trace it records each step.
func (e *evaluator) decide(p *plan) Dest {
	var buf [8]gstate
	gs, ref := e.groupStates(p, buf[:0])
	if ref != nil {
		return refuseDest(ref)
	}
	if p.hint != nil {
		return e.hintDest(p, gs)
	}
	if p.refusal != nil {
		return refuseDest(p.refusal)
	}
	if p.ddl {
		return e.ddlDest(p)
	}
	// One shard for every group, or a fan-out, or a refusal.
	on := onShards(gs)
	switch {
	case on.conflict >= 0 && (p.setop || p.noFrom):
		// Branches of a set operation (or subqueries of a SELECT without
		// FROM) keyed to different shards: a merged UNION runs on every
		// shard (a branch reads nothing on another's shard); another is
		// refused as one across shards, which two stages may answer.
		return e.fanOutDest(p, gs, on.conflict)
	case on.conflict >= 0:
		return e.conflict(p, gs, on.single, on.conflict)
	case on.multi < 0:
		return e.oneShardDest(p, &on)
	}
	return e.fanOutDest(p, gs, on.multi)
}

// groupStates evaluates each group's conditions into its shard set
// (appended to gs, which it grows if the plan has more groups), then
// narrows each set by the groups it joins (the edges).
func (e *evaluator) groupStates(p *plan, gs []gstate) ([]gstate, *Refusal) {
	if len(p.groups) > cap(gs) {
		gs = make([]gstate, 0, len(p.groups))
	}
	for i := range p.groups {
		g := &p.groups[i]
		if e.trace != nil {
			e.prefix = "[" + g.desc + "] "
		}
		st, ref := e.eval(g.expr)
		if ref != nil {
			return gs, ref
		}
		if g.expr == nil {
			e.tracef("no key predicate: every shard")
		}
		gs = append(gs, st)
	}
	e.prefix = ""
	for _, ed := range p.edges {
		gs[ed[1]].set.and(&gs[ed[0]].set)
		e.tracef("%s only needs rows that join %s", p.groups[ed[1]].desc, p.groups[ed[0]].desc)
	}
	return gs, nil
}

// hintDest routes a hinted statement to the hint's shard, unless a group
// needs rows elsewhere: the hint contradicts the statement's own key.
func (e *evaluator) hintDest(p *plan, gs []gstate) Dest {
	h := p.hint
	for i := range gs {
		if gs[i].set.empty() || gs[i].set.has(h.shard) {
			continue
		}
		other := "its keys are elsewhere"
		if gs[i].ok {
			other = fmt.Sprintf("%s → %s is on shard %s", gs[i].wit.src.desc(e.in.lits), string(appendKey(nil, gs[i].wit.v)), e.pl.name(gs[i].wit.shard))
		}
		ref := &Refusal{SQLState: "0A000",
			Message: fmt.Sprintf("%s routes to shard %s but %s", h.desc, e.pl.name(h.shard), other),
			Hint:    "Remove the hint or fix it: pgshard never guesses between a hint and the statement's own key."}
		return refuseDest(ref)
	}
	e.tracef("%s → shard %s", h.desc, e.pl.name(h.shard))
	return Dest{Kind: DestShard, Shard: h.shard, Key: h.key, Bucket: h.b, Reason: h.desc + " → " + e.pl.name(h.shard)}
}

// ddlDest: a schema change of unsharded tables runs on the default shard,
// any other on every shard.
func (e *evaluator) ddlDest(p *plan) Dest {
	if len(p.ddlTables) > 0 && e.allUnsharded(p.ddlTables) {
		return Dest{Kind: DestAny, Default: true, Bucket: -1,
			Reason: "a schema change of unsharded tables (" + strings.Join(p.ddlTables, ", ") + "): on the default shard"}
	}
	return Dest{Kind: DestAll, Bucket: -1, Reason: "a schema change without a key: applied to every shard"}
}

// shardChoice is where the groups' shard sets point.
type shardChoice struct {
	single   int    // the one shard of the groups that need one, or -1
	agree    int    // how many groups need single
	wit      placed // a key that places a group on single
	haveWit  bool
	multi    int // the first group that needs several shards, or -1
	conflict int // the first group on another shard than single, or -1
}

// onShards finds the shard the groups that need one shard agree on, the
// first group that needs several, and the first that disagrees.
func onShards(gs []gstate) shardChoice {
	on := shardChoice{single: -1, multi: -1, conflict: -1}
	for i := range gs {
		s := &gs[i].set
		if s.empty() {
			continue
		}
		one := s.one()
		if one < 0 {
			if on.multi < 0 {
				on.multi = i
			}
			continue
		}
		switch {
		case on.single < 0:
			on.single, on.agree = one, 1
			if gs[i].ok && gs[i].wit.shard == one {
				on.wit, on.haveWit = gs[i].wit, true
			}
		case on.single == one:
			on.agree++
			if !on.haveWit && gs[i].ok && gs[i].wit.shard == one {
				on.wit, on.haveWit = gs[i].wit, true
			}
		default:
			on.conflict = i
			return on
		}
	}
	return on
}

// oneShardDest routes a statement none of whose groups needs several
// shards: to the groups' shard, else to the default shard or any shard.
func (e *evaluator) oneShardDest(p *plan, on *shardChoice) Dest {
	if on.single < 0 {
		if p.defaultWhy != "" {
			return Dest{Kind: DestAny, Default: true, Bucket: -1, Reason: p.defaultWhy + ": on the default shard"}
		}
		if len(p.groups) == 0 && p.unknownFn != "" {
			return Dest{Kind: DestAny, Default: true, Bucket: -1,
				Reason: fmt.Sprintf("calls %s(), which is neither a PostgreSQL built-in nor in the sharding schema: on the default shard", p.unknownFn)}
		}
		return Dest{Kind: DestAny, Bucket: -1, Reason: anyWhy(p)}
	}
	if on.haveWit {
		return e.pl.shardDest(on.wit, on.agree, e.in.lits)
	}
	return Dest{Kind: DestShard, Shard: on.single, Bucket: -1,
		Reason: fmt.Sprintf("the keyed references (%s) all live on shard %s", p.groups[0].desc, e.pl.name(on.single))}
}

// fanOutDest decides a statement whose group multi needs several shards:
// EXPLAIN runs on one, a write is refused, and a read fans out when its
// groups are co-located, it only reads sharded tables and it merges.
func (e *evaluator) fanOutDest(p *plan, gs []gstate, multi int) Dest {
	in := e.in
	g := &p.groups[multi]
	spread := e.spread(g, &gs[multi])
	if p.explain && !(p.analyze && (p.write || g.write)) {
		return Dest{Kind: DestAny, Bucket: -1, Reason: "EXPLAIN (" + spread + "): the plan of one shard"}
	}
	if p.write || g.write {
		what := p.writeWhat
		if what == "" {
			what = "the statement"
		}
		ref := &Refusal{SQLState: "0A000",
			Message: fmt.Sprintf("%s would write or lock rows on more than one shard (%s)", what, spread),
			Detail:  "A write runs on exactly one shard; pgshard never spreads or guesses it.",
			Hint:    hintAdvice}
		return refuseDest(ref)
	}
	if ref := notColocated(p, gs, g, spread); ref != nil {
		return refuseDest(ref)
	}
	if ref := cannotFanOut(p, spread); ref != nil {
		return refuseDest(ref)
	}
	m := &p.merge.merge
	if p.merge.limit != nil || p.merge.offset != nil {
		mc := *m
		var ref *Refusal
		if mc.Limit, ref = in.limitValue(p.merge.limit, mc.Limit); ref != nil {
			return refuseDest(ref)
		}
		if mc.Offset, ref = in.limitValue(p.merge.offset, mc.Offset); ref != nil {
			return refuseDest(ref)
		}
		m = &mc
	}
	return Dest{Kind: DestAll, Bucket: -1, Merge: m,
		Reason: fmt.Sprintf("%s: fan out to all %d shards, %s", spread, len(e.pl.m.Shards), p.merge.descText(in.lits))}
}

// spread says why group g (evaluated to gst) needs several shards.
func (e *evaluator) spread(g *group, gst *gstate) string {
	spread := g.desc + ": no key predicate"
	if n := gst.set.members(len(e.pl.m.Shards)); !gst.set.all {
		var names []string
		for _, i := range n {
			names = append(names, e.pl.name(i))
		}
		spread = g.desc + ": keys on shards " + strings.Join(names, ", ")
	} else if gst.note != "" {
		spread = g.desc + ": no usable key (" + gst.note + ")"
	} else if g.expr != nil {
		spread = g.desc + ": no usable key"
	}
	return spread
}

// notColocated refuses a fan-out when another group that needs a shard is
// not joined to g on the key (or is a subquery whose result needs every
// shard's rows): one shard's answer would be wrong. The branches of a
// merged UNION are not joined: there every two groups of one branch must
// be (setop.go); an unmerged set operation is refused as one
// (cannotFanOut says why it is not merged).
func notColocated(p *plan, gs []gstate, g *group, spread string) *Refusal {
	if p.setop && p.merge != nil {
		for i := range gs {
			for j := i + 1; j < len(gs); j++ {
				a, b := &p.groups[i], &p.groups[j]
				if gs[i].set.empty() || gs[j].set.empty() || a.sub == "" && b.sub == "" && a.leaf >= 0 && b.leaf >= 0 && a.leaf != b.leaf {
					continue
				}
				if ref := apart(p, a, b); ref != nil {
					return ref
				}
			}
		}
		return nil
	}
	for i := range gs {
		if gs[i].set.empty() {
			continue
		}
		if p.setop && p.groups[i].coloc != g.coloc && g.sub == "" && p.groups[i].sub == "" {
			return cannotFanOut(p, spread)
		}
		if ref := apart(p, g, &p.groups[i]); ref != nil {
			return ref
		}
	}
	return nil
}

// apart refuses groups a and b in one statement when they are not
// co-located (nil when they are): one of them is read by a subquery
// whose result needs every shard's rows, or they are not joined on their
// keys.
func apart(p *plan, a, b *group) *Refusal {
	if a.coloc == b.coloc {
		return nil
	}
	if sub := firstNonEmpty(a.sub, b.sub); sub != "" {
		return &Refusal{SQLState: "0A000",
			Message: fmt.Sprintf("cannot run across shards: %s (%s); one shard's part of it would be wrong", sub, subDesc(p, a, b)),
			Detail:  "The subquery's result must be computed from every shard's rows before the rest of the statement uses it; pgshard computes it first (a read in two stages) only when it does not refer to the statement's rows.",
			Hint:    "Correlate it by the sharding key (... WHERE t.execution_id = e.id), or join what it computes grouped by the column it is tied to (LEFT JOIN (SELECT target_id, count(*) AS n FROM outbox GROUP BY 1) o ON o.target_id = e.id), which pgshard reads in two stages; or run it as its own statement and pass its result in.",
			Cause:   CauseApart}
	}
	return &Refusal{SQLState: "0A000",
		Message: fmt.Sprintf("cannot run across shards: %s and %s are not joined on their keys", a.desc, b.desc),
		Detail:  "Each shard would see only its own rows of both, so a per-shard answer would be wrong.",
		Hint:    hintAdvice, Cause: CauseApart}
}

// cannotFanOut refuses a co-located read that still cannot fan out: it is
// not read-only, it also reads an unsharded table, or it does not merge.
func cannotFanOut(p *plan, spread string) *Refusal {
	switch {
	case p.notReadOnly != "":
		return &Refusal{SQLState: "0A000",
			Message: fmt.Sprintf("cannot fan out (%s): %s", spread, p.notReadOnly),
			Hint:    hintAdvice}
	case p.unsharded != "":
		return &Refusal{SQLState: "0A000",
			Message: fmt.Sprintf("cannot fan out (%s): the statement also reads %s, %s", spread, p.unsharded, unshardedFanOut),
			Detail:  "Every shard would run the statement without that table's rows.",
			Hint:    "Read the unsharded table and the sharded rows in separate statements, or give the sharded rows a key.",
			Cause:   CauseUnshardedFanOut}
	case p.merge == nil:
		return &Refusal{SQLState: "0A000",
			Message: fmt.Sprintf("cannot merge a key-less read across shards: %s", p.mergeWhy),
			Detail:  spread + ".",
			Hint:    hintAdvice, Cause: CauseMerge}
	}
	return nil
}

// conflict refuses a statement whose keys name two shards.
func (e *evaluator) conflict(p *plan, gs []gstate, first, at int) Dest {
	lits := e.in.lits
	describe := func(shard int) string {
		for i := range gs {
			if gs[i].ok && gs[i].wit.shard == shard && gs[i].set.one() == shard {
				return fmt.Sprintf("%s → %s is on shard %s", gs[i].wit.src.desc(lits), string(appendKey(nil, gs[i].wit.v)), e.pl.name(shard))
			}
		}
		for i := range gs {
			if gs[i].set.one() == shard {
				return fmt.Sprintf("%s is on shard %s", p.groups[i].desc, e.pl.name(shard))
			}
		}
		return "shard " + e.pl.name(shard)
	}
	second := gs[at].set.one()
	ref := &Refusal{SQLState: "0A000",
		Message: fmt.Sprintf("statement touches two shards: %s, but %s", describe(first), describe(second)),
		Detail:  "A statement runs on exactly one shard, or (a key-less read) on all of them; a read is answered in two stages when each table keyed to another shard can be read there first (its key in the WHERE, naming that table alone).",
		Hint:    "Split the statement per key, or write each table's key in the WHERE as table.key = value.",
		Cause:   CauseTwoShards}
	return refuseDest(ref)
}

// anyWhy explains a DestAny decision for a plan whose groups need no shard.
func anyWhy(p *plan) string {
	if len(p.groups) == 0 {
		return p.anyReason
	}
	var parts []string
	for i := range p.groups {
		g := &p.groups[i]
		if g.expr != nil && g.expr.op == cNone {
			parts = append(parts, g.expr.note)
		} else {
			parts = append(parts, "no row of "+g.desc+" can match (its key values exclude each other, or are NULL)")
		}
	}
	return strings.Join(parts, "; ") + ": any shard"
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// subDesc names the refs of whichever of two groups is read by a
// subquery that needs every shard.
func subDesc(p *plan, a, b *group) string {
	if a.sub != "" {
		return a.desc
	}
	return b.desc
}

// allUnsharded reports whether every table is outside the sharding
// schema (neither keyed nor global).
func (e *evaluator) allUnsharded(tables []string) bool {
	for _, t := range tables {
		if e.sc.tables[t] != nil || e.sc.global[t] {
			return false
		}
	}
	return true
}
