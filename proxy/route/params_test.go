package route_test

import (
	"encoding/binary"
	"strconv"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/proxy/route"
)

func be(bits int, v int64) []byte {
	b := make([]byte, bits/8)
	switch bits {
	case 16:
		binary.BigEndian.PutUint16(b, uint16(v))
	case 32:
		binary.BigEndian.PutUint32(b, uint32(v))
	default:
		binary.BigEndian.PutUint64(b, uint64(v))
	}
	return b
}

var uuidBytes = []byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}

// TestParamDecode: Bind values in text and binary format, with declared
// types and casts, become the key Postgres would compare — or the error it
// would raise.
func TestParamDecode(t *testing.T) {
	const dashed = "01234567-89ab-cdef-0123-456789abcdef"
	cases := []struct {
		name    string
		schema  string
		sql     string
		param   []byte
		format  int16
		oid     uint32
		wantKey string // the key Route reports; "" with wantState/wantKind
		state   string // expected refusal SQLSTATE
		kind    route.DestKind
	}{
		{name: "text, text format", sql: "SELECT 1 FROM executions WHERE id = $1", param: []byte("abc"), wantKey: "abc"},
		{name: "text, binary format", sql: "SELECT 1 FROM executions WHERE id = $1", param: []byte("abc"), format: 1, wantKey: "abc"},
		{name: "text with blanks kept", sql: "SELECT 1 FROM executions WHERE id = $1", param: []byte(" a b "), wantKey: " a b "},
		{name: "utf-8 text", sql: "SELECT 1 FROM executions WHERE id = $1", param: []byte("ключ"), format: 1, wantKey: "ключ"},
		{name: "empty text", sql: "SELECT 1 FROM executions WHERE id = $1", param: []byte{}, wantKey: "", kind: route.DestShard},
		{name: "declared text", sql: "SELECT 1 FROM executions WHERE id = $1", param: []byte("x"), oid: 25, format: 1, wantKey: "x"},
		{name: "declared varchar", sql: "SELECT 1 FROM executions WHERE id = $1", param: []byte("x"), oid: 1043, wantKey: "x"},
		{name: "declared unknown", sql: "SELECT 1 FROM executions WHERE id = $1", param: []byte("x"), oid: 705, format: 1, wantKey: "x"},
		{name: "declared bpchar drops trailing blanks", sql: "SELECT 1 FROM executions WHERE id = $1", param: []byte("x  "), oid: 1042, format: 1, wantKey: "x"},
		{name: "declared name", sql: "SELECT 1 FROM executions WHERE id = $1", param: []byte("x"), oid: 19, wantKey: "x"},
		{name: "declared name too long is truncated by the server", sql: "SELECT 1 FROM executions WHERE id = $1",
			param: []byte(strings.Repeat("n", 64)), oid: 19, kind: route.DestAll},
		{name: "declared int8 binary, cast to text", sql: "SELECT 1 FROM executions WHERE id = $1::text", param: be(64, -7), oid: 20, format: 1, wantKey: "-7"},
		{name: "declared int4 text, cast to text", sql: "SELECT 1 FROM executions WHERE id = $1::text", param: []byte(" 7 "), oid: 23, wantKey: "7"},
		{name: "declared uuid binary, cast to text", sql: "SELECT 1 FROM executions WHERE id = $1::text", param: uuidBytes, oid: 2950, format: 1, wantKey: dashed},
		{name: "declared uuid text upper case", sql: "SELECT 1 FROM executions WHERE id = $1::text",
			param: []byte("0123-4567-89AB-CDEF-0123-4567-89AB-CDEF"), oid: 2950, wantKey: dashed},
		{name: "uuid cast, braces", sql: "SELECT 1 FROM executions WHERE id = $1::uuid::text", param: []byte("{01234567-89ab-cdef-0123-456789abcdef}"), wantKey: dashed},
		{name: "uuid bad text", sql: "SELECT 1 FROM executions WHERE id = $1::uuid::text", param: []byte("0123"), state: "22P02"},
		{name: "uuid bad hyphen", sql: "SELECT 1 FROM executions WHERE id = $1::uuid::text", param: []byte("012-34567-89ab-cdef-0123-456789abcdef"), state: "22P02"},
		{name: "uuid binary short", sql: "SELECT 1 FROM executions WHERE id = $1::text", param: uuidBytes[:15], oid: 2950, format: 1, state: "22P03"},
		{name: "declared float8 is not decoded", sql: "SELECT 1 FROM executions WHERE id = $1::text", param: be(64, 0), oid: 701, format: 1, kind: route.DestAll},
		{name: "declared json is not a key", sql: "SELECT 1 FROM executions WHERE id = $1::text", param: []byte(`"x"`), oid: 114, kind: route.DestAll},
		{name: "NULL", sql: "SELECT 1 FROM executions WHERE id = $1", param: nil, kind: route.DestAny},
		{name: "NULL binary", sql: "SELECT 1 FROM executions WHERE id = $1", param: nil, format: 1, kind: route.DestAny},
		{name: "unsupported format code", sql: "SELECT 1 FROM executions WHERE id = $1", param: []byte("x"), format: 2, state: "22023"},

		{name: "int8 text", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: []byte("42"), wantKey: "42"},
		{name: "int8 text blanks and sign", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: []byte(" \t+42\n"), wantKey: "42"},
		{name: "int8 text minus zero", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: []byte("-0"), wantKey: "0"},
		{name: "int8 text min", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: []byte("-9223372036854775808"), wantKey: "-9223372036854775808"},
		{name: "int8 text overflow", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: []byte("9223372036854775808"), state: "22003"},
		{name: "int8 text garbage", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: []byte("4 2"), state: "22P02"},
		{name: "int8 text hex is not PG 15 input", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: []byte("0x10"), state: "22P02"},
		{name: "int8 text empty", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: []byte(""), state: "22P02"},
		{name: "int8 binary", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: be(64, 1<<40), format: 1, wantKey: strconv.FormatInt(1<<40, 10)},
		{name: "int8 binary short", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: be(32, 1), format: 1, state: "22P03"},
		{name: "int8 binary long", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: append(be(64, 1), 0), format: 1, state: "22P03"},
		{name: "int8 binary empty", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: []byte{}, format: 1, state: "22P03"},
		{name: "declared int4 binary", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: be(32, -5), oid: 23, format: 1, wantKey: "-5"},
		{name: "declared int4 binary wrong length", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: be(64, 5), oid: 23, format: 1, state: "22P03"},
		{name: "declared int2 binary", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: be(16, 300), oid: 21, format: 1, wantKey: "300"},
		{name: "declared int2 text out of range", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: []byte("70000"), oid: 21, state: "22003"},
		{name: "cast int4 types the param", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1::int4", param: be(32, 9), format: 1, wantKey: "9"},
		{name: "cast int2 range", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1::int2", param: []byte("40000"), state: "22003"},
		{name: "cast chain text to int8", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1::text::int8", param: []byte("12"), wantKey: "12"},
		{name: "declared int8 converted by int2 cast out of range", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1::int2", param: be(64, 1<<20), oid: 20, format: 1, state: "22003"},
		{name: "text-typed param against an int8 key is no key", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1::text", param: []byte("x"), kind: route.DestAll},
		{name: "declared text against int8 key holding a number", schema: "int8", sql: "SELECT 1 FROM accounts WHERE k = $1", param: []byte("42"), oid: 25, wantKey: "42"},
		{name: "seq binary int4 declared", sql: "DELETE FROM outbox WHERE seq = $1", param: be(32, 1025), oid: 23, format: 1, wantKey: "1025"},
		{name: "seq zero matches nothing", sql: "DELETE FROM outbox WHERE seq = $1", param: []byte("0"), kind: route.DestAny},
		{name: "seq negative matches nothing", sql: "DELETE FROM outbox WHERE seq = $1", param: be(64, -3), format: 1, kind: route.DestAny},
		{name: "inserted seq zero refused", sql: "INSERT INTO outbox (seq, target_id, event) VALUES ($1, 't', 'e')", param: []byte("0"), state: "0A000"},
		{name: "inserted seq of an ordinal without a shard refused", sql: "INSERT INTO outbox (seq, target_id, event) VALUES ($1, 't', 'e')", param: []byte("9"), state: "0A000"},
	}
	routers := map[string]*route.Table{"": newRouter(t, "default"), "int8": newRouter(t, "int8")}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := routers[c.schema]
			st, err := r.Analyze(c.sql)
			if err != nil {
				t.Fatal(err)
			}
			var oids []uint32
			if c.oid != 0 {
				oids = []uint32{c.oid}
			}
			d := r.Route(st, [][]byte{c.param}, []int16{c.format}, oids)
			switch {
			case c.state != "":
				if d.Kind != route.DestRefuse || d.Refusal == nil || d.Refusal.SQLState != c.state {
					t.Fatalf("want refusal %s, got %+v", c.state, d)
				}
			case c.wantKey != "" || c.kind == route.DestShard:
				if d.Kind != route.DestShard || d.KeyText() != c.wantKey {
					t.Fatalf("want key %q, got %+v", c.wantKey, d)
				}
				m := r.Map()
				want := -1
				if c.schema == "int8" || strings.Contains(c.sql, "seq") {
					v, _ := strconv.ParseInt(c.wantKey, 10, 64)
					if strings.Contains(c.sql, "seq") {
						want = int((v - 1) % 1024)
					} else {
						want = m.ShardIndexForBucket(m.BucketInt8(v))
					}
				} else {
					want = m.ShardIndexForBucket(m.Bucket(c.wantKey))
				}
				if d.Shard != want {
					t.Fatalf("key %q on shard %d, want %d", d.KeyText(), d.Shard, want)
				}
			default:
				if d.Kind != c.kind {
					t.Fatalf("want %s, got %+v", c.kind, d)
				}
			}
		})
	}
}

// TestParamCounts: Bind messages that do not fit the statement are
// refused as Postgres refuses them.
func TestParamCounts(t *testing.T) {
	r := newRouter(t, "default")
	st, err := r.Analyze("SELECT 1 FROM executions WHERE id = $2")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		params  [][]byte
		formats []int16
		state   string
	}{
		{[][]byte{[]byte("a")}, nil, "08P01"},
		{[][]byte{[]byte("a"), []byte("b")}, []int16{0, 0, 0}, "08P01"},
		{nil, nil, "42P02"},
		{[][]byte{[]byte("a"), []byte("b")}, []int16{0, 1}, ""},
		{[][]byte{[]byte("a"), []byte("b")}, []int16{1}, ""},
	} {
		d := r.Route(st, c.params, c.formats, nil)
		if c.state == "" {
			if d.Kind != route.DestShard || d.KeyText() != "b" {
				t.Errorf("%d params, formats %v: %+v", len(c.params), c.formats, d)
			}
			continue
		}
		if d.Kind != route.DestRefuse || d.Refusal.SQLState != c.state {
			t.Errorf("%d params, formats %v: want %s, got %+v", len(c.params), c.formats, c.state, d)
		}
	}
}

// TestRouteKeyedAllocatesNothing: routing a cached keyed point statement by
// a Bind parameter (text or binary, text or integer key) allocates
// nothing: the reason is built only when read (Dest.Why), a text key
// aliases the parameter, an integer key is carried as the number. The
// reason read afterwards is the one the decision would have had eagerly.
func TestRouteKeyedAllocatesNothing(t *testing.T) {
	for _, c := range []struct {
		name, schema, sql string
		param             []byte
		format            int16
		why               string
		key               string
	}{
		{"text key, text param", "default", pointSelect, []byte("abc"), 0,
			"executions.id = $1 → 'abc' → bucket ", "abc"},
		{"text key, binary param", "default", pointSelect, []byte("abc"), 1,
			"executions.id = $1 → 'abc' → bucket ", "abc"},
		{"int8 key, text param", "int8", "SELECT 1 FROM accounts WHERE k = $1", []byte("42"), 0,
			"accounts.k = $1 → 42 → bucket ", "42"},
		{"int8 key, binary param", "int8", "SELECT 1 FROM accounts WHERE k = $1", be(64, 42), 1,
			"accounts.k = $1 → 42 → bucket ", "42"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRouter(t, c.schema)
			st, err := r.Analyze(c.sql)
			if err != nil {
				t.Fatal(err)
			}
			params, formats := [][]byte{c.param}, []int16{c.format}
			var d route.Dest
			if n := testing.AllocsPerRun(100, func() { d = r.Route(st, params, formats, nil) }); n != 0 {
				t.Errorf("Route allocates %v times per call, want 0", n)
			}
			if d.Kind != route.DestShard || d.KeyText() != c.key || !strings.HasPrefix(d.Why(), c.why) ||
				!strings.HasSuffix(d.Why(), " → "+r.Map().Shards[d.Shard].Name) {
				t.Errorf("routed %v key %q: %s", d.Kind, d.KeyText(), d.Why())
			}
		})
	}
}
