package route

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/shardmap"
)

// Route decides where st runs. It never panics on any parameter bytes:
// malformed input becomes a DestRefuse with the SQLSTATE Postgres would use.
func (r *Table) Route(st *Statement, params [][]byte, formats []int16, paramOIDs []uint32) Dest {
	d := r.routeOne(st, params, formats, paramOIDs)
	if d.Kind == DestRefuse && st.Select && st.ReadOnly && st.ParseError == "" && acrossShards(d.Refusal) {
		return r.twoStage(st, d, params, formats, paramOIDs) // twostage.go
	}
	return d
}

// routeOne is Route without the two-stage plan.
func (r *Table) routeOne(st *Statement, params [][]byte, formats []int16, paramOIDs []uint32) Dest {
	b := st.lit
	if b != nil && b.decided {
		return b.dest // a text with literals and no $n: decided when analyzed
	}
	in := input{params: params, formats: formats, oids: paramOIDs}
	if b != nil {
		in.lits = b.lits
	}
	return r.route(st, &in)
}

func (r *Table) route(st *Statement, in *input) Dest {
	p := st.plan
	if p == nil {
		return *anyDest(kindReason(st.Kind))
	}
	if p.static != nil {
		return *p.static
	}
	if s := p.fast; s != nil {
		v := r.value(s, in)
		pl := r.place(v, s)
		switch pl.kind {
		case pOne:
			return r.shardDest(pl, 1, in.lits)
		case pEmpty:
			return Dest{Kind: DestAny, Bucket: -1, Reason: emptyWhy(pl, in.lits)}
		}
	}
	return r.decide(p, in, nil)
}

// input is one Bind's parameters, and the literals of the statement's text
// (a statement analyzed through its normalized text).
type input struct {
	params  [][]byte
	formats []int16
	oids    []uint32
	lits    []literal
}

// value returns the key value source s has under in.
func (r *Table) value(s *source, in *input) kval {
	if s.lit > 0 {
		return litValue(s, in.lits)
	}
	if s.param == 0 {
		return s.konst
	}
	n := s.param
	if in.params == nil {
		return refuse("42P02", "there is no parameter $"+strconv.Itoa(n))
	}
	if n > len(in.params) {
		return refuse("08P01", "bind message supplies "+strconv.Itoa(len(in.params))+" parameters, but the statement uses $"+strconv.Itoa(n))
	}
	var f int16
	switch len(in.formats) {
	case 0:
	case 1:
		f = in.formats[0]
	case len(in.params):
		f = in.formats[n-1]
	default:
		return refuse("08P01", "bind message has "+strconv.Itoa(len(in.formats))+" parameter formats but "+strconv.Itoa(len(in.params))+" parameters")
	}
	// The declared type wins (the cast then converts); else the cast
	// types the parameter; else the key column's type does.
	var v kval
	if n <= len(in.oids) && in.oids[n-1] != 0 {
		v = decodeParam(in.params[n-1], f, vtypeOfOID(in.oids[n-1]), n)
		if s.cast != vtNone {
			v = castTo(v, s.cast)
		}
	} else if s.cast != vtNone {
		v = decodeParam(in.params[n-1], f, s.cast, n)
	} else {
		v = decodeParam(in.params[n-1], f, naturalType(s.key), n)
	}
	for _, c := range s.chain {
		v = castTo(v, c)
	}
	return toKey(v, s.key)
}

// placed is where one key value lives.
type placed struct {
	kind   uint8
	shard  int
	bucket int // -1 for sequence keys
	v      kval
	src    *source
	ref    *Refusal
	note   string
}

const (
	pOne    uint8 = iota // one shard
	pEmpty               // no row can match: no shard needed
	pAll                 // not interpretable: every shard
	pRefuse              // the value is refused
)

func (r *Table) place(v kval, s *source) placed {
	switch v.kind {
	case kNull:
		if s.insert {
			return placed{kind: pRefuse, src: s, ref: &Refusal{SQLState: "23502",
				Message: fmt.Sprintf("null value in sharding key column %s", s.col),
				Detail:  "A row without a key has no shard."}}
		}
		return placed{kind: pEmpty, v: v, src: s, note: "NULL equals no key"}
	case kEmpty:
		return placed{kind: pEmpty, v: v, src: s, note: v.note}
	case kNone:
		return placed{kind: pAll, v: v, src: s, note: v.note}
	case kRefuse:
		return placed{kind: pRefuse, src: s, ref: v.ref}
	}
	switch s.key {
	case KeyText:
		b := shardmap.BucketText(v.s, r.m.Buckets)
		return placed{kind: pOne, shard: r.m.ShardIndexForBucket(b), bucket: b, v: v, src: s}
	case KeyInt8:
		b := shardmap.BucketInt8(v.i, r.m.Buckets)
		return placed{kind: pOne, shard: r.m.ShardIndexForBucket(b), bucket: b, v: v, src: s}
	}
	// KeySeq: the ordinal that generated the value names the shard.
	if v.i < 1 {
		if s.insert {
			return placed{kind: pRefuse, src: s, ref: &Refusal{SQLState: "0A000",
				Message: fmt.Sprintf("%s = %d names no shard: global sequence values start at 1", s.col, v.i)}}
		}
		return placed{kind: pEmpty, v: v, src: s, note: "sequence values start at 1"}
	}
	ord := int((v.i - 1) % shardmap.SeqStride)
	idx := r.ordIdx[ord]
	if idx < 0 {
		if s.insert {
			return placed{kind: pRefuse, src: s, ref: &Refusal{SQLState: "0A000",
				Message: fmt.Sprintf("%s = %d belongs to ordinal %d, which no shard of map epoch %d has", s.col, v.i, ord, r.m.Epoch)}}
		}
		return placed{kind: pEmpty, v: v, src: s, note: "ordinal " + strconv.Itoa(ord) + " has no shard"}
	}
	return placed{kind: pOne, shard: int(idx), bucket: -1, v: v, src: s}
}

// shardDest is the decision for one placed key; agree counts the keyed
// references that agree on its shard. The reason and the key are one
// allocation (the key may alias Bind bytes: it is copied).
func (r *Table) shardDest(p placed, agree int, lits []literal) Dest {
	var buf [256]byte
	b := append(buf[:0], p.src.col...)
	b = append(b, " = "...)
	b = p.src.appendExpr(b, lits)
	b = append(b, " → "...)
	b = appendKey(b, p.v)
	b = appendPlace(b, r, p)
	if agree > 1 {
		b = append(b, " ("...)
		b = strconv.AppendInt(b, int64(agree), 10)
		b = append(b, " keyed references agree)"...)
	}
	reason := len(b)
	if p.v.kind == kInt {
		b = strconv.AppendInt(b, p.v.i, 10)
	} else {
		b = append(b, p.v.text()...)
	}
	s := string(b)
	return Dest{Kind: DestShard, Shard: p.shard, Key: s[reason:], Bucket: p.bucket, Reason: s[:reason]}
}

func appendKey(b []byte, v kval) []byte {
	if v.kind == kInt {
		return strconv.AppendInt(b, v.i, 10)
	}
	s := v.s
	const max = 40
	long := false
	if len(s) > max {
		cut := max
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s, long = s[:cut], true
	}
	b = append(b, '\'')
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			b = append(b, '\'')
		}
		b = append(b, s[i])
	}
	if long {
		b = append(b, "…"...)
	}
	return append(b, '\'')
}

func appendPlace(b []byte, r *Table, p placed) []byte {
	if p.bucket >= 0 {
		b = append(b, " → bucket "...)
		b = strconv.AppendInt(b, int64(p.bucket), 10)
	} else {
		b = append(b, " → ordinal "...)
		b = strconv.AppendInt(b, int64(r.m.Shards[p.shard].Ordinal), 10)
	}
	b = append(b, " → "...)
	return append(b, r.m.Shards[p.shard].Name...)
}

func placeWhy(r *Table, p placed) string { return string(appendPlace(nil, r, p)) }

func emptyWhy(p placed, lits []literal) string {
	return "matches no row: " + p.src.desc(lits) + " is " + p.v.text() + " (" + p.note + "); any shard"
}

// gstate is one group's evaluated shard set and the key that witnesses it.
type gstate struct {
	set  sset
	wit  placed
	ok   bool   // wit is set
	note string // why the set is every shard, when a key could not be used
}

// evaluator evaluates constraint trees for one Route.
type evaluator struct {
	r      *Table
	in     *input
	trace  *[]string
	prefix string // the group being evaluated, for trace lines
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
		v := e.r.value(n.src, e.in)
		p := e.r.place(v, n.src)
		switch p.kind {
		case pOne:
			if e.trace != nil {
				e.tracef("%s → %s%s", n.src.desc(e.in.lits), string(appendKey(nil, p.v)), placeWhy(e.r, p))
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

// decide evaluates a plan in full. With trace it records each step.
func (r *Table) decide(p *plan, in *input, trace *[]string) Dest {
	e := evaluator{r: r, in: in, trace: trace}
	var buf [8]gstate
	gs, ref := e.groupStates(p, buf[:0])
	if ref != nil {
		return refuseDest(ref)
	}
	if p.hint != nil {
		return r.hintDest(p, gs, &e)
	}
	if p.refusal != nil {
		return refuseDest(p.refusal)
	}
	if p.ddl {
		return r.ddlDest(p)
	}
	// One shard for every group, or a fan-out, or a refusal.
	on := onShards(gs)
	switch {
	case on.conflict >= 0:
		return r.conflict(p, gs, on.single, on.conflict, in.lits)
	case on.multi < 0:
		return r.oneShardDest(p, &on, in.lits)
	}
	return r.fanOutDest(p, gs, on.multi, in)
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
func (r *Table) hintDest(p *plan, gs []gstate, e *evaluator) Dest {
	h := p.hint
	for i := range gs {
		if gs[i].set.empty() || gs[i].set.has(h.shard) {
			continue
		}
		other := "its keys are elsewhere"
		if gs[i].ok {
			other = fmt.Sprintf("%s → %s is on shard %s", gs[i].wit.src.desc(e.in.lits), string(appendKey(nil, gs[i].wit.v)), r.m.Shards[gs[i].wit.shard].Name)
		}
		ref := &Refusal{SQLState: "0A000",
			Message: fmt.Sprintf("%s routes to shard %s but %s", h.desc, r.m.Shards[h.shard].Name, other),
			Hint:    "Remove the hint or fix it: pgshard never guesses between a hint and the statement's own key."}
		return refuseDest(ref)
	}
	e.tracef("%s → shard %s", h.desc, r.m.Shards[h.shard].Name)
	return Dest{Kind: DestShard, Shard: h.shard, Key: h.key, Bucket: h.b, Reason: h.desc + " → " + r.m.Shards[h.shard].Name}
}

// ddlDest: a schema change of unsharded tables runs on the default shard,
// any other on every shard.
func (r *Table) ddlDest(p *plan) Dest {
	if len(p.ddlTables) > 0 && r.allUnsharded(p.ddlTables) {
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
func (r *Table) oneShardDest(p *plan, on *shardChoice, lits []literal) Dest {
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
		return r.shardDest(on.wit, on.agree, lits)
	}
	return Dest{Kind: DestShard, Shard: on.single, Bucket: -1,
		Reason: fmt.Sprintf("the keyed references (%s) all live on shard %s", p.groups[0].desc, r.m.Shards[on.single].Name)}
}

// fanOutDest decides a statement whose group multi needs several shards:
// EXPLAIN runs on one, a write is refused, and a read fans out when its
// groups are co-located, it only reads sharded tables and it merges.
func (r *Table) fanOutDest(p *plan, gs []gstate, multi int, in *input) Dest {
	g := &p.groups[multi]
	spread := r.spread(g, &gs[multi])
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
	if ref := notColocated(p, gs, g); ref != nil {
		return refuseDest(ref)
	}
	if ref := cannotFanOut(p, spread); ref != nil {
		return refuseDest(ref)
	}
	m := &p.merge.merge
	if p.merge.limit != nil || p.merge.offset != nil {
		mc := *m
		var ref *Refusal
		if mc.Limit, ref = r.limitValue(p.merge.limit, in, mc.Limit); ref != nil {
			return refuseDest(ref)
		}
		if mc.Offset, ref = r.limitValue(p.merge.offset, in, mc.Offset); ref != nil {
			return refuseDest(ref)
		}
		m = &mc
	}
	return Dest{Kind: DestAll, Bucket: -1, Merge: m,
		Reason: fmt.Sprintf("%s: fan out to all %d shards, %s", spread, len(r.m.Shards), p.merge.descText(in.lits))}
}

// spread says why group g (evaluated to gst) needs several shards.
func (r *Table) spread(g *group, gst *gstate) string {
	spread := g.desc + ": no key predicate"
	if n := gst.set.members(len(r.m.Shards)); !gst.set.all {
		var names []string
		for _, i := range n {
			names = append(names, r.m.Shards[i].Name)
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
// shard's rows): one shard's answer would be wrong.
func notColocated(p *plan, gs []gstate, g *group) *Refusal {
	for i := range gs {
		if gs[i].set.empty() || p.groups[i].coloc == g.coloc {
			continue
		}
		if sub := firstNonEmpty(g.sub, p.groups[i].sub); sub != "" {
			return &Refusal{SQLState: "0A000",
				Message: fmt.Sprintf("cannot run across shards: %s (%s); one shard's part of it would be wrong", sub, subDesc(p, g, &p.groups[i])),
				Detail:  "The subquery's result must be computed from every shard's rows before the rest of the statement uses it; pgshard does not do that.",
				Hint:    "Run the subquery as its own statement (pgshard merges it) and pass its result in, or correlate it by the key (... WHERE t.execution_id = e.id)."}
		}
		return &Refusal{SQLState: "0A000",
			Message: fmt.Sprintf("cannot run across shards: %s and %s are not joined on their keys", g.desc, p.groups[i].desc),
			Detail:  "Each shard would see only its own rows of both, so a per-shard answer would be wrong.",
			Hint:    hintAdvice}
	}
	return nil
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
			Message: fmt.Sprintf("cannot fan out (%s): the statement also reads %s, which is not sharded and lives on the default shard only", spread, p.unsharded),
			Detail:  "Every shard would run the statement without that table's rows.",
			Hint:    "Read the unsharded table and the sharded rows in separate statements, or give the sharded rows a key."}
	case p.merge == nil:
		return &Refusal{SQLState: "0A000",
			Message: fmt.Sprintf("cannot merge a key-less read across shards: %s", p.mergeWhy),
			Detail:  spread + ".",
			Hint:    hintAdvice}
	}
	return nil
}

// conflict refuses a statement whose keys name two shards.
func (r *Table) conflict(p *plan, gs []gstate, first, at int, lits []literal) Dest {
	describe := func(shard int) string {
		for i := range gs {
			if gs[i].ok && gs[i].wit.shard == shard && gs[i].set.one() == shard {
				return fmt.Sprintf("%s → %s is on shard %s", gs[i].wit.src.desc(lits), string(appendKey(nil, gs[i].wit.v)), r.m.Shards[shard].Name)
			}
		}
		for i := range gs {
			if gs[i].set.one() == shard {
				return fmt.Sprintf("%s is on shard %s", p.groups[i].desc, r.m.Shards[shard].Name)
			}
		}
		return "shard " + r.m.Shards[shard].Name
	}
	second := gs[at].set.one()
	ref := &Refusal{SQLState: "0A000",
		Message: fmt.Sprintf("statement touches two shards: %s, but %s", describe(first), describe(second)),
		Detail:  "A statement runs on exactly one shard, or (a key-less read) on all of them.",
		Hint:    "Split the statement per key."}
	return refuseDest(ref)
}

// limitValue is a LIMIT/OFFSET parameter's value (-1 for NULL = none).
func (r *Table) limitValue(s *source, in *input, def int64) (int64, *Refusal) {
	if s == nil {
		return def, nil
	}
	if s.param > 0 && s.param <= len(in.oids) {
		switch in.oids[s.param-1] {
		case 0, pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
		default:
			return 0, &Refusal{SQLState: "0A000", Message: fmt.Sprintf("%s $%d is declared with a type other than an integer: pgshard does not convert it for the merge", s.col, s.param),
				Hint: "Declare it int8 (or leave its type unspecified)."}
		}
	}
	v := r.value(s, in)
	switch v.kind {
	case kInt:
		if v.i < 0 {
			if s.col == "OFFSET" {
				return 0, &Refusal{SQLState: "2201X", Message: "OFFSET must not be negative"}
			}
			return 0, &Refusal{SQLState: "2201W", Message: "LIMIT must not be negative"}
		}
		return v.i, nil
	case kNull:
		return -1, nil
	case kRefuse:
		return 0, v.ref
	}
	return 0, &Refusal{SQLState: "0A000", Message: fmt.Sprintf("cannot read LIMIT/OFFSET from %s for the merge", s.exprText(in.lits)),
		Hint: "Send it as an integer (int2/int4/int8)."}
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
func (r *Table) allUnsharded(tables []string) bool {
	for _, t := range tables {
		if r.sc.tables[t] != nil || r.sc.global[t] {
			return false
		}
	}
	return true
}
