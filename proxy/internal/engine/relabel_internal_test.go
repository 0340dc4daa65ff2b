package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgshard/pgshard/proxy/internal/backend"
	"github.com/pgshard/pgshard/proxy/internal/pgvalue"
	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/shardmap"
)

// relabelFixture is a generation of two shards whose OIDMaps know shard
// 1's table 16500 (the default shard's 17000, attnums 1 → 1, 2 → 3) and
// type 16600 (17100); the pair is shard 1 told to the default shard.
func relabelFixture() (*GenerationEnv, pair) {
	def, other := &backend.Pool{Shard: shardmap.Shard{Name: "s0"}}, &backend.Pool{Shard: shardmap.Shard{Name: "s1"}}
	g := &GenerationEnv{Pools: []*backend.Pool{def, other}, StmtEpoch: &atomic.Uint64{}, OIDs: &OIDMaps{}}
	p := pair{from: other, to: def}
	g.OIDs.snap.Store(&oidSnap{
		rels:  map[oidKey]relOIDs{{p, 16500}: {oid: 17000, cols: []uint16{0, 1, 3, noColumn}}},
		types: map[oidKey]typeOIDs{{p, 16600}: {to: 17100}},
	})
	return g, p
}

func TestRelabelKnown(t *testing.T) {
	g, other := relabelFixture()
	msg := pgvalue.AppendRowDesc(nil, []pgvalue.Field{
		{Name: "a", Table: 16500, Attnum: 1, OID: pgtype.Int8OID, Typlen: 8, Typmod: -1},
		{Name: "b", Table: 16500, Attnum: 2, OID: 16600, Typlen: 4, Typmod: -1},
		{Name: "c", Table: 16500, Attnum: 3, OID: pgtype.TextOID, Typlen: -1, Typmod: -1},
		{Name: "ctid", Table: 16500, Attnum: 0xFFFF, OID: pgtype.TIDOID, Typlen: 6, Typmod: -1},
	})
	orig := append([]byte(nil), msg...)
	relabeler{gen: g, p: other}.rowDesc(msg)
	// A session's memo tells the same description the same way, the
	// second time from the memo.
	memo := &descMemo{}
	for range 2 {
		again := append([]byte(nil), orig...)
		relabeler{gen: g, p: other, memo: memo}.rowDesc(again)
		if string(again) != string(msg) {
			t.Fatalf("told with a memo as %x, without as %x", again, msg)
		}
	}
	if memo.snap == nil {
		t.Error("the memo was not kept")
	}
	fs, err := pgvalue.ParseRowDesc(msg)
	if err != nil {
		t.Fatal(err)
	}
	want := [][3]uint32{{17000, 1, pgtype.Int8OID}, {17000, 3, 17100}, {0, 0, pgtype.TextOID}, {17000, 0xFFFF, pgtype.TIDOID}}
	for i, f := range fs {
		if got := [3]uint32{f.Table, uint32(f.Attnum), f.OID}; got != want[i] {
			t.Errorf("column %s: %v, want %v", f.Name, got, want[i])
		}
	}
	// A Describe's answer: both its messages told.
	pd, sp := pgwire.BeginMsg(nil, 't')
	pd = pgwire.AppendU16(pd, 2)
	pd = pgwire.AppendU32(pgwire.AppendU32(pd, 16600), pgtype.Int4OID)
	msgs := append(pgwire.FinishMsg(pd, sp), orig...)
	relabeler{gen: g, p: other}.describedMsgs(msgs)
	if got := msgs[pgwire.HeaderLen+2 : pgwire.HeaderLen+10]; !bytes.Equal(got, pgwire.AppendU32(pgwire.AppendU32(nil, 17100), pgtype.Int4OID)) {
		t.Errorf("a Describe's parameter types told as %x", got)
	}
	if !bytes.Equal(msgs[len(pd):], msg) {
		t.Errorf("a Describe's RowDescription told as %x, want %x", msgs[len(pd):], msg)
	}
	// The default shard's own descriptions, and a pinned session's, are
	// left alone; so is everything after a schema change (the snapshot
	// is of an older epoch) until it is learned again.
	if rl := relabelPool(nil, g, g.Pools[0], 0); rl.gen != nil {
		t.Error("the default shard's descriptions would be relabeled")
	}
	if rl := relabelPool(nil, g, g.Pools[1], 0); rl.p != other {
		t.Errorf("shard 1's descriptions to a client of shard 0's catalog: %+v", rl.p)
	}
	if rl := relabelPool(nil, g, g.Pools[0], 1); rl.p != (pair{g.Pools[0], g.Pools[1]}) {
		t.Errorf("shard 0's descriptions to a session pinned on shard 1: %+v", rl.p)
	}
	if snap := g.OIDs.current(g); snap == nil {
		t.Fatal("no current snapshot")
	}
	g.StmtEpoch.Add(1)
	if snap := g.OIDs.current(g); snap != nil {
		t.Error("a snapshot of an older schema epoch is current")
	}
}

// BenchmarkRelabelRowDesc is the cost the hot path pays per
// RowDescription of another shard than the default one (a keyed point
// SELECT of 4 columns whose OIDs are known): the session's memo holds
// the same description (a statement run again), or none (a fan-out).
func BenchmarkRelabelRowDesc(b *testing.B) {
	b.Run("memo", func(b *testing.B) { benchRelabel(b, true) })
	b.Run("none", func(b *testing.B) { benchRelabel(b, false) })
}

func benchRelabel(b *testing.B, memo bool) {
	g, other := relabelFixture()
	msg := pgvalue.AppendRowDesc(nil, []pgvalue.Field{
		{Name: "aid", Table: 16500, Attnum: 1, OID: pgtype.Int8OID, Typlen: 8, Typmod: -1},
		{Name: "abalance", Table: 16500, Attnum: 2, OID: pgtype.Int4OID, Typlen: 4, Typmod: -1},
		{Name: "x", OID: pgtype.Int4OID, Typlen: 4, Typmod: -1},
		{Name: "y", OID: pgtype.TextOID, Typlen: -1, Typmod: -1},
	})
	orig := append([]byte(nil), msg...)
	rl := relabeler{gen: g, p: other}
	if memo {
		rl.memo = &descMemo{}
	}
	b.ReportAllocs()
	for b.Loop() {
		copy(msg, orig)
		rl.rowDesc(msg)
	}
}

// TestRelabelLookupFails: a lookup that cannot reach a shard (nothing
// listens at its address) leaves the description as the shard wrote it,
// logs why, and is not tried again before oidRetryAfter — a description
// then costs no second wait. Nothing here depends on how long it takes.
func TestRelabelLookupFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var logs bytes.Buffer
	env := &backend.Env{ConnectTimeout: 2 * time.Second, Log: slog.New(slog.NewTextHandler(&logs, nil)),
		BackendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"shard", "kind"}), StmtEpoch: &atomic.Uint64{}}
	var pools []*backend.Pool
	for i := range 2 {
		p, err := backend.NewPool(env, shardmap.Shard{Name: fmt.Sprintf("s%d", i), DSN: "postgres://u@" + addr + "/db?sslmode=disable"}, false)
		if err != nil {
			t.Fatal(err)
		}
		pools = append(pools, p)
	}
	g := &GenerationEnv{Pools: pools, StmtEpoch: &atomic.Uint64{}, OIDs: &OIDMaps{}, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	msg := pgvalue.AppendRowDesc(nil, []pgvalue.Field{{Name: "a", Table: 16500, Attnum: 1, OID: pgtype.Int8OID, Typlen: 8, Typmod: -1}})
	orig := append([]byte(nil), msg...)
	rl := relabelPool(context.Background(), g, pools[1], 0)
	if rl.gen == nil {
		t.Fatal("shard 1's descriptions to a client of shard 0's catalog are not told")
	}
	before := time.Now()
	rl.rowDesc(msg)
	if !bytes.Equal(msg, orig) {
		t.Fatalf("a description whose lookup failed was changed: %x, was %x", msg, orig)
	}
	if !strings.Contains(logs.String(), "cannot tell a shard's column descriptions") {
		t.Errorf("the failed lookup was not logged: %s", logs.String())
	}
	// (Compared with the time before the call, not read again after it:
	// a test stalled by a loaded machine reads the same.)
	if at := g.OIDs.retryAt[rl.p]; at.Sub(before) < oidRetryAfter {
		t.Fatalf("the failed lookup may be tried again %v after it, want at least %v", at.Sub(before), oidRetryAfter)
	}
	// While the retry time is ahead (pushed far ahead here, so that how
	// long this test takes does not matter), no lookup is tried.
	at := time.Now().Add(time.Hour)
	g.OIDs.retryAt[rl.p] = at
	rl.rowDesc(msg)
	if g.OIDs.retryAt[rl.p] != at || strings.Count(logs.String(), "cannot tell") != 1 {
		t.Errorf("a lookup was tried again before its retry time")
	}
	if got := rl.paramTypes([]uint32{16600, pgtype.Int4OID}); got[0] != 16600 || got[1] != pgtype.Int4OID {
		t.Errorf("parameter types whose lookup failed were changed: %v", got)
	}
}

// TestRelabelDataRow: the type OIDs inside a shard's binary values of a
// described row (an array of a user enum, a record holding one and an
// array of it) are told in the default shard's numbers; a column in text
// format, a value that is not what its type says and a type that cannot
// be learned are left as they are.
func TestRelabelDataRow(t *testing.T) {
	g, other := relabelFixture()
	snap := g.OIDs.snap.Load()
	snap.types[oidKey{other, 16601}] = typeOIDs{to: 17101, shape: typeShape{kind: shapeArray, inner: 16600}}
	snap.types[oidKey{other, 16602}] = typeOIDs{shape: typeShape{kind: shapeDomain, inner: 16601}}
	g.OIDs.retryAt = map[pair]time.Time{other: time.Now().Add(time.Hour)} // no lookup
	desc := pgvalue.AppendRowDesc(nil, []pgvalue.Field{
		{Name: "a", OID: pgtype.Int8OID, Typlen: 8, Typmod: -1, Format: 1},
		{Name: "b", OID: 16601, Typlen: -1, Typmod: -1, Format: 1},
		{Name: "c", OID: 16601, Typlen: -1, Typmod: -1},
		{Name: "d", OID: pgvalue.RecordOID, Typlen: -1, Typmod: -1, Format: 1},
		{Name: "e", OID: 16602, Typlen: -1, Typmod: -1, Format: 1},
	})
	vals := relabeler{gen: g, p: other}.rowDesc(desc)
	if vals == nil || len(vals.cols) != 3 || vals.cols[0] != (valueCol{1, 16601}) || vals.cols[1] != (valueCol{3, pgvalue.RecordOID}) || vals.cols[2] != (valueCol{4, 16602}) {
		t.Fatalf("the columns to walk: %+v", vals)
	}
	u32 := func(b []byte, vs ...uint32) []byte {
		for _, v := range vs {
			b = binary.BigEndian.AppendUint32(b, v)
		}
		return b
	}
	array := func(elem uint32) []byte { return append(u32(nil, 1, 0, elem, 1, 1, 4), "calm"...) }
	field := func(typ uint32, v []byte) []byte { return append(u32(nil, typ, uint32(len(v))), v...) }
	record := slices.Concat(u32(nil, 3), field(16600, []byte("busy")), field(16601, array(16600)), field(16900, []byte("?")))
	row := pgwire.AppendDataRow(nil, [][]byte{u32(nil, 0, 7), array(16600), array(16600), record, array(16600)})
	relabeler{gen: g, p: other}.dataRow(vals, row)
	got, err := pgwire.DataRowCols(nil, row)
	if err != nil {
		t.Fatal(err)
	}
	wantRecord := slices.Concat(u32(nil, 3), field(17100, []byte("busy")), field(17101, array(17100)), field(16900, []byte("?")))
	for i, want := range [][]byte{u32(nil, 0, 7), array(17100), array(16600), wantRecord, array(17100)} {
		if !bytes.Equal(got[i], want) {
			t.Errorf("column %d: %x, want %x", i, got[i], want)
		}
	}
	// Not an array: left alone.
	bad := pgwire.AppendDataRow(nil, [][]byte{nil, []byte("calm"), nil, nil, nil})
	before := append([]byte(nil), bad...)
	relabeler{gen: g, p: other}.dataRow(vals, bad)
	if !bytes.Equal(bad, before) {
		t.Errorf("a value that is not an array was changed: %x", bad)
	}
	// A schema change after the description: the rows' types are learned
	// again (here the lookup may not run: nothing is known, nothing told).
	g.StmtEpoch.Add(1)
	again := pgwire.AppendDataRow(nil, [][]byte{u32(nil, 0, 7), array(16600), array(16600), record, array(16600)})
	before = append([]byte(nil), again...)
	relabeler{gen: g, p: other}.dataRow(vals, again)
	if !bytes.Equal(again, before) {
		t.Errorf("told by an older epoch's snapshot: %x", again)
	}
}

// TestRelabelPortalRows: a portal run without its description is walked
// by what its Bind says (the statement's columns as the client was told
// them, told back into the shard's numbers; the result formats): only
// its binary columns of a type that may hold OIDs, and not one whose
// type the shard's number is not known of.
func TestRelabelPortalRows(t *testing.T) {
	g, other := relabelFixture()
	snap := g.OIDs.snap.Load()
	snap.types[oidKey{other, 16601}] = typeOIDs{to: 17101, shape: typeShape{kind: shapeArray, inner: 16600}}
	snap.back = map[oidKey]uint32{{other, 17101}: 16601, {other, 17999}: 0}
	g.OIDs.retryAt = map[pair]time.Time{other: time.Now().Add(time.Hour)} // no lookup
	vs := &vstmt{desc: []pgvalue.Field{{Name: "a", OID: pgtype.Int8OID}, {Name: "b", OID: 17101}, {Name: "c", OID: 17999}, {Name: "d", OID: pgvalue.RecordOID}}}
	for _, fmts := range [][]int16{nil, {0}, {1, 0, 0, 0}} {
		if pr := bindRows(vs, fmts); pr != nil {
			t.Errorf("formats %v: rows %+v, want none to walk", fmts, pr)
		}
	}
	if pr := bindRows(&vstmt{}, []int16{1}); pr != nil {
		t.Errorf("a statement never described: rows %+v", pr)
	}
	for _, fmts := range [][]int16{{1}, {0, 1, 1, 1}} {
		pr := bindRows(vs, fmts)
		if pr == nil {
			t.Fatalf("formats %v: no rows to walk", fmts)
		}
		v := relabeler{gen: g, p: other}.portalValues(pr)
		if v == nil || len(v.cols) != 2 || v.cols[0] != (valueCol{1, 16601}) || v.cols[1] != (valueCol{3, pgvalue.RecordOID}) {
			t.Fatalf("formats %v: columns to walk %+v, want b as shard 1's 16601 and d", fmts, v)
		}
	}
}
