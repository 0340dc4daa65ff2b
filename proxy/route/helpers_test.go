package route_test

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/proxy/route"
	"github.com/pgshard/pgshard/shardmap"
)

// testMap is the map of the unit tests: 4096 buckets, shards s0..s3 with
// ordinals 0..3.
func testMap(t testing.TB) *shardmap.Map {
	t.Helper()
	var shards []shardmap.Shard
	for i := 0; i < 4; i++ {
		shards = append(shards, shardmap.Shard{Name: fmt.Sprintf("s%d", i), Ordinal: i, DSN: fmt.Sprintf("postgres://127.0.0.1:1/s%d", i)})
	}
	m, err := shardmap.Even(4096, shards)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// testSchema returns a sharding schema by name: "default" is the store's
// plus a global table; "int8" has integer keys.
func testSchema(t testing.TB, name string) route.Schema {
	t.Helper()
	switch name {
	case "", "default":
		s := route.DefaultSchema()
		s.Global = []string{"definitions"}
		return s
	case "int8":
		return route.Schema{
			Tables: []route.TableKey{
				{Table: "accounts", Column: "k", Type: route.KeyInt8, Position: 1},
				{Table: "entries", Column: "account_id", Type: route.KeyInt8},
			},
			Functions: []route.FuncKey{{Function: "account_touch", Arg: 0, Type: route.KeyInt8}},
			HintType:  route.KeyInt8,
		}
	}
	t.Fatalf("unknown test schema %q", name)
	return route.Schema{}
}

func newRouter(t testing.TB, schema string) *route.Table {
	t.Helper()
	r, err := route.New(testMap(t), testSchema(t, schema), route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// encodeParams turns corpus parameters into Bind values and format codes:
// nil is NULL; "bin:KIND:VALUE" is sent in binary (i2, i4, i8, uuid, text,
// hex); anything else is text.
func encodeParams(ps []*string) ([][]byte, []int16, error) {
	if ps == nil {
		return [][]byte{}, nil, nil
	}
	var out [][]byte
	var formats []int16
	binary := false
	for _, p := range ps {
		if p == nil {
			out = append(out, nil)
			formats = append(formats, 0)
			continue
		}
		v, f, err := encodeParam(*p)
		if err != nil {
			return nil, nil, err
		}
		binary = binary || f == 1
		out = append(out, v)
		formats = append(formats, f)
	}
	if !binary {
		formats = nil
	}
	return out, formats, nil
}

func encodeParam(s string) ([]byte, int16, error) {
	rest, ok := strings.CutPrefix(s, "bin:")
	if !ok {
		return []byte(s), 0, nil
	}
	kind, val, _ := strings.Cut(rest, ":")
	switch kind {
	case "i2", "i4", "i8":
		bits := map[string]int{"i2": 16, "i4": 32, "i8": 64}[kind]
		n, err := strconv.ParseInt(val, 10, bits)
		if err != nil {
			return nil, 0, err
		}
		b := make([]byte, bits/8)
		switch bits {
		case 16:
			binary.BigEndian.PutUint16(b, uint16(n))
		case 32:
			binary.BigEndian.PutUint32(b, uint32(n))
		default:
			binary.BigEndian.PutUint64(b, uint64(n))
		}
		return b, 1, nil
	case "uuid", "hex":
		b, err := hex.DecodeString(strings.ReplaceAll(val, "-", ""))
		return b, 1, err
	case "text":
		return []byte(val), 1, nil
	}
	return nil, 0, fmt.Errorf("unknown binary parameter kind %q", kind)
}

// describe renders a decision for golden files, one field per line.
func describe(m *shardmap.Map, st *route.Statement, ex route.Explanation) string {
	var b strings.Builder
	d := ex.Dest
	ro := ""
	if st.ReadOnly {
		ro = " read-only"
	}
	fmt.Fprintf(&b, "kind:    %s%s\n", st.Kind, ro)
	switch d.Kind {
	case route.DestShard:
		fmt.Fprintf(&b, "dest:    shard %s", m.Shards[d.Shard].Name)
		if d.KeyText() != "" {
			fmt.Fprintf(&b, " (key %q, bucket %d)", d.KeyText(), d.Bucket)
		}
		b.WriteString("\n")
	default:
		fmt.Fprintf(&b, "dest:    %s\n", d.Kind)
	}
	fmt.Fprintf(&b, "reason:  %s\n", d.Why())
	if r := d.Refusal; r != nil {
		fmt.Fprintf(&b, "refusal: %s %s\n", r.SQLState, r.Message)
		if r.Hint != "" {
			fmt.Fprintf(&b, "hint:    %s\n", r.Hint)
		}
	}
	if mg := d.Merge; mg != nil {
		for _, l := range mg.Describe() {
			fmt.Fprintf(&b, "merge:   %s\n", l)
		}
	}
	for _, s := range ex.Steps {
		fmt.Fprintf(&b, "  - %s\n", s)
	}
	return b.String()
}
