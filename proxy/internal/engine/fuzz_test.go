package engine

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgshard/pgshard/proxy/internal/pgwire"
	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// FuzzBindRouting: Bind parameters decoded by the proxy and routed by the
// analyzer: never a panic, and an int8 key in text or binary format goes
// to the shard that owns its bucket (the same function Postgres computes).
func FuzzBindRouting(f *testing.F) {
	m, err := shardmap.Even(64, []shardmap.Shard{
		{Name: "a", Ordinal: 0, DSN: "postgres://x@127.0.0.1:1/d"},
		{Name: "b", Ordinal: 1, DSN: "postgres://x@127.0.0.1:2/d"},
		{Name: "c", Ordinal: 2, DSN: "postgres://x@127.0.0.1:3/d"},
	})
	if err != nil {
		f.Fatal(err)
	}
	schema := route.DefaultSchema()
	schema.Tables = append(schema.Tables, route.TableKey{Table: "accounts", Column: "aid", Type: route.KeyInt8, Position: 1})
	an, err := route.New(m, schema, route.Options{})
	if err != nil {
		f.Fatal(err)
	}
	st, err := an.Analyze("SELECT abalance FROM accounts WHERE aid = $1")
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("12345"), false)
	f.Add(binary.BigEndian.AppendUint64(nil, 1<<40), true)
	f.Add([]byte("-9223372036854775808"), false)
	f.Add([]byte(" 7"), false)
	f.Fuzz(func(t *testing.T, param []byte, binaryFmt bool) {
		fc := int16(0)
		if binaryFmt {
			fc = 1
		}
		msg := pgwire.AppendBindText(nil, "", "", [][]byte{param})
		if binaryFmt {
			var sp int
			msg, sp = pgwire.BeginMsg(nil, 'B')
			msg = append(msg, 0, 0, 0, 1, 0, 1, 0, 1) // portal "", stmt "", 1 format (binary), 1 param
			msg = pgwire.AppendU32(msg, uint32(len(param)))
			msg = append(msg, param...)
			msg = append(msg, 0, 0)
			msg = pgwire.FinishMsg(msg, sp)
		}
		var bv pgwire.BindView
		if err := bv.Decode(msg); err != nil {
			t.Fatalf("a well-formed Bind was rejected: %v", err)
		}
		d := an.Route(st, bv.Params, bv.Formats, []uint32{0})
		if binaryFmt && (len(bv.Formats) != 1 || bv.Formats[0] != fc) || !binaryFmt && len(bv.Formats) != 0 {
			t.Fatalf("formats %v (binary %v)", bv.Formats, binaryFmt)
		}
		var want int64
		ok := false
		if binaryFmt && len(param) == 8 {
			// int8 in binary; the statement's parameter type is inferred
			// by the server, so the analyzer may also refuse binary
			// values whose type it cannot know: only a DestShard is checked.
			want, ok = int64(binary.BigEndian.Uint64(param)), true
		} else if !binaryFmt {
			if v, err := strconv.ParseInt(string(param), 10, 64); err == nil && string(param) == strconv.FormatInt(v, 10) {
				want, ok = v, true
			}
		}
		if !ok {
			return // other texts: any decision but a panic is fine
		}
		if d.Kind != route.DestShard {
			if binaryFmt {
				return
			}
			t.Fatalf("int8 key %d routed %v (%s)", want, d.Kind, d.Why())
		}
		if got, exp := d.Shard, m.ShardIndexForBucket(m.BucketInt8(want)); got != exp {
			t.Fatalf("int8 key %d routed to shard %d, its bucket belongs to %d", want, got, exp)
		}
	})
}

// FuzzSettingsReplay: the statement that repeats set_config's settings
// on a transaction's other backends (settingsReplay), written from any
// Bind values, reads back as the same settings: the same names and
// exactly the values the client bound (or NULL), whatever quotes and
// backslashes they hold, or it is refused.
func FuzzSettingsReplay(f *testing.F) {
	an := oneShardTable(f)
	st, err := an.Analyze("SELECT set_config('statement_timeout', $1::text, true), pg_catalog.set_config('my.x''y', $2, 'on'), set_config('search_path', 'a, \"b c\"', true)")
	if err != nil || len(st.Settings) != 3 {
		f.Fatalf("%v: %+v", err, st)
	}
	f.Add([]byte("5s"), []byte("it's"), false, uint32(0))
	f.Add([]byte(`\'\\`), []byte(nil), true, uint32(25))
	f.Add([]byte("E'x"), []byte("ä\n"), false, uint32(1043))
	f.Add([]byte("5000"), []byte("x"), true, uint32(23))
	f.Fuzz(func(t *testing.T, v1, v2 []byte, null2 bool, oid uint32) {
		if null2 {
			v2 = nil
		} else if v2 == nil {
			v2 = []byte{}
		}
		if v1 == nil {
			v1 = []byte{}
		}
		var bv pgwire.BindView
		if err := bv.Decode(pgwire.AppendBindText(nil, "", "", [][]byte{v1, v2})); err != nil {
			t.Fatal(err)
		}
		replay, e := settingsReplay(st, &bv, []uint32{oid, 0})
		switch {
		case e != nil:
			if oid == 0 || oid == pgtype.TextOID || oid == pgtype.VarcharOID || oid == pgtype.UnknownOID {
				t.Fatalf("refused with a text parameter: %v", e)
			}
			return
		case replay == "":
			if bytes.IndexByte(v1, 0) < 0 && bytes.IndexByte(v2, 0) < 0 {
				t.Fatal("no replay for values without a NUL byte")
			}
			return
		}
		if !utf8.Valid(v1) || !utf8.Valid(v2) {
			return // the server refuses such values itself
		}
		got, err := an.Analyze(replay)
		if err != nil || len(got.Settings) != 3 {
			t.Fatalf("replay %q: %v, settings %+v", replay, err, got)
		}
		want := []route.Setting{{Name: "statement_timeout", Value: string(v1)}, {Name: "my.x'y", Value: string(v2), Null: v2 == nil}, {Name: "search_path", Value: `a, "b c"`}}
		for i, w := range want {
			if g := got.Settings[i]; g.Name != w.Name || g.Null != w.Null || (!w.Null && g.Value != w.Value) || g.Param != 0 {
				t.Fatalf("replay %q: setting %d is %+v, want %+v", replay, i, g, w)
			}
		}
	})
}
