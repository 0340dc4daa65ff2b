package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
)

// The shards of one database hold the same tables and types, but each
// server numbers its objects itself: the OID of a table, the attribute
// numbers of its columns (a column dropped on one shard and not on
// another) and the OID of a type made after initdb differ from shard to
// shard as soon as their histories differ — an unsharded table made on
// the default shard alone, a shard added later. A client reads the
// catalog where the proxy sends it: on the default shard (pickHome,
// router.go), which holds every object. So a RowDescription or a
// ParameterDescription that another shard answers is told in the default
// shard's numbers before the client sees it: else pgJDBC's updatable
// result sets and ResultSetMetaData (getTableName, getColumnName,
// isNullable), Npgsql's schema reads and any client that looks a
// column's table or type up by OID find another table, or none (an
// UPDATE of column "" — 42601 — or of the wrong column).
//
// The other way, the parameter types a client's Parse names (psycopg,
// Npgsql and pgJDBC name a user type by the OID they read in the
// catalog, the default shard's) are told in the shard's numbers before
// the Parse reaches it (parseTypes): else the shard finds no such type,
// or another one.
//
// A pinned session reads the catalog on its own backend's shard: what
// other shards answer it (a read of every shard) is told in that shard's
// numbers instead (catalogShard). The type OIDs inside a value a shard
// sends in binary — an array's element type, a record's field types —
// are told the same way (relabelvalues.go). What is not told: a value
// that is an OID (SELECT tableoid, a regclass cast to oid), the type OIDs
// inside a client's binary parameters and inside a binary COPY.

// OIDMaps is one generation's translation of each shard's OIDs of user
// objects (tables, their columns, types) into the catalog shard's (the
// default shard, or a pinned session's own: pair.to),
// learned as descriptions need them: a shard's objects the first time a
// description of it names them, again after a schema change (StmtEpoch).
// A lookup is two catalog reads, one on the shard, one on the default
// shard, each on a connection made for it (catalogRead). Safe for
// concurrent use; the translation itself reads without a lock.
type OIDMaps struct {
	// mu orders the lookups (one at a time: the second finds the
	// first's answer).
	mu   sync.Mutex
	snap atomic.Pointer[oidSnap]
	// retryAt: a failed lookup of a pool is not tried again before then
	// (its descriptions stay as the shard wrote them meanwhile).
	retryAt map[pair]time.Time
}

// oidSnap is what OIDMaps knows, never changed once published.
type oidSnap struct {
	// epoch is the StmtEpoch before the lookups that made it: after a
	// schema change the snapshot is not used.
	epoch uint64
	rels  map[oidKey]relOIDs
	types map[oidKey]typeOIDs
	// back are the catalog shard's types as the shard that answers
	// numbers them (keyed by the catalog shard's OID; 0: none there): the
	// parameter types a client's Parse names.
	back map[oidKey]uint32
}

// typeOIDs is a shard's type as the catalog shard numbers it (to: 0 when
// it has none such), and what the type is (relabelvalues.go).
type typeOIDs struct {
	to    uint32
	shape typeShape
}

// oidKey is an OID of what shards.from numbers, as told to shards.to.
type oidKey struct {
	shards pair
	oid    uint32
}

// pair is a shard that answered (from: its pool) and the shard whose
// catalog the client reads (to: the default shard, or a pinned session's).
type pair struct{ from, to *backend.Pool }

// relOIDs is a shard's relation as the catalog shard numbers it.
type relOIDs struct {
	// oid is the catalog shard's (0: it has no such relation).
	oid uint32
	// keep: a temporary relation, the session's own: left as it is.
	keep bool
	// cols[attnum] is the catalog shard's attnum of the shard's column
	// attnum: noColumn when the catalog shard has no such column, 0 when
	// the shard had none when it was read (a column added since without
	// the proxy: the relation is read again).
	cols []uint16
}

// noColumn marks a column the catalog shard does not have (relOIDs.cols).
const noColumn = 0xFFFF

// oidLookupTimeout bounds a lookup (its two connections and reads): a
// description waits at most this long, then goes out as the shard wrote
// it.
const oidLookupTimeout = 5 * time.Second

// oidRetryAfter is how long a pool whose lookup failed is not asked again.
const oidRetryAfter = time.Second

// relabeler tells one shard's descriptions in the catalog shard's
// numbers for one session (its zero value leaves them alone).
type relabeler struct {
	ctx context.Context
	gen *GenerationEnv
	p   pair
	// memo, when set, is the session's last description told: a
	// session's descriptions mostly repeat (one statement run again and
	// again), and one the same as the last is told as it was.
	memo *descMemo
}

// descMemo is a RowDescription of p.from as it came (in) and as it was
// told (out) by snapshot snap.
type descMemo struct {
	snap    *oidSnap
	p       pair
	in, out []byte
	vals    *rowValues
}

// relabelFor returns the relabeler of what s exchanges with a backend
// of pool: none when pool's shard is the one whose catalog s reads
// (catalogShard) or the generation has no OIDMaps.
func relabelFor(ctx context.Context, s *Session, pool *backend.Pool) relabeler {
	rl := relabelPool(ctx, s.gen, pool, catalogShard(s))
	if rl.gen != nil {
		rl.memo = &s.descs
	}
	return rl
}

// catalogShard is the shard whose catalog s reads: the default shard
// (pickHome), or a pinned session's own (its backend runs every
// statement it can).
func catalogShard(s *Session) int {
	if s.own != nil {
		return s.own.shard
	}
	return s.gen.DefaultShard
}

// relabelPool is relabelFor for a client that reads the catalog on
// shard catalog.
func relabelPool(ctx context.Context, g *GenerationEnv, pool *backend.Pool, catalog int) relabeler {
	if g.OIDs == nil || pool == nil || catalog < 0 || catalog >= len(g.Pools) {
		return relabeler{}
	}
	to := g.Pools[catalog]
	if pool.Shard.Name == to.Shard.Name {
		return relabeler{} // the same shard (a pinned backend's pool is a direct one)
	}
	return relabeler{ctx: ctx, gen: g, p: pair{from: pool, to: to}}
}

// rowDesc tells RowDescription msg (in place) in the catalog shard's
// numbers, and returns what its rows carry of the shard's type OIDs
// (nil: nothing; relabelvalues.go).
func (r relabeler) rowDesc(msg []byte) *rowValues {
	if r.gen == nil {
		return nil
	}
	snap := r.gen.OIDs.current(r.gen)
	if m := r.memo; m != nil && snap != nil && m.snap == snap && m.p == r.p && bytes.Equal(m.in, msg) {
		copy(msg, m.out)
		return m.vals
	}
	snap, vals := r.rowValuesOf(snap, msg)
	if !pgvalue.RowDescUserOIDs(msg) {
		return vals
	}
	covered := snap.covers(r.p, msg)
	if !covered {
		snap = r.gen.OIDs.learn(r.ctx, r.gen, r.p, msg)
		covered = snap.covers(r.p, msg)
	}
	m := r.memo
	if !covered {
		m = nil // told in part: told again (learned again) next time
	}
	if m != nil {
		m.snap, m.p, m.in, m.vals = snap, r.p, append(m.in[:0], msg...), vals
	}
	pgvalue.EditRowDesc(msg, func(t uint32, a uint16, o uint32) (uint32, uint16, uint32) {
		t, a = snap.relabelColumn(r.p, t, a)
		return t, a, snap.relabelType(r.p, o)
	})
	if m != nil {
		m.out = append(m.out[:0], msg...)
	}
	return vals
}

// paramDesc tells ParameterDescription msg (in place) in the catalog
// shard's numbers.
func (r relabeler) paramDesc(msg []byte) {
	if r.gen == nil || !pgvalue.ParamDescUserOIDs(msg) {
		return
	}
	snap := r.gen.OIDs.current(r.gen)
	if !snap.covers(r.p, msg) {
		snap = r.gen.OIDs.learn(r.ctx, r.gen, r.p, msg)
	}
	pgvalue.EditParamDesc(msg, func(_ uint32, _ uint16, o uint32) (uint32, uint16, uint32) {
		return 0, 0, snap.relabelType(r.p, o)
	})
}

// parseTypes tells the parameter types of the Parse messages among buf
// (what a backend is sent) in place, from the catalog shard's numbers
// into the shard's. A type the shard has not is left as it is (the
// shard then says so).
func (r relabeler) parseTypes(buf []byte) {
	if r.gen == nil {
		return
	}
	for msg := range pgwire.Msgs(buf) {
		if msg[0] != 'P' {
			continue
		}
		at, n := parseTypesAt(msg)
		var user []uint32
		for k := range n {
			if o := binary.BigEndian.Uint32(msg[at+4*k:]); o >= pgvalue.FirstUserOID {
				user = append(user, o)
			}
		}
		if snap := r.backSnap(user); snap != nil {
			for k := range n {
				j := at + 4*k
				binary.BigEndian.PutUint32(msg[j:], snap.tellBack(r.p, binary.BigEndian.Uint32(msg[j:])))
			}
		}
	}
}

// paramTypes returns oids (a Parse's parameter types) told in the
// shard's numbers: oids itself when nothing changes, else a copy.
func (r relabeler) paramTypes(oids []uint32) []uint32 {
	if r.gen == nil {
		return oids
	}
	var user []uint32
	for _, o := range oids {
		if o >= pgvalue.FirstUserOID {
			user = append(user, o)
		}
	}
	snap := r.backSnap(user)
	if snap == nil {
		return oids
	}
	out := make([]uint32, len(oids))
	for i, o := range oids {
		out[i] = snap.tellBack(r.p, o)
	}
	return out
}

// backSnap is the snapshot that knows how p.from numbers the catalog
// shard's user types oids, learned if need be (nil: none to tell, or
// none known).
func (r relabeler) backSnap(oids []uint32) *oidSnap {
	if len(oids) == 0 {
		return nil
	}
	snap := r.gen.OIDs.current(r.gen)
	if len(snap.missingBack(r.p, oids)) > 0 {
		snap = r.gen.OIDs.learnBack(r.ctx, r.gen, r.p, oids)
	}
	return snap
}

// tellBack is p.from's number of the catalog shard's type o (o itself
// when not learned, or when p.from has no such type: the shard says so).
func (snap *oidSnap) tellBack(p pair, o uint32) uint32 {
	if d := snap.back[oidKey{p, o}]; d != 0 {
		return d
	}
	return o
}

// parseTypesAt returns where the parameter types of Parse msg begin and
// how many there are (0 when msg is malformed).
func parseTypesAt(msg []byte) (int, int) {
	i := pgwire.HeaderLen
	for range 2 { // the statement's name, its text
		z := bytes.IndexByte(msg[i:], 0)
		if z < 0 {
			return 0, 0
		}
		i += z + 1
	}
	if len(msg)-i < 2 {
		return 0, 0
	}
	n := int(binary.BigEndian.Uint16(msg[i:]))
	if len(msg)-(i+2) < 4*n {
		return 0, 0
	}
	return i + 2, n
}

// missingBack returns the catalog shard's types among oids that snap
// does not know p.from's number of.
func (snap *oidSnap) missingBack(p pair, oids []uint32) []uint32 {
	var out []uint32
	for _, o := range oids {
		if snap != nil {
			if _, ok := snap.back[oidKey{p, o}]; ok {
				continue
			}
		}
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

// describedMsgs tells a Describe's messages (ParameterDescription,
// RowDescription) in place.
func (r relabeler) describedMsgs(msgs []byte) {
	if r.gen == nil {
		return
	}
	for msg := range pgwire.Msgs(msgs) {
		switch msg[0] {
		case 'T':
			r.rowDesc(msg)
		case 't':
			r.paramDesc(msg)
		}
	}
}

// relabelColumn is the catalog shard's (table, attnum) of p.from's column
// (t, a): as it is when not learned (a failed lookup) or the session's
// own temporary table, (0, 0) when the catalog shard has no such table
// or column.
func (snap *oidSnap) relabelColumn(p pair, t uint32, a uint16) (uint32, uint16) {
	if t < pgvalue.FirstUserOID || snap == nil {
		return t, a
	}
	r, ok := snap.rels[oidKey{p, t}]
	switch {
	case !ok || r.keep:
		return t, a
	case r.oid == 0:
		return 0, 0
	case int16(a) <= 0:
		return r.oid, a // a system column: numbered alike everywhere
	case int(a) < len(r.cols) && r.cols[a] != 0 && r.cols[a] != noColumn:
		return r.oid, r.cols[a]
	}
	return 0, 0
}

// relabelType is the catalog shard's OID of p.from's type o (as it is when
// not learned or not there).
func (snap *oidSnap) relabelType(p pair, o uint32) uint32 {
	if o < pgvalue.FirstUserOID || snap == nil {
		return o
	}
	if d := snap.types[oidKey{p, o}].to; d != 0 {
		return d
	}
	return o
}

// covers reports whether snap knows every user object that description
// msg (a RowDescription or a ParameterDescription) of p.from names.
func (snap *oidSnap) covers(p pair, msg []byte) bool {
	if snap == nil {
		return false
	}
	rels, types := snap.missing(p, msg)
	return len(rels) == 0 && len(types) == 0
}

// missing returns the user objects description msg of p.from names that
// snap does not know (nil snap: all of them).
func (snap *oidSnap) missing(p pair, msg []byte) (rels, types []uint32) {
	note := func(t uint32, a uint16, o uint32) (uint32, uint16, uint32) {
		if t >= pgvalue.FirstUserOID {
			if r, ok := snap.relsOf(p, t); (!ok || r.unknownColumn(a)) && !slices.Contains(rels, t) {
				rels = append(rels, t)
			}
		}
		if o >= pgvalue.FirstUserOID {
			if !snap.knows(p, o) && !slices.Contains(types, o) {
				types = append(types, o)
			}
		}
		return t, a, o
	}
	if len(msg) > 0 && msg[0] == 't' {
		pgvalue.EditParamDesc(msg, note)
	} else {
		pgvalue.EditRowDesc(msg, note)
	}
	return rels, types
}

// unknownColumn reports whether column a of the relation was not there
// when it was read.
func (r relOIDs) unknownColumn(a uint16) bool {
	return r.oid != 0 && int16(a) > 0 && (int(a) >= len(r.cols) || r.cols[a] == 0)
}

func (snap *oidSnap) relsOf(p pair, t uint32) (relOIDs, bool) {
	if snap == nil {
		return relOIDs{}, false
	}
	r, ok := snap.rels[oidKey{p, t}]
	return r, ok
}

// knows reports whether snap has learned p.from's type o.
func (snap *oidSnap) knows(p pair, o uint32) bool {
	_, ok := snap.typeOf(p, o)
	return ok
}

func (snap *oidSnap) typeOf(p pair, o uint32) (typeOIDs, bool) {
	if snap == nil {
		return typeOIDs{}, false
	}
	t, ok := snap.types[oidKey{p, o}]
	return t, ok
}

// current is the snapshot of this schema epoch (nil: none yet, or a
// schema change since).
func (m *OIDMaps) current(g *GenerationEnv) *oidSnap {
	snap := m.snap.Load()
	if snap == nil || snap.epoch != g.StmtEpoch.Load() {
		return nil
	}
	return snap
}

// learn looks up what description msg of p.from names and the current
// snapshot does not know, publishes the snapshot with it and returns it.
// A lookup that fails (a shard down, or slower than oidLookupTimeout) is
// logged and publishes nothing: the description goes out as the shard
// wrote it.
func (m *OIDMaps) learn(ctx context.Context, g *GenerationEnv, p pair, msg []byte) *oidSnap {
	return m.lookup(ctx, g, p, func(snap *oidSnap) oidAsk {
		rels, types := snap.missing(p, msg)
		return oidAsk{rels: rels, types: types}
	})
}

// learnBack is learn for the catalog shard's types oids as p.from numbers
// them.
func (m *OIDMaps) learnBack(ctx context.Context, g *GenerationEnv, p pair, oids []uint32) *oidSnap {
	return m.lookup(ctx, g, p, func(snap *oidSnap) oidAsk {
		return oidAsk{back: snap.missingBack(p, oids)}
	})
}

// oidAsk is what one lookup asks: p.from's relations and types, the
// catalog shard's types (back).
type oidAsk struct{ rels, types, back []uint32 }

// lookup asks what ask (given the current snapshot) says the snapshot
// lacks, under the lock (one lookup at a time: the second finds the
// first's answer), and publishes the snapshot with the answer.
func (m *OIDMaps) lookup(ctx context.Context, g *GenerationEnv, p pair, ask func(*oidSnap) oidAsk) *oidSnap {
	m.mu.Lock()
	defer m.mu.Unlock()
	epoch := g.StmtEpoch.Load()
	snap := m.current(g)
	q := ask(snap)
	if len(q.rels) == 0 && len(q.types) == 0 && len(q.back) == 0 {
		return snap
	}
	if time.Now().Before(m.retryAt[p]) {
		return snap
	}
	ctx, cancel := context.WithTimeout(ctx, oidLookupTimeout)
	defer cancel()
	found, err := lookupOIDs(ctx, g, p, q.rels, q.types)
	if err == nil && len(q.back) > 0 {
		found.back, err = lookupBack(ctx, g, p, q.back)
	}
	if err != nil {
		if m.retryAt == nil {
			m.retryAt = map[pair]time.Time{}
		}
		m.retryAt[p] = time.Now().Add(oidRetryAfter)
		g.Log.Warn("cannot tell a shard's column descriptions in the OIDs of the shard whose catalog clients read; they go to clients as the shard wrote them",
			"shard", p.from.Shard.Name, "err", err)
		return snap
	}
	next := &oidSnap{epoch: epoch, rels: map[oidKey]relOIDs{}, types: map[oidKey]typeOIDs{}, back: map[oidKey]uint32{}}
	if snap != nil {
		maps.Copy(next.rels, snap.rels)
		maps.Copy(next.types, snap.types)
		maps.Copy(next.back, snap.back)
	}
	for oid, r := range found.rels {
		next.rels[oidKey{p, oid}] = r
	}
	for oid, t := range found.types {
		next.types[oidKey{p, oid}] = t
	}
	for oid, d := range found.back {
		next.back[oidKey{p, oid}] = d
	}
	m.snap.Store(next)
	return next
}

// oidsFound is what one lookup learned: by the shard's OID (back: by
// the catalog shard's).
type oidsFound struct {
	rels  map[uint32]relOIDs
	types map[uint32]typeOIDs // every type asked (to 0, shape plain: one the shard has not)
	back  map[uint32]uint32
}

// qualName is an object's schema and name.
type qualName struct{ schema, name string }

// lookupOIDs reads the names of p.from's relations rels (with their
// columns) and types there, then their OIDs (and attnums) on the catalog
// shard p.to. Every OID asked gets an entry: one the shard does not have
// (dropped since) or the catalog shard lacks maps to 0.
func lookupOIDs(ctx context.Context, g *GenerationEnv, p pair, rels, types []uint32) (oidsFound, error) {
	found := oidsFound{rels: map[uint32]relOIDs{}, types: map[uint32]typeOIDs{}}
	res, err := catalogRead(ctx, g, p.from, shardRelsSQL(rels), shardTypesSQL(types))
	if err != nil {
		return found, err
	}
	relName := map[uint32]qualName{}
	relCols := map[uint32]map[string]uint16{} // the shard's attnum by column name
	for _, row := range res[0].Rows {
		oid, name, temp := rowOID(row[0]), qualName{string(row[1]), string(row[2])}, string(row[3]) == "t"
		if temp {
			found.rels[oid] = relOIDs{keep: true}
			continue
		}
		relName[oid] = name
		noteColumn(relCols, oid, row[4], row[5])
	}
	typeName := map[uint32]qualName{}
	shapes := map[uint32]typeShape{}
	for _, row := range res[1].Rows {
		oid := rowOID(row[0])
		shapes[oid] = shapeOf(row[4:])
		if string(row[3]) == "t" {
			continue // a temporary table's row type: left as it is
		}
		typeName[oid] = qualName{string(row[1]), string(row[2])}
	}
	var defRels, defTypes []qualName
	for _, n := range relName {
		defRels = append(defRels, n)
	}
	for _, n := range typeName {
		defTypes = append(defTypes, n)
	}
	dres, err := catalogRead(ctx, g, p.to, defaultRelsSQL(defRels), defaultTypesSQL(defTypes))
	if err != nil {
		return found, err
	}
	defRel := map[qualName]uint32{}
	defCols := map[qualName]map[string]uint16{}
	for _, row := range dres[0].Rows {
		n := qualName{string(row[0]), string(row[1])}
		defRel[n] = rowOID(row[2])
		noteColumn(defCols, n, row[3], row[4])
	}
	defType := map[qualName]uint32{}
	for _, row := range dres[1].Rows {
		defType[qualName{string(row[0]), string(row[1])}] = rowOID(row[2])
	}
	for _, oid := range rels {
		if _, ok := found.rels[oid]; ok {
			continue // temporary
		}
		n, ok := relName[oid]
		d := defRel[n]
		if !ok || d == 0 {
			found.rels[oid] = relOIDs{}
			continue
		}
		r := relOIDs{oid: d}
		for col, a := range relCols[oid] {
			if int(a) >= len(r.cols) {
				r.cols = append(r.cols, make([]uint16, int(a)+1-len(r.cols))...)
			}
			r.cols[a] = noColumn
			if d := defCols[n][col]; d != 0 {
				r.cols[a] = d
			}
		}
		found.rels[oid] = r
	}
	for _, oid := range types {
		found.types[oid] = typeOIDs{to: defType[typeName[oid]], shape: shapes[oid]} // to 0: a name it lacks, or none
	}
	return found, nil
}

// lookupBack reads the names of the catalog shard's types oids there,
// then their OIDs on p.from (0: it has no such type).
func lookupBack(ctx context.Context, g *GenerationEnv, p pair, oids []uint32) (map[uint32]uint32, error) {
	back := map[uint32]uint32{}
	res, err := catalogRead(ctx, g, p.to, shardTypesSQL(oids), "")
	if err != nil {
		return nil, err
	}
	name := map[uint32]qualName{}
	var names []qualName
	for _, row := range res[0].Rows {
		if string(row[3]) != "t" {
			name[rowOID(row[0])] = qualName{string(row[1]), string(row[2])}
			names = append(names, name[rowOID(row[0])])
		}
	}
	there := map[qualName]uint32{}
	if len(names) > 0 {
		sres, err := catalogRead(ctx, g, p.from, defaultTypesSQL(names), "")
		if err != nil {
			return nil, err
		}
		for _, row := range sres[0].Rows {
			there[qualName{string(row[0]), string(row[1])}] = rowOID(row[2])
		}
	}
	for _, oid := range oids {
		back[oid] = there[name[oid]]
	}
	return back, nil
}

// catalogRead runs the two catalog queries on pool's shard ("" skips
// one: an empty answer), on a connection straight to its Postgres that
// is none of the pools' slots, made for them and closed after: a lookup
// runs while the session holds a connection of the shard, perhaps with
// every other slot of the pool (and of its PgBouncer's) held by sessions
// doing the same, so it never waits for one.
func catalogRead(ctx context.Context, g *GenerationEnv, pool *backend.Pool, q1, q2 string) ([2]backend.SimpleResult, error) {
	var out [2]backend.SimpleResult
	var qs []string
	for _, q := range []string{q1, q2} {
		if q != "" {
			qs = append(qs, q)
		}
	}
	if len(qs) == 0 {
		return out, nil
	}
	direct := pool
	if pool.ViaPooler && g.Ops != nil {
		for i, p := range g.Pools {
			if p == pool {
				direct = g.Ops.DirectPool(i)
			}
		}
	}
	bc, err := backend.OpenOutside(ctx, direct)
	if err != nil {
		return out, err
	}
	res, err := bc.RunSimple(ctx, oidLookupTimeout, qs...)
	bc.Close()
	if err != nil {
		return out, err
	}
	k := 0
	for i, q := range []string{q1, q2} {
		if q == "" {
			continue
		}
		r := res[k]
		k++
		if r.ErrRaw != nil {
			return out, fmt.Errorf("reading the catalog of shard %q: %v", pool.Shard.Name, pgwire.DecodeError(r.ErrRaw))
		}
		out[i] = r
	}
	return out, nil
}

// The catalog reads. A relation's columns come with it (a LEFT JOIN: a
// relation without columns still answers); temporary objects (a
// session's pg_temp_N, pg_toast_temp_N) are marked: they are the
// session's own, never another shard's.
const (
	tempSchema  = `n.nspname ~ '^pg_(toast_)?temp_'`
	relCols     = ` LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped`
	relFrom     = ` FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace`
	typeFrom    = ` FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace`
	oidArrayEnd = `}'::pg_catalog.oid[])`
)

func shardRelsSQL(oids []uint32) string {
	if len(oids) == 0 {
		return ""
	}
	return "SELECT c.oid, n.nspname, c.relname, " + tempSchema + ", a.attnum, a.attname" + relFrom + relCols +
		" WHERE c.oid = ANY ('{" + joinOIDs(oids) + oidArrayEnd
}

func shardTypesSQL(oids []uint32) string {
	if len(oids) == 0 {
		return ""
	}
	return "SELECT t.oid, n.nspname, t.typname, " + tempSchema + ", " + typeShapeCols + typeFrom +
		" WHERE t.oid = ANY ('{" + joinOIDs(oids) + oidArrayEnd
}

func defaultRelsSQL(names []qualName) string {
	if len(names) == 0 {
		return ""
	}
	return "SELECT n.nspname, c.relname, c.oid, a.attnum, a.attname" + relFrom + relCols +
		" WHERE (n.nspname, c.relname) IN (" + namesValues(names) + ")"
}

func defaultTypesSQL(names []qualName) string {
	if len(names) == 0 {
		return ""
	}
	return "SELECT n.nspname, t.typname, t.oid" + typeFrom +
		" WHERE (n.nspname, t.typname) IN (" + namesValues(names) + ")"
}

func joinOIDs(oids []uint32) string {
	var b []byte
	for i, o := range oids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(o), 10)
	}
	return string(b)
}

// namesValues is a VALUES list of names' (schema, name) literals.
func namesValues(names []qualName) string {
	b := []byte("VALUES ")
	for i, n := range names {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '(')
		b = appendLiteral(b, n.schema)
		b = append(b, "::pg_catalog.name, "...)
		b = appendLiteral(b, n.name)
		b = append(b, "::pg_catalog.name)"...)
	}
	return string(b)
}

// noteColumn records relation k's column attname at attnum (both NULL:
// the relation has no column, it is still recorded) in cols.
func noteColumn[K comparable](cols map[K]map[string]uint16, k K, attnum, attname []byte) {
	if cols[k] == nil {
		cols[k] = map[string]uint16{}
	}
	if attnum != nil {
		cols[k][string(attname)] = uint16(rowOID(attnum))
	}
}

// rowOID reads a text OID or attnum (0 when it is not one).
func rowOID(v []byte) uint32 {
	n, err := strconv.ParseUint(string(v), 10, 32)
	if err != nil {
		return 0
	}
	return uint32(n)
}
