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
// What is not told: a value that is an OID (SELECT tableoid, a regclass
// cast to oid) and the element type inside a binary array or record. A
// pinned session reads the catalog on its own backend's shard: what it
// sends and gets is left as it is.

// OIDMaps is one generation's translation of each shard's OIDs of user
// objects (tables, their columns, types) into the default shard's,
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
	retryAt map[*backend.Pool]time.Time
}

// oidSnap is what OIDMaps knows, never changed once published.
type oidSnap struct {
	// epoch is the StmtEpoch before the lookups that made it: after a
	// schema change the snapshot is not used.
	epoch uint64
	rels  map[oidKey]relOIDs
	types map[oidKey]uint32 // the default shard's OID (0: none there)
	// back are the default shard's types as a shard numbers them (keyed
	// by the shard's pool and the default shard's OID; 0: none there):
	// the parameter types a client's Parse names.
	back map[oidKey]uint32
}

// oidKey is one shard's (its pool's) OID.
type oidKey struct {
	pool *backend.Pool
	oid  uint32
}

// relOIDs is a shard's relation as the default shard numbers it.
type relOIDs struct {
	// oid is the default shard's (0: it has no such relation).
	oid uint32
	// keep: a temporary relation, the session's own: left as it is.
	keep bool
	// cols[attnum] is the default shard's attnum of the shard's column
	// attnum: noColumn when the default shard has no such column, 0 when
	// the shard had none when it was read (a column added since without
	// the proxy: the relation is read again).
	cols []uint16
}

// noColumn marks a column the default shard does not have (relOIDs.cols).
const noColumn = 0xFFFF

// oidLookupTimeout bounds a lookup (its two connections and reads): a
// description waits at most this long, then goes out as the shard wrote
// it.
const oidLookupTimeout = 5 * time.Second

// oidRetryAfter is how long a pool whose lookup failed is not asked again.
const oidRetryAfter = time.Second

// relabeler tells one shard's descriptions in the default shard's
// numbers for one session (its zero value leaves them alone).
type relabeler struct {
	ctx  context.Context
	gen  *GenerationEnv
	pool *backend.Pool
	// memo, when set, is the session's last description told: a
	// session's descriptions mostly repeat (one statement run again and
	// again), and one the same as the last is told as it was.
	memo *descMemo
}

// descMemo is a RowDescription of pool as it came (in) and as it was
// told (out) by snapshot snap.
type descMemo struct {
	snap    *oidSnap
	pool    *backend.Pool
	in, out []byte
}

// relabelFor returns the relabeler of descriptions bc's shard answers to
// s: none for the default shard, a pinned session or a generation
// without OIDMaps.
func relabelFor(ctx context.Context, s *Session, pool *backend.Pool) relabeler {
	if s.own != nil {
		return relabeler{}
	}
	rl := relabelPool(ctx, s.gen, pool)
	if rl.gen != nil {
		rl.memo = &s.descs
	}
	return rl
}

// relabelPool is relabelFor for a session that reads the catalog on the
// default shard.
func relabelPool(ctx context.Context, g *GenerationEnv, pool *backend.Pool) relabeler {
	if g.OIDs == nil || pool == nil || pool == g.Pools[g.DefaultShard] {
		return relabeler{}
	}
	return relabeler{ctx: ctx, gen: g, pool: pool}
}

// rowDesc tells RowDescription msg (in place) in the default shard's
// numbers.
func (r relabeler) rowDesc(msg []byte) {
	if r.gen == nil {
		return
	}
	snap := r.gen.OIDs.current(r.gen)
	if m := r.memo; m != nil && snap != nil && m.snap == snap && m.pool == r.pool && bytes.Equal(m.in, msg) {
		copy(msg, m.out)
		return
	}
	if !pgvalue.RowDescUserOIDs(msg) {
		return
	}
	covered := snap.covers(r.pool, msg)
	if !covered {
		snap = r.gen.OIDs.learn(r.ctx, r.gen, r.pool, msg)
		covered = snap.covers(r.pool, msg)
	}
	m := r.memo
	if !covered {
		m = nil // told in part: told again (learned again) next time
	}
	if m != nil {
		m.snap, m.pool, m.in = snap, r.pool, append(m.in[:0], msg...)
	}
	pgvalue.EditRowDesc(msg, func(t uint32, a uint16, o uint32) (uint32, uint16, uint32) {
		t, a = snap.relabelColumn(r.pool, t, a)
		return t, a, snap.relabelType(r.pool, o)
	})
	if m != nil {
		m.out = append(m.out[:0], msg...)
	}
}

// paramDesc tells ParameterDescription msg (in place) in the default
// shard's numbers.
func (r relabeler) paramDesc(msg []byte) {
	if r.gen == nil || !pgvalue.ParamDescUserOIDs(msg) {
		return
	}
	snap := r.gen.OIDs.current(r.gen)
	if !snap.covers(r.pool, msg) {
		snap = r.gen.OIDs.learn(r.ctx, r.gen, r.pool, msg)
	}
	pgvalue.EditParamDesc(msg, func(_ uint32, _ uint16, o uint32) (uint32, uint16, uint32) {
		return 0, 0, snap.relabelType(r.pool, o)
	})
}

// parseTypes tells the parameter types of the Parse messages among buf
// (what a backend is sent) in place, from the default shard's numbers
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
		for k := range n {
			if binary.BigEndian.Uint32(msg[at+4*k:]) >= pgvalue.FirstUserOID {
				r.backTypes(msg[at : at+4*n])
				break
			}
		}
	}
}

// paramTypes returns oids (a Parse's parameter types) told in the
// shard's numbers: oids itself when nothing changes, else a copy.
func (r relabeler) paramTypes(oids []uint32) []uint32 {
	if r.gen == nil || !slices.ContainsFunc(oids, func(o uint32) bool { return o >= pgvalue.FirstUserOID }) {
		return oids
	}
	b := make([]byte, 4*len(oids))
	for i, o := range oids {
		binary.BigEndian.PutUint32(b[4*i:], o)
	}
	r.backTypes(b)
	out := make([]uint32, len(oids))
	for i := range out {
		out[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	return out
}

// backTypes tells the big-endian type OIDs of b in place.
func (r relabeler) backTypes(b []byte) {
	var oids []uint32
	for i := 0; i+4 <= len(b); i += 4 {
		if o := binary.BigEndian.Uint32(b[i:]); o >= pgvalue.FirstUserOID {
			oids = append(oids, o)
		}
	}
	snap := r.gen.OIDs.current(r.gen)
	if len(snap.missingBack(r.pool, oids)) > 0 {
		snap = r.gen.OIDs.learnBack(r.ctx, r.gen, r.pool, oids)
	}
	if snap == nil {
		return
	}
	for i := 0; i+4 <= len(b); i += 4 {
		if d := snap.back[oidKey{r.pool, binary.BigEndian.Uint32(b[i:])}]; d != 0 {
			binary.BigEndian.PutUint32(b[i:], d)
		}
	}
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

// missingBack returns the default shard's types among oids that snap
// does not know pool's number of.
func (snap *oidSnap) missingBack(pool *backend.Pool, oids []uint32) []uint32 {
	var out []uint32
	for _, o := range oids {
		if snap != nil {
			if _, ok := snap.back[oidKey{pool, o}]; ok {
				continue
			}
		}
		if !has(out, o) {
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
	for i := 0; i+5 <= len(msgs); {
		n := 1 + int(uint32(msgs[i+1])<<24|uint32(msgs[i+2])<<16|uint32(msgs[i+3])<<8|uint32(msgs[i+4]))
		if n < 5 || i+n > len(msgs) {
			return
		}
		switch msgs[i] {
		case 'T':
			r.rowDesc(msgs[i : i+n])
		case 't':
			r.paramDesc(msgs[i : i+n])
		}
		i += n
	}
}

// relabelColumn is the default shard's (table, attnum) of pool's column
// (t, a): as it is when not learned (a failed lookup) or the session's
// own temporary table, (0, 0) when the default shard has no such table
// or column.
func (snap *oidSnap) relabelColumn(pool *backend.Pool, t uint32, a uint16) (uint32, uint16) {
	if t < pgvalue.FirstUserOID || snap == nil {
		return t, a
	}
	r, ok := snap.rels[oidKey{pool, t}]
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

// relabelType is the default shard's OID of pool's type o (as it is when
// not learned or not there).
func (snap *oidSnap) relabelType(pool *backend.Pool, o uint32) uint32 {
	if o < pgvalue.FirstUserOID || snap == nil {
		return o
	}
	if d, ok := snap.types[oidKey{pool, o}]; ok && d != 0 {
		return d
	}
	return o
}

// covers reports whether snap knows every user object that description
// msg (a RowDescription or a ParameterDescription) of pool names.
func (snap *oidSnap) covers(pool *backend.Pool, msg []byte) bool {
	if snap == nil {
		return false
	}
	rels, types := snap.missing(pool, msg)
	return len(rels) == 0 && len(types) == 0
}

// missing returns the user objects description msg of pool names that
// snap does not know (nil snap: all of them).
func (snap *oidSnap) missing(pool *backend.Pool, msg []byte) (rels, types []uint32) {
	note := func(t uint32, a uint16, o uint32) (uint32, uint16, uint32) {
		if t >= pgvalue.FirstUserOID {
			if r, ok := snap.relsOf(pool, t); (!ok || r.unknownColumn(a)) && !has(rels, t) {
				rels = append(rels, t)
			}
		}
		if o >= pgvalue.FirstUserOID {
			if _, ok := snap.typeOf(pool, o); !ok && !has(types, o) {
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

func (snap *oidSnap) relsOf(pool *backend.Pool, t uint32) (relOIDs, bool) {
	if snap == nil {
		return relOIDs{}, false
	}
	r, ok := snap.rels[oidKey{pool, t}]
	return r, ok
}

func (snap *oidSnap) typeOf(pool *backend.Pool, o uint32) (uint32, bool) {
	if snap == nil {
		return 0, false
	}
	d, ok := snap.types[oidKey{pool, o}]
	return d, ok
}

func has(xs []uint32, x uint32) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
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

// learn looks up what description msg of pool names and the current
// snapshot does not know, publishes the snapshot with it and returns it.
// A lookup that fails (a shard down, or slower than oidLookupTimeout) is
// logged and publishes nothing: the description goes out as the shard
// wrote it.
func (m *OIDMaps) learn(ctx context.Context, g *GenerationEnv, pool *backend.Pool, msg []byte) *oidSnap {
	return m.lookup(ctx, g, pool, func(snap *oidSnap) oidAsk {
		rels, types := snap.missing(pool, msg)
		return oidAsk{rels: rels, types: types}
	})
}

// learnBack is learn for the default shard's types oids as pool numbers
// them.
func (m *OIDMaps) learnBack(ctx context.Context, g *GenerationEnv, pool *backend.Pool, oids []uint32) *oidSnap {
	return m.lookup(ctx, g, pool, func(snap *oidSnap) oidAsk {
		return oidAsk{back: snap.missingBack(pool, oids)}
	})
}

// oidAsk is what one lookup asks: pool's relations and types, the
// default shard's types (back).
type oidAsk struct{ rels, types, back []uint32 }

// lookup asks what ask (given the current snapshot) says the snapshot
// lacks, under the lock (one lookup at a time: the second finds the
// first's answer), and publishes the snapshot with the answer.
func (m *OIDMaps) lookup(ctx context.Context, g *GenerationEnv, pool *backend.Pool, ask func(*oidSnap) oidAsk) *oidSnap {
	m.mu.Lock()
	defer m.mu.Unlock()
	epoch := g.StmtEpoch.Load()
	snap := m.current(g)
	q := ask(snap)
	if len(q.rels) == 0 && len(q.types) == 0 && len(q.back) == 0 {
		return snap
	}
	if time.Now().Before(m.retryAt[pool]) {
		return snap
	}
	ctx, cancel := context.WithTimeout(ctx, oidLookupTimeout)
	defer cancel()
	found, err := lookupOIDs(ctx, g, pool, q.rels, q.types)
	if err == nil && len(q.back) > 0 {
		found.back, err = lookupBack(ctx, g, pool, q.back)
	}
	if err != nil {
		if m.retryAt == nil {
			m.retryAt = map[*backend.Pool]time.Time{}
		}
		m.retryAt[pool] = time.Now().Add(oidRetryAfter)
		g.Log.Warn("cannot tell a shard's column descriptions in the default shard's OIDs; they go to clients as the shard wrote them",
			"shard", pool.Shard.Name, "err", err)
		return snap
	}
	next := &oidSnap{epoch: epoch, rels: map[oidKey]relOIDs{}, types: map[oidKey]uint32{}, back: map[oidKey]uint32{}}
	if snap != nil {
		next.epoch = snap.epoch
		maps.Copy(next.rels, snap.rels)
		maps.Copy(next.types, snap.types)
		maps.Copy(next.back, snap.back)
	}
	for oid, r := range found.rels {
		next.rels[oidKey{pool, oid}] = r
	}
	for oid, d := range found.types {
		next.types[oidKey{pool, oid}] = d
	}
	for oid, d := range found.back {
		next.back[oidKey{pool, oid}] = d
	}
	m.snap.Store(next)
	return next
}

// oidsFound is what one lookup learned: by the shard's OID (back: by
// the default shard's).
type oidsFound struct {
	rels  map[uint32]relOIDs
	types map[uint32]uint32
	back  map[uint32]uint32
}

// qualName is an object's schema and name.
type qualName struct{ schema, name string }

// lookupOIDs reads the names of pool's relations rels (with their
// columns) and types on pool's shard, then their OIDs (and attnums) on
// the default shard. Every OID asked gets an entry: one the shard does
// not have (dropped since) or the default shard lacks maps to 0.
func lookupOIDs(ctx context.Context, g *GenerationEnv, pool *backend.Pool, rels, types []uint32) (oidsFound, error) {
	found := oidsFound{rels: map[uint32]relOIDs{}, types: map[uint32]uint32{}}
	res, err := catalogRead(ctx, g, pool, shardRelsSQL(rels), shardTypesSQL(types))
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
		if relCols[oid] == nil {
			relCols[oid] = map[string]uint16{}
		}
		if row[4] != nil {
			relCols[oid][string(row[5])] = uint16(rowOID(row[4]))
		}
	}
	typeName := map[uint32]qualName{}
	for _, row := range res[1].Rows {
		oid := rowOID(row[0])
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
	def := g.Pools[g.DefaultShard]
	dres, err := catalogRead(ctx, g, def, defaultRelsSQL(defRels), defaultTypesSQL(defTypes))
	if err != nil {
		return found, err
	}
	defRel := map[qualName]uint32{}
	defCols := map[qualName]map[string]uint16{}
	for _, row := range dres[0].Rows {
		n := qualName{string(row[0]), string(row[1])}
		defRel[n] = rowOID(row[2])
		if defCols[n] == nil {
			defCols[n] = map[string]uint16{}
		}
		if row[3] != nil {
			defCols[n][string(row[4])] = uint16(rowOID(row[3]))
		}
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
		n, ok := typeName[oid]
		switch {
		case ok:
			found.types[oid] = defType[n]
		default:
			found.types[oid] = 0
		}
	}
	return found, nil
}

// lookupBack reads the names of the default shard's types oids there,
// then their OIDs on pool's shard (0: it has no such type).
func lookupBack(ctx context.Context, g *GenerationEnv, pool *backend.Pool, oids []uint32) (map[uint32]uint32, error) {
	back := map[uint32]uint32{}
	res, err := catalogRead(ctx, g, g.Pools[g.DefaultShard], shardTypesSQL(oids), "")
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
		sres, err := catalogRead(ctx, g, pool, defaultTypesSQL(names), "")
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
// session's own, never the default shard's.
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
	return "SELECT t.oid, n.nspname, t.typname, " + tempSchema + typeFrom +
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

// rowOID reads a text OID or attnum (0 when it is not one).
func rowOID(v []byte) uint32 {
	n, err := strconv.ParseUint(string(v), 10, 32)
	if err != nil {
		return 0
	}
	return uint32(n)
}
