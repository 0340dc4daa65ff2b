package route

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pgshard/pgshard/shardmap"
)

// placer places keys on the shards of one map: a text or int8 key by its
// bucket and the shard that owns the bucket, a sequence value by the
// ordinal that generated it; a shard by its name. It is built with its
// Table and never changes (a new map needs a new Table).
type placer struct {
	m      *shardmap.Map
	ordIdx [maxShards]int16 // ordinal → shard index, -1 if none
	byName map[string]int
	names  string // "s0, s1, ..." for messages
}

func newPlacer(m *shardmap.Map) placer {
	pl := placer{m: m, byName: map[string]int{}}
	for i := range pl.ordIdx {
		pl.ordIdx[i] = -1
	}
	var names []string
	for i, s := range m.Shards {
		pl.ordIdx[s.Ordinal] = int16(i)
		pl.byName[s.Name] = i
		names = append(names, s.Name)
	}
	pl.names = strings.Join(names, ", ")
	return pl
}

// name is the name of shard i.
func (pl *placer) name(i int) string { return pl.m.Shards[i].Name }

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

// place finds where the key value v of source s lives.
func (pl *placer) place(v kval, s *source) placed {
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
		b := shardmap.BucketText(v.s, pl.m.Buckets)
		return placed{kind: pOne, shard: pl.m.ShardIndexForBucket(b), bucket: b, v: v, src: s}
	case KeyInt8:
		b := shardmap.BucketInt8(v.i, pl.m.Buckets)
		return placed{kind: pOne, shard: pl.m.ShardIndexForBucket(b), bucket: b, v: v, src: s}
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
	idx := pl.ordIdx[ord]
	if idx < 0 {
		if s.insert {
			return placed{kind: pRefuse, src: s, ref: &Refusal{SQLState: "0A000",
				Message: fmt.Sprintf("%s = %d belongs to ordinal %d, which no shard of map epoch %d has", s.col, v.i, ord, pl.m.Epoch)}}
		}
		return placed{kind: pEmpty, v: v, src: s, note: "ordinal " + strconv.Itoa(ord) + " has no shard"}
	}
	return placed{kind: pOne, shard: int(idx), bucket: -1, v: v, src: s}
}

// shardDest is the decision for one placed key; agree counts the keyed
// references that agree on its shard. It allocates nothing for a key from
// a parameter or a constant: the reason is built on demand (Dest.Why), a
// text key aliases the value (a Bind parameter's bytes), an integer key is
// carried as the number. A key from a literal of the text (whose values the
// pooled normalizer reuses) is built now: the reason and the key in one
// allocation.
func (pl *placer) shardDest(p placed, agree int, lits []literal) Dest {
	why := keyedWhy{m: pl.m, src: p.src, v: p.v, agree: agree}
	if p.src.lit == 0 {
		d := Dest{Kind: DestShard, Shard: p.shard, Bucket: p.bucket, keyed: why}
		if p.v.kind != kInt {
			d.Key = p.v.text()
		}
		return d
	}
	var buf [256]byte
	b := appendWhy(buf[:0], why, p.shard, p.bucket, lits...)
	reason := len(b)
	if p.v.kind == kInt {
		b = strconv.AppendInt(b, p.v.i, 10)
	} else {
		b = append(b, p.v.text()...)
	}
	s := string(b)
	return Dest{Kind: DestShard, Shard: p.shard, Key: s[reason:], Bucket: p.bucket, Reason: s[:reason]}
}

// appendWhy appends the reason of a keyed decision on shard (bucket):
// "col = expr → key → bucket N → shard (k keyed references agree)".
func appendWhy(b []byte, w keyedWhy, shard, bucket int, lits ...literal) []byte {
	b = append(b, w.src.col...)
	b = append(b, " = "...)
	b = w.src.appendExpr(b, lits)
	b = append(b, " → "...)
	b = appendKey(b, w.v)
	b = appendPlace(b, w.m, shard, bucket)
	if w.agree > 1 {
		b = append(b, " ("...)
		b = strconv.AppendInt(b, int64(w.agree), 10)
		b = append(b, " keyed references agree)"...)
	}
	return b
}

// appendPlace appends " → bucket N → shard" (or, with bucket -1, the
// ordinal of a sequence key's shard) for shard of map m.
func appendPlace(b []byte, m *shardmap.Map, shard, bucket int) []byte {
	if bucket >= 0 {
		b = append(b, " → bucket "...)
		b = strconv.AppendInt(b, int64(bucket), 10)
	} else {
		b = append(b, " → ordinal "...)
		b = strconv.AppendInt(b, int64(m.Shards[shard].Ordinal), 10)
	}
	b = append(b, " → "...)
	return append(b, m.Shards[shard].Name...)
}

func (pl *placer) placeWhy(p placed) string { return string(appendPlace(nil, pl.m, p.shard, p.bucket)) }

// routeKey routes an explicit key (Table.RouteKey).
func (pl *placer) routeKey(key string, t KeyType) Dest {
	v := toKey(kval{kind: kText, s: key}, t)
	if v.kind != kInt && t != KeyText {
		ref := &Refusal{SQLState: "22P02", Message: fmt.Sprintf("pgshard key %q is not a valid %s key", key, t),
			Hint: "An integer sharding key is given in decimal."}
		return Dest{Kind: DestRefuse, Bucket: -1, Reason: ref.Message, Refusal: ref}
	}
	p := pl.place(v, &source{key: t, insert: true, col: "key", expr: quoteKey(key)})
	switch p.kind {
	case pOne:
		return Dest{Kind: DestShard, Shard: p.shard, Key: strings.Clone(v.text()), Bucket: p.bucket,
			Reason: "pgshard key " + quoteKey(v.text()) + pl.placeWhy(p)}
	case pRefuse:
		return Dest{Kind: DestRefuse, Bucket: -1, Reason: p.ref.Message, Refusal: p.ref}
	}
	ref := &Refusal{SQLState: "22023", Message: fmt.Sprintf("pgshard key %q names no shard", key)}
	return Dest{Kind: DestRefuse, Bucket: -1, Reason: ref.Message, Refusal: ref}
}

// routeShard routes to the shard named name (Table.RouteShard).
func (pl *placer) routeShard(name string) Dest {
	i, ok := pl.byName[name]
	if !ok {
		ref := pl.unknownShard(name)
		return Dest{Kind: DestRefuse, Bucket: -1, Reason: ref.Message, Refusal: ref}
	}
	return Dest{Kind: DestShard, Shard: i, Bucket: -1, Reason: "pgshard shard " + name}
}

func (pl *placer) unknownShard(name string) *Refusal {
	return &Refusal{SQLState: "42704", Message: fmt.Sprintf("hint pgshard:shard=%s names no shard of map epoch %d", name, pl.m.Epoch),
		Hint: "Known shards: " + pl.names + "."}
}

// bound is where a statement routed to d runs inside a transaction bound
// to shard bound (Table.Bound).
func (pl *placer) bound(d Dest, bound int) Dest {
	switch d.Kind {
	case DestAny:
		d.Kind, d.Shard = DestShard, bound
		d.Reason += "; runs on the transaction's shard " + pl.name(bound)
		return d
	case DestShard:
		if d.Shard == bound {
			return d
		}
		ref := &Refusal{SQLState: "0A000",
			Message: fmt.Sprintf("statement belongs to shard %s but the transaction runs on shard %s", pl.name(d.Shard), pl.name(bound)),
			Detail:  d.Why(),
			Hint:    "A transaction must stay on one shard: roll back and run the statement in its own transaction."}
		return Dest{Kind: DestRefuse, Shard: d.Shard, Key: d.KeyText(), Bucket: d.Bucket, Reason: ref.Message, Refusal: ref}
	case DestAll:
		ref := &Refusal{SQLState: "0A000",
			Message: fmt.Sprintf("statement needs every shard but the transaction runs on shard %s", pl.name(bound)),
			Detail:  d.Why(),
			Hint:    "Add a key predicate, or run the statement outside the transaction."}
		return Dest{Kind: DestRefuse, Bucket: -1, Reason: ref.Message, Refusal: ref}
	}
	return d
}

// appendKey renders a key value for reasons: an integer as is, text
// quoted and clipped to 40 bytes.
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

// emptyWhy is the reason of a key that matches no row (DestAny).
func emptyWhy(p placed, lits []literal) string {
	return "matches no row: " + p.src.desc(lits) + " is " + p.v.text() + " (" + p.note + "); any shard"
}

// quoteKey quotes an explicit key for messages, clipped to 40 bytes.
func quoteKey(s string) string {
	const max = 40
	if len(s) > max {
		cut := max
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		s = s[:cut] + "…"
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
